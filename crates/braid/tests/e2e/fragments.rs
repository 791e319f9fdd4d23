//! A line that cannot carry a 1280-byte tunnel packet (issue 20, item 7):
//! `braid netem --mtu 1300` in a middle namespace silently drops every UDP
//! payload over 1300 bytes (a 1268-byte tunnel packet is the largest that
//! passes whole).
//!
//! ```text
//!   netns a  braid A  198.18.X.1/26 ── m: braid netem 198.18.X.2:51900 --mtu 1300 ── 198.18.X.66/26  braid B | wireguard-go
//! ```
//!
//! Between braid peers the path MTU search finds 1268, the tunnel keeps
//! 1280 (and IPv6), and what is longer goes in pieces that B joins: pings
//! of 1280 bytes with DF both ways, IPv4 and IPv6 inside, TCP both ways
//! (checksummed), with the tunnel MTU following the paths and with `MTU =
//! 1420` fixed. With a stock peer nothing discovers the limit, so the
//! line a–m is given MTU 1328 (the route tells braid): braid lowers the
//! tunnel to 1264 (1268 rounded down to WireGuard's padding step, so the
//! peer's padded replies fit too), IPv4 only, and says why IPv6 cannot
//! pass in its log and in `braid mtu`. wireguard-go on both ends in that same topology is
//! the reference.

use crate::harness::*;
use braid::toolkit::lab::traffic::TcpTransfer;
use braid::toolkit::lab::wireguard_go;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "wg", "ping", "iperf3", "ss"];
const RELAY_PORT: u16 = 51900;
const B_PORT: u16 = 51821;

struct Line {
    x: u8,
    nsa: Netns,
    _nsm: Netns,
    nsb: Netns,
    _am: Veth,
    _mb: Veth,
    _relay: ChildGuard,
}

/// a — m — b, the relay in m dropping UDP payloads over 1300 bytes; the
/// line a–m has MTU `am_mtu`.
fn line(env: &TestEnv, am_mtu: u32) -> Line {
    let x = env.octet();
    let (nsa, nsm, nsb) = (env.netns("a"), env.netns("m"), env.netns("b"));
    let (vam, vma, vmb, vbm) = (
        env.ifname("vam"),
        env.ifname("vma"),
        env.ifname("vmb"),
        env.ifname("vbm"),
    );
    let am = Veth::new(
        &nsa,
        &vam,
        &format!("198.18.{x}.1/26"),
        &nsm,
        &vma,
        &format!("198.18.{x}.2/26"),
    )
    .or_panic();
    for (ns, dev) in [(&nsa, &vam), (&nsm, &vma)] {
        ns.ip(&["link", "set", "dev", dev, "mtu", &am_mtu.to_string()])
            .expect_ok("line MTU");
    }
    let mb = Veth::new(
        &nsm,
        &vmb,
        &format!("198.18.{x}.65/26"),
        &nsb,
        &vbm,
        &format!("198.18.{x}.66/26"),
    )
    .or_panic();
    let mut c = nsm.cmd(BRAID);
    c.args([
        "netem",
        "--listen",
        &format!("198.18.{x}.2:{RELAY_PORT}"),
        "--to",
        &format!("198.18.{x}.66:{B_PORT}"),
        "--mtu",
        "1300",
    ]);
    let mut relay = ChildGuard::spawn(c, "braid netem", &env.path("netem.log")).or_panic();
    assert!(
        wait_until(LONG, || !relay.running()
            || relay.log_text().contains("relaying")),
        "braid netem did not start:\n{}",
        relay.log_text()
    );
    Line {
        x,
        nsa,
        _nsm: nsm,
        nsb,
        _am: am,
        _mb: mb,
        _relay: relay,
    }
}

fn v6(l: &Line, host: u8) -> String {
    format!("2001:db8:1:{:x}::{host}", l.x)
}

fn v4(l: &Line, host: u8) -> String {
    format!("198.19.{}.{host}", l.x)
}

fn confs(l: &Line, ka: &Keys, kb: &Keys, mtu: Option<u32>) -> (IfaceConf, IfaceConf) {
    let side = |k: &Keys, me: u8, other: &Keys, them: u8| IfaceConf {
        private_key: k.private.clone(),
        address: vec![format!("{}/24", v4(l, me)), format!("{}/64", v6(l, me))],
        mtu,
        peers: vec![PeerConf {
            public_key: other.public.clone(),
            allowed_ips: vec![
                format!("{}/32", v4(l, them)),
                format!("{}/128", v6(l, them)),
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut a = side(ka, 1, kb, 2);
    a.peers[0].endpoint = Some(format!("198.18.{}.2:{RELAY_PORT}", l.x));
    a.peers[0].keepalive = Some(25);
    let mut b = side(kb, 2, ka, 1);
    b.listen_port = Some(B_PORT);
    (a, b)
}

/// `braid mtu NAME --json` and its text.
fn mtu_of(ns: &Netns, ifname: &str) -> (Value, String) {
    let json = ns.run(BRAID, &["mtu", ifname, "--json"], SHORT).stdout;
    let text = ns.run(BRAID, &["mtu", ifname], SHORT).stdout;
    (serde_json::from_str(&json).unwrap_or_default(), text)
}

/// DF pings of `size` bytes in all (the IP packet): 3 asked, how many
/// answered.
fn df_ping(ns: &Netns, dst: &str, size: u32) -> u32 {
    let header = if dst.contains(':') { 48 } else { 28 };
    let payload = (size - header).to_string();
    ping_counted(&ns.name, &["-i", "0.2", "-M", "do", "-s", &payload], dst, 3).received
}

/// [`df_ping`] for what may well not pass: 3 asked 0.2 s apart, each
/// answer waited for a second at most.
fn df_ping_quick(ns: &Netns, dst: &str, size: u32) -> u32 {
    let header = if dst.contains(':') { 48 } else { 28 };
    let payload = (size - header).to_string();
    let out = ns.run(
        "ping",
        &[
            "-n", "-c", "3", "-i", "0.2", "-W", "1", "-M", "do", "-s", &payload, dst,
        ],
        SHORT,
    );
    parse_ping(&out.stdout).map_or(0, |p| p.received)
}

/// A checked TCP transfer (sha256 at both ends) of a few seconds from
/// `from` to `dst:port` in `to`.
fn checked_tcp(from: &Netns, to: &Netns, dst: &str) -> String {
    let _lock = iperf_lock();
    let addr: SocketAddr = format!("{dst}:5311").parse().expect("IPv4 address");
    let t = TcpTransfer::start(&from.name, &to.name, addr, 4 << 20, Duration::from_secs(2));
    let report = t.finish();
    assert!(report.intact(), "to {dst}: {report}");
    format!("{report}")
}

fn iperf_both_ways(env: &TestEnv, l: &Line, dst_b: &str) -> (f64, f64) {
    let _lock = iperf_lock();
    let fwd = iperf3(env, &l.nsa, &l.nsb, dst_b, 2, false).unwrap_or_else(|e| panic!("{e}"));
    let rev = iperf3(env, &l.nsa, &l.nsb, dst_b, 2, true).unwrap_or_else(|e| panic!("{e}"));
    (fwd / 1e6, rev / 1e6)
}

fn braid_pair(test: &str, mtu: Option<u32>) {
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let l = line(&env, 1500);
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let (conf_a, conf_b) = confs(&l, &ka, &kb, mtu);
    let mut b = BraidUp::start(&env, &l.nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    // In the foreground: its log is the test's to read.
    let mut a = BraidUp::start(&env, &l.nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    assert!(ping_until_reply(&l.nsa, &v4(&l, 2), LONG), "no tunnel");
    // The search finds what the line carries; the tunnel keeps 1280.
    let carries = |v: &Value| v["peers"][0]["paths"][0]["pmtu"]["mtu"].as_u64();
    let settled = wait_until(Duration::from_secs(60), || {
        let (v, _) = mtu_of(&l.nsa, &ifa);
        carries(&v) == Some(1268) && v["peers"][0]["fragment_payload"] == 1268
    });
    let (v, text) = mtu_of(&l.nsa, &ifa);
    eprintln!("[{test}] braid mtu on a:\n{text}");
    assert!(settled, "the search did not settle at 1268: {text}");
    let want_tunnel = mtu.map_or(1280, u64::from);
    assert_eq!(v["tunnel_mtu"], want_tunnel, "{text}");
    assert_eq!(v["peers"][0]["ipv6_passes"], true, "{text}");
    assert!(
        text.contains("packets over 1268 bytes go in pieces"),
        "{text}"
    );
    // 1280 bytes, DF, both ways, IPv4 and IPv6 inside.
    for (from, dst) in [
        (&l.nsa, v4(&l, 2)),
        (&l.nsb, v4(&l, 1)),
        (&l.nsa, v6(&l, 2)),
        (&l.nsb, v6(&l, 1)),
    ] {
        let got = df_ping(from, &dst, 1280);
        assert_eq!(got, 3, "1280-byte DF pings to {dst}: {got}/3");
    }
    for (from, to, dst) in [(&l.nsa, &l.nsb, v4(&l, 2)), (&l.nsb, &l.nsa, v4(&l, 1))] {
        eprintln!("[{test}] {}", checked_tcp(from, to, &dst));
    }
    let (fwd, rev) = iperf_both_ways(&env, &l, &v4(&l, 2));
    let (fwd6, rev6) = iperf_both_ways(&env, &l, &v6(&l, 2));
    eprintln!(
        "[{test}] TCP 2 s a->b / b->a: {fwd:.0} / {rev:.0} Mbit/s over IPv4, {fwd6:.0} / {rev6:.0} over IPv6 inside"
    );
    let (v, text) = mtu_of(&l.nsa, &ifa);
    eprintln!("[{test}] afterwards:\n{text}");
    let (vb, text_b) = mtu_of(&l.nsb, &ifb);
    assert!(text.contains("packets sent in"), "{text}");
    eprintln!(
        "[{test}] a's tunnel MTU {}, b's {}; b:\n{text_b}",
        v["tunnel_mtu"], vb["tunnel_mtu"]
    );
    assert!(
        a.log_text().contains("go in pieces"),
        "a's log does not say so:\n{}",
        a.log_text()
    );
    assert!(b.down().ok());
}

#[test]
fn braid_peers_carry_1280_through_a_line_that_drops_over_1300() {
    braid_pair(
        "braid_peers_carry_1280_through_a_line_that_drops_over_1300",
        None,
    );
}

#[test]
fn braid_peers_carry_1280_through_a_line_that_drops_over_1300_mtu_1420() {
    braid_pair(
        "braid_peers_carry_1280_through_a_line_that_drops_over_1300_mtu_1420",
        Some(1420),
    );
}

/// braid A, wireguard-go B: nothing discovers the relay's limit, so the
/// line a–m says it (MTU 1328: 1268-byte tunnel packets).
#[test]
fn with_a_stock_peer_braid_lowers_the_mtu_for_ipv4_and_says_why_ipv6_cannot_pass() {
    let test = "with_a_stock_peer_braid_lowers_the_mtu_for_ipv4_and_says_why_ipv6_cannot_pass";
    let mut tools = TOOLS.to_vec();
    tools.push("wireguard-go");
    if !preflight(test, &tools) {
        return;
    }
    let (exe, version) = wireguard_go::reference();
    eprintln!("[{test}] wireguard-go: {} ({version})", exe.display());
    let env = TestEnv::new(test);
    let l = line(&env, 1328);
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let (conf_a, conf_b) = confs(&l, &ka, &kb, None);
    let _b = WgGo::start_exe(&exe, &l.nsb, &ifb, &conf_b, &env.dir).or_panic();
    // In the foreground: its log is the test's to read.
    let mut a = BraidUp::start(&env, &l.nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    assert!(ping_until_reply(&l.nsa, &v4(&l, 2), LONG), "no tunnel");
    let lowered = wait_until(Duration::from_secs(30), || {
        mtu_of(&l.nsa, &ifa).0["tunnel_mtu"] == 1264
    });
    let (_, text) = mtu_of(&l.nsa, &ifa);
    eprintln!("[{test}] braid mtu on a:\n{text}");
    assert!(lowered, "{text}");
    assert!(text.contains("(below 1280: IPv6 cannot pass)"), "{text}");
    let log = a.log_text();
    let said = log
        .lines()
        .find(|l| l.contains("IPv6 cannot pass"))
        .unwrap_or_default()
        .to_string();
    eprintln!("[{test}] a's log: {said}");
    assert!(!said.is_empty(), "{log}");
    let link = l.nsa.ip(&["link", "show", "dev", &ifa]).stdout;
    assert!(link.contains("mtu 1264"), "{link}");
    assert_eq!(df_ping(&l.nsa, &v4(&l, 2), 1264), 3, "1264 bytes with DF");
    eprintln!("[{test}] {}", checked_tcp(&l.nsa, &l.nsb, &v4(&l, 2)));
    eprintln!("[{test}] {}", checked_tcp(&l.nsb, &l.nsa, &v4(&l, 1)));
    let six = ping_counted(&l.nsa.name, &["-W", "1"], &v6(&l, 2), 1);
    eprintln!(
        "[{test}] IPv6 inside: {}",
        if six.received == 1 {
            "passes"
        } else {
            "does not pass"
        }
    );
}

/// wireguard-go on both ends of the same lines: what it does with a line
/// that drops payloads over 1300 (MTU 1420, its datagrams of up to 1452
/// bytes), reported.
#[test]
fn wireguard_go_through_a_line_that_drops_over_1300_reference() {
    let test = "wireguard_go_through_a_line_that_drops_over_1300_reference";
    let mut tools = TOOLS.to_vec();
    tools.push("wireguard-go");
    if !preflight(test, &tools) {
        return;
    }
    let (exe, version) = wireguard_go::reference();
    eprintln!("[{test}] wireguard-go: {} ({version})", exe.display());
    for am_mtu in [1500, 1328] {
        let env = TestEnv::new(test);
        let l = line(&env, am_mtu);
        let (ka, kb) = (wg_keys(), wg_keys());
        let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
        let (conf_a, conf_b) = confs(&l, &ka, &kb, Some(1420));
        let _b = WgGo::start_exe(&exe, &l.nsb, &ifb, &conf_b, &env.dir).or_panic();
        let _a = WgGo::start_exe(&exe, &l.nsa, &ifa, &conf_a, &env.dir).or_panic();
        assert!(ping_until_reply(&l.nsa, &v4(&l, 2), LONG), "no tunnel");
        let sizes: Vec<String> = [1268, 1280, 1420]
            .into_iter()
            .map(|s| format!("{s}: {}/3", df_ping_quick(&l.nsa, &v4(&l, 2), s)))
            .collect();
        let six = df_ping_quick(&l.nsa, &v6(&l, 2), 1280);
        let _lock = iperf_lock();
        let tcp = iperf3(&env, &l.nsa, &l.nsb, &v4(&l, 2), 2, false)
            .map(|b| format!("{:.0} Mbit/s", b / 1e6))
            .unwrap_or_else(|e| format!("failed ({})", e.lines().next().unwrap_or("")));
        eprintln!(
            "[{test}] line a-m MTU {am_mtu}: DF pings (IPv4) {}; IPv6 1280: {six}/3; TCP 2 s a->b: {tcp}",
            sizes.join(", ")
        );
    }
}
