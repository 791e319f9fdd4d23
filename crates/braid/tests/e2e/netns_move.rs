//! An interface moved to another network namespace keeps working (issue
//! 20, item 1; docs/netns.md): the way wireguard.com/netns gives a
//! container its tunnel. The daemon and its UDP socket stay in `a`, the
//! interface goes to `c`:
//!
//! ```text
//!   netns c                netns a                       netns b
//!   <P>a (TUN)  <- fd --   braid daemon, UDP :51820 ==veth== braid <P>b
//!   198.19.X.1/24                                             198.19.X.2/24
//! ```
//!
//! Traffic from `c` goes through the tunnel; MTU changes and up/down made
//! in `c` are followed; moving it back to `a` works; deleting it in `c`
//! stops the daemon. The same steps run against wireguard-go as the
//! reference.

use crate::harness::*;
use serde_json::Value;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "wg", "iperf3"];

/// `braid mtu IFNAME --json` in `ns` (the UAPI socket is found by name in
/// /var/run/wireguard, whatever the namespace).
fn tunnel_mtu(ns: &Netns, ifname: &str) -> u64 {
    let out = ns.run(BRAID, &["mtu", ifname, "--json"], SHORT);
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    v["tunnel_mtu"].as_u64().unwrap_or(0)
}

/// Gives `ifname` in `ns` its tunnel address and brings it up (a move
/// takes both away).
fn configure(ns: &Netns, ifname: &str, x: u8) {
    ns.ip(&["addr", "add", &format!("198.19.{x}.1/24"), "dev", ifname])
        .expect_ok("tunnel address");
    ns.ip(&["link", "set", "dev", ifname, "up"])
        .expect_ok("link up");
}

fn move_to(from: &Netns, ifname: &str, to: &Netns) {
    from.ip(&["link", "set", "dev", ifname, "netns", &to.name])
        .expect_ok("ip link set netns");
    assert!(
        wait_until(SHORT, || to.has_link(ifname)),
        "{ifname} did not arrive in {}",
        to.name
    );
}

/// A short TCP transfer from `ns` to b's tunnel address.
fn tcp_transfer(env: &TestEnv, ns: &Netns, nsb: &Netns, x: u8) -> f64 {
    let _lock = iperf_lock();
    iperf3(env, ns, nsb, &format!("198.19.{x}.2"), 2, false).unwrap_or_else(|e| panic!("{e}"))
}

/// One DF ping of `size` bytes of payload from `ns` to b's tunnel address.
fn df_ping(ns: &Netns, x: u8, size: u32) -> PingResult {
    let s = size.to_string();
    ping_counted(
        &ns.name,
        &["-M", "do", "-s", &s, "-i", "0.2"],
        &format!("198.19.{x}.2"),
        3,
    )
}

#[test]
fn moved_interface_keeps_working_follows_mtu_moves_back_and_dies_with_deletion() {
    let test = "moved_interface_keeps_working_follows_mtu_moves_back_and_dies_with_deletion";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let nsc = env.netns("c");
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let peer = format!("198.19.{x}.2");
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    assert!(
        ping_until_reply(&nsa, &peer, LONG),
        "no tunnel before the move"
    );

    // Into c: the UDP socket stays in a, the TUN works in c.
    move_to(&nsa, &ifa, &nsc);
    configure(&nsc, &ifa, x);
    assert!(
        ping_until_reply(&nsc, &peer, LONG),
        "no ping from c:\n{}",
        a.log_text()
    );
    let p = ping(&nsc, &peer, 5);
    assert_eq!(p.received, 5, "{}", p.output);
    let bps = tcp_transfer(&env, &nsc, &nsb, x);
    eprintln!(
        "[{test}] TCP from c through the tunnel: {:.0} Mbit/s",
        bps / 1e6
    );
    assert!(bps > 0.0);
    // Found from c, by the socket's name in /var/run/wireguard.
    let show = nsc.run("wg", &["show", &ifa], SHORT);
    assert!(show.ok(), "wg show from c: {}", show.describe());
    let listed = nsc.run("wg", &["show", "interfaces"], SHORT);
    assert!(listed.stdout.contains(&ifa), "{}", listed.describe());
    let bshow = nsc.run(BRAID, &["show", &ifa], SHORT);
    assert!(bshow.ok(), "braid show from c: {}", bshow.describe());
    let child = a.child.as_mut().expect("foreground braid");
    assert!(child.running(), "braid died:\n{}", child.log_text());

    // The MTU set in c is followed (1300: ping with DF at 1300 - 28).
    nsc.ip(&["link", "set", "dev", &ifa, "mtu", "1300"])
        .expect_ok("mtu 1300");
    assert!(
        wait_until(LONG, || tunnel_mtu(&nsa, &ifa) == 1300),
        "braid did not follow the MTU set in c (shows {}):\n{}",
        tunnel_mtu(&nsa, &ifa),
        a.log_text()
    );
    let p = df_ping(&nsc, x, 1300 - 28);
    assert_eq!(p.received, 3, "DF ping at the new MTU: {}", p.output);

    // Down and up in c.
    nsc.ip(&["link", "set", "dev", &ifa, "down"])
        .expect_ok("down");
    assert!(
        wait_until(LONG, || a
            .log_text()
            .contains(&format!("interface {ifa} is down"))),
        "down in c not seen:\n{}",
        a.log_text()
    );
    nsc.ip(&["link", "set", "dev", &ifa, "up"]).expect_ok("up");
    assert!(ping_until_reply(&nsc, &peer, LONG), "no ping after down/up");

    // Back to a: works there again.
    move_to(&nsc, &ifa, &nsa);
    configure(&nsa, &ifa, x);
    assert!(
        ping_until_reply(&nsa, &peer, LONG),
        "no ping after moving back:\n{}",
        a.log_text()
    );
    let bps = tcp_transfer(&env, &nsa, &nsb, x);
    assert!(bps > 0.0);

    // Into c once more and deleted there: the daemon stops.
    move_to(&nsa, &ifa, &nsc);
    configure(&nsc, &ifa, x);
    assert!(ping_until_reply(&nsc, &peer, LONG), "no ping from c again");
    nsc.ip(&["link", "del", "dev", &ifa])
        .expect_ok("ip link del in c");
    let child = a.child.as_mut().expect("foreground braid");
    assert!(
        child.wait_exit(Duration::from_secs(10)).is_some(),
        "the daemon outlived its interface:\n{}",
        child.log_text()
    );
    let log = a.log_text();
    assert!(log.contains("interface was removed"), "{log}");
    assert!(log.contains("moved to another network namespace"), "{log}");
    assert!(
        log.contains("back in the daemon's network namespace"),
        "{log}"
    );
    assert!(!sock_path(&ifa).exists(), "UAPI socket left behind");
    assert!(b.down().ok());
}

/// The namespace the interface moved to goes away (`ip netns del`; the
/// kernel deletes a TUN with its namespace): the daemon stops, as after
/// `ip link del`.
#[test]
fn namespace_deleted_under_a_moved_interface_stops_the_daemon() {
    deleted_namespace_stops_the_daemon(
        "namespace_deleted_under_a_moved_interface_stops_the_daemon",
        &[],
    );
}

/// The same with a multi-queue TUN: every queue's thread sees the end.
#[test]
fn namespace_deleted_under_a_moved_multi_queue_interface_stops_the_daemon() {
    deleted_namespace_stops_the_daemon(
        "namespace_deleted_under_a_moved_multi_queue_interface_stops_the_daemon",
        &["Queues = 3"],
    );
}

fn deleted_namespace_stops_the_daemon(test: &str, braid_lines: &[&str]) {
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.braid_lines = braid_lines.iter().map(|l| l.to_string()).collect();
    let peer = format!("198.19.{x}.2");
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    {
        let nsc = env.netns("c");
        move_to(&nsa, &ifa, &nsc);
        configure(&nsc, &ifa, x);
        assert!(ping_until_reply(&nsc, &peer, LONG), "no ping from c");
        // Dropping the guard deletes the namespace.
    }
    let child = a.child.as_mut().expect("foreground braid");
    assert!(
        child.wait_exit(Duration::from_secs(10)).is_some(),
        "the daemon outlived its interface's namespace:\n{}",
        child.log_text()
    );
    let log = a.log_text();
    assert!(log.contains("interface was removed"), "{log}");
    assert!(b.down().ok());
}

/// The reference: wireguard-go through the same steps (into c, ping and
/// TCP from c, MTU, back to a, deleted in c).
#[test]
fn wireguard_go_moved_interface_reference() {
    let test = "wireguard_go_moved_interface_reference";
    let mut tools = TOOLS.to_vec();
    tools.push("wireguard-go");
    if !preflight(test, &tools) {
        return;
    }
    let env = TestEnv::new(test);
    let nsc = env.netns("c");
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let peer = format!("198.19.{x}.2");
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let _a = wg_go(&env, &nsa, &ifa, &conf_a);
    assert!(
        ping_until_reply(&nsa, &peer, LONG),
        "no tunnel before the move"
    );

    move_to(&nsa, &ifa, &nsc);
    configure(&nsc, &ifa, x);
    assert!(ping_until_reply(&nsc, &peer, LONG), "no ping from c");
    let bps = tcp_transfer(&env, &nsc, &nsb, x);
    eprintln!(
        "[{test}] TCP from c through wireguard-go: {:.0} Mbit/s",
        bps / 1e6
    );
    nsc.ip(&["link", "set", "dev", &ifa, "mtu", "1300"])
        .expect_ok("mtu 1300");
    let p = df_ping(&nsc, x, 1300 - 28);
    assert_eq!(p.received, 3, "DF ping at the new MTU: {}", p.output);
    move_to(&nsc, &ifa, &nsa);
    configure(&nsa, &ifa, x);
    assert!(ping_until_reply(&nsa, &peer, LONG), "no ping back in a");
    move_to(&nsa, &ifa, &nsc);
    nsc.ip(&["link", "del", "dev", &ifa])
        .expect_ok("ip link del in c");
    // wireguard-go's exit is seen as its UAPI socket going away.
    let gone = wait_until(Duration::from_secs(10), || !sock_path(&ifa).exists());
    eprintln!("[{test}] wireguard-go gone after deletion in c: {gone}");
    assert!(b.down().ok());
}

/// The issue's own steps: `braid NAME` configured by the stock `wg`
/// (`wg setconf`), moved to c before any address, used from c for longer
/// than a housekeeping round, then `braid down NAME` run in c stops it.
#[test]
fn braid_name_set_up_by_wg_works_from_another_namespace_and_goes_down_from_there() {
    let test = "braid_name_set_up_by_wg_works_from_another_namespace_and_goes_down_from_there";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let nsc = env.netns("c");
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let peer = format!("198.19.{x}.2");
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut cmd = nsa.cmd(BRAID);
    cmd.args([ifa.as_str(), "--foreground"]);
    let log = env.path(&format!("{ifa}.log"));
    let mut child = ChildGuard::spawn(cmd, &format!("braid {ifa}"), &log).or_panic();
    assert!(
        wait_until(LONG, || !child.running() || sock_path(&ifa).exists()),
        "braid {ifa} did not come up:\n{}",
        child.log_text()
    );
    let setconf = env.write(&format!("{ifa}.setconf"), &conf_a.wg_setconf());
    nsa.run("wg", &["setconf", &ifa, &setconf.to_string_lossy()], SHORT)
        .expect_ok("wg setconf");

    move_to(&nsa, &ifa, &nsc);
    configure(&nsc, &ifa, x);
    assert!(
        ping_until_reply(&nsc, &peer, LONG),
        "no ping from c:\n{}",
        child.log_text()
    );
    // 10 pings 0.2 s apart: several housekeeping rounds.
    let p = ping(&nsc, &peer, 10);
    assert_eq!(p.received, 10, "{}", p.output);
    assert!(child.running(), "braid died:\n{}", child.log_text());
    let bps = tcp_transfer(&env, &nsc, &nsb, x);
    assert!(bps > 0.0);
    let show = nsc.run("wg", &["show", &ifa], SHORT);
    assert!(show.ok(), "{}", show.describe());
    assert!(show.stdout.contains("latest handshake"), "{}", show.stdout);

    let down = nsc.run(BRAID, &["down", &ifa], LONG);
    assert!(down.ok(), "braid down from c: {}", down.describe());
    assert!(
        child.wait_exit(Duration::from_secs(10)).is_some(),
        "braid down from c did not stop the daemon:\n{}",
        child.log_text()
    );
    assert!(
        wait_until(SHORT, || !nsc.has_link(&ifa)),
        "the interface outlived its daemon"
    );
    assert!(b.down().ok());
}
