//! `braid doctor [NAME]`: checks this machine (and, with NAME, a running
//! interface) for what limits braid's speed or reliability, and says what
//! to change and why. One line per check; `--json` for scripts. Nothing
//! here prints key material: peers are named by a public key prefix.

mod interface;
mod machine;

use serde::Serialize;
use std::fmt::Write as _;

pub use machine::CipherRates;

/// How a check came out; ordered so the worst of a set is its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

/// One finding, and for `warn`/`fail` what to do about it and why.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked (`cpu`, `socket buffers`, `peer AbCdEfGh… path line1`).
    pub check: String,
    pub level: Level,
    pub finding: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
}

impl Check {
    pub fn ok(check: impl Into<String>, finding: impl Into<String>) -> Check {
        Check {
            check: check.into(),
            level: Level::Ok,
            finding: finding.into(),
            advice: None,
        }
    }

    pub fn warn(
        check: impl Into<String>,
        finding: impl Into<String>,
        advice: impl Into<String>,
    ) -> Check {
        Check {
            check: check.into(),
            level: Level::Warn,
            finding: finding.into(),
            advice: Some(advice.into()),
        }
    }

    pub fn fail(
        check: impl Into<String>,
        finding: impl Into<String>,
        advice: impl Into<String>,
    ) -> Check {
        Check {
            level: Level::Fail,
            ..Check::warn(check, finding, advice)
        }
    }
}

/// Runs every machine check, then the interface checks for `name`.
pub fn diagnose(name: Option<&str>) -> Vec<Check> {
    let (mut checks, rates) = machine::checks();
    if let Some(name) = name {
        checks.extend(interface::checks(name, &rates));
    }
    checks
}

/// One line per check: level, what, finding, and the advice after ` -> `.
pub fn render_text(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let _ = write!(out, "{:<5} {}: {}", c.level.name(), c.check, c.finding);
        if let Some(a) = &c.advice {
            let _ = write!(out, " -> {a}");
        }
        out.push('\n');
    }
    out
}

pub fn render_json(checks: &[Check]) -> String {
    let worst = checks.iter().map(|c| c.level).max().unwrap_or(Level::Ok);
    serde_json::json!({ "result": worst, "checks": checks }).to_string()
}

/// `braid doctor`: prints the checks; true unless one failed.
pub fn run(name: Option<&str>, json: bool) -> bool {
    let checks = diagnose(name);
    if json {
        println!("{}", render_json(&checks));
    } else {
        print!("{}", render_text(&checks));
    }
    checks.iter().all(|c| c.level != Level::Fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_has_level_finding_and_advice() {
        let checks = [
            Check::ok("cpu", "aes avx2"),
            Check::warn("socket buffers", "small", "raise them"),
        ];
        let t = render_text(&checks);
        assert_eq!(
            t,
            "ok    cpu: aes avx2\nwarn  socket buffers: small -> raise them\n"
        );
        let v: serde_json::Value = serde_json::from_str(&render_json(&checks)).unwrap();
        assert_eq!(v["result"], "warn");
        assert_eq!(v["checks"][1]["advice"], "raise them");
        assert!(v["checks"][0].get("advice").is_none());
    }
}
