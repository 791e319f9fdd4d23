//! Packets split into fragments for a peer whose lines carry less than
//! the packets sent to it (the format and the joining are in
//! `crate::fragment`): sending the pieces, and joining what arrives.

use super::state::Device;
use crate::batch::PacketBatch;
use crate::fragment::{self, Joined};
use crate::peer::PeerId;
use std::time::Instant;

impl Device {
    /// Sends `packet` to `pid` as `plan`'s (count, data bytes per piece)
    /// fragments, each its own data message, into `out` (which has room
    /// for all of them).
    pub(super) fn send_fragments(
        &mut self,
        now: Instant,
        pid: PeerId,
        packet: &[u8],
        (count, chunk): (usize, usize),
        pad_cap: usize,
        out: &mut PacketBatch,
    ) {
        let p = self.peers[pid].as_mut().expect("caller checked");
        let id = p.next_fragment_id;
        p.next_fragment_id = id.wrapping_add(1);
        p.counters.fragmented_tx = p.counters.fragmented_tx.saturating_add(1);
        p.counters.fragments_tx = p.counters.fragments_tx.saturating_add(count as u64);
        for k in 0..count {
            let data = &packet[k * chunk..((k + 1) * chunk).min(packet.len())];
            self.seal_data(now, pid, out, pad_cap, |plain| {
                fragment::write(plain, id, k, count, k * chunk, data)
            });
        }
    }

    /// A fragment (`plain`) arrived from `pid` in session `session`: joined
    /// with the others of its packet. Returns the length of the packet, now
    /// whole at the start of `plain`'s buffer (`out`, which holds
    /// `out_room` bytes), or `None` while pieces are missing, for a
    /// fragment refused, or from a peer we never offered to join for.
    pub(super) fn join_fragment(
        &mut self,
        now: Instant,
        pid: PeerId,
        session: u32,
        out: &mut [u8],
        plain_len: usize,
    ) -> Option<usize> {
        if !self.extensions {
            return None;
        }
        let p = self.peers[pid].as_mut()?;
        match p.reassembly.insert(now, session, &out[..plain_len]) {
            Joined::Complete(len) if len <= out.len() => {
                p.counters.joined_rx = p.counters.joined_rx.saturating_add(1);
                Some(p.reassembly.take_into(out))
            }
            Joined::Complete(_) => {
                // Longer than our slots hold (the driver sizes them for
                // our MTU): dropped, counted as a piece given up.
                p.reassembly.discard_done();
                None
            }
            Joined::Pending | Joined::Refused => None,
        }
    }
}
