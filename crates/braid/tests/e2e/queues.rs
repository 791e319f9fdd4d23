//! `Queues =`, end to end: a multi-queue TUN at both ends, each extra queue
//! read by a thread of its own. Many SHA-256-checked TCP streams in both
//! directions at once arrive whole and in order, the flows spread over the
//! queues (the extra queues' threads carried packets), and `braid show`
//! says how many queues there are; the same against wireguard-go. Each
//! queue's thread also receives from a socket of its own on `ListenPort`:
//! the peer's datagrams are steered onto the second one, and everything
//! it sends comes through there. No test asserts how fast anything
//! happened.
//!
//! ```text
//!  a: va 198.18.x.1/24 ── vb 198.18.x.2/24 :b      tunnel 198.19.x.1 ⇄ 198.19.x.2
//! ```

use crate::harness::*;
use crate::two_lines::TwoLines;
use braid::toolkit::lab::traffic::{TcpTransfer, UdpSequence};
use std::net::SocketAddr;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "wg"];

/// Flows each way. With 2 queues, all of them on one queue by chance is
/// one run in 2,048.
const FLOWS: u16 = 12;

/// Unpaced: bulk batches, so sealing on two threads at once happens.
const AS_FAST_AS_IT_GOES: u64 = 1 << 40;

#[test]
fn flows_spread_over_tun_queues_and_each_stays_whole_and_in_order() {
    flows_over_queues(
        "flows_spread_over_tun_queues_and_each_stays_whole_and_in_order",
        Peer::Braid,
    );
}

/// A stock WireGuard peer (wireguard-go) sees a plain WireGuard peer: the
/// batches of braid's queues arrive in counter order, its flows whole.
#[test]
fn tun_queues_with_a_wireguard_go_peer() {
    flows_over_queues("tun_queues_with_a_wireguard_go_peer", Peer::WireguardGo);
}

enum Peer {
    /// braid with `Queues = 2` too.
    Braid,
    WireguardGo,
}

fn flows_over_queues(test: &str, peer: Peer) {
    let mut tools = TOOLS.to_vec();
    if matches!(peer, Peer::WireguardGo) {
        tools.push("wireguard-go");
    }
    if !preflight(test, &tools) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (mut ca, mut cb) = tunnel_confs(&ka, &kb, x);
    ca.braid_lines = vec!["Queues = 2".to_string()];
    let mut sides = vec![(&nsa, &ifa)];
    let _b = match peer {
        Peer::Braid => {
            cb.braid_lines = vec!["Queues = 2".to_string()];
            // Root kept: b's port moves below then open whole socket groups
            // (without root they open one socket, see
            // `a_new_listen_port_without_root_gets_one_socket`).
            let mut b =
                BraidUp::start_with(&env, &nsb, &ifb, &cb, BraidMode::Daemon, &["--keep-root"]);
            b.assert_up();
            sides.push((&nsb, &ifb));
            (Some(b), None)
        }
        Peer::WireguardGo => (None, Some(wg_go(&env, &nsb, &ifb, &cb))),
    };
    let mut a = BraidUp::start(&env, &nsa, &ifa, &ca, BraidMode::Foreground);
    a.assert_up();
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    for (ns, ifname) in &sides {
        assert_eq!(interface_counter(ns, ifname, "tun_queues"), 2);
        assert_eq!(interface_counter(ns, ifname, "udp_sockets"), 2);
    }
    // The kernel picks a's socket for b's datagrams by a hash of their
    // ports: b moves to other ports until they land on a's second socket,
    // whose thread (queue 1's) then receives all of b's traffic.
    let mut moves = 0;
    while interface_counter(&nsa, &ifa, "udp_socket_datagrams") == 0 {
        moves += 1;
        assert!(moves <= 24, "b's datagrams never reached a's second socket");
        let port = (41000 + moves).to_string();
        nsb.run("wg", &["set", &ifb, "listen-port", &port], SHORT)
            .expect_ok("wg set listen-port");
        assert!(ping_until_reply(&nsb, &format!("198.19.{x}.1"), LONG));
    }
    eprintln!("[{test}] b's datagrams reach a's second socket after {moves} port move(s)");
    let pid = a.child.as_ref().expect("foreground child").pid();
    let names: Vec<String> = threads(pid).into_iter().map(|(name, _)| name).collect();
    assert!(
        names.iter().any(|n| n == "braid-queue-1"),
        "no thread for queue 1: {names:?}"
    );

    let secs = Duration::from_secs(3);
    let mut transfers = Vec::new();
    for flow in 0..FLOWS {
        let to_b: SocketAddr = format!("198.19.{x}.2:{}", 7100 + flow).parse().unwrap();
        let to_a: SocketAddr = format!("198.19.{x}.1:{}", 7200 + flow).parse().unwrap();
        transfers.push((
            "a→b",
            TcpTransfer::start(&nsa.name, &nsb.name, to_b, AS_FAST_AS_IT_GOES, secs),
        ));
        transfers.push((
            "b→a",
            TcpTransfer::start(&nsb.name, &nsa.name, to_a, AS_FAST_AS_IT_GOES, secs),
        ));
    }
    for (way, transfer) in transfers {
        let report = transfer.finish();
        eprintln!("[{test}] {way} {report}");
        assert!(report.intact(), "{way}: {report}");
    }
    for (ns, ifname) in &sides {
        let extra = interface_counter(ns, ifname, "tun_queue_packets");
        eprintln!("[{test}] {ifname}: {extra} packets sent from queue 1");
        assert!(extra > 0, "{ifname}: no flow went through queue 1");
    }
    let received = interface_counter(&nsa, &ifa, "udp_socket_datagrams");
    eprintln!("[{test}] {ifa}: {received} datagrams received on the second socket");
    assert!(
        received > 10_000,
        "{ifa}: b's transfers did not come through the second socket"
    );
    let log = a.log_text();
    assert!(log.contains("2 TUN queues, a thread each"), "{log}");
}

/// A `SO_REUSEPORT` group can be joined by any process of the user that
/// opened it, so a daemon that dropped root binds a new `ListenPort` as one
/// plain socket, says so, and the tunnel goes on over it (the peer follows
/// the new port as it roams).
#[test]
fn a_new_listen_port_without_root_gets_one_socket() {
    let test = "a_new_listen_port_without_root_gets_one_socket";
    if !preflight(test, &["ip", "ping", "wg", "ss"]) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (mut ca, cb) = tunnel_confs(&ka, &kb, x);
    ca.braid_lines = vec!["Queues = 2".to_string()];
    let mut b = BraidUp::start(&env, &nsb, &ifb, &cb, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &ca, BraidMode::Foreground);
    a.assert_up();
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    // Opened as root, before the drop: a whole group.
    assert_eq!(interface_counter(&nsa, &ifa, "udp_sockets"), 2);
    assert!(a.log_text().contains("running as user"), "{}", a.log_text());

    let port = "41999";
    nsa.run("wg", &["set", &ifa, "listen-port", port], SHORT)
        .expect_ok("wg set listen-port");
    assert_eq!(interface_counter(&nsa, &ifa, "udp_sockets"), 1);
    let bound = nsa.run("ss", &["-H", "-uln", &format!("sport = :{port}")], SHORT);
    let sockets = bound
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    assert_eq!(sockets, 1, "sockets on port {port}: {}", bound.stdout);
    let log = a.log_text();
    assert!(log.contains("the UDP port gets one socket, not 2"), "{log}");
    // Both ways over the new socket: a's pings move b's endpoint to it.
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    assert!(ping_until_reply(&nsb, &format!("198.19.{x}.1"), LONG));
    let shown = nsb.run("wg", &["show", &ifb, "endpoints"], SHORT).stdout;
    assert!(
        shown.contains(&format!(":{port}")),
        "b's endpoint for a: {shown}"
    );
}

/// Two unequal lines in `Mode = aggregate`, both ends with 2 queues: the
/// batches of both queues pass the reorder window, and a flow still comes
/// out in order (numbered datagrams next to TCP streams that fill the
/// lines), every TCP stream whole.
#[test]
fn aggregate_over_two_lines_with_queues_keeps_each_flow_in_order() {
    let test = "aggregate_over_two_lines_with_queues_keeps_each_flow_in_order";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let fast: &[&str] = &["--rate", "40mbit", "--delay", "5ms", "--queue", "100ms"];
    let slow: &[&str] = &["--rate", "20mbit", "--delay", "20ms", "--queue", "100ms"];
    let lab = TwoLines::start_configured(
        &env,
        [&nsa, &nsb],
        [Some(fast), Some(slow)],
        &["Mode = aggregate"],
        &["Queues = 2"],
    );
    // 10 × 6 Mbit/s: more than the fast line carries, and with the
    // datagrams 11 flows, all on queue 0 by chance once in 2,048 runs.
    let load = Load {
        streams: 10,
        first_port: 7300,
        stream_rate: 6_000_000 / 8,
        datagrams_per_second: 500,
        secs: Duration::from_secs(4),
    };
    load.arrives_whole_and_in_order(test, &env, &nsa, &nsb);
    let paths = lab.paths();
    let sent_on = |name: &str| {
        paths
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["tx_packets"].as_u64())
            .unwrap_or(0)
    };
    let (fast_tx, slow_tx) = (sent_on("clean"), sent_on("bad"));
    let extra = interface_counter(lab.nsa, &lab.ifa, "tun_queue_packets");
    eprintln!("[{test}] a sent {fast_tx} packets on the fast line, {slow_tx} on the slow one; {extra} from queue 1");
    // Which socket of b's group each line lands on is the kernel's hash:
    // when they differ, two threads fed b's reorder window.
    let second_socket = second_socket_datagrams(&lab);
    eprintln!("[{test}] b received {second_socket} datagrams on its second socket");
    assert!(slow_tx > 0, "the slow line carried nothing: {paths:?}");
    assert!(extra > 0, "no flow went through queue 1");
    lab.stop();
}

/// One peer's two lines landing on the two sockets of b's `ListenPort`
/// group: two threads receive its packets and feed its one reorder window
/// at once, and what they write to the TUN still comes out in order. The
/// lines are direct and alike, and in redundant mode every packet comes
/// on both: the two threads race for each one, the first copy counts
/// and the other is dropped. Which socket a line lands on is the kernel's hash of its
/// ports: the lab starts again (new ports for a's lines) until the lines
/// are on different sockets.
#[test]
fn a_peer_whose_lines_land_on_two_sockets_stays_in_order() {
    let test = "a_peer_whose_lines_land_on_two_sockets_stays_in_order";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let lab = TwoLines::start_until(
        &env,
        [&nsa, &nsb],
        [None, None],
        &["Mode = redundant"],
        &["Queues = 2"],
        |lab, start| {
            // Probes on both lines, 20 a second each.
            std::thread::sleep(Duration::from_secs(1));
            let (second, all) = (second_socket_datagrams(lab), received_datagrams(lab));
            let share = second as f64 / all.max(1) as f64;
            eprintln!("[{test}] start {start}: {second} of {all} datagrams on b's second socket");
            (0.2..=0.8).contains(&share)
        },
    )
    .unwrap_or_else(|| {
        panic!("{test}: in 16 starts a's lines always landed on one socket of b's group")
    });
    let load = Load {
        streams: 6,
        first_port: 7500,
        stream_rate: AS_FAST_AS_IT_GOES,
        datagrams_per_second: 1000,
        secs: Duration::from_secs(3),
    };
    load.arrives_whole_and_in_order(test, &env, &nsa, &nsb);
    // Both lines carried the transfers, so both sockets did.
    let paths = lab.paths();
    let sent: Vec<u64> = paths
        .iter()
        .map(|p| p["tx_packets"].as_u64().unwrap_or(0))
        .collect();
    let second = second_socket_datagrams(&lab);
    eprintln!("[{test}] a sent {sent:?} packets per line; b's second socket received {second}");
    assert!(
        sent.len() == 2 && sent.iter().all(|&n| n > 10_000),
        "a line carried little: {paths:?}"
    );
    assert!(second > 10_000, "b's second socket received {second}");
    lab.stop();
}

/// SHA-256-checked TCP streams from a to b (ports `first_port`..) and
/// numbered datagrams next to them (port `first_port` + 100), through a
/// tunnel of `TwoLines`.
struct Load {
    streams: u16,
    first_port: u16,
    /// Bytes per second per stream.
    stream_rate: u64,
    datagrams_per_second: u32,
    secs: Duration,
}

impl Load {
    /// Runs it; every stream arrives whole and no datagram out of order.
    fn arrives_whole_and_in_order(&self, test: &str, env: &TestEnv, nsa: &Netns, nsb: &Netns) {
        let x = env.octet();
        let to_b = |port: u16| -> SocketAddr { format!("198.19.{x}.2:{port}").parse().unwrap() };
        let transfers: Vec<TcpTransfer> = (0..self.streams)
            .map(|flow| {
                let to = to_b(self.first_port + flow);
                TcpTransfer::start(&nsa.name, &nsb.name, to, self.stream_rate, self.secs)
            })
            .collect();
        let to = to_b(self.first_port + 100);
        let numbered = UdpSequence::start(
            &nsa.name,
            &nsb.name,
            to,
            self.datagrams_per_second,
            self.secs,
        )
        .finish();
        eprintln!("[{test}] {numbered}");
        for transfer in transfers {
            let report = transfer.finish();
            eprintln!("[{test}] {report}");
            assert!(report.intact(), "{report}");
        }
        assert_eq!(numbered.out_of_order, 0, "{numbered}");
        assert!(numbered.received > 0, "{numbered}");
    }
}

fn second_socket_datagrams(lab: &TwoLines) -> u64 {
    interface_counter(lab.nsb, &lab.ifb, "udp_socket_datagrams")
}

/// What b received from a, all paths together (a little less than the
/// datagrams: handshakes are not counted on a path).
fn received_datagrams(lab: &TwoLines) -> u64 {
    let (show, _) = braid_show_json(lab.nsb, &lab.ifb);
    show["peers"][0]["paths"].as_array().map_or(0, |paths| {
        paths.iter().filter_map(|p| p["rx_packets"].as_u64()).sum()
    })
}
