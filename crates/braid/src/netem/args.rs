//! The `braid netem` command line: flags, units and their checks.
//!
//! Everything that can be wrong with the arguments is found here, before a
//! socket is opened, and every error names the flag and the value.
//!
//! Units follow tc's conventions:
//! - durations: `us`, `ms`, `s` (`20ms`, `1.5s`); a bare number is rejected
//!   because tc and humans disagree on its unit;
//! - rates: `bit`, `kbit`, `mbit`, `gbit` (bits per second, powers of 1000),
//!   and `bps`, `kbps`, `mbps`, `gbps`, which are *bytes* per second as in tc;
//! - probabilities: `1%` or a fraction `0.01`;
//! - sizes (`--queue`): `b`, `kb`, `mb` (tc's powers of 1024).

use braid_core::link::{JitterDist, LinkParams, QueueLimit};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Most clients served at once; the least recently seen one makes room.
pub const DEFAULT_MAX_CLIENTS: usize = 1024;

/// A fully checked `braid netem` invocation.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub to: SocketAddr,
    /// Client → `to`.
    pub up: LinkParams,
    /// `to` → client.
    pub down: LinkParams,
    /// The up line uses `seed`, the down line `seed + 1`.
    pub seed: u64,
    /// Cut (true) and restore (false) events, relative to the start, in order.
    pub schedule: Vec<(Duration, bool)>,
    pub control: Option<PathBuf>,
    pub stats_interval: Option<Duration>,
    pub json: bool,
    pub duration: Option<Duration>,
    pub max_clients: usize,
    /// Run at real-time priority (SCHED_FIFO), for delays that stay
    /// precise on a busy machine.
    pub realtime: bool,
}

pub const USAGE: &str = "\
usage: braid netem --listen ADDR:PORT --to ADDR:PORT [impairments] [options]

A UDP relay that impairs the line: datagrams from any client on --listen go
to --to from a socket of their own, replies go back to the client.

impairments (both directions unless --up/--down override them):
  --delay 20ms            fixed delay (units us, ms, s)
  --jitter 1ms            random delay variation; reorders like netem
  --jitter-dist uniform|normal
  --no-reorder            jitter that keeps arrival order
  --loss 1%               random loss (1% or 0.01)
  --loss-burst 4          bursty loss (Gilbert-Elliott), mean burst length
  --dup 0.5%              duplication
  --corrupt 0.1%          one flipped bit per corrupted datagram
  --rate 100mbit          rate cap (bit|kbit|mbit|gbit; bps|kbps|mbps|gbps = bytes/s)
  --queue 50ms|64kb       drop-tail queue of the rate cap (default 50ms)
  --mtu 1300              datagrams longer than this vanish
  --up \"SPEC\"             per-direction flags for client -> --to, on top of the above
  --down \"SPEC\"           per-direction flags for replies, e.g. --down \"--loss 5%\"

options:
  --cut-at 5s             cut the line (both directions) at this time; repeatable
  --restore-at 8s         restore it; pairs with the --cut-at before it
  --seed 7                repeat a run exactly (default: random, printed)
  --control PATH          unix socket: lines cut, restore, stats, stats json
  --stats-interval 1s     print live counters to stderr periodically
  --json                  print counters as JSON
  --duration 10s          stop by itself after this long
  --max-clients 1024      clients served at once (least recently seen is evicted)
  --realtime              real-time priority (SCHED_FIFO): delays stay precise
                          when other work competes for the CPU

signals: SIGUSR1 cuts, SIGUSR2 restores, SIGINT/SIGTERM stop and print counters.
";

/// Parses `braid netem`'s arguments (without the `netem` itself).
/// `Ok(None)` means help was asked for.
pub fn parse(args: &[String]) -> Result<Option<Config>, String> {
    let mut listen = None;
    let mut to = None;
    let mut base = LinkParams::default();
    let mut up_spec: Option<String> = None;
    let mut down_spec: Option<String> = None;
    let mut seed = None;
    let mut events: Vec<(Duration, bool, String)> = Vec::new();
    let mut control = None;
    let mut stats_interval = None;
    let mut json = false;
    let mut duration = None;
    let mut max_clients = DEFAULT_MAX_CLIENTS;
    let mut realtime = false;

    let mut it = Flags::new(args);
    while let Some(flag) = it.next_flag()? {
        if apply_impairment(&mut base, &flag, &mut it)? {
            continue;
        }
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => listen = Some(parse_addr(&flag, &it.value(&flag)?)?),
            "--to" => to = Some(parse_addr(&flag, &it.value(&flag)?)?),
            // A SPEC is itself flags, so it starts with "--".
            "--up" => up_spec = Some(it.raw_value(&flag)?),
            "--down" => down_spec = Some(it.raw_value(&flag)?),
            "--seed" => {
                let v = it.value(&flag)?;
                seed = Some(v.parse::<u64>().map_err(|_| {
                    format!("{flag}: {v:?} is not a seed (a whole number 0..2^64)")
                })?);
            }
            "--cut-at" | "--restore-at" => {
                let v = it.value(&flag)?;
                let at = parse_duration(&flag, &v)?;
                events.push((at, flag == "--cut-at", v));
            }
            "--control" => control = Some(PathBuf::from(it.value(&flag)?)),
            "--stats-interval" => {
                let v = it.value(&flag)?;
                let d = parse_duration(&flag, &v)?;
                if d < Duration::from_millis(1) {
                    return Err(format!("{flag}: {v:?} is too short (at least 1ms)"));
                }
                stats_interval = Some(d);
            }
            "--json" => json = true,
            "--realtime" => realtime = true,
            "--duration" => {
                let v = it.value(&flag)?;
                duration = Some(parse_duration(&flag, &v)?);
            }
            "--max-clients" => {
                let v = it.value(&flag)?;
                max_clients = match v.parse::<usize>() {
                    Ok(n @ 1..=65536) => n,
                    _ => return Err(format!("{flag}: {v:?} is not a number from 1 to 65536")),
                };
            }
            _ => return Err(format!("unknown flag {flag:?}; see `braid netem --help`")),
        }
    }

    let schedule = check_schedule(&events)?;
    let up = direction("--up", &base, up_spec.as_deref())?;
    let down = direction("--down", &base, down_spec.as_deref())?;
    let listen = listen.ok_or("--listen ADDR:PORT is required")?;
    let to = to.ok_or("--to ADDR:PORT is required")?;
    let seed = seed.unwrap_or_else(random_seed);
    Ok(Some(Config {
        listen,
        to,
        up,
        down,
        seed,
        schedule,
        control,
        stats_interval,
        json,
        duration,
        max_clients,
        realtime,
    }))
}

/// The cut/restore events must alternate, starting with a cut, at
/// increasing times.
fn check_schedule(events: &[(Duration, bool, String)]) -> Result<Vec<(Duration, bool)>, String> {
    let mut cuts: Vec<&(Duration, bool, String)> = events.iter().filter(|e| e.1).collect();
    let mut restores: Vec<&(Duration, bool, String)> = events.iter().filter(|e| !e.1).collect();
    cuts.sort_by_key(|e| e.0);
    restores.sort_by_key(|e| e.0);
    if restores.len() > cuts.len() {
        let r = restores[cuts.len()];
        return Err(format!(
            "--restore-at {}: there is no --cut-at before it (each --restore-at pairs with one --cut-at)",
            r.2
        ));
    }
    let mut out = Vec::new();
    let mut last: Option<(Duration, &str, &str)> = None;
    for (i, c) in cuts.iter().enumerate() {
        let mut seq = vec![(c.0, "--cut-at", c.2.as_str(), true)];
        if let Some(r) = restores.get(i) {
            seq.push((r.0, "--restore-at", r.2.as_str(), false));
        }
        for (at, flag, text, cut) in seq {
            if let Some((prev, pflag, ptext)) = last {
                if at <= prev {
                    return Err(format!(
                        "{flag} {text}: must come after {pflag} {ptext} (cuts and restores alternate, in time order)"
                    ));
                }
            }
            last = Some((at, flag, text));
            out.push((at, cut));
        }
    }
    Ok(out)
}

/// The line of one direction: the symmetric flags, overridden by `spec`.
fn direction(name: &str, base: &LinkParams, spec: Option<&str>) -> Result<LinkParams, String> {
    let mut p = base.clone();
    if let Some(spec) = spec {
        let words: Vec<String> = spec.split_whitespace().map(str::to_string).collect();
        let mut it = Flags::new(&words);
        while let Some(flag) = it.next_flag().map_err(|e| format!("{name}: {e}"))? {
            let known =
                apply_impairment(&mut p, &flag, &mut it).map_err(|e| format!("{name}: {e}"))?;
            if !known {
                return Err(format!(
                    "{name} {spec:?}: {flag} is not an impairment flag (only --delay, --jitter, --jitter-dist, --no-reorder, --loss, --loss-burst, --dup, --corrupt, --rate, --queue, --mtu go here)"
                ));
            }
        }
    }
    p.validate().map_err(|e| format!("{name}: {e}"))?;
    Ok(p)
}

/// Applies one impairment flag; false when `flag` is not one.
fn apply_impairment(p: &mut LinkParams, flag: &str, it: &mut Flags) -> Result<bool, String> {
    match flag {
        "--delay" => p.delay = parse_duration(flag, &it.value(flag)?)?,
        "--jitter" => p.jitter = parse_duration(flag, &it.value(flag)?)?,
        "--jitter-dist" => {
            let v = it.value(flag)?;
            p.jitter_dist = match v.to_ascii_lowercase().as_str() {
                "uniform" => JitterDist::Uniform,
                "normal" => JitterDist::Normal,
                _ => return Err(format!("{flag}: {v:?} is not uniform or normal")),
            }
        }
        "--no-reorder" => p.reorder = false,
        "--loss" => p.loss = parse_probability(flag, &it.value(flag)?)?,
        "--loss-burst" => {
            let v = it.value(flag)?;
            match v.parse::<f64>() {
                Ok(b) if b.is_finite() && b >= 1.0 => p.loss_burst = Some(b),
                _ => {
                    return Err(format!(
                        "{flag}: {v:?} is not a mean burst length (a number of packets, at least 1)"
                    ))
                }
            }
        }
        "--dup" => p.duplicate = parse_probability(flag, &it.value(flag)?)?,
        "--corrupt" => p.corrupt = parse_probability(flag, &it.value(flag)?)?,
        "--rate" => p.rate_bps = Some(parse_rate(flag, &it.value(flag)?)?),
        "--queue" => {
            let v = it.value(flag)?;
            p.queue = parse_queue(flag, &v)?;
        }
        "--mtu" => {
            let v = it.value(flag)?;
            p.mtu = match v.parse::<usize>() {
                Ok(n @ 1..=65535) => Some(n),
                _ => {
                    return Err(format!(
                        "{flag}: {v:?} is not a datagram size in bytes (1 to 65535)"
                    ))
                }
            };
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Walks `--flag value` and `--flag=value` arguments.
struct Flags<'a> {
    args: &'a [String],
    pos: usize,
    inline: Option<String>,
}

impl<'a> Flags<'a> {
    fn new(args: &'a [String]) -> Self {
        Flags {
            args,
            pos: 0,
            inline: None,
        }
    }

    fn next_flag(&mut self) -> Result<Option<String>, String> {
        if let Some(v) = self.inline.take() {
            return Err(format!("unexpected value {v:?}"));
        }
        let Some(a) = self.args.get(self.pos) else {
            return Ok(None);
        };
        self.pos += 1;
        if !a.starts_with('-') || a == "-" {
            return Err(format!(
                "unexpected argument {a:?} (flags start with --; see `braid netem --help`)"
            ));
        }
        if let Some((f, v)) = a.split_once('=') {
            self.inline = Some(v.to_string());
            return Ok(Some(f.to_string()));
        }
        Ok(Some(a.clone()))
    }

    /// The next argument, whatever it looks like.
    fn raw_value(&mut self, flag: &str) -> Result<String, String> {
        if let Some(v) = self.inline.take() {
            return Ok(v);
        }
        let v = self
            .args
            .get(self.pos)
            .ok_or_else(|| format!("{flag} needs a value"))?;
        self.pos += 1;
        Ok(v.clone())
    }

    fn value(&mut self, flag: &str) -> Result<String, String> {
        if let Some(v) = self.inline.take() {
            return Ok(v);
        }
        match self.args.get(self.pos) {
            // A value may start with '-' (a negative delay is reported as
            // such, not as a missing value), but not with "--".
            Some(v) if !v.starts_with("--") => {
                self.pos += 1;
                Ok(v.clone())
            }
            _ => Err(format!("{flag} needs a value")),
        }
    }
}

fn parse_addr(flag: &str, v: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = v.parse::<SocketAddr>() {
        return Ok(a);
    }
    // Host names resolve once, at start.
    v.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            format!("{flag}: {v:?} is not ADDR:PORT (e.g. 127.0.0.1:5000 or [::1]:5000)")
        })
}

/// Splits "12.5ms" into (12.5, "ms"); errors name the flag.
fn number_unit<'v>(flag: &str, v: &'v str, what: &str) -> Result<(f64, &'v str), String> {
    let t = v.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{flag}: {v:?} is not a {what}"))?;
    if !x.is_finite() {
        return Err(format!("{flag}: {v:?} is not a {what}"));
    }
    if x < 0.0 {
        return Err(format!("{flag}: {v:?} is negative"));
    }
    Ok((x, unit.trim()))
}

pub fn parse_duration(flag: &str, v: &str) -> Result<Duration, String> {
    let (x, unit) = number_unit(flag, v, "duration")?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "us" | "µs" | "usec" => 1e-6,
        "ms" | "msec" => 1e-3,
        "s" | "sec" => 1.0,
        "" => {
            return Err(format!(
                "{flag}: {v:?} has no unit (write {v}ms, {v}us or {v}s)"
            ))
        }
        _ => return Err(format!("{flag}: unknown unit in {v:?} (use us, ms or s)")),
    };
    let secs = x * scale;
    if secs > 1e9 {
        return Err(format!("{flag}: {v:?} is too long"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Bits per second.
pub fn parse_rate(flag: &str, v: &str) -> Result<u64, String> {
    let (x, unit) = number_unit(flag, v, "rate")?;
    let bits_per = match unit.to_ascii_lowercase().as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        // tc: "bps" is bytes per second.
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        "" => return Err(format!("{flag}: {v:?} has no unit (write e.g. {v}mbit)")),
        _ => {
            return Err(format!(
                "{flag}: unknown unit in {v:?} (use bit, kbit, mbit, gbit; bps, kbps, mbps, gbps are bytes/s)"
            ))
        }
    };
    let r = (x * bits_per).round();
    if r < 1.0 {
        return Err(format!("{flag}: {v:?} must be above 0"));
    }
    // `as` would quietly turn a larger rate into u64::MAX bits/s.
    if !r.is_finite() || r >= u64::MAX as f64 {
        return Err(format!("{flag}: {v:?} is too large"));
    }
    Ok(r as u64)
}

/// A probability from "1%" or "0.01".
pub fn parse_probability(flag: &str, v: &str) -> Result<f64, String> {
    let t = v.trim();
    let (num, pct) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), true),
        None => (t, false),
    };
    let x: f64 = num
        .parse()
        .ok()
        .filter(|x: &f64| x.is_finite())
        .ok_or_else(|| format!("{flag}: {v:?} is not a percentage (e.g. 1% or 0.01)"))?;
    let p = if pct { x / 100.0 } else { x };
    if p < 0.0 {
        return Err(format!("{flag}: {v:?} is negative"));
    }
    if p > 1.0 {
        return Err(format!(
            "{flag}: {v:?} is above 100%{}",
            if pct {
                ""
            } else {
                " (a bare number is a fraction: 0.01 = 1%)"
            }
        ));
    }
    Ok(p)
}

/// `--queue`: a time (`50ms`) or a size (`64kb`).
pub fn parse_queue(flag: &str, v: &str) -> Result<QueueLimit, String> {
    let (x, unit) = number_unit(flag, v, "queue length")?;
    let bytes_per = match unit.to_ascii_lowercase().as_str() {
        "us" | "ms" | "s" => return parse_duration(flag, v).map(QueueLimit::Time),
        "b" => 1.0,
        "kb" | "k" => 1024.0,
        "mb" | "m" => 1024.0 * 1024.0,
        "" => {
            return Err(format!(
                "{flag}: {v:?} has no unit (a time like 50ms or a size like 64kb)"
            ))
        }
        _ => {
            return Err(format!(
                "{flag}: unknown unit in {v:?} (a time in us/ms/s or a size in b/kb/mb)"
            ))
        }
    };
    let b = (x * bytes_per).round();
    if b < 1.0 {
        return Err(format!("{flag}: {v:?} must be above 0"));
    }
    if !b.is_finite() || b >= u64::MAX as f64 {
        return Err(format!("{flag}: {v:?} is too large"));
    }
    Ok(QueueLimit::Bytes(b as u64))
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    // A fixed seed is still a valid run if the OS has no randomness to give.
    let _ = getrandom::getrandom(&mut b);
    u64::from_le_bytes(b)
}

/// A one-line description of a direction's impairments.
pub fn describe(p: &LinkParams) -> String {
    if p.is_perfect() {
        return "perfect".into();
    }
    let mut s = Vec::new();
    if !p.delay.is_zero() || !p.jitter.is_zero() {
        let mut d = format!("delay {:?}", p.delay);
        if !p.jitter.is_zero() {
            d += &format!(
                " ± {:?} {}{}",
                p.jitter,
                match p.jitter_dist {
                    JitterDist::Uniform => "uniform",
                    JitterDist::Normal => "normal",
                },
                if p.reorder { "" } else { " no-reorder" }
            );
        }
        s.push(d);
    }
    if p.loss > 0.0 {
        let mut l = format!("loss {}%", p.loss * 100.0);
        if let Some(b) = p.loss_burst {
            l += &format!(" burst {b}");
        }
        s.push(l);
    }
    if p.duplicate > 0.0 {
        s.push(format!("dup {}%", p.duplicate * 100.0));
    }
    if p.corrupt > 0.0 {
        s.push(format!("corrupt {}%", p.corrupt * 100.0));
    }
    if let Some(r) = p.rate_bps {
        let q = match p.queue {
            QueueLimit::Time(t) => format!("{t:?}"),
            QueueLimit::Bytes(b) => format!("{b} B"),
        };
        s.push(format!("rate {} bit/s queue {q}", r));
    }
    if let Some(m) = p.mtu {
        s.push(format!("mtu {m}"));
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn err(s: &str) -> String {
        parse(&args(s)).unwrap_err()
    }

    const BASE: &str = "--listen 127.0.0.1:1 --to 127.0.0.1:2";

    #[test]
    fn units() {
        assert_eq!(
            parse_duration("--d", "20ms").unwrap(),
            Duration::from_millis(20)
        );
        assert_eq!(
            parse_duration("--d", "1.5s").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse_duration("--d", "250us").unwrap(),
            Duration::from_micros(250)
        );
        assert!(parse_duration("--d", "20").unwrap_err().contains("no unit"));
        assert!(parse_duration("--d", "-5ms")
            .unwrap_err()
            .contains("negative"));
        assert!(parse_duration("--d", "5h")
            .unwrap_err()
            .contains("unknown unit"));
        assert_eq!(parse_rate("--r", "100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("--r", "1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("--r", "10kbps").unwrap(), 80_000);
        assert!(parse_rate("--r", "10mbyte").is_err());
        // Past u64: an error, not a rate silently capped at u64::MAX.
        let e = parse_rate("--r", "99999999999999999999tbit").unwrap_err();
        assert!(e.contains("--r") && e.contains("too large"), "{e}");
        let e = parse_queue("--q", "99999999999999999999mb").unwrap_err();
        assert!(e.contains("--q") && e.contains("too large"), "{e}");
        assert_eq!(parse_probability("--l", "1%").unwrap(), 0.01);
        assert_eq!(parse_probability("--l", "0.25").unwrap(), 0.25);
        assert!(parse_probability("--l", "150%").is_err());
        assert!(parse_probability("--l", "2").is_err());
        assert_eq!(
            parse_queue("--q", "64kb").unwrap(),
            QueueLimit::Bytes(65536)
        );
        assert_eq!(
            parse_queue("--q", "50ms").unwrap(),
            QueueLimit::Time(Duration::from_millis(50))
        );
    }

    #[test]
    fn directions() {
        let c = parse(&args(&format!("{BASE} --delay 10ms --loss 1% --seed 7")))
            .unwrap()
            .unwrap();
        assert_eq!(c.up, c.down);
        assert_eq!(c.seed, 7);
        let mut a = args(&format!("{BASE} --delay 10ms --up"));
        a.push("--loss 5% --mtu 1300".into());
        let c = parse(&a).unwrap().unwrap();
        assert_eq!(c.up.delay, Duration::from_millis(10));
        assert_eq!(c.up.loss, 0.05);
        assert_eq!(c.up.mtu, Some(1300));
        assert_eq!(c.down.loss, 0.0);
        let mut a = args(BASE);
        a.push("--down".into());
        a.push("--loss 200%".into());
        let e = parse(&a).unwrap_err();
        assert!(
            e.contains("--down") && e.contains("--loss") && e.contains("200%"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_flag() {
        let e = err(&format!("{BASE} --delay -5ms"));
        assert!(e.contains("--delay") && e.contains("-5ms"), "{e}");
        let e = err(&format!("{BASE} --loss 150%"));
        assert!(e.contains("--loss") && e.contains("150%"), "{e}");
        let e = err(&format!("{BASE} --restore-at 3s"));
        assert!(e.contains("--restore-at") && e.contains("3s"), "{e}");
        let e = err(&format!("{BASE} --cut-at 5s --restore-at 3s"));
        assert!(e.contains("--restore-at 3s"), "{e}");
        let e = err("--to 127.0.0.1:2");
        assert!(e.contains("--listen"), "{e}");
        let s = parse(&args(&format!(
            "{BASE} --cut-at 1s --restore-at 2s --cut-at 3s"
        )))
        .unwrap()
        .unwrap()
        .schedule;
        assert_eq!(s.len(), 3);
    }
}
