//! Handshake messages in and out: initiation, response, cookie reply.

use super::jobs::CryptoJobs;
use super::state::{Device, IndexEntry};
use crate::batch::LocalAddr;
use crate::consts::INITIATIONS_PER_SECOND;
use crate::messages::{self, COOKIE_REPLY_LEN, INITIATION_LEN, RESPONSE_LEN};
use crate::noise;
use crate::peer::PeerId;
use crate::ratelimiter::Decision;
use crate::session::Keypair;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use x25519_dalek::StaticSecret;

/// What the mac check decided for an incoming handshake message.
enum Admission {
    Proceed,
    Drop,
}

impl Device {
    /// Sends a handshake initiation to a peer. `retry` is a timer-driven
    /// retransmission, which is not subject to the REKEY_TIMEOUT rate limit.
    pub(super) fn initiate(&mut self, now: Instant, pid: PeerId, retry: bool) {
        let Some(p) = self.peers[pid].as_ref() else {
            return;
        };
        if !retry && !p.may_initiate(now) {
            return;
        }
        if p.paths.is_empty() {
            return;
        }
        let (Some(local), Some(p)) = (self.local.as_ref(), self.peers[pid].as_mut()) else {
            return;
        };
        p.derive_static_static(local);
        // A low-order peer key: no initiation can be made (Linux WireGuard
        // gives up the same way); the configuration refuses such keys.
        if p.remote.static_static.is_none() {
            return;
        }
        if let Some(old) = self.peers[pid].as_mut().and_then(|p| p.handshake.take()) {
            self.indices.remove(&old.local_index);
        }
        let index = self.new_index(IndexEntry::Handshake(pid));
        let ephemeral = StaticSecret::from(self.random_bytes::<32>());
        let wall = self.timestamp(now);
        let jitter = self.jitter();
        let local = self.local.as_ref().expect("checked above");
        let p = self.peers[pid].as_mut().expect("checked above");
        // The wall clock, but never at or before what this peer already has
        // from us. The peer drops an initiation whose timestamp is not
        // later than the newest it saw from us (replay defence), so if the
        // clock steps back (NTP, an operator) while we run, the peers we
        // spoke to before would refuse us until the clock caught up. A step
        // on from the last one sent instead stays acceptable to them; the
        // real clock takes over once it is later again. Per peer, so a
        // clock that was ahead does not spread its future time to peers
        // that never saw it. Linux WireGuard and wireguard-go send the
        // real clock as it is. After a restart nothing is remembered: then
        // only a right clock (`set_wall_clock`) gets us through.
        let timestamp = wall.max(noise::tai64n_after(&p.last_timestamp_sent));
        let mut msg = [0u8; INITIATION_LEN];
        let Ok(state) =
            noise::create_initiation(local, &p.remote, ephemeral, &timestamp, index, &mut msg)
        else {
            self.indices.remove(&index);
            return;
        };
        p.cookie.add_macs(now, &mut msg);
        p.handshake = Some(state);
        p.last_timestamp_sent = timestamp;
        p.last_initiation_sent = Some(now);
        p.counters.handshakes_initiated = p.counters.handshakes_initiated.saturating_add(1);
        p.on_authenticated_traversal(now);
        p.on_authenticated_sent();
        p.on_handshake_initiated(now, jitter);
        // On every line at once: the first copy through wins, the others
        // are dropped by the responder as replays (same timestamp).
        let dests: Vec<(u16, SocketAddr)> = p
            .paths
            .iter()
            .map(|path| (path.line, path.remote))
            .collect();
        for (line, remote) in dests {
            self.queue_control(line, remote, &msg);
        }
    }

    /// mac1 always; under load mac2 too, else answer with a cookie reply,
    /// and a sender that proved its address is still held to its rate
    /// (WireGuard's order). Whatever passes spends the batch's budget.
    fn admit(
        &mut self,
        now: Instant,
        msg: &[u8],
        line: u16,
        src: SocketAddr,
        sender_index: u32,
    ) -> Admission {
        let Some(checker) = self.checker.as_ref() else {
            return Admission::Drop;
        };
        if !checker.verify_mac1(msg) {
            self.counters.invalid_mac = self.counters.invalid_mac.saturating_add(1);
            return Admission::Drop;
        }
        // Only messages with a valid mac1 (from someone who knows our
        // public key) count toward being under load: a flood of garbage
        // must not make real peers go through cookies.
        let under_load = self.under_load(now);
        if under_load {
            let checker = self.checker.as_mut().expect("checked above");
            if !checker.verify_mac2(now, msg, src) {
                let mut reply = [0u8; COOKIE_REPLY_LEN];
                checker.create_reply(now, msg, src, sender_index, &mut &mut *self.rng, &mut reply);
                self.counters.cookie_replies_sent =
                    self.counters.cookie_replies_sent.saturating_add(1);
                self.queue_control(line, src, &reply);
                return Admission::Drop;
            }
            if self.source_limiter.allow(now, src.ip()) != Decision::Allowed {
                self.counters.handshake_rate_limited =
                    self.counters.handshake_rate_limited.saturating_add(1);
                return Admission::Drop;
            }
        }
        if self.handshake_budget == 0 {
            self.counters.handshake_over_budget =
                self.counters.handshake_over_budget.saturating_add(1);
            return Admission::Drop;
        }
        self.handshake_budget -= 1; // not 0: checked above
        Admission::Proceed
    }

    /// An initiation arrived: once the checks that need the
    /// device pass (macs, cookies under load, rate limits, the batch's
    /// budget), its DH work becomes a job (see `jobs`), done without the
    /// device; [`finish_initiations`](Self::finish_initiations) answers it.
    pub(super) fn prepare_initiation(
        &mut self,
        now: Instant,
        (line, src, arrived_at): (u16, SocketAddr, LocalAddr),
        msg: &[u8; INITIATION_LEN],
        jobs: &mut CryptoJobs,
    ) {
        let sender = messages::read_u32(msg, messages::initiation::SENDER);
        if let Admission::Drop = self.admit(now, msg, line, src, sender) {
            return;
        }
        let Some(local) = self.local.clone() else {
            return;
        };
        let ephemeral = StaticSecret::from(self.random_bytes::<32>());
        jobs.push_initiation(
            (line, src, arrived_at),
            msg,
            &local,
            &self.by_key,
            ephemeral,
        );
    }

    /// Answers the initiations whose DH work `jobs` did: the peer by the
    /// key the initiation carried, its replay and flood checks, a new
    /// session and the response.
    pub(super) fn finish_initiations(&mut self, now: Instant, jobs: &mut CryptoJobs) {
        for job in jobs.initiations_mut() {
            let from = (job.line, job.src, job.arrived_at);
            match job.outcome.take() {
                Some(Ok((received, dh))) => self.answer_initiation(now, from, received, dh),
                Some(Err(())) | None => {
                    self.counters.handshake_rejected =
                        self.counters.handshake_rejected.saturating_add(1);
                }
            }
        }
    }

    fn answer_initiation(
        &mut self,
        now: Instant,
        (line, src, arrived_at): (u16, SocketAddr, LocalAddr),
        received: noise::ReceivedInitiation,
        dh: noise::ResponseDh,
    ) {
        let Some(pid) = self.find_peer(&received.peer_public) else {
            self.counters.handshake_rejected = self.counters.handshake_rejected.saturating_add(1);
            return;
        };
        let p = self.peers[pid].as_mut().expect("indexed peer exists");
        let min_gap = Duration::from_secs(1) / INITIATIONS_PER_SECOND;
        let replayed = received.timestamp <= p.latest_timestamp;
        let flood = p
            .last_initiation_consumed
            .is_some_and(|t| now.saturating_duration_since(t) < min_gap);
        if replayed || flood {
            self.counters.handshake_flood_dropped =
                self.counters.handshake_flood_dropped.saturating_add(1);
            return;
        }
        p.latest_timestamp = received.timestamp;
        p.last_initiation_consumed = Some(now);

        let index = self.new_index(IndexEntry::Session(pid));
        let offer_aes = self.offers_aes(pid);
        let p = self.peers[pid].as_mut().expect("indexed peer exists");
        let mut response = [0u8; RESPONSE_LEN];
        let Ok(keys) =
            noise::finish_response(&received, dh, &p.remote.preshared, index, &mut response)
        else {
            // Not reached: hashes only, nothing that can fail.
            self.indices.remove(&index);
            self.counters.handshake_rejected = self.counters.handshake_rejected.saturating_add(1);
            return;
        };
        p.cookie.add_macs(now, &mut response);
        let kp = Box::new(Keypair::new(
            &keys,
            index,
            received.remote_index,
            now,
            false,
            offer_aes,
        ));

        let mut dropped = std::mem::take(&mut self.scratch_indices);
        // The peer's initiation supersedes ours (only one handshake at a time).
        if let Some(ours) = p.handshake.take() {
            dropped.push(ours.local_index);
        }
        p.keypairs.install(kp, &mut dropped);
        p.authenticated_rx(now, line, src, INITIATION_LEN);
        p.counters.handshake_responses_sent = p.counters.handshake_responses_sent.saturating_add(1);
        self.note_local_address(line, src, arrived_at);
        let p = self.peers[pid].as_mut().expect("checked above");
        p.on_session_derived(now);
        p.on_authenticated_received();
        p.on_authenticated_traversal(now);
        p.on_authenticated_sent();
        self.drop_indices(&mut dropped);
        self.scratch_indices = dropped;
        self.queue_control(line, src, &response);
    }

    pub(super) fn receive_response(
        &mut self,
        now: Instant,
        line: u16,
        src: SocketAddr,
        arrived_at: LocalAddr,
        msg: &[u8; RESPONSE_LEN],
    ) {
        let sender = messages::read_u32(msg, messages::response::SENDER);
        if let Admission::Drop = self.admit(now, msg, line, src, sender) {
            return;
        }
        let receiver = messages::read_u32(msg, messages::response::RECEIVER);
        let Some(&IndexEntry::Handshake(pid)) = self.indices.get(&receiver) else {
            self.counters.handshake_rejected = self.counters.handshake_rejected.saturating_add(1);
            return;
        };
        let (Some(local), Some(p)) = (self.local.as_ref(), self.peers[pid].as_mut()) else {
            return;
        };
        let Some(state) = p.handshake.as_ref().filter(|h| h.local_index == receiver) else {
            self.counters.handshake_rejected = self.counters.handshake_rejected.saturating_add(1);
            return;
        };
        let Ok(keys) = noise::consume_response(state, local, &p.remote, msg) else {
            self.counters.handshake_rejected = self.counters.handshake_rejected.saturating_add(1);
            return;
        };
        p.handshake = None;
        let offer_aes = self.offers_aes(pid);
        let p = self.peers[pid].as_mut().expect("checked above");
        let kp = Box::new(Keypair::new(&keys, receiver, sender, now, true, offer_aes));
        let mut dropped = std::mem::take(&mut self.scratch_indices);
        p.keypairs.install(kp, &mut dropped);
        p.authenticated_rx(now, line, src, msg.len());
        self.note_local_address(line, src, arrived_at);
        let wall = self.wall_clock(now);
        let p = self.peers[pid].as_mut().expect("checked above");
        p.on_handshake_complete(wall);
        p.on_session_derived(now);
        p.on_authenticated_received();
        p.on_authenticated_traversal(now);
        let has_staged = !p.staged.is_empty();
        self.indices.insert(receiver, IndexEntry::Session(pid));
        self.drop_indices(&mut dropped);
        self.scratch_indices = dropped;
        self.start_probing(now, pid);
        // Confirm the session to the responder at once: with data if some
        // waited for it, else with a keepalive.
        if has_staged {
            self.schedule_flush(pid);
        } else {
            self.send_keepalive(now, pid);
        }
    }

    pub(super) fn receive_cookie_reply(&mut self, now: Instant, msg: &[u8; COOKIE_REPLY_LEN]) {
        let receiver = messages::read_u32(msg, messages::cookie_reply::RECEIVER);
        let pid = match self.indices.get(&receiver) {
            Some(IndexEntry::Handshake(pid)) | Some(IndexEntry::Session(pid)) => *pid,
            None => {
                self.counters.unknown_index = self.counters.unknown_index.saturating_add(1);
                return;
            }
        };
        if let Some(p) = self.peers[pid].as_mut() {
            match p.cookie.consume_reply(now, msg) {
                Ok(()) => {
                    p.counters.cookie_replies_received =
                        p.counters.cookie_replies_received.saturating_add(1)
                }
                Err(_) => p.counters.auth_failed = p.counters.auth_failed.saturating_add(1),
            }
        }
    }
}
