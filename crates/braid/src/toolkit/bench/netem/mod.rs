//! `braid bench netem`: how fast the relay forwards and how precisely it
//! delays, on this machine, in one run.
//!
//! 1. Forwarding: a sender thread blasts 1400-byte datagrams with sendmmsg
//!    through a relay to a receiver thread that counts them (recvmmsg). The
//!    relay is either `braid netem` (a child process, no impairment) or a
//!    plain relay with one recv_from/send_to per datagram, as socat does.
//!    Same load generator, same run; median of several runs each. The relay
//!    is pinned to the last CPU, the load generator to the others, so "one
//!    core" means one core.
//! 2. Delay error: `braid netem --delay 3ms` at 50 000 datagrams/s; the
//!    sender writes its send time into each datagram, the receiver takes
//!    the one-way delay on the same clock and reports |delay − 3 ms| at the
//!    50th and 99th percentile.

mod load;
mod measure;
mod relay;

use super::args::Args;
use measure::{delay_run, forwarding_run, median, pct, Opts};
use serde_json::json;

pub const USAGE: &str = "\
usage: braid bench netem [--seconds 3] [--runs 3] [--size 1400] [--rate 50000] [--json]

Measures `braid netem` on this machine: forwarding rate without impairment
(vs a one-syscall-per-datagram relay, same load, same run) and the delay
error for --delay 3ms at --rate datagrams/s.
";

fn parse(argv: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        seconds: 3.0,
        runs: 3,
        size: 1400,
        rate: 50_000,
        json: false,
    };
    let mut args = Args::new(argv);
    while let Some(a) = args.next() {
        match a {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--seconds" => o.seconds = args.number(a, 0.01..=3600.0)?,
            "--runs" => o.runs = args.number(a, 1..=100)?,
            "--size" => o.size = args.number(a, 16..=65000)?,
            "--rate" => o.rate = args.number(a, 100..=1_000_000)?,
            _ => {
                return Err(format!(
                    "unknown flag {a:?}; see `braid bench netem --help`"
                ))
            }
        }
    }
    Ok(Some(o))
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    let mut table = Vec::new();
    let mut results = serde_json::Map::new();
    for (netem, name) in [
        (true, "braid netem (recvmmsg/sendmmsg)"),
        (false, "plain relay (recv_from/send_to)"),
    ] {
        let mut pps = Vec::new();
        let mut offered = Vec::new();
        for r in 0..o.runs {
            eprint!(
                "bench netem: forwarding {}B via {name}, run {}/{} … ",
                o.size,
                r + 1,
                o.runs
            );
            let (p, s) = forwarding_run(netem, &o)?;
            eprintln!(
                "{:.0} pkt/s ({:.2} Gbit/s), offered {:.0} pkt/s",
                p,
                p * o.size as f64 * 8.0 / 1e9,
                s
            );
            pps.push(p);
            offered.push(s);
        }
        let m = median(&mut pps.clone());
        let gbps = m * o.size as f64 * 8.0 / 1e9;
        table.push((
            name,
            m,
            gbps,
            pps.iter().cloned().fold(f64::MAX, f64::min),
            pps.iter().cloned().fold(0.0, f64::max),
            median(&mut offered),
        ));
        results.insert(
            if netem { "netem" } else { "plain" }.into(),
            json!({"median_pps": m, "median_gbps": gbps, "runs_pps": pps}),
        );
    }
    // 1 µs: what the loopback path itself adds (sender, relay wake-up,
    // receiver), to tell it apart from the relay's timing.
    let mut delays = Vec::new();
    for (label, ns) in [("3ms", 3_000_000u64), ("1us", 1_000)] {
        eprint!(
            "bench netem: delay error, --delay {label} at {} pkt/s of {}B for {} s … ",
            o.rate, o.size, o.seconds
        );
        let (mut errs, offered) = delay_run(&o, ns)?;
        errs.sort_unstable();
        eprintln!("{} samples", errs.len());
        delays.push((
            label,
            offered,
            errs.len(),
            pct(&errs, 0.5),
            pct(&errs, 0.99),
            pct(&errs, 1.0),
        ));
    }
    if o.json {
        let d: Vec<_> = delays
            .iter()
            .map(|(label, offered, n, p50, p99, max)| {
                json!({"delay": label, "rate_pps": o.rate, "size": o.size,
                       "offered": offered, "samples": n,
                       "p50_us": p50, "p99_us": p99, "max_us": max})
            })
            .collect();
        let j = json!({
            "forwarding": {"size": o.size, "seconds": o.seconds, "runs": o.runs,
                           "netem": results["netem"], "plain": results["plain"]},
            "delay_error": d,
        });
        println!("{j}");
        return Ok(());
    }
    println!(
        "forwarding, {} B datagrams, loopback, {} runs of {} s, relay on its own core",
        o.size, o.runs, o.seconds
    );
    println!("| relay | median pkt/s | Gbit/s | min pkt/s | max pkt/s | offered pkt/s |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, m, g, lo, hi, off) in &table {
        println!("| {name} | {m:.0} | {g:.2} | {lo:.0} | {hi:.0} | {off:.0} |");
    }
    println!("netem / plain: {:.2}×", table[0].1 / table[1].1);
    println!();
    println!(
        "delay error |one-way delay − configured|, {} pkt/s of {} B, {} s (after 0.3 s warm-up)",
        o.rate, o.size, o.seconds
    );
    println!("| --delay | p50 | p99 | max | measured/sent |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (label, offered, n, p50, p99, max) in &delays {
        println!("| {label} | {p50:.1} µs | {p99:.1} µs | {max:.1} µs | {n}/{offered} |");
    }
    Ok(())
}
