//! The engine on simulated time: no sockets, no clock, `T` a marker that
//! tells when the engine lets a client go.

use super::*;
use crate::link::QueueLimit;
use std::cell::Cell;
use std::rc::Rc;

/// An arbitrary origin for virtual time; only offsets from it matter.
#[allow(clippy::disallowed_methods)]
fn origin() -> Instant {
    Instant::now()
}

const TO: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9);

fn client(n: u16) -> SocketAddr {
    SocketAddr::from(([198, 18, 0, 1], 40000 + n))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn config(up: LinkParams, down: LinkParams) -> RelayConfig {
    RelayConfig {
        to: TO,
        up,
        down,
        seed: 7,
        schedule: Vec::new(),
        rate_schedule: Vec::new(),
        max_clients: 16,
    }
}

fn delayed(d: Duration) -> LinkParams {
    LinkParams {
        delay: d,
        ..LinkParams::default()
    }
}

/// A client's state: counts the clients the engine has let go.
struct Sock(Rc<Cell<u32>>);

impl Drop for Sock {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

/// Drains what is due at `now` as the relay's loop does: every copy "sent"
/// and counted. Returns (target, addr, bytes) per copy.
fn drain<T>(r: &mut Relay<T>, now: Instant) -> Vec<(Target, SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(due) = r.pop_due(now) {
        out.push((due.target, due.addr, r.data(&due).to_vec()));
        let len = r.data(&due).len() as u64;
        r.record_sent(due.target.dir(), 1, 1, len);
        r.release(due);
    }
    out
}

fn up<T>(r: &mut Relay<T>, now: Instant, from: SocketAddr, data: &[u8], t: T) -> Verdict {
    r.on_listen(now, now, from, data, |_| Some(t))
}

#[test]
fn a_perfect_line_sends_at_once_and_counts() {
    let t0 = origin();
    let mut r: Relay<()> = Relay::new(config(LinkParams::default(), LinkParams::default()), t0);
    assert!(r.is_perfect(Dir::Up) && r.is_perfect(Dir::Down));
    let v = up(&mut r, t0, client(1), b"hello", ());
    assert_eq!(v, Verdict::Send(Target::Client(0), TO));
    assert_eq!(
        r.on_upstream(t0, t0, 0, b"reply"),
        Verdict::Send(Target::Listen, client(1))
    );
    // Empty datagrams and unknown slots go nowhere and are not offered.
    assert_eq!(up(&mut r, t0, client(1), b"", ()), Verdict::Dropped);
    assert_eq!(r.on_upstream(t0, t0, 5, b"x"), Verdict::Dropped);
    assert!(r.pop_due(t0 + ms(1000)).is_none());
    let s = r.stats(t0);
    assert_eq!((s.up.offered, s.down.offered, s.clients), (1, 1, 1));
}

#[test]
fn delay_is_applied_in_both_directions() {
    let t0 = origin();
    let mut r = Relay::new(config(delayed(ms(10)), delayed(ms(20))), t0);
    assert_eq!(up(&mut r, t0, client(1), b"ping", ()), Verdict::Queued);
    assert_eq!(r.next_deadline(), t0 + ms(10));
    assert!(drain(&mut r, t0 + ms(10) - Duration::from_nanos(1)).is_empty());
    assert_eq!(
        drain(&mut r, t0 + ms(10)),
        vec![(Target::Client(0), TO, b"ping".to_vec())]
    );
    // The reply arrived (kernel stamp) 1 ms before it was read.
    let at = t0 + ms(11);
    assert_eq!(r.on_upstream(at + ms(1), at, 0, b"pong"), Verdict::Queued);
    assert_eq!(r.next_deadline(), at + ms(20));
    assert!(drain(&mut r, at + ms(19)).is_empty());
    assert_eq!(
        drain(&mut r, at + ms(20)),
        vec![(Target::Listen, client(1), b"pong".to_vec())]
    );
    let s = r.stats(at + ms(20));
    assert_eq!((s.up.forwarded_packets, s.up.forwarded_bytes), (1, 4));
    assert_eq!((s.down.forwarded_packets, s.down.forwarded_bytes), (1, 4));
    assert_eq!((s.up.in_flight_packets, s.down.in_flight_bytes), (0, 0));
    // Nothing in flight: the next deadline is the look for idle clients.
    assert_eq!(r.next_deadline(), t0 + Duration::from_secs(1));
}

#[test]
fn arrival_takes_the_kernel_stamp_when_it_makes_sense() {
    let now = origin() + Duration::from_secs(10);
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let stamp = wall - ms(3);
    assert_eq!(arrival(now, wall, Some(stamp)), now - ms(3));
    assert_eq!(arrival(now, wall, None), now);
    // From the future, or older than a second: the clock stepped.
    assert_eq!(arrival(now, wall, Some(wall + ms(1))), now);
    assert_eq!(arrival(now, wall, Some(wall - ms(1500))), now);
}

#[test]
fn a_rate_cap_queues_then_drops_the_tail() {
    let t0 = origin();
    // 1000 bytes/s and room for 2500 bytes: of five 1000-byte datagrams
    // offered at once, the first leaves after 1 s, the second waits for it
    // (2000 bytes queued), the others find the queue full.
    let line = LinkParams {
        rate_bps: Some(8000),
        queue: QueueLimit::Bytes(2500),
        ..LinkParams::default()
    };
    let mut r = Relay::new(config(line, LinkParams::default()), t0);
    assert!(!r.is_perfect(Dir::Up));
    let data = [0xabu8; 1000];
    let verdicts: Vec<Verdict> = (0..5)
        .map(|_| up(&mut r, t0, client(1), &data, ()))
        .collect();
    use Verdict::{Dropped, Queued};
    assert_eq!(verdicts, [Queued, Queued, Dropped, Dropped, Dropped]);
    let s = r.stats(t0);
    assert_eq!((s.up.offered, s.up.dropped.queue), (5, 3));
    assert_eq!((s.up.in_flight_packets, s.up.in_flight_bytes), (2, 2000));
    assert_eq!(s.up.queue_bytes, 2000);
    assert!(drain(&mut r, t0 + ms(999)).is_empty());
    assert_eq!(drain(&mut r, t0 + ms(1000)).len(), 1);
    assert!(drain(&mut r, t0 + ms(1999)).is_empty());
    assert_eq!(drain(&mut r, t0 + ms(2000)).len(), 1);
    assert_eq!(r.stats(t0 + ms(2000)).up.forwarded_bytes, 2000);
}

#[test]
fn a_cut_drops_until_restored_and_the_schedule_cuts_on_time() {
    let t0 = origin();
    let mut cfg = config(delayed(ms(5)), LinkParams::default());
    cfg.schedule = vec![(ms(100), true), (ms(200), false)];
    let mut r = Relay::new(cfg, t0);
    r.set_cut(true);
    assert!(r.is_cut());
    assert_eq!(up(&mut r, t0, client(1), b"a", ()), Verdict::Dropped);
    assert_eq!(r.on_upstream(t0, t0, 0, b"b"), Verdict::Dropped);
    r.set_cut(false);
    assert_eq!(up(&mut r, t0, client(1), b"c", ()), Verdict::Queued);
    assert_eq!(
        r.on_upstream(t0, t0, 0, b"d"),
        Verdict::Send(Target::Listen, client(1))
    );
    // The scheduled cut, then the restore, each at its time.
    assert_eq!(drain(&mut r, t0 + ms(5)).len(), 1);
    assert_eq!(r.next_deadline(), t0 + ms(100));
    r.poll_timers(t0 + ms(99));
    assert!(!r.is_cut());
    r.poll_timers(t0 + ms(100));
    assert!(r.is_cut());
    assert_eq!(
        up(&mut r, t0 + ms(150), client(1), b"e", ()),
        Verdict::Dropped
    );
    assert_eq!(r.next_deadline(), t0 + ms(200));
    r.poll_timers(t0 + ms(200));
    assert!(!r.is_cut());
    let s = r.stats(t0 + ms(200));
    assert_eq!((s.up.dropped.cut, s.down.dropped.cut), (2, 1));
    assert_eq!((s.up.offered, s.down.offered), (3, 2));
}

#[test]
fn the_client_table_is_bounded_and_evicts_the_least_recently_seen() {
    let t0 = origin();
    let mut cfg = config(delayed(ms(10)), LinkParams::default());
    cfg.max_clients = 2;
    let mut r = Relay::new(cfg, t0);
    let gone = Rc::new(Cell::new(0));
    let sock = || Sock(gone.clone());
    assert_eq!((r.slots(), r.slot_bound()), (2, 0));
    // Two clients fill the table; the first is then seen again.
    assert_eq!(up(&mut r, t0, client(1), b"1", sock()), Verdict::Queued);
    assert_eq!(r.slot_bound(), 1);
    assert_eq!(
        up(&mut r, t0 + ms(1), client(2), b"2", sock()),
        Verdict::Queued
    );
    assert_eq!(r.slot_bound(), 2);
    let unused = sock();
    assert_eq!(
        up(&mut r, t0 + ms(2), client(1), b"1", unused),
        Verdict::Queued
    );
    // The engine did not keep the state it did not need.
    assert_eq!(gone.get(), 1);
    assert_eq!(r.stats(t0).clients, 2);
    // A third client takes client 2's slot (seen least recently); what
    // was in flight for client 2 is a failed send, not a send through the
    // newcomer's socket.
    let v = up(&mut r, t0 + ms(3), client(3), b"3", sock());
    assert_eq!(v, Verdict::Queued);
    assert_eq!(gone.get(), 2);
    let out = drain(&mut r, t0 + ms(20));
    let targets: Vec<(Target, Vec<u8>)> = out.into_iter().map(|(t, _, d)| (t, d)).collect();
    assert_eq!(
        targets,
        [
            (Target::Client(0), b"1".to_vec()),
            (Target::Client(0), b"1".to_vec()),
            (Target::Client(1), b"3".to_vec()),
        ]
    );
    let s = r.stats(t0 + ms(20));
    assert_eq!((s.clients, s.clients_evicted), (2, 1));
    assert_eq!((s.up.forwarded_packets, s.up.send_failed), (3, 1));
    // A client whose state cannot be made is not served, and its slot
    // stays free... after the eviction that made room for it.
    assert_eq!(
        r.on_listen(t0 + ms(21), t0 + ms(21), client(4), b"4", |_| None),
        Verdict::Dropped
    );
    assert_eq!(r.stats(t0 + ms(21)).clients, 1);
    assert_eq!(gone.get(), 3);
    // That eviction took client 1 (seen before client 3); replies on its
    // slot are not relayed.
    assert!(r.client(0).is_none() && r.client(1).is_some());
    assert_eq!(r.stats(t0 + ms(21)).clients_evicted, 2);
    assert_eq!(
        r.on_upstream(t0 + ms(21), t0 + ms(21), 0, b"x"),
        Verdict::Dropped
    );
}

#[test]
fn idle_clients_are_let_go() {
    let t0 = origin();
    let mut r = Relay::new(config(LinkParams::default(), LinkParams::default()), t0);
    let gone = Rc::new(Cell::new(0));
    up(&mut r, t0, client(1), b"a", Sock(gone.clone()));
    up(&mut r, t0, client(2), b"b", Sock(gone.clone()));
    // Client 2's upstream keeps talking; client 1 is silent.
    let late = t0 + CLIENT_IDLE + ms(500);
    r.on_upstream(late - ms(1000), late - ms(1000), 1, b"c");
    r.poll_timers(late);
    assert_eq!(gone.get(), 1);
    assert!(r.client(0).is_none() && r.client(1).is_some());
    assert_eq!(r.stats(late).clients_evicted, 1);
}

#[test]
fn copies_come_out_in_delivery_order() {
    let t0 = origin();
    // Jitter that reorders, and duplicates: the heap must hand copies out
    // by delivery time, ties in arrival order.
    let line = LinkParams {
        delay: ms(10),
        jitter: ms(8),
        reorder: true,
        duplicate: 0.3,
        ..LinkParams::default()
    };
    let mut r = Relay::new(config(line.clone(), LinkParams::default()), t0);
    // The same model and seed, on the side, knows each copy's time.
    let mut model = LinkModel::new(line, 7);
    let mut expected = Vec::new();
    for i in 0..2000u32 {
        let now = t0 + Duration::from_micros(u64::from(i) * 20);
        assert_eq!(
            up(&mut r, now, client(1), &i.to_be_bytes(), ()),
            Verdict::Queued
        );
        let Fate::Delivered { first, duplicate } = model.offer(now, 4) else {
            panic!("a line without loss dropped datagram {i}");
        };
        for d in std::iter::once(first).chain(duplicate) {
            // Released on the 100 µs grid of an 8 ms jitter.
            let on_grid = round_up(d.at, t0, MAX_GRAIN);
            expected.push((on_grid, expected.len(), i));
        }
    }
    expected.sort();
    // Drained in steps of 1 ms, as a loop that wakes up late would.
    let mut got = Vec::new();
    let mut now = t0;
    while got.len() < expected.len() {
        now += ms(1);
        for (_, _, d) in drain(&mut r, now) {
            got.push(u32::from_be_bytes(d.try_into().unwrap()));
        }
        // Nothing that is not due yet comes out.
        assert!(r.next_deadline() > now);
    }
    let want: Vec<u32> = expected.iter().map(|&(_, _, i)| i).collect();
    assert_eq!(got, want);
    assert!(r.stats(now).up.reordered > 0);
}

#[test]
fn a_jittered_line_releases_on_a_grid_finer_than_its_jitter() {
    let t0 = origin();
    // (case, jitter, grain expected)
    let cases = [
        (1, Duration::from_millis(1), Duration::from_micros(100)),
        (2, Duration::from_micros(200), Duration::from_micros(20)),
        (3, Duration::from_millis(50), MAX_GRAIN),
    ];
    for (case, jitter, grain) in cases {
        let line = LinkParams {
            delay: ms(3),
            jitter,
            reorder: true,
            ..LinkParams::default()
        };
        let mut r = Relay::new(config(line.clone(), LinkParams::default()), t0);
        let mut model = LinkModel::new(line, 7);
        // A burst of 64, as one receive batch brings it, 1 µs apart.
        let mut exact = Vec::new();
        for i in 0..64u32 {
            let now = t0 + Duration::from_micros(u64::from(i) + 7);
            up(&mut r, now, client(1), &i.to_be_bytes(), ());
            let Fate::Delivered { first, .. } = model.offer(now, 4) else {
                panic!("case {case}: a line without loss dropped {i}");
            };
            exact.push(first.at);
        }
        let mut releases = 0;
        let mut got = 0;
        while got < exact.len() {
            let now = r.next_deadline();
            assert_eq!(
                (now - t0).as_nanos() % grain.as_nanos(),
                0,
                "case {case}: a release off the grid"
            );
            for (_, _, d) in drain(&mut r, now) {
                let i = u32::from_be_bytes(d.try_into().unwrap()) as usize;
                assert!(exact[i] <= now, "case {case}: copy {i} left early");
                assert!(now - exact[i] < grain, "case {case}: copy {i} late");
                got += 1;
            }
            releases += 1;
        }
        // The burst's spread (twice the jitter) over the grain, not 64.
        let most = (2 * jitter).as_nanos() / grain.as_nanos() + 1;
        assert!(releases as u128 <= most, "case {case}: {releases} releases");
    }
}

#[test]
fn a_fixed_delay_is_not_rounded() {
    let t0 = origin();
    let mut r = Relay::new(config(delayed(ms(3)), LinkParams::default()), t0);
    let now = t0 + Duration::from_nanos(1234);
    up(&mut r, now, client(1), b"x", ());
    assert_eq!(r.next_deadline(), now + ms(3));
}

#[test]
fn counters_add_up() {
    let t0 = origin();
    let line = LinkParams {
        delay: ms(2),
        jitter: ms(1),
        loss: 0.1,
        duplicate: 0.05,
        corrupt: 0.05,
        mtu: Some(1000),
        ..LinkParams::default()
    };
    let mut r = Relay::new(config(line.clone(), line), t0);
    let big = [1u8; 1200];
    let small = [2u8; 100];
    let mut now = t0;
    for i in 0..5000u32 {
        now += Duration::from_micros(10);
        let data: &[u8] = if i % 10 == 0 { &big } else { &small };
        up(&mut r, now, client((i % 3) as u16), data, ());
        r.on_upstream(now, now, i % 3, data);
        if i == 2500 {
            r.set_cut(true);
        }
        if i == 3000 {
            r.set_cut(false);
        }
        drain(&mut r, now);
    }
    // Half-way through the drain: some copies are still in flight.
    let mid = now + ms(1);
    drain(&mut r, mid);
    let check = |s: &DirStats| {
        let d = &s.dropped;
        let copies = s.offered - d.mtu - d.cut - d.loss - d.queue + s.duplicated;
        assert_eq!(copies, s.forwarded_packets + s.in_flight_packets);
        assert!(d.mtu > 0 && d.cut > 0 && d.loss > 0 && s.duplicated > 0 && s.corrupted > 0);
        assert_eq!(s.offered, 5000);
    };
    let s = r.stats(mid);
    check(&s.up);
    check(&s.down);
    assert!(s.up.in_flight_packets > 0);
    drain(&mut r, now + ms(10));
    let s = r.stats(now + ms(10));
    check(&s.up);
    check(&s.down);
    assert_eq!((s.up.in_flight_packets, s.up.in_flight_bytes), (0, 0));
    assert_eq!(s.up.forwarded_bytes, s.up.forwarded_packets * 100);
}

#[test]
fn corruption_flips_the_copy_not_the_callers_buffer() {
    let t0 = origin();
    let line = LinkParams {
        corrupt: 1.0,
        ..LinkParams::default()
    };
    let mut r = Relay::new(config(line, LinkParams::default()), t0);
    let data = [0u8; 64];
    assert_eq!(up(&mut r, t0, client(1), &data, ()), Verdict::Queued);
    let out = drain(&mut r, t0);
    assert_eq!(out.len(), 1);
    let flipped: u32 = out[0].2.iter().map(|b| b.count_ones()).sum();
    assert_eq!(flipped, 1);
    assert_eq!(data, [0u8; 64]);
}

#[test]
fn send_counters_saturate_and_split_bytes_without_overflow() {
    let mut s = Sent::default();
    s.record(4, 4, 4000);
    assert_eq!((s.packets, s.bytes, s.failed), (4, 4000, 0));
    s.record(4, 1, 4000);
    assert_eq!((s.packets, s.bytes, s.failed), (5, 5000, 3));
    // A kernel claiming more than it was given counts as all sent.
    s.record(2, 3, 10);
    assert_eq!((s.packets, s.bytes, s.failed), (7, 5010, 3));
    // u64::MAX bytes of which half went: the product would overflow a
    // u64; the share is exact.
    let mut s = Sent::default();
    s.record(2, 1, u64::MAX);
    assert_eq!(s.bytes, u64::MAX / 2);
    // At the top every counter stays at u64::MAX.
    let mut s = Sent {
        packets: u64::MAX - 1,
        bytes: u64::MAX - 1,
        failed: u64::MAX - 1,
    };
    s.record(64, 32, 1 << 20);
    s.failed(7);
    assert_eq!(
        (s.packets, s.bytes, s.failed),
        (u64::MAX, u64::MAX, u64::MAX)
    );
}

#[test]
fn a_full_pool_drops_and_counts_a_queue_drop() {
    let t0 = origin();
    let mut r = Relay::new(config(delayed(ms(1000)), LinkParams::default()), t0);
    let cap = Pool::capacity();
    for i in 0..cap {
        let v = up(&mut r, t0, client(1), &[1u8; 100], ());
        assert_eq!(v, Verdict::Queued, "copy {i} of {cap}");
    }
    // No buffer left: dropped, and counted as a queue drop (the line would
    // have delivered it).
    assert_eq!(up(&mut r, t0, client(1), &[1u8; 100], ()), Verdict::Dropped);
    let s = r.stats(t0);
    assert_eq!((s.up.offered, s.up.dropped.queue), (cap as u64 + 1, 1));
    assert_eq!(s.up.in_flight_packets, cap as u64);
    // Delivered copies give their buffers back.
    assert_eq!(drain(&mut r, t0 + ms(1000)).len(), cap);
    assert_eq!(up(&mut r, t0, client(1), &[1u8; 100], ()), Verdict::Queued);
}

#[test]
fn the_rate_changes_on_time_and_a_perfect_line_leaves_the_fast_path() {
    let t0 = origin();
    // 8000 bit/s (1000 bytes/s); at 5 s it falls to 800 bit/s.
    let line = LinkParams {
        rate_bps: Some(8000),
        queue: QueueLimit::Time(Duration::from_secs(60)),
        ..LinkParams::default()
    };
    let mut cfg = config(line, LinkParams::default());
    cfg.rate_schedule = vec![(ms(5000), 800)];
    let mut r = Relay::new(cfg, t0);
    assert!(r.is_perfect(Dir::Down));
    assert_eq!(r.rate(Dir::Up), Some(8000));
    assert_eq!(r.next_deadline(), t0 + Duration::from_secs(1));
    // 100 bytes take 100 ms at first.
    assert_eq!(up(&mut r, t0, client(1), &[1u8; 100], ()), Verdict::Queued);
    assert!(drain(&mut r, t0 + ms(99)).is_empty());
    assert_eq!(drain(&mut r, t0 + ms(100)).len(), 1);
    r.poll_timers(t0 + ms(4999));
    assert_eq!(r.rate(Dir::Up), Some(8000));
    assert_eq!(r.next_deadline(), t0 + ms(5000));
    r.poll_timers(t0 + ms(5000));
    assert_eq!((r.rate(Dir::Up), r.rate(Dir::Down)), (Some(800), Some(800)));
    let s = r.stats(t0 + ms(5000));
    assert_eq!((s.up.rate_bps, s.down.rate_bps), (Some(800), Some(800)));
    // The down direction had no impairment: now it is capped too.
    assert!(!r.is_perfect(Dir::Down));
    // 100 bytes take 1 s now.
    let t1 = t0 + ms(6000);
    assert_eq!(up(&mut r, t1, client(1), &[2u8; 100], ()), Verdict::Queued);
    assert!(drain(&mut r, t1 + ms(999)).is_empty());
    assert_eq!(drain(&mut r, t1 + ms(1000)).len(), 1);
    assert_eq!(r.on_upstream(t1, t1, 0, &[3u8; 100]), Verdict::Queued);
    assert_eq!(drain(&mut r, t1 + ms(1000)).len(), 1);
    // By hand, and 0 refused.
    r.set_rate(16_000).unwrap();
    assert_eq!(r.rate(Dir::Up), Some(16_000));
    assert!(r.set_rate(0).is_err());
    assert_eq!(r.rate(Dir::Up), Some(16_000));
}
