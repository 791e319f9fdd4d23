//! The kernel's socket and the state both directions read: family, port,
//! which offloads it takes, and the datagrams it dropped. Receiving
//! (`gro.rs`) and sending (`gso.rs`) are methods on it that borrow their
//! scratch arrays from [`UdpSocket`](super::UdpSocket).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[derive(Debug)]
pub(super) struct SocketFd {
    pub(super) fd: OwnedFd,
    pub(super) ipv6: bool,
    pub(super) port: u16,
    pub(super) dropped: AtomicU64,
    /// Sends coalesce runs of datagrams with UDP_SEGMENT.
    pub(super) gso: AtomicBool,
    /// The kernel may coalesce received datagrams (UDP_GRO is set).
    pub(super) gro: AtomicBool,
    /// The longest datagram found too long for a batch's slots since the
    /// owner last asked (0: none); see `UdpSocket::take_oversize`.
    pub(super) oversize: AtomicUsize,
}

impl SocketFd {
    pub(super) fn count_dropped(&self, n: usize) {
        // fetch_add wraps, but one per datagram at a billion a second a
        // u64 lasts 584 years: no saturating CAS loop on the send path.
        if n > 0 {
            self.dropped.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    pub(super) fn gso_enabled(&self) -> bool {
        self.gso.load(Ordering::Relaxed)
    }

    pub(super) fn gro_enabled(&self) -> bool {
        self.gro.load(Ordering::Relaxed)
    }
}
