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
//!   go back on the same connection. The daemon reports back which
//!   addresses the core knows: right after a batch in which a connection
//!   not yet known spoke ([`TcpLine::strangers_spoke`],
//!   [`TcpLine::mark_peers`]), and once a second ([`TcpLine::sort_out`]).
//!   Connections nobody authenticated are closed after a grace period and
//!   evicted first, and one address holds at most
//!   [`MAX_UNAUTHENTICATED_PER_ADDRESS`] of them, so a connect flood from
//!   one address cannot push a peer's new connection out before its first
//!   message is authenticated.
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

mod connection;
mod frames;
mod sys;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use braid_core::batch::PacketBatch;

use connection::Connection;
pub use frames::{FrameError, MAX_FRAME, PREFIX};
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
/// How long an accepted connection may go without the core authenticating
/// a message from it before it is closed (WireGuard retries a handshake
/// every 5 s, so a real peer gets several tries).
const UNAUTHENTICATED_GRACE: Duration = Duration::from_secs(20);
/// Least time between two [`TcpLine::mark_peers`] runs a flood of strangers
/// can cause (each asks the core about every connection).
const MARK_INTERVAL: Duration = Duration::from_millis(20);
/// Connections one address may hold before the core authenticated any of
/// them; its oldest goes when it opens another.
pub const MAX_UNAUTHENTICATED_PER_ADDRESS: usize = 4;
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

/// The connections and what changes them; held only briefly, never
/// across a read or a write of data.
struct Table {
    connections: Vec<Arc<Connection>>,
    next_token: u64,
    backoff: Duration,
    events: Vec<libc::epoll_event>,
}

/// Per-direction scratch, so neither direction allocates per call.
#[derive(Default)]
struct Scratch {
    connections: Vec<Arc<Connection>>,
    slots: Vec<usize>,
}

/// A line that carries datagrams over TCP; see the module documentation.
pub struct TcpLine {
    epoll: Epoll,
    role: Role,
    table: Mutex<Table>,
    rx_scratch: Mutex<Scratch>,
    tx_scratch: Mutex<Scratch>,
    fwmark: u32,
    dropped: AtomicU64,
    connects: AtomicU64,
    /// Whole frames wait in a receive buffer: the line is readable even
    /// though epoll says nothing.
    pending: AtomicBool,
    /// A connection the core has not authenticated yet delivered frames
    /// since the last [`TcpLine::mark_peers`].
    strangers_spoke: AtomicBool,
    /// When [`TcpLine::strangers_spoke`] last said yes.
    last_marked: Mutex<Option<Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Tables and scratch hold no invariant a panicking holder could break.
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        line.open_connection(&mut lock(&line.table));
        Ok(line)
    }

    fn with_role(epoll: Epoll, role: Role, fwmark: u32) -> TcpLine {
        TcpLine {
            epoll,
            role,
            table: Mutex::new(Table {
                connections: Vec::new(),
                next_token: 0,
                backoff: BACKOFF_FIRST,
                events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
            }),
            rx_scratch: Mutex::default(),
            tx_scratch: Mutex::default(),
            fwmark,
            dropped: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            strangers_spoke: AtomicBool::new(false),
            last_marked: Mutex::new(None),
        }
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
        lock(&self.table).connections.len()
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
        let mut scratch = lock(&self.rx_scratch);
        {
            let mut guard = lock(&self.table);
            let table = &mut *guard;
            let n = self.epoll.ready(&mut table.events)?;
            for k in 0..n {
                let (token, flags) = (table.events[k].u64, table.events[k].events);
                match token {
                    LISTENER => self.accept_all(table),
                    TIMER => {
                        if let Role::Connect { timer, .. } = &self.role {
                            timer.acknowledge();
                        }
                        if table.connections.is_empty() {
                            self.open_connection(table);
                        }
                    }
                    _ => {
                        let found = table.connections.iter().find(|c| c.token == token);
                        if found.is_some_and(|c| c.on_event(&self.epoll, flags)) {
                            // One per connection opened: a u64 never wraps.
                            self.connects.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            scratch
                .connections
                .extend(table.connections.iter().filter(|c| !c.is_broken()).cloned());
        }
        let now = Instant::now();
        let mut heard = false;
        let mut strangers = false;
        for c in &scratch.connections {
            if batch.is_full() {
                break;
            }
            let got = c.receive(batch, line, now);
            heard |= got;
            strangers |= got && !c.is_authenticated();
        }
        if strangers {
            self.strangers_spoke.store(true, Ordering::Relaxed);
        }
        scratch.connections.clear();
        let mut table = lock(&self.table);
        if heard {
            table.backoff = BACKOFF_FIRST;
        }
        self.close_broken(&mut table);
        let pending = table.connections.iter().any(|c| c.has_frame());
        self.pending.store(pending, Ordering::Relaxed);
        Ok(batch.len())
    }

    fn accept_all(&self, table: &mut Table) {
        let Role::Listen { listener, .. } = &self.role else {
            return;
        };
        loop {
            let (stream, remote) = match listener.accept() {
                Ok(v) => v,
                // Nothing more to accept, or out of descriptors or memory:
                // the listener stays readable and the next call tries again.
                Err(_) => return,
            };
            if stream.set_nonblocking(true).is_err()
                || sys::tune_stream(stream.as_raw_fd(), KERNEL_UNSENT, self.fwmark).is_err()
            {
                continue;
            }
            let remote = sys::unmapped(remote);
            // One address's unauthenticated connections: its oldest goes
            // when it has too many, before anyone else's.
            let from_there: Vec<usize> = (0..table.connections.len())
                .filter(|&i| {
                    let c = &table.connections[i];
                    !c.is_authenticated() && c.remote.ip() == remote.ip()
                })
                .collect();
            if from_there.len() >= MAX_UNAUTHENTICATED_PER_ADDRESS {
                if let Some(&i) = from_there
                    .iter()
                    .min_by_key(|&&i| table.connections[i].opened)
                {
                    let gone = table.connections.remove(i);
                    self.epoll.remove(gone.stream.as_raw_fd());
                }
            }
            if table.connections.len() >= MAX_CONNECTIONS {
                // Strangers go first, the oldest of them; among peers the
                // one that has been silent longest.
                let victim = (0..table.connections.len()).min_by_key(|&i| {
                    let c = &table.connections[i];
                    match c.is_authenticated() {
                        false => (false, c.opened),
                        true => (true, c.rx().last_frame),
                    }
                });
                if let Some(i) = victim {
                    let gone = table.connections.remove(i);
                    self.epoll.remove(gone.stream.as_raw_fd());
                }
            }
            self.connects.fetch_add(1, Ordering::Relaxed);
            self.add_connection(table, stream, remote, true);
        }
    }

    fn add_connection(
        &self,
        table: &mut Table,
        stream: TcpStream,
        remote: SocketAddr,
        established: bool,
    ) {
        // One token per connection ever opened: far below TIMER and
        // LISTENER (2^64 - 2) within any lifetime.
        let token = table.next_token;
        table.next_token += 1;
        if self
            .epoll
            .add(stream.as_raw_fd(), token, !established)
            .is_err()
        {
            return;
        }
        table.connections.push(Arc::new(Connection::new(
            token,
            stream,
            remote,
            established,
            RX_BUFFER,
            TX_BACKLOG,
        )));
    }

    /// A connecting line starts its next attempt, or arms the timer for a
    /// later one when it cannot even start.
    fn open_connection(&self, table: &mut Table) {
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
            Ok(stream) => self.add_connection(table, stream, *remote, false),
            Err(_) => self.retry_later(table, timer),
        }
    }

    fn retry_later(&self, table: &mut Table, timer: &Timer) {
        // Arming a timerfd only fails on bad arguments.
        let _ = timer.arm(table.backoff);
        // backoff <= BACKOFF_MAX (5 s), so doubling it cannot overflow.
        table.backoff = (table.backoff * 2).min(BACKOFF_MAX);
    }

    /// Forgets broken connections (their descriptors close with the last
    /// reference); a connecting line schedules its next attempt.
    fn close_broken(&self, table: &mut Table) {
        let before = table.connections.len();
        let epoll = &self.epoll;
        table.connections.retain(|c| {
            if c.is_broken() {
                epoll.remove(c.stream.as_raw_fd());
            }
            !c.is_broken()
        });
        if table.connections.len() < before && table.connections.is_empty() {
            if let Role::Connect { timer, .. } = &self.role {
                self.retry_later(table, timer);
            }
        }
    }

    /// Whether a connection the core has not authenticated yet delivered
    /// frames since [`mark_peers`](Self::mark_peers) last ran, and that was
    /// at least 20 ms ago: then it should run, once the batch went through
    /// the core.
    pub fn strangers_spoke(&self, now: Instant) -> bool {
        if !self.strangers_spoke.load(Ordering::Relaxed) {
            return false;
        }
        let mut last = lock(&self.last_marked);
        if last.is_some_and(|t| now.saturating_duration_since(t) < MARK_INTERVAL) {
            return false;
        }
        *last = Some(now);
        self.strangers_spoke.store(false, Ordering::Relaxed);
        true
    }

    /// Marks the accepted connections whose address the core now knows
    /// (`is_peer`) as a peer's, so they are kept when the table is full:
    /// at their first authenticated message, not at the next [`sort_out`](Self::sort_out).
    pub fn mark_peers(&self, is_peer: impl Fn(SocketAddr) -> bool) {
        let table = lock(&self.table);
        for c in &table.connections {
            if !c.is_authenticated() && is_peer(c.remote) {
                c.authenticate();
            }
        }
    }

    /// Learns which accepted connections belong to peers: `is_peer` says
    /// whether the core has authenticated a message from an address on
    /// this line. Those connections are kept when the table is full;
    /// others are closed once they are older than 20 s. Call it now and
    /// then (the daemon does every second); a connecting line ignores it.
    pub fn sort_out(&self, is_peer: impl Fn(SocketAddr) -> bool) {
        if !matches!(self.role, Role::Listen { .. }) {
            return;
        }
        let mut table = lock(&self.table);
        for c in &table.connections {
            if c.is_authenticated() {
                continue;
            }
            if is_peer(c.remote) {
                c.authenticate();
            } else if c.opened.elapsed() > UNAUTHENTICATED_GRACE {
                c.break_off();
            }
        }
        self.close_broken(&mut table);
    }

    /// Accepted connections the core has authenticated a message from.
    pub fn authenticated_connections(&self) -> usize {
        lock(&self.table)
            .connections
            .iter()
            .filter(|c| c.is_authenticated())
            .count()
    }

    /// Sends the datagrams (and extra copies) of `batch` on line `line`:
    /// a connecting line on its connection, a listening one on the
    /// connection each datagram's address names. One sendmsg per
    /// connection for the whole batch. Returns how many were sent or
    /// queued; the rest count as dropped. A connection that fails is left
    /// for the receive side to close (its socket reports the error there).
    pub fn send_batch_on_line(&self, batch: &PacketBatch, line: u16) -> io::Result<usize> {
        let mut guard = lock(&self.tx_scratch);
        let scratch = &mut *guard;
        scratch.connections.extend(
            lock(&self.table)
                .connections
                .iter()
                .filter(|c| !c.is_broken())
                .cloned(),
        );
        let connecting = matches!(self.role, Role::Connect { .. });
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
        // A datagram longer than a frame can announce is dropped (and
        // counted below) rather than sent behind a truncated prefix.
        let on_line = on_line.filter(|&(slot, _)| batch.packet(slot).len() <= MAX_FRAME);
        let mut taken = 0;
        for c in &scratch.connections {
            scratch.slots.clear();
            scratch.slots.extend(
                on_line
                    .clone()
                    .filter(|&(_, addr)| connecting || addr == c.remote)
                    .map(|(slot, _)| slot),
            );
            if !scratch.slots.is_empty() {
                taken += c.send(&self.epoll, batch, &scratch.slots);
            }
        }
        scratch.connections.clear();
        // A datagram counter: fetch_add wraps, but at a billion drops a
        // second a u64 lasts 584 years.
        self.dropped
            .fetch_add(total.saturating_sub(taken) as u64, Ordering::Relaxed);
        Ok(taken)
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
