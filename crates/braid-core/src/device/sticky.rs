//! Sticky source addresses, as Linux WireGuard and wireguard-go keep them:
//! a datagram to a peer leaves from the local address the peer's latest
//! authenticated datagram on that line arrived at. On a host with several
//! addresses (one interface or more) the peer so sees one endpoint, the one
//! it writes to, not whatever the routing table prefers for the reply.
//!
//! The I/O layer reports each received datagram's local address with it
//! (`PacketBatch::local`); only authenticated ones are remembered here, so
//! a forged datagram cannot move where replies leave from. Every datagram
//! going out gets the remembered address of its (line, destination)
//! (`PacketBatch::set_locals`). When that address is gone, the I/O layer
//! sends without it (the routing table picks) and the driver tells
//! [`Device::forget_local_address`]; the peer's next datagram, to an
//! address still there, is remembered then.

use super::state::Device;
use crate::batch::{LocalAddr, PacketBatch};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// Entries kept at least; with many peers, a few per path (old ones of
/// peers that roamed stay until the table is full, then it starts over,
/// which costs each peer one reply from the routing table's pick).
const MIN_ENTRIES: usize = 1024;
const ENTRIES_PER_PEER: usize = 2 * crate::path::MAX_PATHS;

/// (line, remote) → the local address it last wrote to.
#[derive(Debug, Default)]
pub(super) struct StickySources {
    map: HashMap<(u16, SocketAddr), LocalAddr>,
    /// The entry noted last, in the map too.
    last_noted: Option<((u16, SocketAddr), LocalAddr)>,
}

impl Device {
    /// An authenticated datagram from `remote` arrived on `line` at `local`.
    pub(super) fn note_local_address(&mut self, line: u16, remote: SocketAddr, local: LocalAddr) {
        if local.ip.is_none() {
            return;
        }
        // Most datagrams come from the peer that sent the one before, to
        // the same address: no hashing then.
        if self.sticky.last_noted == Some(((line, remote), local)) {
            return;
        }
        self.sticky.last_noted = Some(((line, remote), local));
        let map = &mut self.sticky.map;
        if map.get(&(line, remote)) == Some(&local) {
            return;
        }
        let cap = MIN_ENTRIES.max(self.by_key.len().saturating_mul(ENTRIES_PER_PEER));
        if map.len() >= cap {
            map.clear();
        }
        map.insert((line, remote), local);
    }

    /// Gives every datagram of `batch` (and every copy) the local address
    /// its destination last wrote to.
    pub(super) fn set_local_addresses(&self, batch: &mut PacketBatch) {
        let map = &self.sticky.map;
        if map.is_empty() {
            return;
        }
        // A batch mostly goes to one or two places: one lookup per run.
        let mut last: Option<((u16, SocketAddr), LocalAddr)> = None;
        batch.set_locals(|line, remote| {
            let key = (line, remote);
            match last {
                Some((k, local)) if k == key => local,
                _ => {
                    let local = map.get(&key).copied().unwrap_or(LocalAddr::NONE);
                    last = Some((key, local));
                    local
                }
            }
        });
    }

    /// `ip` is no longer ours (the I/O layer could not send from it):
    /// datagrams that would have left from it leave from the routing
    /// table's pick until the peer writes to an address we have.
    pub fn forget_local_address(&mut self, ip: IpAddr) {
        self.sticky.map.retain(|_, local| local.ip != Some(ip));
        self.sticky.last_noted = None;
    }

    /// The local address datagrams to `remote` on `line` leave from (for
    /// tests and `braid show`).
    pub fn local_address_for(&self, line: u16, remote: SocketAddr) -> Option<IpAddr> {
        self.sticky.map.get(&(line, remote)).and_then(|l| l.ip)
    }
}
