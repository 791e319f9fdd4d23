//! The daemon's log: one line per event, at a level (`LogLevel =` in
//! `[Interface]`, `-v` on the command line), on standard error.
//!
//! Under systemd's journal (standard error is the stream `JOURNAL_STREAM`
//! names) a line carries no timestamp of ours, since the journal stamps
//! every line itself, and starts with the syslog priority (`<4>`), which
//! the journal reads as the line's level (`journalctl -p warning`).
//! Anywhere else (the log file of a daemon in the background, a terminal)
//! a line starts with the time in UTC and the level's name.
//!
//! Nothing here ever sees a secret: callers log public keys, names,
//! addresses and numbers only. A message is always one line: a line break
//! inside one (from an error of a hook, say) is written as `\n`.
//!
//! The events at `info` and above are also kept, the last
//! [`RECENT_EVENTS`] of them, for `braid top` to show ([`recent`]).

use std::collections::VecDeque;
use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// How much the daemon says, least first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Something failed that the operator must act on.
    Error,
    /// Something went wrong that braid works around (a line went down).
    Warn,
    /// What changes the tunnel: up, down, a line's state, a first
    /// handshake, an MTU (the default).
    Info,
    /// Also routine events: every rekey, every roam.
    Debug,
}

impl Level {
    /// The names `LogLevel =` takes, as a message lists them.
    pub const NAMES: &'static str = "error, warn, info or debug";

    pub fn parse(s: &str) -> Option<Level> {
        match s.to_ascii_lowercase().as_str() {
            "error" => Some(Level::Error),
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" | "verbose" => Some(Level::Debug),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    /// The syslog priority the journal reads from a `<N>` prefix
    /// (sd-daemon.h: SD_ERR 3, SD_WARNING 4, SD_INFO 6, SD_DEBUG 7).
    pub fn syslog_priority(self) -> u8 {
        match self {
            Level::Error => 3,
            Level::Warn => 4,
            Level::Info => 6,
            Level::Debug => 7,
        }
    }

    /// One level more verbose per `-v`, up to debug.
    pub fn raised_by(self, verbose: u8) -> Level {
        let order = [Level::Error, Level::Warn, Level::Info, Level::Debug];
        let at = order.iter().position(|l| *l == self).unwrap_or(2);
        order[(at + usize::from(verbose)).min(order.len() - 1)]
    }

    /// How many `-v` lie between `base` and this level (0 when this one
    /// is not above it).
    pub fn steps_above(self, base: Level) -> u8 {
        self.as_u8().saturating_sub(base.as_u8())
    }

    fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::Error,
            1 => Level::Warn,
            2 => Level::Info,
            _ => Level::Debug,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            Level::Error => 0,
            Level::Warn => 1,
            Level::Info => 2,
            Level::Debug => 3,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(2);
static JOURNAL: AtomicBool = AtomicBool::new(false);

/// Sets the most verbose level written.
pub fn set_level(level: Level) {
    LEVEL.store(level.as_u8(), Ordering::Relaxed);
}

pub fn level() -> Level {
    Level::from_u8(LEVEL.load(Ordering::Relaxed))
}

/// Whether a line at `level` is written (or kept for `braid top`).
pub fn enabled(level: Level) -> bool {
    level <= self::level() || level <= Level::Info
}

/// Looks at where standard error goes now: the journal or anything else.
/// Called once standard error is what it will stay (after a daemon in the
/// background has moved it to its log file).
pub fn detect_output() {
    JOURNAL.store(stderr_is_journal(), Ordering::Relaxed);
}

/// Whether lines go to the journal (no timestamps, priority prefixes).
pub fn to_journal() -> bool {
    JOURNAL.load(Ordering::Relaxed)
}

/// systemd sets `JOURNAL_STREAM=DEVICE:INODE` for a service whose output
/// goes to the journal; it is only ours if standard error is still that
/// stream (a child whose stderr was redirected inherits the variable).
fn stderr_is_journal() -> bool {
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills the stat buffer for a valid descriptor or fails.
    if unsafe { libc::fstat(2, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, so the buffer is initialised.
    let st = unsafe { st.assume_init() };
    journal_stream_matches(&stream, st.st_dev, st.st_ino)
}

fn journal_stream_matches(stream: &str, dev: libc::dev_t, ino: libc::ino_t) -> bool {
    let Some((d, i)) = stream.split_once(':') else {
        return false;
    };
    // Parsed as the target's own types: ino_t is 32 bits on 32-bit glibc.
    d.parse::<libc::dev_t>().is_ok_and(|d| d == dev)
        && i.parse::<libc::ino_t>().is_ok_and(|i| i == ino)
}

/// The line for one event, newline included. `unix_ms` is the wall clock.
pub fn format_line(
    journal: bool,
    level: Level,
    name: &str,
    unix_ms: u64,
    message: fmt::Arguments,
) -> String {
    let mut text = String::with_capacity(96);
    if journal {
        text.push_str(&format!("<{}>", level.syslog_priority()));
    } else {
        text.push_str(&format!("{} {:<5} ", utc_timestamp(unix_ms), level.name()));
    }
    text.push_str(&format!("braid[{name}]: "));
    push_one_line(&mut text, &message.to_string());
    text.push('\n');
    text
}

/// Appends `message` with line breaks and other control characters
/// escaped, so one event is always one line.
fn push_one_line(out: &mut String, message: &str) {
    for c in message.trim_end().chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push(' '),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
}

/// Writes one event of interface `name`, if its level is enabled; events
/// at info and above are also kept for [`recent`].
pub fn write(level: Level, name: &str, message: fmt::Arguments) {
    if !enabled(level) {
        return;
    }
    let now = SystemTime::now();
    let unix_ms = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let line = format_line(to_journal(), level, name, unix_ms, message);
    if level <= Level::Info {
        remember(level, unix_ms, &line);
    }
    if level <= self::level() {
        // One write per line: lines of threads never interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// `error!(name, "format", args…)` and its siblings: one event of interface
/// `name` at that level.
#[macro_export]
macro_rules! log_at {
    ($level:expr, $name:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            $crate::log::write($level, &$name, format_args!($($arg)*))
        }
    };
}

#[macro_export]
macro_rules! error {
    ($name:expr, $($arg:tt)*) => { $crate::log_at!($crate::log::Level::Error, $name, $($arg)*) };
}

#[macro_export]
macro_rules! warn {
    ($name:expr, $($arg:tt)*) => { $crate::log_at!($crate::log::Level::Warn, $name, $($arg)*) };
}

#[macro_export]
macro_rules! info {
    ($name:expr, $($arg:tt)*) => { $crate::log_at!($crate::log::Level::Info, $name, $($arg)*) };
}

#[macro_export]
macro_rules! debug {
    ($name:expr, $($arg:tt)*) => { $crate::log_at!($crate::log::Level::Debug, $name, $($arg)*) };
}

/// How many recent events the daemon keeps for `braid top`.
pub const RECENT_EVENTS: usize = 32;

/// An event kept for `braid top`: when (Unix milliseconds), how bad, what.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecentEvent {
    pub unix_ms: u64,
    pub level: String,
    pub text: String,
}

static RECENT: Mutex<VecDeque<RecentEvent>> = Mutex::new(VecDeque::new());

fn remember(level: Level, unix_ms: u64, line: &str) {
    // The message alone: after "braid[NAME]: ".
    let text = line
        .split_once("]: ")
        .map_or(line, |(_, m)| m)
        .trim_end()
        .to_string();
    let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    if recent.len() == RECENT_EVENTS {
        recent.pop_front();
    }
    recent.push_back(RecentEvent {
        unix_ms,
        level: level.name().to_string(),
        text,
    });
}

/// The last events at info and above, oldest first.
pub fn recent() -> Vec<RecentEvent> {
    RECENT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect()
}

/// `2026-11-23T10:00:00.123Z` for Unix milliseconds (proleptic Gregorian,
/// Howard Hinnant's days-to-civil algorithm).
pub fn utc_timestamp(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// Inverse of [`utc_timestamp`] (what the benches read back from a log).
pub fn parse_utc_timestamp(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 24 || &s[4..5] != "-" || &s[10..11] != "T" || !s.ends_with('Z') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<u64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(y, mo, d)?;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec) * 1000) + ms)
}

fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

fn days_from_civil(y: u64, m: u64, d: u64) -> Option<u64> {
    let y = if m <= 2 { y.checked_sub(1)? } else { y };
    let era = y / 400;
    let yoe = y % 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_order_and_raise() {
        assert_eq!(Level::parse("WARN"), Some(Level::Warn));
        assert_eq!(Level::parse("warning"), Some(Level::Warn));
        assert_eq!(Level::parse("verbose"), Some(Level::Debug));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Warn && Level::Info < Level::Debug);
        assert_eq!(Level::Info.raised_by(0), Level::Info);
        assert_eq!(Level::Info.raised_by(1), Level::Debug);
        assert_eq!(Level::Error.raised_by(1), Level::Warn);
        assert_eq!(Level::Warn.raised_by(200), Level::Debug);
        assert_eq!(Level::Debug.steps_above(Level::Warn), 2);
        assert_eq!(Level::Warn.steps_above(Level::Debug), 0);
        for l in [Level::Error, Level::Warn, Level::Info, Level::Debug] {
            assert_eq!(Level::parse(l.name()), Some(l));
            assert_eq!(Level::from_u8(l.as_u8()), l);
        }
    }

    #[test]
    fn a_line_outside_the_journal_has_time_and_level() {
        let line = format_line(
            false,
            Level::Warn,
            "wg0",
            1_700_000_000_123,
            format_args!("path {} down", "lte"),
        );
        assert_eq!(
            line,
            "2023-11-14T22:13:20.123Z warn  braid[wg0]: path lte down\n"
        );
    }

    #[test]
    fn a_line_in_the_journal_has_its_priority_and_no_time() {
        let line = format_line(true, Level::Error, "wg0", 5, format_args!("boom"));
        assert_eq!(line, "<3>braid[wg0]: boom\n");
        let line = format_line(true, Level::Debug, "wg0", 5, format_args!("x"));
        assert!(line.starts_with("<7>braid[wg0]: "));
    }

    #[test]
    fn one_event_is_one_line() {
        let line = format_line(
            true,
            Level::Error,
            "wg0",
            0,
            format_args!("hook failed:\nline two\r\x07end\n"),
        );
        assert_eq!(line, "<3>braid[wg0]: hook failed:\\nline two\\r\\u{7}end\n");
        assert_eq!(line.matches('\n').count(), 1);
    }

    #[test]
    fn journal_stream_is_matched_by_device_and_inode() {
        assert!(journal_stream_matches("8:1234", 8, 1234));
        assert!(!journal_stream_matches("8:1234", 8, 1235));
        assert!(!journal_stream_matches("8:1234", 9, 1234));
        assert!(!journal_stream_matches("garbage", 8, 1234));
        assert!(!journal_stream_matches("", 0, 0));
    }

    #[test]
    fn timestamps_round_trip_and_known_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc_timestamp(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        for ms in [
            0,
            1,
            86_399_999,
            951_782_400_000,
            1_700_000_000_123,
            4_107_542_400_000,
            253_402_300_799_999,
        ] {
            assert_eq!(parse_utc_timestamp(&utc_timestamp(ms)), Some(ms), "{ms}");
        }
        assert_eq!(parse_utc_timestamp("2023-13-14T22:13:20.123Z"), None);
        assert_eq!(parse_utc_timestamp("2023-11-14 22:13:20.123Z"), None);
        assert_eq!(parse_utc_timestamp("nonsense"), None);
    }
}
