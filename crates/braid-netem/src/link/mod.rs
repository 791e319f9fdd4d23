//! A seeded model of an impaired line: delay with jitter (which reorders,
//! as Linux netem's does, unless told not to), random and bursty loss,
//! duplication, bit-flip corruption, a rate cap with a bounded drop-tail
//! queue, an MTU black hole and a switch that cuts the line.
//!
//! It is sans-IO: `offer(now, len)` decides a datagram's fate and when it
//! arrives; whoever holds the bytes (the `braid netem` relay, or the
//! in-memory simulator of the tests) delivers them. So unit tests and real
//! runs share one definition of "3 ms ± 1 ms, 1 % loss".
//!
//! Per datagram, in order: MTU check, cut, loss, then for the original and
//! each duplicate: rate queue (drop-tail), corruption, delay and jitter.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitterDist {
    /// Delay drawn uniformly from [delay − jitter, delay + jitter].
    Uniform,
    /// Normal with standard deviation `jitter` (clipped at zero delay).
    Normal,
}

/// How much the rate-limited queue may hold before it drops (drop-tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// Queueing delay at most this long.
    Time(Duration),
    Bytes(u64),
}

/// Default queue of a rate-capped line.
pub const DEFAULT_QUEUE: QueueLimit = QueueLimit::Time(Duration::from_millis(50));

/// Longest delay (plus jitter) a line may have: one day.
const MAX_DELAY: Duration = Duration::from_secs(24 * 3600);

/// What a line does to datagrams; the default is a perfect line.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkParams {
    pub delay: Duration,
    pub jitter: Duration,
    pub jitter_dist: JitterDist,
    /// Jitter may reorder (netem's default); false keeps arrival order.
    pub reorder: bool,
    /// Probability that a datagram is lost, 0..=1 (long-run average).
    pub loss: f64,
    /// Mean length of a loss burst (Gilbert–Elliott); `None`: independent.
    pub loss_burst: Option<f64>,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability that a datagram arrives with one bit flipped.
    pub corrupt: f64,
    /// Line rate in bits per second; `None`: unlimited.
    pub rate_bps: Option<u64>,
    pub queue: QueueLimit,
    /// Datagrams longer than this vanish (a PMTU black hole).
    pub mtu: Option<usize>,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            jitter_dist: JitterDist::Uniform,
            reorder: true,
            loss: 0.0,
            loss_burst: None,
            duplicate: 0.0,
            corrupt: 0.0,
            rate_bps: None,
            queue: DEFAULT_QUEUE,
            mtu: None,
        }
    }
}

impl LinkParams {
    /// Checks ranges; the message names the parameter.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!(
                    "{name} must be between 0% and 100%, not {}%",
                    p * 100.0
                ));
            }
        }
        if let Some(b) = self.loss_burst {
            if !b.is_finite() || b < 1.0 {
                return Err(format!(
                    "loss burst length must be at least 1 packet, not {b}"
                ));
            }
            if self.loss >= 1.0 {
                return Err("a loss burst needs a loss below 100%".into());
            }
            // Bursts of `b` losses need gaps of at least one good packet, so
            // the long-run loss is at most b / (b + 1): above it the chance
            // of entering a burst would exceed 1 and the model would
            // silently lose less than asked.
            let p = self.loss;
            if b * (1.0 - p) < p * (1.0 - 1e-9) {
                return Err(format!(
                    "a loss of {}% needs a loss burst of at least {} packets, not {b}",
                    p * 100.0,
                    p / (1.0 - p)
                ));
            }
        }
        // Far beyond any real line, and keeps the arrival-time arithmetic
        // (which would panic on overflow) in range.
        if self.delay.saturating_add(self.jitter) > MAX_DELAY {
            return Err(format!(
                "delay plus jitter must be at most {} s, not {} s",
                MAX_DELAY.as_secs(),
                self.delay.saturating_add(self.jitter).as_secs_f64()
            ));
        }
        if self.rate_bps == Some(0) {
            return Err("rate must be above 0".into());
        }
        if self.mtu == Some(0) {
            return Err("mtu must be above 0".into());
        }
        Ok(())
    }

    /// True when nothing at all is impaired (the relay's fast path).
    pub fn is_perfect(&self) -> bool {
        self.delay.is_zero()
            && self.jitter.is_zero()
            && self.loss == 0.0
            && self.duplicate == 0.0
            && self.corrupt == 0.0
            && self.rate_bps.is_none()
            && self.mtu.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    Mtu,
    Cut,
    Loss,
    /// The rate queue was full. Also what happens where time runs out: a
    /// rate of 0, a datagram whose serialisation takes longer than a
    /// `Duration` holds, or a copy that would arrive after the last instant
    /// there is (only parameters `validate` refuses, or a queue limit that
    /// lets the backlog grow for centuries, get there).
    Queue,
}

/// When one copy of a datagram arrives, and whether a bit of it flips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub at: Instant,
    /// Index of the bit to flip (`bit / 8` is the byte), if corrupted.
    pub corrupt_bit: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Dropped(DropCause),
    /// `duplicate` is a second copy (it may itself have been dropped by the
    /// queue, then it is `None`).
    Delivered {
        first: Delivery,
        duplicate: Option<Delivery>,
    },
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkCounters {
    pub offered: u64,
    /// Copies scheduled for delivery (duplicates included).
    pub delivered: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Copies that arrive before a copy offered earlier.
    pub reordered: u64,
    pub dropped_mtu: u64,
    pub dropped_cut: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
}

pub struct LinkModel {
    params: LinkParams,
    rng: ChaCha8Rng,
    /// Gilbert–Elliott: currently in the bad (losing) state.
    in_burst: bool,
    cut: bool,
    /// When the rate-limited line has sent everything queued so far.
    busy_until: Option<Instant>,
    latest_arrival: Option<Instant>,
    counters: LinkCounters,
}

/// Flips bit `bit` of `packet` (as a `Delivery` asked).
pub fn apply_corruption(packet: &mut [u8], bit: usize) {
    if let Some(b) = packet.get_mut(bit / 8) {
        *b ^= 1 << (bit % 8);
    }
}

impl LinkModel {
    pub fn new(params: LinkParams, seed: u64) -> LinkModel {
        LinkModel {
            params,
            rng: ChaCha8Rng::seed_from_u64(seed),
            in_burst: false,
            cut: false,
            busy_until: None,
            latest_arrival: None,
            counters: LinkCounters::default(),
        }
    }

    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    pub fn set_cut(&mut self, cut: bool) {
        self.cut = cut;
    }

    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// Changes the rate cap from now on (a line whose capacity changes:
    /// an LTE cell that fills, a DSL line that retrains). What is already
    /// queued leaves at the times it was given; the next datagram waits
    /// for it and then goes at the new rate. The queue keeps its limit.
    /// A rate of 0 is refused (nothing would ever leave).
    pub fn set_rate(&mut self, rate_bps: u64) -> Result<(), String> {
        if rate_bps == 0 {
            return Err("rate must be above 0".into());
        }
        self.params.rate_bps = Some(rate_bps);
        Ok(())
    }

    /// Bytes waiting in the rate queue at `now`.
    pub fn queue_bytes(&self, now: Instant) -> u64 {
        match self.params.rate_bps {
            Some(rate) => bytes_in(self.queue_delay(now), rate),
            None => 0,
        }
    }

    /// How long a datagram offered at `now` waits before the line is free.
    pub fn queue_delay(&self, now: Instant) -> Duration {
        self.busy_until
            .map_or(Duration::ZERO, |b| b.saturating_duration_since(now))
    }

    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.uniform() < p
    }

    fn lost(&mut self) -> bool {
        let p = self.params.loss;
        match self.params.loss_burst {
            None => self.chance(p),
            Some(_) if p == 0.0 => false,
            // Unvalidated: 1 / (1 - p) below would be infinite.
            Some(_) if p >= 1.0 => true,
            Some(burst) => {
                // Two states; losses only in the bad one. Leaving a burst has
                // probability 1/burst, so bursts average `burst` packets;
                // entering one is set so the long-run loss rate is `p`.
                // (`max` also turns an unvalidated NaN or zero into bursts
                // of one, where 1 / burst would be NaN or infinite.)
                let leave = 1.0 / burst.max(1.0);
                let enter = p * leave / (1.0 - p);
                self.in_burst = if self.in_burst {
                    !self.chance(leave)
                } else {
                    self.chance(enter)
                };
                self.in_burst
            }
        }
    }

    fn jittered_delay(&mut self) -> Duration {
        let base = self.params.delay.as_secs_f64();
        let j = self.params.jitter.as_secs_f64();
        if j == 0.0 {
            return self.params.delay;
        }
        let offset = match self.params.jitter_dist {
            JitterDist::Uniform => (self.uniform() * 2.0 - 1.0) * j,
            JitterDist::Normal => {
                // Box–Muller.
                let u1 = self.uniform().max(f64::MIN_POSITIVE);
                let u2 = self.uniform();
                (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * j
            }
        };
        // Finite and not negative; beyond Duration only with a delay that
        // `validate` refuses, and then it arrives never (see `schedule`).
        Duration::try_from_secs_f64((base + offset).max(0.0)).unwrap_or(Duration::MAX)
    }

    /// One copy through the rate queue, corruption and delay.
    fn schedule(&mut self, now: Instant, len: usize) -> Option<Delivery> {
        let mut departs = now;
        if let Some(rate) = self.params.rate_bps {
            let wait = self.queue_delay(now);
            let full = match self.params.queue {
                QueueLimit::Time(limit) => wait > limit,
                // Checked: with a limit near u64::MAX a wrapped sum would
                // pass as room.
                QueueLimit::Bytes(limit) => bytes_in(wait, rate)
                    .checked_add(len as u64)
                    .is_none_or(|q| q > limit),
            };
            let leaves = serialization(len, rate)
                .and_then(|s| now.checked_add(wait)?.checked_add(s))
                .filter(|_| !full);
            let Some(leaves) = leaves else {
                self.counters.dropped_queue = self.counters.dropped_queue.saturating_add(1);
                return None;
            };
            departs = leaves;
            self.busy_until = Some(departs);
        }
        let corrupt_bit = if len > 0 && self.chance(self.params.corrupt) {
            // Saturating: only a length beyond 2^61 bytes would wrap, and
            // the bit then still falls inside the datagram.
            let bits = (len as u64).saturating_mul(8);
            Some((self.rng.next_u64() % bits) as usize)
        } else {
            None
        };
        let Some(mut at) = departs.checked_add(self.jittered_delay()) else {
            self.counters.dropped_queue = self.counters.dropped_queue.saturating_add(1);
            return None;
        };
        if corrupt_bit.is_some() {
            self.counters.corrupted = self.counters.corrupted.saturating_add(1);
        }
        match self.latest_arrival {
            Some(latest) if at < latest => {
                if self.params.reorder {
                    self.counters.reordered = self.counters.reordered.saturating_add(1);
                } else {
                    at = latest;
                }
            }
            _ => self.latest_arrival = Some(at),
        }
        self.counters.delivered = self.counters.delivered.saturating_add(1);
        Some(Delivery { at, corrupt_bit })
    }

    /// Decides what happens to a datagram of `len` bytes offered at `now`.
    pub fn offer(&mut self, now: Instant, len: usize) -> Fate {
        let c = &mut self.counters;
        c.offered = c.offered.saturating_add(1);
        if self.params.mtu.is_some_and(|m| len > m) {
            c.dropped_mtu = c.dropped_mtu.saturating_add(1);
            return Fate::Dropped(DropCause::Mtu);
        }
        if self.cut {
            c.dropped_cut = c.dropped_cut.saturating_add(1);
            return Fate::Dropped(DropCause::Cut);
        }
        if self.lost() {
            self.counters.dropped_loss = self.counters.dropped_loss.saturating_add(1);
            return Fate::Dropped(DropCause::Loss);
        }
        let duplicate = self.chance(self.params.duplicate);
        let Some(first) = self.schedule(now, len) else {
            return Fate::Dropped(DropCause::Queue);
        };
        let duplicate = if duplicate {
            self.counters.duplicated = self.counters.duplicated.saturating_add(1);
            self.schedule(now, len)
        } else {
            None
        };
        Fate::Delivered { first, duplicate }
    }
}

/// Bytes sent at `rate_bps` in `d` (the float → int cast saturates).
fn bytes_in(d: Duration, rate_bps: u64) -> u64 {
    (d.as_secs_f64() * rate_bps as f64 / 8.0) as u64
}

/// How long `len` bytes take at `rate_bps`; `None` at rate 0 (nothing
/// passes: `validate` refuses it, and the division would be infinite or
/// NaN) or when it is longer than a `Duration` holds.
fn serialization(len: usize, rate_bps: u64) -> Option<Duration> {
    if rate_bps == 0 {
        return None;
    }
    Duration::try_from_secs_f64(len as f64 * 8.0 / rate_bps as f64).ok()
}

#[cfg(test)]
mod tests;
