#![allow(clippy::disallowed_methods)] // tests pick an arbitrary origin for virtual time
//! `Compression = lz4` between two simulated peers over a perfect 1 ms
//! line: packets shrink on the wire only when both ends offered it, come
//! out byte for byte, incompressible ones go as they are, and a compressed
//! packet is refused by a side that did not agree to it.

use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::compress::CompressionPolicy;
use braid_core::device::Device;
use braid_core::messages::{TYPE_DATA, TYPE_DATA_AES};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

const A_ADDR: &str = "198.18.0.1:51820";
const B_ADDR: &str = "198.18.0.2:51820";
const A_TUN: [u8; 4] = [198, 19, 0, 1];
const B_TUN: [u8; 4] = [198, 19, 0, 2];
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

struct Pair {
    now: Instant,
    a: Device,
    b: Device,
    /// (deliver at, to B?, bytes)
    flight: Vec<(Instant, bool, Vec<u8>)>,
    /// Bytes of data messages each side put on the wire.
    wire_from_a: usize,
    wire_from_b: usize,
    delivered_to_a: Vec<Vec<u8>>,
    delivered_to_b: Vec<Vec<u8>>,
}

fn device(seed: u8, key: u8, end: End, now: Instant) -> Device {
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut d = Device::new(now, wall, [seed; 32]);
    d.set_private_key(Some([key; 32]));
    d.set_extensions(end.extensions);
    d.set_compression(end.compression);
    d
}

/// An IPv4/UDP packet from `src` to `dst` carrying `payload`.
fn ip_packet(src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 28];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p.extend_from_slice(payload);
    p
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

impl Pair {
    fn new(a_end: End, b_end: End) -> Pair {
        Pair::with(a_end, b_end, |_, _| {})
    }

    /// A pair whose devices `setup` adjusts before the handshake.
    fn with(a_end: End, b_end: End, setup: impl FnOnce(&mut Device, &mut Device)) -> Pair {
        let now = Instant::now();
        let mut a = device(1, 0x11, a_end, now);
        let mut b = device(2, 0x22, b_end, now);
        let pb = a.add_peer(b.public_key().unwrap()).unwrap();
        let pa = b.add_peer(a.public_key().unwrap()).unwrap();
        a.set_endpoint(pb, B_ADDR.parse().unwrap());
        a.add_allowed_ip(pb, IpAddr::V4(Ipv4Addr::from(B_TUN)), 32)
            .unwrap();
        b.add_allowed_ip(pa, IpAddr::V4(Ipv4Addr::from(A_TUN)), 32)
            .unwrap();
        setup(&mut a, &mut b);
        let mut pair = Pair {
            now,
            a,
            b,
            flight: Vec::new(),
            wire_from_a: 0,
            wire_from_b: 0,
            delivered_to_a: Vec::new(),
            delivered_to_b: Vec::new(),
        };
        // Handshake and hellos.
        pair.send(true, &[0; 10]);
        pair.run(Duration::from_millis(300));
        pair.wire_from_a = 0;
        pair.wire_from_b = 0;
        pair.delivered_to_a.clear();
        pair.delivered_to_b.clear();
        pair
    }

    fn ship(&mut self, from_a: bool, batch: &PacketBatch) {
        for i in 0..batch.len() {
            let bytes = batch.packet(i);
            if bytes.is_empty() {
                continue;
            }
            if matches!(bytes[0], TYPE_DATA | TYPE_DATA_AES) {
                *if from_a {
                    &mut self.wire_from_a
                } else {
                    &mut self.wire_from_b
                } += bytes.len();
            }
            self.flight
                .push((self.now + LATENCY, from_a, bytes.to_vec()));
        }
    }

    fn send(&mut self, from_a: bool, payload: &[u8]) {
        let packet = if from_a {
            ip_packet(A_TUN, B_TUN, payload)
        } else {
            ip_packet(B_TUN, A_TUN, payload)
        };
        let mut batch = PacketBatch::new(4, 2048);
        batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
            b[..packet.len()].copy_from_slice(&packet);
            packet.len()
        });
        let now = self.now;
        let dev = if from_a { &mut self.a } else { &mut self.b };
        dev.encapsulate(now, &mut batch);
        self.ship(from_a, &batch);
    }

    fn run(&mut self, span: Duration) {
        let end = self.now + span;
        while self.now < end {
            self.now += Duration::from_millis(1);
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) =
                self.flight.drain(..).partition(|(at, _, _)| *at <= now);
            self.flight = later;
            for (_, to_b, bytes) in due {
                let mut batch = PacketBatch::new(1, 2048);
                let from: SocketAddr = if to_b { A_ADDR } else { B_ADDR }.parse().unwrap();
                batch.push_with(0, from, |b| {
                    b[..bytes.len()].copy_from_slice(&bytes);
                    bytes.len()
                });
                let dev = if to_b { &mut self.b } else { &mut self.a };
                dev.decapsulate(now, &mut batch);
                let got = if to_b {
                    &mut self.delivered_to_b
                } else {
                    &mut self.delivered_to_a
                };
                for i in 0..batch.len() {
                    if !batch.packet(i).is_empty() {
                        got.push(batch.packet(i).to_vec());
                    }
                }
            }
            for from_a in [true, false] {
                let dev = if from_a { &mut self.a } else { &mut self.b };
                dev.handle_timeout(now);
                let mut out = PacketBatch::new(64, 2048);
                loop {
                    out.clear();
                    let dev = if from_a { &mut self.a } else { &mut self.b };
                    let more = dev.poll_transmit(now, &mut out);
                    self.ship(from_a, &out);
                    if !more {
                        break;
                    }
                }
            }
        }
    }

    /// Sends `payload` `n` times each way; checks every packet arrived
    /// unchanged.
    fn exchange(&mut self, n: usize, payload: &[u8]) {
        for _ in 0..n {
            self.send(true, payload);
            self.send(false, payload);
            self.run(Duration::from_millis(1));
        }
        self.run(Duration::from_millis(20));
        assert_eq!(self.delivered_to_b.len(), n);
        assert_eq!(self.delivered_to_a.len(), n);
        let to_b = ip_packet(A_TUN, B_TUN, payload);
        let to_a = ip_packet(B_TUN, A_TUN, payload);
        assert!(self.delivered_to_b.iter().all(|p| *p == to_b));
        assert!(self.delivered_to_a.iter().all(|p| *p == to_a));
    }

    fn counter(&self, of_a: bool, name: &str) -> u64 {
        let info = if of_a { &self.a } else { &self.b }.peer_info(0).unwrap();
        match name {
            "compressed_tx" => info.counters.compressed_tx,
            "compressed_rx" => info.counters.compressed_rx,
            "decompress_failed" => info.counters.decompress_failed,
            _ => unreachable!(),
        }
    }
}

/// Wire bytes per data message when sending `PACKET`-byte packets.
fn wire_per_packet(a: End, b: End, payload: &[u8]) -> (Pair, f64, f64) {
    let mut pair = Pair::new(a, b);
    pair.exchange(50, payload);
    let (wa, wb) = (
        pair.wire_from_a as f64 / 50.0,
        pair.wire_from_b as f64 / 50.0,
    );
    (pair, wa, wb)
}

#[test]
fn both_offering_lz4_shrinks_compressible_packets_on_the_wire() {
    let payload = text_payload(PACKET - 28);
    let (pair, wa, wb) = wire_per_packet(LZ4, LZ4, &payload);
    eprintln!("text, lz4 both: {wa:.0} / {wb:.0} wire bytes per {PACKET}-byte packet");
    assert!(wa < PACKET as f64 / 4.0 && wb < PACKET as f64 / 4.0);
    assert_eq!(pair.counter(true, "compressed_tx"), 50);
    assert_eq!(pair.counter(false, "compressed_rx"), 50);
    assert_eq!(pair.counter(false, "compressed_tx"), 50);
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
    assert_eq!(pair.counter(true, "compressed_tx"), 0);
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
        for side in [true, false] {
            assert_eq!(pair.counter(side, "compressed_tx"), 0, "case {i}");
        }
    }
}

#[test]
fn a_peer_policy_overrides_the_interface() {
    let payload = text_payload(PACKET - 28);
    // Interfaces off, both peer entries on: compressed.
    let mut on = Pair::with(OFF, OFF, |a, b| {
        a.set_peer_compression(0, Some(CompressionPolicy::Lz4));
        b.set_peer_compression(0, Some(CompressionPolicy::Lz4));
    });
    on.exchange(5, &payload);
    assert_eq!(on.counter(true, "compressed_tx"), 5);
    // Interfaces on, one peer entry off: plain.
    let mut off = Pair::with(LZ4, LZ4, |a, _| {
        a.set_peer_compression(0, Some(CompressionPolicy::Off));
    });
    off.exchange(5, &payload);
    assert_eq!(off.counter(true, "compressed_tx"), 0);
    assert_eq!(off.counter(false, "compressed_tx"), 0);
}

#[test]
fn a_side_that_did_not_agree_refuses_compressed_packets() {
    let payload = text_payload(PACKET - 28);
    let mut pair = Pair::new(LZ4, LZ4);
    // B withdraws after the hellos: A still compresses (B offered on this
    // session) until B says otherwise, and B must not open what it no
    // longer accepts.
    pair.b.set_compression(CompressionPolicy::Off);
    for _ in 0..10 {
        pair.send(true, &payload);
        pair.run(Duration::from_millis(1));
    }
    pair.run(Duration::from_millis(20));
    // B's next hello (it repeats them) no longer offers lz4, and A stops.
    let compressed = pair.counter(true, "compressed_tx");
    assert!(compressed >= 1, "{compressed}");
    assert_eq!(pair.counter(false, "decompress_failed"), compressed);
    assert_eq!(pair.delivered_to_b.len() as u64, 10 - compressed);
}
