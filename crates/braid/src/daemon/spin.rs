//! A short, bounded busy-poll of the main thread before it sleeps, while
//! the traffic is a light request and answer (issue 24, the idle ping).
//!
//! An idle round trip through braid wakes a sleeping thread at each hop,
//! and on this virtual machine each wake-up costs 15–40 µs (see
//! docs/performance.md, "The idle round trip"). When the main thread has
//! just sent a few packets from the TUN and the answers to its recent
//! sends came back within [`MAX_SPIN`], it polls its descriptors without
//! sleeping for up to that long, so the answer is taken in without a
//! wake-up. It never spins:
//! - while traffic is bulk (the outbound thread watches the TUN, or a
//!   wake-up moved [`BULK`] packets or more) or within [`BULK_OVER_AFTER`]
//!   of it: there the next batch is worth waiting for in the kernel, and
//!   the other threads need the CPU;
//! - after a receive alone, or a send whose answers have not been coming
//!   back in time (fewer than [`HITS_NEEDED`] of the last [`HISTORY`]
//!   sends were answered, by packets written to the TUN, within
//!   [`MAX_SPIN`]): so the answering end of a ping, and an idle peer,
//!   sleep at once;
//! - for more than [`SPIN_SHARE`] of the time over each [`WINDOW`].
//!
//! [`Spin`] decides, with time passed in; [`poll_then_wait`] polls.

use braid_io::{poll, Interest, Readiness};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// The longest spin after a send. An answer through a tunnel between two
/// namespaces on this machine comes about 100 µs after the request left
/// (p50; 190 µs p90, 380 µs p99, traced).
pub const MAX_SPIN: Duration = Duration::from_micros(250);
/// A wake-up that moved this many packets (either way) is bulk traffic.
pub const BULK: usize = 16;
/// No spinning this long after bulk traffic.
pub const BULK_OVER_AFTER: Duration = Duration::from_millis(20);
/// How many of the last sends' outcomes count (the bits of `history`).
pub const HISTORY: u32 = u8::BITS;
/// Sends among the last [`HISTORY`] that must have been answered within
/// [`MAX_SPIN`] for the next one to spin.
pub const HITS_NEEDED: u32 = 4;
/// The share of wall time spinning may take at most, per window, in per
/// cent.
pub const SPIN_SHARE: u32 = 10;
pub const WINDOW: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct Spin {
    /// Bit i set: the i-th last light send was answered within
    /// [`MAX_SPIN`] (bit 0 the latest).
    history: u8,
    /// The latest light send still waiting for an answer.
    awaiting: Option<Instant>,
    last_bulk: Option<Instant>,
    window_start: Instant,
    spun_in_window: Duration,
}

/// What one wake-up of the main thread did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wake {
    /// Datagrams received from the lines.
    pub received: usize,
    /// Packets written to the TUN: what answers a send. braid's own
    /// messages (the peer's path probes, every 50 ms) are received but
    /// not written, so they do not pass for answers.
    pub delivered: usize,
    /// Packets read from the TUN and sent.
    pub sent: usize,
}

impl Spin {
    pub fn new(now: Instant) -> Spin {
        Spin {
            history: 0,
            awaiting: None,
            last_bulk: None,
            window_start: now,
            spun_in_window: Duration::ZERO,
        }
    }

    /// Records a wake-up that returned from its wait at `woke` and did
    /// `wake`'s work by `now`; returns how long to poll without sleeping
    /// before the next wait (`None`: sleep at once). `light` is false
    /// while the outbound thread watches the TUN (bulk sending).
    pub fn after_wake(
        &mut self,
        woke: Instant,
        now: Instant,
        wake: Wake,
        light: bool,
    ) -> Option<Duration> {
        if !light || wake.received >= BULK || wake.sent >= BULK {
            self.last_bulk = Some(now);
            self.awaiting = None;
            return None;
        }
        if let Some(sent_at) = self.awaiting {
            if wake.delivered > 0 {
                self.awaiting = None;
                self.record(woke.saturating_duration_since(sent_at) <= MAX_SPIN);
            } else if now.saturating_duration_since(sent_at) > MAX_SPIN {
                self.awaiting = None;
                self.record(false);
            }
        }
        if wake.sent == 0 {
            return None;
        }
        if self.awaiting.is_none() {
            self.awaiting = Some(now);
        }
        if self
            .last_bulk
            .is_some_and(|t| now.saturating_duration_since(t) < BULK_OVER_AFTER)
        {
            return None;
        }
        if self.history.count_ones() < HITS_NEEDED {
            return None;
        }
        if now.saturating_duration_since(self.window_start) >= WINDOW {
            self.window_start = now;
            self.spun_in_window = Duration::ZERO;
        }
        let allowed = WINDOW * SPIN_SHARE / 100;
        let left = allowed.saturating_sub(self.spun_in_window);
        let budget = MAX_SPIN.min(left);
        (!budget.is_zero()).then_some(budget)
    }

    /// A spin took `spent`.
    pub fn spun(&mut self, spent: Duration) {
        self.spun_in_window += spent;
    }

    fn record(&mut self, answered_in_time: bool) {
        self.history = (self.history << 1) | u8::from(answered_in_time);
    }
}

/// Polls `fds` without sleeping for up to `budget` (no longer than
/// `wait`), then sleeps in the poll for what is left of `wait`. Returns
/// the readiness and how long it spun. Each round yields the CPU, so a
/// thread woken on this core (the one that sends the answer, perhaps)
/// is not kept waiting by the spinning.
pub fn poll_then_wait(
    fds: &[(RawFd, Interest)],
    budget: Duration,
    wait: Duration,
) -> std::io::Result<(Readiness, Duration)> {
    let start = Instant::now();
    let budget = budget.min(wait);
    loop {
        let ready = poll::wait(fds, Some(Duration::ZERO))?;
        let spent = start.elapsed();
        if !ready.is_timeout() {
            return Ok((ready, spent));
        }
        if spent >= budget {
            return Ok((poll::wait(fds, Some(wait.saturating_sub(spent)))?, spent));
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENT: Wake = Wake {
        received: 0,
        delivered: 0,
        sent: 1,
    };
    const RECEIVED: Wake = Wake {
        received: 1,
        delivered: 1,
        sent: 0,
    };
    const RECEIVED_AND_SENT: Wake = Wake {
        received: 1,
        delivered: 1,
        sent: 1,
    };
    /// One of the peer's path probes: received, not written to the TUN.
    const PROBE: Wake = Wake {
        received: 1,
        delivered: 0,
        sent: 0,
    };

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A ping's sending end: a request sent, its answer 150 µs later,
    /// every 10 ms. Returns what each request's wake-up decided.
    fn pings(spin: &mut Spin, start: Instant, n: u64) -> Vec<Option<Duration>> {
        (0..n)
            .map(|i| {
                let t = start + Duration::from_millis(10 * i);
                let decided = spin.after_wake(t, t + us(5), SENT, true);
                let answer = t + us(155);
                spin.after_wake(answer, answer + us(5), RECEIVED, true);
                decided
            })
            .collect()
    }

    #[test]
    fn the_asking_end_spins_once_answers_come_back_quickly() {
        let start = Instant::now();
        let mut spin = Spin::new(start);
        let decided = pings(&mut spin, start, 6);
        assert_eq!(decided[..4], [None; 4], "nothing learned yet");
        assert!(decided[4..].iter().all(|d| *d == Some(MAX_SPIN)));
    }

    #[test]
    fn the_answering_end_never_spins() {
        // It receives a request and sends the answer in one wake-up; the
        // next request comes 10 ms later.
        let start = Instant::now();
        let mut spin = Spin::new(start);
        for i in 0..20 {
            let t = start + Duration::from_millis(10 * i);
            assert_eq!(
                spin.after_wake(t, t + us(20), RECEIVED_AND_SENT, true),
                None
            );
            // The peer's path probe, sent as its thread woke for the
            // answer: right after the answer left, but no answer itself.
            let probe = t + us(120);
            assert_eq!(spin.after_wake(probe, probe, PROBE, true), None);
        }
    }

    #[test]
    fn answers_that_stop_coming_in_time_stop_the_spinning() {
        let start = Instant::now();
        let mut spin = Spin::new(start);
        pings(&mut spin, start, 4);
        // Now the answers take 2 ms: after HISTORY - HITS_NEEDED + 1 late
        // ones at most, no more spinning.
        let mut decided = Vec::new();
        for i in 0..10 {
            let t = start + Duration::from_millis(100 + 10 * i);
            decided.push(spin.after_wake(t, t + us(5), SENT, true));
            let answer = t + Duration::from_millis(2);
            spin.after_wake(answer, answer + us(5), RECEIVED, true);
        }
        assert!(decided[7..].iter().all(Option::is_none), "{decided:?}");
    }

    #[test]
    fn no_spinning_during_or_right_after_bulk_traffic() {
        let start = Instant::now();
        let mut spin = Spin::new(start);
        pings(&mut spin, start, 4);
        let t = start + Duration::from_millis(50);
        assert_eq!(
            spin.after_wake(t, t, SENT, false),
            None,
            "outbound thread at it"
        );
        let t = t + Duration::from_millis(1);
        let bulk = Wake {
            received: BULK,
            delivered: BULK,
            sent: 1,
        };
        assert_eq!(spin.after_wake(t, t, bulk, true), None);
        let t = t + Duration::from_millis(10);
        assert_eq!(
            spin.after_wake(t, t, SENT, true),
            None,
            "within 20 ms of bulk"
        );
        let t = t + BULK_OVER_AFTER;
        assert_eq!(spin.after_wake(t, t, SENT, true), Some(MAX_SPIN));
    }

    #[test]
    fn spinning_takes_at_most_its_share_of_each_window() {
        let start = Instant::now();
        let mut spin = Spin::new(start);
        pings(&mut spin, start, 4);
        // Requests every 300 µs, each spun for the full budget.
        let mut spent = Duration::ZERO;
        let t0 = start + Duration::from_millis(200);
        for i in 0..1000 {
            let t = t0 + us(300 * i);
            if let Some(d) = spin.after_wake(t, t, SENT, true) {
                spin.spun(d);
                spent += d;
            }
            let answer = t + us(100);
            spin.after_wake(answer, answer, RECEIVED, true);
        }
        // 300 ms: three windows of at most 10 ms each.
        assert!(spent <= us(30_000) + MAX_SPIN * 3, "{spent:?}");
        assert!(spent >= us(20_000), "{spent:?}");
    }
}
