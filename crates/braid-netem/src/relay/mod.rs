//! The `braid netem` relay's engine, sans-IO: everything the relay decides,
//! nothing it does. The caller (the braid crate's epoll loop) owns the
//! sockets and the clock; it hands each received datagram in with the time
//! it arrived, sends what the engine says is due, and tells the engine what
//! the kernel took.
//!
//! ```text
//!  client ──► listen socket ──[up LinkModel]──► client's own socket ──► to
//!  client ◄── listen socket ◄─[down LinkModel]── client's own socket ◄── to
//! ```
//!
//! - The client table: each client address gets a slot, and the caller
//!   opens that slot's upstream socket (the engine keeps it as an opaque
//!   `T` and drops it when the client goes); at most `max_clients`, the
//!   least recently seen one makes room, and one silent for
//!   [`CLIENT_IDLE`] is let go.
//! - Per direction, a [`LinkModel`]. A direction whose line is perfect
//!   delays nothing: [`Relay::on_listen`] and [`Relay::on_upstream`] answer
//!   [`Verdict::Send`] and the caller can send the datagram at once, from
//!   its own receive buffer. Otherwise every copy the model lets through is
//!   copied into a preallocated pool and a binary heap keyed by (delivery
//!   time, arrival order), and [`Relay::pop_due`] hands them out when their
//!   time has come. A jittered line's delivery times are rounded up to a
//!   grid finer than its jitter ([`MAX_GRAIN`] at most), so its copies
//!   leave in batches, as a fixed delay's do. Nothing is allocated per datagram: the pool and the
//!   heaps are sized at start, and a full pool drops (a queue drop).
//! - Cuts: [`Relay::set_cut`] and the configured schedule; rate changes:
//!   [`Relay::set_rate`] and the configured rate schedule.
//! - The counters ([`Stats`]) and [`Relay::next_deadline`].
//!
//! Datagrams stay in the caller's batches: the engine looks at one at a
//! time and never asks for a copy on the fast path, so the caller can keep
//! receiving and sending with recvmmsg/sendmmsg.

mod clients;
mod pool;
mod stats;

pub use clients::CLIENT_IDLE;
pub use stats::{DirStats, Dropped, Stats};

use crate::link::{apply_corruption, Delivery, Fate, LinkModel, LinkParams};
use pool::{Due, Meta, Pool};
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

/// What the engine needs to know of a `braid netem` invocation.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Where the up direction goes (every client's upstream socket is
    /// connected to it).
    pub to: SocketAddr,
    /// Client → `to`.
    pub up: LinkParams,
    /// `to` → client.
    pub down: LinkParams,
    /// The up line uses `seed`, the down line `seed + 1`.
    pub seed: u64,
    /// Cut (true) and restore (false) events, relative to the start, in
    /// order.
    pub schedule: Vec<(Duration, bool)>,
    /// Rate changes (both directions), relative to the start, in order:
    /// (when, new rate in bits per second).
    pub rate_schedule: Vec<(Duration, u64)>,
    /// Most clients served at once (at least 1).
    pub max_clients: usize,
}

/// A direction of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Client → upstream.
    Up,
    /// Upstream → client.
    Down,
}

impl Dir {
    fn index(self) -> usize {
        match self {
            Dir::Up => 0,
            Dir::Down => 1,
        }
    }
}

/// The socket a datagram leaves by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The listen socket, to a client (the down direction).
    Listen,
    /// Client slot's upstream socket (the up direction).
    Client(u32),
}

impl Target {
    pub fn dir(self) -> Dir {
        match self {
            Target::Listen => Dir::Down,
            Target::Client(_) => Dir::Up,
        }
    }
}

/// What became of a datagram handed to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it now, as it is, through `Target` to the address (a perfect
    /// line: the caller may send it straight from its receive buffer).
    Send(Target, SocketAddr),
    /// The engine copied what goes on; [`Relay::pop_due`] hands it out.
    Queued,
    /// Nothing goes on: empty, no client slot, or dropped by the line.
    Dropped,
}

/// A copy whose time has come: send [`Relay::data`] through `target` to
/// `addr`, then give it back with [`Relay::release`].
#[must_use = "a Ready holds a pool buffer until it is released"]
#[derive(Debug)]
pub struct Ready {
    pub target: Target,
    pub addr: SocketAddr,
    id: u32,
    len: u32,
}

/// One direction of the line.
struct Direction {
    model: LinkModel,
    perfect: bool,
    /// Delivery times are rounded up to this grid (zero: exact).
    grain: Duration,
    heap: BinaryHeap<Due>,
    seq: u64,
    /// Copies the model let through but the pool had no room for.
    overflow: u64,
    in_flight_bytes: u64,
    sent: Sent,
}

impl Direction {
    fn new(p: &LinkParams, seed: u64) -> Direction {
        Direction {
            perfect: p.is_perfect(),
            grain: release_grain(p.jitter),
            model: LinkModel::new(p.clone(), seed),
            heap: BinaryHeap::with_capacity(Pool::capacity()),
            seq: 0,
            overflow: 0,
            in_flight_bytes: 0,
            sent: Sent::default(),
        }
    }

    fn due(&self, now: Instant) -> bool {
        self.heap.peek().is_some_and(|d| d.at <= now)
    }
}

/// The grid a jittered line's deliveries are released on: a tenth of the
/// jitter, at most [`MAX_GRAIN`]. Jitter spreads the copies of one received
/// batch over the whole jitter range, so released at their exact times they
/// leave a few at a time, each few with its own wake-up and sendmmsg (3
/// datagrams per call at 2.3 Gbit/s over 3 ms ± 1 ms, against 40 on a
/// fixed 3 ms line), and the relay's own CPU, not the line, sets what gets
/// through. On the grid they leave together; the jitter's spread and its
/// reordering stay (a copy is late by less than a tenth of the jitter).
fn release_grain(jitter: Duration) -> Duration {
    (jitter / 10).min(MAX_GRAIN)
}

/// The coarsest release grid; below the jitter that makes it.
pub const MAX_GRAIN: Duration = Duration::from_micros(100);

/// `at` rounded up to the next point of the grid of `grain` from `start`;
/// `at` itself when the grain is zero or the rounding would overflow.
fn round_up(at: Instant, start: Instant, grain: Duration) -> Instant {
    if grain.is_zero() {
        return at;
    }
    let offset = at.saturating_duration_since(start).as_nanos();
    let g = grain.as_nanos();
    let rounded = offset.div_ceil(g) * g;
    u64::try_from(rounded)
        .ok()
        .and_then(|n| start.checked_add(Duration::from_nanos(n)))
        .map_or(at, |r| r.max(at))
}

/// What was sent: every count saturates rather than wraps to a small
/// number.
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
        // A sendmmsg never reports more than it was given; clamped so a
        // surprise cannot underflow `count - sent`.
        let sent = sent.min(count);
        self.packets = self.packets.saturating_add(sent as u64);
        // A batched send reports a count, not which ones failed (rare: a
        // full buffer for 100 ms, an unreachable destination): their share
        // of the bytes. In u128 the product cannot overflow; the quotient
        // is at most `bytes`, so it fits a u64 again.
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

/// The relay's engine. `T` is the caller's per-client state (its upstream
/// socket); the engine only stores it, and drops it when the client goes.
pub struct Relay<T> {
    to: SocketAddr,
    schedule: Vec<(Duration, bool)>,
    next_event: usize,
    rate_schedule: Vec<(Duration, u64)>,
    next_rate: usize,
    clients: clients::Clients<T>,
    dirs: [Direction; 2],
    pool: Pool,
    start: Instant,
    cut: bool,
    next_expiry: Instant,
}

/// How often idle clients are looked for.
const EXPIRY_EVERY: Duration = Duration::from_secs(1);

/// When a datagram arrived, on the monotonic clock: the kernel's stamp
/// (wall clock) moved back from `now` by its age. Without a stamp, or with
/// a nonsensical one (clock stepped), `now`. Read `wall` before `now`: a
/// preemption between the two reads then makes the estimate late, never
/// early (early would send a datagram before its delay is over).
pub fn arrival(now: Instant, wall: SystemTime, stamp: Option<SystemTime>) -> Instant {
    const MAX_AGE: Duration = Duration::from_secs(1);
    stamp
        .and_then(|t| wall.duration_since(t).ok())
        .filter(|age| *age < MAX_AGE)
        .and_then(|age| now.checked_sub(age))
        .unwrap_or(now)
}

impl<T> Relay<T> {
    /// A relay started at `start` (the schedule counts from it).
    pub fn new(cfg: RelayConfig, start: Instant) -> Relay<T> {
        Relay {
            to: cfg.to,
            dirs: [
                Direction::new(&cfg.up, cfg.seed),
                Direction::new(&cfg.down, cfg.seed.wrapping_add(1)),
            ],
            clients: clients::Clients::new(cfg.max_clients),
            schedule: cfg.schedule,
            next_event: 0,
            rate_schedule: cfg.rate_schedule,
            next_rate: 0,
            pool: Pool::new(),
            start,
            cut: false,
            // Every Instant + Duration here is in range: `braid netem`
            // refuses durations above 1e9 s (32 years), and Instant counts
            // i64 seconds.
            next_expiry: start + EXPIRY_EVERY,
        }
    }

    /// Whether `dir`'s line impairs nothing (its datagrams are never
    /// queued).
    pub fn is_perfect(&self, dir: Dir) -> bool {
        self.dirs[dir.index()].perfect
    }

    /// Client slots, taken or not.
    pub fn slots(&self) -> usize {
        self.clients.slots()
    }

    /// Every taken client slot is below this (slots are taken lowest first):
    /// a loop over the clients' sockets can stop here.
    pub fn slot_bound(&self) -> usize {
        self.clients.bound()
    }

    /// Client `slot`'s state, if the slot is taken.
    pub fn client(&self, slot: u32) -> Option<&T> {
        self.clients.get(slot)
    }

    /// A datagram from `from` on the listen socket, received at `now`,
    /// arrived at `at` (see [`arrival`]). A new client gets a slot and
    /// `open(slot)` makes its state; `None` from `open` drops the datagram
    /// (the slot stays free).
    pub fn on_listen(
        &mut self,
        now: Instant,
        at: Instant,
        from: SocketAddr,
        data: &[u8],
        open: impl FnOnce(u32) -> Option<T>,
    ) -> Verdict {
        // Empty datagrams are not relayed (they cannot be told from a
        // consumed slot of a receive batch).
        if data.is_empty() {
            return Verdict::Dropped;
        }
        let Some(slot) = self.clients.lookup(from, now, open) else {
            return Verdict::Dropped;
        };
        let meta = Meta {
            len: data.len() as u32,
            client: slot,
            gen: self.clients.gens[slot as usize],
            addr: self.to,
        };
        self.offer(Dir::Up, now, at, data, meta)
    }

    /// A datagram from upstream on client `slot`'s socket, received at
    /// `now`, arrived at `at`.
    pub fn on_upstream(&mut self, now: Instant, at: Instant, slot: u32, data: &[u8]) -> Verdict {
        let Some(addr) = self.clients.touch(slot, now) else {
            return Verdict::Dropped;
        };
        if data.is_empty() {
            return Verdict::Dropped;
        }
        let meta = Meta {
            len: data.len() as u32,
            client: slot,
            gen: 0,
            addr,
        };
        self.offer(Dir::Down, now, at, data, meta)
    }

    fn offer(&mut self, dir: Dir, now: Instant, at: Instant, data: &[u8], meta: Meta) -> Verdict {
        let d = &mut self.dirs[dir.index()];
        if d.perfect {
            // Nothing to delay: the model only counts and cuts.
            return match d.model.offer(now, data.len()) {
                Fate::Delivered { .. } => {
                    let target = match dir {
                        Dir::Up => Target::Client(meta.client),
                        Dir::Down => Target::Listen,
                    };
                    Verdict::Send(target, meta.addr)
                }
                Fate::Dropped(_) => Verdict::Dropped,
            };
        }
        let fate = d.model.offer(at, data.len());
        if enqueue(d, &mut self.pool, fate, data, meta, self.start) {
            Verdict::Queued
        } else {
            Verdict::Dropped
        }
    }

    /// The next copy due at `now`: the up direction's in delivery order,
    /// then the down direction's. Up copies whose client went while they
    /// were in flight are counted as failed sends and skipped.
    pub fn pop_due(&mut self, now: Instant) -> Option<Ready> {
        for (i, target_up) in [(0, true), (1, false)] {
            while self.dirs[i].due(now) {
                let Some(due) = self.dirs[i].heap.pop() else {
                    break;
                };
                let meta = self.pool.meta[due.id as usize];
                // enqueue added exactly this when it pushed `due`.
                self.dirs[i].in_flight_bytes -= meta.len as u64;
                let target = if target_up {
                    if self.clients.gens[meta.client as usize] != meta.gen
                        || self.clients.get(meta.client).is_none()
                    {
                        // Its client was evicted while it was in flight.
                        self.dirs[i].sent.failed(1);
                        self.pool.free(due.id);
                        continue;
                    }
                    Target::Client(meta.client)
                } else {
                    Target::Listen
                };
                return Some(Ready {
                    target,
                    addr: meta.addr,
                    id: due.id,
                    len: meta.len,
                });
            }
        }
        None
    }

    /// The bytes of a due copy.
    pub fn data(&self, r: &Ready) -> &[u8] {
        &self.pool.buf(r.id)[..r.len as usize]
    }

    /// Gives a due copy's buffer back (after it was sent, or not).
    pub fn release(&mut self, r: Ready) {
        self.pool.free(r.id);
    }

    /// Records a send through `dir`'s socket of `count` datagrams, `bytes`
    /// together, of which the kernel took `sent`.
    pub fn record_sent(&mut self, dir: Dir, count: usize, sent: usize, bytes: u64) {
        self.dirs[dir.index()].sent.record(count, sent, bytes);
    }

    /// Records `n` datagrams of `dir` that could not be sent at all.
    pub fn record_failed(&mut self, dir: Dir, n: usize) {
        self.dirs[dir.index()].sent.failed(n);
    }

    pub fn set_cut(&mut self, cut: bool) {
        self.cut = cut;
        for d in &mut self.dirs {
            d.model.set_cut(cut);
        }
    }

    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// Sets the rate cap of both directions to `rate_bps` from now on (see
    /// [`LinkModel::set_rate`]); a direction that had no impairment leaves
    /// the fast path. 0 is refused.
    pub fn set_rate(&mut self, rate_bps: u64) -> Result<(), String> {
        for d in &mut self.dirs {
            d.model.set_rate(rate_bps)?;
            d.perfect = false;
        }
        Ok(())
    }

    /// The rate cap of `dir` now, in bits per second (`None`: none).
    pub fn rate(&self, dir: Dir) -> Option<u64> {
        self.dirs[dir.index()].model.params().rate_bps
    }

    /// Applies the scheduled cuts and restores that are due, and lets idle
    /// clients go.
    pub fn poll_timers(&mut self, now: Instant) {
        while let Some(&(at, cut)) = self.schedule.get(self.next_event) {
            if self.start + at > now {
                break;
            }
            self.set_cut(cut);
            self.next_event += 1;
        }
        while let Some(&(at, rate)) = self.rate_schedule.get(self.next_rate) {
            if self.start + at > now {
                break;
            }
            // Checked when the schedule was made; a 0 is skipped.
            let _ = self.set_rate(rate);
            self.next_rate += 1;
        }
        if now >= self.next_expiry {
            self.next_expiry = now + EXPIRY_EVERY;
            self.clients.expire(now);
        }
    }

    /// When the engine next has something to do: a copy due, a scheduled
    /// cut or restore, the next look for idle clients.
    pub fn next_deadline(&self) -> Instant {
        let heaps = self.dirs.iter().filter_map(|d| d.heap.peek().map(|x| x.at));
        let event = self
            .schedule
            .get(self.next_event)
            .map(|(at, _)| self.start + *at);
        let rate = self
            .rate_schedule
            .get(self.next_rate)
            .map(|(at, _)| self.start + *at);
        heaps
            .chain(event)
            .chain(rate)
            .fold(self.next_expiry, |a, b| a.min(b))
    }

    /// The counters as of `now`.
    pub fn stats(&self, now: Instant) -> Stats {
        let dir = |d: &Direction| {
            let c = d.model.counters();
            DirStats {
                offered: c.offered,
                forwarded_packets: d.sent.packets,
                forwarded_bytes: d.sent.bytes,
                dropped: Dropped {
                    mtu: c.dropped_mtu,
                    cut: c.dropped_cut,
                    loss: c.dropped_loss,
                    queue: c.dropped_queue.saturating_add(d.overflow),
                },
                duplicated: c.duplicated,
                corrupted: c.corrupted,
                reordered: c.reordered,
                send_failed: d.sent.failed,
                queue_bytes: d.model.queue_bytes(now),
                in_flight_packets: d.heap.len() as u64,
                in_flight_bytes: d.in_flight_bytes,
                rate_bps: d.model.params().rate_bps,
            }
        };
        Stats {
            uptime_s: now.saturating_duration_since(self.start).as_secs_f64(),
            cut: self.cut,
            clients: self.clients.count as u64,
            clients_evicted: self.clients.evicted,
            up: dir(&self.dirs[0]),
            down: dir(&self.dirs[1]),
        }
    }
}

/// Puts the copies the model let through into the delay line; false when
/// none went in.
fn enqueue(
    dir: &mut Direction,
    pool: &mut Pool,
    fate: Fate,
    data: &[u8],
    meta: Meta,
    start: Instant,
) -> bool {
    let Fate::Delivered { first, duplicate } = fate else {
        return false;
    };
    let mut queued = false;
    for Delivery { at, corrupt_bit } in std::iter::once(first).chain(duplicate) {
        let Some(id) = pool.alloc(data.len()) else {
            dir.overflow = dir.overflow.saturating_add(1);
            continue;
        };
        let buf = &mut pool.buf_mut(id)[..data.len()];
        buf.copy_from_slice(data);
        if let Some(bit) = corrupt_bit {
            apply_corruption(buf, bit);
        }
        pool.meta[id as usize] = meta;
        // A gauge of what the pool holds (a few MiB at most), taken off
        // again in pop_due.
        dir.in_flight_bytes += data.len() as u64;
        dir.heap.push(Due {
            at: round_up(at, start, dir.grain),
            seq: dir.seq,
            id,
        });
        // The arrival order: one per copy, so a u64 never wraps (a wrap
        // would reorder; saturating would tie, and neither can happen).
        dir.seq += 1;
        queued = true;
    }
    queued
}

#[cfg(test)]
mod tests;
