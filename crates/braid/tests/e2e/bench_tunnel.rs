//! `braid bench tunnel --quick --json` for braid and for the raw veth:
//! every number is there and positive, and the lab's namespaces are gone
//! afterwards; braid's run also draws `--plot` (issue 23), which a
//! renderer nobody here wrote turns into a picture. Nothing asserts how
//! fast anything ran.

use serde_json::Value;
use std::process::Command;

const KEYS: [&str; 9] = [
    "single_gbps",
    "parallel4_gbps",
    "reverse_gbps",
    "cpu_s_per_gb",
    "system_cpu_s_per_gb",
    "ping_idle_p50_ms",
    "ping_idle_p99_ms",
    "ping_loaded_p50_ms",
    "ping_loaded_p99_ms",
];

fn netns_list() -> String {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn bench(vpn: &str, plot: Option<&std::path::Path>) -> Value {
    let mut cmd = Command::new(crate::harness::BRAID);
    cmd.args(["bench", "tunnel", "--quick", "--json", "--vpn", vpn]);
    if let Some(file) = plot {
        cmd.arg("--plot").arg(file);
    }
    let out = cmd.output().expect("run braid bench tunnel");
    assert!(
        out.status.success(),
        "braid bench tunnel --vpn {vpn} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

fn check(doc: &Value, vpn: &str) {
    assert_eq!(doc["vpn"], vpn);
    let rounds = doc["per_round"].as_array().expect("per_round");
    assert_eq!(rounds.len(), 1, "--quick runs one round");
    let mut objects: Vec<(&str, &Value)> = vec![
        ("median", &doc["median"]),
        ("min", &doc["min"]),
        ("max", &doc["max"]),
    ];
    objects.extend(rounds.iter().map(|r| ("round", r)));
    for (what, obj) in objects {
        for key in KEYS {
            let v = &obj[key];
            if vpn == "none" && key == "cpu_s_per_gb" {
                // No tunnel, no VPN process to charge.
                assert!(v.is_null(), "{vpn} {what} {key}: {v}");
                continue;
            }
            let x = v
                .as_f64()
                .unwrap_or_else(|| panic!("{vpn} {what} {key}: {v}"));
            assert!(x.is_finite() && x > 0.0, "{vpn} {what} {key}: {x}");
        }
    }
    let namespaces = doc["namespaces"].as_array().expect("namespaces");
    assert_eq!(namespaces.len(), 2);
    let left = netns_list();
    for ns in namespaces {
        let ns = ns.as_str().expect("a name");
        assert!(
            !left
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns)),
            "namespace {ns} still there after the bench:\n{left}"
        );
    }
}

#[test]
fn bench_tunnel_quick_json_braid_and_raw_veth() {
    if !crate::harness::preflight("bench_tunnel", &["ip", "iperf3", "ping"]) {
        return;
    }
    // It measures throughput: not while another test does.
    let _serial = crate::harness::iperf_lock();
    let env = crate::harness::TestEnv::new("bench_tunnel");
    let svg = env.path("tunnel.svg");
    for vpn in ["braid", "none"] {
        let doc = bench(vpn, (vpn == "braid").then_some(svg.as_path()));
        check(&doc, vpn);
        if vpn == "braid" {
            assert_eq!(doc["vpn_pids"].as_array().map(Vec::len), Some(2));
        }
    }
    let text = std::fs::read_to_string(&svg).expect("the --plot file");
    for want in [
        "braid bench tunnel",
        "braid: one TCP stream A→B (with ping)",
        "braid: 4 TCP streams A→B",
        "braid: one TCP stream B→A (-R)",
        "round 1",
        "Mbit/s",
    ] {
        assert!(text.contains(want), "no {want:?} in {}", svg.display());
    }
    crate::plots::assert_renders(&svg);
}
