//! The timed AEAD loops: seal or open packets of one size in place for a
//! bounded time, on one thread or one per core, as the data path does.

use crate::aes_choice;
use braid_core::cipher::AesKey;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Packet sizes (bytes of plaintext), the columns of the table.
pub const SIZES: [usize; 6] = [64, 256, 1024, 1420, 8192, 16384];
const TAG_LEN: usize = 16;
/// Sealed packets the open loop cycles through.
const OPEN_RING: usize = 4;
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cipher {
    ChaCha20Poly1305,
    Aes256Gcm,
}

impl Cipher {
    pub const ALL: [Cipher; 2] = [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm];

    pub fn name(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "ChaCha20-Poly1305",
            Cipher::Aes256Gcm => "AES-256-GCM",
        }
    }

    /// The spelling of `Cipher =` in the configuration.
    pub fn id(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "chacha20poly1305",
            Cipher::Aes256Gcm => "aes256gcm",
        }
    }

    pub(super) fn openssl_name(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
            Cipher::Aes256Gcm => "aes-256-gcm",
        }
    }

    /// The library the data path seals this cipher with (for AES-256-GCM
    /// the one braid measured fastest at start).
    pub fn library(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "ring",
            Cipher::Aes256Gcm => aes_choice::choice().library.name(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    Seal,
    Open,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Seal => "seal",
            Op::Open => "open",
        }
    }
}

/// WireGuard's nonce: 4 zero bytes, then the counter in little endian.
fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

/// A key of the data path's library for `cipher`.
enum Key {
    ChaCha(LessSafeKey),
    Aes(AesKey),
}

impl Key {
    fn new(cipher: Cipher, seed: usize) -> Key {
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = (i.wrapping_mul(29) ^ seed.wrapping_mul(151) ^ 0x5a) as u8;
        }
        match cipher {
            Cipher::ChaCha20Poly1305 => Key::ChaCha(LessSafeKey::new(
                UnboundKey::new(&aead::CHACHA20_POLY1305, &k).expect("32-byte key"),
            )),
            Cipher::Aes256Gcm => Key::Aes(AesKey::new(aes_choice::choice().library, &k)),
        }
    }

    /// Seals `body` in place and writes the tag after it, as the data path
    /// does.
    fn seal(&self, counter: u64, packet: &mut [u8], len: usize) {
        let (body, tag) = packet.split_at_mut(len);
        match self {
            Key::ChaCha(key) => {
                let t = key
                    .seal_in_place_separate_tag(nonce(counter), Aad::empty(), body)
                    .expect("seal");
                tag[..TAG_LEN].copy_from_slice(t.as_ref());
            }
            Key::Aes(key) => tag[..TAG_LEN].copy_from_slice(&key.seal(counter, body)),
        }
    }

    /// Opens `sealed` (body and tag) in place; the plaintext's length.
    fn open(&self, counter: u64, sealed: &mut [u8]) -> Option<usize> {
        match self {
            Key::ChaCha(key) => key
                .open_in_place(nonce(counter), Aad::empty(), sealed)
                .ok()
                .map(|p| p.len()),
            Key::Aes(key) => key.open(counter, sealed).ok(),
        }
    }
}

/// Runs one operation on `size`-byte packets for `dur` on this thread and
/// returns plaintext bytes per second.
fn measure(cipher: Cipher, op: Op, size: usize, dur: Duration, seed: usize) -> f64 {
    let key = Key::new(cipher, seed);
    let mut work = vec![0u8; size + TAG_LEN];
    for (i, b) in work.iter_mut().enumerate() {
        *b = (i * 7 + seed) as u8;
    }
    // Check the clock about every 64 KiB of data.
    let batch = (65536 / size).max(1) as u64;
    let mut ops = 0u64;
    let start = Instant::now();
    match op {
        Op::Seal => loop {
            for _ in 0..batch {
                key.seal(ops, &mut work, size);
                ops += 1;
            }
            std::hint::black_box(&mut work);
            if start.elapsed() >= dur {
                break;
            }
        },
        Op::Open => {
            let sealed: Vec<Vec<u8>> = (0..OPEN_RING as u64)
                .map(|c| {
                    let mut p = work.clone();
                    key.seal(c, &mut p, size);
                    p
                })
                .collect();
            let start = Instant::now();
            loop {
                for _ in 0..batch {
                    let i = (ops % OPEN_RING as u64) as usize;
                    work.copy_from_slice(&sealed[i]);
                    let plain = key
                        .open(i as u64, &mut work)
                        .expect("a sealed packet opens");
                    std::hint::black_box(plain);
                    ops += 1;
                }
                if start.elapsed() >= dur {
                    break;
                }
            }
            return (ops * size as u64) as f64 / start.elapsed().as_secs_f64();
        }
    }
    (ops * size as u64) as f64 / start.elapsed().as_secs_f64()
}

/// Bytes of `size`-byte packets one core seals per second, measured for
/// `dur` (what `braid doctor` runs to pick the faster cipher here).
pub fn seal_rate(cipher: Cipher, size: usize, dur: Duration) -> f64 {
    measure(cipher, Op::Seal, size, dur, 0)
}

/// Bytes of `size`-byte packets one core opens per second, measured for
/// `dur` (what `braid bench tunnel` subtracts from a VPN's CPU).
pub fn open_rate(cipher: Cipher, size: usize, dur: Duration) -> f64 {
    measure(cipher, Op::Open, size, dur, 0)
}

/// One thread per core, each on its own key, started together; the sum of
/// their rates.
pub(super) fn measure_parallel(
    cipher: Cipher,
    op: Op,
    size: usize,
    dur: Duration,
    threads: usize,
) -> f64 {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    measure(cipher, op, size, dur, t + 1)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonce_is_wireguards() {
        let n = nonce(0x0102_0304_0506_0708);
        assert_eq!(n.as_ref(), &[0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn open_verifies_what_seal_wrote() {
        for c in Cipher::ALL {
            let k = Key::new(c, 3);
            let mut p = vec![9u8; 100 + TAG_LEN];
            k.seal(5, &mut p, 100);
            assert_ne!(&p[..100], &[9u8; 100][..]);
            let mut bad = p.clone();
            bad[0] ^= 1;
            assert_eq!(k.open(5, &mut bad), None);
            assert_eq!(k.open(5, &mut p), Some(100));
            assert_eq!(&p[..100], &[9u8; 100][..]);
        }
    }
}
