//! WireGuard's primitives, composed from maintained crates: BLAKE2s hash,
//! HMAC-BLAKE2s, the HKDF-like KDF of the Noise framework, keyed BLAKE2s-128
//! MACs, ChaCha20-Poly1305 (ring, assembly on x86 and ARM) and
//! XChaCha20-Poly1305 (RustCrypto; only for cookie replies, off the hot path).

use blake2::digest::{FixedOutput, KeyInit, Mac, Update};
use blake2::{Blake2s256, Blake2sMac, Digest};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::XChaCha20Poly1305;
use ring::aead::{self, LessSafeKey, UnboundKey, CHACHA20_POLY1305};

pub const KEY_LEN: usize = 32;
pub const HASH_LEN: usize = 32;
pub const TAG_LEN: usize = 16;
pub const MAC_LEN: usize = 16;

pub type Hash = [u8; HASH_LEN];
pub type Key = [u8; KEY_LEN];

/// HASH(a || b || …)
pub fn hash(parts: &[&[u8]]) -> Hash {
    let mut h = Blake2s256::new();
    for p in parts {
        Digest::update(&mut h, p);
    }
    h.finalize().into()
}

/// HMAC-BLAKE2s(key, a || b || …)
fn hmac(key: &[u8], parts: &[&[u8]]) -> Hash {
    let mut m = <hmac::SimpleHmac<Blake2s256> as KeyInit>::new_from_slice(key)
        .expect("HMAC accepts keys of any length");
    for p in parts {
        Mac::update(&mut m, p);
    }
    m.finalize_fixed().into()
}

/// The Noise KDF with one, two or three outputs (only the ones asked for are
/// computed).
pub fn kdf1(key: &[u8], input: &[u8]) -> Hash {
    let t0 = hmac(key, &[input]);
    hmac(&t0, &[&[1]])
}

pub fn kdf2(key: &[u8], input: &[u8]) -> (Hash, Hash) {
    let t0 = hmac(key, &[input]);
    let t1 = hmac(&t0, &[&[1]]);
    let t2 = hmac(&t0, &[&t1, &[2]]);
    (t1, t2)
}

pub fn kdf3(key: &[u8], input: &[u8]) -> (Hash, Hash, Hash) {
    let t0 = hmac(key, &[input]);
    let t1 = hmac(&t0, &[&[1]]);
    let t2 = hmac(&t0, &[&t1, &[2]]);
    let t3 = hmac(&t0, &[&t2, &[3]]);
    (t1, t2, t3)
}

/// MAC(key, input): keyed BLAKE2s with a 128-bit output.
pub fn mac(key: &[u8], input: &[u8]) -> [u8; MAC_LEN] {
    let mut m = <Blake2sMac<blake2::digest::consts::U16> as KeyInit>::new_from_slice(key)
        .expect("BLAKE2s accepts keys up to 32 bytes");
    Update::update(&mut m, input);
    m.finalize_fixed().into()
}

/// The 96-bit nonce of WireGuard's AEAD: 32 zero bits, then the counter
/// little-endian.
pub fn nonce(counter: u64) -> aead::Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    aead::Nonce::assume_unique_for_key(n)
}

/// A ChaCha20-Poly1305 key prepared for repeated use.
pub fn aead_key(key: &Key) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).expect("32-byte key"))
}

/// Seals `plaintext` into `out` (`plaintext.len() + TAG_LEN` bytes).
pub fn seal(key: &Key, counter: u64, plaintext: &[u8], aad: &[u8], out: &mut [u8]) {
    let (body, tag_out) = out.split_at_mut(plaintext.len());
    body.copy_from_slice(plaintext);
    let tag = aead_key(key)
        .seal_in_place_separate_tag(nonce(counter), aead::Aad::from(aad), body)
        .expect("plaintext length is within ChaCha20-Poly1305 limits");
    tag_out[..TAG_LEN].copy_from_slice(tag.as_ref());
}

/// Opens `ciphertext` (with tag) into `out` (`ciphertext.len() - TAG_LEN` bytes).
pub fn open(
    key: &Key,
    counter: u64,
    ciphertext: &[u8],
    aad: &[u8],
    out: &mut [u8],
) -> Result<(), AuthError> {
    let mut buf = [0u8; 64];
    let n = ciphertext.len();
    if n < TAG_LEN || n > buf.len() || out.len() != n - TAG_LEN {
        return Err(AuthError);
    }
    buf[..n].copy_from_slice(ciphertext);
    let plain = aead_key(key)
        .open_in_place(nonce(counter), aead::Aad::from(aad), &mut buf[..n])
        .map_err(|_| AuthError)?;
    out.copy_from_slice(plain);
    Ok(())
}

/// XChaCha20-Poly1305 seal of a 16-byte cookie (cookie replies only).
pub fn xseal_cookie(key: &Key, nonce: &[u8; 24], cookie: &[u8; MAC_LEN], aad: &[u8]) -> [u8; 32] {
    let cipher = <XChaCha20Poly1305 as chacha20poly1305::KeyInit>::new(key.into());
    let mut out = [0u8; 32];
    out[..MAC_LEN].copy_from_slice(cookie);
    let tag = cipher
        .encrypt_in_place_detached(nonce.into(), aad, &mut out[..MAC_LEN])
        .expect("a 16-byte message is within limits");
    out[MAC_LEN..].copy_from_slice(&tag);
    out
}

pub fn xopen_cookie(
    key: &Key,
    nonce: &[u8; 24],
    sealed: &[u8; 32],
    aad: &[u8],
) -> Result<[u8; MAC_LEN], AuthError> {
    let cipher = <XChaCha20Poly1305 as chacha20poly1305::KeyInit>::new(key.into());
    let mut cookie = [0u8; MAC_LEN];
    cookie.copy_from_slice(&sealed[..MAC_LEN]);
    cipher
        .decrypt_in_place_detached(nonce.into(), aad, &mut cookie, sealed[MAC_LEN..].into())
        .map_err(|_| AuthError)?;
    Ok(cookie)
}

/// An AEAD tag did not verify: the message was forged, corrupted or keyed
/// for someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthError;

/// Constant-time equality for MACs and keys.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blake2s_empty_matches_rfc7693() {
        // BLAKE2s-256("") from RFC 7693 Appendix / reference implementation.
        let h = hash(&[]);
        assert_eq!(
            hex(&h),
            "69217a3079908094e11121d042354a7c1f55b6482ca1a51e1b250dfd1ed0eef9"
        );
    }

    #[test]
    fn seal_open_round_trip_and_tamper() {
        let key = [7u8; 32];
        let mut sealed = [0u8; 21];
        seal(&key, 3, b"hello", b"aad", &mut sealed);
        let mut out = [0u8; 5];
        open(&key, 3, &sealed, b"aad", &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert!(open(&key, 4, &sealed, b"aad", &mut out).is_err());
        sealed[0] ^= 1;
        assert!(open(&key, 3, &sealed, b"aad", &mut out).is_err());
    }

    #[test]
    fn xchacha_cookie_round_trip() {
        let key = [9u8; 32];
        let nonce = [1u8; 24];
        let sealed = xseal_cookie(&key, &nonce, &[5u8; 16], b"mac1");
        assert_eq!(
            xopen_cookie(&key, &nonce, &sealed, b"mac1").unwrap(),
            [5u8; 16]
        );
        assert!(xopen_cookie(&key, &nonce, &sealed, b"mac2").is_err());
    }

    pub fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
