//! The TUN descriptor and its counters, with the one-packet read and write
//! both modes use; [`Tun`](super::Tun) adds the name, the mode and the
//! scratch buffers of offload (`offload_io.rs`).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;

/// Packets from the TUN have no remote address; slots get this one.
pub(super) const NO_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// What one [`Tun::read_batch`] brought.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunRead {
    /// Packets now in the batch.
    pub packets: usize,
    /// The TUN had nothing more when the read ended: another read right
    /// away would only be a system call that finds it empty.
    pub emptied: bool,
    /// A packet (or the segments of a super-packet) of this many bytes
    /// came that the batch's slots cannot hold: the interface MTU went up.
    /// With offload it waits, and the next read delivers it first if that
    /// batch's slots hold `HEADROOM + oversize + TAILROOM` bytes (and
    /// drops it if not); without offload it was dropped, and this is only
    /// a lower bound (the slot plus one byte: the kernel does not say how
    /// much longer it was).
    pub oversize: Option<usize>,
}

/// [`OffloadStats`] as it is counted: updated once per super-packet, not
/// per packet. Like `Tun::dropped` these fetch_add, which wraps: counting
/// packets at a billion a second, a u64 lasts 584 years, so no saturating
/// compare-and-swap loop on the data path.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) super_packets_read: AtomicU64,
    pub(super) segments_read: AtomicU64,
    pub(super) super_packets_written: AtomicU64,
    pub(super) segments_written: AtomicU64,
}

/// The descriptor of an open TUN and what was counted on it.
#[derive(Debug)]
pub(super) struct TunFd {
    pub(super) fd: OwnedFd,
    pub(super) dropped: AtomicU64,
    pub(super) stats: Counters,
}

/// What one packet read/write did, for the batch loops.
pub(super) enum Step {
    Done(usize),
    WouldBlock,
    /// This packet failed (e.g. `EINVAL` for a malformed packet); go on.
    Skip,
}

impl TunFd {
    pub(super) fn read_packet(&self, buf: &mut [u8]) -> io::Result<Step> {
        loop {
            // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
            let r = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            return match crate::sys::cvt_size(r) {
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

    pub(super) fn write_packet(&self, pkt: &[u8]) -> io::Result<Step> {
        loop {
            // SAFETY: `pkt` is a live buffer of `pkt.len()` bytes; write only
            // reads it.
            let r = unsafe { libc::write(self.fd.as_raw_fd(), pkt.as_ptr().cast(), pkt.len()) };
            return match crate::sys::cvt_size(r) {
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
