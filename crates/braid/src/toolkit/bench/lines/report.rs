//! The tables (text) and the whole record (`--json`).

use super::checks::{fmt_mbps, unequal_rows, Check, Results, UnequalRow};
use super::plan::{
    best_line, seed_key, unequal_timing, Measure, Opts, Profile, Target, PROFILES, WINDOWS,
};
use serde_json::{json, Value};

/// Rows of the seed's table: (profile, window, seconds, line, hold 0, window).
pub(super) struct SeedRow {
    /// The TCP's congestion control (`None`: the machine's default).
    pub(super) cc: Option<&'static str>,
    pub(super) profile: &'static Profile,
    pub(super) window: &'static str,
    pub(super) seconds: u32,
    pub(super) runs: usize,
    pub(super) hold0_runs: Vec<f64>,
    pub(super) win_runs: Vec<f64>,
    pub(super) line: Result<f64, String>,
    pub(super) line_same_run: bool,
    pub(super) hold0: Result<f64, String>,
    pub(super) win: Result<f64, String>,
}

pub(super) fn seed_rows(r: &Results) -> Vec<SeedRow> {
    let mut rows = Vec::new();
    for (cc, window) in r
        .ccs("seed/")
        .into_iter()
        .flat_map(|cc| WINDOWS.map(move |w| (cc, w)))
    {
        for p in &PROFILES {
            let k0 = seed_key(p.key, window, true, cc);
            let kw = seed_key(p.key, window, false, cc);
            let Some((c, _)) = r.get(&k0).or_else(|| r.get(&kw)) else {
                continue;
            };
            rows.push(SeedRow {
                cc,
                profile: p,
                window,
                seconds: c.seconds,
                runs: r.runs(&k0).max(r.runs(&kw)),
                hold0_runs: r.all(&k0, "mbps").unwrap_or_default(),
                win_runs: r.all(&kw, "mbps").unwrap_or_default(),
                line: r.num(&seed_key(p.twin, window, true, cc), "mbps"),
                line_same_run: p.twin == p.key,
                hold0: r.num(&k0, "mbps"),
                win: r.num(&kw, "mbps"),
            });
        }
    }
    rows
}

pub(super) fn print_text(o: &Opts, r: &Results, rows: &[SeedRow], checks: &[Check], total: f64) {
    println!(
        "braid bench lines{}: {} cases in {:.0} s, namespaces and `braid netem` lines, iperf3 A → B single stream",
        if o.quick { " --quick" } else { "" },
        r.cases.len(),
        total
    );
    if !rows.is_empty() {
        println!();
        println!(
            "1. The seed's table: one line, TCP Mbit/s received (iperf3 -w WINDOW, one stream)"
        );
        println!("   delay and jitter on both directions of the line (`braid netem --delay D --jitter J`, reorders);");
        println!("   line    = braid netem relays UDP, so TCP cannot run on the bare line: this column is TCP through");
        println!("             braid with ReorderHold = 0 over the same line WITHOUT its jitter (a line that does not");
        println!("             reorder); * = that is this row's own ReorderHold = 0 run, not a separate measurement");
        println!("   hold 0  = braid, ReorderHold = 0 (window off)       window = braid, default ReorderHold (adaptive)");
        println!("   runs    = transfer length; \"3×5s med.\" = the median of 3 interleaved runs of 5 s, each on fresh tunnels");
        println!("   cc      = the TCP's congestion control inside the tunnel (iperf3 -C); default = this machine's");
        println!();
        println!(
            "   {:<16} {:>6} {:>8} {:>12} {:>10} {:>10} {:>10}",
            "line profile", "-w", "cc", "runs", "line", "hold 0", "window"
        );
        for row in rows {
            let line = fmt_mbps(&row.line)
                + if row.line_same_run && row.line.is_ok() {
                    "*"
                } else {
                    " "
                };
            println!(
                "   {:<16} {:>6} {:>8} {:>12} {:>10} {:>9}  {:>9} ",
                row.profile.label,
                row.window,
                row.cc.unwrap_or("default"),
                if row.runs > 1 {
                    format!("{}×{}s med.", row.runs, row.seconds)
                } else {
                    format!("{}s", row.seconds)
                },
                line,
                fmt_mbps(&row.hold0),
                fmt_mbps(&row.win)
            );
        }
        let errors: Vec<String> = rows
            .iter()
            .flat_map(|row| {
                [(&row.hold0, "hold 0"), (&row.win, "window")]
                    .into_iter()
                    .filter_map(move |(x, col)| match x {
                        Err(e) if e != "not run" => Some(format!(
                            "   {} -w {} {} {col}: {e}",
                            row.profile.label,
                            row.window,
                            row.cc.unwrap_or("default")
                        )),
                        _ => None,
                    })
            })
            .collect();
        for e in errors {
            println!("{e}");
        }
        println!();
    }
    let titles = [
        (1, ""),
        (
            2,
            "2. Two lines of 200 Mbit/s, each with 2 % random loss (both directions), Mode = redundant",
        ),
        (
            3,
            "3. Two lines (3 ms each), line 1 cut and restored through the relay's control socket",
        ),
        (
            4,
            "4. Two lines capped at 100 Mbit/s each way (--rate 100mbit, queue 50 ms), 10 ms and 30 ms",
        ),
    ];
    for (section, title) in titles {
        let rows: Vec<&Check> = checks.iter().filter(|c| c.section == section).collect();
        if rows.is_empty() {
            continue;
        }
        if !title.is_empty() {
            println!("{title}");
        }
        let w1 = rows
            .iter()
            .map(|c| c.what.chars().count())
            .max()
            .unwrap_or(0);
        let w2 = rows
            .iter()
            .map(|c| c.shown.chars().count())
            .max()
            .unwrap_or(0);
        let w3 = rows
            .iter()
            .map(|c| c.target.as_deref().unwrap_or("").chars().count())
            .max()
            .unwrap_or(0);
        for c in rows {
            println!(
                "   {}  {}  {}  {}",
                pad(&c.what, w1),
                pad(&c.shown, w2),
                pad(c.target.as_deref().unwrap_or(""), w3),
                c.verdict()
            );
        }
        if section == 3 {
            println!("   (outage = lost datagrams ÷ the sender's datagram rate; times from the client's start)");
        }
        println!();
    }
    print_unequal(o, &unequal_rows(r));
    let failed: Vec<&Check> = checks.iter().filter(|c| c.pass == Some(false)).collect();
    let passed = checks.iter().filter(|c| c.pass == Some(true)).count();
    println!(
        "checks: {passed} pass, {} FAIL{}",
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                failed
                    .iter()
                    .map(|c| c.what.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
    );
    let notes: Vec<String> = r
        .cases
        .iter()
        .zip(r.outcomes)
        .flat_map(|(c, o)| o.notes.iter().map(move |n| format!("   {}: {n}", c.label)))
        .collect();
    if !notes.is_empty() {
        println!("\nnotes:");
        for n in notes {
            println!("{n}");
        }
    }
    // The counters behind every failed check, for whoever fixes it.
    let mut shown = Vec::new();
    for c in &failed {
        let Some(key) = &c.key else { continue };
        if shown.contains(key) {
            continue;
        }
        shown.push(key.clone());
        if let Some((case, out)) = r.get(key) {
            if out.show.is_empty() {
                continue;
            }
            println!("\n== braid show after \"{}\"", case.label);
            println!("{}", out.show.trim_end());
        }
    }
}

/// Section 5's table: per row and congestion control, the best line
/// alone, braid, MPTCP, the sum, braid's ratios and the verdict.
pub(super) fn print_unequal(o: &Opts, rows: &[UnequalRow]) {
    if rows.is_empty() {
        return;
    }
    let t = unequal_timing(o.quick);
    println!("5. Unequal lines (issue 19): `braid netem` rate caps with 100 ms queues, Mbit/s received, one TCP stream");
    println!("   unless said, {} s per case, every row with each congestion control inside the tunnel (iperf3 -C)", t.seconds);
    println!("   best  = the best line alone (braid, Mode = failover)   braid = braid, Mode = aggregate over both lines");
    println!("   MPTCP = the kernel's Multipath TCP (mptcpize run iperf3), one subflow per line, each in its own");
    println!("           wireguard-go tunnel across that line (the newest wireguard-go); same relays, caps, delays, queues");
    println!("   sum   = the line rates; fall: line 1 falls to 10 Mbit/s at {:.0} s, every column is what arrived from", t.fall_at);
    println!("           {:.0} s to {} s (the receiver's count), the sum 25 + 10; its best line is the 25 Mbit/s line alone", t.tail_from, t.seconds);
    println!();
    let mut not_measured: Vec<String> = Vec::new();
    let mut footnote = |e: &str| -> String {
        let e = e.trim_start_matches("not measured: ").to_string();
        let i = match not_measured.iter().position(|x| *x == e) {
            Some(i) => i,
            None => {
                not_measured.push(e);
                not_measured.len() - 1
            }
        };
        format!("n/m[{}]", i + 1)
    };
    let mut cells = Vec::new();
    for u in rows {
        let mptcp = match &u.mptcp {
            Ok(_) => {
                fmt_mbps(&u.mptcp)
                    + match u.mptcp_two_subflows {
                        Some(false) => "!",
                        _ => "",
                    }
            }
            Err(e) if e == "not run" => "—".into(),
            Err(e) => footnote(e),
        };
        let braid = match &u.braid {
            Err(e) if e != "not run" => footnote(e),
            _ => fmt_mbps(&u.braid),
        };
        let best = match &u.best {
            Err(e) if e != "not run" => footnote(e),
            _ => fmt_mbps(&u.best),
        };
        let pct = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{:.0} %", x * 100.0));
        cells.push(vec![
            u.row.key.to_string(),
            u.cc.clone(),
            u.row.label.to_string(),
            best,
            braid,
            mptcp,
            format!("{:.0}", u.row.sum_mbps),
            pct(u.of_sum()),
            pct(u.ratio(&u.mptcp)),
            pct(u.ratio(&u.best)),
            u.row.target_text.to_string(),
            match u.pass {
                Some(true) => "PASS".into(),
                Some(false) => "FAIL".into(),
                None => "not checked".into(),
            },
        ]);
    }
    let head = [
        "row",
        "cc",
        "lines",
        "best",
        "braid",
        "MPTCP",
        "sum",
        "braid/sum",
        "/MPTCP",
        "/best",
        "target",
        "",
    ];
    let right = [
        false, false, false, true, true, true, true, true, true, true, false, false,
    ];
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([head[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |c: &[String]| {
        let parts: Vec<String> = c
            .iter()
            .enumerate()
            .map(|(i, x)| {
                if right[i] {
                    let n = x.chars().count();
                    format!("{}{x}", " ".repeat(widths[i].saturating_sub(n)))
                } else {
                    pad(x, widths[i])
                }
            })
            .collect();
        println!("   {}", parts.join("  ").trim_end());
    };
    line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for c in &cells {
        line(c);
    }
    println!();
    println!("   why each verdict:");
    for u in rows {
        println!("     {} {}: {}", u.row.key, u.cc, u.verdict);
    }
    println!("   braid's split (A's tx packets per line) and MPTCP's subflows:");
    for u in rows {
        let split = u.split.trim_start_matches(", A's tx packets per line ");
        println!(
            "     {} {}: braid {}; MPTCP {}",
            u.row.key,
            u.cc,
            if split.is_empty() { "–" } else { split },
            if u.mptcp_summary.is_empty() {
                "–"
            } else {
                &u.mptcp_summary
            }
        );
    }
    if rows.iter().any(|u| u.mptcp_two_subflows == Some(false)) {
        println!("   ! = MPTCP did not carry traffic on both lines in that case");
    }
    for (i, e) in not_measured.iter().enumerate() {
        println!("   n/m[{}] = not measured: {e}", i + 1);
    }
    println!();
}

pub(super) fn unequal_json(rows: &[UnequalRow]) -> Vec<Value> {
    let ok = |x: &Result<f64, String>| match x {
        Ok(v) => json!(v),
        Err(_) => Value::Null,
    };
    let err = |x: &Result<f64, String>| match x {
        Ok(_) => Value::Null,
        Err(e) => json!(e),
    };
    rows.iter()
        .map(|u| {
            json!({
                "row": u.row.key,
                "lines": u.row.label,
                "congestion_control": u.cc,
                "seconds": u.seconds,
                "streams": u.row.streams,
                "counts": if u.row.fall_to.is_some() { "last seconds (tail_mbps)" } else { "whole transfer" },
                "best_line": best_line(u.row.best).label,
                "best_mbps": ok(&u.best),
                "best_error": err(&u.best),
                "braid_mbps": ok(&u.braid),
                "braid_error": err(&u.braid),
                "mptcp_mbps": ok(&u.mptcp),
                "mptcp_error": err(&u.mptcp),
                "mptcp_two_subflows": u.mptcp_two_subflows,
                "mptcp_subflows": u.mptcp_summary,
                "reference_mbps": u.reference.as_ref().map(ok),
                "sum_mbps": u.row.sum_mbps,
                "braid_of_sum": u.of_sum(),
                "braid_of_mptcp": u.ratio(&u.mptcp),
                "braid_of_best": u.ratio(&u.best),
                "target": u.row.target_text,
                "target_kind": match u.row.target {
                    Target::SumAndMptcp { sum, mptcp } => json!({"of_sum": sum, "of_mptcp": mptcp}),
                    Target::Sum(x) => json!({"of_sum": x}),
                    Target::Best(x) => json!({"of_best": x}),
                    Target::Row(r, x) => json!({"of_row": r, "share": x}),
                },
                "pass": u.pass,
                "verdict": u.verdict,
                "braid_split": u.split,
            })
        })
        .collect()
}

pub(super) fn pad(s: &str, width: usize) -> String {
    let n = s.chars().count();
    format!("{s}{}", " ".repeat(width.saturating_sub(n)))
}

pub(super) fn print_json(o: &Opts, r: &Results, rows: &[SeedRow], checks: &[Check], total: f64) {
    let ok = |x: &Result<f64, String>| match x {
        Ok(v) => json!(v),
        Err(_) => Value::Null,
    };
    let cases: Vec<Value> = r
        .cases
        .iter()
        .zip(r.outcomes)
        .map(|(c, out)| {
            let measure = match &c.measure {
                Measure::Tcp { window, cc } => {
                    json!({"kind": "tcp", "window": window, "congestion_control": cc})
                }
                Measure::Udp { rate, len, cut } => json!({
                    "kind": "udp", "rate": rate, "length": len,
                    "cut_at_s": cut.map(|x| x.0), "restore_at_s": cut.map(|x| x.1),
                }),
            };
            let mut v = json!({
                "key": c.key,
                "run": c.run,
                "label": c.label,
                "mode": c.setup.mode,
                "reorder_hold": c.setup.hold,
                "netem": c.setup.lines,
                "mptcp": c.extra.mptcp,
                "streams": c.extra.streams.max(1),
                "relay_commands": c.extra.actions,
                "measure": measure,
                "seconds": c.seconds,
                "wall_seconds": out.wall,
                "notes": out.notes,
                "counters": out.counters,
            });
            match &out.result {
                Ok(res) => v["result"] = res.clone(),
                Err(e) => v["error"] = json!(e),
            }
            v
        })
        .collect();
    let seed: Vec<Value> = rows
        .iter()
        .map(|row| {
            json!({
                "profile": row.profile.key,
                "label": row.profile.label,
                "congestion_control": row.cc,
                "window": row.window,
                "seconds": row.seconds,
                "line_mbps": ok(&row.line),
                "line_is_hold0_without_jitter": true,
                "runs": row.runs,
                "hold0_mbps": ok(&row.hold0),
                "window_mbps": ok(&row.win),
                "hold0_runs_mbps": row.hold0_runs,
                "window_runs_mbps": row.win_runs,
            })
        })
        .collect();
    let checks_j: Vec<Value> = checks
        .iter()
        .map(|c| {
            json!({
                "section": c.section, "what": c.what, "measured": c.shown,
                "value": c.value, "target": c.target, "pass": c.pass, "case": c.key,
            })
        })
        .collect();
    let all = checks.iter().all(|c| c.pass != Some(false));
    let j = json!({
        "quick": o.quick,
        "short_seconds": o.short,
        "long_seconds": o.long,
        "total_seconds": total,
        "seed_table": seed,
        "congestion_control": o.cc,
        "aggregate_congestion_control": o.agg_cc,
        "unequal_congestion_controls": o.unequal_cc,
        "unequal": unequal_json(&unequal_rows(r)),
        "checks": checks_j,
        "all_passed": all,
        "cases": cases,
    });
    println!("{j}");
}
