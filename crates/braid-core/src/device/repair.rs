//! Repairs between braid peers whose lines are bonded (see `crate::repair`):
//! asking the peer for what the reorder window found lost, and sending
//! again what the peer asks for, on the quickest line.

use super::state::{Device, QueuedResend};
use crate::batch::PacketBatch;
use crate::ext::ExtMessage;
use crate::peer::PeerId;
use crate::repair::MAX_PER_REQUEST;
use std::time::{Duration, Instant};

use crate::repair::OWN_LOSS;
/// Re-sends waiting for `poll_transmit`, at most.
const MAX_QUEUED_RESENDS: usize = 512;
/// Added to the quickest line's round trip (and its deviation, twice) for
/// the reorder window's repair wait: the peer's timer and batching.
const REPAIR_MARGIN: Duration = Duration::from_millis(5);

impl Device {
    /// Brings the reorder window's repair wait up to date: the quickest
    /// line's round trip plus a margin while the lines are bonded, none
    /// otherwise.
    pub(super) fn update_repair_wait(&mut self, pid: PeerId) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        // The request and the copy both queue behind data on that line, and
        // the smoothed round trip lags a queue that grows: a repair that
        // comes after the wait is dropped as Under Window, a loss the inner
        // TCP sees after all. Only gaps a repaired line may have carried
        // are asked for, so a generous wait costs little.
        let wait = p.repairs_losses().then(|| {
            let quickest = p.paths.get(p.quickest_path());
            let rtt = quickest.and_then(|q| q.srtt).unwrap_or_default();
            let var = quickest.map_or(Duration::ZERO, |q| q.rttvar);
            rtt.saturating_add(var.saturating_mul(4))
                .saturating_add(REPAIR_MARGIN)
        });
        p.reorder.set_repair_wait(wait);
    }

    /// Asks the peer for the counters the reorder window found lost.
    pub(super) fn request_repairs(&mut self, now: Instant, pid: PeerId) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        let Some(path) = p.paths.get(p.quickest_path()) else {
            return;
        };
        let (line, remote) = (path.line, path.remote);
        while let Some((from, to)) = self.peers[pid]
            .as_mut()
            .and_then(|p| p.reorder.take_repair_request())
        {
            let count = to.saturating_sub(from).min(MAX_PER_REQUEST) as u16;
            self.queue_ext(now, pid, line, remote, ExtMessage::Repair { from, count });
        }
    }

    /// The peer asks for `count` data messages from counter `from` of the
    /// session with local index `session`: queued for `poll_transmit` on
    /// the quickest line, those still kept.
    pub(super) fn queue_resends(&mut self, pid: PeerId, session: u32, from: u64, count: u16) {
        let Some(p) = self.peers[pid].as_ref() else {
            return;
        };
        if p.sent_copies.is_none() {
            return;
        }
        let Some(path) = p.paths.get(p.quickest_path()) else {
            return;
        };
        let (line, remote) = (path.line, path.remote);
        let count = u64::from(count).min(MAX_PER_REQUEST);
        for counter in from..from.saturating_add(count) {
            if self.resends.len() >= MAX_QUEUED_RESENDS {
                self.counters.control_queue_full =
                    self.counters.control_queue_full.saturating_add(1);
                return;
            }
            self.resends.push_back(QueuedResend {
                pid,
                session,
                counter,
                line,
                remote,
            });
        }
    }

    pub(super) fn has_resends(&self) -> bool {
        !self.resends.is_empty()
    }

    /// Seals the queued re-sends into `out`: the kept copy, sealed again by
    /// its session (the same counter, so the same bytes as the first time).
    pub(super) fn transmit_resends(&mut self, now: Instant, out: &mut PacketBatch) {
        while !out.is_full() {
            let Some(q) = self.resends.pop_front() else {
                return;
            };
            let Some(p) = self.peers[q.pid].as_mut() else {
                continue;
            };
            let Some((_, kp)) = p.keypairs.find_mut(q.session) else {
                continue;
            };
            if !kp.is_valid(now) {
                continue;
            }
            let keys = kp.keys().clone();
            let Some(copies) = p.sent_copies.as_mut() else {
                continue;
            };
            let paths = &p.paths;
            let lossy = |i: usize| paths.get(i).is_some_and(|x| x.own_loss() >= OWN_LOSS);
            let Some(copy) = copies.take_for_resend(now, q.session, q.counter, lossy) else {
                continue;
            };
            if copy.len() > out.stride() {
                continue;
            }
            out.push_with(0, q.remote, |b| {
                b[..copy.len()].copy_from_slice(copy);
                keys.seal(&mut b[..copy.len()]);
                copy.len()
            });
            out.set_line(out.len() - 1, q.line);
            if let Some(path) = p
                .paths
                .iter_mut()
                .find(|x| x.line == q.line && x.remote == q.remote)
            {
                path.counters.resent = path.counters.resent.saturating_add(1);
            }
        }
    }
}
