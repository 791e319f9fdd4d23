//! A snapshot (what `braid show --json` reads) in the Prometheus text
//! exposition format, version 0.0.4: one family per metric name with its
//! `# HELP` and `# TYPE`, counters ending in `_total`, base units
//! (seconds, bytes, ratios 0..1), labels `interface`, `peer` (public key,
//! base64) and `path`.

use crate::uapi::{DeviceSnapshot, PathSnapshot, PeerSnapshot};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Counter,
    Gauge,
    /// A number `braid show` gained after this table was written: exported
    /// under its own name rather than dropped.
    Untyped,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Untyped => "untyped",
        }
    }
}

/// How one of `braid show`'s named numbers is exported: the metric's name,
/// its kind, the factor to base units, and its help text.
pub struct Export {
    pub show: &'static str,
    pub metric: &'static str,
    pub kind: Kind,
    pub scale: f64,
    pub help: &'static str,
}

const fn counter(show: &'static str, metric: &'static str, help: &'static str) -> Export {
    Export {
        show,
        metric,
        kind: Kind::Counter,
        scale: 1.0,
        help,
    }
}

const fn gauge(show: &'static str, metric: &'static str, scale: f64, help: &'static str) -> Export {
    Export {
        show,
        metric,
        kind: Kind::Gauge,
        scale,
        help,
    }
}

const US: f64 = 1e-6;

/// The interface's own counters (`braid show`'s `braid NAME:` lines).
pub const DEVICE: &[Export] = &[
    counter(
        "invalid_datagrams",
        "braid_invalid_datagrams_total",
        "Datagrams that were no WireGuard message of a valid size.",
    ),
    counter(
        "invalid_mac",
        "braid_invalid_mac_total",
        "Handshake messages whose MAC did not check.",
    ),
    counter(
        "handshake_rejected",
        "braid_handshake_rejected_total",
        "Handshake messages that failed to decrypt or were replays.",
    ),
    counter(
        "handshake_flood_dropped",
        "braid_handshake_flood_dropped_total",
        "Handshake messages dropped under load (cookie required, none given).",
    ),
    counter(
        "cookie_replies_sent",
        "braid_cookie_replies_sent_total",
        "Cookie replies sent under load.",
    ),
    counter(
        "handshake_rate_limited",
        "braid_handshake_rate_limited_total",
        "Handshake messages dropped by the per-source rate limit.",
    ),
    counter(
        "handshake_over_budget",
        "braid_handshake_over_budget_total",
        "Handshake messages left over a batch's handshake budget.",
    ),
    counter(
        "control_queue_full",
        "braid_control_queue_full_total",
        "Control messages dropped because their queue was full.",
    ),
    counter(
        "too_big_queue_full",
        "braid_too_big_queue_full_total",
        "Too-big answers dropped because their queue was full.",
    ),
    counter(
        "unknown_index",
        "braid_unknown_index_total",
        "Data messages for a session index nobody has.",
    ),
    counter(
        "no_route",
        "braid_no_route_total",
        "Packets from the tunnel interface that no peer's AllowedIPs take.",
    ),
    counter(
        "tun_dropped",
        "braid_tun_dropped_packets_total",
        "Packets the tunnel interface could not take or give.",
    ),
    counter(
        "udp_dropped",
        "braid_udp_dropped_packets_total",
        "Datagrams the sockets could not send.",
    ),
    gauge(
        "tun_offload",
        "braid_tun_offload_enabled",
        1.0,
        "1 when the tunnel interface has TSO/GRO offloads on.",
    ),
    gauge(
        "udp_gso",
        "braid_udp_gso_enabled",
        1.0,
        "1 when every UDP socket sends with GSO.",
    ),
    gauge(
        "udp_gro",
        "braid_udp_gro_enabled",
        1.0,
        "1 when every UDP socket receives with GRO.",
    ),
    gauge(
        "tunnel_mtu",
        "braid_tunnel_mtu_bytes",
        1.0,
        "The tunnel interface's MTU.",
    ),
    counter(
        "too_big_answered",
        "braid_too_big_answered_total",
        "ICMP too-big answers given for packets a path does not carry.",
    ),
    counter(
        "too_big_suppressed",
        "braid_too_big_suppressed_total",
        "Too-big answers left out by their rate limit.",
    ),
    gauge(
        "crypto_helpers",
        "braid_crypto_helper_threads",
        1.0,
        "Crypto helper threads per direction.",
    ),
    counter(
        "crypto_helper_parts",
        "braid_crypto_helper_parts_total",
        "Batch parts sealed or opened by crypto helpers.",
    ),
];

/// A peer's counters (`braid show`'s per-peer `braid NAME:` lines).
pub const PEER: &[Export] = &[
    counter(
        "rx_packets",
        "braid_peer_received_packets_total",
        "Data packets received from the peer.",
    ),
    counter(
        "tx_packets",
        "braid_peer_sent_packets_total",
        "Data packets sent to the peer.",
    ),
    counter(
        "handshakes_initiated",
        "braid_peer_handshakes_initiated_total",
        "Handshakes this side started.",
    ),
    counter(
        "handshakes_completed",
        "braid_peer_handshakes_completed_total",
        "Handshakes completed (sessions made).",
    ),
    counter(
        "handshake_responses_sent",
        "braid_peer_handshake_responses_sent_total",
        "Handshake responses sent.",
    ),
    counter(
        "keepalives_sent",
        "braid_peer_keepalives_sent_total",
        "Keepalives sent.",
    ),
    counter(
        "keepalives_received",
        "braid_peer_keepalives_received_total",
        "Keepalives received.",
    ),
    counter(
        "cookie_replies_received",
        "braid_peer_cookie_replies_received_total",
        "Cookie replies received (the peer is under load).",
    ),
    counter(
        "replayed",
        "braid_peer_replayed_packets_total",
        "Data packets dropped as replays.",
    ),
    counter(
        "auth_failed",
        "braid_peer_auth_failed_packets_total",
        "Data packets that failed authentication.",
    ),
    counter(
        "disallowed_source",
        "braid_peer_disallowed_source_packets_total",
        "Packets whose inner source the peer's AllowedIPs do not allow.",
    ),
    counter(
        "staged_dropped",
        "braid_peer_staged_dropped_packets_total",
        "Packets dropped while waiting for a handshake.",
    ),
    counter(
        "ext_rejected",
        "braid_peer_extension_rejected_total",
        "braid extension messages refused.",
    ),
    gauge(
        "speaks_braid",
        "braid_peer_speaks_braid",
        1.0,
        "1 when the peer is braid (extensions agreed), 0 for stock WireGuard.",
    ),
    counter(
        "accepted",
        "braid_peer_reorder_accepted_packets_total",
        "Reorder window: packets delivered in order.",
    ),
    counter(
        "under_window",
        "braid_peer_reorder_under_window_packets_total",
        "Reorder window: packets that arrived below the window (late copies, given-up gaps).",
    ),
    counter(
        "buffered",
        "braid_peer_reorder_buffered_packets_total",
        "Reorder window: packets held until their gap filled.",
    ),
    counter(
        "duplicated",
        "braid_peer_reorder_duplicated_packets_total",
        "Reorder window: second copies of held packets.",
    ),
    counter(
        "lost",
        "braid_peer_reorder_lost_packets_total",
        "Reorder window: gaps given up.",
    ),
    gauge(
        "reorder_held",
        "braid_peer_reorder_held_packets",
        1.0,
        "Reorder window: packets held now.",
    ),
    gauge(
        "reorder_hold_us",
        "braid_peer_reorder_hold_seconds",
        US,
        "Reorder window: how long a gap is held now.",
    ),
    gauge(
        "reorder_skew_us",
        "braid_peer_reorder_skew_seconds",
        US,
        "Reorder window: delay difference of the lines in use.",
    ),
    gauge(
        "reorder_lateness_us",
        "braid_peer_reorder_lateness_seconds",
        US,
        "Reorder window: lateness measured.",
    ),
    gauge(
        "repair_wait_us",
        "braid_peer_repair_wait_seconds",
        US,
        "How long a gap waits for a repair before it is asked for.",
    ),
counter(
        "gaps_by_hold",
        "braid_peer_reorder_gaps_by_hold_total",
        "Reorder window: gaps given up when their hold ran out.",
    ),
    counter(
        "gaps_by_bounds",
        "braid_peer_reorder_gaps_by_bounds_total",
        "Reorder window: gaps given up because the window was full.",
    ),
    counter(
        "gaps_by_paths",
        "braid_peer_reorder_gaps_by_paths_total",
        "Reorder window: gaps given up at once because every line that could carry them had passed them.",
    ),
    Export {
        show: "gap_wait_us",
        metric: "braid_peer_reorder_gap_wait_seconds_total",
        kind: Kind::Counter,
        scale: US,
        help: "Reorder window: time the given-up gaps were waited for, summed.",
    },
        counter(
        "repairs_asked",
        "braid_peer_repairs_asked_total",
        "Repairs of lost packets asked from the peer.",
    ),
    counter(
        "resent",
        "braid_peer_resent_packets_total",
        "Packets re-sent because the peer asked.",
    ),
    counter(
        "resend_unavailable",
        "braid_peer_resend_unavailable_total",
        "Repairs asked for that were no longer kept.",
    ),
    counter(
        "resend_congestion",
        "braid_peer_resend_congestion_total",
        "Repairs not made: congestion losses left to the inner TCP.",
    ),
    gauge(
        "rate_limit_bits",
        "braid_peer_rate_limit_bytes_per_second",
        1.0 / 8.0,
        "RateLimit, each direction.",
    ),
    counter(
        "rate_dropped_tx",
        "braid_peer_rate_dropped_sent_packets_total",
        "Packets to the peer dropped by RateLimit.",
    ),
    counter(
        "rate_dropped_rx",
        "braid_peer_rate_dropped_received_packets_total",
        "Packets from the peer dropped by RateLimit.",
    ),
    counter(
        "too_big",
        "braid_peer_too_big_packets_total",
        "Packets too big for the peer's path.",
    ),
    counter(
        "compressed_tx",
        "braid_peer_compressed_sent_packets_total",
        "Packets sent compressed.",
    ),
    counter(
        "compressed_rx",
        "braid_peer_compressed_received_packets_total",
        "Packets received compressed.",
    ),
    counter(
        "decompress_failed",
        "braid_peer_decompress_failed_total",
        "Compressed packets that did not decompress.",
    ),
];

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
