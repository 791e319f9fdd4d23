//! One grammar for the units braid reads: durations, rates, probabilities
//! and sizes, in `braid netem` flags, `braid bench` flags and config keys.
//!
//! ```text
//! value   = number [spaces] unit        surrounding spaces are ignored
//!         | "0"                         zero needs no unit
//! number  = decimal, e.g. 20  1.5  .5  +3  1e-2   (never negative)
//! unit    = case-insensitive:
//!   duration     us µs usec        microseconds
//!                ms msec           milliseconds
//!                s sec             seconds          (at most 1e9 s)
//!   rate         bit kbit mbit gbit tbit            bits/s, k = 1000
//!                bps kbps mbps gbps                 BYTES/s, as tc reads them
//!                                                   (10mbps = 80 Mbit/s);
//!                                                   refused in strict mode
//!   probability  %                 percent; a bare number is a fraction:
//!                                  1% = 0.01, at most 100% = 1
//!   size         b, kb k, mb m     bytes, k = 1024 as in tc
//! ```
//!
//! A number without a unit other than `0` is refused: tc and people
//! disagree on what `20` means. Rates and sizes round to whole bits and
//! bytes; one past `u64` is refused, and whoever takes the value says
//! whether it may be 0 (`braid netem --rate` may not, a config's
//! `RateLimit` has its own range).
//!
//! Two modes, one grammar: [`Mode::Tc`] (the `braid netem` command line,
//! which follows tc) and [`Mode::Strict`] (the config file), which refuses
//! the byte units of rates with an error that says why: `mbps` reads as
//! megabits to most people and as megabytes to tc, and a config is written
//! once and read for years.
//!
//! Every error names the flag or key (the `name` argument) and the value;
//! a config that names the key itself takes [`UnitError::message`].

use std::fmt;
use std::time::Duration;

/// How a value is read where the grammar leaves a choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// tc's reading: `bps`, `kbps`, `mbps`, `gbps` are bytes per second.
    Tc,
    /// A config's reading: rates only in bits (`kbit`, `mbit`, `gbit`); the
    /// byte units are refused rather than guessed.
    Strict,
}

/// A value that does not parse: which flag or key, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    /// The flag or key, e.g. `--delay` or `ReorderHold`.
    pub name: String,
    /// Why, naming the value, e.g. `"20" has no unit (write 20ms, 20us or 20s)`.
    pub message: String,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for UnitError {}

impl From<UnitError> for String {
    fn from(e: UnitError) -> String {
        e.to_string()
    }
}

fn error(name: &str, message: String) -> UnitError {
    UnitError {
        name: name.to_string(),
        message,
    }
}

/// The longest time a duration may say: about 31 years, far below where
/// `Duration` arithmetic would overflow.
const MAX_SECS: f64 = 1e9;

/// Splits `" 12.5 ms "` into `(12.5, "ms")` (the unit lower-cased); `0`
/// alone is `(0, "")` like any bare number, which the callers refuse
/// unless it is zero.
fn number_unit(name: &str, v: &str, what: &str) -> Result<(f64, String), UnitError> {
    let t = v.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .parse()
        .ok()
        .filter(|x: &f64| x.is_finite())
        .ok_or_else(|| error(name, format!("{v:?} is not a {what}")))?;
    if x < 0.0 {
        return Err(error(name, format!("{v:?} is negative")));
    }
    // `-0` is zero, not a negative duration.
    Ok((x.abs(), unit.trim().to_lowercase()))
}

/// A duration: `20ms`, `1.5s`, `250us`, `0`.
pub fn duration(name: &str, v: &str) -> Result<Duration, UnitError> {
    let (x, unit) = number_unit(name, v, "duration (e.g. 20ms, 1.5s, 250us)")?;
    let scale = match unit.as_str() {
        "us" | "µs" | "usec" => 1e-6,
        "ms" | "msec" => 1e-3,
        "s" | "sec" => 1.0,
        "" if x == 0.0 => return Ok(Duration::ZERO),
        "" => {
            let n = v.trim();
            return Err(error(
                name,
                format!("{v:?} has no unit (a number needs a unit: {n}ms, {n}us or {n}s)"),
            ));
        }
        _ => {
            return Err(error(
                name,
                format!("unknown unit in {v:?} (use us, ms or s)"),
            ))
        }
    };
    let secs = x * scale;
    if secs > MAX_SECS {
        return Err(error(name, format!("{v:?} is too long")));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A rate in bits per second: `100mbit`, `1.5gbit`; in [`Mode::Tc`] also
/// `10mbps` (bytes per second: 80 Mbit/s). Rounded to whole bits.
pub fn rate(name: &str, v: &str, mode: Mode) -> Result<u64, UnitError> {
    let (x, unit) = number_unit(name, v, "rate (e.g. 100mbit)")?;
    let bits_per = match unit.as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        "bps" | "kbps" | "mbps" | "gbps" if mode == Mode::Strict => {
            return Err(error(
                name,
                format!(
                    "unit {unit:?} in {v:?} is bytes per second in tc's notation; \
                     braid takes bits: use kbit, mbit or gbit"
                ),
            ))
        }
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        "" if x == 0.0 => 0.0,
        "" => {
            let n = v.trim();
            return Err(error(
                name,
                format!("{v:?} has no unit (a number needs a unit: e.g. {n}mbit)"),
            ));
        }
        _ => {
            return Err(error(
                name,
                match mode {
                    Mode::Tc => format!(
                        "unknown unit in {v:?} (use bit, kbit, mbit, gbit; \
                         bps, kbps, mbps, gbps are bytes/s)"
                    ),
                    Mode::Strict => {
                        format!("unknown unit in {v:?} (use kbit, mbit or gbit)")
                    }
                },
            ))
        }
    };
    whole(name, v, x * bits_per)
}

/// A size in bytes: `64kb` (k = 1024), `1mb`, `1500b`. Rounded to whole bytes.
pub fn size(name: &str, v: &str) -> Result<u64, UnitError> {
    let (x, unit) = number_unit(name, v, "size (e.g. 64kb)")?;
    let bytes_per = match unit.as_str() {
        "b" => 1.0,
        "kb" | "k" => 1024.0,
        "mb" | "m" => 1024.0 * 1024.0,
        "" if x == 0.0 => 0.0,
        "" => {
            let n = v.trim();
            return Err(error(
                name,
                format!("{v:?} has no unit (a number needs a unit: e.g. {n}kb)"),
            ));
        }
        _ => {
            return Err(error(
                name,
                format!("unknown unit in {v:?} (use b, kb or mb)"),
            ))
        }
    };
    whole(name, v, x * bytes_per)
}

/// `x` rounded to a whole count that fits in `u64`.
fn whole(name: &str, v: &str, x: f64) -> Result<u64, UnitError> {
    let r = x.round();
    // `as` would quietly turn a larger value into u64::MAX.
    if !r.is_finite() || r >= u64::MAX as f64 {
        return Err(error(name, format!("{v:?} is too large")));
    }
    Ok(r as u64)
}

/// Whether `v` has a time unit (`us`, `ms`, `s`, …): for values that may
/// be a time or a size, such as `braid netem --queue`.
pub fn is_duration(v: &str) -> bool {
    let t = v.trim();
    let unit = t.trim_start_matches(|c: char| {
        c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E') || c.is_whitespace()
    });
    matches!(
        unit.to_lowercase().as_str(),
        "us" | "µs" | "usec" | "ms" | "msec" | "s" | "sec"
    )
}

/// A probability: `1%` or a fraction `0.01`; from 0 to 1.
pub fn probability(name: &str, v: &str) -> Result<f64, UnitError> {
    let (x, unit) = number_unit(name, v, "percentage (e.g. 1% or 0.01)")?;
    let pct = match unit.as_str() {
        "%" => true,
        "" => false,
        _ => {
            return Err(error(
                name,
                format!("{v:?} is not a percentage (e.g. 1% or 0.01)"),
            ))
        }
    };
    let p = if pct { x / 100.0 } else { x };
    if p > 1.0 {
        return Err(error(
            name,
            format!(
                "{v:?} is above 100%{}",
                if pct {
                    ""
                } else {
                    " (a bare number is a fraction: 0.01 = 1%)"
                }
            ),
        ));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const US: fn(u64) -> Duration = Duration::from_micros;

    /// Every spelling `braid netem` (tc's reading, case-insensitive, spaces
    /// allowed) and the config (`ReorderHold`: `0`, `us`, `µs`, `ms`, `s`)
    /// took before the grammar was one, with its value.
    #[test]
    fn durations() {
        let good = [
            ("20ms", MS(20)),
            ("1.5s", MS(1500)),
            ("250us", US(250)),
            ("250µs", US(250)),
            ("250usec", US(250)),
            ("20msec", MS(20)),
            ("2sec", MS(2000)),
            ("20MS", MS(20)),
            ("2Sec", MS(2000)),
            ("250US", US(250)),
            ("20 ms", MS(20)),
            (" 20ms ", MS(20)),
            ("+20ms", MS(20)),
            (".5s", MS(500)),
            ("5.s", MS(5000)),
            ("0ms", Duration::ZERO),
            ("-0ms", Duration::ZERO),
            ("0", Duration::ZERO),
            ("333ms", MS(333)),
            ("1s", MS(1000)),
            ("500us", US(500)),
            ("10s", MS(10_000)),
            ("1e3ms", MS(1000)),
        ];
        for (s, want) in good {
            assert_eq!(duration("--delay", s), Ok(want), "{s}");
        }
        let bad = [
            ("20", "no unit"),
            ("", "not a duration"),
            ("ms", "not a duration"),
            ("-5ms", "negative"),
            ("5h", "unknown unit"),
            ("5 m s", "unknown unit"),
            ("1.2.3ms", "not a duration"),
            ("2000000000s", "too long"),
            ("99999999999999999999s", "too long"),
        ];
        for (s, want) in bad {
            let e = duration("--delay", s).expect_err(s);
            assert_eq!(e.name, "--delay");
            let shown = e.to_string();
            assert!(shown.starts_with("--delay: "), "{s}: {shown}");
            assert!(e.message.contains(want), "{s}: {e}");
            assert!(e.message.contains(&format!("{s:?}")), "{s}: {e}");
        }
        let digits = "9".repeat(400) + "s";
        assert!(duration("ReorderHold", &digits)
            .unwrap_err()
            .to_string()
            .starts_with("ReorderHold: "));
    }

    /// Bits per second for every rate either parser took: netem's bit and
    /// (tc) byte units, and the config's bit units, case and spaces as they
    /// came.
    #[test]
    fn rates() {
        let both = [
            ("100mbit", 100_000_000),
            ("1gbit", 1_000_000_000),
            ("50mbit", 50_000_000),
            ("50Mbit", 50_000_000),
            ("50MBIT", 50_000_000),
            ("50 mbit", 50_000_000),
            (" 50mbit ", 50_000_000),
            ("+50mbit", 50_000_000),
            ("1.5gbit", 1_500_000_000),
            ("100kbit", 100_000),
            ("8000bit", 8_000),
            ("1000gbit", 1_000_000_000_000),
            ("1tbit", 1_000_000_000_000),
            ("12.345mbit", 12_345_000),
            ("0.5bit", 1),
            ("0mbit", 0),
            ("0", 0),
            ("0.4bit", 0),
        ];
        for (s, want) in both {
            assert_eq!(rate("--rate", s, Mode::Tc), Ok(want), "{s}");
            assert_eq!(rate("RateLimit", s, Mode::Strict), Ok(want), "{s}");
        }
        // tc's byte units: netem only.
        let bytes = [
            ("10bps", 80),
            ("10kbps", 80_000),
            ("10mbps", 80_000_000),
            ("1gbps", 8_000_000_000),
            ("10MBps", 80_000_000),
            ("10 kbps", 80_000),
        ];
        for (s, want) in bytes {
            assert_eq!(rate("--rate", s, Mode::Tc), Ok(want), "{s}");
            let e = rate("RateLimit", s, Mode::Strict).expect_err(s);
            assert!(e.message.contains("bytes per second"), "{s}: {e}");
            assert!(e.message.contains("mbit"), "{s}: {e}");
            assert!(e.to_string().starts_with("RateLimit: "), "{e}");
        }
        let bad = [
            ("50", "no unit"),
            ("", "not a rate"),
            ("mbit", "not a rate"),
            ("fast", "not a rate"),
            ("50mb", "unknown unit"),
            ("10mbyte", "unknown unit"),
            ("1.2.3mbit", "not a rate"),
            ("-5mbit", "negative"),
            ("99999999999999999999tbit", "too large"),
        ];
        for mode in [Mode::Tc, Mode::Strict] {
            for (s, want) in bad {
                let e = rate("--rate", s, mode).expect_err(s);
                assert_eq!(e.name, "--rate");
                assert!(e.message.contains(want), "{s} {mode:?}: {e}");
            }
        }
    }

    #[test]
    fn probabilities() {
        let good = [
            ("1%", 0.01),
            ("0.25", 0.25),
            ("100%", 1.0),
            ("1", 1.0),
            ("0", 0.0),
            ("0%", 0.0),
            ("50 %", 0.5),
            (" 5% ", 0.05),
            ("0.5%", 0.005),
            (".5", 0.5),
            ("1e-2", 0.01),
        ];
        for (s, want) in good {
            assert_eq!(probability("--loss", s), Ok(want), "{s}");
        }
        let bad = [
            ("150%", "above 100%"),
            ("2", "a bare number is a fraction"),
            ("-1%", "negative"),
            ("", "not a percentage"),
            ("1%%", "not a percentage"),
            ("1ms", "not a percentage"),
            ("inf", "not a percentage"),
            ("lots", "not a percentage"),
        ];
        for (s, want) in bad {
            let e = probability("--loss", s).expect_err(s);
            assert!(e.to_string().starts_with("--loss: "), "{e}");
            assert!(e.message.contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn sizes() {
        let good = [
            ("64kb", 65_536),
            ("64k", 65_536),
            ("64KB", 65_536),
            ("1mb", 1_048_576),
            ("1m", 1_048_576),
            ("1.5mb", 1_572_864),
            ("1500b", 1_500),
            ("64 kb", 65_536),
            ("0kb", 0),
        ];
        for (s, want) in good {
            assert_eq!(size("--queue", s), Ok(want), "{s}");
        }
        let bad = [
            ("64", "no unit"),
            ("64kbit", "unknown unit"),
            ("-1kb", "negative"),
            ("99999999999999999999mb", "too large"),
        ];
        for (s, want) in bad {
            let e = size("--queue", s).expect_err(s);
            assert!(e.to_string().starts_with("--queue: "), "{e}");
            assert!(e.message.contains(want), "{s}: {e}");
        }
        for (s, time) in [
            ("50ms", true),
            ("1 S", true),
            ("250µs", true),
            ("64kb", false),
            ("5", false),
        ] {
            assert_eq!(is_duration(s), time, "{s}");
        }
    }
}
