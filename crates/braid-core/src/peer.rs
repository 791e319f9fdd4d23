//! A peer's state: identity, sessions, pending handshake, staged packets,
//! timers and counters. The timer rules (when to arm and cancel what) live
//! here as small named hooks, mirroring Linux WireGuard's `timers.c`; the
//! device decides what a fired timer does.

use crate::consts::*;
use crate::cookie::CookieState;
use crate::noise::{InitiatorHandshake, LocalStatic, RemoteStatic, Timestamp};
use crate::path::{Mode, Path, PathState, LEARNED_PATH_EXPIRY, MAX_PATHS};
use crate::reorder::{ReorderConfig, ReorderWindow};
use crate::session::Keypairs;
use crate::timers::{Timer, TimerTable};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

/// A path that carried data from the peer within this long is one the
/// reorder window waits for (longer than the peer's scheduler leaves a
/// line it uses idle, short enough that a line it stopped using soon stops
/// holding gaps up).
pub const DATA_RECENT: Duration = Duration::from_millis(300);

/// Name of the path made from the plain `Endpoint`.
pub const ENDPOINT_PATH: &str = "endpoint";
/// Name of a path learned from traffic.
pub const LEARNED_PATH: &str = "learned";

/// Index of a peer in the device's peer table.
pub type PeerId = usize;

/// Counters a peer keeps for `braid show`; all start at zero and saturate
/// (a wrapped counter would read as a small one).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PeerCounters {
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub keepalives_sent: u64,
    pub keepalives_received: u64,
    pub handshakes_initiated: u64,
    pub handshakes_completed: u64,
    pub handshake_responses_sent: u64,
    pub cookie_replies_received: u64,
    pub replayed: u64,
    pub auth_failed: u64,
    pub disallowed_source: u64,
    pub staged_dropped: u64,
    /// braid extension messages that failed authentication or were replays.
    pub ext_rejected: u64,
    /// Packets to this peer dropped for exceeding its `RateLimit`.
    pub rate_dropped_tx: u64,
    /// Packets longer than this peer's path MTU, answered with ICMP "too
    /// big" instead of sent.
    pub too_big: u64,
    /// Packets from this peer dropped for exceeding its `RateLimit`.
    pub rate_dropped_rx: u64,
    /// Packets sent LZ4-compressed (the rest did not shrink or weren't
    /// eligible).
    pub compressed_tx: u64,
    pub compressed_rx: u64,
    /// Compressed packets refused: not agreed, or not a valid block
    /// within the MTU.
    pub decompress_failed: u64,
    /// Packets sent split into fragments (their line carries less), and
    /// those fragments.
    pub fragmented_tx: u64,
    pub fragments_tx: u64,
    /// Packets joined from the peer's fragments.
    pub joined_rx: u64,
}

pub struct Peer {
    /// The peer's keys; DH(our static, theirs) only once
    /// `static_static_derived` (see [`Peer::derive_static_static`]).
    pub remote: RemoteStatic,
    pub static_static_derived: bool,
    /// The lines this peer is reached over; `paths[0]` is the primary
    /// (the plain `Endpoint`, or the first configured path).
    pub paths: Vec<Path>,
    pub mode: Mode,
    /// This peer's `Cipher =`; `None` follows the interface's.
    pub cipher: Option<crate::cipher::CipherPolicy>,
    /// Local index of the last session an extension message (a hello, a
    /// probe…) arrived in; see [`Peer::speaks_braid`].
    pub braid_session: Option<u32>,
    /// Hellos still to send for the current session before concluding the
    /// peer is stock WireGuard.
    pub hellos_left: u8,
    /// Restores counter order of the current session's packets.
    pub reorder: ReorderWindow,
    /// Local index of the session the window follows (counters restart
    /// with every session).
    pub reorder_session: Option<u32>,
    /// The sessions the window followed before, newest first: the sender
    /// has moved on from them, so what still comes on them was sent before
    /// everything the window delivers now.
    pub reorder_retired: [Option<u32>; 2],
    /// Aggregate mode: copies of what was sent lately, for repairs (made
    /// when first needed; see `repair`).
    pub sent_copies: Option<Box<crate::repair::SentCopies>>,
    /// Aggregate mode: parity of what goes on lines that lose packets of
    /// their own, and the peer's parity with what it covers (made when
    /// first needed; see `fec`).
    pub parity_out: Option<Box<crate::fec::ParityEncoder>>,
    pub parity_in: Option<Box<crate::fec::ParityDecoder>>,
    /// The local index of the session on which the peer offered to
    /// rebuild from parity (in its hello).
    pub parity_session: Option<u32>,
    /// The path the latest data message went on (its first copy's).
    pub last_path: usize,
    /// When our latest `Sent` report left, and whether data went out
    /// since (see `Device::report_sent`).
    pub sent_report_at: Option<Instant>,
    pub sent_since_report: bool,
    /// `RateLimit =`: one token bucket per direction; `None`: unlimited.
    pub rate_limit: Option<crate::shaper::RateLimit>,
    /// This peer's `Compression =`; `None` follows the interface's.
    pub compression: Option<crate::compress::CompressionPolicy>,
    /// The local index of the session on which the peer offered to open
    /// LZ4-compressed packets (in its hello).
    pub lz4_session: Option<u32>,
    /// The local index of the session on which the peer offered to join
    /// fragments (in its hello).
    pub fragment_session: Option<u32>,
    /// The largest plaintext one data message to this peer may carry,
    /// when a line was seen to carry less than the packets sent to it and
    /// the peer joins fragments: longer packets go in pieces (see
    /// [`Device::refresh_path_mtus`](crate::device::Device::refresh_path_mtus)).
    pub fragment_payload: Option<usize>,
    /// The id of the next packet sent in fragments.
    pub next_fragment_id: u32,
    /// The peer's packets being joined from their fragments.
    pub reassembly: crate::fragment::Reassembly,
    pub persistent_keepalive: u16,
    pub cookie: CookieState,
    pub keypairs: Keypairs,
    /// Our initiation waiting for a response.
    pub handshake: Option<InitiatorHandshake>,
    pub last_initiation_sent: Option<Instant>,
    /// The TAI64N of our last initiation to this peer: the next is later
    /// (see `Device::initiate`).
    pub last_timestamp_sent: Timestamp,
    pub handshake_attempts: u32,
    /// Newest TAI64N seen in an initiation from this peer (replay defence).
    pub latest_timestamp: Timestamp,
    pub last_initiation_consumed: Option<Instant>,
    pub last_handshake: Option<SystemTime>,
    pub sent_lastminute_handshake: bool,
    pub need_another_keepalive: bool,
    pub timers: TimerTable,
    /// Packets waiting for a session; buffers are recycled, not freed.
    pub staged: VecDeque<Vec<u8>>,
    spare_buffers: Vec<Vec<u8>>,
    pub counters: PeerCounters,
    /// The largest inner packet this peer's paths carry, where that is
    /// known and below the interface MTU (see
    /// [`Device::refresh_path_mtus`](crate::device::Device::refresh_path_mtus)).
    pub mtu_limit: Option<usize>,
    /// How many AllowedIPs prefixes map to this peer: clearing a peer
    /// that has none (every peer of a fresh `wg setconf`) needs no walk of
    /// the table.
    pub allowed_prefixes: usize,
    /// The AllowedIPs given to this peer (masked), some of which may have
    /// moved on to another peer since: clearing them is a lookup each,
    /// not a walk of the whole table (removing 100,000 peers one by one
    /// stays linear). Compacted when stale entries outnumber the others.
    pub(crate) prefixes: Vec<(std::net::IpAddr, u8)>,
    /// On the device's list of peers whose staged packets may go now.
    pub(crate) flush_queued: bool,
    /// On the device's list of peers with packets ready for the TUN.
    pub(crate) ready_queued: bool,
}

impl Peer {
    /// A data message whose counter was seen before. In redundant mode
    /// most are the later copy from the slower line: it counts on its path
    /// too, and tells the reorder window which line lost the race.
    pub fn count_replay(
        &mut self,
        now: Instant,
        line: u16,
        src: std::net::SocketAddr,
        receiver: u32,
        counter: u64,
        len: usize,
    ) {
        self.counters.replayed = self.counters.replayed.saturating_add(1);
        if let Some(i) = self.find_path(line, src) {
            let c = &mut self.paths[i].counters;
            c.rx_packets = c.rx_packets.saturating_add(1);
            c.rx_bytes = c.rx_bytes.saturating_add(len as u64);
            self.paths[i].on_data_rx(now, len);
            if self.reorder_session == Some(receiver) {
                self.reorder.note_duplicate(now, counter, i);
            }
        }
    }

    /// Whether the peer joins fragments on the session data goes out in now.
    pub fn joins_fragments(&self) -> bool {
        self.fragment_session.is_some_and(|s| {
            self.keypairs
                .current
                .as_ref()
                .is_some_and(|k| k.local_index == s)
        })
    }

    /// Whether the peer runs braid's extensions: one of its extension
    /// messages arrived in a session we still have (next, current or
    /// previous). A braid peer says hello in every new session, so a rekey
    /// does not make this flap; a peer that comes back as stock WireGuard
    /// (same keys, no extensions) loses it once the last session it spoke
    /// braid in is gone, instead of keeping braid's path MTU and paths.
    pub fn speaks_braid(&self) -> bool {
        let Some(index) = self.braid_session else {
            return false;
        };
        let k = &self.keypairs;
        [&k.next, &k.current, &k.previous]
            .into_iter()
            .flatten()
            .any(|kp| kp.local_index == index)
    }

    /// A peer with `public` as its key; our static key is needed only at
    /// its first handshake ([`derive_static_static`](Self::derive_static_static)).
    pub fn new(public: [u8; 32]) -> Self {
        Peer {
            remote: RemoteStatic::deferred(public, [0; 32]),
            static_static_derived: false,
            paths: Vec::new(),
            mode: Mode::default(),
            cipher: None,
            braid_session: None,
            hellos_left: 0,
            reorder: ReorderWindow::new(ReorderConfig::default()),
            reorder_session: None,
            reorder_retired: [None; 2],
            sent_copies: None,
            parity_out: None,
            parity_in: None,
            parity_session: None,
            last_path: 0,
            sent_report_at: None,
            sent_since_report: false,
            rate_limit: None,
            compression: None,
            lz4_session: None,
            fragment_session: None,
            fragment_payload: None,
            next_fragment_id: 0,
            reassembly: crate::fragment::Reassembly::default(),
            persistent_keepalive: 0,
            cookie: CookieState::new(&public),
            keypairs: Keypairs::default(),
            handshake: None,
            last_initiation_sent: None,
            last_timestamp_sent: [0; 12],
            handshake_attempts: 0,
            latest_timestamp: [0; 12],
            last_initiation_consumed: None,
            last_handshake: None,
            sent_lastminute_handshake: false,
            need_another_keepalive: false,
            timers: TimerTable::default(),
            staged: VecDeque::new(),
            spare_buffers: Vec::new(),
            counters: PeerCounters::default(),
            mtu_limit: None,
            allowed_prefixes: 0,
            prefixes: Vec::new(),
            flush_queued: false,
            ready_queued: false,
        }
    }

    pub fn public_key(&self) -> [u8; 32] {
        self.remote.public
    }

    /// DH(our static, the peer's), computed the first time a handshake
    /// needs it and after our key changed (`forget_static_static`).
    pub fn derive_static_static(&mut self, local: &LocalStatic) {
        if !self.static_static_derived {
            self.remote.derive_static_static(local);
            self.static_static_derived = true;
        }
    }

    /// Our static key changed: what was derived from it goes.
    pub fn forget_static_static(&mut self) {
        let psk = self.remote.preshared;
        self.remote = RemoteStatic::deferred(self.remote.public, psk);
        self.static_static_derived = false;
    }

    /// What `wg show` calls the endpoint: the first live configured path's
    /// remote address, else the newest live learned one's (where the peer
    /// was heard from last: it roamed there), else the primary path's.
    pub fn endpoint(&self) -> Option<SocketAddr> {
        let live = |p: &&Path| p.is_up();
        self.paths
            .iter()
            .filter(|p| p.configured)
            .find(live)
            .or_else(|| self.paths.iter().rev().filter(|p| !p.configured).find(live))
            .or(self.paths.first())
            .map(|p| p.remote)
    }

    /// Sets the plain endpoint: the path named "endpoint" on the main line.
    pub fn set_endpoint(&mut self, remote: SocketAddr) {
        match self.paths.iter_mut().find(|p| p.name == ENDPOINT_PATH) {
            Some(p) => p.remote = remote,
            None => {
                self.paths
                    .insert(0, Path::new(ENDPOINT_PATH, 0, remote, true));
                self.paths.truncate(MAX_PATHS);
            }
        }
    }

    /// Adds a configured path (`Path = NAME bind=… endpoint=…`).
    pub fn add_path(&mut self, name: &str, line: u16, remote: SocketAddr) -> bool {
        if self.paths.len() >= MAX_PATHS {
            return false;
        }
        self.paths.push(Path::new(name, line, remote, true));
        true
    }

    pub fn find_path(&self, line: u16, remote: SocketAddr) -> Option<usize> {
        self.paths
            .iter()
            .position(|p| p.line == line && p.remote == remote)
    }

    /// The live configured path on `line` when a braid peer's datagram from
    /// `remote` comes from none of its paths: the peer still sends to where
    /// we were (we changed the endpoint, or our address) while the path the
    /// user gave works. Such a stranger is not learned and its probes are
    /// not answered, so the peer's path there dies instead of both sides
    /// keeping each other's stale path alive; a configured path that does
    /// not work gives way to a learned one (a peer behind a NAT, or one
    /// that moved).
    pub fn stranger_on(&self, line: u16, remote: SocketAddr) -> Option<usize> {
        if !self.speaks_braid() || self.find_path(line, remote).is_some() {
            return None;
        }
        self.paths
            .iter()
            .position(|p| p.configured && p.line == line && p.is_up())
    }

    /// An authenticated datagram arrived from `remote` on `line`: account it
    /// to its path, learning the path (braid peers) or roaming the primary
    /// path (stock WireGuard peers, as WireGuard does). Returns the path
    /// (for a stranger, see [`stranger_on`](Self::stranger_on), the
    /// configured path on its line, which it does not keep alive).
    pub fn authenticated_rx(
        &mut self,
        now: Instant,
        line: u16,
        remote: SocketAddr,
        bytes: usize,
    ) -> usize {
        if let Some(configured) = self.stranger_on(line, remote) {
            return configured;
        }
        let idx = match self.find_path(line, remote) {
            Some(i) => i,
            None if self.speaks_braid() || self.paths.is_empty() => {
                self.learn_path(now, line, remote)
            }
            None => {
                let p = &mut self.paths[0];
                p.line = line;
                p.remote = remote;
                0
            }
        };
        self.paths[idx].on_rx(now, bytes);
        idx
    }

    fn learn_path(&mut self, now: Instant, line: u16, remote: SocketAddr) -> usize {
        if self.paths.len() < MAX_PATHS {
            self.paths
                .push(Path::new(LEARNED_PATH, line, remote, false));
            return self.paths.len() - 1;
        }
        // Full: reuse the learned path that has been down longest, else the
        // primary roams.
        let victim = self
            .paths
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.configured && p.state != PathState::Up)
            .min_by_key(|(_, p)| p.down_since.unwrap_or(now))
            .map_or(0, |(i, _)| i);
        let counters = self.paths[victim].counters;
        let name = self.paths[victim].name.clone();
        self.paths[victim] = Path::new(&name, line, remote, self.paths[victim].configured);
        self.paths[victim].counters = counters;
        victim
    }

    /// Which paths the reorder window should expect packets on: the live
    /// ones that carried data lately, and the live ones whose delay (from
    /// the peer's probes) is within the peer scheduler's reach of the
    /// quickest line's: it may start using them any moment, and the first
    /// packet on such a line must not find its gap given up. A live line
    /// beyond that reach that carries nothing is not waited for (a gap
    /// would wait for it the whole hold). Else all live ones; else all
    /// while none is known to be live.
    pub fn live_path_mask(&self, now: Instant) -> u8 {
        let mask = |keep: &dyn Fn(&Path) -> bool| {
            self.paths
                .iter()
                .enumerate()
                .take(MAX_PATHS)
                .filter(|(_, p)| keep(p))
                .fold(0u8, |m, (i, _)| m | (1 << i))
        };
        let quickest = self
            .paths
            .iter()
            .filter(|p| p.is_up())
            .filter_map(|p| p.inbound.delay.value)
            .fold(f64::INFINITY, f64::min);
        let reach = crate::path::MAX_BACKLOG.as_secs_f64() * 1e6;
        let expected = mask(&|p| {
            p.is_up()
                && (p.carries_data(now, DATA_RECENT)
                    || p.inbound.delay.value.is_some_and(|d| d - quickest <= reach))
        });
        if expected != 0 {
            return expected;
        }
        let up = mask(&|p| p.is_up());
        if up != 0 {
            up
        } else {
            ((1u16 << self.paths.len().min(MAX_PATHS)) - 1) as u8
        }
    }

    /// How long a gap may wait for the slower line: the difference in
    /// one-way delay (measured from the peer's probes) between the live
    /// paths in `live_path_mask`, plus twice their delays' deviation.
    /// Paths whose delay is not measured yet (a peer that stamps no probes)
    /// count with half their round trip.
    pub fn path_skew(&self, now: Instant) -> Duration {
        let mask = self.live_path_mask(now);
        let (mut lo, mut hi, mut jitter) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        let mut by_rtt = (None::<Duration>, Duration::ZERO, Duration::ZERO);
        for (i, p) in self.paths.iter().enumerate().take(MAX_PATHS) {
            if mask & (1 << i) == 0 || !p.is_up() {
                continue;
            }
            if let Some(d) = p.inbound.delay.value {
                lo = lo.min(d);
                hi = hi.max(d);
                jitter = jitter.max(p.inbound.delay.deviation);
            } else if let Some(d) = p.one_way_delay() {
                let (l, h, j) = &mut by_rtt;
                *l = Some(l.map_or(d, |l| l.min(d)));
                *h = (*h).max(d);
                *j = (*j).max(p.rttvar);
            }
        }
        let measured = if hi >= lo {
            Duration::try_from_secs_f64((hi - lo + 2.0 * jitter) / 1e6).unwrap_or(Duration::MAX)
        } else {
            Duration::ZERO
        };
        // hi >= lo; saturating as both follow echoed timestamps.
        let (lo, hi, j) = by_rtt;
        let guessed = lo.map_or(Duration::ZERO, |l| (hi - l).saturating_add(j));
        measured.max(guessed)
    }

    /// Whether the peer's lines are bonded and a lost packet can be sent
    /// again on another line: aggregate mode, a braid peer, two or more
    /// lines up. Both ends keep copies and ask for repairs then.
    pub fn repairs_losses(&self) -> bool {
        self.mode == Mode::Aggregate
            && self.speaks_braid()
            && self.paths.iter().filter(|p| p.is_up()).count() >= 2
    }

    /// Which of our paths have what they lose re-sent when the peer asks
    /// (bit `i` for path `i`; see `crate::repair`): none unless we keep
    /// copies.
    pub fn repaired_paths(&self) -> u8 {
        if !self.repairs_losses() {
            return 0;
        }
        self.paths
            .iter()
            .take(crate::path::MAX_PATHS)
            .enumerate()
            .filter(|(_, p)| p.own_loss() >= crate::repair::OWN_LOSS)
            .fold(0, |m, (i, _)| m | (1 << i))
    }

    /// The up path with the shortest round trip (the primary when none is
    /// measured): where repairs and their requests go.
    pub fn quickest_path(&self) -> usize {
        self.paths
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_up() && p.outbound.loss() < crate::path::LOSSY)
            .min_by_key(|(_, p)| p.srtt.unwrap_or(Duration::MAX))
            .map_or(0, |(i, _)| i)
    }

    /// Forgets learned paths that have been down for long.
    pub fn expire_learned_paths(&mut self, now: Instant) {
        self.paths.retain(|p| {
            p.configured
                || p.down_since
                    .is_none_or(|d| now.saturating_duration_since(d) < LEARNED_PATH_EXPIRY)
        });
    }

    /// Queues a packet until a session exists; the oldest is dropped when
    /// the queue is full, as WireGuard does.
    pub fn stage(&mut self, packet: &[u8]) {
        if self.staged.len() >= MAX_STAGED_PACKETS {
            if let Some(old) = self.staged.pop_front() {
                self.spare_buffers.push(old);
            }
            self.counters.staged_dropped = self.counters.staged_dropped.saturating_add(1);
        }
        let mut buf = self.spare_buffers.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(packet);
        self.staged.push_back(buf);
    }

    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.spare_buffers.push(buf);
    }

    pub fn purge_staged(&mut self) {
        while let Some(b) = self.staged.pop_front() {
            self.spare_buffers.push(b);
        }
    }

    /// A new initiation may be sent (not more than one per REKEY_TIMEOUT,
    /// except timer-driven retries).
    pub fn may_initiate(&self, now: Instant) -> bool {
        self.last_initiation_sent
            .is_none_or(|t| now.saturating_duration_since(t) >= REKEY_TIMEOUT)
    }

    // --- timer hooks, named after the events of the WireGuard paper ---

    pub fn on_data_sent(&mut self, now: Instant, jitter: Duration) {
        if !self.timers.is_set(Timer::NewHandshake) {
            self.timers.set(
                Timer::NewHandshake,
                now + KEEPALIVE_TIMEOUT + REKEY_TIMEOUT + jitter,
            );
        }
    }

    pub fn on_data_received(&mut self, now: Instant) {
        if self.timers.is_set(Timer::SendKeepalive) {
            self.need_another_keepalive = true;
        } else {
            self.timers
                .set(Timer::SendKeepalive, now + KEEPALIVE_TIMEOUT);
        }
    }

    pub fn on_authenticated_sent(&mut self) {
        self.timers.cancel(Timer::SendKeepalive);
    }

    pub fn on_authenticated_received(&mut self) {
        self.timers.cancel(Timer::NewHandshake);
    }

    /// Any authenticated packet in either direction postpones the
    /// persistent keepalive.
    pub fn on_authenticated_traversal(&mut self, now: Instant) {
        if self.persistent_keepalive > 0 {
            self.timers.set(
                Timer::PersistentKeepalive,
                now + Duration::from_secs(self.persistent_keepalive.into()),
            );
        }
    }

    pub fn on_handshake_initiated(&mut self, now: Instant, jitter: Duration) {
        self.timers
            .set(Timer::RetransmitHandshake, now + REKEY_TIMEOUT + jitter);
    }

    pub fn on_handshake_complete(&mut self, wall: SystemTime) {
        self.timers.cancel(Timer::RetransmitHandshake);
        self.handshake_attempts = 0;
        self.sent_lastminute_handshake = false;
        self.last_handshake = Some(wall);
        self.counters.handshakes_completed = self.counters.handshakes_completed.saturating_add(1);
    }

    pub fn on_session_derived(&mut self, now: Instant) {
        self.timers
            .set(Timer::ZeroKeyMaterial, now + REJECT_AFTER_TIME * 3);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;

    fn peer() -> Peer {
        Peer::new([2; 32])
    }

    #[test]
    fn path_skew_saturates_on_absurd_delays() {
        let mut p = peer();
        for i in 0..2u16 {
            p.add_path("p", i, SocketAddr::from(([198, 18, 0, 1], 51820 + i)));
            p.paths[usize::from(i)].state = PathState::Up;
        }
        // (case, srtt and jitter of each path): echoed timestamps may be
        // anything.
        let max = Duration::MAX;
        let cases = [
            (1, [(Duration::ZERO, max), (max, max)], max),
            (2, [(max, Duration::ZERO), (max, max)], max),
            (
                3,
                [(Duration::ZERO, Duration::ZERO), (max, Duration::ZERO)],
                max / 2,
            ),
        ];
        for (case, paths, want) in cases {
            for (path, (srtt, rttvar)) in p.paths.iter_mut().zip(paths) {
                path.srtt = Some(srtt);
                path.rttvar = rttvar;
            }
            assert_eq!(p.path_skew(Instant::now()), want, "case {case}");
        }
    }

    #[test]
    fn counters_saturate() {
        let now = Instant::now();
        let mut p = peer();
        let remote = SocketAddr::from(([198, 18, 0, 1], 51820));
        p.set_endpoint(remote);
        p.counters.replayed = u64::MAX;
        p.counters.staged_dropped = u64::MAX;
        p.counters.handshakes_completed = u64::MAX;
        p.paths[0].counters.rx_packets = u64::MAX;
        p.paths[0].counters.rx_bytes = u64::MAX - 1;
        p.count_replay(now, 0, remote, 1, 1, 1500);
        for _ in 0..=MAX_STAGED_PACKETS {
            p.stage(&[0x45; 20]);
        }
        p.on_handshake_complete(SystemTime::UNIX_EPOCH);
        let c = p.counters;
        assert_eq!(
            [c.replayed, c.staged_dropped, c.handshakes_completed],
            [u64::MAX; 3]
        );
        let pc = p.paths[0].counters;
        assert_eq!([pc.rx_packets, pc.rx_bytes], [u64::MAX; 2]);
    }
}
