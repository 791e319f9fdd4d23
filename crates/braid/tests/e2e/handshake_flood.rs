//! A handshake flood against a braid responder, end to end: B answers with
//! cookie replies, the A–B tunnel keeps carrying pings, and a new peer C
//! completes its handshake through the flood (taking the cookie and
//! retrying with mac2). The flood comes from `braid bench handshake-flood`
//! in a third namespace, from 64 source addresses, bounded in time: random
//! initiations, initiations from unknown keys with a valid mac1, and
//! replays of A's real initiation captured with tcpdump.
//!
//! ```text
//!  netns a: braid A ── veth 198.18.X.1/.2 ── netns b: braid B ── veth 198.18.251.1/.2 ── netns g:
//!           198.19.X.1                        198.19.X.2            + 198.18.251.10–73   braid C 198.19.251.3
//!                                             198.19.251.2                               flood generator
//! ```
//!
//! The rate offered and handled, B's CPU during the flood and how many of
//! A's pings came back are printed (`--nocapture`); with a debug build they
//! say little about speed, and none of them is judged: what is checked is
//! that B answered with cookies, saw the bogus initiations, kept A's tunnel
//! carrying traffic and let C through (with a cookie) while the flood ran.

use crate::harness::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "tcpdump"];
/// Source addresses of the flood, 198.18.251.10 and on.
const SOURCES: u32 = 64;
/// Long enough that C, given `C_WITHIN` from its start, still meets the
/// flood (C needs one cookie round and a retry, about 5 s).
const FLOOD_SECONDS: u32 = 50;
const C_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);
/// Modest, so a debug build of B keeps up with it on a shared machine.
const FLOOD_RATE: u32 = 3000;
const A_PINGS: u32 = 30;

/// The UDP payload of the first packet of a pcap file (Ethernet, IPv4).
fn first_udp_payload(pcap: &[u8]) -> Option<Vec<u8>> {
    let record = pcap.get(24..)?;
    let captured = u32::from_le_bytes(record.get(8..12)?.try_into().ok()?) as usize;
    let frame = record.get(16..16 + captured)?;
    let ip = frame.get(14..)?;
    let ihl = (ip.first()? & 0x0f) as usize * 4;
    Some(ip.get(ihl + 8..)?.to_vec())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn handshake_flood_brings_cookies_and_spares_tunnels() {
    let test = "handshake_flood_brings_cookies_and_spares_tunnels";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let JoinedPair {
        x,
        nsa,
        nsb,
        va: _,
        vb,
        veth: _veth,
    } = env.joined_pair();
    let nsg = env.netns("g");
    let (vbg, vg) = (env.ifname("vbg"), env.ifname("vg"));
    let _veth_g = Veth::new(&nsb, &vbg, "198.18.251.1/24", &nsg, &vg, "198.18.251.2/24").or_panic();
    let batch: String = (0..SOURCES)
        .map(|n| format!("addr add 198.18.251.{}/24 dev {vg}\n", 10 + n))
        .collect();
    let batch_file = env.write("sources.batch", &batch);
    nsg.ip(&["-batch", &batch_file.to_string_lossy()])
        .expect_ok("flood source addresses");

    let (ka, kb, kc) = (wg_keys(), wg_keys(), wg_keys());
    let (ifa, ifb, ifc) = (env.ifname("a"), env.ifname("b"), env.ifname("c"));
    let (conf_a, mut conf_b) = tunnel_confs(&ka, &kb, x);
    conf_b.address.push("198.19.251.2/24".into());
    conf_b.peers.push(PeerConf {
        public_key: kc.public.clone(),
        allowed_ips: vec!["198.19.251.3/32".into()],
        ..Default::default()
    });
    let conf_c = IfaceConf {
        private_key: kc.private.clone(),
        listen_port: Some(51822),
        address: vec!["198.19.251.3/24".into()],
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: vec!["198.19.251.2/32".into()],
            endpoint: Some("198.18.251.1:51821".into()),
            ..Default::default()
        }],
        ..Default::default()
    };

    // Capture A's first initiation to B, to replay it in the flood.
    let pcap = env.path("initiation.pcap");
    let mut capture = {
        let mut c = nsb.cmd("tcpdump");
        c.args(["-i", &vb, "-c", "1", "-U", "-w"])
            .arg(&pcap)
            .args(["udp dst port 51821 and udp[8] == 1"]);
        ChildGuard::spawn(c, "tcpdump", &env.path("tcpdump.log")).or_panic()
    };
    assert!(
        wait_until(LONG, || capture.log_text().contains("listening on")),
        "tcpdump did not start: {}",
        capture.log_text()
    );
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    a.assert_up();
    let b_tunnel = format!("198.19.{x}.2");
    assert!(
        ping_until_reply(&nsa, &b_tunnel, LONG),
        "the A–B tunnel did not come up"
    );
    assert!(
        capture.wait_exit(LONG).is_some(),
        "tcpdump captured no initiation: {}",
        capture.log_text()
    );
    let captured = first_udp_payload(&std::fs::read(&pcap).unwrap_or_default())
        .expect("a UDP packet in the capture");
    assert_eq!(
        (captured.len(), captured[0]),
        (148, 1),
        "an initiation was captured"
    );
    let b_pid = *nsb
        .pids_of(Path::new(BRAID))
        .first()
        .expect("B's daemon process");

    // The flood, bounded in time.
    let flood_out = env.path("flood.json");
    let mut flood = {
        let mut c = nsg.cmd(BRAID);
        c.args(["bench", "handshake-flood", "--json"])
            .args(["--target", "198.18.251.1:51821", "--public", &kb.public])
            .args([
                "--source",
                "198.18.251.10",
                "--sources",
                &SOURCES.to_string(),
            ])
            .args(["--seconds", &FLOOD_SECONDS.to_string()])
            .args(["--rate", &FLOOD_RATE.to_string()])
            .args(["--replay", &hex(&captured)])
            .args(["--interface", &ifb, "--pid", &b_pid.to_string()]);
        ChildGuard::spawn(c, "flood", &flood_out).or_panic()
    };
    // Pings through the A–B tunnel for most of the flood.
    let a_ping = {
        let mut c = nsa.cmd("ping");
        c.args(["-n", "-c", &A_PINGS.to_string(), "-i", "0.5", "-W", "2"])
            .arg(&b_tunnel);
        ChildGuard::spawn(c, "ping A→B", &env.path("ping-a.log")).or_panic()
    };
    // Let B notice the load, then bring C up: it must get through.
    std::thread::sleep(Duration::from_secs(2));
    let mut c = BraidUp::start(&env, &nsg, &ifc, &conf_c, BraidMode::Daemon);
    c.assert_up();
    let c_through = ping_until_reply(&nsg, "198.19.251.2", C_WITHIN);
    let flood_still_running = flood.running();
    let c_show = nsg.run(BRAID, &["show", &ifc], SHORT).combined();

    let mut a_ping = a_ping;
    a_ping.wait_exit(LONG);
    let a_result = parse_ping(&a_ping.log_text());
    assert!(
        flood
            .wait_exit(Duration::from_secs(FLOOD_SECONDS as u64) + LONG)
            .is_some(),
        "the flood generator did not stop"
    );
    let report: Value = flood
        .log_text()
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no report from the generator: {}", flood.log_text()));
    eprintln!("[{test}] flood report: {report}");
    let b_show = nsb.run(BRAID, &["show", &ifb], SHORT).combined();
    eprintln!("[{test}] B after the flood:\n{b_show}");

    assert!(
        report["cookie_replies_received"].as_u64().unwrap_or(0) > 0,
        "B never switched to cookie replies: {report}"
    );
    assert!(
        report["responder_counters"]["invalid_mac"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "B did not see the bogus initiations: {report}"
    );
    let a_result = a_result.expect("A's ping summary");
    eprintln!(
        "[{test}] A→B during the flood: {}/{} replies",
        a_result.received, a_result.transmitted
    );
    assert!(
        a_result.received > 0,
        "the A–B tunnel carried nothing under the flood:\n{}",
        a_result.output
    );
    assert!(c_through, "C never reached B through the flood:\n{c_show}");
    assert!(
        flood_still_running,
        "C only got through after the flood ended"
    );
    let c_cookies: u64 = c_show
        .lines()
        .find_map(|l| l.split_once("cookie_replies_received:"))
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        c_cookies >= 1,
        "C got through without taking a cookie:\n{c_show}"
    );
    // A's session survived the replays of its own initiation.
    let p = ping(&nsa, &b_tunnel, 3);
    assert_eq!(p.received, 3, "{}", p.output);

    assert!(c.down().ok());
    assert!(a.down().ok());
    assert!(b.down().ok());
}
