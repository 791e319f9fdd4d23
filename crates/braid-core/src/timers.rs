//! The per-peer timer table: every WireGuard timer is a deadline in one
//! array, so the next wake-up is a minimum over a few entries and nothing
//! here reads a clock.

use std::time::{Duration, Instant};

/// The timers of the WireGuard paper (§6), named as in Linux's `timers.c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// An initiation went unanswered: send another (with jitter).
    RetransmitHandshake = 0,
    /// Data arrived and nothing went back: send a keepalive.
    SendKeepalive = 1,
    /// Data went out and nothing came back: start a new handshake.
    NewHandshake = 2,
    /// No new session for a long time: forget all key material.
    ZeroKeyMaterial = 3,
    /// The user asked for a keepalive every N seconds (NAT bindings).
    PersistentKeepalive = 4,
    /// braid: probe every path (and say hello to a peer not yet known to
    /// speak braid).
    Probe = 5,
}

pub const ALL_TIMERS: [Timer; 6] = [
    Timer::RetransmitHandshake,
    Timer::SendKeepalive,
    Timer::NewHandshake,
    Timer::ZeroKeyMaterial,
    Timer::PersistentKeepalive,
    Timer::Probe,
];

#[derive(Debug, Default, Clone)]
pub struct TimerTable {
    deadlines: [Option<Instant>; 6],
}

impl TimerTable {
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.deadlines[timer as usize] = Some(at);
    }

    pub fn cancel(&mut self, timer: Timer) {
        self.deadlines[timer as usize] = None;
    }

    pub fn is_set(&self, timer: Timer) -> bool {
        self.deadlines[timer as usize].is_some()
    }

    pub fn clear(&mut self) {
        self.deadlines = [None; 6];
    }

    /// `by` passed unseen (a suspend): every deadline comes that much
    /// earlier; one that cannot (an `Instant` before its platform's
    /// origin) is due at `now`.
    pub fn shift_back(&mut self, now: Instant, by: Duration) {
        for d in self.deadlines.iter_mut().flatten() {
            *d = d.checked_sub(by).unwrap_or(now).min(*d);
        }
    }

    /// The earliest deadline, if any timer is set.
    pub fn next(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }

    /// Removes and returns one timer whose deadline is at or before `now`.
    pub fn pop_expired(&mut self, now: Instant) -> Option<Timer> {
        for t in ALL_TIMERS {
            if self.deadlines[t as usize].is_some_and(|d| d <= now) {
                self.deadlines[t as usize] = None;
                return Some(t);
            }
        }
        None
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;

    #[test]
    fn earliest_deadline_and_expiry() {
        let t0 = Instant::now();
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::SendKeepalive, t0 + Duration::from_secs(10));
        t.set(Timer::RetransmitHandshake, t0 + Duration::from_secs(5));
        assert_eq!(t.next(), Some(t0 + Duration::from_secs(5)));
        assert_eq!(t.pop_expired(t0 + Duration::from_secs(4)), None);
        assert_eq!(
            t.pop_expired(t0 + Duration::from_secs(5)),
            Some(Timer::RetransmitHandshake)
        );
        assert!(!t.is_set(Timer::RetransmitHandshake));
        t.cancel(Timer::SendKeepalive);
        assert_eq!(t.next(), None);
    }

    #[test]
    fn time_passed_unseen_brings_deadlines_earlier() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut t = TimerTable::default();
        t.set(Timer::ZeroKeyMaterial, t0 + s(540));
        t.set(Timer::NewHandshake, t0 + s(15));
        t.shift_back(t0, s(10));
        assert_eq!(t.next(), Some(t0 + s(5)));
        t.shift_back(t0, s(600));
        assert_eq!(t.pop_expired(t0), Some(Timer::NewHandshake));
        assert_eq!(t.pop_expired(t0), Some(Timer::ZeroKeyMaterial));
        assert_eq!(t.next(), None);
    }
}
