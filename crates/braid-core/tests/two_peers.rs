//! Two devices over a simulated line in virtual time (`braid_core::testing`):
//! handshake, data both ways, lost handshake packets, rekeying, key expiry,
//! replays, keepalives, cookies under load and roaming.
//!
//! Each direction of the line is a seeded `LinkModel` (by default a
//! perfect line with `LATENCY` of delay), so the same impaired lines the
//! `braid netem` relay makes — jitter that reorders, loss, duplication,
//! corruption, cuts — can be put under the protocol here.

use braid_core::consts::*;
use braid_core::messages::{TYPE_DATA, TYPE_DATA_AES};
use braid_core::testing::{Net, NodeId, Refusals, Socket, A, B};
use braid_netem::link::{JitterDist, LinkModel, LinkParams};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const LATENCY: Duration = Duration::from_millis(10);

/// A and B (sharing a preshared key) over a perfect line with `LATENCY`
/// of delay each way.
fn pair() -> Net {
    over(
        LinkParams {
            delay: LATENCY,
            ..LinkParams::default()
        },
        0,
    )
}

/// Both ends behave as stock WireGuard (braid's extensions off).
fn stock() -> Net {
    let mut net = pair();
    net[A].device.set_extensions(false);
    net[B].device.set_extensions(false);
    net
}

/// A and B over a line that does `params` in each direction (seeded
/// apart): line 0.
fn over(params: LinkParams, seed: u64) -> Net {
    params.validate().unwrap();
    let mut net = Net::pair();
    for n in [A, B] {
        net[n].device.set_preshared_key(0, [7; 32]);
    }
    net.connect(
        (A, 0),
        (B, 0),
        LinkModel::new(params.clone(), 2 * seed + 1),
        LinkModel::new(params, 2 * seed),
    );
    net
}

/// What the line handed to one side, and what the receiver made of the
/// damaged copies.
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
    corrupted_refused: Refusals,
}

/// The books of what arrived at `to`, from the net's arrival log.
fn arrivals(net: &Net, to: NodeId) -> Arrivals {
    let mut r = Arrivals::default();
    let data = net
        .arrivals
        .iter()
        .filter(|a| a.to == to && matches!(a.kind, TYPE_DATA | TYPE_DATA_AES));
    for a in data {
        if a.corrupted {
            r.corrupted_data += 1;
            r.corrupted_delivered += (a.tun > 0) as u64;
            r.corrupted_refused += a.refused;
        } else if a.duplicate {
            r.duplicate_data += 1;
        } else {
            r.data += 1;
            r.data_with_payload += (a.len > 32) as u64;
        }
    }
    r
}

fn payload(n: u32) -> Vec<u8> {
    n.to_be_bytes().repeat(10)
}

/// The other node of the pair.
fn peer_of(side: NodeId) -> NodeId {
    if side == A {
        B
    } else {
        A
    }
}

/// Packet `n` enters `from`'s TUN, for the other side.
fn send(net: &mut Net, from: NodeId, n: u32) {
    net.send(from, peer_of(from), &payload(n));
}

fn counters(net: &Net, side: NodeId) -> braid_core::peer::PeerCounters {
    net.peer_info(side).counters
}

#[test]
fn handshake_then_data_both_ways() {
    let mut p = pair();
    send(&mut p, A, 1);
    p.run_for(Duration::from_millis(100));
    assert_eq!(
        p[B].delivered.len(),
        1,
        "staged packet delivered after the handshake"
    );
    assert_eq!(&p[B].delivered[0][20..], &payload(1)[..]);
    send(&mut p, B, 2);
    p.run_for(Duration::from_millis(100));
    assert_eq!(p[A].delivered.len(), 1);
    assert!(p.peer_info(A).last_handshake.is_some() && p.peer_info(B).last_handshake.is_some());
    let (ca, cb) = (counters(&p, A), counters(&p, B));
    assert_eq!(ca.handshakes_initiated, 1);
    assert_eq!(cb.handshake_responses_sent, 1);
    assert_eq!(ca.tx_packets, 1);
    assert_eq!(cb.rx_packets, 1);
    assert!(ca.tx_bytes > 0 && cb.rx_bytes > 0);
}

#[test]
fn lost_initiations_are_retried_with_jitter() {
    let mut p = pair();
    let mut lost = 0;
    p.filter = Some(Box::new(move |d| {
        if d.bytes[0] == 1 && lost < 2 {
            lost += 1;
            return false;
        }
        true
    }));
    send(&mut p, A, 1);
    p.run_for(Duration::from_secs(9));
    assert!(
        p[B].delivered.is_empty(),
        "two initiations lost: nothing yet"
    );
    p.run_for(Duration::from_secs(3));
    assert_eq!(
        p[B].delivered.len(),
        1,
        "third initiation after 2 × (5 s + jitter) gets through"
    );
    assert_eq!(counters(&p, A).handshakes_initiated, 3);
}

#[test]
fn lost_response_is_recovered_by_retry() {
    let mut p = pair();
    let mut lost = false;
    p.filter = Some(Box::new(move |d| {
        if d.bytes[0] == 2 && !lost {
            lost = true;
            return false;
        }
        true
    }));
    send(&mut p, A, 1);
    p.run_for(Duration::from_secs(6));
    assert_eq!(p[B].delivered.len(), 1);
    assert_eq!(counters(&p, B).handshake_responses_sent, 2);
}

#[test]
fn handshake_gives_up_after_rekey_attempt_time() {
    let mut p = pair();
    p.filter = Some(Box::new(|d| d.to == Some(A))); // B never hears anything
    send(&mut p, A, 1);
    p.run_for(Duration::from_secs(200));
    let n = counters(&p, A).handshakes_initiated;
    assert_eq!(
        n as u32,
        MAX_TIMER_HANDSHAKES + 2,
        "first try + retries, then silence"
    );
}

#[test]
fn rekey_during_steady_traffic_loses_nothing() {
    let mut p = pair();
    let mut sent = 0u32;
    // One packet each way every 500 ms for 7 minutes: several rekeys.
    for _ in 0..(7 * 60 * 2) {
        sent += 1;
        send(&mut p, A, sent);
        send(&mut p, B, sent);
        p.run_for(Duration::from_millis(500));
    }
    p.run_for(Duration::from_secs(1));
    assert_eq!(
        p[B].delivered.len() as u32,
        sent,
        "A→B lost nothing across rekeys"
    );
    assert_eq!(
        p[A].delivered.len() as u32,
        sent,
        "B→A lost nothing across rekeys"
    );
    let ca = counters(&p, A);
    let cb = counters(&p, B);
    let handshakes = ca.handshakes_completed + cb.handshakes_completed;
    // 420 s / 120 s per rekey: at least 3 new sessions beyond the first.
    assert!(handshakes >= 2 * 4, "sessions were renewed: {handshakes}");
    for (i, pkt) in p[B].delivered.iter().enumerate() {
        assert_eq!(&pkt[20..], &payload(i as u32 + 1)[..], "in order");
    }
}

#[test]
fn expired_session_is_not_used_and_key_material_is_zeroed() {
    let mut p = pair();
    send(&mut p, A, 1);
    p.run_for(Duration::from_secs(1));
    assert_eq!(p[B].delivered.len(), 1);
    // Silence past REJECT_AFTER_TIME: the session must not be used.
    p.run_for(REJECT_AFTER_TIME + Duration::from_secs(1));
    let before = counters(&p, A).handshakes_initiated;
    let captured = p.capture.len();
    send(&mut p, A, 2);
    assert_eq!(
        p.capture[captured].bytes[0], 1,
        "an initiation, not data on the dead session"
    );
    assert_eq!(counters(&p, A).handshakes_initiated, before + 1);
    p.run_for(Duration::from_secs(1));
    assert_eq!(p[B].delivered.len(), 2);

    // Data sealed with an expired session is refused by the receiver.
    let old_data = p
        .capture
        .iter()
        .find(|d| d.to == Some(B) && d.bytes[0] == 4 && d.bytes.len() > 32)
        .unwrap()
        .clone();
    p.run_for(REJECT_AFTER_TIME * 3 + Duration::from_secs(1));
    p.deliver(B, old_data.src, &old_data.bytes);
    assert_eq!(
        p[B].delivered.len(),
        2,
        "nothing delivered from zeroed sessions"
    );
    // After 3 × REJECT_AFTER_TIME of silence every key is gone: new traffic
    // needs a new handshake.
    let before = counters(&p, B).handshakes_initiated;
    send(&mut p, B, 3);
    assert_eq!(counters(&p, B).handshakes_initiated, before + 1);
    p.run_for(Duration::from_secs(1));
    assert_eq!(p[A].delivered.len(), 1, "B reached A over a fresh session");
}

#[test]
fn replayed_data_and_initiations_are_dropped() {
    let mut p = pair();
    send(&mut p, A, 1);
    p.run_for(Duration::from_millis(100));
    send(&mut p, A, 2);
    p.run_for(Duration::from_millis(100));
    assert_eq!(p[B].delivered.len(), 2);
    let replays: Vec<_> = p
        .capture
        .iter()
        .filter(|d| d.to == Some(B))
        .cloned()
        .collect();
    for d in &replays {
        p.deliver(B, d.src, &d.bytes);
    }
    assert_eq!(
        p[B].delivered.len(),
        2,
        "no replayed packet reached the TUN"
    );
    let cb = counters(&p, B);
    assert_eq!(cb.replayed, 2, "both data packets counted as replays");
    assert_eq!(
        cb.handshake_responses_sent, 1,
        "the replayed initiation got no response"
    );
    assert!(p[B].device.counters.handshake_flood_dropped >= 1);
}

#[test]
fn keepalive_answers_one_way_traffic() {
    let mut p = pair();
    send(&mut p, A, 1);
    p.run_for(Duration::from_millis(100));
    let before = counters(&p, B).keepalives_sent;
    p.run_for(KEEPALIVE_TIMEOUT + Duration::from_millis(100));
    assert_eq!(
        counters(&p, B).keepalives_sent,
        before + 1,
        "B confirms receipt"
    );
    assert!(counters(&p, A).keepalives_received >= 1);
}

#[test]
fn persistent_keepalive_brings_the_tunnel_up_and_ticks() {
    // Between braid peers probes keep NAT bindings alive; stock peers tick.
    let mut p = stock();
    let now = p.now;
    p[A].device.set_persistent_keepalive(now, 0, 25);
    p.flush(A);
    p.run_for(Duration::from_secs(1));
    assert!(
        p.peer_info(B).last_handshake.is_some(),
        "handshake without any traffic"
    );
    let before = counters(&p, A).keepalives_sent;
    p.run_for(Duration::from_secs(100));
    let ticks = counters(&p, A).keepalives_sent - before;
    assert!((3..=5).contains(&ticks), "one keepalive per 25 s: {ticks}");
}

#[test]
fn roaming_follows_the_new_source_address() {
    let mut p = stock();
    send(&mut p, A, 1);
    p.run_for(Duration::from_millis(100));
    p.set_addr(A, "198.18.9.9:40000".parse().unwrap());
    send(&mut p, A, 2);
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.peer_info(B).endpoint, Some(p.addr(A)));
}

#[test]
fn forged_and_garbage_datagrams_change_nothing() {
    let mut p = pair();
    send(&mut p, A, 1);
    p.run_for(Duration::from_millis(100));
    let from: SocketAddr = "198.18.7.7:1".parse().unwrap();
    let data = p
        .capture
        .iter()
        .rev()
        .find(|d| d.to == Some(B) && d.bytes[0] == 4)
        .unwrap()
        .bytes
        .clone();
    // A fresh counter, so the packet passes the replay check and must fail
    // authentication.
    let mut forged = data.clone();
    forged[8..16].copy_from_slice(&1000u64.to_le_bytes());
    p.deliver(B, from, &forged);
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
        p.deliver(B, from, &junk);
    }
    for junk in [
        with_header(1, 148),
        with_header(2, 92),
        with_header(3, 64),
        with_header(4, 64),
    ] {
        p.deliver(B, from, &junk);
    }
    assert_eq!(
        p.peer_info(B).endpoint,
        Some(p.addr(A)),
        "no roaming to a forger"
    );
    assert_eq!(counters(&p, B).auth_failed, 1);
    let c = p[B].device.counters;
    assert!(c.invalid_datagrams >= 3 && c.invalid_mac >= 2, "{c:?}");
    send(&mut p, A, 2);
    p.run_for(Duration::from_millis(100));
    assert_eq!(p[B].delivered.len(), 2, "the tunnel still works");
}

#[test]
fn under_load_the_responder_demands_cookies_and_the_peer_gets_through() {
    let mut p = pair();
    // Flood B with copies of a valid-mac1 initiation from many addresses.
    // They are A's (B's answers to them reach A): the response to the
    // first copy, then cookie replies.
    send(&mut p, A, 1);
    let init = p
        .capture
        .iter()
        .find(|d| d.bytes[0] == 1)
        .unwrap()
        .bytes
        .clone();
    p.clear_in_flight();
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
        p[A].sockets.push(Socket {
            line: 0,
            addr: from,
        });
        p.deliver(B, from, &init);
    }
    assert!(
        p[B].device.counters.cookie_replies_sent >= 1,
        "switched to cookie replies"
    );
    p.run_for(Duration::from_secs(12));
    assert!(counters(&p, A).cookie_replies_received >= 1);
    assert_eq!(
        p[B].delivered.len(),
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
fn bring_up(p: &mut Net) {
    for i in 0..60 {
        send(p, A, 1_000_000 + i);
        p.run_for(Duration::from_secs(1));
        if !p[B].delivered.is_empty() && p.peer_info(A).last_handshake.is_some() {
            p[A].delivered.clear();
            p[B].delivered.clear();
            p.arrivals.clear();
            return;
        }
    }
    panic!("the tunnel never came up");
}

/// `n` packets each way, one every `gap`; then waits for the stragglers.
fn stream(p: &mut Net, first: u32, n: u32, gap: Duration) {
    for i in first..first + n {
        send(p, A, i);
        send(p, B, i);
        p.run_for(gap);
    }
    p.run_for(Duration::from_secs(1));
}

#[test]
fn rough_line_carries_a_steady_stream_both_ways() {
    const N: u32 = 5000;
    let mut p = over(rough_line(), 1);
    bring_up(&mut p);
    // One packet each way per millisecond: faster than the 2 ms range of
    // the jitter, so the line reorders.
    stream(&mut p, 0, N, Duration::from_millis(1));
    for (side, delivered, arrivals, line) in [
        (B, &p[B].delivered, arrivals(&p, B), p.link(0, B).counters()),
        (A, &p[A].delivered, arrivals(&p, A), p.link(0, A).counters()),
    ] {
        let got = seqs(delivered);
        let n = got.len() as u64;
        assert!(
            binomial_ok(n, N as u64, 0.99),
            "to {side:?}: {n} of {N} arrived over a 1 % loss line"
        );
        assert_eq!(distinct(&got), got.len(), "to {side:?}: nothing twice");
        // Every data message the line delivered came out of the tunnel,
        // but for the few the window dropped as too late (their gap had
        // been given up): order is a promise.
        assert_all_but_late(&p, side, n, arrivals.data_with_payload);
        assert!(line.dropped_loss > 0 && line.reordered > 0, "{line:?}");
        assert_eq!(
            inversions(&got),
            0,
            "to {side:?}: the line reorders, the tunnel does not"
        );
        let c = counters(&p, side);
        assert_eq!((c.replayed, c.auth_failed), (0, 0), "to {side:?}: {c:?}");
    }
}

/// `delivered` of the `arrived` data messages with a packet came out of
/// `side`'s tunnel: all but the few its reorder window dropped as too late
/// (Under Window, which also counts late duplicate copies), in order.
fn assert_all_but_late(p: &Net, side: NodeId, delivered: u64, arrived: u64) {
    let late = p.peer_info(side).reorder.under_window;
    assert!(
        delivered <= arrived && delivered + late >= arrived,
        "to {side:?}: {delivered} delivered of {arrived} arrived, {late} too late"
    );
    assert!(
        (arrived - delivered) * 100 <= arrived,
        "to {side:?}: at most 1 % too late: {delivered} of {arrived}"
    );
}

#[test]
fn corrupted_datagrams_fail_authentication() {
    const N: u32 = 3000;
    let params = LinkParams {
        corrupt: 0.05,
        ..rough_line()
    };
    let mut p = over(params, 2);
    bring_up(&mut p);
    stream(&mut p, 0, N, Duration::from_millis(1));
    for (side, delivered, r) in [
        (B, &p[B].delivered, arrivals(&p, B)),
        (A, &p[A].delivered, arrivals(&p, A)),
    ] {
        // `seqs` checks that every packet out of the tunnel is intact.
        let got = seqs(delivered);
        assert_eq!(distinct(&got), got.len());
        assert_all_but_late(&p, side, got.len() as u64, r.data_with_payload);
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
        let refused = r.corrupted_refused.total();
        assert_eq!(refused, r.corrupted_data, "to {side:?}: {r:?}");
        assert!(
            r.corrupted_refused.auth_failed * 10 >= r.corrupted_data * 7,
            "to {side:?}: most by authentication: {r:?}"
        );
        let c = counters(&p, side);
        assert_eq!(
            c.auth_failed, r.corrupted_refused.auth_failed,
            "to {side:?}"
        );
        assert_eq!(c.replayed, r.corrupted_refused.replayed, "to {side:?}");
    }
    // Damage never cost the session: no new handshake was needed.
    assert_eq!(counters(&p, A).handshakes_initiated, 1);
}

#[test]
fn duplicated_datagrams_are_dropped_as_replays() {
    const N: u32 = 3000;
    let params = LinkParams {
        duplicate: 0.05,
        ..rough_line()
    };
    let mut p = over(params, 3);
    bring_up(&mut p);
    stream(&mut p, 0, N, Duration::from_millis(1));
    for (side, delivered, r, line) in [
        (B, &p[B].delivered, arrivals(&p, B), p.link(0, B).counters()),
        (A, &p[A].delivered, arrivals(&p, A), p.link(0, A).counters()),
    ] {
        let got = seqs(delivered);
        assert_eq!(
            distinct(&got),
            got.len(),
            "to {side:?}: delivered count equals unique count"
        );
        assert_all_but_late(&p, side, got.len() as u64, r.data_with_payload);
        assert!(
            binomial_ok(got.len() as u64, N as u64, 0.99),
            "{}",
            got.len()
        );
        assert!(line.duplicated > 0);
        let c = counters(&p, side);
        assert!(c.replayed > 0, "to {side:?}");
        // Exactly one of each pair of copies is refused as a replay.
        assert_eq!(c.replayed, r.duplicate_data, "to {side:?}: {r:?}");
        assert_eq!(c.auth_failed, 0);
    }
}

/// `secs` of traffic both ways, a packet every 100 ms, numbered on from
/// `seq`.
fn phase(p: &mut Net, seq: &mut u32, secs: u32) {
    stream(p, *seq, secs * 10, Duration::from_millis(100));
    *seq += secs * 10;
}

/// Traffic both ways all along; the line is cut for 30 s, then restored:
/// the tunnel must come back by itself.
fn cut_and_restore(params: LinkParams, seed: u64) {
    let mut p = over(params, seed);
    bring_up(&mut p);
    let mut seq = 0;
    phase(&mut p, &mut seq, 10);
    let before = (counters(&p, A), counters(&p, B));
    let handshake_before = p.peer_info(A).last_handshake.unwrap();
    let (delivered_a, delivered_b) = (p[A].delivered.len(), p[B].delivered.len());

    p.set_cut(true);
    phase(&mut p, &mut seq, 30);
    assert!(p.link(0, A).counters().dropped_cut > 0 && p.link(0, B).counters().dropped_cut > 0);
    let initiated = counters(&p, A).handshakes_initiated + counters(&p, B).handshakes_initiated
        - before.0.handshakes_initiated
        - before.1.handshakes_initiated;
    assert!(
        initiated >= 2,
        "unanswered traffic starts handshakes: {initiated}"
    );
    // Nothing crosses a cut line (beyond what was in flight when cut).
    assert!(p[A].delivered.len() - delivered_a <= 10 && p[B].delivered.len() - delivered_b <= 10);

    p.set_cut(false);
    let restored_at = seq;
    phase(&mut p, &mut seq, 30);
    assert!(
        p.peer_info(A).last_handshake.unwrap() > handshake_before,
        "a new handshake after the cut"
    );
    // From 10 s after the restoration on, traffic flows as before.
    let settled = restored_at + 100;
    for (side, delivered) in [(B, &p[B].delivered), (A, &p[A].delivered)] {
        let after = seqs(delivered).iter().filter(|&&n| n >= settled).count() as u64;
        let sent = (seq - settled) as u64;
        let loss = p.link(0, B).params().loss;
        assert!(
            binomial_ok(after, sent, 1.0 - loss),
            "to {side:?}: {after} of {sent} after recovery"
        );
        let c = counters(&p, side);
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

/// A braid peer that comes back as stock WireGuard (same keys, no
/// extensions) is seen as stock again once the sessions it spoke braid in
/// are gone; a braid peer stays braid across every rekey.
#[test]
fn speaking_braid_is_per_session() {
    let mut p = pair();
    let mut n = 0;
    let mut traffic = |p: &mut Net, secs: u64| {
        for _ in 0..secs * 2 {
            n += 1;
            send(p, A, n);
            send(p, B, n);
            p.run_for(Duration::from_millis(500));
        }
    };
    traffic(&mut p, 2);
    assert!(p.peer_info(B).speaks_braid, "hello exchanged");
    // Braid on both ends: still braid after several rekeys (no flapping).
    for _ in 0..(REKEY_AFTER_TIME.as_secs() * 3) {
        traffic(&mut p, 1);
        assert!(p.peer_info(B).speaks_braid, "braid across rekeys");
    }
    // A comes back as stock WireGuard: within two rekeys, or once the
    // last braid session's keys are erased (3 × REJECT_AFTER_TIME).
    p[A].device.set_extensions(false);
    traffic(&mut p, (REJECT_AFTER_TIME * 3).as_secs() + 10);
    assert!(
        !p.peer_info(B).speaks_braid,
        "a peer that stopped speaking braid is stock after its sessions went"
    );
}

#[test]
fn braid_peers_learn_a_new_path_and_the_old_one_goes_down() {
    let mut p = pair();
    send(&mut p, A, 1);
    p.run_for(Duration::from_millis(500));
    let info = p.peer_info(B);
    assert!(info.speaks_braid, "hello exchanged");
    assert_eq!(info.paths.len(), 1);
    assert!(info.paths[0].is_up());
    assert!(info.paths[0].srtt.is_some(), "probes measured an RTT");
    // A moves to another address: B learns it as a second path, the old
    // one dies within a second and the endpoint follows.
    p.set_addr(A, "198.18.9.9:40000".parse().unwrap());
    for n in 2..12 {
        send(&mut p, A, n);
        p.run_for(Duration::from_millis(100));
    }
    let info = p.peer_info(B);
    assert_eq!(info.paths.len(), 2, "{:?}", info.paths);
    assert!(!info.paths[0].is_up() && info.paths[1].is_up());
    assert_eq!(info.endpoint, Some(p.addr(A)));
    send(&mut p, B, 99);
    p.run_for(Duration::from_millis(100));
    assert_eq!(p[A].delivered.len(), 1, "B answers on the live path");
}

/// Cryptokey routing changes on the fly (issue 20 item 5): A routes all
/// of 198.19.0.0/24 to B; once C's /32 is added to A's peer C, the very
/// next packet for C's address goes to C, not B; removing it sends the
/// traffic back to B.
#[test]
fn a_more_specific_allowed_ip_takes_traffic_at_once() {
    use braid_core::testing::C;
    use std::net::{IpAddr, Ipv4Addr};
    let mut net = Net::new();
    let (a, b, c) = (net.add_node(), net.add_node(), net.add_node());
    assert_eq!((a, b, c), (A, B, C));
    let (pb, _) = net.peers(A, B);
    let b_addr = net.addr(B);
    net[A].device.set_endpoint(pb, b_addr);
    let net24 = IpAddr::V4(Ipv4Addr::new(198, 19, 0, 0));
    net[A].device.add_allowed_ip(pb, net24, 24).unwrap();
    let (pc, _) = net.peers(A, C);
    let c_addr = net.addr(C);
    net[A].device.set_endpoint(pc, c_addr);
    // Only the /24 (at B) covers C's address for now.
    net[A].device.clear_allowed_ips(pc);
    let to_c = |net: &mut Net, n: u8| {
        let packet = braid_core::testing::ipv4(net.tun(A), net.tun(C), 17, &[n; 40]);
        net.send_packet(A, &packet);
        net.settle();
        net.run_for(std::time::Duration::from_millis(50));
    };
    to_c(&mut net, 1);
    assert_eq!(net[B].delivered.len(), 1, "the /24 sends it to B");
    assert!(net[C].delivered.is_empty());
    let c_tun = IpAddr::V4(net[C].tun);
    net[A].device.add_allowed_ip(pc, c_tun, 32).unwrap();
    to_c(&mut net, 2);
    assert_eq!(net[B].delivered.len(), 1, "B gets nothing more");
    assert_eq!(net[C].delivered.len(), 1, "the /32 takes it at once");
    net[A].device.clear_allowed_ips(pc);
    to_c(&mut net, 3);
    assert_eq!(net[B].delivered.len(), 2, "back to B once the /32 is gone");
    assert_eq!(net[C].delivered.len(), 1);
}
