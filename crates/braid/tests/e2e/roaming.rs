//! Roaming and NAT (issue 20, item 4): the responder's idea of where the
//! initiator is follows the latest authenticated datagram, whatever
//! changed (its IPv4 address, IPv4 to IPv6 outside, its listen port), and
//! behind a NAT whose UDP mappings expire after 2 s a `PersistentKeepalive
//! = 1` keeps the mapping, so the far side can still reach in.
//!
//! Roaming, a and b on one veth with IPv4 and IPv6 underlay addresses:
//!
//! ```text
//!   netns a  198.18.X.1 → .3, then 2001:db8:0:X::1   ─veth─  netns b  198.18.X.2, 2001:db8:0:X::2
//!            A (initiator, Endpoint b; listen port 51820 → 51830)      B (responder, no Endpoint)
//! ```
//!
//! NAT, a behind a masquerading router m (nftables, conntrack UDP timeouts
//! of 2 s, as in WireGuard's netns.sh):
//!
//! ```text
//!   netns a 198.18.X.2/25 ─veth─ netns m .1/25 | .129/25 (masquerade) ─veth─ netns b 198.18.X.130/25
//!           2001:db8:0:X::2/64           ::1/64 | 2001:db8:2:X::1/64 (masquerade)   2001:db8:2:X::2/64
//! ```
//!
//! Each runs with braid on both sides, with wireguard-go initiating to a
//! braid responder (the stock peer whose endpoint braid must follow), and
//! with wireguard-go on both sides as the reference.

use crate::harness::*;
use braid::toolkit::lab::wireguard_go;
use std::path::PathBuf;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "wg"];

#[derive(Clone, Debug)]
enum Impl {
    Braid,
    WireguardGo(PathBuf),
}

/// One tunnel end, held for its Drop.
#[allow(dead_code)]
enum End<'a> {
    Braid(BraidUp<'a>),
    WgGo(WgGo),
}

fn start<'a>(env: &TestEnv, ns: &'a Netns, ifname: &str, conf: &IfaceConf, imp: &Impl) -> End<'a> {
    match imp {
        Impl::Braid => {
            let mut b = BraidUp::start(env, ns, ifname, conf, BraidMode::Daemon);
            b.assert_up();
            End::Braid(b)
        }
        Impl::WireguardGo(exe) => {
            End::WgGo(WgGo::start_exe(exe, ns, ifname, conf, &env.dir).or_panic())
        }
    }
}

/// The implementations of (a, b) a case runs, or `None` when wireguard-go
/// is needed and missing (then the case is skipped, said so).
fn impls(test: &str, a_go: bool, b_go: bool) -> Option<(Impl, Impl)> {
    let mut tools = TOOLS.to_vec();
    if a_go || b_go {
        tools.push("wireguard-go");
    }
    if !preflight(test, &tools) {
        return None;
    }
    let (exe, version) = wireguard_go::reference();
    if a_go || b_go {
        eprintln!("[{test}] wireguard-go: {} ({version})", exe.display());
    }
    let pick = |go: bool| {
        if go {
            Impl::WireguardGo(exe.clone())
        } else {
            Impl::Braid
        }
    };
    Some((pick(a_go), pick(b_go)))
}

/// `wg show IFNAME endpoints` of the one peer, e.g. `198.18.11.1:51820`.
fn endpoint(ns: &Netns, ifname: &str) -> String {
    let out = ns.run("wg", &["show", ifname, "endpoints"], SHORT);
    out.stdout
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string()
}

/// Pings from a until b answers (a's datagrams carry its new source),
/// then waits until b's `wg show` names `want` as a's endpoint and checks
/// that b reaches a there (b's packets go where it thinks a is).
fn b_follows(test: &str, step: &str, env: &Sides, want: &str) {
    let (nsa, nsb) = (&env.nsa, &env.nsb);
    let (ta, tb) = (format!("198.19.{}.1", env.x), format!("198.19.{}.2", env.x));
    assert!(
        ping_until_reply(nsa, &tb, LONG),
        "{step}: a no longer reaches b"
    );
    let followed = wait_until(LONG, || endpoint(nsb, &env.ifb) == want);
    let seen = endpoint(nsb, &env.ifb);
    eprintln!("[{test}] {step}: b sees a at {seen}");
    assert!(followed, "{step}: b shows a at {seen}, not {want}");
    let p = ping(nsb, &ta, 5);
    eprintln!(
        "[{test}] {step}: b reaches a: {}/5 pings answered",
        p.received
    );
    // wireguard-go as a fails a send now and then right after its endpoint
    // went over to IPv6 or its port changed ("sendmmsg: network is
    // unreachable" in its log): it is given two losses (one was not
    // enough in a CI run of 2026-11-27: the first two pings after the
    // move to IPv6 went unanswered, the rest in 2 ms), braid none.
    let allowed = if env.a_is_braid { 0 } else { 2 };
    assert!(
        p.received + allowed >= 5,
        "{step}: b does not reach a: {}",
        p.output
    );
}

struct Sides {
    x: u8,
    a_is_braid: bool,
    nsa: Netns,
    nsb: Netns,
    ifa: String,
    ifb: String,
}

fn roaming(test: &str, a_go: bool, b_go: bool) {
    let Some((imp_a, imp_b)) = impls(test, a_go, b_go) else {
        return;
    };
    let env = TestEnv::new(test);
    let JoinedPair {
        x,
        nsa,
        nsb,
        va,
        vb,
        veth: _veth,
    } = env.joined_pair();
    for (ns, dev, host) in [(&nsa, &va, 1), (&nsb, &vb, 2)] {
        ns.ip(&[
            "addr",
            "add",
            &format!("2001:db8:0:{x:x}::{host}/64"),
            "dev",
            dev,
            "nodad",
        ])
        .expect_ok("IPv6 underlay");
    }
    // The new IPv4 address stays when the old (primary) one goes.
    nsa.run(
        "sysctl",
        &["-qw", &format!("net.ipv4.conf.{va}.promote_secondaries=1")],
        SHORT,
    )
    .expect_ok("promote_secondaries");
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let sides = Sides {
        x,
        a_is_braid: matches!(imp_a, Impl::Braid),
        nsa,
        nsb,
        ifa,
        ifb,
    };
    let _b = start(&env, &sides.nsb, &sides.ifb, &conf_b, &imp_b);
    let _a = start(&env, &sides.nsa, &sides.ifa, &conf_a, &imp_a);
    let (nsa, ifa) = (&sides.nsa, &sides.ifa);

    b_follows(
        test,
        "first contact",
        &sides,
        &format!("198.18.{x}.1:51820"),
    );

    nsa.ip(&["addr", "add", &format!("198.18.{x}.3/24"), "dev", &va])
        .expect_ok("new address");
    nsa.ip(&["addr", "del", &format!("198.18.{x}.1/24"), "dev", &va])
        .expect_ok("old address gone");
    b_follows(
        test,
        "a's IPv4 address changed",
        &sides,
        &format!("198.18.{x}.3:51820"),
    );

    nsa.run(
        "wg",
        &[
            "set",
            ifa,
            "peer",
            &kb.public,
            "endpoint",
            &format!("[2001:db8:0:{x:x}::2]:51821"),
        ],
        SHORT,
    )
    .expect_ok("wg set endpoint (IPv6)");
    b_follows(
        test,
        "a went over to IPv6",
        &sides,
        &format!("[2001:db8:0:{x:x}::1]:51820"),
    );

    nsa.run("wg", &["set", ifa, "listen-port", "51830"], SHORT)
        .expect_ok("wg set listen-port");
    b_follows(
        test,
        "a's listen port changed",
        &sides,
        &format!("[2001:db8:0:{x:x}::1]:51830"),
    );
}

#[test]
fn braid_follows_a_braid_peer_that_roams() {
    roaming("braid_follows_a_braid_peer_that_roams", false, false);
}

#[test]
fn braid_follows_a_stock_peer_that_roams() {
    roaming("braid_follows_a_stock_peer_that_roams", true, false);
}

#[test]
fn wireguard_go_roaming_reference() {
    roaming("wireguard_go_roaming_reference", true, true);
}

/// The router: forwarding on, masquerade towards b for both families,
/// UDP mappings that expire 2 s after the last datagram.
fn masquerade(m: &Netns, towards_b: &str) {
    for key in [
        "net.ipv4.ip_forward=1",
        "net.ipv6.conf.all.forwarding=1",
        "net.netfilter.nf_conntrack_udp_timeout=2",
        "net.netfilter.nf_conntrack_udp_timeout_stream=2",
    ] {
        // The conntrack keys exist once the NAT tables below load it.
        let _ = m.run("sysctl", &["-qw", key], SHORT);
    }
    for family in ["ip", "ip6"] {
        for rule in [
            format!("add table {family} nat"),
            format!(
                "add chain {family} nat post {{ type nat hook postrouting priority srcnat ; }}"
            ),
            format!("add rule {family} nat post oifname {towards_b} masquerade"),
        ] {
            m.run("nft", &[&rule], SHORT).expect_ok("nft masquerade");
        }
    }
    for key in [
        "net.netfilter.nf_conntrack_udp_timeout=2",
        "net.netfilter.nf_conntrack_udp_timeout_stream=2",
    ] {
        m.run("sysctl", &["-qw", key], SHORT)
            .expect_ok("conntrack UDP timeout");
    }
}

fn behind_nat(test: &str, a_go: bool, b_go: bool, ipv6: bool) {
    let Some((imp_a, imp_b)) = impls(test, a_go, b_go) else {
        return;
    };
    if which("nft").is_none() {
        assert!(!in_ci(), "{test}: nft missing (apt-get install nftables)");
        eprintln!("SKIPPED {test}: nft missing (apt-get install nftables)");
        return;
    }
    let env = TestEnv::new(test);
    let x = env.octet();
    let (nsa, nsm, nsb) = (env.netns("a"), env.netns("m"), env.netns("b"));
    let (vam, vma, vmb, vbm) = (
        env.ifname("vam"),
        env.ifname("vma"),
        env.ifname("vmb"),
        env.ifname("vbm"),
    );
    let _inside = Veth::new(
        &nsa,
        &vam,
        &format!("198.18.{x}.2/25"),
        &nsm,
        &vma,
        &format!("198.18.{x}.1/25"),
    )
    .or_panic();
    let _outside = Veth::new(
        &nsm,
        &vmb,
        &format!("198.18.{x}.129/25"),
        &nsb,
        &vbm,
        &format!("198.18.{x}.130/25"),
    )
    .or_panic();
    for (ns, dev, addr) in [
        (&nsa, &vam, format!("2001:db8:0:{x:x}::2/64")),
        (&nsm, &vma, format!("2001:db8:0:{x:x}::1/64")),
        (&nsm, &vmb, format!("2001:db8:2:{x:x}::1/64")),
        (&nsb, &vbm, format!("2001:db8:2:{x:x}::2/64")),
    ] {
        ns.ip(&["addr", "add", &addr, "dev", dev, "nodad"])
            .expect_ok("IPv6 underlay");
    }
    nsa.ip(&["route", "add", "default", "via", &format!("198.18.{x}.1")])
        .expect_ok("a's default route");
    nsa.ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        &format!("2001:db8:0:{x:x}::1"),
    ])
    .expect_ok("a's IPv6 default route");
    masquerade(&nsm, &vmb);
    let (b_addr, nat_addr) = if ipv6 {
        (
            format!("[2001:db8:2:{x:x}::2]"),
            format!("[2001:db8:2:{x:x}::1]"),
        )
    } else {
        (format!("198.18.{x}.130"), format!("198.18.{x}.129"))
    };
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.peers[0].endpoint = Some(format!("{b_addr}:51821"));
    conf_a.peers[0].keepalive = Some(1);
    let _b = start(&env, &nsb, &ifb, &conf_b, &imp_b);
    let _a = start(&env, &nsa, &ifa, &conf_a, &imp_a);
    let (ta, tb) = (format!("198.19.{x}.1"), format!("198.19.{x}.2"));
    assert!(ping_until_reply(&nsa, &tb, LONG), "a reaches b");
    let seen = endpoint(&nsb, &ifb);
    eprintln!("[{test}] b sees a at {seen} (the router's outside address)");
    assert!(
        seen.starts_with(&format!("{nat_addr}:")),
        "b sees a at {seen}, not behind the router's {nat_addr}"
    );
    // Idle for more than the mappings live: only keepalives (and braid's
    // path probes, between braid peers) cross the router.
    std::thread::sleep(Duration::from_secs(5));
    let p = ping(&nsb, &ta, 3);
    eprintln!(
        "[{test}] after 5 s idle (mappings live 2 s) b reaches a: {}/3 answered",
        p.received
    );
    assert_eq!(
        p.received, 3,
        "b cannot reach a behind the NAT: {}",
        p.output
    );
    // Without the keepalive the mapping goes, unless something else keeps
    // it (braid's probes between braid peers): printed, not judged.
    let no_keepalive = ["set", &ifa, "peer", &kb.public, "persistent-keepalive", "0"];
    nsa.run("wg", &no_keepalive, SHORT)
        .expect_ok("keepalive off");
    std::thread::sleep(Duration::from_secs(5));
    let p = nsb.run("ping", &["-n", "-c", "1", "-W", "2", &ta], SHORT);
    eprintln!(
        "[{test}] keepalive off, 5 s idle: b reaches a: {}",
        if p.ok() {
            "yes"
        } else {
            "no (the mapping expired)"
        }
    );
}

#[test]
fn nat_keepalive_keeps_the_mapping_braid() {
    behind_nat("nat_keepalive_keeps_the_mapping_braid", false, false, false);
}

#[test]
fn nat_keepalive_keeps_the_mapping_braid_ipv6() {
    behind_nat(
        "nat_keepalive_keeps_the_mapping_braid_ipv6",
        false,
        false,
        true,
    );
}

/// braid keeps the mapping to a stock peer with its keepalives alone (it
/// sends no path probes there).
#[test]
fn nat_keepalive_keeps_the_mapping_braid_initiator_stock_responder() {
    behind_nat(
        "nat_keepalive_keeps_the_mapping_braid_initiator_stock_responder",
        false,
        true,
        false,
    );
}

#[test]
fn nat_keepalive_keeps_the_mapping_stock_initiator_braid_responder() {
    behind_nat(
        "nat_keepalive_keeps_the_mapping_stock_initiator_braid_responder",
        true,
        false,
        false,
    );
}

#[test]
fn wireguard_go_nat_reference() {
    behind_nat("wireguard_go_nat_reference", true, true, false);
    behind_nat("wireguard_go_nat_reference", true, true, true);
}
