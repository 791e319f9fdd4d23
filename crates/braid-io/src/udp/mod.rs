//! The UDP socket: where encrypted WireGuard datagrams enter and leave.
//!
//! One dual-stack IPv6 socket serves both address families (IPv4 peers show
//! up as v4-mapped addresses, converted back to [`SocketAddr::V4`] here so
//! the core never sees the mapping). Datagrams move a whole batch per
//! syscall with `recvmmsg`/`sendmmsg`.
//!
//! The `mmsghdr`/`iovec`/`sockaddr` arrays those calls need live in the
//! socket, one set for receiving and one for sending, each behind its own
//! mutex: the receive loop and the send path may run on different threads
//! without contending, and no call allocates once the arrays have grown to
//! the batch capacity.
//!
//! Both directions use the kernel's UDP offloads when it has them: runs
//! of same-size datagrams to one peer leave as one GSO message (`gso.rs`),
//! and coalesced GRO messages are received one datagram per slot where
//! their length was foreseen (`scatter.rs`) and split back into one
//! datagram per slot by copying where not (`gro.rs`, which owns 1 MiB of
//! scratch per socket for them). Callers see
//! one datagram per slot either way; [`UdpSocket::gso_enabled`] and
//! [`UdpSocket::gro_enabled`] say which offloads a socket uses.

mod cmsg;
mod fd;
mod gro;
mod gso;
mod pktinfo;
mod scatter;

use std::io;
use std::mem;
use std::net::IpAddr;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use braid_core::batch::PacketBatch;

use crate::sys::setsockopt_int;

use crate::sockaddr::{decode_addr, encode_addr};
pub use cmsg::arrival_time;
use fd::SocketFd;
use gro::RxScratch;
use gso::TxScratch;

/// Socket buffer size requested for both directions (the kernel doubles
/// it for its bookkeeping). In redundant mode the receiving socket holds
/// every packet once per line: with 4 MiB, four TCP streams over two
/// redundant lines overflowed it whenever the receiver fell behind, and
/// the two copies of a packet went together (15,800 retransmissions in
/// 5 s where one line had none); with 8 MiB, none.
pub const SOCKET_BUFFER: usize = 8 << 20;
/// The most sockets [`UdpSocket::bind_group`] joins on one port (one per
/// TUN queue at most).
pub const MAX_GROUP: usize = 64;

/// A non-blocking UDP socket with batched I/O; see the module documentation.
#[derive(Debug)]
pub struct UdpSocket {
    sock: SocketFd,
    rx: Mutex<RxScratch>,
    tx: Mutex<TxScratch>,
}

impl UdpSocket {
    /// Binds `[::]:port` dual-stack (`port` 0: any free port), or
    /// `0.0.0.0:port` when the host has no IPv6.
    pub fn bind(port: u16) -> io::Result<UdpSocket> {
        let v6 = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
        match Self::bind_addr(v6) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL | libc::EPROTONOSUPPORT)
                ) =>
            {
                Self::bind_addr(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::UNSPECIFIED,
                    port,
                )))
            }
            r => r,
        }
    }

    /// `n` sockets (1 to [`MAX_GROUP`]) on one port, as [`bind`](Self::bind)
    /// binds one, joined with `SO_REUSEPORT`: the kernel hands each
    /// datagram to one of them by a hash of its addresses and ports, so
    /// one sender's datagrams always reach the same socket and several
    /// senders spread over all of them. Only sockets of the same user can
    /// join a group, and the group is complete before this returns.
    pub fn bind_group(port: u16, n: usize) -> io::Result<Vec<UdpSocket>> {
        if !(1..=MAX_GROUP).contains(&n) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a UDP socket group has 1 to {MAX_GROUP} sockets, not {n}"),
            ));
        }
        let reuse = n > 1;
        let first = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
        let main = match Self::bind_with(first, None, reuse) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL | libc::EPROTONOSUPPORT)
                ) =>
            {
                let v4 = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
                Self::bind_with(v4, None, reuse)?
            }
            r => r?,
        };
        // The others on the port the first one got (port 0: a free one).
        let mut addr = match main.is_ipv6() {
            true => first,
            false => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
        };
        addr.set_port(main.local_port());
        let mut group = vec![main];
        for _ in 1..n {
            group.push(Self::bind_with(addr, None, true)?);
        }
        Ok(group)
    }

    /// Binds exactly `addr`. An IPv6 address gets a dual-stack socket (for
    /// `[::]` that means IPv4 peers too); an IPv4 one an IPv4-only socket.
    pub fn bind_addr(addr: SocketAddr) -> io::Result<UdpSocket> {
        Self::bind_on(addr, None)
    }

    /// Binds `addr` with the socket tied to interface `device`
    /// (SO_BINDTODEVICE): a line of a multipath tunnel leaves through its
    /// own interface whatever the routing table prefers.
    pub fn bind_on(addr: SocketAddr, device: Option<&str>) -> io::Result<UdpSocket> {
        Self::bind_with(addr, device, false)
    }

    /// [`bind_on`](Self::bind_on), joining a `SO_REUSEPORT` group when
    /// `reuse_port`.
    fn bind_with(
        addr: SocketAddr,
        device: Option<&str>,
        reuse_port: bool,
    ) -> io::Result<UdpSocket> {
        let domain = match addr {
            SocketAddr::V4(_) => libc::AF_INET,
            SocketAddr::V6(_) => libc::AF_INET6,
        };
        let ipv6 = domain == libc::AF_INET6;
        // SAFETY: socket takes no pointers; the arguments are valid constants.
        let fd = crate::sys::cvt(unsafe {
            libc::socket(
                domain,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::IPPROTO_UDP,
            )
        })?;
        // SAFETY: `fd` was just returned by socket and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();

        if ipv6 {
            setsockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0)?;
        }
        if reuse_port {
            setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
        }
        if let Some(dev) = device {
            crate::sys::bind_to_device(raw, dev).map_err(|e| {
                io::Error::new(e.kind(), format!("bind UDP socket to interface {dev}: {e}"))
            })?;
        }
        // Root (CAP_NET_ADMIN) may exceed net.core.{r,w}mem_max; otherwise
        // take what the sysctl allows. Neither failing is fatal.
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if setsockopt_int(raw, libc::SOL_SOCKET, force, SOCKET_BUFFER as libc::c_int).is_err() {
                let _ = setsockopt_int(raw, libc::SOL_SOCKET, plain, SOCKET_BUFFER as libc::c_int);
            }
        }

        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = encode_addr(addr, ipv6, &mut ss).expect("family matches the socket");
        // SAFETY: `ss` holds a valid sockaddr of `len` bytes for `domain`.
        crate::sys::cvt(unsafe {
            libc::bind(raw, (&ss as *const libc::sockaddr_storage).cast(), len)
        })
        .map_err(|e| io::Error::new(e.kind(), format!("bind UDP {addr}: {e}")))?;

        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `ss`/`len` are a writable sockaddr buffer and its size.
        crate::sys::cvt(unsafe {
            libc::getsockname(
                raw,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        })?;
        let port = decode_addr(&ss, len).map(|a| a.port()).unwrap_or(0);

        // Which of our addresses each datagram arrives at: replies leave
        // from there (a kernel without it only loses that).
        let _ = pktinfo::enable(raw, ipv6);

        // A segment size of 0 means "none" (each send may give its own), so
        // setting it only asks whether the kernel knows UDP_SEGMENT.
        let gso = setsockopt_int(raw, libc::SOL_UDP, libc::UDP_SEGMENT, 0).is_ok();
        let gro = setsockopt_int(raw, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();

        Ok(UdpSocket {
            sock: SocketFd {
                fd,
                ipv6,
                port,
                dropped: AtomicU64::new(0),
                gso: AtomicBool::new(gso),
                gro: AtomicBool::new(gro),
                oversize: AtomicUsize::new(0),
                refused: Mutex::new(Vec::new()),
                refused_any: AtomicBool::new(false),
            },
            rx: Mutex::new(RxScratch::default()),
            tx: Mutex::new(TxScratch::default()),
        })
    }

    /// The local port (useful after binding port 0).
    pub fn local_port(&self) -> u16 {
        self.sock.port
    }

    /// Whether this is an IPv6 (dual-stack) socket.
    pub fn is_ipv6(&self) -> bool {
        self.sock.ipv6
    }

    /// Datagrams dropped on send so far: unreachable or oversized ones, and
    /// those left over when the send buffer stayed full.
    pub fn dropped(&self) -> u64 {
        self.sock.dropped.load(Ordering::Relaxed)
    }

    /// Whether sends coalesce datagrams with UDP segmentation offload: the
    /// kernel has it and has not refused it on this socket yet.
    pub fn gso_enabled(&self) -> bool {
        self.sock.gso.load(Ordering::Relaxed)
    }

    /// Whether the kernel may coalesce received datagrams (UDP_GRO); they
    /// are split again before [`recv_batch`](Self::recv_batch) returns.
    pub fn gro_enabled(&self) -> bool {
        self.sock.gro.load(Ordering::Relaxed)
    }

    /// Stops coalescing sends (a driver that mangles GSO, a comparison
    /// run); there is no way back for this socket.
    pub fn disable_gso(&self) {
        self.sock.gso.store(false, Ordering::Relaxed);
    }

    /// Switches receive coalescing on or off. Switch before traffic flows:
    /// datagrams the kernel already coalesced are still split, but only
    /// while GRO is on.
    pub fn set_gro(&self, on: bool) -> io::Result<()> {
        setsockopt_int(
            self.sock.fd.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            on as libc::c_int,
        )
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("set UDP_GRO on UDP port {}: {e}", self.sock.port),
            )
        })?;
        self.sock.gro.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Whether datagrams received earlier wait to be handed out: the next
    /// [`recv_batch`](Self::recv_batch) returns them even if the socket
    /// has nothing new (so do not wait for readability first).
    pub fn has_pending(&self) -> bool {
        lock(&self.rx).has_pending()
    }

    /// Clears `batch` and receives the datagrams that are ready, up to its
    /// capacity, with one `recvmmsg`; returns how many (0 when none was).
    ///
    /// Each datagram fills its slot from offset 0 (up to the whole stride)
    /// and carries its source address. A datagram longer than the stride
    /// leaves its slot empty (`len == 0`), or with GRO ends the batch once
    /// to wait for bigger slots; [`take_oversize`](Self::take_oversize)
    /// tells how big they must be. With GRO, slots set aside for a
    /// coalesced message that came shorter stay empty too: skip every
    /// empty slot.
    ///
    /// With GRO a full batch may leave datagrams behind in the socket's
    /// scratch ([`has_pending`](Self::has_pending)); the next call returns
    /// them first.
    pub fn recv_batch(&self, batch: &mut PacketBatch) -> io::Result<usize> {
        self.sock.recv_into(&mut lock(&self.rx), batch, None)
    }

    /// Local addresses sends could not leave from since the last call
    /// (removed from the host): datagrams meant to leave from one left
    /// from the routing table's pick instead. Tell whoever chose them.
    pub fn take_refused_sources(&self) -> Vec<IpAddr> {
        if !self.sock.refused_any.swap(false, Ordering::Relaxed) {
            return Vec::new();
        }
        std::mem::take(&mut *lock(&self.sock.refused))
    }

    /// The length of the longest datagram that the receives since the last
    /// call found too long for the batch's slots. With GRO the first such
    /// datagram waits: the next [`recv_batch`](Self::recv_batch) delivers
    /// it first if that batch's slots hold it, and drops it if not.
    /// Without GRO it was dropped. Either way, size the slots for it.
    pub fn take_oversize(&self) -> Option<usize> {
        Some(self.sock.oversize.swap(0, Ordering::Relaxed)).filter(|&len| len > 0)
    }

    /// Connects the socket to `to` (connect(2)): the kernel then delivers
    /// only datagrams from `to` to it, and reports ICMP errors.
    pub fn connect(&self, to: SocketAddr) -> io::Result<()> {
        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = encode_addr(to, self.sock.ipv6, &mut ss).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{to} is not reachable from this socket's family"),
            )
        })?;
        // SAFETY: `ss` holds a valid sockaddr of `len` bytes.
        crate::sys::cvt(unsafe {
            libc::connect(
                self.sock.fd.as_raw_fd(),
                (&ss as *const libc::sockaddr_storage).cast(),
                len,
            )
        })
        .map(drop)
        .map_err(|e| io::Error::new(e.kind(), format!("connect UDP {to}: {e}")))
    }

    /// Asks the kernel to stamp every received datagram with its arrival
    /// time (SO_TIMESTAMPNS), for [`recv_batch_timed`](Self::recv_batch_timed).
    pub fn enable_rx_timestamps(&self) -> io::Result<()> {
        setsockopt_int(
            self.sock.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            1,
        )
    }

    /// Like [`recv_batch`](Self::recv_batch), and `times[k]` gets the
    /// kernel's arrival time of datagram `k` (wall clock), when stamped.
    /// Someone who must act a fixed time after arrival (a delay line) then
    /// does not add its own wake-up latency.
    pub fn recv_batch_timed(
        &self,
        batch: &mut PacketBatch,
        times: &mut [Option<SystemTime>],
    ) -> io::Result<usize> {
        self.sock.recv_into(&mut lock(&self.rx), batch, Some(times))
    }

    /// Sends every non-empty slot of `batch` to its address with
    /// `sendmmsg`; returns how many datagrams were sent.
    ///
    /// A datagram the kernel refuses for its own reasons (no route,
    /// firewall, too big, an IPv6 destination on an IPv4 socket…) is dropped
    /// and the rest still go. If the send buffer is full the call waits up
    /// to 100 ms for room, then drops what is left. Drops are counted in
    /// [`dropped`](Self::dropped); only errors that concern the socket
    /// itself are returned.
    ///
    /// With GSO, runs of same-size datagrams to one destination leave as
    /// one message each; the count returned is still of datagrams.
    pub fn send_batch(&self, batch: &PacketBatch) -> io::Result<usize> {
        self.sock.send_filtered(&mut lock(&self.tx), batch, None)
    }

    /// Like [`send_batch`](Self::send_batch), but only the datagrams (and
    /// extra copies) the batch assigns to local line `line`: each line of a
    /// multipath tunnel has a socket of its own.
    pub fn send_batch_on_line(&self, batch: &PacketBatch, line: u16) -> io::Result<usize> {
        self.sock
            .send_filtered(&mut lock(&self.tx), batch, Some(line))
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.fd.as_raw_fd()
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.fd.as_fd()
    }
}

/// Scratch arrays hold no invariants a panicking holder could break, so a
/// poisoned lock is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
