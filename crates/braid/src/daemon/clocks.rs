//! The clocks the daemon tells its device about (the device reads none):
//! the wall clock, and time the monotonic clock did not count.
//!
//! Rust's `Instant` is CLOCK_MONOTONIC, which stands still while the
//! machine is suspended; CLOCK_BOOTTIME runs on. Between two readings,
//! boot time that advanced further than monotonic time is time spent
//! suspended ([`SuspendDetector`]); the device hears of it
//! (`Device::time_passed_unseen`), so sessions, timers and cookies age
//! by it. The main loop looks at every turn (two vDSO clock reads), so
//! data waits at most one turn after a resume before it meets expired
//! sessions. The wall clock is handed over every housekeeping tick and
//! after a suspend (`Device::set_wall_clock`), so a clock that NTP set or
//! stepped after the start shows in the next handshake within a second.

use std::time::{Duration, Instant, SystemTime};

/// A gap smaller than this is left to add up with the next: far above the
/// microseconds between reading the two clocks, far below any timer.
const MIN_UNSEEN: Duration = Duration::from_millis(100);

/// CLOCK_BOOTTIME: monotonic time that counts suspend.
pub fn boot_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_BOOTTIME exists
    // since Linux 2.6.39.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) cannot fail");
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// The same moment on the monotonic and on the wall clock, for
/// `Device::set_wall_clock`.
pub fn wall_now() -> (Instant, SystemTime) {
    (Instant::now(), SystemTime::now())
}

/// Finds time spent suspended: readings of the monotonic and the boot
/// clock are compared with the pair at the last report (or the start).
#[derive(Debug, Clone, Copy)]
pub struct SuspendDetector {
    mono: Instant,
    boot: Duration,
}

impl SuspendDetector {
    /// Starts from one reading of both clocks.
    pub fn new(mono: Instant, boot: Duration) -> Self {
        SuspendDetector { mono, boot }
    }

    /// Reads both clocks now.
    pub fn now() -> Self {
        SuspendDetector::new(Instant::now(), boot_time())
    }

    /// A new reading of both clocks: the time spent suspended since the
    /// last report, once it is at least [`MIN_UNSEEN`] (smaller gaps add
    /// up). Boot time behind monotonic time (not seen on Linux: both run
    /// at one rate, boot time faster only in suspend) reports nothing.
    pub fn observe(&mut self, mono: Instant, boot: Duration) -> Option<Duration> {
        let mono_ran = mono.saturating_duration_since(self.mono);
        let boot_ran = boot.saturating_sub(self.boot);
        let unseen = boot_ran.saturating_sub(mono_ran);
        if unseen < MIN_UNSEEN {
            return None;
        }
        *self = SuspendDetector::new(mono, boot);
        Some(unseen)
    }

    /// [`observe`](Self::observe) with a reading of the boot clock now.
    pub fn check(&mut self, mono: Instant) -> Option<Duration> {
        self.observe(mono, boot_time())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_suspend_is_the_boot_clock_running_ahead() {
        let (m, b) = (Instant::now(), S(1000));
        let mut d = SuspendDetector::new(m, b);
        // Awake: both clocks run alike (read microseconds apart).
        assert_eq!(
            d.observe(m + S(1), b + S(1) + Duration::from_micros(40)),
            None
        );
        assert_eq!(
            d.observe(m + S(2), b + S(2) - Duration::from_micros(40)),
            None
        );
        // Ten minutes suspended between two turns of the loop.
        assert_eq!(d.observe(m + S(3), b + S(603)), Some(S(600)));
        // Reported once: from there on both run alike again.
        assert_eq!(d.observe(m + S(4), b + S(604)), None);
        assert_eq!(d.observe(m + S(5), b + S(605)), None);
    }

    #[test]
    fn short_gaps_add_up_and_a_boot_clock_behind_reports_nothing() {
        let (m, b) = (Instant::now(), S(50));
        let mut d = SuspendDetector::new(m, b);
        assert_eq!(d.observe(m + S(1), b + S(1) + MS(60)), None);
        assert_eq!(d.observe(m + S(2), b + S(2) + MS(120)), Some(MS(120)));
        // Readings out of order (boot behind) are not a suspend.
        assert_eq!(d.observe(m + S(4), b + S(3)), None);
        assert_eq!(d.observe(m + S(1), b + S(2) + MS(120)), None);
    }

    #[test]
    fn the_real_clocks_agree_while_awake() {
        let boot = boot_time();
        assert!(boot > Duration::ZERO);
        let mut d = SuspendDetector::now();
        assert_eq!(d.check(Instant::now()), None);
    }
}
