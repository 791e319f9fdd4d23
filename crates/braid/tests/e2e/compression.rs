//! `Compression = lz4` end to end: two braid peers in namespaces, iperf3
//! TCP a → b with a repeating (compressible) and a random payload, with
//! compression on both sides and off. What it checks is bytes, not time:
//! compressible traffic must take well under half the bytes on the wire,
//! random traffic no fewer than without compression (sent as is). The
//! throughput is printed for the README, never asserted.
//!
//! ```text
//!  netns a: braid ── veth 198.18.x.1/.2 ── netns b: braid
//!           198.19.x.1                     198.19.x.2
//! ```

use crate::harness::*;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "iperf3"];
const SECS: u32 = 4;

struct Run {
    mbit: f64,
    /// Bytes iperf3 sent (TCP payload).
    payload: f64,
    /// Bytes of data messages braid put on the wire meanwhile.
    wire: f64,
}

fn tx_bytes(ns: &Netns, ifname: &str) -> f64 {
    let show = ns.run(BRAID, &["show", ifname, "--json"], SHORT);
    let v: serde_json::Value = serde_json::from_str(&show.stdout)
        .unwrap_or_else(|e| panic!("braid show --json ({e}): {}", show.describe()));
    v.pointer("/peers/0/tx_bytes")
        .and_then(|b| b.as_f64())
        .unwrap_or_else(|| panic!("no tx_bytes: {}", show.stdout))
}

fn peer_extra(ns: &Netns, ifname: &str, name: &str) -> Option<u64> {
    let show = ns.run(BRAID, &["show", ifname, "--json"], SHORT);
    let v: serde_json::Value = serde_json::from_str(&show.stdout).ok()?;
    v.pointer("/peers/0/extra")?
        .as_array()?
        .iter()
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair[1].as_u64())
}

/// iperf3 from a to `server` in b; `repeating` = compressible payload.
fn transfer(
    env: &TestEnv,
    nsa: &Netns,
    nsb: &Netns,
    ifa: &str,
    server: &str,
    repeating: bool,
) -> Run {
    let port = "5201";
    let log = env.path(&format!("iperf3-server-{repeating}.log"));
    let mut c = nsb.cmd("iperf3");
    c.args(["-s", "-1", "-B", server, "-p", port]);
    let mut srv = ChildGuard::spawn(c, "iperf3 server", &log).or_panic();
    assert!(
        wait_until(LONG, || {
            nsb.run("ss", &["-Hltn", &format!("sport = :{port}")], SHORT)
                .stdout
                .contains(port)
        }),
        "iperf3 server did not start: {}",
        srv.log_text()
    );
    let before = tx_bytes(nsa, ifa);
    let t = SECS.to_string();
    let mut args = vec![
        "-c",
        server,
        "-p",
        port,
        "-t",
        &t,
        "-J",
        "--connect-timeout",
        "20000",
    ];
    if repeating {
        args.push("--repeating-payload");
    }
    let out = nsa.run("iperf3", &args, Duration::from_secs(u64::from(SECS) + 30));
    srv.wait_exit(SHORT);
    let wire = tx_bytes(nsa, ifa) - before;
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J output ({e}): {}", out.describe()));
    let get = |p: &str| {
        v.pointer(p)
            .and_then(|x| x.as_f64())
            .unwrap_or_else(|| panic!("no {p} in iperf3 output: {}", out.describe()))
    };
    Run {
        mbit: get("/end/sum_received/bits_per_second") / 1e6,
        payload: get("/end/sum_sent/bytes"),
        wire,
    }
}

/// Brings up the pair with `Compression = setting` on both sides and runs
/// both payloads: (repeating, random). With `line`, a's packets to b go
/// through `braid netem` in b with those arguments (a slow line).
fn measure(test: &str, setting: &str, line: Option<&[&str]>) -> (Run, Run, Option<u64>) {
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let tb = format!("198.19.{x}.2");
    let mut netem = None;
    let endpoint = match line {
        None => format!("198.18.{x}.2:51821"),
        Some(args) => {
            let listen = format!("198.18.{x}.2:5001");
            let mut c = nsb.cmd(BRAID);
            c.args([
                "netem",
                "--listen",
                &listen,
                "--to",
                &format!("198.18.{x}.2:51821"),
            ]);
            c.args(args);
            netem = Some(ChildGuard::spawn(c, "braid netem", &env.path("netem.log")).or_panic());
            listen
        }
    };
    let line = vec![format!("Compression = {setting}")];
    let (mut conf_a, mut conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.peers[0].endpoint = Some(endpoint);
    conf_a.braid_lines = line.clone();
    conf_b.braid_lines = line;
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    a.assert_up();
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "no reply through the tunnel"
    );
    // Let the hellos cross (they carry the offer) before measuring.
    assert!(
        wait_until(LONG, || peer_extra(&nsa, &ifa, "speaks_braid") == Some(1)),
        "the peers never recognised each other as braid"
    );
    let _serial = iperf_lock();
    let repeating = transfer(&env, &nsa, &nsb, &ifa, &tb, true);
    let random = transfer(&env, &nsa, &nsb, &ifa, &tb, false);
    let compressed = peer_extra(&nsa, &ifa, "compressed_tx");
    // netem is the braid binary too: stopped first, or the interface
    // guards would take it for a daemon that did not go down.
    if let Some(mut relay) = netem.take() {
        relay.terminate();
    }
    assert!(a.down().ok());
    assert!(b.down().ok());
    (repeating, random, compressed)
}

fn report(test: &str, setting: &str, data: &str, r: &Run) {
    eprintln!(
        "[{test}] Compression = {setting}, {data} payload: {:.0} Mbit/s, wire/payload bytes {:.3}",
        r.mbit,
        r.wire / r.payload
    );
}

#[test]
fn lz4_shrinks_compressible_traffic_and_leaves_random_alone() {
    let test = "lz4_shrinks_compressible_traffic_and_leaves_random_alone";
    if !preflight(test, TOOLS) {
        return;
    }
    let (rep_on, rnd_on, compressed) = measure(test, "lz4", None);
    let (rep_off, rnd_off, _) = measure(test, "off", None);
    report(test, "lz4", "repeating", &rep_on);
    report(test, "lz4", "random", &rnd_on);
    report(test, "off", "repeating", &rep_off);
    report(test, "off", "random", &rnd_off);
    assert!(compressed.unwrap_or(0) > 0, "nothing was compressed");
    assert!(
        rep_on.wire < 0.5 * rep_on.payload,
        "compressible data took {} wire bytes for {} payload bytes",
        rep_on.wire,
        rep_on.payload
    );
    for (what, r) in [
        ("lz4 random", &rnd_on),
        ("off repeating", &rep_off),
        ("off random", &rnd_off),
    ] {
        assert!(
            r.wire >= r.payload,
            "{what}: {} wire bytes for {} payload bytes",
            r.wire,
            r.payload
        );
    }
}

/// A measurement, not a check (run with `--ignored`): the same transfers
/// over a 20 Mbit/s line (`braid netem --rate 20mbit`), where compression
/// pays.
#[test]
#[ignore]
fn measure_lz4_on_a_slow_line() {
    let test = "measure_lz4_on_a_slow_line";
    if !preflight(test, TOOLS) {
        return;
    }
    let line: &[&str] = &["--rate", "20mbit", "--queue", "20ms"];
    for setting in ["lz4", "off"] {
        let (repeating, random, _) = measure(test, setting, Some(line));
        report(test, setting, "repeating", &repeating);
        report(test, setting, "random", &random);
    }
}

/// With a stock WireGuard peer (wireguard-go) `Compression = lz4` changes
/// nothing: no hello is answered, so nothing is ever compressed, and
/// compressible traffic flows as it would without the setting.
#[test]
fn a_stock_wireguard_peer_never_gets_compressed_packets() {
    let test = "a_stock_wireguard_peer_never_gets_compressed_packets";
    if !preflight(test, &["ip", "ping", "iperf3", "wg", "wireguard-go"]) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let tb = format!("198.19.{x}.2");
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let _b = wg_go(&env, &nsb, &ifb, &conf_b);
    conf_a.braid_lines = vec!["Compression = lz4".into()];
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    a.assert_up();
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "no reply through the tunnel"
    );
    let _serial = iperf_lock();
    let run = transfer(&env, &nsa, &nsb, &ifa, &tb, true);
    report(test, "lz4 (stock peer)", "repeating", &run);
    assert_eq!(peer_extra(&nsa, &ifa, "speaks_braid"), Some(0));
    assert_eq!(peer_extra(&nsa, &ifa, "compressed_tx").unwrap_or(0), 0);
    assert!(run.payload > 0.0 && run.wire >= run.payload);
    assert!(a.down().ok());
}
