//! The AEAD work of one batch, split from the bookkeeping around it.
//!
//! The device decides everything that needs its state (route, session,
//! counter, replay pre-check) while the caller holds it, and records one
//! job per packet here; sealing and opening then run without the device,
//! on whichever thread (or threads) the caller likes, and the device
//! finishes the opened packets afterwards. A batch's jobs usually share
//! one session, so the keys are kept once per distinct session.

use super::PeerId;
use crate::batch::PacketBatch;
use crate::cipher::DataKeys;
use std::sync::Arc;

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

/// Seal or open jobs for one batch; reused from batch to batch.
#[derive(Default)]
pub struct CryptoJobs {
    keys: Vec<Arc<DataKeys>>,
    jobs: Vec<Job>,
}

impl CryptoJobs {
    pub fn new() -> CryptoJobs {
        CryptoJobs::default()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.jobs.clear();
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub(super) fn push(&mut self, slot: usize, pid: PeerId, keys: &Arc<DataKeys>) {
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

    /// Seals every prepared data message of `batch` in place.
    pub fn seal(&self, batch: &mut PacketBatch) {
        for job in &self.jobs {
            self.keys[job.key].seal(batch.packet_mut(job.slot));
        }
    }

    /// Opens every data message of `batch` in place, remembering which
    /// authenticated (the device finishes them).
    pub fn open(&mut self, batch: &mut PacketBatch) {
        for job in &mut self.jobs {
            job.outcome = match self.keys[job.key].open(batch.packet_mut(job.slot)) {
                Ok(n) => Outcome::Opened(n),
                Err(_) => Outcome::Failed,
            };
        }
    }
}
