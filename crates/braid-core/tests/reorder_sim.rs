//! The reorder window behind simulated lines, in virtual time from
//! `braid_core::testing::clock`: a sender emits counters at a
//! steady rate over one or two seeded `LinkModel` lines (the same model the
//! `braid netem` relay uses), the receiver runs WireGuard's replay check and
//! then the window, firing its timer in virtual time, exactly as the daemon
//! will:
//!
//! ```text
//!  sender ──┬── line 0 (LinkModel) ──┐
//!  counter  │                        ├─▶ replay check ─▶ reorder window ─▶ "TUN"
//!  n, n+1.. └── line 1 (LinkModel) ──┘     (dup: note_duplicate)  (timer: poll_timeout)
//! ```
//!
//! Each test checks what reaches the TUN against what the lines did: order,
//! losses (only counters no line delivered), the added latency (never more
//! than the effective hold) and the memory bounds.

use braid_core::reorder::{InsertOutcome, ReorderConfig, ReorderWindow, DEFAULT_PASS_WAIT};
use braid_core::replay::ReplayWindow;
use braid_core::testing::clock;
use braid_netem::link::{Fate, JitterDist, LinkModel, LinkParams};
use std::time::{Duration, Instant};

const LEN: usize = 200;

/// Two-sided 99.9 % normal quantile.
const Z: f64 = 3.2905;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn line(delay_ms: u64, jitter_us: u64, reorder: bool, loss: f64) -> LinkParams {
    let p = LinkParams {
        delay: ms(delay_ms),
        jitter: Duration::from_micros(jitter_us),
        jitter_dist: JitterDist::Uniform,
        reorder,
        loss,
        ..LinkParams::default()
    };
    p.validate().unwrap();
    p
}

/// A time window during which a line is cut.
#[derive(Clone, Copy)]
struct Cut {
    line: usize,
    from: Duration,
    until: Duration,
}

struct Scenario {
    lines: Vec<LinkParams>,
    /// Counters sent per second, on every line (redundant mode).
    rate: u64,
    duration: Duration,
    cuts: Vec<Cut>,
    /// (time, live mask): what the caller's path probing decides.
    live: Vec<(Duration, u8)>,
    skew: Duration,
    cfg: ReorderConfig,
    seed: u64,
}

#[derive(Debug, Default)]
struct Outcome {
    sent: u64,
    /// Counters of which at least one copy arrived.
    arrived: u64,
    /// (counter, delivered at, waited in the window).
    delivered: Vec<(u64, Duration, Duration)>,
    /// Delivered counters whose wait exceeded the hold at that moment.
    over_hold: Vec<(u64, Duration, Duration)>,
    /// Counters that arrived but never reached the TUN.
    spurious_losses: Vec<u64>,
    lost_counter: u64,
    max_held: usize,
    max_held_bytes: usize,
    max_slots: usize,
    final_hold: Duration,
}

struct Rx {
    t0: Instant,
    w: ReorderWindow,
    replay: ReplayWindow,
    out: Outcome,
    /// When each counter's inserted copy arrived (the wait starts there).
    arrived_at: Vec<Option<Instant>>,
}

impl Rx {
    fn record(&mut self, now: Instant, counter: u64, hold: Duration) {
        let waited = now - self.arrived_at[counter as usize].unwrap();
        let at = now - self.t0;
        // Rounding of the decayed estimate: a microsecond.
        if waited > hold + Duration::from_micros(1) {
            self.out.over_hold.push((counter, at, waited));
        }
        self.out.delivered.push((counter, at, waited));
    }

    fn drain(&mut self, now: Instant, hold: Duration) {
        let mut got = Vec::new();
        self.w
            .drain_ready(|p| got.push(u64::from_le_bytes(p[..8].try_into().unwrap())));
        for c in got {
            self.record(now, c, hold);
        }
    }

    fn check_bounds(&mut self, cfg: &ReorderConfig) {
        let w = &self.w;
        self.out.max_held = self.out.max_held.max(w.held_packets());
        self.out.max_held_bytes = self.out.max_held_bytes.max(w.held_bytes());
        self.out.max_slots = self.out.max_slots.max(w.allocated_slots());
        assert!(w.held_packets() <= cfg.capacity);
        assert!(w.held_bytes() <= cfg.max_bytes);
        assert!(w.allocated_slots() <= 2 * cfg.capacity + 1);
    }

    /// Fires the window's timer for every deadline up to `until`.
    fn run_timers(&mut self, until: Instant) {
        while let Some(at) = self.w.poll_timeout() {
            if at > until {
                break;
            }
            let hold = self.w.effective_hold();
            self.w.handle_timeout(at);
            let now = at.max(until.min(at));
            self.drain(now, hold);
        }
    }

    fn receive(&mut self, now: Instant, counter: u64, path: usize, cfg: &ReorderConfig) {
        let hold = self.w.effective_hold();
        if !self.replay.update(counter) {
            self.w.note_duplicate(now, counter, path);
            self.drain(now, hold);
            return;
        }
        self.arrived_at[counter as usize] = Some(now);
        if self.w.passes_through(counter) {
            self.w.delivered_in_place(now, counter, path);
            self.record(now, counter, hold);
        } else {
            let mut packet = [0u8; LEN];
            packet[..8].copy_from_slice(&counter.to_le_bytes());
            let outcome = self.w.insert(now, counter, path, &packet);
            assert_ne!(outcome, InsertOutcome::ReadyFull);
            assert_ne!(outcome, InsertOutcome::TooLarge);
            self.drain(now, hold);
        }
        self.check_bounds(cfg);
    }
}

fn run(s: &Scenario) -> Outcome {
    let t0 = clock::epoch();
    let mut lines: Vec<LinkModel> = s
        .lines
        .iter()
        .enumerate()
        .map(|(i, p)| LinkModel::new(p.clone(), s.seed * 16 + i as u64))
        .collect();
    let n = s.rate * s.duration.as_secs();
    let every = Duration::from_secs(1) / s.rate as u32;
    // Every copy's arrival: (time, counter, line).
    let mut arrivals = Vec::new();
    let mut arrived = vec![false; n as usize];
    for counter in 0..n {
        let sent = every * counter as u32;
        for (i, l) in lines.iter_mut().enumerate() {
            let cut = s
                .cuts
                .iter()
                .any(|c| c.line == i && c.from <= sent && sent < c.until);
            l.set_cut(cut);
            if let Fate::Delivered { first, duplicate } = l.offer(t0 + sent, LEN) {
                for copy in std::iter::once(first).chain(duplicate) {
                    arrivals.push((copy.at, counter, i));
                    arrived[counter as usize] = true;
                }
            }
        }
    }
    arrivals.sort();

    let mut w = ReorderWindow::new(s.cfg.clone());
    w.set_path_skew(s.skew);
    let mut rx = Rx {
        t0,
        w,
        replay: ReplayWindow::new(),
        out: Outcome {
            sent: n,
            arrived: arrived.iter().filter(|&&a| a).count() as u64,
            ..Outcome::default()
        },
        arrived_at: vec![None; n as usize],
    };
    let mut live = s.live.iter().peekable();
    for (at, counter, path) in arrivals {
        // The caller's path state changes and the window's timer, in order.
        while let Some(&&(change, mask)) = live.peek() {
            if t0 + change > at {
                break;
            }
            rx.run_timers(t0 + change);
            rx.w.set_live_paths(mask);
            live.next();
        }
        rx.run_timers(at);
        rx.receive(at, counter, path, &s.cfg);
    }
    let end = t0 + s.duration + Duration::from_secs(1);
    rx.run_timers(end);
    assert_eq!(rx.w.held_packets(), 0, "everything is given up in the end");

    let delivered: std::collections::HashSet<u64> = rx.out.delivered.iter().map(|d| d.0).collect();
    rx.out.spurious_losses = (0..n)
        .filter(|&c| arrived[c as usize] && !delivered.contains(&c))
        .collect();
    rx.out.lost_counter = rx.w.counters().lost;
    rx.out.final_hold = rx.w.effective_hold();
    let c = rx.w.counters();
    eprintln!(
        "sent {} arrived {} delivered {} | accepted {} under-window {} buffered {} duplicated {} lost {} | max held {} pkts {} B, slots {} | hold {:?}",
        n,
        rx.out.arrived,
        rx.out.delivered.len(),
        c.accepted,
        c.under_window,
        c.buffered,
        c.duplicated,
        c.lost,
        rx.out.max_held,
        rx.out.max_held_bytes,
        rx.out.max_slots,
        rx.out.final_hold,
    );
    rx.out
}

fn assert_in_order(out: &Outcome) {
    assert!(
        out.delivered.windows(2).all(|d| d[0].0 < d[1].0),
        "delivered order is not strictly increasing"
    );
}

/// The window's waits, as a sorted list, from `from` on.
fn waits_after(out: &Outcome, from: Duration) -> Vec<Duration> {
    let mut w: Vec<Duration> = out
        .delivered
        .iter()
        .filter(|d| d.1 >= from)
        .map(|d| d.2)
        .collect();
    w.sort();
    w
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

#[test]
fn redundant_lines_with_two_percent_loss_each() {
    // 10 ms and 25 ms ± 1 ms (FIFO) lines, 2 % loss each, every counter on
    // both: only counters lost on both lines (2 % × 2 %) may be missing.
    let s = Scenario {
        lines: vec![line(10, 0, true, 0.02), line(25, 1_000, false, 0.02)],
        rate: 20_000,
        duration: Duration::from_secs(10),
        cuts: vec![],
        live: vec![(Duration::ZERO, 0b11)],
        skew: ms(17),
        cfg: ReorderConfig::default(),
        seed: 1,
    };
    let out = run(&s);
    assert_in_order(&out);
    assert!(out.spurious_losses.is_empty(), "{:?}", out.spurious_losses);
    assert!(
        out.over_hold.is_empty(),
        "{:?}",
        &out.over_hold[..5.min(out.over_hold.len())]
    );
    let missing = out.sent - out.arrived;
    assert_eq!(out.delivered.len() as u64, out.arrived);
    // Every missing counter is counted Lost (none at the very end here).
    assert_eq!(out.lost_counter, missing);
    let p = 0.02 * 0.02;
    let mean = out.sent as f64 * p;
    let sd = (out.sent as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (missing as f64 - mean).abs() <= Z * sd + 1.0,
        "{missing} lost of {}, expected {mean:.0} ± {:.0}",
        out.sent,
        Z * sd
    );
    // A gap lost on the fast line waits for the slow one (15 ms), not for
    // the hold; a gap lost on both is given up when the slow line passes.
    let waits = waits_after(&out, Duration::ZERO);
    assert!(*waits.last().unwrap() <= ms(18), "{:?}", waits.last());
}

#[test]
fn jittery_line_reordering_is_repaired_within_the_hold() {
    // One line, 3 ms ± 1 ms uniform jitter that reorders, no loss.
    let s = Scenario {
        lines: vec![line(3, 1_000, true, 0.0)],
        rate: 20_000,
        duration: Duration::from_secs(10),
        cuts: vec![],
        live: vec![(Duration::ZERO, 0b01)],
        skew: ms(1),
        cfg: ReorderConfig::default(),
        seed: 2,
    };
    let out = run(&s);
    assert_in_order(&out);
    assert_eq!(out.arrived, out.sent);
    // While the path's slack is learnt (it starts at 0: FIFO until shown
    // otherwise), a few reordered packets are declared lost early; after
    // the first 100 ms not one.
    let warm_up = Duration::from_millis(100);
    let late: Vec<u64> = out
        .spurious_losses
        .iter()
        .copied()
        .filter(|&c| c >= 2_000)
        .collect();
    assert!(late.is_empty(), "lost after warm-up: {late:?}");
    assert!(
        out.spurious_losses.len() <= 20,
        "{}",
        out.spurious_losses.len()
    );
    assert!(
        out.over_hold.is_empty(),
        "{:?}",
        &out.over_hold[..5.min(out.over_hold.len())]
    );
    let waits = waits_after(&out, warm_up);
    let (p50, p99, max) = (
        percentile(&waits, 0.5),
        percentile(&waits, 0.99),
        *waits.last().unwrap(),
    );
    eprintln!("extra latency: p50 {p50:?} p99 {p99:?} max {max:?}");
    // Reordering spans at most 2 ms; so does the added latency.
    assert!(max <= Duration::from_micros(2_100), "{max:?}");
    assert!(
        out.final_hold >= ms(2) && out.final_hold <= ms(10),
        "{:?}",
        out.final_hold
    );
}

#[test]
fn cutting_one_redundant_line_loses_nothing() {
    // Clean lines, 10 ms and 25 ms ± 2 ms; line 0 cut from 4 s to 7 s. The
    // caller notices after 300 ms and marks it live again 100 ms after it
    // came back.
    let s = Scenario {
        lines: vec![line(10, 0, true, 0.0), line(25, 2_000, false, 0.0)],
        rate: 10_000,
        duration: Duration::from_secs(10),
        cuts: vec![Cut {
            line: 0,
            from: ms(4_000),
            until: ms(7_000),
        }],
        live: vec![(Duration::ZERO, 0b11), (ms(4_300), 0b10), (ms(7_100), 0b11)],
        skew: ms(19),
        cfg: ReorderConfig::default(),
        seed: 3,
    };
    let out = run(&s);
    assert_in_order(&out);
    assert_eq!(out.arrived, out.sent);
    assert_eq!(out.delivered.len() as u64, out.sent);
    assert_eq!(out.lost_counter, 0);
    assert!(
        out.over_hold.is_empty(),
        "{:?}",
        &out.over_hold[..5.min(out.over_hold.len())]
    );
}

#[test]
fn early_loss_never_stalls_longer_than_the_hold() {
    // As above, but both lines lose 2 %: while line 0 is cut and still
    // marked live, gaps wait at most the hold; once it is marked down, a
    // gap is given up once line 1 passed it by the pass wait.
    let s = Scenario {
        lines: vec![line(10, 0, true, 0.02), line(25, 2_000, false, 0.02)],
        rate: 10_000,
        duration: Duration::from_secs(10),
        cuts: vec![Cut {
            line: 0,
            from: ms(4_000),
            until: ms(7_000),
        }],
        live: vec![(Duration::ZERO, 0b11), (ms(4_300), 0b10), (ms(7_100), 0b11)],
        skew: ms(19),
        cfg: ReorderConfig::default(),
        seed: 4,
    };
    let out = run(&s);
    assert_in_order(&out);
    assert!(out.spurious_losses.is_empty(), "{:?}", out.spurious_losses);
    assert!(
        out.over_hold.is_empty(),
        "{:?}",
        &out.over_hold[..5.min(out.over_hold.len())]
    );
    assert_eq!(out.lost_counter, out.sent - out.arrived);
    // Line 1 alone, marked so: a loss costs the pass wait and one packet
    // interval, not the hold.
    let alone: Vec<Duration> = out
        .delivered
        .iter()
        .filter(|d| d.1 >= ms(4_400) && d.1 < ms(7_000))
        .map(|d| d.2)
        .collect();
    let max_alone = alone.iter().max().unwrap();
    assert!(
        *max_alone <= DEFAULT_PASS_WAIT + Duration::from_micros(300),
        "{max_alone:?}"
    );
    // While line 0 was cut but believed up, gaps waited — at most the hold.
    let waiting: Vec<Duration> = out
        .delivered
        .iter()
        .filter(|d| d.1 >= ms(4_030) && d.1 < ms(4_300))
        .map(|d| d.2)
        .collect();
    let max_waiting = *waiting.iter().max().unwrap();
    eprintln!("line 1 alone: max wait {max_alone:?}; cut but live: max wait {max_waiting:?}");
    assert!(max_waiting > ms(2), "{max_waiting:?}");
}

#[test]
fn memory_stays_within_bounds_under_a_flood() {
    // 100 k packets/s on a 3 ms ± 1 ms line losing 5 %, into a window of
    // 256 packets and 32 KiB: the bounds give gaps up, nothing grows.
    let cfg = ReorderConfig {
        capacity: 256,
        max_bytes: 32 << 10,
        ..ReorderConfig::default()
    };
    let s = Scenario {
        lines: vec![line(3, 1_000, true, 0.05)],
        rate: 100_000,
        duration: Duration::from_secs(2),
        cuts: vec![],
        live: vec![],
        skew: ms(1),
        cfg: cfg.clone(),
        seed: 5,
    };
    let out = run(&s);
    assert_in_order(&out);
    assert!(out.max_held <= cfg.capacity);
    assert!(out.max_held_bytes <= cfg.max_bytes);
    assert!(out.max_slots <= 2 * cfg.capacity + 1);
    // The bytes bound bit: 32 KiB is 163 packets of 200 bytes.
    assert!(out.max_held_bytes > cfg.max_bytes - LEN);
}
