//! The client table: which client address has which upstream slot.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A client silent for this long loses its slot (and its upstream socket).
pub const CLIENT_IDLE: Duration = Duration::from_secs(180);

struct Client<T> {
    addr: SocketAddr,
    /// The caller's state for this client (the relay's upstream socket).
    io: T,
    last_seen: Instant,
}

/// Clients by slot; a slot's generation changes when its client goes, so
/// datagrams still in flight for it are recognised as orphans.
pub(super) struct Clients<T> {
    slots: Vec<Option<Client<T>>>,
    pub gens: Vec<u32>,
    by_addr: HashMap<SocketAddr, u32>,
    /// The last lookup, since one client usually sends whole batches.
    last: Option<(SocketAddr, u32)>,
    pub count: usize,
    pub evicted: u64,
    /// Every slot ever taken is below this (slots are taken lowest first,
    /// so a scan of the taken ones stops here, not at the table's size).
    bound: usize,
}

impl<T> Clients<T> {
    pub fn new(max: usize) -> Clients<T> {
        Clients {
            slots: (0..max).map(|_| None).collect(),
            gens: vec![0; max],
            by_addr: HashMap::with_capacity(max),
            last: None,
            count: 0,
            evicted: 0,
            bound: 0,
        }
    }

    /// Slots, taken or not (the most clients served at once).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Every taken slot is below this.
    pub fn bound(&self) -> usize {
        self.bound
    }

    pub fn get(&self, slot: u32) -> Option<&T> {
        Some(&self.slots.get(slot as usize)?.as_ref()?.io)
    }

    /// Client `slot`'s address, as of `now` seen again.
    pub fn touch(&mut self, slot: u32, now: Instant) -> Option<SocketAddr> {
        let c = self.slots.get_mut(slot as usize)?.as_mut()?;
        c.last_seen = now;
        Some(c.addr)
    }

    pub fn remove(&mut self, slot: u32) {
        if let Some(c) = self.slots[slot as usize].take() {
            // Dropping `c.io` closes the caller's socket.
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

    /// The slot of `addr`'s client, creating it with `open(slot)` (and
    /// evicting the least recently seen client when all slots are taken).
    /// `None` when `open` fails.
    pub fn lookup(
        &mut self,
        addr: SocketAddr,
        now: Instant,
        open: impl FnOnce(u32) -> Option<T>,
    ) -> Option<u32> {
        let slot = match self.last {
            Some((a, s)) if a == addr => s,
            _ => match self.by_addr.get(&addr) {
                Some(&s) => s,
                None => self.create(addr, now, open)?,
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
        open: impl FnOnce(u32) -> Option<T>,
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
        let io = open(slot)?;
        self.slots[slot as usize] = Some(Client {
            addr,
            io,
            last_seen: now,
        });
        self.by_addr.insert(addr, slot);
        self.count += 1;
        self.bound = self.bound.max(slot as usize + 1);
        Some(slot)
    }

    /// Removes every client silent for longer than [`CLIENT_IDLE`].
    pub fn expire(&mut self, now: Instant) {
        for slot in 0..self.bound {
            let idle = self.slots[slot]
                .as_ref()
                .is_some_and(|c| now.saturating_duration_since(c.last_seen) > CLIENT_IDLE);
            if idle {
                self.remove(slot as u32);
            }
        }
    }
}
