//! `braid doctor NAME` on a two-line tunnel where one line is bad: the
//! lossy, jittery line gets a warning from the path counters, the clean one
//! does not.
//!
//! ```text
//!   netns a                                     netns b
//!   va1 198.18.X.1/25   ──── clean ────────── vb1 198.18.X.2/25 :51821 braid
//!   va2 198.18.X.129/25 ──── lossy ────────── vb2 198.18.X.130/25 :5002
//!                                               braid netem (loss, jitter) → 127.0.0.1:51821
//! ```
//!
//! Needs root, `/dev/net/tun`, iproute2, wg and ping. See `common/mod.rs`
//! for the cleanup rules.

use crate::harness::*;
use crate::two_lines::TwoLines;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "wg", "ping"];
/// The race of the two ciphers plus the probes; generous for a busy machine.
const DOCTOR_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn doctor_warns_about_the_lossy_jittery_path_only() {
    let test = "doctor_paths_loss";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let lab = TwoLines::start(
        &env,
        [&nsa, &nsb],
        &["--loss", "10%", "--delay", "2ms", "--jitter", "2ms"],
        &["Mode = redundant"],
    );
    // Traffic on both lines for a few seconds: 100 pings a second for 5 s,
    // while the paths are probed 20 times a second each.
    // (That redundant mode loses nothing is multipath.rs's to check; here
    // the count is a figure.)
    let p = ping_counted(lab.nsa, &["-i", "0.01"], &lab.tb, 500);
    eprintln!(
        "[{test}] {} of 500 pings answered over the clean and the lossy line",
        p.received
    );
    assert!(p.received > 0, "{test}: no traffic: {}", p.output);
    // A probe whose echo is more than three probes (150 ms) late counts as
    // lost until it comes: on a stalled machine the clean line can read
    // lossy for a moment. Doctor is asked again until it reads clean.
    let doctor = lab.doctor_until(|d| d.path("clean")["level"] == "ok");
    let (lossy, clean) = (doctor.path("bad"), doctor.path("clean"));
    assert_eq!(clean["level"], "ok", "{test}: {doctor}");
    assert_eq!(lossy["level"], "warn", "{test}: {doctor}");
    assert!(
        lossy["advice"]
            .as_str()
            .is_some_and(|a| a.contains("loses packets")),
        "{test}: the advice names the loss: {lossy}"
    );
    // The lossy line's copies come late (every packet goes on both lines)
    // but the clean line delivered them all: no reorder problem.
    assert_eq!(doctor.peer("reorder")["level"], "ok", "{test}: {doctor}");
    lab.stop();
}

/// Packets spread over a clean but capped line and a jittery one (b
/// sends, a receives),
/// and a reorder window capped far below the jitter: packets come after
/// the window gave up on them, and doctor says how far to raise
/// `ReorderHold` and which path trails.
///
/// Which path trails is a measurement (smoothed rtt/2 + 2 × jitter of each
/// path's probes), and on a loaded machine the clean line's figures carry
/// the load's queueing too (once 5.0 ± 6.6 ms right after the transfer,
/// more than the jittery line's). So the test waits (bounded, not judged)
/// for the probes to forget the transfer, then checks that doctor names
/// the path its own figures put last, and that the jittery path's rtt
/// shows at least the relay's least delay (1 ms each way); which path was
/// named is printed.
#[test]
fn doctor_suggests_reorder_hold_for_a_jittery_path() {
    let test = "doctor_paths_jitter";
    if !preflight(test, &[TOOLS, &["iperf3"]].concat()) {
        return;
    }
    let env = TestEnv::new(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    // The clean line is capped, so the aggregate scheduler needs the
    // jittery one too (while the clean line keeps up, it sends nothing on
    // a slower line).
    let lab = TwoLines::start_impaired(
        &env,
        [&nsa, &nsb],
        [
            Some(&["--rate", "20mbit", "--queue", "100ms"]),
            Some(&["--delay", "4ms", "--jitter", "3ms"]),
        ],
        &["Mode = aggregate", "ReorderHold = 1ms"],
    );
    let bits = {
        let _cpu = iperf_lock();
        iperf3(&env, lab.nsa, lab.nsb, &lab.tb, 3, true)
    };
    eprintln!("[{test}] iperf3 over the two lines: {bits:?} bit/s");
    let waited = std::time::Instant::now();
    let settled = wait_until(SETTLE, || {
        let paths = lab.paths();
        trailing_score(&paths, "bad") > trailing_score(&paths, "clean")
    });
    eprintln!(
        "[{test}] after {:?} the paths' own figures {} the jittery one trailing: {:?}",
        waited.elapsed(),
        if settled { "show" } else { "still do not show" },
        lab.paths()
            .iter()
            .map(|p| format!(
                "{} rtt {} µs ± {} µs",
                p["name"], p["rtt_us"], p["jitter_us"]
            ))
            .collect::<Vec<_>>()
    );
    let doctor = lab.doctor();
    let reorder = doctor.peer("reorder");
    assert_eq!(reorder["level"], "warn", "{test}: {doctor}");
    let advice = reorder["advice"].as_str().unwrap_or("");
    assert!(
        advice.contains("ReorderHold"),
        "{test}: the advice says to raise ReorderHold: {reorder}"
    );
    let named = ["bad", "clean"]
        .into_iter()
        .find(|p| advice.contains(&format!("path {p} trails")))
        .unwrap_or_else(|| panic!("{test}: the advice names a trailing path: {reorder}"));
    let figures = |p: &str| {
        doctor_rtt(&doctor.path(p)).unwrap_or_else(|| panic!("{test}: no rtt for {p}: {doctor}"))
    };
    let score = |(rtt, jitter): (f64, f64)| rtt / 2.0 + 2.0 * jitter;
    let other = if named == "bad" { "clean" } else { "bad" };
    eprintln!(
        "[{test}] doctor names path {named} as trailing: {named} {:?} ms, {other} {:?} ms (rtt, jitter)",
        figures(named),
        figures(other)
    );
    // Doctor prints its figures to 0.01 ms.
    assert!(
        score(figures(named)) >= score(figures(other)) - 0.02,
        "{test}: path {named} named as trailing, but its figures say otherwise: {doctor}"
    );
    assert!(
        figures("bad").0 >= 2.0,
        "{test}: the jittery path's rtt is below the relay's least delay: {doctor}"
    );
    lab.stop();
}

/// How long the jitter test waits, at most, for the probes to forget the
/// transfer's queueing (smoothed rtt 1/8 and jitter 1/4 per probe, a probe
/// every 50 ms: about a second normally).
const SETTLE: Duration = Duration::from_secs(30);

/// rtt/2 + 2 × jitter of path `name` (what doctor calls trailing), in µs;
/// 0 when unmeasured.
fn trailing_score(paths: &[serde_json::Value], name: &str) -> u64 {
    paths.iter().find(|p| p["name"] == name).map_or(0, |p| {
        p["rtt_us"].as_u64().unwrap_or(0) / 2 + 2 * p["jitter_us"].as_u64().unwrap_or(0)
    })
}

/// (rtt, jitter) in ms from a path check's finding (`…, rtt 8.12 ± 1.50 ms, …`).
fn doctor_rtt(check: &serde_json::Value) -> Option<(f64, f64)> {
    let f = check["finding"].as_str()?;
    let rest = &f[f.find("rtt ")? + 4..];
    let mut it = rest.split_whitespace();
    let rtt = it.next()?.parse().ok()?;
    let _pm = it.next()?;
    let jitter = it.next()?.parse().ok()?;
    Some((rtt, jitter))
}

struct Doctor(serde_json::Value);

impl Doctor {
    /// The one check whose name ends with ` SUFFIX`.
    fn check(&self, suffix: &str) -> serde_json::Value {
        let suffix = format!(" {suffix}");
        let found: Vec<&serde_json::Value> = self.0["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["check"].as_str().is_some_and(|s| s.ends_with(&suffix)))
            .collect();
        assert_eq!(found.len(), 1, "one check named …{suffix}: {self}");
        found[0].clone()
    }

    fn path(&self, name: &str) -> serde_json::Value {
        self.check(&format!("path {name}"))
    }

    /// A peer-level check: `loss`, `reorder`, ….
    fn peer(&self, what: &str) -> serde_json::Value {
        self.check(what)
    }
}

impl std::fmt::Display for Doctor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl TwoLines<'_> {
    /// `braid doctor` until `done` holds of its answer (once a second,
    /// bounded by `DOCTOR_TIMEOUT`); the last answer either way.
    fn doctor_until(&self, done: impl Fn(&Doctor) -> bool) -> Doctor {
        let deadline = std::time::Instant::now() + DOCTOR_TIMEOUT;
        loop {
            let d = self.doctor();
            if done(&d) || std::time::Instant::now() >= deadline {
                return d;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// `braid doctor NAME --json` on side a.
    fn doctor(&self) -> Doctor {
        let mut cmd = self.nsa.cmd(BRAID);
        cmd.args(["doctor", &self.ifa, "--json"]);
        let out = run_bounded(cmd, DOCTOR_TIMEOUT);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{}: --json output does not parse: {e}\n{}",
                self.env.test,
                out.describe()
            )
        });
        for c in v["checks"].as_array().into_iter().flatten() {
            eprintln!(
                "[{}] {} {}: {}",
                self.env.test, c["level"], c["check"], c["finding"]
            );
        }
        Doctor(v)
    }
}
