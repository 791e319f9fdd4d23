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
//! Offload (`IFF_VNET_HDR` + `TUNSETOFFLOAD`, which would let one read return
//! a 64 KiB TSO super-packet) is not enabled yet. It plugs in at two points:
//! [`Tun::create`] adds the flag and the offload ioctl, and
//! `read_packet`/`write_packet` strip/prepend the `virtio_net_hdr` (and
//! segment / coalesce); the batch loops stay as they are.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use braid_core::batch::{PacketBatch, HEADROOM, TAILROOM};

/// Packets from the TUN have no remote address; slots get this one.
const NO_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// An open, non-persistent TUN interface; see the module documentation.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    dropped: AtomicU64,
}

/// What one packet read/write did, for the batch loops.
enum Step {
    Done(usize),
    WouldBlock,
    /// This packet failed (e.g. `EINVAL` for a malformed packet); go on.
    Skip,
}

impl Tun {
    /// Creates the TUN interface `name` (kernel-chosen if empty or a pattern
    /// such as `"braid%d"`; see [`name`](Self::name) for the result).
    ///
    /// Needs `CAP_NET_ADMIN`. The descriptor is non-blocking and close-on-exec.
    pub fn create(name: &str) -> io::Result<Tun> {
        if name.len() >= libc::IFNAMSIZ || name.bytes().any(|b| b == 0 || b == b'/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid interface name {name:?} (at most 15 bytes, no '/' or NUL)"),
            ));
        }
        // SAFETY: the path is a NUL-terminated literal; flags are valid.
        let fd = crate::cvt(unsafe {
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
        ifr.ifr_ifru.ifru_flags = Self::iff_flags();
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `ifr`
        // is, and it outlives the call.
        crate::cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) })
            .map_err(|e| io::Error::new(e.kind(), format!("TUNSETIFF {name:?}: {e}")))?;

        let name_bytes: Vec<u8> = ifr
            .ifr_name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Ok(Tun {
            fd,
            name: String::from_utf8_lossy(&name_bytes).into_owned(),
            dropped: AtomicU64::new(0),
        })
    }

    /// The TUNSETIFF flags: layer-3 packets without the 4-byte packet-info
    /// prefix. `IFF_VNET_HDR` joins here when offload is added.
    fn iff_flags() -> libc::c_short {
        (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short
    }

    /// The interface name the kernel assigned.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Packets dropped so far: too long to read into a slot, rejected by the
    /// kernel on write (malformed), or left over when a write would block.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Clears `batch` and fills it with the packets that are ready, up to its
    /// capacity; returns how many (0 when none was ready).
    ///
    /// Each packet lands in its slot at [`HEADROOM`] and is at most
    /// `stride - HEADROOM - TAILROOM` bytes; a longer one is dropped (and
    /// counted in [`dropped`](Self::dropped)), so size the stride for the
    /// interface MTU.
    pub fn read_batch(&self, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
        let max = batch.stride() - HEADROOM - TAILROOM;
        let mut n = 0;
        while n < batch.capacity() {
            // The kernel silently truncates a packet to the buffer, so offer
            // one byte of the (still unused) tailroom more: a read that fills
            // it was a packet too long for the slot.
            let buf = &mut batch.slot_buf_mut(n)[HEADROOM..HEADROOM + max + 1];
            match self.read_packet(buf) {
                Ok(Step::Done(len)) if len > max => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Step::Done(len)) => {
                    batch.set_packet(n, HEADROOM, len, NO_ADDR);
                    n += 1;
                }
                Ok(Step::WouldBlock) => break,
                Ok(Step::Skip) => {}
                // Report what was read; a persistent error recurs next call.
                Err(_) if n > 0 => break,
                Err(e) => return Err(e),
            }
        }
        batch.set_len(n);
        Ok(n)
    }

    /// Writes every non-empty packet of `batch` to the interface; returns
    /// how many were written.
    ///
    /// A packet the kernel rejects (`EINVAL` for a malformed one) is dropped
    /// and the rest still go out. If the device would block, the remaining
    /// packets are dropped: the TUN queue is the kernel's stack, which only
    /// pushes back when it is overwhelmed anyway. Drops are counted in
    /// [`dropped`](Self::dropped). Only a dead descriptor is an error.
    pub fn write_batch(&self, batch: &PacketBatch) -> io::Result<usize> {
        let mut written = 0;
        for i in 0..batch.len() {
            let pkt = batch.packet(i);
            if pkt.is_empty() {
                continue;
            }
            match self.write_packet(pkt)? {
                Step::Done(_) => written += 1,
                Step::Skip => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Step::WouldBlock => {
                    let rest = (i..batch.len())
                        .filter(|&j| !batch.packet(j).is_empty())
                        .count();
                    self.dropped.fetch_add(rest as u64, Ordering::Relaxed);
                    break;
                }
            }
        }
        Ok(written)
    }

    fn read_packet(&self, buf: &mut [u8]) -> io::Result<Step> {
        loop {
            // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
            let r = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            return match crate::cvt_size(r) {
                Ok(0) => Ok(Step::WouldBlock),
                Ok(len) => Ok(Step::Done(len.min(buf.len()))),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => Ok(Step::WouldBlock),
                    _ => Err(e),
                },
            };
        }
    }

    fn write_packet(&self, pkt: &[u8]) -> io::Result<Step> {
        loop {
            // SAFETY: `pkt` is a live buffer of `pkt.len()` bytes; write only
            // reads it.
            let r = unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
            return match crate::cvt_size(r) {
                Ok(len) => Ok(Step::Done(len)),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => Ok(Step::WouldBlock),
                    // The descriptor or device is gone: nothing more will work.
                    Some(libc::EBADF | libc::EBADFD | libc::EFAULT) => Err(e),
                    _ => Ok(Step::Skip),
                },
            };
        }
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
