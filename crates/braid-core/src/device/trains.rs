//! Probe trains: a line that carries little is measured every few seconds
//! by a probe, filler sent back to back and a second probe (see
//! `path::estimate`), so its capacity estimate is fresh when the scheduler
//! needs the line again.

use super::state::Device;
use crate::batch::PacketBatch;
use crate::ext::{self, ExtMessage, ProbeBody};
use crate::messages::DATA_MIN_LEN;
use crate::path::Mode;
use crate::peer::PeerId;
use std::net::SocketAddr;
use std::time::Instant;

/// Filler payload per message: within the 1280-byte minimum MTU.
const FILLER_LEN: usize = 1200;
/// Train messages waiting for `poll_transmit`, at most (a train is at most
/// 50).
const MAX_QUEUED_TRAIN: usize = 256;
/// The peer sends this much on its other lines (bytes per second) before a
/// quiet line is worth a train: with nothing to send, nothing is planned.
const BUSY: f64 = 125_000.0;

/// One message of a train, sealed when it is sent so the messages leave
/// back to back in one batch.
pub(super) struct TrainPart {
    pid: PeerId,
    line: u16,
    remote: SocketAddr,
    part: Part,
}

enum Part {
    Probe(ProbeBody),
    Filler { path: u8 },
}

impl Device {
    /// The probe round of `pid` at `now`: a train on each line of an
    /// aggregate bond that carries little while the others are busy.
    pub(super) fn probe_trains(&mut self, now: Instant, pid: PeerId) {
        let Some(p) = self.peers[pid].as_ref() else {
            return;
        };
        if p.mode != Mode::Aggregate || !p.speaks_braid() {
            return;
        }
        let up = p.paths.iter().filter(|x| x.is_up()).count();
        if up < 2 {
            return;
        }
        let total: f64 = p.paths.iter().map(|x| x.outbound.send_rate()).sum();
        let mono_us = self.mono_us(now);
        for i in 0..p.paths.len().min(crate::path::MAX_PATHS) {
            let Some(p) = self.peers[pid].as_mut() else {
                return;
            };
            let path = &mut p.paths[i];
            let busy = total - path.outbound.send_rate() > BUSY;
            if !path.is_up() || !path.outbound.wants_train(now, busy) {
                continue;
            }
            let fillers = path.outbound.train_bytes().div_ceil(FILLER_LEN);
            if self.trains.len() + fillers + 2 > MAX_QUEUED_TRAIN {
                return;
            }
            let (line, remote) = (path.line, path.remote);
            let probe = |path: &mut crate::path::Path| {
                let seq = path.take_probe_seq_at(now);
                let body = ProbeBody {
                    path: i as u8, // i < MAX_PATHS
                    seq,
                    sent_us: mono_us,
                    rx_probes: path.probes_received as u32,
                };
                (seq, body)
            };
            let (first, open) = probe(path);
            let (last, close) = probe(path);
            path.outbound.on_train_sent(now, first, last);
            let part = |part| TrainPart {
                pid,
                line,
                remote,
                part,
            };
            self.trains.push_back(part(Part::Probe(open)));
            for _ in 0..fillers {
                self.trains.push_back(part(Part::Filler { path: i as u8 }));
            }
            self.trains.push_back(part(Part::Probe(close)));
        }
    }

    pub(super) fn has_trains(&self) -> bool {
        !self.trains.is_empty()
    }

    /// Seals the queued train messages into `out`, in order.
    pub(super) fn transmit_trains(&mut self, now: Instant, out: &mut PacketBatch) {
        while !out.is_full() {
            let Some(t) = self.trains.pop_front() else {
                return;
            };
            let Some(kp) = self.peers[t.pid]
                .as_mut()
                .and_then(|p| p.keypairs.current.as_mut())
                .filter(|k| k.is_valid(now))
            else {
                continue;
            };
            let len = match t.part {
                Part::Probe(_) => ext::MAX_PAYLOAD,
                Part::Filler { .. } => FILLER_LEN,
            };
            if out.stride() < DATA_MIN_LEN + len {
                continue; // the I/O layer's slots cannot hold it
            }
            out.push_with(0, t.remote, |b| {
                let payload = &mut b[crate::messages::DATA_HEADER_LEN..];
                let n = match t.part {
                    Part::Probe(body) => {
                        let mut buf = [0u8; ext::MAX_PAYLOAD];
                        let n = ExtMessage::Probe(body).encode(&mut buf);
                        payload[..n].copy_from_slice(&buf[..n]);
                        n
                    }
                    Part::Filler { path } => {
                        let mut head = [0u8; ext::MAX_PAYLOAD];
                        let n = ExtMessage::Filler { path }.encode(&mut head);
                        payload[..n].copy_from_slice(&head[..n]);
                        payload[n..FILLER_LEN].fill(0);
                        FILLER_LEN
                    }
                };
                kp.seal_ext_in_place(b, n)
            });
            out.set_line(out.len() - 1, t.line);
        }
    }
}
