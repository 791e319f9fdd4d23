//! Runs every target body over its seed corpus (fuzz/seeds/<target>/) and
//! a few thousand pseudo-random inputs: on a stable toolchain, without
//! libFuzzer, the bodies still run in CI.

use crate::TARGETS;
use std::path::Path;

/// Inputs per target; the slow ones (a handshake per input) get fewer.
fn random_inputs(name: &str) -> usize {
    match name {
        "datagram_with_session" | "handshake" | "datagram_no_session" => 300,
        _ => 3000,
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn corpus(name: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

#[test]
fn every_target_survives_its_corpus_and_random_inputs() {
    for &(name, body) in TARGETS {
        let seeds = corpus(name);
        for seed in &seeds {
            body(seed);
        }
        let mut state = name.len() as u64;
        for i in 0..random_inputs(name) {
            let len = (splitmix(&mut state) % 512) as usize;
            let mut input: Vec<u8> = (0..len).map(|_| splitmix(&mut state) as u8).collect();
            // Half of them are seeds with a few bytes changed, which keeps
            // the structure the seeds give and reaches deeper.
            if i % 2 == 1 && !seeds.is_empty() {
                let seed = &seeds[i % seeds.len()];
                input = seed.clone();
                for _ in 0..4 {
                    if input.is_empty() {
                        break;
                    }
                    let at = (splitmix(&mut state) as usize) % input.len();
                    input[at] = splitmix(&mut state) as u8;
                }
            }
            body(&input);
        }
        eprintln!(
            "{name}: {} seeds, {} random inputs",
            seeds.len(),
            random_inputs(name)
        );
    }
}
