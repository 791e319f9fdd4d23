#![allow(clippy::disallowed_methods)] // tests pick an arbitrary origin for virtual time
//! Two devices over an in-memory link with a virtual clock: handshake,
//! data both ways, lost handshake packets, rekeying, key expiry, replays,
//! keepalives, cookies under load and roaming — all in simulated time.
//!
//! Each direction of the link is a seeded `LinkModel` (by default a
//! perfect line with `LATENCY` of delay), so the same impaired lines the
//! `braid netem` relay makes — jitter that reorders, loss, duplication,
//! corruption, cuts — can be put under the protocol here.

use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::consts::*;
use braid_core::device::Device;
use braid_core::link::{apply_corruption, Fate, JitterDist, LinkModel, LinkParams};
use braid_core::messages::{TYPE_DATA, TYPE_DATA_AES};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

const A_ADDR: &str = "198.18.0.1:51820";
const B_ADDR: &str = "198.18.0.2:51820";
const A_TUN: [u8; 4] = [198, 19, 0, 1];
const B_TUN: [u8; 4] = [198, 19, 0, 2];
const LATENCY: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    A,
    B,
}

struct InFlight {
    to: Side,
    from: SocketAddr,
    deliver_at: Instant,
    bytes: Vec<u8>,
    /// Message type before any corruption.
    kind: u8,
    corrupted: bool,
    /// The second copy of a duplicated datagram.
    duplicate: bool,
}

/// What the link handed to one side, as seen by the simulator, and what
/// the receiver made of the damaged copies.
#[derive(Default, Debug, Clone, Copy)]
struct Arrivals {
    /// Data messages (keepalives included) that arrived intact,
    /// first copies only.
    data: u64,
    /// Of those, the ones carrying a packet (not keepalives).
    data_with_payload: u64,
    duplicate_data: u64,
    corrupted_data: u64,
    /// Corrupted data copies whose contents still reached the TUN.
    corrupted_delivered: u64,
    /// Why the corrupted data copies were refused.
    corrupted_auth_failed: u64,
    corrupted_replayed: u64,
    corrupted_unknown_index: u64,
    corrupted_invalid: u64,
}

/// Decides the fate of each datagram: deliver (true) or lose (false).
type LinkFilter = Box<dyn FnMut(Side, &[u8]) -> bool>;

struct Pair {
    now: Instant,
    a: Device,
    b: Device,
    a_src: SocketAddr,
    link: VecDeque<InFlight>,
    /// Decides first (tests that drop chosen messages); what passes goes
    /// through the line models.
    filter: LinkFilter,
    to_a: LinkModel,
    to_b: LinkModel,
    arrivals_a: Arrivals,
    arrivals_b: Arrivals,
    /// Every datagram that crossed the link, to replay later.
    captured: Vec<(Side, SocketAddr, Vec<u8>)>,
    delivered_a: Vec<Vec<u8>>,
    delivered_b: Vec<Vec<u8>>,
    scratch: PacketBatch,
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

impl Pair {
    /// Over a perfect line with `LATENCY` of delay each way.
    fn new() -> Pair {
        Pair::with_line(
            LinkParams {
                delay: LATENCY,
                ..LinkParams::default()
            },
            0,
        )
    }

    /// Both ends behave as stock WireGuard (braid's extensions off).
    fn stock() -> Pair {
        let mut p = Pair::new();
        p.a.set_extensions(false);
        p.b.set_extensions(false);
        p
    }

    /// Over a line that does `params` in each direction (seeded apart).
    fn with_line(params: LinkParams, seed: u64) -> Pair {
        params.validate().unwrap();
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut a = Device::new(now, wall, [1; 32]);
        let mut b = Device::new(now, wall, [2; 32]);
        a.set_private_key(Some([0x11; 32]));
        b.set_private_key(Some([0x22; 32]));
        let pb = a.add_peer(b.public_key().unwrap()).unwrap();
        let pa = b.add_peer(a.public_key().unwrap()).unwrap();
        a.set_preshared_key(pb, [7; 32]);
        b.set_preshared_key(pa, [7; 32]);
        a.set_endpoint(pb, B_ADDR.parse().unwrap());
        a.add_allowed_ip(pb, IpAddr::V4(Ipv4Addr::from(B_TUN)), 32)
            .unwrap();
        b.add_allowed_ip(pa, IpAddr::V4(Ipv4Addr::from(A_TUN)), 32)
            .unwrap();
        Pair {
            now,
            a,
            b,
            a_src: A_ADDR.parse().unwrap(),
            link: VecDeque::new(),
            filter: Box::new(|_, _| true),
            to_a: LinkModel::new(params.clone(), 2 * seed),
            to_b: LinkModel::new(params, 2 * seed + 1),
            arrivals_a: Arrivals::default(),
            arrivals_b: Arrivals::default(),
            captured: Vec::new(),
            delivered_a: Vec::new(),
            delivered_b: Vec::new(),
            scratch: PacketBatch::new(64, 2048),
        }
    }

    fn device(&mut self, side: Side) -> &mut Device {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    fn line(&mut self, to: Side) -> &mut LinkModel {
        match to {
            Side::A => &mut self.to_a,
            Side::B => &mut self.to_b,
        }
    }

    fn set_cut(&mut self, cut: bool) {
        self.to_a.set_cut(cut);
        self.to_b.set_cut(cut);
    }

    fn src_of(&self, side: Side) -> SocketAddr {
        match side {
            Side::A => self.a_src,
            Side::B => B_ADDR.parse().unwrap(),
        }
    }

    /// Puts what the batch holds (datagrams from `from`) on the link.
    fn transmit(&mut self, from: Side, batch: &PacketBatch) {
        let src = self.src_of(from);
        for i in 0..batch.len() {
            let bytes = batch.packet(i);
            if bytes.is_empty() {
                continue;
            }
            let to = if from == Side::A { Side::B } else { Side::A };
            self.captured.push((to, src, bytes.to_vec()));
            if !(self.filter)(to, bytes) {
                continue;
            }
            let now = self.now;
            let Fate::Delivered { first, duplicate } = self.line(to).offer(now, bytes.len()) else {
                continue;
            };
            let copies = [(first, false)]
                .into_iter()
                .chain(duplicate.map(|d| (d, true)));
            for (copy, duplicate) in copies {
                let mut b = bytes.to_vec();
                if let Some(bit) = copy.corrupt_bit {
                    apply_corruption(&mut b, bit);
                }
                self.link.push_back(InFlight {
                    to,
                    from: src,
                    deliver_at: copy.at,
                    bytes: b,
                    kind: bytes[0],
                    corrupted: copy.corrupt_bit.is_some(),
                    duplicate,
                });
            }
        }
    }

    fn flush(&mut self, side: Side) {
        let mut out = PacketBatch::new(64, 2048);
        loop {
            out.clear();
            let now = self.now;
            let more = self.device(side).poll_transmit(now, &mut out);
            self.transmit(side, &out);
            if !more {
                break;
            }
        }
    }

    /// An IP packet enters `side`'s TUN.
    fn send(&mut self, side: Side, payload: &[u8]) {
        let (src, dst) = if side == Side::A {
            (A_TUN, B_TUN)
        } else {
            (B_TUN, A_TUN)
        };
        let pkt = ipv4_packet(src, dst, payload);
        let mut batch = std::mem::replace(&mut self.scratch, PacketBatch::new(1, 64));
        batch.clear();
        batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
            b[..pkt.len()].copy_from_slice(&pkt);
            pkt.len()
        });
        let now = self.now;
        self.device(side).encapsulate(now, &mut batch);
        self.transmit(side, &batch);
        self.scratch = batch;
        self.flush(side);
    }

    /// Hands one datagram to a device as if UDP received it; true when a
    /// packet came out of the tunnel.
    fn deliver(&mut self, to: Side, from: SocketAddr, bytes: &[u8]) -> bool {
        let mut batch = PacketBatch::new(1, 2048);
        batch.push_with(0, from, |b| {
            b[..bytes.len()].copy_from_slice(bytes);
            bytes.len()
        });
        let now = self.now;
        self.device(to).decapsulate(now, &mut batch);
        let mut out = !batch.packet(0).is_empty();
        if out {
            let p = batch.packet(0).to_vec();
            self.delivered(to).push(p);
        }
        out |= self.drain_tun(to) > 0;
        self.flush(to);
        out
    }

    fn delivered(&mut self, side: Side) -> &mut Vec<Vec<u8>> {
        match side {
            Side::A => &mut self.delivered_a,
            Side::B => &mut self.delivered_b,
        }
    }

    /// Packets the reorder window released, written after the batch.
    fn drain_tun(&mut self, side: Side) -> usize {
        let mut out = PacketBatch::new(64, 2048);
        let mut n = 0;
        loop {
            out.clear();
            let more = self.device(side).poll_tun(&mut out);
            for i in 0..out.len() {
                let p = out.packet(i).to_vec();
                self.delivered(side).push(p);
                n += 1;
            }
            if !more {
                return n;
            }
        }
    }

    /// Delivers what the link carried, keeping the books of `Arrivals`.
    fn arrive(&mut self, f: InFlight) {
        let before = (self.peer_counters(f.to), self.device(f.to).counters);
        let out = self.deliver(f.to, f.from, &f.bytes);
        let (pc, dc) = (self.peer_counters(f.to), self.device(f.to).counters);
        let r = match f.to {
            Side::A => &mut self.arrivals_a,
            Side::B => &mut self.arrivals_b,
        };
        if f.kind != TYPE_DATA && f.kind != TYPE_DATA_AES {
            return;
        }
        if f.corrupted {
            r.corrupted_data += 1;
            r.corrupted_delivered += out as u64;
            r.corrupted_auth_failed += pc.auth_failed - before.0.auth_failed;
            r.corrupted_replayed += pc.replayed - before.0.replayed;
            r.corrupted_unknown_index += dc.unknown_index - before.1.unknown_index;
            r.corrupted_invalid += dc.invalid_datagrams - before.1.invalid_datagrams;
        } else if f.duplicate {
            r.duplicate_data += 1;
        } else {
            r.data += 1;
            r.data_with_payload += (f.bytes.len() > 32) as u64;
        }
    }

    /// Advances virtual time to `until`, delivering datagrams and firing
    /// timers in order.
    fn run_until(&mut self, until: Instant) {
        loop {
            let next_packet = self.link.iter().map(|f| f.deliver_at).min();
            let next_timer = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let next = [next_packet, next_timer].into_iter().flatten().min();
            match next {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    if next_packet == Some(t) {
                        let pos = self.link.iter().position(|f| f.deliver_at == t).unwrap();
                        let f = self.link.remove(pos).unwrap();
                        self.arrive(f);
                    } else {
                        let now = self.now;
                        self.a.handle_timeout(now);
                        self.b.handle_timeout(now);
                        self.drain_tun(Side::A);
                        self.drain_tun(Side::B);
                        self.flush(Side::A);
                        self.flush(Side::B);
                    }
                }
                _ => break,
            }
        }
        self.now = until;
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    fn peer_counters(&self, side: Side) -> braid_core::peer::PeerCounters {
        let d = if side == Side::A { &self.a } else { &self.b };
        let pid = d.peer_ids().next().unwrap();
        d.peer_info(pid).unwrap().counters
    }

    fn last_handshake(&self, side: Side) -> Option<SystemTime> {
        let d = if side == Side::A { &self.a } else { &self.b };
        d.peer_info(d.peer_ids().next().unwrap())
            .unwrap()
            .last_handshake
    }
}

fn payload(n: u32) -> Vec<u8> {
    n.to_be_bytes().repeat(10)
}

#[test]
fn handshake_then_data_both_ways() {
    let mut p = Pair::new();
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_millis(100));
    assert_eq!(
        p.delivered_b.len(),
        1,
        "staged packet delivered after the handshake"
    );
    assert_eq!(&p.delivered_b[0][20..], &payload(1)[..]);
    p.send(Side::B, &payload(2));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.delivered_a.len(), 1);
    assert!(p.last_handshake(Side::A).is_some() && p.last_handshake(Side::B).is_some());
    let (ca, cb) = (p.peer_counters(Side::A), p.peer_counters(Side::B));
    assert_eq!(ca.handshakes_initiated, 1);
    assert_eq!(cb.handshake_responses_sent, 1);
    assert_eq!(ca.tx_packets, 1);
    assert_eq!(cb.rx_packets, 1);
    assert!(ca.tx_bytes > 0 && cb.rx_bytes > 0);
}

#[test]
fn lost_initiations_are_retried_with_jitter() {
    let mut p = Pair::new();
    let mut lost = 0;
    p.filter = Box::new(move |_, bytes| {
        if bytes[0] == 1 && lost < 2 {
            lost += 1;
            return false;
        }
        true
    });
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_secs(9));
    assert!(
        p.delivered_b.is_empty(),
        "two initiations lost: nothing yet"
    );
    p.run_for(Duration::from_secs(3));
    assert_eq!(
        p.delivered_b.len(),
        1,
        "third initiation after 2 × (5 s + jitter) gets through"
    );
    assert_eq!(p.peer_counters(Side::A).handshakes_initiated, 3);
}

#[test]
fn lost_response_is_recovered_by_retry() {
    let mut p = Pair::new();
    let mut lost = false;
    p.filter = Box::new(move |_, bytes| {
        if bytes[0] == 2 && !lost {
            lost = true;
            return false;
        }
        true
    });
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_secs(6));
    assert_eq!(p.delivered_b.len(), 1);
    assert_eq!(p.peer_counters(Side::B).handshake_responses_sent, 2);
}

#[test]
fn handshake_gives_up_after_rekey_attempt_time() {
    let mut p = Pair::new();
    p.filter = Box::new(|to, _| to == Side::A); // B never hears anything
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_secs(200));
    let n = p.peer_counters(Side::A).handshakes_initiated;
    assert_eq!(
        n as u32,
        MAX_TIMER_HANDSHAKES + 2,
        "first try + retries, then silence"
    );
}

#[test]
fn rekey_during_steady_traffic_loses_nothing() {
    let mut p = Pair::new();
    let mut sent = 0u32;
    // One packet each way every 500 ms for 7 minutes: several rekeys.
    for _ in 0..(7 * 60 * 2) {
        sent += 1;
        p.send(Side::A, &payload(sent));
        p.send(Side::B, &payload(sent));
        p.run_for(Duration::from_millis(500));
    }
    p.run_for(Duration::from_secs(1));
    assert_eq!(
        p.delivered_b.len() as u32,
        sent,
        "A→B lost nothing across rekeys"
    );
    assert_eq!(
        p.delivered_a.len() as u32,
        sent,
        "B→A lost nothing across rekeys"
    );
    let ca = p.peer_counters(Side::A);
    let cb = p.peer_counters(Side::B);
    let handshakes = ca.handshakes_completed + cb.handshakes_completed;
    // 420 s / 120 s per rekey: at least 3 new sessions beyond the first.
    assert!(handshakes >= 2 * 4, "sessions were renewed: {handshakes}");
    for (i, pkt) in p.delivered_b.iter().enumerate() {
        assert_eq!(&pkt[20..], &payload(i as u32 + 1)[..], "in order");
    }
}

#[test]
fn expired_session_is_not_used_and_key_material_is_zeroed() {
    let mut p = Pair::new();
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.delivered_b.len(), 1);
    // Silence past REJECT_AFTER_TIME: the session must not be used.
    p.run_for(REJECT_AFTER_TIME + Duration::from_secs(1));
    let before = p.peer_counters(Side::A).handshakes_initiated;
    let captured = p.captured.len();
    p.send(Side::A, &payload(2));
    assert_eq!(
        p.captured[captured].2[0], 1,
        "an initiation, not data on the dead session"
    );
    assert_eq!(p.peer_counters(Side::A).handshakes_initiated, before + 1);
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.delivered_b.len(), 2);

    // Data sealed with an expired session is refused by the receiver.
    let old_data = p
        .captured
        .iter()
        .find(|(to, _, b)| *to == Side::B && b[0] == 4 && b.len() > 32)
        .unwrap()
        .clone();
    p.run_for(REJECT_AFTER_TIME * 3 + Duration::from_secs(1));
    p.deliver(Side::B, old_data.1, &old_data.2);
    assert_eq!(
        p.delivered_b.len(),
        2,
        "nothing delivered from zeroed sessions"
    );
    // After 3 × REJECT_AFTER_TIME of silence every key is gone: new traffic
    // needs a new handshake.
    let before = p.peer_counters(Side::B).handshakes_initiated;
    p.send(Side::B, &payload(3));
    assert_eq!(p.peer_counters(Side::B).handshakes_initiated, before + 1);
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.delivered_a.len(), 1, "B reached A over a fresh session");
}

#[test]
fn replayed_data_and_initiations_are_dropped() {
    let mut p = Pair::new();
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_millis(100));
    p.send(Side::A, &payload(2));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.delivered_b.len(), 2);
    let replays: Vec<_> = p
        .captured
        .iter()
        .filter(|(to, _, _)| *to == Side::B)
        .cloned()
        .collect();
    for (to, from, bytes) in &replays {
        p.deliver(*to, *from, bytes);
    }
    assert_eq!(p.delivered_b.len(), 2, "no replayed packet reached the TUN");
    let cb = p.peer_counters(Side::B);
    assert_eq!(cb.replayed, 2, "both data packets counted as replays");
    assert_eq!(
        cb.handshake_responses_sent, 1,
        "the replayed initiation got no response"
    );
    assert!(p.b.counters.handshake_flood_dropped >= 1);
}

#[test]
fn keepalive_answers_one_way_traffic() {
    let mut p = Pair::new();
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_millis(100));
    let before = p.peer_counters(Side::B).keepalives_sent;
    p.run_for(KEEPALIVE_TIMEOUT + Duration::from_millis(100));
    assert_eq!(
        p.peer_counters(Side::B).keepalives_sent,
        before + 1,
        "B confirms receipt"
    );
    assert!(p.peer_counters(Side::A).keepalives_received >= 1);
}

#[test]
fn persistent_keepalive_brings_the_tunnel_up_and_ticks() {
    // Between braid peers probes keep NAT bindings alive; stock peers tick.
    let mut p = Pair::stock();
    let pid = p.a.peer_ids().next().unwrap();
    let now = p.now;
    p.a.set_persistent_keepalive(now, pid, 25);
    p.flush(Side::A);
    p.run_for(Duration::from_secs(1));
    assert!(
        p.last_handshake(Side::B).is_some(),
        "handshake without any traffic"
    );
    let before = p.peer_counters(Side::A).keepalives_sent;
    p.run_for(Duration::from_secs(100));
    let ticks = p.peer_counters(Side::A).keepalives_sent - before;
    assert!((3..=5).contains(&ticks), "one keepalive per 25 s: {ticks}");
}

#[test]
fn roaming_follows_the_new_source_address() {
    let mut p = Pair::stock();
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_millis(100));
    p.a_src = "198.18.9.9:40000".parse().unwrap();
    p.send(Side::A, &payload(2));
    p.run_for(Duration::from_millis(100));
    let pid = p.b.peer_ids().next().unwrap();
    assert_eq!(p.b.peer_info(pid).unwrap().endpoint, Some(p.a_src));
}

#[test]
fn forged_and_garbage_datagrams_change_nothing() {
    let mut p = Pair::new();
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_millis(100));
    let from: SocketAddr = "198.18.7.7:1".parse().unwrap();
    let data = p
        .captured
        .iter()
        .rev()
        .find(|(to, _, b)| *to == Side::B && b[0] == 4)
        .unwrap()
        .2
        .clone();
    // A fresh counter, so the packet passes the replay check and must fail
    // authentication.
    let mut forged = data.clone();
    forged[8..16].copy_from_slice(&1000u64.to_le_bytes());
    p.deliver(Side::B, from, &forged);
    let with_header = |ty: u8, len: usize| {
        let mut m = vec![0xab; len];
        m[0] = ty;
        m[1..4].fill(0);
        m
    };
    for junk in [
        vec![],
        vec![1, 2, 3],
        vec![4; 31],
        vec![1; 148],
        vec![9; 200],
    ] {
        p.deliver(Side::B, from, &junk);
    }
    for junk in [
        with_header(1, 148),
        with_header(2, 92),
        with_header(3, 64),
        with_header(4, 64),
    ] {
        p.deliver(Side::B, from, &junk);
    }
    let pid = p.b.peer_ids().next().unwrap();
    assert_eq!(
        p.b.peer_info(pid).unwrap().endpoint,
        Some(p.a_src),
        "no roaming to a forger"
    );
    assert_eq!(p.peer_counters(Side::B).auth_failed, 1);
    let c = p.b.counters;
    assert!(c.invalid_datagrams >= 3 && c.invalid_mac >= 2, "{c:?}");
    p.send(Side::A, &payload(2));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.delivered_b.len(), 2, "the tunnel still works");
}

#[test]
fn under_load_the_responder_demands_cookies_and_the_peer_gets_through() {
    let mut p = Pair::new();
    // Flood B with copies of a valid-mac1 initiation from many addresses.
    p.send(Side::A, &payload(1));
    let init = p
        .captured
        .iter()
        .find(|(_, _, b)| b[0] == 1)
        .unwrap()
        .2
        .clone();
    p.link.clear();
    for i in 0..(UNDER_LOAD_HANDSHAKES_PER_SECOND + 10) {
        let from = SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(
                198,
                18,
                100 + (i / 250) as u8,
                (i % 250) as u8,
            )),
            1000,
        );
        p.deliver(Side::B, from, &init);
    }
    assert!(
        p.b.counters.cookie_replies_sent >= 1,
        "switched to cookie replies"
    );
    // A's retry gets a cookie reply, then succeeds with mac2.
    p.run_for(Duration::from_secs(12));
    assert!(p.peer_counters(Side::A).cookie_replies_received >= 1);
    assert_eq!(
        p.delivered_b.len(),
        1,
        "the legitimate peer completed its handshake"
    );
}

// ---- Over impaired lines (the link model of `braid netem`) ----

/// Two-sided 99.9 % normal quantile.
const Z: f64 = 3.2905;

/// "3 ms ± 1 ms, 1 % loss": uniform jitter (which reorders) and loss.
fn rough_line() -> LinkParams {
    LinkParams {
        delay: Duration::from_millis(3),
        jitter: Duration::from_millis(1),
        jitter_dist: JitterDist::Uniform,
        loss: 0.01,
        ..LinkParams::default()
    }
}

/// True when `k` of `n` fits probability `p` at 99.9 %.
fn binomial_ok(k: u64, n: u64, p: f64) -> bool {
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (k as f64 - n as f64 * p).abs() <= Z * sd + 1.0
}

/// Sequence numbers of delivered packets, checking each is intact.
fn seqs(delivered: &[Vec<u8>]) -> Vec<u32> {
    delivered
        .iter()
        .map(|p| {
            let n = u32::from_be_bytes(p[20..24].try_into().unwrap());
            assert_eq!(&p[20..], &payload(n)[..], "packet {n} intact");
            n
        })
        .collect()
}

fn distinct(xs: &[u32]) -> usize {
    let mut v = xs.to_vec();
    v.sort_unstable();
    v.dedup();
    v.len()
}

/// Pairs of packets that arrived in the opposite order to their sending.
fn inversions(xs: &[u32]) -> usize {
    xs.windows(2).filter(|w| w[1] < w[0]).count()
}

/// Sends probes from A until the handshake is done and one got through,
/// however many the line loses; then forgets what was delivered.
fn bring_up(p: &mut Pair) {
    for i in 0..60 {
        p.send(Side::A, &payload(1_000_000 + i));
        p.run_for(Duration::from_secs(1));
        if !p.delivered_b.is_empty() && p.last_handshake(Side::A).is_some() {
            p.delivered_a.clear();
            p.delivered_b.clear();
            p.arrivals_a = Arrivals::default();
            p.arrivals_b = Arrivals::default();
            return;
        }
    }
    panic!("the tunnel never came up");
}

/// `n` packets each way, one every `gap`; then waits for the stragglers.
fn stream(p: &mut Pair, first: u32, n: u32, gap: Duration) {
    for i in first..first + n {
        p.send(Side::A, &payload(i));
        p.send(Side::B, &payload(i));
        p.run_for(gap);
    }
    p.run_for(Duration::from_secs(1));
}

#[test]
fn rough_line_carries_a_steady_stream_both_ways() {
    const N: u32 = 5000;
    let mut p = Pair::with_line(rough_line(), 1);
    bring_up(&mut p);
    // One packet each way per millisecond: faster than the 2 ms range of
    // the jitter, so the line reorders.
    stream(&mut p, 0, N, Duration::from_millis(1));
    for (side, delivered, arrivals, line) in [
        (Side::B, &p.delivered_b, p.arrivals_b, p.to_b.counters()),
        (Side::A, &p.delivered_a, p.arrivals_a, p.to_a.counters()),
    ] {
        let got = seqs(delivered);
        let n = got.len() as u64;
        assert!(
            binomial_ok(n, N as u64, 0.99),
            "to {side:?}: {n} of {N} arrived over a 1 % loss line"
        );
        assert_eq!(distinct(&got), got.len(), "to {side:?}: nothing twice");
        // Every data message the line delivered came out of the tunnel:
        // the only losses are the line's.
        assert_eq!(n, arrivals.data_with_payload, "to {side:?}: {arrivals:?}");
        assert!(line.dropped_loss > 0 && line.reordered > 0, "{line:?}");
        assert!(
            inversions(&got) > 0,
            "to {side:?}: reordered packets are accepted"
        );
        let c = p.peer_counters(side);
        assert_eq!((c.replayed, c.auth_failed), (0, 0), "to {side:?}: {c:?}");
    }
}

#[test]
fn corrupted_datagrams_fail_authentication() {
    const N: u32 = 3000;
    let params = LinkParams {
        corrupt: 0.05,
        ..rough_line()
    };
    let mut p = Pair::with_line(params, 2);
    bring_up(&mut p);
    stream(&mut p, 0, N, Duration::from_millis(1));
    for (side, delivered, r) in [
        (Side::B, &p.delivered_b, p.arrivals_b),
        (Side::A, &p.delivered_a, p.arrivals_a),
    ] {
        // `seqs` checks that every packet out of the tunnel is intact.
        let got = seqs(delivered);
        assert_eq!(distinct(&got), got.len());
        assert_eq!(got.len() as u64, r.data_with_payload, "to {side:?}: {r:?}");
        assert_eq!(r.corrupted_delivered, 0, "to {side:?}: {r:?}");
        // About 5 % of the data copies that arrived were damaged.
        let arrived = r.data + r.corrupted_data;
        assert!(
            binomial_ok(r.corrupted_data, arrived, 0.05),
            "to {side:?}: {r:?}"
        );
        // Each was refused for exactly one reason: mostly the tag; a flip
        // in the header can make the type, the receiver index or the
        // counter (then maybe a replay) wrong first.
        let refused = r.corrupted_auth_failed
            + r.corrupted_replayed
            + r.corrupted_unknown_index
            + r.corrupted_invalid;
        assert_eq!(refused, r.corrupted_data, "to {side:?}: {r:?}");
        assert!(
            r.corrupted_auth_failed * 10 >= r.corrupted_data * 7,
            "to {side:?}: most by authentication: {r:?}"
        );
        let c = p.peer_counters(side);
        assert_eq!(c.auth_failed, r.corrupted_auth_failed, "to {side:?}");
        assert_eq!(c.replayed, r.corrupted_replayed, "to {side:?}");
    }
    // Damage never cost the session: no new handshake was needed.
    assert_eq!(p.peer_counters(Side::A).handshakes_initiated, 1);
}

#[test]
fn duplicated_datagrams_are_dropped_as_replays() {
    const N: u32 = 3000;
    let params = LinkParams {
        duplicate: 0.05,
        ..rough_line()
    };
    let mut p = Pair::with_line(params, 3);
    bring_up(&mut p);
    stream(&mut p, 0, N, Duration::from_millis(1));
    for (side, delivered, r, line) in [
        (Side::B, &p.delivered_b, p.arrivals_b, p.to_b.counters()),
        (Side::A, &p.delivered_a, p.arrivals_a, p.to_a.counters()),
    ] {
        let got = seqs(delivered);
        assert_eq!(
            distinct(&got),
            got.len(),
            "to {side:?}: delivered count equals unique count"
        );
        assert_eq!(got.len() as u64, r.data_with_payload, "to {side:?}: {r:?}");
        assert!(
            binomial_ok(got.len() as u64, N as u64, 0.99),
            "{}",
            got.len()
        );
        assert!(line.duplicated > 0);
        let c = p.peer_counters(side);
        assert!(c.replayed > 0, "to {side:?}");
        // Exactly one of each pair of copies is refused as a replay.
        assert_eq!(c.replayed, r.duplicate_data, "to {side:?}: {r:?}");
        assert_eq!(c.auth_failed, 0);
    }
}

/// `secs` of traffic both ways, a packet every 100 ms, numbered on from
/// `seq`.
fn phase(p: &mut Pair, seq: &mut u32, secs: u32) {
    stream(p, *seq, secs * 10, Duration::from_millis(100));
    *seq += secs * 10;
}

/// Traffic both ways all along; the line is cut for 30 s, then restored:
/// the tunnel must come back by itself.
fn cut_and_restore(params: LinkParams, seed: u64) {
    let mut p = Pair::with_line(params, seed);
    bring_up(&mut p);
    let mut seq = 0;
    phase(&mut p, &mut seq, 10);
    let before = (p.peer_counters(Side::A), p.peer_counters(Side::B));
    let handshake_before = p.last_handshake(Side::A).unwrap();
    let (delivered_a, delivered_b) = (p.delivered_a.len(), p.delivered_b.len());

    p.set_cut(true);
    phase(&mut p, &mut seq, 30);
    assert!(p.to_a.counters().dropped_cut > 0 && p.to_b.counters().dropped_cut > 0);
    let initiated = p.peer_counters(Side::A).handshakes_initiated
        + p.peer_counters(Side::B).handshakes_initiated
        - before.0.handshakes_initiated
        - before.1.handshakes_initiated;
    assert!(
        initiated >= 2,
        "unanswered traffic starts handshakes: {initiated}"
    );
    // Nothing crosses a cut line (beyond what was in flight when cut).
    assert!(p.delivered_a.len() - delivered_a <= 10 && p.delivered_b.len() - delivered_b <= 10);

    p.set_cut(false);
    let restored_at = seq;
    phase(&mut p, &mut seq, 30);
    assert!(
        p.last_handshake(Side::A).unwrap() > handshake_before,
        "a new handshake after the cut"
    );
    // From 10 s after the restoration on, traffic flows as before.
    let settled = restored_at + 100;
    for (side, delivered) in [(Side::B, &p.delivered_b), (Side::A, &p.delivered_a)] {
        let after = seqs(delivered).iter().filter(|&&n| n >= settled).count() as u64;
        let sent = (seq - settled) as u64;
        let loss = p.to_b.params().loss;
        assert!(
            binomial_ok(after, sent, 1.0 - loss),
            "to {side:?}: {after} of {sent} after recovery"
        );
        let c = p.peer_counters(side);
        assert_eq!((c.replayed, c.auth_failed), (0, 0), "to {side:?}: {c:?}");
    }
}

#[test]
fn cut_line_recovers_by_itself() {
    // On the perfect line (no loss) every packet after recovery arrives.
    cut_and_restore(
        LinkParams {
            delay: LATENCY,
            ..LinkParams::default()
        },
        4,
    );
}

#[test]
fn cut_rough_line_recovers_by_itself() {
    cut_and_restore(rough_line(), 5);
}

#[test]
fn braid_peers_learn_a_new_path_and_the_old_one_goes_down() {
    let mut p = Pair::new();
    p.send(Side::A, &payload(1));
    p.run_for(Duration::from_millis(500));
    let pid = p.b.peer_ids().next().unwrap();
    let info = p.b.peer_info(pid).unwrap();
    assert!(info.speaks_braid, "hello exchanged");
    assert_eq!(info.paths.len(), 1);
    assert!(info.paths[0].is_up());
    assert!(info.paths[0].srtt.is_some(), "probes measured an RTT");
    // A moves to another address: B learns it as a second path, the old
    // one dies within a second and the endpoint follows.
    p.a_src = "198.18.9.9:40000".parse().unwrap();
    for n in 2..12 {
        p.send(Side::A, &payload(n));
        p.run_for(Duration::from_millis(100));
    }
    let info = p.b.peer_info(pid).unwrap();
    assert_eq!(info.paths.len(), 2, "{:?}", info.paths);
    assert!(!info.paths[0].is_up() && info.paths[1].is_up());
    assert_eq!(info.endpoint, Some(p.a_src));
    p.send(Side::B, &payload(99));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.delivered_a.len(), 1, "B answers on the live path");
}
