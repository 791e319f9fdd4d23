//! braid's line model and units, apart from the protocol core:
//!
//! - [`link`]: a seeded, sans-IO model of an impaired line (delay, jitter,
//!   loss, duplication, corruption, rate, MTU, cuts). The `braid netem`
//!   relay and braid-core's simulator (`braid_core::testing`) both run
//!   their lines through it, so a test and a real run share one definition
//!   of "3 ms ± 1 ms, 1 % loss".
//! - [`units`]: one grammar for durations, rates, probabilities and sizes,
//!   as `braid netem` flags and config keys write them.
//!
//! The relay itself (`braid netem`, in the braid crate) stays beside its
//! batched UDP sockets in braid-io: braid-io builds on braid-core, whose
//! simulator builds on this crate, so a dependency from here on braid-io
//! would be a cycle.

pub mod link;
pub mod relay;
pub mod units;
