//! Any MTU a user sets, 1280 to 65535 (issue 20, item 2), in WireGuard's
//! own test topology (its `netns.sh`): both daemons and their UDP sockets
//! in one namespace `o`, talking over its loopback (MTU 65536), each
//! interface moved to a namespace of its own and given its MTU there with
//! `ip link set … mtu` (34816 − 1500 + 1420 = 34736, the figure
//! `netns.sh` uses), as a user or wg-quick would.
//!
//! ```text
//!   netns a                 netns o (lo, 127.0.0.1 / ::1)          netns b
//!   <P>a 198.19.X.1/24  <-fd-  daemon A :51820 ==lo== daemon B :51821  -fd->  <P>b 198.19.X.2/24
//!   2001:db8:1:X::1/64                                                        2001:db8:1:X::2/64
//! ```
//!
//! Through it: pings both ways, a ping of the whole MTU with DF, TCP and
//! UDP transfers both ways, IPv4 and IPv6 inside, over IPv4 and IPv6
//! outside. How much each transfer moves is `BRAID_E2E_MTU_BYTES` (iperf3's
//! `-n`; 256M by default, so the gate stays quick; `1G` is the issue's
//! figure); the figures are printed. The same runs against
//! wireguard-go (the newest one when it is installed) are the reference.

use crate::harness::*;
use braid::toolkit::lab::iperf;
use braid::toolkit::lab::wireguard_go;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const TOOLS: &[&str] = &["ip", "ping", "wg", "iperf3", "ss"];

/// netns.sh's big MTU: 34816 − 1500 + 1420.
const BIG_MTU: u32 = 34_736;
/// The largest packet one UDP datagram carries through WireGuard (65535
/// less the IPv4 and UDP headers and WireGuard's 32 bytes): with a bigger
/// MTU, longer packets are answered with "too big".
const ONE_DATAGRAM: u32 = 65_475;

#[derive(Clone, Debug)]
enum Impl {
    Braid,
    WireguardGo(PathBuf),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outer {
    V4,
    V6,
}

impl Outer {
    fn endpoint(self, port: u16) -> String {
        match self {
            Outer::V4 => format!("127.0.0.1:{port}"),
            Outer::V6 => format!("[::1]:{port}"),
        }
    }
}

/// The two interfaces, their namespaces and daemons. Dropped in field
/// order: the daemons first (they remove their interfaces), then the
/// namespaces.
struct Loopback {
    daemons: Vec<ChildGuard>,
    x: u8,
    ifa: String,
    ifb: String,
    nsa: Netns,
    nsb: Netns,
    nso: Netns,
}

impl Loopback {
    fn v4(&self, host: u8) -> String {
        format!("198.19.{}.{host}", self.x)
    }

    fn v6(&self, host: u8) -> String {
        format!("2001:db8:1:{:x}::{host}", self.x)
    }

    /// Everything `wg show` and `ip` say, and the daemons' logs.
    fn diagnostics(&self) -> String {
        let mut s = String::new();
        for (ns, ifname) in [(&self.nsa, &self.ifa), (&self.nsb, &self.ifb)] {
            s += &wg_show(&self.nso, ifname).combined();
            s += &ns.ip(&["-s", "addr", "show", "dev", ifname]).combined();
        }
        for d in &self.daemons {
            s += &format!("--- {} ---\n{}\n", d.name, tail(&d.log_text(), 3000));
        }
        s
    }
}

/// Starts `imp` as interface `ifname` in `nso`, configured with `wg
/// setconf` there, then moves it to `to`, gives it the addresses and the
/// MTU of `conf` there and brings it up.
fn start(
    env: &TestEnv,
    imp: &Impl,
    nso: &Netns,
    ifname: &str,
    conf: &IfaceConf,
    to: &Netns,
) -> ChildGuard {
    let mut c = match imp {
        Impl::Braid => {
            let mut c = nso.cmd(BRAID);
            c.args([ifname, "--foreground"]);
            c
        }
        Impl::WireguardGo(exe) => {
            let mut c = nso.cmd(exe);
            c.args(["-f", ifname]);
            c
        }
    };
    c.env("RUST_LOG", "info");
    let log = env.path(&format!("{ifname}.log"));
    let mut child = ChildGuard::spawn(c, ifname, &log).or_panic();
    assert!(
        wait_until(LONG, || !child.running()
            || (sock_path(ifname).exists()
                && nso.run("wg", &["show", ifname], SHORT).ok())),
        "{ifname} did not come up:\n{}",
        child.log_text()
    );
    let file = env.write(&format!("{ifname}.setconf"), &conf.wg_setconf());
    nso.run("wg", &["setconf", ifname, &file.to_string_lossy()], SHORT)
        .expect_ok("wg setconf");
    nso.ip(&["link", "set", "dev", ifname, "netns", &to.name])
        .expect_ok("move the interface");
    assert!(wait_until(SHORT, || to.has_link(ifname)), "{ifname} moved");
    for addr in &conf.address {
        let mut args = vec!["addr", "add", addr.as_str(), "dev", ifname];
        if addr.contains(':') {
            args.push("nodad");
        }
        to.ip(&args).expect_ok("address");
    }
    let mtu = conf.mtu.expect("an MTU").to_string();
    to.ip(&["link", "set", "dev", ifname, "mtu", &mtu])
        .expect_ok("MTU");
    to.ip(&["link", "set", "dev", ifname, "up"]).expect_ok("up");
    child
}

fn loopback_pair(env: &TestEnv, imp: &Impl, outer: Outer, mtu: u32) -> Loopback {
    let x = env.octet();
    let (nso, nsa, nsb) = (env.netns("o"), env.netns("a"), env.netns("b"));
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let (ka, kb) = (wg_keys(), wg_keys());
    let peer = |k: &Keys, host: u8, port: u16| PeerConf {
        public_key: k.public.clone(),
        allowed_ips: vec![
            format!("198.19.{x}.{host}/32"),
            format!("2001:db8:1:{x:x}::{host}/128"),
        ],
        endpoint: Some(outer.endpoint(port)),
        ..Default::default()
    };
    let conf = |k: &Keys, host: u8, port: u16, other: PeerConf| IfaceConf {
        private_key: k.private.clone(),
        listen_port: Some(port),
        address: vec![
            format!("198.19.{x}.{host}/24"),
            format!("2001:db8:1:{x:x}::{host}/64"),
        ],
        mtu: Some(mtu),
        peers: vec![other],
        ..Default::default()
    };
    let conf_a = conf(&ka, 1, 51820, peer(&kb, 2, 51821));
    let conf_b = conf(&kb, 2, 51821, peer(&ka, 1, 51820));
    let a = start(env, imp, &nso, &ifa, &conf_a, &nsa);
    let b = start(env, imp, &nso, &ifb, &conf_b, &nsb);
    Loopback {
        daemons: vec![a, b],
        x,
        ifa,
        ifb,
        nsa,
        nsb,
        nso,
    }
}

/// What each transfer moves (iperf3 `-n`; see the module documentation).
fn transfer_bytes() -> String {
    std::env::var("BRAID_E2E_MTU_BYTES").unwrap_or_else(|_| "256M".into())
}

/// One iperf3 transfer of [`transfer_bytes`] from `client` to a server at
/// `dst` in `server`, the client sending (iperf3's `-R` with `-n` does not
/// end a UDP test). Returns a line of figures; panics (with diagnostics)
/// when nothing arrived.
fn transfer(
    env: &TestEnv,
    t: &Loopback,
    (client, server): (&Netns, &Netns),
    dst: &str,
    udp: Option<usize>,
) -> String {
    let _lock = iperf_lock();
    let bytes = transfer_bytes();
    let rate = udp_rate();
    let datagram = udp.map(|len| len.to_string()).unwrap_or_default();
    let mut args = vec!["-n", bytes.as_str(), "--connect-timeout", "20000"];
    if udp.is_some() {
        args.extend(["-u", "-b", &rate, "-l", &datagram]);
    }
    let log = env.path("iperf3-server.log");
    let started = Instant::now();
    let report = iperf::run(
        &client.name,
        &server.name,
        dst,
        &args,
        &log,
        Duration::from_secs(900),
    )
    .unwrap_or_else(|e| panic!("iperf3 to {dst} (udp {udp:?}): {e}{}", t.diagnostics()));
    let took = started.elapsed().as_secs_f64();
    let received = report.received_bytes.unwrap_or(0.0);
    let gbps = report.received_bps.unwrap_or(0.0) / 1e9;
    let block = report.json["start"]["test_start"]["blksize"]
        .as_u64()
        .unwrap_or(0);
    let what = format!("{} to {dst}", if udp.is_some() { "UDP" } else { "TCP" });
    assert!(
        received > 0.0,
        "{what}: nothing arrived: {}{}",
        report.json,
        t.diagnostics()
    );
    match &report.udp {
        Some(u) => {
            assert!(u.packets > u.lost_packets, "{what}: every datagram lost");
            let arrived = (u.packets - u.lost_packets) as f64 * block as f64;
            format!(
                "{what}: {:.0} MB sent at {rate}bit/s in {took:.1} s, {:.0} MB arrived \
                 ({block}-byte datagrams, whole-MTU packets), {:.2} % lost",
                received / 1e6,
                arrived / 1e6,
                u.lost_percent
            )
        }
        None => {
            // The client sent all of -n (iperf3 ends only then); the
            // server stops counting at the end message, which can pass
            // the last data still in flight.
            let want = iperf_bytes(&bytes);
            assert!(
                received >= 0.95 * want,
                "{what}: {received} of {want} bytes arrived{}",
                t.diagnostics()
            );
            format!(
                "{what}: {:.0} MB in {took:.1} s, {gbps:.2} Gbit/s, {} retransmits",
                received / 1e6,
                report.retransmits.unwrap_or(0)
            )
        }
    }
}

/// The UDP transfers' rate (iperf3 `-b`, `BRAID_E2E_MTU_UDP_RATE`, default
/// 1G; 0 is no limit): one the tunnel can carry, so what arrives shows
/// what it carries rather than what a flood overran.
fn udp_rate() -> String {
    std::env::var("BRAID_E2E_MTU_UDP_RATE").unwrap_or_else(|_| "1G".into())
}

/// iperf3's reading of a `-n` value (K, M, G are powers of 1024).
fn iperf_bytes(n: &str) -> f64 {
    let (num, mult) = match n.chars().last() {
        Some('K' | 'k') => (&n[..n.len() - 1], 1024.0),
        Some('M' | 'm') => (&n[..n.len() - 1], 1024.0 * 1024.0),
        Some('G' | 'g') => (&n[..n.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (n, 1.0),
    };
    num.parse::<f64>().unwrap_or(0.0) * mult
}

/// The issue's list at one MTU and one outer family: pings, the whole MTU
/// with DF both ways, and the transfers. `transfers`: TCP and UDP both
/// ways for IPv4 and IPv6 inside, or only a short TCP one each way.
fn run_at(test: &str, imp: &Impl, outer: Outer, mtu: u32, transfers: bool) {
    let env = TestEnv::new(test);
    let t = loopback_pair(&env, imp, outer, mtu);
    let (nsa, nsb) = (&t.nsa, &t.nsb);
    assert!(
        ping_until_reply(nsa, &t.v4(2), LONG),
        "no ping through the tunnel{}",
        t.diagnostics()
    );
    for (from, to) in [
        (nsa, t.v4(2)),
        (nsb, t.v4(1)),
        (nsa, t.v6(2)),
        (nsb, t.v6(1)),
    ] {
        let p = ping_counted(&from.name, &["-i", "0.05"], &to, 10);
        assert_eq!(p.received, 10, "ping {to}: {}{}", p.output, t.diagnostics());
    }
    // The whole MTU in one packet, with DF (IPv6 never fragments on the
    // way): what only works if every slot and offload path takes it.
    let whole = mtu.min(ONE_DATAGRAM);
    for (from, to, header) in [
        (nsa, t.v4(2), 28),
        (nsb, t.v4(1), 28),
        (nsa, t.v6(2), 48),
        (nsb, t.v6(1), 48),
    ] {
        let size = (whole - header).to_string();
        let p = ping_counted(&from.name, &["-M", "do", "-s", &size, "-i", "0.2"], &to, 3);
        assert_eq!(
            p.received,
            3,
            "ping {to} of {whole} bytes with DF: {}{}",
            p.output,
            t.diagnostics()
        );
    }
    eprintln!("[{test}] outer {outer:?}, MTU {mtu}: pings and {whole}-byte DF pings both ways");
    if mtu > ONE_DATAGRAM {
        // Longer than one datagram carries: the sender hears "too big".
        let size = (mtu - 28).to_string();
        let dst = t.v4(2);
        let p = nsa.run(
            "ping",
            &["-n", "-c", "2", "-W", "1", "-M", "do", "-s", &size, &dst],
            SHORT,
        );
        eprintln!("[{test}] a DF ping of {mtu} bytes: {}", p.combined().trim());
    }
    let dirs = [(nsa, nsb), (nsb, nsa)];
    if !transfers {
        for (k, (client, server)) in dirs.into_iter().enumerate() {
            let dst = if k == 0 { t.v4(2) } else { t.v6(1) };
            let _lock = iperf_lock();
            let bps = iperf3(&env, client, server, &dst, 2, false)
                .unwrap_or_else(|e| panic!("{e}{}", t.diagnostics()));
            eprintln!("[{test}] TCP 2 s to {dst}: {:.2} Gbit/s", bps / 1e9);
        }
        return;
    }
    for udp in [false, true] {
        for (from, to, dst, header) in [
            (nsa, nsb, t.v4(2), 28),
            (nsb, nsa, t.v4(1), 28),
            (nsa, nsb, t.v6(2), 48),
            (nsb, nsa, t.v6(1), 48),
        ] {
            // UDP datagrams that make whole-MTU packets.
            let datagram = udp.then_some(whole as usize - header);
            let line = transfer(&env, &t, (from, to), &dst, datagram);
            eprintln!("[{test}] outer {outer:?}, MTU {mtu}: {line}");
            // A UDP flood that overran the tunnel leaves it working.
            let p = ping_counted(&from.name, &["-i", "0.05"], &dst, 3);
            assert_eq!(
                p.received,
                3,
                "ping {dst} after it: {}{}",
                p.output,
                t.diagnostics()
            );
        }
    }
    // The daemons are still there (a daemon that died would show as a
    // missing interface only after its guard went).
    for d in &t.daemons {
        let name = d.name.clone();
        let pid = d.pid();
        assert!(pid_alive(pid), "{name} exited:\n{}", d.log_text());
    }
    // wg show from o, where the sockets are, sees the traffic.
    for ifname in [&t.ifa, &t.ifb] {
        let show = t.nso.run("wg", &["show", ifname, "transfer"], SHORT);
        eprintln!("[{test}] wg show {ifname} transfer: {}", show.stdout.trim());
    }
}

fn braid_case(test: &str, outer: Outer, mtu: u32, transfers: bool) {
    if !preflight(test, TOOLS) {
        return;
    }
    run_at(test, &Impl::Braid, outer, mtu, transfers);
}

fn reference_case(test: &str, outer: Outer, mtu: u32, transfers: bool) {
    let (exe, version) = wireguard_go::reference();
    if !preflight(test, TOOLS) || which(&exe.to_string_lossy()).is_none() && !exe.is_file() {
        eprintln!("SKIPPED {test}: no wireguard-go");
        return;
    }
    eprintln!("[{test}] reference: {} ({version})", exe.display());
    run_at(test, &Impl::WireguardGo(exe), outer, mtu, transfers);
}

#[test]
fn mtu_34736_over_ipv4_loopback() {
    braid_case("mtu_34736_over_ipv4_loopback", Outer::V4, BIG_MTU, true);
}

#[test]
fn mtu_34736_over_ipv6_loopback() {
    braid_case("mtu_34736_over_ipv6_loopback", Outer::V6, BIG_MTU, true);
}

/// The ends of the range: IPv6's minimum and the largest there is (where
/// a packet longer than one datagram carries is answered "too big").
#[test]
fn mtu_1280_and_65535_over_loopback() {
    let test = "mtu_1280_and_65535_over_loopback";
    braid_case(test, Outer::V4, 1280, false);
    braid_case(test, Outer::V6, 65_535, false);
}

#[test]
fn wireguard_go_mtu_34736_reference() {
    let test = "wireguard_go_mtu_34736_reference";
    reference_case(test, Outer::V4, BIG_MTU, true);
    reference_case(test, Outer::V6, BIG_MTU, true);
}

/// wireguard-go v0.0.20250522 passes at 1280; at 65535 it exits on the
/// first 65535-byte packet ("read len 65535 overflows bufs element len
/// 65519"), so that half is reported, not asserted.
#[test]
fn wireguard_go_mtu_1280_and_65535_reference() {
    let test = "wireguard_go_mtu_1280_and_65535_reference";
    reference_case(test, Outer::V4, 1280, false);
    let at_65535 = std::panic::catch_unwind(|| reference_case(test, Outer::V6, 65_535, false));
    eprintln!(
        "[{test}] wireguard-go at MTU 65535: {}",
        if at_65535.is_ok() {
            "passed"
        } else {
            "failed (see above)"
        }
    );
}
