//! A responder under a handshake flood, in simulated time
//! (`braid_core::testing`): bogus and replayed initiations from many
//! sources switch it to cookie replies, a source that earned a cookie is
//! held to its rate, no batch spends more than its budget on
//! Diffie-Hellman (the rest wait in the initiation queue), and through it all the existing tunnel carries data and
//! a legitimate new peer completes its handshake.

use braid_core::consts::*;
use braid_core::cookie::CookieState;
use braid_core::messages::{COOKIE_REPLY_LEN, INITIATION_LEN, TYPE_COOKIE_REPLY, TYPE_INITIATION};
use braid_core::noise::{self, LocalStatic, RemoteStatic};
use braid_core::ratelimiter::HANDSHAKE_BURST_PER_SOURCE;
use braid_core::testing::{clock, Datagram, Net, NodeId, A, B, C};
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use x25519_dalek::StaticSecret;

const STEP: Duration = Duration::from_millis(5);

/// The n-th flood source, all outside the net.
fn flood_source(n: u32) -> SocketAddr {
    let ip = u32::from(Ipv4Addr::new(198, 18, 100, 0)) + n % 20_000;
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), 40_000)
}

/// Devices A, B (the responder under attack) and C on a zero-delay wire;
/// what B sends to a flood source leaves the net (it stays in the
/// capture), and the flood's own randomness.
struct Lab {
    net: Net,
    rng: ChaCha20Rng,
}

impl Lab {
    /// A and B are peers; with `with_c`, C is a peer of B too (not yet
    /// talking).
    fn new(with_c: bool) -> Lab {
        let mut net = Net::new();
        for _ in 0..if with_c { 3 } else { 2 } {
            net.add_node();
        }
        let b_addr = net.addr(B);
        for client in (0..net.nodes.len()).filter(|&i| i != B) {
            let (to_b, _) = net.peers(client, B);
            net[client].device.set_endpoint(to_b, b_addr);
        }
        Lab {
            net,
            rng: ChaCha20Rng::from_seed([9; 32]),
        }
    }

    /// A packet enters `from`'s TUN, bound for B's (or, from B, for A's).
    fn send(&mut self, from: NodeId, payload: &[u8]) {
        let to = if from == B { A } else { B };
        self.net.send(from, to, payload);
    }

    /// Hands `datagrams` to device `to` as one received batch; it answers.
    fn receive(&mut self, to: NodeId, datagrams: &[(SocketAddr, Vec<u8>)]) {
        let batch: Vec<(SocketAddr, &[u8])> =
            datagrams.iter().map(|(src, b)| (*src, &b[..])).collect();
        self.net.receive(to, &batch);
        self.net.flush(to);
    }

    /// What B sent to the flood sources.
    fn to_flooders(&self) -> impl Iterator<Item = &Datagram> {
        self.net.capture.iter().filter(|d| d.to.is_none())
    }

    /// One step of virtual time: timers fire, the wire carries all.
    fn step(&mut self) {
        self.net.run_for(STEP);
    }

    /// An initiation to B from a fresh random static key (unknown to B)
    /// with a valid mac1: the most expensive thing to throw at B.
    fn unknown_initiation(&mut self) -> [u8; INITIATION_LEN] {
        let b_pub = self.net[B].device.public_key().unwrap();
        let mut key = [0u8; 32];
        self.rng.fill_bytes(&mut key);
        let stranger = LocalStatic::new(key);
        let remote = RemoteStatic::new(&stranger, b_pub, [0; 32]);
        let mut eph = [0u8; 32];
        self.rng.fill_bytes(&mut eph);
        let timestamp = noise::tai64n(clock::WALL_SECS, 0);
        let mut msg = [0u8; INITIATION_LEN];
        noise::create_initiation(
            &stranger,
            &remote,
            StaticSecret::from(eph),
            &timestamp,
            self.rng.next_u32(),
            &mut msg,
        )
        .expect("B's key is not of low order");
        CookieState::new(&b_pub).add_macs(self.net.now, &mut msg);
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
        self.net.settle();
        assert_eq!(self.net[B].delivered.len(), 1, "A reached B");
        self.net[B].delivered.clear();
    }
}

#[test]
fn bogus_initiations_cost_a_mac_check_and_get_no_answer() {
    let mut net = Lab::new(false);
    net.establish_a_b();
    let before = net.net[B].device.counters;
    let mut sent = 0;
    for step in 0..200u32 {
        let batch: Vec<_> = (0..50)
            .map(|k| (flood_source(step * 50 + k), net.random_initiation()))
            .collect();
        net.receive(B, &batch);
        sent += batch.len() as u64;
        net.step();
    }
    let c = net.net[B].device.counters;
    assert_eq!(c.invalid_mac - before.invalid_mac, sent);
    assert_eq!(c.cookie_replies_sent, 0, "a wrong mac1 is never answered");
    assert_eq!(c.handshake_rejected, before.handshake_rejected);
    assert!(net.to_flooders().next().is_none());
    net.send(A, b"still there");
    net.net.settle();
    assert_eq!(
        net.net[B].delivered.len(),
        1,
        "the tunnel still carries data"
    );
}

#[test]
fn a_flood_of_valid_mac1_initiations_gets_cookie_replies() {
    let mut net = Lab::new(false);
    net.establish_a_b();
    let crafted: Vec<_> = (0..16).map(|_| net.unknown_initiation()).collect();
    let before = net.net[B].device.counters;
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
    let c = net.net[B].device.counters;
    let dh_work = c.handshake_rejected - before.handshake_rejected;
    assert!(
        dh_work <= UNDER_LOAD_HANDSHAKES_PER_SECOND as u64,
        "DH work only until load is detected: {dh_work}"
    );
    let cookies = c.cookie_replies_sent - before.cookie_replies_sent;
    assert!(
        cookies + dh_work + c.handshake_queue_full + net.net[B].device.queued_initiations() as u64
            >= sent as u64 - 1,
        "every other message got a cookie reply: {c:?}"
    );
    let replies = net
        .to_flooders()
        .filter(|d| d.bytes.len() == COOKIE_REPLY_LEN && d.kind() == TYPE_COOKIE_REPLY)
        .count() as u64;
    assert_eq!(replies, cookies, "each cookie reply went to its source");
}

#[test]
fn a_source_holding_a_cookie_is_held_to_its_rate() {
    let mut net = Lab::new(false);
    net.establish_a_b();
    let b_pub = net.net[B].device.public_key().unwrap();
    let junk = net.unknown_initiation();
    // Put B under load.
    let load: Vec<_> = (0..=UNDER_LOAD_HANDSHAKES_PER_SECOND)
        .map(|n| (flood_source(n), junk.to_vec()))
        .collect();
    for chunk in load.chunks(64) {
        net.receive(B, chunk);
    }
    // What the load left queued is answered (still under load after).
    net.net.settle();
    assert_eq!(net.net[B].device.queued_initiations(), 0);
    // The attacker owns this address: it asks, gets a cookie, and sends
    // initiations with a valid mac2 as fast as it can.
    let own: SocketAddr = "198.18.200.1:4444".parse().unwrap();
    let mut cookie = CookieState::new(&b_pub);
    let mut msg = net.unknown_initiation();
    cookie.add_macs(net.net.now, &mut msg);
    net.net.capture.clear();
    net.receive(B, &[(own, msg.to_vec())]);
    let reply = net
        .to_flooders()
        .find(|d| d.dst == own)
        .expect("a cookie reply to the attacker")
        .bytes
        .clone();
    cookie
        .consume_reply(net.net.now, reply.as_slice().try_into().unwrap())
        .unwrap();
    cookie.add_macs(net.net.now, &mut msg);
    let before = net.net[B].device.counters;
    for _ in 0..100 {
        net.receive(B, &[(own, msg.to_vec())]);
    }
    let c = net.net[B].device.counters;
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
    // The rest of the batch's initiations wait in the queue for later
    // wake-ups (`initiation_queue.rs`), not DH work in this batch.
    let mut net = Lab::new(false);
    net.establish_a_b();
    // A data packet from A, captured off the wire.
    net.send(A, b"in the middle of a flood");
    let data = net.net.take_last_in_flight().expect("A's data message");
    let mut batch: Vec<_> = (0..100)
        .map(|n| (flood_source(n), net.unknown_initiation().to_vec()))
        .collect();
    batch.insert(50, (data.src, data.bytes));
    let before = net.net[B].device.counters;
    net.receive(B, &batch);
    let c = net.net[B].device.counters;
    assert_eq!(
        c.handshake_rejected - before.handshake_rejected,
        MAX_HANDSHAKES_PER_BATCH as u64
    );
    assert_eq!(
        net.net[B].device.queued_initiations(),
        100 - MAX_HANDSHAKES_PER_BATCH as usize
    );
    assert_eq!(c.handshake_over_budget, before.handshake_over_budget);
    assert_eq!(
        net.net[B].delivered.len(),
        1,
        "the data packet went through"
    );
    // Later wake-ups do the rest's DH work, a budget at a time.
    net.net.settle();
    let c = net.net[B].device.counters;
    assert_eq!(c.handshake_rejected - before.handshake_rejected, 100);
    assert_eq!(net.net[B].device.queued_initiations(), 0);
}

#[test]
fn under_a_flood_the_tunnel_carries_data_and_a_new_peer_gets_through() {
    let mut net = Lab::new(true);
    net.establish_a_b();
    let crafted: Vec<_> = (0..16).map(|_| net.unknown_initiation()).collect();
    // A real initiation, captured: replayed from everywhere.
    net.send(C, b"first try");
    let captured = net.net.take_last_in_flight().expect("C's initiation").bytes;
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
    let c = net.net[B].device.counters;
    assert!(c.cookie_replies_sent > sent as u64 / 2, "{c:?}");
    let a_received = net.net[B]
        .delivered
        .iter()
        .filter(|p| p.ends_with(b"ping"))
        .count();
    assert_eq!(a_received, a_sent, "every packet of the tunnel arrived");
    let c_peer = net.net[C].device.peer_ids().next().unwrap();
    assert!(
        net.net[C]
            .device
            .peer(c_peer)
            .unwrap()
            .counters
            .cookie_replies_received
            >= 1,
        "C was asked for a cookie"
    );
    assert!(
        net.net[B]
            .delivered
            .iter()
            .any(|p| p.ends_with(b"first try")),
        "C's handshake completed during the flood"
    );
}
