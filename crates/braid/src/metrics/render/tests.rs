use super::*;
use crate::keys::{PrivateKey, PublicKey};
use crate::uapi::{EstimateSnapshot, PmtuSnapshot};
use std::time::Duration;

fn key(n: u8) -> PublicKey {
    PrivateKey::from_bytes([n; 32]).public_key()
}

fn path(name: &str, state: &str) -> PathSnapshot {
    PathSnapshot {
        name: name.into(),
        remote: "198.18.1.1:51820".parse().unwrap(),
        state: state.into(),
        rx_packets: 10,
        rx_bytes: 15_000,
        tx_packets: 20,
        tx_bytes: 30_000,
        first_arrivals: 7,
        resent: 1,
        rtt_us: Some(3_100),
        jitter_us: Some(400),
        loss: 0.02,
        loss_out: 0.01,
        loss_in: 0.0,
        pmtu: Some(PmtuSnapshot {
            state: "complete".into(),
            mtu: 1420,
            max: 1420,
            fits: 1420,
            too_big: None,
            probing: None,
            probes_sent: 3,
            probes_lost: 0,
            black_holes: 0,
        }),
        estimate: Some(EstimateSnapshot {
            rate_bps: 80_000_000,
            delivered_bps: 40_000_000,
            send_bps: 8_000,
            share: 0.75,
            queue_us: Some(1_500),
            data_loss: 0.001,
        }),
    }
}

fn snapshot() -> DeviceSnapshot {
    let mut snap = DeviceSnapshot::new(Some(PrivateKey::from_bytes([1; 32])), 51820, 0);
    snap.extra = vec![
        ("invalid_datagrams".into(), 3),
        ("tunnel_mtu".into(), 1420),
        ("a_counter_from_the_future".into(), 9),
    ];
    let mut peer = PeerSnapshot::new(key(2));
    peer.rx_bytes = 1_000;
    peer.tx_bytes = 2_000;
    peer.last_handshake = Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    peer.mode = "redundant".into();
    peer.cipher = "aes256gcm".into();
    peer.extra = vec![
        ("accepted".into(), 100),
        ("reorder_hold_us".into(), 2_500),
        ("rate_limit_bits".into(), 80_000_000),
    ];
    peer.paths = vec![path("fibre", "up"), path("lte\"x", "down")];
    let mut stock = PeerSnapshot::new(key(3));
    let mut unprobed = path("endpoint", "unknown");
    unprobed.rtt_us = None;
    unprobed.jitter_us = None;
    unprobed.pmtu = None;
    unprobed.estimate = None;
    stock.paths = vec![unprobed];
    snap.peers = vec![peer, stock];
    snap
}

fn text() -> String {
    let mut exp = Exposition::default();
    render(
        "wg0",
        &snapshot(),
        UNIX_EPOCH + Duration::from_secs(1_700_000_065),
        &mut exp,
    );
    exp.finish()
}

#[test]
fn families_samples_and_units() {
    let t = text();
    let p2 = key(2).to_base64();
    for line in [
        "# TYPE braid_invalid_datagrams_total counter".to_string(),
        "braid_invalid_datagrams_total{interface=\"wg0\"} 3".into(),
        "braid_tunnel_mtu_bytes{interface=\"wg0\"} 1420".into(),
        "# TYPE braid_a_counter_from_the_future untyped".into(),
        format!("braid_peer_received_bytes_total{{interface=\"wg0\",peer=\"{p2}\"}} 1000"),
        format!("braid_peer_handshake_age_seconds{{interface=\"wg0\",peer=\"{p2}\"}} 65"),
        format!(
            "braid_peer_last_handshake_timestamp_seconds{{interface=\"wg0\",peer=\"{p2}\"}} 1700000000"
        ),
        format!("braid_peer_reorder_hold_seconds{{interface=\"wg0\",peer=\"{p2}\"}} 0.0025"),
        format!("braid_peer_rate_limit_bytes_per_second{{interface=\"wg0\",peer=\"{p2}\"}} 10000000"),
        format!("braid_peer_reorder_accepted_packets_total{{interface=\"wg0\",peer=\"{p2}\"}} 100"),
        format!("braid_path_rtt_seconds{{interface=\"wg0\",peer=\"{p2}\",path=\"fibre\"}} 0.0031"),
        format!("braid_path_up{{interface=\"wg0\",peer=\"{p2}\",path=\"fibre\"}} 1"),
        format!("braid_path_up{{interface=\"wg0\",peer=\"{p2}\",path=\"lte\\\"x\"}} 0"),
        format!(
            "braid_path_probe_loss_ratio{{interface=\"wg0\",peer=\"{p2}\",path=\"fibre\",direction=\"out\"}} 0.01"
        ),
        format!(
            "braid_path_estimated_rate_bytes_per_second{{interface=\"wg0\",peer=\"{p2}\",path=\"fibre\"}} 10000000"
        ),
        format!("braid_path_first_arrivals_total{{interface=\"wg0\",peer=\"{p2}\",path=\"fibre\"}} 7"),
        format!(
            "braid_peer_info{{interface=\"wg0\",peer=\"{p2}\",mode=\"redundant\",cipher=\"aes256gcm\"}} 1"
        ),
    ] {
        assert!(t.lines().any(|l| l == line), "no line {line:?} in:\n{t}");
    }
    // A family's HELP and TYPE come once, before all its samples.
    assert_eq!(t.matches("# TYPE braid_path_up gauge").count(), 1);
    let type_at = t.find("# TYPE braid_path_up").unwrap();
    assert!(t.match_indices("braid_path_up{").all(|(i, _)| i > type_at));
    // The stock peer's path is not probed: no loss, RTT or estimate.
    let p3 = key(3).to_base64();
    assert!(!t.contains(&format!(
        "braid_path_rtt_seconds{{interface=\"wg0\",peer=\"{p3}\""
    )));
    assert!(!t.contains(&format!(
        "braid_path_probe_loss_ratio{{interface=\"wg0\",peer=\"{p3}\""
    )));
    // Never a secret: the private key appears in no form.
    let sk = PrivateKey::from_bytes([1; 32]);
    assert!(!t.contains(&sk.to_base64()[..20]));
    assert!(!t.contains(&sk.to_hex()[..20]));
}

#[test]
fn numbers_and_labels_are_spelt_as_prometheus_reads_them() {
    assert_eq!(number(3.0), "3");
    assert_eq!(number(0.0025), "0.0025");
    assert_eq!(number(f64::NAN), "NaN");
    assert_eq!(number(f64::INFINITY), "+Inf");
    assert_eq!(number(u64::MAX as f64), "18446744073709552000");
    assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    assert_eq!(fallback_name("braid_", "odd name-1"), "braid_odd_name_1");
}

/// Every number the daemon's snapshot names (device and peer, every mode)
/// has its place in the tables: none is exported untyped.
#[test]
fn every_counter_of_the_snapshot_is_in_a_table() {
    use braid_core::device::{Device, PeerOptions};
    use std::time::Instant;
    let now = Instant::now();
    let mut device = Device::new(now, SystemTime::now(), [7; 32]);
    device.set_private_key(Some([1; 32]));
    for (n, mode) in [
        (2u8, braid_core::path::Mode::Redundant),
        (3, braid_core::path::Mode::Aggregate),
    ] {
        let pid = device.add_peer(*key(n).as_bytes()).unwrap();
        device.set_peer_options(
            pid,
            &PeerOptions {
                mode,
                rate_limit: Some(8_000_000),
                ..PeerOptions::default()
            },
        );
    }
    let state = crate::daemon::control::InterfaceState {
        listen_port: 1,
        fwmark: 0,
    };
    let snap = crate::daemon::control::snapshot(&device, &state, &[]);
    for (name, _) in &snap.extra {
        assert!(
            DEVICE.iter().any(|e| e.show == name),
            "device counter {name}"
        );
    }
    for peer in &snap.peers {
        for (name, _) in &peer.extra {
            assert!(PEER.iter().any(|e| e.show == name), "peer counter {name}");
        }
    }
    // The names only the daemon's I/O adds (Daemon::snapshot).
    for name in [
        "tun_dropped",
        "udp_dropped",
        "tun_offload",
        "udp_gso",
        "udp_gro",
        "tunnel_mtu",
        "too_big_answered",
        "too_big_suppressed",
        "crypto_helpers",
        "crypto_helper_parts",
        "realtime_priority",
        "tun_queues",
        "tun_queue_packets",
        "udp_sockets",
        "udp_socket_datagrams",
        "compressed_tx",
        "compressed_rx",
        "decompress_failed",
    ] {
        assert!(DEVICE.iter().chain(PEER).any(|e| e.show == name), "{name}");
    }
}

#[test]
fn metric_names_follow_the_conventions() {
    for e in DEVICE.iter().chain(PEER) {
        assert!(e.metric.starts_with("braid_"), "{}", e.metric);
        assert_eq!(
            e.kind == Kind::Counter,
            e.metric.ends_with("_total"),
            "{}: counters and only counters end in _total",
            e.metric
        );
        assert!(
            !e.metric.contains("_us") && !e.metric.contains("_bits"),
            "{}: base units",
            e.metric
        );
        assert!(e.help.ends_with('.'), "{}", e.metric);
    }
}

/// Prometheus' own checker reads the exposition: no error, and no lint
/// warning about names or units. Skipped without promtool (package
/// `prometheus`), except under CI.
#[test]
fn promtool_checks_the_exposition() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if std::env::var("CI").is_err() => {
            eprintln!("skipped: promtool not found ({e})");
            return;
        }
        Err(e) => panic!("promtool (apt-get install prometheus): {e}"),
    };
    let mut exp = Exposition::default();
    render("wg0", &snapshot(), SystemTime::now(), &mut exp);
    super::super::process_metrics(&mut exp);
    let text = exp.finish();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The one name promtool may question is the fallback for a counter no
    // table knows yet (this test's a_counter_from_the_future).
    let complaints: Vec<&str> = said
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("a_counter_from_the_future"))
        .collect();
    assert!(
        out.status.success() || complaints.is_empty(),
        "{said}\n{text}"
    );
    assert!(complaints.is_empty(), "promtool: {said}");
}

/// A server's scrape: 1000 peers with two paths each. What it takes is
/// printed (this machine, this build), not judged.
#[test]
fn a_thousand_peers_render_in_one_pass() {
    let mut snap = snapshot();
    let template = snap.peers[0].clone();
    snap.peers = (0..1000u32)
        .map(|i| {
            let mut p = template.clone();
            let mut k = [0u8; 32];
            k[..4].copy_from_slice(&i.to_le_bytes());
            p.public_key = PublicKey::from_bytes(k);
            p
        })
        .collect();
    let started = std::time::Instant::now();
    let mut exp = Exposition::default();
    render("wg0", &snap, SystemTime::now(), &mut exp);
    let text = exp.finish();
    let took = started.elapsed();
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    println!(
        "1000 peers x 2 paths: {samples} samples, {} KiB, rendered in {:.1} ms",
        text.len() / 1024,
        took.as_secs_f64() * 1e3
    );
    assert_eq!(text.matches("# TYPE braid_path_up gauge").count(), 1);
    assert_eq!(text.matches("braid_path_up{").count(), 2000);
}
