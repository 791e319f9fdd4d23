//! IPv6 end to end: braid ↔ braid between two namespaces with every mix of
//! inner (tunnel) and outer (underlay) IP version, a two-line tunnel whose
//! lines are one IPv4 and one IPv6 path, and a full tunnel (`::/0`) over an
//! IPv6 line.
//!
//! ```text
//!   netns a                                     netns b
//!   va 198.18.X.1/24, 2001:db8:0:X::1/64 ==== vb 198.18.X.2/24, 2001:db8:0:X::2/64
//!   TUN 198.19.X.1/24 | 2001:db8:1:X::1/64     TUN 198.19.X.2/24 | 2001:db8:1:X::2/64
//! ```
//!
//! Each case pings through the tunnel and sends a file over TCP (socat),
//! compared by SHA-256 on both ends; `wg show` on the responder names the
//! outer address family the initiator really came from.
//!
//! Needs root, `/dev/net/tun`, iproute2, wireguard-tools, ping, socat and
//! sha256sum. See `common/mod.rs` for the cleanup rules.

use crate::harness::*;
use std::io::Read;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "wg", "ping", "socat", "sha256sum", "ss"];
const PORT_A: u16 = 51820;
const PORT_B: u16 = 51821;
const TCP_PORT: u16 = 5556;
/// Big enough for many full-size segments, windows and some retransmits.
const TRANSFER_BYTES: u64 = 8 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn flag(self) -> &'static str {
        match self {
            Family::V4 => "-4",
            Family::V6 => "-6",
        }
    }
}

/// Addresses of one run: underlay on the veth, tunnel on the TUNs.
struct Plan {
    x: u8,
}

impl Plan {
    /// Underlay address of side `host` (1 = a, 2 = b).
    fn underlay(&self, family: Family, host: u8) -> String {
        match family {
            Family::V4 => format!("198.18.{}.{host}", self.x),
            Family::V6 => format!("2001:db8:0:{:x}::{host}", self.x),
        }
    }

    fn endpoint(&self, family: Family, host: u8, port: u16) -> String {
        match family {
            Family::V4 => format!("{}:{port}", self.underlay(family, host)),
            Family::V6 => format!("[{}]:{port}", self.underlay(family, host)),
        }
    }

    fn tunnel(&self, family: Family, host: u8) -> String {
        match family {
            Family::V4 => format!("198.19.{}.{host}", self.x),
            Family::V6 => format!("2001:db8:1:{:x}::{host}", self.x),
        }
    }

    fn tunnel_cidr(&self, family: Family, host: u8) -> String {
        let len = if family == Family::V4 { 24 } else { 64 };
        format!("{}/{len}", self.tunnel(family, host))
    }

    fn tunnel_host(&self, family: Family, host: u8) -> String {
        let len = if family == Family::V4 { 32 } else { 128 };
        format!("{}/{len}", self.tunnel(family, host))
    }
}

/// The IPv6 underlay on the veth (the IPv4 one comes with `joined_pair`).
fn add_v6_underlay(plan: &Plan, sides: [(&Netns, &String); 2]) {
    for ((ns, dev), host) in sides.into_iter().zip([1, 2]) {
        let addr = format!("{}/64", plan.underlay(Family::V6, host));
        ns.ip(&["addr", "add", &addr, "dev", dev, "nodad"])
            .expect_ok("IPv6 underlay address");
    }
}

#[test]
fn ipv4_inside_ipv4() {
    tunnel_case("ipv6_v4_in_v4", Family::V4, Family::V4);
}

#[test]
fn ipv6_inside_ipv6() {
    tunnel_case("ipv6_v6_in_v6", Family::V6, Family::V6);
}

#[test]
fn ipv6_inside_ipv4() {
    tunnel_case("ipv6_v6_in_v4", Family::V6, Family::V4);
}

#[test]
fn ipv4_inside_ipv6() {
    tunnel_case("ipv6_v4_in_v6", Family::V4, Family::V6);
}

/// A single-family tunnel (`inner`) over a single-family line (`outer`).
fn tunnel_case(test: &str, inner: Family, outer: Family) {
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), veth) = env.two_sides();
    let (va, vb) = (veth.a.clone(), veth.b.clone());
    let plan = Plan { x };
    add_v6_underlay(&plan, [(&nsa, &va), (&nsb, &vb)]);
    let conf = |me: &Keys, peer: &Keys, host: u8, port, endpoint| IfaceConf {
        private_key: me.private.clone(),
        listen_port: Some(port),
        address: vec![plan.tunnel_cidr(inner, host)],
        peers: vec![PeerConf {
            public_key: peer.public.clone(),
            allowed_ips: vec![plan.tunnel_host(inner, 3 - host)],
            endpoint,
            ..Default::default()
        }],
        ..Default::default()
    };
    let conf_b = conf(&kb, &ka, 2, PORT_B, None);
    let conf_a = conf(&ka, &kb, 1, PORT_A, Some(plan.endpoint(outer, 2, PORT_B)));
    let mut side_b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    side_b.assert_up();
    let mut side_a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    side_a.assert_up();

    let tb = plan.tunnel(inner, 2);
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: no reply from {tb} through the tunnel\n{}\n{}",
        side_a.log_text(),
        side_b.log_text()
    );
    let p = ping_family(&nsa, inner, &tb, 5);
    assert_eq!(p.received, 5, "{test}: ping {tb}:\n{}", p.output);

    // The responder learned the initiator's endpoint from the datagrams it
    // got: its family is the outer one.
    let endpoints = nsb.run("wg", &["show", &ifb, "endpoints"], SHORT);
    let want = plan.endpoint(outer, 1, PORT_A);
    assert!(
        endpoints.stdout.contains(&want),
        "{test}: responder should see the initiator at {want}: {}",
        endpoints.describe()
    );

    tcp_transfer(&env, &nsa, &nsb, inner, &tb);
    assert_wg_show_handshake_and_transfer(&nsa, &ifa);

    // `braid doctor` sizes the line by its outer family: 1420 + 80 bytes
    // just fits a 1500-byte line under IPv6, with 20 to spare under IPv4.
    let mut doctor = nsa.cmd(BRAID);
    doctor.args(["doctor", &ifa, "--json"]);
    let out = run_bounded(doctor, Duration::from_secs(60));
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{test}: doctor --json: {e}: {}", out.describe()));
    let check = format!("mtu {ifa} over {va}");
    let mtu = v["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["check"] == check.as_str()))
        .unwrap_or_else(|| panic!("{test}: no `{check}` check: {v:#}"));
    let overhead = if outer == Family::V4 {
        "60 bytes of IPv4"
    } else {
        "80 bytes of IPv6"
    };
    assert!(
        mtu["level"] == "ok"
            && mtu["finding"]
                .as_str()
                .is_some_and(|f| f.contains(overhead)),
        "{test}: {mtu}"
    );
    side_a.down();
    side_b.down();
}

/// One tunnel carrying both inner families over two lines of a peer: an
/// IPv4 path and an IPv6 path on the same veth, in redundant mode so both
/// carry every packet.
#[test]
fn two_lines_one_ipv4_one_ipv6() {
    let test = "ipv6_mixed_lines";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), veth) = env.two_sides();
    let (va, vb) = (veth.a.clone(), veth.b.clone());
    let plan = Plan { x };
    add_v6_underlay(&plan, [(&nsa, &va), (&nsb, &vb)]);
    let both = [Family::V4, Family::V6];
    let conf_b = IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(PORT_B),
        address: both.iter().map(|&f| plan.tunnel_cidr(f, 2)).collect(),
        peers: vec![PeerConf {
            public_key: ka.public.clone(),
            allowed_ips: both.iter().map(|&f| plan.tunnel_host(f, 1)).collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let conf_a = IfaceConf {
        private_key: ka.private.clone(),
        address: both.iter().map(|&f| plan.tunnel_cidr(f, 1)).collect(),
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: both.iter().map(|&f| plan.tunnel_host(f, 2)).collect(),
            braid_lines: vec![
                format!(
                    "Path = v4 bind={} endpoint={}",
                    plan.underlay(Family::V4, 1),
                    plan.endpoint(Family::V4, 2, PORT_B)
                ),
                format!(
                    "Path = v6 bind={} endpoint={}",
                    plan.underlay(Family::V6, 1),
                    plan.endpoint(Family::V6, 2, PORT_B)
                ),
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

    let tb4 = plan.tunnel(Family::V4, 2);
    assert!(
        ping_until_reply(&nsa, &tb4, LONG),
        "{test}: no reply from {tb4}\n{}\n{}",
        side_a.log_text(),
        side_b.log_text()
    );
    let up = wait_until(LONG, || {
        let ps = paths(&nsa, &ifa);
        ps.len() == 2 && ps.iter().all(|p| p.state == "up")
    });
    assert!(
        up,
        "{test}: both lines up: {:?}\n{}",
        paths(&nsa, &ifa),
        side_a.log_text()
    );
    let ps = paths(&nsa, &ifa);
    assert!(
        ps.iter()
            .any(|p| p.name == "v6" && p.remote == plan.endpoint(Family::V6, 2, PORT_B)),
        "{test}: the v6 path goes to the IPv6 endpoint: {ps:?}"
    );
    let before = paths(&nsa, &ifa);
    for family in both {
        let dst = plan.tunnel(family, 2);
        let p = ping_family(&nsa, family, &dst, 5);
        assert_eq!(p.received, 5, "{test}: ping {dst}:\n{}", p.output);
        tcp_transfer(&env, &nsa, &nsb, family, &dst);
    }
    let after = paths(&nsa, &ifa);
    for (b, a) in before.iter().zip(&after) {
        assert!(
            a.tx_packets > b.tx_packets + 1000,
            "{test}: redundant mode sends on line {} too: {before:?} -> {after:?}",
            a.name
        );
    }
    side_a.down();
    side_b.down();
}

/// `AllowedIPs = 0.0.0.0/0, ::/0` over an IPv6 line whose peer is reached
/// through a default route: braid's own datagrams must take the main table
/// (fwmark rule for IPv6 too) while everything else goes into the tunnel.
///
/// b has an endpoint address on lo (2001:db8:3:X::2), reached from a via
/// `default via` b's veth address, and one address of each family behind
/// it on lo; `braid down` removes the IPv4 and the IPv6 rules.
#[test]
fn full_tunnel_over_an_ipv6_line() {
    let test = "ipv6_full_tunnel";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), veth) = env.two_sides();
    let (va, vb) = (veth.a.clone(), veth.b.clone());
    let plan = Plan { x };
    add_v6_underlay(&plan, [(&nsa, &va), (&nsb, &vb)]);
    let endpoint_addr = format!("2001:db8:3:{x:x}::2");
    let (behind4, behind6) = ("198.18.250.1".to_string(), format!("2001:db8:2:{x:x}::1"));
    for addr in [
        format!("{endpoint_addr}/128"),
        format!("{behind6}/128"),
        format!("{behind4}/32"),
    ] {
        nsb.ip(&["addr", "add", &addr, "dev", "lo"])
            .expect_ok("address on b's lo");
    }
    let via = plan.underlay(Family::V6, 2);
    nsa.ip(&["-6", "route", "add", "default", "via", &via, "dev", &va])
        .expect_ok("a's IPv6 default route");

    let both = [Family::V4, Family::V6];
    let conf_a = IfaceConf {
        private_key: ka.private.clone(),
        listen_port: Some(PORT_A),
        address: both.iter().map(|&f| plan.tunnel_cidr(f, 1)).collect(),
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: vec!["0.0.0.0/0".into(), "::/0".into()],
            endpoint: Some(format!("[{endpoint_addr}]:{PORT_B}")),
            ..Default::default()
        }],
        ..Default::default()
    };
    let conf_b = IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(PORT_B),
        address: both.iter().map(|&f| plan.tunnel_cidr(f, 2)).collect(),
        peers: vec![PeerConf {
            public_key: ka.public.clone(),
            allowed_ips: both.iter().map(|&f| plan.tunnel_host(f, 1)).collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut side_b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    side_b.assert_up();
    let mut side_a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    side_a.assert_up();

    for family in both {
        let rules = nsa.ip(&[family.flag(), "rule"]).expect_ok("ip rule").stdout;
        assert!(
            rules.contains("not from all fwmark 0xca6c lookup 51820")
                && rules.contains("suppress_prefixlength 0"),
            "{test}: {} policy rules missing:\n{rules}",
            family.flag()
        );
    }
    assert!(
        ping_until_reply(&nsa, &behind6, LONG),
        "{test}: no reply from {behind6} through the full tunnel\n{}\n{}",
        side_a.log_text(),
        side_b.log_text()
    );
    // a's default route would reach b's lo too: count what b's TUN gets.
    for (family, dst) in [(Family::V6, &behind6), (Family::V4, &behind4)] {
        let before = tun_rx_packets(&nsb, &ifb);
        let p = ping_family(&nsa, family, dst, 5);
        assert_eq!(p.received, 5, "{test}: ping {dst}:\n{}", p.output);
        let after = tun_rx_packets(&nsb, &ifb);
        assert!(
            after >= before + 5,
            "{test}: the pings to {dst} went through the tunnel ({before} -> {after} packets on b's TUN)"
        );
    }
    // The handshake reached b's lo address through the default route (a
    // loop into the tunnel would have prevented any session). b answers
    // from the source address its kernel picks for a, its veth address
    // (braid has no sticky source address yet), and a roams to that: the
    // endpoint stays on the IPv6 line either way.
    let endpoints = nsa.run("wg", &["show", &ifa, "endpoints"], SHORT);
    let on_the_line = [
        format!("[{endpoint_addr}]:{PORT_B}"),
        plan.endpoint(Family::V6, 2, PORT_B),
    ];
    assert!(
        on_the_line.iter().any(|e| endpoints.stdout.contains(e)),
        "{test}: a's endpoint for b is one of {on_the_line:?}: {}",
        endpoints.describe()
    );
    tcp_transfer(&env, &nsa, &nsb, Family::V6, &behind6);

    assert!(side_a.down().ok(), "{test}: braid down");
    for family in both {
        let rules = nsa.ip(&[family.flag(), "rule"]).expect_ok("ip rule").stdout;
        assert!(
            !rules.contains("51820") && !rules.contains("suppress_prefixlength"),
            "{test}: {} rules left after down:\n{rules}",
            family.flag()
        );
    }
    side_b.down();
}

/// Packets the kernel got from braid on a TUN (its RX counter).
fn tun_rx_packets(ns: &Netns, ifname: &str) -> u64 {
    let out = ns.ip(&["-s", "-j", "link", "show", "dev", ifname]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    v[0]["stats64"]["rx"]["packets"].as_u64().unwrap_or(0)
}

#[derive(Debug)]
struct PathInfo {
    name: String,
    state: String,
    remote: String,
    tx_packets: u64,
}

/// The paths of the first peer, from `braid show --json`.
fn paths(ns: &Netns, ifname: &str) -> Vec<PathInfo> {
    let out = ns.run(BRAID, &["show", ifname, "--json"], SHORT);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    let text = |p: &serde_json::Value, k: &str| p[k].as_str().unwrap_or("").to_string();
    v["peers"][0]["paths"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| PathInfo {
                    name: text(p, "name"),
                    state: text(p, "state"),
                    remote: text(p, "remote"),
                    tx_packets: p["tx_packets"].as_u64().unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `ping -4|-6 -c COUNT` inside a namespace (replies counted as
/// [`ping_counted`] counts them).
fn ping_family(ns: &Netns, family: Family, dst: &str, count: u32) -> PingResult {
    ping_counted(ns, &[family.flag(), "-i", "0.2"], dst, count)
}

fn sha256(env: &TestEnv, file: &std::path::Path) -> String {
    let out = run_program("sha256sum", &[&file.to_string_lossy()], LONG).expect_ok("sha256sum");
    let sum = out.stdout.split_whitespace().next().unwrap_or("");
    assert_eq!(
        sum.len(),
        64,
        "[{}] sha256sum output: {}",
        env.test,
        out.stdout
    );
    sum.to_string()
}

/// Sends `TRANSFER_BYTES` of random data from namespace `from` to `dst`
/// (a tunnel address in `to`) over TCP and checks it arrived unchanged.
fn tcp_transfer(env: &TestEnv, from: &Netns, to: &Netns, family: Family, dst: &str) {
    let tag = if family == Family::V4 { "v4" } else { "v6" };
    let sent = env.path(&format!("sent-{tag}.bin"));
    let received = env.path(&format!("received-{tag}.bin"));
    let mut data = Vec::with_capacity(TRANSFER_BYTES as usize);
    std::fs::File::open("/dev/urandom")
        .and_then(|f| f.take(TRANSFER_BYTES).read_to_end(&mut data))
        .expect("read /dev/urandom");
    std::fs::write(&sent, &data).expect("write the file to send");
    let _ = std::fs::remove_file(&received);

    let (listen, connect) = match family {
        Family::V4 => (
            format!("TCP4-LISTEN:{TCP_PORT},bind={dst},reuseaddr"),
            format!("TCP4:{dst}:{TCP_PORT},connect-timeout=20"),
        ),
        Family::V6 => (
            format!("TCP6-LISTEN:{TCP_PORT},bind=[{dst}],reuseaddr"),
            format!("TCP6:[{dst}]:{TCP_PORT},connect-timeout=20"),
        ),
    };
    let mut server = to.cmd("socat");
    server.args([
        "-u",
        &listen,
        &format!("CREATE:{}", received.to_string_lossy()),
    ]);
    let mut server =
        ChildGuard::spawn(server, "socat receiver", &env.path("socat-rx.log")).or_panic();
    let port = format!(":{TCP_PORT}");
    let listening = wait_until(LONG, || {
        !server.running()
            || to
                .run("ss", &["-Hltn", &format!("sport = {port}")], SHORT)
                .stdout
                .contains(&port)
    });
    assert!(
        listening && server.running(),
        "[{}] socat receiver did not listen: {}",
        env.test,
        server.log_text()
    );
    let client = from.run(
        "socat",
        &["-u", &format!("OPEN:{}", sent.to_string_lossy()), &connect],
        Duration::from_secs(120),
    );
    assert!(
        client.ok(),
        "[{}] TCP transfer to {dst}: {}",
        env.test,
        client.describe()
    );
    let done = server.wait_exit(LONG);
    assert!(
        done.is_some_and(|s| s.success()),
        "[{}] socat receiver did not finish cleanly ({done:?}): {}",
        env.test,
        server.log_text()
    );
    let got = std::fs::metadata(&received).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        got, TRANSFER_BYTES,
        "[{}] bytes received over {tag}",
        env.test
    );
    assert_eq!(
        sha256(env, &sent),
        sha256(env, &received),
        "[{}] the file sent over inner {tag} to {dst} arrived changed",
        env.test
    );
    let _ = std::fs::remove_file(&sent);
    let _ = std::fs::remove_file(&received);
}
