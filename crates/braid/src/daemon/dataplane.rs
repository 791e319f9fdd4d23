//! The two data-plane threads of an interface and what they share.
//!
//! ```text
//!   outbound thread:  TUN ─read─► [lock] prepare ─► seal ─► sendmmsg ─► UDP
//!   main thread:      UDP ─recv─► [lock] prepare ─► open ─► [lock] finish ─► TUN
//!                     timers, handshakes, UAPI requests            [lock]
//! ```
//!
//! The device lock covers only the per-packet bookkeeping (routing,
//! counters, replay and reorder windows, timers); the AEAD work and every
//! system call run outside it, so encryption and decryption proceed on two
//! cores at once. Order per peer holds because each direction has exactly
//! one thread: counters are assigned in TUN order and a batch is sent
//! whole after its seals.

use super::lines::Lines;
use crate::config::MssFix;
use braid_core::batch::PacketBatch;
use braid_core::device::{CryptoJobs, Device};
use braid_core::mss::{self, MssLimit};
use braid_io::{poll, Interest, Tun, Waker};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

/// How long the outbound thread sleeps at most before it looks at the stop
/// flag again.
const OUTBOUND_POLL: Duration = Duration::from_millis(200);

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
    /// Path MTU: the TUN MTU that follows the paths, too-big answers.
    pub path_mtu: super::pmtu::PathMtu,
}

impl Shared {
    pub fn new(
        device: Device,
        tun: Tun,
        lines: Lines,
        waker: Arc<Waker>,
        mtu: u32,
        mss_fix: MssFix,
        path_mtu: super::pmtu::PathMtu,
    ) -> Shared {
        Shared {
            device: Mutex::new(device),
            tun,
            lines: RwLock::new(lines),
            waker,
            main_deadline: AtomicU64::new(0),
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
            mss_fix,
            tunnel_mtu: AtomicU32::new(mtu),
            path_mtu,
        }
    }

    /// Records a new interface MTU for the device and the MSS clamp.
    pub fn set_mtu(&self, mtu: u32) {
        self.device().set_mtu(mtu as usize);
        self.tunnel_mtu.store(mtu, Ordering::Relaxed);
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

    pub fn lines(&self) -> RwLockReadGuard<'_, Lines> {
        self.lines.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn replace_main_line(&self, socket: braid_io::UdpSocket) {
        self.lines
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace_main(socket);
    }

    pub fn set_main_deadline(&self, at: Instant) {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        self.main_deadline.store(nanos, Ordering::Relaxed);
    }

    /// Wakes the main thread if `deadline` comes before the one it sleeps to.
    fn wake_main_before(&self, deadline: Option<Instant>) {
        let Some(at) = deadline else { return };
        let nanos = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        if nanos < self.main_deadline.load(Ordering::Relaxed) {
            self.main_deadline.store(nanos, Ordering::Relaxed);
            let _ = self.waker.wake();
        }
    }

    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Sends what the device has queued (handshakes, keepalives, packets
/// released from staging), a batch at a time, taking the lock per batch.
pub fn transmit_pending(
    shared: &Shared,
    now: Instant,
    out: &mut PacketBatch,
) -> std::io::Result<()> {
    loop {
        out.clear();
        let more = shared.device().poll_transmit(now, out);
        if !out.is_empty() {
            shared.lines().send(out)?;
        }
        if !more {
            return Ok(());
        }
    }
}

/// The outbound thread: TUN → encrypt → UDP until told to stop or the TUN
/// fails. Returns the error that ended it, if any.
pub fn run_outbound(
    shared: Arc<Shared>,
    batch_size: usize,
    slot_bytes: usize,
) -> std::io::Result<()> {
    let mut batch = PacketBatch::new(batch_size, slot_bytes);
    let mut control = PacketBatch::new(batch_size, slot_bytes);
    let mut jobs = CryptoJobs::new();
    let result = (|| {
        while !shared.stopping() {
            let fds = [(shared.tun.as_raw_fd(), Interest::READABLE)];
            let ready = poll::wait(&fds, Some(OUTBOUND_POLL))?;
            if !ready.is_readable(0) {
                continue;
            }
            // Drain the TUN: batches go out as soon as they are read, never
            // waiting to fill.
            while !shared.stopping() {
                if shared.tun.read_batch(&mut batch)? == 0 {
                    break;
                }
                shared.clamp_mss(&mut batch);
                shared.path_mtu.answer_oversize(&shared.tun, &mut batch)?;
                let now = Instant::now();
                let (pending, deadline) = {
                    let mut device = shared.device();
                    device.prepare_encapsulate(now, &mut batch, &mut jobs);
                    (device.has_pending_transmit(), device.poll_timeout())
                };
                jobs.seal(&mut batch);
                shared.lines().send(&batch)?;
                if pending {
                    transmit_pending(&shared, now, &mut control)?;
                }
                shared.wake_main_before(deadline);
            }
        }
        Ok(())
    })();
    // Whatever ended this thread ends the interface.
    shared.request_stop();
    result
}
