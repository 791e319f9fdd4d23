//! The relay: one thread, one epoll loop, batched UDP.
//!
//! ```text
//!  client ──► listen socket ──[up LinkModel]──► client's own socket ──► --to
//!  client ◄── listen socket ◄─[down LinkModel]── client's own socket ◄── --to
//! ```
//!
//! Each client gets its own upstream socket, connected to `--to`, so a reply
//! arriving on it belongs to that client and nobody else. Datagrams move in
//! batches of up to [`BATCH`] with recvmmsg/sendmmsg.
//!
//! A direction whose line is perfect takes the fast path: the received batch
//! is re-addressed and sent as it is (the model still sees every datagram,
//! so a cut and the counters work). Otherwise every copy the model lets
//! through goes into a preallocated buffer pool and a binary heap keyed by
//! (delivery time, arrival order); the loop sends everything that is due
//! with one sendmmsg per destination socket. Nothing is allocated per
//! datagram: the pool, the heap and the batches are sized at start, and a
//! full pool drops (counted as a queue drop).
//!
//! Timing: the loop sleeps in epoll_pwait2 (nanosecond timeout, timer slack
//! 1 ns) until [`SPIN`] before the next deadline, then polls without
//! sleeping, so a wake-up that comes a little late does not make the
//! datagram late.

use super::args::{self, Config};
use super::control::{Command, ControlServer, Epoll, Signals};
use super::stats::{DirStats, Dropped, Stats};
use braid_core::batch::PacketBatch;
use braid_io::UdpSocket;
use braid_netem::link::{apply_corruption, Delivery, Fate, LinkModel};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime};

/// Datagrams per recvmmsg/sendmmsg.
pub const BATCH: usize = 64;
/// Receive slots hold the largest UDP datagram, so nothing is truncated
/// before the MTU check sees its real length.
const RECV_STRIDE: usize = 65536;
/// Pool slots for ordinary datagrams…
const SMALL: usize = 2048;
const N_SMALL: usize = 16384;
/// …and a few for jumbo ones.
const LARGE: usize = 65536;
const N_LARGE: usize = 64;
/// Busy-poll this long before a deadline instead of trusting the wake-up.
pub const SPIN: Duration = Duration::from_micros(50);
/// Batches read from one socket before the loop looks at deadlines again.
const BATCHES_PER_WAKE: usize = 4;
/// A client silent for this long loses its upstream socket.
const CLIENT_IDLE: Duration = Duration::from_secs(180);

const UP: usize = 0;
const DOWN: usize = 1;

const T_LISTEN: u64 = 0;
const T_SIGNAL: u64 = 1;
const T_CONTROL: u64 = 2;
const T_CONN: u64 = 16;
const T_CLIENT: u64 = 1 << 32;

/// A copy waiting in the delay line. The heap is a max-heap, so the order
/// is reversed: the earliest delivery, then the earliest arrival, on top.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Due {
    at: Instant,
    seq: u64,
    id: u32,
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Clone, Copy)]
struct Meta {
    len: u32,
    /// Up: the client whose socket sends it (valid while `gen` matches).
    client: u32,
    gen: u32,
    /// Down: the client's address.
    addr: SocketAddr,
}

const ANY: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// Fixed buffers for datagrams in the delay line.
struct Pool {
    small: Vec<u8>,
    large: Vec<u8>,
    free_small: Vec<u32>,
    free_large: Vec<u32>,
    meta: Vec<Meta>,
}

impl Pool {
    fn new() -> Pool {
        Pool {
            // Zeroed allocations are mapped lazily: only slots in use cost
            // memory.
            small: vec![0; N_SMALL * SMALL],
            large: vec![0; N_LARGE * LARGE],
            free_small: (0..N_SMALL as u32).rev().collect(),
            free_large: (N_SMALL as u32..(N_SMALL + N_LARGE) as u32).rev().collect(),
            meta: vec![
                Meta {
                    len: 0,
                    client: 0,
                    gen: 0,
                    addr: ANY,
                };
                N_SMALL + N_LARGE
            ],
        }
    }

    fn capacity() -> usize {
        N_SMALL + N_LARGE
    }

    fn alloc(&mut self, len: usize) -> Option<u32> {
        if len <= SMALL {
            self.free_small.pop().or_else(|| self.free_large.pop())
        } else if len <= LARGE {
            self.free_large.pop()
        } else {
            None
        }
    }

    fn free(&mut self, id: u32) {
        if (id as usize) < N_SMALL {
            self.free_small.push(id);
        } else {
            self.free_large.push(id);
        }
    }

    fn buf(&mut self, id: u32) -> &mut [u8] {
        let id = id as usize;
        if id < N_SMALL {
            &mut self.small[id * SMALL..(id + 1) * SMALL]
        } else {
            let id = id - N_SMALL;
            &mut self.large[id * LARGE..(id + 1) * LARGE]
        }
    }
}

struct Client {
    addr: SocketAddr,
    sock: UdpSocket,
    last_seen: Instant,
}

/// Clients by slot; a slot's generation changes when its client goes, so
/// datagrams still in flight for it are recognised as orphans.
struct Clients {
    slots: Vec<Option<Client>>,
    gens: Vec<u32>,
    by_addr: HashMap<SocketAddr, u32>,
    /// The last lookup, since one client usually sends whole batches.
    last: Option<(SocketAddr, u32)>,
    count: usize,
    evicted: u64,
}

impl Clients {
    fn new(max: usize) -> Clients {
        Clients {
            slots: (0..max).map(|_| None).collect(),
            gens: vec![0; max],
            by_addr: HashMap::with_capacity(max),
            last: None,
            count: 0,
            evicted: 0,
        }
    }

    fn get(&self, slot: u32) -> Option<&Client> {
        self.slots.get(slot as usize)?.as_ref()
    }

    fn remove(&mut self, slot: u32) {
        if let Some(c) = self.slots[slot as usize].take() {
            // Closing the socket also takes it out of the epoll set.
            self.by_addr.remove(&c.addr);
            // A tag compared for equality only: wrapping is the intent (a
            // datagram would have to stay in flight through 2^32 evictions
            // of its slot to be mistaken).
            self.gens[slot as usize] = self.gens[slot as usize].wrapping_add(1);
            // The slot held a client, so count >= 1.
            self.count -= 1;
            self.evicted = self.evicted.saturating_add(1);
            self.last = None;
        }
    }

    /// The slot of `addr`'s client, creating it (and evicting the least
    /// recently seen client when all slots are taken).
    fn lookup(
        &mut self,
        addr: SocketAddr,
        now: Instant,
        to: SocketAddr,
        epoll: &Epoll,
    ) -> Option<u32> {
        let slot = match self.last {
            Some((a, s)) if a == addr => s,
            _ => match self.by_addr.get(&addr) {
                Some(&s) => s,
                None => self.create(addr, now, to, epoll)?,
            },
        };
        self.last = Some((addr, slot));
        if let Some(c) = self.slots[slot as usize].as_mut() {
            c.last_seen = now;
        }
        Some(slot)
    }

    fn create(
        &mut self,
        addr: SocketAddr,
        now: Instant,
        to: SocketAddr,
        epoll: &Epoll,
    ) -> Option<u32> {
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(s) => s as u32,
            None => {
                let oldest = self
                    .slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| Some((c.as_ref()?.last_seen, i)))
                    .min()?
                    .1 as u32;
                self.remove(oldest);
                oldest
            }
        };
        let sock = upstream_socket(to)
            .map_err(|e| eprintln!("braid netem: no upstream socket for client {addr}: {e}"))
            .ok()?;
        // slot < max_clients <= 65536 (args): the token stays far below
        // u64::MAX and `t - T_CLIENT` gives the slot back exactly.
        epoll.add(sock.as_raw_fd(), T_CLIENT + slot as u64).ok()?;
        self.slots[slot as usize] = Some(Client {
            addr,
            sock,
            last_seen: now,
        });
        self.by_addr.insert(addr, slot);
        self.count += 1;
        Some(slot)
    }
}

/// A socket of `to`'s family on an ephemeral port, connected to `to`.
fn upstream_socket(to: SocketAddr) -> io::Result<UdpSocket> {
    let local = match to {
        SocketAddr::V4(_) => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0),
        SocketAddr::V6(_) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0),
    };
    let sock = UdpSocket::bind_addr(local)?;
    // Kernel arrival times, so the delay line does not add our wake-up lag.
    sock.enable_rx_timestamps()?;
    sock.connect(to)?;
    Ok(sock)
}

/// One direction of the line.
struct Direction {
    model: LinkModel,
    perfect: bool,
    heap: BinaryHeap<Due>,
    seq: u64,
    /// Copies the model let through but the pool had no room for.
    overflow: u64,
    in_flight_bytes: u64,
}

/// Statistics: every count saturates rather than wraps to a small number.
#[derive(Default)]
struct Sent {
    packets: u64,
    bytes: u64,
    failed: u64,
}

impl Sent {
    /// Records a send of `count` datagrams, `bytes` together, of which
    /// the kernel took `sent`.
    fn record(&mut self, count: usize, sent: usize, bytes: u64) {
        // send_batch never reports more than it was given; clamped so a
        // surprise cannot underflow `count - sent`.
        let sent = sent.min(count);
        self.packets = self.packets.saturating_add(sent as u64);
        // send_batch reports a count, not which ones failed (rare: a full
        // buffer for 100 ms, an unreachable destination): their share of
        // the bytes. In u128 the product cannot overflow; the quotient is
        // at most `bytes`, so it fits a u64 again.
        let taken = if sent == count {
            bytes
        } else {
            (u128::from(bytes) * sent as u128 / count as u128) as u64
        };
        self.bytes = self.bytes.saturating_add(taken);
        self.failed = self.failed.saturating_add((count - sent) as u64);
    }

    fn failed(&mut self, n: usize) {
        self.failed = self.failed.saturating_add(n as u64);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Listen,
    Client(u32),
}

/// Sockets and what was sent through them.
struct Io {
    listen: UdpSocket,
    clients: Clients,
    sent: [Sent; 2],
}

impl Io {
    fn send(&mut self, target: Target, batch: &PacketBatch, count: usize, bytes: u64) {
        if count == 0 {
            return;
        }
        let (sock, dir) = match target {
            Target::Listen => (&self.listen, DOWN),
            Target::Client(c) => match self.clients.get(c) {
                Some(cl) => (&cl.sock, UP),
                None => {
                    self.sent[UP].failed(count);
                    return;
                }
            },
        };
        let sent = sock.send_batch(batch).unwrap_or(0);
        self.sent[dir].record(count, sent, bytes);
    }
}

/// Copies of datagrams gathered for one sendmmsg to one socket.
struct Out {
    batch: PacketBatch,
    target: Target,
    bytes: u64,
}

impl Out {
    fn push(&mut self, io: &mut Io, target: Target, data: &[u8], addr: SocketAddr) {
        if !self.batch.is_empty() && (self.target != target || self.batch.is_full()) {
            self.flush(io);
        }
        self.target = target;
        self.batch.push_with(0, addr, |buf| {
            buf[..data.len()].copy_from_slice(data);
            data.len()
        });
        // At most BATCH datagrams of at most RECV_STRIDE bytes each.
        self.bytes += data.len() as u64;
    }

    fn flush(&mut self, io: &mut Io) {
        io.send(self.target, &self.batch, self.batch.len(), self.bytes);
        self.batch.clear();
        self.bytes = 0;
    }
}

pub struct Relay {
    cfg: Config,
    epoll: Epoll,
    io: Io,
    signals: Option<Signals>,
    control: Option<ControlServer>,
    dirs: [Direction; 2],
    pool: Pool,
    rx: PacketBatch,
    out: Out,
    /// The client of each datagram of `rx` (fast path with several clients).
    rx_client: [u32; BATCH],
    /// Kernel arrival time of each datagram in `rx`.
    rx_times: [Option<SystemTime>; BATCH],
    start: Instant,
    cut: bool,
    next_event: usize,
    next_stats: Option<Instant>,
    end: Option<Instant>,
    next_expiry: Instant,
    stop: bool,
}

impl Relay {
    /// Opens everything the relay needs. `signals`: take SIGUSR1/2, SIGINT
    /// and SIGTERM through a signalfd (the `braid netem` process does).
    pub fn new(cfg: Config, signals: bool) -> Result<Relay, String> {
        // A 1 ns timer slack lets sleeps end when asked rather than up to
        // 50 µs later (the default slack).
        // SAFETY: prctl with PR_SET_TIMERSLACK takes plain integers.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        if cfg.realtime {
            let param = libc::sched_param { sched_priority: 10 };
            // SAFETY: sched_setscheduler on this thread with a valid param.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
                return Err(format!("--realtime: {}", io::Error::last_os_error()));
            }
        }
        let listen = UdpSocket::bind_addr(cfg.listen)
            .map_err(|e| format!("--listen {}: {e}", cfg.listen))?;
        listen
            .enable_rx_timestamps()
            .map_err(|e| format!("--listen {}: receive timestamps: {e}", cfg.listen))?;
        let epoll = Epoll::new().map_err(|e| format!("epoll: {e}"))?;
        epoll
            .add(listen.as_raw_fd(), T_LISTEN)
            .map_err(|e| format!("epoll: {e}"))?;
        let signals = if signals {
            let s = Signals::new().map_err(|e| format!("signalfd: {e}"))?;
            epoll
                .add(s.as_raw_fd(), T_SIGNAL)
                .map_err(|e| format!("epoll: {e}"))?;
            Some(s)
        } else {
            None
        };
        let control = match &cfg.control {
            Some(p) => {
                let c = ControlServer::bind(p)?;
                epoll
                    .add(c.listener_fd(), T_CONTROL)
                    .map_err(|e| format!("epoll: {e}"))?;
                Some(c)
            }
            None => None,
        };
        let dir = |p: &braid_netem::link::LinkParams, seed: u64| Direction {
            perfect: p.is_perfect(),
            model: LinkModel::new(p.clone(), seed),
            heap: BinaryHeap::with_capacity(Pool::capacity()),
            seq: 0,
            overflow: 0,
            in_flight_bytes: 0,
        };
        let start = Instant::now();
        Ok(Relay {
            dirs: [
                dir(&cfg.up, cfg.seed),
                dir(&cfg.down, cfg.seed.wrapping_add(1)),
            ],
            io: Io {
                listen,
                clients: Clients::new(cfg.max_clients),
                sent: Default::default(),
            },
            epoll,
            signals,
            control,
            pool: Pool::new(),
            rx: PacketBatch::new(BATCH, RECV_STRIDE),
            out: Out {
                batch: PacketBatch::new(BATCH, RECV_STRIDE),
                target: Target::Listen,
                bytes: 0,
            },
            rx_client: [0; BATCH],
            rx_times: [None; BATCH],
            start,
            cut: false,
            next_event: 0,
            next_stats: cfg.stats_interval.map(|i| start + i),
            end: cfg.duration.map(|d| start + d),
            next_expiry: start + Duration::from_secs(1),
            stop: false,
            cfg,
        })
    }

    /// The port actually bound for `--listen` (useful with port 0).
    pub fn listen_port(&self) -> u16 {
        self.io.listen.local_port()
    }

    pub fn banner(&self) -> String {
        format!(
            "braid netem: relaying {} -> {}; up: {}; down: {}; seed {}",
            SocketAddr::new(self.cfg.listen.ip(), self.listen_port()),
            self.cfg.to,
            args::describe(&self.cfg.up),
            args::describe(&self.cfg.down),
            self.cfg.seed
        )
    }

    pub fn set_cut(&mut self, cut: bool) {
        self.cut = cut;
        for d in &mut self.dirs {
            d.model.set_cut(cut);
        }
    }

    pub fn stats(&self) -> Stats {
        let now = Instant::now();
        let dir = |i: usize| {
            let d = &self.dirs[i];
            let c = d.model.counters();
            let s = &self.io.sent[i];
            DirStats {
                offered: c.offered,
                forwarded_packets: s.packets,
                forwarded_bytes: s.bytes,
                dropped: Dropped {
                    mtu: c.dropped_mtu,
                    cut: c.dropped_cut,
                    loss: c.dropped_loss,
                    queue: c.dropped_queue.saturating_add(d.overflow),
                },
                duplicated: c.duplicated,
                corrupted: c.corrupted,
                reordered: c.reordered,
                send_failed: s.failed,
                queue_bytes: d.model.queue_bytes(now),
                in_flight_packets: d.heap.len() as u64,
                in_flight_bytes: d.in_flight_bytes,
            }
        };
        Stats {
            uptime_s: now.duration_since(self.start).as_secs_f64(),
            cut: self.cut,
            clients: self.io.clients.count as u64,
            clients_evicted: self.io.clients.evicted,
            up: dir(UP),
            down: dir(DOWN),
        }
    }

    fn render(&self, json: bool) -> String {
        let s = self.stats();
        if json {
            s.to_json()
        } else {
            s.to_line()
        }
    }

    /// Runs until SIGINT/SIGTERM or `--duration`; returns the final counters.
    pub fn run(&mut self) -> io::Result<Stats> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            let now = Instant::now();
            self.flush_due(now);
            self.timers(now);
            if self.stop {
                break;
            }
            let timeout = self.next_deadline().map(|d| {
                let left = d.saturating_duration_since(now);
                left.saturating_sub(SPIN)
            });
            let n = self.epoll.wait(&mut events, timeout)?;
            for ev in &events[..n] {
                self.dispatch(ev.u64)?;
            }
            self.drain_leftovers()?;
        }
        Ok(self.stats())
    }

    /// Datagrams a coalesced (GRO) receive left in a socket's scratch wake
    /// no epoll: hand them on now, or they would wait for the next arrival.
    fn drain_leftovers(&mut self) -> io::Result<()> {
        if self.io.listen.has_pending() {
            self.on_listen()?;
        }
        for slot in 0..self.io.clients.slots.len() {
            let pending = self.io.clients.slots[slot]
                .as_ref()
                .is_some_and(|c| c.sock.has_pending());
            if pending {
                self.on_client(slot as u32);
            }
        }
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let heaps = self.dirs.iter().filter_map(|d| d.heap.peek().map(|x| x.at));
        let event = self
            .cfg
            .schedule
            .get(self.next_event)
            .map(|(at, _)| self.start + *at);
        heaps
            .chain(event)
            .chain(self.next_stats)
            .chain(self.end)
            .chain(Some(self.next_expiry))
            .min()
    }

    fn timers(&mut self, now: Instant) {
        // Every Instant + Duration here is in range: args refuses
        // durations above 1e9 s (32 years), and Instant counts i64 seconds.
        while let Some(&(at, cut)) = self.cfg.schedule.get(self.next_event) {
            if self.start + at > now {
                break;
            }
            self.set_cut(cut);
            self.next_event += 1;
        }
        if let (Some(next), Some(every)) = (self.next_stats, self.cfg.stats_interval) {
            if now >= next {
                eprintln!("{}", self.render(self.cfg.json));
                let mut n = next + every;
                if n <= now {
                    n = now + every;
                }
                self.next_stats = Some(n);
            }
        }
        if self.end.is_some_and(|e| now >= e) {
            self.stop = true;
        }
        if now >= self.next_expiry {
            self.next_expiry = now + Duration::from_secs(1);
            let idle: Vec<u32> = self
                .io
                .clients
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    (now.duration_since(c.as_ref()?.last_seen) > CLIENT_IDLE).then_some(i as u32)
                })
                .collect();
            for s in idle {
                self.io.clients.remove(s);
            }
        }
    }

    fn dispatch(&mut self, token: u64) -> io::Result<()> {
        match token {
            T_LISTEN => self.on_listen()?,
            T_SIGNAL => {
                while let Some(sig) = self.signals.as_ref().and_then(Signals::read) {
                    match sig {
                        libc::SIGUSR1 => self.set_cut(true),
                        libc::SIGUSR2 => self.set_cut(false),
                        _ => self.stop = true,
                    }
                }
            }
            T_CONTROL => {
                let epoll = &self.epoll;
                if let Some(c) = self.control.as_mut() {
                    c.accept(|fd, i| epoll.add(fd, T_CONN + i as u64).is_ok());
                }
            }
            t if (T_CONN..T_CONN + super::control::MAX_CONNS as u64).contains(&t) => {
                if let Some(mut c) = self.control.take() {
                    c.readable((t - T_CONN) as usize, |cmd| match cmd {
                        Ok(Command::Cut) => {
                            self.set_cut(true);
                            "ok".into()
                        }
                        Ok(Command::Restore) => {
                            self.set_cut(false);
                            "ok".into()
                        }
                        Ok(Command::Stats { json }) => self.render(json),
                        Err(e) => format!("error: {e}"),
                    });
                    self.control = Some(c);
                }
            }
            t if t >= T_CLIENT => self.on_client((t - T_CLIENT) as u32),
            _ => {}
        }
        Ok(())
    }

    /// Datagrams from clients: the up direction.
    fn on_listen(&mut self) -> io::Result<()> {
        let to = self.cfg.to;
        for _ in 0..BATCHES_PER_WAKE {
            let n = self
                .io
                .listen
                .recv_batch_timed(&mut self.rx, &mut self.rx_times)?;
            if n == 0 {
                break;
            }
            // Wall clock first: a preemption between the two reads then
            // makes the arrival estimate late, never early (early would
            // send a datagram before its delay is over).
            let wall = SystemTime::now();
            let now = Instant::now();
            let dir = &mut self.dirs[UP];
            if dir.perfect {
                // Fast path: re-address the batch and send it as it is.
                let mut single: Option<u32> = None;
                let mut mixed = false;
                let mut count = 0;
                let mut bytes = 0u64;
                for i in 0..n {
                    let len = self.rx.packet(i).len();
                    let addr = self.rx.addr(i);
                    // Empty datagrams cannot be told from consumed slots.
                    let client = if len == 0 {
                        None
                    } else {
                        self.io.clients.lookup(addr, now, to, &self.epoll)
                    };
                    let Some(c) = client else {
                        self.rx.consume(i);
                        continue;
                    };
                    if !matches!(dir.model.offer(now, len), Fate::Delivered { .. }) {
                        self.rx.consume(i);
                        continue;
                    }
                    self.rx.set_packet(i, 0, len, to);
                    self.rx_client[i] = c;
                    count += 1;
                    bytes += len as u64;
                    match single {
                        None => single = Some(c),
                        Some(s) if s != c => mixed = true,
                        _ => {}
                    }
                }
                match single {
                    Some(c) if !mixed => self.io.send(Target::Client(c), &self.rx, count, bytes),
                    Some(_) => {
                        for i in 0..n {
                            let p = self.rx.packet(i);
                            if !p.is_empty() {
                                let t = Target::Client(self.rx_client[i]);
                                self.out.push(&mut self.io, t, p, to);
                            }
                        }
                        self.out.flush(&mut self.io);
                    }
                    None => {}
                }
            } else {
                for i in 0..n {
                    let len = self.rx.packet(i).len();
                    if len == 0 {
                        continue;
                    }
                    let addr = self.rx.addr(i);
                    let Some(c) = self.io.clients.lookup(addr, now, to, &self.epoll) else {
                        continue;
                    };
                    let meta = Meta {
                        len: len as u32,
                        client: c,
                        gen: self.io.clients.gens[c as usize],
                        addr: to,
                    };
                    let at = Self::arrival(now, wall, self.rx_times[i]);
                    let fate = self.dirs[UP].model.offer(at, len);
                    enqueue(
                        &mut self.dirs[UP],
                        &mut self.pool,
                        fate,
                        self.rx.packet(i),
                        meta,
                    );
                }
                self.flush_due(now);
            }
            if n < BATCH {
                break;
            }
        }
        Ok(())
    }

    /// Replies on client `slot`'s upstream socket: the down direction.
    fn on_client(&mut self, slot: u32) {
        for _ in 0..BATCHES_PER_WAKE {
            let Some(client) = self.io.clients.get(slot) else {
                return;
            };
            let addr = client.addr;
            // A connected UDP socket reports ICMP errors (port unreachable
            // while --to is down) on receive; they concern nobody here.
            let n = match client
                .sock
                .recv_batch_timed(&mut self.rx, &mut self.rx_times)
            {
                Ok(n) => n,
                Err(_) => continue,
            };
            if n == 0 {
                break;
            }
            // Wall clock first: a preemption between the two reads then
            // makes the arrival estimate late, never early (early would
            // send a datagram before its delay is over).
            let wall = SystemTime::now();
            let now = Instant::now();
            if let Some(c) = self.io.clients.slots[slot as usize].as_mut() {
                c.last_seen = now;
            }
            let dir = &mut self.dirs[DOWN];
            if dir.perfect {
                let mut count = 0;
                let mut bytes = 0u64;
                for i in 0..n {
                    let len = self.rx.packet(i).len();
                    if len == 0 || !matches!(dir.model.offer(now, len), Fate::Delivered { .. }) {
                        self.rx.consume(i);
                        continue;
                    }
                    self.rx.set_packet(i, 0, len, addr);
                    count += 1;
                    bytes += len as u64;
                }
                self.io.send(Target::Listen, &self.rx, count, bytes);
            } else {
                for i in 0..n {
                    let len = self.rx.packet(i).len();
                    if len == 0 {
                        continue;
                    }
                    let meta = Meta {
                        len: len as u32,
                        client: slot,
                        gen: 0,
                        addr,
                    };
                    let at = Self::arrival(now, wall, self.rx_times[i]);
                    let fate = dir.model.offer(at, len);
                    enqueue(dir, &mut self.pool, fate, self.rx.packet(i), meta);
                }
                self.flush_due(now);
            }
            if n < BATCH {
                break;
            }
        }
    }

    /// When a datagram arrived, on the monotonic clock: the kernel's stamp
    /// (wall clock) moved back from `now` by its age. Without a stamp, or with
    /// a nonsensical one (clock stepped), `now`.
    fn arrival(now: Instant, wall: SystemTime, stamp: Option<SystemTime>) -> Instant {
        const MAX_AGE: Duration = Duration::from_secs(1);
        stamp
            .and_then(|t| wall.duration_since(t).ok())
            .filter(|age| *age < MAX_AGE)
            .and_then(|age| now.checked_sub(age))
            .unwrap_or(now)
    }

    /// Sends every copy whose time has come, one sendmmsg per socket run.
    fn flush_due(&mut self, now: Instant) {
        for d in [UP, DOWN] {
            while let Some(&due) = self.dirs[d].heap.peek() {
                if due.at > now {
                    break;
                }
                self.dirs[d].heap.pop();
                let meta = self.pool.meta[due.id as usize];
                // enqueue added exactly this when it pushed `due`.
                self.dirs[d].in_flight_bytes -= meta.len as u64;
                let target = if d == UP {
                    if self.io.clients.gens[meta.client as usize] != meta.gen
                        || self.io.clients.get(meta.client).is_none()
                    {
                        // Its client was evicted while it was in flight.
                        self.io.sent[UP].failed(1);
                        self.pool.free(due.id);
                        continue;
                    }
                    Target::Client(meta.client)
                } else {
                    Target::Listen
                };
                let data = &self.pool.buf(due.id)[..meta.len as usize];
                self.out.push(&mut self.io, target, data, meta.addr);
                self.pool.free(due.id);
            }
            self.out.flush(&mut self.io);
        }
    }
}

/// Puts the copies the model let through into the delay line.
fn enqueue(dir: &mut Direction, pool: &mut Pool, fate: Fate, data: &[u8], meta: Meta) {
    let Fate::Delivered { first, duplicate } = fate else {
        return;
    };
    for Delivery { at, corrupt_bit } in std::iter::once(first).chain(duplicate) {
        let Some(id) = pool.alloc(data.len()) else {
            dir.overflow = dir.overflow.saturating_add(1);
            continue;
        };
        let buf = &mut pool.buf(id)[..data.len()];
        buf.copy_from_slice(data);
        if let Some(bit) = corrupt_bit {
            apply_corruption(buf, bit);
        }
        pool.meta[id as usize] = meta;
        // A gauge of what the pool holds (a few MiB at most), taken off
        // again in flush_due.
        dir.in_flight_bytes += data.len() as u64;
        dir.heap.push(Due {
            at,
            seq: dir.seq,
            id,
        });
        // The arrival order: one per copy, so a u64 never wraps (a wrap
        // would reorder; saturating would tie, and neither can happen).
        dir.seq += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_counters_saturate_and_split_bytes_without_overflow() {
        let mut s = Sent::default();
        s.record(4, 4, 4000);
        assert_eq!((s.packets, s.bytes, s.failed), (4, 4000, 0));
        s.record(4, 1, 4000);
        assert_eq!((s.packets, s.bytes, s.failed), (5, 5000, 3));
        // A kernel claiming more than it was given counts as all sent.
        s.record(2, 3, 10);
        assert_eq!((s.packets, s.bytes, s.failed), (7, 5010, 3));
        // u64::MAX bytes of which half went: the product would overflow a
        // u64; the share is exact.
        let mut s = Sent::default();
        s.record(2, 1, u64::MAX);
        assert_eq!(s.bytes, u64::MAX / 2);
        // At the top every counter stays at u64::MAX.
        let mut s = Sent {
            packets: u64::MAX - 1,
            bytes: u64::MAX - 1,
            failed: u64::MAX - 1,
        };
        s.record(BATCH, BATCH / 2, 1 << 20);
        s.failed(7);
        assert_eq!(
            (s.packets, s.bytes, s.failed),
            (u64::MAX, u64::MAX, u64::MAX)
        );
    }
}
