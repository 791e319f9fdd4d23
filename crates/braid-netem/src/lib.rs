//! braid's line model, the `braid netem` relay's engine and units, apart
//! from the protocol core:
//!
//! - [`link`]: a seeded, sans-IO model of an impaired line (delay, jitter,
//!   loss, duplication, corruption, rate, MTU, cuts). The `braid netem`
//!   relay and braid-core's simulator (`braid_core::testing`) both run
//!   their lines through it, so a test and a real run share one definition
//!   of "3 ms ± 1 ms, 1 % loss".
//! - [`relay`]: the `braid netem` relay's engine, sans-IO: its client
//!   table, packet pool, delay line, cuts, counters and deadlines. The
//!   Linux I/O around it (epoll, batched sockets through braid-io, signals,
//!   the control socket) stays in the braid crate, since braid-io builds on
//!   braid-core, whose simulator builds on this crate.
//! - [`units`]: one grammar for durations, rates, probabilities and sizes,
//!   as `braid netem` flags and config keys write them.
//!
//! Nothing here reads a clock or opens a socket: time is passed in.

pub mod link;
pub mod relay;
pub mod units;
