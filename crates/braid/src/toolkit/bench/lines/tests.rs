//! Unit tests of what `braid bench lines` plans and how section 5 judges.

use super::checks::{judge, Results};
use super::plan::{
    best_key, plan, unequal_key, unequal_timing, Measure, Opts, Target, Who, BEST_LINES, ROWS,
    SECTIONS,
};
use super::run::{mptcp_evidence, tcp_args, tcp_summary, Outcome};
use serde_json::{json, Value};

fn opts(argv: &str) -> Opts {
    let argv: Vec<String> = argv.split_whitespace().map(str::to_string).collect();
    super::parse(&argv).unwrap().unwrap()
}

#[test]
fn unequal_plans_every_row_with_braid_and_mptcp_and_each_best_line() {
    let o = opts("--only unequal");
    assert_eq!(o.unequal_cc, ["cubic", "bbr"]);
    let cases = plan(&o);
    // Per cc: 4 best lines + 6 rows × (braid, MPTCP).
    assert_eq!(cases.len(), 2 * (BEST_LINES.len() + 2 * ROWS.len()));
    let mut keys: Vec<&str> = cases.iter().map(|c| c.key.as_str()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), cases.len(), "keys are unique");
    for cc in ["cubic", "bbr"] {
        for row in &ROWS {
            for who in [Who::Braid, Who::Mptcp] {
                let c = cases
                    .iter()
                    .find(|c| c.key == unequal_key(row.key, cc, who))
                    .unwrap();
                assert_eq!(c.setup.lines.len(), 2);
                assert_eq!(c.setup.mode, "aggregate");
                assert_eq!(c.extra.mptcp, who == Who::Mptcp);
                assert_eq!(c.seconds, 10);
                assert!(matches!(c.measure, Measure::Tcp { cc: Some(x), .. } if x == cc));
                // Every line has a rate cap and a 100 ms queue.
                for l in &c.setup.lines {
                    assert!(l.windows(2).any(|w| w[0] == "--queue" && w[1] == "100ms"));
                    assert!(l.iter().any(|f| f == "--rate"));
                }
            }
            assert!(cases.iter().any(|c| c.key == best_key(row.best, cc)));
        }
    }
    let fall = cases
        .iter()
        .find(|c| c.key == unequal_key("fall", "cubic", Who::Mptcp))
        .unwrap();
    assert_eq!(
        fall.extra.actions,
        vec![(3.0, 0, "rate 10mbit".to_string())]
    );
    assert_eq!(fall.extra.tail_from, Some(5.0));
    let wide = cases
        .iter()
        .find(|c| c.key == unequal_key("wide", "bbr", Who::Braid))
        .unwrap();
    assert_eq!(wide.extra.streams, 4);
    let best_wide = cases
        .iter()
        .find(|c| c.key == best_key("wide", "bbr"))
        .unwrap();
    assert_eq!(
        (best_wide.extra.streams, best_wide.setup.mode),
        (4, "failover")
    );
    let best_l25 = cases
        .iter()
        .find(|c| c.key == best_key("l25", "bbr"))
        .unwrap();
    assert_eq!(best_l25.extra.tail_from, Some(5.0));
    let lossy = cases
        .iter()
        .find(|c| c.key == unequal_key("lossy", "bbr", Who::Braid))
        .unwrap();
    assert!(lossy.setup.lines[1]
        .windows(2)
        .any(|w| w == ["--loss", "2%"]));
    assert!(!lossy.setup.lines[0].iter().any(|f| f == "--loss"));
}

#[test]
fn quick_and_congestion_control_options() {
    let o = opts("--quick --only unequal");
    assert_eq!(o.unequal_cc, ["cubic"]);
    let t = unequal_timing(true);
    assert!(t.fall_at < t.tail_from && t.tail_from < f64::from(t.seconds));
    assert!(plan(&o).iter().all(|c| c.seconds == t.seconds));
    let full = unequal_timing(false);
    assert_eq!((full.seconds, full.fall_at, full.tail_from), (10, 3.0, 5.0));
    let o = opts("--only seed,loss,aggregate --cc cubic --unequal-cc bbr");
    assert_eq!(o.cc, [Some("cubic")]);
    assert_eq!(o.agg_cc, [Some("cubic")]);
    assert_eq!(o.unequal_cc, ["bbr"]);
    for c in plan(&o) {
        if let Measure::Tcp { cc, .. } = c.measure {
            assert_eq!(cc, Some("cubic"), "{}", c.key);
            assert!(c.key.ends_with("/cubic"), "{}", c.key);
        }
    }
    // By default sections 1 and 2 run with the machine's default and with
    // cubic, under keys of their own (the default's as before); section 4
    // with the default only; quick with the default only.
    let o = opts("--only seed,loss,aggregate");
    assert_eq!(o.cc, [None, Some("cubic")]);
    let cases = plan(&o);
    let with = |cc: Option<&str>, prefix: &str| {
        cases
            .iter()
            .filter(|c| c.key.starts_with(prefix))
            .filter(|c| matches!(c.measure, Measure::Tcp { cc: x, .. } if x == cc))
            .count()
    };
    assert_eq!(with(None, "seed/"), with(Some("cubic"), "seed/"));
    assert!(with(None, "seed/") > 0);
    assert_eq!(with(None, "loss/tcp"), 3);
    assert_eq!(with(Some("cubic"), "loss/tcp/cubic"), 3);
    assert_eq!(with(Some("cubic"), "loss/clean/cubic"), 3);
    assert_eq!((with(None, "agg/"), with(Some("cubic"), "agg/")), (2, 0));
    assert!(cases.iter().any(|c| c.key == "seed/3ms±1ms/8M/window"));
    assert!(cases
        .iter()
        .any(|c| c.key == "seed/3ms±1ms/8M/window/cubic"));
    assert_eq!(opts("--quick --only seed").cc, [None]);
    assert_eq!(opts("--cc default,bbr").cc, [None, Some("bbr")]);
    // One row: its cases and its best line only.
    let o = opts("--only unequal --rows bond --unequal-cc cubic");
    let keys: Vec<String> = plan(&o).into_iter().map(|c| c.key).collect();
    assert_eq!(
        keys,
        [
            best_key("fast", "cubic"),
            unequal_key("bond", "cubic", Who::Braid),
            unequal_key("bond", "cubic", Who::Mptcp)
        ]
    );
    // Rounds: interleaved, each case once per round.
    let o = opts("--only unequal --rows slow --unequal-cc cubic,bbr --unequal-runs 3");
    let cases = plan(&o);
    assert_eq!(cases.len(), 3 * 2 * 3);
    assert_eq!(cases[0].run, 0);
    assert_eq!(cases[3].key, best_key("fast", "bbr"));
    assert_eq!(cases[6].key, best_key("fast", "cubic"));
    assert_eq!(cases[6].run, 1);
    assert!(cases[17].label.contains("run 3/3"), "{}", cases[17].label);
    assert!(!o.realtime);
    assert!(opts("--only unequal --realtime").realtime);
    for bad in [
        "--unequal-runs 0",
        "--cc",
        "--cc fast",
        "--unequal-cc cubic,nope",
        "--only unequal,x",
        "--rows bond,nope",
    ] {
        let argv: Vec<String> = bad.split_whitespace().map(str::to_string).collect();
        assert!(super::parse(&argv).is_err(), "{bad}");
    }
    assert!(SECTIONS.contains(&"unequal"));
}

fn row(key: &str) -> &'static super::plan::Row {
    ROWS.iter().find(|r| r.key == key).unwrap()
}

#[test]
fn the_targets_are_the_issues() {
    assert_eq!(
        row("bond").target,
        Target::SumAndMptcp {
            sum: 0.85,
            mptcp: 0.97
        }
    );
    assert_eq!(row("bond").sum_mbps, 125.0);
    assert_eq!(row("even").target, Target::Sum(0.85));
    assert_eq!(row("slow").target, Target::Best(0.95));
    assert_eq!(
        (row("fall").target, row("fall").sum_mbps),
        (Target::Sum(0.70), 35.0)
    );
    assert_eq!(
        (row("wide").target, row("wide").sum_mbps),
        (Target::Sum(0.90), 400.0)
    );
    assert_eq!(row("lossy").target, Target::Row("bond", 0.90));
}

#[test]
fn judging_a_row() {
    let ok = |x: f64| -> Result<f64, String> { Ok(x) };
    let none = || -> Result<f64, String> { Err("not measured: mptcpize is missing".into()) };
    let bond = row("bond");
    // 85 % of 125 = 106.25; 97 % of 110 = 106.7.
    assert_eq!(
        judge(bond, &ok(107.0), &ok(110.0), &ok(94.0), None).0,
        Some(true)
    );
    assert_eq!(
        judge(bond, &ok(106.0), &ok(100.0), &ok(94.0), None).0,
        Some(false)
    );
    assert_eq!(
        judge(bond, &ok(107.0), &ok(116.8), &ok(94.0), None).0,
        Some(false)
    );
    // Without MPTCP, a bond that reaches the sum target is not checked;
    // one that misses it fails anyway.
    let (p, why) = judge(bond, &ok(110.0), &none(), &ok(94.0), None);
    assert_eq!(p, None);
    assert!(why.contains("MPTCP not measured: mptcpize"), "{why}");
    assert_eq!(
        judge(bond, &ok(87.0), &none(), &ok(94.0), None).0,
        Some(false)
    );
    // braid not measured is a failure.
    let (p, why) = judge(bond, &Err("iperf3: boom".into()), &ok(1.0), &ok(1.0), None);
    assert_eq!(p, Some(false));
    assert!(why.contains("boom"));
    let slow = row("slow");
    assert_eq!(
        judge(slow, &ok(90.0), &ok(33.0), &ok(94.0), None).0,
        Some(true)
    );
    assert_eq!(
        judge(slow, &ok(1.6), &ok(33.0), &ok(94.0), None).0,
        Some(false)
    );
    assert_eq!(judge(slow, &ok(90.0), &ok(33.0), &none(), None).0, None);
    let fall = row("fall");
    assert_eq!(judge(fall, &ok(24.5), &none(), &none(), None).0, Some(true));
    assert_eq!(
        judge(fall, &ok(24.4), &none(), &none(), None).0,
        Some(false)
    );
    let lossy = row("lossy");
    assert_eq!(
        judge(lossy, &ok(90.0), &ok(57.0), &ok(94.0), Some(&ok(100.0))).0,
        Some(true)
    );
    assert_eq!(
        judge(lossy, &ok(3.3), &ok(57.0), &ok(94.0), Some(&ok(87.0))).0,
        Some(false)
    );
    assert_eq!(
        judge(lossy, &ok(90.0), &ok(57.0), &ok(94.0), Some(&none())).0,
        None
    );
    let wide = row("wide");
    assert_eq!(
        judge(wide, &ok(360.0), &none(), &none(), None).0,
        Some(true)
    );
    assert_eq!(
        judge(wide, &ok(359.0), &none(), &none(), None).0,
        Some(false)
    );
}

fn outcome(result: Result<Value, String>) -> Outcome {
    Outcome {
        result,
        notes: Vec::new(),
        counters: Value::Null,
        show: String::new(),
        wall: 0.0,
        panel: None,
    }
}

#[test]
fn rows_are_built_from_the_outcomes() {
    let o = opts("--only unequal --unequal-cc cubic");
    let cases = plan(&o);
    let outcomes: Vec<Outcome> = cases
        .iter()
        .map(|c| {
            if c.extra.mptcp && c.key.contains("/slow/") {
                return outcome(Err("not measured: mptcpize is missing".into()));
            }
            let mbps = if c.extra.mptcp { 110.0 } else { 100.0 };
            outcome(Ok(json!({
                "mbps": mbps,
                "tail_mbps": 30.0,
                "mptcp": {"two_subflows": true, "summary": "2 subflow(s)"},
            })))
        })
        .collect();
    let r = Results {
        cases: &cases,
        outcomes: &outcomes,
    };
    let rows = super::checks::unequal_rows(&r);
    assert_eq!(rows.len(), ROWS.len());
    let get = |k: &str| rows.iter().find(|u| u.row.key == k).unwrap();
    // 100 ≥ 106.25? no.
    assert_eq!(get("bond").pass, Some(false));
    assert_eq!(get("bond").ratio(&get("bond").mptcp), Some(100.0 / 110.0));
    assert_eq!(get("even").pass, Some(true));
    assert!(get("slow").mptcp.as_ref().unwrap_err().contains("mptcpize"));
    assert_eq!(get("slow").pass, Some(true));
    // The fall row counts the last seconds: 30 ≥ 24.5.
    assert_eq!(get("fall").braid, Ok(30.0));
    assert_eq!(get("fall").pass, Some(true));
    assert_eq!(get("lossy").pass, Some(true));
    assert_eq!(get("bond").mptcp_two_subflows, Some(true));
    // The text table says why a column was not measured.
    super::report::print_unequal(&o, &rows);
    let json = super::report::unequal_json(&rows);
    assert_eq!(json.len(), ROWS.len());
    assert_eq!(json[0]["row"], "bond");
    assert_eq!(json[0]["sum_mbps"], 125.0);
    assert_eq!(json[0]["pass"], false);
    assert_eq!(json[2]["mptcp_mbps"], Value::Null);
    assert!(json[2]["mptcp_error"]
        .as_str()
        .unwrap()
        .contains("mptcpize"));
}

#[test]
fn iperf_arguments_and_summaries() {
    let mut extra = super::plan::Extra {
        streams: 4,
        ..Default::default()
    };
    assert_eq!(
        tcp_args(10, None, Some("cubic"), &extra),
        ["-t", "10", "-C", "cubic", "-P", "4"]
    );
    extra.streams = 1;
    extra.tail_from = Some(5.0);
    assert_eq!(
        tcp_args(10, Some("8M"), None, &extra),
        ["-t", "10", "-w", "8M", "--get-server-output"]
    );
    let iv = |s: f64, b: f64| json!({"sum": {"start": s, "end": s + 1.0, "bytes": b, "bits_per_second": b * 8.0}});
    let report = json!({
        "start": {"test_start": {"protocol": "TCP"}},
        "intervals": (0..10).map(|s| iv(s as f64, 1e7)).collect::<Vec<_>>(),
        "server_output_json": {"intervals": (0..10).map(|s| iv(s as f64, if s < 5 { 1e7 } else { 2.5e6 })).collect::<Vec<_>>()},
        "end": {"sum_received": {"bits_per_second": 5e7, "bytes": 6.25e7, "seconds": 10.0},
                "sum_sent": {"retransmits": 7}},
    });
    let s = tcp_summary(&report, Some(5.0)).unwrap();
    assert_eq!(s["mbps"], 50.0);
    assert_eq!(s["tail_mbps"], 20.0);
    assert_eq!(s["tail_counted_by"], "receiver");
    let s = tcp_summary(&report, None).unwrap();
    assert!(s.get("tail_mbps").is_none());
}

#[test]
fn mptcp_evidence_needs_traffic_on_both_lines() {
    let relay = |bytes: f64| json!({"up": {"forwarded_bytes": bytes}});
    let subflows = ["198.19.95.1".to_string(), "198.19.96.1".to_string()];
    let v = mptcp_evidence("wireguard-go v1", &subflows, &[relay(5e6), relay(1e6)]);
    assert_eq!(v["two_subflows"], true);
    let s = v["summary"].as_str().unwrap();
    assert!(
        s.contains("2 subflow(s)") && s.contains("198.19.96.1"),
        "{s}"
    );
    let v = mptcp_evidence("wireguard-go v1", &subflows[..1], &[relay(5e6), relay(1e3)]);
    assert_eq!(v["two_subflows"], false);
    assert!(v["summary"].as_str().unwrap().contains("NOT both lines"));
    let v = mptcp_evidence("wireguard-go v1", &[], &[relay(5e6)]);
    assert_eq!(v["two_subflows"], false);
}

#[test]
fn rounds_give_medians_and_every_anchor_run_must_use_both_lines() {
    let o = opts("--only unequal --rows bond --unequal-cc cubic --unequal-runs 3");
    let cases = plan(&o);
    let outcomes: Vec<Outcome> = cases
        .iter()
        .map(|c| {
            let mbps = 80.0 + 10.0 * c.run as f64;
            outcome(Ok(json!({
                "mbps": if c.extra.mptcp { mbps + 30.0 } else { mbps },
                "mptcp": {"two_subflows": c.run != 2, "summary": format!("run {}", c.run)},
            })))
        })
        .collect();
    let r = Results {
        cases: &cases,
        outcomes: &outcomes,
    };
    let rows = super::checks::unequal_rows(&r);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].braid, Ok(90.0));
    assert_eq!(rows[0].mptcp, Ok(120.0));
    assert_eq!(rows[0].mptcp_two_subflows, Some(false));
    assert_eq!(rows[0].mptcp_summary, "run 0 | run 1 | run 2");
}

#[test]
fn a_rate_change_that_did_not_happen_is_noted() {
    let o = opts("--only unequal --rows fall --unequal-cc cubic");
    let cases = plan(&o);
    let fall = cases.iter().find(|c| c.key.contains("/fall/")).unwrap();
    let relay = |bps: u64| json!({"up": {"rate_bps": bps}});
    let mut notes = Vec::new();
    super::run::check_rates(fall, &[relay(10_000_000), relay(25_000_000)], &mut notes);
    assert!(notes.is_empty(), "{notes:?}");
    super::run::check_rates(fall, &[relay(100_000_000), relay(25_000_000)], &mut notes);
    assert_eq!(notes.len(), 1);
    assert!(
        notes[0].contains("line 1") && notes[0].contains("10mbit"),
        "{notes:?}"
    );
}

#[test]
fn plot_takes_an_svg_in_a_directory_that_exists() {
    assert_eq!(
        opts("--quick --plot /tmp/lines.svg").plot,
        Some(std::path::PathBuf::from("/tmp/lines.svg"))
    );
    assert_eq!(opts("--quick").plot, None);
    let argv = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_string).collect() };
    let e = super::parse(&argv("--plot lines.png")).err().unwrap();
    assert!(e.contains("--plot: \"lines.png\" must end in .svg"), "{e}");
    let e = super::parse(&argv("--plot /nonexistent/dir/x.svg"))
        .err()
        .unwrap();
    assert!(e.contains("does not exist"), "{e}");
}
