//! `braid netem`: a userspace link-impairment emulator (a UDP relay that
//! delays, jitters, reorders, loses, duplicates, corrupts, rate-limits,
//! MTU-limits and cuts), built on [`braid_netem::link::LinkModel`] so the
//! simulator of the protocol tests and real runs share one line model.
//!
//! The relay is split the way braid splits its protocol: the sans-IO engine
//! ([`braid_netem::relay`]: client table, packet pool, delay line, cuts,
//! counters, deadlines) lives in braid-netem; what stays here is the Linux
//! I/O around it:
//!
//! - [`args`]: the command line (its units are [`braid_netem::units`]),
//!   parsed into a [`args::Config`] that gives the engine its
//!   [`braid_netem::relay::RelayConfig`];
//! - [`relay`]: the epoll loop and the sockets (the listen socket, one
//!   upstream socket per client), batched with recvmmsg/sendmmsg through
//!   braid-io;
//! - [`control`]: epoll, signals and the `--control` socket;
//! - [`spin`]: how long the loop polls before a deadline, within a share
//!   of the time;
//! - [`stats`]: the counters as JSON (the engine prints them as text).
//!
//! `braid bench netem` is [`crate::toolkit::bench::netem`].

pub mod args;
pub mod control;
pub mod relay;
pub mod spin;
pub mod stats;

/// `braid netem ARGS…`: checks every argument before opening a socket, then
/// relays until SIGINT/SIGTERM or `--duration`, and prints the counters.
pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(cfg) = args::parse(argv)? else {
        print!("{}", args::USAGE);
        return Ok(());
    };
    let json = cfg.json;
    let mut relay = relay::Relay::new(cfg, true)?;
    eprintln!("{}", relay.banner());
    let counters = relay.run().map_err(|e| format!("netem: {e}"))?;
    if json {
        println!("{}", stats::to_json(&counters));
    } else {
        print!("{}", counters.to_table());
    }
    Ok(())
}
