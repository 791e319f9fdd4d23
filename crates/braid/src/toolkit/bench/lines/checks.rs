//! The checks against the targets of issue 4, computed from the outcomes
//! (medians over runs where a case ran more than once).

use super::plan::{
    runs_text, seed_key, unequal_key, unequal_label, Case, Measure, CONGESTION_CONTROLS, UNEQUAL,
    WINDOWS,
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
    for w in WINDOWS {
        let jit = seed_key("3ms±1ms", w, false);
        if r.get(&jit).is_none() {
            continue;
        }
        let a = r.num(&jit, "mbps");
        let b = r.num(&seed_key("3ms", w, false), "mbps");
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
            what: format!("window vs fixed line: 3 ms ± 1 ms / 3 ms, -w {w}"),
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
        let t = r.num("loss/tcp", "mbps");
        let clean = r.num("loss/clean", "mbps");
        out.push(Check {
            section: 2,
            what: format!(
                "TCP, redundant over the lossy lines ({})",
                runs_text(r.runs("loss/tcp"), c.seconds)
            ),
            shown: format!("{} Mbit/s", fmt_mbps(&t)),
            value: t.as_ref().ok().copied(),
            target: None,
            pass: None,
            key: Some("loss/tcp".into()),
        });
        out.push(Check {
            section: 2,
            what: format!(
                "TCP, one clean line, default window ({})",
                runs_text(r.runs("loss/clean"), c.seconds)
            ),
            shown: format!("{} Mbit/s", fmt_mbps(&clean)),
            value: clean.as_ref().ok().copied(),
            target: None,
            pass: None,
            key: Some("loss/clean".into()),
        });
        let ratio = match (&t, &clean) {
            (Ok(t), Ok(c)) if *c > 0.0 => Ok(t / c * 100.0),
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
            _ => Err("no throughput on the clean line".into()),
        };
        out.push(Check {
            section: 2,
            what: "TCP redundant over 2 × 2 % loss / one clean line".into(),
            shown: match &ratio {
                Ok(p) => format!("{p:.1} %"),
                Err(e) => e.clone(),
            },
            value: ratio.as_ref().ok().copied(),
            target: Some("≥ 90 %".into()),
            pass: Some(ratio.is_ok_and(|p| p >= 90.0)),
            key: Some("loss/tcp".into()),
        });
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
    for mode in ["aggregate", "redundant"] {
        let key = format!("agg/{mode}");
        let Some((c, out_)) = r.get(&key) else {
            continue;
        };
        let m = r.num(&key, "mbps");
        let split = path_split(&out_.counters["a"]);
        let aggregate = mode == "aggregate";
        out.push(Check {
            section: 4,
            what: format!("{mode}: one TCP stream ({} s)", c.seconds),
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

/// Section 5: a bond of unequal lines must beat its best line alone, a
/// very slow second line must not drag the fast one down, and 2 % loss on
/// the second line must cost less than 10 % (issue 19's targets).
fn unequal_checks(r: &Results, out: &mut Vec<Check>) {
    for cc in CONGESTION_CONTROLS {
        let best_key = unequal_key("best", cc);
        let Some((c, _)) = r.get(&best_key) else {
            continue;
        };
        let best = r.num(&best_key, "mbps");
        for (variant, _, _) in UNEQUAL {
            let key = unequal_key(variant, cc);
            let Some((_, outcome)) = r.get(&key) else {
                continue;
            };
            let m = r.num(&key, "mbps");
            // (against, its value, target as a fraction of it, its words)
            let (against, reference, target, words) = match variant {
                "best" => (None, Ok(0.0), 0.0, ""),
                "bond" => (Some("best"), best.clone(), 1.0, "≥ the fast line alone"),
                "slow" => (
                    Some("best"),
                    best.clone(),
                    0.9,
                    "≥ 90 % of the fast line alone",
                ),
                _ => (
                    Some("bond"),
                    r.num(&unequal_key("bond", cc), "mbps"),
                    0.9,
                    "≥ 90 % of the same lines without loss",
                ),
            };
            let ratio = match (&m, &reference) {
                (Ok(m), Ok(x)) if *x > 0.0 => Some(m / x),
                _ => None,
            };
            let split = path_split(&outcome.counters["a"]);
            out.push(Check {
                section: 5,
                what: format!("{}, {cc} ({} s)", unequal_label(variant), c.seconds),
                shown: match (against, ratio) {
                    (Some(a), Some(x)) => {
                        format!("{} Mbit/s = {:.0} % of {a}{split}", fmt_mbps(&m), x * 100.0)
                    }
                    _ => format!("{} Mbit/s{split}", fmt_mbps(&m)),
                },
                value: m.as_ref().ok().copied(),
                target: against.map(|_| words.to_string()),
                pass: against.map(|_| ratio.is_some_and(|x| x >= target)),
                key: Some(key),
            });
        }
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
