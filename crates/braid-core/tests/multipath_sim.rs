//! Two braid peers over two lines in simulated time
//! (`braid_core::testing`), each line a seeded `LinkModel` per direction:
//!
//! ```text
//!   A line 1 (198.18.1.1) ──link 1──┐
//!                                   ├── B 198.18.0.2:51820 (one socket)
//!   A line 2 (198.18.2.1) ──link 2──┘
//! ```
//!
//! A knows both paths from its config; B learns them from authenticated
//! traffic. Checks redundant, failover and aggregate behaviour.

use braid_core::path::Mode;
use braid_core::testing::{Net, NodeId, Socket, A, B};
use braid_netem::link::{LinkModel, LinkParams};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Line `line` (1 or 2) is the net's line `line - 1`.
const LINE1: usize = 0;

fn a_addr(line: u16) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(198, 18, line as u8, 1)),
        40000 + line,
    )
}

/// A, with a socket per line, and B over `line1` and `line2`.
fn net(mode: Mode, line1: LinkParams, line2: LinkParams, seed: u64) -> Net {
    let mut net = Net::new();
    net.add_node();
    net.add_node();
    net[A].sockets = [1, 2]
        .map(|line| Socket {
            line,
            addr: a_addr(line),
        })
        .to_vec();
    let (pb, pa) = net.peers(A, B);
    let b_addr = net.addr(B);
    net[A].device.add_path(pb, "line1", 1, b_addr);
    net[A].device.add_path(pb, "line2", 2, b_addr);
    net[A].device.set_mode(pb, mode);
    net[B].device.set_mode(pa, mode);
    for (line, params, up, down) in [(1, line1, seed, seed + 2), (2, line2, seed + 1, seed + 3)] {
        net.connect(
            (A, line),
            (B, 0),
            LinkModel::new(params.clone(), up),
            LinkModel::new(params, down),
        );
    }
    net
}

/// Sequence numbers of what reached `node`'s TUN.
fn got(net: &Net, node: NodeId) -> Vec<u32> {
    net[node]
        .delivered
        .iter()
        .filter(|p| p.len() >= 24)
        .map(|p| u32::from_be_bytes(p[20..24].try_into().unwrap()))
        .collect()
}

/// Datagrams A sent on `line` so far (before the line lost any).
fn sent_on_line_to_b(net: &Net, line: u16) -> u64 {
    net.capture
        .iter()
        .filter(|d| d.from == A && d.line == line)
        .count() as u64
}

/// Packet `seq` enters A's TUN: 100 bytes after the header, numbered.
fn send(net: &mut Net, seq: u32) {
    let mut payload = [0u8; 100];
    payload[..4].copy_from_slice(&seq.to_be_bytes());
    net.send(A, B, &payload);
}

/// A stream A→B of `count` packets every `gap`, after the tunnel is up.
fn stream(net: &mut Net, count: u32, gap: Duration, mut at_step: impl FnMut(&mut Net, u32)) {
    for seq in 0..count {
        at_step(net, seq);
        send(net, seq);
        net.run_for(gap);
    }
    net.run_for(Duration::from_secs(1));
}

fn establish(net: &mut Net) {
    send(net, u32::MAX);
    net.run_for(Duration::from_secs(1));
    net[B].delivered.clear();
    let info = net.peer_info(B);
    assert!(
        info.speaks_braid && info.paths.len() == 2,
        "B learned both lines: {:?}",
        info.paths
    );
}

fn lossy(loss: f64) -> LinkParams {
    LinkParams {
        delay: Duration::from_millis(5),
        loss,
        ..LinkParams::default()
    }
}

fn unique(v: &[u32]) -> usize {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.dedup();
    s.len()
}

#[test]
fn redundant_two_lossy_lines_lose_almost_nothing() {
    let mut net = net(Mode::Redundant, lossy(0.02), lossy(0.02), 7);
    establish(&mut net);
    let n = 20_000;
    stream(&mut net, n, Duration::from_micros(500), |_, _| {});
    let got = unique(&got(&net, B)) as u32;
    // Independent 2 % on each line: 0.04 % expected, ≤ 0.1 % required.
    assert!(n - got <= n / 1000, "lost {} of {n}", n - got);
    assert_eq!(
        got as usize,
        net[B].delivered.len(),
        "no duplicate reached the TUN"
    );
    assert!(
        sent_on_line_to_b(&net, 1) > n as u64 && sent_on_line_to_b(&net, 2) > n as u64,
        "every packet on both lines"
    );
}

#[test]
fn redundant_survives_a_cut_line_without_loss() {
    let mut net = net(Mode::Redundant, lossy(0.0), lossy(0.0), 9);
    establish(&mut net);
    stream(
        &mut net,
        6000,
        Duration::from_millis(1),
        |net, seq| match seq {
            1500 => net.link_mut(LINE1, B).set_cut(true),
            1500..=4500 if seq == 4500 => net.link_mut(LINE1, B).set_cut(false),
            _ => {}
        },
    );
    assert_eq!(
        unique(&got(&net, B)),
        6000,
        "nothing lost while line 1 was cut"
    );
    let paths = net.peer_info(A).paths;
    assert!(
        paths.iter().all(|p| p.is_up()),
        "line 1 came back: {paths:?}"
    );
}

#[test]
fn failover_switches_within_300_ms() {
    let mut net = net(Mode::Failover, lossy(0.0), lossy(0.0), 11);
    establish(&mut net);
    let cut_at = 2000u32;
    stream(&mut net, 5000, Duration::from_millis(1), |net, seq| {
        if seq == cut_at {
            net.link_mut(LINE1, B).set_cut(true);
            net.link_mut(LINE1, A).set_cut(true);
        }
    });
    // Before the cut everything went on line 1 only.
    let mut got = got(&net, B);
    got.sort_unstable();
    got.dedup();
    let missing: Vec<u32> = (0..5000)
        .filter(|s| got.binary_search(s).is_err())
        .collect();
    assert!(
        missing.iter().all(|&s| s >= cut_at),
        "loss only after the cut: {:?}",
        &missing[..missing.len().min(5)]
    );
    // 1 packet per ms: the outage in packets is the switch time in ms.
    eprintln!(
        "failover: {} packets (ms) lost after the cut",
        missing.len()
    );
    assert!(missing.len() <= 300, "switched after {} ms", missing.len());
    assert!(
        !missing.is_empty(),
        "failover does not duplicate, so the cut costs something"
    );
}

#[test]
fn aggregate_spreads_packets_over_both_lines() {
    let mut net = net(Mode::Aggregate, lossy(0.0), lossy(0.0), 13);
    establish(&mut net);
    let before = [0, sent_on_line_to_b(&net, 1), sent_on_line_to_b(&net, 2)];
    stream(&mut net, 4000, Duration::from_micros(250), |_, _| {});
    let l1 = sent_on_line_to_b(&net, 1) - before[1];
    let l2 = sent_on_line_to_b(&net, 2) - before[2];
    assert!(l1 > 1000 && l2 > 1000, "both lines carry data: {l1} / {l2}");
    assert!(l1 + l2 < 4000 + 4000 / 2, "not duplicated: {l1} + {l2}");
    assert_eq!(unique(&got(&net, B)), 4000);
}

#[test]
fn stock_peer_gets_only_the_primary_path() {
    let mut net = net(Mode::Redundant, lossy(0.0), lossy(0.0), 15);
    net[B].device.set_extensions(false);
    send(&mut net, u32::MAX);
    net.run_for(Duration::from_secs(1));
    net[B].delivered.clear();
    let before = [0, sent_on_line_to_b(&net, 1), sent_on_line_to_b(&net, 2)];
    stream(&mut net, 500, Duration::from_millis(1), |_, _| {});
    let data_l2 = sent_on_line_to_b(&net, 2) - before[2];
    // Hellos stop after a few attempts; data never goes on line 2.
    assert!(
        data_l2 <= 12,
        "line 2 carried {data_l2} datagrams to a stock peer"
    );
    assert_eq!(unique(&got(&net, B)), 500);
}

/// Whether `v` only ever goes up (no packet delivered after a later one).
fn in_order(v: &[u32]) -> Option<(usize, u32, u32)> {
    v.windows(2)
        .enumerate()
        .find(|(_, w)| w[1] < w[0])
        .map(|(i, w)| (i, w[0], w[1]))
}

/// The first transfer after `braid up`, both ends sending at once (so both
/// start a handshake), over two lossy lines of different delay: what B's
/// TUN gets is in order, for many seeds.
#[test]
fn order_holds_from_the_first_packet_of_a_tunnel() {
    for seed in 0..60 {
        for mode in [Mode::Redundant, Mode::Aggregate] {
            let slow = LinkParams {
                delay: Duration::from_millis(12),
                jitter: Duration::from_millis(3),
                loss: 0.02,
                ..LinkParams::default()
            };
            let mut net = net(mode, lossy(0.02), slow, seed * 10 + 1);
            for seq in 0..400u32 {
                send(&mut net, seq);
                if seq % 10 == 0 {
                    net.send(B, A, &seq.to_be_bytes());
                }
                net.run_for(Duration::from_micros(500));
            }
            net.run_for(Duration::from_secs(1));
            let got = got(&net, B);
            assert!(
                in_order(&got).is_none(),
                "seed {seed} {mode:?}: out of order at {:?} of {} delivered",
                in_order(&got),
                got.len()
            );
        }
    }
}
