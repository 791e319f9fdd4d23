//! The kernel's socket and the state both directions read: family, port,
//! which offloads it takes, and the datagrams it dropped. Receiving
//! (`gro.rs`) and sending (`gso.rs`) are methods on it that borrow their
//! scratch arrays from [`UdpSocket`](super::UdpSocket).

use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

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
    /// Local addresses a send could not leave from since the owner last
    /// asked (`UdpSocket::take_refused_sources`); `refused_any` says
    /// whether there are any without taking the lock.
    pub(super) refused: Mutex<Vec<IpAddr>>,
    pub(super) refused_any: AtomicBool,
}

/// Refused local addresses kept for the owner at most (each is reported
/// once; more between two looks are rare and only cost retries).
const MAX_REFUSED: usize = 16;

impl SocketFd {
    pub(super) fn count_dropped(&self, n: usize) {
        // fetch_add wraps, but one per datagram at a billion a second a
        // u64 lasts 584 years: no saturating CAS loop on the send path.
        if n > 0 {
            self.dropped.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// A send could not leave from `ip`.
    pub(super) fn refuse_source(&self, ip: IpAddr) {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if !refused.contains(&ip) && refused.len() < MAX_REFUSED {
            refused.push(ip);
        }
        self.refused_any.store(true, Ordering::Relaxed);
    }

    pub(super) fn gso_enabled(&self) -> bool {
        self.gso.load(Ordering::Relaxed)
    }

    pub(super) fn gro_enabled(&self) -> bool {
        self.gro.load(Ordering::Relaxed)
    }
}
