//! Large userspace-API requests (issue 20 item 6), the shapes WireGuard's
//! own netns.sh sets: one peer with 130,560 AllowedIPs (every IPv4 /16
//! a.b.0.0/16 for a in 1–255, b in 0–255, and as many IPv6 /128s), 40
//! peers with 52 /16s each, and 30 peers of which only the last has
//! AllowedIPs. `wg setconf` takes each, and `wg show NAME allowed-ips` and
//! `wg showconf NAME` give back exactly what was set; `wg show` of an
//! interface that does not exist fails. braid (`braid NAME`, configured by
//! the stock `wg`) and wireguard-go as the reference run the same steps.
//!
//! The addresses are configuration only: the interfaces carry no traffic
//! and no route is installed for them (`wg setconf` sets none).

use crate::harness::*;
use braid::cidr::IpCidr;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const TOOLS: &[&str] = &["ip", "wg"];

/// Bound on one `wg` call with 130,000 AllowedIPs in a debug build.
const WG_TIMEOUT: Duration = Duration::from_secs(120);

/// What a configuration sets: AllowedIPs by peer public key (base64).
type Expected = BTreeMap<String, BTreeSet<IpCidr>>;

fn cidr(s: &str) -> IpCidr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e:?}"))
}

/// A `wg setconf` file with a private key and `peers` (key, AllowedIPs).
fn setconf_text(peers: &[(String, Vec<String>)]) -> String {
    let mut text = format!("[Interface]\nPrivateKey = {}\n", genkey());
    for (public, ips) in peers {
        text.push_str(&format!("\n[Peer]\nPublicKey = {public}\n"));
        for ip in ips {
            text.push_str(&format!("AllowedIPs = {ip}\n"));
        }
    }
    text
}

fn expected(peers: &[(String, Vec<String>)]) -> Expected {
    peers
        .iter()
        .map(|(k, ips)| (k.clone(), ips.iter().map(|s| cidr(s)).collect()))
        .collect()
}

/// `wg show NAME allowed-ips`: one line per peer, "KEY\tIP IP …" or
/// "KEY\t(none)".
fn shown_allowed_ips(text: &str) -> Expected {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (key, ips) = l.split_once('\t').unwrap_or((l, ""));
            let ips = ips
                .split_whitespace()
                .filter(|s| *s != "(none)")
                .map(cidr)
                .collect();
            (key.to_string(), ips)
        })
        .collect()
}

/// `wg showconf NAME`: each [Peer]'s PublicKey and AllowedIPs (comma
/// separated, on one or more lines).
fn showconf_allowed_ips(text: &str) -> Expected {
    let mut peers = Expected::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key.trim() {
            "PublicKey" => {
                let k = value.trim().to_string();
                peers.insert(k.clone(), BTreeSet::new());
                current = Some(k);
            }
            "AllowedIPs" => {
                let peer = current.as_ref().expect("AllowedIPs after a PublicKey");
                let set = peers.get_mut(peer).expect("inserted above");
                set.extend(value.split(',').map(|s| cidr(s.trim())));
            }
            _ => {}
        }
    }
    peers
}

/// `wg setconf`, then both listings, each compared with what was set.
fn round_trip(
    ns: &Netns,
    ifname: &str,
    env: &TestEnv,
    what: &str,
    peers: &[(String, Vec<String>)],
) {
    let file = env.write(
        &format!("{ifname}-{}.conf", what.replace(' ', "-")),
        &setconf_text(peers),
    );
    let start = Instant::now();
    ns.run(
        "wg",
        &["setconf", ifname, &file.to_string_lossy()],
        WG_TIMEOUT,
    )
    .expect_ok(&format!("wg setconf ({what})"));
    let setconf_s = start.elapsed().as_secs_f64();
    let want = expected(peers);
    let start = Instant::now();
    let shown = ns.run("wg", &["show", ifname, "allowed-ips"], WG_TIMEOUT);
    let show_s = start.elapsed().as_secs_f64();
    assert!(shown.ok(), "wg show allowed-ips ({what}): {}", shown.stderr);
    let got = shown_allowed_ips(&shown.stdout);
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: peers in wg show allowed-ips"
    );
    for (key, ips) in &want {
        let listed = got
            .get(key)
            .unwrap_or_else(|| panic!("{what}: {key} not listed"));
        assert!(
            listed == ips,
            "{what}: wg show lists {} AllowedIPs of {key}, {} were set",
            listed.len(),
            ips.len()
        );
    }
    let conf = ns.run("wg", &["showconf", ifname], WG_TIMEOUT);
    assert!(conf.ok(), "wg showconf ({what}): {}", conf.stderr);
    let got = showconf_allowed_ips(&conf.stdout);
    // Not printed on failure: showconf holds the private key.
    assert_eq!(got.len(), want.len(), "{what}: peers in wg showconf");
    for (key, ips) in &want {
        let listed = got
            .get(key)
            .unwrap_or_else(|| panic!("{what}: {key} not in showconf"));
        assert!(
            listed == ips,
            "{what}: wg showconf has {} AllowedIPs of {key}, {} were set",
            listed.len(),
            ips.len()
        );
    }
    eprintln!(
        "[{}] {what}: wg setconf {setconf_s:.2} s, wg show allowed-ips {show_s:.2} s",
        env.test
    );
}

/// The three configurations and the missing interface, on `ifname`.
fn large_requests(env: &TestEnv, ns: &Netns, ifname: &str) {
    // One peer with 130,560 AllowedIPs: every a.b.0.0/16 and as many /128s.
    let mut many = Vec::with_capacity(2 * 255 * 256);
    for a in 1..=255u32 {
        for b in 0..=255u32 {
            many.push(format!("{a}.{b}.0.0/16"));
            many.push(format!("2001:db8::{a:x}:{b:x}/128"));
        }
    }
    round_trip(
        ns,
        ifname,
        env,
        "one peer with 130560 allowed ips",
        &[(wg_keys().public, many)],
    );

    // 40 peers with 52 /16s each.
    let forty: Vec<(String, Vec<String>)> = (1..=40)
        .map(|a| {
            (
                wg_keys().public,
                (1..=52).map(|b| format!("{a}.{b}.0.0/16")).collect(),
            )
        })
        .collect();
    round_trip(ns, ifname, env, "40 peers with 52 allowed ips each", &forty);

    // 30 peers, only the last with AllowedIPs.
    let mut thirty: Vec<(String, Vec<String>)> =
        (0..29).map(|_| (wg_keys().public, Vec::new())).collect();
    thirty.push((
        wg_keys().public,
        vec!["198.19.2.3/32".into(), "2001:db8::255/128".into()],
    ));
    round_trip(
        ns,
        ifname,
        env,
        "30 peers of which the last has allowed ips",
        &thirty,
    );

    let missing = format!("{ifname}x");
    let out = ns.run("wg", &["show", &missing], SHORT);
    assert!(
        !out.ok(),
        "wg show of an interface that does not exist succeeded: {}",
        out.stdout
    );
}

/// Starts `program args` in `ns` and waits for the UAPI socket of `ifname`.
fn start(env: &TestEnv, ns: &Netns, ifname: &str, program: &str, args: &[&str]) -> ChildGuard {
    let mut cmd = ns.cmd(program);
    cmd.args(args);
    let log = env.path(&format!("{ifname}.log"));
    let mut child = ChildGuard::spawn(cmd, &format!("{program} {ifname}"), &log).or_panic();
    assert!(
        wait_until(LONG, || !child.running() || sock_path(ifname).exists()),
        "{program} {ifname} did not come up:\n{}",
        child.log_text()
    );
    child
}

#[test]
fn large_uapi_requests_round_trip_through_braid() {
    let test = "large_uapi_requests_round_trip_through_braid";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let ns = env.netns("a");
    let ifname = env.ifname("a");
    let mut child = start(&env, &ns, &ifname, BRAID, &[&ifname, "--foreground"]);
    large_requests(&env, &ns, &ifname);
    assert!(child.running(), "braid died:\n{}", child.log_text());
}

#[test]
fn large_uapi_requests_round_trip_through_wireguard_go_reference() {
    let test = "large_uapi_requests_round_trip_through_wireguard_go_reference";
    let mut tools = TOOLS.to_vec();
    tools.push("wireguard-go");
    if !preflight(test, &tools) {
        return;
    }
    let env = TestEnv::new(test);
    let ns = env.netns("a");
    let ifname = env.ifname("a");
    let mut child = start(&env, &ns, &ifname, "wireguard-go", &["-f", &ifname]);
    large_requests(&env, &ns, &ifname);
    assert!(child.running(), "wireguard-go died:\n{}", child.log_text());
}
