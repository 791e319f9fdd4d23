//! The receiver reorder window: delivers a peer's packets in counter order.
//!
//! Packets reach the window after authentication and the replay check, each
//! with its 64-bit WireGuard counter (the sequence number: it never wraps)
//! and the index of the path (line) it came on. The window hands them to
//! the TUN in counter order, holding a packet while a gap below it may still
//! be filled by a slower or jittery line. This is the accept window of the
//! seed's dual-line PPTP patch (DESIGN.md §1, §4), with its counters, but
//! expiry also runs on a timer and a gap is given up as soon as it is clear
//! nothing will fill it.
//!
//! # Rules
//!
//! `next` is the next counter to deliver; the first packet ever seen sets it.
//! A packet at `next` is delivered (with the run held behind it); above
//! `next` it is held (**Buffered**); below `next` it is dropped (**Under
//! Window**: a late copy, or it came after its gap was given up); equal to
//! a held one it is dropped (**Duplicated**). Copies the caller's replay
//! check rejected are reported with [`ReorderWindow::note_duplicate`] and
//! counted the same way. A gap is given up — **Lost** counts each missing
//! counter, the held run behind it is delivered — when
//!
//! 1. it has been known for the effective hold (a gap is known from the
//!    first arrival above it, so no packet waits longer than the hold);
//! 2. holding one more packet would exceed `capacity` packets or
//!    `max_bytes` bytes: the oldest gaps (never past the new packet) are
//!    given up until it fits;
//! 3. every live path has delivered a counter above it, each at least
//!    `SLACK_FACTOR` × that path's own reorder slack ago (and at least the
//!    configured pass wait, 1 ms by default), or the sender
//!    said the gap's counters did not go on that path
//!    ([`note_unassigned`](ReorderWindow::note_unassigned)). Lines are
//!    FIFO-ish: one that never reorders has slack 0, so a gap that every
//!    line has passed is lost after the pass wait and the added latency is
//!    the path skew, not the hold. The pass wait is there because the
//!    ends are programs: a sender thread preempted between a packet's
//!    counter and its send reorders a line that never reorders itself. A
//!    path's slack is a decaying maximum of how late its own packets came:
//!    arrival of a late packet minus arrival of the first later counter on
//!    the same path. Until the path delivered [`SLACK_LEARNING_PACKETS`]
//!    it has not shown its reordering, and rule 3 takes its slack as at
//!    least [`UNMEASURED_SLACK`]. An idle or sparsely used line
//!    passes nothing for a while: the sender's word that it carried none of
//!    the gap keeps a loss on the busy line from waiting the hold.
//!
//! Paths are `0..MAX_PATHS`; the caller says which are live. Counters from
//! `note_duplicate` (unauthenticated copies) count as path progress only up
//! to the highest counter the window has accepted.
//!
//! Any `u64` is a valid counter, though the replay check never lets one
//! reach `REJECT_AFTER_MESSAGES`. Once `u64::MAX` is delivered the session
//! has nothing left above it: every later packet is Under Window until
//! [`reset`](ReorderWindow::reset) (`next` stays at `u64::MAX`). The
//! counters saturate at `u64::MAX` instead of wrapping: a peer can make
//! Lost grow by almost 2^64 in every session.
//!
//! # Time
//!
//! Every call takes the time its packet arrived (the caller's kernel
//! stamp): that is what lateness, slack and a gap's age are measured in,
//! each packet at its own arrival, which may be earlier than one offered
//! before it (read from another socket). The window's clock, which only
//! goes forward, is the newest arrival offered: the decaying estimates are
//! read at it.
//!
//! Gaps are given up by time (rules 1 and 3) only in
//! [`handle_timeout`](ReorderWindow::handle_timeout), never while a packet
//! is offered, and it takes a second time: the one up to which the caller
//! has taken in every arrival. A caller with one socket per line reads one
//! socket after another, so a packet from the second may have arrived
//! later than packets still waiting in the first; judged at its arrival,
//! their gaps would be given up with their fillers already here. Rule 2
//! (room) does not depend on time and applies at once.
//!
//! # Hold
//!
//! `effective = min(max(skew + 2 × lateness + HOLD_MARGIN, MIN_HOLD), ceiling)`
//!
//! * `skew` is set by the caller from its probes: the difference in one-way
//!   delay between the live paths plus their jitter.
//! * `lateness` is measured here: a decaying maximum (half-life
//!   [`LATENESS_HALF_LIFE`]) of how long a gap had been known when a packet
//!   filled it, or when it arrived after the gap was given up (so a hold
//!   that is too short learns). It starts at [`INITIAL_LATENESS`] so the
//!   first loss of a session costs about 20 ms, not the 333 ms ceiling.
//! * Twice the lateness: the largest lateness seen so far is rarely the
//!   largest there is. On a 3 ms ± 1 ms line gaps are filled within 2 ms,
//!   giving a hold of about 5 ms + skew; on 200 ms ± 50 ms within 100 ms,
//!   giving about 200 ms + skew (capped by the ceiling, 333 ms by default).
//! * [`MIN_HOLD`] (2 ms) covers timer and scheduling granularity of the I/O
//!   layer; `HOLD_MARGIN` (1 ms) the same for a lateness near zero.
//!
//! A ceiling of zero turns the window off: every packet passes straight
//! through in arrival order and counts as Accepted.
//!
//! # Repair
//!
//! With a repair wait set ([`set_repair_wait`](ReorderWindow::set_repair_wait):
//! the sender keeps copies of what it sent), a gap that rule 3 finds lost
//! is not given up at once: the window asks for it
//! ([`take_repair_request`](ReorderWindow::take_repair_request): the range
//! of missing counters below the first held packet) and waits up to the
//! repair wait for the copies the sender re-sends on its best line, never
//! past the hold ceiling. Rule 1 still applies to a gap nobody asked for;
//! a gap asked for goes when its repair wait ends, even if the hold is
//! shorter (the repair is not cut short) or longer (a repair that does not
//! come within a round trip is not coming: the gap is known lost).
//!
//! # Delivery and memory
//!
//! In-order packets take the zero-copy path: when
//! [`passes_through`](ReorderWindow::passes_through) is true the caller
//! delivers the packet from its own buffer and reports it with
//! [`delivered_in_place`](ReorderWindow::delivered_in_place). Anything else
//! goes to [`insert`](ReorderWindow::insert), which copies it into the
//! window's slot pool; what becomes deliverable moves to the ready queue,
//! in order, and the caller drains it with
//! [`pop_ready`](ReorderWindow::pop_ready) or
//! [`drain_ready`](ReorderWindow::drain_ready) after every call — at the
//! latest after every batch. The ready queue comes after every packet
//! delivered in place before it and before any delivered in place later:
//! `passes_through` is false while it is not empty.
//!
//! Held packets are bounded by `capacity` and `max_bytes` (rule 2); held
//! and ready ones together by twice that (an insert that would overflow is
//! refused with [`InsertOutcome::ReadyFull`], which cannot happen to a
//! caller that drains after every call), so the pool never holds more than
//! `2 × capacity + 1` slots. Slots are allocated on first need and reused:
//! no allocation per packet after warm-up, and nothing a sender does can
//! grow it further. Each slot is as large as the largest packet it has
//! held (with 1420-byte packets under a 9000-byte MTU a slot costs 1420
//! bytes, not 9000), and all of them are freed once the window has held
//! nothing for [`IDLE_RELEASE`] (5 s), so a peer that reordered once does
//! not keep megabytes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Paths per peer: the window tracks progress per path.
pub use crate::path::MAX_PATHS;

/// The hold ceiling (`ReorderHold`), the seed's 0.333 s.
pub const DEFAULT_HOLD_CEILING: Duration = Duration::from_millis(333);

/// Packets held at most (`ReorderCapacity`), the seed's 2048.
pub const DEFAULT_CAPACITY: usize = 2048;

/// Bytes held at most: 2048 packets of ~2 KiB.
pub const DEFAULT_MAX_BYTES: usize = 4 << 20;

/// Longest packet the window stores: the default tunnel MTU (a decrypted
/// packet, padding included, is at most the MTU).
pub const DEFAULT_MAX_PACKET: usize = crate::consts::DEFAULT_MTU;

/// The effective hold never drops below this (timer granularity).
pub const MIN_HOLD: Duration = Duration::from_millis(2);

/// Added to `skew + 2 × lateness`.
pub const HOLD_MARGIN: Duration = Duration::from_millis(1);

/// Lateness assumed before any is measured: with no skew the hold starts at
/// 2 × 9.5 + 1 = 20 ms.
pub const INITIAL_LATENESS: Duration = Duration::from_micros(9_500);

/// Half-life of the measured lateness and of each path's slack: long
/// enough that the estimate holds between reordering bursts, short enough
/// that it forgets a line that stopped reordering within a minute.
pub const LATENESS_HALF_LIFE: Duration = Duration::from_secs(5);

/// A path must have passed a gap by this many times its slack before the
/// gap is declared lost early (the same margin as the hold's 2 × lateness).
pub const SLACK_FACTOR: u32 = 2;

/// The default [`ReorderConfig::pass_wait`]: the least time a path must
/// have passed a gap by before rule 3 gives it up, whatever its measured
/// slack. Both ends are programs on busy hosts:
/// a thread preempted between giving a packet its counter and sending it
/// reorders a line that never reorders on its own, and a slack of zero
/// (nothing measured yet, or decayed) would make each such packet a loss
/// the inner TCP pays for in full. A real loss waits this much longer.
pub const DEFAULT_PASS_WAIT: Duration = Duration::from_millis(1);

/// The default [`ReorderConfig::slack_learning`]: packets a path must have
/// delivered before rule 3 trusts its slack. A slack of zero means
/// something only after enough packets came in order: at a session's start
/// a jittery line has not shown its reordering yet, and a gap given up
/// after the pass wait is a loss the inner TCP pays for in full. Until
/// then rule 3 takes the path's slack as at least [`UNMEASURED_SLACK`]
/// (512 packets: a tenth of a second of a 60 Mbit/s stream).
pub const SLACK_LEARNING_PACKETS: u64 = 512;

/// The least slack rule 3 assumes for a path still learning its own: a
/// line whose delay varies by a few milliseconds (radio, a busy router)
/// shows it within its first packets, and a gap then waits 5 ms, not the
/// whole hold (a lightly used line may take long to deliver 512 packets,
/// and a loss on it must still be found early enough to be repaired).
pub const UNMEASURED_SLACK: Duration = Duration::from_micros(2_500);

/// Repair requests outstanding at once, at most.
const ASKED_LEN: usize = 8;

/// Gaps asked for that are remembered so their repairs, which come late on
/// purpose, are not taken for lateness (nor for a line's own reordering):
/// more than are outstanding at once, since a repair may come after its
/// gap was given up and others were asked for meanwhile.
const ASKED_MEMORY: usize = 64;

/// Held packets looked at per call for gaps to ask for together.
const ASK_SCAN: usize = 64;

/// Samples of each path's progress kept to measure its lateness.
const FRONTIER_LEN: usize = 32;

/// Progress samples are at least this far apart...
const FRONTIER_MIN_STEP: Duration = Duration::from_micros(100);

/// ...and at most this far, so the 32 samples cover about four times the
/// slack (a path's slack / 8 apart) and a late packet's lateness is
/// overestimated by at most one step, never underestimated within that span.
const FRONTIER_MAX_STEP: Duration = Duration::from_millis(10);

/// Given-up gaps remembered to measure how late their packets came.
const GIVEN_UP_LEN: usize = 16;

/// How long a window must have held nothing before its slots are freed:
/// long enough that steady reordering keeps its slots (no allocation per
/// burst), short enough that a peer that reordered once does not keep
/// megabytes for good.
pub const IDLE_RELEASE: Duration = Duration::from_secs(5);

/// Largest `max_bytes` (and `max_packet`) a window uses: held and ready
/// bytes together (at most twice `max_bytes`) plus one more packet then
/// always fit in a `usize`.
const MAX_BYTES_LIMIT: usize = usize::MAX / 4;

/// Largest `max_packet`: a slot's length is stored as a u32.
const MAX_PACKET_LIMIT: usize = if (u32::MAX as usize) < MAX_BYTES_LIMIT {
    u32::MAX as usize
} else {
    MAX_BYTES_LIMIT
};

/// Sizes and the hold ceiling of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReorderConfig {
    /// Upper bound of the adaptive hold; zero turns the window off.
    pub hold_ceiling: Duration,
    /// Packets held at most (held and ready together: twice this).
    pub capacity: usize,
    /// Bytes held at most (held and ready together: twice this).
    pub max_bytes: usize,
    /// Longest packet accepted by [`ReorderWindow::insert`]; the size of a
    /// storage slot.
    pub max_packet: usize,
    /// Rule 3 gives a gap up only once every path passed it at least this
    /// long ago (and twice its slack): see [`DEFAULT_PASS_WAIT`]. Zero
    /// trusts a path that never reordered at once.
    pub pass_wait: Duration,
    /// Packets a path must have delivered before rule 3 trusts its slack
    /// (before that it assumes at least [`UNMEASURED_SLACK`]): see
    /// [`SLACK_LEARNING_PACKETS`]. Zero trusts it from the first.
    pub slack_learning: u64,
}

impl Default for ReorderConfig {
    fn default() -> Self {
        ReorderConfig {
            hold_ceiling: DEFAULT_HOLD_CEILING,
            capacity: DEFAULT_CAPACITY,
            max_bytes: DEFAULT_MAX_BYTES,
            max_packet: DEFAULT_MAX_PACKET,
            pass_wait: DEFAULT_PASS_WAIT,
            slack_learning: SLACK_LEARNING_PACKETS,
        }
    }
}

impl ReorderConfig {
    /// Checks that the bounds can hold at least one packet; the message
    /// names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.capacity == 0 {
            return Err("reorder capacity must be at least 1 packet".into());
        }
        if self.capacity > u32::MAX as usize / 2 {
            return Err(format!(
                "reorder capacity must be at most {} packets, not {}",
                u32::MAX / 2,
                self.capacity
            ));
        }
        if self.max_packet == 0 || self.max_packet > u32::MAX as usize {
            return Err(format!(
                "reorder max packet must be between 1 and {} bytes, not {}",
                u32::MAX,
                self.max_packet
            ));
        }
        if self.max_bytes < self.max_packet {
            return Err(format!(
                "reorder max bytes ({}) must be at least the max packet ({})",
                self.max_bytes, self.max_packet
            ));
        }
        Ok(())
    }
}

/// The seed's counters (DESIGN.md §1), all monotonic.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReorderCounters {
    /// Delivered in order: in place, or released to the ready queue.
    pub accepted: u64,
    /// Arrived below the window: a late copy, or after its gap was given up.
    pub under_window: u64,
    /// Arrived out of order and was held.
    pub buffered: u64,
    /// A copy of a packet being held.
    pub duplicated: u64,
    /// Counters given up (one per missing counter; starts at 0).
    pub lost: u64,
    /// Gaps the sender was asked to repair (see *Repair*).
    pub repairs_asked: u64,
}

/// Why gaps were given up and what they cost: beside the seed's counters,
/// so `braid show` can say why the window waits as it does.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GapCounters {
    /// Gaps given up, by the rule that gave them up: the hold ran out
    /// (rule 1), the bounds were full (rule 2), every live path had passed
    /// them or never carried them (rule 3, after the repair wait where one
    /// was asked for).
    pub by_hold: u64,
    pub by_bounds: u64,
    pub by_paths: u64,
    /// Microseconds the gaps given up had been known when they were given
    /// up (what losses cost in delay: everything behind a gap waits).
    pub wait_us: u64,
}

/// Why a gap is given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveUpRule {
    Hold,
    Bounds,
    Paths,
    /// The window was reset or turned off: not a loss decision.
    Flush,
}

/// What [`ReorderWindow::insert`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    /// In order: it is in the ready queue, with whatever it released.
    Ready,
    /// Held behind a gap.
    Buffered,
    /// Below the window; dropped.
    UnderWindow,
    /// A copy of a held packet; dropped.
    Duplicated,
    /// Longer than `max_packet`; not taken, nothing changed.
    TooLarge,
    /// Held and ready packets fill twice the bounds because the caller has
    /// not drained the ready queue; the packet was not taken (gaps below it
    /// may have been given up). Drain the queue and insert it again.
    ReadyFull,
}

/// A maximum that halves every [`LATENESS_HALF_LIFE`] without new samples.
#[derive(Debug, Clone, Copy)]
struct DecayingMax {
    peak: Duration,
    /// When `peak` was set; `None`: not decaying yet.
    at: Option<Instant>,
    /// Whether `peak` is a sample, not (what is left of) the initial value.
    measured: bool,
}

impl DecayingMax {
    const fn new(initial: Duration) -> Self {
        DecayingMax {
            peak: initial,
            at: None,
            measured: false,
        }
    }

    fn value(&self, now: Instant) -> Duration {
        let Some(at) = self.at else {
            return self.peak;
        };
        let age = now.saturating_duration_since(at);
        if age.is_zero() || self.peak.is_zero() {
            return self.peak;
        }
        let halvings = age.as_secs_f64() / LATENESS_HALF_LIFE.as_secs_f64();
        self.peak.mul_f64((-halvings).exp2())
    }

    fn sample(&mut self, now: Instant, d: Duration) {
        let current = self.value(now);
        self.measured |= d >= current;
        self.peak = current.max(d);
        self.at = Some(now);
    }
}

/// What the window knows of one path.
#[derive(Debug, Clone)]
struct PathState {
    /// Highest (trusted) counter the path delivered.
    highest: Option<u64>,
    /// Set exactly when `highest > next`: a counter above `next` the path
    /// delivered and when (the first such one, or — after `next` moved past
    /// that one — the moment `next` moved: never earlier than the truth).
    pass: Option<(u64, Instant)>,
    /// How late the path's own packets come (reordering within the line).
    slack: DecayingMax,
    /// Progress samples, oldest first: (highest counter reached within the
    /// step, start of the step, arrival of that highest counter). All
    /// columns increase.
    frontier: VecDeque<(u64, Instant, Instant)>,
    /// The sender's latest word on what did not go on this path: counters
    /// `from..to`, and when it came (see [`ReorderWindow::note_unassigned`]).
    unassigned: Option<(u64, u64, Instant)>,
    /// Whether the sender re-sends what this path loses (`None`: it has
    /// not said; taken as yes).
    repaired: Option<bool>,
    /// Packets the path delivered (saturating; see
    /// [`SLACK_LEARNING_PACKETS`]).
    delivered: u64,
}

impl PathState {
    fn new() -> Self {
        PathState {
            highest: None,
            pass: None,
            slack: DecayingMax::new(Duration::ZERO),
            // Allocated when the path first carries data: a peer that never
            // speaks costs no samples (it grows to FRONTIER_LEN and stays).
            frontier: VecDeque::new(),
            unassigned: None,
            repaired: None,
            delivered: 0,
        }
    }

    /// Whether the path carried enough for its slack to mean something.
    fn slack_known(&self, learning: u64) -> bool {
        self.delivered >= learning
    }

    /// When the sender said counters `from..to` did not go on this path.
    fn not_carried(&self, from: u64, to: u64) -> Option<Instant> {
        let (f, t, told) = self.unassigned?;
        (f <= from && to <= t).then_some(told)
    }

    /// When the path had surely delivered a counter above `next`, from its
    /// progress samples: the arrival of the highest counter of the first
    /// step that reached past it, never earlier than the truth (`now` when
    /// the samples do not say). So back-to-back gaps each wait their pass
    /// wait from when the path passed them, not one after the other.
    fn passed_since(&self, next: u64, now: Instant) -> Instant {
        self.frontier
            .iter()
            .find(|&&(top, _, _)| top > next)
            .map_or(now, |&(_, _, reached)| reached.min(now))
    }

    fn forget_progress(&mut self) {
        self.highest = None;
        self.pass = None;
        self.frontier.clear();
        self.unassigned = None;
        self.repaired = None;
    }

    /// Records `counter` arriving on this path at `now`: progress, or a
    /// lateness sample when the path already delivered something later.
    fn arrive(&mut self, now: Instant, counter: u64) {
        self.delivered = self.delivered.saturating_add(1);
        match self.highest {
            Some(highest) if counter < highest => {
                // The first sample above `counter` started at or before the
                // first later counter arrived: lateness is never
                // underestimated within the span the samples cover.
                if let Some(&(_, first_later, _)) =
                    self.frontier.iter().find(|&&(top, _, _)| top > counter)
                {
                    self.slack
                        .sample(now, now.saturating_duration_since(first_later));
                }
            }
            Some(highest) if counter == highest => {}
            _ => {
                self.highest = Some(counter);
                let step = (self.slack.value(now) / 8).clamp(FRONTIER_MIN_STEP, FRONTIER_MAX_STEP);
                match self.frontier.back_mut() {
                    Some(last) if now.saturating_duration_since(last.1) < step => {
                        (last.0, last.2) = (counter, now);
                    }
                    _ => {
                        if self.frontier.len() == FRONTIER_LEN {
                            self.frontier.pop_front();
                        }
                        self.frontier.push_back((counter, now, now));
                    }
                }
            }
        }
    }
}

/// A stored packet, held or ready.
#[derive(Debug, Clone, Copy)]
struct Entry {
    counter: u64,
    /// Held: since when the gap below this packet is known, i.e. the
    /// earliest arrival among it and every packet held above it. Never
    /// decreasing along the held run.
    since: Instant,
    slot: u32,
    len: u32,
}

/// A gap given up, remembered to measure how late its packets come.
#[derive(Debug, Clone, Copy)]
struct GivenUp {
    from: u64,
    to: u64,
    since: Instant,
}

/// Packet slots, allocated on first need and reused, each as large as the
/// largest packet it has held (not the largest the window could take: a
/// 9000-byte MTU must not make every 1420-byte packet cost 9000 bytes).
/// All of them go once the window has been empty for [`IDLE_RELEASE`].
#[derive(Debug, Default)]
struct SlotPool {
    slots: Vec<Vec<u8>>,
    free: Vec<u32>,
    /// Bytes the slots have allocated (the sum of their capacities).
    allocated: usize,
}

impl SlotPool {
    fn store(&mut self, packet: &[u8]) -> u32 {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Vec::new());
                // At most 2 × capacity + 1 slots, and new() keeps capacity
                // below u32::MAX / 2.
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.clear();
        let before = slot.capacity();
        if before < packet.len() {
            // Grown once per slot and size: no allocation per packet
            // after warm-up.
            slot.reserve_exact(packet.len());
            // Capacities are of live allocations: their sum fits a usize.
            self.allocated = self.allocated - before + slot.capacity();
        }
        slot.extend_from_slice(packet);
        index
    }

    fn release(&mut self, index: u32) {
        self.free.push(index);
    }

    fn bytes(&self, entry: &Entry) -> &[u8] {
        &self.slots[entry.slot as usize][..entry.len as usize]
    }

    /// Frees every slot; only when none is in use.
    fn clear_if_unused(&mut self) {
        if self.free.len() == self.slots.len() {
            *self = SlotPool::default();
        }
    }
}

/// The reorder window of one peer; see the module documentation.
#[derive(Debug)]
pub struct ReorderWindow {
    cfg: ReorderConfig,
    /// The next counter to deliver; `None` until the first packet. It
    /// stays at `u64::MAX` once that counter was delivered (`exhausted`).
    next: Option<u64>,
    /// Counter `u64::MAX` was delivered: `next` would be 2^64, so every
    /// counter is below the window until `reset`.
    exhausted: bool,
    /// Highest counter delivered or held: the limit of what duplicates may
    /// tell about path progress.
    max_seen: Option<u64>,
    /// The ready queue (`ready_len` entries, all below `next`), then the
    /// held packets in increasing counter order, all above `next`.
    entries: VecDeque<Entry>,
    ready_len: usize,
    ready_bytes: usize,
    held_bytes: usize,
    /// The slot `pop_ready` lent out last; freed at the next call.
    lent: Option<u32>,
    pool: SlotPool,
    /// Since when nothing is held, ready or lent (see [`IDLE_RELEASE`]).
    empty_since: Option<Instant>,
    paths: [PathState; MAX_PATHS],
    live: u8,
    /// Paths whose `pass` is set.
    passed: u8,
    skew: Duration,
    lateness: DecayingMax,
    given_up: VecDeque<GivenUp>,
    /// How long a gap found lost waits for the sender's copy; `None`: no
    /// repairs.
    repair_wait: Option<Duration>,
    /// The gaps asked for (`from..to`) and until when each waits, in
    /// counter order (at most `ASKED_LEN`).
    repairs: VecDeque<(u64, u64, Instant)>,
    /// Requests not yet taken: counters `from..to`.
    repair_requests: VecDeque<(u64, u64)>,
    /// The latest requests (`from..to`), whose packets come late on
    /// purpose when they come.
    asked: [(u64, u64); ASKED_MEMORY],
    asked_next: usize,
    /// Above every `to` in `asked`: a counter at or above it was not asked
    /// for (most packets; no need to look).
    asked_top: u64,
    /// Latest time seen.
    now: Option<Instant>,
    counters: ReorderCounters,
    gaps: GapCounters,
}

impl ReorderWindow {
    /// An empty window. An invalid `cfg` (see [`ReorderConfig::validate`])
    /// is made valid: capacity at least 1, `max_bytes` at least
    /// `max_packet`. Byte bounds above `usize::MAX / 4` are lowered to it.
    pub fn new(cfg: ReorderConfig) -> Self {
        let mut cfg = cfg;
        cfg.capacity = cfg.capacity.clamp(1, u32::MAX as usize / 2);
        cfg.max_packet = cfg.max_packet.min(MAX_PACKET_LIMIT);
        cfg.max_bytes = cfg.max_bytes.clamp(cfg.max_packet, MAX_BYTES_LIMIT);
        ReorderWindow {
            next: None,
            exhausted: false,
            max_seen: None,
            entries: VecDeque::new(),
            ready_len: 0,
            ready_bytes: 0,
            held_bytes: 0,
            lent: None,
            pool: SlotPool::default(),
            empty_since: None,
            paths: std::array::from_fn(|_| PathState::new()),
            live: 0,
            passed: 0,
            skew: Duration::ZERO,
            lateness: DecayingMax::new(INITIAL_LATENESS),
            // Allocated at the first gap given up, not for every peer.
            given_up: VecDeque::new(),
            repair_wait: None,
            // Allocated at the first repair asked for.
            repairs: VecDeque::new(),
            repair_requests: VecDeque::new(),
            asked: [(0, 0); ASKED_MEMORY],
            asked_next: 0,
            asked_top: 0,
            now: None,
            counters: ReorderCounters::default(),
            gaps: GapCounters::default(),
            cfg,
        }
    }

    pub fn config(&self) -> &ReorderConfig {
        &self.cfg
    }

    pub fn counters(&self) -> ReorderCounters {
        self.counters
    }

    /// How the gaps given up so far went.
    pub fn gap_counters(&self) -> GapCounters {
        self.gaps
    }

    /// Packets held behind gaps.
    pub fn held_packets(&self) -> usize {
        self.entries.len() - self.ready_len
    }

    /// Bytes held behind gaps.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Packets waiting in the ready queue.
    pub fn ready_packets(&self) -> usize {
        self.ready_len
    }

    /// Lets packets up to `max_packet` bytes in (a tunnel MTU raised by
    /// path MTU discovery); never lowers it. Slots already made grow when
    /// they are next used, so held packets stay where they are.
    pub fn raise_max_packet(&mut self, max_packet: usize) {
        let max_packet = max_packet.min(MAX_PACKET_LIMIT);
        if max_packet <= self.cfg.max_packet {
            return;
        }
        self.cfg.max_packet = max_packet;
        self.cfg.max_bytes = self.cfg.max_bytes.max(max_packet);
    }

    /// Storage slots allocated now.
    pub fn allocated_slots(&self) -> usize {
        self.pool.slots.len()
    }

    /// Bytes the storage slots have allocated now.
    pub fn allocated_bytes(&self) -> usize {
        self.pool.allocated
    }

    /// The next counter to deliver, once a packet was seen. Still
    /// `u64::MAX` after that counter was delivered, when every counter is
    /// under the window.
    pub fn next_counter(&self) -> Option<u64> {
        self.next
    }

    /// The hold as of the latest time the window was given.
    pub fn effective_hold(&self) -> Duration {
        match self.now {
            Some(now) => self.hold_at(now),
            None => self.hold_from(self.lateness.peak),
        }
    }

    /// What the hold is made of, as of the latest time seen: the path
    /// skew the caller set and the lateness measured here (the hold is
    /// skew + 2 × lateness + `HOLD_MARGIN`, within `MIN_HOLD` and the
    /// ceiling), and the repair wait.
    pub fn hold_parts(&self) -> (Duration, Duration, Option<Duration>) {
        let lateness = match self.now {
            Some(now) => self.lateness.value(now),
            None => self.lateness.peak,
        };
        (self.skew, lateness, self.repair_wait)
    }

    /// Whether the lateness in [`hold_parts`](Self::hold_parts) was
    /// measured: false while it is what is left of [`INITIAL_LATENESS`]
    /// (no late packet has come yet, or none as late as that).
    pub fn lateness_measured(&self) -> bool {
        self.lateness.measured
    }

    /// The measured reorder slack of `path` as of the latest time seen.
    pub fn path_slack(&self, path: usize) -> Duration {
        match (self.paths.get(path), self.now) {
            (Some(p), Some(now)) => p.slack.value(now),
            _ => Duration::ZERO,
        }
    }

    fn is_off(&self) -> bool {
        self.cfg.hold_ceiling.is_zero()
    }

    /// Whether the window holds packets back at all (`ReorderHold` above
    /// zero): only then do duplicates tell it anything.
    pub fn is_on(&self) -> bool {
        !self.is_off()
    }

    fn hold_from(&self, lateness: Duration) -> Duration {
        if self.is_off() {
            return Duration::ZERO;
        }
        let wanted = self
            .skew
            .saturating_add(lateness.saturating_mul(2))
            .saturating_add(HOLD_MARGIN);
        wanted.max(MIN_HOLD).min(self.cfg.hold_ceiling)
    }

    fn hold_at(&self, now: Instant) -> Duration {
        self.hold_from(self.lateness.value(now))
    }

    /// Which paths are up (bit `i` for path `i`). Early loss (rule 3) waits
    /// for every live path; with none it is off. Call
    /// [`poll_timeout`](Self::poll_timeout) again afterwards.
    pub fn set_live_paths(&mut self, mask: u8) {
        self.live = mask;
    }

    /// The sender says the counters `from..to` did not go on `path` (they
    /// went on other paths or nowhere): a gap among them waits for the
    /// other paths alone (rule 3). The latest word per path counts; words
    /// about older counters than it already has are ignored. Call
    /// [`poll_timeout`](Self::poll_timeout) again afterwards.
    ///
    /// `repaired`: whether the sender re-sends what this path loses; a gap
    /// that no such path can have carried is given up without asking.
    pub fn note_unassigned(
        &mut self,
        now: Instant,
        path: usize,
        from: u64,
        to: u64,
        repaired: bool,
    ) {
        self.reclaim_lent();
        let now = self.tick(now);
        let Some(p) = self.paths.get_mut(path) else {
            return;
        };
        if p.unassigned.is_some_and(|(_, t, _)| t > to) {
            return;
        }
        p.repaired = Some(repaired);
        if from < to {
            p.unassigned = Some((from, to, now));
        }
    }

    /// The caller's measure of the delay difference between the live paths
    /// plus their jitter.
    /// Asks the sender to repair gaps found lost, waiting `wait` for the
    /// copies (`None`: no repairs).
    pub fn set_repair_wait(&mut self, wait: Option<Duration>) {
        self.repair_wait = wait;
    }

    /// The counters the sender should re-send (`from..to`), once per gap;
    /// call until `None`.
    pub fn take_repair_request(&mut self) -> Option<(u64, u64)> {
        self.repair_requests.pop_front()
    }

    /// The sender said it will not re-send counters `from..to`: the gaps
    /// asked for within them stop waiting (given up at the next
    /// `handle_timeout`, rule 3's count).
    pub fn repairs_declined(&mut self, now: Instant, from: u64, to: u64) {
        self.reclaim_lent();
        let now = self.tick(now);
        for r in self.repairs.iter_mut() {
            if from <= r.0 && r.1 <= to {
                r.2 = r.2.min(now);
            }
        }
    }

    pub fn set_path_skew(&mut self, skew: Duration) {
        self.skew = skew;
    }

    /// Changes the ceiling (`ReorderHold`); zero turns the window off and
    /// gives up every gap at once.
    pub fn set_hold_ceiling(&mut self, ceiling: Duration) {
        self.reclaim_lent();
        self.cfg.hold_ceiling = ceiling;
        if self.is_off() {
            self.flush();
        }
    }

    /// True when the caller may deliver `counter` itself, without a copy,
    /// and then call [`delivered_in_place`](Self::delivered_in_place):
    /// nothing is held or ready, and `counter` is the next one (or the
    /// first, or the window is off).
    pub fn passes_through(&self, counter: u64) -> bool {
        self.entries.is_empty()
            && match self.next {
                None => true,
                Some(next) => (counter == next && !self.exhausted) || self.is_off(),
            }
    }

    /// The caller delivered `counter` from its own buffer, as
    /// [`passes_through`](Self::passes_through) allowed.
    pub fn delivered_in_place(&mut self, arrived: Instant, counter: u64, path: usize) {
        debug_assert!(self.passes_through(counter), "{counter} does not pass");
        self.reclaim_lent();
        let now = self.tick(arrived);
        self.counters.accepted = self.counters.accepted.saturating_add(1);
        self.max_seen = Some(self.max_seen.map_or(counter, |m| m.max(counter)));
        if self.is_off() {
            self.move_past(counter);
            return;
        }
        let next = *self.next.get_or_insert(counter);
        if counter >= next && !self.exhausted {
            // Only when misused (counter above next) does this give
            // anything up; it keeps the invariants either way.
            self.skip_to(now, counter);
            if self.next == Some(counter) {
                self.move_past(counter);
                self.release_run();
                self.after_advance(now);
            }
        }
        self.note_path(arrived, counter, path);
    }

    /// Takes a packet that does not pass through: copies it into the
    /// window, moves what became deliverable to the ready queue and says
    /// what happened to it.
    pub fn insert(
        &mut self,
        now: Instant,
        counter: u64,
        path: usize,
        packet: &[u8],
    ) -> InsertOutcome {
        self.insert_from(now, counter, Some(path), packet)
    }

    /// `insert` for a packet that did not come on a line but was rebuilt
    /// from the others (see `fec`): it may come before its line delivered
    /// what was sent before it, or after its gap waited on purpose, so it
    /// teaches neither a path's progress and lateness nor the hold.
    pub fn insert_rebuilt(&mut self, now: Instant, counter: u64, packet: &[u8]) -> InsertOutcome {
        self.insert_from(now, counter, None, packet)
    }

    fn insert_from(
        &mut self,
        arrived: Instant,
        counter: u64,
        path: Option<usize>,
        packet: &[u8],
    ) -> InsertOutcome {
        self.reclaim_lent();
        let now = self.tick(arrived);
        if packet.len() > self.cfg.max_packet {
            return InsertOutcome::TooLarge;
        }
        if self.is_off() {
            if !self.has_room(packet.len()) {
                return InsertOutcome::ReadyFull;
            }
            let slot = self.pool.store(packet);
            self.entries.push_back(Entry {
                counter,
                since: now,
                slot,
                len: packet.len() as u32,
            });
            // has_room (above) keeps both within twice the bounds.
            self.ready_len += 1;
            self.ready_bytes += packet.len();
            self.counters.accepted = self.counters.accepted.saturating_add(1);
            self.max_seen = Some(self.max_seen.map_or(counter, |m| m.max(counter)));
            self.move_past(counter);
            return InsertOutcome::Ready;
        }
        let next = *self.next.get_or_insert(counter);
        let outcome = if counter < next || self.exhausted {
            self.counters.under_window = self.counters.under_window.saturating_add(1);
            // A packet that comes after its gap was given up says the hold
            // was too short, unless it is a repair: asked for, it comes a
            // round trip late on purpose (on the sender's best line, maybe
            // behind a full queue), and the repair wait, not the hold,
            // decided how long its gap waited.
            if let Some(gap) = self
                .given_up
                .iter()
                .find(|g| g.from <= counter && counter < g.to)
                .filter(|_| path.is_some() && !self.was_asked(counter))
            {
                let late = arrived.saturating_duration_since(gap.since);
                self.lateness.sample(now, late);
            }
            InsertOutcome::UnderWindow
        } else if self.held_position(counter).is_ok() {
            self.counters.duplicated = self.counters.duplicated.saturating_add(1);
            InsertOutcome::Duplicated
        } else {
            match self.store(now, arrived, counter, packet, path.is_some()) {
                Some(outcome) => outcome,
                None => return InsertOutcome::ReadyFull,
            }
        };
        if let Some(path) = path {
            self.note_path(arrived, counter, path);
        }
        outcome
    }

    /// Stores a packet at or above `next` that is not held yet; `None` when
    /// the ready queue has no room.
    fn store(
        &mut self,
        now: Instant,
        arrival: Instant,
        counter: u64,
        packet: &[u8],
        arrived: bool,
    ) -> Option<InsertOutcome> {
        let len = packet.len();
        // Rule 2: give up the oldest gaps below the packet until it fits.
        // Held packets and bytes are within capacity and max_bytes (both
        // far below their type's maximum), so the sums cannot overflow.
        while self.next.is_some_and(|n| counter > n)
            && (self.held_packets() + 1 > self.cfg.capacity
                || self.held_bytes + len > self.cfg.max_bytes)
        {
            let head = self.entries[self.ready_len];
            self.give_up(
                now,
                head.counter.min(counter),
                head.since,
                GiveUpRule::Bounds,
            );
        }
        if !self.has_room(len) {
            return None;
        }
        let slot = self.pool.store(packet);
        // Not held (checked by the caller) and not below `next` (rule 2
        // never gives up past `counter`): it has an insertion point.
        let Err(above) = self.held_position(counter) else {
            unreachable!("{counter} is already held");
        };
        let since = match self.entries.get(above) {
            Some(e) => {
                // It fills (part of) a gap known since `e.since`; a repair
                // is late on purpose and teaches the hold nothing.
                if arrived && !self.was_asked(counter) {
                    self.lateness
                        .sample(now, arrival.saturating_duration_since(e.since));
                }
                e.since.min(arrival)
            }
            None => arrival,
        };
        self.entries.insert(
            above,
            Entry {
                counter,
                since,
                slot,
                len: len as u32,
            },
        );
        // A packet read after others that arrived before them (another
        // line's socket) makes the gaps below it known since its own
        // arrival: `since` never decreases along the held run.
        for e in self.entries.range_mut(self.ready_len..above).rev() {
            if e.since <= since {
                break;
            }
            e.since = since;
        }
        self.held_bytes += len;
        self.max_seen = Some(self.max_seen.map_or(counter, |m| m.max(counter)));
        if Some(counter) == self.next {
            self.release_run();
            self.after_advance(now);
            Some(InsertOutcome::Ready)
        } else {
            self.counters.buffered = self.counters.buffered.saturating_add(1);
            Some(InsertOutcome::Buffered)
        }
    }

    /// Reports a copy of `counter` that the replay check rejected (it
    /// arrived on `path`): counted Duplicated when that counter is held,
    /// Under Window otherwise. It also tells that the path has got this
    /// far, when the counter is one the window has accepted.
    pub fn note_duplicate(&mut self, arrived: Instant, counter: u64, path: usize) {
        self.reclaim_lent();
        self.tick(arrived);
        if self.held_position(counter).is_ok() {
            self.counters.duplicated = self.counters.duplicated.saturating_add(1);
        } else {
            self.counters.under_window = self.counters.under_window.saturating_add(1);
        }
        if self.is_off() || self.max_seen.is_none_or(|m| counter > m) {
            return;
        }
        self.note_path(arrived, counter, path);
    }

    /// Counts a packet the caller dropped as too late without offering it
    /// (a straggler of a session the window has left).
    pub fn count_under_window(&mut self) {
        self.counters.under_window = self.counters.under_window.saturating_add(1);
    }

    /// When [`handle_timeout`](Self::handle_timeout) should run next: the
    /// head gap's deadline, or earlier when it will be lost early. None
    /// with nothing held, or when neither time is one an Instant can hold
    /// (a hold near `Duration::MAX`): that gap goes only when it is filled,
    /// for room, or at a reset.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let now = self.now?;
        let head = self.entries.get(self.ready_len)?;
        if let Some(due) = self.repair_due(head) {
            return Some(due);
        }
        match (self.deadline(head, now), self.early_loss_at(now)) {
            (Some(deadline), Some(early)) => Some(deadline.min(early)),
            (deadline, early) => deadline.or(early),
        }
    }

    /// Gives up the gaps that are due at `now`: the time up to which the
    /// caller has taken in every arrival (see *Time*), which may be behind
    /// the arrival of a packet it already offered.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.reclaim_lent();
        self.tick(now);
        self.expire(now);
    }

    /// The next packet of the ready queue, in order. The slice is valid
    /// until the next call on the window.
    pub fn pop_ready(&mut self) -> Option<&[u8]> {
        self.reclaim_lent();
        if self.ready_len == 0 {
            return None;
        }
        let entry = self.entries.pop_front()?;
        self.ready_len -= 1;
        self.ready_bytes -= entry.len as usize;
        self.lent = Some(entry.slot);
        Some(self.pool.bytes(&entry))
    }

    /// Hands every ready packet to `deliver`, in order; returns how many.
    pub fn drain_ready(&mut self, mut deliver: impl FnMut(&[u8])) -> usize {
        self.reclaim_lent();
        let n = self.ready_len;
        for entry in self.entries.drain(..n) {
            deliver(self.pool.bytes(&entry));
            self.pool.release(entry.slot);
        }
        self.ready_len = 0;
        self.ready_bytes = 0;
        n
    }

    /// Starts a new session (counters restart): every gap is given up so
    /// held packets reach the ready queue, and the session's progress is
    /// forgotten. Counters and what was learnt about the lines (lateness,
    /// slack, skew, live paths) are kept.
    pub fn reset(&mut self) {
        self.reclaim_lent();
        self.flush();
        self.next = None;
        self.exhausted = false;
        self.max_seen = None;
        self.passed = 0;
        for p in &mut self.paths {
            p.forget_progress();
        }
        self.given_up.clear();
        self.repairs.clear();
        self.repair_requests.clear();
        self.asked = [(0, 0); ASKED_MEMORY];
        self.asked_top = 0;
    }

    // --- internals -------------------------------------------------------

    fn tick(&mut self, now: Instant) -> Instant {
        let now = self.now.map_or(now, |t| t.max(now));
        if self.now.is_none() {
            // The initial estimate starts decaying with the first event.
            self.lateness.at = Some(now);
        }
        self.now = Some(now);
        self.release_when_idle(now);
        now
    }

    /// Frees the slots once nothing was held, ready or lent for
    /// [`IDLE_RELEASE`].
    fn release_when_idle(&mut self, now: Instant) {
        if !self.entries.is_empty() || self.lent.is_some() {
            self.empty_since = None;
            return;
        }
        let since = *self.empty_since.get_or_insert(now);
        if !self.pool.slots.is_empty() && now.saturating_duration_since(since) >= IDLE_RELEASE {
            self.pool.clear_if_unused();
        }
    }

    fn reclaim_lent(&mut self) {
        if let Some(slot) = self.lent.take() {
            self.pool.release(slot);
        }
    }

    /// Whether one more packet of `len` bytes fits in the pool. Held
    /// packets alone fit in half of it (rule 2), so only an undrained
    /// ready queue can fill the rest.
    fn has_room(&self, len: usize) -> bool {
        // new() keeps capacity below u32::MAX / 2 and max_bytes (so the
        // held and ready bytes, at most twice it, and len) below
        // usize::MAX / 4: nothing here can overflow.
        self.entries.len() < 2 * self.cfg.capacity
            && self.held_bytes + self.ready_bytes + len <= 2 * self.cfg.max_bytes
    }

    /// Where `counter` is (Ok) or would go (Err) among the held entries,
    /// as an index into `entries`.
    fn held_position(&self, counter: u64) -> Result<usize, usize> {
        let (a, b) = self.entries.as_slices();
        let held_in_a = a.len().saturating_sub(self.ready_len);
        // Held entries are the tail; search whichever slices hold them.
        let search = |s: &[Entry]| s.binary_search_by_key(&counter, |e| e.counter);
        if held_in_a > 0 {
            let start = self.ready_len;
            match search(&a[start..]) {
                Ok(i) => return Ok(start + i),
                Err(i) if i < held_in_a => return Err(start + i),
                Err(_) => {}
            }
            search(b).map(|i| a.len() + i).map_err(|i| a.len() + i)
        } else {
            let start = self.ready_len - a.len();
            search(&b[start..])
                .map(|i| self.ready_len + i)
                .map_err(|i| self.ready_len + i)
        }
    }

    /// Gives up every counter missing below `to` (held ones there are
    /// released), remembering the gap as known since `since`.
    fn give_up(&mut self, now: Instant, to: u64, since: Instant, rule: GiveUpRule) {
        let Some(from) = self.next else { return };
        if to <= from {
            return;
        }
        let g = &mut self.gaps;
        let by_rule = match rule {
            GiveUpRule::Hold => Some(&mut g.by_hold),
            GiveUpRule::Bounds => Some(&mut g.by_bounds),
            GiveUpRule::Paths => Some(&mut g.by_paths),
            GiveUpRule::Flush => None,
        };
        if let Some(n) = by_rule {
            *n = n.saturating_add(1);
            let waited = u64::try_from(now.saturating_duration_since(since).as_micros());
            g.wait_us = g.wait_us.saturating_add(waited.unwrap_or(u64::MAX));
        }
        if self.given_up.len() == GIVEN_UP_LEN {
            self.given_up.pop_front();
        }
        self.given_up.push_back(GivenUp { from, to, since });
        self.skip_to(now, to);
    }

    /// Moves `next` to at least `to`: counters missing below are lost,
    /// held ones released; then releases the run from there.
    fn skip_to(&mut self, now: Instant, to: u64) {
        let Some(mut next) = self.next else { return };
        while next < to {
            match self.entries.get(self.ready_len) {
                Some(e) if e.counter < to => {
                    // Held counters are at or above `next` (which only
                    // passed released ones), and `e.counter < to <=
                    // u64::MAX`, so neither operation can overflow. Lost
                    // saturates: it adds up over sessions.
                    let missing = e.counter - next;
                    self.counters.lost = self.counters.lost.saturating_add(missing);
                    next = e.counter + 1;
                    self.release_head();
                }
                _ => {
                    self.counters.lost = self.counters.lost.saturating_add(to - next);
                    next = to;
                }
            }
        }
        self.next = Some(next);
        self.release_run();
        self.after_advance(now);
    }

    /// Moves the lowest held entry to the ready queue.
    fn release_head(&mut self) {
        // The entry's bytes are part of `held_bytes`; held and ready
        // entries never exceed the pool's bounds.
        let len = self.entries[self.ready_len].len as usize;
        self.ready_len += 1;
        self.held_bytes -= len;
        self.ready_bytes += len;
        self.counters.accepted = self.counters.accepted.saturating_add(1);
    }

    /// Moves `next` past `counter`, which was just delivered (never back:
    /// with the window off, counters come in any order).
    fn move_past(&mut self, counter: u64) {
        match counter.checked_add(1) {
            Some(after) => self.next = Some(self.next.map_or(after, |n| n.max(after))),
            None => {
                self.next = Some(u64::MAX);
                self.exhausted = true;
            }
        }
    }

    /// Releases the held run starting at `next`.
    fn release_run(&mut self) {
        while let Some(next) = self.next {
            match self.entries.get(self.ready_len) {
                Some(e) if e.counter == next => {}
                _ => break,
            }
            self.release_head();
            // Past u64::MAX nothing can be held: the loop ends there.
            self.move_past(next);
        }
    }

    /// Gives up every gap; everything held becomes ready.
    fn flush(&mut self) {
        if let (Some(last), Some(now)) = (self.entries.back(), self.now) {
            if self.held_packets() > 0 {
                // Up to the last held counter, not one past it (which may
                // not exist): skip_to's release_run delivers the last one.
                let (to, since) = (last.counter, self.entries[self.ready_len].since);
                self.give_up(now, to, since, GiveUpRule::Flush);
            }
        }
    }

    /// Keeps each path's `pass` true to its definition after `next` moved.
    fn after_advance(&mut self, now: Instant) {
        let Some(next) = self.next else { return };
        let mut mask = self.passed;
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let p = &mut self.paths[i];
            if p.pass.is_some_and(|(c, _)| c > next) {
                continue;
            }
            match p.highest {
                Some(h) if h > next => p.pass = Some((h, p.passed_since(next, now))),
                _ => {
                    p.pass = None;
                    self.passed &= !(1 << i);
                }
            }
        }
    }

    /// Path bookkeeping for a trusted `counter` that arrived on `path`. A
    /// counter that was asked for again is a repair: it came late on
    /// purpose, and says nothing about how its line reorders.
    fn note_path(&mut self, now: Instant, counter: u64, path: usize) {
        if self.was_asked(counter) {
            return;
        }
        let Some(p) = self.paths.get_mut(path) else {
            return;
        };
        p.arrive(now, counter);
        if p.pass.is_none() && self.next.is_some_and(|n| counter > n) {
            p.pass = Some((counter, now));
            self.passed |= 1 << path;
        }
    }

    /// Whether `counter` was asked for again lately.
    fn was_asked(&self, counter: u64) -> bool {
        counter < self.asked_top
            && self
                .asked
                .iter()
                .any(|&(from, to)| (from..to).contains(&counter))
    }

    /// When rule 3 gives up the head gap, if every live path has passed it
    /// or, by the sender's word, never carried it.
    fn early_loss_at(&self, now: Instant) -> Option<Instant> {
        if self.live == 0 {
            return None;
        }
        let (next, head) = (self.next?, self.entries.get(self.ready_len)?.counter);
        let mut at: Option<Instant> = None;
        let mut mask = self.live;
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let p = &self.paths[i];
            if let Some(told) = p.not_carried(next, head) {
                at = Some(at.map_or(told, |a| a.max(told)));
                continue;
            }
            let (_, passed_at) = p.pass?;
            let mut slack = p.slack.value(now);
            if !p.slack_known(self.cfg.slack_learning) {
                slack = slack.max(UNMEASURED_SLACK);
            }
            // A due time past what an Instant can hold is never: that
            // path does not let the gap go early.
            let wait = slack.saturating_mul(SLACK_FACTOR).max(self.cfg.pass_wait);
            let due = passed_at.checked_add(wait)?;
            at = Some(at.map_or(due, |a| a.max(due)));
        }
        at
    }

    /// Rule 1's deadline of the gap below `head`; None when it lies past
    /// what an Instant can hold (then it never comes).
    fn deadline(&self, head: &Entry, now: Instant) -> Option<Instant> {
        head.since.checked_add(self.hold_at(now))
    }

    /// Until when the gap below `head` waits for its repair, if it was
    /// asked for: its repair wait (a round trip, which a hold shorter than
    /// that does not cut short), within the ceiling. Not the hold: the gap
    /// is known lost, and a repair that does not come within a round trip
    /// (the sender leaves congestion losses to the inner TCP) is not coming.
    fn repair_due(&self, head: &Entry) -> Option<Instant> {
        let next = self.next?;
        let &(_, _, due) = self
            .repairs
            .iter()
            .find(|&&(from, to, _)| (from..to).contains(&next))?;
        let latest = head.since.checked_add(self.cfg.hold_ceiling);
        Some(latest.map_or(due, |l| due.min(l)))
    }

    /// Whether a gap `from..to` may have been lost by a path whose losses
    /// the sender re-sends: some live path said to be repaired (or that
    /// said nothing) may have carried it.
    fn repairable(&self, from: u64, to: u64) -> bool {
        (0..MAX_PATHS).any(|i| {
            let p = &self.paths[i];
            self.live & (1 << i) != 0
                && p.repaired != Some(false)
                && p.not_carried(from, to).is_none()
        })
    }

    /// Whether every live path has passed the gap `from..to` by now, with
    /// no slack to wait for, or never carried it (rule 3 for a gap behind
    /// the head, asked for together with it).
    fn passed_by_all(&self, from: u64, to: u64, now: Instant) -> bool {
        (0..MAX_PATHS).all(|i| {
            let p = &self.paths[i];
            self.live & (1 << i) == 0
                || p.not_carried(from, to).is_some()
                || (p.highest.is_some_and(|h| h >= to)
                    && p.slack_known(self.cfg.slack_learning)
                    && p.slack.value(now).is_zero())
        })
    }

    /// Asks for the gap below the head (when rule 3 found it lost) and for
    /// every later gap rule 3 already finds lost, each waiting `wait` for
    /// its repair; gaps asked for before are not asked again, and no
    /// repaired path can have carried are not asked for at all. Looks at
    /// most `ASK_SCAN` held packets past the last gap asked for, so a
    /// window holding thousands costs little per packet while a repair is
    /// outstanding.
    fn ask_repairs(&mut self, now: Instant, wait: Duration, head_lost: bool) {
        let Some(next) = self.next else { return };
        let Some(due) = now.checked_add(wait) else {
            return;
        };
        self.repairs.retain(|&(_, to, _)| to > next);
        let start = self.repairs.back().map_or(next, |&(_, to, _)| to.max(next));
        let first = match self.held_position(start) {
            Ok(k) | Err(k) => k,
        };
        let mut from = if first == self.ready_len { next } else { start };
        let end = self.entries.len().min(first.saturating_add(ASK_SCAN));
        for k in first..end {
            let to = self.entries[k].counter;
            if to > from {
                let found_lost =
                    (k == self.ready_len && head_lost) || self.passed_by_all(from, to, now);
                if !found_lost {
                    break;
                }
                let known = self.repairs.iter().any(|&(f, t, _)| f <= from && to <= t);
                if !known && self.repairable(from, to) {
                    if self.repairs.len() == ASKED_LEN {
                        break;
                    }
                    self.repairs.push_back((from, to, due));
                    if self.repair_requests.len() < ASKED_LEN {
                        self.repair_requests.push_back((from, to));
                    }
                    self.asked[self.asked_next] = (from, to);
                    self.asked_next = (self.asked_next + 1) % ASKED_MEMORY;
                    self.asked_top = self.asked_top.max(to);
                    self.counters.repairs_asked = self.counters.repairs_asked.saturating_add(1);
                }
            }
            from = to.saturating_add(1);
        }
    }

    /// Gives up head gaps while they are due by `until` (rules 1 and 3),
    /// or asks for their repair (see *Repair*). The hold and the slacks are
    /// read at the window's clock, as [`poll_timeout`](Self::poll_timeout)
    /// reads them, so a gap it says is due goes.
    fn expire(&mut self, until: Instant) {
        let now = self.now.map_or(until, |clock| clock.max(until));
        while let Some(head) = self.entries.get(self.ready_len).copied() {
            let rule;
            if let Some(due) = self.repair_due(&head) {
                if due > until {
                    // Gaps behind it that rule 3 finds lost by now are
                    // asked for while this one waits, not after.
                    if let Some(wait) = self.repair_wait {
                        self.ask_repairs(now, wait, false);
                    }
                    break;
                }
                rule = GiveUpRule::Paths;
            } else {
                let rule1 = self.deadline(&head, now).is_some_and(|d| d <= until);
                let rule3 = self.early_loss_at(now).is_some_and(|at| at <= until);
                if !rule1 && !rule3 {
                    break;
                }
                if let (false, Some(wait), Some(next)) = (rule1, self.repair_wait, self.next) {
                    self.ask_repairs(now, wait, true);
                    if self
                        .repairs
                        .iter()
                        .any(|&(from, to, _)| (from..to).contains(&next))
                    {
                        continue;
                    }
                }
                rule = if rule1 {
                    GiveUpRule::Hold
                } else {
                    GiveUpRule::Paths
                };
            }
            self.give_up(now, head.counter, head.since, rule);
        }
    }
}

#[cfg(test)]
mod tests;
