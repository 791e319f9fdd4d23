//! End-to-end TCP transport: two braid peers with `Transport = tcp` across
//! a veth whose underlay drops every UDP datagram (nft in each namespace).
//! The tunnel must carry ping and a checksummed transfer, and come back by
//! itself after its TCP connection is destroyed (`ss -K`) on either side.
//!
//! ```text
//!   netns a: braid, Endpoint = B:51821, Transport = tcp  (connects)
//!   netns b: braid, ListenPort = 51821, Transport = tcp  (accepts)
//!   underlay veth 198.18.X.0/24: nft drops udp in and out on both ends
//! ```
//!
//! Needs root, `/dev/net/tun`, iproute2 (`ip`, `ss`), wireguard-tools,
//! ping, socat, nft and sha256sum. See `common/mod.rs` for the topology
//! and cleanup rules: the namespaces (and with them their nft rules) are
//! deleted by their guards, also when the test fails.

use crate::harness::*;
use std::path::Path;

const TOOLS: &[&str] = &["ip", "ss", "wg", "ping", "socat", "nft", "sha256sum"];
const PORT_B: u16 = 51821;
const TRANSFER_PORT: u16 = 5556;
const TRANSFER_BYTES: usize = 8 << 20;
const TRANSFER_WITHIN: std::time::Duration = std::time::Duration::from_secs(120);

#[test]
fn tcp_transport_through_an_underlay_that_drops_udp() {
    let test = "tcp_transport";
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
    block_udp(&nsa, &va);
    block_udp(&nsb, &vb);
    // The block works: a datagram towards B is dropped, and counted.
    let probe = format!("UDP-SENDTO:198.18.{x}.2:{PORT_B}");
    run_bounded_stdin(
        nsa.cmd("socat").args(["-u", "-", &probe]),
        Some("probe\n"),
        SHORT,
    );
    assert!(
        udp_dropped(&nsa) > 0,
        "{test}: the nft rule did not drop UDP"
    );
    let (ta, tb) = (format!("198.19.{x}.1"), format!("198.19.{x}.2"));
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let (conf_a, conf_b) = tcp_confs(x, &ka, &kb, None);
    let mut side_b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    side_b.assert_up();
    let mut side_a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    side_a.assert_up();
    let logs = || format!("{}\n{}", side_a.log_text(), side_b.log_text());

    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: no reply from {tb} over the TCP transport\n{}",
        logs()
    );
    let first = tunnel_connection(&nsa).expect("an established TCP connection to B's ListenPort");
    transfer_and_compare(&env, &nsa, &nsb, &tb, "first");

    // Destroy the connection on the connecting side: A must open a new one.
    kill_connection_on_a(&nsa, x, test);
    let second = wait_for_new_connection(&nsa, &first)
        .unwrap_or_else(|| panic!("{test}: A did not reconnect after ss -K on A\n{}", logs()));
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: tunnel did not recover after the connection was killed on A\n{}",
        logs()
    );

    // Destroy it on the accepting side: A learns from the reset and reconnects.
    let out = nsb.run(
        "ss",
        &["-K", "-tn", "sport", "=", &format!(":{PORT_B}")],
        SHORT,
    );
    assert!(out.ok(), "{test}: ss -K on B: {}", out.describe());
    let third = wait_for_new_connection(&nsa, &second)
        .unwrap_or_else(|| panic!("{test}: A did not reconnect after ss -K on B\n{}", logs()));
    assert!(
        ping_until_reply(&nsb, &ta, LONG),
        "{test}: tunnel did not recover after the connection was killed on B\n{}",
        logs()
    );
    transfer_and_compare(&env, &nsa, &nsb, &tb, "after-reconnect");
    eprintln!("[{test}] A's connections to B: {first}, then {second}, then {third}");

    // B closes accepted connections that no authenticated message came
    // through after 20 s: a stranger's goes, the peer's stays.
    let mut stranger = nsa.cmd("socat");
    stranger.args(["-u", &format!("TCP:198.18.{x}.2:{PORT_B}"), "STDOUT"]);
    let mut stranger =
        ChildGuard::spawn(stranger, "stranger", &env.path("stranger.log")).or_panic();
    let accepted = || {
        nsb.run(
            "ss",
            &[
                "-Htn",
                "state",
                "established",
                "sport",
                "=",
                &format!(":{PORT_B}"),
            ],
            SHORT,
        )
        .stdout
        .lines()
        .count()
    };
    assert!(
        wait_until(LONG, || accepted() == 2),
        "{test}: the stranger's connection was not accepted"
    );
    std::thread::sleep(std::time::Duration::from_secs(23));
    let stranger_closed = stranger.wait_exit(LONG).is_some();
    let left = accepted();
    assert!(
        stranger_closed && left == 1,
        "{test}: B kept a connection that never authenticated (the stranger's \
         socat {}; B has {left} established connection(s) on port {PORT_B}, \
         1 expected)\n{}",
        if stranger_closed {
            "ended"
        } else {
            "is still connected"
        },
        logs()
    );
    assert_eq!(
        tunnel_connection(&nsa).as_deref(),
        Some(third.as_str()),
        "{test}: the peer's connection did not survive B's sorting out of strangers\n{}",
        logs()
    );
    let ping = ping(&nsa, &tb, 10);
    assert!(
        ping.received >= 8,
        "{test}: ping through the reconnected tunnel lost too much: {}",
        ping.output
    );
    side_a.down();
    side_b.down();
}

/// A connect flood against B's TCP port from a third namespace (about 250
/// connections a second, each held open) while A's connection is killed:
/// A reconnects, its new connection is marked as a peer's at its first
/// authenticated message and the flooder keeps only a few slots, so the
/// flood never evicts it and the tunnel carries pings throughout.
///
/// ```text
///  netns a ── va/vb 198.18.X.1/.2 ── netns b (TCP :51821) ── vc/vd 198.18.Y.2/.1 ── netns c (flood)
/// ```
#[test]
fn tcp_peer_reconnects_through_a_connect_flood() {
    let test = "tcp_connect_flood";
    if !preflight(test, &["ip", "ss", "ping"]) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let y = x.wrapping_add(100);
    let nsc = env.netns("c");
    let _flood_line = Veth::new(
        &nsc,
        &env.ifname("vc"),
        &format!("198.18.{y}.1/24"),
        &nsb,
        &env.ifname("vd"),
        &format!("198.18.{y}.2/24"),
    )
    .or_panic();
    let tb = format!("198.19.{x}.2");
    let (conf_a, conf_b) = tcp_confs(x, &ka, &kb, Some(1));
    let mut side_b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    side_b.assert_up();
    let mut side_a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    side_a.assert_up();
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: no tunnel before the flood"
    );
    let first = tunnel_connection(&nsa).expect("A's connection to B");

    // The flood: connections from C, opened as fast as 4 ms apart and kept
    // open (a stranger that never speaks), for 8 s.
    let flood = {
        let to: std::net::SocketAddr = format!("198.18.{y}.2:{PORT_B}").parse().unwrap();
        braid::toolkit::lab::traffic::in_netns(&nsc.name, move || {
            let mut held = std::collections::VecDeque::new();
            let mut opened = 0u32;
            let end = std::time::Instant::now() + std::time::Duration::from_secs(8);
            while std::time::Instant::now() < end {
                if let Ok(c) =
                    std::net::TcpStream::connect_timeout(&to, std::time::Duration::from_millis(200))
                {
                    opened += 1;
                    held.push_back(c);
                    if held.len() > 500 {
                        held.pop_front();
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(4));
            }
            opened
        })
    };
    std::thread::sleep(std::time::Duration::from_secs(1));
    // A's connection dies during the flood: A must get a new one through.
    kill_connection_on_a(&nsa, x, test);
    let second = wait_for_new_connection(&nsa, &first).unwrap_or_else(|| {
        panic!(
            "{test}: A did not reconnect during the flood\n{}\n{}",
            side_a.log_text(),
            side_b.log_text()
        )
    });
    let during = ping_counted(&nsa, &["-i", "0.2"], &tb, 25);
    let opened = flood.join().expect("the flood thread");
    let after = tunnel_connection(&nsa);
    eprintln!(
        "[{test}] flood opened {opened} connections; A's connection {first} -> {second} -> \
         {after:?}; ping during the flood: {} of {}",
        during.received, during.transmitted
    );
    assert!(
        opened > 200,
        "{test}: the flood was too small to test anything ({opened})"
    );
    // Evicted, A would have had to connect again (and again).
    assert_eq!(
        after.as_deref(),
        Some(second.as_str()),
        "{test}: the flood pushed A's new connection out\n{}\n{}",
        side_a.log_text(),
        side_b.log_text()
    );
    assert!(
        during.received >= during.transmitted * 4 / 5,
        "{test}: the tunnel carried too little during the flood: {}",
        during.output
    );
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: no tunnel after the flood"
    );
    side_a.down();
    side_b.down();
}

/// A (connecting, `Endpoint` B) and B (`ListenPort` 51821), both with
/// `Transport = tcp`, tunnel 198.19.X.1 and .2; `keepalive` on A.
fn tcp_confs(x: u8, ka: &Keys, kb: &Keys, keepalive: Option<u16>) -> (IfaceConf, IfaceConf) {
    let (ta, tb) = (format!("198.19.{x}.1"), format!("198.19.{x}.2"));
    let conf_b = IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(PORT_B),
        address: vec![format!("{tb}/24")],
        peers: vec![PeerConf {
            public_key: ka.public.clone(),
            allowed_ips: vec![format!("{ta}/32")],
            braid_lines: vec!["Transport = tcp".into()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let conf_a = IfaceConf {
        private_key: ka.private.clone(),
        address: vec![format!("{ta}/24")],
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: vec![format!("{tb}/32")],
            endpoint: Some(format!("198.18.{x}.2:{PORT_B}")),
            braid_lines: vec!["Transport = tcp".into()],
            keepalive,
            ..Default::default()
        }],
        ..Default::default()
    };
    (conf_a, conf_b)
}

/// Drops UDP in both directions on the namespace's underlay interface.
fn block_udp(ns: &Netns, dev: &str) {
    let rules = format!(
        "table inet braid_udp_block {{\n\
         \tchain in {{ type filter hook input priority 0; iifname \"{dev}\" meta l4proto udp counter drop; }}\n\
         \tchain out {{ type filter hook output priority 0; oifname \"{dev}\" meta l4proto udp counter drop; }}\n\
         }}\n"
    );
    let out = run_bounded_stdin(
        ns.cmd("/usr/sbin/nft").args(["-f", "-"]),
        Some(&rules),
        SHORT,
    );
    assert!(out.ok(), "nft in {}: {}", ns.name, out.describe());
}

/// Packets the UDP block has dropped so far in `ns`.
fn udp_dropped(ns: &Netns) -> u64 {
    let out = ns.run(
        "/usr/sbin/nft",
        &["list", "table", "inet", "braid_udp_block"],
        SHORT,
    );
    out.stdout
        .split("packets ")
        .skip(1)
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The local address:port of A's established connection to B's port.
fn tunnel_connection(ns: &Netns) -> Option<String> {
    let out = ns.run(
        "ss",
        &[
            "-Htn",
            "state",
            "established",
            "dport",
            "=",
            &format!(":{PORT_B}"),
        ],
        SHORT,
    );
    out.stdout
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(2))
        .map(str::to_string)
}

/// Destroys A's TCP connection to B's port (`ss -K` on A).
fn kill_connection_on_a(nsa: &Netns, x: u8, test: &str) {
    let (dst, dport) = (format!("198.18.{x}.2"), format!(":{PORT_B}"));
    let out = nsa.run(
        "ss",
        &["-K", "-tn", "dst", &dst, "dport", "=", &dport],
        SHORT,
    );
    assert!(out.ok(), "{test}: ss -K on A: {}", out.describe());
}

/// Waits for an established connection other than `old`.
fn wait_for_new_connection(ns: &Netns, old: &str) -> Option<String> {
    let mut found = None;
    wait_until(LONG, || {
        found = tunnel_connection(ns).filter(|c| c != old);
        found.is_some()
    });
    found
}

/// Sends a random file from A to B through the tunnel with socat and
/// compares SHA-256 sums.
fn transfer_and_compare(env: &TestEnv, nsa: &Netns, nsb: &Netns, tb: &str, tag: &str) {
    let src = env.path(&format!("transfer-{tag}.in"));
    let dst = env.path(&format!("transfer-{tag}.out"));
    let mut data = vec![0u8; TRANSFER_BYTES];
    getrandom(&mut data);
    std::fs::write(&src, &data).expect("write transfer source");
    let mut server = nsb.cmd("socat");
    server.args([
        "-u",
        &format!("TCP-LISTEN:{TRANSFER_PORT},reuseaddr,bind={tb}"),
        &format!("CREATE:{}", dst.display()),
    ]);
    let mut server = ChildGuard::spawn(
        server,
        "socat receiver",
        &env.path(&format!("socat-{tag}.log")),
    )
    .or_panic();
    let listening = wait_until(LONG, || {
        nsb.run(
            "ss",
            &["-Hltn", &format!("sport = :{TRANSFER_PORT}")],
            SHORT,
        )
        .stdout
        .contains(&TRANSFER_PORT.to_string())
    });
    assert!(
        listening,
        "socat receiver did not listen: {}",
        server.log_text()
    );
    let out = nsa.run(
        "socat",
        &[
            "-u",
            &format!("OPEN:{}", src.display()),
            &format!("TCP:{tb}:{TRANSFER_PORT},connect-timeout=20"),
        ],
        // 8 MiB through TCP in TCP on a debug build: bounded, not timed.
        TRANSFER_WITHIN,
    );
    assert!(out.ok(), "transfer {tag}: {}", out.describe());
    assert!(
        server.wait_exit(LONG).is_some(),
        "socat receiver did not finish: {}",
        server.log_text()
    );
    assert_eq!(
        sha256(&src),
        sha256(&dst),
        "transfer {tag}: contents differ"
    );
}

fn sha256(path: &Path) -> String {
    let out = run_program("sha256sum", &[&path.to_string_lossy()], SHORT).expect_ok("sha256sum");
    out.stdout
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

fn getrandom(buf: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .expect("read /dev/urandom");
}
