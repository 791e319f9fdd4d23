//! The bodies of braid's fuzz targets (one module per target in
//! `fuzz_targets/`), kept in a library so a stable-toolchain test can run
//! them over the seed corpora and pseudo-random inputs without libFuzzer.
//!
//! Every body must never panic on any input; where a target has a model or
//! an invariant to check, it asserts it, so a violation is a crash too.

pub mod corpus;
pub mod input;
pub mod pair;
pub mod steer;

pub mod config;
pub mod datagram_no_session;
pub mod datagram_with_session;
pub mod fragments;
pub mod handshake;
pub mod mss_clamp;
pub mod offload;
pub mod reorder_window;
pub mod replay_window;
pub mod uapi;

/// A target body: takes the fuzzer's bytes, panics only on a bug.
pub type Body = fn(&[u8]);

/// Every target by name, for the stable-toolchain replay (the gate) and
/// the `replay` program.
pub const TARGETS: &[(&str, Body)] = &[
    ("datagram_no_session", datagram_no_session::run),
    ("datagram_with_session", datagram_with_session::run),
    ("handshake", handshake::run),
    ("reorder_window", reorder_window::run),
    ("replay_window", replay_window::run),
    ("config", config::run),
    ("uapi", uapi::run),
    ("mss_clamp", mss_clamp::run),
    ("offload", offload::run),
    ("fragments", fragments::run),
];

#[cfg(test)]
mod smoke;
