//! Sticky source addresses (issue 20, item 3): what B sends to A leaves
//! from the local address A's latest authenticated datagram arrived at;
//! a forged datagram does not move it, a forgotten address gives way to
//! the routing table's pick (`LocalAddr::NONE`).

use braid_core::batch::{LocalAddr, PacketBatch, HEADROOM};
use braid_core::testing::{ipv4, Net, A, B, STRIDE};
use std::net::IpAddr;
use std::time::Duration;

/// A and B with a session (over the simulator's wire), braid's extensions
/// off so only data and keepalives move.
fn pair() -> Net {
    let mut net = Net::pair();
    for n in [A, B] {
        net[n].device.set_extensions(false);
        // In arrival order: the forged datagram below leaves a gap.
        net[n].device.set_reorder(0, Some(Duration::ZERO), None);
    }
    net.send(A, B, b"hello");
    net.run_for(Duration::from_millis(100));
    assert_eq!(net[B].delivered.len(), 1, "session up");
    net
}

/// A fresh data message of A's to B (made, not sent).
fn from_a(net: &mut Net, n: u8) -> Vec<u8> {
    let packet = ipv4(net.tun(A), net.tun(B), 17, &[n; 40]);
    let d = net.encapsulate(A, &packet);
    assert_eq!(d.len(), 1);
    d[0].bytes.clone()
}

/// B receives `datagram` from A's address as having arrived at `at`;
/// returns how many packets it delivered.
fn b_receives_at(net: &mut Net, datagram: &[u8], at: IpAddr) -> usize {
    let mut batch = PacketBatch::new(4, STRIDE);
    let src = net.addr(A);
    batch.push_with(0, src, |b| {
        b[..datagram.len()].copy_from_slice(datagram);
        datagram.len()
    });
    batch.set_local(
        0,
        LocalAddr {
            ip: Some(at),
            ifindex: 0,
        },
    );
    let now = net.now;
    net[B].device.decapsulate(now, &mut batch);
    (0..batch.len())
        .filter(|&i| !batch.packet(i).is_empty())
        .count()
}

/// The local address B's next data message to A leaves from.
fn b_sends_from(net: &mut Net) -> Option<IpAddr> {
    let mut batch = PacketBatch::new(4, STRIDE);
    let packet = ipv4(net.tun(B), net.tun(A), 17, &[9; 40]);
    batch.push_with(HEADROOM, net.addr(A), |b| {
        b[..packet.len()].copy_from_slice(&packet);
        packet.len()
    });
    let now = net.now;
    net[B].device.encapsulate(now, &mut batch);
    assert!(!batch.packet(0).is_empty(), "sent");
    assert_eq!(batch.addr(0), net.addr(A));
    batch.local(0).ip
}

#[test]
fn replies_leave_from_the_address_the_peer_wrote_to() {
    let mut net = pair();
    // The simulator's own datagrams carry no local address.
    assert_eq!(b_sends_from(&mut net), None);
    let first: IpAddr = "198.18.0.20".parse().unwrap();
    let second: IpAddr = "198.18.0.21".parse().unwrap();
    let d = from_a(&mut net, 1);
    assert_eq!(b_receives_at(&mut net, &d, first), 1);
    assert_eq!(b_sends_from(&mut net), Some(first));
    // A forged datagram (bad tag) to another address moves nothing; nor
    // does a replay of a genuine one.
    let mut forged = from_a(&mut net, 2);
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert_eq!(b_receives_at(&mut net, &forged, second), 0);
    assert_eq!(b_receives_at(&mut net, &d, second), 0);
    assert_eq!(b_sends_from(&mut net), Some(first));
    // A writes to the other address: B follows.
    let d = from_a(&mut net, 3);
    assert_eq!(b_receives_at(&mut net, &d, second), 1);
    assert_eq!(b_sends_from(&mut net), Some(second));
    assert_eq!(
        net[B].device.local_address_for(0, net.addr(A)),
        Some(second)
    );
    // The address went away: the routing table picks until A writes again.
    net[B].device.forget_local_address(second);
    assert_eq!(b_sends_from(&mut net), None);
    let d = from_a(&mut net, 4);
    assert_eq!(b_receives_at(&mut net, &d, first), 1);
    assert_eq!(b_sends_from(&mut net), Some(first));
}

#[test]
fn keepalives_and_handshakes_leave_from_it_too() {
    let mut net = pair();
    let at: IpAddr = "2001:db8::20".parse().unwrap();
    let d = from_a(&mut net, 1);
    assert_eq!(b_receives_at(&mut net, &d, at), 1);
    // B's keepalive (due 10 s after data it did not answer) goes out
    // through poll_transmit.
    let mut out = PacketBatch::new(8, STRIDE);
    let later = net.now + Duration::from_secs(11);
    net[B].device.handle_timeout(later);
    net[B].device.poll_transmit(later, &mut out);
    let sent: Vec<_> = (0..out.len())
        .filter(|&i| !out.packet(i).is_empty())
        .map(|i| out.local(i).ip)
        .collect();
    assert!(!sent.is_empty(), "B had something to send");
    assert!(sent.iter().all(|ip| *ip == Some(at)), "{sent:?}");
}
