#![allow(clippy::disallowed_methods)] // tests pick an arbitrary origin for virtual time
//! A responder under a handshake flood, in simulated time: bogus and
//! replayed initiations from many sources switch it to cookie replies, a
//! source that earned a cookie is held to its rate, no batch spends more
//! than its budget on Diffie-Hellman, and through it all the existing
//! tunnel carries data and a legitimate new peer completes its handshake.

use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::consts::*;
use braid_core::cookie::CookieState;
use braid_core::device::Device;
use braid_core::messages::{COOKIE_REPLY_LEN, INITIATION_LEN, TYPE_COOKIE_REPLY, TYPE_INITIATION};
use braid_core::noise::{self, LocalStatic, RemoteStatic};
use braid_core::ratelimiter::HANDSHAKE_BURST_PER_SOURCE;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};
use x25519_dalek::StaticSecret;

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const STEP: Duration = Duration::from_millis(5);

fn underlay(i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1 + i as u8)), 51820)
}

fn tunnel(i: usize) -> [u8; 4] {
    [198, 19, 0, 1 + i as u8]
}

/// The n-th flood source, all outside the devices' addresses.
fn flood_source(n: u32) -> SocketAddr {
    let ip = u32::from(Ipv4Addr::new(198, 18, 100, 0)) + n % 20_000;
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), 40_000)
}

fn ipv4_packet(src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

/// Devices A, B (the responder under attack) and C on a zero-delay wire;
/// whatever B sends to a flood source lands in `to_flooders`.
struct Net {
    now: Instant,
    devices: Vec<Device>,
    wire: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
    to_flooders: Vec<(SocketAddr, Vec<u8>)>,
    delivered: Vec<Vec<Vec<u8>>>,
    rng: ChaCha20Rng,
}

impl Net {
    /// A and B are peers; with `with_c`, C is a peer of B too (not yet
    /// talking).
    fn new(with_c: bool) -> Net {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let n = if with_c { 3 } else { 2 };
        let mut devices: Vec<Device> = (0..n)
            .map(|i| {
                let mut d = Device::new(now, wall, [i as u8 + 1; 32]);
                d.set_private_key(Some([0x11 * (i as u8 + 1); 32]));
                d
            })
            .collect();
        for client in (0..n).filter(|&i| i != B) {
            let (b_pub, c_pub) = (
                devices[B].public_key().unwrap(),
                devices[client].public_key().unwrap(),
            );
            let to_b = devices[client].add_peer(b_pub).unwrap();
            devices[client].set_endpoint(to_b, underlay(B));
            devices[client]
                .add_allowed_ip(to_b, IpAddr::V4(Ipv4Addr::from(tunnel(B))), 32)
                .unwrap();
            let to_client = devices[B].add_peer(c_pub).unwrap();
            devices[B]
                .add_allowed_ip(to_client, IpAddr::V4(Ipv4Addr::from(tunnel(client))), 32)
                .unwrap();
        }
        Net {
            now,
            devices,
            wire: VecDeque::new(),
            to_flooders: Vec::new(),
            delivered: vec![Vec::new(); n],
            rng: ChaCha20Rng::from_seed([9; 32]),
        }
    }

    fn index_of(&self, addr: SocketAddr) -> Option<usize> {
        (0..self.devices.len()).find(|&i| underlay(i) == addr)
    }

    fn put_on_wire(&mut self, from: usize, batch: &PacketBatch) {
        for i in 0..batch.len() {
            if !batch.packet(i).is_empty() {
                let dst = batch.addr(i);
                self.wire
                    .push_back((underlay(from), dst, batch.packet(i).to_vec()));
            }
        }
    }

    fn flush(&mut self, from: usize) {
        let mut out = PacketBatch::new(64, 2048);
        loop {
            out.clear();
            let now = self.now;
            let more = self.devices[from].poll_transmit(now, &mut out);
            self.put_on_wire(from, &out);
            if !more {
                return;
            }
        }
    }

    /// A packet enters `from`'s TUN, bound for B's (or, from B, for A's).
    fn send(&mut self, from: usize, payload: &[u8]) {
        let to = if from == B { A } else { B };
        let pkt = ipv4_packet(tunnel(from), tunnel(to), payload);
        let mut batch = PacketBatch::new(1, 2048);
        batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
            b[..pkt.len()].copy_from_slice(&pkt);
            pkt.len()
        });
        let now = self.now;
        self.devices[from].encapsulate(now, &mut batch);
        self.put_on_wire(from, &batch);
        self.flush(from);
    }

    /// Hands `datagrams` to device `to` as one received batch.
    fn receive(&mut self, to: usize, datagrams: &[(SocketAddr, Vec<u8>)]) {
        let mut batch = PacketBatch::new(datagrams.len().max(1), 2048);
        for (src, bytes) in datagrams {
            batch.push_with(0, *src, |b| {
                b[..bytes.len()].copy_from_slice(bytes);
                bytes.len()
            });
        }
        let now = self.now;
        self.devices[to].decapsulate(now, &mut batch);
        for i in 0..batch.len() {
            if !batch.packet(i).is_empty() {
                self.delivered[to].push(batch.packet(i).to_vec());
            }
        }
        let mut out = PacketBatch::new(64, 2048);
        while {
            out.clear();
            let more = self.devices[to].poll_tun(&mut out);
            for i in 0..out.len() {
                self.delivered[to].push(out.packet(i).to_vec());
            }
            more
        } {}
        self.flush(to);
        // B's answers to the flooders leave the simulation here.
        let for_flooders: Vec<_> = self
            .wire
            .iter()
            .filter(|(_, dst, _)| self.index_of(*dst).is_none())
            .map(|(_, dst, b)| (*dst, b.clone()))
            .collect();
        self.to_flooders.extend(for_flooders);
        let known: Vec<_> = self.wire.drain(..).collect();
        self.wire = known
            .into_iter()
            .filter(|(_, dst, _)| self.index_of(*dst).is_some())
            .collect();
    }

    /// Delivers everything on the wire (one datagram per batch).
    fn settle(&mut self) {
        while let Some((src, dst, bytes)) = self.wire.pop_front() {
            if let Some(to) = self.index_of(dst) {
                self.receive(to, &[(src, bytes)]);
            }
        }
    }

    /// One step of virtual time: timers fire, the wire settles.
    fn step(&mut self) {
        self.now += STEP;
        for i in 0..self.devices.len() {
            let now = self.now;
            self.devices[i].handle_timeout(now);
            self.flush(i);
        }
        self.settle();
    }

    /// An initiation to B from a fresh random static key (unknown to B)
    /// with a valid mac1: the most expensive thing to throw at B.
    fn unknown_initiation(&mut self) -> [u8; INITIATION_LEN] {
        let b_pub = self.devices[B].public_key().unwrap();
        let mut key = [0u8; 32];
        self.rng.fill_bytes(&mut key);
        let stranger = LocalStatic::new(key);
        let remote = RemoteStatic::new(&stranger, b_pub, [0; 32]);
        let mut eph = [0u8; 32];
        self.rng.fill_bytes(&mut eph);
        let timestamp = noise::tai64n(1_800_000_000, 0);
        let mut msg = [0u8; INITIATION_LEN];
        noise::create_initiation(
            &stranger,
            &remote,
            StaticSecret::from(eph),
            &timestamp,
            self.rng.next_u32(),
            &mut msg,
        );
        CookieState::new(&b_pub).add_macs(self.now, &mut msg);
        msg
    }

    fn random_initiation(&mut self) -> Vec<u8> {
        let mut msg = vec![0u8; INITIATION_LEN];
        self.rng.fill_bytes(&mut msg);
        msg[..4].copy_from_slice(&[TYPE_INITIATION, 0, 0, 0]);
        msg
    }

    /// A–B tunnel up, one packet through.
    fn establish_a_b(&mut self) {
        self.send(A, b"hello");
        self.settle();
        assert_eq!(self.delivered[B].len(), 1, "A reached B");
        self.delivered[B].clear();
    }
}

#[test]
fn bogus_initiations_cost_a_mac_check_and_get_no_answer() {
    let mut net = Net::new(false);
    net.establish_a_b();
    let before = net.devices[B].counters;
    let mut sent = 0;
    for step in 0..200u32 {
        let batch: Vec<_> = (0..50)
            .map(|k| (flood_source(step * 50 + k), net.random_initiation()))
            .collect();
        net.receive(B, &batch);
        sent += batch.len() as u64;
        net.step();
    }
    let c = net.devices[B].counters;
    assert_eq!(c.invalid_mac - before.invalid_mac, sent);
    assert_eq!(c.cookie_replies_sent, 0, "a wrong mac1 is never answered");
    assert_eq!(c.handshake_rejected, before.handshake_rejected);
    assert!(net.to_flooders.is_empty());
    net.send(A, b"still there");
    net.settle();
    assert_eq!(net.delivered[B].len(), 1, "the tunnel still carries data");
}

#[test]
fn a_flood_of_valid_mac1_initiations_gets_cookie_replies() {
    let mut net = Net::new(false);
    net.establish_a_b();
    let crafted: Vec<_> = (0..16).map(|_| net.unknown_initiation()).collect();
    let before = net.devices[B].counters;
    // 2000 a second for two seconds, each from its own source.
    let mut sent = 0u32;
    for _ in 0..(2 * 1000 / STEP.as_millis() as u32) {
        let batch: Vec<_> = (0..10)
            .map(|k| {
                let n = sent + k;
                (flood_source(n), crafted[n as usize % 16].to_vec())
            })
            .collect();
        sent += 10;
        net.receive(B, &batch);
        net.step();
    }
    let c = net.devices[B].counters;
    let dh_work = c.handshake_rejected - before.handshake_rejected;
    assert!(
        dh_work <= UNDER_LOAD_HANDSHAKES_PER_SECOND as u64,
        "DH work only until load is detected: {dh_work}"
    );
    let cookies = c.cookie_replies_sent - before.cookie_replies_sent;
    assert!(
        cookies + dh_work + c.handshake_over_budget >= sent as u64 - 1,
        "every other message got a cookie reply: {c:?}"
    );
    let replies = net
        .to_flooders
        .iter()
        .filter(|(_, b)| b.len() == COOKIE_REPLY_LEN && b[0] == TYPE_COOKIE_REPLY)
        .count() as u64;
    assert_eq!(replies, cookies, "each cookie reply went to its source");
}

#[test]
fn a_source_holding_a_cookie_is_held_to_its_rate() {
    let mut net = Net::new(false);
    net.establish_a_b();
    let b_pub = net.devices[B].public_key().unwrap();
    let junk = net.unknown_initiation();
    // Put B under load.
    let load: Vec<_> = (0..=UNDER_LOAD_HANDSHAKES_PER_SECOND)
        .map(|n| (flood_source(n), junk.to_vec()))
        .collect();
    for chunk in load.chunks(64) {
        net.receive(B, chunk);
    }
    // The attacker owns this address: it asks, gets a cookie, and sends
    // initiations with a valid mac2 as fast as it can.
    let own: SocketAddr = "198.18.200.1:4444".parse().unwrap();
    let mut cookie = CookieState::new(&b_pub);
    let mut msg = net.unknown_initiation();
    cookie.add_macs(net.now, &mut msg);
    net.to_flooders.clear();
    net.receive(B, &[(own, msg.to_vec())]);
    let (_, reply) = net
        .to_flooders
        .iter()
        .find(|(dst, _)| *dst == own)
        .expect("a cookie reply to the attacker")
        .clone();
    cookie
        .consume_reply(net.now, reply.as_slice().try_into().unwrap())
        .unwrap();
    cookie.add_macs(net.now, &mut msg);
    let before = net.devices[B].counters;
    for _ in 0..100 {
        net.receive(B, &[(own, msg.to_vec())]);
    }
    let c = net.devices[B].counters;
    assert_eq!(
        c.handshake_rejected - before.handshake_rejected,
        HANDSHAKE_BURST_PER_SOURCE,
        "one burst got DH work"
    );
    assert_eq!(
        c.handshake_rate_limited - before.handshake_rate_limited,
        100 - HANDSHAKE_BURST_PER_SOURCE
    );
    assert_eq!(c.cookie_replies_sent, before.cookie_replies_sent);
}

#[test]
fn one_batch_spends_a_bounded_budget_on_handshakes_and_data_still_flows() {
    let mut net = Net::new(false);
    net.establish_a_b();
    // A data packet from A, captured off the wire.
    net.send(A, b"in the middle of a flood");
    let (src, _, data) = net.wire.pop_back().expect("A's data message");
    let mut batch: Vec<_> = (0..100)
        .map(|n| (flood_source(n), net.unknown_initiation().to_vec()))
        .collect();
    batch.insert(50, (src, data));
    let before = net.devices[B].counters;
    net.receive(B, &batch);
    let c = net.devices[B].counters;
    assert_eq!(
        c.handshake_rejected - before.handshake_rejected,
        MAX_HANDSHAKES_PER_BATCH as u64
    );
    assert_eq!(
        c.handshake_over_budget - before.handshake_over_budget,
        100 - MAX_HANDSHAKES_PER_BATCH as u64
    );
    assert_eq!(net.delivered[B].len(), 1, "the data packet went through");
}

#[test]
fn under_a_flood_the_tunnel_carries_data_and_a_new_peer_gets_through() {
    let mut net = Net::new(true);
    net.establish_a_b();
    let crafted: Vec<_> = (0..16).map(|_| net.unknown_initiation()).collect();
    // A real initiation, captured: replayed from everywhere.
    net.send(C, b"first try");
    let (_, _, captured) = net.wire.pop_back().expect("C's initiation");
    assert_eq!(captured[0], TYPE_INITIATION);
    let mut sent = 0u32;
    let mut a_sent = 0;
    // 20 s at 2400 messages a second: bogus, unknown keys, replays.
    for step in 0..(20_000 / STEP.as_millis() as u32) {
        let batch: Vec<_> = (0..12)
            .map(|k| {
                let n = sent + k;
                let msg = match n % 3 {
                    0 => net.random_initiation(),
                    1 => crafted[n as usize % 16].to_vec(),
                    _ => captured.clone(),
                };
                (flood_source(n), msg)
            })
            .collect();
        sent += 12;
        net.receive(B, &batch);
        if step % 20 == 0 {
            net.send(A, b"ping");
            a_sent += 1;
        }
        net.step();
    }
    let c = net.devices[B].counters;
    assert!(c.cookie_replies_sent > sent as u64 / 2, "{c:?}");
    let a_received = net.delivered[B]
        .iter()
        .filter(|p| p.ends_with(b"ping"))
        .count();
    assert_eq!(a_received, a_sent, "every packet of the tunnel arrived");
    let c_peer = net.devices[C].peer_ids().next().unwrap();
    assert!(
        net.devices[C]
            .peer(c_peer)
            .unwrap()
            .counters
            .cookie_replies_received
            >= 1,
        "C was asked for a cookie"
    );
    assert!(
        net.delivered[B].iter().any(|p| p.ends_with(b"first try")),
        "C's handshake completed during the flood"
    );
}
