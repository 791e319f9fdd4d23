//! The device's peers, and what it keeps about them so that no call has to
//! walk all of them: each peer's next deadline (a [`DeadlineQueue`]), the
//! peers that have a session, and how many peers' paths carry what MTU.
//!
//! Every change to a peer goes through `table[pid]` as a place to write
//! (`IndexMut`), which notes the peer as touched; the device brings the
//! bookkeeping of the touched peers up to date after each call
//! ([`PeerTable::settle`]), so its cost is per peer worked on, never per
//! peer known. Reads (`Index`) note nothing.

use super::pmtu::MtuNotice;
use super::state::Device;
use crate::deadlines::DeadlineQueue;
use crate::peer::{Peer, PeerId};
use crate::pmtud::MAX_PLPMTU;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Index, IndexMut};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

/// The peers' public keys and ids. Shared, read-only, with the crypto jobs
/// that answer initiations outside the device: the response's DH work is
/// done only for a key that is a peer's, so an initiation from a stranger
/// costs the two scalar multiplications that decrypt it, as before.
#[derive(Clone, Default)]
pub(super) struct PeerKeys(Arc<RwLock<HashMap<[u8; 32], PeerId>>>);

impl PeerKeys {
    // A thread that panicked holding the lock left a map that is still
    // whole (every change is one call on it).
    fn read(&self) -> RwLockReadGuard<'_, HashMap<[u8; 32], PeerId>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<[u8; 32], PeerId>> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, public: &[u8; 32]) -> Option<PeerId> {
        self.read().get(public).copied()
    }

    pub fn contains(&self, public: &[u8; 32]) -> bool {
        self.read().contains_key(public)
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn insert(&self, public: [u8; 32], pid: PeerId) {
        self.write().insert(public, pid);
    }

    pub fn remove(&self, public: &[u8; 32]) -> Option<PeerId> {
        self.write().remove(public)
    }

    pub fn keys(&self) -> Vec<[u8; 32]> {
        self.read().keys().copied().collect()
    }
}

/// What a peer says about the tunnel MTU it can take (see
/// `Device::peer_path_mtu`), in a form that does not depend on the
/// interface's default, so it can be counted once as it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum PathMtuSays {
    /// Nothing yet: no session.
    #[default]
    Nothing,
    /// A stock WireGuard peer with a session: the interface's default, or
    /// less when its local lines carry less.
    Stock(Option<usize>),
    /// A braid peer: what discovery found on its paths.
    Discovered(usize),
}

impl PathMtuSays {
    fn of(p: &Peer) -> PathMtuSays {
        let says = Self::counted(p);
        debug_assert_eq!(says.value(1420), Device::peer_path_mtu(p, 1420));
        says
    }

    fn counted(p: &Peer) -> PathMtuSays {
        if p.speaks_braid() {
            Device::path_carry(p, |_| true).map_or(PathMtuSays::Nothing, |carry| {
                PathMtuSays::Discovered(Device::limit_for(p, carry))
            })
        } else if p.keypairs.current.is_some() {
            PathMtuSays::Stock(Device::stock_line_limit(p))
        } else {
            PathMtuSays::Nothing
        }
    }

    pub(super) fn value(self, default: usize) -> Option<usize> {
        match self {
            PathMtuSays::Nothing => None,
            PathMtuSays::Stock(line) => Some(line.map_or(default, |l| l.min(default))),
            PathMtuSays::Discovered(mtu) => Some(mtu),
        }
    }
}

/// How many peers say which MTU: the interface MTU is the largest, the
/// target every peer takes the smallest, each in O(log n).
#[derive(Debug, Default)]
struct MtuCensus {
    discovered: BTreeMap<usize, u32>,
    /// Stock peers whose lines carry no less than the default.
    stock_unlimited: u32,
    /// Stock peers by what their lines carry.
    stock_lines: BTreeMap<usize, u32>,
}

fn count(map: &mut BTreeMap<usize, u32>, key: usize, add: bool) {
    if add {
        *map.entry(key).or_default() += 1;
    } else {
        let n = map.get_mut(&key).expect("counted when added");
        *n -= 1;
        if *n == 0 {
            map.remove(&key);
        }
    }
}

impl MtuCensus {
    fn count(&mut self, says: PathMtuSays, add: bool) {
        match says {
            PathMtuSays::Nothing => {}
            PathMtuSays::Stock(None) if add => self.stock_unlimited += 1,
            PathMtuSays::Stock(None) => self.stock_unlimited -= 1,
            PathMtuSays::Stock(Some(line)) => count(&mut self.stock_lines, line, add),
            PathMtuSays::Discovered(mtu) => count(&mut self.discovered, mtu, add),
        }
    }

    /// Every value a peer says with `default` as the interface's: the
    /// largest and the smallest of each kind.
    fn extremes(&self, default: usize) -> [Option<usize>; 4] {
        let unlimited = (self.stock_unlimited > 0).then_some(default);
        let lines = |l: Option<(&usize, &u32)>| l.map(|(&l, _)| l.min(default));
        [
            self.discovered.first_key_value().map(|(&m, _)| m),
            self.discovered.last_key_value().map(|(&m, _)| m),
            lines(self.stock_lines.first_key_value())
                .min(unlimited)
                .or(unlimited),
            lines(self.stock_lines.last_key_value()).max(unlimited),
        ]
    }

    /// The largest MTU any peer says; `None` when no peer says anything.
    fn largest(&self, default: usize) -> Option<usize> {
        let [_, discovered, _, stock] = self.extremes(default);
        discovered.max(stock)
    }

    fn smallest(&self, default: usize) -> Option<usize> {
        let [discovered, _, stock, _] = self.extremes(default);
        match (discovered, stock) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How the last refresh set the interface MTU: the limits of peers the
/// device works on follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MtuMode {
    default: usize,
    /// The interface MTU is fixed at `default` whatever the paths say.
    fixed: bool,
    interface: usize,
}

/// The peers by id, with their schedule; see the module documentation.
#[derive(Default)]
pub struct PeerTable {
    slots: Vec<Option<Peer>>,
    /// Slots a removed peer left empty, reused first.
    free: Vec<PeerId>,
    /// Peers changed since the last [`settle`](Self::settle), once each.
    touched: Vec<PeerId>,
    is_touched: Vec<bool>,
    /// Each peer's next deadline.
    deadlines: DeadlineQueue,
    /// Peers with a session (in any order), and where each is in it.
    with_session: Vec<PeerId>,
    session_position: Vec<Option<u32>>,
    /// What each peer says about the MTU, as last counted, and the count.
    mtu_says: Vec<PathMtuSays>,
    census: MtuCensus,
    /// What the last refresh made of the interface MTU: the peers' limits
    /// follow it.
    mtu_mode: Option<MtuMode>,
    /// How peers' packets go now, where that changed worth a log line.
    mtu_notices: Vec<MtuNotice>,
    /// Peers whose deadlines `handle_timeout` took out, ever.
    pub(super) woken: u64,
    /// Peers settled since the last [`take_changed`](Self::take_changed),
    /// once each: what a watcher of changes looks at instead of every peer.
    changed: Vec<PeerId>,
    is_changed: Vec<bool>,
}

impl Index<PeerId> for PeerTable {
    type Output = Option<Peer>;

    fn index(&self, pid: PeerId) -> &Option<Peer> {
        &self.slots[pid]
    }
}

impl IndexMut<PeerId> for PeerTable {
    /// The peer as a place to change: noted as touched, so its deadline
    /// and the rest are brought up to date at the next `settle`.
    fn index_mut(&mut self, pid: PeerId) -> &mut Option<Peer> {
        self.touch(pid);
        &mut self.slots[pid]
    }
}

impl PeerTable {
    fn touch(&mut self, pid: PeerId) {
        if !self.is_touched[pid] {
            self.is_touched[pid] = true;
            self.touched.push(pid);
        }
    }

    /// Slots, taken or free (peer ids are below this).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn get(&self, pid: PeerId) -> Option<&Peer> {
        self.slots.get(pid).and_then(Option::as_ref)
    }

    /// The peer for a change that moves no deadline, session or path
    /// (its AllowedIPs count): nothing is noted as touched.
    pub fn get_mut_untimed(&mut self, pid: PeerId) -> Option<&mut Peer> {
        self.slots.get_mut(pid).and_then(Option::as_mut)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Option<Peer>> {
        self.slots.iter()
    }

    /// Every peer for a change that moves no deadline and no session (the
    /// reorder windows' packet size): nothing is noted as touched.
    pub fn iter_mut_untimed(&mut self) -> impl Iterator<Item = &mut Peer> {
        self.slots.iter_mut().flatten()
    }

    /// Puts `peer` in a free slot (or a new one) and returns its id.
    pub fn insert(&mut self, peer: Peer) -> PeerId {
        let pid = match self.free.pop() {
            Some(free) => free,
            None => {
                self.slots.push(None);
                self.is_touched.push(false);
                self.session_position.push(None);
                self.mtu_says.push(PathMtuSays::Nothing);
                self.is_changed.push(false);
                self.slots.len() - 1
            }
        };
        self[pid] = Some(peer);
        pid
    }

    /// Empties the slot of `pid` for reuse.
    pub fn remove(&mut self, pid: PeerId) -> Option<Peer> {
        let peer = self[pid].take()?;
        self.free.push(pid);
        Some(peer)
    }

    /// Peers that have a session now (next, current or previous), as of
    /// the last [`settle`](Self::settle): the only ones whose paths carry
    /// anything, in no particular order.
    pub fn with_session(&self) -> &[PeerId] {
        &self.with_session
    }

    /// The earliest deadline of all peers, those changed since the last
    /// `settle` included.
    pub fn next_deadline(&self) -> Option<Instant> {
        let touched = self
            .touched
            .iter()
            .filter_map(|&pid| self.slots[pid].as_ref().and_then(deadline_of));
        self.deadlines.next().into_iter().chain(touched).min()
    }

    /// Takes every peer due at `now` out of the schedule into `due`
    /// (after bringing the touched ones up to date); `settle` puts them
    /// back with their next deadline once they have fired.
    pub fn take_due(&mut self, now: Instant, due: &mut Vec<PeerId>) {
        self.settle();
        while let Some(pid) = self.deadlines.pop_due(now) {
            due.push(pid);
            // Firing may leave its deadlines where they were: it is
            // scheduled again at the next settle either way.
            self.touch(pid);
        }
        self.woken = self.woken.saturating_add(due.len() as u64);
    }

    /// Brings the schedule, the session list and the MTU census up to
    /// date for every peer touched since the last call.
    pub fn settle(&mut self) {
        while let Some(pid) = self.touched.pop() {
            self.is_touched[pid] = false;
            if !std::mem::replace(&mut self.is_changed[pid], true) {
                self.changed.push(pid);
            }
            let peer = self.slots[pid].as_ref();
            let (deadline, session) = (peer.and_then(deadline_of), peer.is_some_and(has_session));
            let says = peer.map_or(PathMtuSays::Nothing, PathMtuSays::of);
            self.deadlines.set(pid, deadline);
            self.set_has_session(pid, session);
            if says != self.mtu_says[pid] {
                self.census.count(self.mtu_says[pid], false);
                self.census.count(says, true);
                self.mtu_says[pid] = says;
            }
            self.set_limits(pid);
        }
    }

    /// A peer's limits as the last refresh's mode has them (before the
    /// first refresh, none are set).
    fn set_limits(&mut self, pid: PeerId) {
        let (Some(mode), Some(p)) = (self.mtu_mode, self.slots[pid].as_mut()) else {
            return;
        };
        let limit = if mode.fixed {
            // Nothing longer than one datagram carries goes to anyone.
            let known = Device::peer_known_limit(p).map(|m| Device::limit_for(p, m));
            Some(known.map_or(MAX_PLPMTU, |m| m.min(MAX_PLPMTU))).filter(|&m| m < mode.default)
        } else {
            self.mtu_says[pid]
                .value(mode.default)
                .filter(|&m| m < mode.interface)
        };
        Device::set_limits(&mut self.mtu_notices, p, limit);
    }

    pub fn take_mtu_notices(&mut self, out: &mut Vec<MtuNotice>) {
        out.append(&mut self.mtu_notices);
    }

    /// Moves the peers changed since the last call into `out` (each
    /// once; a removed peer's slot too).
    pub fn take_changed(&mut self, out: &mut Vec<PeerId>) {
        self.settle();
        for &pid in &self.changed {
            self.is_changed[pid] = false;
        }
        out.append(&mut self.changed);
    }

    fn set_has_session(&mut self, pid: PeerId, has: bool) {
        match (self.session_position[pid], has) {
            (None, true) => {
                self.session_position[pid] = Some(self.with_session.len() as u32);
                self.with_session.push(pid);
            }
            (Some(i), false) => {
                self.with_session.swap_remove(i as usize);
                if let Some(&moved) = self.with_session.get(i as usize) {
                    self.session_position[moved] = Some(i);
                }
                self.session_position[pid] = None;
            }
            _ => {}
        }
    }

    /// The interface MTU for `default` (the largest any peer's paths
    /// carry, or `default` itself when `fixed`), and every peer's limits
    /// to go with it. The peers the device worked on since have theirs
    /// already; all peers with a session are walked only when the
    /// interface MTU or the mode changed.
    pub fn refresh_path_mtus(&mut self, default: usize, fixed: bool) -> usize {
        self.settle();
        let interface = if fixed {
            default
        } else {
            self.census.largest(default).unwrap_or(default)
        };
        let mode = MtuMode {
            default,
            fixed,
            interface,
        };
        if self.mtu_mode != Some(mode) {
            self.mtu_mode = Some(mode);
            for i in 0..self.with_session.len() {
                self.set_limits(self.with_session[i]);
            }
        }
        interface
    }

    /// The smallest MTU any peer's paths carry (`default` for stock peers
    /// and when no peer says anything).
    pub fn path_mtu_target(&self, default: usize) -> usize {
        self.census.smallest(default).unwrap_or(default)
    }
}

/// When a peer's next timer, reorder expiry or rate-limited release is due.
fn deadline_of(p: &Peer) -> Option<Instant> {
    let shaper = p.rate_limit.as_ref().and_then(|r| r.next_release());
    [p.timers.next(), p.reorder.poll_timeout(), shaper]
        .into_iter()
        .flatten()
        .min()
}

fn has_session(p: &Peer) -> bool {
    let k = &p.keypairs;
    k.current.is_some() || k.next.is_some() || k.previous.is_some()
}
