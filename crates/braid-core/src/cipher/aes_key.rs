//! A session's AES-256-GCM key, in whichever maintained library seals
//! fastest on this CPU.
//!
//! ring and aws-lc-rs produce the same bytes (AES-GCM is deterministic for
//! a key and nonce), so the choice is local to one end and never reaches
//! the wire. They differ in speed: on x86-64 cores with VAES and AVX-512,
//! aws-lc's AES-GCM sealed 1420-byte packets at 8.4–8.8 GB/s where ring's
//! did 6.5 (docs/performance.md); on other CPUs the order may differ. So
//! the I/O layer measures both when it starts (a fraction of a
//! millisecond; the core reads no clock) and tells the device which to
//! use (`Device::set_aes_library`). aws-lc-rs is only in x86-64 glibc
//! builds; elsewhere ring is all there is.

use super::AuthFailed;
use crate::crypto::TAG_LEN;

/// An AES-256-GCM library braid can seal with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AesLibrary {
    Ring,
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    AwsLc,
}

impl AesLibrary {
    /// Every library in this build, ring first.
    pub const ALL: &'static [AesLibrary] = &[
        AesLibrary::Ring,
        #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
        AesLibrary::AwsLc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AesLibrary::Ring => "ring",
            #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
            AesLibrary::AwsLc => "aws-lc-rs",
        }
    }
}

/// One direction's AES-256-GCM key (also what `braid bench crypto` times).
// ring keeps its round keys inline (544 bytes), aws-lc-rs behind a
// pointer; a session has two of these, so the size difference is moot.
#[allow(clippy::large_enum_variant)]
pub enum AesKey {
    Ring(ring::aead::LessSafeKey),
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    AwsLc(aws_lc_rs::aead::LessSafeKey),
}

impl AesKey {
    pub fn new(library: AesLibrary, key: &[u8; 32]) -> AesKey {
        match library {
            AesLibrary::Ring => AesKey::Ring(ring::aead::LessSafeKey::new(
                ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key).expect("32-byte key"),
            )),
            #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
            AesLibrary::AwsLc => AesKey::AwsLc(aws_lc_rs::aead::LessSafeKey::new(
                aws_lc_rs::aead::UnboundKey::new(&aws_lc_rs::aead::AES_256_GCM, key)
                    .expect("32-byte key"),
            )),
        }
    }

    /// Seals `body` in place with WireGuard's nonce for `counter` and no
    /// associated data; returns the tag.
    pub fn seal(&self, counter: u64, body: &mut [u8]) -> [u8; TAG_LEN] {
        let nonce = nonce_bytes(counter);
        let mut tag = [0u8; TAG_LEN];
        match self {
            AesKey::Ring(key) => {
                let t = key
                    .seal_in_place_separate_tag(
                        ring::aead::Nonce::assume_unique_for_key(nonce),
                        ring::aead::Aad::empty(),
                        body,
                    )
                    .expect("packet length is within AEAD limits");
                tag.copy_from_slice(t.as_ref());
            }
            #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
            AesKey::AwsLc(key) => {
                let t = key
                    .seal_in_place_separate_tag(
                        aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce),
                        aws_lc_rs::aead::Aad::empty(),
                        body,
                    )
                    .expect("packet length is within AEAD limits");
                tag.copy_from_slice(t.as_ref());
            }
        }
        tag
    }

    /// Opens `sealed` (ciphertext and tag) in place; returns the plaintext
    /// length.
    pub fn open(&self, counter: u64, sealed: &mut [u8]) -> Result<usize, AuthFailed> {
        let nonce = nonce_bytes(counter);
        match self {
            AesKey::Ring(key) => key
                .open_in_place(
                    ring::aead::Nonce::assume_unique_for_key(nonce),
                    ring::aead::Aad::empty(),
                    sealed,
                )
                .map(|plain| plain.len())
                .map_err(|_| AuthFailed),
            #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
            AesKey::AwsLc(key) => key
                .open_in_place(
                    aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce),
                    aws_lc_rs::aead::Aad::empty(),
                    sealed,
                )
                .map(|plain| plain.len())
                .map_err(|_| AuthFailed),
        }
    }
}

/// WireGuard's nonce: four zero bytes, then the counter little-endian.
fn nonce_bytes(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_library_seals_the_same_bytes_and_opens_the_others() {
        let key = [0x42u8; 32];
        let keys: Vec<AesKey> = AesLibrary::ALL
            .iter()
            .map(|&l| AesKey::new(l, &key))
            .collect();
        let plain: Vec<u8> = (0..1420u32).map(|i| (i * 7) as u8).collect();
        let mut sealed = Vec::new();
        for key in &keys {
            let mut body = plain.clone();
            let tag = key.seal(9, &mut body);
            body.extend_from_slice(&tag);
            sealed.push(body);
        }
        assert!(sealed.windows(2).all(|w| w[0] == w[1]));
        for key in &keys {
            let mut body = sealed[0].clone();
            assert_eq!(key.open(9, &mut body), Ok(plain.len()));
            assert_eq!(&body[..plain.len()], &plain[..]);
            let mut tampered = sealed[0].clone();
            tampered[100] ^= 1;
            assert_eq!(key.open(9, &mut tampered), Err(AuthFailed));
            let mut body = sealed[0].clone();
            assert_eq!(key.open(10, &mut body), Err(AuthFailed), "wrong nonce");
        }
    }
}
