//! Two braid devices over one simulated line (`braid_core::testing`) whose
//! MTU can change: path MTU discovery runs through real sealed, padded
//! probes and their acks.

use braid_core::pmtud::PmtuState;
use braid_core::testing::{ipv4, Net, Socket, A, B};
use braid_netem::link::{LinkModel, LinkParams};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// A (its line 1 at 198.18.1.1:40001, persistent keepalive on) and B over
/// `line`, A's one path.
fn net(line: LinkParams) -> Net {
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
    net.connect_alike((A, 1), (B, 0), line);
    net.flush(A);
    net
}

/// New lines (both ways) that drop datagrams above `mtu` bytes.
fn set_mtu(net: &mut Net, mtu: Option<usize>) {
    let params = LinkParams {
        mtu,
        delay: Duration::from_millis(5),
        ..LinkParams::default()
    };
    *net.link_mut(0, B) = LinkModel::new(params.clone(), 3);
    *net.link_mut(0, A) = LinkModel::new(params, 4);
}

fn a_path(net: &Net) -> braid_core::path::Path {
    net.peer_info(A).paths[0].clone()
}

/// Runs until A's path settles; returns the simulated time it took.
fn settle(net: &mut Net) -> Duration {
    let start = net.now;
    for _ in 0..600 {
        net.run_for(Duration::from_millis(50));
        if a_path(net).pmtu.state() == PmtuState::SearchComplete {
            return net.now - start;
        }
    }
    panic!("no convergence: {:?}", a_path(net).pmtu);
}

/// The datagram A makes of an IPv4 packet of `len` bytes.
fn sealed_len(net: &mut Net, len: usize) -> usize {
    let packet = ipv4(net.tun(A), net.tun(B), 17, &vec![0; len - 20]);
    net.encapsulate(A, &packet)[0].bytes.len()
}

#[test]
fn probes_find_the_line_and_a_black_hole_is_recovered() {
    let mut net = net(LinkParams {
        delay: Duration::from_millis(5),
        ..LinkParams::default()
    });
    settle(&mut net);
    // An IPv4 line of (assumed) 1500: 1500 − 28 − 32.
    assert_eq!(a_path(&net).pmtu.plpmtu(), 1440);
    assert_eq!(net[A].device.path_mtu_target(1420), 1440);

    // The line now drops datagrams above 1400 bytes: 1368-byte packets fit.
    set_mtu(&mut net, Some(1400));
    net.run_for(Duration::from_millis(100));
    let took = {
        let start = net.now;
        for _ in 0..600 {
            net.run_for(Duration::from_millis(50));
            let p = a_path(&net).pmtu;
            if p.counters.black_holes > 0 && p.state() == PmtuState::SearchComplete {
                break;
            }
        }
        net.now - start
    };
    let p = a_path(&net).pmtu;
    assert_eq!(p.counters.black_holes, 1);
    assert_eq!(p.plpmtu(), 1368);
    assert!(a_path(&net).is_up(), "small probes kept the path up");
    assert_eq!(net[A].device.path_mtu_target(1420), 1368);
    assert!(took < Duration::from_secs(10), "{took:?} of simulated time");

    // A packet that fits the path must not be padded past it: with the
    // interface MTU at 1420 WireGuard would pad 1368 to 1376 (a 1408-byte
    // datagram the line drops); capped at the target it stays 1400.
    net[A].device.set_mtu(1420);
    assert_eq!(sealed_len(&mut net, 1368), 1408);
    let target = net[A].device.path_mtu_target(1420);
    net[A].device.set_padding_cap(target);
    assert_eq!(sealed_len(&mut net, 1368), 1400);

    // The limit goes away: the raise timer finds the ceiling again.
    set_mtu(&mut net, None);
    net.run_for(braid_core::pmtud::RAISE_INTERVAL + Duration::from_secs(3));
    assert_eq!(a_path(&net).pmtu.plpmtu(), 1440);
}

/// A with two peers: B over a line of the usual 1500 bytes, C over one
/// that drops datagrams above 1400. The interface takes the largest path
/// MTU (B's); C's narrower path only limits packets to C, which A answers
/// with ICMP "fragmentation needed" instead of sending them.
#[test]
fn a_peer_with_a_narrow_path_lowers_only_its_own_packets() {
    use braid_core::batch::PacketBatch;
    use braid_core::testing::C;
    let mut net = Net::new();
    for _ in 0..3 {
        net.add_node();
    }
    net[A].sockets = vec![
        Socket {
            line: 1,
            addr: "198.18.1.1:40001".parse().unwrap(),
        },
        Socket {
            line: 2,
            addr: "198.18.2.1:40002".parse().unwrap(),
        },
    ];
    let (pb, _) = net.peers(A, B);
    let (pc, _) = net.peers(A, C);
    let (b_addr, c_addr) = (net.addr(B), net.addr(C));
    net[A].device.add_path(pb, "to-b", 1, b_addr);
    net[A].device.add_path(pc, "to-c", 2, c_addr);
    let now = net.now;
    net[A].device.set_persistent_keepalive(now, pb, 25);
    net[A].device.set_persistent_keepalive(now, pc, 25);
    let line = |mtu| LinkParams {
        mtu,
        delay: Duration::from_millis(5),
        ..LinkParams::default()
    };
    net.connect_alike((A, 1), (B, 0), line(None));
    net.connect_alike((A, 2), (C, 0), line(Some(1400)));
    net.flush(A);
    // Before any search has finished, a fixed MTU limits no peer (a "too
    // big" answer from a search under way would hold the sender's path
    // MTU down for minutes).
    net.run_for(Duration::from_millis(1));
    net[A].device.refresh_path_mtus(9000, true);
    assert_eq!(net[A].device.peer(pc).unwrap().mtu_limit, None);
    let settled = |net: &Net| {
        let d = &net[A].device;
        [pb, pc].iter().all(|&pid| {
            d.peer(pid)
                .is_some_and(|p| p.paths[0].pmtu.state() == PmtuState::SearchComplete)
        })
    };
    for _ in 0..600 {
        if settled(&net) {
            break;
        }
        net.run_for(Duration::from_millis(50));
    }
    assert!(settled(&net), "both searches complete");
    // The smallest (what the interface MTU was before) and the largest.
    assert_eq!(net[A].device.path_mtu_target(1420), 1368);
    assert_eq!(net[A].device.refresh_path_mtus(1420, false), 1440);
    assert_eq!(net[A].device.peer(pc).unwrap().mtu_limit, Some(1368));
    assert_eq!(net[A].device.peer(pb).unwrap().mtu_limit, None);
    // With the interface MTU fixed (9000 here) only what a path was seen
    // not to carry limits its peer: C's line dropped bigger probes; B's
    // search stopped at its local line's ceiling without a loss (its big
    // packets go out as fragmented datagrams, as WireGuard's do).
    assert_eq!(net[A].device.refresh_path_mtus(9000, true), 9000);
    assert_eq!(net[A].device.peer(pc).unwrap().mtu_limit, Some(1368));
    assert_eq!(net[A].device.peer(pb).unwrap().mtu_limit, None);
    assert_eq!(net[A].device.refresh_path_mtus(1420, false), 1440);
    net[A].device.set_mtu(1440);
    net[A].device.set_padding_cap(1440);

    // 1420 bytes with DF to C: answered with the limit, not sent.
    let mut to_c = ipv4(net.tun(A), net.tun(C), 17, &[0; 1400]);
    to_c[6] |= 0x40;
    assert!(net.encapsulate(A, &to_c).is_empty(), "not sent to C");
    assert!(net[A].device.has_too_big());
    let mut answers = PacketBatch::new(4, 2048);
    assert_eq!(net[A].device.take_too_big(&mut answers), 1);
    let icmp = answers.packet(0);
    assert_eq!((icmp[20], icmp[21]), (3, 4), "fragmentation needed");
    assert_eq!(u16::from_be_bytes([icmp[26], icmp[27]]), 1368, "C's limit");
    assert_eq!(&icmp[16..20], &net.tun(A), "back to the sender");
    assert_eq!(net[A].device.peer(pc).unwrap().counters.too_big, 1);
    // The same packet to B goes out, whole.
    let mut to_b = ipv4(net.tun(A), net.tun(B), 17, &[0; 1400]);
    to_b[6] |= 0x40;
    assert_eq!(net.encapsulate(A, &to_b).len(), 1, "sent to B");
    // Without DF no answer is due: C joins fragments (a braid peer), so it
    // goes in two pieces its line carries, and C gets it whole.
    let plain = ipv4(net.tun(A), net.tun(C), 17, &[7; 1400]);
    assert!(net.encapsulate(A, &plain).is_empty(), "staged, then split");
    let pieces = net.poll_transmit(A);
    let to_c: Vec<usize> = pieces
        .iter()
        .filter(|d| d.to == Some(C))
        .map(|d| d.bytes.len())
        .collect();
    assert_eq!(to_c.len(), 2, "{to_c:?}");
    assert!(
        to_c.iter().all(|&n| n <= 1400),
        "each fits C's line: {to_c:?}"
    );
    let before = net[C].delivered.len();
    for d in pieces.iter().filter(|d| d.to == Some(C)) {
        net.deliver(C, d.src, &d.bytes);
    }
    assert_eq!(net[C].delivered.len(), before + 1);
    assert_eq!(net[C].delivered.last().map(|p| p.len()), Some(1420));
    assert_eq!(net[A].device.peer(pc).unwrap().counters.fragments_tx, 2);
}
