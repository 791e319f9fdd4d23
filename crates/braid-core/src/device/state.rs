//! What a [`Device`] holds between calls. The methods live by job in the
//! sibling modules (`mod.rs`: configuration and timers; `handshake`, `send`,
//! `receive`, `multipath`, `pmtu`, `rate`, `compression`), which all work on
//! these fields.

use super::jobs::CryptoJobs;
use super::table::{PeerKeys, PeerTable};
use crate::allowed_ips::AllowedIps;
use crate::batch::LocalAddr;
use crate::cipher::CipherPolicy;
use crate::cookie::CookieChecker;
use crate::ext::PmtuBody;
use crate::messages::INITIATION_LEN;
use crate::noise::LocalStatic;
use crate::peer::PeerId;
use crate::ratelimiter::SourceRateLimiter;
use rand_core::RngCore;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

/// Device-wide counters of what was dropped and why (attacker-triggerable
/// events are counted, never logged per packet). They saturate: a wrapped
/// counter would read as a small one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Datagrams that are no WireGuard message (type/length mismatch).
    pub invalid_datagrams: u64,
    /// Handshake messages whose mac1 was wrong.
    pub invalid_mac: u64,
    /// Handshake messages that failed to decrypt or named no known peer.
    pub handshake_rejected: u64,
    /// Initiations dropped as replays or for exceeding the per-peer rate.
    pub handshake_flood_dropped: u64,
    pub cookie_replies_sent: u64,
    /// Handshake messages with a valid cookie dropped by the per-source
    /// rate limit (under load only, as WireGuard).
    pub handshake_rate_limited: u64,
    /// Handshake responses dropped because their batch had used up
    /// `MAX_HANDSHAKES_PER_BATCH` (initiations wait in the queue instead).
    pub handshake_over_budget: u64,
    /// Admitted initiations that found the initiation queue full
    /// (`MAX_QUEUED_INITIATIONS`) and were dropped.
    pub handshake_queue_full: u64,
    /// Queued initiations dropped unanswered because they had waited
    /// `REKEY_TIMEOUT` (their initiator has sent another by then).
    pub handshake_queue_stale: u64,
    /// Data messages for a receiver index we do not have.
    pub unknown_index: u64,
    /// Packets from the TUN with no peer in AllowedIPs.
    pub no_route: u64,
    /// Control messages dropped because the output queue was full.
    pub control_queue_full: u64,
    /// ICMP "too big" answers dropped because too many were waiting.
    pub too_big_queue_full: u64,
    /// Packets a reorder window could not take (its ready queue was full).
    pub reorder_overflow: u64,
    /// Packets dropped because the batch the driver handed over had slots
    /// too small for them (it sizes its slots for the MTU; this counts the
    /// packets that came before it grew them).
    pub slot_too_small: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IndexEntry {
    /// Our pending initiation to this peer.
    Handshake(PeerId),
    /// One of this peer's sessions.
    Session(PeerId),
}

/// A small outgoing message (handshake, cookie reply, keepalive).
pub(super) struct Control {
    pub(super) line: u16,
    pub(super) dst: SocketAddr,
    pub(super) len: usize,
    pub(super) bytes: [u8; INITIATION_LEN],
}

/// An admitted initiation waiting for its Diffie-Hellman work (see
/// `Device::initiations`).
pub(super) struct QueuedInitiation {
    pub(super) line: u16,
    pub(super) src: SocketAddr,
    pub(super) arrived_at: LocalAddr,
    /// When it was admitted: it is answered only within `REKEY_TIMEOUT`.
    pub(super) at: Instant,
    pub(super) msg: [u8; INITIATION_LEN],
}

/// A padded path MTU probe waiting for its turn (too big for `control`).
pub(super) struct QueuedProbe {
    pub(super) pid: PeerId,
    pub(super) line: u16,
    pub(super) remote: SocketAddr,
    pub(super) body: PmtuBody,
}

/// A data message a peer asked for again (see `repair`).
#[derive(Debug, Clone, Copy)]
pub(super) struct QueuedResend {
    pub(super) pid: PeerId,
    pub(super) session: u32,
    pub(super) counter: u64,
    pub(super) line: u16,
    pub(super) remote: SocketAddr,
}

/// A parity piece for the peer's quickest line (see `fec`): its payload,
/// sealed when sent, in the session whose counters it names.
pub(super) struct QueuedParity {
    pub(super) pid: PeerId,
    pub(super) session: u32,
    pub(super) line: u16,
    pub(super) remote: SocketAddr,
    pub(super) payload: Vec<u8>,
}

/// One WireGuard interface: keys, peers, sessions, paths and queues. Its
/// behaviour is [`Device`]'s methods, in `device/mod.rs` and its siblings.
pub struct Device {
    /// Shared with the crypto jobs that answer initiations.
    pub(super) local: Option<std::sync::Arc<LocalStatic>>,
    pub(super) checker: Option<CookieChecker>,
    pub(super) peers: PeerTable,
    pub(super) by_key: PeerKeys,
    pub(super) peer_limit: usize,
    pub(super) allowed: AllowedIps<PeerId>,
    /// Keyed by the indices we chose at random (see [`IndexHash`]).
    pub(super) indices: HashMap<u32, IndexEntry, IndexHash>,
    /// Every random choice (ephemeral keys, indices, jitter, cookie
    /// secrets); see [`Device::set_random_source`](super::Device::set_random_source).
    pub(super) rng: Box<dyn RngCore + Send>,
    /// The origin of the monotonic microseconds in path probes (fixed: the
    /// peer echoes them back).
    pub(super) mono_base: Instant,
    /// One moment on the monotonic and on the wall clock, as the driver
    /// last said ([`Device::set_wall_clock`](super::Device::set_wall_clock)).
    pub(super) wall_anchor: (Instant, SystemTime),
    pub(super) mtu: usize,
    pub(super) control: VecDeque<Control>,
    /// Padded path MTU probes waiting to be sent (too big for `control`).
    pub(super) pmtu_probes: VecDeque<QueuedProbe>,
    /// Probe trains waiting for `poll_transmit` (see `trains`).
    pub(super) trains: VecDeque<super::trains::TrainPart>,
    pub(super) resends: VecDeque<QueuedResend>,
    /// Parity pieces waiting for `poll_transmit` (see `fec`), and their
    /// buffers kept for reuse.
    pub(super) parities: VecDeque<QueuedParity>,
    pub(super) parity_buffers: Vec<Vec<u8>>,
    /// Where a message rebuilt from parity is delivered from.
    pub(super) rebuild_scratch: Vec<u8>,
    /// Padding never grows a packet beyond what the paths carry.
    pub(super) padding_cap: usize,
    /// ICMP "too big" answers for the TUN: the first `too_big_len` are
    /// waiting, the rest are buffers kept for reuse.
    pub(super) too_big: Vec<Vec<u8>>,
    pub(super) too_big_len: usize,
    /// Peers with staged packets that may now be sendable (each once:
    /// `Peer::flush_queued`).
    pub(super) pending_flush: Vec<PeerId>,
    /// Peers whose reorder window has packets ready for the TUN (each
    /// once: `Peer::ready_queued`).
    pub(super) reorder_ready: Vec<PeerId>,
    /// The peers `handle_timeout` found due, reused call to call.
    pub(super) scratch_due: Vec<PeerId>,
    /// The batch's last AllowedIPs answers, for packets to and from the
    /// same address (see `route_memo`).
    pub(super) send_route: super::route_memo::RouteMemo,
    pub(super) receive_route: super::route_memo::RouteMemo,
    pub(super) handshake_window: (Instant, u32),
    /// Handshakes the batch being received may still spend DH work on.
    pub(super) handshake_budget: u32,
    /// Admitted initiations over a batch's budget, oldest first, answered
    /// by later batches and wake-ups (at most `MAX_QUEUED_INITIATIONS`;
    /// grown on demand, kept once grown).
    pub(super) initiations: VecDeque<QueuedInitiation>,
    pub(super) source_limiter: SourceRateLimiter,
    pub(super) under_load_until: Option<Instant>,
    pub(super) scratch_indices: Vec<u32>,
    /// The crypto jobs of `encapsulate`/`decapsulate` (the one-call forms).
    pub(super) scratch_jobs: CryptoJobs,
    /// braid's extensions (hello, probes, multipath); off = behave exactly
    /// like stock WireGuard.
    pub(super) extensions: bool,
    /// Parity for lossy lines offered and sent (see `fec`).
    pub(super) parity: bool,
    /// The interface's `Cipher =` and whether this CPU has AES instructions.
    pub(super) cipher: CipherPolicy,
    pub(super) aes_hardware: bool,
    /// Which library new sessions seal AES-256-GCM with (the I/O layer
    /// measures which is fastest here; the bytes are the same).
    pub(super) aes_library: crate::cipher::AesLibrary,
    /// REKEY_AFTER_TIME, shortened only by fault tests (see
    /// [`Device::set_rekey_after_time_for_tests`]).
    pub(super) rekey_after_time: Duration,
    /// The interface's `Compression =` and the compressor's buffers.
    pub(super) compression: crate::compress::CompressionPolicy,
    pub(super) lz4: crate::compress::Lz4,
    /// Where datagrams to each (line, remote) leave from (`sticky`).
    pub(super) sticky: super::sticky::StickySources,
    /// Peers whose packets became (or stopped being) limited below IPv6's
    /// 1280 bytes or split into fragments, for the driver to log.
    pub counters: DeviceCounters,
}

/// Hashes the session indices `indices` is keyed by: our own random
/// 32-bit numbers, so one multiplication spreads them well, and a peer
/// cannot choose what goes into the table (what it sends is only looked
/// up). Every data message looks its index up: SipHash, the standard
/// hasher, cost about 1 % of a one-stream tunnel's CPU (`perf`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IndexHash;

impl std::hash::BuildHasher for IndexHash {
    type Hasher = IndexHasher;

    fn build_hasher(&self) -> IndexHasher {
        IndexHasher(0)
    }
}

#[derive(Debug)]
pub(crate) struct IndexHasher(u64);

impl std::hash::Hasher for IndexHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only u32 keys are hashed; any other input still hashes correctly.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        // The golden-ratio multiplier moves the index into the high bits,
        // which hashbrown's control bytes use; the low bits (bucket) are
        // the index's own, random.
        self.0 = (u64::from(n) | u64::from(n) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
