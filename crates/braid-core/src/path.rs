//! Paths: the lines a peer is reached over. A path is a local line (the
//! socket of an interface or source address; line 0 is the main socket)
//! and a remote endpoint. Between braid peers every path is probed with
//! authenticated extension messages, so each knows its RTT, jitter, loss in
//! both directions and whether it is up; the peer's `Mode` decides which
//! paths carry each data packet.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

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
    /// Packets spread over live paths in proportion to what each carries.
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
    next_probe_seq: u32,
    /// Probes the peer reported receiving (cumulative), and when we read it.
    peer_rx_probes: u32,
    /// Probes received from the peer on this path (cumulative) and the
    /// highest sequence seen, for the reverse-direction loss.
    pub probes_received: u32,
    highest_probe_seq_received: Option<u32>,
    /// Recent echoes: bit i = echo for probe `next_probe_seq - 1 - i` came.
    echo_bits: u128,
    /// Aggregate mode: deficit in bytes (weighted round robin).
    pub deficit: i64,
    /// Aggregate mode: this path's share, recomputed only when a probe or
    /// an echo changes what it depends on (not per packet).
    weight: f64,
    /// Path MTU discovery on this path (braid peers only).
    pub pmtu: crate::pmtud::Pmtud,
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
            peer_rx_probes: 0,
            probes_received: 0,
            highest_probe_seq_received: None,
            echo_bits: 0,
            deficit: 0,
            weight: 1.0,
            pmtu: crate::pmtud::Pmtud::new(crate::pmtud::max_for_link(1500, remote.is_ipv6())),
        }
    }

    pub fn is_up(&self) -> bool {
        self.state == PathState::Up
    }

    /// An authenticated datagram arrived on this path.
    pub fn on_rx(&mut self, now: Instant, bytes: usize) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += bytes as u64;
        self.last_rx = Some(now);
    }

    pub fn on_tx(&mut self, bytes: usize) {
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += bytes as u64;
    }

    /// The next probe's sequence number.
    pub fn take_probe_seq(&mut self) -> u32 {
        let seq = self.next_probe_seq;
        self.next_probe_seq = self.next_probe_seq.wrapping_add(1);
        self.echo_bits <<= 1;
        self.counters.probes_sent += 1;
        self.weight = self.compute_weight();
        seq
    }

    /// The peer's probe `seq` arrived here; returns how many of its probes
    /// we have received so far (echoed so it can tell forward loss).
    pub fn on_probe(&mut self, seq: u32) -> u32 {
        self.probes_received = self.probes_received.wrapping_add(1);
        if self.highest_probe_seq_received.is_none_or(|h| seq > h) {
            self.highest_probe_seq_received = Some(seq);
        }
        self.probes_received
    }

    /// An echo of our probe `seq`, sent at `sent`, came back.
    pub fn on_echo(&mut self, now: Instant, seq: u32, sent: Instant, peer_rx_probes: u32) {
        self.counters.echoes_received += 1;
        self.peer_rx_probes = peer_rx_probes;
        let age = self.next_probe_seq.wrapping_sub(seq).wrapping_sub(1);
        if age < 128 {
            self.echo_bits |= 1 << age;
        }
        let rtt = now.saturating_duration_since(sent);
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        self.weight = self.compute_weight();
    }

    /// Share of traffic in aggregate mode: a line whose RTT has grown well
    /// above its minimum is queueing (full), so it gets less; so does a
    /// lossy one. 1.0 when idle; halves for every 20 ms of standing queue.
    fn compute_weight(&self) -> f64 {
        let queueing = match (self.srtt, self.min_rtt) {
            (Some(s), Some(m)) => s.saturating_sub(m).as_secs_f64(),
            _ => 0.0,
        };
        0.5f64.powf(queueing / 0.020) * (1.0 - self.loss()).max(0.05)
    }

    /// Round-trip probe loss over the recent window (excluding probes too
    /// young to have been answered), 0..=1.
    pub fn loss(&self) -> f64 {
        let sent = self.next_probe_seq.min(LOSS_WINDOW + 3);
        if sent <= 3 {
            return 0.0;
        }
        // The 3 newest probes may still be in flight.
        let window = (sent - 3).min(LOSS_WINDOW);
        let mask: u128 = ((1u128 << window) - 1) << 3;
        let answered = (self.echo_bits & mask).count_ones();
        1.0 - answered as f64 / window as f64
    }

    /// Loss of our probes on the way to the peer (from its reported count).
    pub fn forward_loss(&self) -> f64 {
        let sent = self.counters.probes_sent.saturating_sub(3) as f64;
        if sent <= 0.0 {
            return 0.0;
        }
        (1.0 - self.peer_rx_probes as f64 / sent).clamp(0.0, 1.0)
    }

    /// Loss of the peer's probes on the way to us.
    pub fn reverse_loss(&self) -> f64 {
        match self.highest_probe_seq_received {
            Some(h) if h > 0 => {
                (1.0 - self.probes_received as f64 / (h as f64 + 1.0)).clamp(0.0, 1.0)
            }
            _ => 0.0,
        }
    }

    /// Re-evaluates up/down at `now`; returns true when the state changed.
    pub fn update_state(&mut self, now: Instant) -> bool {
        let dead_after = (PATH_DEAD_AFTER + self.rttvar * 2).min(MAX_DEAD_AFTER);
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

/// Which paths carry the next packet: indices into the peer's paths.
/// Returns how many were written to `out`.
pub fn select(
    mode: Mode,
    paths: &mut [Path],
    packet_len: usize,
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
        Mode::Aggregate => {
            // Deficit round robin weighted by each path's estimated share.
            let weights = aggregate_weights(paths);
            // Pick the usable path with the largest deficit; top up deficits
            // by weight when none has credit left.
            let pick = (0..paths.len())
                .filter(|&i| usable(&paths[i]) && weights[i] > 0.0)
                .max_by_key(|&i| paths[i].deficit);
            let Some(mut i) = pick else { return 0 };
            if paths[i].deficit <= 0 {
                for (j, p) in paths.iter_mut().enumerate() {
                    p.deficit += (weights[j] * AGGREGATE_QUANTUM as f64) as i64;
                }
                i = (0..paths.len())
                    .filter(|&i| usable(&paths[i]) && weights[i] > 0.0)
                    .max_by_key(|&i| paths[i].deficit)
                    .expect("a usable path exists");
            }
            paths[i].deficit -= packet_len as i64;
            out[0] = i;
            1
        }
    }
}

/// Bytes of credit a weight of 1.0 earns per round.
const AGGREGATE_QUANTUM: usize = 64 * 1024;

/// Each path's current aggregate share.
fn aggregate_weights(paths: &[Path]) -> [f64; MAX_PATHS] {
    let mut w = [0.0; MAX_PATHS];
    for (i, p) in paths.iter().enumerate().take(MAX_PATHS) {
        w[i] = p.weight;
    }
    w
}
