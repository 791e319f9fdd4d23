//! `RateLimit =` in the device: configuration, and the timer side of the
//! shaper queues (outbound packets leave through `poll_transmit`, inbound
//! ones through `poll_tun`, when their tokens are due).

use super::state::Device;
use crate::batch::{PacketBatch, HEADROOM};
use crate::peer::{Peer, PeerId};
use std::net::SocketAddr;
use std::time::Instant;

impl Device {
    /// `RateLimit =`: bits per second in each direction; `None` lifts it.
    pub fn set_rate_limit(&mut self, pid: PeerId, rate_bits: Option<u64>) {
        if let Some(p) = self.peers[pid].as_mut() {
            p.rate_limit = rate_bits.map(crate::shaper::RateLimit::new);
        }
        self.peers.settle();
    }

    /// From `handle_timeout`: queues whose head is due get their peer onto
    /// the lists that `poll_transmit` and `poll_tun` work through.
    pub(super) fn schedule_shaped(&mut self, now: Instant, pid: PeerId) {
        let Some(r) = self.peers[pid].as_ref().and_then(|p| p.rate_limit.as_ref()) else {
            return;
        };
        let due = |t: Option<Instant>| t.is_some_and(|t| t <= now);
        let (out_due, in_due) = (
            due(r.outbound.next_release()),
            due(r.inbound.next_release()),
        );
        if out_due {
            self.schedule_flush(pid);
        }
        if in_due {
            self.reorder_ready_add(pid);
        }
    }
}

/// Moves the inbound packets of `p` that are due at `clock` into `out` (as
/// TUN packets); true if more are due than fitted.
pub(super) fn release_inbound(p: &mut Peer, clock: Instant, out: &mut PacketBatch) -> bool {
    let Some(r) = p.rate_limit.as_mut() else {
        return false;
    };
    while !out.is_full() {
        let Some(packet) = r.inbound.release(clock) else {
            break;
        };
        out.push_with(HEADROOM, SocketAddr::from(([0, 0, 0, 0], 0)), |b| {
            b[..packet.len()].copy_from_slice(&packet);
            packet.len()
        });
        r.inbound.recycle(packet);
    }
    r.inbound.next_release().is_some_and(|t| t <= clock)
}
