//! `braid doctor`: the machine checks on this host, and the interface
//! checks against a braid tunnel between two network namespaces (see
//! `common/mod.rs` for the topology and cleanup rules).
//!
//! Needs root, `/dev/net/tun`, iproute2, wg and ping; outside CI a missing
//! prerequisite skips the test with a printed reason.

use crate::harness::*;
use std::process::Command;
use std::time::Duration;

/// The race of the two ciphers plus the probes; generous for a busy machine.
const DOCTOR_TIMEOUT: Duration = Duration::from_secs(60);

/// Lines whose check name starts with `check`, as (level, rest of line).
fn lines_for<'a>(text: &'a str, check: &str) -> Vec<(&'a str, &'a str)> {
    text.lines()
        .filter_map(|l| {
            let (level, rest) = l.split_once(' ')?;
            let rest = rest.trim_start();
            rest.starts_with(check).then_some((level, rest))
        })
        .collect()
}

fn assert_exit_0_or_1(out: &Out) {
    let code = out.status.and_then(|s| s.code());
    assert!(
        matches!(code, Some(0) | Some(1)),
        "braid doctor should exit 0 or 1: {}",
        out.describe()
    );
}

fn assert_every_line_is_a_check(out: &Out) {
    for l in out.stdout.lines() {
        let level = l.split_whitespace().next().unwrap_or("");
        assert!(
            ["ok", "warn", "fail"].contains(&level),
            "line without a level {l:?} in\n{}",
            out.stdout
        );
        if level != "ok" {
            assert!(l.contains(" -> "), "{level} line without advice: {l:?}");
        }
    }
}

#[test]
fn machine_checks() {
    let mut cmd = Command::new(BRAID);
    cmd.arg("doctor");
    let out = run_bounded(cmd, DOCTOR_TIMEOUT);
    assert_exit_0_or_1(&out);
    assert_every_line_is_a_check(&out);
    for check in [
        "cpu",
        "cipher",
        "socket buffers net.core.rmem_max",
        "socket buffers net.core.wmem_max",
        "tun offload",
        "udp gso",
        "udp gro",
        "kernel",
        "realtime",
    ] {
        assert_eq!(
            lines_for(&out.stdout, check).len(),
            1,
            "one `{check}` line expected in\n{}",
            out.stdout
        );
    }
    let (_, cipher) = lines_for(&out.stdout, "cipher")[0];
    assert!(
        cipher.contains("MB/s") && cipher.contains("Cipher = auto"),
        "cipher line names the measured rate and auto's choice: {cipher}"
    );
    // Exit status follows the levels.
    let failed = out.stdout.lines().any(|l| l.starts_with("fail"));
    assert_eq!(out.ok(), !failed, "{}", out.describe());

    let mut cmd = Command::new(BRAID);
    cmd.args(["doctor", "--json"]);
    let out = run_bounded(cmd, DOCTOR_TIMEOUT);
    assert_exit_0_or_1(&out);
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("--json output does not parse: {e}\n{}", out.stdout));
    let checks = v["checks"].as_array().expect("checks array");
    assert!(checks.iter().any(|c| c["check"] == "udp gso"), "{v}");
    assert!(
        ["ok", "warn", "fail"].contains(&v["result"].as_str().unwrap_or("")),
        "{v}"
    );
}

#[test]
fn missing_interface_fails() {
    let env = TestEnv::new("doctor_missing");
    let name = env.ifname("none");
    let mut cmd = Command::new(BRAID);
    cmd.args(["doctor", &name]);
    let out = run_bounded(cmd, DOCTOR_TIMEOUT);
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(1),
        "{}",
        out.describe()
    );
    let l = lines_for(&out.stdout, &format!("interface {name}"));
    assert!(
        l.len() == 1 && l[0].0 == "fail" && l[0].1.contains("braid up"),
        "{}",
        out.stdout
    );
}

#[test]
fn interface_checks() {
    doctor_pair("doctor_interface", false);
}

#[test]
fn stock_peer_noted() {
    doctor_pair("doctor_stock_peer", true);
}

/// braid in namespace A, peer B braid or (`stock`) wireguard-go; runs
/// `braid doctor` on A's interface once a ping went through.
fn doctor_pair(test: &str, stock: bool) {
    let tools: &[&str] = if stock {
        &["ip", "wg", "ping", "wireguard-go"]
    } else {
        &["ip", "wg", "ping"]
    };
    if !preflight(test, tools) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), veth) = env.two_sides();
    let va = veth.a.clone();
    let tb = format!("198.19.{x}.2");
    // A's MTU is too large for the 1500-byte veth under IPv4 (1500 - 60):
    // doctor must say so.
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.mtu = Some(1480);
    let mut side_b = (!stock).then(|| BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon));
    if let Some(b) = side_b.as_mut() {
        b.assert_up();
    }
    let _stock_b = stock.then(|| wg_go(&env, &nsb, &ifb, &conf_b));
    let mut side_a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    side_a.assert_up();
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: no reply from {tb} through the tunnel"
    );
    ping(&nsa, &tb, 3);
    if !stock {
        // A braid peer is told from a stock one by its answered path probes.
        let probed = wait_until(LONG, || {
            nsa.run(BRAID, &["show", &ifa], SHORT)
                .stdout
                .contains(", rtt ")
        });
        assert!(probed, "{test}: no path rtt measured within {LONG:?}");
    }

    let mut cmd = nsa.cmd(BRAID);
    cmd.args(["doctor", &ifa]);
    let out = run_bounded(cmd, DOCTOR_TIMEOUT);
    assert_exit_0_or_1(&out);
    assert_every_line_is_a_check(&out);
    let text = &out.stdout;
    eprintln!("[{test}] braid doctor {ifa}:\n{text}");
    let iface = lines_for(text, &format!("interface {ifa}"));
    assert!(
        iface.len() == 1 && iface[0].0 == "ok" && iface[0].1.contains("daemon answers"),
        "{text}"
    );
    let mtu = lines_for(text, &format!("mtu {ifa} over {va}"));
    assert!(
        mtu.len() == 1 && mtu[0].0 == "warn" && mtu[0].1.contains("MTU = 1440"),
        "expected an MTU warning for 1480 over a 1500-byte IPv4 line:\n{text}"
    );
    for check in ["TUN offload", "UDP GSO", "UDP GRO"] {
        assert_eq!(
            lines_for(text, &format!("{ifa} {check}")).len(),
            1,
            "{check} of the running daemon:\n{text}"
        );
    }
    let prefix = &kb.public[..8];
    let handshake = lines_for(text, &format!("peer {prefix}… handshake"));
    assert!(
        handshake.len() == 1 && handshake[0].0 == "ok",
        "peer handshake line:\n{text}"
    );
    let cipher = lines_for(text, &format!("peer {prefix}… cipher"));
    assert_eq!(cipher.len(), 1, "{text}");
    // "fastest here" is a 100 ms race of the two ciphers on this machine:
    // under load it can go either way. The check must agree with its own
    // finding (ok when the cipher in use won), and say nothing against a
    // stock peer, which has no choice; which cipher won is printed.
    let (level, finding) = cipher[0];
    let named = |label: &str| {
        finding
            .split_once(label)
            .map(|(_, r)| r.split(';').next().unwrap_or("").trim())
            .unwrap_or_else(|| panic!("no `{label}` in the cipher line: {finding}"))
    };
    let (used, fastest) = (named("in use:"), named("fastest here:"));
    eprintln!("[{test}] cipher in use {used}, fastest in doctor's race {fastest}: {level}");
    assert!(
        (level == "ok" || (level == "warn" && !stock && used != fastest)),
        "{test}: cipher check {level} for {used} in use, {fastest} fastest:\n{text}"
    );
    let kind = lines_for(text, &format!("peer {prefix}… kind"));
    if stock {
        assert!(
            kind.len() == 1 && kind[0].1.contains("speaks no braid"),
            "a wireguard-go peer is noted as stock:\n{text}"
        );
        assert!(cipher[0].1.contains("ChaCha20-Poly1305"), "{text}");
    } else {
        assert!(kind.is_empty(), "a braid peer is not called stock:\n{text}");
    }
    assert!(
        !text.contains(&ka.private) && !text.contains(&kb.private),
        "doctor printed a private key"
    );

    let mut cmd = nsa.cmd(BRAID);
    cmd.args(["doctor", &ifa, "--json"]);
    let out = run_bounded(cmd, DOCTOR_TIMEOUT);
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("--json output does not parse: {e}\n{}", out.stdout));
    assert!(
        v["checks"].as_array().is_some_and(|c| c
            .iter()
            .any(|c| c["check"] == format!("mtu {ifa} over {va}"))),
        "{v}"
    );
    side_a.down();
    if let Some(b) = side_b.as_mut() {
        b.down();
    }
}
