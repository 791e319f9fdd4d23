//! The lab: throw-away networks on this machine for the demo, the
//! benchmarks and the end-to-end tests. Network namespaces, veth pairs,
//! `braid netem` lines, braid and wireguard-go tunnels, iperf3 and ping,
//! all removed again when their guard is dropped (also after an error or a
//! panic). Underlay addresses come from 198.18.0.0/16, tunnel addresses
//! from 198.19.0.0/16, IPv6 from 2001:db8::/32; every name carries a
//! per-run prefix so runs never collide.
//!
//! What lives where:
//!
//! - [`setup`]: [`Lab`], one owner for a whole setup (namespaces, veths,
//!   children, braid interfaces, files), for the demo and the benches;
//! - [`netns`]: [`Netns`] and [`Veth`] guards, commands inside a namespace;
//! - [`process`]: bounded command runs ([`Out`]), [`ChildGuard`], PIDs,
//!   tool lookup;
//! - [`config`]: keys and [`IfaceConf`], the wg-quick / `wg setconf` builder;
//! - [`braid`]: `braid up/down/show`, `braid show --json`, cleanup;
//! - [`wireguard_go`]: `wireguard-go` as the other end;
//! - [`mptcp`]: the kernel's Multipath TCP over two wireguard-go tunnels,
//!   the anchor bonded lines are measured against;
//! - [`uapi`]: the UAPI socket directory and `wg show` text;
//! - [`netem_line`]: `braid netem` relays as impaired lines;
//! - [`ping`] and [`iperf`]: running them and reading what they report;
//! - [`traffic`]: checked UDP sequences and TCP transfers from threads
//!   inside namespaces;
//! - [`stop`]: Ctrl-C handling for long runs.
//!
//! Everything returns [`LabResult`]; the end-to-end tests wrap it in
//! panicking helpers of their own.

pub mod braid;
pub mod config;
pub mod iperf;
pub mod mptcp;
pub mod netem_line;
pub mod netns;
pub mod ping;
pub mod process;
pub mod setup;
pub mod stop;
pub mod traffic;
pub mod uapi;
pub mod wireguard_go;

pub use config::{keypair, IfaceConf, Keys, PeerConf};
pub use netem_line::{realtime_relays, NetemLine};
pub use netns::{Netns, Veth};
pub use process::{require_tools, run, tool_exists, ChildGuard, LabResult, Out};
pub use setup::{ChildId, Lab};
pub use stop::{catch_stop_signals, check_stop, sleep_unless_stopped, stop_signalled};
