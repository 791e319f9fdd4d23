//! The device: one WireGuard interface as a sans-IO state machine.
//!
//! A [`Device`] reads no clock, opens no socket and does no I/O: whoever
//! drives it (the daemon's data plane, the simulator in `testing`) passes
//! `now` in, hands it batches, and moves what it leaves in them. The
//! driver's loop, in the order the calls are made:
//!
//! ```text
//!  configure   set_private_key, add_peer, add_allowed_ip, add_path, set_* …
//!
//!  outgoing    TUN batch ─► prepare_encapsulate(now, batch, jobs)   [device]
//!                       ─► jobs.seal(batch)                 [no device needed]
//!                       ─► UDP batch
//!              (encapsulate(now, batch) = both, on one thread)
//!
//!  incoming    UDP batch ─► prepare_decapsulate(now, batch, jobs)   [device]
//!                       ─► jobs.open(batch)                 [no device needed]
//!                       ─► finish_decapsulate(now, batch, jobs)     [device]
//!                       ─► TUN batch
//!              (decapsulate(now, batch) = all three)
//!              then poll_tun(now, out) until false: packets the reorder
//!              windows and the inbound rate limit released, written to
//!              the TUN after that batch
//!
//!  after each  has_pending_transmit(); if so poll_transmit(now, out)
//!              until false: handshakes, cookies, keepalives, probes and
//!              packets that waited for a session, to UDP
//!
//!  timers      poll_timeout() says when; at that time handle_timeout(now)
//!              fires per-peer timers (retries, keepalives, rekey, reorder
//!              holds, shaping), then poll_transmit and poll_tun as above
//!
//!  handshakes  initiations over a batch's budget wait in a bounded queue
//!              (while they do, poll_timeout is due at once); each wake-up
//!              answers another budget of them:
//!              prepare_queued_initiations(now, jobs)                [device]
//!                       ─► jobs.answer_initiations()        [no device needed]
//!                       ─► finish_initiations(now, jobs)            [device]
//!                       ─► poll_transmit as above
//!              (answer_queued_initiations(now) = all three)
//! ```
//!
//! A driver calls `poll_timeout` again after anything it handed in, since
//! every call may move a deadline. Between `prepare_*` and `finish_*` the
//! device may serve other calls; `jobs` carries the keys it needs, so the
//! AEAD work runs outside the driver's lock.
//!
//! Nothing here reads a clock, opens a socket or allocates per data packet;
//! randomness comes from a seeded generator so tests are reproducible.

mod compression;
mod fec;
mod fragments;
mod handshake;
mod jobs;
mod multipath;
mod pmtu;
mod rate;
mod receive;
mod repair;
mod route_memo;
mod send;
mod state;
mod sticky;
mod table;
mod trains;

pub use jobs::{CryptoJobs, CryptoPart, InitiationPart};
pub use pmtu::{MtuNotice, PathRoute};
pub use state::{Device, DeviceCounters};

use state::{Control, IndexEntry};

use crate::allowed_ips::{AllowedIps, InvalidPrefix};
use crate::batch::PacketBatch;
use crate::cipher::CipherPolicy;
use crate::consts::*;
use crate::cookie::CookieChecker;
use crate::messages::INITIATION_LEN;
use crate::noise::{self, LocalStatic};
use crate::peer::{Peer, PeerId};
use crate::ratelimiter::SourceRateLimiter;
use crate::reorder::{ReorderConfig, ReorderCounters, ReorderWindow};
use crate::timers::Timer;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a peer looks like from outside, for `wg show` and the UAPI.
/// braid's settings of one peer beyond WireGuard's (the `[Peer]` keys
/// the userspace API does not carry), applied together by
/// [`Device::set_peer_options`]. The default is what a new peer has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerOptions {
    /// How packets use the paths (`Mode =`).
    pub mode: crate::path::Mode,
    /// `Cipher =`; `None` follows the interface's.
    pub cipher: Option<CipherPolicy>,
    /// `RateLimit =` in bits per second, each direction; `None`: no limit.
    pub rate_limit: Option<u64>,
    /// `Compression =`; `None` follows the interface's.
    pub compression: Option<crate::compress::CompressionPolicy>,
    /// `ReorderHold =`: the reorder window's ceiling (zero turns it off);
    /// `None` keeps the default.
    pub reorder_hold: Option<Duration>,
    /// `ReorderCapacity =` in packets; `None` keeps the default.
    pub reorder_capacity: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub public_key: [u8; 32],
    pub preshared_key: [u8; 32],
    pub endpoint: Option<SocketAddr>,
    pub paths: Vec<crate::path::Path>,
    pub mode: crate::path::Mode,
    pub speaks_braid: bool,
    /// The cipher data to this peer goes out with now (`None`: no session).
    pub cipher: Option<crate::cipher::DataCipher>,
    pub persistent_keepalive: u16,
    pub reorder: ReorderCounters,
    pub reorder_gaps: crate::reorder::GapCounters,
    pub reorder_hold: Duration,
    /// What the hold is made of: the delay difference of the lines in use
    /// (with their jitter), the lateness measured, the repair wait.
    pub reorder_skew: Duration,
    pub reorder_lateness: Duration,
    /// Whether `reorder_lateness` was measured, or is still what is left
    /// of the starting estimate.
    pub reorder_lateness_measured: bool,
    pub repair_wait: Option<Duration>,
    pub reorder_held: usize,
    /// Data messages re-sent because the peer asked, and asked for but no
    /// longer kept (or over the budget).
    pub resent: u64,
    pub resend_unavailable: u64,
    /// Asked for, but lost by a line that loses only when full: left to
    /// the inner TCP as the congestion signal it is.
    pub resend_congestion: u64,
    /// Parity pieces sent for our lossy lines, pieces received from the
    /// peer, and data messages rebuilt from them (see `fec`).
    pub parity_sent: u64,
    pub parity_received: u64,
    pub rebuilt: u64,
    pub last_handshake: Option<SystemTime>,
    pub allowed_ips: Vec<(IpAddr, u8)>,
    pub counters: crate::peer::PeerCounters,
    /// `RateLimit =` in bits per second, each direction.
    pub rate_limit_bits: Option<u64>,
    /// Packets longer than this are answered "too big" (see
    /// `Peer::mtu_limit`), and what one data message may carry when longer
    /// ones go in pieces (`Peer::fragment_payload`).
    pub mtu_limit: Option<usize>,
    pub fragment_payload: Option<usize>,
    /// Whether the peer joins fragments, and its fragments given up.
    pub joins_fragments: bool,
    pub fragments_dropped: u64,
}

impl Device {
    /// `now` and `wall` are the same moment on the monotonic and the wall
    /// clock (TAI64N timestamps and "latest handshake" need wall time; a
    /// driver keeps it right with [`set_wall_clock`](Self::set_wall_clock));
    /// `seed` feeds every random choice (ephemeral keys, indices, jitter).
    pub fn new(now: Instant, wall: SystemTime, seed: [u8; 32]) -> Self {
        Device {
            local: None,
            checker: None,
            peers: table::PeerTable::default(),
            by_key: table::PeerKeys::default(),
            peer_limit: MAX_PEERS,
            allowed: AllowedIps::new(),
            indices: HashMap::default(),
            rng: Box::new(ChaCha20Rng::from_seed(seed)),
            mono_base: now,
            wall_anchor: (now, wall),
            mtu: DEFAULT_MTU,
            control: VecDeque::new(),
            pmtu_probes: VecDeque::new(),
            trains: VecDeque::new(),
            resends: VecDeque::new(),
            parities: VecDeque::new(),
            parity_buffers: Vec::new(),
            rebuild_scratch: Vec::new(),
            padding_cap: usize::MAX,
            too_big: Vec::new(),
            too_big_len: 0,
            pending_flush: Vec::new(),
            reorder_ready: Vec::new(),
            scratch_due: Vec::new(),
            send_route: route_memo::RouteMemo::default(),
            receive_route: route_memo::RouteMemo::default(),
            handshake_window: (now, 0),
            handshake_budget: MAX_HANDSHAKES_PER_BATCH,
            initiations: VecDeque::new(),
            source_limiter: SourceRateLimiter::new(),
            under_load_until: None,
            scratch_indices: Vec::new(),
            scratch_jobs: CryptoJobs::new(),
            extensions: true,
            parity: true,
            cipher: CipherPolicy::Auto,
            aes_hardware: crate::cipher::aes_hardware(),
            aes_library: crate::cipher::AesLibrary::Ring,
            rekey_after_time: crate::consts::REKEY_AFTER_TIME,
            compression: crate::compress::CompressionPolicy::Off,
            lz4: crate::compress::Lz4::new(),
            sticky: Default::default(),
            counters: DeviceCounters::default(),
        }
    }

    // ----- configuration -----

    /// Where randomness comes from. By default a generator seeded at
    /// [`new`](Self::new), so tests and the simulator are reproducible; the
    /// daemon passes the operating system's, so a cloned VM or a restored
    /// snapshot does not repeat the ephemeral keys of its twin (a seeded
    /// generator copied with the memory would).
    pub fn set_random_source(&mut self, rng: Box<dyn RngCore + Send>) {
        self.rng = rng;
    }

    /// Sets the interface's private key. The same key again changes
    /// nothing (as in wireguard-go), so a reload (`wg syncconf`, `braid
    /// syncconf`) that carries the unchanged key keeps every session; a new
    /// key drops them all.
    pub fn set_private_key(&mut self, private: Option<[u8; 32]>) {
        if private == self.private_key() {
            return;
        }
        self.local = private.map(|k| std::sync::Arc::new(LocalStatic::new(k)));
        self.checker = self.local.as_ref().map(|l| CookieChecker::new(&l.public));
        // A peer can't be ourselves.
        if let Some(own) = self.public_key() {
            if self.by_key.contains(&own) {
                self.remove_peer(&own);
            }
        }
        for pid in 0..self.peers.len() {
            if self.peers[pid].is_some() {
                self.recompute_static(pid);
                self.forget_sessions(pid);
            }
        }
        self.peers.settle();
    }

    pub fn private_key(&self) -> Option<[u8; 32]> {
        self.local.as_ref().map(|l| l.private.to_bytes())
    }

    pub fn public_key(&self) -> Option<[u8; 32]> {
        self.local.as_ref().map(|l| l.public)
    }

    /// The interface's data cipher policy (peers may override it).
    pub fn set_cipher(&mut self, policy: CipherPolicy) {
        self.cipher = policy;
    }

    /// One peer's cipher policy; `None` follows the interface's.
    pub fn set_peer_cipher(&mut self, pid: PeerId, policy: Option<CipherPolicy>) {
        if let Some(p) = self.peers[pid].as_mut() {
            p.cipher = policy;
        }
        self.peers.settle();
    }

    /// Test knob (feature `testing`): overrides the AES hardware detection
    /// (a CPU without AES).
    #[cfg(feature = "testing")]
    pub fn set_aes_hardware(&mut self, present: bool) {
        self.aes_hardware = present;
    }

    /// Seals AES-256-GCM in sessions made from now on with `library`
    /// (ring until told otherwise).
    pub fn set_aes_library(&mut self, library: crate::cipher::AesLibrary) {
        self.aes_library = library;
    }

    /// Whether new sessions with `pid` offer AES-256-GCM, and then with
    /// which library they seal it. Never without the extensions: a
    /// stock-WireGuard-mode device only speaks ChaCha.
    pub(super) fn offers_aes(&self, pid: PeerId) -> Option<crate::cipher::AesLibrary> {
        let policy = self.peers[pid]
            .as_ref()
            .and_then(|p| p.cipher)
            .unwrap_or(self.cipher);
        (self.extensions && policy.offers_aes(self.aes_hardware)).then_some(self.aes_library)
    }

    /// Turns braid's extensions on (the default) or off.
    pub fn set_extensions(&mut self, enabled: bool) {
        self.extensions = enabled;
    }

    pub fn set_mtu(&mut self, mtu: usize) {
        self.mtu = mtu;
        // A raised tunnel MTU must not push full-size packets past the
        // reorder windows (they would skip reordering and open gaps).
        for p in self.peers.iter_mut_untimed() {
            p.reorder.raise_max_packet(mtu);
        }
    }

    /// Test only: rekey sessions this often instead of every 120 s, so
    /// end-to-end tests can watch many rekeys during a short transfer.
    /// Handshakes still start at most once per REKEY_TIMEOUT. Not behind
    /// the `testing` feature: the end-to-end tests reach it in the real
    /// daemon (`BRAID_TEST_REKEY_AFTER_SECS`).
    pub fn set_rekey_after_time_for_tests(&mut self, after: Duration) {
        self.rekey_after_time = after;
    }

    pub fn mtu(&self) -> usize {
        self.mtu
    }

    pub fn find_peer(&self, public: &[u8; 32]) -> Option<PeerId> {
        self.by_key.get(public)
    }

    /// Adds a peer (or returns the existing one). `None` when the key is our
    /// own or the device is full (`MAX_PEERS`, or a lower `set_peer_limit`).
    pub fn add_peer(&mut self, public: [u8; 32]) -> Option<PeerId> {
        if let Some(pid) = self.by_key.get(&public) {
            return Some(pid);
        }
        if self.public_key() == Some(public) || self.by_key.len() >= self.peer_limit {
            return None;
        }
        let peer = Peer::new(public);
        let pid = self.peers.insert(peer);
        self.by_key.insert(public, pid);
        // Window slots sized for this interface's MTU.
        self.set_reorder(pid, None, None);
        self.peers.settle();
        Some(pid)
    }

    pub fn remove_peer(&mut self, public: &[u8; 32]) -> bool {
        let Some(pid) = self.by_key.remove(public) else {
            return false;
        };
        self.clear_allowed_ips(pid);
        // The peer's own receiver indices (its pending handshake and its
        // sessions), not a scan of every index: removing all of 100,000
        // peers stays linear.
        if let Some(p) = self.peers[pid].as_ref() {
            let k = &p.keypairs;
            let own = [
                p.handshake.as_ref().map(|h| h.local_index),
                k.next.as_ref().map(|s| s.local_index),
                k.current.as_ref().map(|s| s.local_index),
                k.previous.as_ref().map(|s| s.local_index),
            ];
            for index in own.into_iter().flatten() {
                if let Some(IndexEntry::Handshake(q) | IndexEntry::Session(q)) =
                    self.indices.get(&index)
                {
                    if *q == pid {
                        self.indices.remove(&index);
                    }
                }
            }
        }
        // Off the lists it is on (only then a walk of one list): the slot
        // may soon hold another peer, which must not inherit its turn.
        if let Some(p) = self.peers.remove(pid) {
            if p.flush_queued {
                self.pending_flush.retain(|&p| p != pid);
            }
            if p.ready_queued {
                self.reorder_ready.retain(|&p| p != pid);
            }
        }
        self.peers.settle();
        true
    }

    pub fn remove_all_peers(&mut self) {
        let keys = self.by_key.keys();
        for k in keys {
            self.remove_peer(&k);
        }
    }

    /// How many peers the device holds at most (`MAX_PEERS` unless a test
    /// lowered it): a configuration that would go beyond is refused whole.
    pub fn peer_limit(&self) -> usize {
        self.peer_limit
    }

    /// Test knob (feature `testing`): holds at most `limit` peers (never
    /// more than `MAX_PEERS`); peers already there stay.
    #[cfg(feature = "testing")]
    pub fn set_peer_limit(&mut self, limit: usize) {
        self.peer_limit = limit.min(MAX_PEERS);
    }

    pub fn peer_count(&self) -> usize {
        self.by_key.len()
    }

    /// Receiver indices in use (handshakes and sessions): at most
    /// `1 + 3` per peer, whatever arrives.
    pub fn index_count(&self) -> usize {
        self.indices.len()
    }

    pub fn peer_ids(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.peers
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|_| i))
    }

    pub fn peer(&self, pid: PeerId) -> Option<&Peer> {
        self.peers.get(pid)
    }

    /// Peers that have a session now: the ones whose paths carry
    /// anything (path MTU, connections), without a walk of every peer.
    pub fn peers_with_session(&self) -> &[PeerId] {
        self.peers.with_session()
    }

    /// Moves into `out` the peers that changed (were worked on: traffic,
    /// timers, handshakes, configuration, removal) since the last call,
    /// each once, so a watcher (the daemon's event log) compares those
    /// and not every peer. A removed peer's id comes with no peer behind
    /// it (or with the next peer that took its slot).
    pub fn take_changed_peers(&mut self, out: &mut Vec<PeerId>) {
        self.peers.take_changed(out);
    }

    /// Peers `handle_timeout` woke since the device was made: one per
    /// due deadline, however many peers are idle (what the simulator's
    /// many-peer cases count).
    pub fn peers_woken(&self) -> u64 {
        self.peers.woken
    }

    pub fn set_preshared_key(&mut self, pid: PeerId, psk: [u8; 32]) {
        if let Some(p) = self.peers[pid].as_mut() {
            p.remote.preshared = psk;
        }
        self.peers.settle();
    }

    pub fn set_endpoint(&mut self, pid: PeerId, endpoint: SocketAddr) {
        if let Some(p) = self.peers[pid].as_mut() {
            p.set_endpoint(endpoint);
        }
        self.peers.settle();
    }

    /// Adds a configured path: `remote` reached over local line `line`.
    pub fn add_path(&mut self, pid: PeerId, name: &str, line: u16, remote: SocketAddr) -> bool {
        let added = self.peers[pid]
            .as_mut()
            .is_some_and(|p| p.add_path(name, line, remote));
        self.peers.settle();
        added
    }

    /// Removes the configured path `name` of peer `pid` (never the plain
    /// `Endpoint`'s path or one learned from traffic); the session stays.
    /// What is kept per path position (the reorder window's view of each
    /// line, the copies kept for repairs, the paths' measurements) starts
    /// over, since the later paths move up one place; the remaining lines
    /// are measured again within a few probe intervals.
    pub fn remove_path(&mut self, pid: PeerId, name: &str) -> bool {
        if pid >= self.peers.len() {
            return false;
        }
        let Some(p) = self.peers[pid].as_mut() else {
            return false;
        };
        let Some(i) = p.paths.iter().position(|path| {
            path.configured && path.name == name && name != crate::peer::ENDPOINT_PATH
        }) else {
            return false;
        };
        p.paths.remove(i);
        for path in &mut p.paths {
            let counters = path.counters;
            *path = crate::path::Path::new(&path.name, path.line, path.remote, path.configured);
            path.counters = counters;
        }
        p.sent_copies = None;
        p.parity_out = None;
        p.parity_in = None;
        p.last_path = 0;
        let cfg = p.reorder.config().clone();
        p.reorder = ReorderWindow::new(cfg);
        p.reorder_session = None;
        p.reorder_retired = [None; 2];
        self.peers.settle();
        true
    }

    /// Applies all of braid's per-peer settings at once (see
    /// [`PeerOptions`]); the reorder window is rebuilt only when a reorder
    /// setting is given.
    pub fn set_peer_options(&mut self, pid: PeerId, options: &PeerOptions) {
        self.set_mode(pid, options.mode);
        self.set_peer_cipher(pid, options.cipher);
        self.set_rate_limit(pid, options.rate_limit);
        self.set_peer_compression(pid, options.compression);
        if options.reorder_hold.is_some() || options.reorder_capacity.is_some() {
            self.set_reorder(pid, options.reorder_hold, options.reorder_capacity);
        }
    }

    /// Whether parity for lossy lines is offered and sent (see `fec`; on
    /// unless turned off, for comparisons). Takes effect with the next
    /// hellos.
    pub fn set_parity(&mut self, on: bool) {
        self.parity = on;
    }

    pub fn set_mode(&mut self, pid: PeerId, mode: crate::path::Mode) {
        if let Some(p) = self.peers[pid].as_mut() {
            p.mode = mode;
        }
        self.peers.settle();
    }

    /// Sets the persistent keepalive; turning it on sends one at once, which
    /// is also what brings a configured tunnel up without traffic.
    pub fn set_persistent_keepalive(&mut self, now: Instant, pid: PeerId, seconds: u16) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        let was = p.persistent_keepalive;
        p.persistent_keepalive = seconds;
        if seconds == 0 {
            p.timers.cancel(Timer::PersistentKeepalive);
        } else if was == 0 {
            self.send_keepalive(now, pid);
        }
        self.peers.settle();
    }

    pub fn add_allowed_ip(
        &mut self,
        pid: PeerId,
        addr: IpAddr,
        prefix: u8,
    ) -> Result<(), InvalidPrefix> {
        let old = self.allowed.insert(addr, prefix, pid)?;
        if old != Some(pid) {
            let allowed = &self.allowed;
            if let Some(p) = self.peers.get_mut_untimed(pid) {
                p.allowed_prefixes += 1;
                p.prefixes
                    .push((crate::allowed_ips::masked(addr, prefix), prefix));
                // Prefixes moved to other peers since: kept until they
                // outnumber the rest, so each addition stays O(1) amortized.
                if p.prefixes.len() > 2 * p.allowed_prefixes + 16 {
                    p.prefixes
                        .retain(|&(a, l)| allowed.get_exact(a, l) == Some(pid));
                    p.prefixes.sort_unstable();
                    p.prefixes.dedup();
                }
            }
            if let Some(p) = old.and_then(|o| self.peers.get_mut_untimed(o)) {
                p.allowed_prefixes = p.allowed_prefixes.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// Takes every AllowedIP from the peer: one lookup per prefix it was
    /// given, not a walk of the table.
    pub fn clear_allowed_ips(&mut self, pid: PeerId) {
        let Some(p) = self.peers.get_mut_untimed(pid) else {
            return;
        };
        p.allowed_prefixes = 0;
        for (addr, prefix) in std::mem::take(&mut p.prefixes) {
            self.allowed.remove_if_value(addr, prefix, pid);
        }
    }

    pub fn peer_info(&self, pid: PeerId) -> Option<PeerInfo> {
        Some(Self::info_of(self.peer(pid)?, self.allowed_ips_of(pid)))
    }

    /// [`peer_info`](Self::peer_info) of every peer, in `peer_ids` order,
    /// with one walk of the AllowedIPs table for all of them (a `get` of
    /// 100,000 peers is then linear, not quadratic).
    pub fn peer_infos(&self) -> Vec<(PeerId, PeerInfo)> {
        let mut prefixes = self.allowed.entries_by_value();
        self.peer_ids()
            .filter_map(|pid| {
                let p = self.peer(pid)?;
                let ips = prefixes.remove(&pid).unwrap_or_default();
                Some((pid, Self::info_of(p, ips)))
            })
            .collect()
    }

    /// The AllowedIPs of one peer, in the table's order (IPv4 first, by
    /// address, shorter prefixes first), from what the peer was given:
    /// one lookup each, not a walk of the table (listing every peer of a
    /// streamed `get` is then linear).
    pub fn allowed_ips_of(&self, pid: PeerId) -> Vec<(IpAddr, u8)> {
        let Some(p) = self.peer(pid) else {
            return Vec::new();
        };
        let mut ips: Vec<(IpAddr, u8)> = p
            .prefixes
            .iter()
            .copied()
            .filter(|&(addr, prefix)| self.allowed.get_exact(addr, prefix) == Some(pid))
            .collect();
        ips.sort_unstable_by_key(|&(addr, prefix)| (addr.is_ipv6(), addr, prefix));
        ips.dedup();
        ips
    }

    /// Peer ids are below this (slots, taken or free).
    pub fn peer_id_bound(&self) -> PeerId {
        self.peers.len()
    }

    fn info_of(p: &Peer, allowed_ips: Vec<(IpAddr, u8)>) -> PeerInfo {
        PeerInfo {
            public_key: p.public_key(),
            preshared_key: p.remote.preshared,
            endpoint: p.endpoint(),
            paths: p.paths.clone(),
            mode: p.mode,
            speaks_braid: p.speaks_braid(),
            cipher: p.keypairs.current.as_ref().map(|k| k.send_cipher()),
            persistent_keepalive: p.persistent_keepalive,
            reorder: p.reorder.counters(),
            reorder_gaps: p.reorder.gap_counters(),
            reorder_hold: p.reorder.effective_hold(),
            reorder_skew: p.reorder.hold_parts().0,
            reorder_lateness: p.reorder.hold_parts().1,
            reorder_lateness_measured: p.reorder.lateness_measured(),
            repair_wait: p.reorder.hold_parts().2,
            reorder_held: p.reorder.held_packets(),
            resent: p.sent_copies.as_ref().map_or(0, |c| c.resent),
            resend_unavailable: p.sent_copies.as_ref().map_or(0, |c| c.unavailable),
            resend_congestion: p.sent_copies.as_ref().map_or(0, |c| c.congestion),
            parity_sent: p.parity_out.as_ref().map_or(0, |e| e.sent),
            parity_received: p.parity_in.as_ref().map_or(0, |d| d.pieces),
            rebuilt: p.parity_in.as_ref().map_or(0, |d| d.rebuilt),
            last_handshake: p.last_handshake,
            allowed_ips,
            counters: p.counters,
            rate_limit_bits: p.rate_limit.as_ref().map(|r| r.rate_bits()),
            mtu_limit: p.mtu_limit,
            fragment_payload: p.fragment_payload,
            joins_fragments: p.joins_fragments(),
            fragments_dropped: p.reassembly.dropped,
        }
    }

    // ----- time -----

    /// When `handle_timeout` must run next: the earliest of every peer's
    /// deadline, read in O(1) from the schedule (see `deadlines`). While
    /// initiations wait in the queue it is when the oldest came (due at
    /// once): the driver answers a budget of them per wake-up
    /// ([`prepare_queued_initiations`](Self::prepare_queued_initiations)).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let queued = self.initiations.front().map(|q| q.at);
        match (self.peers.next_deadline(), queued) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires every timer that is due: only the peers whose deadline has
    /// come are visited, however many others there are.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.scratch_due);
        self.peers.take_due(now, &mut due);
        for &pid in &due {
            self.schedule_shaped(now, pid);
            let Some(p) = self.peers[pid].as_mut() else {
                continue;
            };
            if p.reorder.poll_timeout().is_some_and(|t| t <= now) {
                p.reorder.handle_timeout(now);
                if p.reorder.ready_packets() > 0 {
                    self.reorder_ready_add(pid);
                }
                self.request_repairs(now, pid);
            }
            while let Some(t) = self.peers[pid]
                .as_mut()
                .and_then(|p| p.timers.pop_expired(now))
            {
                self.fire(now, pid, t);
            }
        }
        due.clear();
        self.scratch_due = due;
        self.peers.settle();
    }

    fn fire(&mut self, now: Instant, pid: PeerId, timer: Timer) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        match timer {
            Timer::RetransmitHandshake => {
                if p.handshake_attempts > MAX_TIMER_HANDSHAKES {
                    // Give up until new traffic asks again; forget keys later.
                    p.timers.cancel(Timer::SendKeepalive);
                    p.purge_staged();
                    if !p.timers.is_set(Timer::ZeroKeyMaterial) {
                        p.timers
                            .set(Timer::ZeroKeyMaterial, now + REJECT_AFTER_TIME * 3);
                    }
                } else {
                    // At most MAX_TIMER_HANDSHAKES + 1: past it, no retry.
                    p.handshake_attempts += 1;
                    self.initiate(now, pid, true);
                }
            }
            Timer::SendKeepalive => {
                self.send_keepalive(now, pid);
                let Some(p) = self.peers[pid].as_mut() else {
                    return;
                };
                if p.need_another_keepalive {
                    p.need_another_keepalive = false;
                    p.timers.set(Timer::SendKeepalive, now + KEEPALIVE_TIMEOUT);
                }
            }
            Timer::NewHandshake => self.initiate(now, pid, false),
            Timer::ZeroKeyMaterial => self.forget_sessions(pid),
            Timer::PersistentKeepalive => {
                if p.persistent_keepalive > 0 {
                    self.send_keepalive(now, pid);
                }
            }
            Timer::Probe => self.probe_paths(now, pid),
        }
    }

    // ----- internals shared by send and receive -----

    fn reorder_ready_add(&mut self, pid: PeerId) {
        if let Some(p) = self.peers[pid].as_mut() {
            if !std::mem::replace(&mut p.ready_queued, true) {
                self.reorder_ready.push(pid);
            }
        }
    }

    /// Fills `out` with packets that reorder windows released, in order,
    /// and rate-limited inbound packets due by `now` (write them to the TUN
    /// after the batch `decapsulate` returned). Returns true while more are
    /// waiting.
    pub fn poll_tun(&mut self, now: Instant, out: &mut PacketBatch) -> bool {
        while let Some(&pid) = self.reorder_ready.last() {
            let Some(p) = self.peers[pid].as_mut() else {
                self.reorder_ready.pop();
                continue;
            };
            p.ready_queued = false;
            while !out.is_full() {
                let Some(packet) = p.reorder.pop_ready() else {
                    break;
                };
                if packet.is_empty() {
                    continue; // a keepalive's or refused packet's place
                }
                if crate::batch::HEADROOM + packet.len() > out.stride() {
                    self.counters.slot_too_small = self.counters.slot_too_small.saturating_add(1);
                    continue;
                }
                out.push_with(
                    crate::batch::HEADROOM,
                    SocketAddr::from(([0, 0, 0, 0], 0)),
                    |b| {
                        b[..packet.len()].copy_from_slice(packet);
                        packet.len()
                    },
                );
            }
            let shaped_due = rate::release_inbound(p, now, out);
            if out.is_full() && (p.reorder.ready_packets() > 0 || shaped_due) {
                p.ready_queued = true;
                self.peers.settle();
                return true;
            }
            self.reorder_ready.pop();
        }
        self.peers.settle();
        false
    }

    /// braid's reorder window for a peer: `hold` is the ceiling (zero turns
    /// the window off), `capacity` its size in packets.
    pub fn set_reorder(&mut self, pid: PeerId, hold: Option<Duration>, capacity: Option<usize>) {
        let mtu = self.mtu;
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        let defaults = ReorderConfig::default();
        let capacity = capacity.unwrap_or(defaults.capacity);
        let cfg = ReorderConfig {
            hold_ceiling: hold.unwrap_or(defaults.hold_ceiling),
            capacity,
            // The byte bound follows the packet bound (2 KiB a packet, as
            // the defaults): a larger ReorderCapacity for a fast bond with
            // a wide delay difference must not stop at 4 MiB.
            max_bytes: capacity
                .saturating_mul(defaults.max_bytes / defaults.capacity)
                .max(defaults.max_bytes),
            max_packet: mtu.max(defaults.max_packet),
            pass_wait: defaults.pass_wait,
            slack_learning: defaults.slack_learning,
        };
        p.reorder = ReorderWindow::new(cfg);
        p.reorder_session = None;
        p.reorder_retired = [None; 2];
        self.peers.settle();
    }

    fn recompute_static(&mut self, pid: PeerId) {
        if let Some(p) = self.peers[pid].as_mut() {
            p.forget_static_static();
        }
    }

    /// Drops every session and the pending handshake of a peer.
    fn forget_sessions(&mut self, pid: PeerId) {
        let mut dropped = std::mem::take(&mut self.scratch_indices);
        if let Some(p) = self.peers[pid].as_mut() {
            p.keypairs.clear(&mut dropped);
            if let Some(h) = p.handshake.take() {
                dropped.push(h.local_index);
            }
        }
        self.drop_indices(&mut dropped);
        self.scratch_indices = dropped;
    }

    fn drop_indices(&mut self, dropped: &mut Vec<u32>) {
        for idx in dropped.drain(..) {
            self.indices.remove(&idx);
        }
    }

    fn new_index(&mut self, entry: IndexEntry) -> u32 {
        loop {
            let idx = self.rng.next_u32();
            if let std::collections::hash_map::Entry::Vacant(v) = self.indices.entry(idx) {
                v.insert(entry);
                return idx;
            }
        }
    }

    fn jitter(&mut self) -> Duration {
        Duration::from_nanos(self.rng.next_u64() % REKEY_TIMEOUT_JITTER_MAX.as_nanos() as u64)
    }

    fn random_bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.rng.fill_bytes(&mut b);
        b
    }

    // ----- the driver's clocks -----

    /// The wall clock: `wall` is the wall-clock time at `now`. Wall time
    /// is the driver's monotonic time plus the offset this sets, so a
    /// driver calls it often (the daemon every second): a clock that NTP
    /// set or stepped after the device was made then shows in the next
    /// initiation's TAI64N timestamp and in "latest handshake". Only the
    /// offset changes: deadlines and ages stay on the monotonic clock.
    pub fn set_wall_clock(&mut self, now: Instant, wall: SystemTime) {
        self.wall_anchor = (now, wall);
    }

    /// `slept` passed that the monotonic clock `now` comes from did not
    /// count (a suspend: Linux's CLOCK_MONOTONIC stops in it, its
    /// CLOCK_BOOTTIME does not). Everything that ages does so by `slept`:
    /// sessions (past REKEY_AFTER_TIME the initiator rekeys, past
    /// REJECT_AFTER_TIME they carry nothing more), the peers' timers (now
    /// due ones fire at the next [`handle_timeout`](Self::handle_timeout),
    /// so call it next: e.g. ZeroKeyMaterial after 3 × REJECT_AFTER_TIME),
    /// the handshake rate limits, the cookie secret and the cookies held,
    /// and the wall clock's offset (the wall clock ran on). Paths, reorder
    /// windows and rate shapers measure the network, not key lifetimes, and
    /// start over from what arrives.
    pub fn time_passed_unseen(&mut self, now: Instant, slept: Duration) {
        if slept.is_zero() {
            return;
        }
        let earlier = |t: Instant| t.checked_sub(slept);
        let (at, wall) = self.wall_anchor;
        self.wall_anchor = (at, wall.checked_add(slept).unwrap_or(wall));
        self.handshake_window = match earlier(self.handshake_window.0) {
            Some(start) => (start, self.handshake_window.1),
            None => (now, 0),
        };
        self.under_load_until = self.under_load_until.and_then(earlier);
        if let Some(checker) = self.checker.as_mut() {
            checker.age_by(slept);
        }
        for pid in 0..self.peers.len() {
            let Some(p) = self.peers[pid].as_mut() else {
                continue;
            };
            p.timers.shift_back(now, slept);
            p.last_initiation_sent = p.last_initiation_sent.and_then(earlier);
            p.last_initiation_consumed = p.last_initiation_consumed.and_then(earlier);
            p.cookie.age_by(slept);
            if !p.keypairs.age_by(slept) {
                // Too old to say how old: no use for anything.
                self.forget_sessions(pid);
            }
        }
        self.peers.settle();
    }

    /// The wall-clock time at `now`: the driver's last word on it
    /// ([`set_wall_clock`](Self::set_wall_clock), else [`new`](Self::new))
    /// plus the monotonic time since. One within an uptime of the end of
    /// `SystemTime` would overflow, and then time stands still at the base
    /// instead of a panic; before the base it is the base.
    pub fn wall_clock(&self, now: Instant) -> SystemTime {
        let (at, wall) = self.wall_anchor;
        wall.checked_add(now.saturating_duration_since(at))
            .unwrap_or(wall)
    }

    fn timestamp(&self, now: Instant) -> noise::Timestamp {
        let since = self
            .wall_clock(now)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        noise::tai64n(since.as_secs(), since.subsec_nanos())
    }

    fn queue_control(&mut self, line: u16, dst: SocketAddr, msg: &[u8]) {
        if self.control.len() >= MAX_QUEUED_CONTROL {
            self.counters.control_queue_full = self.counters.control_queue_full.saturating_add(1);
            return;
        }
        let mut c = Control {
            line,
            dst,
            len: msg.len(),
            bytes: [0; INITIATION_LEN],
        };
        c.bytes[..msg.len()].copy_from_slice(msg);
        self.control.push_back(c);
    }

    /// Counts a handshake message and says whether we are under load:
    /// more than `UNDER_LOAD_HANDSHAKES_PER_SECOND` of them, or
    /// `UNDER_LOAD_QUEUED_INITIATIONS` waiting in the queue (as
    /// wireguard-go judges by its queue), and for `UNDER_LOAD_AFTER` after.
    fn under_load(&mut self, now: Instant) -> bool {
        let (start, count) = &mut self.handshake_window;
        if now.saturating_duration_since(*start) >= Duration::from_secs(1) {
            *start = now;
            *count = 0;
        }
        // Saturating: a flood within one second (or one `now`) counts on.
        *count = count.saturating_add(1);
        if *count > UNDER_LOAD_HANDSHAKES_PER_SECOND
            || self.initiations.len() >= UNDER_LOAD_QUEUED_INITIATIONS
        {
            self.under_load_until = Some(now + UNDER_LOAD_AFTER);
        }
        self.under_load_until.is_some_and(|u| now < u)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;

    /// The latest wall-clock time `checked_add` reaches.
    fn end_of_wall_time() -> SystemTime {
        let (mut lo, mut hi) = (0u64, u64::MAX);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if UNIX_EPOCH.checked_add(Duration::from_secs(mid)).is_some() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        UNIX_EPOCH + Duration::from_secs(lo)
    }

    #[test]
    fn the_wall_clock_is_what_the_driver_last_said() {
        let now = Instant::now();
        let mut d = Device::new(now, UNIX_EPOCH, [0; 32]);
        let later = now + Duration::from_secs(10);
        let s = Duration::from_secs;
        let right = UNIX_EPOCH + s(1_800_000_000);
        d.set_wall_clock(later, right);
        assert_eq!(d.wall_clock(later + s(5)), right + s(5));
        // A step back is taken as it is.
        d.set_wall_clock(later + s(5), right - s(600));
        assert_eq!(d.wall_clock(later + s(6)), right - s(599));
        // After a suspend the wall clock has run on by the time slept.
        d.time_passed_unseen(later + s(6), s(60));
        assert_eq!(d.wall_clock(later + s(6)), right - s(539));
        // The origin of path probe times never moves (peers echo them).
        assert_eq!(d.mono_base, now);
    }

    #[test]
    fn the_timestamp_after_another_is_one_whitened_step_on() {
        let step = 1 << 24;
        let t = noise::tai64n(100, 0);
        assert_eq!(noise::tai64n_after(&t), noise::tai64n(100, step));
        // Within the step of the second's end: the next second.
        let t = noise::tai64n(100, 999_999_999);
        assert_eq!(noise::tai64n_after(&t), noise::tai64n(101, 0));
        assert!(noise::tai64n_after(&[0; 12]) > [0; 12]);
        // Nothing comes after the end of TAI64.
        let mut end = [0xff; 12];
        end[8..].copy_from_slice(&999_999_999u32.to_be_bytes());
        assert_eq!(noise::tai64n_after(&end), end);
    }

    #[test]
    fn a_wall_clock_at_the_end_of_time_stands_still() {
        let now = Instant::now();
        let wall = end_of_wall_time();
        let d = Device::new(now, wall, [0; 32]);
        let later = now + Duration::from_secs(3600);
        assert_eq!(d.wall_clock(later), wall);
        // TAI64N of the largest time there is does not overflow either.
        let t = d.timestamp(later);
        assert!(t > noise::tai64n(0, 0));
        // An ordinary base moves with the monotonic clock.
        let d = Device::new(now, UNIX_EPOCH, [0; 32]);
        assert_eq!(d.wall_clock(later), UNIX_EPOCH + Duration::from_secs(3600));
        assert_eq!(d.wall_clock(now - Duration::from_secs(1)), UNIX_EPOCH);
    }

    #[test]
    fn handshake_count_saturates_and_stays_under_load() {
        let now = Instant::now();
        let mut d = Device::new(now, UNIX_EPOCH, [0; 32]);
        d.handshake_window = (now, u32::MAX - 1);
        assert!(d.under_load(now));
        assert!(d.under_load(now));
        assert_eq!(d.handshake_window.1, u32::MAX);
        // A second later the window starts over.
        let later = now + Duration::from_secs(2);
        assert!(!d.under_load(later));
        assert_eq!(d.handshake_window, (later, 1));
    }
}
