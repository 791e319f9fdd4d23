//! How long the relay may poll without sleeping before a deadline.
//!
//! Polling for the last [`SPIN`] before a delivery time keeps a late
//! wake-up from making the datagram late. But a line capped at a high
//! rate has a deadline every few tens of microseconds (1400 bytes at
//! 200 Mbit/s: one every 56 µs), so the relay was always within [`SPIN`]
//! of the next one and never slept: two relays of 200 Mbit/s took a core
//! of the 2-core machine at real-time priority, and the VPN between them
//! was short of CPU (`braid bench lines`, section 5's `wide` row: 313
//! against 374 Mbit/s without the spin). So spinning takes at most
//! [`SPIN_SHARE`] of each [`WINDOW`]; past that the relay sleeps to the
//! deadline itself (timer slack 1 ns) and a datagram may leave a wake-up's
//! lateness after its time (15–40 µs on this virtual machine).
//!
//! [`SpinBudget`] decides with time passed in; the relay's loop measures.

use std::time::{Duration, Instant};

/// Busy-poll this long before a deadline instead of trusting the wake-up,
/// while the budget lasts.
pub const SPIN: Duration = Duration::from_micros(50);
/// The share of wall time spinning may take, per window, in per cent.
pub const SPIN_SHARE: u32 = 2;
pub const WINDOW: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct SpinBudget {
    window_start: Instant,
    spun_in_window: Duration,
}

impl SpinBudget {
    pub fn new(now: Instant) -> SpinBudget {
        SpinBudget {
            window_start: now,
            spun_in_window: Duration::ZERO,
        }
    }

    /// How long before the next deadline the loop may stop sleeping and
    /// poll instead, at `now`: [`SPIN`], or zero once this window's share
    /// is used up.
    pub fn allowance(&mut self, now: Instant) -> Duration {
        if now.saturating_duration_since(self.window_start) >= WINDOW {
            self.window_start = now;
            self.spun_in_window = Duration::ZERO;
        }
        let allowed = WINDOW * SPIN_SHARE / 100;
        if self.spun_in_window >= allowed {
            Duration::ZERO
        } else {
            SPIN
        }
    }

    /// A wait that did not sleep (it polled inside the allowance) took
    /// `spent`.
    pub fn spun(&mut self, spent: Duration) {
        self.spun_in_window = self.spun_in_window.saturating_add(spent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn spins_until_its_share_of_the_window_is_used_then_sleeps() {
        let start = Instant::now();
        let mut budget = SpinBudget::new(start);
        let mut now = start;
        let mut spun = Duration::ZERO;
        // A deadline every 56 µs, always within SPIN: every wait spins
        // while the budget lasts.
        while now < start + WINDOW - us(100) {
            if !budget.allowance(now).is_zero() {
                budget.spun(us(56));
                spun += us(56);
            }
            now += us(56);
        }
        let share = WINDOW * SPIN_SHARE / 100;
        assert!(spun >= share, "spun {spun:?}, allowed {share:?}");
        assert!(spun < share + us(56), "spun {spun:?} past {share:?}");
        assert!(budget.allowance(now).is_zero());
        // A new window, a new share.
        assert_eq!(budget.allowance(start + WINDOW), SPIN);
    }

    #[test]
    fn a_light_load_always_spins() {
        let start = Instant::now();
        let mut budget = SpinBudget::new(start);
        // A ping every 10 ms, each spinning the whole SPIN: 0.5 % of the
        // time.
        for i in 0..1000u32 {
            let now = start + Duration::from_millis(10) * i;
            assert_eq!(budget.allowance(now), SPIN, "ping {i}");
            budget.spun(SPIN);
        }
    }
}
