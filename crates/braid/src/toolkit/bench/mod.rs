//! `braid bench …`: one module per benchmark. Each measures braid side by side
//! with its anchors in one run and prints the numbers (and `--json`).

pub mod args;
pub mod crypto;
pub mod echo;
pub mod flood;
pub mod lines;
pub mod netem;
pub mod peers;
pub mod stats;
pub mod tunnel;
