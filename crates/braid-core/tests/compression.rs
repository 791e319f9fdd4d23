//! `Compression = lz4` between two simulated peers
//! (`braid_core::testing`) over a perfect 1 ms line: packets shrink on the
//! wire only when both ends offered it, come out byte for byte,
//! incompressible ones go as they are, and a compressed packet is refused
//! by a side that did not agree to it.

use braid_core::compress::CompressionPolicy;
use braid_core::device::Device;
use braid_core::messages::{TYPE_DATA, TYPE_DATA_AES};
use braid_core::testing::{ipv4, Net, NodeId, A, B};
use braid_netem::link::LinkParams;
use std::time::Duration;

const LATENCY: Duration = Duration::from_millis(1);
const PACKET: usize = 1400;

#[derive(Clone, Copy)]
struct End {
    extensions: bool,
    compression: CompressionPolicy,
}

const LZ4: End = End {
    extensions: true,
    compression: CompressionPolicy::Lz4,
};
const OFF: End = End {
    extensions: true,
    compression: CompressionPolicy::Off,
};
const STOCK: End = End {
    extensions: false,
    compression: CompressionPolicy::Lz4,
};

fn pair(a_end: End, b_end: End) -> Net {
    pair_with(a_end, b_end, |_, _| {})
}

/// A and B over a perfect `LATENCY` line, set up as `a_end` and `b_end`
/// and then by `setup`; after the handshake and the hellos, with the books
/// cleared.
fn pair_with(a_end: End, b_end: End, setup: impl FnOnce(&mut Device, &mut Device)) -> Net {
    let mut net = Net::pair();
    for (n, end) in [(A, a_end), (B, b_end)] {
        net[n].device.set_extensions(end.extensions);
        net[n].device.set_compression(end.compression);
    }
    let (a, b) = net.nodes.split_at_mut(1);
    setup(&mut a[0].device, &mut b[0].device);
    let line = LinkParams {
        delay: LATENCY,
        ..LinkParams::default()
    };
    net.connect_alike((A, 0), (B, 0), line);
    // Handshake and hellos.
    send(&mut net, A, &[0; 10]);
    net.run_for(Duration::from_millis(300));
    net.capture.clear();
    net[A].delivered.clear();
    net[B].delivered.clear();
    net
}

/// An IPv4/UDP packet (TTL and UDP header zero) carrying `payload`, from
/// `from`'s tunnel address to the other side's.
fn packet(net: &Net, from: NodeId, payload: &[u8]) -> Vec<u8> {
    let to = if from == A { B } else { A };
    let udp = [&[0u8; 8][..], payload].concat();
    let mut p = ipv4(net.tun(from), net.tun(to), 17, &udp);
    p[8] = 0;
    p
}

fn send(net: &mut Net, from: NodeId, payload: &[u8]) {
    let p = packet(net, from, payload);
    net.send_packet(from, &p);
}

/// Bytes of data messages `node` put on the wire.
fn wire_from(net: &Net, node: NodeId) -> usize {
    net.capture
        .iter()
        .filter(|d| d.from == node && matches!(d.kind(), TYPE_DATA | TYPE_DATA_AES))
        .map(|d| d.bytes.len())
        .sum()
}

/// Sends `payload` `n` times each way; checks every packet arrived
/// unchanged.
fn exchange(net: &mut Net, n: usize, payload: &[u8]) {
    for _ in 0..n {
        send(net, A, payload);
        send(net, B, payload);
        net.run_for(Duration::from_millis(1));
    }
    net.run_for(Duration::from_millis(20));
    assert_eq!(net[B].delivered.len(), n);
    assert_eq!(net[A].delivered.len(), n);
    let to_b = packet(net, A, payload);
    let to_a = packet(net, B, payload);
    assert!(net[B].delivered.iter().all(|p| *p == to_b));
    assert!(net[A].delivered.iter().all(|p| *p == to_a));
}

fn counter(net: &Net, node: NodeId, name: &str) -> u64 {
    let info = net.peer_info(node);
    match name {
        "compressed_tx" => info.counters.compressed_tx,
        "compressed_rx" => info.counters.compressed_rx,
        "decompress_failed" => info.counters.decompress_failed,
        _ => unreachable!(),
    }
}

fn text_payload(n: usize) -> Vec<u8> {
    b"<tr><td class=\"name\">braid</td><td class=\"size\">4096</td></tr>\n"
        .iter()
        .copied()
        .cycle()
        .take(n)
        .collect()
}

fn random_payload(n: usize, mut x: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// Wire bytes per data message when sending `PACKET`-byte packets.
fn wire_per_packet(a: End, b: End, payload: &[u8]) -> (Net, f64, f64) {
    let mut pair = pair(a, b);
    exchange(&mut pair, 50, payload);
    let (wa, wb) = (
        wire_from(&pair, A) as f64 / 50.0,
        wire_from(&pair, B) as f64 / 50.0,
    );
    (pair, wa, wb)
}

#[test]
fn both_offering_lz4_shrinks_compressible_packets_on_the_wire() {
    let payload = text_payload(PACKET - 28);
    let (pair, wa, wb) = wire_per_packet(LZ4, LZ4, &payload);
    eprintln!("text, lz4 both: {wa:.0} / {wb:.0} wire bytes per {PACKET}-byte packet");
    assert!(wa < PACKET as f64 / 4.0 && wb < PACKET as f64 / 4.0);
    assert_eq!(counter(&pair, A, "compressed_tx"), 50);
    assert_eq!(counter(&pair, B, "compressed_rx"), 50);
    assert_eq!(counter(&pair, B, "compressed_tx"), 50);
    let (_, plain_a, _) = wire_per_packet(OFF, OFF, &payload);
    assert!(plain_a > PACKET as f64, "{plain_a}");
}

#[test]
fn incompressible_packets_go_as_they_are() {
    let payload = random_payload(PACKET - 28, 7);
    let (pair, wa, _) = wire_per_packet(LZ4, LZ4, &payload);
    let (_, plain_a, _) = wire_per_packet(OFF, OFF, &payload);
    eprintln!("random: lz4 {wa:.0}, off {plain_a:.0} wire bytes per packet");
    assert_eq!(wa, plain_a);
    assert_eq!(counter(&pair, A, "compressed_tx"), 0);
}

#[test]
fn no_compression_unless_both_offer_it() {
    let payload = text_payload(PACKET - 28);
    // (A, B): anyone off or stock WireGuard means plain packets both ways.
    for (i, (a, b)) in [(LZ4, OFF), (OFF, LZ4), (LZ4, STOCK), (STOCK, LZ4)]
        .into_iter()
        .enumerate()
    {
        let (pair, wa, wb) = wire_per_packet(a, b, &payload);
        assert!(
            wa > PACKET as f64 && wb > PACKET as f64,
            "case {i}: {wa} {wb}"
        );
        for side in [A, B] {
            assert_eq!(counter(&pair, side, "compressed_tx"), 0, "case {i}");
        }
    }
}

#[test]
fn a_peer_policy_overrides_the_interface() {
    let payload = text_payload(PACKET - 28);
    // Interfaces off, both peer entries on: compressed.
    let mut on = pair_with(OFF, OFF, |a, b| {
        a.set_peer_compression(0, Some(CompressionPolicy::Lz4));
        b.set_peer_compression(0, Some(CompressionPolicy::Lz4));
    });
    exchange(&mut on, 5, &payload);
    assert_eq!(counter(&on, A, "compressed_tx"), 5);
    // Interfaces on, one peer entry off: plain.
    let mut off = pair_with(LZ4, LZ4, |a, _| {
        a.set_peer_compression(0, Some(CompressionPolicy::Off));
    });
    exchange(&mut off, 5, &payload);
    assert_eq!(counter(&off, A, "compressed_tx"), 0);
    assert_eq!(counter(&off, B, "compressed_tx"), 0);
}

#[test]
fn a_side_that_did_not_agree_refuses_compressed_packets() {
    let payload = text_payload(PACKET - 28);
    let mut pair = pair(LZ4, LZ4);
    // B withdraws after the hellos: A still compresses (B offered on this
    // session) until B says otherwise, and B must not open what it no
    // longer accepts.
    pair[B].device.set_compression(CompressionPolicy::Off);
    for _ in 0..10 {
        send(&mut pair, A, &payload);
        pair.run_for(Duration::from_millis(1));
    }
    pair.run_for(Duration::from_millis(20));
    // B's next hello (it repeats them) no longer offers lz4, and A stops.
    let compressed = counter(&pair, A, "compressed_tx");
    assert!(compressed >= 1, "{compressed}");
    assert_eq!(counter(&pair, B, "decompress_failed"), compressed);
    assert_eq!(pair[B].delivered.len() as u64, 10 - compressed);
}
