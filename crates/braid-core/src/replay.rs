//! WireGuard's anti-replay window for received data messages.
//!
//! Every transport data message carries a 64-bit counter chosen by the
//! sender, strictly increasing per session. The network may drop, duplicate
//! and reorder packets, so the receiver accepts a counter it has not seen
//! before as long as it is not too far behind the highest one accepted so
//! far, and rejects everything else.
//!
//! The structure follows RFC 6479 and Linux WireGuard's `counter.c`: a ring
//! of [`BITMAP_WORDS`] 64-bit words (8192 bits) where the bit for counter
//! `c` lives at position `c % 8192`. When the highest counter moves forward,
//! only the words between the old and the new highest are zeroed — at most
//! the whole ring, 128 word writes, however far the jump — so the cost per
//! packet is O(1). The word holding the highest counter may be only partly
//! in use, which is why the window is one word shorter than the ring:
//! [`WINDOW`] = 8192 − 64 = 8128 counters behind the highest are always
//! tracked, exactly as in the kernel.
//!
//! Acceptance rule (the one the tests' model spells out): counter `c` is
//! accepted iff `c < REJECT_AFTER_MESSAGES`, `c` was not accepted before,
//! and `c + WINDOW >= highest` (or nothing was accepted yet). A counter
//! exactly [`WINDOW`] behind the highest is still accepted; one more behind
//! is not.
//!
//! The window neither reads clocks nor allocates: it is a fixed 1 KiB array
//! plus one integer.

use std::fmt;

/// Words in the bitmap ring. A power of two so the ring index is a mask.
pub const BITMAP_WORDS: usize = 128;

const BITS_PER_WORD: u64 = u64::BITS as u64;

/// Bits in the bitmap ring.
pub const BITMAP_BITS: u64 = BITMAP_WORDS as u64 * BITS_PER_WORD;

/// How far behind the highest accepted counter a counter may be and still be
/// accepted: the ring minus one word, because the word that holds the highest
/// counter is partly "in the future" (as `COUNTER_WINDOW_SIZE` in Linux).
pub const WINDOW: u64 = BITMAP_BITS - BITS_PER_WORD;

/// The per-session message limit (defined with the other protocol limits).
/// Its 2^13 counters of slack below `u64::MAX` also mean `counter + WINDOW`
/// can never overflow for an accepted counter.
pub use crate::consts::REJECT_AFTER_MESSAGES;

/// Sliding anti-replay window of one receiving session; see the module
/// documentation for the structure and the exact acceptance rule.
#[derive(Clone)]
pub struct ReplayWindow {
    /// One past the highest counter accepted so far, 0 while none has been.
    /// Storing `highest + 1` lets "nothing yet" share the arithmetic of the
    /// normal case instead of needing a separate flag.
    end: u64,
    /// Ring of seen-bits, indexed by `counter % BITMAP_BITS`. Invariant: the
    /// words for the `BITMAP_WORDS` word-slots ending at the highest
    /// counter's word hold exactly the counters accepted there, and no bit
    /// above the highest counter is set.
    bitmap: [u64; BITMAP_WORDS],
}

impl ReplayWindow {
    /// An empty window: any counter below [`REJECT_AFTER_MESSAGES`] is
    /// acceptable, including 0.
    pub const fn new() -> Self {
        ReplayWindow {
            end: 0,
            bitmap: [0; BITMAP_WORDS],
        }
    }

    /// Whether [`update`](Self::update) would accept `counter`, without
    /// recording it. Used before decryption to drop obvious replays cheaply;
    /// the packet must still go through `update` once it authenticates,
    /// since a forged packet must never move the window.
    #[must_use]
    pub fn check(&self, counter: u64) -> bool {
        if !self.in_range(counter) {
            return false;
        }
        counter >= self.end || self.bitmap[word_index(counter)] & bit_mask(counter) == 0
    }

    /// Accepts and records `counter`. Returns false — leaving the window
    /// unchanged — when it is a duplicate, more than [`WINDOW`] behind the
    /// highest accepted counter, or at least [`REJECT_AFTER_MESSAGES`].
    #[must_use]
    pub fn update(&mut self, counter: u64) -> bool {
        if !self.in_range(counter) {
            return false;
        }
        if counter >= self.end {
            self.advance_to(counter);
        }
        let word = &mut self.bitmap[word_index(counter)];
        let mask = bit_mask(counter);
        let fresh = *word & mask == 0;
        *word |= mask;
        fresh
    }

    /// The highest counter accepted so far, if any.
    pub fn highest(&self) -> Option<u64> {
        self.end.checked_sub(1)
    }

    /// Below the hard limit and not too far behind the highest counter.
    /// `counter + WINDOW + 1` cannot overflow: `counter` is checked against
    /// `REJECT_AFTER_MESSAGES` first, which leaves 2^13 of headroom.
    fn in_range(&self, counter: u64) -> bool {
        counter < REJECT_AFTER_MESSAGES && counter + WINDOW + 1 >= self.end
    }

    /// Makes `counter` (which is above the current highest) the new highest,
    /// zeroing the ring words it moves past: they still hold bits of
    /// counters a whole ring behind, which would otherwise read as "seen".
    /// `counter` passed `in_range`, so it is below `REJECT_AFTER_MESSAGES`:
    /// `counter + 1` and the word numbers + 1 cannot overflow, and the
    /// cleared words end at `new_word + 1` at most.
    fn advance_to(&mut self, counter: u64) {
        let new_word = counter / BITS_PER_WORD;
        // The highest counter's own word only has bits at or below it set
        // (invariant), so clearing starts at the word after it. With nothing
        // accepted yet the ring is all zero and needs no clearing.
        let first_stale_word = match self.highest() {
            Some(highest) => highest / BITS_PER_WORD + 1,
            None => new_word + 1,
        };
        // Past a full ring every word is stale once; capping keeps a huge
        // jump at 128 writes.
        let stale_words = (new_word + 1)
            .saturating_sub(first_stale_word)
            .min(BITMAP_WORDS as u64);
        for word in first_stale_word..first_stale_word + stale_words {
            self.bitmap[(word % BITMAP_WORDS as u64) as usize] = 0;
        }
        self.end = counter + 1;
    }
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ReplayWindow {
    // The 1 KiB bitmap is noise in logs; the highest counter is what matters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayWindow")
            .field("highest", &self.highest())
            .finish_non_exhaustive()
    }
}

fn word_index(counter: u64) -> usize {
    ((counter / BITS_PER_WORD) % BITMAP_WORDS as u64) as usize
}

fn bit_mask(counter: u64) -> u64 {
    1 << (counter % BITS_PER_WORD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};
    use std::collections::BTreeSet;

    const W: u64 = WINDOW;
    const R: u64 = REJECT_AFTER_MESSAGES;

    /// Feeds `steps` (counter, expected acceptance) to one window in order,
    /// checking `check` predicts `update` and does not change anything.
    fn run_table(steps: &[(u64, bool)]) {
        let mut window = ReplayWindow::new();
        for (number, &(counter, expected)) in steps.iter().enumerate() {
            let number = number + 1;
            let highest_before = window.highest();
            assert_eq!(
                window.check(counter),
                expected,
                "case {number}: check({counter})"
            );
            assert_eq!(
                window.check(counter),
                expected,
                "case {number}: check({counter}) again"
            );
            assert_eq!(
                window.highest(),
                highest_before,
                "case {number}: check moved"
            );
            assert_eq!(
                window.update(counter),
                expected,
                "case {number}: update({counter})"
            );
            let expected_highest = if expected {
                Some(highest_before.map_or(counter, |h| h.max(counter)))
            } else {
                highest_before
            };
            assert_eq!(window.highest(), expected_highest, "case {number}: highest");
        }
    }

    #[test]
    fn constants_match_the_kernel_and_the_paper() {
        assert_eq!(BITMAP_BITS, 8192);
        assert_eq!(WINDOW, 8128);
        assert_eq!(R as u128, (1u128 << 64) - (1 << 13) - 1);
    }

    #[test]
    fn case_table() {
        // Ported in spirit from Linux's selftest/counter.c: one window, fed
        // in order, each line the counter and whether it is accepted.
        let big = 1u64 << 40;
        run_table(&[
            // In order from 0, duplicates, small reordering.
            /* 1 */ (0, true),
            /* 2 */ (0, false),
            /* 3 */ (1, true),
            /* 4 */ (1, false),
            /* 5 */ (5, true),
            /* 6 */ (3, true),
            /* 7 */ (4, true),
            /* 8 */ (2, true),
            /* 9 */ (4, false),
            /* 10 */ (5, false),
            // Counter 6 ends up exactly WINDOW behind: still accepted.
            /* 11 */
            (W + 6, true),
            /* 12 */ (6, true),
            /* 13 */ (6, false),
            /* 14 */ (5, false),
            /* 15 */ (7, true),
            /* 16 */ (W + 5, true),
            /* 17 */ (W + 6, false),
            // Jump; just inside, exactly at and just outside the window.
            /* 18 */
            (3 * W, true),
            /* 19 */ (2 * W, true),
            /* 20 */ (2 * W, false),
            /* 21 */ (2 * W - 1, false),
            /* 22 */ (2 * W + 1, true),
            /* 23 */ (3 * W - 1, true),
            /* 24 */ (3 * W + 1, true),
            /* 25 */ (2 * W + 1, false),
            /* 26 */ (2 * W + 2, true),
            // Jump by exactly one ring: the same bit slots as 3W-1..3W+1
            // come back into use and must read as unseen.
            /* 27 */
            (3 * W + 1 + BITMAP_BITS, true),
            /* 28 */ (3 * W + BITMAP_BITS, true),
            /* 29 */ (3 * W - 1 + BITMAP_BITS, true),
            /* 30 */ (3 * W + BITMAP_BITS, false),
            /* 31 */ (3 * W + 1, false),
            // A jump far beyond the ring clears it entirely.
            /* 32 */
            (big, true),
            /* 33 */ (big - 1, true),
            /* 34 */ (big - W, true),
            /* 35 */ (big - W - 1, false),
            /* 36 */ (big - BITMAP_BITS, false),
            /* 37 */ (big + 1, true),
            /* 38 */ (big - W, false),
            /* 39 */ (3 * W + 1 + BITMAP_BITS, false),
            // The hard limit: REJECT_AFTER_MESSAGES and above never pass,
            // even when far ahead; the counter just below it does.
            /* 40 */
            (R, false),
            /* 41 */ (R + 1, false),
            /* 42 */ (u64::MAX, false),
            /* 43 */ (R - 1, true),
            /* 44 */ (R - 1, false),
            /* 45 */ (R, false),
            /* 46 */ (R - 2, true),
            /* 47 */ (R - 1 - W, true),
            /* 48 */ (R - 2 - W, false),
            /* 49 */ (big + 2, false),
            /* 50 */ (0, false),
        ]);
    }

    #[test]
    fn first_counter_far_from_zero() {
        run_table(&[
            /* 1 */ (W + 1, true),
            /* 2 */ (0, false),
            /* 3 */ (1, true),
            /* 4 */ (1, false),
            /* 5 */ (W, true),
            /* 6 */ (W + 2, true),
            /* 7 */ (1, false),
            /* 8 */ (2, true),
        ]);
    }

    #[test]
    fn first_counter_near_2_pow_60() {
        let first = (1u64 << 60) - 1;
        run_table(&[
            /* 1 */ (first, true),
            /* 2 */ (first, false),
            /* 3 */ (first - W, true),
            /* 4 */ (first - W - 1, false),
            /* 5 */ (0, false),
            /* 6 */ (first + 1, true),
            /* 7 */ (first - W, false),
            /* 8 */ (first + 1 - W, true),
            // A ring further on: every bit slot is reused and reads unseen.
            /* 9 */
            (first + 1 + BITMAP_BITS, true),
            /* 10 */ (first + 1 + BITMAP_BITS - W, true),
            /* 11 */ (first + BITMAP_BITS - W, false),
            /* 12 */ (first + 1, false),
        ]);
    }

    #[test]
    fn a_peer_that_only_counts_down() {
        // From 2^60 − 1 down: the first stays the highest, so the counters
        // up to WINDOW below it are fresh once and the rest are too old.
        let first = (1u64 << 60) - 1;
        let mut window = ReplayWindow::new();
        for behind in 0..=W + 200 {
            let counter = first - behind;
            let fresh = behind <= W;
            assert_eq!(window.check(counter), fresh, "{behind} behind");
            assert_eq!(window.update(counter), fresh, "{behind} behind");
            assert_eq!(window.highest(), Some(first));
        }
        for behind in 0..=W + 200 {
            assert!(!window.update(first - behind), "{behind} behind again");
        }
    }

    #[test]
    fn a_peer_that_sends_every_other_counter() {
        // Three rings' worth of even offsets from 2^60 − 1, then the odd
        // ones late: fresh while within WINDOW of the highest, else too old.
        let start = (1u64 << 60) - 1;
        let sent = 3 * BITMAP_BITS;
        let mut window = ReplayWindow::new();
        for k in 0..sent {
            assert!(window.update(start + 2 * k), "{k}");
        }
        let highest = start + 2 * (sent - 1);
        assert_eq!(window.highest(), Some(highest));
        let mut late_accepted = 0;
        for k in 0..sent - 1 {
            let counter = start + 2 * k + 1;
            let fresh = highest - counter <= W;
            assert_eq!(window.update(counter), fresh, "{counter}");
            late_accepted += u64::from(fresh);
        }
        // Half the window's counters were skipped ones.
        assert_eq!(late_accepted, W / 2);
        for k in 0..sent {
            assert!(!window.check(start + 2 * k), "{k} again");
        }
    }

    #[test]
    fn a_peer_that_jumps_far_every_time() {
        // Forward by more than a ring (which wipes it: the counter exactly
        // WINDOW behind the new highest reads unseen) or back by more than
        // the window (too old), from 2^60 on; then the hard limit.
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        let mut window = ReplayWindow::new();
        let mut highest = (1u64 << 60) - 1;
        assert!(window.update(highest));
        for step in 0..2_000 {
            let jump = BITMAP_BITS + rng.next_u64() % (1 << 50);
            if rng.next_u64() % 4 == 0 {
                let counter = highest.saturating_sub(W + jump);
                assert!(!window.check(counter), "step {step}: {counter}");
                assert!(!window.update(counter), "step {step}: {counter}");
            } else {
                let counter = highest + jump;
                assert!(window.update(counter), "step {step}: {counter}");
                assert!(!window.update(highest), "step {step}: old highest");
                highest = counter;
                assert!(window.update(counter - W), "step {step}: W behind");
                assert!(!window.update(counter - W - 1), "step {step}");
            }
            assert_eq!(window.highest(), Some(highest), "step {step}");
        }
        assert!(highest < R - 1);
        assert!(!window.update(u64::MAX));
        assert!(!window.update(R));
        assert!(window.update(R - 1));
        assert!(!window.update(highest));
        assert!(window.update(R - 1 - W));
        assert!(!window.update(R - 2 - W));
        assert_eq!(window.highest(), Some(R - 1));
    }

    #[test]
    fn rejected_counters_leave_a_fresh_window_fresh() {
        let mut window = ReplayWindow::new();
        assert!(!window.update(R));
        assert!(!window.update(u64::MAX));
        assert_eq!(window.highest(), None);
        assert!(window.check(0));
        assert!(window.update(0));
        assert_eq!(window.highest(), Some(0));
    }

    /// Deliberately naive: every accepted counter in a set.
    #[derive(Default)]
    struct Model {
        seen: BTreeSet<u64>,
        highest: Option<u64>,
    }

    impl Model {
        fn accepts(&self, counter: u64) -> bool {
            counter < R
                && !self.seen.contains(&counter)
                && match self.highest {
                    None => true,
                    Some(highest) => counter + W >= highest,
                }
        }

        fn update(&mut self, counter: u64) -> bool {
            let accepted = self.accepts(counter);
            if accepted {
                self.seen.insert(counter);
                self.highest = Some(self.highest.map_or(counter, |h| h.max(counter)));
            }
            accepted
        }
    }

    /// Counters are drawn relative to the model's highest so that the
    /// window edges, bitmap wrap-around and the hard limit all get hit.
    #[derive(Clone, Debug)]
    enum Step {
        Behind(u64),
        Ahead(u64),
        Absolute(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..W + 130).prop_map(Step::Behind),
            3 => (W - 70..W + 70).prop_map(Step::Behind),
            1 => (0..64u64).prop_map(Step::Behind),
            3 => (0..200u64).prop_map(Step::Ahead),
            2 => (0..3 * BITMAP_BITS).prop_map(Step::Ahead),
            1 => prop_oneof![
                Just(0),
                Just(R - 1),
                Just(R),
                Just(u64::MAX),
                R - 3 * BITMAP_BITS..=u64::MAX,
                any::<u64>(),
            ]
            .prop_map(Step::Absolute),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn matches_naive_model(steps in prop::collection::vec(step(), 1..400)) {
            let mut window = ReplayWindow::new();
            let mut model = Model::default();
            for step in steps {
                let base = model.highest.unwrap_or(0);
                let counter = match step {
                    Step::Behind(d) => base.saturating_sub(d),
                    Step::Ahead(d) => base.saturating_add(d),
                    Step::Absolute(c) => c,
                };
                let expected = model.accepts(counter);
                prop_assert_eq!(window.check(counter), expected, "check({})", counter);
                prop_assert_eq!(window.update(counter), model.update(counter), "update({})", counter);
                prop_assert_eq!(window.highest(), model.highest);
            }
        }
    }

    /// Every counter from `start` to `start + count` is sent, reordered by
    /// up to WINDOW positions, and a quarter of them are duplicated later
    /// still. Each must be accepted exactly once.
    fn reordered_delivery_accepts_each_once(seed: u64, start: u64, count: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Packet i arrives at "time" i + delay with delay <= WINDOW, so when
        // it first arrives nothing later than i + WINDOW has been seen.
        let mut deliveries = Vec::new();
        for offset in 0..count {
            let arrival = offset + rng.next_u64() % (W + 1);
            deliveries.push((arrival, start + offset));
            if rng.next_u64() & 3 == 0 {
                let again = arrival + rng.next_u64() % (2 * W);
                deliveries.push((again, start + offset));
            }
        }
        deliveries.sort_unstable();

        let mut window = ReplayWindow::new();
        let mut accepted = vec![0u32; count as usize];
        for &(_, counter) in &deliveries {
            let predicted = window.check(counter);
            let fresh = window.update(counter);
            assert_eq!(predicted, fresh, "check and update disagree on {counter}");
            if fresh {
                accepted[(counter - start) as usize] += 1;
            }
        }
        for (offset, &times) in accepted.iter().enumerate() {
            assert_eq!(
                times,
                1,
                "counter {} accepted {times} times",
                start + offset as u64
            );
        }
        assert_eq!(window.highest(), Some(start + count - 1));
    }

    #[test]
    fn reordering_within_the_window_accepts_everything_once() {
        let count = 40_000;
        for seed in 0..4 {
            reordered_delivery_accepts_each_once(seed, 0, count);
        }
        reordered_delivery_accepts_each_once(10, (1 << 32) - 1000, count);
        // Ends on the last acceptable counter.
        reordered_delivery_accepts_each_once(11, R - count, count);
    }
}
