//! Changing a running device's configuration the way a reload does (`wg
//! syncconf`, `braid syncconf`), in simulated time: what must not cost the
//! session, and what a removed path leaves behind.
//!
//! ```text
//!   A line 1 (198.18.1.1) ──link 1──┐
//!                                   ├── B 198.18.0.2:51820
//!   A line 2 (198.18.2.1) ──link 2──┘
//! ```

use braid_core::path::Mode;
use braid_core::testing::{Net, NodeId, Socket, A, B};
use braid_netem::link::{LinkModel, LinkParams};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The net's index of A's line 2.
const LINE2: usize = 1;

/// A with a socket per line and both lines configured as paths to B.
fn two_lines() -> Net {
    let mut net = Net::new();
    net.add_node();
    net.add_node();
    net[A].sockets = [1u16, 2]
        .map(|line| Socket {
            line,
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, line as u8, 1)), 40000),
        })
        .to_vec();
    let (pb, pa) = net.peers(A, B);
    let b_addr = net.addr(B);
    net[A].device.add_path(pb, "line1", 1, b_addr);
    net[A].device.add_path(pb, "line2", 2, b_addr);
    net[A].device.set_mode(pb, Mode::Redundant);
    net[B].device.set_mode(pa, Mode::Redundant);
    let line = LinkParams {
        delay: Duration::from_millis(5),
        ..LinkParams::default()
    };
    for (l, seed) in [(1u16, 1u64), (2, 3)] {
        net.connect(
            (A, l),
            (B, 0),
            LinkModel::new(line.clone(), seed),
            LinkModel::new(line.clone(), seed + 1),
        );
    }
    net
}

fn handshakes(net: &Net, node: NodeId) -> u64 {
    let pid = net[node].device.peer_ids().next().expect("one peer");
    let c = net[node].device.peer(pid).expect("the peer").counters;
    c.handshakes_initiated + c.handshake_responses_sent
}

/// Packets 0..count from A to B, 2 ms apart; returns how many arrived.
fn stream(net: &mut Net, from: u32, count: u32) -> usize {
    net[B].delivered.clear();
    for seq in from..from + count {
        net.send(A, B, &seq.to_be_bytes());
        net.run_for(Duration::from_millis(2));
    }
    net.run_for(Duration::from_millis(500));
    net[B].delivered.len()
}

#[test]
fn the_same_private_key_again_keeps_the_session() {
    let mut net = two_lines();
    assert_eq!(stream(&mut net, 0, 50), 50);
    let before = (handshakes(&net, A), handshakes(&net, B));
    assert!(before.0 > 0, "a session was made");
    let own = net[A].device.private_key();
    net[A].device.set_private_key(own);
    let own_b = net[B].device.private_key();
    net[B].device.set_private_key(own_b);
    assert_eq!(stream(&mut net, 50, 50), 50);
    assert_eq!(
        (handshakes(&net, A), handshakes(&net, B)),
        before,
        "setting the unchanged key made a new handshake"
    );
    // A new key is a new identity: its sessions go, and B (which does not
    // know it) accepts nothing from it.
    net[A].device.set_private_key(Some([0x42; 32]));
    assert_eq!(stream(&mut net, 100, 20), 0);
}

#[test]
fn a_removed_path_is_gone_and_the_session_carries_on_over_the_other() {
    let mut net = two_lines();
    assert_eq!(stream(&mut net, 0, 50), 50);
    let pid = net[A].device.peer_ids().next().unwrap();
    let before = handshakes(&net, A);
    let counters_line1 = net.peer_info(A).paths[0].counters;
    assert!(net[A].device.remove_path(pid, "line2"));
    // The daemon closes a line no configured path uses any more: nothing
    // arrives on it, so it is not learned again from B's traffic.
    for towards in [A, B] {
        net.link_mut(LINE2, towards).set_cut(true);
    }
    assert!(!net[A].device.remove_path(pid, "line2"), "already gone");
    assert!(!net[A].device.remove_path(pid, "nosuch"));
    let info = net.peer_info(A);
    let names: Vec<&str> = info.paths.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["line1"]);
    assert_eq!(info.paths[0].counters, counters_line1, "counters are kept");
    let sent_on_2 = net
        .capture
        .iter()
        .filter(|d| d.from == A && d.line == 2)
        .count();
    assert_eq!(
        stream(&mut net, 50, 100),
        100,
        "nothing lost over the line left"
    );
    assert_eq!(net.peer_info(A).paths.len(), 1, "not learned again");
    assert_eq!(handshakes(&net, A), before, "no new handshake");
    let sent_on_2_after = net
        .capture
        .iter()
        .filter(|d| d.from == A && d.line == 2)
        .count();
    assert_eq!(
        sent_on_2_after, sent_on_2,
        "nothing more went on the removed line"
    );
    // A path with the old name can come back.
    for towards in [A, B] {
        net.link_mut(LINE2, towards).set_cut(false);
    }
    let b_addr = net.addr(B);
    assert!(net[A].device.add_path(pid, "line2", 2, b_addr));
    assert_eq!(stream(&mut net, 150, 50), 50);
    let sent_on_2_back = net
        .capture
        .iter()
        .filter(|d| d.from == A && d.line == 2)
        .count();
    assert!(sent_on_2_back > sent_on_2_after, "the line is used again");
    assert_eq!(handshakes(&net, A), before);
}

#[test]
fn only_configured_paths_are_removed() {
    let mut net = Net::pair();
    net.send(A, B, b"hello");
    net.run_for(Duration::from_secs(1));
    let pid = net[A].device.peer_ids().next().unwrap();
    // The plain Endpoint's path, and B's path learned from traffic.
    assert!(!net[A].device.remove_path(pid, "endpoint"));
    let pa = net[B].device.peer_ids().next().unwrap();
    let learned = net.peer_info(B).paths[0].name.clone();
    assert!(!net[B].device.remove_path(pa, &learned));
    assert_eq!(net.peer_info(A).paths.len(), 1);
    assert_eq!(net.peer_info(B).paths.len(), 1);
}
