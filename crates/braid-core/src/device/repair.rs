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
    /// session with local index `session`: those still kept and lost by a
    /// line that loses of its own are queued for `poll_transmit` on the
    /// quickest line; for the others the peer is told at once
    /// (`NoRepair`), so its window does not wait a round trip for them.
    pub(super) fn queue_resends(
        &mut self,
        now: Instant,
        pid: PeerId,
        session: u32,
        from: u64,
        count: u16,
    ) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        let Some(path) = p.paths.get(p.quickest_path()) else {
            return;
        };
        let (line, remote) = (path.line, path.remote);
        let count = u64::from(count).min(MAX_PER_REQUEST);
        // Bit i: path i loses packets of its own.
        let lossy = p
            .paths
            .iter()
            .take(crate::path::MAX_PATHS)
            .enumerate()
            .filter(|(_, x)| x.own_loss() >= OWN_LOSS)
            .fold(0u8, |m, (i, _)| m | 1 << i);
        // Runs of declined counters, each answered with one message.
        let mut declined: Option<(u64, u64)> = None;
        for counter in from..from.saturating_add(count) {
            let Some(p) = self.peers[pid].as_mut() else {
                return;
            };
            let declines = p.sent_copies.as_mut().is_none_or(|copies| {
                copies.declines(session, counter, |i| i < 8 && lossy & (1 << i) != 0)
            });
            if declines {
                declined = match declined {
                    Some((f, t)) if t == counter => Some((f, counter + 1)),
                    other => {
                        self.decline_resends(now, pid, (line, remote), other);
                        Some((counter, counter + 1))
                    }
                };
                continue;
            }
            if self.resends.len() >= MAX_QUEUED_RESENDS {
                self.counters.control_queue_full =
                    self.counters.control_queue_full.saturating_add(1);
                break;
            }
            self.resends.push_back(QueuedResend {
                pid,
                session,
                counter,
                line,
                remote,
            });
        }
        self.decline_resends(now, pid, (line, remote), declined);
    }

    /// Tells the peer that counters `from..to` will not be re-sent.
    fn decline_resends(
        &mut self,
        now: Instant,
        pid: PeerId,
        (line, remote): (u16, std::net::SocketAddr),
        range: Option<(u64, u64)>,
    ) {
        let Some((from, to)) = range else { return };
        // Within MAX_PER_REQUEST of one request: fits a u16.
        let count = u16::try_from(to - from).unwrap_or(u16::MAX);
        self.queue_ext(now, pid, line, remote, ExtMessage::NoRepair { from, count });
    }

    /// The peer will not re-send counters `from..from + count` of the
    /// session with local index `session`: the window gives their gaps up.
    pub(super) fn repairs_declined(
        &mut self,
        now: Instant,
        pid: PeerId,
        session: u32,
        from: u64,
        count: u16,
    ) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        if p.reorder_session != Some(session) {
            return;
        }
        p.reorder
            .repairs_declined(now, from, from.saturating_add(u64::from(count)));
        if p.reorder.ready_packets() > 0 {
            self.reorder_ready_add(pid);
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
