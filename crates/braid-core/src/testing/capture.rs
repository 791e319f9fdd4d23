//! What the simulator records: every datagram a device sent
//! ([`Datagram`], in `Net::capture`), every copy a line or wire handed
//! over and what the receiver made of it ([`Arrival`], in
//! `Net::arrivals`), and the check every packet that reaches a TUN passes
//! ([`check_tun_packet`]).

use super::fixtures::NodeId;
use crate::device::Device;
use std::net::{Ipv4Addr, SocketAddr};

/// A datagram a device sent, as it left the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    pub from: NodeId,
    /// The sender's line (socket) it went out on.
    pub line: u16,
    /// That socket's address (unspecified if the node has no such socket).
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The node owning `dst`; `None` for an address outside the net (the
    /// datagram is captured, then dropped).
    pub to: Option<NodeId>,
    pub bytes: Vec<u8>,
}

impl Datagram {
    /// The WireGuard message type, as the sender wrote it.
    pub fn kind(&self) -> u8 {
        self.bytes.first().copied().unwrap_or(0)
    }
}

/// One copy of a datagram handed to its receiver by a line or a wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub from: NodeId,
    pub to: NodeId,
    /// The line that carried it (`None`: the zero-delay wire).
    pub line: Option<usize>,
    /// The message type as sent (a corrupted copy may read otherwise).
    pub kind: u8,
    pub len: usize,
    /// The line flipped a bit of this copy.
    pub corrupted: bool,
    /// The line's second copy of a duplicated datagram.
    pub duplicate: bool,
    /// Packets the receiver wrote to its TUN for it (released reorder
    /// window packets included).
    pub tun: usize,
    /// Why the receiver refused it, if it did: what its counters grew by.
    pub refused: Refusals,
}

/// Counters a receiver raises when it refuses a datagram (device-wide, and
/// summed over its peers).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Refusals {
    /// Failed authentication (peers' `auth_failed`).
    pub auth_failed: u64,
    /// A counter seen before (peers' `replayed`).
    pub replayed: u64,
    /// A receiver index the device does not have.
    pub unknown_index: u64,
    /// No WireGuard message (type or length wrong).
    pub invalid: u64,
}

impl Refusals {
    /// The counters of `device` now.
    pub fn of(device: &Device) -> Refusals {
        let mut r = Refusals {
            unknown_index: device.counters.unknown_index,
            invalid: device.counters.invalid_datagrams,
            ..Refusals::default()
        };
        for pid in device.peer_ids() {
            if let Some(p) = device.peer(pid) {
                r.auth_failed += p.counters.auth_failed;
                r.replayed += p.counters.replayed;
            }
        }
        r
    }

    /// What grew from `before` to `self`.
    pub fn since(self, before: Refusals) -> Refusals {
        Refusals {
            auth_failed: self.auth_failed - before.auth_failed,
            replayed: self.replayed - before.replayed,
            unknown_index: self.unknown_index - before.unknown_index,
            invalid: self.invalid - before.invalid,
        }
    }

    /// How many reasons there were (one per refused datagram).
    pub fn total(self) -> u64 {
        self.auth_failed + self.replayed + self.unknown_index + self.invalid
    }
}

impl std::ops::AddAssign for Refusals {
    fn add_assign(&mut self, o: Refusals) {
        self.auth_failed += o.auth_failed;
        self.replayed += o.replayed;
        self.unknown_index += o.unknown_index;
        self.invalid += o.invalid;
    }
}

/// Cryptokey routing, as the TUN sees it: whatever a device writes there
/// is a whole IPv4 packet (its header's length) from one of `sources`, the
/// tunnel addresses of the other nodes. Panics otherwise.
pub fn check_tun_packet(packet: &[u8], sources: &[Ipv4Addr]) {
    assert!(
        packet.len() >= 20,
        "runt packet reached the TUN: {packet:?}"
    );
    assert_eq!(
        crate::ip::version(packet),
        Some(4),
        "non-IPv4 packet from an IPv4-only peer"
    );
    let header = crate::ip::Ipv4::new(packet).expect("checked above");
    let src = Ipv4Addr::from(header.src());
    assert!(
        sources.contains(&src),
        "packet with a foreign source {src} reached the TUN"
    );
    assert_eq!(
        header.total_len(),
        packet.len(),
        "TUN packet length differs from its header"
    );
}
