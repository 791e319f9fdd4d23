//! The reorder window tested three ways (as Linux WireGuard tests its
//! windows): a numbered case table, a property test against a deliberately
//! naive model, and (in `tests/reorder_sim.rs`) the link simulator; then
//! the extremes the first two never reach.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, VecDeque};

/// An arbitrary origin for virtual time; only offsets from it matter.
#[allow(clippy::disallowed_methods)]
fn origin() -> Instant {
    Instant::now()
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// A packet that carries its counter in its first 8 bytes.
fn packet(counter: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0xa5; len.max(8)];
    p[..8].copy_from_slice(&counter.to_le_bytes());
    p
}

fn counter_of(p: &[u8]) -> u64 {
    u64::from_le_bytes(p[..8].try_into().unwrap())
}

/// The caller's side: zero-copy when the window lets it, else insert and
/// drain, recording what reached the "TUN".
struct Rx {
    w: ReorderWindow,
    t0: Instant,
    delivered: Vec<u64>,
}

impl Rx {
    fn new(cfg: ReorderConfig, live: u8) -> Rx {
        let mut w = ReorderWindow::new(cfg);
        w.set_live_paths(live);
        Rx {
            w,
            t0: origin(),
            delivered: Vec::new(),
        }
    }

    fn at(&self, t_us: u64) -> Instant {
        self.t0 + us(t_us)
    }

    fn drain(&mut self) {
        let delivered = &mut self.delivered;
        self.w.drain_ready(|p| delivered.push(counter_of(p)));
    }

    /// Returns the insert outcome, or `None` when delivered in place.
    fn packet(
        &mut self,
        t_us: u64,
        counter: u64,
        path: usize,
        len: usize,
    ) -> Option<InsertOutcome> {
        // One line, read in order: everything that arrived before this
        // packet has been taken in, so the timers may run to its arrival
        // before and after it (a caller with several sockets runs them to
        // the oldest point any socket is read up to).
        self.tick(t_us);
        let now = self.at(t_us);
        if self.w.passes_through(counter) {
            self.w.delivered_in_place(now, counter, path);
            self.delivered.push(counter);
            self.tick(t_us);
            return None;
        }
        let outcome = self.w.insert(now, counter, path, &packet(counter, len));
        self.drain();
        self.tick(t_us);
        Some(outcome)
    }

    fn dup(&mut self, t_us: u64, counter: u64, path: usize) {
        self.tick(t_us);
        let now = self.at(t_us);
        self.w.note_duplicate(now, counter, path);
        self.drain();
        self.tick(t_us);
    }

    fn tick(&mut self, t_us: u64) {
        let now = self.at(t_us);
        self.w.handle_timeout(now);
        self.drain();
    }
}

// ----- 1. The numbered case table ------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Op {
    /// A packet (time µs, counter, path) of 64 bytes.
    P(u64, u64, usize),
    /// A packet with a length.
    Pl(u64, u64, usize, usize),
    /// A copy the replay check rejected (time µs, counter, path).
    D(u64, u64, usize),
    /// The timer fires (time µs).
    T(u64),
    /// `poll_timeout()` is within [lo, hi] µs (`None` when lo > hi).
    Poll(u64, u64),
}

/// Counters after a step: accepted, under window, buffered, duplicated,
/// lost, then the held packets gauge.
type After = [u64; 6];

/// One step: the operation, what it delivers (in order), the counters
/// afterwards.
type Step = (Op, &'static [u64], After);

fn run_case(number: usize, cfg: ReorderConfig, live: u8, steps: &[Step]) {
    let mut rx = Rx::new(cfg, live);
    for (i, &(op, delivered, after)) in steps.iter().enumerate() {
        let at = format!("case {number} step {}: {op:?}", i + 1);
        let before = rx.delivered.len();
        match op {
            Op::P(t, c, p) => {
                rx.packet(t, c, p, 64);
            }
            Op::Pl(t, c, p, len) => {
                rx.packet(t, c, p, len);
            }
            Op::D(t, c, p) => rx.dup(t, c, p),
            Op::T(t) => rx.tick(t),
            Op::Poll(lo, hi) => {
                let got = rx.w.poll_timeout().map(|d| d - rx.t0);
                if lo > hi {
                    assert_eq!(got, None, "{at}");
                } else {
                    let got = got.unwrap_or_else(|| panic!("{at}: no timeout"));
                    assert!(us(lo) <= got && got <= us(hi), "{at}: {got:?}");
                }
            }
        }
        assert_eq!(&rx.delivered[before..], delivered, "{at}: delivered");
        let c = rx.w.counters();
        let got = [
            c.accepted,
            c.under_window,
            c.buffered,
            c.duplicated,
            c.lost,
            rx.w.held_packets() as u64,
        ];
        assert_eq!(got, after, "{at}: [acc, under, buf, dup, lost, held]");
    }
}

/// The default window with every path's slack known from its first
/// packet (what the cases of the rules are about; the learning has cases
/// of its own).
fn learned_cfg() -> ReorderConfig {
    ReorderConfig {
        slack_learning: 0,
        ..ReorderConfig::default()
    }
}

/// The default window with no pass wait: rule 3 trusts a line that never
/// reordered at once (what the rule-3 cases below are about).
fn trusting_cfg() -> ReorderConfig {
    ReorderConfig {
        pass_wait: Duration::ZERO,
        ..learned_cfg()
    }
}

/// Small bounds and a 10 ms ceiling: below the initial 20 ms estimate, so
/// the hold is exactly 10 ms in these short runs.
fn table_cfg() -> ReorderConfig {
    ReorderConfig {
        hold_ceiling: Duration::from_millis(10),
        capacity: 8,
        max_bytes: 8 * 100,
        max_packet: 100,
        pass_wait: Duration::ZERO,
        slack_learning: 0,
    }
}

const NO: u64 = 1;
const NONE: (u64, u64) = (NO, 0);
const HUGE: u64 = 1 << 40;

#[test]
fn case_table() {
    use Op::*;
    let cfg = table_cfg;
    let cases: Vec<(ReorderConfig, u8, Vec<Step>)> = vec![
        // 1: in order, from a first counter that is not zero.
        (
            cfg(),
            0,
            vec![
                (P(0, 1000, 0), &[1000], [1, 0, 0, 0, 0, 0]),
                (P(100, 1001, 0), &[1001], [2, 0, 0, 0, 0, 0]),
                (P(200, 1002, 1), &[1002], [3, 0, 0, 0, 0, 0]),
                (P(300, 999, 0), &[], [3, 1, 0, 0, 0, 0]),
                (P(400, 1003, 0), &[1003], [4, 1, 0, 0, 0, 0]),
                (Poll(NONE.0, NONE.1), &[], [4, 1, 0, 0, 0, 0]),
            ],
        ),
        // 2: a simple swap.
        (
            cfg(),
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(100, 2, 0), &[], [1, 0, 1, 0, 0, 1]),
                (Poll(10_100, 10_100), &[], [1, 0, 1, 0, 0, 1]),
                (P(200, 1, 0), &[1, 2], [3, 0, 1, 0, 0, 0]),
                (Poll(NONE.0, NONE.1), &[], [3, 0, 1, 0, 0, 0]),
                (P(300, 3, 0), &[3], [4, 0, 1, 0, 0, 0]),
            ],
        ),
        // 3: a gap of three filled from the top; nothing is lost.
        (
            cfg(),
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(100, 4, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(200, 3, 1), &[], [1, 0, 2, 0, 0, 2]),
                (P(300, 2, 0), &[], [1, 0, 3, 0, 0, 3]),
                // The gap is still known since the first arrival above it.
                (Poll(10_100, 10_100), &[], [1, 0, 3, 0, 0, 3]),
                (P(400, 1, 1), &[1, 2, 3, 4], [5, 0, 3, 0, 0, 0]),
            ],
        ),
        // 4: a gap expires by the timer, its late packet is under window.
        (
            cfg(),
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(1_000, 2, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(2_000, 3, 0), &[], [1, 0, 2, 0, 0, 2]),
                (Poll(11_000, 11_000), &[], [1, 0, 2, 0, 0, 2]),
                (T(10_999), &[], [1, 0, 2, 0, 0, 2]),
                (T(11_000), &[2, 3], [3, 0, 2, 0, 1, 0]),
                (P(12_000, 1, 0), &[], [3, 1, 2, 0, 1, 0]),
                (P(12_100, 4, 0), &[4], [4, 1, 2, 0, 1, 0]),
            ],
        ),
        // 5: two gaps expire one after the other, each from its own start.
        (
            cfg(),
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(1_000, 3, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(5_000, 5, 0), &[], [1, 0, 2, 0, 0, 2]),
                (T(11_000), &[3], [2, 0, 2, 0, 2, 1]),
                (Poll(15_000, 15_000), &[], [2, 0, 2, 0, 2, 1]),
                (T(15_000), &[5], [3, 0, 2, 0, 3, 0]),
            ],
        ),
        // 6: a packet below a held one inherits the older gap start; both
        // gaps expire together (a packet arrival also expires them).
        (
            cfg(),
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(1_000, 5, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(5_000, 3, 0), &[], [1, 0, 2, 0, 0, 2]),
                (P(11_000, 6, 0), &[3, 5, 6], [4, 0, 2, 0, 3, 0]),
            ],
        ),
        // 7: capacity (3 held): the oldest gap is given up for a new packet.
        (
            ReorderConfig {
                capacity: 3,
                ..cfg()
            },
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(100, 2, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(200, 3, 0), &[], [1, 0, 2, 0, 0, 2]),
                (P(300, 4, 0), &[], [1, 0, 3, 0, 0, 3]),
                (P(400, 6, 0), &[2, 3, 4], [4, 0, 4, 0, 1, 1]),
                (P(500, 5, 0), &[5, 6], [6, 0, 4, 0, 1, 0]),
            ],
        ),
        // 8: capacity, the new packet inside the head gap: only the part of
        // the gap below it is given up, and it is delivered.
        (
            ReorderConfig {
                capacity: 2,
                ..cfg()
            },
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(100, 5, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(200, 6, 0), &[], [1, 0, 2, 0, 0, 2]),
                (P(300, 2, 0), &[2], [2, 0, 2, 0, 1, 2]),
                (P(400, 3, 0), &[3], [3, 0, 2, 0, 1, 2]),
                (P(500, 4, 0), &[4, 5, 6], [6, 0, 2, 0, 1, 0]),
            ],
        ),
        // 9: bytes (250, packets of 100): the third held would not fit.
        (
            ReorderConfig {
                max_bytes: 250,
                ..cfg()
            },
            0,
            vec![
                (Pl(0, 0, 0, 100), &[0], [1, 0, 0, 0, 0, 0]),
                (Pl(100, 2, 0, 100), &[], [1, 0, 1, 0, 0, 1]),
                (Pl(200, 3, 0, 100), &[], [1, 0, 2, 0, 0, 2]),
                (Pl(300, 5, 0, 100), &[2, 3], [3, 0, 3, 0, 1, 1]),
                (Pl(400, 6, 0, 50), &[], [3, 0, 4, 0, 1, 2]),
                (Pl(500, 7, 0, 100), &[], [3, 0, 5, 0, 1, 3]),
                (Pl(600, 8, 0, 8), &[5, 6, 7, 8], [7, 0, 5, 0, 2, 0]),
            ],
        ),
        // 10: two FIFO paths, both live: a gap is lost as soon as both have
        // passed it (the second path's copy of 2 tells).
        (
            cfg(),
            0b11,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (D(100, 0, 1), &[], [1, 1, 0, 0, 0, 0]),
                (P(1_000, 2, 0), &[], [1, 1, 1, 0, 0, 1]),
                (Poll(11_000, 11_000), &[], [1, 1, 1, 0, 0, 1]),
                (D(3_000, 2, 1), &[2], [2, 1, 1, 1, 1, 0]),
                // Counter 3 lost on path 0 but arrives on path 1.
                (P(4_000, 4, 0), &[], [2, 1, 2, 1, 1, 1]),
                (P(6_000, 3, 1), &[3, 4], [4, 1, 2, 1, 1, 0]),
            ],
        ),
        // 11: a live path that has not passed the gap keeps it (the timer
        // gives it up); a path that is not live does not.
        (
            cfg(),
            0b11,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(1_000, 2, 0), &[], [1, 0, 1, 0, 0, 1]),
                (T(10_999), &[], [1, 0, 1, 0, 0, 1]),
                (T(11_000), &[2], [2, 0, 1, 0, 1, 0]),
            ],
        ),
        (
            cfg(),
            0b01,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                // Held (Buffered) and given up at once: the only live
                // path has passed counter 1.
                (P(1_000, 2, 0), &[2], [2, 0, 1, 0, 1, 0]),
                // Path 1 is not live: what it says changes nothing.
                (P(1_100, 4, 1), &[], [2, 0, 2, 0, 1, 1]),
                (P(1_200, 5, 0), &[4, 5], [4, 0, 3, 0, 2, 0]),
            ],
        ),
        // 13: a single path that reorders gets slack: after a packet came
        // 3 ms late, a gap waits 2 × 3 ms after the path passed it.
        (
            ReorderConfig {
                hold_ceiling: Duration::from_millis(50),
                ..cfg()
            },
            0b01,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(1_000, 2, 0), &[2], [2, 0, 1, 0, 1, 0]),
                (P(4_000, 1, 0), &[], [2, 1, 1, 0, 1, 0]),
                (P(10_000, 4, 0), &[], [2, 1, 2, 0, 1, 1]),
                (Poll(15_990, 16_000), &[], [2, 1, 2, 0, 1, 1]),
                (T(15_900), &[], [2, 1, 2, 0, 1, 1]),
                (P(15_950, 3, 0), &[3, 4], [4, 1, 2, 0, 1, 0]),
                (P(20_000, 6, 0), &[], [4, 1, 3, 0, 1, 1]),
                // Counter 3 came 5.95 ms after 4 on the same path: the
                // slack grew, the next gap waits 2 × 5.95 ms.
                (T(26_000), &[], [4, 1, 3, 0, 1, 1]),
                (Poll(31_880, 31_900), &[], [4, 1, 3, 0, 1, 1]),
                (T(31_900), &[6], [5, 1, 3, 0, 2, 0]),
            ],
        ),
        // 14: duplicates of a held packet vs below the window.
        (
            cfg(),
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(1_000, 2, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(1_100, 2, 1), &[], [1, 0, 1, 1, 0, 1]),
                (D(1_200, 2, 1), &[], [1, 0, 1, 2, 0, 1]),
                (D(1_300, 0, 1), &[], [1, 1, 1, 2, 0, 1]),
                (P(1_400, 0, 1), &[], [1, 2, 1, 2, 0, 1]),
                (P(1_500, 1, 0), &[1, 2], [3, 2, 1, 2, 0, 0]),
                (D(1_600, 2, 1), &[], [3, 3, 1, 2, 0, 0]),
            ],
        ),
        // 15: the window off: arrival order, everything Accepted.
        (
            ReorderConfig {
                hold_ceiling: Duration::ZERO,
                ..cfg()
            },
            0b11,
            vec![
                (P(0, 5, 0), &[5], [1, 0, 0, 0, 0, 0]),
                (P(100, 7, 0), &[7], [2, 0, 0, 0, 0, 0]),
                (P(200, 6, 1), &[6], [3, 0, 0, 0, 0, 0]),
                (D(300, 6, 0), &[], [3, 1, 0, 0, 0, 0]),
                (P(400, 3, 0), &[3], [4, 1, 0, 0, 0, 0]),
                (Poll(NONE.0, NONE.1), &[], [4, 1, 0, 0, 0, 0]),
            ],
        ),
        // 16: a huge jump is held, then given up as one gap.
        (
            cfg(),
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(1_000, HUGE, 0), &[], [1, 0, 1, 0, 0, 1]),
                (T(11_000), &[HUGE], [2, 0, 1, 0, HUGE - 1, 0]),
                (
                    P(11_100, HUGE + 1, 0),
                    &[HUGE + 1],
                    [3, 0, 1, 0, HUGE - 1, 0],
                ),
                (P(11_200, 5, 0), &[], [3, 1, 1, 0, HUGE - 1, 0]),
            ],
        ),
        // 17: the first packet fixes the start even when lower ones follow.
        (
            cfg(),
            0,
            vec![
                (P(0, 7, 0), &[7], [1, 0, 0, 0, 0, 0]),
                (P(100, 6, 0), &[], [1, 1, 0, 0, 0, 0]),
                (P(200, 9, 0), &[], [1, 1, 1, 0, 0, 1]),
                (P(300, 8, 0), &[8, 9], [3, 1, 1, 0, 0, 0]),
            ],
        ),
    ];
    for (number, (cfg, live, steps)) in cases.into_iter().enumerate() {
        run_case(number + 1, cfg, live, &steps);
    }
}

/// Two live lines, 0 delivered, 2 held (it came on line 0 at `first` ms,
/// 1 is missing), then the second line's socket read first: 3, which
/// arrived at 40 ms on line 1, held too. Returns the window and its origin.
fn a_later_socket_read_first(cfg: ReorderConfig, first: u64) -> (ReorderWindow, Instant) {
    let mut w = ReorderWindow::new(cfg);
    w.set_live_paths(0b11);
    let t0 = origin();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    w.delivered_in_place(t0, 0, 0);
    assert_eq!(
        w.insert(ms(first), 2, 0, &packet(2, 64)),
        InsertOutcome::Buffered
    );
    assert_eq!(
        w.insert(ms(40), 3, 1, &packet(3, 64)),
        InsertOutcome::Buffered
    );
    (w, t0)
}

/// A caller with one socket per line reads one after the other: a packet
/// from the second line may be offered with an arrival later than packets
/// still waiting in the first line's socket. Offering it gives nothing up;
/// only the timers do, run to the time every socket was read up to.
#[test]
fn only_the_timers_give_gaps_up_so_a_later_socket_read_first_loses_nothing() {
    // Gap 1: 2 came on line 0 at 1 ms; 1 is late on line 0. The packet
    // from line 1's socket arrived at 40 ms, far past the 10 ms hold, and
    // it passed the gap too (rule 3).
    let (mut w, t0) = a_later_socket_read_first(table_cfg(), 1);
    let ms = |n: u64| t0 + Duration::from_millis(n);
    assert_eq!(w.counters().lost, 0, "offering a packet gave a gap up");
    // Line 0 was read up to 5 ms so far: nothing is due by then.
    w.handle_timeout(ms(5));
    assert_eq!(w.counters().lost, 0, "a gap went before its hold");
    // Then line 0's socket: 1 arrived at 6 ms, before the hold ended.
    assert_eq!(w.insert(ms(6), 1, 0, &packet(1, 64)), InsertOutcome::Ready);
    let mut got = Vec::new();
    w.drain_ready(|p| got.push(counter_of(p)));
    assert_eq!(got, [1, 2, 3]);
    assert_eq!([w.counters().lost, w.counters().under_window], [0, 0]);
    // A gap whose filler never comes goes once both lines were read past
    // its hold: 5 is missing, 6 came on line 0 at 41 ms.
    assert_eq!(
        w.insert(ms(41), 6, 0, &packet(6, 64)),
        InsertOutcome::Buffered
    );
    assert_eq!(w.insert(ms(41), 4, 1, &packet(4, 64)), InsertOutcome::Ready);
    let due = w.poll_timeout().expect("gap 5 waits");
    assert!(due <= ms(51), "{:?}", due - t0);
    w.handle_timeout(due - Duration::from_micros(1));
    assert_eq!(w.counters().lost, 0);
    w.handle_timeout(due);
    assert_eq!(w.counters().lost, 1);
}

/// The same two sockets, and a gap that was open before the caller fell
/// behind: its filler waited in the first socket while the caller read a
/// packet that arrived 40 ms later from the second. The filler is
/// measured at its own arrival (1 ms late), not at the window's clock
/// (which the later packet moved on): the caller's delay is no lateness.
#[test]
fn a_packet_is_measured_at_its_own_arrival_not_the_windows_clock() {
    let (mut w, t0) = a_later_socket_read_first(learned_cfg(), 2);
    let ms = |n: u64| t0 + Duration::from_millis(n);
    // Then the first: 1 had arrived at 3 ms, a millisecond after 2.
    assert_eq!(w.insert(ms(3), 1, 0, &packet(1, 64)), InsertOutcome::Ready);
    assert!(
        !w.lateness_measured(),
        "1 ms counted as more than the estimate"
    );
    assert!(w.hold_parts().1 <= INITIAL_LATENESS, "{:?}", w.hold_parts());
    // A gap opened by a packet read late is known from when that packet
    // arrived: 5 (at 41 ms, second socket) is read before 4 and 6 (at
    // 4 and 5 ms, first socket), and the gap below 6 dates from 5 ms.
    assert_eq!(
        w.insert(ms(41), 5, 1, &packet(5, 64)),
        InsertOutcome::Buffered
    );
    assert_eq!(
        w.insert(ms(5), 6, 0, &packet(6, 64)),
        InsertOutcome::Buffered
    );
    let hold = w.effective_hold();
    let due = w.poll_timeout().expect("gap 4 waits");
    assert!(
        due <= ms(5) + hold,
        "{:?} after 5 ms + hold {hold:?}",
        due - ms(5)
    );
}

#[test]
fn oversized_packets_are_refused_untouched() {
    let mut rx = Rx::new(table_cfg(), 0);
    rx.packet(0, 0, 0, 64);
    assert_eq!(rx.packet(100, 2, 0, 101), Some(InsertOutcome::TooLarge));
    assert_eq!(rx.w.counters().buffered, 0);
    assert_eq!(rx.w.held_packets(), 0);
    assert_eq!(rx.packet(200, 1, 0, 100), None);
}

#[test]
fn a_raised_max_packet_lets_bigger_packets_in_and_grows_old_slots() {
    let mut rx = Rx::new(table_cfg(), 0);
    rx.packet(0, 0, 0, 64);
    // Counter 2 waits for 1 in a slot made at the old size (100 bytes).
    assert_eq!(rx.packet(100, 2, 0, 100), Some(InsertOutcome::Buffered));
    rx.w.raise_max_packet(200);
    rx.packet(200, 1, 0, 64);
    assert_eq!(rx.delivered, [0, 1, 2]);
    // That slot is free again; a 200-byte packet waiting for 3 reuses it.
    assert_eq!(rx.packet(300, 4, 0, 200), Some(InsertOutcome::Buffered));
    assert_eq!(rx.packet(400, 3, 0, 200), Some(InsertOutcome::Ready));
    assert_eq!(rx.delivered, [0, 1, 2, 3, 4]);
    // Lowering is refused: 200 bytes still fit.
    rx.w.raise_max_packet(50);
    assert_eq!(rx.packet(500, 6, 0, 200), Some(InsertOutcome::Buffered));
}

#[test]
fn slots_are_as_large_as_their_packets_not_the_largest_possible() {
    // A 9000-byte tunnel MTU, 1420-byte packets: 100 of them held.
    let mut rx = Rx::new(
        ReorderConfig {
            max_packet: 9000,
            ..learned_cfg()
        },
        0,
    );
    rx.packet(0, 0, 0, 1420);
    for c in 2..102 {
        assert_eq!(rx.packet(10, c, 0, 1420), Some(InsertOutcome::Buffered));
    }
    assert_eq!(rx.w.allocated_slots(), 100);
    assert!(
        rx.w.allocated_bytes() <= 100 * 1420 * 2,
        "{} bytes for 100 packets of 1420",
        rx.w.allocated_bytes()
    );
    assert!(rx.w.allocated_bytes() >= 100 * 1420);
}

#[test]
fn slots_are_freed_once_the_window_was_idle_and_kept_while_it_reorders() {
    let mut rx = Rx::new(table_cfg(), 0);
    let idle_us = IDLE_RELEASE.as_micros() as u64;
    rx.packet(0, 0, 0, 64);
    // A burst of reordering: 2..=9 wait for 1.
    for c in 2..10 {
        rx.packet(10, c, 0, 64);
    }
    rx.packet(20, 1, 0, 64);
    assert_eq!(rx.delivered, (0..10).collect::<Vec<_>>());
    let slots = rx.w.allocated_slots();
    assert!(slots >= 8);
    // In order again, but for less than IDLE_RELEASE: the slots stay (a
    // window that reorders now and then does not allocate per burst).
    rx.packet(30 + idle_us / 2, 10, 0, 64);
    assert_eq!(rx.w.allocated_slots(), slots);
    // Nothing held for IDLE_RELEASE (from when the window was seen
    // empty): they go.
    rx.packet(30 + idle_us / 2 + idle_us, 11, 0, 64);
    assert_eq!(rx.w.allocated_slots(), 0);
    assert_eq!(rx.w.allocated_bytes(), 0);
    // And come back when needed.
    rx.packet(50 + 2 * idle_us, 13, 0, 64);
    assert_eq!(rx.w.allocated_slots(), 1);
    rx.packet(60 + 2 * idle_us, 12, 0, 64);
    assert_eq!(rx.delivered, (0..14).collect::<Vec<_>>());
}

#[test]
fn an_undrained_ready_queue_refuses_and_recovers() {
    let mut w = ReorderWindow::new(ReorderConfig {
        capacity: 2,
        ..table_cfg()
    });
    let t = origin();
    w.delivered_in_place(t, 0, 0);
    assert_eq!(w.insert(t, 2, 0, &packet(2, 64)), InsertOutcome::Buffered);
    assert_eq!(w.insert(t, 1, 0, &packet(1, 64)), InsertOutcome::Ready);
    assert_eq!(w.ready_packets(), 2);
    assert!(!w.passes_through(3));
    // Held and ready together may use twice the capacity.
    assert_eq!(w.insert(t, 3, 0, &packet(3, 64)), InsertOutcome::Ready);
    assert_eq!(w.insert(t, 4, 0, &packet(4, 64)), InsertOutcome::Ready);
    assert_eq!(w.insert(t, 5, 0, &packet(5, 64)), InsertOutcome::ReadyFull);
    let mut got = Vec::new();
    while let Some(p) = w.pop_ready() {
        got.push(counter_of(p));
    }
    assert_eq!(got, [1, 2, 3, 4]);
    assert!(w.passes_through(5));
    assert_eq!(w.insert(t, 5, 0, &packet(5, 64)), InsertOutcome::Ready);
    assert_eq!(w.counters().accepted, 6);
    assert!(w.allocated_slots() <= 2 * 2 + 1);
}

#[test]
fn reset_releases_held_packets_and_starts_over() {
    let mut rx = Rx::new(table_cfg(), 0);
    rx.packet(0, 10, 0, 64);
    rx.packet(100, 12, 0, 64);
    rx.w.reset();
    rx.drain();
    assert_eq!(rx.delivered, [10, 12]);
    assert_eq!(rx.w.counters().lost, 1);
    assert_eq!(rx.w.next_counter(), None);
    // A new session starts from its own first counter.
    assert_eq!(rx.packet(200, 0, 0, 64), None);
    assert_eq!(rx.delivered, [10, 12, 0]);
}

#[test]
fn turning_the_window_off_gives_up_every_gap() {
    let mut rx = Rx::new(table_cfg(), 0);
    rx.packet(0, 0, 0, 64);
    rx.packet(100, 3, 0, 64);
    rx.packet(200, 5, 0, 64);
    rx.w.set_hold_ceiling(Duration::ZERO);
    rx.drain();
    assert_eq!(rx.delivered, [0, 3, 5]);
    assert_eq!(rx.w.counters().lost, 3);
    assert!(rx.w.passes_through(4));
}

/// Counter pairs every `every`: the even one on time, the odd one below it
/// `late(i)` later (no early loss: no live paths).
fn swap_pairs(pairs: u64, every: Duration, late: impl Fn(u64) -> Duration) -> ReorderWindow {
    let t = origin();
    let mut events = Vec::new();
    for i in 1..=pairs {
        let at = t + every * i as u32;
        events.push((at, 2 * i));
        events.push((at + late(i), 2 * i - 1));
    }
    events.sort();
    let mut w = ReorderWindow::new(learned_cfg());
    w.delivered_in_place(t, 0, 0);
    for (at, c) in events {
        if w.passes_through(c) {
            w.delivered_in_place(at, c, 0);
        } else {
            let _ = w.insert(at, c, 0, &packet(c, 64));
            w.drain_ready(|_| {});
        }
    }
    w
}

#[test]
fn hold_adapts_to_lateness_and_skew() {
    let t = origin();
    let mut w = ReorderWindow::new(learned_cfg());
    // Initial estimate: 2 × 9.5 + 1 = 20 ms, not the ceiling.
    assert_eq!(w.effective_hold(), Duration::from_millis(20));
    w.set_path_skew(Duration::from_millis(5));
    assert_eq!(w.effective_hold(), Duration::from_millis(25));
    w.set_path_skew(Duration::ZERO);

    // A 3 ms ± 1 ms line: gaps filled within 2 ms. After the initial
    // estimate decays (a minute), the hold is a few ms.
    let w = swap_pairs(60_000, us(1_000), |i| us(200 + (i * 7919) % 1_800));
    let hold = w.effective_hold();
    assert!(
        hold >= Duration::from_millis(4) && hold <= Duration::from_millis(6),
        "{hold:?}"
    );
    assert_eq!(w.counters().lost, 0);

    // 200 ms ± 50 ms: gaps filled within 100 ms.
    let w = swap_pairs(2_000, us(50_000), |i| us(5_000 + (i * 7919) % 95_000));
    let hold = w.effective_hold();
    assert!(
        hold >= Duration::from_millis(150) && hold <= Duration::from_millis(202),
        "{hold:?}"
    );

    // A clean line forgets: the hold falls to the floor.
    let mut w = ReorderWindow::new(learned_cfg());
    w.delivered_in_place(t, 0, 0);
    w.delivered_in_place(t + Duration::from_secs(120), 1, 0);
    assert_eq!(w.effective_hold(), MIN_HOLD);
}

#[test]
fn the_lateness_says_whether_it_was_measured_or_is_the_starting_estimate() {
    // No late packet yet: the 9.5 ms is the starting estimate.
    let w = swap_pairs(1, us(1_000), |_| Duration::ZERO);
    assert!(!w.lateness_measured());
    // Packets 1 ms late, at once: below the starting estimate, which
    // stays (decaying) and is still not a measurement.
    let w = swap_pairs(10, us(1_000), |_| us(1_000));
    assert!(!w.lateness_measured(), "{:?}", w.hold_parts().1);
    // 30 ms late: above it, so the lateness is that sample.
    let w = swap_pairs(3, us(1_000), |_| us(30_000));
    assert!(w.lateness_measured());
    assert!(w.hold_parts().1 >= Duration::from_millis(29));
    // A minute of 1 ms lateness: the starting estimate has decayed below
    // the samples, which now set it.
    let w = swap_pairs(60_000, us(1_000), |_| us(1_000));
    assert!(w.lateness_measured(), "{:?}", w.hold_parts().1);
}

// ----- 2. Property test against a naive model -------------------------------

/// The same rules written the obvious slow way: a map of held packets,
/// the gap start recomputed as the earliest arrival above it, counters
/// given up one by one, and early loss as "every live path has a counter
/// above `next`" — exact for FIFO paths, whose slack stays zero. The hold
/// is fixed by a ceiling at or below `MIN_HOLD`. The generated counters
/// stay below 100 000, so its plain arithmetic cannot overflow.
struct Model {
    hold: Duration,
    capacity: usize,
    max_bytes: usize,
    max_packet: usize,
    live: u8,
    next: Option<u64>,
    max_seen: Option<u64>,
    held: BTreeMap<u64, (Instant, usize)>,
    ready: VecDeque<(u64, usize)>,
    highest: [Option<u64>; MAX_PATHS],
    counters: ReorderCounters,
    delivered: Vec<u64>,
}

impl Model {
    fn new(cfg: &ReorderConfig, live: u8) -> Model {
        Model {
            hold: cfg.hold_ceiling,
            capacity: cfg.capacity,
            max_bytes: cfg.max_bytes,
            max_packet: cfg.max_packet,
            live,
            next: None,
            max_seen: None,
            held: BTreeMap::new(),
            ready: VecDeque::new(),
            highest: [None; MAX_PATHS],
            counters: ReorderCounters::default(),
            delivered: Vec::new(),
        }
    }

    fn off(&self) -> bool {
        self.hold.is_zero()
    }

    fn held_bytes(&self) -> usize {
        self.held.values().map(|v| v.1).sum()
    }

    fn ready_bytes(&self) -> usize {
        self.ready.iter().map(|r| r.1).sum()
    }

    fn passes_through(&self, c: u64) -> bool {
        self.held.is_empty()
            && self.ready.is_empty()
            && (self.next.is_none() || self.off() || self.next == Some(c))
    }

    fn give_up_to(&mut self, to: u64) {
        let mut n = self.next.unwrap();
        while n < to {
            match self.held.remove(&n) {
                Some((_, len)) => {
                    self.ready.push_back((n, len));
                    self.counters.accepted += 1;
                }
                None => self.counters.lost += 1,
            }
            n += 1;
        }
        self.next = Some(n.max(self.next.unwrap()));
        self.release_run();
    }

    fn release_run(&mut self) {
        let mut n = self.next.unwrap();
        while let Some((_, len)) = self.held.remove(&n) {
            self.ready.push_back((n, len));
            self.counters.accepted += 1;
            n += 1;
        }
        self.next = Some(n);
    }

    fn all_live_passed(&self) -> bool {
        let next = self.next.unwrap();
        self.live != 0
            && (0..MAX_PATHS)
                .filter(|p| self.live & (1 << p) != 0)
                .all(|p| self.highest[p].is_some_and(|h| h > next))
    }

    fn head_since(&self) -> Option<Instant> {
        self.held.values().map(|v| v.0).min()
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&first) = self.held.keys().next() {
            let since = self.head_since().unwrap();
            if since + self.hold <= now || self.all_live_passed() {
                self.give_up_to(first);
            } else {
                break;
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.head_since().map(|s| s + self.hold)
    }

    fn seen(&mut self, c: u64) {
        self.max_seen = Some(self.max_seen.map_or(c, |m| m.max(c)));
    }

    fn path(&mut self, c: u64, p: usize) {
        self.highest[p] = Some(self.highest[p].map_or(c, |h| h.max(c)));
    }

    fn in_place(&mut self, c: u64, p: usize) {
        self.counters.accepted += 1;
        self.delivered.push(c);
        self.seen(c);
        if self.off() {
            self.next = Some(self.next.map_or(c + 1, |n| n.max(c + 1)));
            return;
        }
        self.next = Some(c + 1);
        self.path(c, p);
    }

    fn insert(&mut self, now: Instant, c: u64, p: usize, len: usize) -> InsertOutcome {
        if len > self.max_packet {
            return InsertOutcome::TooLarge;
        }
        let ready_full = |m: &Model| {
            m.ready.len() + m.held.len() + 1 > 2 * m.capacity
                || m.ready_bytes() + m.held_bytes() + len > 2 * m.max_bytes
        };
        if self.off() {
            if ready_full(self) {
                return InsertOutcome::ReadyFull;
            }
            self.ready.push_back((c, len));
            self.counters.accepted += 1;
            self.seen(c);
            self.next = Some(self.next.map_or(c + 1, |n| n.max(c + 1)));
            return InsertOutcome::Ready;
        }
        let next = *self.next.get_or_insert(c);
        let outcome = if c < next {
            self.counters.under_window += 1;
            InsertOutcome::UnderWindow
        } else if self.held.contains_key(&c) {
            self.counters.duplicated += 1;
            InsertOutcome::Duplicated
        } else {
            while c > self.next.unwrap()
                && (self.held.len() + 1 > self.capacity || self.held_bytes() + len > self.max_bytes)
            {
                let first = *self.held.keys().next().unwrap();
                self.give_up_to(first.min(c));
            }
            if ready_full(self) {
                return InsertOutcome::ReadyFull;
            }
            self.seen(c);
            if Some(c) == self.next {
                self.ready.push_back((c, len));
                self.counters.accepted += 1;
                self.next = Some(c + 1);
                self.release_run();
                InsertOutcome::Ready
            } else {
                self.held.insert(c, (now, len));
                self.counters.buffered += 1;
                InsertOutcome::Buffered
            }
        };
        self.path(c, p);
        outcome
    }

    fn duplicate(&mut self, c: u64, p: usize) {
        if self.held.contains_key(&c) {
            self.counters.duplicated += 1;
        } else {
            self.counters.under_window += 1;
        }
        if self.off() || self.max_seen.is_none_or(|m| c > m) {
            return;
        }
        self.path(c, p);
    }

    fn drain(&mut self) {
        while let Some((c, _)) = self.ready.pop_front() {
            self.delivered.push(c);
        }
    }
}

#[derive(Clone, Debug)]
enum PropOp {
    /// A packet: time step (µs), counter choice, path, length, and whether
    /// to deliver in place when the window allows it.
    Packet(u64, u64, usize, usize, bool),
    Duplicate(u64, u64, usize),
    Timeout(u64),
    Drain,
}

fn prop_op() -> impl Strategy<Value = PropOp> {
    prop_oneof![
        8 => (0..800u64, any::<u64>(), 0..3usize, 8..=130usize, any::<bool>())
            .prop_map(|(dt, c, p, len, in_place)| PropOp::Packet(dt, c, p, len, in_place)),
        2 => (0..800u64, any::<u64>(), 0..3usize).prop_map(|(dt, c, p)| PropOp::Duplicate(dt, c, p)),
        2 => (0..3_000u64).prop_map(PropOp::Timeout),
        3 => Just(PropOp::Drain),
    ]
}

/// Drives the window and the model with the same operations and compares
/// everything observable after each one. With `fifo`, each path's counters
/// increase (so path slack stays zero and early loss is exact in the
/// model); otherwise counters land anywhere near the window.
fn compare_with_model(
    ops: &[PropOp],
    cfg: ReorderConfig,
    live: u8,
    fifo: bool,
) -> Result<(), TestCaseError> {
    let t0 = origin();
    let mut now = t0;
    let mut w = ReorderWindow::new(cfg.clone());
    w.set_live_paths(live);
    let mut m = Model::new(&cfg, live);
    let mut delivered = Vec::new();
    let mut path_last = [0u64; MAX_PATHS];
    let mut top = 1_000u64;
    // One line read in order: the timers run to each arrival before and
    // after it is offered (see *Time* in the window's documentation).
    let timeout = |w: &mut ReorderWindow, m: &mut Model, now: Instant| {
        w.handle_timeout(now);
        m.expire(now);
    };
    for (i, op) in ops.iter().enumerate() {
        match *op {
            PropOp::Packet(dt, choice, p, len, in_place) => {
                now += us(dt);
                timeout(&mut w, &mut m, now);
                let c = if fifo {
                    let c = path_last[p].max(1_000) + 1 + choice % 4;
                    path_last[p] = c;
                    c
                } else if choice % 16 == 0 {
                    top + choice % 300
                } else {
                    (top + choice % 24).saturating_sub(12)
                };
                top = top.max(c);
                let model_passes = m.passes_through(c);
                prop_assert_eq!(
                    w.passes_through(c),
                    model_passes,
                    "op {}: passes_through({})",
                    i,
                    c
                );
                if model_passes && in_place {
                    w.delivered_in_place(now, c, p);
                    delivered.push(c);
                    m.in_place(c, p);
                } else {
                    let got = w.insert(now, c, p, &packet(c, len));
                    let want = m.insert(now, c, p, len);
                    prop_assert_eq!(got, want, "op {}: insert({})", i, c);
                }
                timeout(&mut w, &mut m, now);
            }
            PropOp::Duplicate(dt, choice, p) => {
                now += us(dt);
                let c = if fifo {
                    let c = path_last[p].max(1_000) + 1 + choice % 4;
                    path_last[p] = c;
                    c
                } else {
                    (top + choice % 24).saturating_sub(16)
                };
                timeout(&mut w, &mut m, now);
                w.note_duplicate(now, c, p);
                m.duplicate(c, p);
                timeout(&mut w, &mut m, now);
            }
            PropOp::Timeout(dt) => {
                now += us(dt);
                timeout(&mut w, &mut m, now);
            }
            PropOp::Drain => {
                w.drain_ready(|p| delivered.push(counter_of(p)));
                m.drain();
            }
        }
        prop_assert_eq!(&delivered, &m.delivered, "op {}: delivered", i);
        prop_assert_eq!(w.counters(), m.counters, "op {}: counters", i);
        prop_assert_eq!(w.held_packets(), m.held.len(), "op {}: held", i);
        prop_assert_eq!(w.held_bytes(), m.held_bytes(), "op {}: held bytes", i);
        prop_assert_eq!(w.ready_packets(), m.ready.len(), "op {}: ready", i);
        prop_assert_eq!(w.next_counter(), m.next, "op {}: next", i);
        prop_assert_eq!(w.poll_timeout(), m.poll_timeout(), "op {}: poll_timeout", i);
        prop_assert!(w.held_packets() <= cfg.capacity);
        prop_assert!(w.held_bytes() <= cfg.max_bytes);
        prop_assert!(w.allocated_slots() <= 2 * cfg.capacity + 1);
    }
    Ok(())
}

fn model_cfg() -> impl Strategy<Value = ReorderConfig> {
    (
        prop_oneof![Just(0u64), Just(300), Just(1_000), Just(2_000)],
        1..12usize,
        100..1_000usize,
    )
        .prop_map(|(hold_us, capacity, max_bytes)| ReorderConfig {
            hold_ceiling: us(hold_us),
            capacity,
            max_bytes,
            max_packet: 100,
            pass_wait: Duration::ZERO,
            slack_learning: 0,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_naive_model(
        cfg in model_cfg(),
        ops in prop::collection::vec(prop_op(), 1..300),
    ) {
        compare_with_model(&ops, cfg, 0, false)?;
    }

    #[test]
    fn matches_naive_model_with_fifo_paths(
        cfg in model_cfg(),
        live in 1..8u8,
        ops in prop::collection::vec(prop_op(), 1..300),
    ) {
        compare_with_model(&ops, cfg, live, true)?;
    }

    /// With everything adaptive (real ceilings, reordering paths, live
    /// paths changing), no model: the invariants that must always hold.
    #[test]
    fn invariants_with_adaptive_hold(
        ceiling_ms in prop_oneof![Just(0u64), 1..400u64],
        capacity in 1..64usize,
        ops in prop::collection::vec(
            (prop_op(), any::<u8>(), 0..5_000u64, any::<bool>()), 1..300),
    ) {
        let cfg = ReorderConfig {
            hold_ceiling: Duration::from_millis(ceiling_ms),
            capacity,
            max_bytes: capacity * 60 + 100,
            max_packet: 120,
            pass_wait: Duration::ZERO,
            slack_learning: 0,
        };
        let off = ceiling_ms == 0;
        let t0 = origin();
        let mut now = t0;
        let mut w = ReorderWindow::new(cfg.clone());
        let mut delivered: Vec<u64> = Vec::new();
        let mut first = None;
        let mut top = 1_000u64;
        for (op, live, skew_us, change) in ops {
            if change {
                w.set_live_paths(live);
                w.set_path_skew(us(skew_us));
            }
            match op {
                PropOp::Packet(dt, choice, p, len, in_place) => {
                    now += us(dt);
                    let c = (top + choice % 40).saturating_sub(20);
                    top = top.max(c);
                    first.get_or_insert(c);
                    if in_place && w.passes_through(c) {
                        w.delivered_in_place(now, c, p);
                        delivered.push(c);
                    } else if w.insert(now, c, p, &packet(c, len.min(120))) == InsertOutcome::ReadyFull {
                        prop_assert!(w.ready_packets() > 0);
                    }
                }
                PropOp::Duplicate(dt, choice, p) => {
                    now += us(dt);
                    w.note_duplicate(now, (top + choice % 24).saturating_sub(16), p);
                }
                PropOp::Timeout(dt) => {
                    now += us(dt);
                    // The deadline the window asks for always makes progress.
                    if let Some(at) = w.poll_timeout() {
                        let before = (w.next_counter(), w.held_packets());
                        w.handle_timeout(at.max(now));
                        prop_assert_ne!(before, (w.next_counter(), w.held_packets()));
                        now = now.max(at);
                    }
                }
                PropOp::Drain => {
                    w.drain_ready(|p| delivered.push(counter_of(p)));
                }
            }
            prop_assert!(w.held_packets() <= cfg.capacity);
            prop_assert!(w.held_bytes() <= cfg.max_bytes);
            prop_assert!(w.allocated_slots() <= 2 * cfg.capacity + 1);
            prop_assert!(w.effective_hold() <= cfg.hold_ceiling);
        }
        w.drain_ready(|p| delivered.push(counter_of(p)));
        let c = w.counters();
        prop_assert_eq!(c.accepted, delivered.len() as u64);
        if !off {
            // Strictly increasing: in order, and never twice.
            prop_assert!(delivered.windows(2).all(|d| d[0] < d[1]), "{:?}", delivered);
            // Every counter from the first to `next` was delivered or lost.
            if let (Some(first), Some(next)) = (first, w.next_counter()) {
                prop_assert_eq!(c.accepted + c.lost, next - first);
            }
            // Nothing is held beyond the ceiling.
            w.handle_timeout(now + cfg.hold_ceiling);
            prop_assert_eq!(w.held_packets(), 0);
        }
    }
}

// ----- 3. Extremes -----------------------------------------------------------
//
// Counters a peer may send that the tests above never reach: near 2^60 (the
// fuzz harness's range), at u64::MAX (never from WireGuard, whose limit is
// lower, but any u64 is valid for the window), sessions that each skip
// almost 2^60, and peers that never send in order.

const F60: u64 = (1 << 60) - 1;
const MAX: u64 = u64::MAX;

#[test]
fn extreme_case_table() {
    use Op::*;
    let cfg = table_cfg;
    let cases: Vec<(ReorderConfig, u8, Vec<Step>)> = vec![
        // 1: a first packet at 2^60 − 1 starts the window there.
        (
            cfg(),
            0,
            vec![
                (P(0, F60, 0), &[F60], [1, 0, 0, 0, 0, 0]),
                (P(100, F60 + 2, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(200, F60 - 1, 0), &[], [1, 1, 1, 0, 0, 1]),
                (P(300, 0, 1), &[], [1, 2, 1, 0, 0, 1]),
                (P(400, F60 + 1, 1), &[F60 + 1, F60 + 2], [3, 2, 1, 0, 0, 0]),
                (P(500, F60 + 3, 0), &[F60 + 3], [4, 2, 1, 0, 0, 0]),
            ],
        ),
        // 2: a first packet at u64::MAX is the last of its session: every
        // packet after it, a copy or anything lower, is under the window.
        (
            cfg(),
            0b11,
            vec![
                (P(0, MAX, 0), &[MAX], [1, 0, 0, 0, 0, 0]),
                (P(100, MAX, 1), &[], [1, 1, 0, 0, 0, 0]),
                (P(200, 0, 0), &[], [1, 2, 0, 0, 0, 0]),
                (P(300, MAX - 1, 1), &[], [1, 3, 0, 0, 0, 0]),
                (D(400, MAX, 0), &[], [1, 4, 0, 0, 0, 0]),
                (Poll(NONE.0, NONE.1), &[], [1, 4, 0, 0, 0, 0]),
            ],
        ),
        // 3: held up to u64::MAX, filled from the top.
        (
            cfg(),
            0,
            vec![
                (P(0, MAX - 3, 0), &[MAX - 3], [1, 0, 0, 0, 0, 0]),
                (P(100, MAX, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(200, MAX - 1, 0), &[], [1, 0, 2, 0, 0, 2]),
                (D(250, MAX, 1), &[], [1, 0, 2, 1, 0, 2]),
                (
                    P(300, MAX - 2, 0),
                    &[MAX - 2, MAX - 1, MAX],
                    [4, 0, 2, 1, 0, 0],
                ),
                (P(400, MAX, 1), &[], [4, 1, 2, 1, 0, 0]),
                (Poll(NONE.0, NONE.1), &[], [4, 1, 2, 1, 0, 0]),
            ],
        ),
        // 4: the gap below u64::MAX expires by the timer.
        (
            cfg(),
            0,
            vec![
                (P(0, MAX - 2, 0), &[MAX - 2], [1, 0, 0, 0, 0, 0]),
                (P(1_000, MAX, 0), &[], [1, 0, 1, 0, 0, 1]),
                (Poll(11_000, 11_000), &[], [1, 0, 1, 0, 0, 1]),
                (T(11_000), &[MAX], [2, 0, 1, 0, 1, 0]),
                (P(11_100, MAX - 1, 0), &[], [2, 1, 1, 0, 1, 0]),
            ],
        ),
        // 5: given up for room (capacity 2): the new packet below u64::MAX
        // is then next and releases the run to the end.
        (
            ReorderConfig {
                capacity: 2,
                ..cfg()
            },
            0,
            vec![
                (P(0, MAX - 4, 0), &[MAX - 4], [1, 0, 0, 0, 0, 0]),
                (P(100, MAX - 2, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(200, MAX, 0), &[], [1, 0, 2, 0, 0, 2]),
                (
                    P(300, MAX - 1, 0),
                    &[MAX - 2, MAX - 1, MAX],
                    [4, 0, 2, 0, 1, 0],
                ),
            ],
        ),
        // 6: given up early: the only live path passed it.
        (
            cfg(),
            0b01,
            vec![
                (P(0, MAX - 2, 0), &[MAX - 2], [1, 0, 0, 0, 0, 0]),
                (P(1_000, MAX, 0), &[MAX], [2, 0, 1, 0, 1, 0]),
                (P(1_100, MAX - 1, 0), &[], [2, 1, 1, 0, 1, 0]),
            ],
        ),
        // 7: a peer that counts down, in a gap and then below the window
        // (capacity 4): 10 to 7 wait for 1; 6 does not fit, so 1–5 are
        // given up and 6 releases the run; the rest are too late.
        (
            ReorderConfig {
                capacity: 4,
                ..cfg()
            },
            0,
            vec![
                (P(0, 0, 0), &[0], [1, 0, 0, 0, 0, 0]),
                (P(100, 10, 0), &[], [1, 0, 1, 0, 0, 1]),
                (P(200, 9, 1), &[], [1, 0, 2, 0, 0, 2]),
                (P(300, 8, 0), &[], [1, 0, 3, 0, 0, 3]),
                (P(400, 7, 1), &[], [1, 0, 4, 0, 0, 4]),
                (P(500, 6, 0), &[6, 7, 8, 9, 10], [6, 0, 4, 0, 5, 0]),
                (P(600, 5, 1), &[], [6, 1, 4, 0, 5, 0]),
                (P(700, 4, 0), &[], [6, 2, 4, 0, 5, 0]),
                (P(800, 1, 1), &[], [6, 3, 4, 0, 5, 0]),
            ],
        ),
    ];
    for (number, (cfg, live, steps)) in cases.into_iter().enumerate() {
        run_case(number + 1, cfg, live, &steps);
    }
}

/// The fuzz find (crash-b8d071b1…): sessions that each deliver a low
/// counter, hold one close to 2^60 and then end (reset) or time out, so
/// Lost grows by almost 2^60 a session and passed u64::MAX after 16. It
/// saturates; everything else goes on counting.
#[test]
fn lost_saturates_over_sessions_that_each_skip_close_to_2_pow_60() {
    let mut rx = Rx::new(table_cfg(), 0);
    let mut lost: u128 = 0;
    for session in 0..40u64 {
        let t = session * 20_000;
        let low = session % 7 * 100;
        assert_eq!(rx.packet(t, low, 0, 64), None, "session {session}");
        assert_eq!(
            rx.packet(t + 100, F60, 0, 64),
            Some(InsertOutcome::Buffered),
            "session {session}"
        );
        if session % 3 == 0 {
            rx.tick(t + 10_100);
        }
        rx.w.reset();
        rx.drain();
        lost += u128::from(F60 - low - 1);
        assert_eq!(rx.delivered[rx.delivered.len() - 2..], [low, F60]);
        let c = rx.w.counters();
        assert_eq!(
            c.lost,
            u64::try_from(lost).unwrap_or(u64::MAX),
            "session {session}"
        );
        assert_eq!(c.accepted, 2 * (session + 1));
        assert_eq!(c.buffered, session + 1);
        assert_eq!(rx.w.next_counter(), None);
    }
    assert_eq!(rx.w.counters().lost, u64::MAX);
}

/// Each session skips from 0 to u64::MAX: Lost saturates in the second.
#[test]
fn sessions_that_each_end_at_u64_max_saturate_lost_and_start_afresh() {
    let mut rx = Rx::new(table_cfg(), 0);
    for session in 0..3u64 {
        let t = session * 1_000;
        assert_eq!(rx.packet(t, 0, 0, 64), None);
        assert_eq!(
            rx.packet(t + 100, MAX, 0, 64),
            Some(InsertOutcome::Buffered)
        );
        rx.w.reset();
        rx.drain();
        assert_eq!(rx.delivered[rx.delivered.len() - 2..], [0, MAX]);
        let lost = if session == 0 { MAX - 1 } else { MAX };
        assert_eq!(rx.w.counters().lost, lost);
        assert_eq!(rx.w.counters().accepted, 2 * (session + 1));
    }
}

#[test]
fn u64_max_delivered_with_the_window_off_stays_the_end_when_it_turns_on() {
    let mut rx = Rx::new(
        ReorderConfig {
            hold_ceiling: Duration::ZERO,
            ..table_cfg()
        },
        0,
    );
    assert_eq!(rx.packet(0, MAX, 0, 64), None);
    assert_eq!(rx.packet(100, 5, 0, 64), None);
    assert_eq!(rx.w.next_counter(), Some(MAX));
    rx.w.set_hold_ceiling(Duration::from_millis(10));
    assert!(!rx.w.passes_through(MAX - 1));
    assert_eq!(
        rx.packet(200, MAX - 1, 0, 64),
        Some(InsertOutcome::UnderWindow)
    );
    assert_eq!(rx.delivered, [MAX, 5]);
    rx.w.reset();
    assert_eq!(rx.packet(300, 7, 0, 64), None);
    assert_eq!(rx.packet(400, 8, 0, 64), None);
    assert_eq!(rx.delivered, [MAX, 5, 7, 8]);
    assert_eq!(rx.w.counters().under_window, 1);
}

/// Only every other counter, on one FIFO line that is live: each gap is
/// lost as soon as the line passed it, so every packet goes at once. The
/// missing ones arriving afterwards are too late.
#[test]
fn every_other_counter_on_a_live_line_is_delivered_at_once() {
    let mut rx = Rx::new(table_cfg(), 0b01);
    let n = 1_000u64;
    assert_eq!(rx.packet(0, F60 - 1, 0, 64), None);
    for k in 1..=n {
        rx.packet(k * 100, F60 - 1 + 2 * k, 0, 64);
        assert_eq!(rx.w.held_packets(), 0, "after {k}");
    }
    for k in 1..=n {
        let outcome = rx.packet((n + k) * 100, F60 - 2 + 2 * k, 0, 64);
        assert_eq!(outcome, Some(InsertOutcome::UnderWindow));
    }
    let want: Vec<u64> = (0..=n).map(|k| F60 - 1 + 2 * k).collect();
    assert_eq!(rx.delivered, want);
    let c = rx.w.counters();
    assert_eq!(
        [c.accepted, c.under_window, c.buffered, c.duplicated, c.lost],
        [n + 1, n, n, 0, n]
    );
}

/// Only every other counter with no live line: capacity (8) bounds what
/// waits, so from the ninth held packet on each arrival gives up the
/// oldest gap and releases one packet; the timer releases the rest.
#[test]
fn every_other_counter_without_live_lines_is_bounded_by_capacity() {
    let mut rx = Rx::new(table_cfg(), 0);
    let n = 500u64;
    assert_eq!(rx.packet(0, 0, 0, 64), None);
    for k in 1..=n {
        rx.packet(k * 10, 2 * k, 0, 64);
        let released = k.saturating_sub(8);
        let want: Vec<u64> = (0..=released).map(|j| 2 * j).collect();
        assert_eq!(rx.delivered, want, "after {}", 2 * k);
        assert_eq!(rx.w.held_packets() as u64, k - released);
        assert_eq!(rx.w.counters().lost, released);
    }
    rx.tick(n * 10 + 10_000);
    let want: Vec<u64> = (0..=n).map(|j| 2 * j).collect();
    assert_eq!(rx.delivered, want);
    let c = rx.w.counters();
    assert_eq!([c.accepted, c.buffered, c.lost], [n + 1, n, n]);
    assert_eq!(rx.w.held_packets(), 0);
}

/// Big random jumps up and down, each packet 20 ms after the last (twice
/// the 10 ms hold, so a held packet's gap is always given up before the
/// next one arrives), sessions of 250 packets: delivery and counters are
/// checked against the rules written out for that case, with `next` as a
/// u128 so that "after u64::MAX" is exact.
#[test]
fn big_random_jumps_follow_the_rules() {
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};

    for seed in 0..8 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut rx = Rx::new(table_cfg(), 0);
        let mut want = ReorderCounters::default();
        let mut lost: u128 = 0;
        let mut delivered = Vec::new();
        let mut next: Option<u128> = None;
        let mut held: Option<u64> = None;
        let mut last = F60;
        for i in 0..2_000u64 {
            let t = i * 20_000;
            if i % 250 == 249 {
                // The session ends: the held packet goes, its gap is lost.
                if let (Some(h), Some(n)) = (held.take(), next) {
                    lost += u128::from(h) - n;
                    delivered.push(h);
                    want.accepted += 1;
                }
                next = None;
                rx.w.reset();
                rx.drain();
                last = F60;
                continue;
            }
            // Jumps of every size from 1 to 2^64, mostly upward.
            let size = rng.next_u64() >> (rng.next_u64() % 64);
            let c = if rng.next_u64() % 3 == 0 {
                last.saturating_sub(size)
            } else {
                last.saturating_add(size)
            };
            last = c;
            let path = (rng.next_u64() % MAX_PATHS as u64) as usize;
            // The held packet's gap is older than the hold: given up first.
            if let (Some(h), Some(n)) = (held.take(), next) {
                lost += u128::from(h) - n;
                delivered.push(h);
                want.accepted += 1;
                next = Some(u128::from(h) + 1);
            }
            let n = *next.get_or_insert(u128::from(c));
            if u128::from(c) < n {
                want.under_window += 1;
            } else if u128::from(c) == n {
                delivered.push(c);
                want.accepted += 1;
                next = Some(n + 1);
            } else {
                held = Some(c);
                want.buffered += 1;
            }
            rx.packet(t, c, path, 64);
            want.lost = u64::try_from(lost).unwrap_or(u64::MAX);
            assert_eq!(rx.w.counters(), want, "seed {seed}, packet {i}: {c}");
            assert_eq!(rx.delivered, delivered, "seed {seed}, packet {i}: {c}");
            let shown = next.map(|n| u64::try_from(n).unwrap_or(u64::MAX));
            assert_eq!(rx.w.next_counter(), shown, "seed {seed}, packet {i}");
        }
    }
}

/// A hold too long for an Instant to hold its deadline (a ceiling and a
/// skew of Duration::MAX): rule 1 never fires, so there is no timer, and
/// the gap still goes when it is filled or for room.
#[test]
fn a_deadline_past_what_an_instant_holds_means_no_timer() {
    let mut rx = Rx::new(
        ReorderConfig {
            hold_ceiling: Duration::MAX,
            capacity: 2,
            ..table_cfg()
        },
        0,
    );
    rx.w.set_path_skew(Duration::MAX);
    assert_eq!(rx.w.effective_hold(), Duration::MAX);
    assert_eq!(rx.packet(0, 0, 0, 64), None);
    assert_eq!(rx.packet(100, 2, 0, 64), Some(InsertOutcome::Buffered));
    assert_eq!(rx.w.poll_timeout(), None);
    rx.tick(1_000_000_000_000);
    assert_eq!(rx.w.held_packets(), 1);
    assert_eq!(rx.packet(200, 1, 0, 64), Some(InsertOutcome::Ready));
    assert_eq!(rx.packet(300, 5, 0, 64), Some(InsertOutcome::Buffered));
    assert_eq!(rx.packet(400, 6, 0, 64), Some(InsertOutcome::Buffered));
    // No room for 7: gap 3–4 is given up, 5 and 6 go, 7 is next.
    assert_eq!(rx.packet(500, 7, 0, 64), Some(InsertOutcome::Ready));
    assert_eq!(rx.delivered, [0, 1, 2, 5, 6, 7]);
    assert_eq!(rx.w.counters().lost, 2);
}

/// A line whose slack is so large that "passed it 2 × slack ago" lies past
/// what an Instant can hold: early loss waits for it forever, and the hold
/// gives the gap up instead.
#[test]
fn a_slack_past_what_an_instant_holds_turns_early_loss_off() {
    let t0 = origin();
    // The farthest power of two seconds after t0 an Instant can hold: three
    // times it cannot be held.
    let far = (0..64)
        .rev()
        .map(|k| Duration::from_secs(1 << k))
        .find(|&d| t0.checked_add(d).is_some())
        .expect("an Instant holds t0 + 1 s");
    assert!(t0.checked_add(far * 2).is_none());
    let mut w = ReorderWindow::new(table_cfg());
    w.set_live_paths(0b01);
    w.delivered_in_place(t0, 0, 0);
    // Path 0 passed gap 1 with no slack: it is lost at once.
    assert_eq!(w.insert(t0, 2, 0, &packet(2, 64)), InsertOutcome::Buffered);
    w.handle_timeout(t0);
    assert_eq!(w.drain_ready(|_| {}), 1);
    // Counter 1 comes `far` after 2 on the same path: that is its slack.
    let t1 = t0 + far;
    assert_eq!(
        w.insert(t1, 1, 0, &packet(1, 64)),
        InsertOutcome::UnderWindow
    );
    assert_eq!(w.path_slack(0), far);
    // The path passes gap 3 at t1, but t1 + 2 × far is no Instant.
    assert_eq!(w.insert(t1, 4, 0, &packet(4, 64)), InsertOutcome::Buffered);
    w.handle_timeout(t1);
    let hold = Duration::from_millis(10);
    assert_eq!(w.poll_timeout(), Some(t1 + hold));
    w.handle_timeout(t1 + hold - us(1));
    assert_eq!(w.held_packets(), 1);
    w.handle_timeout(t1 + hold);
    let mut got = Vec::new();
    w.drain_ready(|p| got.push(counter_of(p)));
    assert_eq!(got, [4]);
    let c = w.counters();
    assert_eq!([c.accepted, c.under_window, c.lost], [3, 1, 2]);
}

// ----- Repair -----------------------------------------------------------------

/// Two lines; counter 2 is lost. Both lines passed it, so rule 3 finds it
/// lost: with a repair wait the window asks for it once instead of giving
/// it up, takes the copy that comes within the wait (on either line, not
/// counted as that line's lateness) and delivers in order; without the
/// copy it gives the gap up when the wait is over.
#[test]
fn a_gap_found_lost_is_asked_for_and_waits_for_its_repair() {
    for repaired in [true, false] {
        let mut rx = Rx::new(trusting_cfg(), 0b11);
        rx.w.set_repair_wait(Some(Duration::from_millis(25)));
        rx.packet(0, 0, 0, 64);
        rx.packet(100, 1, 1, 64);
        rx.packet(200, 3, 0, 64);
        rx.packet(300, 4, 1, 64);
        // Both lines are past 2 and have never reordered: lost, so asked.
        rx.tick(300);
        assert_eq!(rx.w.take_repair_request(), Some((2, 3)));
        assert_eq!(rx.w.take_repair_request(), None, "asked once");
        assert_eq!(rx.w.counters().repairs_asked, 1);
        assert_eq!(rx.delivered, [0, 1]);
        let due = rx.w.poll_timeout().expect("waits for the repair");
        assert_eq!(
            due.saturating_duration_since(rx.at(300)),
            Duration::from_millis(25)
        );
        rx.packet(5_000, 5, 0, 64);
        assert_eq!(
            rx.w.take_repair_request(),
            None,
            "the same gap is not asked again"
        );
        if repaired {
            rx.packet(20_000, 2, 0, 64);
            assert_eq!(rx.delivered, [0, 1, 2, 3, 4, 5]);
            assert_eq!(rx.w.counters().lost, 0);
            assert_eq!(
                rx.w.path_slack(0),
                Duration::ZERO,
                "a repair is not lateness"
            );
        } else {
            rx.tick(25_299);
            assert_eq!(rx.delivered, [0, 1]);
            rx.tick(25_300);
            assert_eq!(rx.delivered, [0, 1, 3, 4, 5]);
            assert_eq!(rx.w.counters().lost, 1);
        }
    }
}

/// Repairs that come after their gaps were given up (the sender re-sends
/// on its best line, which may be behind a full queue), and after many
/// more gaps were asked for: they are late on purpose, and the hold does
/// not learn from them (it did: the memory of what was asked kept the last
/// 8 gaps only, and a repair that came after its gap was given up counted
/// as lateness. Measured in the simulator after a line fell: lateness 335
/// ms, the hold at its 333 ms ceiling for seconds, every gap waiting it).
#[test]
fn late_repairs_of_gaps_given_up_do_not_raise_the_hold() {
    let mut rx = Rx::new(trusting_cfg(), 0b11);
    rx.w.set_repair_wait(Some(Duration::from_millis(25)));
    let mut t = 0;
    for k in 0..20u64 {
        // c + 1 is lost; both lines passed it.
        let c = 3 * k;
        rx.packet(t, c, 0, 64);
        rx.packet(t + 100, c + 2, 0, 64);
        rx.packet(t + 200, c + 3, 1, 64);
        rx.tick(t + 200);
        assert_eq!(rx.w.take_repair_request(), Some((c + 1, c + 2)));
        // No repair within the wait: given up.
        rx.tick(t + 25_200);
        assert_eq!(rx.w.held_packets(), 0, "gap {} given up", c + 1);
        t += 30_000;
    }
    let before = rx.w.hold_parts().1;
    // Repairs of gaps 9 to 11 come now, hundreds of ms after the gaps
    // (and after 8 more were asked for).
    for k in 8..11u64 {
        let outcome = rx.packet(t + k * 100, 3 * k + 1, 0, 64);
        assert_eq!(outcome, Some(InsertOutcome::UnderWindow));
    }
    assert_eq!(rx.w.counters().repairs_asked, 20);
    assert!(
        rx.w.hold_parts().1 <= before,
        "lateness {:?} after late repairs, {before:?} before",
        rx.w.hold_parts().1
    );
}

/// Without a repair wait the same gap goes as rule 3 says: once both
/// lines passed it by the pass wait (1 ms by default: line 0 passed it at
/// 200 µs, line 1 at 300 µs), not at once: a packet of a line that never
/// reordered may still be on its way from a sender thread that was
/// preempted, and giving it up would cost the inner TCP a loss.
#[test]
fn without_repairs_rule_3_gives_up_once_every_line_passed_the_gap_by_the_pass_wait() {
    let mut rx = Rx::new(learned_cfg(), 0b11);
    rx.packet(0, 0, 0, 64);
    rx.packet(100, 1, 1, 64);
    rx.packet(200, 3, 0, 64);
    rx.packet(300, 4, 1, 64);
    assert_eq!(rx.w.poll_timeout(), Some(rx.at(1_300)));
    rx.tick(1_299);
    assert_eq!(rx.delivered, [0, 1]);
    rx.tick(1_300);
    assert_eq!(rx.delivered, [0, 1, 3, 4]);
    assert_eq!(rx.w.take_repair_request(), None);
    assert_eq!(rx.w.gap_counters().by_paths, 1);
}

/// At a session's start a line has shown none of its reordering yet: its
/// slack reads zero, and rule 3 would give a gap up after the pass wait
/// though the line is jittery (an e2e run gave up counter 10 after 1.3 ms;
/// its packet came 0.5 ms later). Until the line delivered
/// `SLACK_LEARNING_PACKETS`, rule 3 takes its slack as at least
/// `UNMEASURED_SLACK`: such a gap waits 5 ms, a real loss goes then (not
/// after the 20 ms hold); after that the slack the line showed counts.
#[test]
fn rule_3_assumes_a_slack_until_a_line_has_shown_its_own() {
    let mut rx = Rx::new(ReorderConfig::default(), 0b1);
    rx.packet(0, 0, 0, 64);
    rx.packet(100, 2, 0, 64);
    rx.tick(1_900);
    rx.packet(1_900, 1, 0, 64);
    assert_eq!(rx.delivered, [0, 1, 2]);
    assert_eq!(rx.w.counters().lost, 0);

    // 3 is lost: the line passed it at 2 ms, so it goes at 7 ms.
    rx.packet(2_000, 4, 0, 64);
    let wait = UNMEASURED_SLACK * SLACK_FACTOR;
    assert_eq!(wait, Duration::from_millis(5));
    rx.tick(6_999);
    assert_eq!(rx.w.counters().lost, 0);
    rx.tick(7_000);
    assert_eq!(rx.w.counters().lost, 1, "given up by rule 3, not the hold");
    assert_eq!(rx.w.gap_counters().by_paths, 1);

    // The line's 512 packets, in order from here.
    let mut t = 8_000;
    for c in 5..SLACK_LEARNING_PACKETS + 2 {
        rx.packet(t, c, 0, 64);
        t += 10;
    }
    let lost = SLACK_LEARNING_PACKETS + 2;
    rx.packet(t, lost + 1, 0, 64);
    // Now the slack it showed counts (1.8 ms, a little decayed): the gap
    // goes once the line passed it by twice that, sooner than 5 ms.
    rx.tick(t + 1_000);
    assert_eq!(rx.w.counters().lost, 1);
    rx.tick(t + 3_700);
    assert_eq!(rx.w.counters().lost, 2, "given up by rule 3");
    assert_eq!(rx.w.gap_counters().by_paths, 2);
}

/// A packet that comes within the pass wait after its line passed it (a
/// sender thread was preempted between counter and send) is delivered in
/// order, not dropped as Under Window.
#[test]
fn a_packet_late_by_less_than_the_pass_wait_on_a_line_that_never_reordered_is_kept() {
    let mut rx = Rx::new(learned_cfg(), 0b1);
    rx.packet(0, 0, 0, 64);
    rx.packet(100, 2, 0, 64);
    rx.packet(200, 3, 0, 64);
    rx.packet(900, 1, 0, 64);
    assert_eq!(rx.delivered, [0, 1, 2, 3]);
    let c = rx.w.counters();
    assert_eq!([c.lost, c.under_window], [0, 0]);
}

/// Two lines, the second idle (live, but carrying nothing lately): a loss
/// on the first used to wait the whole hold for the second. The sender's
/// word that the gap's counters did not go on the second line lets rule 3
/// give it up as soon as the first line has passed it.
#[test]
fn a_gap_the_sender_says_an_idle_line_never_carried_goes_at_once() {
    for told in [false, true] {
        let mut rx = Rx::new(learned_cfg(), 0b11);
        rx.w.set_path_skew(Duration::from_millis(30));
        rx.packet(0, 0, 1, 64);
        rx.packet(1_000, 1, 0, 64);
        // 2 is lost on line 0; line 1 carries nothing after 0.
        rx.packet(2_000, 3, 0, 64);
        rx.packet(3_000, 4, 0, 64);
        if told {
            // Counters 1..5 did not go on line 1.
            rx.w.note_unassigned(rx.at(3_500), 1, 1, 5, false);
        }
        rx.tick(3_500);
        if told {
            assert_eq!(rx.delivered, [0, 1, 3, 4]);
            let g = rx.w.gap_counters();
            assert_eq!((g.by_paths, g.by_hold), (1, 0));
            assert_eq!(g.wait_us, 1_500, "known at 2 ms, given up at 3.5 ms");
        } else {
            assert_eq!(rx.delivered, [0, 1], "waits for line 1");
            let due = rx.w.poll_timeout().expect("the hold");
            rx.tick(due.saturating_duration_since(rx.t0).as_micros() as u64);
            assert_eq!(rx.delivered, [0, 1, 3, 4]);
            assert_eq!(rx.w.gap_counters().by_hold, 1);
        }
    }
}

/// The sender's word counts only for the counters it names: a gap reaching
/// past them (sent after the word), or one the line may have carried
/// (below it), still waits for the line.
#[test]
fn the_senders_word_covers_only_the_counters_it_names() {
    // (from, to) said about line 1 while the gap is 2..3 (head 3).
    for (from, to, at_once) in [(1, 3, true), (2, 3, true), (3, 10, false), (0, 2, false)] {
        let mut rx = Rx::new(trusting_cfg(), 0b11);
        rx.packet(0, 0, 1, 64);
        rx.packet(1_000, 1, 0, 64);
        rx.packet(2_000, 3, 0, 64);
        rx.w.note_unassigned(rx.at(2_000), 1, from, to, false);
        rx.tick(2_000);
        let want: &[u64] = if at_once { &[0, 1, 3] } else { &[0, 1] };
        assert_eq!(rx.delivered, want, "said {from}..{to}");
    }
    // An older word does not replace a newer one.
    let mut rx = Rx::new(trusting_cfg(), 0b11);
    rx.packet(0, 0, 1, 64);
    rx.packet(1_000, 1, 0, 64);
    rx.packet(2_000, 3, 0, 64);
    rx.w.note_unassigned(rx.at(2_000), 1, 1, 9, false);
    rx.w.note_unassigned(rx.at(2_000), 1, 0, 1, false);
    rx.tick(2_000);
    assert_eq!(rx.delivered, [0, 1, 3]);
}

/// Several gaps found lost together are asked for together, each waiting
/// one repair wait from the ask (not the hold, nor one wait after the
/// other); a gap only lines that are not repaired can have carried is not
/// asked for at all.
#[test]
fn gaps_found_lost_together_are_asked_for_together() {
    let mut rx = Rx::new(trusting_cfg(), 0b11);
    rx.w.set_repair_wait(Some(Duration::from_millis(25)));
    rx.w.set_path_skew(Duration::from_millis(100));
    for (t, c, path) in [
        (0, 0, 0),
        (100, 2, 0),
        (200, 4, 1),
        (300, 6, 0),
        (400, 7, 1),
    ] {
        rx.packet(t, c, path, 64);
    }
    // 1, 3 and 5 are missing; both lines are past all three.
    rx.tick(400);
    let asked: Vec<_> = std::iter::from_fn(|| rx.w.take_repair_request()).collect();
    assert_eq!(asked, [(1, 2), (3, 4), (5, 6)]);
    assert_eq!(rx.w.counters().repairs_asked, 3);
    // 1 was found lost when 4 came (200 µs), 3 and 5 when 7 came.
    let due = rx.w.poll_timeout().expect("waits for the repairs");
    assert_eq!(due, rx.at(25_200));
    rx.packet(10_000, 3, 0, 64);
    rx.tick(25_200);
    assert_eq!(rx.delivered, [0, 2, 3, 4]);
    assert_eq!(rx.w.poll_timeout(), Some(rx.at(25_400)));
    rx.tick(25_400);
    assert_eq!(rx.delivered, [0, 2, 3, 4, 6, 7]);
    assert_eq!(rx.w.counters().lost, 2);
    assert_eq!(rx.w.gap_counters().by_paths, 2);

    // The sender repairs neither line: nothing is asked, nothing waits.
    let mut rx = Rx::new(trusting_cfg(), 0b11);
    rx.w.set_repair_wait(Some(Duration::from_millis(25)));
    rx.w.note_unassigned(rx.at(0), 0, 0, 0, false);
    rx.w.note_unassigned(rx.at(0), 1, 0, 0, false);
    for (t, c, path) in [(0, 0, 0), (100, 2, 0), (200, 3, 1)] {
        rx.packet(t, c, path, 64);
    }
    rx.tick(200);
    assert_eq!(rx.w.take_repair_request(), None);
    assert_eq!(rx.delivered, [0, 2, 3]);

    // Line 1 is repaired but the sender says it did not carry 1: lost on
    // line 0, which is not repaired, so not asked for.
    let mut rx = Rx::new(trusting_cfg(), 0b11);
    rx.w.set_repair_wait(Some(Duration::from_millis(25)));
    rx.w.note_unassigned(rx.at(0), 0, 0, 0, false);
    rx.packet(0, 0, 0, 64);
    rx.packet(100, 2, 0, 64);
    rx.w.note_unassigned(rx.at(150), 1, 0, 3, true);
    rx.packet(200, 3, 1, 64);
    rx.tick(200);
    assert_eq!(rx.w.take_repair_request(), None);
    assert_eq!(rx.delivered, [0, 2, 3]);
}

/// A packet rebuilt from parity (see `fec`) before its line delivered the
/// ones sent before it on that line fills its place in order but does not
/// count as that line's progress: when the line's own later packets come,
/// they are not read as late (a slack that would make rule 3 wait), and
/// the copy that arrives after it is a duplicate, nothing else.
#[test]
fn a_rebuilt_packet_is_delivered_in_order_and_teaches_the_lines_nothing() {
    let mut rx = Rx::new(learned_cfg(), 0b11);
    rx.packet(0, 0, 0, 64);
    rx.packet(100, 2, 0, 64);
    // Counter 1 went on line 1 and is on its way; the parity of its group
    // gives it (and counter 5, also line 1's, still further behind) early.
    let now = rx.at(200);
    assert_eq!(
        rx.w.insert_rebuilt(now, 5, &packet(5, 64)),
        InsertOutcome::Buffered
    );
    assert_eq!(
        rx.w.insert_rebuilt(now, 1, &packet(1, 64)),
        InsertOutcome::Ready
    );
    rx.drain();
    assert_eq!(rx.delivered, [0, 1, 2]);
    // Line 1's own packets then come in their order: 3 (after the parity
    // gave 5) is not late on a line that has not delivered 5 itself.
    rx.packet(5_000, 3, 1, 64);
    rx.packet(5_100, 4, 0, 64);
    assert_eq!(rx.delivered, [0, 1, 2, 3, 4, 5]);
    assert_eq!(rx.w.path_slack(1), Duration::ZERO);
    rx.dup(6_000, 5, 1);
    assert_eq!(rx.w.counters().lost, 0);
}
