//! `braid netem`: a userspace link-impairment emulator (a UDP relay that
//! delays, jitters, reorders, loses, duplicates, corrupts, rate-limits,
//! MTU-limits and cuts), built on [`braid_netem::link::LinkModel`] so the
//! simulator of the protocol tests and real runs share one line model.
//!
//! - [`args`]: the command line (its units are [`braid_netem::units`]);
//! - [`relay`]: the batched epoll relay with its delay line;
//! - [`control`]: epoll, signals and the `--control` socket;
//! - [`stats`]: the counters and how they are printed.
//!
//! `braid bench netem` is [`crate::toolkit::bench::netem`].
//!
//! The relay stays here rather than in braid-netem: it sends through
//! braid-io's batched sockets, braid-io builds on braid-core (for
//! `PacketBatch`), and braid-core's simulator builds on braid-netem, so
//! braid-netem → braid-io would close a cycle.

pub mod args;
pub mod control;
pub mod relay;
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
    let stats = relay.run().map_err(|e| format!("netem: {e}"))?;
    if json {
        println!("{}", stats.to_json());
    } else {
        print!("{}", stats.to_table());
    }
    Ok(())
}
