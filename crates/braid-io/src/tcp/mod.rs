//! TCP lines: WireGuard datagrams over TCP, for networks that block UDP.
//!
//! A [`TcpLine`] looks to the daemon like a UDP socket: one descriptor to
//! poll, `recv_batch` / `send_batch_on_line` that move a whole
//! [`PacketBatch`], a drop counter. Inside, each datagram travels as a
//! length-prefixed frame (`frames.rs`) on a TCP connection:
//!
//! - a **listening** line accepts connections on the interface's port and
//!   tags every datagram with the connection's remote address. It does not
//!   know whose connection it is: the core authenticates the messages and
//!   learns the address as the peer's endpoint, and replies to that address
//!   go back on the same connection.
//! - a **connecting** line keeps one connection to one endpoint and opens
//!   it again by itself, with exponential backoff, whenever it breaks.
//!
//! All sockets of a line sit in one epoll set whose descriptor is what the
//! daemon polls. Reads take as many frames as a read returned (partial
//! frames wait for the next read); writes put a whole batch into one
//! `sendmsg`. What the kernel does not take waits in a small backlog; when
//! that is full, further datagrams are dropped, like a full UDP send buffer,
//! so the tunnel's own congestion control sees loss instead of a queue
//! seconds deep (`TCP_NOTSENT_LOWAT` keeps the kernel's share short too).

mod frames;
mod sys;

use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use braid_core::batch::PacketBatch;

pub use frames::{FrameError, MAX_FRAME, PREFIX};
use frames::{RxBuffer, TxBacklog};
use sys::{Epoll, Timer, LISTENER, TIMER};

/// Receive buffer per connection: a read takes up to this much at once.
const RX_BUFFER: usize = 256 * 1024;
/// Unsent bytes a connection may hold in user space before new datagrams
/// are dropped.
const TX_BACKLOG: usize = 128 * 1024;
/// Unsent bytes the kernel may hold per connection (TCP_NOTSENT_LOWAT).
const KERNEL_UNSENT: usize = 128 * 1024;
/// Connections a listening line keeps; a new one beyond that replaces the
/// one that has been silent longest.
const MAX_CONNECTIONS: usize = 64;
/// First and longest wait before a connecting line tries again.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Most iovecs one sendmsg takes (IOV_MAX on Linux).
const IOV_MAX: usize = 1024;
/// Readiness events taken per receive call.
const EVENTS: usize = 64;

enum Role {
    Listen {
        listener: TcpListener,
        port: u16,
    },
    Connect {
        remote: SocketAddr,
        device: Option<String>,
        local: Option<IpAddr>,
        timer: Timer,
    },
}

struct Connection {
    token: u64,
    stream: TcpStream,
    /// The address datagrams from it are tagged with and replies go to.
    remote: SocketAddr,
    established: bool,
    /// Epoll also reports when it turns writable (a backlog waits).
    watching_writable: bool,
    /// Epoll said there is something to read (or an error to collect).
    readable: bool,
    broken: bool,
    last_frame: Instant,
    rx: RxBuffer,
    tx: TxBacklog,
}

/// Scratch that lives as long as the line so no call allocates.
struct State {
    connections: Vec<Connection>,
    next_token: u64,
    backoff: Duration,
    events: Vec<libc::epoll_event>,
    slots: Vec<usize>,
    prefixes: Vec<[u8; PREFIX]>,
    iov: Vec<libc::iovec>,
}

// SAFETY: the iovecs in `State` are only meaningful during one send call,
// which holds the state's mutex; between calls their pointers are stale and
// never dereferenced.
unsafe impl Send for State {}

/// A line that carries datagrams over TCP; see the module documentation.
pub struct TcpLine {
    epoll: Epoll,
    role: Role,
    state: Mutex<State>,
    fwmark: u32,
    dropped: AtomicU64,
    connects: AtomicU64,
    /// Whole frames wait in a receive buffer: the line is readable even
    /// though epoll says nothing.
    pending: AtomicBool,
}

impl TcpLine {
    /// Accepts connections on TCP `port` (all addresses, dual-stack when
    /// the host has IPv6). `fwmark` (0: none) marks every connection.
    pub fn listen(port: u16, fwmark: u32) -> io::Result<TcpLine> {
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
        let listener = TcpListener::bind(v6)
            .or_else(|_| {
                TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
            })
            .map_err(|e| io::Error::new(e.kind(), format!("listen on TCP port {port}: {e}")))?;
        listener.set_nonblocking(true)?;
        sys::set_mark(listener.as_raw_fd(), fwmark)?;
        let port = listener.local_addr()?.port();
        let epoll = Epoll::new()?;
        epoll.add(listener.as_raw_fd(), LISTENER, false)?;
        Ok(Self::with_role(
            epoll,
            Role::Listen { listener, port },
            fwmark,
        ))
    }

    /// Keeps a connection to `remote` open, leaving through interface
    /// `device` and/or from address `local` when given. The first attempt
    /// starts now; this returns before it completes.
    pub fn connect(
        remote: SocketAddr,
        device: Option<&str>,
        local: Option<IpAddr>,
        fwmark: u32,
    ) -> io::Result<TcpLine> {
        let epoll = Epoll::new()?;
        let timer = Timer::new()?;
        epoll.add(timer.as_raw_fd(), TIMER, false)?;
        let role = Role::Connect {
            remote,
            device: device.map(str::to_string),
            local,
            timer,
        };
        let line = Self::with_role(epoll, role, fwmark);
        line.open_connection(&mut line.lock());
        Ok(line)
    }

    fn with_role(epoll: Epoll, role: Role, fwmark: u32) -> TcpLine {
        TcpLine {
            epoll,
            role,
            state: Mutex::new(State {
                connections: Vec::new(),
                next_token: 0,
                backoff: BACKOFF_FIRST,
                events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
                slots: Vec::new(),
                prefixes: Vec::new(),
                iov: Vec::new(),
            }),
            fwmark,
            dropped: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            pending: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Buffers and scratch hold no invariant a panicking holder breaks.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The TCP port a listening line accepts on.
    pub fn local_port(&self) -> Option<u16> {
        match &self.role {
            Role::Listen { port, .. } => Some(*port),
            Role::Connect { .. } => None,
        }
    }

    /// Datagrams dropped on send: no connection to their address, or the
    /// connection's backlog was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Connections opened so far (accepted or connected); a connecting
    /// line that had to reconnect counts more than one.
    pub fn connections_opened(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    /// Connections open now (a connecting line: 0 or 1, also while the
    /// handshake of TCP is still under way).
    pub fn connections(&self) -> usize {
        self.lock().connections.len()
    }

    /// Whether whole frames wait in user space (no poll would report them).
    pub fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// Clears `batch` and fills it with the datagrams that have arrived,
    /// each tagged with `line` and its connection's remote address; returns
    /// how many. Also accepts, completes and re-opens connections, so call
    /// it whenever the line's descriptor is readable.
    pub fn recv_batch(&self, batch: &mut PacketBatch, line: u16) -> io::Result<usize> {
        batch.clear();
        let mut guard = self.lock();
        let st = &mut *guard;
        let n = self.epoll.ready(&mut st.events)?;
        for k in 0..n {
            let (token, flags) = (st.events[k].u64, st.events[k].events);
            match token {
                LISTENER => self.accept_all(st),
                TIMER => {
                    if let Role::Connect { timer, .. } = &self.role {
                        timer.acknowledge();
                    }
                    if st.connections.is_empty() {
                        self.open_connection(st);
                    }
                }
                _ => {
                    if let Some(c) = st.connections.iter_mut().find(|c| c.token == token) {
                        self.on_event(c, flags);
                    }
                }
            }
        }
        let now = Instant::now();
        for c in st.connections.iter_mut().filter(|c| !c.broken) {
            if batch.is_full() {
                break;
            }
            if read_frames(c, batch, line, now) {
                st.backoff = BACKOFF_FIRST;
            }
        }
        self.close_broken(st);
        let pending = st.connections.iter().any(|c| c.rx.has_frame());
        self.pending.store(pending, Ordering::Relaxed);
        Ok(batch.len())
    }

    fn on_event(&self, c: &mut Connection, flags: u32) {
        let error = flags & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
        if !c.established && (error || flags & libc::EPOLLOUT as u32 != 0) {
            if sys::take_error(c.stream.as_raw_fd()).is_err() {
                c.broken = true;
                return;
            }
            c.established = true;
            self.connects.fetch_add(1, Ordering::Relaxed);
        }
        if flags & libc::EPOLLOUT as u32 != 0 {
            self.flush(c);
        }
        if error || flags & libc::EPOLLIN as u32 != 0 {
            c.readable = true;
        }
    }

    fn accept_all(&self, st: &mut State) {
        let Role::Listen { listener, .. } = &self.role else {
            return;
        };
        loop {
            let (stream, remote) = match listener.accept() {
                Ok(v) => v,
                // Out of descriptors or memory: the listener stays readable,
                // the next call tries again.
                Err(_) => return,
            };
            if stream.set_nonblocking(true).is_err()
                || sys::tune_stream(stream.as_raw_fd(), KERNEL_UNSENT, self.fwmark).is_err()
            {
                continue;
            }
            if st.connections.len() >= MAX_CONNECTIONS {
                if let Some(quietest) =
                    (0..st.connections.len()).min_by_key(|&i| st.connections[i].last_frame)
                {
                    let gone = st.connections.remove(quietest);
                    self.epoll.remove(gone.stream.as_raw_fd());
                }
            }
            self.connects.fetch_add(1, Ordering::Relaxed);
            self.add_connection(st, stream, sys::unmapped(remote), true);
        }
    }

    fn add_connection(
        &self,
        st: &mut State,
        stream: TcpStream,
        remote: SocketAddr,
        established: bool,
    ) {
        let token = st.next_token;
        st.next_token += 1;
        if self
            .epoll
            .add(stream.as_raw_fd(), token, !established)
            .is_err()
        {
            return;
        }
        st.connections.push(Connection {
            token,
            stream,
            remote,
            established,
            watching_writable: !established,
            readable: false,
            broken: false,
            last_frame: Instant::now(),
            rx: RxBuffer::new(RX_BUFFER),
            tx: TxBacklog::new(TX_BACKLOG),
        });
    }

    /// A connecting line starts its next attempt, or arms the timer for a
    /// later one when it cannot even start.
    fn open_connection(&self, st: &mut State) {
        let Role::Connect {
            remote,
            device,
            local,
            timer,
        } = &self.role
        else {
            return;
        };
        match sys::start_connect(
            *remote,
            device.as_deref(),
            *local,
            self.fwmark,
            KERNEL_UNSENT,
        ) {
            Ok(stream) => self.add_connection(st, stream, *remote, false),
            Err(_) => self.retry_later(st, timer),
        }
    }

    fn retry_later(&self, st: &mut State, timer: &Timer) {
        // Arming a timerfd only fails on bad arguments.
        let _ = timer.arm(st.backoff);
        st.backoff = (st.backoff * 2).min(BACKOFF_MAX);
    }

    fn close_broken(&self, st: &mut State) {
        let before = st.connections.len();
        let epoll = &self.epoll;
        st.connections.retain(|c| {
            if c.broken {
                epoll.remove(c.stream.as_raw_fd());
            }
            !c.broken
        });
        if st.connections.len() < before {
            if let Role::Connect { timer, .. } = &self.role {
                if st.connections.is_empty() {
                    self.retry_later(st, timer);
                }
            }
        }
    }

    /// Writes what the backlog holds; stops watching for writability once
    /// it is empty.
    fn flush(&self, c: &mut Connection) {
        while c.established && !c.tx.is_empty() {
            let unsent = c.tx.unsent();
            let mut iov = [libc::iovec {
                iov_base: unsent.as_ptr() as *mut libc::c_void,
                iov_len: unsent.len(),
            }];
            match sys::send_vectored(c.stream.as_raw_fd(), &mut iov) {
                Ok(n) => c.tx.consumed(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    c.broken = true;
                    c.tx.clear();
                    return;
                }
            }
        }
        self.watch_writable(c, !c.tx.is_empty());
    }

    fn watch_writable(&self, c: &mut Connection, on: bool) {
        if c.established
            && c.watching_writable != on
            && self.epoll.modify(c.stream.as_raw_fd(), c.token, on).is_ok()
        {
            c.watching_writable = on;
        }
    }

    /// Sends the datagrams (and extra copies) of `batch` on line `line`:
    /// a connecting line on its connection, a listening one on the
    /// connection each datagram's address names. One sendmsg per
    /// connection for the whole batch. Returns how many were sent or
    /// queued; the rest count as dropped.
    pub fn send_batch_on_line(&self, batch: &PacketBatch, line: u16) -> io::Result<usize> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let connecting = matches!(self.role, Role::Connect { .. });
        let mut taken = 0;
        let on_line = (0..batch.len())
            .filter(|&i| batch.line(i) == line)
            .map(|i| (i, batch.addr(i)))
            .chain(
                batch
                    .copies()
                    .iter()
                    .filter(|c| c.line == line)
                    .map(|c| (c.slot, c.addr)),
            )
            .filter(|&(slot, _)| !batch.packet(slot).is_empty());
        let total = on_line.clone().count();
        for c in st.connections.iter_mut() {
            if c.broken {
                continue;
            }
            st.slots.clear();
            for (slot, addr) in on_line.clone() {
                if connecting || addr == c.remote {
                    st.slots.push(slot);
                }
            }
            taken += self.send_frames(c, batch, &st.slots, &mut st.prefixes, &mut st.iov);
        }
        self.close_broken(st);
        self.dropped
            .fetch_add((total - taken) as u64, Ordering::Relaxed);
        Ok(taken)
    }

    /// Writes the datagrams in `slots` to one connection: straight from the
    /// batch when nothing waits before them, else (and for whatever the
    /// kernel does not take) into the backlog. Returns how many went out or
    /// wait in the backlog.
    fn send_frames(
        &self,
        c: &mut Connection,
        batch: &PacketBatch,
        slots: &[usize],
        prefixes: &mut Vec<[u8; PREFIX]>,
        iov: &mut Vec<libc::iovec>,
    ) -> usize {
        if !c.tx.is_empty() {
            self.flush(c);
        }
        if !c.established || !c.tx.is_empty() || c.broken {
            let queued = slots
                .iter()
                .filter(|&&s| c.tx.push(batch.packet(s)))
                .count();
            self.watch_writable(c, !c.tx.is_empty());
            return queued;
        }
        let per_call = IOV_MAX / 2;
        let mut done = 0;
        for (n_chunk, chunk) in slots.chunks(per_call).enumerate() {
            prefixes.clear();
            prefixes.extend(
                chunk
                    .iter()
                    .map(|&s| (batch.packet(s).len() as u16).to_be_bytes()),
            );
            iov.clear();
            for (k, &s) in chunk.iter().enumerate() {
                let body = batch.packet(s);
                iov.push(libc::iovec {
                    iov_base: prefixes[k].as_ptr() as *mut libc::c_void,
                    iov_len: PREFIX,
                });
                iov.push(libc::iovec {
                    iov_base: body.as_ptr() as *mut libc::c_void,
                    iov_len: body.len(),
                });
            }
            let mut wrote = loop {
                match sys::send_vectored(c.stream.as_raw_fd(), iov) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                    Err(_) => {
                        c.broken = true;
                        c.tx.clear();
                        return done;
                    }
                }
            };
            // Whole frames the kernel took, then the rest of a frame it took
            // part of, then as many further frames as the backlog holds.
            let mut k = 0;
            while k < chunk.len() && wrote >= PREFIX + batch.packet(chunk[k]).len() {
                wrote -= PREFIX + batch.packet(chunk[k]).len();
                k += 1;
            }
            done += k;
            if k == chunk.len() {
                continue;
            }
            if wrote > 0 {
                c.tx.push_rest(batch.packet(chunk[k]), wrote);
                done += 1;
                k += 1;
            }
            let unsent = &slots[n_chunk * per_call + k..];
            done += unsent
                .iter()
                .filter(|&&s| c.tx.push(batch.packet(s)))
                .count();
            break;
        }
        self.watch_writable(c, !c.tx.is_empty());
        done
    }
}

/// Moves whole frames from connection `c` into `batch`, reading from the
/// socket while it had something and the batch has room. Returns whether
/// any frame arrived.
fn read_frames(c: &mut Connection, batch: &mut PacketBatch, line: u16, now: Instant) -> bool {
    let mut got = false;
    loop {
        match c.rx.drain_into(batch, c.remote, line) {
            Ok(0) => {}
            Ok(_) => {
                c.last_frame = now;
                got = true;
            }
            Err(_) => {
                c.broken = true;
                return got;
            }
        }
        if batch.is_full() || !c.readable || !c.established {
            c.readable = false;
            return got;
        }
        let spare = c.rx.spare();
        let room = spare.len();
        match (&c.stream).read(spare) {
            Ok(0) => {
                c.broken = true;
                return got;
            }
            Ok(n) => {
                c.rx.filled(n);
                // A short read emptied the socket; a full one may have left
                // more, which the next pass reads after draining.
                c.readable = n == room;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable = false,
            Err(_) => {
                c.broken = true;
                return got;
            }
        }
    }
}

impl AsRawFd for TcpLine {
    /// The epoll set of all the line's sockets and its timer: readable
    /// whenever [`TcpLine::recv_batch`] has something to do.
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

#[cfg(test)]
mod tests;
