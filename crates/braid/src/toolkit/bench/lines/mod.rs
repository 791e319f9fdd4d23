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
//! 5. unequal lines (issue 19), with cubic and with bbr inside the tunnel:
//!    six rows (100 + 25 Mbit/s; 50 + 50 with 5 and 60 ms; 100 + 2 Mbit/s
//!    300 ms; 100 + 25 where line 1 falls to 10 Mbit/s at 3 s; 200 + 200
//!    with 4 streams; 100 + 25 with 2 % loss on the 25), each measured
//!    with braid `aggregate`, with the best line alone (`failover`) and
//!    with the anchor people bond lines with today: the kernel's Multipath
//!    TCP over two wireguard-go tunnels, one per line, on the same relays
//!    ([`crate::toolkit::lab::mptcp`]).
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

pub const USAGE: &str = "\
usage: braid bench lines [--quick] [--json] [--seconds N] [--long-seconds N]
                         [--runs N] [--only seed,loss,cut,aggregate,unequal]
                         [--cc LIST] [--unequal-cc LIST] [--rows LIST]
                         [--unequal-runs N] [--plot FILE.svg] [--realtime]

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
                     unequal)
  --cc LIST          congestion controls of the TCP inside the tunnel in
                     sections 1, 2 and 4, each in turn (iperf3 -C: cubic,
                     bbr, reno, vegas, westwood, or default: the machine's,
                     /proc/sys/net/ipv4/tcp_congestion_control); default:
                     sections 1 and 2 default,cubic (quick: default),
                     section 4 default
  --unequal-cc LIST  the congestion controls section 5 runs every row with
                     (default cubic,bbr; quick cubic)
  --rows LIST        only these rows of section 5 (bond, even, slow, fall,
                     wide, lossy; default all)
  --unequal-runs N   rounds of section 5, interleaved; its table shows the
                     median of each cell (default 1)
  --plot FILE.svg    also draw every transfer: Mbit/s per second on each
                     line (its relay's count) and in total (iperf3's
                     receiver), cuts, restores and rate changes marked, and
                     when braid saw a line go down or up (the failover)
  --realtime         run the relays at real-time priority (SCHED_FIFO
                     30), so other work on a shared machine does not delay
                     the lines' timing; the VPNs and iperf3 stay in the
                     normal class

Section 5 (unequal, issue 19): two `braid netem` lines with rate caps and
100 ms queues, one TCP stream unless said, 10 s per case (quick 5 s):
  bond   100 Mbit/s 10 ms + 25 Mbit/s 40 ms   ≥ 85 % of the sum, ≥ 97 % of MPTCP
  even   50 Mbit/s 5 ms + 50 Mbit/s 60 ms     ≥ 85 % of the sum
  slow   100 Mbit/s 10 ms + 2 Mbit/s 300 ms   ≥ 95 % of the best line alone
  fall   bond's lines, line 1 falls to 10 Mbit/s at 3 s (quick 2 s):
         what arrives over the last 5 s (quick 2 s) ≥ 70 % of 35 Mbit/s
  wide   200 Mbit/s + 200 Mbit/s, 4 streams   ≥ 90 % of the sum
  lossy  bond's lines, 2 % loss on the 25     ≥ 90 % of the bond row
Every row: the best line alone (braid, Mode = failover), braid Mode =
aggregate, and the kernel's Multipath TCP over two wireguard-go tunnels
(the newest, from ~/.cache/braid-bench/bin/wireguard or $BRAID_BENCH_CACHE;
installed with `go install` when missing) with `mptcpize run iperf3`, two
subflows (checked: per-line relay counters and `ss`). Without mptcpize or
the newest wireguard-go the MPTCP column says why it was not measured.

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
        cc: Vec::new(),
        agg_cc: Vec::new(),
        unequal_cc: Vec::new(),
        rows: plan::ROWS.iter().map(|r| r.key.to_string()).collect(),
        unequal_runs: 1,
        plot: None,
        realtime: false,
    };
    let mut unequal_cc = None;
    let mut cc = None;
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
            "--cc" => {
                let v = args.value(a)?;
                let list = v
                    .split(',')
                    .map(|c| match c.trim() {
                        "default" => Ok(None),
                        c => known_cc(a, c).map(Some),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                cc = Some(list);
            }
            "--unequal-cc" => {
                let v = args.value(a)?;
                let list = v
                    .split(',')
                    .map(|c| known_cc(a, c.trim()).map(str::to_string))
                    .collect::<Result<Vec<_>, _>>()?;
                unequal_cc = Some(list);
            }
            "--unequal-runs" => o.unequal_runs = args.number(a, 1..=20)?,
            "--realtime" => o.realtime = true,
            "--plot" => o.plot = Some(crate::toolkit::plot::parse_target(a, &args.value(a)?)?),
            "--rows" => {
                let v = args.value(a)?;
                o.rows = v.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = o
                    .rows
                    .iter()
                    .find(|k| !plan::ROWS.iter().any(|r| r.key == *k))
                {
                    return Err(format!(
                        "--rows: unknown row {bad:?} (expected {})",
                        plan::ROWS
                            .iter()
                            .map(|r| r.key)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
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
    // Sections 1 and 2 also with cubic (issue 19): the machine's default
    // (bbr here) hides what reordering and loss cost most users.
    o.agg_cc = cc.clone().unwrap_or(vec![None]);
    o.cc = cc.unwrap_or(if o.quick {
        vec![None]
    } else {
        vec![None, Some("cubic")]
    });
    o.unequal_cc = unequal_cc.unwrap_or_else(|| {
        let all: &[&str] = if o.quick {
            &["cubic"]
        } else {
            &["cubic", "bbr"]
        };
        all.iter().map(|c| c.to_string()).collect()
    });
    Ok(Some(o))
}

fn known_cc(flag: &str, v: &str) -> Result<&'static str, String> {
    plan::KNOWN_CC
        .iter()
        .find(|c| **c == v)
        .copied()
        .ok_or_else(|| {
            format!(
                "{flag}: {v:?} is not a congestion control iperf3 -C is given here ({})",
                plan::KNOWN_CC.join(", ")
            )
        })
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    require_root("lines")?;
    lab::require_tools(&["ip", "iperf3", "ping"])?;
    if o.realtime {
        lab::realtime_relays();
    }
    lab::catch_stop_signals();
    let cases = plan::plan(&o);
    let start = Instant::now();
    let mut outcomes = Vec::new();
    {
        let mut bench = Bench::new(o.plot.is_some())?;
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
                        "{:.1} Mbit/s, {} retransmits{}{}",
                        v["mbps"].as_f64().unwrap_or(0.0),
                        v["retransmits"],
                        v["tail_mbps"]
                            .as_f64()
                            .map(|t| format!(", {t:.1} Mbit/s from {} s on", v["tail_from"]))
                            .unwrap_or_default(),
                        v["mptcp"]["summary"]
                            .as_str()
                            .map(|t| format!(", {t}"))
                            .unwrap_or_default()
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
    if let Some(path) = &o.plot {
        let panels: Vec<_> = outcomes.iter().filter_map(|o| o.panel.clone()).collect();
        crate::toolkit::plot::write_svg(path, "braid bench lines", &panels)?;
        eprintln!("plot: {}", path.display());
    }
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

#[cfg(test)]
mod tests;
