//! What a path can carry and how long it takes, measured rather than
//! configured.
//!
//! Towards the peer ([`Outbound`]): every echo of one of our probes brings
//! the peer's count of the data bytes and packets it received on this path
//! and its clock when the probe arrived. Between two echoes that gives what
//! the line delivered (a delivery rate, as BBR measures it) and, against
//! the data packets we had sent before each probe, what it lost (a line is
//! first in, first out: what we sent before a probe has arrived or is lost
//! by the time the probe arrives). The probe's own one-way delay, read
//! against the smallest seen, is the line's queue.
//!
//! The two clocks differ by an unknown offset, so a one-way delay here is
//! that offset plus the delay. That is enough for what it is used for:
//! differences between the paths of one peer, and between samples of one
//! path. (Both clocks are monotonic and tick at the same rate to within
//! parts per million; drift moves every path alike.)
//!
//! The capacity estimate follows from both: while the line queues (its
//! delay is well above its minimum) it delivers all it can, so what it
//! delivered *is* its capacity; while it does not queue although the
//! scheduler has been giving it all the estimate allows, the line
//! delivered about its estimate, and the probe finds the line's queue
//! more than a few milliseconds shorter than the scheduler planned (it
//! drains faster than the estimate), the estimate is
//! too low and grows by a quarter per report (every `PROBE_INTERVAL`), so a
//! line that recovers is back in full use within a few hundred
//! milliseconds. Until a probe first finds the line queued (its start-up)
//! it doubles instead, from the initial guess.
//!
//! A line that carries little is never full, so its estimate would stay
//! what it was when it last was (or the initial guess). Every
//! [`TRAIN_INTERVAL`] such a line gets a probe train: a probe, filler sent
//! back to back, a second probe. The peer counts the filler as delivered,
//! so the second probe's echo says how long the line took to deliver the
//! train after the first probe: its capacity, which the estimate takes.
//!
//! From the peer ([`Inbound`]): the one-way delay of the peer's probes to
//! us, which the reorder window's hold follows.

use std::time::{Duration, Instant};

/// Where a path's capacity estimate starts, in bytes per second (10 Mbit/s:
/// low enough that a slow line is not flooded before its first report,
/// and the growth per report reaches 1 Gbit/s within a second).
pub const INITIAL_RATE: f64 = 1_250_000.0;
/// The estimate never falls below this (64 kbit/s): a line that delivered
/// nothing in one interval is not written off for ever.
pub const MIN_RATE: f64 = 8_000.0;
/// Nor rises above this (1 Tbit/s).
pub const MAX_RATE: f64 = 125_000_000_000.0;
/// Growth per report while the scheduler is held back by the estimate and
/// the line shows no queue, shorter than planned: the next interval offers
/// this much more than the line was seen to deliver.
const GROWTH: f64 = 1.25;
/// The same until the line was first seen to queue (or a train measured
/// it), as BBR's start-up doubles: from the initial guess, a 100 Mbit/s
/// line is reached in four reports instead of ten, and the inner TCP's
/// slow start is not held at a tenth of the bond for half a second.
const STARTUP_GROWTH: f64 = 2.0;
/// Growth also needs the line to have delivered at least this share of
/// its estimate over the last two intervals (see `Outbound::on_report`).
const FED_SHARE: f64 = 0.9;
/// The delivery rate the estimate stands on is the largest of this long
/// (a line that carried less for a moment has not become slower).
const DELIVERY_WINDOW: Duration = Duration::from_millis(500);
/// A line that sends data but has had no report for this long is losing
/// its probes too: full or dying. Its estimate halves per probe interval
/// until a report comes.
const SILENCE: Duration = Duration::from_millis(250);
/// A queue (one-way delay above the minimum) above this when a probe
/// passed, and when the one before it passed, means the line was busy all
/// the time between: what it delivered then is what it can carry. (One
/// probe behind a burst finds a queue too; two in a row do not.)
const QUEUE_FULL: Duration = Duration::from_millis(5);
/// A drop-tail queue drops only when it is full: an interval counts
/// towards the line's own loss while the queue at both of its ends stayed
/// below this share of the largest seen (and at least `QUEUE_FULL`). A
/// line the scheduler keeps busy has a standing queue of a few
/// milliseconds, far from full, and what it loses then is its own.
const NEAR_FULL_SHARE: f64 = 0.5;
/// ...and never rises above this (one absurd sample, from a clock that
/// jumped, must not make every drop the line's own).
const NEAR_FULL_MAX: Duration = Duration::from_millis(250);
/// Window of the largest queue seen, taken as what the line holds.
const QUEUE_MAX_WINDOW: Duration = Duration::from_secs(30);
/// Window of the minimum one-way delay taken as the line's base delay: a
/// queue lasting longer than this is taken for a longer line (and a line
/// whose delay rose counts as full until then: it is, for a scheduler
/// that wants packets to arrive early).
const BASE_WINDOW: Duration = Duration::from_secs(10);
/// Window of the minimum one-way delay the scheduler plans with: a delay
/// that rises (a new route, a radio handover) is followed within it.
const PROPAGATION_WINDOW: Duration = Duration::from_secs(1);
/// Reports closer together than this (in the peer's clock) are merged
/// with the next: too short an interval makes a noisy rate.
const MIN_INTERVAL_US: u64 = 10_000;
/// Reports further apart than this start over: the interval says nothing
/// about the line now.
const MAX_INTERVAL_US: u64 = 2_000_000;
/// Per report, what the loss estimate keeps of its past (about a second's
/// memory at 20 reports a second).
const LOSS_MEMORY: f64 = 0.95;
/// Data packets (decayed) the loss estimate needs before it says anything:
/// one lost packet among the first fifty is no 2 % loss.
const MIN_LOSS_SAMPLE: f64 = 300.0;
/// Per echo, what the probe loss estimate keeps of its past (about a
/// hundred probes, five seconds).
const PROBE_LOSS_MEMORY: f64 = 0.99;
/// Probes (decayed) the probe loss estimate needs before it says anything.
const MIN_PROBE_SAMPLE: f64 = 20.0;
/// An echo further behind the newest than this starts the count over (a
/// peer that started over) rather than being taken for a reordered one.
const MAX_PROBE_GAP: u32 = 64;
/// Probes whose send-time counts are kept until their echo comes back (a
/// round trip of up to 16 probe intervals, 0.8 s).
const SNAPSHOTS: usize = 16;
/// How often a line that carries little is measured with a probe train.
pub const TRAIN_INTERVAL: Duration = Duration::from_secs(2);
/// A line carries little while it is sent less than this share of its
/// estimate.
const LITTLE: f64 = 0.1;
/// A train's filler lasts about this long at the line's estimate...
const TRAIN_SPAN: Duration = Duration::from_millis(20);
/// ...within these bounds, in bytes (about 14 to 58 packets of filler).
const TRAIN_BYTES: (usize, usize) = (16 * 1200, 48 * 1200);
/// A train drained faster than this (in the peer's clock) says nothing: the
/// clocks' resolution and the I/O batches dominate.
const TRAIN_MIN_US: u64 = 1_000;

/// Smallest (or largest) value over a sliding window of about `window`
/// (between half and the whole of it): two buckets of half a window each.
#[derive(Debug, Clone, Copy)]
pub struct Windowed<T> {
    window: Duration,
    largest: bool,
    current: Option<T>,
    previous: Option<T>,
    bucket_start: Option<Instant>,
}

impl<T: Copy + PartialOrd> Windowed<T> {
    pub fn min(window: Duration) -> Self {
        Self::new(window, false)
    }

    pub fn max(window: Duration) -> Self {
        Self::new(window, true)
    }

    fn new(window: Duration, largest: bool) -> Self {
        Windowed {
            window,
            largest,
            current: None,
            previous: None,
            bucket_start: None,
        }
    }

    fn pick(&self, a: T, b: T) -> T {
        if (b > a) == self.largest {
            b
        } else {
            a
        }
    }

    /// Moves the window to `now`: what is older than it is forgotten.
    fn advance(&mut self, now: Instant) {
        let half = self.window / 2;
        match self.bucket_start {
            Some(start) if now.saturating_duration_since(start) < half => {}
            Some(start) => {
                // Two halves or more without a sample: nothing old is left.
                self.previous = if now.saturating_duration_since(start) < self.window {
                    self.current
                } else {
                    None
                };
                self.current = None;
                self.bucket_start = Some(now);
            }
            None => self.bucket_start = Some(now),
        }
    }

    pub fn update(&mut self, now: Instant, value: T) {
        self.advance(now);
        self.current = Some(self.current.map_or(value, |c| self.pick(c, value)));
    }

    /// The extreme as of the latest update.
    pub fn get(&self) -> Option<T> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(self.pick(a, b)),
            (a, b) => a.or(b),
        }
    }

    /// Starts over from `value` alone.
    pub fn reset(&mut self, now: Instant, value: T) {
        self.current = Some(value);
        self.previous = None;
        self.bucket_start = Some(now);
    }
}

/// What the peer reports in an echo about the path the probe came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The peer's clock when the probe arrived, microseconds.
    pub received_us: u64,
    /// Data the peer has received on this path so far (modulo 2^64).
    pub data_bytes: u64,
    pub data_packets: u64,
}

/// A smoothed one-way delay (microseconds, with the clocks' offset) and its
/// mean deviation, as RFC 6298 smooths a round trip.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmoothedDelay {
    pub value: Option<f64>,
    pub deviation: f64,
}

impl SmoothedDelay {
    pub fn sample(&mut self, us: i64) {
        let us = us as f64;
        match self.value {
            None => {
                self.value = Some(us);
                self.deviation = 0.0;
            }
            Some(v) => {
                self.deviation = 0.75 * self.deviation + 0.25 * (v - us).abs();
                self.value = Some(0.875 * v + 0.125 * us);
            }
        }
    }
}

/// The line towards the peer, as this side's data sees it.
#[derive(Debug, Clone)]
pub struct Outbound {
    /// Capacity estimate, bytes per second.
    rate: f64,
    /// Whether any report has shaped `rate` yet.
    measured: bool,
    /// No probe has found the line queued yet, nor a train measured it:
    /// the estimate grows by [`STARTUP_GROWTH`].
    startup: bool,
    /// What the line delivered in the latest interval, bytes per second.
    delivered_rate: f64,
    /// The largest delivery rate lately.
    delivered_max: Windowed<f64>,
    /// When the latest report came.
    reported_at: Option<Instant>,
    /// The queue the latest probe found.
    last_queue: Duration,
    /// The report the next interval is measured from, and the one before
    /// it: a full line's rate is read over two intervals, since the peer
    /// may count a probe before data that came just ahead of it in the
    /// same batch.
    last: Option<(Delivery, Option<u64>)>,
    before_last: Option<Delivery>,
    /// When each recent probe left: (probe sequence, data packets sent on
    /// this path so far, the scheduler's backlog for the line).
    snapshots: [(u32, u64, Duration); SNAPSHOTS],
    delay: SmoothedDelay,
    base: Windowed<i64>,
    propagation: Windowed<i64>,
    /// The largest queue probes found, microseconds.
    queue_max: Windowed<i64>,
    /// The scheduler's clock for this line: when it will have sent all the
    /// data given to it, at the estimated rate.
    pub(super) busy_until: Option<Instant>,
    /// The scheduler found this line busy at its estimated rate during the
    /// current interval (so a quiet line means the estimate is low).
    pub(super) limited: bool,
    /// The longest the scheduler's clock for this line was ahead when it
    /// was given a packet, over the last 0.3-0.6 s, and since when it has
    /// been given packets without a pause (see `schedule::early_spill`).
    pub(super) backlog_peak: Windowed<Duration>,
    pub(super) given_since: Option<Instant>,
    /// Data loss, decayed: packets lost and sent.
    lost: f64,
    sent: f64,
    /// Probe loss while the line was not near full, decayed: probes lost and
    /// sent, and the newest probe echoed.
    probes_lost: f64,
    probes_sent: f64,
    last_echo: Option<u32>,
    /// What this side sends on the path, bytes per second (smoothed), and
    /// where the last tick measured it from.
    send_rate: f64,
    send_mark: Option<(Instant, u64)>,
    /// The probe train in flight: its first and last probe, and the peer's
    /// report for the first once it came.
    train: Option<(u32, u32, Option<Delivery>)>,
    train_at: Option<Instant>,
    /// The latest train's first and last probe, kept after its reports.
    last_train: Option<(u32, u32)>,
}

impl Default for Outbound {
    fn default() -> Self {
        Outbound {
            rate: INITIAL_RATE,
            measured: false,
            startup: true,
            delivered_rate: 0.0,
            delivered_max: Windowed::max(DELIVERY_WINDOW),
            reported_at: None,
            last_queue: Duration::ZERO,
            last: None,
            before_last: None,
            snapshots: [(u32::MAX, 0, Duration::ZERO); SNAPSHOTS],
            delay: SmoothedDelay::default(),
            base: Windowed::min(BASE_WINDOW),
            propagation: Windowed::min(PROPAGATION_WINDOW),
            queue_max: Windowed::max(QUEUE_MAX_WINDOW),
            busy_until: None,
            limited: false,
            backlog_peak: Windowed::max(2 * super::schedule::CALM_FOR),
            given_since: None,
            lost: 0.0,
            sent: 0.0,
            probes_lost: 0.0,
            probes_sent: 0.0,
            last_echo: None,
            send_rate: 0.0,
            send_mark: None,
            train: None,
            train_at: None,
            last_train: None,
        }
    }
}

impl Outbound {
    /// Capacity estimate in bytes per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Whether the estimate comes from reports (false: the initial guess,
    /// e.g. for a peer whose braid reports no deliveries).
    pub fn is_measured(&self) -> bool {
        self.measured
    }

    pub fn delivered_rate(&self) -> f64 {
        self.delivered_rate
    }

    /// What this side currently sends on the path, bytes per second.
    pub fn send_rate(&self) -> f64 {
        self.send_rate
    }

    /// Data loss towards the peer, 0..=1 (0 until enough data was sent to
    /// tell).
    pub fn loss(&self) -> f64 {
        if self.sent < MIN_LOSS_SAMPLE {
            0.0
        } else {
            (self.lost / self.sent).clamp(0.0, 1.0)
        }
    }

    /// Data loss, once enough data was sent to tell.
    pub fn loss_if_known(&self) -> Option<f64> {
        (self.sent >= MIN_LOSS_SAMPLE).then(|| self.loss())
    }

    /// Loss of our probes (or their echoes) while the line was not near full,
    /// once enough were sent to tell: what a line that carries too little
    /// data to measure loses of its own.
    pub fn quiet_probe_loss_if_known(&self) -> Option<f64> {
        (self.probes_sent >= MIN_PROBE_SAMPLE)
            .then(|| (self.probes_lost / self.probes_sent).clamp(0.0, 1.0))
    }

    /// The line's queue now: smoothed one-way delay above its base.
    pub fn queueing_delay(&self) -> Option<Duration> {
        let (v, b) = (self.delay.value?, self.base.get()?);
        Some(Duration::from_micros((v - b as f64).max(0.0) as u64))
    }

    /// One-way delay the scheduler plans with (with the clocks' offset).
    pub fn propagation_us(&self) -> Option<i64> {
        self.propagation.get()
    }

    /// Whether the peer's reports on this line have stopped for more than
    /// `after` (a full queue drops the probes with the rest, a dying line
    /// carries nothing). False until a report came.
    pub fn is_quiet(&self, now: Instant, after: Duration) -> bool {
        self.reported_at
            .is_some_and(|t| now.saturating_duration_since(t) > after)
    }

    /// Sets the estimate as reports would have (tests of the scheduler).
    #[cfg(test)]
    pub(crate) fn set_estimate(&mut self, now: Instant, rate: f64, propagation_us: i64) {
        self.rate = rate;
        self.measured = true;
        self.startup = false;
        self.set_delay(now, propagation_us);
    }

    /// Sets the delay as a first report would have, the estimate still
    /// the initial guess (tests of the scheduler).
    #[cfg(test)]
    pub(crate) fn set_delay(&mut self, now: Instant, propagation_us: i64) {
        self.propagation.update(now, propagation_us);
        self.base.update(now, propagation_us);
    }

    /// Whether the line should get a probe train at `now`: it carries
    /// little (`peer_busy`: while the peer's data goes on other lines) and
    /// had none for [`TRAIN_INTERVAL`].
    pub fn wants_train(&self, now: Instant, peer_busy: bool) -> bool {
        peer_busy
            && self.send_rate < LITTLE * self.rate
            && self.train.is_none()
            && self
                .train_at
                .is_none_or(|t| now.saturating_duration_since(t) >= TRAIN_INTERVAL)
    }

    /// How much filler a train carries: about [`TRAIN_SPAN`] at the
    /// estimate.
    pub fn train_bytes(&self) -> usize {
        let span = (self.rate * TRAIN_SPAN.as_secs_f64()) as usize;
        span.clamp(TRAIN_BYTES.0, TRAIN_BYTES.1)
    }

    /// A train leaves at `now` between probes `first` and `last`.
    pub fn on_train_sent(&mut self, now: Instant, first: u32, last: u32) {
        self.train = Some((first, last, None));
        self.train_at = Some(now);
        self.last_train = Some((first, last));
    }

    /// The peer's report for a probe of the train in flight: the first
    /// one's is kept; with the last one's, what was delivered between the
    /// two over the time between them is the line's capacity.
    fn train_report(&mut self, now: Instant, seq: u32, report: Delivery) {
        let Some((first, last, at_first)) = self.train else {
            return;
        };
        if seq == first {
            self.train = Some((first, last, Some(report)));
            return;
        }
        if seq != last {
            // A later probe's echo with the train's still missing: lost.
            if seq.wrapping_sub(last) as i32 > 0 {
                self.train = None;
            }
            return;
        }
        self.train = None;
        let Some(start) = at_first else {
            return;
        };
        let dt = report.received_us.wrapping_sub(start.received_us);
        let bytes = report.data_bytes.wrapping_sub(start.data_bytes);
        if !(TRAIN_MIN_US..=MAX_INTERVAL_US).contains(&dt) || bytes == 0 || bytes > 1 << 40 {
            return;
        }
        let rate = (bytes as f64 / (dt as f64 / 1e6)).clamp(MIN_RATE, MAX_RATE);
        self.rate = rate;
        self.measured = true;
        self.startup = false;
        self.delivered_max.reset(now, rate);
    }

    /// A probe leaves at `now` with sequence `seq` after `data_packets`
    /// data packets.
    pub fn on_probe_sent(&mut self, now: Instant, seq: u32, data_packets: u64) {
        let backlog = self.backlog(now);
        self.snapshots[seq as usize % SNAPSHOTS] = (seq, data_packets, backlog);
    }

    /// No probe has found the line queued yet: the estimate is a guess.
    pub(super) fn in_startup(&self) -> bool {
        self.startup
    }

    /// How long until the line has sent what the scheduler gave it.
    pub fn backlog(&self, now: Instant) -> Duration {
        self.busy_until
            .map_or(Duration::ZERO, |b| b.saturating_duration_since(now))
    }

    /// The backlog the scheduler compares lines by. In start-up the
    /// estimate is a lower bound (the line was never seen to queue), so
    /// the planned backlog overstates the real queue: it counts as no more
    /// than [`QUEUE_FULL`] until a probe finds the line queued. Otherwise a
    /// quick line still at its initial guess sends the first burst of a
    /// stream to a slower one, and the inner TCP's slow start sees its
    /// round trip jump by the lines' delay difference and ends (cubic's
    /// HyStart) at a tenth of the bond, to grow by 5 % a round trip after.
    pub fn planning_backlog(&self, now: Instant) -> Duration {
        let backlog = self.backlog(now);
        if self.startup {
            backlog.min(QUEUE_FULL)
        } else {
            backlog
        }
    }

    /// Every probe interval: how much this side sends on the path, and
    /// whether the reports have gone quiet while it does.
    pub fn on_tick(&mut self, now: Instant, tx_bytes: u64) {
        let mut sending = false;
        if let Some((t, b)) = self.send_mark {
            let dt = now.saturating_duration_since(t).as_secs_f64();
            if dt > 0.0 {
                let r = tx_bytes.saturating_sub(b) as f64 / dt;
                self.send_rate = 0.75 * self.send_rate + 0.25 * r;
                sending = r > 0.0;
            }
        }
        self.send_mark = Some((now, tx_bytes));
        let quiet = self
            .reported_at
            .is_some_and(|t| now.saturating_duration_since(t) > SILENCE);
        if sending && quiet {
            self.rate = (self.rate / 2.0).max(MIN_RATE);
        }
    }

    /// The echo of probe `seq` (sent at `sent_us` in our clock) with the
    /// peer's `report`, arriving at `now`.
    pub fn on_report(&mut self, now: Instant, seq: u32, sent_us: u64, report: Delivery) {
        // Offset plus delay: may be negative, and the difference of two
        // u64 clocks is taken as the signed distance between them.
        let owd = report.received_us.wrapping_sub(sent_us) as i64;
        self.reported_at = Some(now);
        self.train_report(now, seq, report);
        self.delay.sample(owd);
        self.base.update(now, owd);
        self.propagation.update(now, owd);
        let snapshot = match self.snapshots[seq as usize % SNAPSHOTS] {
            (s, n, backlog) if s == seq => Some((n, backlog)),
            _ => None,
        };
        let queue_us = self.base.get().map_or(0, |base| owd.saturating_sub(base));
        if let Some((_, planned)) = snapshot {
            self.correct_backlog(now, planned, queue_us);
        }
        let queue = Duration::from_micros(queue_us.max(0) as u64);
        // The line drained what the scheduler planned for it faster than
        // the estimate says: the only sign that the estimate is low. (A
        // line filled in bursts by a paced sender shows a short queue at
        // most probes too, with the plan where the line is.)
        let drained_faster =
            snapshot.is_some_and(|(_, planned)| planned.saturating_sub(queue) > QUEUE_FULL);
        let queued = queue > QUEUE_FULL;
        self.startup &= !queued;
        let full = queued && self.last_queue > QUEUE_FULL;
        // A queue near full at either end of the interval: the line may
        // have filled and dropped in between (a drop-tail queue drops at
        // its peak, which a probe every 50 ms rarely sees).
        self.queue_max.update(now, queue_us);
        let largest = self.queue_max.get().unwrap_or(0).max(0) as u64;
        let near_full = Duration::from_micros((largest as f64 * NEAR_FULL_SHARE) as u64)
            .clamp(QUEUE_FULL, NEAR_FULL_MAX);
        let congested = queue > near_full || self.last_queue > near_full;
        self.last_queue = queue;
        let congested = !self.count_probe_losses(seq, congested) || congested;
        let sent_before = snapshot.map(|(n, _)| n);
        let Some((last, last_sent)) = self.last else {
            self.last = Some((report, sent_before));
            return;
        };
        let dt = report.received_us.wrapping_sub(last.received_us);
        if (dt as i64) < 0 {
            return; // from before the last one: a reordered echo
        }
        if dt > MAX_INTERVAL_US {
            self.last = Some((report, sent_before));
            return;
        }
        if dt < MIN_INTERVAL_US {
            return; // merged into the next interval
        }
        self.last = Some((report, sent_before));
        let before_last = self.before_last.replace(last);
        let bytes = report.data_bytes.wrapping_sub(last.data_bytes);
        let packets = report.data_packets.wrapping_sub(last.data_packets);
        if bytes > 1 << 50 || packets > 1 << 40 {
            return; // the peer's counters went backwards: a restart
        }
        let delivered = bytes as f64 / (dt as f64 / 1e6);
        self.delivered_rate = delivered;
        // Over two intervals where there are two (see `before_last`).
        let delivered_2 = before_last
            .map(|b| {
                (
                    report.received_us.wrapping_sub(b.received_us),
                    report.data_bytes.wrapping_sub(b.data_bytes),
                )
            })
            .filter(|&(dt2, bytes2)| dt2 > dt && dt2 <= MAX_INTERVAL_US && bytes2 >= bytes)
            .map_or(delivered, |(dt2, bytes2)| {
                bytes2 as f64 / (dt2 as f64 / 1e6)
            });
        // Loss is the line's own only while it is not near full: a full line
        // drops what it cannot carry, and that says nothing about its
        // quality. Taken for a loss of its own, a congestion drop would be
        // re-sent on the other line and the window would wait a round trip
        // for it, behind that line's queue.
        if let (Some(now_sent), Some(then_sent), false) = (sent_before, last_sent, congested) {
            // Signed: a packet counted as sent before a probe may leave
            // just after it (data and probes leave in different batches),
            // and then arrives in the next interval, more than was sent.
            let sent = now_sent.saturating_sub(then_sent) as f64;
            let lost = sent - packets as f64;
            self.lost = (self.lost * LOSS_MEMORY + lost).max(0.0);
            self.sent = self.sent * LOSS_MEMORY + sent;
        }
        self.rate = if full {
            // A full line delivers what it can.
            self.delivered_max.reset(now, delivered_2);
            delivered_2
        } else {
            self.delivered_max.update(now, delivered);
            let seen = self.delivered_max.get().unwrap_or(delivered);
            let growth = if self.startup { STARTUP_GROWTH } else { GROWTH };
            // Only a line that delivered about its estimate was held back
            // by it. One the scheduler left idle for part of the interval
            // (the quicker line's queue fell below the delay difference)
            // drains faster than planned too, and that says nothing.
            let fed = delivered_2 >= FED_SHARE * self.rate;
            if self.limited && !queued && drained_faster && fed {
                seen.max(self.rate / growth) * growth
            } else {
                self.rate.max(seen)
            }
        }
        .clamp(MIN_RATE, MAX_RATE);
        self.measured = true;
        self.limited = false;
    }
}

impl Outbound {
    /// The echo of probe `seq` came: the probes sent since the last echo
    /// that did not come back are lost, and counted as the line's own
    /// unless it was near full at either end (`congested`), by the rule the data
    /// loss follows. A drop-tail queue drops probes too: taken for the
    /// line's own loss, a clean line that carries a burst would read as
    /// lossy, and its congestion drops would be re-sent.
    ///
    /// Returns false when two probes or more in a row were lost since the
    /// last echo: the queue may have filled and drained again between
    /// the two that came back (a line that loses 2 % of its own loses two
    /// in a row once in 2500), so neither their loss nor the data's of
    /// that interval is counted.
    fn count_probe_losses(&mut self, seq: u32, congested: bool) -> bool {
        let Some(last) = self.last_echo else {
            self.last_echo = Some(seq);
            return true;
        };
        let ahead = seq.wrapping_sub(last);
        let behind = last.wrapping_sub(seq);
        if behind <= MAX_PROBE_GAP {
            return true; // a duplicate or reordered echo
        }
        self.last_echo = Some(seq);
        // Two or more lost, or far ahead (a path that was down): the
        // count goes on from here.
        if ahead > 2 {
            return false;
        }
        // A train's probe follows its filler, sent back to back at the
        // line's estimate: a short queue may drop it, and that says
        // nothing about the line.
        let missing = last.wrapping_add(1);
        if ahead == 2
            && self
                .last_train
                .is_some_and(|(first, end)| missing.wrapping_sub(first) <= end.wrapping_sub(first))
        {
            return false;
        }
        if !congested {
            let lost = f64::from(ahead - 1);
            self.probes_lost = self.probes_lost * PROBE_LOSS_MEMORY + lost;
            self.probes_sent = self.probes_sent * PROBE_LOSS_MEMORY + lost + 1.0;
        }
        true
    }

    /// The scheduler planned a queue of `planned` on the line when a probe
    /// left, and the probe found `found_us` (microseconds): the line
    /// dropped what did not fit, or queues traffic of others, or its delay
    /// changed. The clock moves by the difference, so plans start from
    /// what the line does rather than drift away from it.
    fn correct_backlog(&mut self, now: Instant, planned: Duration, found_us: i64) {
        let found = Duration::from_micros(found_us.max(0) as u64);
        let Some(busy) = self.busy_until else {
            return;
        };
        self.busy_until = if planned > found {
            busy.checked_sub(planned - found).map(|b| b.max(now))
        } else {
            let limit = now.checked_add(super::schedule::MAX_BACKLOG);
            let more = found - planned;
            let moved = busy.max(now).checked_add(more).unwrap_or(busy);
            Some(limit.map_or(moved, |l| moved.min(l.max(busy))))
        };
    }
}

/// The peer's probes to us on one path: their one-way delay.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inbound {
    pub delay: SmoothedDelay,
}

impl Inbound {
    /// A probe the peer sent at `sent_us` (its clock) arrived at `now_us`
    /// (ours).
    pub fn on_probe(&mut self, sent_us: u64, now_us: u64) {
        self.delay.sample(now_us.wrapping_sub(sent_us) as i64);
    }
}
