//! The tables (text) and the whole record (`--json`).

use super::checks::{fmt_mbps, Check, Results};
use super::plan::{seed_key, Measure, Opts, Profile, PROFILES, WINDOWS};
use serde_json::{json, Value};

/// Rows of the seed's table: (profile, window, seconds, line, hold 0, window).
pub(super) struct SeedRow {
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
    for window in WINDOWS {
        for p in &PROFILES {
            let k0 = seed_key(p.key, window, true);
            let kw = seed_key(p.key, window, false);
            let Some((c, _)) = r.get(&k0).or_else(|| r.get(&kw)) else {
                continue;
            };
            rows.push(SeedRow {
                profile: p,
                window,
                seconds: c.seconds,
                runs: r.runs(&k0).max(r.runs(&kw)),
                hold0_runs: r.all(&k0, "mbps").unwrap_or_default(),
                win_runs: r.all(&kw, "mbps").unwrap_or_default(),
                line: r.num(&seed_key(p.twin, window, true), "mbps"),
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
        println!();
        println!(
            "   {:<16} {:>6} {:>12} {:>10} {:>10} {:>10}",
            "line profile", "-w", "runs", "line", "hold 0", "window"
        );
        for row in rows {
            let line = fmt_mbps(&row.line)
                + if row.line_same_run && row.line.is_ok() {
                    "*"
                } else {
                    " "
                };
            println!(
                "   {:<16} {:>6} {:>12} {:>10} {:>9}  {:>9} ",
                row.profile.label,
                row.window,
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
                            "   {} -w {} {col}: {e}",
                            row.profile.label, row.window
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
        (
            5,
            "5. Unequal lines, Mode = aggregate, one TCP stream with cubic and with bbr (rate caps with 100 ms queues)",
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
        "checks": checks_j,
        "all_passed": all,
        "cases": cases,
    });
    println!("{j}");
}
