//! Parity between bonded braid peers (see `crate::fec`): groups of what
//! goes on a line that loses packets of its own, their parity sent on the
//! quickest line, and lost messages rebuilt from it.

use super::state::{Device, QueuedParity};
use crate::batch::PacketBatch;
use crate::fec::{Piece, GROUP};
use crate::messages::{DATA_HEADER_LEN, DATA_MIN_LEN};
use crate::peer::PeerId;
use crate::repair::OWN_LOSS;
use std::time::Instant;

/// Parity pieces waiting for `poll_transmit`, at most.
const MAX_QUEUED_PARITY: usize = 256;
/// Parity may take at most this share of the quickest line's capacity, as
/// re-sends take at most a twentieth of what is sent (`crate::repair`).
/// A group's parity is an eighth of its bytes, so a line gets parity only
/// while it sends less than `PARITY_BUDGET × GROUP` (0.4) times the
/// quickest line's capacity: the 25 Mbit/s line of a 100 + 25 bond, not
/// one of two 200 Mbit/s lines (where a parity stream of 25 Mbit/s for a
/// line that lost a few tenths of a percent cost four bbr streams 4
/// Mbit/s, and a loss is re-sent within a few milliseconds anyway).
const PARITY_BUDGET: f64 = 0.05;

impl Device {
    /// Data message `counter` of `session` (padded plaintext `plain`) went
    /// to `pid` on its path `path`: added to that path's parity group when
    /// the line loses of its own, is not the one parity goes on, and its
    /// parity fits `PARITY_BUDGET`.
    pub(super) fn protect_sent(
        &mut self,
        now: Instant,
        pid: PeerId,
        (session, counter): (u32, u64),
        path: usize,
        plain: &[u8],
    ) {
        let Some(p) = self.peers[pid].as_mut().filter(|_| self.parity) else {
            return;
        };
        if p.parity_session != Some(session) {
            return;
        }
        // Also while the line queues: what a slower line drops when its
        // queue overflows is the scheduler's to correct (its clock follows
        // the probes' echoes), not the inner TCP's. The inner TCP still
        // sees congestion on the quickest line, which parity never covers.
        // (Checked first: most packets go on clean lines, and finding the
        // quickest line looks at every path.)
        let protected = p.paths.get(path).is_some_and(|x| x.own_loss() >= OWN_LOSS);
        if !protected {
            return;
        }
        let quickest = p.quickest_path();
        // The quickest line's capacity is at least what it carries now: in
        // its start-up the estimate is a guess far below it.
        let quick = &p.paths[quickest].outbound;
        let capacity = quick.rate().max(quick.send_rate());
        if path == quickest
            || p.paths[path].outbound.send_rate() > PARITY_BUDGET * GROUP as f64 * capacity
        {
            return;
        }
        let (line, remote) = (p.paths[quickest].line, p.paths[quickest].remote);
        let queue = &mut self.parities;
        let free = &mut self.parity_buffers;
        p.parity_out.get_or_insert_with(Default::default).add(
            now,
            session,
            path,
            counter,
            plain,
            |payload| {
                if queue.len() >= MAX_QUEUED_PARITY {
                    return;
                }
                let mut bytes = free.pop().unwrap_or_default();
                bytes.clear();
                bytes.extend_from_slice(payload);
                queue.push_back(QueuedParity {
                    pid,
                    session,
                    line,
                    remote,
                    payload: bytes,
                });
            },
        );
    }

    pub(super) fn has_parities(&self) -> bool {
        !self.parities.is_empty()
    }

    /// Seals the queued parity pieces into `out`, each in the session
    /// whose counters it names (dropped if that is no longer current).
    pub(super) fn transmit_parities(&mut self, now: Instant, out: &mut PacketBatch) {
        while !out.is_full() {
            let Some(q) = self.parities.pop_front() else {
                return;
            };
            let kp = self.peers[q.pid]
                .as_mut()
                .and_then(|p| p.keypairs.current.as_mut())
                .filter(|k| k.is_valid(now) && k.local_index == q.session);
            if let Some(kp) = kp.filter(|_| out.stride() >= DATA_MIN_LEN + q.payload.len()) {
                let mut len = 0;
                out.push_with(0, q.remote, |b| {
                    len = kp.seal_ext(&q.payload, b);
                    len
                });
                out.set_line(out.len() - 1, q.line);
                // Counted in the line's sent bytes, as its data is (bytes,
                // not packets: the line's loss is counted in data messages).
                let p = self.peers[q.pid].as_mut().expect("has a session");
                if let Some(path) = p
                    .paths
                    .iter_mut()
                    .find(|x| x.line == q.line && x.remote == q.remote)
                {
                    path.counters.tx_bytes = path.counters.tx_bytes.saturating_add(len as u64);
                }
            }
            if self.parity_buffers.len() < MAX_QUEUED_PARITY {
                self.parity_buffers.push(q.payload);
            }
        }
    }

    /// A parity piece from `pid`, authenticated in session `session`,
    /// arrived on our path `at`.
    pub(super) fn receive_parity(
        &mut self,
        now: Instant,
        pid: PeerId,
        session: u32,
        (at, wire_len): (usize, usize),
        piece: &Piece,
    ) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        // Counted with the line's data, as the sender counts it, so the
        // line's measured rate includes what parity takes of it.
        let c = &mut p.paths[at].counters;
        c.data_rx_bytes = c.data_rx_bytes.saturating_add(wire_len as u64);
        if p.reorder_session.is_some_and(|s| s != session) {
            return;
        }
        // Our path that the group's line reaches us on; without a word
        // from the peer on which that is, any but the one parity came on.
        let path = p
            .paths
            .iter()
            .position(|x| x.peer_index == Some(piece.path))
            .or_else(|| (p.paths.len() == 2).then_some(1 - at.min(1)));
        let Some(path) = path else {
            return;
        };
        p.parity_in
            .get_or_insert_with(Default::default)
            .add_piece(now, session, path, piece);
        self.give_back_rebuilt(now, pid, session);
    }

    /// Delivers every message of `session` that the parity received from
    /// `pid` gives back now (through the reorder window, as if it had
    /// arrived on its line).
    pub(super) fn give_back_rebuilt(&mut self, now: Instant, pid: PeerId, session: u32) {
        let mut scratch = std::mem::take(&mut self.rebuild_scratch);
        while let Some((counter, path, len)) = self.next_rebuilt(now, pid, session, &mut scratch) {
            self.deliver_plaintext(now, pid, (session, counter), path, &mut scratch, len, false);
        }
        self.rebuild_scratch = scratch;
    }

    /// The next message of `session` rebuilt from `pid`'s parity, past
    /// the replay check, at `DATA_HEADER_LEN` in `scratch` (with room for
    /// what decompression may make of it): its counter, path and length.
    fn next_rebuilt(
        &mut self,
        now: Instant,
        pid: PeerId,
        session: u32,
        scratch: &mut Vec<u8>,
    ) -> Option<(u64, usize, usize)> {
        let mtu = self.mtu;
        let p = self.peers[pid].as_mut()?;
        let (_, kp) = p.keypairs.find_mut(session)?;
        let d = p.parity_in.as_mut()?;
        loop {
            let (counter, path, plain) = d.rebuild(now, session, |c| !kp.may_accept(c))?;
            if !kp.accept(counter) {
                continue;
            }
            let len = plain.len();
            scratch.clear();
            scratch.resize(DATA_HEADER_LEN + len.max(mtu) + DATA_MIN_LEN, 0);
            scratch[DATA_HEADER_LEN..DATA_HEADER_LEN + len].copy_from_slice(plain);
            return Some((counter, path, len));
        }
    }
}
