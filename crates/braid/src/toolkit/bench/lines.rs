//! `braid bench lines`: the dual-line measurements of issue 4, all in one
//! run, between two network namespaces joined by veth pairs ("lines").
//!
//! ```text
//!  netns <p>-a (client)                       netns <p>-b (server)
//!  braid <p>a 198.19.93.1 ── line1 veth ──► braid netem 198.18.93.2:5001 ─┐
//!  iperf3 -c               ── line2 veth ──► braid netem 198.18.94.2:5002 ─┴► braid <p>b :51820
//!                                                                             198.19.93.2, iperf3 -s
//! ```
//!
//! Every case starts fresh relays and fresh tunnels, runs one bounded
//! iperf3 transfer from A to B, reads `braid show` on both sides and takes
//! everything down again. The sections:
//!
//! 1. the seed's table: one line; no delay, 3 ms, 3 ms ± 1 ms, 200 ms,
//!    200 ms ± 50 ms; TCP windows 256 KiB and 8 MiB; braid with
//!    `ReorderHold = 0` and with the window;
//! 2. two 200 Mbit/s lines with 2 % loss each, `redundant`: UDP loss inside the tunnel
//!    and TCP against a clean single line;
//! 3. two lines, one cut for 3 s of a 10 s constant-rate UDP stream:
//!    `redundant` loses nothing, `failover` is out for lost ÷ rate;
//! 4. two lines capped at 100 Mbit/s (10 ms and 30 ms): `aggregate` one TCP
//!    stream, `redundant` for comparison.
//!
//! The lab (namespaces, relays, daemons, files) is removed on the way out,
//! also after an error, a panic, Ctrl-C, SIGTERM or SIGHUP.

use crate::toolkit::lab::{self, Lab, LabResult, NetemLine};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: braid bench lines [--quick] [--json] [--seconds N] [--long-seconds N]
                         [--runs N] [--only seed,loss,cut,aggregate]

Dual-line benchmark (issue 4) between two network namespaces, lines made
with `braid netem`, iperf3 single stream, every case on fresh relays and
tunnels. Prints a progress line per case on stderr, then the tables.

  --quick            a smoke run: fewer and shorter cases
  --json             print everything (cases, counters, checks) as JSON
  --seconds N        length of a short transfer (default 5, quick 2)
  --long-seconds N   length of a transfer over a 200 ms line and of the
                     aggregate case (default 15, quick 5)
  --runs N           repeat each short TCP case of sections 1 and 2 N times,
                     interleaved, and show the median (default 3, quick 1)
  --only LIST        run only these sections (seed, loss, cut, aggregate)

Needs root, ip, iperf3 and ping. Exits with status 1 when a check fails.
";

const TUNNEL_A: &str = "198.19.93.1";
const TUNNEL_B: &str = "198.19.93.2";
/// (interface in both namespaces, address in A, address in B, relay port).
const LINES: [(&str, &str, &str, u16); 2] = [
    ("line1", "198.18.93.1", "198.18.93.2", 5001),
    ("line2", "198.18.94.1", "198.18.94.2", 5002),
];
const B_PORT: u16 = 51820;
const SECTIONS: [&str; 4] = ["seed", "loss", "cut", "aggregate"];

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

fn check_interrupt() -> LabResult<()> {
    if interrupted() {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

/// Sleeps, but gives up early when a stop signal came.
fn sleep(d: Duration) -> LabResult<()> {
    let end = Instant::now() + d;
    loop {
        check_interrupt()?;
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

struct Opts {
    quick: bool,
    json: bool,
    short: u32,
    long: u32,
    runs: usize,
    only: Vec<String>,
}

fn parse(argv: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        quick: false,
        json: false,
        short: 0,
        long: 0,
        runs: 0,
        only: SECTIONS.iter().map(|s| s.to_string()).collect(),
    };
    let (mut short, mut long, mut runs) = (None, None, None);
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let secs = |name: &str, v: String| {
            v.parse::<u32>()
                .ok()
                .filter(|s| (1..=600).contains(s))
                .ok_or(format!("{name}: {v:?} is not a number of seconds (1-600)"))
        };
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--quick" => o.quick = true,
            "--seconds" => short = Some(secs(a, val(a)?)?),
            "--long-seconds" => long = Some(secs(a, val(a)?)?),
            "--runs" => {
                let v = val(a)?;
                runs = Some(
                    v.parse::<usize>()
                        .ok()
                        .filter(|r| (1..=20).contains(r))
                        .ok_or(format!("--runs: {v:?} is not a number of runs (1-20)"))?,
                );
            }
            "--only" => {
                let v = val(a)?;
                o.only = v.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = o.only.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                    return Err(format!(
                        "--only: unknown section {bad:?} (expected {})",
                        SECTIONS.join(", ")
                    ));
                }
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    o.short = short.unwrap_or(if o.quick { 2 } else { 5 });
    o.long = long.unwrap_or(if o.quick { 5 } else { 15 });
    o.runs = runs.unwrap_or(if o.quick { 1 } else { 3 });
    Ok(Some(o))
}

/// A line profile of the seed's table.
struct Profile {
    key: &'static str,
    label: &'static str,
    flags: &'static [&'static str],
    /// The same line without jitter (what the "line" column shows).
    twin: &'static str,
    long: bool,
}

const PROFILES: [Profile; 5] = [
    Profile {
        key: "none",
        label: "no delay",
        flags: &[],
        twin: "none",
        long: false,
    },
    Profile {
        key: "3ms",
        label: "3 ms",
        flags: &["--delay", "3ms"],
        twin: "3ms",
        long: false,
    },
    Profile {
        key: "3ms±1ms",
        label: "3 ms ± 1 ms",
        flags: &["--delay", "3ms", "--jitter", "1ms"],
        twin: "3ms",
        long: false,
    },
    Profile {
        key: "200ms",
        label: "200 ms",
        flags: &["--delay", "200ms"],
        twin: "200ms",
        long: true,
    },
    Profile {
        key: "200ms±50ms",
        label: "200 ms ± 50 ms",
        flags: &["--delay", "200ms", "--jitter", "50ms"],
        twin: "200ms",
        long: true,
    },
];

const WINDOWS: [&str; 2] = ["256K", "8M"];

/// How the tunnel is built for a case.
#[derive(Clone)]
struct Setup {
    mode: &'static str,
    /// `ReorderHold =` value; None leaves the default (adaptive window).
    hold: Option<&'static str>,
    /// `braid netem` flags, one entry per line.
    lines: Vec<Vec<String>>,
}

#[derive(Clone)]
enum Measure {
    /// One TCP stream, with `iperf3 -w` when given.
    Tcp { window: Option<&'static str> },
    /// A constant-rate UDP stream; `cut` = (cut, restore) of line 1, in
    /// seconds after the client started.
    Udp {
        rate: &'static str,
        len: u32,
        cut: Option<(f64, f64)>,
    },
}

struct Case {
    key: String,
    /// Repetition of the same key (0-based); tables show the median.
    run: usize,
    label: String,
    setup: Setup,
    measure: Measure,
    seconds: u32,
}

/// What one case measured.
struct Outcome {
    result: Result<Value, String>,
    notes: Vec<String>,
    counters: Value,
    show: String,
    wall: f64,
}

fn flags(base: &[&str], seed: u32) -> Vec<String> {
    let mut v: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    v.extend(["--seed".to_string(), seed.to_string()]);
    v
}

fn plan(o: &Opts) -> Vec<Case> {
    let mut cases = Vec::new();
    let wants = |s: &str| o.only.iter().any(|x| x == s);
    if wants("seed") {
        let profiles: Vec<&Profile> = PROFILES.iter().filter(|p| !o.quick || !p.long).collect();
        let windows: &[&str] = if o.quick { &WINDOWS[..1] } else { &WINDOWS };
        for w in windows {
            // Short lines: `runs` interleaved rounds; 200 ms lines once.
            let rounds =
                (0..o.runs).flat_map(|r| profiles.iter().filter(|p| !p.long).map(move |p| (r, *p)));
            let long = profiles.iter().filter(|p| p.long).map(|p| (0, *p));
            for (run, p) in rounds.chain(long).collect::<Vec<_>>() {
                for hold in [Some("0"), None] {
                    let runs = if p.long { 1 } else { o.runs };
                    cases.push(Case {
                        key: seed_key(p.key, w, hold.is_some()),
                        run,
                        label: format!(
                            "1. one line {}, -w {w}, {}{}",
                            p.label,
                            if hold.is_some() {
                                "ReorderHold = 0"
                            } else {
                                "window"
                            },
                            run_label(run, runs)
                        ),
                        setup: Setup {
                            mode: "redundant",
                            hold,
                            lines: vec![flags(p.flags, 11)],
                        },
                        measure: Measure::Tcp { window: Some(w) },
                        seconds: if p.long { o.long } else { o.short },
                    });
                }
            }
        }
    }
    if wants("loss") {
        // Lines of a fixed capacity (the seed's were 200 Mb/s), so the TCP
        // comparison is about what the loss costs, not about how much CPU
        // two relays and two copies of every packet take on this machine.
        let lossy = || flags(&["--loss", "2%", "--rate", "200mbit"], 11);
        let lossy2 = || flags(&["--loss", "2%", "--rate", "200mbit"], 22);
        cases.push(Case {
            key: "loss/udp".into(),
            run: 0,
            label: "2. two 200 Mbit/s lines 2 % loss, redundant, UDP 50 Mbit/s".into(),
            setup: Setup {
                mode: "redundant",
                hold: None,
                lines: vec![lossy(), lossy2()],
            },
            measure: Measure::Udp {
                rate: "50M",
                len: 1200,
                cut: None,
            },
            seconds: o.short,
        });
        for run in 0..o.runs {
            cases.push(Case {
                key: "loss/tcp".into(),
                run,
                label: format!(
                    "2. two 200 Mbit/s lines 2 % loss, redundant, TCP{}",
                    run_label(run, o.runs)
                ),
                setup: Setup {
                    mode: "redundant",
                    hold: None,
                    lines: vec![lossy(), lossy2()],
                },
                measure: Measure::Tcp { window: None },
                seconds: o.short,
            });
            cases.push(Case {
                key: "loss/clean".into(),
                run,
                label: format!(
                    "2. one clean 200 Mbit/s line, TCP (reference){}",
                    run_label(run, o.runs)
                ),
                setup: Setup {
                    mode: "redundant",
                    hold: None,
                    lines: vec![flags(&["--rate", "200mbit"], 11)],
                },
                measure: Measure::Tcp { window: None },
                seconds: o.short,
            });
        }
    }
    if wants("cut") {
        let (secs, cut) = if o.quick {
            (6, (2.0, 4.0))
        } else {
            (10, (3.5, 6.5))
        };
        for mode in ["redundant", "failover"] {
            cases.push(Case {
                key: format!("cut/{mode}"),
                run: 0,
                label: format!(
                    "3. two lines 3 ms, line 1 cut {:.1}–{:.1} s, {mode}, UDP 20 Mbit/s",
                    cut.0, cut.1
                ),
                setup: Setup {
                    mode,
                    hold: None,
                    lines: vec![
                        flags(&["--delay", "3ms"], 11),
                        flags(&["--delay", "3ms"], 22),
                    ],
                },
                measure: Measure::Udp {
                    rate: "20M",
                    len: 1000,
                    cut: Some(cut),
                },
                seconds: secs,
            });
        }
    }
    if wants("aggregate") {
        for mode in ["aggregate", "redundant"] {
            cases.push(Case {
                key: format!("agg/{mode}"),
                run: 0,
                label: format!("4. two lines 100 Mbit/s, 10 ms and 30 ms, {mode}, TCP"),
                setup: Setup {
                    mode,
                    hold: None,
                    lines: vec![
                        flags(&["--rate", "100mbit", "--delay", "10ms"], 11),
                        flags(&["--rate", "100mbit", "--delay", "30ms"], 22),
                    ],
                },
                measure: Measure::Tcp { window: None },
                seconds: o.long,
            });
        }
    }
    cases
}

/// "3 × 5 s (median)" or "15 s".
fn runs_text(runs: usize, seconds: u32) -> String {
    if runs > 1 {
        format!("median of {runs} × {seconds} s")
    } else {
        format!("{seconds} s")
    }
}

fn run_label(run: usize, runs: usize) -> String {
    if runs > 1 {
        format!(", run {}/{runs}", run + 1)
    } else {
        String::new()
    }
}

fn seed_key(profile: &str, window: &str, hold0: bool) -> String {
    format!(
        "seed/{profile}/{window}/{}",
        if hold0 { "hold0" } else { "window" }
    )
}

struct Bench {
    lab: Lab,
    ns_a: String,
    ns_b: String,
    if_a: String,
    if_b: String,
    keys: ((String, String), (String, String)),
}

impl Bench {
    fn new() -> LabResult<Bench> {
        let mut lab = Lab::new("l")?;
        let (if_a, if_b) = (lab.name("a"), lab.name("b"));
        let ns_a = lab.netns("a")?;
        let ns_b = lab.netns("b")?;
        for (ifn, a, b, _) in LINES {
            lab.veth(
                (&ns_a, ifn, &format!("{a}/24")),
                (&ns_b, ifn, &format!("{b}/24")),
            )?;
        }
        Ok(Bench {
            lab,
            ns_a,
            ns_b,
            if_a,
            if_b,
            keys: (lab::keypair(), lab::keypair()),
        })
    }

    /// Relays and tunnels for a case; the relays are returned so the
    /// caller can cut them and must stop them.
    fn up(&mut self, setup: &Setup, notes: &mut Vec<String>) -> LabResult<Vec<NetemLine>> {
        let mut netems = Vec::new();
        for (i, f) in setup.lines.iter().enumerate() {
            let (ifn, _, b, port) = LINES[i];
            let args: Vec<&str> = f.iter().map(String::as_str).collect();
            match self.lab.netem(
                &self.ns_b,
                ifn,
                &format!("{b}:{port}"),
                &format!("127.0.0.1:{B_PORT}"),
                &args,
            ) {
                Ok(n) => netems.push(n),
                Err(e) => {
                    self.stop_netems(netems);
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.tunnels(setup, notes) {
            self.down(netems);
            return Err(e);
        }
        Ok(netems)
    }

    fn tunnels(&mut self, setup: &Setup, notes: &mut Vec<String>) -> LabResult<()> {
        let ((key_a, pub_a), (key_b, pub_b)) = self.keys.clone();
        let mut peer_opts = format!("Mode = {}\n", setup.mode);
        if let Some(h) = setup.hold {
            let _ = writeln!(peer_opts, "ReorderHold = {h}");
        }
        let mut paths = String::new();
        for &(ifn, _, b, port) in LINES.iter().take(setup.lines.len()) {
            let _ = writeln!(paths, "Path = {ifn} bind={ifn} endpoint={b}:{port}");
        }
        let conf_a = format!(
            "[Interface]\nPrivateKey = {key_a}\nAddress = {TUNNEL_A}/24\n\n[Peer]\nPublicKey = {pub_b}\nAllowedIPs = {TUNNEL_B}/32\n{paths}{peer_opts}"
        );
        let conf_b = format!(
            "[Interface]\nPrivateKey = {key_b}\nAddress = {TUNNEL_B}/24\nListenPort = {B_PORT}\n\n[Peer]\nPublicKey = {pub_a}\nAllowedIPs = {TUNNEL_A}/32\n{peer_opts}"
        );
        let (ns_a, ns_b, if_a, if_b) = (
            self.ns_a.clone(),
            self.ns_b.clone(),
            self.if_a.clone(),
            self.if_b.clone(),
        );
        self.lab.braid_up(&ns_b, &if_b, &conf_b)?;
        self.lab.braid_up(&ns_a, &if_a, &conf_a)?;
        check_interrupt()?;
        if !self
            .lab
            .ping_until_reply(&ns_a, TUNNEL_B, Duration::from_secs(10))
        {
            return Err("no ping reply through the tunnel within 10 s".into());
        }
        // Every path probed and up on both sides before the transfer.
        let want = setup.lines.len();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let a = self.paths_up(&ns_a, &if_a);
            let b = self.paths_up(&ns_b, &if_b);
            if a >= want && b >= want {
                break;
            }
            if Instant::now() > deadline {
                notes.push(format!(
                    "only {a} of {want} paths up in A and {b} in B after 5 s; measured anyway"
                ));
                break;
            }
            sleep(Duration::from_millis(50))?;
        }
        Ok(())
    }

    fn paths_up(&self, ns: &str, name: &str) -> usize {
        self.lab
            .braid_show(ns, name, true)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| {
                v["peers"][0]["paths"]
                    .as_array()
                    .map(|ps| ps.iter().filter(|p| p["state"] == "up").count())
            })
            .unwrap_or(0)
    }

    fn stop_netems(&mut self, netems: Vec<NetemLine>) {
        for n in netems {
            self.lab.stop(n.id, &n.log);
        }
    }

    fn down(&mut self, netems: Vec<NetemLine>) {
        let (ns_a, ns_b, if_a, if_b) = (
            self.ns_a.clone(),
            self.ns_b.clone(),
            self.if_a.clone(),
            self.if_b.clone(),
        );
        let _ = self.lab.braid_down(&ns_a, &if_a);
        let _ = self.lab.braid_down(&ns_b, &if_b);
        self.stop_netems(netems);
    }

    /// `braid show` of both sides: (JSON, text).
    fn counters(&self) -> (Value, String) {
        let mut j = serde_json::Map::new();
        let mut text = String::new();
        for (side, ns, name) in [("a", &self.ns_a, &self.if_a), ("b", &self.ns_b, &self.if_b)] {
            let v = self
                .lab
                .braid_show(ns, name, true)
                .ok()
                .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                .unwrap_or(Value::Null);
            j.insert(side.into(), v);
            let t = self
                .lab
                .braid_show(ns, name, false)
                .unwrap_or_else(|e| format!("braid show failed: {e}\n"));
            let _ = writeln!(text, "--- {side} side ({name}) ---\n{}", t.trim_end());
        }
        (Value::Object(j), text)
    }

    /// One iperf3 client run (with a one-shot server in B); `actions`
    /// (seconds after the client started, line index, control command)
    /// are sent to the relays during the run. Returns iperf3's report.
    fn iperf(
        &mut self,
        args: &[String],
        seconds: u32,
        actions: &[(f64, usize, &str)],
        netems: &[NetemLine],
    ) -> LabResult<Value> {
        let mut last_err = String::new();
        for attempt in 0..2 {
            let mut server = self.lab.cmd_in(&self.ns_b, "iperf3");
            server.args(["-s", "-1", "-B", TUNNEL_B]);
            let server = self.lab.spawn(server, "iperf3-server.log")?;
            if let Err(e) = sleep(Duration::from_millis(400)) {
                self.lab.stop(server, "iperf3-server.log");
                return Err(e);
            }
            let mut client = self.lab.cmd_in(&self.ns_a, "iperf3");
            client.args(["-c", TUNNEL_B, "-J"]).args(args);
            let client = match self.lab.spawn(client, "iperf3-client.json") {
                Ok(c) => c,
                Err(e) => {
                    self.lab.stop(server, "iperf3-server.log");
                    return Err(e);
                }
            };
            let start = Instant::now();
            let limit = Duration::from_secs(u64::from(seconds) + 30);
            let mut next = 0;
            let mut failure = None;
            while !self.lab.wait(client, Duration::from_millis(20)) {
                if interrupted() {
                    failure = Some("interrupted".to_string());
                    break;
                }
                if start.elapsed() > limit {
                    failure = Some(format!(
                        "iperf3 did not finish within {} s",
                        limit.as_secs()
                    ));
                    break;
                }
                if let Some(&(at, line, cmd)) = actions.get(next) {
                    if start.elapsed().as_secs_f64() >= at {
                        next += 1;
                        match netems[line].control(cmd) {
                            Ok(reply) if reply.to_lowercase().contains("error") => {
                                failure = Some(format!("netem {cmd}: {reply}"));
                                break;
                            }
                            Ok(_) => {}
                            Err(e) => {
                                failure = Some(format!("netem {cmd}: {e}"));
                                break;
                            }
                        }
                    }
                }
            }
            let out = self.lab.stop(client, "iperf3-client.json");
            self.lab.stop(server, "iperf3-server.log");
            if let Some(f) = failure {
                return Err(f);
            }
            if next < actions.len() {
                return Err("the transfer ended before every cut/restore was sent".into());
            }
            let v: Value = match serde_json::from_str(&out) {
                Ok(v) => v,
                Err(e) => {
                    last_err = format!("iperf3 printed no JSON ({e}): {}", out.trim());
                    continue;
                }
            };
            match v["error"].as_str() {
                Some(err) if attempt == 0 && err.contains("connect") => {
                    last_err = format!("iperf3: {err}");
                    continue;
                }
                Some(err) => return Err(format!("iperf3: {err}")),
                None => return Ok(v),
            }
        }
        Err(last_err)
    }

    fn run_case(&mut self, case: &Case) -> Outcome {
        let started = Instant::now();
        let mut notes = Vec::new();
        let netems = match self.up(&case.setup, &mut notes) {
            Ok(n) => n,
            Err(e) => {
                return Outcome {
                    result: Err(e),
                    notes,
                    counters: Value::Null,
                    show: String::new(),
                    wall: started.elapsed().as_secs_f64(),
                }
            }
        };
        let t = case.seconds.to_string();
        let result = match &case.measure {
            Measure::Tcp { window } => {
                let mut args = vec!["-t".to_string(), t];
                if let Some(w) = window {
                    args.extend(["-w".to_string(), w.to_string()]);
                }
                self.iperf(&args, case.seconds, &[], &netems)
                    .and_then(|v| tcp_summary(&v))
            }
            Measure::Udp { rate, len, cut } => {
                let args: Vec<String> = ["-u", "-b", rate, "-l", &len.to_string(), "-t", &t]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                let actions: Vec<(f64, usize, &str)> = cut
                    .map(|(c, r)| vec![(c, 0, "cut"), (r, 0, "restore")])
                    .unwrap_or_default();
                self.iperf(&args, case.seconds, &actions, &netems)
                    .and_then(|v| udp_summary(&v))
            }
        };
        let (mut counters, mut show) = self.counters();
        let mut relays = Vec::new();
        for (i, n) in netems.iter().enumerate() {
            let stats = n.control("stats json").unwrap_or_else(|e| e);
            let _ = writeln!(show, "--- braid netem {} ---\n{stats}", LINES[i].0);
            relays.push(serde_json::from_str::<Value>(&stats).unwrap_or(json!(stats)));
        }
        if let Value::Object(m) = &mut counters {
            m.insert("netem".into(), Value::Array(relays));
        }
        self.down(netems);
        Outcome {
            result,
            notes,
            counters,
            show,
            wall: started.elapsed().as_secs_f64(),
        }
    }
}

fn tcp_summary(v: &Value) -> LabResult<Value> {
    let bps = lab::received_bps(v).ok_or("iperf3 report without sum_received")?;
    Ok(json!({
        "mbps": bps / 1e6,
        "seconds": v["end"]["sum_received"]["seconds"],
        "bytes": v["end"]["sum_received"]["bytes"],
        "retransmits": v["end"]["sum_sent"]["retransmits"],
        "intervals_mbps": v["intervals"]
            .as_array()
            .map(|a| a
                .iter()
                .map(|i| json!((i["sum"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e4).round() / 100.0))
                .collect::<Vec<_>>())
            .unwrap_or_default(),
    }))
}

fn udp_summary(v: &Value) -> LabResult<Value> {
    let sum = &v["end"]["sum"];
    let lost = sum["lost_packets"]
        .as_u64()
        .ok_or("iperf3 UDP report without lost_packets")?;
    let packets = sum["packets"]
        .as_u64()
        .ok_or("iperf3 UDP report without packets")?;
    let seconds = sum["seconds"].as_f64().unwrap_or(0.0);
    // What the sender sent per second (its own count and time).
    let sent = v["end"]["sum_sent"]["packets"].as_u64().unwrap_or(packets);
    let sent_secs = v["end"]["sum_sent"]["seconds"].as_f64().unwrap_or(seconds);
    let rate = if sent_secs > 0.0 {
        sent as f64 / sent_secs
    } else {
        0.0
    };
    Ok(json!({
        "lost_packets": lost,
        "packets": packets,
        "lost_percent": sum["lost_percent"].as_f64().unwrap_or(0.0),
        "seconds": seconds,
        "rate_pps": rate,
        "outage_ms": if rate > 0.0 { lost as f64 / rate * 1000.0 } else { f64::NAN },
        "out_of_order": v["end"]["sum_received"]["out_of_order"],
        "mbps": sum["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6,
        "jitter_ms": sum["jitter_ms"],
    }))
}

/// A row of a result table: measured, target, pass/FAIL.
struct Check {
    section: u8,
    what: String,
    shown: String,
    value: Option<f64>,
    target: Option<String>,
    pass: Option<bool>,
    key: Option<String>,
}

impl Check {
    fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "",
        }
    }
}

struct Results<'a> {
    cases: &'a [Case],
    outcomes: &'a [Outcome],
}

impl Results<'_> {
    fn get(&self, key: &str) -> Option<(&Case, &Outcome)> {
        let i = self.cases.iter().position(|c| c.key == key)?;
        Some((&self.cases[i], self.outcomes.get(i)?))
    }

    /// Every run's value of `field` (an error if any run failed).
    fn all(&self, key: &str, field: &str) -> Result<Vec<f64>, String> {
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
    fn num(&self, key: &str, field: &str) -> Result<f64, String> {
        let mut v = self.all(key, field)?;
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Ok(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    fn runs(&self, key: &str) -> usize {
        self.cases.iter().filter(|c| c.key == key).count()
    }
}

fn fmt_mbps(r: &Result<f64, String>) -> String {
    match r {
        Ok(x) if *x >= 100.0 => format!("{x:.0}"),
        Ok(x) if *x >= 10.0 => format!("{x:.1}"),
        Ok(x) => format!("{x:.2}"),
        Err(e) if e == "not run" => "—".into(),
        Err(_) => "error".into(),
    }
}

/// Checks of sections 2–4 and the ratio rows of section 1.
fn checks(r: &Results) -> Vec<Check> {
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
    out
}

/// ", sent 61 % / 39 %": how A's packets went over the paths.
fn path_split(a: &Value) -> String {
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

/// Rows of the seed's table: (profile, window, seconds, line, hold 0, window).
struct SeedRow {
    profile: &'static Profile,
    window: &'static str,
    seconds: u32,
    runs: usize,
    hold0_runs: Vec<f64>,
    win_runs: Vec<f64>,
    line: Result<f64, String>,
    line_same_run: bool,
    hold0: Result<f64, String>,
    win: Result<f64, String>,
}

fn seed_rows(r: &Results) -> Vec<SeedRow> {
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

fn print_text(o: &Opts, r: &Results, rows: &[SeedRow], checks: &[Check], total: f64) {
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

fn pad(s: &str, width: usize) -> String {
    let n = s.chars().count();
    format!("{s}{}", " ".repeat(width.saturating_sub(n)))
}

fn print_json(o: &Opts, r: &Results, rows: &[SeedRow], checks: &[Check], total: f64) {
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
                Measure::Tcp { window } => json!({"kind": "tcp", "window": window}),
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

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("bench lines needs root (network namespaces, TUN)".into());
    }
    lab::require_tools(&["ip", "iperf3", "ping"])?;
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
    let cases = plan(&o);
    let start = Instant::now();
    let mut outcomes = Vec::new();
    {
        let mut bench = Bench::new()?;
        for (i, case) in cases.iter().enumerate() {
            if interrupted() {
                break;
            }
            eprint!(
                "[{:>2}/{}] {} ({} s) … ",
                i + 1,
                cases.len(),
                case.label,
                case.seconds
            );
            let _ = std::io::stderr().flush();
            let out = bench.run_case(case);
            let text = match &out.result {
                Ok(v) => match &case.measure {
                    Measure::Tcp { .. } => format!(
                        "{:.1} Mbit/s, {} retransmits",
                        v["mbps"].as_f64().unwrap_or(0.0),
                        v["retransmits"]
                    ),
                    Measure::Udp { .. } => format!(
                        "{} of {} lost ({:.3} %), {:.1} Mbit/s",
                        v["lost_packets"],
                        v["packets"],
                        v["lost_percent"].as_f64().unwrap_or(0.0),
                        v["mbps"].as_f64().unwrap_or(0.0)
                    ),
                },
                Err(e) => format!("error: {e}"),
            };
            eprintln!("{text} [{:.0} s]", out.wall);
            for n in &out.notes {
                eprintln!("        note: {n}");
            }
            outcomes.push(out);
        }
        if interrupted() {
            eprintln!("interrupted: removing the lab");
        }
        // The lab goes here: namespaces, relays, daemons, files.
    }
    if interrupted() {
        return Err("interrupted; the lab was removed".into());
    }
    let total = start.elapsed().as_secs_f64();
    let r = Results {
        cases: &cases,
        outcomes: &outcomes,
    };
    let rows = seed_rows(&r);
    let checks = checks(&r);
    if o.json {
        print_json(&o, &r, &rows, &checks, total);
    } else {
        print_text(&o, &r, &rows, &checks, total);
    }
    let failed = checks.iter().filter(|c| c.pass == Some(false)).count();
    if failed > 0 {
        return Err(format!("{failed} check(s) failed"));
    }
    Ok(())
}
