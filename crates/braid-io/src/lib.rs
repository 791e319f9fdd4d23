//! braid's Linux I/O layer.
//!
//! The protocol core (`braid-core`) never touches the operating system; this
//! crate is the only place that does. It is deliberately thin: plain `libc`
//! calls, no async runtime, so the daemon's event loop stays a simple
//! `poll` over a handful of file descriptors and every syscall moves a whole
//! [`PacketBatch`](braid_core::batch::PacketBatch) rather than one packet.
//! Batching is where the throughput comes from (one `recvmmsg`/`sendmmsg`
//! per batch instead of one syscall per datagram), and reusing the batch
//! arena plus per-socket scratch arrays keeps the hot path allocation-free.
//!
//! Interface configuration shells out to `ip` (iproute2) instead of speaking
//! rtnetlink: it runs a few times per `braid up`, never on the data path, and
//! `ip`'s own error messages are the most useful thing to show an operator.

pub mod netcfg;
pub mod offload;
pub mod poll;
pub mod tcp;
pub mod tun;
pub mod udp;
pub mod wake;

pub use poll::{wait, Interest, Readiness};
pub use tcp::TcpLine;
pub use tun::{Offload, OffloadStats, Tun, TunRead};
pub use udp::UdpSocket;
pub use wake::Waker;

/// Returns the current `errno` as an `io::Error`.
fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Converts a `-1`-on-error libc return value into an `io::Result`.
fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret == -1 {
        Err(last_error())
    } else {
        Ok(ret)
    }
}

/// Sets an integer socket option on `fd`.
pub fn setsockopt_int(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Asks the kernel to back `region` (a batch's
/// [`huge_page_region`](braid_core::batch::PacketBatch::huge_page_region))
/// with transparent huge pages, which Debian's default (`madvise`) only
/// does when asked. It is advice: a kernel without them (`EINVAL`) leaves
/// the memory as it was, and the caller may ignore the error.
pub fn advise_huge_pages(region: &mut [u8]) -> std::io::Result<()> {
    if region.is_empty() {
        return Ok(());
    }
    // SAFETY: the range is memory this process owns (a live mutable
    // slice); MADV_HUGEPAGE changes how it is backed, never its contents.
    cvt(unsafe {
        libc::madvise(
            region.as_mut_ptr().cast(),
            region.len(),
            libc::MADV_HUGEPAGE,
        )
    })
    .map(drop)
}

/// Like [`cvt`] for `ssize_t` results (read/write).
fn cvt_size(ret: libc::ssize_t) -> std::io::Result<usize> {
    if ret < 0 {
        Err(last_error())
    } else {
        Ok(ret as usize)
    }
}
