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

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use braid_core::batch::{PacketBatch, HEADROOM, TAILROOM};

use crate::offload::VNET_HDR_LEN;

mod fd;
mod link;
mod offload_io;

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
    dev: TunFd,
    name: String,
    offload: bool,
    rx: Mutex<ReadScratch>,
    tx: Mutex<WriteScratch>,
}

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
        if name.len() >= libc::IFNAMSIZ || name.bytes().any(|b| b == 0 || b == b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid interface name {name:?} (at most 15 bytes, no '/' or NUL)"),
            ));
        }
        if offload == Offload::Auto {
            if let Ok((fd, actual)) = Self::open(name, true) {
                if Self::enable_offload(&fd).is_ok() {
                    return Ok(Self::new(fd, actual, true));
                }
                // The device has a vnet header but no offload: closing the
                // descriptor removes it, and the plain one replaces it.
                drop(fd);
            }
        }
        let (fd, actual) = Self::open(name, false)?;
        Ok(Self::new(fd, actual, false))
    }

    fn new(fd: OwnedFd, name: String, offload: bool) -> Tun {
        Tun {
            dev: TunFd {
                fd,
                dropped: AtomicU64::new(0),
                stats: Counters::default(),
            },
            name,
            offload,
            rx: Mutex::new(ReadScratch::new(offload)),
            tx: Mutex::new(WriteScratch::new()),
        }
    }

    /// Opens /dev/net/tun and attaches it to interface `name`; returns the
    /// descriptor and the name the kernel chose.
    fn open(name: &str, vnet_hdr: bool) -> io::Result<(OwnedFd, String)> {
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
        self.dev.dropped.load(Ordering::Relaxed)
    }

    /// Counts of what offload did (all zero in plain mode).
    pub fn offload_stats(&self) -> OffloadStats {
        let c = &self.dev.stats;
        OffloadStats {
            super_packets_read: c.super_packets_read.load(Ordering::Relaxed),
            segments_read: c.segments_read.load(Ordering::Relaxed),
            super_packets_written: c.super_packets_written.load(Ordering::Relaxed),
            segments_written: c.segments_written.load(Ordering::Relaxed),
        }
    }

    /// Whether segments of a super-packet are waiting for the next
    /// [`read_batch`](Self::read_batch): they are not visible to `poll` on
    /// the descriptor. This only happens when a batch came back full.
    pub fn has_pending(&self) -> bool {
        self.rx.lock().unwrap().has_pending()
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
        if self.offload {
            return self
                .dev
                .read_batch_offload(&mut self.rx.lock().unwrap(), batch);
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
            match self.dev.read_packet(buf) {
                Ok(Step::Done(len)) if len > max => {
                    self.dev.dropped.fetch_add(1, Ordering::Relaxed);
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
    pub fn write_batch(&self, batch: &PacketBatch) -> io::Result<usize> {
        if self.offload {
            return self
                .dev
                .write_batch_offload(&mut self.tx.lock().unwrap(), batch);
        }
        let mut written = 0;
        for i in 0..batch.len() {
            let pkt = batch.packet(i);
            if pkt.is_empty() {
                continue;
            }
            match self.dev.write_packet(pkt)? {
                Step::Done(_) => written += 1,
                Step::Skip => {
                    self.dev.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Step::WouldBlock => {
                    let rest = (i..batch.len())
                        .filter(|&j| !batch.packet(j).is_empty())
                        .count();
                    self.dev.dropped.fetch_add(rest as u64, Ordering::Relaxed);
                    break;
                }
            }
        }
        Ok(written)
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.dev.fd.as_raw_fd()
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.dev.fd.as_fd()
    }
}
