//! Checks of a running interface: the daemon answers, its I/O offloads,
//! tunnel MTU against each line's, and per peer the handshake, the cipher
//! and what the counters say about loss and reordering on its paths.

use std::net::{IpAddr, SocketAddr};
use std::time::SystemTime;

use braid_io::netcfg;

use super::check::Check;
use super::machine::{CipherRates, CLEARLY_FASTER};
use crate::toolkit::bench::crypto::Cipher;
use crate::uapi::{self, DeviceSnapshot, PathSnapshot, PeerSnapshot};

/// Bytes WireGuard adds to a tunnel packet: outer IP header, UDP, the
/// 16-byte data header and the 16-byte tag.
const OVERHEAD_V4: u32 = 20 + 8 + 32;
const OVERHEAD_V6: u32 = 40 + 8 + 32;
/// A session older than this has not been renewed (WireGuard rekeys every
/// 120 s while traffic flows, and gives a session up after 180 s).
const STALE_HANDSHAKE_SECS: u64 = 180;
/// Loss (of accepted packets) above which a peer's lines are called lossy.
const LOSSY: f64 = 0.01;
/// Late arrivals (of accepted packets) above which the reorder window is
/// too short for the lines.
const TOO_LATE: f64 = 0.001;
/// Held-for-order arrivals (of accepted) above which the lines reorder.
const REORDERING: f64 = 0.05;

pub fn checks(name: &str, rates: &CipherRates) -> Vec<Check> {
    let sock = uapi::socket_path(name);
    if !sock.exists() {
        return vec![Check::fail(
            format!("interface {name}"),
            format!("no braid daemon: {} does not exist", sock.display()),
            format!("start it with `braid up {name}` (or name the interface `braid show` lists)"),
        )];
    }
    let snap = match uapi::query_braid(&sock) {
        Ok(s) => s,
        Err(e) => {
            return vec![Check::fail(
                format!("interface {name}"),
                format!("the daemon at {} does not answer: {e}", sock.display()),
                format!("restart it: `braid down {name}` then `braid up {name}`"),
            )]
        }
    };
    let mut v = Vec::new();
    let tunnel_mtu = netcfg::link_mtu(name).ok();
    v.push(if netcfg::link_exists(name) {
        Check::ok(
            format!("interface {name}"),
            format!(
                "daemon answers; {} peer(s), listening on port {}, MTU {}",
                snap.peers.len(),
                snap.listen_port,
                tunnel_mtu.map_or("unknown".into(), |m| m.to_string())
            ),
        )
    } else {
        Check::fail(
            format!("interface {name}"),
            "the daemon answers but the TUN interface is gone",
            format!("restart it: `braid down {name}` then `braid up {name}`"),
        )
    });
    v.extend(io_offloads(name, &snap));
    if let Some(mtu) = tunnel_mtu {
        v.extend(mtu_checks(name, mtu, &snap));
    }
    let now = SystemTime::now();
    for peer in &snap.peers {
        v.extend(peer_checks(peer, rates, now));
    }
    v
}

fn extra(list: &[(String, u64)], key: &str) -> Option<u64> {
    list.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// What the daemon reports it runs with (older daemons report nothing).
fn io_offloads(name: &str, snap: &DeviceSnapshot) -> Vec<Check> {
    let mut v = Vec::new();
    let probes = [
        (
            "tun_offload",
            "TUN offload",
            "the TUN is read and written one packet at a time",
        ),
        ("udp_gso", "UDP GSO", "every datagram is sent on its own"),
        (
            "udp_gro",
            "UDP GRO",
            "every datagram is received on its own",
        ),
    ];
    for (key, what, cost) in probes {
        match extra(&snap.extra, key) {
            Some(0) => v.push(Check::warn(
                format!("{name} {what}"),
                format!("off in the running daemon: {cost}"),
                "compare with the machine check above: if the kernel supports it, the driver under a line refused it (veth, tunnels) or the kernel dropped it after an error; see the daemon's log",
            )),
            Some(_) => v.push(Check::ok(format!("{name} {what}"), "on in the running daemon")),
            None => {}
        }
    }
    let packets: u64 = snap
        .peers
        .iter()
        .map(|p| {
            extra(&p.extra, "rx_packets").unwrap_or(0) + extra(&p.extra, "tx_packets").unwrap_or(0)
        })
        .sum();
    // A few drops at start-up or in a burst are normal; a share is not.
    let dropped: Vec<String> = ["tun_dropped", "udp_dropped"]
        .into_iter()
        .filter_map(|k| {
            extra(&snap.extra, k)
                .filter(|&n| n as f64 > packets as f64 * TOO_LATE)
                .map(|n| format!("{k} {n} of {packets} packets"))
        })
        .collect();
    if !dropped.is_empty() {
        v.push(Check::warn(
            format!("{name} drops"),
            format!("packets dropped at the I/O edge: {}", dropped.join(", ")),
            "drops at the TUN or the sockets mean full buffers: raise net.core.rmem_max/wmem_max (see above) or the TUN txqueuelen (`ip link set NAME txqueuelen 1000`)",
        ));
    }
    v
}

/// The interface that carries traffic to `remote`: the one holding the
/// source address the kernel picks for it.
fn line_interface(remote: SocketAddr) -> Option<String> {
    let local: SocketAddr = if remote.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = std::net::UdpSocket::bind(local).ok()?;
    s.connect(remote).ok()?;
    let ip: IpAddr = s.local_addr().ok()?.ip();
    netcfg::interface_with_address(ip)
}

fn mtu_checks(name: &str, tunnel_mtu: u32, snap: &DeviceSnapshot) -> Vec<Check> {
    let mut v = Vec::new();
    let mut seen = Vec::new();
    for peer in &snap.peers {
        let mut remotes: Vec<(String, SocketAddr)> = peer
            .paths
            .iter()
            .map(|p| (p.name.clone(), p.remote))
            .collect();
        if remotes.is_empty() {
            if let Some(ep) = peer.endpoint {
                remotes.push(("endpoint".into(), ep));
            }
        }
        for (path, remote) in remotes {
            let Some(dev) = line_interface(remote) else {
                continue;
            };
            if seen.contains(&(dev.clone(), remote.is_ipv6())) {
                continue;
            }
            seen.push((dev.clone(), remote.is_ipv6()));
            let Ok(line_mtu) = netcfg::link_mtu(&dev) else {
                continue;
            };
            let (overhead, family) = if remote.is_ipv6() {
                (OVERHEAD_V6, "IPv6")
            } else {
                (OVERHEAD_V4, "IPv4")
            };
            let check = format!("mtu {name} over {dev}");
            let fits = line_mtu.saturating_sub(overhead);
            let finding = format!(
                "tunnel MTU {tunnel_mtu}, line {dev} (path {path} to {remote}) MTU {line_mtu}, {overhead} bytes of {family}/UDP/WireGuard overhead"
            );
            if tunnel_mtu > fits {
                v.push(Check::warn(
                    check,
                    finding,
                    format!(
                        "set `MTU = {fits}` in [Interface]: full-size tunnel packets do not fit the line and are fragmented or dropped"
                    ),
                ));
            } else if fits > tunnel_mtu + 80 {
                v.push(Check::ok(
                    check,
                    format!("{finding}; the line would carry MTU = {fits} (fewer packets per byte) if every line to the peer does"),
                ));
            } else {
                v.push(Check::ok(check, finding));
            }
        }
    }
    v
}

/// A peer named without its full key: enough to tell peers apart.
fn peer_label(peer: &PeerSnapshot) -> String {
    let key = peer.public_key.to_string();
    format!("peer {}…", &key[..key.len().min(8)])
}

/// Whether the peer runs braid's extensions: the daemon's `speaks_braid`
/// counter when it reports one, else whether a path has an rtt (only a
/// braid peer answers path probes).
fn speaks_braid(peer: &PeerSnapshot) -> bool {
    match extra(&peer.extra, "speaks_braid") {
        Some(v) => v != 0,
        None => peer.paths.iter().any(|p| p.rtt_us.is_some()),
    }
}

fn peer_checks(peer: &PeerSnapshot, rates: &CipherRates, now: SystemTime) -> Vec<Check> {
    let label = peer_label(peer);
    let mut v = vec![handshake(&label, peer, now)];
    if peer.last_handshake.is_none() {
        return v;
    }
    let braid = speaks_braid(peer);
    if !braid {
        v.push(Check::ok(
            format!("{label} kind"),
            "speaks no braid (stock WireGuard, or braid extensions not negotiated yet): ChaCha20-Poly1305, one path, no path probes",
        ));
    }
    v.push(cipher(&label, peer, rates, braid));
    v.extend(window(&label, peer));
    if braid {
        v.extend(peer.paths.iter().map(|p| path(&label, p)));
    }
    v
}

fn handshake(label: &str, peer: &PeerSnapshot, now: SystemTime) -> Check {
    let check = format!("{label} handshake");
    let Some(at) = peer.last_handshake else {
        return Check::warn(
            check,
            "no handshake yet",
            "check the peer's endpoint and port are reachable over UDP, that it runs and lists this interface's public key, and that AllowedIPs route traffic to it (a handshake starts when a packet is sent)",
        );
    };
    let age = now.duration_since(at).map_or(0, |d| d.as_secs());
    if age > STALE_HANDSHAKE_SECS {
        Check::warn(
            check,
            format!("last handshake {age} s ago: no current session"),
            "sessions are renewed every 2 minutes while traffic flows: either the tunnel is idle (set PersistentKeepalive = 25 to keep it up) or the peer stopped answering",
        )
    } else {
        Check::ok(check, format!("last handshake {age} s ago"))
    }
}

fn cipher_of(name: &str) -> Option<Cipher> {
    match name {
        "chacha20poly1305" => Some(Cipher::ChaCha20Poly1305),
        "aes256gcm" => Some(Cipher::Aes256Gcm),
        _ => None,
    }
}

fn cipher(label: &str, peer: &PeerSnapshot, rates: &CipherRates, braid: bool) -> Check {
    let check = format!("{label} cipher");
    let Some(used) = cipher_of(&peer.cipher) else {
        return Check::ok(check, "no session cipher reported");
    };
    let fastest = rates.fastest();
    let finding = format!("in use: {}; fastest here: {}", used.name(), fastest.name());
    if used == fastest || rates.ratio(fastest, used) <= CLEARLY_FASTER {
        return Check::ok(check, finding);
    }
    let gain = (rates.ratio(fastest, used) - 1.0) * 100.0;
    if !braid {
        return Check::ok(
            check,
            format!("{finding}; a stock WireGuard peer only speaks ChaCha20-Poly1305"),
        );
    }
    let advice = match fastest {
        Cipher::Aes256Gcm => format!(
            "AES-256-GCM seals {gain:.0} % faster here but the peer did not offer it (no AES hardware there, or `Cipher = chacha20poly1305` on either end): if the peer is also faster with AES, set `Cipher = aes256gcm` for this peer on both ends"
        ),
        Cipher::ChaCha20Poly1305 => format!(
            "ChaCha20-Poly1305 seals {gain:.0} % faster here: set `Cipher = chacha20poly1305` for this peer if this end is the bottleneck"
        ),
    };
    Check::warn(check, finding, advice)
}

/// What the reorder window's counters say about the peer's lines.
fn window(label: &str, peer: &PeerSnapshot) -> Vec<Check> {
    let get = |k| extra(&peer.extra, k).unwrap_or(0);
    let accepted = get("accepted");
    if accepted == 0 {
        return Vec::new();
    }
    let share = |n: u64| n as f64 / accepted as f64;
    let pct = |n: u64| share(n) * 100.0;
    let (given_up, buffered, replayed) = (get("lost"), get("buffered"), get("replayed"));
    let late = late_first_copies(get("under_window"), replayed, get("duplicated"));
    // The window counts a gap it gave up on as lost; a packet that fills
    // it later was late, not lost on a line.
    let lost = given_up.saturating_sub(late);
    let hold_ms = get("reorder_hold_us") as f64 / 1000.0;
    let mut v = Vec::new();
    let check = format!("{label} loss");
    if share(lost) > LOSSY {
        v.push(Check::warn(
            check,
            format!("lost {lost} of {accepted} accepted packets ({:.1} %)", pct(lost)),
            "a line drops packets: look at the paths below for the lossy one; with two or more lines `Mode = redundant` sends every packet on each and hides single-line loss",
        ));
    } else {
        v.push(Check::ok(
            check,
            format!(
                "lost {lost} of {accepted} accepted packets ({:.2} %)",
                pct(lost)
            ),
        ));
    }
    let check = format!("{label} reorder");
    let reorder_finding = format!(
        "{buffered} held for order ({:.1} %), {late} arrived after the window gave up on them, {replayed} replayed; ReorderHold {hold_ms:.0} ms",
        pct(buffered)
    );
    if share(late) > TOO_LATE {
        let target = match suggested_hold_ms(&peer.paths) {
            Some(ms) if ms > hold_ms => {
                format!(" (about {ms:.0} ms from the paths' rtt and jitter)")
            }
            _ => String::new(),
        };
        let trailing = match trailing_path(&peer.paths) {
            Some(p) => format!(
                "; path {} trails the most (rtt {:.1} ± {:.1} ms)",
                p.name,
                p.rtt_us.unwrap_or(0) as f64 / 1e3,
                p.jitter_us.unwrap_or(0) as f64 / 1e3
            ),
            None => String::new(),
        };
        v.push(Check::warn(
            check,
            reorder_finding,
            format!(
                "packets arrive later than the reorder window waits: raise `ReorderHold` for this peer above {hold_ms:.0} ms to the rtt spread between its paths plus their jitter{target}, so late packets are delivered in order instead of dropped{trailing}"
            ),
        ));
    } else if share(buffered) > REORDERING && hold_ms == 0.0 {
        v.push(Check::warn(
            check,
            reorder_finding,
            "the lines reorder but the reorder window is off: set `ReorderHold` (e.g. 20ms) for this peer so TCP sees packets in order",
        ));
    } else {
        v.push(Check::ok(check, reorder_finding));
    }
    v
}

/// Packets whose only copy so far came after the window gave up on them.
/// `under_window` also counts the second copy of a packet sent on two
/// lines (redundant mode) when the slower line delivers it: each such copy
/// is a replay that the window did not hold (`replayed` less
/// `duplicated`), harmless and no reason to raise `ReorderHold`.
fn late_first_copies(under_window: u64, replayed: u64, duplicated: u64) -> u64 {
    under_window.saturating_sub(replayed.saturating_sub(duplicated))
}

/// The path whose packets come last: the largest one-way delay plus twice
/// its jitter (the measure `suggested_hold_ms` uses). Only with two or
/// more measured paths; one path has nothing to trail.
fn trailing_path(paths: &[PathSnapshot]) -> Option<&PathSnapshot> {
    let measured: Vec<&PathSnapshot> = paths.iter().filter(|p| p.rtt_us.is_some()).collect();
    if measured.len() < 2 {
        return None;
    }
    measured
        .into_iter()
        .max_by_key(|p| p.rtt_us.unwrap_or(0) / 2 + 2 * p.jitter_us.unwrap_or(0))
}

/// How long the slowest path's packets trail the fastest's: half the rtt
/// spread (one way) plus twice the largest jitter, in ms.
fn suggested_hold_ms(paths: &[PathSnapshot]) -> Option<f64> {
    let rtts: Vec<u64> = paths.iter().filter_map(|p| p.rtt_us).collect();
    let (lo, hi) = (rtts.iter().min()?, rtts.iter().max()?);
    let jitter = paths.iter().filter_map(|p| p.jitter_us).max().unwrap_or(0);
    Some(((hi - lo) as f64 / 2.0 + 2.0 * jitter as f64) / 1000.0)
}

fn path(label: &str, p: &PathSnapshot) -> Check {
    let check = format!("{label} path {}", p.name);
    let rtt = match (p.rtt_us, p.jitter_us) {
        (Some(r), Some(j)) => format!(", rtt {:.2} ± {:.2} ms", r as f64 / 1e3, j as f64 / 1e3),
        _ => String::new(),
    };
    let finding = format!(
        "to {} {}{rtt}, probe loss {:.1} % (out {:.1} %, in {:.1} %)",
        p.remote,
        p.state,
        p.loss * 100.0,
        p.loss_out * 100.0,
        p.loss_in * 100.0
    );
    if p.state == "down" {
        Check::warn(
            check,
            finding,
            "the path answers no probes: check the line's link, addresses and that the peer listens on this endpoint; traffic uses the other paths meanwhile",
        )
    } else if p.loss > LOSSY {
        let side = if p.loss_out >= p.loss_in {
            "towards the peer"
        } else {
            "from the peer"
        };
        Check::warn(
            check,
            finding,
            format!("this line loses packets, mostly {side}: check its link; `Mode = redundant` hides the loss at the cost of sending everything twice"),
        )
    } else {
        Check::ok(check, finding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::check::Level;
    use crate::keys::PublicKey;
    use crate::uapi::PeerSnapshot;
    use std::time::Duration;

    fn peer(extra: &[(&str, u64)]) -> PeerSnapshot {
        let mut p = PeerSnapshot::new(PublicKey::from_bytes([7; 32]));
        p.extra = extra.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        p
    }

    #[test]
    fn loss_above_one_percent_warns() {
        let p = peer(&[("accepted", 1000), ("lost", 20)]);
        let c = window("p", &p);
        assert_eq!(c[0].level, Level::Warn);
        assert_eq!(c[1].level, Level::Ok);
    }

    #[test]
    fn late_arrivals_suggest_reorder_hold() {
        let p = peer(&[
            ("accepted", 1000),
            ("under_window", 5),
            ("reorder_hold_us", 5000),
        ]);
        let c = window("p", &p);
        assert_eq!(c[1].level, Level::Warn);
        assert!(c[1].advice.as_deref().unwrap().contains("ReorderHold"));
    }

    #[test]
    fn late_second_copies_of_redundant_mode_are_no_reorder_problem() {
        // Every packet on two lines: the slower line's copy of each lands
        // under the window and is counted as a replay too.
        let p = peer(&[
            ("accepted", 1000),
            ("under_window", 950),
            ("replayed", 960),
            ("duplicated", 10),
            ("reorder_hold_us", 17000),
        ]);
        let c = window("p", &p);
        assert_eq!(c[1].level, Level::Ok, "{:?}", c[1]);
        // A first copy that came too late still counts, and a gap given
        // up on that a late packet filled is no loss.
        let p = peer(&[
            ("accepted", 1000),
            ("under_window", 300),
            ("lost", 305),
            ("reorder_hold_us", 1000),
        ]);
        let c = window("p", &p);
        assert_eq!(c[0].level, Level::Ok, "{:?}", c[0]);
        assert!(c[0].finding.starts_with("lost 5 of 1000"), "{:?}", c[0]);
        assert_eq!(c[1].level, Level::Warn);
        let p = peer(&[
            ("accepted", 1000),
            ("under_window", 960),
            ("replayed", 950),
            ("reorder_hold_us", 17000),
        ]);
        assert_eq!(window("p", &p)[1].level, Level::Warn);
    }

    #[test]
    fn stale_and_missing_handshakes_warn() {
        let now = SystemTime::now();
        let mut p = peer(&[]);
        assert_eq!(handshake("p", &p, now).level, Level::Warn);
        p.last_handshake = Some(now - Duration::from_secs(600));
        assert_eq!(handshake("p", &p, now).level, Level::Warn);
        p.last_handshake = Some(now - Duration::from_secs(10));
        assert_eq!(handshake("p", &p, now).level, Level::Ok);
    }

    #[test]
    fn hold_suggestion_from_rtt_spread_and_jitter() {
        let path = |rtt_ms: u64, jitter_ms: u64| PathSnapshot {
            name: "l".into(),
            remote: "198.18.0.1:1".parse().unwrap(),
            state: "up".into(),
            rx_packets: 0,
            rx_bytes: 0,
            tx_packets: 0,
            tx_bytes: 0,
            first_arrivals: 0,
            resent: 0,
            rtt_us: Some(rtt_ms * 1000),
            jitter_us: Some(jitter_ms * 1000),
            loss: 0.0,
            loss_out: 0.0,
            loss_in: 0.0,
            pmtu: None,
            estimate: None,
        };
        // (80 - 20) / 2 + 2 * 5 = 40 ms.
        let ms = suggested_hold_ms(&[path(20, 1), path(80, 5)]).unwrap();
        assert!((ms - 40.0).abs() < 1e-9, "{ms}");
        assert_eq!(suggested_hold_ms(&[]), None);
        let three = [path(20, 1), path(80, 5), path(30, 2)];
        assert_eq!(trailing_path(&three).and_then(|p| p.rtt_us), Some(80_000));
        assert!(trailing_path(&[path(20, 1)]).is_none());
    }

    #[test]
    fn label_is_a_key_prefix() {
        let p = peer(&[]);
        let l = peer_label(&p);
        assert!(l.starts_with("peer ") && l.chars().count() == "peer ".len() + 9);
    }
}
