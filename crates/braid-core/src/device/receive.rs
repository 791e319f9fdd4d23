//! The incoming path: datagrams become IP packets in place, after
//! authentication, the replay check and the cryptokey-routing check of the
//! inner source address.
//!
//! The statistics counted here saturate: what a peer sends drives them,
//! and a wrapped counter would read as a small one.

use super::jobs::CryptoJobs;
use super::jobs::Outcome;
use super::state::{Device, IndexEntry};
use crate::batch::{LocalAddr, PacketBatch};
use crate::cipher::DataKeys;
use crate::consts::*;
use crate::ip::{tcp_flags, Ip, Tcp, PROTO_TCP};
use crate::messages::{self, Kind, DATA_HEADER_LEN};
use crate::peer::PeerId;
use crate::reorder::InsertOutcome;
use crate::session::SlotName;
use crate::shaper::Verdict;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Length of the IP packet at the start of `plain` (the rest is padding),
/// and whether its source address belongs to `pid` (asked through the
/// batch's `memo`).
fn inner_packet(
    table: &crate::allowed_ips::AllowedIps<PeerId>,
    memo: &mut super::route_memo::RouteMemo,
    pid: PeerId,
    plain: &[u8],
) -> Option<usize> {
    let ip = Ip::new(plain)?;
    let owner = memo.lookup(table, &ip, true);
    let len = ip.claimed_len();
    (len <= plain.len() && len >= 20 && owner == Some(pid)).then_some(len)
}

/// An IPv4/IPv6 TCP segment that carries no data and only acknowledges
/// (no SYN, FIN or RST).
fn is_pure_tcp_ack(packet: &[u8]) -> bool {
    use tcp_flags::{ACK, FIN, RST, SYN};
    let Some(ip) = Ip::new(packet) else {
        return false;
    };
    if ip.protocol() != PROTO_TCP {
        return false;
    }
    let ip_header = ip.header_len();
    let Some(tcp) = packet.get(ip_header..).and_then(Tcp::new) else {
        return false;
    };
    let flags = tcp.flags();
    ip.claimed_len() == ip_header + tcp.header_len()
        && flags & ACK != 0
        && flags & (FIN | SYN | RST) == 0
}

impl Device {
    /// Processes every datagram of `batch` (as received from UDP, at offset
    /// 0, with source addresses). Data messages become IP packets for the
    /// TUN in place; everything else is consumed, and any answers it needs
    /// wait in `poll_transmit`.
    pub fn decapsulate(&mut self, now: Instant, batch: &mut PacketBatch) {
        let mut jobs = std::mem::take(&mut self.scratch_jobs);
        self.prepare_decapsulate(now, batch, &mut jobs);
        jobs.open(batch);
        self.finish_decapsulate(now, batch, &mut jobs);
        self.scratch_jobs = jobs;
    }

    /// The first half of `decapsulate`: handshake and extension messages
    /// are handled (and consumed); each data message that may be fresh gets
    /// an open job, and the oldest queued initiations, up to the batch's
    /// budget, a DH job (see `handshake`). After [`CryptoJobs::open`] (which needs no device),
    /// [`finish_decapsulate`](Self::finish_decapsulate) completes them.
    pub fn prepare_decapsulate(
        &mut self,
        now: Instant,
        batch: &mut PacketBatch,
        jobs: &mut CryptoJobs,
    ) {
        jobs.clear();
        self.handshake_budget = MAX_HANDSHAKES_PER_BATCH;
        for i in 0..batch.len() {
            let src = batch.addr(i);
            let line = batch.line(i);
            let local = batch.local(i);
            let datagram = batch.packet_mut(i);
            // Slots a receive left empty (a coalesced message shorter than
            // the slots set aside for it) hold nothing to count.
            if datagram.is_empty() {
                continue;
            }
            let kind = messages::classify(datagram);
            match kind {
                Some(Kind::Data) => match self.prepare_data(now, datagram) {
                    Some((pid, keys)) => jobs.push(i, pid, keys),
                    None => batch.consume(i),
                },
                Some(Kind::Initiation) => {
                    let msg = (&*datagram).try_into().expect("classified by length");
                    self.queue_initiation(now, (line, src, local), msg);
                    batch.consume(i);
                }
                Some(Kind::Response) => {
                    let msg = (&*datagram).try_into().expect("classified by length");
                    self.receive_response(now, line, src, local, msg);
                    batch.consume(i);
                }
                Some(Kind::CookieReply) => {
                    let msg = (&*datagram).try_into().expect("classified by length");
                    self.receive_cookie_reply(now, msg);
                    batch.consume(i);
                }
                Some(Kind::Braid) => {
                    self.receive_ext(now, line, src, local, datagram);
                    batch.consume(i);
                }
                None => {
                    self.counters.invalid_datagrams =
                        self.counters.invalid_datagrams.saturating_add(1);
                    batch.consume(i);
                }
            }
        }
        // The batch's own initiations were queued behind any older ones;
        // its budget answers the oldest.
        self.take_queued_initiations(now, jobs);
        self.peers.settle();
    }

    /// The second half of `decapsulate`: every opened data message is
    /// checked against the replay window, counted, routed through the
    /// reorder window, and left in its slot as an IP packet or consumed.
    pub fn finish_decapsulate(
        &mut self,
        now: Instant,
        batch: &mut PacketBatch,
        jobs: &mut CryptoJobs,
    ) {
        self.finish_initiations(now, jobs);
        for job in jobs.jobs() {
            let i = job.slot;
            let (src, line, offset) = (batch.addr(i), batch.line(i), batch.offset(i));
            let local = batch.local(i);
            let delivered = match job.outcome {
                Outcome::Opened(plain_len) => {
                    // The whole slot: a decompressed packet may be longer
                    // than the datagram it came in.
                    let (buf, offset, wire_len) = batch.slot_parts_mut(i);
                    let buf = &mut buf[offset..];
                    let from = (line, src, local);
                    self.finish_data(now, from, job.pid, buf, wire_len, plain_len)
                }
                Outcome::Failed | Outcome::Pending => {
                    if let Some(p) = self.peers[job.pid].as_mut() {
                        p.counters.auth_failed = p.counters.auth_failed.saturating_add(1);
                    }
                    None
                }
            };
            match delivered {
                Some(len) => batch.set_packet(i, offset + DATA_HEADER_LEN, len, src),
                None => batch.consume(i),
            }
        }
        self.peers.settle();
    }

    /// Finds the session of a data message and pre-checks its counter.
    /// None when it cannot be fresh (unknown index, expired) or is a
    /// replay nobody needs to hear about; a replay the reorder window would
    /// learn from is opened first, so that only authenticated copies count.
    ///
    /// The keys are lent, not cloned: `CryptoJobs::push` takes a reference
    /// once per run of one session. A clone per packet wrote the shared
    /// count next to the keys the sealing thread reads for every packet.
    fn prepare_data(&mut self, now: Instant, datagram: &[u8]) -> Option<(PeerId, &Arc<DataKeys>)> {
        let receiver = messages::read_u32(datagram, messages::data::RECEIVER);
        let Some(&IndexEntry::Session(pid)) = self.indices.get(&receiver) else {
            self.counters.unknown_index = self.counters.unknown_index.saturating_add(1);
            return None;
        };
        let counter = messages::read_u64(datagram, messages::data::COUNTER);
        let p = self.peers[pid].as_mut()?;
        let (_, kp) = p.keypairs.find_mut(receiver)?;
        if kp.age(now) >= REJECT_AFTER_TIME {
            return None;
        }
        if !kp.may_accept(counter) {
            // A copy of a counter already taken: a second line's copy, or a
            // spoofed one. Only an authenticated copy may tell the window
            // and the path something (a forged one could move a path's
            // progress and give gaps up early), so open it when it would;
            // `finish_data` then counts it. Otherwise drop it unopened.
            if p.reorder_session == Some(receiver) && p.reorder.is_on() {
                return Some((pid, kp.keys()));
            }
            p.counters.replayed = p.counters.replayed.saturating_add(1);
            return None;
        }
        Some((pid, kp.keys()))
    }

    /// An authenticated data message of `pid` (`wire_len` bytes at the
    /// start of `buf`), plaintext (`plain_len` bytes) at `DATA_HEADER_LEN`:
    /// returns the length of the IP packet to deliver in place, or None
    /// when there is nothing to deliver (keepalive, replay, wrong inner
    /// source, taken by the reorder window).
    #[allow(clippy::too_many_arguments)]
    fn finish_data(
        &mut self,
        now: Instant,
        (line, src, local): (u16, SocketAddr, LocalAddr),
        pid: PeerId,
        buf: &mut [u8],
        wire_len: usize,
        plain_len: usize,
    ) -> Option<usize> {
        let receiver = messages::read_u32(buf, messages::data::RECEIVER);
        let counter = messages::read_u64(buf, messages::data::COUNTER);
        let p = self.peers[pid].as_mut()?;
        // The session may have gone while the message was being opened.
        let (slot, kp) = p.keypairs.find_mut(receiver)?;
        if !kp.accept(counter) {
            // A copy of it was accepted meanwhile (redundant paths).
            p.count_replay(now, line, src, receiver, counter, wire_len);
            return None;
        }
        let at = p.authenticated_rx(now, line, src, wire_len);
        p.paths[at].counters.first_arrivals = p.paths[at].counters.first_arrivals.saturating_add(1);
        // Only past the replay check, as WireGuard: a replayed datagram
        // sent to another of our addresses must not move our replies.
        self.note_local_address(line, src, local);
        let p = self.peers[pid].as_mut()?;
        p.paths[at].on_data_rx(now, wire_len);
        p.counters.rx_bytes = p.counters.rx_bytes.saturating_add(wire_len as u64);
        p.on_authenticated_received();
        p.on_authenticated_traversal(now);
        // Kept before decompression or joining change it in place: the
        // sender's parity covers the plaintext as sealed.
        let kept = match p.parity_in.as_mut().filter(|d| d.protects(now, at)) {
            Some(d) => {
                d.keep(
                    receiver,
                    counter,
                    &buf[DATA_HEADER_LEN..DATA_HEADER_LEN + plain_len],
                );
                true
            }
            None => false,
        };
        if slot == SlotName::Next {
            self.confirm_session(now, pid);
        }
        self.keep_key_fresh_on_receive(now, pid);
        let delivered =
            self.deliver_plaintext(now, pid, (receiver, counter), at, buf, plain_len, true);
        if kept {
            self.give_back_rebuilt(now, pid, receiver);
        }
        delivered
    }

    /// The plaintext (`plain_len` bytes at `DATA_HEADER_LEN` in `buf`) of
    /// data message `counter` of session `receiver`, authenticated and past
    /// the replay check, arrived on `path`: decompressed, joined, checked
    /// against the peer's AllowedIPs, shaped and run through the reorder
    /// window. Returns the length of the IP packet to deliver in place
    /// (only when `in_place`; otherwise the window takes it or it is
    /// dropped), or None.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver_plaintext(
        &mut self,
        now: Instant,
        pid: PeerId,
        (receiver, counter): (u32, u64),
        at: usize,
        buf: &mut [u8],
        plain_len: usize,
        in_place: bool,
    ) -> Option<usize> {
        let restored = match self.restore_compressed(pid, &mut buf[DATA_HEADER_LEN..], plain_len) {
            // A piece of a packet: the packet, once whole, takes this
            // message's place (the other pieces' places stay empty).
            Some(n) if crate::fragment::is_fragment(&buf[DATA_HEADER_LEN..DATA_HEADER_LEN + n]) => {
                self.join_fragment(now, pid, receiver, &mut buf[DATA_HEADER_LEN..], n)
            }
            other => other,
        };
        let p = self.peers[pid].as_mut()?;
        let len = if plain_len == 0 {
            p.counters.keepalives_received = p.counters.keepalives_received.saturating_add(1);
            0
        } else if let Some(plain_len) = restored {
            let plain = &buf[DATA_HEADER_LEN..DATA_HEADER_LEN + plain_len];
            match inner_packet(&self.allowed, &mut self.receive_route, pid, plain) {
                Some(len) => {
                    let p = self.peers[pid].as_mut()?;
                    p.on_data_received(now);
                    // Shaped after authentication, so only the peer itself
                    // can spend its tokens. A queued packet leaves an empty
                    // place in the reorder window and comes out of poll_tun.
                    match p
                        .rate_limit
                        .as_mut()
                        .map(|r| r.inbound.offer(now, &plain[..len]))
                    {
                        Some(Verdict::Dropped) => {
                            p.counters.rate_dropped_rx =
                                p.counters.rate_dropped_rx.saturating_add(1);
                            0
                        }
                        Some(Verdict::Queued) => {
                            p.counters.rx_packets = p.counters.rx_packets.saturating_add(1);
                            0
                        }
                        Some(Verdict::Pass) | None => {
                            p.counters.rx_packets = p.counters.rx_packets.saturating_add(1);
                            len
                        }
                    }
                }
                None => {
                    let c = &mut self.peers[pid].as_mut()?.counters.disallowed_source;
                    *c = c.saturating_add(1);
                    0
                }
            }
        } else {
            0
        };
        // Keepalives and refused packets still take their counter's place
        // in the window (as empty packets), or they would look like losses.
        let packet = &buf[DATA_HEADER_LEN..DATA_HEADER_LEN + len];
        self.reorder_or_pass(now, pid, (receiver, counter), at, packet, in_place)
            .then_some(len)
            .filter(|&l| l > 0)
    }

    /// Undoes `Compression = lz4` on a decrypted payload (`plain` holds
    /// `plain_len` bytes and room after them): the length of the IP packet
    /// now at its start, or None for a compressed payload we never agreed
    /// to or that does not decompress within the MTU.
    fn restore_compressed(
        &mut self,
        pid: PeerId,
        plain: &mut [u8],
        plain_len: usize,
    ) -> Option<usize> {
        if !crate::compress::is_compressed(&plain[..plain_len]) {
            return Some(plain_len);
        }
        let restored = if self.offers_lz4(pid) {
            self.lz4
                .decompress_in_place(plain, plain_len, self.mtu)
                .ok()
        } else {
            None
        };
        let p = self.peers[pid].as_mut()?;
        match restored {
            Some(_) => p.counters.compressed_rx = p.counters.compressed_rx.saturating_add(1),
            None => p.counters.decompress_failed = p.counters.decompress_failed.saturating_add(1),
        }
        restored
    }

    /// Runs a packet of the current session through the peer's reorder
    /// window. True: deliver it in place now (only when `in_place`); false:
    /// the window took it (it comes out of `poll_tun` in order) or it is
    /// dropped.
    fn reorder_or_pass(
        &mut self,
        now: Instant,
        pid: PeerId,
        (receiver, counter): (u32, u64),
        path: usize,
        packet: &[u8],
        in_place: bool,
    ) -> bool {
        let Some(p) = self.peers[pid].as_mut() else {
            return false;
        };
        // The window follows the session the data comes on: a sender uses
        // one session at a time and only ever moves on to a newer one (at a
        // rekey, or when both ends started a handshake at once). What still
        // comes on a session the window left was sent before everything it
        // delivers now: delivered, it would arrive out of order, so it is
        // dropped (counted Under Window), as a packet whose gap was given
        // up is.
        if p.reorder_session != Some(receiver) {
            if p.reorder_retired.contains(&Some(receiver)) {
                // With the window off (`ReorderHold = 0`) everything goes
                // in arrival order, as in stock WireGuard.
                if !p.reorder.is_on() {
                    return in_place;
                }
                p.reorder.count_under_window();
                return false;
            }
            p.reorder_retired = [p.reorder_session, p.reorder_retired[0]];
            p.reorder.reset();
            p.reorder_session = Some(receiver);
            if p.reorder.ready_packets() > 0 {
                self.reorder_ready_add(pid);
            }
        }
        let p = self.peers[pid].as_mut().expect("checked above");
        if in_place && p.reorder.passes_through(counter) {
            p.reorder.delivered_in_place(now, counter, path);
            return true;
        }
        let mask = p.live_path_mask(now);
        p.reorder.set_live_paths(mask);
        // A pure TCP ACK gains nothing from waiting (a sender ignores an ACK
        // older than one it has seen) and holding it would stretch the
        // round trip by the jitter: it goes out now, and an empty packet
        // keeps its counter's place in the window.
        if in_place && is_pure_tcp_ack(packet) {
            if let InsertOutcome::Ready = p.reorder.insert(now, counter, path, &[]) {
                self.reorder_ready_add(pid);
            }
            return true;
        }
        let outcome = if in_place {
            p.reorder.insert(now, counter, path, packet)
        } else {
            p.reorder.insert_rebuilt(now, counter, packet)
        };
        match outcome {
            // Bigger than the window's slots (an MTU raised at run time):
            // better out of order than lost.
            InsertOutcome::TooLarge => in_place,
            // Its gap was already given up and later packets went out: it
            // is dropped, as the window's rules say, so order is a promise
            // (delivered late it would reach the application out of order).
            InsertOutcome::UnderWindow => false,
            InsertOutcome::ReadyFull => {
                self.counters.reorder_overflow = self.counters.reorder_overflow.saturating_add(1);
                false
            }
            _ => {
                if p.reorder.ready_packets() > 0 {
                    self.reorder_ready_add(pid);
                }
                self.request_repairs(now, pid);
                false
            }
        }
    }

    /// First authenticated message on the responder's new session: the
    /// initiator has it, so it becomes current and the handshake is complete.
    pub(super) fn confirm_session(&mut self, now: Instant, pid: PeerId) {
        let mut dropped = std::mem::take(&mut self.scratch_indices);
        let wall = self.wall_clock(now);
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        p.keypairs.confirm_next(&mut dropped);
        p.on_handshake_complete(wall);
        self.drop_indices(&mut dropped);
        self.scratch_indices = dropped;
        self.schedule_flush(pid);
        self.start_probing(now, pid);
    }

    /// The initiator rekeys before its session nears the reject age, even
    /// if it only receives (paper §6.2).
    fn keep_key_fresh_on_receive(&mut self, now: Instant, pid: PeerId) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        let old = p.keypairs.current.as_ref().is_some_and(|k| {
            k.initiator && k.age(now) >= REJECT_AFTER_TIME - KEEPALIVE_TIMEOUT - REKEY_TIMEOUT
        });
        if old && !p.sent_lastminute_handshake {
            p.sent_lastminute_handshake = true;
            self.initiate(now, pid, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_pure_tcp_ack;

    fn ipv4_tcp(payload: usize, flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        p[9] = 6;
        p[20 + 12] = 5 << 4;
        p[20 + 13] = flags;
        p
    }

    #[test]
    fn pure_ack_case_table() {
        // (packet, is a pure ACK)
        let mut v6 = vec![0u8; 60];
        v6[0] = 0x60;
        v6[4..6].copy_from_slice(&20u16.to_be_bytes());
        v6[6] = 6;
        v6[40 + 12] = 5 << 4;
        v6[40 + 13] = 0x10;
        let mut udp = ipv4_tcp(0, 0x10);
        udp[9] = 17;
        let cases: Vec<(Vec<u8>, bool)> = vec![
            (ipv4_tcp(0, 0x10), true),
            (ipv4_tcp(0, 0x18), true), // ACK+PSH, no data
            (ipv4_tcp(1, 0x10), false),
            (ipv4_tcp(0, 0x12), false), // SYN-ACK
            (ipv4_tcp(0, 0x11), false), // FIN-ACK
            (ipv4_tcp(0, 0x14), false), // RST-ACK
            (ipv4_tcp(0, 0x00), false),
            (udp, false),
            (v6, true),
            (vec![0x45; 10], false),
            (vec![], false),
        ];
        for (i, (p, want)) in cases.iter().enumerate() {
            assert_eq!(is_pure_tcp_ack(p), *want, "case {i}");
        }
    }
}
