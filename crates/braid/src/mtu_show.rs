//! `braid mtu NAME`: what each path carries, from the daemon's `get=braid`
//! snapshot (the same one `braid show` reads).

use crate::uapi::{DeviceSnapshot, PathSnapshot, PeerSnapshot};
use std::fmt::Write;

/// Bytes between a tunnel packet and the outer IP packet carrying it:
/// WireGuard's 32 plus UDP and the outer IP header.
fn outer_overhead(path: &PathSnapshot) -> usize {
    32 + 8 + if path.remote.is_ipv6() { 40 } else { 20 }
}

fn extra(snap: &DeviceSnapshot, key: &str) -> Option<u64> {
    find(&snap.extra, key)
}

fn find(extra: &[(String, u64)], key: &str) -> Option<u64> {
    extra.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// IPv6's minimum link MTU: below it IPv6 cannot pass.
const IPV6_MIN: u64 = 1280;

/// What a peer's packets are held to, when anything: (line of text, IPv6
/// passes). Split into pieces (a braid peer that joins fragments), or held
/// below IPv6's minimum (a stock WireGuard peer on a narrow line).
fn peer_note(peer: &PeerSnapshot) -> (Option<String>, bool) {
    let get = |k| find(&peer.extra, k);
    if let Some(payload) = get("fragment_payload") {
        let counts = match (get("fragmented_tx"), get("fragments_tx"), get("joined_rx")) {
            (Some(p), Some(f), Some(j)) => {
                format!(": {p} packets sent in {f} pieces, {j} joined from its pieces")
            }
            _ => String::new(),
        };
        let note = format!(
            "packets over {payload} bytes go in pieces (its lines carry no more; the peer joins them){counts}"
        );
        return (Some(note), true);
    }
    match get("mtu_limit") {
        Some(limit) if limit < IPV6_MIN => {
            let why = if get("joins_fragments") == Some(1) {
                ""
            } else {
                "; the peer does not take packets in pieces (stock WireGuard)"
            };
            (
                Some(format!(
                    "packets over {limit} bytes do not fit its lines: IPv6 cannot pass (it needs {IPV6_MIN}){why}"
                )),
                false,
            )
        }
        Some(limit) => (
            Some(format!(
                "packets over {limit} bytes are answered \"too big\""
            )),
            true,
        ),
        None => (None, true),
    }
}

pub fn render_text(name: &str, snap: &DeviceSnapshot) -> String {
    let mut out = String::new();
    let _ = write!(out, "interface: {name}");
    if let Some(mtu) = extra(snap, "tunnel_mtu") {
        let _ = write!(out, "  tunnel MTU {mtu}");
        if mtu < IPV6_MIN {
            let _ = write!(out, " (below {IPV6_MIN}: IPv6 cannot pass)");
        }
    }
    if let Some(n) = extra(snap, "too_big_answered") {
        let _ = write!(out, "  too-big answers {n}");
    }
    out.push('\n');
    for peer in &snap.peers {
        let _ = writeln!(out, "peer: {}", peer.public_key);
        if let (Some(note), _) = peer_note(peer) {
            let _ = writeln!(out, "  {note}");
        }
        if peer.paths.is_empty() {
            out.push_str("  (no paths)\n");
        }
        for path in &peer.paths {
            let _ = write!(out, "  path {} {} {}: ", path.name, path.remote, path.state);
            let Some(m) = &path.pmtu else {
                out.push_str("no discovery (stock WireGuard peer or no session yet)\n");
                continue;
            };
            let _ = write!(
                out,
                "carries {} (outer packet {}), {}; fits {}, ",
                m.mtu,
                m.mtu + outer_overhead(path),
                m.state,
                m.fits
            );
            match m.too_big {
                Some(t) => {
                    let _ = write!(out, "too big {t}, ");
                }
                None => out.push_str("nothing failed, "),
            }
            let _ = write!(out, "ceiling {}", m.max);
            if let Some(p) = m.probing {
                let _ = write!(out, ", probing {p}");
            }
            let _ = writeln!(
                out,
                "; probes {} sent, {} lost; black holes {}",
                m.probes_sent, m.probes_lost, m.black_holes
            );
        }
    }
    out
}

pub fn render_json(name: &str, snap: &DeviceSnapshot) -> String {
    let peers: Vec<serde_json::Value> = snap
        .peers
        .iter()
        .map(|peer| {
            let paths: Vec<serde_json::Value> = peer
                .paths
                .iter()
                .map(|path| {
                    serde_json::json!({
                        "name": path.name,
                        "remote": path.remote.to_string(),
                        "state": path.state,
                        "pmtu": path.pmtu,
                    })
                })
                .collect();
            let get = |k| find(&peer.extra, k);
            serde_json::json!({
                "public_key": peer.public_key.to_string(),
                "mtu_limit": get("mtu_limit"),
                "fragment_payload": get("fragment_payload"),
                "ipv6_passes": peer_note(peer).1,
                "paths": paths,
            })
        })
        .collect();
    serde_json::json!({
        "interface": name,
        "tunnel_mtu": extra(snap, "tunnel_mtu"),
        "too_big_answered": extra(snap, "too_big_answered"),
        "peers": peers,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::PublicKey;
    use crate::uapi::PmtuSnapshot;

    fn snap() -> DeviceSnapshot {
        let mut snap = DeviceSnapshot::new(None, 51820, 0);
        snap.extra = vec![("tunnel_mtu".into(), 1368)];
        let mut peer = PeerSnapshot::new(PublicKey::from_bytes([7; 32]));
        peer.paths.push(PathSnapshot {
            name: "line1".into(),
            remote: "198.18.0.2:51820".parse().unwrap(),
            state: "up".into(),
            rx_packets: 0,
            rx_bytes: 0,
            tx_packets: 0,
            tx_bytes: 0,
            first_arrivals: 0,
            resent: 0,
            rtt_us: None,
            jitter_us: None,
            loss: 0.0,
            loss_out: 0.0,
            loss_in: 0.0,
            estimate: None,
            pmtu: Some(PmtuSnapshot {
                state: "complete".into(),
                mtu: 1368,
                max: 1440,
                fits: 1368,
                too_big: Some(1369),
                probing: None,
                probes_sent: 40,
                probes_lost: 9,
                black_holes: 1,
            }),
        });
        snap.peers.push(peer);
        snap
    }

    #[test]
    fn text_names_what_each_path_carries() {
        let text = render_text("wg0", &snap());
        assert!(text.contains("tunnel MTU 1368"), "{text}");
        assert!(
            text.contains("path line1 198.18.0.2:51820 up: carries 1368 (outer packet 1428), complete; fits 1368, too big 1369, ceiling 1440"),
            "{text}"
        );
        assert!(text.contains("black holes 1"), "{text}");
    }

    #[test]
    fn json_carries_the_pmtu_fields() {
        let v: serde_json::Value = serde_json::from_str(&render_json("wg0", &snap())).unwrap();
        assert_eq!(v["tunnel_mtu"], 1368);
        assert_eq!(v["peers"][0]["paths"][0]["pmtu"]["too_big"], 1369);
    }

    #[test]
    fn a_peer_held_below_1280_or_split_into_pieces_is_said_so() {
        let mut s = snap();
        s.peers[0].extra = vec![("mtu_limit".into(), 1240), ("joins_fragments".into(), 0)];
        let text = render_text("wg0", &s);
        assert!(
            text.contains("packets over 1240 bytes do not fit its lines: IPv6 cannot pass (it needs 1280); the peer does not take packets in pieces (stock WireGuard)"),
            "{text}"
        );
        let v: serde_json::Value = serde_json::from_str(&render_json("wg0", &s)).unwrap();
        assert_eq!(v["peers"][0]["ipv6_passes"], false);
        s.peers[0].extra = vec![
            ("joins_fragments".into(), 1),
            ("fragment_payload".into(), 1268),
            ("fragmented_tx".into(), 10),
            ("fragments_tx".into(), 20),
            ("joined_rx".into(), 9),
        ];
        s.extra = vec![("tunnel_mtu".into(), 1280)];
        let text = render_text("wg0", &s);
        assert!(
            text.contains("packets over 1268 bytes go in pieces (its lines carry no more; the peer joins them): 10 packets sent in 20 pieces, 9 joined"),
            "{text}"
        );
        assert!(!text.contains("IPv6 cannot"), "{text}");
        s.extra = vec![("tunnel_mtu".into(), 1240)];
        assert!(render_text("wg0", &s).contains("tunnel MTU 1240 (below 1280: IPv6 cannot pass)"));
    }
}
