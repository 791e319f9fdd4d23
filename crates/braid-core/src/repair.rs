//! Copies of the data messages recently sent to a peer in aggregate mode,
//! so that what one line lost can go again on another before the inner
//! TCP notices: the peer's reorder window asks for the counters it found
//! lost (an extension message), and the sender re-seals the copy (same
//! session, same counter, so the same bytes: nothing new is encrypted
//! under a used nonce) and sends it on its best line.
//!
//! The copies are taken before sealing, under the same lock that chose the
//! packet's line, so sealing on other cores is untouched. They cost one
//! copy of each packet, only for peers in aggregate mode with more than one
//! line, and memory only once such a peer sends: `COPIES` slots, each as
//! large as the largest message it held.
//!
//! Only what a line lost by its own fault is re-sent. A copy remembers the
//! line it went on; if that line has shown no loss of its own (while not
//! full, see `path::estimate`), what it lost it dropped from a full queue:
//! the inner TCP must see that loss and slow down, so it is not re-sent.
//! (Re-sending it would hide congestion: the sender would keep growing
//! its window into queues that overflow.)
//!
//! Re-sending is bounded: a budget that grows by `BUDGET_SHARE` of a
//! message per message sent (and a few per second regardless), so repairs
//! never cost more than a small share of the traffic, whatever a peer asks.

use std::time::{Duration, Instant};

/// A line that loses at least this much of its own (`Path::own_loss`)
/// has what it loses re-sent.
pub const OWN_LOSS: f64 = 0.002;
/// Messages remembered: about 240 ms at 100 Mbit/s of full-size packets.
pub const COPIES: usize = 2048;
/// Counters re-sent for one request at most.
pub const MAX_PER_REQUEST: u64 = 64;
/// Re-sends earned per message sent.
const BUDGET_SHARE: f64 = 0.05;
/// Re-sends earned per second regardless of traffic.
const BUDGET_PER_SECOND: f64 = 50.0;
/// The budget never holds more than this.
const BUDGET_MAX: f64 = 256.0;

#[derive(Debug, Default)]
struct Copy {
    /// The local index of the session that sealed it.
    session: u32,
    /// The peer's path it went on.
    path: u8,
    counter: u64,
    len: usize,
    bytes: Vec<u8>,
}

/// A peer's recent messages, prepared for sealing (header and padded
/// plaintext), by counter.
#[derive(Debug)]
pub struct SentCopies {
    slots: Vec<Copy>,
    budget: f64,
    refilled: Option<Instant>,
    /// Messages re-sent, requested ones that were no longer here or over
    /// the budget, and ones lost by a line that only loses when full.
    pub resent: u64,
    pub unavailable: u64,
    pub congestion: u64,
}

impl Default for SentCopies {
    fn default() -> Self {
        SentCopies {
            slots: Vec::new(),
            budget: BUDGET_MAX / 4.0,
            refilled: None,
            resent: 0,
            unavailable: 0,
            congestion: 0,
        }
    }
}

impl SentCopies {
    /// Remembers message `counter` of `session` (`datagram`: header and
    /// padded plaintext, the tag's room at the end).
    pub fn store(&mut self, session: u32, counter: u64, path: usize, datagram: &[u8]) {
        if self.slots.is_empty() {
            self.slots.resize_with(COPIES, Copy::default);
        }
        let slot = &mut self.slots[(counter % COPIES as u64) as usize];
        slot.session = session;
        slot.path = path as u8; // < MAX_PATHS
        slot.counter = counter;
        slot.len = datagram.len();
        if slot.bytes.len() < datagram.len() {
            slot.bytes.resize(datagram.len(), 0);
        }
        slot.bytes[..datagram.len()].copy_from_slice(datagram);
        self.budget = (self.budget + BUDGET_SHARE).min(BUDGET_MAX);
    }

    /// Whether a request for `counter` of `session` is answered with no
    /// re-send, decided when the request comes (so the peer can be told at
    /// once): the copy is gone, or its line loses only when full
    /// (`lossy(path)` false: congestion, counted so). The budget is
    /// checked when the copy is sealed ([`take_for_resend`](Self::take_for_resend)).
    pub fn declines(&mut self, session: u32, counter: u64, lossy: impl Fn(usize) -> bool) -> bool {
        match kept(&self.slots, session, counter) {
            None => {
                self.unavailable = self.unavailable.saturating_add(1);
                true
            }
            Some(c) if !lossy(usize::from(c.path)) => {
                self.congestion = self.congestion.saturating_add(1);
                true
            }
            Some(_) => false,
        }
    }

    /// The copy of `counter` of `session`, if it is still here, its line
    /// loses packets of its own (`lossy(path)`) and the budget allows a
    /// re-send (which it then pays for).
    pub fn take_for_resend(
        &mut self,
        now: Instant,
        session: u32,
        counter: u64,
        lossy: impl Fn(usize) -> bool,
    ) -> Option<&[u8]> {
        self.refill(now);
        let found = kept(&self.slots, session, counter);
        if found.is_some_and(|c| !lossy(usize::from(c.path))) {
            self.congestion = self.congestion.saturating_add(1);
            return None;
        }
        match found {
            Some(c) if self.budget >= 1.0 => {
                self.budget -= 1.0;
                self.resent = self.resent.saturating_add(1);
                Some(&c.bytes[..c.len])
            }
            _ => {
                self.unavailable = self.unavailable.saturating_add(1);
                None
            }
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = self
            .refilled
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.refilled = Some(now);
        self.budget = (self.budget + elapsed.as_secs_f64() * BUDGET_PER_SECOND).min(BUDGET_MAX);
    }

    /// Bytes the copies hold (for memory accounting).
    pub fn allocated_bytes(&self) -> usize {
        self.slots.iter().map(|c| c.bytes.capacity()).sum()
    }
}

/// The kept copy of `counter` of `session` in `slots`, unless a later
/// message took its slot. (A function of the slots alone, so callers may
/// update the counters beside them while holding it.)
fn kept(slots: &[Copy], session: u32, counter: u64) -> Option<&Copy> {
    slots
        .get((counter % COPIES as u64) as usize)
        .filter(|c| c.len > 0 && c.session == session && c.counter == counter)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;

    fn any(_: usize) -> bool {
        true
    }

    #[test]
    fn copies_come_back_by_session_and_counter_until_overwritten() {
        let now = Instant::now();
        let mut c = SentCopies::default();
        assert_eq!(c.allocated_bytes(), 0, "nothing before the first message");
        c.store(7, 5, 0, &[1, 2, 3]);
        c.store(7, 6, 0, &[4; 100]);
        assert_eq!(c.take_for_resend(now, 7, 5, any), Some(&[1u8, 2, 3][..]));
        assert_eq!(c.take_for_resend(now, 8, 5, any), None, "another session's");
        assert_eq!(c.take_for_resend(now, 7, 4, any), None, "never sent");
        // A later message in the same slot replaces it; a shorter one is
        // returned at its own length.
        c.store(7, 5 + COPIES as u64, 1, &[9]);
        assert_eq!(c.take_for_resend(now, 7, 5, any), None);
        assert_eq!(
            c.take_for_resend(now, 7, 5 + COPIES as u64, any),
            Some(&[9u8][..])
        );
        assert_eq!((c.resent, c.unavailable), (2, 3));
        // Lost by a line that loses nothing of its own: congestion, which
        // the sender must see.
        c.store(7, 6, 1, &[4; 100]);
        assert_eq!(c.take_for_resend(now, 7, 6, |path| path == 0), None);
        assert_eq!(c.congestion, 1);
    }

    #[test]
    fn resends_are_bounded_by_a_share_of_the_traffic() {
        let now = Instant::now();
        let mut c = SentCopies::default();
        for counter in 0..1000u64 {
            c.store(1, counter, 0, &[0; 64]);
        }
        // Asked for everything at once: the initial budget plus 5 % of
        // what was sent, not the thousand.
        let granted = (0..1000u64)
            .filter(|&n| c.take_for_resend(now, 1, n, any).is_some())
            .count();
        assert!((100..=120).contains(&granted), "{granted}");
        // Time alone earns a few per second.
        let later = now + Duration::from_secs(1);
        let more = (0..1000u64)
            .filter(|&n| c.take_for_resend(later, 1, n, any).is_some())
            .count();
        assert_eq!(more, BUDGET_PER_SECOND as usize);
    }
}
