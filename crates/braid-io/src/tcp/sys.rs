//! The system calls a TCP line needs beyond `std::net`: one epoll set that
//! stands for all its sockets (so the daemon polls a single descriptor per
//! line), a timerfd for reconnect backoff, a non-blocking connect that can
//! be tied to an interface, and socket options.

use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::sockaddr::sockaddr_of;
use crate::sys::{bind_to_device, cvt, setsockopt_int};

/// Token of the listening socket in the epoll set.
pub const LISTENER: u64 = u64::MAX;
/// Token of the reconnect timer in the epoll set.
pub const TIMER: u64 = u64::MAX - 1;

pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is new and owned by nobody else.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, writable: bool) -> io::Result<()> {
        let mut events = libc::EPOLLIN as u32;
        if writable {
            events |= libc::EPOLLOUT as u32;
        }
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a live epoll_event; `fd` is open.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    /// Watches `fd` for reading, and for writing when `writable`.
    pub fn add(&self, fd: RawFd, token: u64, writable: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, writable)
    }

    pub fn modify(&self, fd: RawFd, token: u64, writable: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, writable)
    }

    pub fn remove(&self, fd: RawFd) {
        // A descriptor that is about to be closed leaves the set anyway.
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL since Linux 2.6.9.
        unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// The tokens that are ready now (never waits); returns how many.
    pub fn ready(&self, out: &mut [libc::epoll_event]) -> io::Result<usize> {
        // SAFETY: `out` is a writable array of `out.len()` events.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                out.as_mut_ptr(),
                out.len() as libc::c_int,
                0,
            )
        };
        match cvt(n) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A one-shot monotonic timer.
pub struct Timer {
    fd: OwnedFd,
}

impl Timer {
    pub fn new() -> io::Result<Timer> {
        // SAFETY: timerfd_create takes no pointers.
        let fd = cvt(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` is new and owned by nobody else.
        Ok(Timer {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Fires once after `after` (replacing any earlier arming).
    pub fn arm(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        // SAFETY: all-zero itimerspec is valid (no interval, disarmed).
        let mut spec: libc::itimerspec = unsafe { mem::zeroed() };
        spec.it_value = crate::sys::timespec_of(after);
        // SAFETY: `spec` is a live itimerspec; the old value is not wanted.
        cvt(unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) })
            .map(drop)
    }

    /// Consumes an expiry so the descriptor is no longer readable.
    pub fn acknowledge(&self) {
        let mut ticks = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `ticks`.
        unsafe { libc::read(self.fd.as_raw_fd(), ticks.as_mut_ptr().cast(), 8) };
    }
}

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// How long sent data may stay unacknowledged, or an idle connection
/// unanswered, before the kernel gives the connection up: a path that went
/// silent then gets a fresh connection instead of retransmissions for the
/// quarter of an hour TCP would otherwise keep trying.
pub const DEAD_AFTER: Duration = Duration::from_secs(15);

/// The options every braid TCP connection gets: no Nagle delay (each
/// frame is a packet someone waits for), a bounded amount of not-yet-sent
/// data in the kernel (so the queue stays short and a full one shows as
/// EAGAIN), a dead peer noticed within [`DEAD_AFTER`] (TCP_USER_TIMEOUT,
/// keepalive probes while idle), and the interface's fwmark (so a full
/// tunnel does not route its own transport into itself).
pub fn tune_stream(fd: RawFd, notsent_lowat: usize, fwmark: u32) -> io::Result<()> {
    let tcp = |name, value: libc::c_int| setsockopt_int(fd, libc::IPPROTO_TCP, name, value);
    tcp(libc::TCP_NODELAY, 1)?;
    tcp(libc::TCP_NOTSENT_LOWAT, notsent_lowat as libc::c_int)?;
    tcp(
        libc::TCP_USER_TIMEOUT,
        DEAD_AFTER.as_millis() as libc::c_int,
    )?;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    let probe_every = DEAD_AFTER.as_secs() as libc::c_int / 3;
    tcp(libc::TCP_KEEPIDLE, probe_every)?;
    tcp(libc::TCP_KEEPINTVL, probe_every)?;
    tcp(libc::TCP_KEEPCNT, 2)?;
    set_mark(fd, fwmark)
}

pub fn set_mark(fd: RawFd, fwmark: u32) -> io::Result<()> {
    if fwmark != 0 {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_MARK, fwmark as libc::c_int)?;
    }
    Ok(())
}

/// Starts a non-blocking connect to `remote`, leaving through interface
/// `device` and/or from address `local` when given. The connection is
/// established when the socket turns writable and [`take_error`] is clear.
pub fn start_connect(
    remote: SocketAddr,
    device: Option<&str>,
    local: Option<IpAddr>,
    fwmark: u32,
    notsent_lowat: usize,
) -> io::Result<TcpStream> {
    let domain = match remote {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket takes no pointers.
    let fd = cvt(unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_TCP,
        )
    })?;
    // SAFETY: `fd` is new and owned by nobody else; TcpStream closes it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    if let Some(dev) = device {
        bind_to_device(fd, dev).map_err(|e| {
            io::Error::new(e.kind(), format!("bind TCP socket to interface {dev}: {e}"))
        })?;
    }
    tune_stream(fd, notsent_lowat, fwmark)?;
    if let Some(ip) = local {
        let (ss, len) = sockaddr_of(SocketAddr::new(ip, 0));
        // SAFETY: `ss` holds a valid sockaddr of `len` bytes.
        cvt(unsafe { libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), len) })
            .map_err(|e| io::Error::new(e.kind(), format!("bind TCP socket to {ip}: {e}")))?;
    }
    let (ss, len) = sockaddr_of(remote);
    // SAFETY: `ss` holds a valid sockaddr of `len` bytes.
    match cvt(unsafe { libc::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len) }) {
        Ok(_) => Ok(stream),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(stream),
        Err(e) => Err(e),
    }
}

/// The pending error of a socket (SO_ERROR), which also clears it.
pub fn take_error(fd: RawFd) -> io::Result<()> {
    let mut err: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err`/`len` are a writable c_int and its size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    Ok(())
}

/// Writes `iov` with one sendmsg, never raising SIGPIPE; returns the bytes
/// the kernel took.
pub fn send_vectored(fd: RawFd, iov: &mut [libc::iovec]) -> io::Result<usize> {
    // SAFETY: all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = crate::sys::kernel_int(iov.len());
    // SAFETY: `msg` points at `iov`, whose entries point at buffers the
    // caller keeps alive for the call; the kernel only reads them.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    crate::sys::cvt_size(n)
}

/// A peer address as the core should see it: IPv4 peers of a dual-stack
/// listener arrive v4-mapped.
pub fn unmapped(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => addr,
        },
        v4 => v4,
    }
}
