//! The outgoing path: IP packets from the TUN become data messages in place;
//! packets without a session wait in the peer's staging queue.

use super::jobs::CryptoJobs;
use super::multipath::Destinations;
use super::state::Device;
use crate::batch::{PacketBatch, HEADROOM};
use crate::consts::*;
use crate::ip::Ip;
use crate::messages::{DATA_HEADER_LEN, DATA_MIN_LEN};
use crate::path::MAX_PATHS;
use crate::peer::PeerId;
use crate::shaper::Verdict;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Instant;

const UNSPECIFIED: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// WireGuard pads plaintext to a multiple of 16, but never beyond the MTU.
fn padded_len(len: usize, mtu: usize) -> usize {
    // No multiple of 16 above a length within 15 of usize::MAX: no padding.
    let rounded = len
        .checked_next_multiple_of(PADDING_MULTIPLE)
        .unwrap_or(len);
    rounded.min(mtu).max(len)
}

impl Device {
    /// Turns every IP packet of `batch` (read from the TUN at offset
    /// `HEADROOM`) into a data message for its peer, in place. Packets that
    /// cannot be sent now are staged or dropped; their slots are consumed.
    pub fn encapsulate(&mut self, now: Instant, batch: &mut PacketBatch) {
        let mut jobs = std::mem::take(&mut self.scratch_jobs);
        self.prepare_encapsulate(now, batch, &mut jobs);
        jobs.seal(batch);
        self.scratch_jobs = jobs;
    }

    /// `encapsulate` without the encryption: headers, counters, padding and
    /// destinations are in place, and `jobs` holds what
    /// [`CryptoJobs::seal`] must do (without the device) before the batch
    /// may be sent.
    pub fn prepare_encapsulate(
        &mut self,
        now: Instant,
        batch: &mut PacketBatch,
        jobs: &mut CryptoJobs,
    ) {
        jobs.clear();
        for i in 0..batch.len() {
            let (buf, offset, len) = batch.slot_parts_mut(i);
            if len == 0 {
                continue;
            }
            debug_assert_eq!(offset, HEADROOM, "TUN packets are read at HEADROOM");
            let packet = &buf[offset..offset + len];
            // The peer the packet is for, by its destination address.
            let destination =
                Ip::new(packet).and_then(|ip| self.send_route.lookup(&self.allowed, &ip, false));
            let Some(pid) = destination else {
                self.counters.no_route = self.counters.no_route.saturating_add(1);
                batch.consume(i);
                continue;
            };
            let limit = self.peers[pid].as_ref().and_then(|p| p.mtu_limit);
            // Longer than this peer's paths carry (the interface MTU is the
            // largest any peer's carry): answered with ICMP, not sent.
            if let Some(l) = limit.filter(|&l| len > l) {
                if self.queue_too_big(packet, l) {
                    let p = self.peers[pid].as_mut().expect("routed peer exists");
                    p.counters.too_big = p.counters.too_big.saturating_add(1);
                    batch.consume(i);
                    continue;
                }
            }
            let lz4 = self.offers_lz4(pid);
            let padding = self.padding_mtu();
            let p = self.peers[pid].as_mut().expect("routed peer exists");
            // Padded no further than the peer's lines carry.
            let mtu = [limit, p.fragment_payload]
                .into_iter()
                .flatten()
                .fold(padding, usize::min);
            // Longer than the lines carry, to a peer that joins fragments:
            // it goes in pieces, through the staging queue (so what comes
            // after it waits its turn).
            let split = p.fragment_payload.is_some_and(|c| len > c);
            match p.rate_limit.as_mut().map(|r| r.outbound.offer(now, packet)) {
                Some(Verdict::Dropped) => {
                    p.counters.rate_dropped_tx = p.counters.rate_dropped_tx.saturating_add(1);
                    batch.consume(i);
                    continue;
                }
                // Copied into the shaper; poll_transmit sends it when due.
                Some(Verdict::Queued) => {
                    batch.consume(i);
                    continue;
                }
                Some(Verdict::Pass) | None => {}
            }
            let sendable = p.staged.is_empty()
                && !p.paths.is_empty()
                && p.keypairs.current.as_ref().is_some_and(|k| k.is_valid(now));
            if !sendable || split {
                p.stage(packet);
                batch.consume(i);
                self.schedule_flush(pid);
                continue;
            }
            let kp = p.keypairs.current.as_mut().expect("checked above");
            let mut len = len;
            if lz4 && p.lz4_session == Some(kp.local_index) {
                if let Some(n) = self.lz4.compress_in_place(&mut buf[offset..], len) {
                    len = n;
                    p.counters.compressed_tx = p.counters.compressed_tx.saturating_add(1);
                }
            }
            let datagram_len = kp.prepare_seal(buf, len, padded_len(len, mtu));
            jobs.push(i, pid, kp.keys());
            let session = kp.local_index;
            let mut dests: Destinations = [(0, UNSPECIFIED); MAX_PATHS];
            let n = self.destinations(now, pid, datagram_len, &mut dests);
            let p = self.peers[pid].as_mut().expect("routed peer exists");
            if p.repairs_losses() {
                let counter = crate::messages::read_u64(buf, crate::messages::data::COUNTER);
                let path = p.last_path;
                p.sent_copies.get_or_insert_with(Default::default).store(
                    session,
                    counter,
                    path,
                    &buf[..datagram_len],
                );
                let plain = &buf[DATA_HEADER_LEN..datagram_len - crate::crypto::TAG_LEN];
                self.protect_sent(now, pid, (session, counter), path, plain);
            }
            batch.set_packet(i, 0, datagram_len, dests[0].1);
            batch.set_line(i, dests[0].0);
            for &(line, addr) in &dests[1..n] {
                batch.add_copy(i, line, addr);
            }
            self.after_data_sent(now, pid, datagram_len);
        }
        self.set_local_addresses(batch);
        self.peers.settle();
    }

    /// Seals the plaintext `write` puts at the start of the buffer it is
    /// given (returning its length) as `pid`'s next data message, padded
    /// no further than `pad_cap`, into the next slot of `out` (which has
    /// room), addressed to the paths the peer's Mode picks.
    pub(super) fn seal_data(
        &mut self,
        now: Instant,
        pid: PeerId,
        out: &mut PacketBatch,
        pad_cap: usize,
        write: impl FnOnce(&mut [u8]) -> usize,
    ) {
        let p = self.peers[pid].as_mut().expect("caller checked");
        let kp = p.keypairs.current.as_mut().expect("caller checked");
        let mut sent = 0;
        out.push_with(0, UNSPECIFIED, |b| {
            let len = write(&mut b[DATA_HEADER_LEN..]);
            sent = kp.seal_in_place(b, len, padded_len(len, pad_cap));
            sent
        });
        let slot = out.len() - 1;
        let mut dests: Destinations = [(0, UNSPECIFIED); MAX_PATHS];
        let n = self.destinations(now, pid, sent, &mut dests);
        let offset = out.offset(slot);
        out.set_packet(slot, offset, sent, dests[0].1);
        out.set_line(slot, dests[0].0);
        for &(line, addr) in &dests[1..n] {
            out.add_copy(slot, line, addr);
        }
        self.after_data_sent(now, pid, sent);
    }

    /// Timers and counters after a data message left; may start a rekey.
    fn after_data_sent(&mut self, now: Instant, pid: PeerId, datagram_len: usize) {
        let p = self.peers[pid].as_mut().expect("caller checked");
        p.counters.tx_bytes = p.counters.tx_bytes.saturating_add(datagram_len as u64);
        p.counters.tx_packets = p.counters.tx_packets.saturating_add(1);
        if !p.timers.is_set(crate::timers::Timer::NewHandshake) {
            let jitter = self.jitter();
            self.peers[pid]
                .as_mut()
                .expect("caller checked")
                .on_data_sent(now, jitter);
        }
        let rekey_after_time = self.rekey_after_time;
        let p = self.peers[pid].as_mut().expect("caller checked");
        p.on_authenticated_sent();
        p.on_authenticated_traversal(now);
        let stale = p.keypairs.current.as_ref().is_some_and(|k| {
            k.initiator
                && (k.messages_sent() > REKEY_AFTER_MESSAGES || k.age(now) > rekey_after_time)
        });
        if stale {
            self.initiate(now, pid, false);
        }
    }

    /// Remembers that a peer's staged packets should go out once possible
    /// and starts a handshake if there is no usable session.
    pub(super) fn schedule_flush(&mut self, pid: PeerId) {
        if let Some(p) = self.peers[pid].as_mut() {
            if !std::mem::replace(&mut p.flush_queued, true) {
                self.pending_flush.push(pid);
            }
        }
    }

    /// Sends a keepalive (an empty data message), or the staged packets if
    /// there are any; without a session, starts a handshake instead.
    pub(super) fn send_keepalive(&mut self, now: Instant, pid: PeerId) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        if !p.staged.is_empty() {
            self.schedule_flush(pid);
            return;
        }
        let usable = p.keypairs.current.as_ref().is_some_and(|k| k.is_valid(now));
        if !usable || p.paths.is_empty() {
            self.initiate(now, pid, false);
            return;
        }
        let kp = p.keypairs.current.as_mut().expect("checked above");
        let mut msg = [0u8; DATA_MIN_LEN];
        let len = kp.seal_in_place(&mut msg, 0, 0);
        p.counters.keepalives_sent = p.counters.keepalives_sent.saturating_add(1);
        p.counters.tx_bytes = p.counters.tx_bytes.saturating_add(len as u64);
        p.on_authenticated_sent();
        p.on_authenticated_traversal(now);
        let mut dests: Destinations = [(0, UNSPECIFIED); MAX_PATHS];
        let n = self.destinations(now, pid, len, &mut dests);
        for &(line, addr) in &dests[..n] {
            self.queue_control(line, addr, &msg[..len]);
        }
    }

    /// Whether `poll_transmit` has anything to send.
    pub fn has_pending_transmit(&self) -> bool {
        !self.control.is_empty()
            || !self.pending_flush.is_empty()
            || self.has_pmtu_probes()
            || self.has_trains()
            || self.has_resends()
            || self.has_parities()
    }

    /// Fills `out` with what waits to be sent: control messages first, then
    /// packets staged until a session existed. Returns true while more is
    /// waiting (call again with an emptied batch).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut PacketBatch) -> bool {
        let more = self.fill_transmit(now, out);
        self.set_local_addresses(out);
        more
    }

    /// [`poll_transmit`](Self::poll_transmit) but for the local addresses.
    fn fill_transmit(&mut self, now: Instant, out: &mut PacketBatch) -> bool {
        while !out.is_full() {
            let Some(c) = self.control.pop_front() else {
                break;
            };
            out.push_with(0, c.dst, |b| {
                b[..c.len].copy_from_slice(&c.bytes[..c.len]);
                c.len
            });
            out.set_line(out.len() - 1, c.line);
        }
        self.transmit_resends(now, out);
        self.transmit_parities(now, out);
        self.transmit_pmtu_probes(now, out);
        self.transmit_trains(now, out);
        let mtu = self.padding_mtu();
        while let Some(&pid) = self.pending_flush.last() {
            let Some(p) = self.peers[pid].as_mut() else {
                self.pending_flush.pop();
                continue;
            };
            // Off the list while it is worked on; back on if the batch
            // fills first.
            p.flush_queued = false;
            let usable = p.keypairs.current.as_ref().is_some_and(|k| k.is_valid(now));
            if !usable || p.paths.is_empty() {
                // No session yet: the handshake (if any can be sent) brings
                // us back here when it completes. Shaped packets would wait
                // longer than their queue allows: they go.
                if let Some(r) = p.rate_limit.as_mut() {
                    p.counters.rate_dropped_tx = p
                        .counters
                        .rate_dropped_tx
                        .saturating_add(r.outbound.clear() as u64);
                }
                self.pending_flush.pop();
                self.initiate(now, pid, false);
                continue;
            }
            while !out.is_full() {
                let p = self.peers[pid].as_mut().expect("checked above");
                // Staged packets first (they passed the shaper already).
                let (packet, shaped) = match p.staged.pop_front() {
                    Some(packet) => (packet, false),
                    None => match p.rate_limit.as_mut().and_then(|r| r.outbound.release(now)) {
                        Some(packet) => (packet, true),
                        None => break,
                    },
                };
                // Padded no further than the peer's lines carry.
                let pad_cap = [p.mtu_limit, p.fragment_payload]
                    .into_iter()
                    .flatten()
                    .fold(mtu, usize::min);
                let pieces = p
                    .fragment_payload
                    .filter(|&c| packet.len() > c)
                    .map(|c| crate::fragment::plan(packet.len(), c));
                match pieces {
                    // Every piece goes in this batch, or none does.
                    Some(Some((count, _))) if out.capacity() - out.len() < count => {
                        p.staged.push_front(packet);
                        return true;
                    }
                    Some(Some(plan)) => self.send_fragments(now, pid, &packet, plan, pad_cap, out),
                    Some(None) => {
                        p.counters.staged_dropped = p.counters.staged_dropped.saturating_add(1);
                    }
                    None if DATA_MIN_LEN + padded_len(packet.len(), pad_cap) > out.stride() => {
                        self.counters.slot_too_small =
                            self.counters.slot_too_small.saturating_add(1);
                    }
                    None => self.seal_data(now, pid, out, pad_cap, |plain| {
                        plain[..packet.len()].copy_from_slice(&packet);
                        packet.len()
                    }),
                }
                let p = self.peers[pid].as_mut().expect("checked above");
                match p.rate_limit.as_mut() {
                    Some(r) if shaped => r.outbound.recycle(packet),
                    _ => p.recycle(packet),
                }
            }
            if out.is_full() {
                if let Some(p) = self.peers[pid].as_mut() {
                    p.flush_queued = true;
                }
                self.peers.settle();
                return true;
            }
            self.pending_flush.pop();
        }
        self.peers.settle();
        !self.control.is_empty()
            || self.has_pmtu_probes()
            || self.has_resends()
            || self.has_parities()
            || self.has_trains()
    }
}

#[cfg(test)]
mod tests {
    use super::padded_len;

    #[test]
    fn padding_case_table() {
        // (len, mtu, padded)
        let cases = [
            (0, 1420, 0),
            (1, 1420, 16),
            (16, 1420, 16),
            (17, 1420, 32),
            (1419, 1420, 1420),
            (1420, 1420, 1420),
            (1415, 1416, 1416),
            (1500, 1420, 1500),
            // Lengths at the top of usize neither overflow nor shrink.
            (usize::MAX, usize::MAX, usize::MAX),
            (usize::MAX - 3, usize::MAX, usize::MAX - 3),
            (usize::MAX - 20, usize::MAX, usize::MAX - 15),
            (usize::MAX, 1420, usize::MAX),
            (0, 0, 0),
        ];
        for (i, (len, mtu, want)) in cases.into_iter().enumerate() {
            assert_eq!(padded_len(len, mtu), want, "case {i}");
        }
    }
}
