//! The relay's I/O: one thread, one epoll loop, batched UDP, around the
//! sans-IO engine [`braid_netem::relay`], which decides everything else
//! (client slots, the line models, the delay line, cuts, counters).
//!
//! ```text
//!  client ──► listen socket ──[up LinkModel]──► client's own socket ──► --to
//!  client ◄── listen socket ◄─[down LinkModel]── client's own socket ◄── --to
//! ```
//!
//! Each client gets its own upstream socket, connected to `--to`, so a reply
//! arriving on it belongs to that client and nobody else; the engine keeps
//! it in its client table and drops (closes) it when the client goes.
//! Datagrams move in batches of up to [`BATCH`] with recvmmsg/sendmmsg.
//!
//! A direction whose line is perfect takes the fast path: the engine
//! answers [`Verdict::Send`] for each datagram of the received batch, which
//! is re-addressed and sent as it is. Otherwise the engine copies what the
//! line lets through into its pool, and the loop sends every copy
//! [`engine::Relay::pop_due`] hands out, one sendmmsg per run of copies for
//! one socket. Nothing is allocated per datagram.
//!
//! Timing: the loop sleeps in epoll_pwait2 (nanosecond timeout, timer slack
//! 1 ns) until [`SPIN`](super::spin::SPIN) before the next deadline, then polls without
//! sleeping, so a wake-up that comes a little late does not make the
//! datagram late; at most for a share of the time ([`super::spin`]), so
//! a line with a deadline every few microseconds does not keep a core.

use super::args::{self, Config};
use super::control::{Command, ControlServer, Epoll, Signals};
use super::spin::SpinBudget;
use super::stats::{self, Stats};
use braid_core::batch::PacketBatch;
use braid_io::UdpSocket;
use braid_netem::relay::{self as engine, Dir, Target, Verdict};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Instant, SystemTime};

/// Datagrams per recvmmsg/sendmmsg.
pub const BATCH: usize = 64;
/// Receive slots hold the largest UDP datagram, so nothing is truncated
/// before the MTU check sees its real length.
const RECV_STRIDE: usize = 65536;
/// `--realtime`'s SCHED_FIFO priority: above a VPN's own real-time
/// threads at their usual 20 (`RealtimePriority = 20`, `--vpn-realtime
/// 20`). An emulated line must not wait for the endpoints it joins: a
/// relay that did not run for 16 ms sent a copy with a long jitter draw
/// 16 ms after later ones it had sent before, so a ± 1 ms line reordered
/// by 17 ms (`tcpdump` on both sides of the relay) and the receiving VPN
/// gave up gaps it should have waited for.
pub const REALTIME_PRIORITY: libc::c_int = 30;
/// Batches read from one socket before the loop looks at deadlines again.
const BATCHES_PER_WAKE: usize = 4;

const T_LISTEN: u64 = 0;
const T_SIGNAL: u64 = 1;
const T_CONTROL: u64 = 2;
const T_CONN: u64 = 16;
const T_CLIENT: u64 = 1 << 32;

/// The engine, with each client's upstream socket.
type Engine = engine::Relay<UdpSocket>;

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

/// The upstream socket of a new client `addr` in `slot`, watched by `epoll`.
fn open_client(to: SocketAddr, addr: SocketAddr, slot: u32, epoll: &Epoll) -> Option<UdpSocket> {
    let sock = upstream_socket(to)
        .map_err(|e| eprintln!("braid netem: no upstream socket for client {addr}: {e}"))
        .ok()?;
    // slot < max_clients <= 65536 (args): the token stays far below
    // u64::MAX and `t - T_CLIENT` gives the slot back exactly.
    epoll.add(sock.as_raw_fd(), T_CLIENT + slot as u64).ok()?;
    Some(sock)
}

/// Sends the first `count` datagrams of `batch` (`bytes` together) through
/// `target`'s socket, and tells the engine what the kernel took.
fn send(
    engine: &mut Engine,
    listen: &UdpSocket,
    target: Target,
    batch: &PacketBatch,
    count: usize,
    bytes: u64,
) {
    if count == 0 {
        return;
    }
    let sock = match target {
        Target::Listen => listen,
        Target::Client(c) => match engine.client(c) {
            Some(s) => s,
            None => {
                engine.record_failed(Dir::Up, count);
                return;
            }
        },
    };
    let sent = sock.send_batch(batch).unwrap_or(0);
    engine.record_sent(target.dir(), count, sent, bytes);
}

/// Copies of datagrams gathered for one sendmmsg to one socket.
struct Out {
    batch: PacketBatch,
    target: Target,
    bytes: u64,
}

impl Out {
    /// Makes room for a copy to `target`: what is gathered for another
    /// socket, or a full batch, is sent first.
    fn make_room(&mut self, engine: &mut Engine, listen: &UdpSocket, target: Target) {
        if !self.batch.is_empty() && (self.target != target || self.batch.is_full()) {
            self.flush(engine, listen);
        }
        self.target = target;
    }

    /// Adds a copy for the target of the last [`Out::make_room`].
    fn push(&mut self, data: &[u8], addr: SocketAddr) {
        self.batch.push_with(0, addr, |buf| {
            buf[..data.len()].copy_from_slice(data);
            data.len()
        });
        // At most BATCH datagrams of at most RECV_STRIDE bytes each.
        self.bytes += data.len() as u64;
    }

    fn flush(&mut self, engine: &mut Engine, listen: &UdpSocket) {
        send(
            engine,
            listen,
            self.target,
            &self.batch,
            self.batch.len(),
            self.bytes,
        );
        self.batch.clear();
        self.bytes = 0;
    }
}

pub struct Relay {
    cfg: Config,
    epoll: Epoll,
    listen: UdpSocket,
    engine: Engine,
    signals: Option<Signals>,
    control: Option<ControlServer>,
    rx: PacketBatch,
    out: Out,
    /// The client of each datagram of `rx` (fast path with several clients).
    rx_client: [u32; BATCH],
    /// Kernel arrival time of each datagram in `rx`.
    rx_times: [Option<SystemTime>; BATCH],
    next_stats: Option<Instant>,
    end: Option<Instant>,
    spin: SpinBudget,
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
            braid_io::realtime_this_thread(libc::SCHED_FIFO, REALTIME_PRIORITY)
                .map_err(|e| format!("--realtime: {e}"))?;
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
        let start = Instant::now();
        Ok(Relay {
            engine: engine::Relay::new(cfg.relay(), start),
            listen,
            epoll,
            signals,
            control,
            rx: PacketBatch::new(BATCH, RECV_STRIDE),
            out: Out {
                batch: PacketBatch::new(BATCH, RECV_STRIDE),
                target: Target::Listen,
                bytes: 0,
            },
            rx_client: [0; BATCH],
            rx_times: [None; BATCH],
            // Every Instant + Duration here is in range: args refuses
            // durations above 1e9 s (32 years), and Instant counts i64
            // seconds.
            next_stats: cfg.stats_interval.map(|i| start + i),
            end: cfg.duration.map(|d| start + d),
            spin: SpinBudget::new(start),
            stop: false,
            cfg,
        })
    }

    /// The port actually bound for `--listen` (useful with port 0).
    pub fn listen_port(&self) -> u16 {
        self.listen.local_port()
    }

    pub fn banner(&self) -> String {
        let rates: Vec<String> = self
            .cfg
            .rate_schedule
            .iter()
            .map(|(at, bps)| format!("at {at:?} rate {bps} bit/s"))
            .collect();
        format!(
            "braid netem: relaying {} -> {}; up: {}; down: {}; seed {}{}",
            SocketAddr::new(self.cfg.listen.ip(), self.listen_port()),
            self.cfg.to,
            args::describe(&self.cfg.up),
            args::describe(&self.cfg.down),
            self.cfg.seed,
            if rates.is_empty() {
                String::new()
            } else {
                format!("; {}", rates.join(", "))
            }
        )
    }

    pub fn set_cut(&mut self, cut: bool) {
        self.engine.set_cut(cut);
    }

    pub fn stats(&self) -> Stats {
        self.engine.stats(Instant::now())
    }

    fn render(&self, json: bool) -> String {
        let s = self.stats();
        if json {
            stats::to_json(&s)
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
            let left = self.next_deadline().saturating_duration_since(now);
            let sleep = left.saturating_sub(self.spin.allowance(now));
            let n = self.epoll.wait(&mut events, Some(sleep))?;
            if sleep.is_zero() && !left.is_zero() {
                self.spin.spun(now.elapsed());
            }
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
        if self.listen.has_pending() {
            self.on_listen()?;
        }
        for slot in 0..self.engine.slot_bound() as u32 {
            if self.engine.client(slot).is_some_and(|s| s.has_pending()) {
                self.on_client(slot);
            }
        }
        Ok(())
    }

    fn next_deadline(&self) -> Instant {
        [self.next_stats, self.end]
            .into_iter()
            .flatten()
            .fold(self.engine.next_deadline(), Instant::min)
    }

    fn timers(&mut self, now: Instant) {
        self.engine.poll_timers(now);
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
                        Ok(Command::Rate(bps)) => match self.engine.set_rate(bps) {
                            Ok(()) => "ok".into(),
                            Err(e) => format!("error: {e}"),
                        },
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
        let perfect = self.engine.is_perfect(Dir::Up);
        for _ in 0..BATCHES_PER_WAKE {
            let n = self
                .listen
                .recv_batch_timed(&mut self.rx, &mut self.rx_times)?;
            if n == 0 {
                break;
            }
            // Wall clock first (see engine::arrival).
            let wall = SystemTime::now();
            let now = Instant::now();
            // The fast path's datagrams stay in `rx`, re-addressed.
            let mut single: Option<u32> = None;
            let mut mixed = false;
            let mut count = 0;
            let mut bytes = 0u64;
            for i in 0..n {
                // A slot a coalesced receive did not need (empty, and
                // skipped by the send as well).
                if self.rx.packet(i).is_empty() {
                    continue;
                }
                let addr = self.rx.addr(i);
                let at = if perfect {
                    now
                } else {
                    engine::arrival(now, wall, self.rx_times[i])
                };
                let epoll = &self.epoll;
                let verdict = self
                    .engine
                    .on_listen(now, at, addr, self.rx.packet(i), |slot| {
                        open_client(to, addr, slot, epoll)
                    });
                let Verdict::Send(Target::Client(c), dest) = verdict else {
                    // Dropped, or copied into the delay line.
                    if perfect {
                        self.rx.consume(i);
                    }
                    continue;
                };
                let len = self.rx.packet(i).len();
                self.rx.set_packet(i, 0, len, dest);
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
                Some(c) if !mixed => send(
                    &mut self.engine,
                    &self.listen,
                    Target::Client(c),
                    &self.rx,
                    count,
                    bytes,
                ),
                Some(_) => {
                    for i in 0..n {
                        let p = self.rx.packet(i);
                        if !p.is_empty() {
                            let t = Target::Client(self.rx_client[i]);
                            self.out.make_room(&mut self.engine, &self.listen, t);
                            self.out.push(p, self.rx.addr(i));
                        }
                    }
                    self.out.flush(&mut self.engine, &self.listen);
                }
                None => {}
            }
            if !perfect {
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
        let perfect = self.engine.is_perfect(Dir::Down);
        for _ in 0..BATCHES_PER_WAKE {
            let Some(sock) = self.engine.client(slot) else {
                return;
            };
            // A connected UDP socket reports ICMP errors (port unreachable
            // while --to is down) on receive; they concern nobody here.
            let n = match sock.recv_batch_timed(&mut self.rx, &mut self.rx_times) {
                Ok(n) => n,
                Err(_) => continue,
            };
            if n == 0 {
                break;
            }
            // Wall clock first (see engine::arrival).
            let wall = SystemTime::now();
            let now = Instant::now();
            let mut count = 0;
            let mut bytes = 0u64;
            for i in 0..n {
                if self.rx.packet(i).is_empty() {
                    continue;
                }
                let at = if perfect {
                    now
                } else {
                    engine::arrival(now, wall, self.rx_times[i])
                };
                let verdict = self.engine.on_upstream(now, at, slot, self.rx.packet(i));
                let Verdict::Send(_, addr) = verdict else {
                    if perfect {
                        self.rx.consume(i);
                    }
                    continue;
                };
                let len = self.rx.packet(i).len();
                self.rx.set_packet(i, 0, len, addr);
                count += 1;
                bytes += len as u64;
            }
            send(
                &mut self.engine,
                &self.listen,
                Target::Listen,
                &self.rx,
                count,
                bytes,
            );
            if !perfect {
                self.flush_due(now);
            }
            if n < BATCH {
                break;
            }
        }
    }

    /// Sends every copy whose time has come, one sendmmsg per socket run.
    fn flush_due(&mut self, now: Instant) {
        while let Some(due) = self.engine.pop_due(now) {
            self.out
                .make_room(&mut self.engine, &self.listen, due.target);
            self.out.push(self.engine.data(&due), due.addr);
            self.engine.release(due);
        }
        self.out.flush(&mut self.engine, &self.listen);
    }
}
