//! The measuring toolkit around the VPN: what a user of braid runs to see how
//! fast and how well it works, and what the end-to-end tests build on.
//!
//! - [`lab`]: network namespaces, veth lines, impaired lines, processes that
//!   are cleaned up on drop, iperf3 and ping; shared by the demo, the benches
//!   and the end-to-end tests;
//! - [`demo`]: `braid demo`;
//! - [`bench`]: `braid bench crypto|tunnel|lines|echo|handshake-flood|netem`;
//! - [`netem`]: `braid netem`, the link-impairment emulator;
//! - [`plot`]: `--plot FILE.svg` of the demo and the benches.

pub mod bench;
pub mod demo;
pub mod lab;
pub mod netem;
pub mod plot;
