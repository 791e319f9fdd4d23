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
//! UDP GSO/GRO (`UDP_SEGMENT`, `UDP_GRO`) is not enabled yet. It plugs in
//! through [`Scratch`]: a per-message control buffer wired into `msg_control`,
//! a GRO segment size parsed after `recvmmsg` (one slot would then hold
//! several datagrams), and consecutive same-destination, same-size datagrams
//! coalesced into one message with a `UDP_SEGMENT` cmsg before `sendmmsg`.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use braid_core::batch::PacketBatch;

use crate::poll::{self, Interest};

/// Socket buffer size requested for both directions.
const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// How long [`UdpSocket::send_batch`] waits for a full send buffer to drain
/// before it drops the rest of the batch.
const SEND_WAIT: Duration = Duration::from_millis(100);

/// A non-blocking UDP socket with batched I/O; see the module documentation.
#[derive(Debug)]
pub struct UdpSocket {
    fd: OwnedFd,
    ipv6: bool,
    port: u16,
    rx: Mutex<Scratch>,
    tx: Mutex<Scratch>,
    dropped: AtomicU64,
}

/// The arrays one `recvmmsg`/`sendmmsg` call points the kernel at.
///
/// The pointers in `hdrs` are only meaningful during the call that set
/// them: every call rebuilds the headers it passes.
#[derive(Debug)]
struct Scratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    /// Batch slot index of each message (send only: empty slots are skipped).
    slots: Vec<usize>,
    /// Control-message buffers (receive timestamps), one per message;
    /// u64 elements keep them aligned for `cmsghdr`.
    cmsgs: Vec<[u64; CMSG_WORDS]>,
}

/// Room for one `SCM_TIMESTAMPNS` control message.
const CMSG_WORDS: usize = 8;

// SAFETY: the raw pointers inside `hdrs`/`iovs` are never dereferenced
// outside the `recvmmsg`/`sendmmsg` call that set them (each call rewrites
// them first), so moving the arrays to another thread is sound; access is
// serialised by the Mutex around each Scratch.
unsafe impl Send for Scratch {}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            hdrs: Vec::new(),
            iovs: Vec::new(),
            addrs: Vec::new(),
            slots: Vec::new(),
            cmsgs: Vec::new(),
        }
    }

    /// Grows the arrays to hold `n` messages; allocates only the first time
    /// a batch this large is seen.
    fn reserve(&mut self, n: usize) {
        if self.hdrs.len() >= n {
            return;
        }
        // SAFETY (for the three zeroed() calls): mmsghdr, iovec and
        // sockaddr_storage are plain C structs for which all-zero bytes
        // (null pointers, zero lengths) are valid.
        self.hdrs.resize_with(n, || unsafe { mem::zeroed() });
        self.iovs.resize_with(n, || unsafe { mem::zeroed() });
        self.addrs.resize_with(n, || unsafe { mem::zeroed() });
        self.slots.resize(n, 0);
        self.cmsgs.resize(n, [0; CMSG_WORDS]);
    }

    /// Points message `k` at `iov[k]` (already filled) and `addrs[k]`.
    fn set_hdr(&mut self, k: usize, namelen: libc::socklen_t) {
        let iov: *mut libc::iovec = &mut self.iovs[k];
        let name: *mut libc::sockaddr_storage = &mut self.addrs[k];
        let h = &mut self.hdrs[k];
        h.msg_hdr.msg_name = name.cast();
        h.msg_hdr.msg_namelen = namelen;
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_control = std::ptr::null_mut();
        h.msg_hdr.msg_controllen = 0;
        h.msg_hdr.msg_flags = 0;
        h.msg_len = 0;
    }
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

    /// Binds exactly `addr`. An IPv6 address gets a dual-stack socket (for
    /// `[::]` that means IPv4 peers too); an IPv4 one an IPv4-only socket.
    pub fn bind_addr(addr: SocketAddr) -> io::Result<UdpSocket> {
        Self::bind_on(addr, None)
    }

    /// Binds `addr` with the socket tied to interface `device`
    /// (SO_BINDTODEVICE): a line of a multipath tunnel leaves through its
    /// own interface whatever the routing table prefers.
    pub fn bind_on(addr: SocketAddr, device: Option<&str>) -> io::Result<UdpSocket> {
        let domain = match addr {
            SocketAddr::V4(_) => libc::AF_INET,
            SocketAddr::V6(_) => libc::AF_INET6,
        };
        let ipv6 = domain == libc::AF_INET6;
        // SAFETY: socket takes no pointers; the arguments are valid constants.
        let fd = crate::cvt(unsafe {
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
        if let Some(dev) = device {
            // SAFETY: passes the interface name bytes and their exact length.
            crate::cvt(unsafe {
                libc::setsockopt(
                    raw,
                    libc::SOL_SOCKET,
                    libc::SO_BINDTODEVICE,
                    dev.as_ptr().cast(),
                    dev.len() as libc::socklen_t,
                )
            })
            .map_err(|e| {
                io::Error::new(e.kind(), format!("bind UDP socket to interface {dev}: {e}"))
            })?;
        }
        // Root (CAP_NET_ADMIN) may exceed net.core.{r,w}mem_max; otherwise
        // take what the sysctl allows. Neither failing is fatal.
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if setsockopt_int(raw, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
                let _ = setsockopt_int(raw, libc::SOL_SOCKET, plain, SOCKET_BUFFER);
            }
        }

        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = encode_addr(addr, ipv6, &mut ss).expect("family matches the socket");
        // SAFETY: `ss` holds a valid sockaddr of `len` bytes for `domain`.
        crate::cvt(unsafe { libc::bind(raw, (&ss as *const libc::sockaddr_storage).cast(), len) })
            .map_err(|e| io::Error::new(e.kind(), format!("bind UDP {addr}: {e}")))?;

        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `ss`/`len` are a writable sockaddr buffer and its size.
        crate::cvt(unsafe {
            libc::getsockname(
                raw,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        })?;
        let port = decode_addr(&ss, len).map(|a| a.port()).unwrap_or(0);

        Ok(UdpSocket {
            fd,
            ipv6,
            port,
            rx: Mutex::new(Scratch::new()),
            tx: Mutex::new(Scratch::new()),
            dropped: AtomicU64::new(0),
        })
    }

    /// The local port (useful after binding port 0).
    pub fn local_port(&self) -> u16 {
        self.port
    }

    /// Whether this is an IPv6 (dual-stack) socket.
    pub fn is_ipv6(&self) -> bool {
        self.ipv6
    }

    /// Datagrams dropped on send so far: unreachable or oversized ones, and
    /// those left over when the send buffer stayed full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Clears `batch` and receives the datagrams that are ready, up to its
    /// capacity, with one `recvmmsg`; returns how many (0 when none was).
    ///
    /// Each datagram fills its slot from offset 0 (up to the whole stride)
    /// and carries its source address. A datagram longer than the stride is
    /// truncated by the kernel; its slot is left empty (`len == 0`).
    pub fn recv_batch(&self, batch: &mut PacketBatch) -> io::Result<usize> {
        self.recv_into(batch, None)
    }

    /// Connects the socket to `to` (connect(2)): the kernel then delivers
    /// only datagrams from `to` to it, and reports ICMP errors.
    pub fn connect(&self, to: SocketAddr) -> io::Result<()> {
        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = encode_addr(to, self.ipv6, &mut ss).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{to} is not reachable from this socket's family"),
            )
        })?;
        // SAFETY: `ss` holds a valid sockaddr of `len` bytes.
        crate::cvt(unsafe {
            libc::connect(
                self.fd.as_raw_fd(),
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
            self.fd.as_raw_fd(),
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
        self.recv_into(batch, Some(times))
    }

    fn recv_into(
        &self,
        batch: &mut PacketBatch,
        mut times: Option<&mut [Option<SystemTime>]>,
    ) -> io::Result<usize> {
        batch.clear();
        let cap = batch.capacity();
        let stride = batch.stride();
        let mut guard = lock(&self.rx);
        let s = &mut *guard;
        s.reserve(cap);
        let base = batch.arena_mut().as_mut_ptr();
        for k in 0..cap {
            s.iovs[k] = libc::iovec {
                // SAFETY: slot k spans [k*stride, (k+1)*stride) of the arena,
                // which is capacity*stride bytes long.
                iov_base: unsafe { base.add(k * stride) }.cast(),
                iov_len: stride,
            };
            s.set_hdr(
                k,
                mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
            );
            if times.is_some() {
                let control: *mut [u64; CMSG_WORDS] = &mut s.cmsgs[k];
                s.hdrs[k].msg_hdr.msg_control = control.cast();
                s.hdrs[k].msg_hdr.msg_controllen = mem::size_of::<[u64; CMSG_WORDS]>();
            }
        }
        let got = loop {
            // SAFETY: the first `cap` headers point at live iovecs and
            // sockaddr buffers in `s`, and the iovecs at disjoint slots of
            // the batch arena, which `batch` (borrowed mutably) keeps alive
            // and unaliased for the duration of the call.
            let r = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    s.hdrs.as_mut_ptr(),
                    cap as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            match crate::cvt(r) {
                Ok(n) => break n as usize,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => return Ok(0),
                    _ => return Err(e),
                },
            }
        };
        for k in 0..got {
            let h = &s.hdrs[k];
            let addr = decode_addr(&s.addrs[k], h.msg_hdr.msg_namelen).unwrap_or(UNSPECIFIED);
            let len = if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                0
            } else {
                (h.msg_len as usize).min(stride)
            };
            batch.set_packet(k, 0, len, addr);
            if let Some(times) = times.as_deref_mut() {
                if let Some(t) = times.get_mut(k) {
                    *t = arrival_time(&s.hdrs[k].msg_hdr);
                }
            }
        }
        batch.set_len(got);
        Ok(got)
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
    pub fn send_batch(&self, batch: &PacketBatch) -> io::Result<usize> {
        self.send_filtered(batch, None)
    }

    /// Like [`send_batch`](Self::send_batch), but only the datagrams (and
    /// extra copies) the batch assigns to local line `line`: each line of a
    /// multipath tunnel has a socket of its own.
    pub fn send_batch_on_line(&self, batch: &PacketBatch, line: u16) -> io::Result<usize> {
        self.send_filtered(batch, Some(line))
    }

    fn send_filtered(&self, batch: &PacketBatch, line: Option<u16>) -> io::Result<usize> {
        let mut guard = lock(&self.tx);
        let s = &mut *guard;
        s.reserve(batch.len() + batch.copies().len());
        let mut count = 0;
        let primaries = (0..batch.len())
            .filter(|&i| line.is_none_or(|l| batch.line(i) == l))
            .map(|i| (i, batch.addr(i)));
        let copies = batch
            .copies()
            .iter()
            .filter(|c| line.is_none_or(|l| c.line == l))
            .map(|c| (c.slot, c.addr));
        for (i, addr) in primaries.chain(copies) {
            let pkt = batch.packet(i);
            if pkt.is_empty() {
                continue;
            }
            let Some(namelen) = encode_addr(addr, self.ipv6, &mut s.addrs[count]) else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            s.iovs[count] = libc::iovec {
                // sendmmsg only reads through this pointer.
                iov_base: pkt.as_ptr() as *mut libc::c_void,
                iov_len: pkt.len(),
            };
            s.set_hdr(count, namelen);
            s.slots[count] = i;
            count += 1;
        }

        let mut pos = 0;
        let mut sent = 0;
        let mut deadline: Option<Instant> = None;
        while pos < count {
            // SAFETY: headers pos..count point at live iovecs and sockaddrs
            // in `s`, and the iovecs at packets of `batch`, borrowed for the
            // duration of the call; the kernel only reads them.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    s.hdrs[pos..].as_mut_ptr(),
                    (count - pos) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            match crate::cvt(r) {
                Ok(n) => {
                    pos += n as usize;
                    sent += n as usize;
                }
                // sendmmsg reports an error only when the first message it
                // tried failed, so `pos` is the culprit.
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN | libc::ENOBUFS) => {
                        let d = *deadline.get_or_insert_with(|| Instant::now() + SEND_WAIT);
                        let left = d.saturating_duration_since(Instant::now());
                        let ready = !left.is_zero()
                            && poll::wait(
                                &[(self.fd.as_raw_fd(), Interest::WRITABLE)],
                                Some(left),
                            )?
                            .is_writable(0);
                        if !ready {
                            self.dropped
                                .fetch_add((count - pos) as u64, Ordering::Relaxed);
                            break;
                        }
                    }
                    Some(libc::EBADF | libc::ENOTSOCK | libc::EFAULT) => return Err(e),
                    _ => {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                        pos += 1;
                    }
                },
            }
        }
        Ok(sent)
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The SCM_TIMESTAMPNS arrival time in a received message's control data
/// (for callers that run recvmmsg themselves, like the netem benchmark).
pub fn arrival_time(msg: &libc::msghdr) -> Option<SystemTime> {
    // SAFETY: `msg` was filled by recvmmsg with a control buffer we own;
    // the CMSG_* helpers walk it within msg_controllen, and CMSG_DATA of a
    // SCM_TIMESTAMPNS message holds a timespec (read unaligned to be safe).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                return Some(
                    SystemTime::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
                );
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

const UNSPECIFIED: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// Scratch arrays hold no invariants a panicking holder could break, so a
/// poisoned lock is still usable.
fn lock(m: &Mutex<Scratch>) -> MutexGuard<'_, Scratch> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    crate::cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Writes `addr` as a sockaddr for a socket of the given family into `out`;
/// returns its length, or `None` when an IPv4 socket cannot reach it.
/// IPv4 addresses become v4-mapped on an IPv6 socket.
fn encode_addr(
    addr: SocketAddr,
    ipv6: bool,
    out: &mut libc::sockaddr_storage,
) -> Option<libc::socklen_t> {
    let ptr: *mut libc::sockaddr_storage = out;
    if ipv6 {
        let (ip, port, flow, scope) = match addr {
            SocketAddr::V4(a) => (a.ip().to_ipv6_mapped(), a.port(), 0, 0),
            SocketAddr::V6(a) => (*a.ip(), a.port(), a.flowinfo(), a.scope_id()),
        };
        let sin6 = libc::sockaddr_in6 {
            sin6_family: libc::AF_INET6 as libc::sa_family_t,
            sin6_port: port.to_be(),
            sin6_flowinfo: flow,
            sin6_addr: libc::in6_addr {
                s6_addr: ip.octets(),
            },
            sin6_scope_id: scope,
        };
        // SAFETY: sockaddr_storage is larger than and suitably aligned for
        // sockaddr_in6, and `ptr` comes from a live &mut.
        unsafe { ptr.cast::<libc::sockaddr_in6>().write(sin6) };
        Some(mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
    } else {
        let a = match addr {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
                Some(ip) => SocketAddrV4::new(ip, a.port()),
                None => return None,
            },
        };
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: sockaddr_storage is larger than and suitably aligned for
        // sockaddr_in, and `ptr` comes from a live &mut.
        unsafe { ptr.cast::<libc::sockaddr_in>().write(sin) };
        Some(mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
    }
}

/// Reads a sockaddr the kernel filled in; v4-mapped IPv6 addresses come
/// back as [`SocketAddr::V4`].
fn decode_addr(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let ptr: *const libc::sockaddr_storage = ss;
    match ss.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, the
            // storage is large and aligned enough for one.
            let sin = unsafe { ptr.cast::<libc::sockaddr_in>().read() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6, the
            // storage is large and aligned enough for one.
            let sin6 = unsafe { ptr.cast::<libc::sockaddr_in6>().read() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            Some(match ip.to_ipv4_mapped() {
                Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
                None => SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    port,
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(a: &str, ipv6: bool) -> Option<SocketAddr> {
        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = encode_addr(a.parse().unwrap(), ipv6, &mut ss)?;
        decode_addr(&ss, len)
    }

    #[test]
    fn address_conversion() {
        let v4: SocketAddr = "198.18.1.2:51820".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::7]:443".parse().unwrap();
        assert_eq!(roundtrip("198.18.1.2:51820", true), Some(v4));
        assert_eq!(roundtrip("198.18.1.2:51820", false), Some(v4));
        assert_eq!(roundtrip("[2001:db8::7]:443", true), Some(v6));
        assert_eq!(roundtrip("[2001:db8::7]:443", false), None);
        assert_eq!(roundtrip("[::ffff:198.18.1.2]:51820", false), Some(v4));
        assert_eq!(roundtrip("[::ffff:198.18.1.2]:51820", true), Some(v4));
    }
}
