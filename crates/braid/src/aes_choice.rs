//! Which library seals AES-256-GCM fastest on this CPU, measured once per
//! process: the daemon gives the answer to its device, and `braid doctor`
//! and `braid bench crypto` print it.
//!
//! The libraries produce the same bytes, so the choice never reaches the
//! wire; only the speed differs (on x86-64 cores with VAES and AVX-512,
//! aws-lc-rs sealed 1420-byte packets a third faster than ring; see
//! docs/performance.md), and on another CPU the order may be the other way.

use braid_core::cipher::{AesKey, AesLibrary};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The library chosen, and what each one sealed when measured.
#[derive(Debug, Clone)]
pub struct AesChoice {
    pub library: AesLibrary,
    /// MB/s (10^6 bytes of plaintext a second) sealing 1420-byte packets on
    /// one core, per library in [`AesLibrary::ALL`] order; empty when the
    /// build has only one library.
    pub measured: Vec<(AesLibrary, f64)>,
}

/// Measured on first use, then the same for the life of the process.
pub fn choice() -> &'static AesChoice {
    static CHOICE: OnceLock<AesChoice> = OnceLock::new();
    CHOICE.get_or_init(measure)
}

const PACKET: usize = 1420;
const BATCH: usize = 48;
const ROUNDS: usize = 7;

/// Seals batches of packets with each library in turn and keeps each
/// one's quickest batch: a batch that another thread or process preempted
/// only ever reads slower, so the minimum is what the code can do. About
/// 0.2 ms in all.
fn measure() -> AesChoice {
    let libraries = AesLibrary::ALL;
    if libraries.len() == 1 {
        return AesChoice {
            library: libraries[0],
            measured: Vec::new(),
        };
    }
    let keys: Vec<AesKey> = libraries
        .iter()
        .map(|&library| AesKey::new(library, &[0x5a; 32]))
        .collect();
    let mut packet = vec![0u8; PACKET];
    let mut best = vec![Duration::MAX; libraries.len()];
    let mut counter = 0u64;
    // Round 0 warms the caches and is not counted.
    for round in 0..=ROUNDS {
        for (key, best) in keys.iter().zip(&mut best) {
            let start = Instant::now();
            for _ in 0..BATCH {
                counter += 1;
                std::hint::black_box(key.seal(counter, &mut packet));
            }
            if round > 0 {
                *best = (*best).min(start.elapsed());
            }
        }
    }
    let bytes = (BATCH * PACKET) as f64;
    let measured: Vec<(AesLibrary, f64)> = libraries
        .iter()
        .zip(&best)
        .map(|(&library, took)| (library, bytes / took.as_secs_f64().max(1e-9) / 1e6))
        .collect();
    let library = fastest(&measured);
    AesChoice { library, measured }
}

/// The library with the highest rate; the first of equals.
fn fastest(measured: &[(AesLibrary, f64)]) -> AesLibrary {
    measured
        .iter()
        .fold(measured[0], |best, &m| if m.1 > best.1 { m } else { best })
        .0
}

/// One line for people: which library, and the rates it was chosen by.
pub fn text() -> String {
    let choice = choice();
    if choice.measured.is_empty() {
        return format!(
            "AES-256-GCM: {} (the only library in this build)",
            choice.library.name()
        );
    }
    let measured: Vec<String> = choice
        .measured
        .iter()
        .map(|(library, mbs)| format!("{} {mbs:.0} MB/s", library.name()))
        .collect();
    format!(
        "AES-256-GCM: {} (fastest when braid started: {}; 1420-byte seals, one core)",
        choice.library.name(),
        measured.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_is_a_library_of_this_build_and_the_fastest_measured() {
        let choice = choice();
        assert!(AesLibrary::ALL.contains(&choice.library));
        if AesLibrary::ALL.len() == 1 {
            assert!(choice.measured.is_empty());
            return;
        }
        assert_eq!(choice.measured.len(), AesLibrary::ALL.len());
        let top = choice.measured.iter().map(|m| m.1).fold(0.0, f64::max);
        let chosen = choice.measured.iter().find(|m| m.0 == choice.library);
        assert_eq!(chosen.map(|m| m.1), Some(top));
        assert!(top > 0.0);
        assert!(text().contains(choice.library.name()));
    }

    #[test]
    fn the_first_of_equal_rates_wins() {
        let only = [(AesLibrary::Ring, 5.0)];
        assert_eq!(fastest(&only), AesLibrary::Ring);
        let all: Vec<(AesLibrary, f64)> = AesLibrary::ALL.iter().map(|&l| (l, 1.0)).collect();
        assert_eq!(fastest(&all), AesLibrary::Ring);
    }
}
