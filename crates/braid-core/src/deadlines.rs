//! The device's wake-up schedule: one deadline per peer in a binary
//! min-heap that knows where each peer sits in it, so the next wake-up is
//! read in O(1) and a peer's deadline is set, moved or removed in
//! O(log n). A device with 100,000 idle peers then wakes only for the
//! peers that are due, instead of scanning all of them per wake-up (the
//! shape of quinn's timer table and of the kernel's timer lists: work in
//! proportion to what fires, not to what exists).
//!
//! A peer's deadline is the earliest of its WireGuard timers, its reorder
//! window's expiry and its rate limiter's next release; the device keeps
//! it here (see `Device::reschedule_touched`).

use std::time::Instant;

/// Marks a key that is not in the heap.
const ABSENT: u32 = u32::MAX;

/// Deadlines keyed by small integers (peer ids); see the module
/// documentation. Equal deadlines leave in key order, so runs in simulated
/// time do not depend on the heap's history.
#[derive(Debug, Default, Clone)]
pub struct DeadlineQueue {
    /// The heap: `heap[i]` is at or before both its children
    /// (`2i + 1`, `2i + 2`).
    heap: Vec<(Instant, u32)>,
    /// Where each key sits in `heap`, or [`ABSENT`]. Grows to the largest
    /// key ever set: four bytes per peer slot.
    position: Vec<u32>,
}

impl DeadlineQueue {
    pub const fn new() -> Self {
        DeadlineQueue {
            heap: Vec::new(),
            position: Vec::new(),
        }
    }

    /// Keys with a deadline.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The earliest deadline of all keys.
    pub fn next(&self) -> Option<Instant> {
        self.heap.first().map(|&(at, _)| at)
    }

    /// The deadline of `key`, if it has one.
    pub fn deadline(&self, key: usize) -> Option<Instant> {
        let i = *self.position.get(key)?;
        (i != ABSENT).then(|| self.heap[i as usize].0)
    }

    /// Gives `key` the deadline `at`, or none: an insertion, a move either
    /// way or a removal, O(log n); nothing when it stays.
    pub fn set(&mut self, key: usize, at: Option<Instant>) {
        let key32 = u32::try_from(key)
            .ok()
            .filter(|&k| k != ABSENT)
            .expect("a key below u32::MAX (peer ids are below MAX_PEERS)");
        let current = self.position.get(key).copied().unwrap_or(ABSENT);
        match (current, at) {
            (ABSENT, None) => {}
            (ABSENT, Some(at)) => {
                if self.position.len() <= key {
                    self.position.resize(key + 1, ABSENT);
                }
                let i = self.heap.len();
                self.heap.push((at, key32));
                self.position[key] = i as u32;
                self.sift_up(i);
            }
            (i, Some(at)) => {
                let i = i as usize;
                let old = self.heap[i].0;
                if old == at {
                    return;
                }
                self.heap[i].0 = at;
                if at < old {
                    self.sift_up(i);
                } else {
                    self.sift_down(i);
                }
            }
            (i, None) => {
                self.remove_at(i as usize);
            }
        }
    }

    /// Removes and returns a key whose deadline is at or before `now`
    /// (the earliest one), O(log n).
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let &(at, key) = self.heap.first()?;
        if at > now {
            return None;
        }
        self.remove_at(0);
        Some(key as usize)
    }

    fn remove_at(&mut self, i: usize) {
        let last = self.heap.len() - 1;
        self.swap(i, last);
        let (_, key) = self.heap.pop().expect("i is in the heap");
        self.position[key as usize] = ABSENT;
        if i < self.heap.len() {
            // The entry moved here from the end may belong above or below.
            self.sift_up(i);
            self.sift_down(i);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.position[self.heap[a].1 as usize] = a as u32;
        self.position[self.heap[b].1 as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent] <= self.heap[i] {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (left, right) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if left < self.heap.len() && self.heap[left] < self.heap[least] {
                least = left;
            }
            if right < self.heap.len() && self.heap[right] < self.heap[least] {
                least = right;
            }
            if least == i {
                break;
            }
            self.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn the_earliest_leaves_first_and_ties_go_in_key_order() {
        let t0 = Instant::now();
        let mut q = DeadlineQueue::new();
        assert_eq!(q.next(), None);
        assert_eq!(q.pop_due(at(t0, 1_000)), None);
        q.set(7, Some(at(t0, 30)));
        q.set(3, Some(at(t0, 10)));
        q.set(9, Some(at(t0, 10)));
        q.set(1, Some(at(t0, 20)));
        assert_eq!(q.len(), 4);
        assert_eq!(q.next(), Some(at(t0, 10)));
        assert_eq!(q.pop_due(at(t0, 9)), None, "nothing is due yet");
        assert_eq!(q.pop_due(at(t0, 25)), Some(3));
        assert_eq!(q.pop_due(at(t0, 25)), Some(9));
        assert_eq!(q.pop_due(at(t0, 25)), Some(1));
        assert_eq!(q.pop_due(at(t0, 25)), None);
        assert_eq!(q.deadline(7), Some(at(t0, 30)));
        assert_eq!(q.deadline(3), None);
        assert_eq!(q.deadline(1_000), None, "a key never set");
    }

    #[test]
    fn a_deadline_moves_both_ways_and_is_removed() {
        let t0 = Instant::now();
        let mut q = DeadlineQueue::new();
        for key in 0..10 {
            q.set(key, Some(at(t0, 100 + key as u64)));
        }
        q.set(5, Some(at(t0, 1)));
        assert_eq!(q.next(), Some(at(t0, 1)));
        q.set(5, Some(at(t0, 500)));
        assert_eq!(q.next(), Some(at(t0, 100)));
        q.set(0, None);
        q.set(0, None);
        assert_eq!(q.len(), 9);
        assert_eq!(q.next(), Some(at(t0, 101)));
        let order: Vec<usize> = std::iter::from_fn(|| q.pop_due(at(t0, 1_000))).collect();
        assert_eq!(order, [1, 2, 3, 4, 6, 7, 8, 9, 5]);
        assert!(q.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(usize, Option<u64>),
        Pop(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0usize..40, proptest::option::of(0u64..200)).prop_map(|(k, t)| Op::Set(k, t)),
            1 => (0u64..200).prop_map(Op::Pop),
        ]
    }

    proptest! {
        /// Against a plain map: the same deadlines, the same next one, the
        /// same key popped (earliest, then lowest key).
        #[test]
        fn behaves_like_a_sorted_map(ops in proptest::collection::vec(op(), 0..300)) {
            let t0 = Instant::now();
            let mut q = DeadlineQueue::new();
            let mut model: BTreeMap<usize, Instant> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(k, t) => {
                        let t = t.map(|ms| at(t0, ms));
                        q.set(k, t);
                        match t {
                            Some(t) => { model.insert(k, t); }
                            None => { model.remove(&k); }
                        }
                    }
                    Op::Pop(ms) => {
                        let now = at(t0, ms);
                        let want = model
                            .iter()
                            .filter(|(_, &t)| t <= now)
                            .min_by_key(|(&k, &t)| (t, k))
                            .map(|(&k, _)| k);
                        if let Some(k) = want {
                            model.remove(&k);
                        }
                        prop_assert_eq!(q.pop_due(now), want);
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.next(), model.values().min().copied());
                for k in 0..40 {
                    prop_assert_eq!(q.deadline(k), model.get(&k).copied());
                }
            }
        }
    }
}
