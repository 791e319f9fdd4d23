//! Faults, end to end: each test carries numbered UDP datagrams (fixed
//! rate) and a paced, SHA-256-checked TCP stream from namespace a to b
//! through the tunnel while something goes wrong, then prints what was lost
//! and asserts that nothing arrived corrupted and that the tunnel recovered
//! by itself. No test asserts how fast anything happened.
//!
//! ```text
//!  two lines (redundant):  a: va1 198.18.x.1/25   ── vb1 198.18.x.2/25   :b
//!                              va2 198.18.x.129/25 ── vb2 198.18.x.130/25
//!  one line:               a: va 198.18.x.1/24 ── vb 198.18.x.2/24 :b
//!  netem:                  a: braid → 127.0.0.1:6001 braid netem → 198.18.x.2:51821 :b
//! ```

use crate::harness::*;
use braid::toolkit::lab::traffic::{SeqReport, TcpTransfer, TransferReport, UdpSequence};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOOLS: &[&str] = &["ip", "ping", "wg"];
/// Datagrams per second of the sequence test.
const SEQ_RATE: u32 = 200;
/// Bytes per second of the TCP stream.
const TCP_RATE: u64 = 1 << 20;

fn tunnel_b(x: u8, port: u16) -> SocketAddr {
    format!("198.19.{x}.2:{port}").parse().unwrap()
}

/// Sequence and TCP stream from a to b for `secs`; `fault` runs meanwhile,
/// with the instant the traffic started.
fn carry_through(
    nsa: &Netns,
    nsb: &Netns,
    x: u8,
    secs: u64,
    fault: impl FnOnce(Instant),
) -> (SeqReport, TransferReport) {
    let duration = Duration::from_secs(secs);
    let start = Instant::now();
    let seq = UdpSequence::start(&nsa.name, &nsb.name, tunnel_b(x, 7001), SEQ_RATE, duration);
    let tcp = TcpTransfer::start(&nsa.name, &nsb.name, tunnel_b(x, 7002), TCP_RATE, duration);
    fault(start);
    (seq.finish(), tcp.finish())
}

fn sleep_until(t: Instant) {
    if let Some(d) = t.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

/// Prints the losses; asserts no corruption, an intact TCP stream and a
/// working tunnel afterwards.
fn judge(test: &str, nsa: &Netns, x: u8, seq: &SeqReport, tcp: &TransferReport) {
    eprintln!("[{test}] {seq}");
    eprintln!("[{test}] {tcp}");
    assert_eq!(seq.corrupted, 0, "corrupted datagrams arrived: {seq}");
    assert!(seq.received > 0, "nothing arrived: {seq}");
    assert!(tcp.intact(), "{tcp}");
    assert!(
        ping_until_reply(nsa, &format!("198.19.{x}.2"), LONG),
        "the tunnel did not recover"
    );
}

fn pair_confs(
    ka: &Keys,
    kb: &Keys,
    x: u8,
    a_peer_lines: Vec<String>,
    endpoint: Option<String>,
) -> (IfaceConf, IfaceConf) {
    let (mut a, b) = tunnel_confs(ka, kb, x);
    // A dials out from a port of its own choosing, as before.
    a.listen_port = None;
    a.peers[0].endpoint = endpoint;
    a.peers[0].braid_lines = a_peer_lines;
    (a, b)
}

fn two_lines(env: &TestEnv, a: &Netns, b: &Netns) -> (u8, Veth, Veth) {
    let x = env.octet();
    let v1 = Veth::new(
        a,
        "va1",
        &format!("198.18.{x}.1/25"),
        b,
        "vb1",
        &format!("198.18.{x}.2/25"),
    )
    .or_panic();
    let v2 = Veth::new(
        a,
        "va2",
        &format!("198.18.{x}.129/25"),
        b,
        "vb2",
        &format!("198.18.{x}.130/25"),
    )
    .or_panic();
    (x, v1, v2)
}

fn redundant_paths(x: u8) -> Vec<String> {
    vec![
        format!("Path = l1 bind=va1 endpoint=198.18.{x}.2:51821"),
        format!("Path = l2 bind=va2 endpoint=198.18.{x}.130:51821"),
        "Mode = redundant".to_string(),
    ]
}

fn up(env: &TestEnv, ns: &Netns, ifname: &str, conf: &IfaceConf) -> ChildGuard {
    up_with_env(env, ns, ifname, conf, &[])
}

fn peer_counter(ns: &Netns, ifname: &str, name: &str) -> u64 {
    let (show, _) = braid_show_json(ns, ifname);
    extra_counter(&show["peers"][0]["extra"], name).unwrap_or(0)
}

/// Both ends up over two lines in redundant mode, the tunnel answering.
/// Dropped in field order: daemons, then lines, then namespaces.
struct RedundantTunnel {
    _daemons: (ChildGuard, ChildGuard),
    _lines: (Veth, Veth),
    nsa: Netns,
    nsb: Netns,
    x: u8,
}

impl RedundantTunnel {
    fn up(env: &TestEnv) -> RedundantTunnel {
        let (nsa, nsb) = (env.netns("a"), env.netns("b"));
        let (x, v1, v2) = two_lines(env, &nsa, &nsb);
        let (ka, kb) = (wg_keys(), wg_keys());
        let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
        let (ca, cb) = pair_confs(&ka, &kb, x, redundant_paths(x), None);
        let b = up(env, &nsb, &ifb, &cb);
        let a = up(env, &nsa, &ifa, &ca);
        assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
        RedundantTunnel {
            _daemons: (a, b),
            _lines: (v1, v2),
            nsa,
            nsb,
            x,
        }
    }
}

#[test]
fn one_of_two_lines_cut_and_restored() {
    let test = "one_of_two_lines_cut_and_restored";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let tunnel = RedundantTunnel::up(&env);
    let (nsa, nsb, x) = (&tunnel.nsa, &tunnel.nsb, tunnel.x);
    let (seq, tcp) = carry_through(nsa, nsb, x, 6, |start| {
        sleep_until(start + Duration::from_secs(2));
        nsa.ip(&["link", "set", "va1", "down"])
            .expect_ok("cut line 1");
        sleep_until(start + Duration::from_secs(4));
        nsa.ip(&["link", "set", "va1", "up"])
            .expect_ok("restore line 1");
    });
    judge(test, nsa, x, &seq, &tcp);
}

#[test]
fn both_lines_cut_longer_than_keepalive_and_rekey_timers() {
    let test = "both_lines_cut_longer_than_keepalive_and_rekey_timers";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let tunnel = RedundantTunnel::up(&env);
    let (nsa, nsb, x) = (&tunnel.nsa, &tunnel.nsb, tunnel.x);
    // 16 s dark: longer than KEEPALIVE_TIMEOUT (10 s) + REKEY_TIMEOUT (5 s),
    // so keepalives go unanswered and handshake retries run into the cut.
    let (seq, tcp) = carry_through(nsa, nsb, x, 20, |start| {
        sleep_until(start + Duration::from_secs(1));
        for line in ["va1", "va2"] {
            nsa.ip(&["link", "set", line, "down"]).expect_ok("cut");
        }
        sleep_until(start + Duration::from_secs(17));
        for line in ["va1", "va2"] {
            nsa.ip(&["link", "set", line, "up"]).expect_ok("restore");
        }
    });
    judge(test, nsa, x, &seq, &tcp);
}

#[test]
fn peer_restarted_tunnel_comes_back() {
    let test = "peer_restarted_tunnel_comes_back";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (ca, cb) = pair_confs(&ka, &kb, x, Vec::new(), Some(format!("198.18.{x}.2:51821")));
    let b = up(&env, &nsb, &ifb, &cb);
    let _a = up(&env, &nsa, &ifa, &ca);
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    let mut b = Some(b);
    let mut restarted = None;
    let (seq, tcp) = carry_through(&nsa, &nsb, x, 25, |start| {
        sleep_until(start + Duration::from_secs(2));
        let mut old = b.take().expect("b");
        let pid = old.pid();
        // SAFETY: kill(2) on the braid this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        old.wait_exit(LONG);
        drop(old);
        assert!(
            wait_until(LONG, || !nsb.has_link(&ifb)),
            "TUN outlived its daemon"
        );
        assert!(
            wait_until(LONG, || !sock_path(&ifb).exists()),
            "the guardian left the socket of a killed daemon"
        );
        eprintln!("[{test}] killed b's braid (pid {pid}), starting it again");
        restarted = Some(up(&env, &nsb, &ifb, &cb));
    });
    judge(test, &nsa, x, &seq, &tcp);
    drop(restarted);
}

#[test]
fn rekeying_during_a_transfer() {
    let test = "rekeying_during_a_transfer";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (ca, cb) = pair_confs(&ka, &kb, x, Vec::new(), Some(format!("198.18.{x}.2:51821")));
    let knob = [("BRAID_TEST_REKEY_AFTER_SECS", "1")];
    let _b = up_with_env(&env, &nsb, &ifb, &cb, &knob);
    let _a = up_with_env(&env, &nsa, &ifa, &ca, &knob);
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    let handshakes = || {
        peer_counter(&nsa, &ifa, "handshakes_completed")
            + peer_counter(&nsb, &ifb, "handshakes_completed")
    };
    let before = handshakes();
    // The transfer runs at least 12 s (about ten rekeys at one a second)
    // and until two rekeys were seen; a slow machine only makes it longer.
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let most = Duration::from_secs(12) + REKEYS_WITHIN;
    let seq = UdpSequence::start_until(
        &nsa.name,
        &nsb.name,
        tunnel_b(x, 7001),
        SEQ_RATE,
        most,
        stop.clone(),
    );
    let tcp = TcpTransfer::start_until(
        &nsa.name,
        &nsb.name,
        tunnel_b(x, 7002),
        TCP_RATE,
        most,
        stop.clone(),
    );
    let rekeyed = wait_until(REKEYS_WITHIN, || handshakes() >= before + 2);
    sleep_until(start + Duration::from_secs(12));
    stop.store(true, Ordering::SeqCst);
    let (seq, tcp) = (seq.finish(), tcp.finish());
    let after = handshakes();
    eprintln!(
        "[{test}] handshakes completed during the transfer: {} in {:.1} s",
        after - before,
        start.elapsed().as_secs_f64()
    );
    judge(test, &nsa, x, &seq, &tcp);
    assert!(
        rekeyed,
        "expected rekeys during the transfer (1 s rekey timer, {REKEYS_WITHIN:?}): {before} -> {after}"
    );
}

/// How long the rekeying test waits for two rekeys (one a second expected).
const REKEYS_WITHIN: Duration = Duration::from_secs(60);

#[test]
fn roaming_to_a_new_source_address() {
    let test = "roaming_to_a_new_source_address";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), veth) = env.two_sides();
    let va = veth.a.clone();
    let (ca, cb) = pair_confs(&ka, &kb, x, Vec::new(), Some(format!("198.18.{x}.2:51821")));
    let _b = up(&env, &nsb, &ifb, &cb);
    let _a = up(&env, &nsa, &ifa, &ca);
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    let (seq, tcp) = carry_through(&nsa, &nsb, x, 6, |start| {
        sleep_until(start + Duration::from_secs(2));
        // The new address stays when the old (primary) one goes.
        nsa.run(
            "sysctl",
            &["-qw", &format!("net.ipv4.conf.{va}.promote_secondaries=1")],
            SHORT,
        )
        .expect_ok("promote_secondaries");
        nsa.ip(&["addr", "add", &format!("198.18.{x}.3/24"), "dev", &va])
            .expect_ok("new address");
        nsa.ip(&["addr", "del", &format!("198.18.{x}.1/24"), "dev", &va])
            .expect_ok("old address gone");
    });
    let endpoint = nsb
        .run("wg", &["show", &ifb, "endpoints"], SHORT)
        .expect_ok("wg show endpoints")
        .stdout;
    eprintln!("[{test}] b sees a at {}", endpoint.trim());
    judge(test, &nsa, x, &seq, &tcp);
    assert!(
        endpoint.contains(&format!("198.18.{x}.3:")),
        "b did not follow a to its new address: {endpoint}"
    );
}

#[test]
fn netem_line_that_corrupts_and_duplicates() {
    let test = "netem_line_that_corrupts_and_duplicates";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let mut relay_cmd = nsa.cmd(BRAID);
    relay_cmd.args([
        "netem",
        "--listen",
        "127.0.0.1:6001",
        "--to",
        &format!("198.18.{x}.2:51821"),
        "--corrupt",
        "2%",
        "--dup",
        "2%",
        "--seed",
        "7",
    ]);
    let mut relay = ChildGuard::spawn(relay_cmd, "netem", &env.path("netem.log")).or_panic();
    let (ca, cb) = pair_confs(&ka, &kb, x, Vec::new(), Some("127.0.0.1:6001".into()));
    let _b = up(&env, &nsb, &ifb, &cb);
    let _a = up(&env, &nsa, &ifa, &ca);
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    let (seq, tcp) = carry_through(&nsa, &nsb, x, 6, |_| {});
    let rejected =
        peer_counter(&nsb, &ifb, "auth_failed") + peer_counter(&nsa, &ifa, "auth_failed");
    let replayed = peer_counter(&nsb, &ifb, "replayed") + peer_counter(&nsa, &ifa, "replayed");
    eprintln!(
        "[{test}] braid dropped {rejected} datagrams failing authentication, {replayed} replays"
    );
    judge(test, &nsa, x, &seq, &tcp);
    assert_eq!(seq.duplicated, 0, "duplicates reached the receiver: {seq}");
    relay.terminate();
    eprintln!(
        "[{test}] netem: {}",
        relay
            .log_text()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join(" | ")
    );
}
