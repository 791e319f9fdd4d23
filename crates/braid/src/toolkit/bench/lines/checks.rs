//! The checks against the targets of issue 4, computed from the outcomes
//! (medians over runs where a case ran more than once).

use super::plan::{
    best_key, cc_label, cc_suffix, runs_text, seed_key, unequal_key, Case, Measure, Row, Target,
    Who, ROWS, WINDOWS,
};
use super::run::Outcome;
use serde_json::Value;

/// A row of a result table: measured, target, pass/FAIL.
pub(super) struct Check {
    pub(super) section: u8,
    pub(super) what: String,
    pub(super) shown: String,
    pub(super) value: Option<f64>,
    pub(super) target: Option<String>,
    pub(super) pass: Option<bool>,
    pub(super) key: Option<String>,
}

impl Check {
    pub(super) fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "",
        }
    }
}

pub(super) struct Results<'a> {
    pub(super) cases: &'a [Case],
    pub(super) outcomes: &'a [Outcome],
}

impl Results<'_> {
    pub(super) fn get(&self, key: &str) -> Option<(&Case, &Outcome)> {
        let i = self.cases.iter().position(|c| c.key == key)?;
        Some((&self.cases[i], self.outcomes.get(i)?))
    }

    /// Every run's value of `field` (an error if any run failed).
    pub(super) fn all(&self, key: &str, field: &str) -> Result<Vec<f64>, String> {
        let mut v = Vec::new();
        for (_, o) in self
            .cases
            .iter()
            .zip(self.outcomes)
            .filter(|(c, _)| c.key == key)
        {
            match &o.result {
                Err(e) => return Err(format!("error: {e}")),
                Ok(r) => v.push(
                    r[field]
                        .as_f64()
                        .filter(|x| x.is_finite())
                        .ok_or(format!("no {field}"))?,
                ),
            }
        }
        if v.is_empty() {
            return Err("not run".into());
        }
        Ok(v)
    }

    /// The median over the runs of `key`.
    pub(super) fn num(&self, key: &str, field: &str) -> Result<f64, String> {
        let mut v = self.all(key, field)?;
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Ok(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// The results of every run of `key` that gave one.
    pub(super) fn results(&self, key: &str) -> Vec<&Value> {
        self.cases
            .iter()
            .zip(self.outcomes)
            .filter(|(c, _)| c.key == key)
            .filter_map(|(_, o)| o.result.as_ref().ok())
            .collect()
    }

    /// The congestion controls the TCP cases whose keys start with
    /// `prefix` ran with, in the order they first ran.
    pub(super) fn ccs(&self, prefix: &str) -> Vec<Option<&'static str>> {
        let mut out = Vec::new();
        for c in self.cases.iter().filter(|c| c.key.starts_with(prefix)) {
            if let Measure::Tcp { cc, .. } = c.measure {
                if !out.contains(&cc) {
                    out.push(cc);
                }
            }
        }
        out
    }

    pub(super) fn runs(&self, key: &str) -> usize {
        self.cases.iter().filter(|c| c.key == key).count()
    }
}

pub(super) fn fmt_mbps(r: &Result<f64, String>) -> String {
    match r {
        Ok(x) if *x >= 100.0 => format!("{x:.0}"),
        Ok(x) if *x >= 10.0 => format!("{x:.1}"),
        Ok(x) => format!("{x:.2}"),
        Err(e) if e == "not run" => "—".into(),
        Err(_) => "error".into(),
    }
}

/// Checks of sections 2–4 and the ratio rows of section 1.
pub(super) fn checks(r: &Results) -> Vec<Check> {
    let mut out = Vec::new();
    // 1: the window on 3 ms ± 1 ms against a fixed 3 ms line.
    for (cc, w) in r
        .ccs("seed/")
        .into_iter()
        .flat_map(|cc| WINDOWS.map(move |w| (cc, w)))
    {
        let jit = seed_key("3ms±1ms", w, false, cc);
        if r.get(&jit).is_none() {
            continue;
        }
        let a = r.num(&jit, "mbps");
        let b = r.num(&seed_key("3ms", w, false, cc), "mbps");
        let (shown, value, pass) = match (&a, &b) {
            (Ok(a), Ok(b)) if *b > 0.0 => {
                let p = a / b * 100.0;
                (
                    format!("{p:.1} %  ({a:.0} / {b:.0} Mbit/s)"),
                    Some(p),
                    p >= 90.0,
                )
            }
            (Err(e), _) | (_, Err(e)) => (e.clone(), None, false),
            _ => ("no throughput on 3 ms".into(), None, false),
        };
        out.push(Check {
            section: 1,
            what: format!(
                "window vs fixed line: 3 ms ± 1 ms / 3 ms, -w {w}{}",
                cc_label(cc)
            ),
            shown,
            value,
            target: Some("≥ 90 %".into()),
            pass: Some(pass),
            key: Some(jit),
        });
    }
    // 2: two lossy lines, redundant.
    if r.get("loss/udp").is_some() {
        let (c, _) = r.get("loss/udp").unwrap();
        let l = r.num("loss/udp", "lost_percent");
        let n = r.num("loss/udp", "lost_packets");
        let p = r.num("loss/udp", "packets");
        out.push(Check {
            section: 2,
            what: format!(
                "UDP loss inside the tunnel (iperf3 -u -b 50M -l 1200, {} s)",
                c.seconds
            ),
            shown: match (&l, &n, &p) {
                (Ok(l), Ok(n), Ok(p)) => format!("{l:.3} %  ({n:.0} of {p:.0})"),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => e.clone(),
            },
            value: l.as_ref().ok().copied(),
            target: Some("≤ 0.1 %".into()),
            pass: Some(l.is_ok_and(|l| l <= 0.1)),
            key: Some("loss/udp".into()),
        });
        for cc in r.ccs("loss/tcp") {
            let (tcp_key, clean_key) = (
                format!("loss/tcp{}", cc_suffix(cc)),
                format!("loss/clean{}", cc_suffix(cc)),
            );
            let t = r.num(&tcp_key, "mbps");
            let clean = r.num(&clean_key, "mbps");
            out.push(Check {
                section: 2,
                what: format!(
                    "TCP{}, redundant over the lossy lines ({})",
                    cc_label(cc),
                    runs_text(r.runs(&tcp_key), c.seconds)
                ),
                shown: format!("{} Mbit/s", fmt_mbps(&t)),
                value: t.as_ref().ok().copied(),
                target: None,
                pass: None,
                key: Some(tcp_key.clone()),
            });
            out.push(Check {
                section: 2,
                what: format!(
                    "TCP{}, one clean line, default window ({})",
                    cc_label(cc),
                    runs_text(r.runs(&clean_key), c.seconds)
                ),
                shown: format!("{} Mbit/s", fmt_mbps(&clean)),
                value: clean.as_ref().ok().copied(),
                target: None,
                pass: None,
                key: Some(clean_key),
            });
            let ratio = match (&t, &clean) {
                (Ok(t), Ok(c)) if *c > 0.0 => Ok(t / c * 100.0),
                (Err(e), _) | (_, Err(e)) => Err(e.clone()),
                _ => Err("no throughput on the clean line".into()),
            };
            out.push(Check {
                section: 2,
                what: format!(
                    "TCP{} redundant over 2 × 2 % loss / one clean line",
                    cc_label(cc)
                ),
                shown: match &ratio {
                    Ok(p) => format!("{p:.1} %"),
                    Err(e) => e.clone(),
                },
                value: ratio.as_ref().ok().copied(),
                target: Some("≥ 90 %".into()),
                pass: Some(ratio.is_ok_and(|p| p >= 90.0)),
                key: Some(tcp_key),
            });
        }
    }
    // 3: a cut line.
    for mode in ["redundant", "failover"] {
        let key = format!("cut/{mode}");
        let Some((c, _)) = r.get(&key) else { continue };
        let lost = r.num(&key, "lost_packets");
        let packets = r.num(&key, "packets");
        let rate = r.num(&key, "rate_pps");
        let outage = r.num(&key, "outage_ms");
        let (cut, restore) = match c.measure {
            Measure::Udp { cut: Some(x), .. } => x,
            _ => (0.0, 0.0),
        };
        let what = format!(
            "{mode}: UDP 20 Mbit/s × {} s, line 1 cut at {cut} s, restored at {restore} s",
            c.seconds
        );
        let base = match (&lost, &packets, &rate, &outage) {
            (Ok(l), Ok(p), Ok(r), Ok(ms)) => Ok(format!(
                "{l:.0} of {p:.0} lost = {ms:.0} ms at {r:.0} datagrams/s"
            )),
            (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => Err(e.clone()),
        };
        let shown = base.clone().unwrap_or_else(|e| e);
        if mode == "redundant" {
            out.push(Check {
                section: 3,
                what,
                shown,
                value: lost.as_ref().ok().copied(),
                target: Some("0 lost".into()),
                pass: Some(base.is_ok() && lost.is_ok_and(|l| l == 0.0)),
                key: Some(key),
            });
        } else {
            out.push(Check {
                section: 3,
                what,
                shown,
                value: outage.as_ref().ok().copied(),
                target: Some("outage ≤ 300 ms".into()),
                pass: Some(base.is_ok() && outage.is_ok_and(|ms| ms <= 300.0)),
                key: Some(key),
            });
        }
    }
    // 4: aggregate.
    for (cc, mode) in r
        .ccs("agg/")
        .into_iter()
        .flat_map(|cc| ["aggregate", "redundant"].map(move |m| (cc, m)))
    {
        let key = format!("agg/{mode}{}", cc_suffix(cc));
        let Some((c, out_)) = r.get(&key) else {
            continue;
        };
        let m = r.num(&key, "mbps");
        let split = path_split(&out_.counters["a"]);
        let aggregate = mode == "aggregate";
        out.push(Check {
            section: 4,
            what: format!("{mode}: one TCP stream{} ({} s)", cc_label(cc), c.seconds),
            shown: format!("{} Mbit/s{split}", fmt_mbps(&m)),
            value: m.as_ref().ok().copied(),
            target: aggregate.then(|| "≥ 160 Mbit/s".into()),
            pass: aggregate.then(|| m.is_ok_and(|m| m >= 160.0)),
            key: Some(key),
        });
    }
    unequal_checks(r, &mut out);
    out
}

/// One row of section 5 for one congestion control: what was measured
/// (Mbit/s; for a row with a fall, over the last seconds) and the verdict.
pub(super) struct UnequalRow {
    pub(super) row: &'static Row,
    pub(super) cc: String,
    pub(super) seconds: u32,
    pub(super) best: Result<f64, String>,
    pub(super) braid: Result<f64, String>,
    pub(super) mptcp: Result<f64, String>,
    /// The other row a `Target::Row` compares with (braid, same cc).
    pub(super) reference: Option<Result<f64, String>>,
    /// Both lines carried an MPTCP subflow (None: MPTCP not measured).
    pub(super) mptcp_two_subflows: Option<bool>,
    pub(super) mptcp_summary: String,
    /// How braid's packets went over the lines (A's tx per path).
    pub(super) split: String,
    pub(super) pass: Option<bool>,
    pub(super) verdict: String,
}

impl UnequalRow {
    pub(super) fn ratio(&self, of: &Result<f64, String>) -> Option<f64> {
        match (&self.braid, of) {
            (Ok(b), Ok(x)) if *x > 0.0 => Some(b / x),
            _ => None,
        }
    }

    pub(super) fn of_sum(&self) -> Option<f64> {
        self.ratio(&Ok(self.row.sum_mbps))
    }
}

/// Section 5's rows, in plan order, for every congestion control run.
pub(super) fn unequal_rows(r: &Results) -> Vec<UnequalRow> {
    let mut ccs: Vec<String> = Vec::new();
    for c in r.cases {
        if let (true, Measure::Tcp { cc: Some(cc), .. }) =
            (c.key.starts_with("unequal/"), &c.measure)
        {
            if !ccs.iter().any(|x| x == cc) {
                ccs.push(cc.to_string());
            }
        }
    }
    let mut out = Vec::new();
    for cc in &ccs {
        for row in &ROWS {
            let key = unequal_key(row.key, cc, Who::Braid);
            let Some((case, _)) = r.get(&key) else {
                continue;
            };
            let field = if row.fall_to.is_some() {
                "tail_mbps"
            } else {
                "mbps"
            };
            let braid = r.num(&key, field);
            let mkey = unequal_key(row.key, cc, Who::Mptcp);
            let mptcp = match r.get(&mkey) {
                Some((_, o)) => match &o.result {
                    Err(e) => Err(e.clone()),
                    Ok(_) => r.num(&mkey, field),
                },
                None => Err("not run".into()),
            };
            // Every run of the anchor must have used both lines.
            let evidence = r.results(&mkey);
            let two: Vec<Option<bool>> = evidence
                .iter()
                .map(|v| v["mptcp"]["two_subflows"].as_bool())
                .collect();
            let mptcp_two_subflows = match two.as_slice() {
                [] => None,
                all if all.contains(&None) => None,
                all => Some(all.iter().all(|x| *x == Some(true))),
            };
            let mptcp_summary = evidence
                .iter()
                .filter_map(|v| v["mptcp"]["summary"].as_str())
                .collect::<Vec<_>>()
                .join(" | ");
            let best = r.num(&best_key(row.best, cc), field);
            let reference = match row.target {
                Target::Row(other, _) => Some(r.num(&unequal_key(other, cc, Who::Braid), field)),
                _ => None,
            };
            let (pass, verdict) = judge(row, &braid, &mptcp, &best, reference.as_ref());
            let split = r
                .get(&key)
                .map(|(_, o)| path_split(&o.counters["a"]))
                .unwrap_or_default();
            out.push(UnequalRow {
                row,
                cc: cc.clone(),
                seconds: case.seconds,
                best,
                braid,
                mptcp,
                reference,
                mptcp_two_subflows,
                mptcp_summary,
                split,
                pass,
                verdict,
            });
        }
    }
    out
}

/// A row's verdict against its target (issue 19's): `Some(false)` when
/// braid was not measured or falls short, `None` when what it is judged
/// against could not be measured (and braid does not already fail).
pub(super) fn judge(
    row: &Row,
    braid: &Result<f64, String>,
    mptcp: &Result<f64, String>,
    best: &Result<f64, String>,
    reference: Option<&Result<f64, String>>,
) -> (Option<bool>, String) {
    let b = match braid {
        Ok(b) => *b,
        Err(e) => return (Some(false), format!("braid not measured: {e}")),
    };
    let against = |what: &str, x: &Result<f64, String>, share: f64| -> (Option<bool>, String) {
        match x {
            Ok(x) if *x > 0.0 => {
                let ok = b >= share * x;
                (
                    Some(ok),
                    format!(
                        "{b:.1} {} {:.0} % × {what} {x:.1} = {:.1}",
                        if ok { "≥" } else { "<" },
                        share * 100.0,
                        share * x
                    ),
                )
            }
            Ok(_) => (None, format!("{what} measured 0")),
            Err(e) => (
                None,
                format!(
                    "{what} not measured: {}",
                    e.trim_start_matches("not measured: ")
                ),
            ),
        }
    };
    let sum = Ok(row.sum_mbps);
    match row.target {
        Target::Sum(share) => against("sum", &sum, share),
        Target::Best(share) => against("best line", best, share),
        Target::Row(other, share) => match reference {
            Some(x) => against(&format!("{other} row"), x, share),
            None => (None, format!("{other} row not run")),
        },
        Target::SumAndMptcp { sum: s, mptcp: m } => {
            let (p1, w1) = against("sum", &sum, s);
            let (p2, w2) = against("MPTCP", mptcp, m);
            let pass = match (p1, p2) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            (pass, format!("{w1}; {w2}"))
        }
    }
}

/// Section 5's checks: one per row and congestion control.
fn unequal_checks(r: &Results, out: &mut Vec<Check>) {
    for u in unequal_rows(r) {
        let pct = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{:.0} %", x * 100.0));
        out.push(Check {
            section: 5,
            what: format!("{}, {} ({} s)", u.row.label, u.cc, u.seconds),
            shown: format!(
                "braid {} Mbit/s: {} of sum, {} of MPTCP, {} of best",
                fmt_mbps(&u.braid),
                pct(u.of_sum()),
                pct(u.ratio(&u.mptcp)),
                pct(u.ratio(&u.best))
            ),
            value: u.braid.as_ref().ok().copied(),
            target: Some(u.row.target_text.to_string()),
            pass: u.pass,
            key: Some(unequal_key(u.row.key, &u.cc, Who::Braid)),
        });
    }
}

/// ", sent 61 % / 39 %": how A's packets went over the paths.
pub(super) fn path_split(a: &Value) -> String {
    let Some(paths) = a["peers"][0]["paths"].as_array() else {
        return String::new();
    };
    let tx: Vec<f64> = paths
        .iter()
        .map(|p| p["tx_packets"].as_f64().unwrap_or(0.0))
        .collect();
    let total: f64 = tx.iter().sum();
    if total <= 0.0 || tx.len() < 2 {
        return String::new();
    }
    let parts: Vec<String> = tx
        .iter()
        .map(|t| format!("{:.0} %", t / total * 100.0))
        .collect();
    format!(", A's tx packets per line {}", parts.join(" / "))
}
