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
            probes_in_window: 0,
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
        self.counters.rx_packets = self.counters.rx_packets.saturating_add(1);
        self.counters.rx_bytes = self.counters.rx_bytes.saturating_add(bytes as u64);
        self.last_rx = Some(now);
    }

    pub fn on_tx(&mut self, bytes: usize) {
        self.counters.tx_packets = self.counters.tx_packets.saturating_add(1);
        self.counters.tx_bytes = self.counters.tx_bytes.saturating_add(bytes as u64);
    }

    /// The next probe's sequence number.
    pub fn take_probe_seq(&mut self) -> u32 {
        let seq = self.next_probe_seq;
        self.next_probe_seq = self.next_probe_seq.wrapping_add(1);
        self.probes_in_window = (self.probes_in_window + 1).min(LOSS_WINDOW + 3);
        self.echo_bits <<= 1;
        self.counters.probes_sent = self.counters.probes_sent.saturating_add(1);
        self.weight = self.compute_weight();
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
        self.weight = self.compute_weight();
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

    /// Share of traffic in aggregate mode: a line whose RTT has grown well
    /// above its minimum is queueing (full), so it gets less; so does a
    /// lossy one. 1.0 when idle; halves for every 20 ms of standing queue.
    /// Never below `MIN_WEIGHT`: with some 20 s of queueing (or an absurd
    /// echoed timestamp) the power underflows to zero, and a path of weight
    /// zero would never be chosen (every path at zero would silence the
    /// peer).
    fn compute_weight(&self) -> f64 {
        let queueing = match (self.srtt, self.min_rtt) {
            (Some(s), Some(m)) => s.saturating_sub(m).as_secs_f64(),
            _ => 0.0,
        };
        (0.5f64.powf(queueing / 0.020) * (1.0 - self.loss()).max(0.05)).max(MIN_WEIGHT)
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
                .filter(|&i| usable(&paths[i]))
                .max_by_key(|&i| paths[i].deficit);
            let Some(mut i) = pick else { return 0 };
            if paths[i].deficit <= 0 {
                // Shares relative to the largest usable weight, so a round
                // always gives some path a whole quantum however small the
                // weights are (the proportions are the same). Only usable
                // paths earn credit: one that is down does not hoard it for
                // when it comes back.
                let top = (0..paths.len())
                    .filter(|&j| usable(&paths[j]))
                    .map(|j| weights[j])
                    .fold(MIN_WEIGHT, f64::max);
                for j in 0..paths.len() {
                    if usable(&paths[j]) {
                        let credit = (weights[j] / top * AGGREGATE_QUANTUM as f64) as i64;
                        paths[j].deficit = paths[j].deficit.saturating_add(credit);
                    }
                }
                i = (0..paths.len())
                    .filter(|&i| usable(&paths[i]))
                    .max_by_key(|&i| paths[i].deficit)
                    .expect("a usable path exists");
            }
            // A top-up happens only once every usable deficit is spent, so
            // deficits stay within a quantum of zero; the floor keeps it so
            // for packets larger than a quantum too.
            let cost = i64::try_from(packet_len).unwrap_or(i64::MAX);
            paths[i].deficit = paths[i]
                .deficit
                .saturating_sub(cost)
                .max(-AGGREGATE_QUANTUM);
            out[0] = i;
            1
        }
    }
}

/// Bytes of credit the path of the largest weight earns per round.
const AGGREGATE_QUANTUM: i64 = 64 * 1024;
/// The smallest share a path has in aggregate mode (see `compute_weight`).
const MIN_WEIGHT: f64 = 1e-9;

/// Each path's current aggregate share.
fn aggregate_weights(paths: &[Path]) -> [f64; MAX_PATHS] {
    let mut w = [0.0; MAX_PATHS];
    for (i, p) in paths.iter().enumerate().take(MAX_PATHS) {
        w[i] = p.weight;
    }
    w
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;
    use crate::test_time::end_of_time;

    fn path() -> Path {
        Path::new("test", 0, "198.18.0.1:51820".parse().unwrap(), true)
    }

    #[test]
    fn echoed_timestamps_from_the_dawn_of_time_saturate() {
        let t0 = Instant::now();
        let far = end_of_time(t0);
        let mut p = path();
        for _ in 0..3 {
            let seq = p.take_probe_seq();
            // The peer echoes the oldest timestamp there is, seen at the
            // latest instant there is: an RTT of centuries, 7 * srtt beyond
            // Duration.
            p.on_echo(far, seq, t0, 1);
        }
        let srtt = p.srtt.expect("sampled");
        assert!(srtt >= (far - t0) / 8, "{srtt:?}");
        p.on_rx(far, 100);
        assert!(p.update_state(far));
        assert!(
            p.is_up(),
            "the dead-after allowance is capped, not overflowed"
        );
        assert!(p.weight >= MIN_WEIGHT && p.weight.is_finite());
        assert!(crate::pmtud::probe_timeout(p.srtt, p.rttvar) <= crate::pmtud::PROBE_TIMEOUT_MAX);
    }

    #[test]
    fn echoes_of_unsent_probes_or_from_the_future_measure_nothing() {
        let now = Instant::now() + Duration::from_secs(10);
        let mut p = path();
        for _ in 0..5 {
            p.take_probe_seq();
        }
        // (case, seq): probes not sent yet, however far ahead.
        for (case, seq) in [(1, 5u32), (2, 100), (3, 5 + (1 << 31) - 1)] {
            p.on_echo(now, seq, now - Duration::from_millis(1), 5);
            assert_eq!((p.srtt, p.echo_bits), (None, 0), "case {case}");
        }
        // A sent probe echoed with a timestamp later than now: it was
        // answered, but there is no round trip to learn from.
        p.on_echo(now, 4, now + Duration::from_secs(1), 5);
        assert_eq!((p.srtt, p.min_rtt, p.echo_bits), (None, None, 1));
        p.on_echo(now, 3, now - Duration::from_millis(20), 5);
        assert_eq!(p.srtt, Some(Duration::from_millis(20)));
        assert_eq!(p.counters.echoes_received, 5);
    }

    #[test]
    fn loss_window_survives_the_probe_sequence_wrapping() {
        let now = Instant::now();
        let mut p = path();
        p.next_probe_seq = u32::MAX - 9;
        let seqs: Vec<u32> = (0..20).map(|_| p.take_probe_seq()).collect();
        assert_eq!(seqs[9], u32::MAX);
        assert_eq!(seqs[10], 0);
        // Only the ten probes before the wrap are answered: 7 of the 17
        // probes old enough to count are lost, wherever the wrap falls.
        for &s in &seqs[..10] {
            p.on_echo(now, s, now, 20);
        }
        assert!((p.loss() - 7.0 / 17.0).abs() < 1e-12, "{}", p.loss());
        for &s in &seqs[10..] {
            p.on_echo(now, s, now, 20);
        }
        assert_eq!(p.loss(), 0.0);
    }

    #[test]
    fn reverse_loss_counts_modulo_2_32_and_ignores_wild_jumps() {
        let mut p = path();
        // 2^32 - 5 probes received without loss so far, then the peer's
        // sequence wraps; one probe (seq 0) is lost.
        p.probes_received = u64::from(u32::MAX) - 4;
        p.highest_probe_seq_received = Some(u32::MAX - 5);
        for seq in (u32::MAX - 4..=u32::MAX).chain(1..=4) {
            p.on_probe(seq);
        }
        assert_eq!(p.highest_probe_seq_received, Some(4));
        let want = 1.0 / (1.0 + p.probes_received as f64);
        assert!(
            (p.reverse_loss() - want).abs() < 1e-18,
            "{}",
            p.reverse_loss()
        );

        // A fresh path: ten probes, then one numbered u32::MAX (far behind
        // in serial order) must not make everything look lost.
        let mut p = path();
        for seq in 0..10 {
            p.on_probe(seq);
        }
        assert_eq!(p.on_probe(u32::MAX), 11);
        assert_eq!(p.highest_probe_seq_received, Some(9));
        assert_eq!(p.reverse_loss(), 0.0);
        // A jump forward by almost 2^31 is taken at its word, within 0..=1.
        p.on_probe((1 << 31) - 1);
        let l = p.reverse_loss();
        assert!(l > 0.99 && l <= 1.0, "{l}");
    }

    #[test]
    fn forward_loss_reads_the_peers_count_modulo_2_32() {
        let mut p = path();
        // 2^32 + 103 probes sent; the peer got all but ten of the ones old
        // enough to count, and its 32-bit count has wrapped.
        p.counters.probes_sent = (1 << 32) + 103;
        p.peer_rx_probes = ((1u64 << 32) + 90) as u32;
        let want = 10.0 / ((1u64 << 32) + 100) as f64;
        assert!((p.forward_loss() - want).abs() < 1e-18);
        // A peer claiming more than we sent (restarted, or lying): no loss.
        for ahead in [1, 100, (1 << 31) - 1] {
            p.peer_rx_probes = 100u32.wrapping_add(ahead);
            assert_eq!(p.forward_loss(), 0.0, "{ahead} ahead");
        }
        // Whatever it claims, the loss is a fraction.
        for claim in [0, 1, 1 << 31, u32::MAX - 1, u32::MAX] {
            p.peer_rx_probes = claim;
            assert!((0.0..=1.0).contains(&p.forward_loss()), "{claim}");
        }
        p.counters.probes_sent = 0;
        assert_eq!(p.forward_loss(), 0.0);
    }

    #[test]
    fn counters_saturate() {
        let now = Instant::now();
        let mut p = path();
        p.counters = PathCounters {
            rx_packets: u64::MAX,
            rx_bytes: u64::MAX - 1,
            tx_packets: u64::MAX,
            tx_bytes: u64::MAX - 1,
            first_arrivals: 0,
            probes_sent: u64::MAX,
            echoes_received: u64::MAX,
        };
        p.probes_received = u64::MAX;
        p.on_rx(now, usize::MAX);
        p.on_tx(1500);
        let seq = p.take_probe_seq();
        p.on_echo(now, seq, now, 0);
        assert_eq!(p.on_probe(7), u32::MAX);
        let c = p.counters;
        assert_eq!(
            [c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes],
            [u64::MAX; 4]
        );
        assert_eq!([c.probes_sent, c.echoes_received], [u64::MAX; 2]);
        assert_eq!(p.probes_received, u64::MAX);
    }

    /// Two live paths; returns the bytes each carried of `n` packets.
    fn spread(paths: &mut [Path], n: usize, len: usize) -> Vec<u64> {
        let mut bytes = vec![0u64; paths.len()];
        let mut out = [0usize; MAX_PATHS];
        for _ in 0..n {
            assert_eq!(select(Mode::Aggregate, paths, len, &mut out), 1);
            bytes[out[0]] += len as u64;
            for p in paths.iter() {
                assert!(
                    (-AGGREGATE_QUANTUM..=AGGREGATE_QUANTUM).contains(&p.deficit),
                    "{}",
                    p.deficit
                );
            }
        }
        bytes
    }

    #[test]
    fn aggregate_keeps_sending_when_every_line_is_hopelessly_queued() {
        let now = Instant::now() + Duration::from_secs(20_000);
        let mut paths = [path(), path()];
        for p in &mut paths {
            p.state = PathState::Up;
            let seq = p.take_probe_seq();
            p.on_echo(now, seq, now - Duration::from_millis(1), 1);
            let seq = p.take_probe_seq();
            // Ten thousand seconds of queueing: 0.5^500000 is zero in f64.
            p.on_echo(now, seq, now - Duration::from_secs(10_000), 2);
            assert_eq!(p.weight, MIN_WEIGHT);
        }
        let bytes = spread(&mut paths, 1000, 1400);
        assert_eq!(bytes.iter().sum::<u64>(), 1000 * 1400);
        // Equal (floored) shares: within a quantum of each other.
        assert!(
            bytes[0].abs_diff(bytes[1]) <= AGGREGATE_QUANTUM as u64,
            "{bytes:?}"
        );
    }

    #[test]
    fn aggregate_shares_follow_the_weights_at_any_scale() {
        // (case, weights): the same 4:1 proportion, large and tiny.
        for (case, w) in [(1, [1.0, 0.25]), (2, [4e-8, 1e-8])] {
            let mut paths = [path(), path()];
            for (p, w) in paths.iter_mut().zip(w) {
                p.state = PathState::Up;
                p.weight = w;
            }
            let bytes = spread(&mut paths, 20_000, 1400);
            let ratio = bytes[0] as f64 / bytes[1] as f64;
            assert!((ratio - 4.0).abs() < 0.05, "case {case}: {bytes:?}");
        }
    }

    #[test]
    fn a_down_path_hoards_no_credit_and_huge_packets_cannot_wrap_it() {
        let mut paths = [path(), path()];
        paths[0].state = PathState::Up;
        paths[1].state = PathState::Down;
        let bytes = spread(&mut paths, 10_000, 1400);
        assert_eq!(bytes[1], 0);
        assert_eq!(paths[1].deficit, 0, "no credit earned while down");
        // Back up: it takes its share at once rather than after a backlog
        // of credit, and the first packets do not all go one way.
        paths[1].state = PathState::Up;
        let bytes = spread(&mut paths, 1000, 1400);
        assert!(
            bytes[0].abs_diff(bytes[1]) <= 2 * AGGREGATE_QUANTUM as u64,
            "{bytes:?}"
        );
        let mut out = [0usize; MAX_PATHS];
        for _ in 0..4 {
            assert_eq!(select(Mode::Aggregate, &mut paths, usize::MAX, &mut out), 1);
            assert!(paths.iter().all(|p| p.deficit >= -AGGREGATE_QUANTUM));
        }
    }
}
