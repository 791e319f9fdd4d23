//! A snapshot (what `braid show --json` reads) in the Prometheus text
//! exposition format, version 0.0.4: one family per metric name with its
//! `# HELP` and `# TYPE`, counters ending in `_total`, base units
//! (seconds, bytes, ratios 0..1), labels `interface`, `peer` (public key,
//! base64) and `path`.

use crate::uapi::{DeviceSnapshot, PathSnapshot, PeerSnapshot};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use super::names::US;
pub use super::names::{Export, Kind, DEVICE, PEER};

struct Family {
    name: String,
    help: String,
    kind: Kind,
    samples: String,
}

/// The families of one exposition, in the order they were first met.
#[derive(Default)]
pub struct Exposition {
    families: Vec<Family>,
    /// Where each family is in `families` (a scrape of thousands of peers
    /// adds hundreds of thousands of samples).
    index: HashMap<String, usize>,
}

impl Exposition {
    /// Adds a sample of `name` with `labels` (name, value pairs).
    pub fn sample(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let at = match self.index.get(name) {
            Some(&i) => i,
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    help: help.to_string(),
                    kind,
                    samples: String::new(),
                });
                self.index.insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let out = &mut self.families[at].samples;
        out.push_str(name);
        if !labels.is_empty() {
            out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{k}=\"{}\"", escape_label(v));
            }
            out.push('}');
        }
        let _ = writeln!(out, " {}", number(value));
    }

    /// The text, `# HELP` and `# TYPE` before each family's samples.
    pub fn finish(self) -> String {
        let mut out = String::new();
        for f in self.families {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.name());
            out.push_str(&f.samples);
        }
        out
    }
}

/// A sample value: integers without a fraction, Prometheus' spellings of
/// the non-finite ones.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A name `braid show` uses but no table knows, as a metric name.
fn fallback_name(prefix: &str, show: &str) -> String {
    let clean: String = show
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{prefix}{clean}")
}

fn extras(
    exp: &mut Exposition,
    table: &[Export],
    prefix: &str,
    extra: &[(String, u64)],
    labels: &[(&str, &str)],
) {
    for (show, value) in extra {
        match table.iter().find(|e| e.show == show) {
            Some(e) => exp.sample(e.metric, e.kind, e.help, labels, *value as f64 * e.scale),
            None => {
                let help = format!("braid show's {show}.");
                exp.sample(
                    &fallback_name(prefix, show),
                    Kind::Untyped,
                    &help,
                    labels,
                    *value as f64,
                );
            }
        }
    }
}

/// The exposition of interface `name`; `now` for the handshake ages.
pub fn render(name: &str, snap: &DeviceSnapshot, now: SystemTime, exp: &mut Exposition) {
    let iface = [("interface", name)];
    let public = snap.public_key.map(|k| k.to_base64()).unwrap_or_default();
    exp.sample(
        "braid_interface_info",
        Kind::Gauge,
        "1 for each interface, with its public key.",
        &[("interface", name), ("public_key", &public)],
        1.0,
    );
    exp.sample(
        "braid_listen_port",
        Kind::Gauge,
        "The UDP port the interface listens on.",
        &iface,
        f64::from(snap.listen_port),
    );
    exp.sample(
        "braid_peers",
        Kind::Gauge,
        "Peers configured.",
        &iface,
        snap.peers.len() as f64,
    );
    extras(exp, DEVICE, "braid_", &snap.extra, &iface);
    for peer in &snap.peers {
        render_peer(name, peer, now, exp);
    }
}

fn render_peer(name: &str, peer: &PeerSnapshot, now: SystemTime, exp: &mut Exposition) {
    let key = peer.public_key.to_base64();
    let labels = [("interface", name), ("peer", key.as_str())];
    exp.sample(
        "braid_peer_info",
        Kind::Gauge,
        "1 for each peer, with its mode and the cipher of its session.",
        &[
            ("interface", name),
            ("peer", &key),
            ("mode", &peer.mode),
            ("cipher", &peer.cipher),
        ],
        1.0,
    );
    exp.sample(
        "braid_peer_received_bytes_total",
        Kind::Counter,
        "Bytes received from the peer (what wg show calls received).",
        &labels,
        peer.rx_bytes as f64,
    );
    exp.sample(
        "braid_peer_sent_bytes_total",
        Kind::Counter,
        "Bytes sent to the peer (what wg show calls sent).",
        &labels,
        peer.tx_bytes as f64,
    );
    if let Some(at) = peer.last_handshake {
        let unix = at
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        exp.sample(
            "braid_peer_last_handshake_timestamp_seconds",
            Kind::Gauge,
            "When the latest handshake with the peer completed (Unix time).",
            &labels,
            unix,
        );
        exp.sample(
            "braid_peer_handshake_age_seconds",
            Kind::Gauge,
            "Seconds since the latest handshake with the peer.",
            &labels,
            now.duration_since(at).map_or(0.0, |d| d.as_secs_f64()),
        );
    }
    extras(exp, PEER, "braid_peer_", &peer.extra, &labels);
    for path in &peer.paths {
        render_path(name, &key, path, exp);
    }
}

fn render_path(name: &str, key: &str, path: &PathSnapshot, exp: &mut Exposition) {
    let labels = [
        ("interface", name),
        ("peer", key),
        ("path", path.name.as_str()),
    ];
    let mut sample = |metric: &str, kind: Kind, help: &str, value: f64| {
        exp.sample(metric, kind, help, &labels, value);
    };
    sample(
        "braid_path_up",
        Kind::Gauge,
        "1 when the path's probes come back, 0 when it is down or not probed (stock WireGuard peer).",
        f64::from(u8::from(path.state == "up")),
    );
    let counters = [
        (
            "braid_path_received_bytes_total",
            "Bytes received on the path.",
            path.rx_bytes,
        ),
        (
            "braid_path_sent_bytes_total",
            "Bytes sent on the path.",
            path.tx_bytes,
        ),
        (
            "braid_path_received_packets_total",
            "Packets received on the path.",
            path.rx_packets,
        ),
        (
            "braid_path_sent_packets_total",
            "Packets sent on the path.",
            path.tx_packets,
        ),
        (
            "braid_path_first_arrivals_total",
            "Packets this path delivered first (before any other path's copy).",
            path.first_arrivals,
        ),
        (
            "braid_path_resent_packets_total",
            "Packets re-sent on this path because another lost them.",
            path.resent,
        ),
    ];
    for (metric, help, value) in counters {
        sample(metric, Kind::Counter, help, value as f64);
    }
    if let (Some(rtt), Some(jitter)) = (path.rtt_us, path.jitter_us) {
        sample(
            "braid_path_rtt_seconds",
            Kind::Gauge,
            "Smoothed round trip time of the path's probes.",
            rtt as f64 * US,
        );
        sample(
            "braid_path_jitter_seconds",
            Kind::Gauge,
            "Mean deviation of the round trip time.",
            jitter as f64 * US,
        );
    }
    if path.state != "unknown" {
        for (direction, loss) in [
            ("round_trip", path.loss),
            ("out", path.loss_out),
            ("in", path.loss_in),
        ] {
            exp.sample(
                "braid_path_probe_loss_ratio",
                Kind::Gauge,
                "Share of probes lost recently: round trip, towards the peer, from the peer.",
                &[
                    ("interface", name),
                    ("peer", key),
                    ("path", path.name.as_str()),
                    ("direction", direction),
                ],
                loss,
            );
        }
    }
    let mut sample = |metric: &str, help: &str, value: f64| {
        exp.sample(metric, Kind::Gauge, help, &labels, value);
    };
    if let Some(pmtu) = &path.pmtu {
        sample(
            "braid_path_mtu_bytes",
            "The tunnel MTU this path carries now (path MTU discovery).",
            pmtu.mtu as f64,
        );
    }
    if let Some(e) = &path.estimate {
        sample(
            "braid_path_estimated_rate_bytes_per_second",
            "Estimated capacity of the line towards the peer.",
            e.rate_bps as f64 / 8.0,
        );
        sample(
            "braid_path_delivered_rate_bytes_per_second",
            "What the line delivered in the latest report interval.",
            e.delivered_bps as f64 / 8.0,
        );
        sample(
            "braid_path_send_rate_bytes_per_second",
            "What this side sends on the line now.",
            e.send_bps as f64 / 8.0,
        );
        sample(
            "braid_path_send_share_ratio",
            "This line's share of what is sent to the peer.",
            e.share,
        );
        if let Some(q) = e.queue_us {
            sample(
                "braid_path_queue_delay_seconds",
                "Queue on the line: one-way delay above its minimum.",
                q as f64 * US,
            );
        }
        sample(
            "braid_path_data_loss_ratio",
            "Data lost on the line while it was not full.",
            e.data_loss,
        );
    }
}

#[cfg(test)]
mod tests;
