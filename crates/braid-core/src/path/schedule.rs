//! Which paths carry a packet.
//!
//! Aggregate mode sends each packet where it arrives first, the idea of the
//! ECF and BLEST schedulers of Multipath TCP. For each usable line the
//! expected arrival is: the time until the line has sent what it was
//! already given (a clock per line, advanced by each packet's transmission
//! time at the line's estimated capacity), plus this packet's own
//! transmission time, plus the line's one-way delay above the quickest
//! line's. So:
//!
//! * while the quickest line keeps up, every packet takes it, and a bond
//!   is never slower than its best line for a stream that line can carry;
//! * a slower line gets a packet once the quick one's queue is as long as
//!   the delay difference, and then as many as its capacity takes: packets
//!   arrive about in order, and each line gets traffic at its estimated
//!   rate, not more (a slow line's queue stays short);
//! * each probe's echo says how long the line's queue really was when the
//!   probe passed; the clock is corrected by the difference from what was
//!   planned (a drop-tail line drops what does not fit, others share it,
//!   its delay changes), so a line's clock stays within its real queue,
//!   and a line whose delay is more than that queue above the best one's
//!   carries nothing: a 2 Mbit/s line with 300 ms does not slow a
//!   100 Mbit/s line with 10 ms and a 100 ms queue;
//! * until a probe first finds it queued, the quickest line's estimate is
//!   a guess that only grows, and its clock counts as at most a few
//!   milliseconds: the first burst of a stream stays on it instead of
//!   going to a slower line because of the guess;
//! * once the quickest line has been busy and calm for 300 ms (its queue
//!   below two thirds of the delay difference), what would queue on it
//!   beyond a couple of milliseconds goes to a slower line that is idle
//!   (see [`early_spill`]): a paced sender (bbr) never queues the quick
//!   line as long as the delay difference, and would otherwise never see
//!   what the slower line adds;
//! * when every line's clock is more than [`MAX_BACKLOG`] ahead, more is
//!   offered than all carry: the clocks move back alike, and the split
//!   stays by capacity.
//!
//! Until an echo has measured some line, packets take the first usable
//! one; a line not yet measured while another is carries nothing.
//!
//! A line that loses data (more than [`LOSSY`]) carries nothing while a
//! line that does not is usable: one lost packet in a hundred is enough to
//! keep a cubic sender's window small. While the peer repairs losses
//! (`repairs`) the bar is [`LOSSY_REPAIRED`]: a lost packet then costs a
//! re-send on the best line, not the inner TCP's window. A line left out
//! is tried again once its loss estimate has too little data behind it
//! (a few seconds).

use super::{Mode, Path, MAX_PATHS};
use std::time::{Duration, Instant};

/// The most queueing the scheduler plans for on one line, and the largest
/// delay above the quickest line's that a line may have to be used at all
/// (the receiver's reorder window waits that long for a line that is idle).
pub const MAX_BACKLOG: Duration = Duration::from_millis(150);
/// A line whose clock was this far ahead when it was given a packet was
/// busy at its estimated rate: if it still shows no queue, the estimate is
/// low (see `Outbound::on_report`).
const LIMITED_BACKLOG: Duration = Duration::from_millis(5);
/// Data loss above which a line is left out while a cleaner one is up.
pub const LOSSY: f64 = 0.01;
/// The same while the peer repairs losses (see `crate::repair`): a line
/// that loses a few percent costs a re-send on another line per loss, not
/// a halved window.
pub const LOSSY_REPAIRED: f64 = 0.10;

/// Which paths carry the next packet (`packet_len` bytes on the wire) at
/// `now`: indices into the peer's paths. Returns how many were written to
/// `out`.
pub fn select(
    mode: Mode,
    paths: &mut [Path],
    now: Instant,
    packet_len: usize,
    repairs: bool,
    out: &mut [usize; MAX_PATHS],
) -> usize {
    let any_up = paths.iter().any(Path::is_up);
    // Before probing has a verdict, or when every line looks dead, every
    // path is a candidate: better to try than to go silent.
    let usable = |p: &Path| !any_up || p.is_up();
    match mode {
        Mode::Redundant => {
            let mut n = 0;
            for (i, p) in paths.iter().enumerate() {
                if usable(p) {
                    out[n] = i;
                    n += 1;
                }
            }
            n
        }
        Mode::Failover => match paths.iter().position(usable) {
            Some(i) => {
                out[0] = i;
                1
            }
            None => 0,
        },
        Mode::Aggregate => match earliest_arrival(
            paths,
            now,
            packet_len,
            if repairs { LOSSY_REPAIRED } else { LOSSY },
            usable,
        ) {
            Some(i) => {
                out[0] = i;
                1
            }
            None => 0,
        },
    }
}

/// The usable path where a packet of `len` bytes arrives first; its clock
/// is advanced by the packet.
fn earliest_arrival(
    paths: &mut [Path],
    now: Instant,
    len: usize,
    lossy: f64,
    usable: impl Fn(&Path) -> bool,
) -> Option<usize> {
    let candidate = candidates(paths, lossy, usable);
    let i = match plan(paths, now, len, &candidate) {
        Plan::Arrives(i) => early_spill(paths, now, i, &candidate).unwrap_or(i),
        Plan::Unmeasured(i) => return i,
    };
    let waiting = paths[i].outbound.backlog(now);
    let o = &mut paths[i].outbound;
    if waiting > LIMITED_BACKLOG {
        o.limited = true;
    }
    // A line idle for CALM_FOR starts its calm over.
    let idle = o
        .busy_until
        .is_none_or(|b| now.saturating_duration_since(b) >= CALM_FOR);
    if idle {
        o.given_since = Some(now);
    }
    o.backlog_peak.update(now, waiting);
    let tx = transmission(len, o.rate());
    o.busy_until = now.checked_add(waiting.saturating_add(tx));
    // Every candidate more than MAX_BACKLOG behind: more is offered than
    // all of them carry. All clocks move back alike, which keeps the split
    // by capacity and the plan within reach of the lines' queues.
    let least = paths
        .iter()
        .filter(|p| candidate(p))
        .map(|p| p.outbound.backlog(now))
        .min()
        .unwrap_or_default();
    if let Some(excess) = least.checked_sub(MAX_BACKLOG).filter(|e| !e.is_zero()) {
        for p in paths.iter_mut().filter(|p| candidate(p)) {
            p.outbound.busy_until = p.outbound.busy_until.and_then(|b| b.checked_sub(excess));
        }
    }
    Some(i)
}

/// How long the quickest line must have been given packets, its queue
/// calm all that time, before what queues on it may spill early.
pub(super) const CALM_FOR: Duration = Duration::from_millis(300);
/// The quickest line is calm while its queue stays below this share of a
/// slower line's delay above it.
const CALM_SHARE: f64 = 0.67;
/// ...and busy while this side sends it at least this share of its
/// estimated rate (a burst after a quiet spell is not a paced sender).
const BUSY_SHARE: f64 = 0.75;
/// While calm, what would queue on the quickest line beyond this...
const SPILL_QUEUE: Duration = Duration::from_millis(2);
/// ...goes to a slower line whose own clock is within this: at no more
/// than that line's estimated rate.
const SPILL_ROOM: Duration = Duration::from_millis(1);

/// A slower line that takes this packet instead of `planned`, the quickest
/// line, while that one is calm.
///
/// A sender paced at the rate it has seen delivered (bbr) keeps at most
/// about one of its smallest round trips queued on the quickest line: its
/// window is twice what it measured. Where that is shorter than a slower
/// line's delay difference, the earliest arrival never picks the slower
/// line, and the sender never sees more than the quickest line delivers
/// (a 100 + 25 Mbit/s bond carried 93). So once the quickest line's queue
/// has stayed below [`CALM_SHARE`] of the delay difference for
/// [`CALM_FOR`], what would queue on it beyond [`SPILL_QUEUE`] goes to the
/// slower line while that one's clock is idle: the sender's probes reach
/// it, and it paces at what the bond delivers. A sender whose window fills
/// the quickest line past that share (cubic) keeps the earliest arrival's
/// split: for it, each packet on the slower line makes the packets after it
/// wait at the peer, which pays only once the quickest line's queue is as
/// long as the delay difference.
fn early_spill(
    paths: &[Path],
    now: Instant,
    planned: usize,
    candidate: &impl Fn(&Path) -> bool,
) -> Option<usize> {
    let quick = &paths[planned].outbound;
    let calm_candidate = !quick.in_startup()
        && quick.backlog(now) > SPILL_QUEUE
        && quick.send_rate() >= BUSY_SHARE * quick.rate()
        && quick
            .given_since
            .is_some_and(|t| now.saturating_duration_since(t) >= CALM_FOR);
    if !calm_candidate {
        return None;
    }
    let peak = quick.backlog_peak.get()?;
    let quickest = quick.propagation_us()?;
    paths.iter().enumerate().position(|(j, p)| {
        let o = &p.outbound;
        j != planned
            && candidate(p)
            && o.backlog(now) <= SPILL_ROOM
            && o.propagation_us().is_some_and(|d| {
                let extra = delay_above(d, quickest);
                d >= quickest
                    && extra <= MAX_BACKLOG
                    && peak.as_secs_f64() < CALM_SHARE * extra.as_secs_f64()
            })
    })
}

/// Which paths aggregate mode may use: usable ones, and of those only the
/// ones losing less than `lossy` while any does.
fn candidates(
    paths: &[Path],
    lossy: f64,
    usable: impl Fn(&Path) -> bool,
) -> impl Fn(&Path) -> bool {
    let clean = paths.iter().any(|p| usable(p) && p.outbound.loss() < lossy);
    move |p: &Path| usable(p) && (!clean || p.outbound.loss() < lossy)
}

enum Plan {
    /// The packet arrives first on this path.
    Arrives(usize),
    /// No line is measured yet: the first candidate, if any, as failover
    /// would, rather than a guess at the split that may put the first
    /// packets on a line ten times slower.
    Unmeasured(Option<usize>),
}

/// Where a packet of `len` bytes sent at `now` arrives first, without
/// taking its turn.
fn plan(paths: &[Path], now: Instant, len: usize, candidate: &impl Fn(&Path) -> bool) -> Plan {
    let quickest = paths
        .iter()
        .filter(|p| candidate(p))
        .filter_map(|p| p.outbound.propagation_us())
        .min();
    let Some(quickest) = quickest else {
        return Plan::Unmeasured(paths.iter().position(candidate));
    };
    let mut best: Option<(Duration, usize)> = None;
    for (i, p) in paths.iter().enumerate() {
        if !candidate(p) {
            continue;
        }
        // Not measured yet while another line is: it may be far slower
        // (its first echo takes a round trip of its own).
        let Some(d) = p.outbound.propagation_us() else {
            continue;
        };
        let extra_delay = delay_above(d, quickest);
        if extra_delay > MAX_BACKLOG {
            // The peer's reorder window does not wait for such a line
            // (`Peer::live_path_mask`): what it carried would come late.
            continue;
        }
        // The quickest line's estimate, while still a guess, does not
        // send packets to a slower line (see `Outbound::planning_backlog`);
        // a slower line's guess is planned with as it is, since a burst
        // would overflow it before its first report.
        let backlog = if d == quickest {
            p.outbound.planning_backlog(now)
        } else {
            p.outbound.backlog(now)
        };
        let arrival = backlog
            .saturating_add(transmission(len, p.outbound.rate()))
            .saturating_add(extra_delay);
        if best.is_none_or(|(a, _)| arrival < a) {
            best = Some((arrival, i));
        }
    }
    match best {
        Some((_, i)) => Plan::Arrives(i),
        None => Plan::Unmeasured(None),
    }
}

/// The up path where a small message sent at `now` arrives first, by the
/// scheduler's clocks and the lines' measured delays (without taking its
/// turn: control messages are not planned for); `None` until a delay is
/// measured.
pub fn earliest_small(paths: &[Path], now: Instant) -> Option<usize> {
    match plan(paths, now, 0, &Path::is_up) {
        Plan::Arrives(i) => Some(i),
        Plan::Unmeasured(_) => None,
    }
}

/// How much a line's one-way delay `d_us` is above `base_us` (zero if
/// below).
fn delay_above(d_us: i64, base_us: i64) -> Duration {
    Duration::from_micros(d_us.saturating_sub(base_us).max(0) as u64)
}

/// Time to send `len` bytes at `rate` bytes per second.
fn transmission(len: usize, rate: f64) -> Duration {
    Duration::try_from_secs_f64(len as f64 / rate).unwrap_or(Duration::MAX)
}
