//! A full tunnel fails closed (issue 21 item 4): when its daemon dies by
//! SIGKILL, what the tunnel carried is refused instead of leaving through
//! the underlay in the clear; the next `braid up` repairs the leftovers
//! without duplicating a rule, and `braid down` removes everything.
//!
//! ```text
//!  netns a: braid (AllowedIPs 0.0.0.0/0, ::/0)        netns b: braid
//!    va 198.18.X.1/24, 2001:db8:0:X::1/64 ==== vb 198.18.X.2/24, 2001:db8:0:X::2/64
//!    main: default via 198.18.X.2 / 2001:db8:0:X::2    lo: 198.18.250.1, 2001:db8:2:X::1
//! ```
//! a's main table reaches the addresses behind b in the clear (its default
//! routes point at b); while the tunnel is up, its rules send them through
//! the tunnel; once the daemon is killed, nothing may reach b unencrypted:
//! b's ICMP echo counters must not move.

use crate::harness::*;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "wg"];
const TABLE: &str = "51820";

/// ICMP and ICMPv6 echo requests `ns` has received so far.
fn echo_requests(ns: &Netns) -> (u64, u64) {
    let snmp = ns.run("cat", &["/proc/net/snmp"], SHORT).stdout;
    let mut icmp = snmp.lines().filter(|l| l.starts_with("Icmp:"));
    let (names, values) = (icmp.next().unwrap_or(""), icmp.next().unwrap_or(""));
    let v4 = names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "InEchos")
        .and_then(|(_, v)| v.parse().ok())
        .expect("Icmp InEchos in /proc/net/snmp");
    let snmp6 = ns.run("cat", &["/proc/net/snmp6"], SHORT).stdout;
    let v6 = snmp6
        .lines()
        .find_map(|l| l.strip_prefix("Icmp6InEchos"))
        .and_then(|v| v.trim().parse().ok())
        .expect("Icmp6InEchos in /proc/net/snmp6");
    (v4, v6)
}

/// `ip -4 rule` / `ip -6 rule` in `ns`.
fn rules(ns: &Netns, fam: &str) -> String {
    ns.ip(&[fam, "rule"]).expect_ok("ip rule").stdout
}

/// The routes of the full tunnel's table (empty if the table is gone).
fn table(ns: &Netns, fam: &str) -> String {
    ns.ip(&[fam, "route", "show", "table", TABLE]).stdout
}

fn count(text: &str, what: &str) -> usize {
    text.lines().filter(|l| l.contains(what)).count()
}

#[test]
fn killed_full_tunnel_fails_closed_and_next_up_repairs() {
    let test = "killed_full_tunnel_fails_closed_and_next_up_repairs";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let JoinedPair {
        x,
        nsa,
        nsb,
        va,
        vb,
        veth: _veth,
    } = env.joined_pair();
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let under6 = |host: u8| format!("2001:db8:0:{x:x}::{host}");
    let (behind4, behind6) = ("198.18.250.1".to_string(), format!("2001:db8:2:{x:x}::1"));
    nsa.ip(&[
        "addr",
        "add",
        &format!("{}/64", under6(1)),
        "dev",
        &va,
        "nodad",
    ])
    .expect_ok("a's IPv6 underlay");
    nsb.ip(&[
        "addr",
        "add",
        &format!("{}/64", under6(2)),
        "dev",
        &vb,
        "nodad",
    ])
    .expect_ok("b's IPv6 underlay");
    nsb.ip(&["addr", "add", &format!("{behind4}/32"), "dev", "lo"])
        .expect_ok("IPv4 address behind b");
    nsb.ip(&["addr", "add", &format!("{behind6}/128"), "dev", "lo"])
        .expect_ok("IPv6 address behind b");
    // a's underlay leads to both in the clear.
    nsa.ip(&["route", "add", "default", "via", &format!("198.18.{x}.2")])
        .expect_ok("a's IPv4 default route");
    nsa.ip(&["-6", "route", "add", "default", "via", &under6(2)])
        .expect_ok("a's IPv6 default route");

    let (mut conf_a, mut conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.address.push(format!("2001:db8:1:{x:x}::1/64"));
    conf_a.peers[0].allowed_ips = vec!["0.0.0.0/0".into(), "::/0".into()];
    conf_b.address.push(format!("2001:db8:1:{x:x}::2/64"));
    conf_b.peers[0]
        .allowed_ips
        .push(format!("2001:db8:1:{x:x}::1/128"));
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    assert!(
        ping_until_reply(&nsa, &behind4, Duration::from_secs(20)),
        "no IPv4 reply through the full tunnel:\n{}",
        a.log_text()
    );
    for fam in ["-4", "-6"] {
        let t = table(&nsa, fam);
        assert!(t.contains(&format!("default dev {ifa}")), "{fam}: {t}");
        assert!(t.contains("unreachable default"), "{fam}: {t}");
    }

    // SIGKILL: no clean-up of any kind in the daemon.
    let pid = a.child.as_ref().expect("foreground child").pid();
    // SAFETY: kill(2) on the PID of the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    a.child
        .as_mut()
        .expect("foreground child")
        .wait_exit(Duration::from_secs(10));
    assert!(
        wait_until(LONG, || !nsa.has_link(&ifa)),
        "the TUN outlived its daemon"
    );
    let mut left = String::new();
    for fam in ["-4", "-6"] {
        let r = rules(&nsa, fam);
        assert_eq!(count(&r, &format!("lookup {TABLE}")), 1, "{fam}:\n{r}");
        left += &format!(
            "{fam} rules:\n{r}{fam} table {TABLE}:\n{}",
            table(&nsa, fam)
        );
    }
    eprintln!("[{test}] after SIGKILL:\n{left}");

    // What the tunnel carried is refused, and nothing reaches b in the clear.
    let echoes = echo_requests(&nsb);
    let p4 = ping(&nsa, &behind4, 3);
    let p6 = ping_counted(&nsa, &["-6", "-i", "0.2"], &behind6, 3);
    eprintln!(
        "[{test}] pings after SIGKILL:\n{}\n{}",
        p4.output.trim(),
        p6.output.trim()
    );
    assert_eq!(p4.received, 0, "IPv4 left in the clear:\n{}", p4.output);
    assert_eq!(p6.received, 0, "IPv6 left in the clear:\n{}", p6.output);
    for p in [&p4, &p6] {
        assert!(
            p.output.contains("unreachable") || p.output.contains("No route to host"),
            "ping was not refused locally:\n{}",
            p.output
        );
    }
    assert_eq!(
        echo_requests(&nsb),
        echoes,
        "echo requests reached b unencrypted"
    );
    // The directly connected underlay is still reachable (main table).
    let p = ping(&nsa, &format!("198.18.{x}.2"), 2);
    assert_eq!(p.received, 2, "{}", p.output);
    drop(a);

    // `braid up` again: the tunnel carries traffic, one rule pair per family.
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    assert!(
        ping_until_reply(&nsa, &behind4, Duration::from_secs(20)),
        "no IPv4 reply through the full tunnel after the restart:\n{}",
        a.log_text()
    );
    assert!(
        ping_until_reply(&nsa, &behind6, Duration::from_secs(20)),
        "no IPv6 reply through the full tunnel after the restart:\n{}",
        a.log_text()
    );
    for (fam, behind) in [("-4", &behind4), ("-6", &behind6)] {
        let route = nsa.ip(&[fam, "route", "get", behind]).stdout;
        assert!(route.contains(&format!("dev {ifa}")), "{fam}: {route}");
        let r = rules(&nsa, fam);
        assert_eq!(count(&r, &format!("lookup {TABLE}")), 1, "{fam}:\n{r}");
        assert_eq!(count(&r, "suppress_prefixlength 0"), 1, "{fam}:\n{r}");
        let t = table(&nsa, fam);
        assert_eq!(count(&t, "unreachable default"), 1, "{fam}: {t}");
    }

    // `braid down`: no rule and no route of the tunnel stays.
    let down = a.down();
    assert!(down.ok(), "braid down: {}", down.describe());
    for fam in ["-4", "-6"] {
        let r = rules(&nsa, fam);
        assert!(
            !r.contains(TABLE) && !r.contains("suppress_prefixlength"),
            "{fam} rules left after down:\n{r}"
        );
        let t = table(&nsa, fam);
        assert!(
            t.trim().is_empty(),
            "{fam} routes left in table {TABLE}: {t}"
        );
    }
    // Down means down: the underlay carries it again, as configured.
    assert!(ping_until_reply(&nsa, &behind4, Duration::from_secs(10)));
    assert!(b.down().ok());
}

/// `braid down NAME` cannot reach a killed daemon and says how to clean
/// up; `braid down NAME.conf` removes its rules and fail-closed routes.
/// With `FailClosed = false` the table holds only the TUN's route.
#[test]
fn braid_down_conf_removes_a_killed_daemons_leftovers() {
    let test = "braid_down_conf_removes_a_killed_daemons_leftovers";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.peers[0].allowed_ips = vec!["0.0.0.0/0".into()];
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    let pid = a.child.as_ref().expect("foreground child").pid();
    // SAFETY: kill(2) on the PID of the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    a.child
        .as_mut()
        .expect("foreground child")
        .wait_exit(Duration::from_secs(10));
    assert!(wait_until(LONG, || !nsa.has_link(&ifa)), "TUN left");
    assert!(rules(&nsa, "-4").contains(TABLE));

    let by_name = nsa.run(BRAID, &["down", &ifa], SHORT);
    eprintln!("[{test}] braid down NAME: {}", by_name.stderr.trim());
    assert!(!by_name.ok(), "{}", by_name.describe());
    assert!(
        by_name.stderr.contains(&format!("{ifa}.conf")),
        "{}",
        by_name.describe()
    );
    assert!(
        rules(&nsa, "-4").contains(TABLE),
        "rules went with a failed down"
    );

    let conf = a.conf_path.to_string_lossy().into_owned();
    let by_conf = nsa.run(BRAID, &["down", &conf], SHORT);
    eprintln!("[{test}] braid down NAME.conf: {}", by_conf.stderr.trim());
    assert!(by_conf.ok(), "{}", by_conf.describe());
    let r = rules(&nsa, "-4");
    assert!(
        !r.contains(TABLE) && !r.contains("suppress_prefixlength"),
        "rules left:\n{r}"
    );
    let t = table(&nsa, "-4");
    assert!(t.trim().is_empty(), "routes left in table {TABLE}: {t}");
    let again = nsa.run(BRAID, &["down", &conf], SHORT);
    assert!(
        !again.ok(),
        "nothing was left to remove: {}",
        again.describe()
    );
    drop(a);

    // FailClosed = false: wg-quick's behaviour, no unreachable route.
    conf_a.braid_lines.push("FailClosed = false".into());
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    let t = table(&nsa, "-4");
    assert!(t.contains(&format!("default dev {ifa}")), "{t}");
    assert!(!t.contains("unreachable"), "{t}");
    assert!(a.down().ok());
    assert!(!rules(&nsa, "-4").contains(TABLE));
    assert!(b.down().ok());
}

/// A daemon that stops without a stop request (here: its interface was
/// deleted under it) leaves the full tunnel closed too; only a requested
/// stop opens it.
#[test]
fn deleted_interface_leaves_the_full_tunnel_closed() {
    let test = "deleted_interface_leaves_the_full_tunnel_closed";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    nsb.ip(&["addr", "add", "198.18.250.1/32", "dev", "lo"])
        .expect_ok("address behind b");
    nsa.ip(&["route", "add", "default", "via", &format!("198.18.{x}.2")])
        .expect_ok("a's default route");
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.peers[0].allowed_ips = vec!["0.0.0.0/0".into()];
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    assert!(ping_until_reply(
        &nsa,
        "198.18.250.1",
        Duration::from_secs(20)
    ));

    nsa.ip(&["link", "del", &ifa]).expect_ok("ip link del");
    let child = a.child.as_mut().expect("foreground child");
    assert!(
        child.wait_exit(Duration::from_secs(10)).is_some(),
        "the daemon outlived its interface"
    );
    let log = a.log_text();
    assert!(log.contains("stays closed"), "{log}");
    let r = rules(&nsa, "-4");
    assert_eq!(count(&r, &format!("lookup {TABLE}")), 1, "{r}");
    let echoes = echo_requests(&nsb);
    let p = ping(&nsa, "198.18.250.1", 2);
    assert_eq!(p.received, 0, "left in the clear:\n{}", p.output);
    assert_eq!(echo_requests(&nsb), echoes, "echo requests reached b");

    let conf = a.conf_path.to_string_lossy().into_owned();
    let down = nsa.run(BRAID, &["down", &conf], SHORT);
    assert!(down.ok(), "{}", down.describe());
    assert!(!rules(&nsa, "-4").contains(TABLE));
    assert!(table(&nsa, "-4").trim().is_empty());
    assert!(b.down().ok());
}
