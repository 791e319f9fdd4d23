//! Several lines per peer: choosing the paths a packet takes, saying hello
//! to find out whether the peer speaks braid, and probing every path.

use super::state::{Device, IndexEntry};
use crate::batch::LocalAddr;
use crate::consts::REJECT_AFTER_TIME;
use crate::ext::{self, ExtMessage, ProbeBody};
use crate::messages::{self, DATA_HEADER_LEN, DATA_MIN_LEN};
use crate::path::{self, MAX_PATHS, PROBE_INTERVAL};
use crate::peer::PeerId;
use crate::session::SlotName;
use crate::timers::Timer;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Hellos sent per session before a peer counts as stock WireGuard.
const HELLO_ATTEMPTS: u8 = 10;
/// How often a peer whose data takes one line of several is told which
/// counters went where, while data flows (about 100 bytes a time; every
/// probe interval as well while anything was sent since the last).
const SENT_REPORT_INTERVAL: Duration = Duration::from_millis(10);
/// A line whose reports (probe echoes, 20 a second) stopped for this long
/// is full or dying: `Sent` reports then go on the other lines as well.
const SENT_QUIET: Duration = PROBE_INTERVAL.saturating_mul(2);

/// Whether `p` gets `Sent` reports: a braid peer whose packets take one of
/// several lines (in redundant mode every line carries everything).
fn reports_sent(p: &crate::peer::Peer) -> bool {
    p.paths.len() > 1 && p.mode != path::Mode::Redundant && p.speaks_braid()
}

/// Where one packet goes: (line, remote) per copy.
pub(super) type Destinations = [(u16, SocketAddr); MAX_PATHS];

impl Device {
    /// Chooses the paths for the next packet of `pid` (`len` bytes on the
    /// wire, sent at `now`) and counts it on each. A stock WireGuard peer
    /// only ever gets the primary path.
    pub(super) fn destinations(
        &mut self,
        now: Instant,
        pid: PeerId,
        len: usize,
        out: &mut Destinations,
    ) -> usize {
        let Some(p) = self.peers[pid].as_mut() else {
            return 0;
        };
        if p.paths.is_empty() {
            return 0;
        }
        let mut chosen = [0usize; MAX_PATHS];
        let n = if p.speaks_braid() {
            let repairs = p.sent_copies.is_some() && p.repairs_losses();
            path::select(p.mode, &mut p.paths, now, len, repairs, &mut chosen)
        } else {
            1
        };
        p.last_path = chosen[0];
        // The message was just sealed with the current session's latest
        // counter.
        let sealed = p
            .keypairs
            .current
            .as_ref()
            .and_then(|k| Some((k.local_index, k.messages_sent().checked_sub(1)?)));
        for (k, &i) in chosen[..n].iter().enumerate() {
            let path = &mut p.paths[i];
            path.on_tx(len);
            if sealed.is_some() {
                path.assigned = sealed;
            }
            out[k] = (path.line, path.remote);
        }
        if reports_sent(p) {
            p.sent_since_report = true;
            let due = p
                .sent_report_at
                .is_none_or(|t| now.saturating_duration_since(t) >= SENT_REPORT_INTERVAL);
            if due {
                self.report_sent(now, pid);
            }
        }
        n
    }

    /// Tells the peer which of the current session's counters went on
    /// which path (`ExtMessage::Sent`), on the line where it arrives first
    /// and on the other up lines within the scheduler's reach, so its
    /// reorder window gives up a gap that no other line carried without
    /// waiting for a line that carries nothing. (The peer keeps the newest
    /// word per path: the later copies change nothing.)
    pub(super) fn report_sent(&mut self, now: Instant, pid: PeerId) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        let Some(kp) = p.keypairs.current.as_ref() else {
            return;
        };
        let (session, next) = (kp.local_index, kp.messages_sent());
        let mut body = ext::SentBody {
            next,
            paths: p.paths.len().min(MAX_PATHS) as u8,
            repairs: p.repaired_paths(),
            behind: [u32::MAX; MAX_PATHS],
        };
        for (behind, path) in body.behind.iter_mut().zip(&p.paths) {
            let missed = match path.assigned {
                // `c < next`: it was sealed before `next` was read.
                Some((s, c)) if s == session => next - 1 - c.min(next - 1),
                _ => next,
            };
            *behind = u32::try_from(missed).unwrap_or(u32::MAX);
        }
        let at = path::earliest_small(&p.paths, now).unwrap_or_else(|| p.quickest_path());
        if at >= p.paths.len() {
            return;
        }
        // Also on every other up line within the scheduler's reach while
        // that line's reports have stopped: its capacity fell and its full
        // queue drops most of what comes (probes too), and holds the rest
        // up to its length. The word that the other lines did not carry
        // the gaps it leaves would come late or never, and each gap would
        // wait the hold.
        let quiet = p.paths[at].outbound.is_quiet(now, SENT_QUIET);
        let quickest = p
            .paths
            .iter()
            .filter(|q| q.is_up())
            .filter_map(|q| q.outbound.propagation_us())
            .min();
        let reach = i64::try_from(path::MAX_BACKLOG.as_micros()).unwrap_or(i64::MAX);
        let mut to = [None; MAX_PATHS];
        for (i, (slot, q)) in to.iter_mut().zip(&p.paths).enumerate() {
            let near = match (q.outbound.propagation_us(), quickest) {
                (Some(d), Some(m)) => d.saturating_sub(m) <= reach,
                _ => false,
            };
            if i == at || (quiet && q.is_up() && near) {
                *slot = Some((q.line, q.remote));
            }
        }
        p.sent_report_at = Some(now);
        p.sent_since_report = false;
        for (line, remote) in to.into_iter().flatten() {
            self.queue_ext(now, pid, line, remote, ExtMessage::Sent(body));
        }
    }

    pub(super) fn mono_us(&self, now: Instant) -> u64 {
        mono_us(self.mono_base, now)
    }

    /// A new session exists with `pid`: say hello (again) and probe.
    pub(super) fn start_probing(&mut self, now: Instant, pid: PeerId) {
        if !self.extensions {
            return;
        }
        if let Some(p) = self.peers[pid].as_mut() {
            p.hellos_left = HELLO_ATTEMPTS;
            p.timers.set(Timer::Probe, now);
        }
    }

    /// Seals `msg` with the current session and queues it on (line, remote).
    pub(super) fn queue_ext(
        &mut self,
        now: Instant,
        pid: PeerId,
        line: u16,
        remote: SocketAddr,
        msg: ExtMessage,
    ) {
        let Some(kp) = self.peers[pid]
            .as_mut()
            .and_then(|p| p.keypairs.current.as_mut())
        else {
            return;
        };
        if !kp.is_valid(now) {
            return;
        }
        let mut payload = [0u8; ext::MAX_PAYLOAD];
        let n = msg.encode(&mut payload);
        let mut out = [0u8; DATA_MIN_LEN + ext::MAX_PAYLOAD];
        let len = kp.seal_ext(&payload[..n], &mut out);
        self.queue_control(line, remote, &out[..len]);
    }

    /// The probe timer: hellos while the peer's braid support is unknown,
    /// then a probe on every path, and path states brought up to date.
    pub(super) fn probe_paths(&mut self, now: Instant, pid: PeerId) {
        let lz4_flag = if self.peers[pid].is_some() && self.offers_lz4(pid) {
            ext::HELLO_OFFERS_LZ4
        } else {
            0
        };
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        let session_ok = p
            .keypairs
            .current
            .as_ref()
            .is_some_and(|k| k.age(now) < REJECT_AFTER_TIME);
        if !session_ok {
            return; // resumes with the next session
        }
        let say_hello = p.hellos_left > 0;
        let parity_flag = if self.parity {
            ext::HELLO_OFFERS_PARITY
        } else {
            0
        };
        let flags = lz4_flag
            | parity_flag
            | ext::HELLO_OFFERS_FRAGMENTS
            | match &p.keypairs.current {
                Some(k) if k.keys().has_aes() => ext::HELLO_OFFERS_AES,
                _ => 0,
            };
        p.hellos_left = p.hellos_left.saturating_sub(1);
        let braid = p.speaks_braid();
        for i in 0..p.paths.len() {
            let p = self.peers[pid].as_mut().expect("checked above");
            let (line, remote) = (p.paths[i].line, p.paths[i].remote);
            if say_hello {
                let hello = ExtMessage::Hello {
                    version: ext::VERSION,
                    path: i as u8,
                    flags,
                };
                self.queue_ext(now, pid, line, remote, hello);
            }
            if braid {
                let p = self.peers[pid].as_mut().expect("checked above");
                let path = &mut p.paths[i];
                let seq = path.take_probe_seq_at(now);
                let body = ProbeBody {
                    path: i as u8, // i < MAX_PATHS
                    seq,
                    sent_us: 0,
                    // The wire carries the count modulo 2^32 (the peer
                    // compares it so).
                    rx_probes: path.probes_received as u32,
                };
                let body = ProbeBody {
                    sent_us: self.mono_us(now),
                    ..body
                };
                self.queue_ext(now, pid, line, remote, ExtMessage::Probe(body));
            }
        }
        if braid {
            self.probe_path_mtu(now, pid);
            self.probe_trains(now, pid);
            if self.peers[pid]
                .as_ref()
                .is_some_and(|p| p.sent_since_report)
            {
                self.report_sent(now, pid);
            }
        }
        let p = self.peers[pid].as_mut().expect("checked above");
        for path in &mut p.paths {
            path.update_state(now);
            path.outbound.on_tick(now, path.counters.tx_bytes);
        }
        p.expire_learned_paths(now);
        let (mask, skew) = (p.live_path_mask(now), p.path_skew(now));
        p.reorder.set_live_paths(mask);
        p.reorder.set_path_skew(skew);
        self.update_repair_wait(pid);
        let p = self.peers[pid].as_mut().expect("checked above");
        if p.speaks_braid() || p.hellos_left > 0 {
            p.timers.set(Timer::Probe, now + PROBE_INTERVAL);
        }
    }

    /// An extension message (`TYPE_BRAID`) from `src` on `line`.
    pub(super) fn receive_ext(
        &mut self,
        now: Instant,
        line: u16,
        src: SocketAddr,
        local: LocalAddr,
        datagram: &mut [u8],
    ) {
        if !self.extensions {
            // What stock WireGuard does with a message type it doesn't know.
            self.counters.invalid_datagrams = self.counters.invalid_datagrams.saturating_add(1);
            return;
        }
        let receiver = messages::read_u32(datagram, messages::data::RECEIVER);
        let Some(&IndexEntry::Session(pid)) = self.indices.get(&receiver) else {
            self.counters.unknown_index = self.counters.unknown_index.saturating_add(1);
            return;
        };
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        let Some((slot, kp)) = p.keypairs.find_mut(receiver) else {
            return;
        };
        if kp.age(now) >= REJECT_AFTER_TIME {
            return;
        }
        let Ok(n) = kp.open_ext(datagram) else {
            p.counters.ext_rejected = p.counters.ext_rejected.saturating_add(1);
            return;
        };
        let payload = &datagram[DATA_HEADER_LEN..DATA_HEADER_LEN + n];
        let parity = crate::fec::Piece::decode(payload);
        let msg = ExtMessage::decode(payload);
        if msg.is_none() && parity.is_none() {
            self.counters.invalid_datagrams = self.counters.invalid_datagrams.saturating_add(1);
            return;
        }
        if let Some(ExtMessage::Hello { flags, .. }) = msg {
            kp.set_peer_offers_aes(flags & ext::HELLO_OFFERS_AES != 0);
            p.lz4_session = (flags & ext::HELLO_OFFERS_LZ4 != 0).then_some(receiver);
            p.fragment_session = (flags & ext::HELLO_OFFERS_FRAGMENTS != 0).then_some(receiver);
            p.parity_session = (flags & ext::HELLO_OFFERS_PARITY != 0).then_some(receiver);
        }
        let first_news = !p.speaks_braid();
        p.braid_session = Some(receiver);
        // Probes from where we no longer are go unanswered (see
        // `Peer::stranger_on`).
        let stranger = p.stranger_on(line, src).is_some();
        let at = p.authenticated_rx(now, line, src, datagram.len());
        p.on_authenticated_received();
        p.on_authenticated_traversal(now);
        self.note_local_address(line, src, local);
        if slot == SlotName::Next {
            self.confirm_session(now, pid);
        }
        let Some(msg) = msg else {
            if let Some(piece) = parity {
                self.receive_parity(now, pid, receiver, (at, datagram.len()), &piece);
            }
            return;
        };
        match msg {
            ExtMessage::Hello { path, .. } => {
                // Answer once per session so the peer learns we speak braid.
                let p = self.peers[pid].as_mut().expect("checked above");
                p.paths[at].peer_index = Some(path);
                if first_news || p.hellos_left == 0 {
                    p.hellos_left = p.hellos_left.max(1);
                }
            }
            ExtMessage::Probe(_) | ExtMessage::PmtuProbe(_) if stranger => {}
            ExtMessage::Probe(b) => {
                let now_us = self.mono_us(now);
                let p = self.peers[pid].as_mut().expect("checked above");
                let path = &mut p.paths[at];
                path.peer_index = Some(b.path);
                let rx_probes = path.on_probe(b.seq);
                path.inbound.on_probe(b.sent_us, now_us);
                let echo = ProbeBody { rx_probes, ..b };
                let delivery = path.delivery(now_us);
                self.queue_ext(now, pid, line, src, ExtMessage::Echo(echo, Some(delivery)));
            }
            ExtMessage::Echo(b, delivery) => {
                // Echoed by the peer: any value may come back.
                let Some(sent) = echo_sent(self.mono_base, b.sent_us) else {
                    return;
                };
                let p = self.peers[pid].as_mut().expect("checked above");
                if let Some(path) = p.paths.get_mut(b.path as usize) {
                    path.on_echo(now, b.seq, sent, b.rx_probes);
                    if let Some(d) = delivery {
                        path.outbound.on_report(now, b.seq, b.sent_us, d);
                    }
                }
            }
            ExtMessage::PmtuProbe(_) | ExtMessage::PmtuAck(_) => {
                self.receive_pmtu(now, pid, line, src, msg);
            }
            ExtMessage::Repair { from, count } => {
                self.queue_resends(now, pid, receiver, from, count)
            }
            ExtMessage::NoRepair { from, count } => {
                self.repairs_declined(now, pid, receiver, from, count)
            }
            ExtMessage::Filler { .. } => {
                // Delivered on this path: counted with its data, so the
                // echo of the train's last probe says how fast it came.
                let p = self.peers[pid].as_mut().expect("checked above");
                let c = &mut p.paths[at].counters;
                c.data_rx_bytes = c.data_rx_bytes.saturating_add(datagram.len() as u64);
            }
            ExtMessage::Sent(b) => {
                let p = self.peers[pid].as_mut().expect("checked above");
                // About the counters of the session it is sealed in: only
                // while the window follows that one.
                if p.reorder_session == Some(receiver) {
                    for (j, path) in p.paths.iter().enumerate().take(MAX_PATHS) {
                        if let Some(i) = path.peer_index {
                            let (from, to) = b.unassigned(usize::from(i));
                            let repaired = i < 8 && b.repairs & (1 << i) != 0;
                            p.reorder.note_unassigned(now, j, from, to, repaired);
                        }
                    }
                }
            }
        }
        let p = self.peers[pid].as_mut().expect("checked above");
        if !p.timers.is_set(Timer::Probe) {
            p.timers.set(Timer::Probe, now);
        }
    }
}

/// A probe's timestamp: microseconds since the device's `base` (a clock
/// half a million years old saturates instead of wrapping).
fn mono_us(base: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(base).as_micros()).unwrap_or(u64::MAX)
}

/// When an echoed probe left, from the timestamp the peer sent back; `None`
/// when no instant is that far from `base` (so none of our probes carried
/// it).
fn echo_sent(base: Instant, sent_us: u64) -> Option<Instant> {
    base.checked_add(Duration::from_micros(sent_us))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;
    use crate::test_time::end_of_time;

    #[test]
    fn probe_timestamps_round_trip_and_absurd_echoes_are_refused() {
        let base = Instant::now();
        let now = base + Duration::from_micros(1_234_567);
        let us = mono_us(base, now);
        assert_eq!(us, 1_234_567);
        assert_eq!(echo_sent(base, us), Some(now));
        // Earlier than the base (a clock going backwards): zero, not a wrap.
        assert_eq!(mono_us(now, base), 0);
        // A peer echoing any u64 gets an instant or a refusal, never a panic.
        for sent_us in [0, 1 << 40, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            if let Some(t) = echo_sent(base, sent_us) {
                assert_eq!(mono_us(base, t), sent_us);
            }
        }
        let far = end_of_time(base);
        assert_eq!(echo_sent(far, 1_000_000), None);
        // A clock so far from its base that the microseconds overflow u64.
        if far.saturating_duration_since(base).as_micros() > u128::from(u64::MAX) {
            assert_eq!(mono_us(base, far), u64::MAX);
        }
    }
}
