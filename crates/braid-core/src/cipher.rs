//! The data-channel cipher of a session.
//!
//! WireGuard seals data with ChaCha20-Poly1305, and with a stock peer that
//! is all there is. Between two braid peers AES-256-GCM is several times
//! faster wherever the CPU has AES instructions, so each side says in its
//! (authenticated) Hello whether it offers AES-256-GCM, and a session's
//! data moves to AES only once both sides have offered it.
//!
//! The AES keys come from the same handshake: each direction's key is
//! `KDF1(chacha_key, label)`, so both ends derive the same pair and a
//! session's AES keys die with it. AES-sealed data messages carry their
//! own message type, [`TYPE_DATA_AES`](crate::messages::TYPE_DATA_AES), so
//! a receiver knows the cipher of every message without any switch-over
//! point, and counters (nonces) stay one sequence per session.

use crate::crypto::{self, Key, TAG_LEN};
use crate::messages::{self, DATA_HEADER_LEN};
use ring::aead::{Aad, LessSafeKey, Tag};
use std::fmt;
use zeroize::Zeroize;

mod aes_key;

pub use aes_key::{AesKey, AesLibrary};

/// What a user allows (`Cipher =` in `[Interface]` or `[Peer]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CipherPolicy {
    /// AES-256-GCM when both ends have AES hardware, else ChaCha20-Poly1305.
    #[default]
    Auto,
    /// Never offer AES-256-GCM.
    ChaCha20Poly1305,
    /// Offer AES-256-GCM even without AES hardware here; it is used when
    /// the peer offers it too.
    Aes256Gcm,
}

impl CipherPolicy {
    pub const NAMES: &'static str = "auto, chacha20poly1305 or aes256gcm";

    pub fn parse(s: &str) -> Option<CipherPolicy> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(CipherPolicy::Auto),
            "chacha20poly1305" | "chacha20-poly1305" => Some(CipherPolicy::ChaCha20Poly1305),
            "aes256gcm" | "aes-256-gcm" => Some(CipherPolicy::Aes256Gcm),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CipherPolicy::Auto => "auto",
            CipherPolicy::ChaCha20Poly1305 => "chacha20poly1305",
            CipherPolicy::Aes256Gcm => "aes256gcm",
        }
    }

    /// Whether this end offers AES-256-GCM, given its hardware.
    pub fn offers_aes(self, aes_hardware: bool) -> bool {
        match self {
            CipherPolicy::Auto => aes_hardware,
            CipherPolicy::ChaCha20Poly1305 => false,
            CipherPolicy::Aes256Gcm => true,
        }
    }
}

impl fmt::Display for CipherPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The cipher a data message is sealed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataCipher {
    #[default]
    ChaCha20Poly1305,
    Aes256Gcm,
}

impl DataCipher {
    pub fn name(self) -> &'static str {
        match self {
            DataCipher::ChaCha20Poly1305 => "chacha20poly1305",
            DataCipher::Aes256Gcm => "aes256gcm",
        }
    }

    fn message_type(self) -> u8 {
        match self {
            DataCipher::ChaCha20Poly1305 => messages::TYPE_DATA,
            DataCipher::Aes256Gcm => messages::TYPE_DATA_AES,
        }
    }

    /// The cipher of a data message, by its type byte.
    pub fn of_message(datagram: &[u8]) -> DataCipher {
        if datagram.first() == Some(&messages::TYPE_DATA_AES) {
            DataCipher::Aes256Gcm
        } else {
            DataCipher::ChaCha20Poly1305
        }
    }
}

/// The two kinds of instructions that make AES-GCM fast: the AES rounds,
/// and the carry-less multiply that GHASH (GCM's authenticator) is built
/// on. Without either, AES-GCM runs as constant-time software several
/// times slower than ChaCha20-Poly1305 (ARM cores without the crypto
/// extension, which many routers have), so `Cipher = auto` offers it only
/// with both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AesGcmInstructions {
    pub aes: bool,
    pub carryless_multiply: bool,
}

impl AesGcmInstructions {
    /// What the two are called on this architecture, as the CPU's feature
    /// flags (`/proc/cpuinfo`) name them; `None` where braid knows no
    /// such instructions.
    pub const NAMES: Option<(&'static str, &'static str)> = if cfg!(target_arch = "x86_64") {
        Some(("aes", "pclmulqdq"))
    } else if cfg!(target_arch = "aarch64") {
        Some(("aes", "pmull"))
    } else {
        None
    };

    /// What this CPU has (as the kernel reports it: CPUID on x86, the
    /// auxiliary vector's HWCAP on ARM).
    pub fn detect() -> AesGcmInstructions {
        #[cfg(target_arch = "x86_64")]
        {
            AesGcmInstructions {
                aes: std::arch::is_x86_feature_detected!("aes"),
                carryless_multiply: std::arch::is_x86_feature_detected!("pclmulqdq"),
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            AesGcmInstructions {
                aes: std::arch::is_aarch64_feature_detected!("aes"),
                carryless_multiply: std::arch::is_aarch64_feature_detected!("pmull"),
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            AesGcmInstructions {
                aes: false,
                carryless_multiply: false,
            }
        }
    }

    /// Both present: AES-GCM is fast here.
    pub fn fast_aes_gcm(self) -> bool {
        self.aes && self.carryless_multiply
    }

    /// The names of the ones this CPU lacks (all of them where
    /// [`Self::NAMES`] is `None`: there is nothing to name).
    pub fn missing(self) -> Vec<&'static str> {
        let Some((aes, clmul)) = Self::NAMES else {
            return Vec::new();
        };
        [(aes, self.aes), (clmul, self.carryless_multiply)]
            .into_iter()
            .filter(|&(_, present)| !present)
            .map(|(name, _)| name)
            .collect()
    }

    /// The cipher `Cipher = auto` seals with here when the peer offers
    /// AES-256-GCM too (with a stock WireGuard peer it is always
    /// ChaCha20-Poly1305).
    pub fn auto_choice(self) -> DataCipher {
        if CipherPolicy::Auto.offers_aes(self.fast_aes_gcm()) {
            DataCipher::Aes256Gcm
        } else {
            DataCipher::ChaCha20Poly1305
        }
    }
}

/// Whether this CPU has both instructions AES-GCM needs to be fast
/// ([`AesGcmInstructions`]).
pub fn aes_hardware() -> bool {
    AesGcmInstructions::detect().fast_aes_gcm()
}

const AES_LABEL: &[u8] = b"braid aes256gcm data v1";

/// One session's data keys, both directions, every cipher it may use.
/// Shared (behind an `Arc`) with the threads that seal and open outside
/// the device lock; immutable once made, wiped when the last holder drops
/// them.
pub struct DataKeys {
    chacha_send: Wiped<LessSafeKey>,
    chacha_recv: Wiped<LessSafeKey>,
    aes: Option<(Wiped<AesKey>, Wiped<AesKey>)>,
}

/// A value whose bytes are overwritten with zeros once it is dropped.
/// ring keeps an AEAD key (the ChaCha20 key, the AES round keys) inline in
/// `LessSafeKey` and does not wipe it, so without this a session's keys
/// would stay in freed memory after the session ends (Linux WireGuard
/// frees keypairs with `kfree_sensitive` for the same reason). aws-lc
/// keeps its key in a context of its own that it wipes when freeing it.
struct Wiped<T>(std::mem::ManuallyDrop<T>);

impl<T> Wiped<T> {
    fn new(value: T) -> Self {
        Wiped(std::mem::ManuallyDrop::new(value))
    }
}

impl<T> std::ops::Deref for Wiped<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Drop for Wiped<T> {
    fn drop(&mut self) {
        // SAFETY: the value is dropped exactly once, here, and never used
        // again: `ManuallyDrop` keeps the compiler from dropping it a
        // second time.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.0) };
        let at = std::ptr::addr_of_mut!(self.0).cast::<std::mem::MaybeUninit<u8>>();
        // SAFETY: `at` spans the `size_of::<T>()` bytes this wrapper owns;
        // they are seen as `MaybeUninit<u8>` (valid whatever they hold,
        // padding included) and only written, after the value is gone.
        let bytes = unsafe { std::slice::from_raw_parts_mut(at, std::mem::size_of::<T>()) };
        bytes.zeroize();
    }
}

/// A data message failed to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthFailed;

impl DataKeys {
    /// Keys for a session; the AES pair (in `aes`'s library) only when
    /// this end offers AES.
    pub fn new(send: &Key, recv: &Key, aes: Option<AesLibrary>) -> DataKeys {
        let aes = aes.map(|library| {
            (
                Wiped::new(aes_key(library, send)),
                Wiped::new(aes_key(library, recv)),
            )
        });
        DataKeys {
            chacha_send: Wiped::new(crypto::aead_key(send)),
            chacha_recv: Wiped::new(crypto::aead_key(recv)),
            aes,
        }
    }

    pub fn has_aes(&self) -> bool {
        self.aes.is_some()
    }

    /// Seals the data message in `datagram` (header written by
    /// [`write_data_header`], plaintext padded at `DATA_HEADER_LEN`, room
    /// for the tag behind it) in place.
    pub fn seal(&self, datagram: &mut [u8]) {
        let cipher = DataCipher::of_message(datagram);
        let counter = messages::read_u64(datagram, messages::data::COUNTER);
        let end = datagram.len() - TAG_LEN;
        let body = &mut datagram[DATA_HEADER_LEN..end];
        let tag: [u8; TAG_LEN] = match (cipher, &self.aes) {
            (DataCipher::Aes256Gcm, Some((send, _))) => send.seal(counter, body),
            _ => {
                let tag: Tag = self
                    .chacha_send
                    .seal_in_place_separate_tag(crypto::nonce(counter), Aad::empty(), body)
                    .expect("packet length is within AEAD limits");
                tag.as_ref().try_into().expect("16-byte tag")
            }
        };
        datagram[end..].copy_from_slice(&tag);
    }

    /// Opens a data message in place; returns the plaintext length (at
    /// `DATA_HEADER_LEN`). The replay window is not touched here.
    pub fn open(&self, datagram: &mut [u8]) -> Result<usize, AuthFailed> {
        let counter = messages::read_u64(datagram, messages::data::COUNTER);
        let cipher = DataCipher::of_message(datagram);
        let sealed = &mut datagram[DATA_HEADER_LEN..];
        match (cipher, &self.aes) {
            (DataCipher::ChaCha20Poly1305, _) => self
                .chacha_recv
                .open_in_place(crypto::nonce(counter), Aad::empty(), sealed)
                .map(|plain| plain.len())
                .map_err(|_| AuthFailed),
            (DataCipher::Aes256Gcm, Some((_, recv))) => recv.open(counter, sealed),
            // We never offered AES on this session.
            (DataCipher::Aes256Gcm, None) => Err(AuthFailed),
        }
    }

    /// The ChaCha20-Poly1305 keys, which also seal extension messages.
    pub(crate) fn chacha(&self) -> (&LessSafeKey, &LessSafeKey) {
        (&*self.chacha_send, &*self.chacha_recv)
    }
}

fn aes_key(library: AesLibrary, session_key: &Key) -> AesKey {
    let mut k = crypto::kdf1(session_key, AES_LABEL);
    let key = AesKey::new(library, &k);
    k.zeroize();
    key
}

/// Writes a data message header for `counter` sealed with `cipher`, and
/// zero-pads the plaintext (`len` bytes at `DATA_HEADER_LEN`) to `padded`.
/// Returns the datagram length once sealed.
pub fn write_data_header(
    buf: &mut [u8],
    cipher: DataCipher,
    remote_index: u32,
    counter: u64,
    len: usize,
    padded: usize,
) -> usize {
    buf[DATA_HEADER_LEN + len..DATA_HEADER_LEN + padded].fill(0);
    messages::write_header(buf, cipher.message_type());
    buf[messages::data::RECEIVER..messages::data::RECEIVER + 4]
        .copy_from_slice(&remote_index.to_le_bytes());
    buf[messages::data::COUNTER..messages::data::COUNTER + 8]
        .copy_from_slice(&counter.to_le_bytes());
    DATA_HEADER_LEN + padded + TAG_LEN
}

#[cfg(test)]
mod tests {
    #[test]
    fn wiped_values_are_dropped_once_then_zeroed() {
        use std::rc::Rc;
        let count = Rc::new(());
        drop(Wiped::new(Rc::clone(&count)));
        assert_eq!(
            Rc::strong_count(&count),
            1,
            "the inner value was dropped once"
        );

        let mut slot = std::mem::MaybeUninit::new(Wiped::new([0xab_u8; 32]));
        // SAFETY: the slot holds a live value, dropped here once; its
        // bytes are read back as plain bytes, which the drop wrote.
        let bytes: [u8; 32] = unsafe {
            slot.as_mut_ptr().drop_in_place();
            std::ptr::read(slot.as_ptr().cast())
        };
        assert_eq!(bytes, [0; 32]);
    }

    use super::*;

    fn message(keys: &DataKeys, cipher: DataCipher, counter: u64, text: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; DATA_HEADER_LEN + text.len() + TAG_LEN];
        buf[DATA_HEADER_LEN..DATA_HEADER_LEN + text.len()].copy_from_slice(text);
        let n = write_data_header(&mut buf, cipher, 7, counter, text.len(), text.len());
        keys.seal(&mut buf[..n]);
        buf
    }

    #[test]
    fn both_ciphers_round_trip_and_differ() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let alice = DataKeys::new(&a, &b, Some(AesLibrary::Ring));
        let bob = DataKeys::new(&b, &a, Some(AesLibrary::Ring));
        let chacha = message(&alice, DataCipher::ChaCha20Poly1305, 5, b"hello braid");
        let aes = message(&alice, DataCipher::Aes256Gcm, 5, b"hello braid");
        assert_eq!(chacha[0], messages::TYPE_DATA);
        assert_eq!(aes[0], messages::TYPE_DATA_AES);
        assert_ne!(chacha[DATA_HEADER_LEN..], aes[DATA_HEADER_LEN..]);
        for mut m in [chacha, aes] {
            let n = bob.open(&mut m).expect("opens");
            assert_eq!(&m[DATA_HEADER_LEN..DATA_HEADER_LEN + n], b"hello braid");
        }
    }

    #[test]
    fn aes_refused_when_not_offered_and_tampering_detected() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let alice = DataKeys::new(&a, &b, Some(AesLibrary::Ring));
        let stock_bob = DataKeys::new(&b, &a, None);
        let mut aes = message(&alice, DataCipher::Aes256Gcm, 0, b"x");
        assert_eq!(stock_bob.open(&mut aes), Err(AuthFailed));
        // The type byte is not authenticated, but flipping it only makes the
        // wrong key try: the tag fails.
        let bob = DataKeys::new(&b, &a, Some(AesLibrary::Ring));
        let mut flipped = message(&alice, DataCipher::Aes256Gcm, 0, b"x");
        flipped[0] = messages::TYPE_DATA;
        assert_eq!(bob.open(&mut flipped), Err(AuthFailed));
        let mut counter_changed = message(&alice, DataCipher::ChaCha20Poly1305, 0, b"x");
        counter_changed[messages::data::COUNTER] = 1;
        assert_eq!(bob.open(&mut counter_changed), Err(AuthFailed));
    }

    #[test]
    fn auto_takes_aes_only_with_both_instructions() {
        let cpu = |aes, carryless_multiply| AesGcmInstructions {
            aes,
            carryless_multiply,
        };
        assert_eq!(cpu(true, true).auto_choice(), DataCipher::Aes256Gcm);
        for without_one in [cpu(true, false), cpu(false, true), cpu(false, false)] {
            assert!(!without_one.fast_aes_gcm());
            assert_eq!(without_one.auto_choice(), DataCipher::ChaCha20Poly1305);
        }
        assert!(cpu(true, true).missing().is_empty());
        if let Some((aes, clmul)) = AesGcmInstructions::NAMES {
            assert_eq!(cpu(true, false).missing(), [clmul]);
            assert_eq!(cpu(false, true).missing(), [aes]);
            assert_eq!(cpu(false, false).missing(), [aes, clmul]);
        }
        assert_eq!(aes_hardware(), AesGcmInstructions::detect().fast_aes_gcm());
    }

    #[test]
    fn policy_names_and_offers() {
        for p in [
            CipherPolicy::Auto,
            CipherPolicy::ChaCha20Poly1305,
            CipherPolicy::Aes256Gcm,
        ] {
            assert_eq!(CipherPolicy::parse(p.name()), Some(p));
        }
        assert_eq!(
            CipherPolicy::parse("AES-256-GCM"),
            Some(CipherPolicy::Aes256Gcm)
        );
        assert_eq!(CipherPolicy::parse("rot13"), None);
        assert!(CipherPolicy::Auto.offers_aes(true));
        assert!(!CipherPolicy::Auto.offers_aes(false));
        assert!(CipherPolicy::Aes256Gcm.offers_aes(false));
        assert!(!CipherPolicy::ChaCha20Poly1305.offers_aes(true));
    }
}
