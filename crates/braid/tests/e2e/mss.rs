//! End-to-end MSS clamping: braid ↔ braid with `MTU = 1280`, both hosts'
//! routes through the tunnel raised to `advmss 1460` so the kernels announce
//! an MSS the tunnel cannot carry. tcpdump on each TUN shows what arrives:
//! the SYN on B's, the SYN-ACK on A's, over IPv4 and IPv6.
//!
//! Needs root, `/dev/net/tun`, iproute2, wireguard-tools (`wg show`), ping,
//! socat and tcpdump. See `common/mod.rs` for topology and cleanup rules.

use crate::harness::*;
use std::path::Path;

const TOOLS: &[&str] = &["ip", "wg", "ping", "socat", "tcpdump"];
const TUNNEL_MTU: u32 = 1280;
const KERNEL_MSS: u16 = 1460;
const PORT: u16 = 5555;

#[test]
fn mss_fix_auto_clamps_to_the_tunnel_mtu() {
    // 1280 less 40 (IPv4 + TCP) and less 60 (IPv6 + TCP).
    mss_case("mss_fix_auto", None, 1240, 1220);
}

#[test]
fn mss_fix_fixed_value() {
    mss_case("mss_fix_fixed", Some("1000"), 1000, 1000);
}

#[test]
fn mss_fix_off_leaves_the_mss() {
    mss_case("mss_fix_off", Some("off"), KERNEL_MSS, KERNEL_MSS);
}

/// One TCP handshake per IP version from A to B through the tunnel; checks
/// the MSS the SYN has on B's TUN and the SYN-ACK on A's, and that tcpdump
/// finds their checksums correct.
fn mss_case(test: &str, mss_fix: Option<&str>, want_v4: u16, want_v6: u16) {
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (ta4, tb4) = (format!("198.19.{x}.1"), format!("198.19.{x}.2"));
    let (ta6, tb6) = (
        format!("2001:db8:1:{x:x}::1"),
        format!("2001:db8:1:{x:x}::2"),
    );
    let braid_lines: Vec<String> = mss_fix
        .map(|v| format!("MssFix = {v}"))
        .into_iter()
        .collect();
    let conf =
        |keys: &Keys, peer: &Keys, me: [&str; 2], other: [&str; 2], port, endpoint| IfaceConf {
            private_key: keys.private.clone(),
            listen_port: Some(port),
            address: vec![format!("{}/24", me[0]), format!("{}/64", me[1])],
            mtu: Some(TUNNEL_MTU),
            braid_lines: braid_lines.clone(),
            peers: vec![PeerConf {
                public_key: peer.public.clone(),
                allowed_ips: vec![format!("{}/32", other[0]), format!("{}/128", other[1])],
                endpoint,
                ..Default::default()
            }],
        };
    let conf_b = conf(&kb, &ka, [&tb4, &tb6], [&ta4, &ta6], 51821, None);
    let conf_a = conf(
        &ka,
        &kb,
        [&ta4, &ta6],
        [&tb4, &tb6],
        51820,
        Some(format!("198.18.{x}.2:51821")),
    );
    let mut side_b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    side_b.assert_up();
    let mut side_a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    side_a.assert_up();

    for (ns, ifname, peer) in [
        (&nsa, &ifa, &tb4),
        (&nsa, &ifa, &tb6),
        (&nsb, &ifb, &ta4),
        (&nsb, &ifb, &ta6),
    ] {
        let (ip, host) = if peer.contains(':') {
            ("-6", format!("{peer}/128"))
        } else {
            ("-4", format!("{peer}/32"))
        };
        let advmss = KERNEL_MSS.to_string();
        let route = ["route", "replace", &host, "dev", ifname, "advmss", &advmss];
        let out = ns.ip(&[&[ip][..], &route[..]].concat());
        assert!(out.ok(), "{test}: ip route: {}", out.describe());
    }
    for peer in [&tb4, &tb6] {
        assert!(
            ping_until_reply(&nsa, peer, LONG),
            "{test}: no reply from {peer} through the tunnel\n{}\n{}",
            side_a.log_text(),
            side_b.log_text()
        );
    }

    let server_log = env.path("socat-server.log");
    let mut server = nsb.cmd("socat");
    server.args([
        &format!("TCP6-LISTEN:{PORT},ipv6only=0,fork,reuseaddr"),
        "SYSTEM:true",
    ]);
    let _server = ChildGuard::spawn(server, "socat server", &server_log).or_panic();
    let dump_b = Tcpdump::start(&env, &nsb, &ifb);
    let dump_a = Tcpdump::start(&env, &nsa, &ifa);

    for target in [format!("{tb4}:{PORT}"), format!("[{tb6}]:{PORT}")] {
        let connected = wait_until(LONG, || {
            nsa.run(
                "socat",
                &[
                    "-u",
                    "/dev/null",
                    &format!("TCP:{target},connect-timeout=2"),
                ],
                SHORT,
            )
            .ok()
        });
        assert!(connected, "{test}: no TCP connection to {target}");
    }

    for (dump, flags, peer, want) in [
        (&dump_b, "[S]", &ta4, want_v4),
        (&dump_b, "[S]", &ta6, want_v6),
        (&dump_a, "[S.]", &tb4, want_v4),
        (&dump_a, "[S.]", &tb6, want_v6),
    ] {
        let mut seen = Vec::new();
        let found = wait_until(LONG, || {
            seen = dump.segments(flags, peer);
            !seen.is_empty()
        });
        assert!(
            found,
            "{test}: no Flags {flags} from {peer} captured:\n{}",
            dump.text()
        );
        for (mss, checksum_ok) in seen {
            assert_eq!(
                mss,
                Some(want),
                "{test}: MSS of Flags {flags} from {peer}:\n{}",
                dump.text()
            );
            assert!(
                checksum_ok,
                "{test}: Flags {flags} from {peer} has a bad checksum:\n{}",
                dump.text()
            );
        }
    }
}

/// `tcpdump -v` on a TUN, its text in a log file.
struct Tcpdump {
    child: ChildGuard,
}

impl Tcpdump {
    fn start(env: &TestEnv, ns: &Netns, ifname: &str) -> Tcpdump {
        let log = env.path(&format!("{ifname}.tcpdump.log"));
        let mut cmd = ns.cmd("tcpdump");
        cmd.args(["-i", ifname, "-n", "-v", "-l", "-U"]);
        cmd.args(["tcp", "port", &PORT.to_string()]);
        let child = ChildGuard::spawn(cmd, &format!("tcpdump {ifname}"), &log).or_panic();
        let child_log = child.log.clone();
        let listening = wait_until(LONG, || {
            std::fs::read_to_string(&child_log).is_ok_and(|t| t.contains("listening on"))
        });
        assert!(listening, "tcpdump on {ifname} did not start");
        Tcpdump { child }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(Path::new(&self.child.log)).unwrap_or_default()
    }

    /// (MSS option, checksum correct) of every captured segment from `src`
    /// whose flags are exactly `flags` (`[S]`, `[S.]`).
    fn segments(&self, flags: &str, src: &str) -> Vec<(Option<u16>, bool)> {
        let from = format!("{src}.");
        let flags = format!("Flags {flags},");
        self.text()
            .lines()
            .filter(|l| l.contains(&flags) && source_of(l).is_some_and(|s| s.starts_with(&from)))
            .map(|l| (mss_option(l), l.contains("(correct)")))
            .collect()
    }
}

/// The `address.port` before ` > ` in a tcpdump line.
fn source_of(line: &str) -> Option<&str> {
    line[..line.find(" > ")?].rsplit(' ').next()
}

fn mss_option(line: &str) -> Option<u16> {
    let rest = &line[line.find("mss ")? + 4..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
