//! `braid doctor [NAME]`: checks this machine (and, with NAME, a running
//! interface) for what limits braid's speed or reliability, and says what
//! to change and why. One line per check; `--json` for scripts. Nothing
//! here prints key material: peers are named by a public key prefix.

mod check;
mod interface;
mod machine;

use std::fmt::Write as _;

pub use check::{Check, Level};
pub use machine::CipherRates;

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
