//! Per-peer rate limiting (`RateLimit = 50mbit`): per direction a token
//! bucket with a small burst, and a short queue in front of it.
//!
//! The queue is short on purpose: a deep one holds the rate but makes a
//! shaped VPN laggy (every packet waits behind it), so it holds at most
//! `QUEUE_TIME` of traffic and drops what does not fit, which tells the TCP
//! sender to slow down within a round trip. Without any queue (a pure
//! policer) TCP collapsed to a tenth of the rate in the namespace test:
//! every burst of a growing window lost several packets at once.
//!
//! The bucket is kept as a virtual clock: `full_at` is the moment it would
//! be full again. A packet costs its transmission time at the rate, and may
//! pass when the bucket, after paying, would still be no more than `burst`
//! behind the present. This is the same as counting tokens, with integer
//! nanoseconds and no refill step.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Lowest accepted rate (below this a single full-size packet would take
/// longer than a second).
pub const MIN_RATE_BITS: u64 = 8_000;
/// Highest accepted rate (beyond any line braid drives).
pub const MAX_RATE_BITS: u64 = 1_000_000_000_000;
/// How much traffic above the rate may pass at once, as time at the rate.
pub const BURST_TIME: Duration = Duration::from_millis(5);
/// The burst is never smaller than this, so a few full-size packets (and a
/// the largest IP packet) always fit even at low rates.
pub const MIN_BURST_BYTES: u64 = 64 * 1024;

/// One direction's bucket.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate_bits: u64,
    /// Bucket depth in nanoseconds of transmission at the rate.
    depth_ns: u64,
    /// When the bucket is full again; `None` until the first packet.
    full_at: Option<Instant>,
}

impl TokenBucket {
    /// A bucket for `rate_bits` bits per second holding `burst_bytes`.
    pub fn new(rate_bits: u64, burst_bytes: u64) -> TokenBucket {
        let rate_bits = rate_bits.max(1);
        TokenBucket {
            rate_bits,
            depth_ns: cost_ns(rate_bits, burst_bytes),
            full_at: None,
        }
    }

    /// A bucket with braid's default burst for this rate.
    pub fn with_default_burst(rate_bits: u64) -> TokenBucket {
        TokenBucket::new(rate_bits, default_burst_bytes(rate_bits))
    }

    pub fn rate_bits(&self) -> u64 {
        self.rate_bits
    }

    /// Takes the tokens for a packet of `bytes` if there are enough; false
    /// means the packet is over the rate and must be dropped.
    pub fn admit(&mut self, now: Instant, bytes: usize) -> bool {
        let start = match self.full_at {
            Some(t) if t > now => t,
            _ => now,
        };
        // A cost may be centuries (a huge packet at 1 bit/s); one that no
        // instant can hold is over any depth there is.
        let cost = Duration::from_nanos(cost_ns(self.rate_bits, bytes as u64));
        let Some(after) = start.checked_add(cost) else {
            return false;
        };
        if after.saturating_duration_since(now) > Duration::from_nanos(self.depth_ns) {
            return false;
        }
        self.full_at = Some(after);
        true
    }

    /// From when on `bytes` will be admitted (possibly already past);
    /// `None` before the first packet, when any packet up to the burst is.
    pub fn ready_at(&self, bytes: usize) -> Option<Instant> {
        let full_at = self.full_at?;
        let cost = Duration::from_nanos(cost_ns(self.rate_bits, bytes as u64));
        let depth = Duration::from_nanos(self.depth_ns);
        // admit() passes once full_at + cost - now <= depth. Written so no
        // intermediate can overflow: cost and depth may each be centuries.
        Some(match depth.checked_sub(cost) {
            Some(slack) => full_at.checked_sub(slack).unwrap_or(full_at),
            // Never (see `fits`); the instant admit would still refuse.
            None => full_at.checked_add(cost - depth).unwrap_or(full_at),
        })
    }

    /// Whether a packet of `bytes` can ever pass (it fits in the bucket).
    pub fn fits(&self, bytes: usize) -> bool {
        cost_ns(self.rate_bits, bytes as u64) <= self.depth_ns
    }
}

/// Nanoseconds that `bytes` take at `rate_bits` per second (rounded up, so
/// many small packets cannot sneak past the rate through rounding).
fn cost_ns(rate_bits: u64, bytes: u64) -> u64 {
    // In u128: at most 2^64 * 2^33; rate_bits >= 1 (see `TokenBucket::new`).
    let ns = (u128::from(bytes) * 8 * 1_000_000_000).div_ceil(u128::from(rate_bits));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// `BURST_TIME` of traffic at the rate, at least `MIN_BURST_BYTES`.
pub fn default_burst_bytes(rate_bits: u64) -> u64 {
    let burst = u128::from(rate_bits) * BURST_TIME.as_nanos() / 8 / 1_000_000_000;
    u64::try_from(burst)
        .unwrap_or(u64::MAX)
        .max(MIN_BURST_BYTES)
}

/// What happened to a packet offered to a [`Shaper`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the rate: send or deliver it now.
    Pass,
    /// Over the rate but the short queue had room: it was copied there and
    /// comes out of [`Shaper::release`] when its tokens are due.
    Queued,
    /// Over the rate and the queue is full: drop it.
    Dropped,
}

/// One direction of a limited peer: the bucket and a short FIFO queue in
/// front of it. The queue holds at most `QUEUE_TIME` of traffic at the rate,
/// so it smooths a burst into the rate without ever adding more delay than
/// that; what does not fit is dropped, which is the TCP sender's signal.
#[derive(Debug, Clone)]
pub struct Shaper {
    bucket: TokenBucket,
    queue: VecDeque<Vec<u8>>,
    queued_bytes: usize,
    limit_bytes: usize,
    /// Buffers of released packets, reused so steady traffic allocates
    /// nothing.
    spare: Vec<Vec<u8>>,
}

impl Shaper {
    pub fn new(rate_bits: u64) -> Shaper {
        Shaper {
            bucket: TokenBucket::with_default_burst(rate_bits),
            queue: VecDeque::new(),
            queued_bytes: 0,
            limit_bytes: default_queue_bytes(rate_bits),
            spare: Vec::new(),
        }
    }

    pub fn rate_bits(&self) -> u64 {
        self.bucket.rate_bits()
    }

    /// Packets waiting in the queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Decides about `packet`; a queued packet is copied, so the caller's
    /// buffer is free again in every case.
    pub fn offer(&mut self, now: Instant, packet: &[u8]) -> Verdict {
        if self.queue.is_empty() && self.bucket.admit(now, packet.len()) {
            return Verdict::Pass;
        }
        // A queued packet always has a release time: its admit failed on a
        // bucket that had been used, unless it can never fit at all.
        let queued = self.queued_bytes.checked_add(packet.len());
        if !self.bucket.fits(packet.len()) || queued.is_none_or(|q| q > self.limit_bytes) {
            return Verdict::Dropped;
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(packet);
        self.queued_bytes += packet.len();
        self.queue.push_back(buf);
        Verdict::Queued
    }

    /// When the head of the queue may leave (`None`: the queue is empty).
    pub fn next_release(&self) -> Option<Instant> {
        let head = self.queue.front()?;
        self.bucket.ready_at(head.len())
    }

    /// Empties the queue (no session to send it with); returns how many
    /// packets were dropped.
    pub fn clear(&mut self) -> usize {
        let n = self.queue.len();
        self.spare.extend(self.queue.drain(..));
        self.queued_bytes = 0;
        n
    }

    /// The head of the queue if its tokens are there; give the buffer back
    /// with [`recycle`](Self::recycle) after use.
    pub fn release(&mut self, now: Instant) -> Option<Vec<u8>> {
        let head = self.queue.front()?;
        if !self.bucket.admit(now, head.len()) {
            return None;
        }
        let buf = self.queue.pop_front()?;
        // The sum of what is queued includes this packet.
        self.queued_bytes -= buf.len();
        Some(buf)
    }

    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.spare.push(buf);
    }
}

/// How much delay the queue may add at most.
pub const QUEUE_TIME: Duration = Duration::from_millis(10);
/// The queue always has room for a few full-size packets.
pub const MIN_QUEUE_BYTES: usize = 8 * 1500;

/// `QUEUE_TIME` of traffic at the rate, at least `MIN_QUEUE_BYTES`.
pub fn default_queue_bytes(rate_bits: u64) -> usize {
    let bytes = u128::from(rate_bits) * QUEUE_TIME.as_nanos() / 8 / 1_000_000_000;
    usize::try_from(bytes)
        .unwrap_or(usize::MAX)
        .max(MIN_QUEUE_BYTES)
}

/// A peer's limit: the same rate for what we send it and what it sends us,
/// each direction with its own bucket and queue.
#[derive(Debug, Clone)]
pub struct RateLimit {
    pub outbound: Shaper,
    pub inbound: Shaper,
}

impl RateLimit {
    pub fn new(rate_bits: u64) -> RateLimit {
        RateLimit {
            outbound: Shaper::new(rate_bits),
            inbound: Shaper::new(rate_bits),
        }
    }

    pub fn rate_bits(&self) -> u64 {
        self.outbound.rate_bits()
    }

    /// The earlier of the two queues' release times.
    pub fn next_release(&self) -> Option<Instant> {
        match (self.outbound.next_release(), self.inbound.next_release()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A rate in the largest unit that keeps it readable: `50mbit`, `1.5gbit`.
pub fn format_rate(bits: u64) -> String {
    let (scale, unit) = match bits {
        b if b >= 1_000_000_000 => (1e9, "gbit"),
        b if b >= 1_000_000 => (1e6, "mbit"),
        b if b >= 1_000 => (1e3, "kbit"),
        _ => (1.0, "bit"),
    };
    let v = bits as f64 / scale;
    if v.fract() == 0.0 {
        format!("{v:.0}{unit}")
    } else {
        format!("{}{unit}", format!("{v:.3}").trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_time::end_of_time;

    const MBIT: u64 = 1_000_000;

    /// An arbitrary origin for simulated time.
    #[allow(clippy::disallowed_methods)]
    fn origin() -> Instant {
        Instant::now()
    }

    /// Offers `packet`-byte packets every `gap` for `span`, returns the
    /// bytes admitted.
    fn offer(
        bucket: &mut TokenBucket,
        start: Instant,
        gap: Duration,
        span: Duration,
        packet: usize,
    ) -> u64 {
        let mut t = start;
        let mut passed = 0u64;
        while t < start + span {
            if bucket.admit(t, packet) {
                passed += packet as u64;
            }
            t += gap;
        }
        passed
    }

    #[test]
    fn long_run_rate_is_the_set_rate_when_offered_more() {
        let start = origin();
        let mut b = TokenBucket::with_default_burst(50 * MBIT);
        // 1420-byte packets every 50 µs = 227 Mbit/s offered, for 10 s.
        let secs = 10;
        let passed = offer(
            &mut b,
            start,
            Duration::from_micros(50),
            Duration::from_secs(secs),
            1420,
        );
        let rate = passed as f64 * 8.0 / secs as f64;
        let burst_bits = default_burst_bytes(50 * MBIT) as f64 * 8.0 / secs as f64;
        assert!(rate <= 50e6 + burst_bits, "{rate}");
        assert!(rate >= 50e6 * 0.99, "{rate}");
    }

    #[test]
    fn below_the_rate_nothing_is_dropped() {
        let start = origin();
        let mut b = TokenBucket::with_default_burst(50 * MBIT);
        // 1420 bytes every 250 µs = 45.4 Mbit/s.
        let span = Duration::from_secs(5);
        let gap = Duration::from_micros(250);
        let passed = offer(&mut b, start, gap, span, 1420);
        let offered = (span.as_micros() / gap.as_micros()) as u64 * 1420;
        assert_eq!(passed, offered);
    }

    #[test]
    fn a_burst_passes_up_to_the_depth_then_refills_at_the_rate() {
        let start = origin();
        let burst = 32 * 1024;
        let mut b = TokenBucket::new(8 * MBIT, burst); // 1 byte per µs
        let mut passed = 0;
        while b.admit(start, 1000) {
            passed += 1000;
        }
        assert!(passed <= burst && passed > burst - 1000, "{passed}");
        // 768 bytes of tokens are left; the next 1000-byte packet fits once
        // 232 µs have added the missing 232 bytes, and then no other does.
        let left = burst - passed;
        let refill = Duration::from_micros(1000 - left);
        assert!(!b.admit(start + refill - Duration::from_micros(1), 1000));
        assert!(b.admit(start + refill, 1000));
        assert!(!b.admit(start + refill, 1000));
        // Idle time refills, but never beyond the depth.
        let later = start + Duration::from_secs(60);
        let mut again = 0;
        while b.admit(later, 1000) {
            again += 1000;
        }
        assert_eq!(again, passed);
    }

    #[test]
    fn time_going_backwards_does_not_mint_tokens() {
        let start = origin() + Duration::from_secs(1);
        let mut b = TokenBucket::new(8 * MBIT, 32 * 1024);
        while b.admit(start, 1000) {}
        assert!(!b.admit(start - Duration::from_millis(500), 1000));
    }

    #[test]
    fn a_packet_larger_than_the_burst_never_passes() {
        let mut b = TokenBucket::new(8 * MBIT, 1000);
        let now = origin();
        assert!(!b.admit(now, 1001));
        assert!(b.admit(now, 1000));
    }

    #[test]
    fn default_burst_scales_with_rate() {
        assert_eq!(default_burst_bytes(MIN_RATE_BITS), MIN_BURST_BYTES);
        assert_eq!(default_burst_bytes(50 * MBIT), MIN_BURST_BYTES); // 5 ms = 31 250 B
        assert_eq!(default_burst_bytes(1000 * MBIT), 625_000);
        assert!(default_burst_bytes(MAX_RATE_BITS) > 0);
    }

    /// Drives a shaper like the device does: packets offered every `gap`,
    /// releases whenever due. Returns (bytes out, drops, longest wait).
    fn run_shaper(
        shaper: &mut Shaper,
        start: Instant,
        gap: Duration,
        span: Duration,
        packet: usize,
    ) -> (u64, u64, Duration) {
        let mut t = start;
        let (mut out, mut drops, mut longest) = (0u64, 0u64, Duration::ZERO);
        let mut waiting: VecDeque<Instant> = VecDeque::new();
        let data = vec![7u8; packet];
        while t < start + span {
            while shaper.next_release().is_some_and(|r| r <= t) {
                let buf = shaper.release(t).expect("due");
                out += buf.len() as u64;
                longest = longest.max(t - waiting.pop_front().expect("queued"));
                shaper.recycle(buf);
            }
            match shaper.offer(t, &data) {
                Verdict::Pass => out += packet as u64,
                Verdict::Queued => waiting.push_back(t),
                Verdict::Dropped => drops += 1,
            }
            t += gap;
        }
        (out, drops, longest)
    }

    #[test]
    fn shaper_delivers_the_rate_with_bounded_delay() {
        let start = origin();
        let mut s = Shaper::new(50 * MBIT);
        // 227 Mbit/s offered for 10 s.
        let (out, drops, longest) = run_shaper(
            &mut s,
            start,
            Duration::from_micros(50),
            Duration::from_secs(10),
            1420,
        );
        let rate = out as f64 * 8.0 / 10.0;
        assert!((50e6 * 0.99..=50e6 * 1.01).contains(&rate), "{rate}");
        assert!(drops > 0);
        // Never more than the queue's worth of delay (plus one packet gap).
        assert!(
            longest <= QUEUE_TIME + Duration::from_micros(300),
            "{longest:?}"
        );
    }

    #[test]
    fn shaper_smooths_a_short_burst_without_drops() {
        let start = origin();
        let mut s = Shaper::new(50 * MBIT);
        // 40 Mbit/s on average, sent as 8 back-to-back packets every 2.27 ms
        // after the bucket is drained by a first burst.
        let mut t = start;
        let data = [1u8; 1420];
        let mut drops = 0;
        for _ in 0..2000 {
            for _ in 0..8 {
                while s.next_release().is_some_and(|r| r <= t) {
                    let b = s.release(t).expect("due");
                    s.recycle(b);
                }
                drops += u32::from(s.offer(t, &data) == Verdict::Dropped);
            }
            t += Duration::from_micros(2272);
        }
        assert_eq!(drops, 0);
    }

    #[test]
    fn queue_keeps_order_and_clear_empties_it() {
        let start = origin();
        let mut s = Shaper::new(8 * MBIT);
        let mut n = 0u8;
        while s.offer(start, &[n; 1000]) == Verdict::Pass {
            n += 1;
        }
        assert_eq!(s.offer(start, &[n + 1; 1000]), Verdict::Queued);
        assert_eq!(s.queued(), 2);
        assert!(s.release(start).is_none());
        let due = s.next_release().expect("queued");
        let first = s.release(due).expect("due");
        assert_eq!(first[0], n);
        s.recycle(first);
        assert_eq!(s.clear(), 1);
        assert_eq!(s.next_release(), None);
        // A packet that can never fit is dropped, not queued forever.
        let mut tiny = Shaper::new(MIN_RATE_BITS);
        tiny.bucket = TokenBucket::new(MIN_RATE_BITS, 100);
        assert_eq!(tiny.offer(start, &[0; 101]), Verdict::Dropped);
    }

    #[test]
    fn format_rate_picks_the_largest_readable_unit() {
        for (bits, s) in [
            (50_000_000, "50mbit"),
            (1_500_000_000, "1.5gbit"),
            (100_000, "100kbit"),
            (8_000, "8kbit"),
            (12_345_000, "12.345mbit"),
        ] {
            assert_eq!(format_rate(bits), s);
        }
    }

    #[test]
    fn rate_zero_is_one_bit_per_second_and_rate_max_is_unlimited() {
        let now = origin();
        let mut zero = TokenBucket::new(0, 1);
        assert_eq!(zero.rate_bits(), 1);
        assert!(zero.admit(now, 1));
        assert!(!zero.admit(now + Duration::from_secs(7), 1));
        assert!(zero.admit(now + Duration::from_secs(8), 1));
        let mut max = TokenBucket::with_default_burst(u64::MAX);
        for _ in 0..10_000 {
            assert!(max.admit(now, 65_535));
        }
        // Rate 0 is 1 bit/s with the minimum burst: 64 KiB at once (1500
        // bytes cost 12 000 s each), then the queue, which releases the
        // 44th packet once 44 × 12 000 s less the depth have passed.
        let mut s = Shaper::new(0);
        let mut passed = 0;
        while s.offer(now, &[0; 1500]) == Verdict::Pass {
            passed += 1;
        }
        assert_eq!(passed, MIN_BURST_BYTES / 1500);
        let depth_s = MIN_BURST_BYTES * 8;
        assert_eq!(
            s.next_release(),
            Some(now + Duration::from_secs((passed + 1) * 12_000 - depth_s))
        );
        let mut s = Shaper::new(u64::MAX);
        for _ in 0..10_000 {
            assert_eq!(s.offer(now, &[0; 9000]), Verdict::Pass);
        }
    }

    #[test]
    fn costs_of_centuries_and_the_end_of_time_refuse_instead_of_panicking() {
        let t0 = origin();
        let far = end_of_time(t0);
        // 1 bit/s, a bucket of u64::MAX bytes: any packet costs up to 584
        // years, which no instant near the end of time can add.
        let mut b = TokenBucket::new(1, u64::MAX);
        assert!(b.fits(usize::MAX));
        assert!(!b.admit(far, usize::MAX));
        assert!(!b.admit(far, 1));
        assert_eq!(b.ready_at(usize::MAX), None, "nothing was admitted");
        // Admitted at the origin, the bucket is full centuries later.
        assert!(b.admit(t0, usize::MAX));
        let ready = b.ready_at(usize::MAX).expect("used");
        assert!(ready <= t0 + Duration::from_nanos(u64::MAX));
        assert!(!b.admit(t0, 1));
        // A normal bucket at the end of time: refused, and ready_at of a
        // packet too big to ever fit does not overflow either.
        let mut b = TokenBucket::new(8 * MBIT, 1000);
        assert!(!b.admit(far, 100));
        assert!(b.admit(far - Duration::from_micros(100), 100));
        assert!(b.ready_at(usize::MAX).is_some());
        assert!(!b.fits(usize::MAX));
    }

    #[test]
    fn a_queue_limit_near_usize_max_does_not_wrap() {
        let now = origin();
        let mut s = Shaper::new(8 * MBIT);
        while s.offer(now, &[0; 1000]) == Verdict::Pass {}
        // As if the queue already held almost everything addressable.
        s.limit_bytes = usize::MAX;
        s.queued_bytes = usize::MAX - 10;
        assert_eq!(s.offer(now, &[0; 100]), Verdict::Dropped);
        s.queued_bytes = usize::MAX - 100;
        assert_eq!(s.offer(now, &[0; 100]), Verdict::Queued);
        assert_eq!(s.queued_bytes, usize::MAX);
        assert_eq!(
            default_queue_bytes(u64::MAX),
            usize::try_from(u128::from(u64::MAX) / 800).unwrap_or(usize::MAX)
        );
    }
}
