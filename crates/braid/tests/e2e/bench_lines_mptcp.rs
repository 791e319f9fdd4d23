//! `braid bench lines`, section 5's cheapest part: one row (100 + 25
//! Mbit/s) with cubic, quick timing: the fast line alone, braid aggregate,
//! and the MPTCP anchor (two wireguard-go tunnels, one per `braid netem`
//! line, `mptcpize run iperf3`). What is checked is that the bench measures,
//! not how fast braid is: every case gives a number, the anchor's transfer
//! used both lines (the relays' counters and `ss`), and the lab is gone
//! afterwards. Skipped, with the reason printed, without mptcpize or the
//! newest wireguard-go (`bash bench/compare` installs it).

use crate::harness::{in_ci, preflight, BRAID};
use braid::toolkit::lab::mptcp::MptcpTools;
use serde_json::Value;
use std::process::Command;

#[test]
fn mptcp_anchor_and_braid_on_one_row() {
    let test = "bench_lines_mptcp";
    if !preflight(test, &["ip", "iperf3", "ping", "ss", "wg"]) {
        return;
    }
    if let Err(why) = MptcpTools::find(false) {
        // Not a prerequisite of the suite: skipped in CI too, said so.
        eprintln!(
            "SKIPPED {test}: {why}{}",
            if in_ci() { " (CI=true)" } else { "" }
        );
        return;
    }
    let _lock = crate::harness::iperf_lock();
    let before = lab_leftovers();
    let out = Command::new(BRAID)
        .args([
            "bench",
            "lines",
            "--quick",
            "--json",
            "--only",
            "unequal",
            "--rows",
            "bond",
            "--unequal-cc",
            "cubic",
        ])
        .output()
        .expect("run braid bench lines");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    // The exit status says whether braid met the targets; that is
    // the bench's verdict, not this test's.
    let j: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    let rows = j["unequal"].as_array().expect("unequal rows");
    assert_eq!(rows.len(), 1, "{j}");
    let row = &rows[0];
    eprintln!("{}", serde_json::to_string_pretty(row).unwrap());
    assert_eq!(row["row"], "bond");
    assert_eq!(row["congestion_control"], "cubic");
    assert_eq!(row["sum_mbps"], 125.0);
    for col in ["best_mbps", "braid_mbps", "mptcp_mbps"] {
        let v = row[col]
            .as_f64()
            .unwrap_or_else(|| panic!("{col} missing: {row}"));
        assert!(v > 0.0, "{col} = {v}");
    }
    assert_eq!(row["mptcp_two_subflows"], true, "{row}");
    let mptcp = j["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["mptcp"] == true)
        .expect("the MPTCP case");
    let ev = &mptcp["result"]["mptcp"];
    let bytes: Vec<f64> = ev["line_bytes_up"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    assert_eq!(bytes.len(), 2);
    assert!(bytes.iter().all(|b| *b > 64.0 * 1024.0), "{ev}");
    assert!(
        ev["wireguard_go"]
            .as_str()
            .unwrap()
            .starts_with("wireguard-go"),
        "{ev}"
    );
    // Nothing of the lab is left: no namespace and no UAPI socket of the
    // bench's lab ("bl<pid>…") that was not there before.
    let after = lab_leftovers();
    let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
    assert!(new.is_empty(), "left behind: {new:?}");
}

/// Namespaces and UAPI sockets named like a `braid bench lines` lab's.
fn lab_leftovers() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("bl"))
        .map(str::to_string)
        .collect();
    if let Ok(dir) = std::fs::read_dir("/var/run/wireguard") {
        for e in dir.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("bl") {
                names.push(n);
            }
        }
    }
    names
}
