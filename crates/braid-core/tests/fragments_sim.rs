//! A line that cannot carry a 1280-byte tunnel packet (issue 20, item 7):
//! two braid devices over a simulated line that drops datagrams above
//! 1300 bytes. Path MTU discovery finds 1268 (a floor below 1280, as the
//! peer joins fragments), the tunnel MTU stays at 1280, and packets up to
//! it and beyond go in pieces, whole at the other end, in order; with
//! braid's extensions off (a stock peer) there are no pieces.

use braid_core::messages::{TYPE_DATA, TYPE_DATA_AES};
use braid_core::pmtud::PmtuState;
use braid_core::testing::{ipv4, Net, Socket, A, B};
use braid_netem::link::LinkParams;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// A (line 1) and B over a line that drops datagrams above 1300 bytes.
fn net() -> Net {
    let mut net = Net::new();
    net.add_node();
    net.add_node();
    net[A].sockets = vec![Socket {
        line: 1,
        addr: "198.18.1.1:40001".parse().unwrap(),
    }];
    let (pb, pa) = net.peers(A, B);
    let b_addr = net.addr(B);
    net[A].device.add_path(pb, "line1", 1, b_addr);
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    net[A].device.add_allowed_ip(pb, any, 0).unwrap();
    net[B].device.add_allowed_ip(pa, any, 0).unwrap();
    let now = net.now;
    net[A].device.set_persistent_keepalive(now, pb, 25);
    net.connect_alike(
        (A, 1),
        (B, 0),
        LinkParams {
            mtu: Some(1300),
            delay: Duration::from_millis(5),
            ..LinkParams::default()
        },
    );
    net.flush(A);
    net
}

/// Runs until A's path settles; returns the simulated time it took.
fn settle(net: &mut Net) -> Duration {
    let start = net.now;
    for _ in 0..600 {
        net.run_for(Duration::from_millis(50));
        let path = net.peer_info(A).paths[0].clone();
        if path.pmtu.state() == PmtuState::SearchComplete {
            return net.now - start;
        }
    }
    panic!("no convergence: {:?}", net.peer_info(A).paths[0].pmtu);
}

/// Sends `sizes` (whole IPv4 packets) from A to B, each marked with its
/// index; returns what B's TUN got: (index, length).
fn send(net: &mut Net, sizes: &[usize]) -> Vec<(u8, usize)> {
    let before = net[B].delivered.len();
    for (k, &len) in sizes.iter().enumerate() {
        let packet = ipv4(net.tun(A), net.tun(B), 17, &vec![k as u8; len - 20]);
        net.send_packet(A, &packet);
    }
    net.run_for(Duration::from_millis(200));
    net[B].delivered[before..]
        .iter()
        .map(|p| (p[20], p.len()))
        .collect()
}

#[test]
fn packets_the_line_cannot_carry_arrive_whole_in_order() {
    let mut net = net();
    let took = settle(&mut net);
    let path = net.peer_info(A).paths[0].clone();
    eprintln!(
        "carry found: {} in {took:?} (probes {} sent, {} lost)",
        path.pmtu.plpmtu(),
        path.pmtu.counters.probes_sent,
        path.pmtu.counters.probes_lost
    );
    assert_eq!(path.pmtu.plpmtu(), 1268);
    // The interface keeps IPv6's minimum; the peer's pieces carry the rest.
    assert_eq!(net[A].device.refresh_path_mtus(1420, false), 1280);
    let p = net[A].device.peer(0).unwrap();
    assert_eq!((p.mtu_limit, p.fragment_payload), (None, Some(1268)));
    // With MTU = 1420 fixed: answers above 1280 (with DF), pieces below.
    assert_eq!(net[A].device.refresh_path_mtus(1420, true), 1420);
    let p = net[A].device.peer(0).unwrap();
    assert_eq!((p.mtu_limit, p.fragment_payload), (Some(1280), Some(1268)));
    net[A].device.set_mtu(1420);

    let sizes = [100, 1268, 1269, 1280, 60, 1420, 1280, 1200];
    let got = send(&mut net, &sizes);
    let want: Vec<(u8, usize)> = sizes
        .iter()
        .enumerate()
        .map(|(k, &l)| (k as u8, l))
        .collect();
    assert_eq!(got, want, "every packet whole, in order");
    let c = net.peer_info(A).counters;
    eprintln!(
        "A sent {} packets in {} pieces; B joined {}",
        c.fragmented_tx,
        c.fragments_tx,
        net.peer_info(B).counters.joined_rx
    );
    assert_eq!(c.fragmented_tx, 4, "1269, 1280, 1420, 1280");
    assert_eq!(net.peer_info(B).counters.joined_rx, 4);
    // No data message went on the wire that the line drops (path MTU
    // probes did: finding that out is their job).
    let data = net
        .capture
        .iter()
        .filter(|d| d.to == Some(B) && [TYPE_DATA, TYPE_DATA_AES].contains(&d.bytes[0]));
    assert!(data.clone().count() > 8);
    assert!(data.clone().all(|d| d.bytes.len() <= 1300));
}

#[test]
fn without_the_extensions_there_are_no_pieces() {
    let mut net = net();
    net[A].device.set_extensions(false);
    net[B].device.set_extensions(false);
    net.run_for(Duration::from_secs(3));
    let p = net[A].device.peer(0).unwrap();
    assert!(!p.speaks_braid());
    net[A].device.refresh_path_mtus(1420, true);
    let p = net[A].device.peer(0).unwrap();
    assert_eq!(p.fragment_payload, None);
    let got = send(&mut net, &[100, 1248, 1280]);
    // 1280 + 32 does not fit a 1300-byte line: lost, as with WireGuard.
    assert_eq!(got, [(0, 100), (1, 1248)]);
}
