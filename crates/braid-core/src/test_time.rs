//! Instants for the overflow tests: time here is passed in, so tests can
//! stand at the edge of what an `Instant` holds.

use std::time::{Duration, Instant};

/// The latest instant `checked_add` reaches from `t`.
pub fn end_of_time(t: Instant) -> Instant {
    // Binary search on seconds, then on nanoseconds: the platform's limit
    // is not a constant std exposes.
    let latest = |step: fn(u64) -> Duration, from: Instant, max: u64| {
        let (mut lo, mut hi) = (0u64, max);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if from.checked_add(step(mid)).is_some() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        from + step(lo)
    };
    let secs = latest(Duration::from_secs, t, u64::MAX);
    latest(Duration::from_nanos, secs, 999_999_999)
}
