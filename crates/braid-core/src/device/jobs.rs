//! The AEAD work of one batch, split from the bookkeeping around it.
//!
//! The device decides everything that needs its state (route, session,
//! counter, replay pre-check) while the caller holds it, and records one
//! job per packet here; sealing and opening then run without the device,
//! on whichever thread (or threads) the caller likes, and the device
//! finishes the opened packets afterwards. A batch's jobs usually share
//! one session, so the keys are kept once per distinct session.
//!
//! Handshake initiations that passed the device's checks (macs, cookies
//! under load, rate limits) and were taken from its initiation queue
//! within a batch's budget are jobs too: the
//! responder's five scalar multiplications (decrypting the initiation,
//! then the response's DH) run here, without the device, and in parts on
//! several threads when there are several ([`CryptoJobs::initiation_parts`]);
//! the device then finds the peer and sends the response.

use super::table::PeerKeys;
use crate::batch::{LocalAddr, PacketBatch, SlotRange};
use crate::cipher::DataKeys;
use crate::messages::INITIATION_LEN;
use crate::noise::{self, LocalStatic, ReceivedInitiation, ResponseDh};
use crate::peer::PeerId;
use std::net::SocketAddr;
use std::sync::Arc;
use x25519_dalek::StaticSecret;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Pending,
    Opened(usize),
    Failed,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Job {
    pub slot: usize,
    key: usize,
    pub pid: PeerId,
    pub outcome: Outcome,
}

/// The DH work of answering one handshake initiation.
pub(super) struct InitiationJob {
    /// Where it came from: the line and source its response goes to, and
    /// the local address it arrived at (the response leaves from it).
    pub line: u16,
    pub src: SocketAddr,
    pub arrived_at: LocalAddr,
    msg: [u8; INITIATION_LEN],
    local: Arc<LocalStatic>,
    /// Whose initiations are answered.
    peers: PeerKeys,
    /// Taken when the job runs.
    ephemeral: Option<StaticSecret>,
    /// `Some(Err(()))`: the initiation did not decrypt (not for us, or a
    /// low-order key).
    pub outcome: Option<Result<(ReceivedInitiation, ResponseDh), ()>>,
}

impl InitiationJob {
    fn run(&mut self) {
        let Some(ephemeral) = self.ephemeral.take() else {
            return; // done already
        };
        self.outcome = Some(
            noise::consume_initiation(&self.local, &self.msg)
                .map_err(|_| ())
                // A stranger's: no response, so none of its DH work.
                .and_then(|received| {
                    if self.peers.contains(&received.peer_public) {
                        Ok(received)
                    } else {
                        Err(())
                    }
                })
                .and_then(|received| {
                    let dh = noise::response_dh(&received, &ephemeral).map_err(|_| ())?;
                    Ok((received, dh))
                }),
        );
    }
}

/// Seal or open jobs for one batch; reused from batch to batch.
#[derive(Default)]
pub struct CryptoJobs {
    keys: Vec<Arc<DataKeys>>,
    jobs: Vec<Job>,
    initiations: Vec<InitiationJob>,
}

impl CryptoJobs {
    pub fn new() -> CryptoJobs {
        CryptoJobs::default()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.jobs.clear();
        self.initiations.clear();
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Adds the job of `slot` (the device does, while it prepares a batch;
    /// benchmarks do too). Jobs follow the batch: one per slot at most, in
    /// slot order, which [`split`](Self::split) relies on.
    pub fn push(&mut self, slot: usize, pid: PeerId, keys: &Arc<DataKeys>) {
        debug_assert!(self.jobs.last().is_none_or(|j| j.slot < slot));
        let key = match self.keys.last() {
            Some(last) if Arc::ptr_eq(last, keys) => self.keys.len() - 1,
            _ => {
                self.keys.push(keys.clone());
                self.keys.len() - 1
            }
        };
        self.jobs.push(Job {
            slot,
            key,
            pid,
            outcome: Outcome::Pending,
        });
    }

    pub(super) fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// Adds the DH work of answering the initiation `msg` (from `src` on
    /// `line`) with `ephemeral` as our ephemeral key.
    pub(super) fn push_initiation(
        &mut self,
        (line, src, arrived_at): (u16, SocketAddr, LocalAddr),
        msg: &[u8; INITIATION_LEN],
        local: &Arc<LocalStatic>,
        peers: &PeerKeys,
        ephemeral: StaticSecret,
    ) {
        self.initiations.push(InitiationJob {
            line,
            src,
            arrived_at,
            msg: *msg,
            local: local.clone(),
            peers: peers.clone(),
            ephemeral: Some(ephemeral),
            outcome: None,
        });
    }

    pub(super) fn initiations_mut(&mut self) -> &mut [InitiationJob] {
        &mut self.initiations
    }

    /// Initiations to answer in this batch.
    pub fn initiations(&self) -> usize {
        self.initiations.len()
    }

    /// The initiations in up to `parts` parts of about the same size, each
    /// to run on a thread of its own (a handshake's DH work is hundreds of
    /// microseconds: worth a thread when there are several).
    pub fn initiation_parts(&mut self, parts: usize) -> impl Iterator<Item = InitiationPart<'_>> {
        let per_part = self.initiations.len().div_ceil(parts.max(1)).max(1);
        self.initiations
            .chunks_mut(per_part)
            .map(|jobs| InitiationPart { jobs })
    }

    /// Answers every initiation not answered yet, on this thread.
    pub fn answer_initiations(&mut self) {
        for job in &mut self.initiations {
            job.run();
        }
    }

    /// Seals every prepared data message of `batch` in place.
    pub fn seal(&mut self, batch: &mut PacketBatch) {
        if let Some(all) = self.split(batch, 1).next() {
            all.seal();
        }
    }

    /// Opens every data message of `batch` in place, remembering which
    /// authenticated, and does the DH work of every initiation (the device
    /// finishes both).
    pub fn open(&mut self, batch: &mut PacketBatch) {
        if let Some(all) = self.split(batch, 1).next() {
            all.open();
        }
        self.answer_initiations();
    }

    /// The jobs in up to `parts` parts of about the same size, each with
    /// the packets it works on, so that each can be sealed or opened on a
    /// thread of its own. Fewer parts when there are fewer jobs.
    pub fn split<'a>(
        &'a mut self,
        batch: &'a mut PacketBatch,
        parts: usize,
    ) -> impl Iterator<Item = CryptoPart<'a>> {
        let total = self.jobs.len();
        let parts = parts.clamp(1, total.max(1));
        let keys = &self.keys[..];
        let mut jobs = &mut self.jobs[..];
        let mut packets = Some(batch.slot_range());
        (0..parts).map_while(move |k| {
            // total is at most the batch's slot count and k < parts <=
            // total, so the products stay below slots²; the boundaries
            // increase with k, so the difference is never negative.
            let take = total * (k + 1) / parts - total * k / parts;
            let (mine, later) = std::mem::take(&mut jobs).split_at_mut(take);
            let next_slot = later.first().map(|j| j.slot);
            jobs = later;
            let rest = packets.take()?;
            let mine_packets = match next_slot {
                Some(next) => {
                    let (head, tail) = rest.split_at(next);
                    packets = Some(tail);
                    head
                }
                None => rest,
            };
            (!mine.is_empty()).then_some(CryptoPart {
                packets: mine_packets,
                jobs: mine,
                keys,
            })
        })
    }
}

/// Some of a batch's initiations (see [`CryptoJobs::initiation_parts`]).
pub struct InitiationPart<'a> {
    jobs: &'a mut [InitiationJob],
}

impl InitiationPart<'_> {
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub fn run(self) {
        for job in self.jobs {
            job.run();
        }
    }
}

/// Some of a batch's jobs with the packets they work on, borrowed apart
/// from the rest (see [`CryptoJobs::split`]).
pub struct CryptoPart<'a> {
    packets: SlotRange<'a>,
    jobs: &'a mut [Job],
    keys: &'a [Arc<DataKeys>],
}

impl CryptoPart<'_> {
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub fn seal(mut self) {
        for job in self.jobs.iter() {
            self.keys[job.key].seal(self.packets.packet_mut(job.slot));
        }
    }

    /// Opens in place, remembering which authenticated.
    pub fn open(mut self) {
        for job in self.jobs.iter_mut() {
            job.outcome = match self.keys[job.key].open(self.packets.packet_mut(job.slot)) {
                Ok(n) => Outcome::Opened(n),
                Err(_) => Outcome::Failed,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cipher::{write_data_header, DataCipher};
    use crate::crypto::TAG_LEN;
    use crate::messages::DATA_HEADER_LEN;
    use std::net::SocketAddr;

    const SLOTS: usize = 11;

    /// A batch of data messages with counters 0.., every third slot
    /// consumed (no job), and the jobs to seal the rest.
    fn batch_and_jobs(keys: &Arc<DataKeys>) -> (PacketBatch, CryptoJobs) {
        let mut batch = PacketBatch::new(SLOTS, 256);
        let mut jobs = CryptoJobs::new();
        let addr: SocketAddr = "198.18.0.1:51820".parse().unwrap();
        for i in 0..SLOTS {
            batch.push_with(0, addr, |buf| {
                let text = [i as u8; 40];
                buf[DATA_HEADER_LEN..DATA_HEADER_LEN + text.len()].copy_from_slice(&text);
                write_data_header(buf, DataCipher::ChaCha20Poly1305, 1, i as u64, 40, 40)
            });
            if i % 3 == 2 {
                batch.consume(i);
            } else {
                jobs.push(i, 0, keys);
            }
        }
        (batch, jobs)
    }

    #[test]
    fn parts_cover_every_job_once_and_seal_as_the_whole_does() {
        let keys = Arc::new(DataKeys::new(&[1; 32], &[2; 32], None));
        let (mut whole, mut whole_jobs) = batch_and_jobs(&keys);
        whole_jobs.seal(&mut whole);
        for parts in [1, 2, 3, 4, 7, 8, 50] {
            let (mut batch, mut jobs) = batch_and_jobs(&keys);
            let sizes: Vec<usize> = jobs.split(&mut batch, parts).map(|p| p.len()).collect();
            assert_eq!(sizes.iter().sum::<usize>(), jobs.len(), "{parts} parts");
            assert_eq!(sizes.len(), parts.min(jobs.len()));
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
            for part in jobs.split(&mut batch, parts) {
                part.seal();
            }
            for i in 0..SLOTS {
                assert_eq!(batch.packet(i), whole.packet(i), "slot {i}, {parts} parts");
            }
        }
    }

    #[test]
    fn parts_open_and_record_each_outcome() {
        let sender = Arc::new(DataKeys::new(&[1; 32], &[2; 32], None));
        let receiver = Arc::new(DataKeys::new(&[2; 32], &[1; 32], None));
        let (mut batch, mut jobs) = batch_and_jobs(&sender);
        jobs.seal(&mut batch);
        batch.packet_mut(4)[DATA_HEADER_LEN] ^= 1;
        let mut opening = CryptoJobs::new();
        for job in jobs.jobs() {
            opening.push(job.slot, 0, &receiver);
        }
        for part in opening.split(&mut batch, 3) {
            part.open();
        }
        for job in opening.jobs() {
            let expected = if job.slot == 4 {
                Outcome::Failed
            } else {
                Outcome::Opened(40)
            };
            assert_eq!(job.outcome, expected, "slot {}", job.slot);
        }
        assert_eq!(batch.packet(0).len(), DATA_HEADER_LEN + 40 + TAG_LEN);
    }
}
