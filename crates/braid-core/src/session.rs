//! Transport sessions (keypairs) and their rotation: current, previous and
//! next, as in WireGuard (paper §6.1, Linux `noise.c`).
//!
//! The initiator uses a new session at once. The responder keeps it as
//! `next` until the first data message proves the initiator has it too; only
//! then may the responder send with it.

use crate::cipher::AesLibrary;
use crate::cipher::{self, DataCipher, DataKeys};
use crate::consts::{REJECT_AFTER_MESSAGES, REJECT_AFTER_TIME};
use crate::crypto::TAG_LEN;
use crate::messages::{self, DATA_HEADER_LEN};
use crate::noise::SessionKeys;
use crate::replay::ReplayWindow;
use ring::aead::Aad;
use std::sync::Arc;
use std::time::Instant;

pub struct Keypair {
    keys: Arc<DataKeys>,
    /// The cipher our data goes out with: ChaCha20-Poly1305 until the peer
    /// offered AES-256-GCM on this session (and we did too).
    send_cipher: DataCipher,
    send_counter: u64,
    pub local_index: u32,
    pub remote_index: u32,
    pub created: Instant,
    /// We started the handshake that made it; only the initiator rekeys on age.
    pub initiator: bool,
    replay: ReplayWindow,
    /// Extension messages have their own counter and replay window.
    ext_send_counter: u64,
    ext_replay: ReplayWindow,
}

impl Keypair {
    /// A session from a completed handshake; `offer_aes` derives the
    /// AES-256-GCM keys too (sealed by that library), so the peer may
    /// switch to them.
    pub fn new(
        keys: &SessionKeys,
        local_index: u32,
        remote_index: u32,
        created: Instant,
        initiator: bool,
        offer_aes: Option<AesLibrary>,
    ) -> Self {
        Keypair {
            keys: Arc::new(DataKeys::new(&keys.send, &keys.recv, offer_aes)),
            send_cipher: DataCipher::ChaCha20Poly1305,
            send_counter: 0,
            local_index,
            remote_index,
            created,
            initiator,
            replay: ReplayWindow::new(),
            ext_send_counter: 0,
            ext_replay: ReplayWindow::new(),
        }
    }

    pub fn age(&self, now: Instant) -> std::time::Duration {
        now.saturating_duration_since(self.created)
    }

    /// `by` passed unseen (a suspend): the session is that much older.
    /// False when `created` cannot go back that far (an `Instant` before
    /// its platform's origin): then nothing is known of its age.
    #[must_use]
    pub fn age_by(&mut self, by: std::time::Duration) -> bool {
        match self.created.checked_sub(by) {
            Some(t) => {
                self.created = t;
                true
            }
            None => false,
        }
    }

    pub fn messages_sent(&self) -> u64 {
        self.send_counter
    }

    /// Usable for sending and receiving: young enough and not exhausted.
    pub fn is_valid(&self, now: Instant) -> bool {
        self.age(now) < REJECT_AFTER_TIME && self.send_counter < REJECT_AFTER_MESSAGES
    }

    /// The keys, for sealing and opening outside the device (other threads).
    pub fn keys(&self) -> &Arc<DataKeys> {
        &self.keys
    }

    pub fn send_cipher(&self) -> DataCipher {
        self.send_cipher
    }

    /// The peer said (in an authenticated hello on this session) whether it
    /// offers AES-256-GCM; data moves to it when we offered it as well.
    pub fn set_peer_offers_aes(&mut self, offers: bool) {
        self.send_cipher = if offers && self.keys.has_aes() {
            DataCipher::Aes256Gcm
        } else {
            DataCipher::ChaCha20Poly1305
        };
    }

    /// Takes the next counter and writes the data message header and padding
    /// around the packet at `buf[DATA_HEADER_LEN..DATA_HEADER_LEN + len]`;
    /// `padded` >= `len` is the plaintext length after WireGuard's zero
    /// padding. Returns the datagram length; [`DataKeys::seal`] on
    /// `buf[..that]` finishes the message.
    pub fn prepare_seal(&mut self, buf: &mut [u8], len: usize, padded: usize) -> usize {
        let counter = take_counter(&mut self.send_counter);
        let (cipher, remote) = (self.send_cipher, self.remote_index);
        cipher::write_data_header(buf, cipher, remote, counter, len, padded)
    }

    /// Encrypts the packet at `buf[DATA_HEADER_LEN..DATA_HEADER_LEN + len]`
    /// in place into a data message; returns the datagram length.
    pub fn seal_in_place(&mut self, buf: &mut [u8], len: usize, padded: usize) -> usize {
        let n = self.prepare_seal(buf, len, padded);
        self.keys.seal(&mut buf[..n]);
        n
    }

    /// Cheap pre-decryption replay check.
    pub fn may_accept(&self, counter: u64) -> bool {
        counter < REJECT_AFTER_MESSAGES && self.replay.check(counter)
    }

    /// After a message with `counter` authenticated: moves the replay window.
    /// False if it was a replay after all (a copy opened meanwhile).
    pub fn accept(&mut self, counter: u64) -> bool {
        self.replay.update(counter)
    }

    /// Decrypts a data message in place; returns the plaintext length (at
    /// `DATA_HEADER_LEN`). The replay window is updated only after the tag
    /// verified, so forged counters cannot move it.
    pub fn open_in_place(&mut self, datagram: &mut [u8]) -> Result<usize, OpenError> {
        let counter = messages::read_u64(datagram, messages::data::COUNTER);
        if !self.may_accept(counter) {
            return Err(OpenError::Replayed);
        }
        let plain = self.keys.open(datagram).map_err(|_| OpenError::Auth)?;
        if !self.accept(counter) {
            return Err(OpenError::Replayed);
        }
        Ok(plain)
    }
}

/// Hands out the next send counter. Senders check `is_valid` (counter below
/// `REJECT_AFTER_MESSAGES`, session younger than `REJECT_AFTER_TIME`) before
/// each burst of at most a batch, so the data counter never uses up the
/// 2^13 counters above that limit, and the extension counter counts at most
/// one session lifetime of messages. Checked all the same: wrapping would
/// reuse a nonce, which must stop the sender, in release builds too.
fn take_counter(counter: &mut u64) -> u64 {
    let taken = *counter;
    *counter = taken
        .checked_add(1)
        .expect("a session's send counter never reaches u64::MAX");
    taken
}

fn ext_nonce(counter: u64) -> ring::aead::Nonce {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&crate::ext::NONCE_PREFIX);
    n[4..].copy_from_slice(&counter.to_le_bytes());
    ring::aead::Nonce::assume_unique_for_key(n)
}

impl Keypair {
    /// Seals an extension payload into `out` as a complete `TYPE_BRAID`
    /// message; returns its length.
    pub fn seal_ext(&mut self, payload: &[u8], out: &mut [u8]) -> usize {
        out[DATA_HEADER_LEN..DATA_HEADER_LEN + payload.len()].copy_from_slice(payload);
        self.seal_ext_in_place(out, payload.len())
    }

    /// `seal_ext` for a payload already at `DATA_HEADER_LEN` in `out` (a
    /// padded PMTU probe is built where it is sent from).
    pub fn seal_ext_in_place(&mut self, out: &mut [u8], payload_len: usize) -> usize {
        let counter = take_counter(&mut self.ext_send_counter);
        self.seal_ext_at(counter, payload_len, out)
    }

    /// Fuzzing hook (feature `testing`): an extension message with a
    /// counter of the caller's choice, so a fuzzer can reach the
    /// authenticated extension parser with forged counters and payloads.
    #[cfg(feature = "testing")]
    pub fn seal_ext_for_fuzzing(&self, counter: u64, payload: &[u8], out: &mut [u8]) -> usize {
        out[DATA_HEADER_LEN..DATA_HEADER_LEN + payload.len()].copy_from_slice(payload);
        self.seal_ext_at(counter, payload.len(), out)
    }

    /// Seals the extension payload at `DATA_HEADER_LEN` in `out` with
    /// `counter`; returns the message length.
    fn seal_ext_at(&self, counter: u64, payload_len: usize, out: &mut [u8]) -> usize {
        messages::write_header(out, messages::TYPE_BRAID);
        out[messages::data::RECEIVER..messages::data::RECEIVER + 4]
            .copy_from_slice(&self.remote_index.to_le_bytes());
        out[messages::data::COUNTER..messages::data::COUNTER + 8]
            .copy_from_slice(&counter.to_le_bytes());
        let end = DATA_HEADER_LEN + payload_len;
        let tag = self
            .keys
            .chacha()
            .0
            .seal_in_place_separate_tag(
                ext_nonce(counter),
                Aad::empty(),
                &mut out[DATA_HEADER_LEN..end],
            )
            .expect("small payload");
        out[end..end + TAG_LEN].copy_from_slice(tag.as_ref());
        end + TAG_LEN
    }

    /// Opens a `TYPE_BRAID` message in place; returns the payload length
    /// (at `DATA_HEADER_LEN`).
    pub fn open_ext(&mut self, datagram: &mut [u8]) -> Result<usize, OpenError> {
        let counter = messages::read_u64(datagram, messages::data::COUNTER);
        if counter >= REJECT_AFTER_MESSAGES || !self.ext_replay.check(counter) {
            return Err(OpenError::Replayed);
        }
        let n = self
            .keys
            .chacha()
            .1
            .open_in_place(
                ext_nonce(counter),
                Aad::empty(),
                &mut datagram[DATA_HEADER_LEN..],
            )
            .map_err(|_| OpenError::Auth)?
            .len();
        if !self.ext_replay.update(counter) {
            return Err(OpenError::Replayed);
        }
        Ok(n)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Counter seen before, too old, or past the message limit.
    Replayed,
    /// The tag did not verify.
    Auth,
}

/// Which of a peer's sessions a receiver index belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotName {
    Current,
    Previous,
    Next,
}

#[derive(Default)]
pub struct Keypairs {
    pub current: Option<Box<Keypair>>,
    pub previous: Option<Box<Keypair>>,
    pub next: Option<Box<Keypair>>,
}

impl Keypairs {
    /// Installs a new session; returns the local indices of sessions that
    /// were dropped (to remove from the index table).
    pub fn install(&mut self, kp: Box<Keypair>, dropped: &mut Vec<u32>) {
        if kp.initiator {
            // A pending `next` was never confirmed by its initiator, but it is
            // the newest session the peer has: keep it as `previous`.
            if let Some(next) = self.next.take() {
                if let Some(old) = self.previous.replace(next) {
                    dropped.push(old.local_index);
                }
                if let Some(cur) = self.current.take() {
                    dropped.push(cur.local_index);
                }
            } else if let Some(cur) = self.current.take() {
                if let Some(old) = self.previous.replace(cur) {
                    dropped.push(old.local_index);
                }
            }
            self.current = Some(kp);
        } else {
            // The responder cannot use it before confirmation; the old
            // `previous` is no longer needed to bridge a rotation.
            for old in [self.next.replace(kp), self.previous.take()]
                .into_iter()
                .flatten()
            {
                dropped.push(old.local_index);
            }
        }
    }

    /// The first data message on `next` confirms it: it becomes current.
    pub fn confirm_next(&mut self, dropped: &mut Vec<u32>) {
        if let Some(next) = self.next.take() {
            if let Some(old) = self.previous.take() {
                dropped.push(old.local_index);
            }
            self.previous = self.current.take();
            self.current = Some(next);
        }
    }

    pub fn find_mut(&mut self, local_index: u32) -> Option<(SlotName, &mut Keypair)> {
        if let Some(k) = self
            .current
            .as_deref_mut()
            .filter(|k| k.local_index == local_index)
        {
            return Some((SlotName::Current, k));
        }
        if let Some(k) = self
            .next
            .as_deref_mut()
            .filter(|k| k.local_index == local_index)
        {
            return Some((SlotName::Next, k));
        }
        if let Some(k) = self
            .previous
            .as_deref_mut()
            .filter(|k| k.local_index == local_index)
        {
            return Some((SlotName::Previous, k));
        }
        None
    }

    /// Ages every session by `by` (see [`Keypair::age_by`]); false when
    /// one could not be aged (then drop them all).
    #[must_use]
    pub fn age_by(&mut self, by: std::time::Duration) -> bool {
        [&mut self.current, &mut self.previous, &mut self.next]
            .into_iter()
            .flatten()
            .all(|kp| kp.age_by(by))
    }

    /// Drops every session; returns their indices.
    pub fn clear(&mut self, dropped: &mut Vec<u32>) {
        for kp in [self.current.take(), self.previous.take(), self.next.take()]
            .into_iter()
            .flatten()
        {
            dropped.push(kp.local_index);
        }
    }
}
