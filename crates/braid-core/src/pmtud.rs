//! Path MTU discovery for one path without ICMP (RFC 8899, DPLPMTUD):
//! authenticated probes padded to a target size travel between braid peers
//! and are acknowledged; a size whose `MAX_PROBES` probes all go unanswered
//! does not fit the path. While searching, a size's probes go out as one
//! burst (one per `poll`), so a single timeout decides; the size in use is
//! confirmed with one probe at a time.
//!
//! Sizes here are *inner* MTUs: the largest IP packet the tunnel can carry
//! over this path (a probe for size `m` is a datagram of `m + 32` bytes,
//! exactly as big as a data message carrying an `m`-byte packet).
//!
//! ```text
//!   Base ──ack──► Search ──converged──► SearchComplete ──raise timer──► Search
//!    │ MAX_PROBES lost                     │ confirmation lost MAX_PROBES times
//!    ▼                                     ▼ (a black hole)
//!   Error (carry MIN, search below base) ◄─ Base again, carrying MIN meanwhile
//! ```
//!
//! Sans-IO: the owner calls [`Pmtud::poll`] now and then (the device does so
//! on its path-probe timer) and sends what it returns; [`Pmtud::on_ack`]
//! feeds the answers back.

use std::time::{Duration, Instant};

/// Bytes a WireGuard data message adds to the packet it carries (type,
/// receiver, counter; AEAD tag).
pub const WG_OVERHEAD: usize = 32;
/// Outer UDP header plus IPv4 / IPv6 header.
pub const UDP_IPV4_OVERHEAD: usize = 8 + 20;
pub const UDP_IPV6_OVERHEAD: usize = 8 + 40;
/// The smallest tunnel MTU braid falls back to: IPv6's minimum link MTU,
/// so the tunnel can always carry IPv6.
pub const MIN_PLPMTU: usize = 1280;
/// The smallest size searched for a peer that joins fragments (see
/// `set_floor`): the least a fragment's data message carries.
pub const MIN_FRAGMENTED: usize = crate::fragment::MIN_PAYLOAD;
/// Where the search starts: WireGuard's default tunnel MTU (a 1500-byte
/// line minus the 80 bytes of IPv6 + UDP + WireGuard).
pub const BASE_PLPMTU: usize = 1420;
/// The largest UDP payload there is: an IP packet is at most 65 535 bytes
/// (IPv4 counts its header in that, IPv6 only its payload; both are held
/// to the IPv4 figure, so one limit serves either family).
pub const MAX_UDP_PAYLOAD: usize = 65535 - UDP_IPV4_OVERHEAD;
/// The largest tunnel MTU searched for: the largest inner packet one UDP
/// datagram carries (65 475; a line of that MTU is loopback's, or a
/// jumbo one beyond 9000).
pub const MAX_PLPMTU: usize = MAX_UDP_PAYLOAD - WG_OVERHEAD;
/// Unanswered probes in a row after which a size counts as not fitting.
pub const MAX_PROBES: u8 = 3;
/// How long a probe waits for its acknowledgement, at least and at most
/// (between the two: twice the RTT plus four deviations).
pub const PROBE_TIMEOUT_MIN: Duration = Duration::from_millis(150);
pub const PROBE_TIMEOUT_MAX: Duration = Duration::from_secs(1);
/// Once the search is complete, the current size is confirmed this often:
/// a line that starts dropping big datagrams is noticed within about this
/// time plus `MAX_PROBES` timeouts.
pub const CONFIRM_INTERVAL: Duration = Duration::from_secs(1);
/// After this long at a size below the ceiling, search upwards again (RFC
/// 8899's PMTU_RAISE_TIMER; shorter than its 600 s because probes between
/// braid peers cost a few datagrams, nothing else). The size that failed
/// last is tried first: a limit that is still there costs one burst.
pub const RAISE_INTERVAL: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmtuState {
    /// Not started: the peer has not shown that it speaks braid.
    Disabled,
    /// Confirming that the base size fits.
    Base,
    /// Looking for the largest size between what fits and what does not.
    Search,
    /// Done; confirming the size now and then, searching up later.
    SearchComplete,
    /// Even the base size did not fit: carrying the minimum while searching
    /// below the base.
    Error,
}

impl PmtuState {
    pub fn name(self) -> &'static str {
        match self {
            PmtuState::Disabled => "disabled",
            PmtuState::Base => "base",
            PmtuState::Search => "search",
            PmtuState::SearchComplete => "complete",
            PmtuState::Error => "error",
        }
    }
}

/// A probe to send: pad it so the datagram is `size + WG_OVERHEAD` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeRequest {
    pub seq: u32,
    pub size: usize,
}

/// Probes out for one size: sequence numbers `first_seq..first_seq + sent`.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    first_seq: u32,
    size: usize,
    sent: u8,
    /// How many go out, one per `poll`, before waiting.
    burst: u8,
    /// When the newest one counts as lost.
    deadline: Instant,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PmtuCounters {
    pub probes_sent: u64,
    pub probes_acked: u64,
    pub probes_lost: u64,
    /// Times the confirmed size stopped getting through.
    pub black_holes: u64,
}

/// Path MTU discovery state of one path.
#[derive(Debug, Clone)]
pub struct Pmtud {
    state: PmtuState,
    /// What data may use now.
    plpmtu: usize,
    /// The largest size this path's line could carry (from its local MTU,
    /// capped by the largest worth searching), as given, and as searched:
    /// clamped to `floor..=MAX_PLPMTU`.
    line_max: usize,
    /// Whether `line_max` came from the line (`set_max`), not from the
    /// assumption `new` starts with.
    line_told: bool,
    max: usize,
    /// The smallest size searched for and carried: `MIN_PLPMTU`, or less
    /// for a peer that joins fragments (`set_floor`).
    floor: usize,
    /// Largest size known to fit, and smallest known not to (`max + 1`
    /// when nothing above `low` failed). Every size here lies within
    /// `floor..=MAX_PLPMTU + 1` (`max` is clamped), so sums of them
    /// cannot overflow.
    low: usize,
    high: usize,
    outstanding: Option<Outstanding>,
    /// Unanswered probes in a row at the size being probed (a size that
    /// is being searched gets `MAX_PROBES` at once, so one burst decides;
    /// a confirmation is a single probe, repeated only when it is lost).
    lost_in_row: u8,
    next_probe_at: Option<Instant>,
    raise_at: Option<Instant>,
    /// Searching up after the raise timer: the size that failed last is
    /// tried first, so a limit that is still there costs one burst.
    recheck_high: bool,
    next_seq: u32,
    pub counters: PmtuCounters,
}

impl Pmtud {
    /// `max`: the largest inner size the local line allows (see
    /// [`max_for_link`]).
    pub fn new(line_max: usize) -> Pmtud {
        let max = line_max.clamp(MIN_PLPMTU, MAX_PLPMTU);
        Pmtud {
            state: PmtuState::Disabled,
            plpmtu: BASE_PLPMTU.min(max),
            line_max,
            line_told: false,
            max,
            floor: MIN_PLPMTU,
            low: MIN_PLPMTU,
            high: max + 1,
            outstanding: None,
            lost_in_row: 0,
            next_probe_at: None,
            raise_at: None,
            recheck_high: false,
            next_seq: 0,
            counters: PmtuCounters::default(),
        }
    }

    pub fn state(&self) -> PmtuState {
        self.state
    }

    /// The tunnel MTU this path carries now.
    pub fn plpmtu(&self) -> usize {
        self.plpmtu
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// The largest size the local line allows, below the floor too (a
    /// stock WireGuard peer's packets are held to it); `None` until the
    /// line's MTU was looked up (`set_max`).
    pub fn line_max(&self) -> Option<usize> {
        self.line_told.then_some(self.line_max)
    }

    /// Lets the search go below `MIN_PLPMTU`, down to `floor` (at least
    /// [`MIN_FRAGMENTED`]): the peer joins fragments, so a line that
    /// cannot carry 1280 bytes still carries the tunnel's packets in
    /// pieces, as big as the line allows. Raising it again is not done
    /// (a peer that joined fragments in one session does in the next).
    pub fn set_floor(&mut self, now: Instant, floor: usize) {
        let floor = floor.clamp(MIN_FRAGMENTED, MIN_PLPMTU);
        if floor >= self.floor {
            return;
        }
        self.floor = floor;
        if matches!(
            self.state,
            PmtuState::Disabled | PmtuState::Base | PmtuState::Error
        ) {
            self.low = self.low.min(floor);
        }
        if self.state == PmtuState::Error {
            // It carried the old floor, which did not fit.
            self.plpmtu = self.plpmtu.min(floor);
        }
        // A line below the old floor is the ceiling now; what failed above
        // it stays known.
        let max = self.line_max.clamp(floor, MAX_PLPMTU);
        if max < self.max {
            self.max = max;
            self.plpmtu = self.plpmtu.min(max);
            self.low = self.low.min(max);
            self.high = self.high.min(max + 1);
            if self.outstanding.is_some_and(|o| o.size > max) {
                self.outstanding = None;
                self.lost_in_row = 0;
            }
            if self.state == PmtuState::SearchComplete && self.low < max {
                self.enter_search(now);
            }
        }
    }

    /// (largest size that fit, smallest that did not — `None` when nothing
    /// up to the ceiling failed).
    pub fn bounds(&self) -> (usize, Option<usize>) {
        (self.low, (self.high <= self.max).then_some(self.high))
    }

    /// The size a probe is out for now, if any.
    pub fn probing(&self) -> Option<usize> {
        self.outstanding.map(|o| o.size)
    }

    /// The local line's MTU changed: a new ceiling (a lower one cuts the
    /// current size at once; a higher one is searched for).
    pub fn set_max(&mut self, now: Instant, line_max: usize) {
        let max = line_max.clamp(self.floor, MAX_PLPMTU);
        let unchanged = max == self.max;
        self.line_max = line_max;
        self.line_told = true;
        if unchanged {
            return;
        }
        self.max = max;
        self.plpmtu = self.plpmtu.min(max);
        self.low = self.low.min(max);
        self.high = max + 1;
        if self.outstanding.is_some_and(|o| o.size > max) {
            self.outstanding = None;
            self.lost_in_row = 0;
        }
        if self.state == PmtuState::SearchComplete && self.low < max {
            self.enter_search(now);
        }
    }

    /// Starts (or restarts) discovery: the peer speaks braid over a session.
    pub fn start(&mut self, now: Instant) {
        if self.state != PmtuState::Disabled {
            return;
        }
        self.state = PmtuState::Base;
        self.outstanding = None;
        self.lost_in_row = 0;
        self.next_probe_at = Some(now);
    }

    /// When `poll` has something to do next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.outstanding {
            Some(o) => Some(o.deadline),
            None => [self.next_probe_at, self.raise_at]
                .into_iter()
                .flatten()
                .min(),
        }
    }

    /// Expires a late probe and returns the next one to send, if one is due.
    /// `path_up`: small probes get through (while they do not, losses say
    /// nothing about size and are not counted). `timeout`: how long this
    /// probe may take (see [`probe_timeout`]; never more than
    /// `PROBE_TIMEOUT_MAX`).
    pub fn poll(&mut self, now: Instant, path_up: bool, timeout: Duration) -> Option<ProbeRequest> {
        if self.state == PmtuState::Disabled {
            return None;
        }
        // Bounded, so `now + timeout` cannot overflow whatever is passed.
        let timeout = timeout.min(PROBE_TIMEOUT_MAX);
        if !path_up {
            self.outstanding = None;
            self.lost_in_row = 0;
            return None;
        }
        if let Some(mut o) = self.outstanding {
            if o.sent < o.burst {
                // Sequence numbers wrap (acks are matched modulo 2^32).
                let seq = o.first_seq.wrapping_add(u32::from(o.sent));
                o.sent += 1; // < burst <= MAX_PROBES
                o.deadline = now + timeout;
                self.outstanding = Some(o);
                self.next_seq = seq.wrapping_add(1);
                self.counters.probes_sent = self.counters.probes_sent.saturating_add(1);
                return Some(ProbeRequest { seq, size: o.size });
            }
            if now < o.deadline {
                return None;
            }
            self.outstanding = None;
            self.on_lost(now, o.size, o.sent);
        }
        if self.state == PmtuState::SearchComplete && self.raise_at.is_some_and(|t| now >= t) {
            self.raise_at = None;
            if self.low < self.max {
                self.state = PmtuState::Search;
                self.recheck_high = true;
                self.lost_in_row = 0;
                self.next_probe_at = Some(now);
            }
        }
        if self.next_probe_at.is_none_or(|t| now < t) {
            return None;
        }
        let size = self.next_size();
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let burst = if self.state == PmtuState::SearchComplete {
            1
        } else {
            // lost_in_row < MAX_PROBES (on_lost resets it on reaching it);
            // saturating so a broken invariant sends one probe, not 255.
            MAX_PROBES.saturating_sub(self.lost_in_row).max(1)
        };
        self.outstanding = Some(Outstanding {
            first_seq: seq,
            size,
            sent: 1,
            burst,
            deadline: now + timeout,
        });
        self.counters.probes_sent = self.counters.probes_sent.saturating_add(1);
        Some(ProbeRequest { seq, size })
    }

    /// The peer acknowledged probe `seq` of `size` bytes.
    pub fn on_ack(&mut self, now: Instant, seq: u32, size: usize) {
        let Some(o) = self.outstanding else { return };
        // Modulo 2^32: the burst may straddle the wrap of the sequence; any
        // other seq (a late answer, or whatever a peer makes up) is no
        // answer to what is out.
        if seq.wrapping_sub(o.first_seq) >= u32::from(o.sent) || o.size != size {
            return; // a late answer to a probe already counted as lost
        }
        self.outstanding = None;
        self.lost_in_row = 0;
        self.recheck_high = false;
        self.counters.probes_acked = self.counters.probes_acked.saturating_add(1);
        self.next_probe_at = Some(now);
        match self.state {
            PmtuState::Disabled => {}
            PmtuState::Base | PmtuState::Search | PmtuState::Error => {
                self.low = self.low.max(size);
                if self.high <= self.low {
                    self.high = self.max + 1;
                }
                self.plpmtu = self.low;
                self.state = PmtuState::Search;
                if self.high <= self.low + 1 {
                    self.complete(now);
                }
            }
            PmtuState::SearchComplete => {
                self.next_probe_at = Some(now + CONFIRM_INTERVAL);
            }
        }
    }

    fn on_lost(&mut self, now: Instant, size: usize, probes: u8) {
        self.counters.probes_lost = self.counters.probes_lost.saturating_add(u64::from(probes));
        self.lost_in_row = self.lost_in_row.saturating_add(probes);
        self.next_probe_at = Some(now);
        if self.lost_in_row < MAX_PROBES {
            return;
        }
        self.lost_in_row = 0;
        self.recheck_high = false;
        match self.state {
            PmtuState::Disabled => {}
            PmtuState::Base => {
                // Even WireGuard's default does not fit: carry the minimum
                // and look for something between it and the base.
                self.state = PmtuState::Error;
                self.low = self.floor;
                self.high = size;
                self.plpmtu = self.floor;
                if self.high <= self.low + 1 {
                    self.complete(now);
                }
            }
            PmtuState::Search | PmtuState::Error => {
                self.high = self.high.min(size);
                if size <= self.low {
                    // What was confirmed fails now: start over below it.
                    self.black_hole(size);
                } else if self.high <= self.low + 1 {
                    self.complete(now);
                }
            }
            PmtuState::SearchComplete => {
                self.counters.black_holes = self.counters.black_holes.saturating_add(1);
                self.black_hole(size);
            }
        }
    }

    /// `size` stopped getting through: carry the minimum at once, then
    /// find what fits from the base (or below it) upwards.
    fn black_hole(&mut self, size: usize) {
        self.plpmtu = self.floor;
        self.low = self.floor;
        self.high = size.max(self.floor + 1);
        self.raise_at = None;
        self.state = if size > BASE_PLPMTU.min(self.max) {
            PmtuState::Base
        } else {
            PmtuState::Error
        };
    }

    fn complete(&mut self, now: Instant) {
        self.state = PmtuState::SearchComplete;
        self.plpmtu = self.low;
        self.next_probe_at = Some(now + CONFIRM_INTERVAL);
        self.raise_at = (self.low < self.max).then_some(now + RAISE_INTERVAL);
    }

    fn enter_search(&mut self, now: Instant) {
        self.state = PmtuState::Search;
        self.high = self.max + 1;
        self.recheck_high = false;
        self.lost_in_row = 0;
        self.next_probe_at = Some(now);
    }

    /// The size the next probe tries.
    fn next_size(&self) -> usize {
        match self.state {
            PmtuState::Base => BASE_PLPMTU.min(self.max),
            PmtuState::SearchComplete => self.plpmtu,
            _ if self.recheck_high => self.high,
            // Nothing above `low` failed yet: try the ceiling first (a
            // clean line is done in one round trip), then halve the gap.
            _ if self.high > self.max => self.max,
            // high > low here (a search stops when they meet); saturating
            // so a broken invariant probes `low` rather than wrapping.
            _ => self.low + self.high.saturating_sub(self.low) / 2,
        }
    }
}

/// The largest inner size a local line of MTU `link_mtu` carries to a
/// remote of this address family.
pub fn max_for_link(link_mtu: usize, ipv6_outer: bool) -> usize {
    let outer = if ipv6_outer {
        UDP_IPV6_OVERHEAD
    } else {
        UDP_IPV4_OVERHEAD
    };
    // Loopback's 65 536 carries no datagram bigger than UDP allows.
    link_mtu
        .saturating_sub(outer)
        .min(MAX_UDP_PAYLOAD)
        .saturating_sub(WG_OVERHEAD)
}

/// How long to wait for a probe's acknowledgement on a path with this
/// smoothed RTT and deviation.
pub fn probe_timeout(srtt: Option<Duration>, rttvar: Duration) -> Duration {
    match srtt {
        // Saturating: both follow timestamps a peer echoes.
        Some(s) => s
            .saturating_mul(2)
            .saturating_add(rttvar.saturating_mul(4))
            .clamp(PROBE_TIMEOUT_MIN, PROBE_TIMEOUT_MAX),
        None => PROBE_TIMEOUT_MAX,
    }
}

#[cfg(test)]
mod tests;
