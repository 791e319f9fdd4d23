//! Cryptokey routing changed on the fly (issue 20, item 5): a more
//! specific AllowedIPs given to a second peer takes that traffic away
//! from the first with the very next packet, and removing it gives the
//! traffic back at once, as in Linux WireGuard and wireguard-go.
//!
//! ```text
//!   netns b: <P>b 198.19.X.2/24        netns a: <P>a 198.19.X.1/24       netns c: <P>c 198.19.X.3/24
//!            + 198.19.X.50, ::50  ─veth─  peer B: 198.19.X.0/24, ::/64 ─veth─  + 198.19.X.50, ::50
//!                                         peer C: .3/32, ::3/128 (+ .50/32, ::50/128 on the fly)
//! ```
//!
//! Both B and C own the address .50 (and ::50), so a ping to it is
//! answered by whichever peer A's table sends it to; which one it was is
//! read from the packets each TUN received. The same steps run with
//! wireguard-go in all three places as the reference.

use crate::harness::*;

const TOOLS: &[&str] = &["ip", "ping", "wg"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Impl {
    Braid,
    WireguardGo,
}

/// One tunnel end, held for its Drop.
#[allow(dead_code)]
enum End<'a> {
    Braid(BraidUp<'a>),
    WgGo(WgGo),
}

fn start<'a>(env: &TestEnv, ns: &'a Netns, ifname: &str, conf: &IfaceConf, imp: Impl) -> End<'a> {
    match imp {
        Impl::Braid => {
            let mut b = BraidUp::start(env, ns, ifname, conf, BraidMode::Daemon);
            b.assert_up();
            End::Braid(b)
        }
        Impl::WireguardGo => End::WgGo(wg_go(env, ns, ifname, conf)),
    }
}

/// Packets the interface handed to the kernel so far (its RX counter).
fn tun_rx_packets(ns: &Netns, ifname: &str) -> u64 {
    let out = ns.ip(&["-s", "-j", "link", "show", "dev", ifname]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    v[0]["stats64"]["rx"]["packets"].as_u64().unwrap_or(0)
}

/// One echo request to `dst` from a: answered, and by which side (the
/// TUN whose RX counter moved). Returns ("b" or "c", its packet count).
fn who_answers(nsa: &Netns, sides: [(&str, &Netns, &str); 2], dst: &str) -> (&'static str, u64) {
    let before: Vec<u64> = sides.iter().map(|s| tun_rx_packets(s.1, s.2)).collect();
    let p = ping_counted(&nsa.name, &["-W", "3"], dst, 1);
    assert_eq!(
        p.received, 1,
        "the ping to {dst} was not answered:\n{}",
        p.output
    );
    let after: Vec<u64> = sides.iter().map(|s| tun_rx_packets(s.1, s.2)).collect();
    let moved: Vec<usize> = (0..2).filter(|&i| after[i] > before[i]).collect();
    assert_eq!(
        moved.len(),
        1,
        "exactly one of b and c should have received the echo request to {dst}: \
         before {before:?}, after {after:?}"
    );
    let i = moved[0];
    (if i == 0 { "b" } else { "c" }, after[i] - before[i])
}

fn routing_changes_at_once(test: &str, imp: Impl) {
    let mut tools = TOOLS.to_vec();
    if imp == Impl::WireguardGo {
        tools.push("wireguard-go");
    }
    if !preflight(test, &tools) {
        return;
    }
    let env = TestEnv::new(test);
    let x = env.octet();
    let (nsa, nsb, nsc) = (env.netns("a"), env.netns("b"), env.netns("c"));
    let (vab, vba, vac, vca) = (
        env.ifname("vab"),
        env.ifname("vba"),
        env.ifname("vac"),
        env.ifname("vca"),
    );
    let _veth_b = Veth::new(
        &nsa,
        &vab,
        &format!("198.18.{x}.1/25"),
        &nsb,
        &vba,
        &format!("198.18.{x}.2/25"),
    )
    .or_panic();
    let _veth_c = Veth::new(
        &nsa,
        &vac,
        &format!("198.18.{x}.129/25"),
        &nsc,
        &vca,
        &format!("198.18.{x}.130/25"),
    )
    .or_panic();
    let (ifa, ifb, ifc) = (env.ifname("a"), env.ifname("b"), env.ifname("c"));
    let (ka, kb, kc) = (wg_keys(), wg_keys(), wg_keys());
    let v6 = |host: &str| format!("2001:db8:1:{x:x}::{host}");
    let peer_a = |ka: &Keys| PeerConf {
        public_key: ka.public.clone(),
        allowed_ips: vec![format!("198.19.{x}.1/32"), format!("{}/128", v6("1"))],
        ..Default::default()
    };
    let conf_b = IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(51821),
        address: vec![
            format!("198.19.{x}.2/24"),
            format!("198.19.{x}.50/32"),
            format!("{}/64", v6("2")),
            format!("{}/128", v6("50")),
        ],
        peers: vec![peer_a(&ka)],
        ..Default::default()
    };
    let conf_c = IfaceConf {
        private_key: kc.private.clone(),
        listen_port: Some(51822),
        address: vec![
            format!("198.19.{x}.3/24"),
            format!("198.19.{x}.50/32"),
            format!("{}/64", v6("3")),
            format!("{}/128", v6("50")),
        ],
        peers: vec![peer_a(&ka)],
        ..Default::default()
    };
    let conf_a = IfaceConf {
        private_key: ka.private.clone(),
        listen_port: Some(51820),
        address: vec![format!("198.19.{x}.1/24"), format!("{}/64", v6("1"))],
        peers: vec![
            PeerConf {
                public_key: kb.public.clone(),
                allowed_ips: vec![format!("198.19.{x}.0/24"), format!("{}/64", v6(""))],
                endpoint: Some(format!("198.18.{x}.2:51821")),
                ..Default::default()
            },
            PeerConf {
                public_key: kc.public.clone(),
                allowed_ips: vec![format!("198.19.{x}.3/32"), format!("{}/128", v6("3"))],
                endpoint: Some(format!("198.18.{x}.130:51822")),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let _b = start(&env, &nsb, &ifb, &conf_b, imp);
    let _c = start(&env, &nsc, &ifc, &conf_c, imp);
    let _a = start(&env, &nsa, &ifa, &conf_a, imp);
    // Sessions with both first, so what follows measures routing alone.
    for dst in [format!("198.19.{x}.2"), format!("198.19.{x}.3")] {
        assert!(ping_until_reply(&nsa, &dst, LONG), "no tunnel to {dst}");
    }
    let sides = [("b", &nsb, ifb.as_str()), ("c", &nsc, ifc.as_str())];
    let c_only = format!("198.19.{x}.3/32,{}/128", v6("3"));
    let c_with_50 = format!("{c_only},198.19.{x}.50/32,{}/128", v6("50"));
    for dst in [format!("198.19.{x}.50"), v6("50")] {
        let (side, _) = who_answers(&nsa, sides, &dst);
        assert_eq!(side, "b", "{dst} should start out with b (the /24 or /64)");
        nsa.run(
            "wg",
            &["set", &ifa, "peer", &kc.public, "allowed-ips", &c_with_50],
            SHORT,
        )
        .expect_ok("wg set: the more specific prefix to c");
        let (side, n) = who_answers(&nsa, sides, &dst);
        assert_eq!(
            side, "c",
            "{dst}: the next packet after wg set must go to c"
        );
        eprintln!("[{test}] {dst}: first packet after `wg set` went to c ({n} packet)");
        let p = ping(&nsa, &dst, 3);
        assert_eq!(p.received, 3, "{dst} via c: {}", p.output);
        nsa.run(
            "wg",
            &["set", &ifa, "peer", &kc.public, "allowed-ips", &c_only],
            SHORT,
        )
        .expect_ok("wg set: the prefix taken back from c");
        let (side, _) = who_answers(&nsa, sides, &dst);
        assert_eq!(
            side, "b",
            "{dst}: once c loses the prefix the next packet goes to b"
        );
    }
    let show = nsa
        .run("wg", &["show", &ifa, "allowed-ips"], SHORT)
        .expect_ok("wg show allowed-ips");
    eprintln!(
        "[{test}] wg show {ifa} allowed-ips at the end:\n{}",
        show.stdout
    );
    assert!(
        !show.stdout.contains(&format!("198.19.{x}.50/32")),
        "{}",
        show.stdout
    );
}

#[test]
fn a_more_specific_allowed_ip_on_a_second_peer_takes_the_next_packet() {
    routing_changes_at_once(
        "a_more_specific_allowed_ip_on_a_second_peer_takes_the_next_packet",
        Impl::Braid,
    );
}

/// The reference: wireguard-go in a, b and c, the same steps.
#[test]
fn wireguard_go_more_specific_allowed_ip_reference() {
    routing_changes_at_once(
        "wireguard_go_more_specific_allowed_ip_reference",
        Impl::WireguardGo,
    );
}
