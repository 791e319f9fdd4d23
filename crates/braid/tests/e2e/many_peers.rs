//! A server's peers come and go while a live peer's traffic flows (issue
//! 22 item 5): thousands of peers added (`wg addconf`) and removed again
//! (`wg syncconf` back to the live peer alone), round after round, while a
//! numbered UDP sequence and a checked TCP stream go from the live peer to
//! the server: not one datagram lost, none out of order, the stream
//! intact. And a `set` the server must refuse (a listen port in use)
//! changes nothing, not even the peer the same request adds.
//!
//! ```text
//!   netns a: braid <P>a (the live peer)  ══ veth ══  netns b: braid <P>b (the server)
//!            198.19.X.1                                        198.19.X.2, + N peers coming and going
//! ```

use crate::harness::*;
use braid::toolkit::lab::traffic::{in_netns, TcpTransfer, UdpSequence};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const TOOLS: &[&str] = &["ip", "ping", "wg"];
/// Peers added and removed per round.
const COMING_AND_GOING: usize = 3_000;
const SEQ_RATE: u32 = 500;
const TCP_RATE: u64 = 1 << 20;
const TRAFFIC: Duration = Duration::from_secs(8);

/// `n` peers with fresh keys and a /128 each in 2001:db8:1::/64 (none of
/// them the live peer's addresses), as `wg addconf` reads them.
fn idle_peers(n: usize) -> String {
    let mut text = String::with_capacity(n * 110);
    for i in 0..n {
        let key = braid::keys::PrivateKey::generate().public_key();
        text.push_str(&format!(
            "[Peer]\nPublicKey = {key}\nAllowedIPs = 2001:db8:1::{:x}:{:x}/128\n\n",
            i >> 16,
            i & 0xffff
        ));
    }
    text
}

#[test]
fn live_peer_loses_nothing_while_thousands_of_peers_come_and_go() {
    let test = "live_peer_loses_nothing_while_thousands_of_peers_come_and_go";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    a.assert_up();
    let server = format!("198.19.{x}.2");
    assert!(ping_until_reply(&nsa, &server, LONG), "no tunnel");
    let add = env.write("add.conf", &idle_peers(COMING_AND_GOING));
    // The server's own configuration: syncing to it removes every other peer.
    let only_live = env.write("only-live.conf", &conf_b.wg_setconf());

    let dst = |port: u16| -> SocketAddr { format!("{server}:{port}").parse().unwrap() };
    let seq = UdpSequence::start(&nsa.name, &nsb.name, dst(7001), SEQ_RATE, TRAFFIC);
    let tcp = TcpTransfer::start(&nsa.name, &nsb.name, dst(7002), TCP_RATE, TRAFFIC);
    let end = Instant::now() + TRAFFIC;
    let mut rounds = 0;
    while Instant::now() < end {
        let t = Instant::now();
        nsb.run("wg", &["addconf", &ifb, &add.to_string_lossy()], LONG)
            .expect_ok("wg addconf");
        let added = t.elapsed();
        let listed = wg_show(&nsb, &ifb).stdout.matches("peer: ").count();
        assert_eq!(listed, COMING_AND_GOING + 1, "peers after wg addconf");
        let t = Instant::now();
        nsb.run(
            "wg",
            &["syncconf", &ifb, &only_live.to_string_lossy()],
            LONG,
        )
        .expect_ok("wg syncconf");
        rounds += 1;
        eprintln!(
            "[{test}] round {rounds}: {COMING_AND_GOING} peers added in {:.2} s, removed in {:.2} s",
            added.as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
    }
    let (seq, tcp) = (seq.finish(), tcp.finish());
    eprintln!("[{test}] {seq}");
    eprintln!("[{test}] {tcp}");
    assert!(rounds >= 2, "peers came and went only {rounds} time(s)");
    assert!(seq.sent > 0);
    assert_eq!(
        (seq.missing, seq.duplicated, seq.out_of_order, seq.corrupted),
        (0, 0, 0, 0),
        "{seq}"
    );
    assert!(tcp.intact(), "{tcp}");
    let peers = nsb.run("wg", &["show", &ifb, "peers"], SHORT);
    assert_eq!(
        peers.stdout.lines().count(),
        1,
        "only the live peer is left"
    );
    assert!(a.down().ok());
    assert!(b.down().ok());
}

#[test]
fn a_refused_set_changes_nothing() {
    let test = "a_refused_set_changes_nothing";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (_nsa, _ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (_, conf_b) = tunnel_confs(&ka, &kb, x);
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    // A port the request asks for, taken in the server's namespace.
    let taken = in_netns(&nsb.name, || {
        std::net::UdpSocket::bind("0.0.0.0:0").expect("a port to take")
    })
    .join()
    .expect("binding in the namespace");
    let port = taken.local_addr().unwrap().port().to_string();
    let newcomer = wg_keys().public;
    let refused = nsb.run(
        "wg",
        &[
            "set",
            &ifb,
            "listen-port",
            &port,
            "peer",
            &newcomer,
            "allowed-ips",
            &format!("198.19.{x}.9/32"),
        ],
        SHORT,
    );
    assert!(
        !refused.ok(),
        "a set with a port in use was taken: {}",
        refused.stdout
    );
    eprintln!("[{test}] wg set refused: {}", refused.stderr.trim());
    let peers = nsb.run("wg", &["show", &ifb, "peers"], SHORT).stdout;
    assert!(!peers.contains(&newcomer), "the refused set added its peer");
    let listening = nsb.run("wg", &["show", &ifb, "listen-port"], SHORT).stdout;
    assert_eq!(listening.trim(), "51821", "the refused set moved the port");
    drop(taken);
    assert!(b.down().ok());
}
