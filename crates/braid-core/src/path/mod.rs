//! Paths: the lines a peer is reached over. A path is a local line (the
//! socket of an interface or source address; line 0 is the main socket)
//! and a remote endpoint. Between braid peers every path is probed with
//! authenticated extension messages, so each knows its RTT, jitter, loss in
//! both directions and whether it is up, and the echoes report what the
//! peer received on it, from which each side estimates the line's capacity
//! and delay (`estimate`); the peer's `Mode` decides which paths carry each
//! data packet (`schedule`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub mod estimate;
mod schedule;

pub use estimate::{Delivery, Inbound, Outbound};
pub use schedule::{earliest_small, select, LOSSY, MAX_BACKLOG};

/// Paths per peer (configured and learned together).
pub const MAX_PATHS: usize = 8;
/// How often each path is probed (20 small datagrams/s each way: the
/// price of noticing a dead line within a quarter second).
pub const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// A path with nothing authenticated received for this long (plus twice its
/// measured jitter, so a jittery line is not declared dead) is down.
pub const PATH_DEAD_AFTER: Duration = Duration::from_millis(200);
/// Jitter allowance is capped so a broken estimate cannot hide a dead line.
const MAX_DEAD_AFTER: Duration = Duration::from_secs(1);
/// A learned path that stayed down this long is forgotten.
pub const LEARNED_PATH_EXPIRY: Duration = Duration::from_secs(60);
/// Probe loss is measured over this many most recent probes.
pub const LOSS_WINDOW: u32 = 120;

/// How a peer's packets use its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every packet on every live path (the seed's dual-line).
    #[default]
    Redundant,
    /// One path at a time, in configured order; the next takes over when
    /// it dies.
    Failover,
    /// Each packet on the live path where it arrives first, by each
    /// line's measured capacity, queue and delay (see `schedule`).
    Aggregate,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Redundant => "redundant",
            Mode::Failover => "failover",
            Mode::Aggregate => "aggregate",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathState {
    /// Not yet probed (or the peer does not speak braid).
    Unknown,
    Up,
    Down,
}

/// Per-path counters for `braid show`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PathCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Data packets whose first copy arrived on this path.
    pub first_arrivals: u64,
    pub probes_sent: u64,
    pub echoes_received: u64,
    /// Authenticated data messages (and their bytes) received on this
    /// path, first copies or not: what the peer's data delivered here.
    pub data_rx_packets: u64,
    pub data_rx_bytes: u64,
    /// Data messages re-sent on this path because another lost them.
    pub resent: u64,
}

#[derive(Debug, Clone)]
pub struct Path {
    /// Configured name, or "learned".
    pub name: String,
    pub line: u16,
    pub remote: SocketAddr,
    /// From the config (kept when down) rather than learned from traffic.
    pub configured: bool,
    pub state: PathState,
    pub counters: PathCounters,
    pub last_rx: Option<Instant>,
    pub down_since: Option<Instant>,
    /// Smoothed RTT and its mean deviation (RFC 6298), from probe echoes.
    pub srtt: Option<Duration>,
    pub rttvar: Duration,
    pub min_rtt: Option<Duration>,
    /// Wraps after 2^32 probes (6.8 years at 20 a second): on the wire and
    /// in `on_echo` it is compared modulo 2^32.
    next_probe_seq: u32,
    /// How many bits of `echo_bits` stand for probes this path really sent
    /// (stops at `LOSS_WINDOW + 3`; unlike `next_probe_seq` it never wraps).
    probes_in_window: u32,
    /// Probes the peer reported receiving (cumulative, modulo 2^32 as the
    /// wire carries it), and when we read it.
    peer_rx_probes: u32,
    /// Probes received from the peer on this path (cumulative; the wire
    /// carries it modulo 2^32) and the highest sequence seen (compared
    /// modulo 2^32), for the reverse-direction loss.
    pub probes_received: u64,
    highest_probe_seq_received: Option<u32>,
    /// Recent echoes: bit i = echo for probe `next_probe_seq - 1 - i` came.
    echo_bits: u128,
    /// When data from the peer last arrived here.
    pub last_data_rx: Option<Instant>,
    /// The line towards the peer: capacity, queue, loss (from echoes).
    pub outbound: Outbound,
    /// The line from the peer: the delay of its probes.
    pub inbound: Inbound,
    /// Path MTU discovery on this path (braid peers only).
    pub pmtu: crate::pmtud::Pmtud,
    /// The peer's index for this path (what its probes and hellos carry),
    /// so its `Sent` reports can be read against ours.
    pub peer_index: Option<u8>,
    /// The latest data counter sent on this path: (local index of the
    /// session, counter), for our `Sent` reports.
    pub assigned: Option<(u32, u64)>,
}

impl Path {
    pub fn new(name: &str, line: u16, remote: SocketAddr, configured: bool) -> Path {
        Path {
            name: name.to_string(),
            line,
            remote,
            configured,
            state: PathState::Unknown,
            counters: PathCounters::default(),
            last_rx: None,
            down_since: None,
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: None,
            next_probe_seq: 0,
            probes_in_window: 0,
            peer_rx_probes: 0,
            probes_received: 0,
            highest_probe_seq_received: None,
            echo_bits: 0,
            last_data_rx: None,
            outbound: Outbound::default(),
            inbound: Inbound::default(),
            pmtu: crate::pmtud::Pmtud::new(crate::pmtud::max_for_link(1500, remote.is_ipv6())),
            peer_index: None,
            assigned: None,
        }
    }

    pub fn is_up(&self) -> bool {
        self.state == PathState::Up
    }

    /// An authenticated datagram arrived on this path.
    pub fn on_rx(&mut self, now: Instant, bytes: usize) {
        self.counters.rx_packets = self.counters.rx_packets.saturating_add(1);
        self.counters.rx_bytes = self.counters.rx_bytes.saturating_add(bytes as u64);
        self.last_rx = Some(now);
    }

    /// An authenticated data message (`bytes` long) arrived here.
    pub fn on_data_rx(&mut self, now: Instant, bytes: usize) {
        let c = &mut self.counters;
        c.data_rx_packets = c.data_rx_packets.saturating_add(1);
        c.data_rx_bytes = c.data_rx_bytes.saturating_add(bytes as u64);
        self.last_data_rx = Some(now);
    }

    /// Whether data from the peer arrived here within `recent`.
    pub fn carries_data(&self, now: Instant, recent: Duration) -> bool {
        self.last_data_rx
            .is_some_and(|t| now.saturating_duration_since(t) < recent)
    }

    /// What the peer is told in an echo about this path's deliveries.
    pub fn delivery(&self, received_us: u64) -> Delivery {
        Delivery {
            received_us,
            data_bytes: self.counters.data_rx_bytes,
            data_packets: self.counters.data_rx_packets,
        }
    }

    pub fn on_tx(&mut self, bytes: usize) {
        self.counters.tx_packets = self.counters.tx_packets.saturating_add(1);
        self.counters.tx_bytes = self.counters.tx_bytes.saturating_add(bytes as u64);
    }

    /// The next probe's sequence number, for a probe leaving at `now`.
    pub fn take_probe_seq_at(&mut self, now: Instant) -> u32 {
        let seq = self.take_probe_seq();
        self.outbound
            .on_probe_sent(now, seq, self.counters.tx_packets);
        seq
    }

    /// The next probe's sequence number.
    pub fn take_probe_seq(&mut self) -> u32 {
        let seq = self.next_probe_seq;
        self.next_probe_seq = self.next_probe_seq.wrapping_add(1);
        self.probes_in_window = (self.probes_in_window + 1).min(LOSS_WINDOW + 3);
        self.echo_bits <<= 1;
        self.counters.probes_sent = self.counters.probes_sent.saturating_add(1);
        seq
    }

    /// The peer's probe `seq` arrived here; returns how many of its probes
    /// we have received so far, modulo 2^32 as the wire carries it (echoed
    /// so it can tell forward loss).
    pub fn on_probe(&mut self, seq: u32) -> u32 {
        self.probes_received = self.probes_received.saturating_add(1);
        // Serial-number order (RFC 1982): the peer's 32-bit sequence wraps,
        // and a stray u32::MAX must not pin the highest forever.
        if self
            .highest_probe_seq_received
            .is_none_or(|h| seq_newer(seq, h))
        {
            self.highest_probe_seq_received = Some(seq);
        }
        self.probes_received as u32
    }

    /// An echo of our probe `seq`, sent at `sent`, came back.
    pub fn on_echo(&mut self, now: Instant, seq: u32, sent: Instant, peer_rx_probes: u32) {
        self.counters.echoes_received = self.counters.echoes_received.saturating_add(1);
        self.peer_rx_probes = peer_rx_probes;
        // Modulo 2^32: probe numbers wrap. An echo of a probe we have not
        // sent yet (or of one sent before the last 2^31) answers nothing.
        let age = self.next_probe_seq.wrapping_sub(seq).wrapping_sub(1);
        if age >= 1 << 31 {
            return;
        }
        if age < 128 {
            self.echo_bits |= 1 << age;
        }
        // A timestamp later than now measures no round trip (a zero sample
        // would stick in min_rtt).
        if sent <= now {
            self.rtt_sample(now - sent);
        }
    }

    fn rtt_sample(&mut self, rtt: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        // Saturating: an echoed timestamp from long ago makes a huge RTT,
        // and 7 * srtt must not overflow Duration.
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = self.rttvar.saturating_mul(3).saturating_add(diff) / 4;
                self.srtt = Some(srtt.saturating_mul(7).saturating_add(rtt) / 8);
            }
        }
    }

    /// Round-trip probe loss over the recent window (excluding probes too
    /// young to have been answered), 0..=1.
    pub fn loss(&self) -> f64 {
        let sent = self.probes_in_window;
        if sent <= 3 {
            return 0.0;
        }
        // The 3 newest probes may still be in flight.
        let window = (sent - 3).min(LOSS_WINDOW);
        let mask: u128 = ((1u128 << window) - 1) << 3;
        let answered = (self.echo_bits & mask).count_ones();
        1.0 - answered as f64 / window as f64
    }

    /// What the line loses of its own (not from a full queue): the data
    /// loss measured while it was not near full, or, before enough data
    /// went on it, its probes' loss while it was not near full. Until
    /// enough of either was seen (the first second of a path, or a peer
    /// that reports no deliveries), all its probe loss: a lossy line left
    /// unrepaired at the start costs the inner TCP its window, a clean one
    /// taken for lossy only a few re-sends.
    pub fn own_loss(&self) -> f64 {
        self.outbound
            .loss_if_known()
            .or_else(|| self.outbound.quiet_probe_loss_if_known())
            .unwrap_or_else(|| self.loss())
    }

    /// Loss of our probes on the way to the peer (from its reported count).
    pub fn forward_loss(&self) -> f64 {
        let sent = self.counters.probes_sent.saturating_sub(3);
        // The peer's count comes modulo 2^32: so does the difference, read
        // as signed so a count that is ahead of ours (a restarted or lying
        // peer) means no loss rather than a wrapped-around one.
        let lost = (sent as u32).wrapping_sub(self.peer_rx_probes) as i32;
        if sent == 0 || lost <= 0 {
            return 0.0;
        }
        (f64::from(lost) / sent as f64).min(1.0)
    }

    /// Loss of the peer's probes on the way to us.
    pub fn reverse_loss(&self) -> f64 {
        let Some(h) = self.highest_probe_seq_received else {
            return 0.0;
        };
        // The peer numbers its probes from 0, modulo 2^32: it sent h + 1
        // (modulo 2^32), so the missing ones are that less what arrived, in
        // the same arithmetic and read as signed (duplicates or a peer that
        // started over make it negative: no loss).
        let lost = h.wrapping_add(1).wrapping_sub(self.probes_received as u32) as i32;
        if lost <= 0 {
            return 0.0;
        }
        let lost = f64::from(lost);
        lost / (lost + self.probes_received as f64)
    }

    /// Re-evaluates up/down at `now`; returns true when the state changed.
    pub fn update_state(&mut self, now: Instant) -> bool {
        // Saturating: rttvar follows echoed timestamps, which may be absurd.
        let dead_after = PATH_DEAD_AFTER
            .saturating_add(self.rttvar.saturating_mul(2))
            .min(MAX_DEAD_AFTER);
        let alive = self
            .last_rx
            .is_some_and(|t| now.saturating_duration_since(t) < dead_after);
        let new = if alive {
            PathState::Up
        } else if self.last_rx.is_some() || self.counters.probes_sent > 3 {
            PathState::Down
        } else {
            PathState::Unknown
        };
        if new == self.state {
            return false;
        }
        self.down_since = (new == PathState::Down).then_some(now);
        self.state = new;
        true
    }

    /// One-way delay estimate (half the smoothed RTT).
    pub fn one_way_delay(&self) -> Option<Duration> {
        self.srtt.map(|r| r / 2)
    }
}

/// Whether 32-bit sequence number `a` comes after `b` (RFC 1982 serial
/// arithmetic: wrapping is the intended semantics).
fn seq_newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests;
