//! Path MTU discovery end to end: two braid peers over a line through
//! `braid netem` in a middle namespace, which can black-hole big datagrams
//! (`--mtu`), and a LAN host routed through peer A:
//!
//! ```text
//!   netns h (LAN host, MTU 1500)       198.19.Y.2/24
//!     │ veth
//!   netns a  braid A (198.19.X.1)       198.19.Y.1/24, forwarding
//!     │ veth 198.18.X.1/26 ── 198.18.X.2/26
//!   netns m  braid netem 198.18.X.2:51900 → 198.18.X.66:51821 [--mtu 1400]
//!     │ veth 198.18.X.65/26 ── 198.18.X.66/26
//!   netns b  braid B (198.19.X.2), listens on 51821
//! ```
//!
//! The relay is restarted to change the line (netem has no run-time MTU
//! switch); B follows the relay's new source port as WireGuard roaming.
//! Every wait polls with a bound; how long things took is printed, never
//! asserted. Needs root, iproute2, wireguard-tools (`wg show`), ping, socat.

use crate::harness::*;
use serde_json::Value;
use std::time::{Duration, Instant};

const TOOLS: &[&str] = &["ip", "wg", "ping", "socat", "sysctl"];
const RELAY_PORT: u16 = 51900;
const B_PORT: u16 = 51821;
/// `--mtu 1400` passes datagrams of up to 1400 bytes: 1368-byte packets.
const LIMIT: u32 = 1400;
const INNER_LIMIT: u64 = 1368;
/// A 1500-byte IPv4 line: 1500 − 20 − 8 − 32.
const CLEAN: u64 = 1440;
/// Discovery re-searches upwards after 30 s; room for that and the search.
/// Every wait for a discovery result gets this long: a probe answered after
/// its timeout on a busy machine makes a search settle low, and only the
/// next search up corrects that.
const RAISE_WAIT: Duration = Duration::from_secs(60);
const TRANSFER_BYTES: usize = 4 << 20;

struct Topology {
    x: u8,
    y: u8,
    nsa: Netns,
    nsm: Netns,
    nsb: Netns,
    _am: Veth,
    _mb: Veth,
}

fn topology(env: &TestEnv) -> Topology {
    let x = env.octet();
    let y = x + 1;
    let (nsa, nsm, nsb) = (env.netns("a"), env.netns("m"), env.netns("b"));
    let am = Veth::new(
        &nsa,
        "vam",
        &format!("198.18.{x}.1/26"),
        &nsm,
        "vma",
        &format!("198.18.{x}.2/26"),
    )
    .or_panic();
    let mb = Veth::new(
        &nsm,
        "vmb",
        &format!("198.18.{x}.65/26"),
        &nsb,
        "vbm",
        &format!("198.18.{x}.66/26"),
    )
    .or_panic();
    Topology {
        x,
        y,
        nsa,
        nsm,
        nsb,
        _am: am,
        _mb: mb,
    }
}

/// `braid netem` in the middle namespace, optionally with `--mtu`.
fn relay(env: &TestEnv, t: &Topology, mtu: Option<u32>, log: &str) -> ChildGuard {
    let x = t.x;
    let mut c = t.nsm.cmd(BRAID);
    c.args([
        "netem",
        "--listen",
        &format!("198.18.{x}.2:{RELAY_PORT}"),
        "--to",
        &format!("198.18.{x}.66:{B_PORT}"),
    ]);
    if let Some(m) = mtu {
        c.args(["--mtu", &m.to_string()]);
    }
    let mut child = ChildGuard::spawn(c, "braid netem", &env.path(log)).or_panic();
    let started = wait_until(LONG, || {
        !child.running() || child.log_text().contains("relaying")
    });
    assert!(
        started && child.running(),
        "braid netem did not start:\n{}",
        child.log_text()
    );
    child
}

/// A's config: tunnel 198.19.X.1, reaches B's tunnel address (and, for the
/// router case, B is reached from the LAN too) through the relay.
fn conf_a(t: &Topology, ka: &Keys, kb: &Keys, extra: &[&str], mtu: Option<u32>) -> IfaceConf {
    IfaceConf {
        private_key: ka.private.clone(),
        address: vec![
            format!("198.19.{}.1/32", t.x),
            format!("{}1/128", v6_tunnel(t)),
        ],
        mtu,
        braid_lines: extra.iter().map(|s| s.to_string()).collect(),
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: vec![
                format!("198.19.{}.2/32", t.x),
                format!("{}2/128", v6_tunnel(t)),
            ],
            endpoint: Some(format!("198.18.{}.2:{RELAY_PORT}", t.x)),
            keepalive: Some(25),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn conf_b(t: &Topology, kb: &Keys, ka: &Keys, extra: &[&str], mtu: Option<u32>) -> IfaceConf {
    IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(B_PORT),
        address: vec![
            format!("198.19.{}.2/32", t.x),
            format!("{}2/128", v6_tunnel(t)),
        ],
        mtu,
        braid_lines: extra.iter().map(|s| s.to_string()).collect(),
        peers: vec![PeerConf {
            public_key: ka.public.clone(),
            allowed_ips: vec![
                format!("198.19.{}.1/32", t.x),
                format!("198.19.{}.0/24", t.y),
                format!("{}1/128", v6_tunnel(t)),
                format!("{}0/64", v6_lan(t)),
            ],
            ..Default::default()
        }],
    }
}

/// Tunnel and LAN IPv6 prefixes of this run (append the host part).
fn v6_tunnel(t: &Topology) -> String {
    format!("2001:db8:1:{:x}::", t.x)
}

fn v6_lan(t: &Topology) -> String {
    format!("2001:db8:2:{:x}::", t.x)
}

/// `braid mtu NAME --json`.
fn mtu_json(ns: &Netns, ifname: &str) -> Value {
    let out = ns.run(BRAID, &["mtu", ifname, "--json"], SHORT);
    serde_json::from_str(&out.stdout).unwrap_or_default()
}

/// What the discovery of the first live path shows: (state, mtu, black
/// holes), and the interface's tunnel MTU.
#[derive(Debug, Default, Clone, PartialEq)]
struct Seen {
    state: String,
    mtu: u64,
    black_holes: u64,
    tunnel_mtu: u64,
}

fn seen(ns: &Netns, ifname: &str) -> Seen {
    let v = mtu_json(ns, ifname);
    let paths = v["peers"][0]["paths"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let path = paths
        .iter()
        .find(|p| p["state"] == "up" && p["pmtu"].is_object())
        .cloned()
        .unwrap_or_default();
    Seen {
        state: path["pmtu"]["state"].as_str().unwrap_or("").to_string(),
        mtu: path["pmtu"]["mtu"].as_u64().unwrap_or(0),
        black_holes: path["pmtu"]["black_holes"].as_u64().unwrap_or(0),
        tunnel_mtu: v["tunnel_mtu"].as_u64().unwrap_or(0),
    }
}

/// Polls (every 100 ms, bounded) until `want` holds; returns the time it
/// took, panicking with what was last seen and the daemon's text output.
fn wait_for(
    ns: &Netns,
    ifname: &str,
    bound: Duration,
    what: &str,
    want: impl Fn(&Seen) -> bool,
) -> Duration {
    let start = Instant::now();
    let mut last = Seen::default();
    let ok = wait_until(bound, || {
        last = seen(ns, ifname);
        want(&last)
    });
    let text = ns.run(BRAID, &["mtu", ifname], SHORT).stdout;
    assert!(ok, "{ifname}: {what}: last seen {last:?}\n{text}");
    start.elapsed()
}

/// Pseudo-random bytes (xorshift), so a transfer cannot be compressed or
/// mistaken for another.
fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

/// Sends a file over TCP from `client` to `server_addr` (socat in both
/// namespaces) and checks that every byte arrived intact.
fn checked_transfer(
    env: &TestEnv,
    client: &Netns,
    server: &Netns,
    server_addr: &str,
    tag: &str,
) -> Result<(), String> {
    let data = payload(TRANSFER_BYTES, 0x5eed ^ tag.len() as u64);
    let src = env.path(&format!("{tag}.in"));
    std::fs::write(&src, &data).expect("write transfer input");
    let dst = env.path(&format!("{tag}.out"));
    let _ = std::fs::remove_file(&dst);
    let port = "5301";
    let mut c = server.cmd("socat");
    c.args([
        "-u",
        &if server_addr.contains(':') {
            format!("TCP6-LISTEN:{port},bind=[{server_addr}],reuseaddr")
        } else {
            format!("TCP-LISTEN:{port},bind={server_addr},reuseaddr")
        },
        &format!("CREATE:{}", dst.display()),
    ]);
    let mut srv =
        ChildGuard::spawn(c, "socat server", &env.path(&format!("{tag}.srv.log"))).or_panic();
    let listening = wait_until(LONG, || {
        !srv.running()
            || server
                .run("ss", &["-Hltn", &format!("sport = :{port}")], SHORT)
                .stdout
                .contains(port)
    });
    assert!(
        listening && srv.running(),
        "socat server: {}",
        srv.log_text()
    );
    let start = Instant::now();
    let out = client.run(
        "socat",
        &[
            "-u",
            &format!("OPEN:{}", src.display()),
            &if server_addr.contains(':') {
                format!("TCP6:[{server_addr}]:{port},connect-timeout=20")
            } else {
                format!("TCP:{server_addr}:{port},connect-timeout=20")
            },
        ],
        Duration::from_secs(60),
    );
    if !out.ok() {
        return Err(format!(
            "{tag}: TCP transfer did not complete: {}",
            out.describe()
        ));
    }
    srv.wait_exit(LONG);
    let got = std::fs::read(&dst).unwrap_or_default();
    if got != data {
        return Err(format!(
            "{tag}: {} of {} bytes arrived, intact: {}",
            got.len(),
            data.len(),
            got == data[..got.len().min(data.len())]
        ));
    }
    eprintln!(
        "[{tag}] {} MiB over TCP, checksummed, in {:?}",
        TRANSFER_BYTES >> 20,
        start.elapsed()
    );
    Ok(())
}

/// What both daemons say, for a failure message.
fn diagnostics(t: &Topology, ifa: &str, ifb: &str) -> String {
    let mtu = |ns: &Netns, i: &str| ns.run(BRAID, &["mtu", i], SHORT).stdout;
    let show = |ns: &Netns, i: &str| ns.run(BRAID, &["show", i], SHORT).stdout;
    format!(
        "A:\n{}{}\nB:\n{}{}",
        mtu(&t.nsa, ifa),
        show(&t.nsa, ifa),
        mtu(&t.nsb, ifb),
        show(&t.nsb, ifb)
    )
}

/// `ping -M do` (DF, no fragmentation) with `size` bytes of payload: does
/// any of 3 get an answer (waiting for it as [`ping_counted`] does; one
/// too big for the local route fails at once)?
fn ping_df(ns: &Netns, dst: &str, size: u32) -> bool {
    let size = size.to_string();
    ping_counted(ns, &["-i", "0.2", "-M", "do", "-s", &size], dst, 3).received > 0
}

#[test]
fn black_hole_is_found_tunnel_mtu_follows_and_tcp_flows() {
    let test = "black_hole_is_found_tunnel_mtu_follows_and_tcp_flows";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let t = topology(&env);
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let mut line = relay(&env, &t, None, "netem-clean.log");
    let mut b = BraidUp::start(
        &env,
        &t.nsb,
        &ifb,
        &conf_b(&t, &kb, &ka, &[], None),
        BraidMode::Daemon,
    );
    b.assert_up();
    let started = Instant::now();
    let mut a = BraidUp::start(
        &env,
        &t.nsa,
        &ifa,
        &conf_a(&t, &ka, &kb, &[], None),
        BraidMode::Daemon,
    );
    a.assert_up();
    let tb = format!("198.19.{}.2", t.x);
    assert!(
        ping_until_reply(&t.nsa, &tb, LONG),
        "no reply through the tunnel"
    );

    // A clean 1500-byte line: search up from WireGuard's 1420.
    wait_for(&t.nsa, &ifa, RAISE_WAIT, "search up on a clean line", |s| {
        s.state == "complete" && s.mtu == CLEAN && s.tunnel_mtu == CLEAN
    });
    eprintln!(
        "[{test}] clean line: {CLEAN} found, TUN raised 1420 -> {CLEAN}, {:?} after `braid up`",
        started.elapsed()
    );
    // What the kernel may send without fragmenting (payload + 28) fits.
    assert!(
        ping_df(&t.nsa, &tb, CLEAN as u32 - 28),
        "DF ping of {CLEAN}"
    );

    // The line starts dropping datagrams above 1400 bytes.
    drop(line);
    line = relay(&env, &t, Some(LIMIT), "netem-mtu.log");
    let swapped = Instant::now();
    let detected = wait_for(&t.nsa, &ifa, RAISE_WAIT, "black hole detected", |s| {
        s.black_holes >= 1
    });
    let at_detection = seen(&t.nsa, &ifa).tunnel_mtu;
    let recovered = wait_for(&t.nsa, &ifa, RAISE_WAIT, "recovered below the limit", |s| {
        s.state == "complete" && s.mtu == INNER_LIMIT && s.tunnel_mtu == INNER_LIMIT
    });
    eprintln!(
        "[{test}] --mtu {LIMIT}: black hole detected {detected:?} after the change, \
         TUN MTU {at_detection} then, {INNER_LIMIT} found and the TUN at it {:?} after the change",
        swapped.elapsed()
    );
    let _ = recovered;
    wait_for(
        &t.nsb,
        &ifb,
        RAISE_WAIT,
        "B's side finds the limit too",
        |s| s.mtu == INNER_LIMIT && s.tunnel_mtu == INNER_LIMIT,
    );
    assert!(
        ping_df(&t.nsa, &tb, INNER_LIMIT as u32 - 28),
        "DF ping of {INNER_LIMIT}"
    );
    let ta = format!("198.19.{}.1", t.x);
    checked_transfer(&env, &t.nsa, &t.nsb, &tb, "a-to-b")
        .and_then(|()| checked_transfer(&env, &t.nsb, &t.nsa, &ta, "b-to-a"))
        .unwrap_or_else(|e| panic!("{e}\n{}", diagnostics(&t, &ifa, &ifb)));
    let text = t.nsa.run(BRAID, &["mtu", &ifa], SHORT).stdout;
    eprintln!("[{test}] braid mtu {ifa}:\n{text}");

    // The limit goes away: the raise timer searches up again.
    drop(line);
    let _line = relay(&env, &t, None, "netem-clean2.log");
    let lifted = Instant::now();
    wait_for(&t.nsa, &ifa, RAISE_WAIT, "raised again", |s| {
        s.state == "complete" && s.mtu == CLEAN && s.tunnel_mtu == CLEAN
    });
    eprintln!(
        "[{test}] limit removed: {CLEAN} again {:?} later",
        lifted.elapsed()
    );
    assert!(
        ping_df(&t.nsa, &tb, CLEAN as u32 - 28),
        "DF ping of {CLEAN} again"
    );
}

/// A LAN host (MTU 1500) behind A sends TCP through the black-hole line.
/// `lines`/`mtu` (for both peers) choose how it is made to fit: by default
/// the TUN MTU follows the path and MSS clamping does it; with a fixed
/// `MTU = 1420` and `MssFix = off` only braid's "fragmentation needed"
/// answers can (the TCP ends announce an MSS of 1380, which the line's
/// 1368 cannot carry).
fn router_case(test: &str, lines: &[&str], mtu: Option<u32>, expect_answers: bool) {
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let t = topology(&env);
    let nsh = env.netns("h");
    let y = t.y;
    let _lan = Veth::new(
        &t.nsa,
        "vah",
        &format!("198.19.{y}.1/24"),
        &nsh,
        "vha",
        &format!("198.19.{y}.2/24"),
    )
    .or_panic();
    nsh.ip(&["route", "add", "default", "via", &format!("198.19.{y}.1")])
        .expect_ok("LAN host default route");
    let lan6 = v6_lan(&t);
    t.nsa
        .ip(&["addr", "add", &format!("{lan6}1/64"), "dev", "vah", "nodad"])
        .expect_ok("A's LAN IPv6 address");
    nsh.ip(&["addr", "add", &format!("{lan6}2/64"), "dev", "vha", "nodad"])
        .expect_ok("LAN host IPv6 address");
    nsh.ip(&["-6", "route", "add", "default", "via", &format!("{lan6}1")])
        .expect_ok("LAN host IPv6 default route");
    for key in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
        t.nsa
            .run("sysctl", &["-qw", key], SHORT)
            .expect_ok("forwarding on A");
    }
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let _line = relay(&env, &t, Some(LIMIT), "netem-mtu.log");
    let mut b = BraidUp::start(
        &env,
        &t.nsb,
        &ifb,
        &conf_b(&t, &kb, &ka, lines, mtu),
        BraidMode::Daemon,
    );
    b.assert_up();
    let mut a = BraidUp::start(
        &env,
        &t.nsa,
        &ifa,
        &conf_a(&t, &ka, &kb, lines, mtu),
        BraidMode::Daemon,
    );
    a.assert_up();
    let tb = format!("198.19.{}.2", t.x);
    assert!(ping_until_reply(&nsh, &tb, LONG), "LAN host reaches B");
    let found = wait_for(&t.nsa, &ifa, RAISE_WAIT, "the limit found", |s| {
        s.state == "complete" && s.mtu == INNER_LIMIT
    });
    eprintln!("[{test}] {INNER_LIMIT} found {found:?} after the first reply");
    // Bulk TCP from the LAN host's 1500-byte interface through the tunnel.
    let th = format!("198.19.{y}.2");
    // Each direction starts with no path MTU learned from the other (a
    // learned one lowers the MSS the receiving end announces).
    let forget = || {
        for ns in [&nsh, &t.nsb] {
            ns.ip(&["route", "flush", "cache"]);
            ns.ip(&["-6", "route", "flush", "cache"]);
        }
    };
    let (th6, tb6) = (format!("{lan6}2"), format!("{}2", v6_tunnel(&t)));
    assert!(
        ping_until_reply(&nsh, &tb6, LONG),
        "LAN host reaches B over IPv6"
    );
    let answers = || {
        [(&t.nsa, &ifa), (&t.nsb, &ifb)]
            .map(|(ns, i)| mtu_json(ns, i)["too_big_answered"].as_u64().unwrap_or(0))
    };
    let mut after_v4 = [0; 2];
    checked_transfer(&env, &t.nsb, &nsh, &th, "b-to-lan")
        .and_then(|()| {
            forget();
            checked_transfer(&env, &nsh, &t.nsb, &tb, "lan-to-b")
        })
        .and_then(|()| {
            after_v4 = answers();
            forget();
            checked_transfer(&env, &t.nsb, &nsh, &th6, "b-to-lan-v6")
        })
        .and_then(|()| {
            forget();
            checked_transfer(&env, &nsh, &t.nsb, &tb6, "lan-to-b-v6")
        })
        .unwrap_or_else(|e| {
            let route = nsh.run("ip", &["route", "get", &tb], SHORT).stdout;
            let icmp_a = t
                .nsa
                .run("nstat", &["-az", "IcmpOut*", "Icmp6OutPktTooBigs"], SHORT)
                .stdout;
            let icmp_h = nsh.run("nstat", &["-az", "IcmpIn*"], SHORT).stdout;
            let links = t.nsa.run("ip", &["-s", "link"], SHORT).stdout;
            panic!(
                "{e}\n{}\nLAN host: {route}\nA icmp: {icmp_a}\nh icmp: {icmp_h}\nA links: {links}",
                diagnostics(&t, &ifa, &ifb)
            )
        });
    let total = answers();
    for (k, (side, ns, ifname)) in [("A", &t.nsa, &ifa), ("B", &t.nsb, &ifb)]
        .into_iter()
        .enumerate()
    {
        let v = mtu_json(ns, ifname);
        let (v4, v6) = (after_v4[k], total[k] - after_v4[k]);
        eprintln!(
            "[{test}] {side}: tunnel MTU {}, too-big answers {v4} over IPv4, {v6} over IPv6",
            v["tunnel_mtu"]
        );
        if expect_answers {
            assert!(v4 > 0 && v6 > 0, "{side} answered oversize packets: {v}");
        }
    }
}

#[test]
fn lan_host_tcp_through_black_hole_with_defaults() {
    router_case(
        "lan_host_tcp_through_black_hole_with_defaults",
        &[],
        None,
        false,
    );
}

#[test]
fn lan_host_tcp_through_black_hole_by_too_big_answers_alone() {
    router_case(
        "lan_host_tcp_through_black_hole_by_too_big_answers_alone",
        &["MssFix = off"],
        Some(1420),
        true,
    );
}
