//! The responder's initiation queue, in simulated time: admitted
//! initiations over a batch's budget wait and are answered by later
//! batches and wake-ups (none is dropped for the budget), a full queue
//! drops and counts, an initiation that waited `REKEY_TIMEOUT` is dropped
//! unanswered, and a queue an eighth full puts the device under load (as
//! wireguard-go judges it).

use braid_core::batch::PacketBatch;
use braid_core::consts::*;
use braid_core::cookie::CookieState;
use braid_core::device::Device;
use braid_core::messages::{
    self, COOKIE_REPLY_LEN, INITIATION_LEN, RESPONSE_LEN, TYPE_COOKIE_REPLY, TYPE_RESPONSE,
};
use braid_core::noise::{self, InitiatorHandshake, LocalStatic, RemoteStatic};
use braid_core::testing::{clock, device, transmit};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use x25519_dalek::StaticSecret;

/// The n-th initiator's address, each its own.
fn source(n: usize) -> SocketAddr {
    let ip = u32::from(Ipv4Addr::new(198, 18, 64, 0)) + n as u32;
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), 40_000)
}

/// Hands `datagrams` to `d` as one received batch.
fn receive_batch(d: &mut Device, now: Instant, datagrams: &[(SocketAddr, Vec<u8>)]) {
    let mut batch = PacketBatch::new(datagrams.len(), 2048);
    for (src, bytes) in datagrams {
        batch.push_with(0, *src, |b| {
            b[..bytes.len()].copy_from_slice(bytes);
            bytes.len()
        });
    }
    d.decapsulate(now, &mut batch);
}

/// An initiator of the responder `b_pub`: its keys and its handshake.
struct Initiator {
    local: LocalStatic,
    remote: RemoteStatic,
    state: Option<InitiatorHandshake>,
    cookie: CookieState,
}

impl Initiator {
    fn new(n: usize, b_pub: [u8; 32]) -> Initiator {
        let mut key = [0u8; 32];
        // Past the bits x25519 clamps: every n its own key.
        key[8..16].copy_from_slice(&(n as u64 + 1).to_le_bytes());
        key[31] = 0x40;
        let local = LocalStatic::new(key);
        let remote = RemoteStatic::new(&local, b_pub, [0; 32]);
        Initiator {
            local,
            remote,
            state: None,
            cookie: CookieState::new(&b_pub),
        }
    }

    fn public(&self) -> [u8; 32] {
        self.local.public
    }

    /// A fresh initiation with sender index `index`, macs as the
    /// initiator has them (mac2 once it holds a cookie).
    fn initiation(&mut self, now: Instant, index: u32) -> Vec<u8> {
        let mut eph = [7u8; 32];
        eph[..4].copy_from_slice(&index.to_le_bytes());
        let timestamp = noise::tai64n(clock::WALL_SECS, index);
        let mut msg = [0u8; INITIATION_LEN];
        let state = noise::create_initiation(
            &self.local,
            &self.remote,
            StaticSecret::from(eph),
            &timestamp,
            index,
            &mut msg,
        )
        .expect("the responder's key is not of low order");
        self.cookie.add_macs(now, &mut msg);
        self.state = Some(state);
        msg.to_vec()
    }
}

/// The responder and `n` initiators it knows as peers.
/// One initiation from each initiator, each from a source address of its
/// own, made at `now`.
fn initiations(initiators: &mut [Initiator], now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
    initiators
        .iter_mut()
        .enumerate()
        .map(|(i, init)| (source(i), init.initiation(now, i as u32)))
        .collect()
}

fn responder_with(n: usize) -> (Device, Vec<Initiator>) {
    let mut b = device(2);
    let b_pub = b.public_key().unwrap();
    let initiators: Vec<Initiator> = (0..n).map(|i| Initiator::new(i, b_pub)).collect();
    for i in &initiators {
        b.add_peer(i.public()).expect("room for the peer");
    }
    (b, initiators)
}

/// Responses among `sent`, by the initiator index they answer.
fn responses(sent: &[Vec<u8>]) -> Vec<(u32, [u8; RESPONSE_LEN])> {
    sent.iter()
        .filter(|m| m.len() == RESPONSE_LEN && m[0] == TYPE_RESPONSE)
        .map(|m| {
            (
                messages::read_u32(m, messages::response::RECEIVER),
                m[..].try_into().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_burst_over_the_budget_is_answered_in_full_over_later_wakeups() {
    const N: usize = 100;
    let (mut b, mut initiators) = responder_with(N);
    let now = clock::epoch();
    let burst: Vec<_> = initiations(&mut initiators, now);
    receive_batch(&mut b, now, &burst);
    let budget = MAX_HANDSHAKES_PER_BATCH as usize;
    let mut answered = responses(&transmit(&mut b, now));
    assert_eq!(answered.len(), budget, "the batch's budget at once");
    assert_eq!(b.queued_initiations(), N - budget, "the rest wait");
    assert!(
        b.poll_timeout().is_some_and(|t| t <= now),
        "the driver is told to come back at once"
    );
    // Each wake-up answers another budget, oldest first.
    let mut wakeups = 0;
    while b.queued_initiations() > 0 {
        let later = now + Duration::from_millis(wakeups + 1);
        b.handle_timeout(later);
        b.answer_queued_initiations(later);
        let got = responses(&transmit(&mut b, later));
        assert_eq!(got.len(), budget.min(N - answered.len()));
        answered.extend(got);
        wakeups += 1;
    }
    assert_eq!(wakeups as usize, (N - budget).div_ceil(budget));
    assert_eq!(answered.len(), N, "every initiation was answered");
    let order: Vec<u32> = answered.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..N as u32).collect::<Vec<_>>(), "in arrival order");
    // Each response completes its initiator's handshake.
    for (index, msg) in &answered {
        let init = &initiators[*index as usize];
        let state = init.state.as_ref().unwrap();
        noise::consume_response(state, &init.local, &init.remote, msg).expect("a valid response");
    }
    for init in &initiators {
        let pid = b.find_peer(&init.public()).unwrap();
        let p = b.peer(pid).unwrap();
        assert_eq!(p.counters.handshake_responses_sent, 1);
    }
    let c = b.counters;
    assert_eq!(c.handshake_over_budget, 0);
    assert_eq!(c.handshake_queue_full, 0);
    assert_eq!(c.handshake_queue_stale, 0);
    assert_eq!(c.handshake_rejected, 0);
    let last = now + Duration::from_millis(wakeups);
    assert!(
        b.poll_timeout().is_none_or(|t| t > last),
        "not due at once any more (the sessions' timers are later)"
    );
}

#[test]
fn initiations_spread_over_many_small_batches_are_all_answered_by_the_batches() {
    // Batches of 12 (more than a budget) with no wake-up in between: each
    // batch answers the oldest queued, none is lost, and the queue never
    // grows beyond what the surplus adds up to.
    const N: usize = 60;
    let (mut b, mut initiators) = responder_with(N);
    let now = clock::epoch();
    let all: Vec<_> = initiations(&mut initiators, now);
    let mut answered = 0;
    for (k, chunk) in all.chunks(12).enumerate() {
        let at = now + Duration::from_millis(k as u64);
        receive_batch(&mut b, at, chunk);
        answered += responses(&transmit(&mut b, at)).len();
    }
    assert_eq!(answered, 5 * MAX_HANDSHAKES_PER_BATCH as usize);
    assert_eq!(b.queued_initiations(), N - answered);
    // Data-less batches (a keepalive's worth of nothing) drain it too.
    for k in 0.. {
        if b.queued_initiations() == 0 {
            break;
        }
        let at = now + Duration::from_millis(100 + k);
        receive_batch(&mut b, at, &[(source(999), vec![0u8; 3])]);
        answered += responses(&transmit(&mut b, at)).len();
    }
    assert_eq!(answered, N);
}

/// The responder under load, a source's cookie taken from its reply: the
/// initiator's next initiation carries a valid mac2.
fn earn_cookie(b: &mut Device, now: Instant, init: &mut Initiator, src: SocketAddr, n: u32) {
    let first = init.initiation(now, n);
    receive_batch(b, now, &[(src, first)]);
    let replies: Vec<Vec<u8>> = transmit(b, now)
        .into_iter()
        .filter(|m| m.len() == COOKIE_REPLY_LEN && m[0] == TYPE_COOKIE_REPLY)
        .collect();
    assert_eq!(replies.len(), 1, "a cookie reply to source {src}");
    init.cookie
        .consume_reply(now, replies[0][..].try_into().unwrap())
        .expect("a valid cookie reply");
}

#[test]
fn a_full_queue_drops_and_counts() {
    let extra = 40;
    let n = MAX_QUEUED_INITIATIONS + extra;
    let (mut b, mut initiators) = responder_with(n);
    let now = clock::epoch();
    // Under load (more than UNDER_LOAD_HANDSHAKES_PER_SECOND at once),
    // then every initiator holds a cookie for its own address.
    let b_pub = b.public_key().unwrap();
    let mut loader = Initiator::new(1 << 30, b_pub);
    let load: Vec<_> = (0..=UNDER_LOAD_HANDSHAKES_PER_SECOND as usize)
        .map(|k| (source(50_000 + k), loader.initiation(now, k as u32)))
        .collect();
    for chunk in load.chunks(64) {
        receive_batch(&mut b, now, chunk);
        transmit(&mut b, now);
    }
    while b.queued_initiations() > 0 {
        b.answer_queued_initiations(now);
        transmit(&mut b, now);
    }
    for (i, init) in initiators.iter_mut().enumerate() {
        earn_cookie(&mut b, now, init, source(i), 1 << 20);
    }
    let before = b.counters;
    // All of them again, with mac2, in one batch: the queue takes
    // MAX_QUEUED_INITIATIONS, the rest is dropped and counted, and the
    // batch's budget answers the oldest.
    let burst: Vec<_> = initiations(&mut initiators, now);
    receive_batch(&mut b, now, &burst);
    let c = b.counters;
    assert_eq!(
        c.cookie_replies_sent, before.cookie_replies_sent,
        "mac2 valid"
    );
    assert_eq!(c.handshake_rate_limited, before.handshake_rate_limited);
    assert_eq!(
        c.handshake_queue_full - before.handshake_queue_full,
        extra as u64
    );
    let budget = MAX_HANDSHAKES_PER_BATCH as usize;
    assert_eq!(b.queued_initiations(), MAX_QUEUED_INITIATIONS - budget);
    assert_eq!(responses(&transmit(&mut b, now)).len(), budget);
    // The queued ones are answered later; the dropped ones never.
    let mut answered = budget;
    let mut k = 1;
    while b.queued_initiations() > 0 {
        let at = now + Duration::from_millis(k);
        b.answer_queued_initiations(at);
        answered += responses(&transmit(&mut b, at)).len();
        k += 1;
    }
    assert_eq!(answered, MAX_QUEUED_INITIATIONS);
    assert_eq!(b.counters.handshake_queue_stale, 0);
}

#[test]
fn an_initiation_that_waited_rekey_timeout_is_dropped_unanswered() {
    const N: usize = 40;
    let (mut b, mut initiators) = responder_with(N);
    let t0 = clock::epoch();
    let burst: Vec<_> = initiations(&mut initiators, t0);
    receive_batch(&mut b, t0, &burst);
    let budget = MAX_HANDSHAKES_PER_BATCH as usize;
    assert_eq!(responses(&transmit(&mut b, t0)).len(), budget);
    // No wake-up for almost REKEY_TIMEOUT (a driver starved of CPU): one
    // more budget is still answered then.
    let almost = t0 + REKEY_TIMEOUT - Duration::from_millis(1);
    b.answer_queued_initiations(almost);
    assert_eq!(responses(&transmit(&mut b, almost)).len(), budget);
    assert_eq!(b.counters.handshake_queue_stale, 0);
    // At REKEY_TIMEOUT the initiators have sent new ones: the old ones
    // are dropped unanswered, counted, without DH work.
    let late = t0 + REKEY_TIMEOUT;
    let left = b.queued_initiations();
    assert_eq!(left, N - 2 * budget);
    b.answer_queued_initiations(late);
    assert!(responses(&transmit(&mut b, late)).is_empty());
    assert_eq!(b.counters.handshake_queue_stale, left as u64);
    assert_eq!(b.queued_initiations(), 0);
    assert!(b.poll_timeout().is_none_or(|t| t > late));
    // A batch arriving that late drops them the same way before its own.
    let (mut b, mut initiators) = responder_with(N);
    let burst: Vec<_> = initiations(&mut initiators, t0);
    receive_batch(&mut b, t0, &burst[..20]);
    transmit(&mut b, t0);
    receive_batch(&mut b, late, &burst[20..]);
    let got = responses(&transmit(&mut b, late));
    assert_eq!(b.counters.handshake_queue_stale, 12);
    assert_eq!(got.len(), budget);
    assert!(got.iter().all(|(i, _)| *i >= 20), "only the fresh ones");
}

#[test]
fn a_queue_an_eighth_full_puts_the_device_under_load() {
    // Strangers' initiations with a valid mac1 (keys B does not know):
    // 200 in one batch are fewer than UNDER_LOAD_HANDSHAKES_PER_SECOND,
    // but once UNDER_LOAD_QUEUED_INITIATIONS wait, the rest need a cookie.
    const N: usize = 200;
    assert!(N < UNDER_LOAD_HANDSHAKES_PER_SECOND as usize);
    let (mut b, _) = responder_with(0);
    let b_pub = b.public_key().unwrap();
    let mut strangers: Vec<Initiator> = (0..N).map(|i| Initiator::new(i, b_pub)).collect();
    let now = clock::epoch();
    let burst: Vec<_> = strangers
        .iter_mut()
        .enumerate()
        .map(|(i, s)| (source(i), s.initiation(now, i as u32)))
        .collect();
    receive_batch(&mut b, now, &burst);
    let q = UNDER_LOAD_QUEUED_INITIATIONS;
    assert_eq!(b.counters.cookie_replies_sent, (N - q) as u64);
    assert_eq!(
        b.queued_initiations(),
        q - MAX_HANDSHAKES_PER_BATCH as usize
    );
    // The queue drained, still under load for UNDER_LOAD_AFTER ...
    while b.queued_initiations() > 0 {
        b.answer_queued_initiations(now);
    }
    transmit(&mut b, now);
    let mut one = Initiator::new(N, b_pub);
    let during = now + UNDER_LOAD_AFTER - Duration::from_millis(1);
    receive_batch(&mut b, during, &[(source(N), one.initiation(during, 1))]);
    assert_eq!(b.counters.cookie_replies_sent, (N - q) as u64 + 1);
    // ... and not after.
    let after = during + UNDER_LOAD_AFTER + Duration::from_millis(1);
    let before = b.counters;
    receive_batch(&mut b, after, &[(source(N), one.initiation(after, 2))]);
    assert_eq!(b.counters.cookie_replies_sent, before.cookie_replies_sent);
    assert_eq!(
        b.counters.handshake_rejected,
        before.handshake_rejected + 1,
        "a stranger's: DH work, no response"
    );
}
