//! `braid show`: the same text `wg show` prints (wording, units, peer
//! order, colours), followed by braid's own counters, and a JSON form.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::uapi::{json_view, DeviceJson, DeviceSnapshot, PeerSnapshot};

// wg's terminal.h escapes.
const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";

/// Applies escapes only when colour is on, like wg's terminal_printf.
struct Paint(bool);

impl Paint {
    fn c<'a>(&self, code: &'a str) -> &'a str {
        if self.0 {
            code
        } else {
            ""
        }
    }
}

/// The text `wg show NAME` would print for this snapshot, plus braid's
/// counters as `  braid NAME: VALUE` lines.
pub fn render_text(name: &str, snap: &DeviceSnapshot, now: SystemTime, color: bool) -> String {
    let p = Paint(color);
    let (r, b) = (p.c(RESET), p.c(BOLD));
    let mut out = String::new();
    out.push_str(r);
    let _ = writeln!(out, "{g}{b}interface{r}: {g}{name}{r}", g = p.c(GREEN));
    let public = snap
        .public_key
        .or_else(|| snap.private_key.as_ref().map(|k| k.public_key()));
    if let Some(pk) = public {
        let _ = writeln!(out, "  {b}public key{r}: {pk}");
    }
    if snap.private_key.is_some() || public.is_some() {
        let _ = writeln!(out, "  {b}private key{r}: (hidden)");
    }
    if snap.listen_port != 0 {
        let _ = writeln!(out, "  {b}listening port{r}: {}", snap.listen_port);
    }
    if snap.fwmark != 0 {
        let _ = writeln!(out, "  {b}fwmark{r}: {:#x}", snap.fwmark);
    }
    extra_lines(&mut out, &p, &snap.extra);

    let mut peers: Vec<&PeerSnapshot> = snap.peers.iter().collect();
    // Most recent handshake first, peers without one last (wg's peer_cmp).
    peers.sort_by_key(|peer| std::cmp::Reverse(handshake_key(peer)));
    let now_sec = unix_secs(now);
    for peer in &peers {
        out.push('\n');
        let y = p.c(YELLOW);
        let _ = writeln!(out, "{y}{b}peer{r}: {y}{}{r}", peer.public_key);
        if peer.preshared_key.is_some() {
            let _ = writeln!(out, "  {b}preshared key{r}: (hidden)");
        }
        if let Some(ep) = peer.endpoint {
            let _ = writeln!(out, "  {b}endpoint{r}: {ep}");
        }
        let _ = write!(out, "  {b}allowed ips{r}: ");
        if peer.allowed_ips.is_empty() {
            out.push_str("(none)\n");
        } else {
            let ips: Vec<String> = peer
                .allowed_ips
                .iter()
                .map(|ip| format!("{}{}/{r}{}", ip.addr, p.c(CYAN), ip.prefix))
                .collect();
            let _ = writeln!(out, "{}", ips.join(", "));
        }
        let hs_sec = peer.last_handshake.map_or(0, unix_secs);
        if hs_sec != 0 {
            let _ = writeln!(
                out,
                "  {b}latest handshake{r}: {}",
                ago(&p, hs_sec, now_sec)
            );
        }
        if peer.rx_bytes != 0 || peer.tx_bytes != 0 {
            let _ = writeln!(
                out,
                "  {b}transfer{r}: {} received, {} sent",
                bytes(&p, peer.rx_bytes),
                bytes(&p, peer.tx_bytes)
            );
        }
        if peer.persistent_keepalive_interval != 0 {
            let _ = writeln!(
                out,
                "  {b}persistent keepalive{r}: every {}",
                pretty_time(&p, u64::from(peer.persistent_keepalive_interval))
            );
        }
        if !peer.cipher.is_empty() {
            let _ = writeln!(out, "  {b}cipher{r}: {}", peer.cipher);
        }
        extra_lines(&mut out, &p, &peer.extra);
        if !peer.mode.is_empty() && peer.paths.len() > 1 {
            let _ = writeln!(out, "  {b}braid mode{r}: {}", peer.mode);
        }
        for path in &peer.paths {
            path_line(&mut out, &p, path);
        }
    }
    out
}

fn path_line(out: &mut String, p: &Paint, path: &crate::uapi::PathSnapshot) {
    let (r, b) = (p.c(RESET), p.c(BOLD));
    let ms = |us: u64| format!("{:.2} ms", us as f64 / 1000.0);
    let rtt = match (path.rtt_us, path.jitter_us) {
        (Some(rtt), Some(j)) => format!(", rtt {} ± {}", ms(rtt), ms(j)),
        _ => String::new(),
    };
    let loss = if path.state == "unknown" {
        String::new()
    } else {
        format!(
            ", loss {:.1}% (out {:.1}%, in {:.1}%)",
            path.loss * 100.0,
            path.loss_out * 100.0,
            path.loss_in * 100.0
        )
    };
    let estimate = match &path.estimate {
        Some(e) => format!(
            "; estimate {} (delivered {}), sending {} = {:.0}% of the peer's, queue {}, data loss {:.1}%, re-sent {}",
            rate(e.rate_bps),
            rate(e.delivered_bps),
            rate(e.send_bps),
            e.share * 100.0,
            e.queue_us.map_or_else(|| "?".to_string(), ms),
            e.data_loss * 100.0,
            path.resent
        ),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "  {b}path {}{r}: {} {}{rtt}{loss}; rx {} pkts ({}), tx {} pkts ({}), first arrivals {}{estimate}",
        path.name,
        path.remote,
        path.state,
        path.rx_packets,
        bytes(p, path.rx_bytes),
        path.tx_packets,
        bytes(p, path.tx_bytes),
        path.first_arrivals
    );
}

/// Bits per second, as people read line rates.
fn rate(bps: u64) -> String {
    match bps {
        b if b >= 1_000_000_000 => format!("{:.2} Gbit/s", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} Mbit/s", b as f64 / 1e6),
        b => format!("{:.0} kbit/s", b as f64 / 1e3),
    }
}

/// `wg show`'s JSON counterpart: the snapshot without any secret, keys in
/// base64, plus the interface name.
pub fn render_json(name: &str, snap: &DeviceSnapshot) -> String {
    #[derive(Serialize)]
    struct Named<'a> {
        interface: &'a str,
        #[serde(flatten)]
        device: DeviceJson,
    }
    serde_json::to_string_pretty(&Named {
        interface: name,
        device: json_view(snap),
    })
    .expect("plain data always serializes")
}

fn extra_lines(out: &mut String, p: &Paint, extra: &[(String, u64)]) {
    let (r, b) = (p.c(RESET), p.c(BOLD));
    for (name, value) in extra {
        let _ = writeln!(out, "  {b}braid {name}{r}: {value}");
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn handshake_key(peer: &PeerSnapshot) -> (u64, u32) {
    peer.last_handshake
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or((0, 0), |d| (d.as_secs(), d.subsec_nanos()))
}

/// wg's pretty_time: "1 year, 2 days, 1 minute, 5 seconds"; zero parts
/// are skipped, so 0 renders as an empty string, exactly as in wg.
fn pretty_time(p: &Paint, mut left: u64) -> String {
    const YEAR: u64 = 365 * 24 * 60 * 60;
    const DAY: u64 = 24 * 60 * 60;
    let years = left / YEAR;
    left %= YEAR;
    let days = left / DAY;
    left %= DAY;
    let hours = left / 3600;
    left %= 3600;
    let minutes = left / 60;
    let seconds = left % 60;
    let mut parts = Vec::new();
    for (n, unit) in [
        (years, "year"),
        (days, "day"),
        (hours, "hour"),
        (minutes, "minute"),
        (seconds, "second"),
    ] {
        if n != 0 {
            let plural = if n == 1 { "" } else { "s" };
            parts.push(format!("{n} {}{unit}{plural}{}", p.c(CYAN), p.c(RESET)));
        }
    }
    parts.join(", ")
}

fn ago(p: &Paint, then: u64, now: u64) -> String {
    if now == then {
        "Now".to_string()
    } else if now < then {
        format!(
            "({}System clock wound backward; connection problems may ensue.{})",
            p.c(RED),
            p.c(RESET)
        )
    } else {
        format!("{} ago", pretty_time(p, now - then))
    }
}

/// wg's units: bytes below 1 KiB, else two decimals of KiB/MiB/GiB/TiB.
fn bytes(p: &Paint, b: u64) -> String {
    const K: f64 = 1024.0;
    let (value, unit) = if b < 1024 {
        return format!("{b} {}B{}", p.c(CYAN), p.c(RESET));
    } else if b < 1024 * 1024 {
        (b as f64 / K, "KiB")
    } else if b < 1024 * 1024 * 1024 {
        (b as f64 / (K * K), "MiB")
    } else if b < 1024 * 1024 * 1024 * 1024 {
        (b as f64 / (K * K * K), "GiB")
    } else {
        (b as f64 / (K * K * K * K), "TiB")
    };
    format!("{value:.2} {}{unit}{}", p.c(CYAN), p.c(RESET))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{PresharedKey, PrivateKey, PublicKey};
    use std::time::Duration;

    const NOW: u64 = 1_700_000_000;

    fn key(n: u8) -> PublicKey {
        PrivateKey::from_bytes([n; 32]).public_key()
    }

    fn snapshot() -> DeviceSnapshot {
        let mut snap = DeviceSnapshot::new(Some(PrivateKey::from_bytes([1; 32])), 51820, 0);
        let mut old = PeerSnapshot::new(key(2));
        old.endpoint = Some("192.0.2.1:51820".parse().unwrap());
        old.allowed_ips = vec!["10.0.0.2/32".parse().unwrap()];
        old.last_handshake = Some(UNIX_EPOCH + Duration::from_secs(NOW - 65));
        old.rx_bytes = 1260; // 1.23 KiB
        old.tx_bytes = 4_781_506; // 4.56 MiB
        old.persistent_keepalive_interval = 25;
        let mut recent = PeerSnapshot::new(key(3));
        recent.preshared_key = Some(PresharedKey::from_bytes([9; 32]));
        recent.endpoint = Some("[2001:db8::1]:443".parse().unwrap());
        recent.allowed_ips = vec!["10.0.0.3/32".parse().unwrap(), "fd00::/64".parse().unwrap()];
        recent.last_handshake = Some(UNIX_EPOCH + Duration::from_secs(NOW - 1));
        recent.rx_bytes = 1;
        recent.extra = vec![("paths up".into(), 2), ("reordered".into(), 17)];
        let never = PeerSnapshot::new(key(4));
        snap.peers = vec![never, old, recent];
        snap.extra = vec![("batches".into(), 99)];
        snap
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    #[test]
    fn text_matches_wg_show() {
        let snap = snapshot();
        let expected = format!(
            "interface: wg0
  public key: {pk}
  private key: (hidden)
  listening port: 51820
  braid batches: 99

peer: {p3}
  preshared key: (hidden)
  endpoint: [2001:db8::1]:443
  allowed ips: 10.0.0.3/32, fd00::/64
  latest handshake: 1 second ago
  transfer: 1 B received, 0 B sent
  braid paths up: 2
  braid reordered: 17

peer: {p2}
  endpoint: 192.0.2.1:51820
  allowed ips: 10.0.0.2/32
  latest handshake: 1 minute, 5 seconds ago
  transfer: 1.23 KiB received, 4.56 MiB sent
  persistent keepalive: every 25 seconds

peer: {p4}
  allowed ips: (none)
",
            pk = snap.public_key.unwrap(),
            p2 = key(2),
            p3 = key(3),
            p4 = key(4),
        );
        assert_eq!(render_text("wg0", &snap, now(), false), expected);
    }

    #[test]
    fn colour_codes_like_wg() {
        let text = render_text("wg0", &snapshot(), now(), true);
        assert!(text.starts_with("\x1b[0m\x1b[32m\x1b[1minterface\x1b[0m: \x1b[32mwg0\x1b[0m\n"));
        assert!(text.contains("  \x1b[1mlistening port\x1b[0m: 51820\n"));
        assert!(text.contains("10.0.0.3\x1b[36m/\x1b[0m32, fd00::\x1b[36m/\x1b[0m64\n"));
        assert!(text.contains("1 \x1b[36mminute\x1b[0m, 5 \x1b[36mseconds\x1b[0m ago"));
        assert!(text.contains("1.23 \x1b[36mKiB\x1b[0m received"));
        assert!(text.contains("\x1b[33m\x1b[1mpeer\x1b[0m: \x1b[33m"));
    }

    #[test]
    fn wording_and_units() {
        let p = Paint(false);
        assert_eq!(pretty_time(&p, 1), "1 second");
        assert_eq!(pretty_time(&p, 60), "1 minute");
        assert_eq!(pretty_time(&p, 3600 * 2 + 1), "2 hours, 1 second");
        assert_eq!(
            pretty_time(&p, 365 * 86400 + 86400 * 3 + 3661),
            "1 year, 3 days, 1 hour, 1 minute, 1 second"
        );
        assert_eq!(ago(&p, NOW, NOW), "Now");
        assert_eq!(
            ago(&p, NOW + 5, NOW),
            "(System clock wound backward; connection problems may ensue.)"
        );
        assert_eq!(bytes(&p, 0), "0 B");
        assert_eq!(bytes(&p, 1023), "1023 B");
        assert_eq!(bytes(&p, 1024), "1.00 KiB");
        assert_eq!(bytes(&p, 1024 * 1024 - 1), "1024.00 KiB");
        assert_eq!(bytes(&p, 5 << 30), "5.00 GiB");
        assert_eq!(bytes(&p, 3 << 40), "3.00 TiB");
    }

    #[test]
    fn counters_and_times_at_their_limits() {
        let p = Paint(false);
        assert_eq!(bytes(&p, u64::MAX), "16777216.00 TiB");
        assert_eq!(
            pretty_time(&p, u64::MAX),
            "584942417355 years, 26 days, 7 hours, 15 seconds"
        );
        assert_eq!(
            ago(&p, 0, u64::MAX),
            format!("{} ago", pretty_time(&p, u64::MAX))
        );
        assert_eq!(
            ago(&p, u64::MAX, 0),
            "(System clock wound backward; connection problems may ensue.)"
        );
        // Everything a snapshot counts at u64::MAX (and a handshake from
        // the far future) renders without overflowing anywhere.
        let mut snap = snapshot();
        let peer = &mut snap.peers[1];
        peer.rx_bytes = u64::MAX;
        peer.tx_bytes = u64::MAX;
        peer.persistent_keepalive_interval = u16::MAX;
        peer.extra = vec![("reordered".into(), u64::MAX)];
        peer.last_handshake = UNIX_EPOCH.checked_add(Duration::from_secs(i64::MAX as u64));
        peer.paths = vec![crate::uapi::PathSnapshot {
            name: "a".into(),
            remote: "192.0.2.1:51820".parse().unwrap(),
            state: "up".into(),
            rx_packets: u64::MAX,
            rx_bytes: u64::MAX,
            tx_packets: u64::MAX,
            tx_bytes: u64::MAX,
            first_arrivals: u64::MAX,
            resent: 7,
            rtt_us: Some(u64::MAX),
            jitter_us: Some(u64::MAX),
            loss: 1.0,
            loss_out: 1.0,
            loss_in: 1.0,
            pmtu: None,
            estimate: Some(crate::uapi::EstimateSnapshot {
                rate_bps: u64::MAX,
                delivered_bps: 2_500_000,
                send_bps: 999,
                share: 1.0,
                queue_us: Some(u64::MAX),
                data_loss: 1.0,
            }),
        }];
        let text = render_text("wg0", &snap, now(), false);
        assert!(text.contains("transfer: 16777216.00 TiB received, 16777216.00 TiB sent"));
        assert!(text.contains("every 18 hours, 12 minutes, 15 seconds"));
        assert!(text.contains("braid reordered: 18446744073709551615"));
        assert!(text.contains("System clock wound backward"));
        assert!(text.contains("rx 18446744073709551615 pkts (16777216.00 TiB)"));
        assert!(
            text.contains("estimate 18446744073.71 Gbit/s (delivered 2.5 Mbit/s), sending 1 kbit/s = 100% of the peer's"),
            "{text}"
        );
        let json = render_json("wg0", &snap);
        assert!(json.contains("18446744073709551615"));
    }

    #[test]
    fn fwmark_and_keyless_device() {
        let mut snap = DeviceSnapshot::new(None, 0, 0x1f);
        snap.peers.clear();
        assert_eq!(
            render_text("wg1", &snap, now(), false),
            "interface: wg1\n  fwmark: 0x1f\n"
        );
    }

    #[test]
    fn json_has_no_secrets() {
        let snap = snapshot();
        let json = render_json("wg0", &snap);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["interface"], "wg0");
        assert_eq!(v["public_key"], snap.public_key.unwrap().to_base64());
        assert_eq!(v["listen_port"], 51820);
        assert_eq!(v["peers"][2]["has_preshared_key"], true);
        assert_eq!(v["peers"][2]["extra"][1][0], "reordered");
        let sk = snap.private_key.as_ref().unwrap();
        let psk = snap.peers[2].preshared_key.as_ref().unwrap();
        for secret in [sk.to_base64(), sk.to_hex(), psk.to_base64(), psk.to_hex()] {
            assert!(!json.contains(&secret[..16]));
        }
        assert!(!json.contains("private"));
    }
}
