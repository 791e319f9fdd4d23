//! `braid bench peers` at a small size, braid only, as JSON: both rows
//! measured (every peer listed by `wg show`, the live peer's pings
//! answered, its TCP stream carried), every initiating peer got its
//! session, the uploading peers' packets reached the server's TUN (with
//! `Queues = 2` also through its second socket), the verdicts are there,
//! and the lab's namespaces are gone afterwards. Nothing asserts how fast
//! anything ran.

use crate::harness::*;
use serde_json::Value;
use std::process::Command;

fn netns_list() -> String {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bench_peers_measures_rows_and_a_handshake_storm() {
    let test = "bench_peers_measures_rows_and_a_handshake_storm";
    if !preflight(test, &["ip", "wg", "iperf3"]) {
        return;
    }
    let before = netns_list();
    let out = Command::new(BRAID)
        .args([
            "bench",
            "peers",
            "--vpn",
            "braid",
            "--peers",
            "0,300",
            "--handshake-peers",
            "200",
            "--spread",
            "0.5",
            "--idle-seconds",
            "1",
            "--tcp-seconds",
            "1",
            "--pings",
            "20",
            "--upload-peers",
            "100",
            "--upload-seconds",
            "1",
            "--upload-queues",
            "1,2",
            "--json",
        ])
        .output()
        .expect("run braid bench peers");
    assert!(
        out.status.success(),
        "braid bench peers failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    eprintln!("[{test}] {doc}");
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    for (row, idle) in rows.iter().zip([0u64, 300]) {
        assert_eq!(row["vpn"], "braid");
        assert_eq!(row["idle_peers"], idle);
        assert_eq!(row["shown_peers"], idle + 1, "wg show lists every peer");
        assert_eq!(row["pings_answered"], row["pings_sent"], "{row}");
        assert!(row["tcp_gbps"].as_f64().is_some_and(|g| g > 0.0), "{row}");
        assert!(row["rss_mb"].as_f64().is_some_and(|m| m > 0.0), "{row}");
    }
    let storm = &doc["handshakes"][0];
    assert_eq!(storm["peers"], 200);
    assert_eq!(storm["completed"], 200, "{storm}");
    assert!(storm["per_second"].as_f64().is_some(), "{storm}");
    let uploads = doc["uploads"].as_array().expect("uploads");
    assert_eq!(uploads.len(), 2);
    for (u, queues) in uploads.iter().zip([1u64, 2]) {
        assert_eq!(u["queues"], queues, "{u}");
        assert_eq!(u["sessions"], 100, "{u}");
        assert_eq!(u["udp_sockets"], queues, "{u}");
        let (sent, delivered) = (u["sent"].as_u64(), u["delivered"].as_u64());
        assert!(sent.is_some_and(|n| n > 0), "{u}");
        // The server's TUN takes in what it opened, and nothing it did not.
        assert!(
            delivered.is_some_and(|n| n > 0 && n <= sent.unwrap_or(0)),
            "{u}"
        );
    }
    // 100 source addresses over 2 sockets: all on the first is one run in
    // 2^100.
    assert_eq!(uploads[0]["datagrams_on_other_sockets"], 0);
    assert!(
        uploads[1]["datagrams_on_other_sockets"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{}",
        uploads[1]
    );
    assert_eq!(doc["verdicts"].as_array().map(Vec::len), Some(6));
    assert_eq!(doc["failures"].as_array().map(Vec::len), Some(0));
    // Only the bench's own (its lab names them bp…/bh…): other tests on
    // this machine come and go meanwhile.
    let left: Vec<String> = netns_list()
        .lines()
        .filter(|l| !before.lines().any(|b| b == *l))
        .filter(|l| l.starts_with("bp") || l.starts_with("bh"))
        .map(str::to_string)
        .collect();
    assert!(left.is_empty(), "the bench left namespaces: {left:?}");
}
