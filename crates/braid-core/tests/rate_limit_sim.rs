#![allow(clippy::disallowed_methods)] // tests pick an arbitrary origin for virtual time
//! `RateLimit` in simulated time: A limits its peer B to 8 Mbit/s (1000
//! bytes per millisecond). Each direction is offered three times that for
//! two seconds; what comes out of the other end's TUN must be the rate
//! (plus at most one burst and one queue), in order, whichever side sends.

use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::device::Device;
use braid_core::shaper::{default_burst_bytes, default_queue_bytes};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

const A_ADDR: &str = "198.18.0.1:51820";
const B_ADDR: &str = "198.18.0.2:51820";
const A_TUN: [u8; 4] = [198, 19, 0, 1];
const B_TUN: [u8; 4] = [198, 19, 0, 2];
const RATE: u64 = 8_000_000;
const PACKET: usize = 1000;
const OFFERED_PER_MS: usize = 3;
const SPAN_MS: u64 = 2000;

struct Pair {
    now: Instant,
    a: Device,
    b: Device,
    /// (deliver at, to B?, bytes)
    flight: Vec<(Instant, bool, Vec<u8>)>,
    /// Sequence numbers (payload bytes 28..36) of packets each TUN got.
    tun_a: Vec<u64>,
    tun_b: Vec<u64>,
}

fn device(seed: u8, key: u8, now: Instant) -> Device {
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut d = Device::new(now, wall, [seed; 32]);
    d.set_private_key(Some([key; 32]));
    d
}

fn packet(from_a: bool, seq: u64) -> Vec<u8> {
    let (src, dst) = if from_a {
        (A_TUN, B_TUN)
    } else {
        (B_TUN, A_TUN)
    };
    let mut p = vec![0u8; PACKET];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(PACKET as u16).to_be_bytes());
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p[28..36].copy_from_slice(&seq.to_le_bytes());
    p
}

fn seq_of(p: &[u8]) -> u64 {
    u64::from_le_bytes(p[28..36].try_into().unwrap())
}

impl Pair {
    fn new() -> Pair {
        let now = Instant::now();
        let mut a = device(1, 0x11, now);
        let mut b = device(2, 0x22, now);
        let pb = a.add_peer(b.public_key().unwrap()).unwrap();
        let pa = b.add_peer(a.public_key().unwrap()).unwrap();
        a.set_endpoint(pb, B_ADDR.parse().unwrap());
        a.add_allowed_ip(pb, IpAddr::V4(Ipv4Addr::from(B_TUN)), 32)
            .unwrap();
        b.add_allowed_ip(pa, IpAddr::V4(Ipv4Addr::from(A_TUN)), 32)
            .unwrap();
        a.set_rate_limit(pb, Some(RATE));
        let mut pair = Pair {
            now,
            a,
            b,
            flight: Vec::new(),
            tun_a: Vec::new(),
            tun_b: Vec::new(),
        };
        // Handshake both ways, then a quiet second so the buckets are full.
        pair.send(true, u64::MAX);
        pair.step(300);
        pair.send(false, u64::MAX);
        pair.step(1000);
        pair.tun_a.clear();
        pair.tun_b.clear();
        pair
    }

    fn ship(&mut self, from_a: bool, batch: &PacketBatch) {
        for i in 0..batch.len() {
            let bytes = batch.packet(i);
            if !bytes.is_empty() {
                self.flight
                    .push((self.now + Duration::from_millis(1), from_a, bytes.to_vec()));
            }
        }
    }

    fn send(&mut self, from_a: bool, seq: u64) {
        let p = packet(from_a, seq);
        let mut batch = PacketBatch::new(4, 2048);
        batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
            b[..p.len()].copy_from_slice(&p);
            p.len()
        });
        let now = self.now;
        let dev = if from_a { &mut self.a } else { &mut self.b };
        dev.encapsulate(now, &mut batch);
        self.ship(from_a, &batch);
    }

    fn record_tun(&mut self, to_b: bool, batch: &PacketBatch) {
        let tun = if to_b {
            &mut self.tun_b
        } else {
            &mut self.tun_a
        };
        for i in 0..batch.len() {
            let p = batch.packet(i);
            if !p.is_empty() && seq_of(p) != u64::MAX {
                tun.push(seq_of(p));
            }
        }
    }

    /// Advances `ms` virtual milliseconds the way the daemon drives a
    /// device: receive, timers, released packets, pending transmissions.
    fn step(&mut self, ms: u64) {
        for _ in 0..ms {
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
                self.record_tun(to_b, &batch);
            }
            for on_a in [true, false] {
                let dev = if on_a { &mut self.a } else { &mut self.b };
                dev.handle_timeout(now);
                let mut out = PacketBatch::new(64, 2048);
                loop {
                    out.clear();
                    let dev = if on_a { &mut self.a } else { &mut self.b };
                    let more = dev.poll_tun(&mut out);
                    self.record_tun(!on_a, &out);
                    if !more {
                        break;
                    }
                }
                loop {
                    out.clear();
                    let dev = if on_a { &mut self.a } else { &mut self.b };
                    let more = dev.poll_transmit(now, &mut out);
                    self.ship(on_a, &out);
                    if !more {
                        break;
                    }
                }
            }
        }
    }

    /// Offers OFFERED_PER_MS packets per millisecond from one side for
    /// SPAN_MS, then lets the queues drain.
    fn flood(&mut self, from_a: bool) {
        let mut seq = 0;
        for _ in 0..SPAN_MS {
            for _ in 0..OFFERED_PER_MS {
                self.send(from_a, seq);
                seq += 1;
            }
            self.step(1);
        }
        self.step(100);
    }
}

/// The most a limiter may let through in SPAN_MS: the rate, one full
/// bucket and one full queue.
fn ceiling() -> usize {
    let bytes = RATE as usize / 8 * SPAN_MS as usize / 1000
        + default_burst_bytes(RATE) as usize
        + default_queue_bytes(RATE);
    bytes / PACKET + 1
}

fn check(delivered: &[u64], direction: &str) {
    let at_rate = RATE as usize / 8 * SPAN_MS as usize / 1000 / PACKET;
    eprintln!(
        "{direction}: {} of {} packets delivered (rate alone: {at_rate}, ceiling {})",
        delivered.len(),
        SPAN_MS as usize * OFFERED_PER_MS,
        ceiling()
    );
    assert!(
        delivered.len() <= ceiling(),
        "{direction}: {}",
        delivered.len()
    );
    assert!(
        delivered.len() >= at_rate,
        "{direction}: {}",
        delivered.len()
    );
    assert!(
        delivered.windows(2).all(|w| w[0] < w[1]),
        "{direction}: out of order"
    );
}

#[test]
fn outbound_is_held_to_the_rate() {
    let mut pair = Pair::new();
    pair.flood(true);
    check(&pair.tun_b, "A -> B");
    let info = pair.a.peer_info(0).unwrap();
    assert_eq!(info.rate_limit_bits, Some(RATE));
    assert!(info.counters.rate_dropped_tx > 0);
}

#[test]
fn inbound_is_held_to_the_rate() {
    let mut pair = Pair::new();
    pair.flood(false);
    check(&pair.tun_a, "B -> A");
    let info = pair.a.peer_info(0).unwrap();
    assert!(info.counters.rate_dropped_rx > 0);
}

#[test]
fn below_the_rate_nothing_is_dropped_or_delayed_out_of_order() {
    // One packet every 2 ms: half the rate, in both directions.
    let mut pair = Pair::new();
    for seq in 0..1000 {
        pair.send(true, seq);
        pair.send(false, seq);
        pair.step(2);
    }
    pair.step(100);
    let info = pair.a.peer_info(0).unwrap();
    assert_eq!(info.counters.rate_dropped_tx, 0);
    assert_eq!(info.counters.rate_dropped_rx, 0);
    assert_eq!(pair.tun_b, (0..1000).collect::<Vec<_>>());
    assert_eq!(pair.tun_a, (0..1000).collect::<Vec<_>>());
}
