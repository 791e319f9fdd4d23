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

mod common;

use common::*;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "wg", "ping"];
const PORT_B: u16 = 51821;
const NETEM_PORT: u16 = 5002;
/// The race of the two ciphers plus the probes; generous for a busy machine.
const DOCTOR_TIMEOUT: Duration = Duration::from_secs(60);
/// What `braid netem` does to the bad line, both directions.
const IMPAIRMENT: &[&str] = &[
    "--loss", "10%", "--delay", "2ms", "--jitter", "2ms", "--seed", "6",
];

#[test]
fn doctor_warns_about_the_lossy_jittery_path_only() {
    let test = "doctor_paths";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let x = env.octet();
    let _clean_veth = Veth::new(
        &nsa,
        "va1",
        &format!("198.18.{x}.1/25"),
        &nsb,
        "vb1",
        &format!("198.18.{x}.2/25"),
    );
    let _lossy_veth = Veth::new(
        &nsa,
        "va2",
        &format!("198.18.{x}.129/25"),
        &nsb,
        "vb2",
        &format!("198.18.{x}.130/25"),
    );
    let mut relay = nsb.cmd(BRAID);
    relay.args([
        "netem",
        "--listen",
        &format!("198.18.{x}.130:{NETEM_PORT}"),
        "--to",
        &format!("127.0.0.1:{PORT_B}"),
    ]);
    relay.args(IMPAIRMENT);
    let mut relay = ChildGuard::spawn(relay, "braid netem", &env.path("netem.log"));
    let relaying = wait_until(LONG, || {
        !relay.running() || relay.log_text().contains("relaying")
    });
    assert!(
        relaying && relay.running(),
        "{test}: braid netem did not start:\n{}",
        relay.log_text()
    );

    let (ka, kb) = (Keys::new(), Keys::new());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let (ta, tb) = (format!("198.19.{x}.1"), format!("198.19.{x}.2"));
    let conf_b = IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(PORT_B),
        address: vec![format!("{tb}/24")],
        peers: vec![PeerConf {
            public_key: ka.public.clone(),
            allowed_ips: vec![format!("{ta}/32")],
            ..Default::default()
        }],
        ..Default::default()
    };
    let conf_a = IfaceConf {
        private_key: ka.private.clone(),
        address: vec![format!("{ta}/24")],
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: vec![format!("{tb}/32")],
            braid_lines: vec![
                format!("Path = clean bind=va1 endpoint=198.18.{x}.2:{PORT_B}"),
                format!("Path = lossy bind=va2 endpoint=198.18.{x}.130:{NETEM_PORT}"),
                "Mode = redundant".to_string(),
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut side_b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    side_b.assert_up();
    let mut side_a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    side_a.assert_up();
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: no reply from {tb} through the tunnel"
    );
    // Traffic on both lines for a few seconds: 100 pings a second for 5 s,
    // while the paths are probed 20 times a second each.
    let flood = nsa.run(
        "ping",
        &["-n", "-q", "-c", "500", "-i", "0.01", "-W", "2", &tb],
        LONG,
    );
    let p = parse_ping(&flood.stdout).unwrap_or_else(|| panic!("{}", flood.describe()));
    assert!(
        p.received >= 490,
        "{test}: redundant mode hides one lossy line: {}",
        p.output
    );

    let mut cmd = nsa.cmd(BRAID);
    cmd.args(["doctor", &ifa, "--json"]);
    let out = run_bounded(cmd, DOCTOR_TIMEOUT);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{test}: --json output does not parse: {e}\n{}",
            out.describe()
        )
    });
    let checks = v["checks"].as_array().expect("checks array");
    let path_check = |name: &str| {
        let suffix = format!(" path {name}");
        let found: Vec<&serde_json::Value> = checks
            .iter()
            .filter(|c| c["check"].as_str().is_some_and(|s| s.ends_with(&suffix)))
            .collect();
        assert_eq!(found.len(), 1, "{test}: one check for path {name}: {v:#}");
        found[0].clone()
    };
    let (lossy, clean) = (path_check("lossy"), path_check("clean"));
    eprintln!("[{test}] lossy: {lossy}\n[{test}] clean: {clean}");
    for c in checks {
        eprintln!("[{test}] {} {}: {}", c["level"], c["check"], c["finding"]);
    }
    assert_eq!(lossy["level"], "warn", "{test}: {v:#}");
    assert!(
        lossy["advice"]
            .as_str()
            .is_some_and(|a| a.contains("loses packets")),
        "{test}: the advice names the loss: {lossy}"
    );
    assert_eq!(clean["level"], "ok", "{test}: {v:#}");
    // The lossy line's copies come late (every packet goes on both lines)
    // but the clean line delivered them all: no reorder problem.
    let reorder: Vec<_> = checks
        .iter()
        .filter(|c| c["check"].as_str().is_some_and(|s| s.ends_with(" reorder")))
        .collect();
    assert!(
        reorder.len() == 1 && reorder[0]["level"] == "ok",
        "{test}: late second copies are no reorder problem: {v:#}"
    );
    // The relay runs the braid binary too: stop it before the tunnel's
    // cleanup looks for leftover braid processes.
    relay.terminate();
    side_a.down();
    side_b.down();
}
