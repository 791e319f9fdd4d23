//! `braid bench lines`: the dual-line measurements of issue 4, all in one
//! run, between two network namespaces joined by veth pairs ("lines").
//!
//! ```text
//!  netns <p>-a (client)                       netns <p>-b (server)
//!  braid <p>a 198.19.93.1 ── line1 veth ──► braid netem 198.18.93.2:5001 ─┐
//!  iperf3 -c               ── line2 veth ──► braid netem 198.18.94.2:5002 ─┴► braid <p>b :51820
//!                                                                             198.19.93.2, iperf3 -s
//! ```
//!
//! Every case starts fresh relays and fresh tunnels, runs one bounded
//! iperf3 transfer from A to B, reads `braid show` on both sides and takes
//! everything down again. The sections:
//!
//! 1. the seed's table: one line; no delay, 3 ms, 3 ms ± 1 ms, 200 ms,
//!    200 ms ± 50 ms; TCP windows 256 KiB and 8 MiB; braid with
//!    `ReorderHold = 0` and with the window;
//! 2. two 200 Mbit/s lines with 2 % loss each, `redundant`: UDP loss inside the tunnel
//!    and TCP against a clean single line;
//! 3. two lines, one cut for 3 s of a 10 s constant-rate UDP stream:
//!    `redundant` loses nothing, `failover` is out for lost ÷ rate;
//! 4. two lines capped at 100 Mbit/s (10 ms and 30 ms): `aggregate` one TCP
//!    stream, `redundant` for comparison;
//! 5. unequal lines (issue 19): a 100 Mbit/s 10 ms line alone, then bonded
//!    in `aggregate` with a 25 Mbit/s 40 ms line, a 2 Mbit/s 300 ms line
//!    and a 25 Mbit/s line with 2 % loss, one TCP stream with cubic and
//!    with bbr: a bond must beat its best line and a bad line must not drag
//!    it down.
//!
//! The lab (namespaces, relays, daemons, files) is removed on the way out,
//! also after an error, a panic, Ctrl-C, SIGTERM or SIGHUP.

mod checks;
mod plan;
mod report;
mod run;

use crate::toolkit::bench::args::{require_root, Args};
use crate::toolkit::lab;
use plan::{Measure, Opts, SECTIONS};
use run::Bench;
use std::io::Write as _;
use std::time::Instant;

const USAGE: &str = "\
usage: braid bench lines [--quick] [--json] [--seconds N] [--long-seconds N]
                         [--runs N] [--only seed,loss,cut,aggregate,unequal]

Dual-line benchmark (issue 4) between two network namespaces, lines made
with `braid netem`, iperf3 single stream, every case on fresh relays and
tunnels. Prints a progress line per case on stderr, then the tables.

  --quick            a smoke run: fewer and shorter cases
  --json             print everything (cases, counters, checks) as JSON
  --seconds N        length of a short transfer (default 5, quick 2)
  --long-seconds N   length of a transfer over a 200 ms line and of the
                     aggregate case (default 15, quick 5)
  --runs N           repeat each short TCP case of sections 1 and 2 N times,
                     interleaved, and show the median (default 3, quick 1)
  --only LIST        run only these sections (seed, loss, cut, aggregate,
                     unequal: a fast and a slow, lossy or very slow line,
                     aggregate against the fast line alone, cubic and bbr,
                     10 s each, quick 4)

Needs root, ip, iperf3 and ping. Exits with status 1 when a check fails.
";

fn parse(argv: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        quick: false,
        json: false,
        short: 0,
        long: 0,
        runs: 0,
        only: SECTIONS.iter().map(|s| s.to_string()).collect(),
    };
    let (mut short, mut long, mut runs) = (None, None, None);
    let mut args = Args::new(argv);
    while let Some(a) = args.next() {
        match a {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--quick" => o.quick = true,
            "--seconds" => short = Some(args.number(a, 1..=600)?),
            "--long-seconds" => long = Some(args.number(a, 1..=600)?),
            "--runs" => runs = Some(args.number(a, 1..=20)?),
            "--only" => {
                let v = args.value(a)?;
                o.only = v.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = o.only.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                    return Err(format!(
                        "--only: unknown section {bad:?} (expected {})",
                        SECTIONS.join(", ")
                    ));
                }
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    o.short = short.unwrap_or(if o.quick { 2 } else { 5 });
    o.long = long.unwrap_or(if o.quick { 5 } else { 15 });
    o.runs = runs.unwrap_or(if o.quick { 1 } else { 3 });
    Ok(Some(o))
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    require_root("lines")?;
    lab::require_tools(&["ip", "iperf3", "ping"])?;
    lab::catch_stop_signals();
    let cases = plan::plan(&o);
    let start = Instant::now();
    let mut outcomes = Vec::new();
    {
        let mut bench = Bench::new()?;
        for (i, case) in cases.iter().enumerate() {
            if lab::stop_signalled() {
                break;
            }
            eprint!(
                "[{:>2}/{}] {} ({} s) … ",
                i + 1,
                cases.len(),
                case.label,
                case.seconds
            );
            let _ = std::io::stderr().flush();
            let out = bench.run_case(case);
            let text = match &out.result {
                Ok(v) => match &case.measure {
                    Measure::Tcp { .. } => format!(
                        "{:.1} Mbit/s, {} retransmits",
                        v["mbps"].as_f64().unwrap_or(0.0),
                        v["retransmits"]
                    ),
                    Measure::Udp { .. } => format!(
                        "{} of {} lost ({:.3} %), {:.1} Mbit/s",
                        v["lost_packets"],
                        v["packets"],
                        v["lost_percent"].as_f64().unwrap_or(0.0),
                        v["mbps"].as_f64().unwrap_or(0.0)
                    ),
                },
                Err(e) => format!("error: {e}"),
            };
            eprintln!("{text} [{:.0} s]", out.wall);
            for n in &out.notes {
                eprintln!("        note: {n}");
            }
            outcomes.push(out);
        }
        if lab::stop_signalled() {
            eprintln!("interrupted: removing the lab");
        }
        // The lab goes here: namespaces, relays, daemons, files.
    }
    if lab::stop_signalled() {
        return Err("interrupted; the lab was removed".into());
    }
    let total = start.elapsed().as_secs_f64();
    let r = checks::Results {
        cases: &cases,
        outcomes: &outcomes,
    };
    let rows = report::seed_rows(&r);
    let checks = checks::checks(&r);
    if o.json {
        report::print_json(&o, &r, &rows, &checks, total);
    } else {
        report::print_text(&o, &r, &rows, &checks, total);
    }
    let failed = checks.iter().filter(|c| c.pass == Some(false)).count();
    if failed > 0 {
        return Err(format!("{failed} check(s) failed"));
    }
    Ok(())
}
