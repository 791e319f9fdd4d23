//! braid's end-to-end tests, one test binary (`cargo test -p braid --test
//! e2e`), one module per subject. Most of them build throw-away networks
//! (namespaces, veth pairs, braid and wireguard-go tunnels) with
//! `braid::toolkit::lab`, the same lab `braid demo` and `braid bench` use;
//! [`harness`] adds what only tests need: a `TestEnv` per test (unique
//! names, a directory for logs), preflight checks and panicking wrappers.
//!
//! All tests of this binary share one process and run in parallel
//! (`--test-threads=2` in CI), so nothing here may change process-wide
//! state (signal handlers, the environment, the current directory, umask):
//! a daemon's settings go to its `Command`, names carry the run's unique
//! prefix (`TestEnv`), and throughput is measured under `iperf_lock`.
//!
//! Tests that need root and tools skip (or fail, with `CI=true`) when they
//! are missing; `bash scripts/test` runs them as root.

mod harness;
mod two_lines;

mod aggregate;
mod bench_crypto;
mod bench_lines_mptcp;
mod bench_peers;
mod bench_tunnel;
mod checksums;
mod compression;
mod crypto_helpers;
mod cryptokey_routing;
mod doctor;
mod doctor_paths;
mod emulated;
mod fail_closed;
mod faults;
mod fragments;
mod full_tunnel;
mod handshake_flood;
mod interop;
mod ipv6;
mod large_mtu;
mod large_uapi;
mod late_receiver;
mod logs;
mod manual;
mod many_peers;
mod metrics;
mod mss;
mod multipath;
mod netem;
mod netem_rate;
mod netns_move;
mod package;
mod plots;
mod pmtu;
mod privilege;
mod queues;
mod rate_limit;
mod realtime;
mod reload;
mod resource_bounds;
mod roaming;
mod soak;
mod sticky;
mod tcp_transport;
mod top;
mod wg_quick;
