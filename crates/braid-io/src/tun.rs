//! The TUN device: where plaintext IP packets enter and leave the tunnel.
//!
//! The device is created non-persistent, so it lives exactly as long as the
//! [`Tun`] (its file descriptor): closing it is how `braid down` removes the
//! interface, and a crashed daemon cannot leave a stale one behind.
//!
//! Packets are read straight into a [`PacketBatch`] slot at
//! [`HEADROOM`], with [`TAILROOM`] left free behind them, so the core can
//! turn each into a WireGuard data message in place.
//!
//! With offload (the default where the kernel allows it) the device carries
//! a `virtio_net_hdr` in front of every packet and the kernel may hand over
//! a 64 KiB TCP super-packet in one read and accept one in one write. The
//! batch interface stays one plain IP packet per slot: reads split
//! super-packets into MTU-sized segments ([`crate::offload::split`]),
//! writes coalesce runs of one TCP flow into super-packets
//! ([`crate::offload::coalesce`]). The kernel's TCP stack then does one pass
//! per 64 KiB instead of per segment on both sides of the tunnel.
//!
//! With several queues ([`Tun::create_queues`], `IFF_MULTI_QUEUE`) each
//! queue is a descriptor of its own that one pipeline reads; writes go to
//! the queue of their flow (`steer.rs`), which makes the kernel hand that
//! flow's packets the other way to the same queue.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use braid_core::batch::{PacketBatch, HEADROOM, TAILROOM};

use crate::offload::VNET_HDR_LEN;

mod fd;
mod link;
mod offload_io;
mod steer;

pub use fd::TunRead;
use fd::{Counters, Step, TunFd, NO_ADDR};
pub use link::{is_removed_error, LinkState};
use offload_io::{ReadScratch, WriteScratch};

/// The offloads we ask for: checksum and TCP segmentation for both IP
/// versions. No ECN (CWR) super-packets and no UDP segmentation: the kernel
/// segments those itself before they reach us.
const OFFLOAD_FLAGS: libc::c_uint = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;

/// Whether [`Tun::create_with`] tries the offload mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    /// Offload if the kernel accepts it, otherwise the plain mode.
    Auto,
    /// Plain mode: one packet per read and write, no `virtio_net_hdr`.
    Off,
}

/// An open, non-persistent TUN interface; see the module documentation.
#[derive(Debug)]
pub struct Tun {
    /// Queue 0 first; more only with `IFF_MULTI_QUEUE`.
    queues: Vec<Queue>,
    name: String,
    offload: bool,
    tx: Mutex<WriteScratch>,
}

/// One descriptor of the interface and what its reads left over.
#[derive(Debug)]
struct Queue {
    dev: TunFd,
    rx: Mutex<ReadScratch>,
}

/// Most queues [`Tun::create_queues`] opens: the kernel allows 256, and a
/// pipeline per core of a large server is far below that.
pub const MAX_QUEUES: usize = 64;

/// What offload did so far; see [`Tun::offload_stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffloadStats {
    /// TSO super-packets read (each split into several slots).
    pub super_packets_read: u64,
    /// Packets those super-packets were split into.
    pub segments_read: u64,
    /// Super-packets written (each made of several batch packets).
    pub super_packets_written: u64,
    /// Batch packets that went out inside those super-packets.
    pub segments_written: u64,
}

impl Tun {
    /// Creates the TUN interface `name` (kernel-chosen if empty or a pattern
    /// such as `"braid%d"`; see [`name`](Self::name) for the result), with
    /// offload if the kernel supports it ([`Offload::Auto`]).
    ///
    /// Needs `CAP_NET_ADMIN`. The descriptor is non-blocking and close-on-exec.
    pub fn create(name: &str) -> io::Result<Tun> {
        Self::create_with(name, Offload::Auto)
    }

    /// Like [`create`](Self::create), choosing the offload mode;
    /// [`offload_enabled`](Self::offload_enabled) tells what was granted.
    pub fn create_with(name: &str, offload: Offload) -> io::Result<Tun> {
        Self::create_queues(name, offload, 1)
    }

    /// Like [`create_with`](Self::create_with), with `queues` descriptors
    /// (`IFF_MULTI_QUEUE` when more than one): read each with
    /// [`read_batch_on`](Self::read_batch_on) from a pipeline of its own.
    pub fn create_queues(name: &str, offload: Offload, queues: usize) -> io::Result<Tun> {
        if name.len() >= libc::IFNAMSIZ || name.bytes().any(|b| b == 0 || b == b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid interface name {name:?} (at most 15 bytes, no '/' or NUL)"),
            ));
        }
        if !(1..=MAX_QUEUES).contains(&queues) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{queues} TUN queues (expected 1-{MAX_QUEUES})"),
            ));
        }
        let multi = queues > 1;
        if offload == Offload::Auto {
            if let Ok((fd, actual)) = Self::open(name, true, multi) {
                if Self::enable_offload(&fd).is_ok() {
                    return Self::with_queues(fd, actual, true, queues);
                }
                // The device has a vnet header but no offload: closing the
                // descriptor removes it, and the plain one replaces it.
                drop(fd);
            }
        }
        let (fd, actual) = Self::open(name, false, multi)?;
        Self::with_queues(fd, actual, false, queues)
    }

    /// Attaches queues 1.. to the interface queue 0 made, in the same mode.
    fn with_queues(first: OwnedFd, name: String, offload: bool, queues: usize) -> io::Result<Tun> {
        let mut fds = vec![first];
        for q in 1..queues {
            let (fd, _) = Self::open(&name, offload, true)
                .map_err(|e| io::Error::new(e.kind(), format!("TUN queue {q}: {e}")))?;
            if offload {
                Self::enable_offload(&fd)?;
            }
            fds.push(fd);
        }
        Ok(Tun {
            queues: fds
                .into_iter()
                .map(|fd| Queue {
                    dev: TunFd {
                        fd,
                        dropped: AtomicU64::new(0),
                        stats: Counters::default(),
                    },
                    rx: Mutex::new(ReadScratch::new(offload)),
                })
                .collect(),
            name,
            offload,
            tx: Mutex::new(WriteScratch::new()),
        })
    }

    /// Opens /dev/net/tun and attaches it to interface `name`; returns the
    /// descriptor and the name the kernel chose.
    fn open(name: &str, vnet_hdr: bool, multi_queue: bool) -> io::Result<(OwnedFd, String)> {
        // SAFETY: the path is a NUL-terminated literal; flags are valid.
        let fd = crate::sys::cvt(unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        })
        .map_err(|e| io::Error::new(e.kind(), format!("open /dev/net/tun: {e}")))?;
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };

        // SAFETY: ifreq is plain old data (arrays, integers, a union of
        // those and a pointer), for which all-zero bytes are valid.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, &src) in ifr.ifr_name.iter_mut().zip(name.as_bytes()) {
            *dst = src as libc::c_char;
        }
        // Layer-3 packets without the 4-byte packet-info prefix.
        let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
        if vnet_hdr {
            flags |= libc::IFF_VNET_HDR;
        }
        if multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        ifr.ifr_ifru.ifru_flags = flags as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `ifr`
        // is, and it outlives the call.
        crate::sys::cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) })
            .map_err(|e| io::Error::new(e.kind(), format!("TUNSETIFF {name:?}: {e}")))?;

        Ok((fd, crate::sys::c_chars_to_string(&ifr.ifr_name)))
    }

    /// Fixes the `virtio_net_hdr` at its 10-byte form and turns on checksum
    /// and TCP segmentation offload.
    fn enable_offload(fd: &OwnedFd) -> io::Result<()> {
        let size = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which
        // points at `size` for the duration of the call.
        crate::sys::cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size) })?;
        // SAFETY: TUNSETOFFLOAD takes the flags as the argument value itself.
        crate::sys::cvt(unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                OFFLOAD_FLAGS as libc::c_ulong,
            )
        })?;
        Ok(())
    }

    /// The interface name the kernel assigned.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the device runs with offload (`virtio_net_hdr`, TSO split on
    /// read, coalescing on write).
    pub fn offload_enabled(&self) -> bool {
        self.offload
    }

    /// Packets dropped so far: too long to read into a slot, rejected by the
    /// kernel on write (malformed), or left over when a write would block.
    pub fn dropped(&self) -> u64 {
        self.queues
            .iter()
            .map(|q| q.dev.dropped.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// How many queues (descriptors) the interface was opened with.
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// The queue [`write_batch`](Self::write_batch) writes `pkt` to, and
    /// so the one its flow's packets the other way are read from.
    pub fn queue_for_packet(&self, pkt: &[u8]) -> usize {
        steer::queue_for(pkt, self.queues.len())
    }

    /// Queue `q`'s descriptor, to poll (queue 0's is [`as_raw_fd`]'s).
    ///
    /// Panics if `q` is not below [`queue_count`](Self::queue_count).
    ///
    /// [`as_raw_fd`]: AsRawFd::as_raw_fd
    pub fn queue_fd(&self, q: usize) -> RawFd {
        self.queues[q].dev.fd.as_raw_fd()
    }

    /// Counts of what offload did (all zero in plain mode).
    pub fn offload_stats(&self) -> OffloadStats {
        let mut sum = OffloadStats::default();
        for q in &self.queues {
            let c = &q.dev.stats;
            let add = |total: &mut u64, n: &AtomicU64| {
                *total = total.wrapping_add(n.load(Ordering::Relaxed));
            };
            add(&mut sum.super_packets_read, &c.super_packets_read);
            add(&mut sum.segments_read, &c.segments_read);
            add(&mut sum.super_packets_written, &c.super_packets_written);
            add(&mut sum.segments_written, &c.segments_written);
        }
        sum
    }

    /// Whether segments of a super-packet are waiting for the next
    /// [`read_batch`](Self::read_batch): they are not visible to `poll` on
    /// the descriptor. This only happens when a batch came back full.
    pub fn has_pending(&self) -> bool {
        self.has_pending_on(0)
    }

    /// [`has_pending`](Self::has_pending) for queue `q`.
    pub fn has_pending_on(&self, q: usize) -> bool {
        self.queues[q].rx.lock().unwrap().has_pending()
    }

    /// Clears `batch` and fills it with the packets that are ready, up to its
    /// capacity; returns how many (0 when none was ready) and whether the
    /// TUN was found empty.
    ///
    /// Each packet lands in its slot at [`HEADROOM`] and is at most
    /// `stride - HEADROOM - TAILROOM` bytes, so size the stride for the
    /// interface MTU. A longer one ends the read and is reported in
    /// [`TunRead::oversize`]: with offload it waits for the next call (give
    /// that one a batch with bigger slots), without it is dropped (and
    /// counted in [`dropped`](Self::dropped)). With offload, a
    /// super-packet's segments fill consecutive slots; segments that do not
    /// fit wait for the next call (see [`has_pending`](Self::has_pending)),
    /// nothing is dropped.
    pub fn read_batch(&self, batch: &mut PacketBatch) -> io::Result<TunRead> {
        self.read_batch_on(0, batch)
    }

    /// [`read_batch`](Self::read_batch) from queue `q`: the packets of the
    /// flows the kernel steers to it.
    ///
    /// Panics if `q` is not below [`queue_count`](Self::queue_count).
    pub fn read_batch_on(&self, q: usize, batch: &mut PacketBatch) -> io::Result<TunRead> {
        let Queue { dev, rx } = &self.queues[q];
        if self.offload {
            return dev.read_batch_offload(&mut rx.lock().unwrap(), batch);
        }
        batch.clear();
        // PacketBatch::new asserts stride > HEADROOM + TAILROOM, so max >= 1
        // and the byte of tailroom offered below exists.
        let max = batch.stride() - HEADROOM - TAILROOM;
        let mut n = 0;
        let mut emptied = false;
        let mut oversize = None;
        while n < batch.capacity() {
            // The kernel silently truncates a packet to the buffer, so offer
            // one byte of the (still unused) tailroom more: a read that fills
            // it was a packet too long for the slot.
            let buf = &mut batch.slot_buf_mut(n)[HEADROOM..HEADROOM + max + 1];
            match dev.read_packet(buf) {
                Ok(Step::Done(len)) if len > max => {
                    dev.dropped.fetch_add(1, Ordering::Relaxed);
                    oversize = Some(len);
                }
                Ok(Step::Done(len)) => {
                    batch.set_packet(n, HEADROOM, len, NO_ADDR);
                    n += 1;
                }
                Ok(Step::WouldBlock) => {
                    emptied = true;
                    break;
                }
                Ok(Step::Skip) => {}
                // Report what was read; a persistent error recurs next call.
                Err(_) if n > 0 => break,
                Err(e) => return Err(e),
            }
        }
        batch.set_len(n);
        Ok(TunRead {
            packets: n,
            emptied,
            oversize,
        })
    }

    /// Writes every non-empty packet of `batch` to the interface; returns
    /// how many were written.
    ///
    /// A packet the kernel rejects (`EINVAL` for a malformed one) is dropped
    /// and the rest still go out. If the device would block, the remaining
    /// packets are dropped: the TUN queue is the kernel's stack, which only
    /// pushes back when it is overwhelmed anyway. Drops are counted in
    /// [`dropped`](Self::dropped). Only a dead descriptor is an error.
    ///
    /// With offload, runs of one TCP flow in the batch are written as one
    /// super-packet each (their payloads are not copied); they count as the
    /// packets they were.
    ///
    /// With several queues each packet goes to its flow's queue.
    pub fn write_batch(&self, batch: &PacketBatch) -> io::Result<usize> {
        let queue_of = |pkt: &[u8]| &self.queues[steer::queue_for(pkt, self.queues.len())].dev;
        if self.offload {
            return offload_io::write_batch_offload(&mut self.tx.lock().unwrap(), batch, queue_of);
        }
        let mut written = 0;
        for i in 0..batch.len() {
            let pkt = batch.packet(i);
            if pkt.is_empty() {
                continue;
            }
            let dev = queue_of(pkt);
            match dev.write_packet(pkt)? {
                Step::Done(_) => written += 1,
                Step::Skip => {
                    dev.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Step::WouldBlock => {
                    let rest = (i..batch.len())
                        .filter(|&j| !batch.packet(j).is_empty())
                        .count();
                    dev.dropped.fetch_add(rest as u64, Ordering::Relaxed);
                    break;
                }
            }
        }
        Ok(written)
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.queues[0].dev.fd.as_raw_fd()
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.queues[0].dev.fd.as_fd()
    }
}
