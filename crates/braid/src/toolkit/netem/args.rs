//! The `braid netem` command line: flags, units and their checks.
//!
//! Everything that can be wrong with the arguments is found here, before a
//! socket is opened, and every error names the flag and the value.
//!
//! Units are [`braid_netem::units`]' grammar in tc's reading
//! ([`Mode::Tc`]):
//! - durations: `us`, `ms`, `s` (`20ms`, `1.5s`); a bare number other than
//!   `0` is rejected because tc and humans disagree on its unit;
//! - rates: `bit`, `kbit`, `mbit`, `gbit` (bits per second, powers of 1000),
//!   and `bps`, `kbps`, `mbps`, `gbps`, which are *bytes* per second as in tc;
//! - probabilities: `1%` or a fraction `0.01`;
//! - sizes (`--queue`): `b`, `kb`, `mb` (tc's powers of 1024).

use braid_netem::link::{JitterDist, LinkParams, QueueLimit};
use braid_netem::relay::RelayConfig;
use braid_netem::units::{self, Mode};
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
    /// Rate changes (both directions): (when, bits per second), in time
    /// order.
    pub rate_schedule: Vec<(Duration, u64)>,
    pub control: Option<PathBuf>,
    pub stats_interval: Option<Duration>,
    pub json: bool,
    pub duration: Option<Duration>,
    pub max_clients: usize,
    /// Run at real-time priority (SCHED_FIFO), for delays that stay
    /// precise on a busy machine.
    pub realtime: bool,
}

impl Config {
    /// What the relay's engine needs of it.
    pub fn relay(&self) -> RelayConfig {
        RelayConfig {
            to: self.to,
            up: self.up.clone(),
            down: self.down.clone(),
            seed: self.seed,
            schedule: self.schedule.clone(),
            rate_schedule: self.rate_schedule.clone(),
            max_clients: self.max_clients,
        }
    }
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
  --rate-at 3s 10mbit     from this time on, cap both directions at this rate
                          (what is queued leaves first; the queue limit stays);
                          repeatable, e.g. a line that falls and recovers:
                          --rate 100mbit --rate-at 3s 10mbit --rate-at 8s 100mbit
  --seed 7                repeat a run exactly (default: random, printed)
  --control PATH          unix socket: lines cut, restore, rate 10mbit, stats,
                          stats json; each answered with one line (ok, the
                          counters, or error: ...)
  --stats-interval 1s     print live counters to stderr periodically
  --json                  print counters as JSON
  --duration 10s          stop by itself after this long
  --max-clients 1024      clients served at once (least recently seen is evicted)
  --realtime              real-time priority (SCHED_FIFO 30): delays stay
                          precise when other work competes for the CPU

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
    let mut rate_events: Vec<(Duration, u64, String)> = Vec::new();
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
                let at = units::duration(&flag, &v)?;
                events.push((at, flag == "--cut-at", v));
            }
            "--rate-at" => {
                let at_text = it.value(&flag)?;
                let at = units::duration(&flag, &at_text)?;
                let rate_text = it.value(&flag).map_err(|_| {
                    format!("{flag} {at_text}: needs a rate after the time, e.g. {flag} 3s 10mbit")
                })?;
                let rate = parse_rate_change(&format!("{flag} {at_text}"), &rate_text)?;
                if let Some(same) = rate_events.iter().find(|e| e.0 == at) {
                    return Err(format!(
                        "{flag} {at_text}: a rate is already set for that time ({flag} {} {})",
                        at_text, same.2
                    ));
                }
                rate_events.push((at, rate, rate_text));
            }
            "--control" => control = Some(PathBuf::from(it.value(&flag)?)),
            "--stats-interval" => {
                let v = it.value(&flag)?;
                let d = units::duration(&flag, &v)?;
                if d < Duration::from_millis(1) {
                    return Err(format!("{flag}: {v:?} is too short (at least 1ms)"));
                }
                stats_interval = Some(d);
            }
            "--json" => json = true,
            "--realtime" => realtime = true,
            "--duration" => {
                let v = it.value(&flag)?;
                duration = Some(units::duration(&flag, &v)?);
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
    rate_events.sort_by_key(|e| e.0);
    let rate_schedule = rate_events.iter().map(|e| (e.0, e.1)).collect();
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
        rate_schedule,
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
        "--delay" => p.delay = units::duration(flag, &it.value(flag)?)?,
        "--jitter" => p.jitter = units::duration(flag, &it.value(flag)?)?,
        "--jitter-dist" => {
            let v = it.value(flag)?;
            p.jitter_dist = match v.to_ascii_lowercase().as_str() {
                "uniform" => JitterDist::Uniform,
                "normal" => JitterDist::Normal,
                _ => return Err(format!("{flag}: {v:?} is not uniform or normal")),
            }
        }
        "--no-reorder" => p.reorder = false,
        "--loss" => p.loss = units::probability(flag, &it.value(flag)?)?,
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
        "--dup" => p.duplicate = units::probability(flag, &it.value(flag)?)?,
        "--corrupt" => p.corrupt = units::probability(flag, &it.value(flag)?)?,
        "--rate" => {
            let v = it.value(flag)?;
            match units::rate(flag, &v, Mode::Tc)? {
                0 => return Err(format!("{flag}: {v:?} must be above 0")),
                r => p.rate_bps = Some(r),
            }
        }
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

/// A rate for `--rate-at` or the control socket's `rate` (tc's units,
/// above 0); `what` names where it came from in the error.
pub fn parse_rate_change(what: &str, v: &str) -> Result<u64, String> {
    match units::rate(what, v, Mode::Tc)? {
        0 => Err(format!("{what}: {v:?} must be above 0")),
        r => Ok(r),
    }
}

/// `--queue`: a time (`50ms`) or a size (`64kb`).
pub fn parse_queue(flag: &str, v: &str) -> Result<QueueLimit, String> {
    if units::is_duration(v) {
        return Ok(QueueLimit::Time(units::duration(flag, v)?));
    }
    match units::size(flag, v)? {
        0 => Err(format!("{flag}: {v:?} must be above 0")),
        b => Ok(QueueLimit::Bytes(b)),
    }
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

    /// The grammar itself is tested in `braid_netem::units`; here, that
    /// the flags read it in tc's way and name themselves.
    #[test]
    fn units() {
        let c = parse(&args(&format!(
            "{BASE} --delay 20ms --jitter 250us --rate 10kbps --loss 1% --queue 64kb"
        )))
        .unwrap()
        .unwrap();
        assert_eq!(c.up.delay, Duration::from_millis(20));
        assert_eq!(c.up.jitter, Duration::from_micros(250));
        assert_eq!(c.up.rate_bps, Some(80_000));
        assert_eq!(c.up.loss, 0.01);
        assert_eq!(c.up.queue, QueueLimit::Bytes(65536));
        assert_eq!(
            parse_queue("--q", "50ms").unwrap(),
            QueueLimit::Time(Duration::from_millis(50))
        );
        let e = parse_queue("--q", "99999999999999999999mb").unwrap_err();
        assert!(e.contains("--q") && e.contains("too large"), "{e}");
        let e = err(&format!("{BASE} --rate 99999999999999999999tbit"));
        assert!(e.contains("--rate") && e.contains("too large"), "{e}");
        let e = err(&format!("{BASE} --delay 20"));
        assert!(e.contains("--delay") && e.contains("no unit"), "{e}");
        for zero in ["--rate 0mbit", "--rate 0.4bit", "--queue 0kb"] {
            let e = err(&format!("{BASE} {zero}"));
            assert!(
                e.contains(zero.split(' ').next().unwrap()) && e.contains("above 0"),
                "{e}"
            );
        }
        let e = err(&format!("{BASE} --rate 10mbyte"));
        assert!(e.contains("--rate") && e.contains("unknown unit"), "{e}");
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
    fn rate_changes() {
        let c = parse(&args(&format!(
            "{BASE} --rate 100mbit --rate-at 8s 100mbit --rate-at 3s 10mbit"
        )))
        .unwrap()
        .unwrap();
        assert_eq!(
            c.rate_schedule,
            vec![
                (Duration::from_secs(3), 10_000_000),
                (Duration::from_secs(8), 100_000_000)
            ]
        );
        assert_eq!(c.relay().rate_schedule, c.rate_schedule);
        // Also on a line without a rate cap at the start.
        let c = parse(&args(&format!("{BASE} --rate-at=1500ms 2mbit")))
            .unwrap()
            .unwrap();
        assert_eq!(
            c.rate_schedule,
            vec![(Duration::from_millis(1500), 2_000_000)]
        );
        for (bad, words) in [
            ("--rate-at 3s", "needs a rate"),
            ("--rate-at 3s --delay 1ms", "needs a rate"),
            ("--rate-at 3s 0mbit", "above 0"),
            ("--rate-at 3s 10megabit", "unknown unit"),
            ("--rate-at 3 10mbit", "no unit"),
            ("--rate-at -1s 10mbit", "-1s"),
            ("--rate-at 3s 1mbit --rate-at 3s 2mbit", "already set"),
        ] {
            let e = err(&format!("{BASE} {bad}"));
            assert!(e.contains("--rate-at") && e.contains(words), "{bad}: {e}");
        }
        assert_eq!(parse_rate_change("rate", "25mbit"), Ok(25_000_000));
        assert!(parse_rate_change("rate", "fast").is_err());
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
