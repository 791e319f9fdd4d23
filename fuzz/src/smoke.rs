//! The test gate's part of fuzzing, on the stable toolchain and with
//! overflow checks on: every target body over its seed corpus, every
//! input fuzzing has ever found (`fuzz/regressions/<target>/`), and a fixed
//! set of mutated seeds. Nothing here is random: the mutations come from a
//! generator with a constant seed, so every run feeds the same bytes and
//! two runs on one commit decide the same way. Exploring is
//! `scripts/fuzz`'s job.

use crate::corpus::{self, replay_command, run_caught};
use crate::TARGETS;

/// Mutated seeds per target; the slow ones (a handshake per input) get fewer.
fn mutations(name: &str) -> usize {
    match name {
        "datagram_with_session" | "handshake" | "datagram_no_session" => 300,
        _ => 3000,
    }
}

/// SplitMix64: a fixed, platform-independent sequence from a constant seed.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn every_target_survives_its_seeds_and_every_past_find() {
    let mut failures = Vec::new();
    for &(name, body) in TARGETS {
        let mut replayed = 0;
        for kind in corpus::KINDS {
            for file in corpus::files(&corpus::dir(kind, name)) {
                let bytes = std::fs::read(&file).expect("readable input");
                replayed += 1;
                if let Err(msg) = run_caught(body, &bytes) {
                    failures.push(format!(
                        "{name}: {msg}\n    replay: {}",
                        replay_command(name, &file)
                    ));
                }
            }
        }
        assert!(
            replayed > 0,
            "{name} has no seeds: the gate would feed it nothing"
        );
        eprintln!("{name}: {replayed} seeds and past finds replayed");
    }
    assert!(
        failures.is_empty(),
        "inputs that panic:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_target_survives_fixed_mutations_of_its_seeds() {
    let mut failures = Vec::new();
    for &(name, body) in TARGETS {
        let seeds: Vec<Vec<u8>> = corpus::files(&corpus::dir("seeds", name))
            .iter()
            .map(|f| std::fs::read(f).expect("readable seed"))
            .collect();
        let mut state = name.len() as u64;
        for i in 0..mutations(name) {
            let len = (splitmix(&mut state) % 512) as usize;
            let mut input: Vec<u8> = (0..len).map(|_| splitmix(&mut state) as u8).collect();
            // Half of them are seeds with a few bytes changed, which keeps
            // the structure the seeds give and reaches deeper.
            if i % 2 == 1 && !seeds.is_empty() {
                input = seeds[i % seeds.len()].clone();
                for _ in 0..4 {
                    if input.is_empty() {
                        break;
                    }
                    let at = (splitmix(&mut state) as usize) % input.len();
                    input[at] = splitmix(&mut state) as u8;
                }
            }
            if let Err(msg) = run_caught(body, &input) {
                failures.push(format!(
                    "{name}: mutation {i} ({} bytes: {:02x?}): {msg}",
                    input.len(),
                    input
                ));
            }
        }
        eprintln!("{name}: {} fixed mutations", mutations(name));
    }
    assert!(
        failures.is_empty(),
        "inputs that panic:\n{}",
        failures.join("\n")
    );
}
