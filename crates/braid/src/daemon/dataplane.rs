//! The two data-plane threads of an interface and what they share.
//!
//! Where a packet goes, step by step (the functions below come in this
//! order; `[lock]` is the device lock):
//!
//! ```text
//! out: app ─► TUN                                           send_one_batch
//!  1. braid-io: read a batch (64 KiB TCP super-packets      Tun::read_batch
//!     split into MTU packets)
//!  2. daemon: MSS clamp                                     Shared::clamp_mss
//!  3. daemon: too-big answer for what the path              PathMtu::answer_oversize
//!     does not carry (ICMP back into the TUN)
//!  4. braid-core Device [lock]: peer by AllowedIPs, rate    Device::prepare_encapsulate
//!     limit, compression, lines by Mode, counter
//!  5. the AEAD seals the batch (helpers share a large one)  CryptoHelpers::seal
//!  6. braid-io: sendmmsg with GSO (or a TCP line)           Lines::send
//!     ─► line 1, line 2, …
//!  7. what the device queued meanwhile (handshakes,         transmit_pending
//!     keepalives, released packets)
//!
//! in:  line 1, line 2, … ─►                                 receive_from_line
//!  1. braid-io: recvmmsg with GRO                           Lines::recv
//!  2. braid-core Device [lock]: session by index            Device::prepare_decapsulate
//!     (handshakes and cookies handled here)
//!  3. the AEAD opens the batch (helpers share a large one)  CryptoHelpers::open
//!  4. braid-core Device [lock]: replay check,               Device::finish_decapsulate
//!     decompression, inner source against AllowedIPs,
//!     rate limit, reorder window
//!  5. daemon: MSS clamp                                     Shared::clamp_mss
//!  6. braid-io: write a batch to the TUN (one TCP flow      Tun::write_batch
//!     coalesced) ─► app
//!  7. what the reorder windows released, clamped and        write_released_into
//!     written the same way                                  (Device::poll_tun(now))
//!  8. what the device queued; then what the write made the  transmit_pending,
//!     kernel answer, if no one is sending                   send_from_tun_if_idle
//! ```
//!
//! Which thread runs them:
//!
//! ```text
//!   outbound thread:  TUN ─read─► [lock] prepare ─► seal ─► sendmmsg ─► UDP
//!                     (after a bulk batch, if no one is receiving, UDP ─► … ─► TUN)
//!   main thread:      UDP ─recv─► [lock] prepare ─► open ─► [lock] finish ─► TUN
//!                     (then, if no one is sending, TUN ─read─► … ─► UDP)
//!                     timers, handshakes, UAPI requests            [lock]
//!                     while sending is light: TUN ─read─► … ─► UDP too
//! ```
//!
//! The device lock covers only the per-packet bookkeeping (routing,
//! counters, replay and reorder windows, timers); the AEAD work and every
//! system call run outside it, so encryption and decryption proceed on two
//! cores at once; with more cores, helper threads share the AEAD work of a
//! large batch (see [`CryptoHelpers`]). Order per peer holds because one
//! thread at a time sends from the TUN (the `Sender` lock, held from read
//! to send): counters are assigned in TUN order and a batch is sent whole
//! after its seals. In the
//! same way one thread at a time receives (the `Receiver` lock, held from
//! recv to the TUN write).
//!
//! What the main thread writes to the TUN often answers at once (a ping
//! reply, the TCP ACKs of the data just written, the data those ACKs
//! release). The main thread sends that itself when the outbound thread
//! is idle, so a round trip costs one thread wake-up less on each side.
//! Likewise a thread sending in bulk takes in the ACKs that came back
//! between its batches when the main thread is not already at it. On a
//! virtual machine a wake-up of an idle core costs about 10 µs, which is
//! what a ping through the tunnel and a TCP window waited for.
//!
//! With `Queues = N` the TUN has N queues. Queue 0 is served as above;
//! each other queue has a thread of its own that reads it, seals and
//! sends (`run_queue`). The kernel hands all packets of a flow to one
//! queue (braid-io writes each flow to one queue, and the kernel follows
//! that), so each flow is read, sealed and sent by one thread, in order;
//! several flows are sealed on several cores at once. Batches leave in
//! the order of their counters (see [`TurnOrder`]). The main line is then
//! a group of N sockets on one port, and queue K's thread also receives
//! from socket K (steps 1–7 of the second diagram, without the receiver
//! lock: no one else reads that socket). What the reorder windows put in
//! order under the device lock reaches the TUN in that order: each batch
//! takes a ticket there and writes when its turn comes.
//!
//! For the same reason the outbound thread watches the TUN only while
//! sending is bulk; otherwise the main thread watches it next to the
//! lines (see [`run_outbound`]). And after a light send whose answers
//! have been coming back quickly, the main thread polls for up to 250 µs
//! before it sleeps, so the answer needs no wake-up (see `spin`).

use super::batch::{data_plane_batch, fit, stride_for};
use super::crypto_helpers::CryptoHelpers;
use super::lines::Lines;
use super::pmtu::PathMtu;
use super::realtime::Realtime;
use super::tcp_lines;
use super::turn_order::TurnOrder;
use crate::config::MssFix;
use braid_core::batch::PacketBatch;
use braid_core::device::{CryptoJobs, Device};
use braid_core::mss::{self, MssLimit};
use braid_io::{poll, Interest, Tun, TunRead, Waker};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant, SystemTime};

/// How long the outbound thread sleeps at most before it looks at the stop
/// flag again.
const OUTBOUND_POLL: Duration = Duration::from_millis(200);
/// The furthest a queue thread's socket holds the main thread's timers
/// back (see `Shared::members_taken_in`): longer than a preemption or a
/// real-time slice, short enough for keepalives and handshakes.
const MEMBER_LAG_LIMIT: Duration = Duration::from_millis(100);

pub struct Shared {
    device: Mutex<Device>,
    pub tun: Tun,
    lines: RwLock<Lines>,
    pub waker: Arc<Waker>,
    /// When the main thread wakes up next for timers, as nanoseconds since
    /// `epoch`; the outbound thread wakes it earlier when sending moved a
    /// timer before that.
    main_deadline: AtomicU64,
    epoch: Instant,
    stop: AtomicBool,
    mss_fix: MssFix,
    /// The interface MTU as last read, for `MssFix = auto`; the data-plane
    /// threads read it per batch without taking the device lock.
    tunnel_mtu: AtomicU32,
    /// The slot size every batch needs now: for the interface MTU, or a
    /// longer packet or datagram that came (it only grows). Each thread
    /// grows its batches to it before it next uses them.
    stride: AtomicUsize,
    /// Path MTU: the TUN MTU that follows the paths, too-big answers.
    pub path_mtu: PathMtu,
    /// Whoever holds it sends from the TUN.
    sender: Mutex<Scratch>,
    /// Whoever holds it receives from the lines and writes to the TUN.
    receiver: Mutex<Scratch>,
    /// Whether the outbound thread watches the TUN (bulk sending) or the
    /// main thread does, next to the lines (light traffic); see
    /// [`run_outbound`].
    outbound_watches_tun: AtomicBool,
    /// Ends the outbound thread's sleep while the main thread watches.
    outbound_waker: Waker,
    /// Crypto helper threads per direction (see [`CryptoHelpers`]).
    pub crypto_helpers: usize,
    /// `RealtimePriority =`, for the outbound thread to join.
    pub realtime: Option<Realtime>,
    /// The cores handshake initiations are answered on (see
    /// `answer_initiations`).
    pub cores: usize,
    /// Batch parts sealed or opened by crypto helpers.
    pub helper_parts: Arc<AtomicU64>,
    /// Packets read from the TUN and sent, and packets written to the TUN,
    /// by either thread (counted per batch): the main thread's busy-poll
    /// tells by them what a wake-up moved (see `spin`).
    tun_sent: AtomicU64,
    tun_written: AtomicU64,
    /// Packets read from TUN queues 1.. and sent (by `run_queue`).
    extra_queues_sent: AtomicU64,
    /// With more than one TUN queue: the order batches leave in.
    send_order: Option<TurnOrder>,
    /// With more than one socket in the main line's group: the order
    /// received batches reach the TUN in.
    receive_order: Option<TurnOrder>,
    /// Datagrams received on members 1.. of the main line's group (by
    /// the threads of queues 1..).
    extra_sockets_received: AtomicU64,
    /// Ends the sleep of the threads of queues 1.. (stop).
    queue_waker: Waker,
    /// What the threads of queues 1.. took in from their members of the
    /// main line's group (index `k - 1`), for the main thread's timers.
    member_intake: Vec<MemberIntake>,
}

/// How far a queue thread's receive from its socket has got: the main
/// thread's timers give reorder gaps up, and must not while datagrams that
/// may fill them wait in that socket or in that thread's hands.
#[derive(Default)]
struct MemberIntake {
    /// Set from before the thread reads its socket until the device has
    /// what it read.
    receiving: AtomicBool,
    /// Everything that arrived on the socket before this (nanoseconds
    /// since `Shared::epoch`) is in the device.
    taken_in_until: AtomicU64,
}

/// The batches and crypto jobs of one direction (sending from the TUN, or
/// receiving from the lines), owned by the lock that lets one thread at a
/// time do it: so a line's packets reach the TUN, and the TUN's reach the
/// lines, in order.
pub struct Scratch {
    batch: PacketBatch,
    control: PacketBatch,
    jobs: CryptoJobs,
    /// Seal or open parts of a large batch next to the thread holding it.
    helpers: CryptoHelpers,
    /// The kernel's arrival time of each datagram of `batch`.
    times: Vec<Option<SystemTime>>,
    /// Every datagram that arrived before this was taken in by the last
    /// receive: when a read found the socket empty, the moment before that
    /// read; otherwise (a full batch at its budget, or a short one, which
    /// a coalesced receive returns while more waits) the arrival of the
    /// newest datagram it took. The timers that give reorder gaps up run
    /// no further (see `Daemon::main_loop`).
    complete_until: Option<Instant>,
}

impl Scratch {
    fn new(
        stride: usize,
        helpers: usize,
        name: &str,
        parts_handed_out: Arc<AtomicU64>,
        realtime: Option<&Realtime>,
    ) -> std::io::Result<Scratch> {
        let batch = data_plane_batch(stride);
        Ok(Scratch {
            times: vec![None; batch.capacity()],
            batch,
            control: data_plane_batch(stride),
            jobs: CryptoJobs::new(),
            helpers: CryptoHelpers::new(helpers, name, parts_handed_out, realtime)?,
            complete_until: None,
        })
    }
}

/// How the data plane starts out.
pub struct Settings {
    /// The interface MTU.
    pub mtu: u32,
    pub mss_fix: MssFix,
    /// Crypto helper threads per direction.
    pub crypto_helpers: usize,
    /// `RealtimePriority =`, which the outbound thread and the helpers join.
    pub realtime: Option<Realtime>,
}

impl Shared {
    pub fn new(
        device: Device,
        tun: Tun,
        lines: Lines,
        waker: Arc<Waker>,
        path_mtu: PathMtu,
        settings: Settings,
    ) -> std::io::Result<Shared> {
        let Settings {
            mtu,
            mss_fix,
            crypto_helpers: helpers,
            realtime,
        } = settings;
        let helper_parts = Arc::new(AtomicU64::new(0));
        let stride = stride_for(mtu as usize);
        let send_order = (tun.queue_count() > 1).then(TurnOrder::default);
        let receive_order = (lines.main_group_len() > 1).then(TurnOrder::default);
        let member_intake = (1..lines.main_group_len())
            .map(|_| MemberIntake::default())
            .collect();
        Ok(Shared {
            device: Mutex::new(device),
            tun,
            lines: RwLock::new(lines),
            waker,
            main_deadline: AtomicU64::new(0),
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
            mss_fix,
            tunnel_mtu: AtomicU32::new(mtu),
            stride: AtomicUsize::new(stride),
            path_mtu,
            sender: Mutex::new(Scratch::new(
                stride,
                helpers,
                "braid-seal",
                helper_parts.clone(),
                realtime.as_ref(),
            )?),
            receiver: Mutex::new(Scratch::new(
                stride,
                helpers,
                "braid-open",
                helper_parts.clone(),
                realtime.as_ref(),
            )?),
            crypto_helpers: helpers,
            realtime,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            helper_parts,
            outbound_watches_tun: AtomicBool::new(false),
            outbound_waker: Waker::new()?,
            tun_sent: AtomicU64::new(0),
            tun_written: AtomicU64::new(0),
            extra_queues_sent: AtomicU64::new(0),
            send_order,
            receive_order,
            extra_sockets_received: AtomicU64::new(0),
            queue_waker: Waker::new()?,
            member_intake,
        })
    }

    /// `until` (how far the main thread's own receives got), moved back to
    /// what the threads of queues 1.. have not handed to the device yet: a
    /// member socket that holds datagrams (in the kernel, or left by a
    /// coalesced receive), or whose thread is between its read and the
    /// device, counts up to where that thread's receives got. One flow's
    /// lines can land on different members, so a gap on one may be filled
    /// from another's socket.
    pub fn members_taken_in(&self, until: Instant) -> std::io::Result<Instant> {
        if self.member_intake.is_empty() {
            return Ok(until);
        }
        let lines = self.lines();
        // Every timer of the device waits with the gaps: a queue thread
        // busy sending holds them back no further than this.
        let floor = until.checked_sub(MEMBER_LAG_LIMIT).unwrap_or(until);
        let mut until = until;
        let mut fds = [(0, Interest::READABLE); poll::MAX_FDS];
        let mut members = [0usize; poll::MAX_FDS];
        let mut k = 1;
        while k <= self.member_intake.len() {
            // Readiness is read before the thread's flag: a read that
            // emptied the socket after the poll has the flag set.
            let mut n = 0;
            while n < poll::MAX_FDS && k <= self.member_intake.len() {
                if let Some(socket) = lines.member(k) {
                    fds[n] = (socket.as_raw_fd(), Interest::READABLE);
                    members[n] = k;
                    n += 1;
                }
                k += 1;
            }
            let ready = poll::wait(&fds[..n], Some(Duration::ZERO))?;
            for (i, &member) in members[..n].iter().enumerate() {
                let intake = &self.member_intake[member - 1];
                let pending = lines.member(member).is_some_and(|s| s.has_pending());
                if ready.is_readable(i) || pending || intake.receiving.load(Ordering::SeqCst) {
                    let nanos = intake.taken_in_until.load(Ordering::SeqCst);
                    let taken = self.epoch + Duration::from_nanos(nanos);
                    until = until.min(taken.max(floor));
                }
            }
        }
        Ok(until)
    }

    /// Records a new interface MTU for the device, the MSS clamp, the
    /// path MTU's limits and the batches' slots.
    pub fn set_mtu(&self, mtu: u32) {
        self.need_slots_for(mtu as usize);
        self.device().set_mtu(mtu as usize);
        self.tunnel_mtu.store(mtu, Ordering::Relaxed);
        self.path_mtu.interface_mtu_set(mtu);
    }

    /// The slot size every batch needs now (see `stride`).
    pub fn stride(&self) -> usize {
        self.stride.load(Ordering::Relaxed)
    }

    /// Packets (or datagrams) of `len` bytes have to fit every batch from
    /// now on; raised before such a packet is handed to anyone, so the
    /// device never gets one longer than another thread's slots.
    pub fn need_slots_for(&self, len: usize) {
        let stride = stride_for(len);
        let was = self.stride.fetch_max(stride, Ordering::Relaxed);
        if stride > was {
            eprintln!("braid: batch slots grow to {stride} bytes (for {len}-byte packets)");
        }
    }

    /// The interface MTU as last set or read.
    pub fn tunnel_mtu(&self) -> u32 {
        self.tunnel_mtu.load(Ordering::Relaxed)
    }

    /// Lowers the MSS of TCP SYNs in `batch` (read from or bound for the
    /// TUN) to what the tunnel carries, as `MssFix` says.
    pub fn clamp_mss(&self, batch: &mut PacketBatch) {
        let limit = match self.mss_fix {
            MssFix::Auto => MssLimit::from_mtu(self.tunnel_mtu.load(Ordering::Relaxed) as usize),
            MssFix::Fixed(mss) => MssLimit::fixed(mss),
            MssFix::Off => return,
        };
        mss::clamp_batch(batch, limit);
    }

    pub fn device(&self) -> MutexGuard<'_, Device> {
        // A thread that panicked holding the lock leaves a device that is
        // still consistent enough to shut down with.
        self.device.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn receiver(&self) -> MutexGuard<'_, Scratch> {
        self.receiver.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn lines(&self) -> RwLockReadGuard<'_, Lines> {
        self.lines.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a batch on its lines. A local address a datagram could not
    /// leave from (removed from the host) is forgotten, so the next ones
    /// leave from the routing table's pick without trying it first.
    pub fn send(&self, batch: &PacketBatch) -> std::io::Result<()> {
        let refused = {
            let lines = self.lines();
            lines.send(batch)?;
            lines.take_refused_sources()
        };
        if !refused.is_empty() {
            let mut device = self.device();
            for ip in refused {
                device.forget_local_address(ip);
            }
        }
        Ok(())
    }

    /// The lines, to open or close one (a reload); the data plane waits.
    pub fn lines_mut(&self) -> std::sync::RwLockWriteGuard<'_, Lines> {
        self.lines.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A new socket group for the main line (a `ListenPort` change); the
    /// threads of queues 1.. poll their new member from their next round
    /// on (within `OUTBOUND_POLL`).
    pub fn replace_main_line(&self, group: Vec<braid_io::UdpSocket>) {
        self.lines
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace_main(group);
    }

    pub fn set_main_deadline(&self, at: Instant) {
        let nanos = nanos_since(self.epoch, at);
        self.main_deadline.store(nanos, Ordering::Relaxed);
    }

    /// Wakes the main thread if `deadline` comes before the one it sleeps to.
    fn wake_main_before(&self, deadline: Option<Instant>) {
        let Some(at) = deadline else { return };
        let nanos = nanos_since(self.epoch, at);
        if nanos < self.main_deadline.load(Ordering::Relaxed) {
            self.main_deadline.store(nanos, Ordering::Relaxed);
            let _ = self.waker.wake();
        }
    }

    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        let _ = self.outbound_waker.wake();
        let _ = self.queue_waker.wake();
    }

    /// Whether the main thread is to watch the TUN in its poll.
    pub fn main_watches_tun(&self) -> bool {
        !self.outbound_watches_tun.load(Ordering::SeqCst)
    }

    /// Each hand-over wakes the thread that takes over, which reads the
    /// flag again before it sleeps: whatever order two hand-overs race in,
    /// both threads end up agreeing on the last one, and the TUN (level
    /// triggered) is never left unwatched.
    fn hand_tun_to_outbound(&self) {
        self.outbound_watches_tun.store(true, Ordering::SeqCst);
        let _ = self.outbound_waker.wake();
    }

    fn hand_tun_to_main(&self) {
        self.outbound_watches_tun.store(false, Ordering::SeqCst);
        let _ = self.waker.wake();
    }

    /// Packets read from the TUN and sent so far (see `tun_sent`).
    pub fn tun_packets_sent(&self) -> u64 {
        self.tun_sent.load(Ordering::Relaxed)
    }

    /// Packets read from TUN queues 1.. and sent so far.
    pub fn extra_queues_packets_sent(&self) -> u64 {
        self.extra_queues_sent.load(Ordering::Relaxed)
    }

    /// Datagrams received on sockets 1.. of the main line's group so far.
    pub fn extra_sockets_datagrams_received(&self) -> u64 {
        self.extra_sockets_received.load(Ordering::Relaxed)
    }

    /// Packets written to the TUN so far (see `tun_written`).
    pub fn tun_packets_written(&self) -> u64 {
        self.tun_written.load(Ordering::Relaxed)
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Brings the too-big limit and (in auto mode) the TUN MTU in line with
    /// what the paths carry now. Cheap; the main thread calls it after timers.
    pub fn follow_path_mtu(&self, name: &str) {
        let target = self.path_mtu.target(&mut self.device());
        if let Some(mtu) = self.path_mtu.follow(target, name, &self.tun) {
            self.set_mtu(mtu);
        }
        self.path_mtu.log_notices(name, &mut self.device());
    }

    /// Tells each path's search how big its local line allows: the next
    /// slice of the paths (a round every few seconds; at once on the
    /// first call).
    pub fn refresh_path_ceilings(&self, now: Instant) {
        let slice = self
            .path_mtu
            .ceiling_slice(now, || self.device().path_routes());
        if slice.is_empty() {
            return;
        }
        let largest = self.path_mtu.search_ceiling();
        let mut lookup = super::ceilings::RouteMtu::default();
        let found: Vec<_> = slice
            .into_iter()
            .filter_map(|route| {
                let bind = || self.lines().bind(route.line).cloned();
                Some((route, lookup.lookup(route.line, bind, route.remote)?))
            })
            .collect();
        let mut device = self.device();
        for (route, mtu) in found {
            device.set_path_link_mtu(now, route, mtu, largest);
        }
    }
}

/// `at` as nanoseconds since `epoch` (0 before it), saturating: a
/// far deadline (a timer set centuries ahead) stays the latest one rather
/// than wrapping to an early one that wakes the main thread for nothing.
fn nanos_since(epoch: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

// ----- outbound: TUN ─► lines (steps 1–7 of the first diagram) -----

/// Reads one batch from TUN queue `queue` and sends it; returns what the
/// read brought (0 packets: the queue had nothing).
fn send_one_batch(shared: &Shared, queue: usize, sender: &mut Scratch) -> std::io::Result<TunRead> {
    let Scratch {
        batch,
        control,
        jobs,
        helpers,
        ..
    } = sender;
    fit(batch, shared.stride());
    let mut read = shared.tun.read_batch_on(queue, batch)?;
    // A packet longer than the slots (the MTU went up just now) waits in
    // the TUN for bigger ones; a few rounds at most, as the slots only grow.
    for _ in 0..3 {
        let Some(len) = read.oversize.filter(|_| read.packets == 0) else {
            break;
        };
        shared.need_slots_for(len);
        fit(batch, shared.stride());
        read = shared.tun.read_batch_on(queue, batch)?;
    }
    if let Some(len) = read.oversize {
        shared.need_slots_for(len);
    }
    if read.packets == 0 {
        return Ok(read);
    }
    shared
        .tun_sent
        .fetch_add(read.packets as u64, Ordering::Relaxed);
    shared.clamp_mss(batch);
    shared.path_mtu.answer_oversize(&shared.tun, batch)?;
    let now = Instant::now();
    let (pending, deadline, too_big, ticket) = {
        let mut device = shared.device();
        device.prepare_encapsulate(now, batch, jobs);
        (
            device.has_pending_transmit(),
            device.poll_timeout(),
            device.has_too_big(),
            shared.send_order.as_ref().map(TurnOrder::take),
        )
    };
    helpers.seal(jobs, batch);
    if let Some(ticket) = &ticket {
        ticket.wait_turn();
    }
    shared.send(batch)?;
    drop(ticket);
    if too_big {
        shared
            .path_mtu
            .write_peer_answers(&shared.tun, |out| shared.device().take_too_big(out))?;
    }
    if pending {
        transmit_pending(shared, now, control)?;
    }
    shared.wake_main_before(deadline);
    Ok(read)
}

/// Sends what the device has queued (handshakes, keepalives, packets
/// released from staging), a batch at a time, taking the lock per batch.
pub fn transmit_pending(
    shared: &Shared,
    now: Instant,
    out: &mut PacketBatch,
) -> std::io::Result<()> {
    fit(out, shared.stride());
    loop {
        out.clear();
        let more = shared.device().poll_transmit(now, out);
        if !out.is_empty() {
            shared.send(out)?;
        }
        if !more {
            return Ok(());
        }
    }
}

/// For the main thread after it wrote to the TUN: sends up to
/// `max_batches` of what the TUN holds now, unless the outbound thread is
/// already at it (then that thread sends it, as always).
pub fn send_from_tun_if_idle(shared: &Shared, max_batches: usize) -> std::io::Result<()> {
    let Ok(mut sender) = shared.sender.try_lock() else {
        return Ok(());
    };
    for sent in 1.. {
        let read = send_one_batch(shared, 0, &mut sender)?;
        if read.packets == 0 || read.emptied {
            break;
        }
        // Segments of a super-packet held back by a full batch wake no
        // poll: whoever read the super-packet sends all of it.
        if sent >= max_batches && !shared.tun.has_pending() {
            break;
        }
    }
    Ok(())
}

/// A batch this large means bulk sending: what comes back is mostly the
/// ACKs for it, worth taking in at once. A thread that sent only a few
/// packets (ACKs itself) leaves receiving to the main thread.
const BULK_BATCH: usize = 16;

/// For the main thread when the TUN is readable while it watches it: sends
/// what the TUN holds, and hands the TUN to the outbound thread once the
/// traffic is bulk (a batch of [`BULK_BATCH`] or more, or more batches
/// waiting than one wake-up may send), so sealing runs next to receiving.
pub fn send_from_tun_as_watcher(shared: &Shared) -> std::io::Result<()> {
    let mut sender = shared.sender.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..SEND_BATCHES_PER_WATCHER_WAKE {
        let read = send_one_batch(shared, 0, &mut sender)?;
        if read.packets >= BULK_BATCH {
            break;
        }
        if read.packets == 0 || read.emptied {
            return Ok(());
        }
    }
    drop(sender);
    shared.hand_tun_to_outbound();
    Ok(())
}

/// How many batches the main thread sends from the TUN per wake-up while
/// it watches the TUN; the traffic is light, so this is rarely reached.
const SEND_BATCHES_PER_WATCHER_WAKE: usize = 4;

/// After this many wake-ups in a row that sent no bulk batch (mostly
/// ACKs, or nothing because the main thread had taken it already), the
/// outbound thread hands the TUN back to the main thread.
const LIGHT_WAKES_BEFORE_HANDBACK: u32 = 32;

/// A light wake-up this long after the last bulk batch also hands the TUN
/// back: the bulk is over. Without it, pings after a transfer went through
/// both threads (the outbound one woken for nothing, waiting for the sender
/// lock on the reply's path) for the first 32 of them. While a transfer
/// runs, bulk batches come far more often than this.
const BULK_OVER_AFTER: Duration = Duration::from_millis(20);

/// The outbound thread: TUN → encrypt → UDP until told to stop or the TUN
/// fails. Returns the error that ended it, if any.
///
/// It watches the TUN only while the sending is bulk. With light traffic
/// (a receiver's ACKs, pings, interactive use) the main thread watches the
/// TUN next to the lines and sends what it holds, mostly right after the
/// TUN write that made the kernel answer; a second thread woken by every
/// packet entering the TUN would then only find the sender lock taken or
/// the TUN empty, and its wake-ups took CPU from the threads doing the
/// work. The main thread hands the TUN over when it reads a bulk batch;
/// this thread hands it back after [`LIGHT_WAKES_BEFORE_HANDBACK`] light
/// wake-ups, a light one [`BULK_OVER_AFTER`] the last bulk batch, or an
/// idle [`OUTBOUND_POLL`].
pub fn run_outbound(shared: Arc<Shared>) -> std::io::Result<()> {
    let result = (|| {
        let mut light_wakes = 0;
        let mut last_bulk = Instant::now();
        while !shared.stopping() {
            if shared.main_watches_tun() {
                let fds = [(shared.outbound_waker.as_raw_fd(), Interest::READABLE)];
                if poll::wait(&fds, Some(OUTBOUND_POLL))?.is_readable(0) {
                    shared.outbound_waker.drain()?;
                }
                // Taking over means the main thread just read a bulk batch.
                light_wakes = 0;
                last_bulk = Instant::now();
                continue;
            }
            // Segments held back by the main thread's last (full) batch
            // before it handed the TUN over wake no poll.
            if !shared.tun.has_pending() {
                let fds = [(shared.tun.as_raw_fd(), Interest::READABLE)];
                if !poll::wait(&fds, Some(OUTBOUND_POLL))?.is_readable(0) {
                    shared.hand_tun_to_main();
                    continue;
                }
            }
            // Drain the TUN: batches go out as soon as they are read, never
            // waiting to fill. The lock is taken per batch so the main
            // thread finds it free whenever this thread has nothing to do.
            let mut bulk = false;
            while !shared.stopping() {
                let mut sender = shared.sender.lock().unwrap_or_else(|e| e.into_inner());
                let read = send_one_batch(&shared, 0, &mut sender)?;
                if read.packets == 0 {
                    break;
                }
                drop(sender);
                if read.packets >= BULK_BATCH {
                    bulk = true;
                    receive_if_idle(&shared)?;
                }
                // More may have come in meanwhile; the poll says so
                // without a read that finds the TUN empty.
                if read.emptied {
                    break;
                }
            }
            if bulk {
                light_wakes = 0;
                last_bulk = Instant::now();
                continue;
            }
            light_wakes += 1;
            if light_wakes >= LIGHT_WAKES_BEFORE_HANDBACK || last_bulk.elapsed() >= BULK_OVER_AFTER
            {
                light_wakes = 0;
                shared.hand_tun_to_main();
            }
        }
        Ok(())
    })();
    // Whatever ended this thread ends the interface.
    shared.request_stop();
    result
}

/// The thread of TUN queue `queue` (1 or more): reads it, seals and sends,
/// until told to stop or the TUN fails; returns the error that ended it,
/// if any. Unlike queue 0's it always watches its queue: the answers to
/// what the main thread writes for its flows come back on it.
pub fn run_queue(shared: Arc<Shared>, queue: usize) -> std::io::Result<()> {
    let result = (|| {
        // The queues are the parallelism here: no helpers of their own.
        let scratch =
            |name| Scratch::new(shared.stride(), 0, name, shared.helper_parts.clone(), None);
        let (mut sender, mut receiver) = (scratch("braid-seal")?, scratch("braid-open")?);
        while !shared.stopping() {
            // The socket is looked up each round: a `ListenPort` change
            // replaces the group.
            let (socket_fd, socket_pending) = member_state(&shared, queue);
            let tun_pending = shared.tun.has_pending_on(queue);
            let (tun_ready, socket_ready) = if tun_pending || socket_pending {
                (tun_pending, socket_pending)
            } else {
                let fds = [
                    (shared.tun.queue_fd(queue), Interest::READABLE),
                    (shared.queue_waker.as_raw_fd(), Interest::READABLE),
                    (socket_fd, Interest::READABLE),
                ];
                let ready = match poll::wait(&fds, Some(OUTBOUND_POLL)) {
                    Ok(ready) => ready,
                    // A new `ListenPort` closed the socket after it was
                    // looked up: the next round polls its successor.
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBADF)
                            && member_state(&shared, queue).0 != socket_fd =>
                    {
                        continue
                    }
                    Err(e) => return Err(e),
                };
                (ready.is_readable(0), ready.is_readable(2))
            };
            if socket_ready {
                let intake = shared.member_intake.get(queue - 1);
                if let Some(intake) = intake {
                    intake.receiving.store(true, Ordering::SeqCst);
                }
                let n = receive(
                    &shared,
                    &mut receiver,
                    Source::Member(queue),
                    RECEIVE_BATCHES_PER_WAKE,
                );
                if let Some(intake) = intake {
                    if let Some(until) = receiver.complete_until {
                        let nanos = nanos_since(shared.epoch, until);
                        intake.taken_in_until.fetch_max(nanos, Ordering::SeqCst);
                    }
                    intake.receiving.store(false, Ordering::SeqCst);
                }
                let n = n?;
                shared
                    .extra_sockets_received
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            while tun_ready && !shared.stopping() {
                let read = send_one_batch(&shared, queue, &mut sender)?;
                shared
                    .extra_queues_sent
                    .fetch_add(read.packets as u64, Ordering::Relaxed);
                if read.packets >= BULK_BATCH {
                    receive_if_idle(&shared)?;
                }
                if read.packets == 0 || (read.emptied && !shared.tun.has_pending_on(queue)) {
                    break;
                }
            }
        }
        Ok(())
    })();
    // Whatever ended this thread ends the interface.
    shared.request_stop();
    result
}

/// The descriptor of member `k` of the main line's socket group (-1, which
/// poll skips, when there is none) and whether it has datagrams already
/// read and not yet taken, looked up under one lock of the lines.
fn member_state(shared: &Shared, k: usize) -> (std::os::fd::RawFd, bool) {
    let lines = shared.lines();
    let member = lines.member(k);
    (
        member.map_or(-1, |s| s.as_raw_fd()),
        member.is_some_and(|s| s.has_pending()),
    )
}

// ----- inbound: lines ─► TUN (steps 1–8 of the second diagram) -----

/// Where a thread receives from.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// A line (for line 0: the first socket of its group).
    Line(usize),
    /// Member k (1 or more) of the main line's socket group.
    Member(usize),
}

/// How many batches a queue's thread receives from its socket per wake-up
/// before it looks at its TUN queue again.
const RECEIVE_BATCHES_PER_WAKE: usize = 8;

/// Receives up to `max_batches` from `line`, decrypting outside the
/// device lock, and writes what they carry to the TUN; then sends what
/// that made the kernel answer, if the outbound thread is idle. Returns
/// how many datagrams came in.
pub fn receive_from_line(
    shared: &Shared,
    receiver: &mut Scratch,
    line: usize,
    max_batches: usize,
) -> std::io::Result<usize> {
    receive(shared, receiver, Source::Line(line), max_batches)
}

impl Scratch {
    /// See the field.
    pub fn complete_until(&self) -> Option<Instant> {
        self.complete_until
    }
}

/// [`receive_from_line`] from a line or a member of the main line's group.
fn receive(
    shared: &Shared,
    receiver: &mut Scratch,
    from: Source,
    max_batches: usize,
) -> std::io::Result<usize> {
    let Scratch {
        batch,
        control,
        jobs,
        helpers,
        times,
        complete_until,
    } = receiver;
    let mut received = 0;
    *complete_until = None;
    for _ in 0..max_batches {
        // The wall clock first: a preemption between the two reads makes
        // an arrival estimate late, never early (see `arrived_by`).
        let wall = SystemTime::now();
        let now = Instant::now();
        fit(batch, shared.stride());
        fit(control, shared.stride());
        // Slots a coalesced receive leaves empty get no stamp: no stale
        // one from an earlier batch may stand in for it.
        times.fill(None);
        // Whether an unknown TCP connection spoke is read under the same
        // lock as the receive, not a second one per batch.
        let (n, strangers, oversize) = {
            let lines = shared.lines();
            match from {
                Source::Line(line) => {
                    let n = lines.recv(line, batch, times)?;
                    let oversize = lines.take_oversize(line);
                    (
                        n,
                        n > 0 && tcp_lines::strangers_spoke(&lines, line, now),
                        oversize,
                    )
                }
                Source::Member(k) => {
                    let n = lines.recv_member(k, batch, times)?;
                    let oversize = lines.member(k).and_then(|s| s.take_oversize());
                    (n, false, oversize)
                }
            }
        };
        // A datagram longer than the slots (a peer's MTU is bigger, or
        // went up first): with GRO it waits for the next round.
        if let Some(len) = oversize {
            shared.need_slots_for(len);
            if n == 0 {
                continue;
            }
        }
        if n == 0 {
            *complete_until = Some(now);
            break;
        }
        // At most max_batches * capacity: no overflow.
        received += n;
        let arrived = arrived_by(now, wall, &times[..n]);
        shared.device().prepare_decapsulate(arrived, batch, jobs);
        answer_initiations(jobs, shared.cores);
        helpers.open(jobs, batch);
        let (pending, deadline, ticket) = {
            let mut device = shared.device();
            // The reorder window's clock is the batch's arrival: a thread
            // that ran late (preempted, or a real-time peer's 100 ms
            // slice) must neither count its own delay as the line's
            // lateness nor give up a gap whose packets wait in the socket.
            device.finish_decapsulate(arrived, batch, jobs);
            (
                device.has_pending_transmit(),
                device.poll_timeout(),
                shared.receive_order.as_ref().map(TurnOrder::take),
            )
        };
        // Only the main thread's timers give reorder gaps up, and only it
        // answers initiations over the batch's budget: a gap this batch
        // opened, or such an initiation, may be due before the main
        // thread's wake-up (this may be the outbound thread or a queue's).
        shared.wake_main_before(deadline);
        if let (true, Source::Line(line)) = (strangers, from) {
            // After the core authenticated what they sent.
            tcp_lines::mark_peer_connections(&shared.lines(), &shared.device(), line);
        }
        shared.clamp_mss(batch);
        if let Some(ticket) = &ticket {
            ticket.wait_turn();
        }
        let written = shared.tun.write_batch(batch)?;
        drop(ticket);
        let written = written + write_released_into(shared, now, control)?;
        shared
            .tun_written
            .fetch_add(written as u64, Ordering::Relaxed);
        if pending {
            transmit_pending(shared, now, control)?;
        }
        // A batch of duplicates (the other line's copies) wrote nothing,
        // so the kernel has nothing to answer.
        if written > 0 {
            send_from_tun_if_idle(shared, SEND_BATCHES_AFTER_WRITE)?;
        }
        // A short read does not mean the socket is drained (a coalesced
        // receive fills fewer slots than it could): only an empty read
        // says so. Until then the timers run no further than this batch.
        *complete_until = Some(arrived);
        if n < batch.capacity() {
            break;
        }
    }
    Ok(received)
}

/// When the newest of a batch's datagrams arrived, on the monotonic clock:
/// its kernel stamp (wall clock) moved back from `now` by its age; `now`
/// without a stamp, or with one that makes no sense (the wall clock was
/// stepped, or it is more than a second old).
fn arrived_by(now: Instant, wall: SystemTime, times: &[Option<SystemTime>]) -> Instant {
    const MAX_AGE: Duration = Duration::from_secs(1);
    times
        .iter()
        .flatten()
        .max()
        .and_then(|t| wall.duration_since(*t).ok())
        .filter(|age| *age < MAX_AGE)
        .and_then(|age| now.checked_sub(age))
        .unwrap_or(now)
}

/// Does the DH work of the batch's handshake initiations (five scalar
/// multiplications each, a few hundred microseconds) outside the device
/// lock: with several, on every core, in parts on scoped threads beside
/// this one. A server that restarts gets thousands of initiations within
/// seconds; a thread costs far less than one of them, and none is started
/// without them.
fn answer_initiations(jobs: &mut CryptoJobs, cores: usize) {
    let n = jobs.initiations();
    if n >= 2 && cores >= 2 {
        std::thread::scope(|scope| {
            let mut parts = jobs.initiation_parts(cores.min(n));
            let own = parts.next();
            for part in parts {
                // Without a thread (none left to make) the part is done
                // below, on this one.
                let _ = std::thread::Builder::new()
                    .name("braid-handshake".into())
                    .spawn_scoped(scope, move || part.run());
            }
            if let Some(part) = own {
                part.run();
            }
        });
    }
    // What is left: all of them with one core or one initiation.
    jobs.answer_initiations();
}

/// Answers the initiations the device took from its queue into `jobs`
/// (`Device::prepare_queued_initiations`, at a wake-up of the main
/// thread): their DH work on every core without the device lock, as a
/// batch's, then the device answers them; `transmit_pending` sends the
/// responses.
pub fn answer_queued_initiations(shared: &Shared, now: Instant, jobs: &mut CryptoJobs) {
    if jobs.initiations() == 0 {
        return;
    }
    answer_initiations(jobs, shared.cores);
    shared.device().finish_initiations(now, jobs);
    jobs.clear();
}

/// How many TUN batches a thread sends after writing to the TUN (when the
/// outbound thread is idle): enough for what the write made the kernel
/// answer, bounded so receiving is not held up.
const SEND_BATCHES_AFTER_WRITE: usize = 2;

/// Writes what the reorder windows released ([`Device::poll_tun`]) to
/// the TUN through `out`; returns how many packets it wrote.
fn write_released_into(
    shared: &Shared,
    now: Instant,
    out: &mut PacketBatch,
) -> std::io::Result<usize> {
    fit(out, shared.stride());
    let mut written = 0;
    loop {
        out.clear();
        let (more, ticket) = {
            let mut device = shared.device();
            let more = device.poll_tun(now, out);
            let ticket = (!out.is_empty())
                .then(|| shared.receive_order.as_ref().map(TurnOrder::take))
                .flatten();
            (more, ticket)
        };
        if !out.is_empty() {
            shared.clamp_mss(out);
            if let Some(ticket) = &ticket {
                ticket.wait_turn();
            }
            written += shared.tun.write_batch(out)?;
        }
        drop(ticket);
        if !more {
            return Ok(written);
        }
    }
}

/// Writes what the reorder windows released (after the batch it follows,
/// so order holds).
pub fn write_released(
    shared: &Shared,
    now: Instant,
    receiver: &mut Scratch,
) -> std::io::Result<()> {
    write_released_into(shared, now, &mut receiver.control).map(drop)
}

/// For the outbound thread between bulk batches: takes in what the lines hold
/// now (one batch each) unless the main thread is already at it. The
/// answers to what was just sent (ACKs that open the TCP window) then
/// reach the TUN without waiting for the main thread to wake.
fn receive_if_idle(shared: &Shared) -> std::io::Result<()> {
    let Ok(mut receiver) = shared.receiver.try_lock() else {
        return Ok(());
    };
    let lines = shared.lines().all().len();
    for line in 0..lines {
        receive_from_line(shared, &mut receiver, line, 1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_far_away_saturate_instead_of_wrapping() {
        let epoch = Instant::now();
        assert_eq!(nanos_since(epoch, epoch), 0);
        assert_eq!(
            nanos_since(epoch + Duration::from_millis(3), epoch),
            0,
            "before the epoch"
        );
        assert_eq!(
            nanos_since(epoch, epoch + Duration::from_millis(3)),
            3_000_000
        );
        // 600 years: more nanoseconds than a u64 holds. Truncated it would
        // be an early deadline; saturated it is the latest there is.
        if let Some(far) = epoch.checked_add(Duration::from_secs(600 * 365 * 86_400)) {
            assert_eq!(nanos_since(epoch, far), u64::MAX);
        }
    }

    #[test]
    fn a_batch_arrived_when_its_newest_datagram_did() {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ms = Duration::from_millis;
        // (case, stamps, arrival expected)
        let cases = [
            (
                1,
                vec![Some(wall - ms(40)), Some(wall - ms(30))],
                now - ms(30),
            ),
            (
                2,
                vec![Some(wall - ms(30)), None, Some(wall - ms(35))],
                now - ms(30),
            ),
            // Unstamped (a TCP line, an old kernel): read time.
            (3, vec![None, None], now),
            (4, vec![], now),
            // A stamp after the reading (a stepped wall clock) or older
            // than a second: read time.
            (5, vec![Some(wall + ms(2))], now),
            (6, vec![Some(wall - ms(1500))], now),
        ];
        for (case, stamps, want) in cases {
            assert_eq!(arrived_by(now, wall, &stamps), want, "case {case}");
        }
    }
}
