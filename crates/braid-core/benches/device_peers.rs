#![allow(clippy::disallowed_methods)] // a benchmark reads the clock
//! The device's per-packet work for one live peer, with and without
//! 100,000 idle peers (random keys, an address each, as `braid bench
//! peers` configures them): what a server with many peers spends per
//! packet in the core, apart from sockets, the TUN and the scheduler.
//! Rounds alternate between the two, so a noisy moment hits both.
//!
//! `cargo bench -p braid-core --bench device_peers [-- IDLE ROUNDS]`

use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::testing::{ipv4, Net, A, B, STRIDE};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

const BATCH: usize = 64;
const SEGMENT: usize = 1380;
/// Batches per measurement.
const BATCHES: usize = 4000;

/// Idle peer `i`'s address, as `braid bench peers` gives it.
fn idle_address(i: usize) -> (IpAddr, u8) {
    const V4: usize = 250 * 250;
    if i < V4 {
        let ip = Ipv4Addr::new(198, 19, (1 + i / 250) as u8, (1 + i % 250) as u8);
        (IpAddr::V4(ip), 32)
    } else {
        let j = (i - V4) as u16;
        let ip = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, j);
        (IpAddr::V6(ip), 128)
    }
}

/// A live pair (A the client, B the server with `idle` idle peers), the
/// session up.
fn pair(idle: usize) -> Net {
    let mut net = Net::new();
    net.add_node();
    net.add_node();
    net.peers(A, B);
    let b_addr = net.addr(B);
    let pid = net[A].device.peer_ids().next().unwrap();
    net[A].device.set_endpoint(pid, b_addr);
    let mut rng = ChaCha20Rng::from_seed([5; 32]);
    for i in 0..idle {
        let mut key = [0u8; 32];
        rng.fill_bytes(&mut key);
        let pid = net[B].device.add_peer(key).expect("room");
        let (addr, prefix) = idle_address(i);
        net[B].device.add_allowed_ip(pid, addr, prefix).unwrap();
    }
    net.send(A, B, b"hello");
    net.settle();
    assert_eq!(net[B].delivered.len(), 1, "session up");
    net
}

/// Per packet: the server opening a batch of TCP segments from the live
/// peer, and sealing a batch of its ACKs back.
fn measure(net: &mut Net) -> (Duration, Duration) {
    let (a_tun, b_tun) = (net.tun(A), net.tun(B));
    let segment = ipv4(a_tun, b_tun, 6, &[0x5a; SEGMENT]);
    let ack = ipv4(b_tun, a_tun, 6, &[0; 20]);
    let any = SocketAddr::from(([0, 0, 0, 0], 0));
    let a_addr = net.addr(A);
    let mut tx = PacketBatch::new(BATCH, STRIDE);
    let mut rx = PacketBatch::new(BATCH, STRIDE);
    let mut acks = PacketBatch::new(BATCH / 4, STRIDE);
    let mut out = PacketBatch::new(BATCH, STRIDE);
    let (mut open, mut seal) = (Duration::ZERO, Duration::ZERO);
    let mut now = net.now;
    for round in 0..BATCHES + BATCHES / 10 {
        now += Duration::from_micros(200);
        tx.clear();
        for _ in 0..BATCH {
            tx.push_with(HEADROOM, any, |b| {
                b[..segment.len()].copy_from_slice(&segment);
                segment.len()
            });
        }
        net[A].device.encapsulate(now, &mut tx);
        rx.clear();
        for i in 0..tx.len() {
            let d = tx.packet(i);
            rx.push_with(0, a_addr, |b| {
                b[..d.len()].copy_from_slice(d);
                d.len()
            });
        }
        acks.clear();
        for _ in 0..acks.capacity() {
            acks.push_with(HEADROOM, any, |b| {
                b[..ack.len()].copy_from_slice(&ack);
                ack.len()
            });
        }
        let server = &mut net[B].device;
        let t0 = Instant::now();
        server.decapsulate(now, &mut rx);
        loop {
            out.clear();
            if !server.poll_tun(now, &mut out) {
                break;
            }
        }
        let t1 = Instant::now();
        server.encapsulate(now, &mut acks);
        let t2 = Instant::now();
        black_box(&rx);
        black_box(&acks);
        // The client takes nothing back: its ACK path is not measured.
        loop {
            out.clear();
            if !net[A].device.poll_transmit(now, &mut out) {
                break;
            }
        }
        loop {
            out.clear();
            if !net[B].device.poll_transmit(now, &mut out) {
                break;
            }
        }
        net[A].device.handle_timeout(now);
        net[B].device.handle_timeout(now);
        if round >= BATCHES / 10 {
            open += t1 - t0;
            seal += t2 - t1;
        }
    }
    (
        open / (BATCHES * BATCH) as u32,
        seal / (BATCHES * acks.capacity()) as u32,
    )
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let idle = args.first().copied().unwrap_or(100_000);
    let rounds = args.get(1).copied().unwrap_or(3);
    let mut nets = [(0, pair(0)), (idle, pair(idle))];
    println!("per packet: the server opening {SEGMENT}-byte TCP segments in batches of {BATCH}, sealing ACKs in batches of {}", BATCH / 4);
    for round in 0..rounds {
        for (n, net) in &mut nets {
            let (open, seal) = measure(net);
            println!(
                "round {round}  idle peers {n:>7}  open {:>6.0} ns  seal ack {:>6.0} ns",
                open.as_nanos(),
                seal.as_nanos()
            );
        }
    }
}
