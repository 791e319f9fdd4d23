//! `--plot FILE.svg` (issue 23 item 3) of `braid demo` and `braid bench
//! lines`: the picture holds every line and the total, the cut and the
//! restore the bench sent and braid's own word on the failover, and
//! librsvg's `rsvg-convert` (nobody here wrote it) renders it to a PNG.
//! (`braid bench tunnel --plot` is in `bench_tunnel`.) Nothing asserts how
//! fast anything ran.

use crate::harness::*;
use std::path::Path;
use std::process::Command;

/// rsvg-convert turns `svg` into a PNG of some size (a picture, not an
/// error page); the PNG is left beside it.
pub fn assert_renders(svg: &Path) {
    if which("rsvg-convert").is_none() {
        assert!(
            !in_ci(),
            "rsvg-convert missing (apt-get install librsvg2-bin)"
        );
        eprintln!("rsvg-convert missing: the SVG was not rendered");
        return;
    }
    let png = svg.with_extension("png");
    let mut c = Command::new("rsvg-convert");
    c.arg("-o").arg(&png).arg(svg);
    let out = run_bounded(c, LONG);
    let size = std::fs::metadata(&png).map_or(0, |m| m.len());
    println!("rsvg-convert {}: {size} bytes of PNG", svg.display());
    assert!(
        out.ok() && size > 10_000,
        "rsvg-convert: {}",
        out.describe()
    );
}

fn contains_all(svg: &Path, wanted: &[&str]) {
    let text = std::fs::read_to_string(svg).unwrap_or_else(|e| panic!("{}: {e}", svg.display()));
    for want in wanted {
        assert!(text.contains(want), "no {want:?} in {}", svg.display());
    }
}

#[test]
fn bench_lines_plots_the_cut_and_the_failover() {
    if !preflight(
        "bench_lines_plots_the_cut_and_the_failover",
        &["ip", "iperf3", "ping"],
    ) {
        return;
    }
    let env = TestEnv::new("plot_lines");
    let svg = env.path("lines.svg");
    let _serial = iperf_lock();
    let mut c = Command::new(BRAID);
    c.args(["bench", "lines", "--quick", "--only", "cut", "--plot"])
        .arg(&svg);
    let out = run_bounded(c, std::time::Duration::from_secs(300));
    // The exit status is the bench's verdict on braid, not this test's.
    println!("{}", tail(&out.stderr, 2000));
    contains_all(
        &svg,
        &[
            "braid bench lines",
            "line 1 cut 2.0–4.0 s, redundant, UDP 20 Mbit/s",
            "line 1 cut 2.0–4.0 s, failover, UDP 20 Mbit/s",
            "line1 (--delay 3ms)",
            "line2 (--delay 3ms)",
            "total arrived (iperf3)",
            "line1 cut",
            "line1 restored",
            // braid saw the cut line go: in failover mode, the failover.
            "braid: line1 down",
            "seconds",
        ],
    );
    assert_renders(&svg);
}

#[test]
fn the_demo_plots_its_run() {
    if !preflight("the_demo_plots_its_run", &["ip", "iperf3", "ping"]) {
        return;
    }
    let env = TestEnv::new("plot_demo");
    let svg = env.path("demo.svg");
    let _serial = iperf_lock();
    let mut c = Command::new(BRAID);
    c.args(["demo", "--seconds", "6", "--plot"]).arg(&svg);
    let out = run_bounded(c, std::time::Duration::from_secs(180));
    assert!(out.ok(), "braid demo: {}", out.describe());
    assert!(out.stdout.contains("plot: "), "{}", out.stdout);
    contains_all(
        &svg,
        &[
            "braid demo",
            "line 1 (lossy)",
            "line 2 (jittery)",
            "total arrived (braid)",
            "line 1 cut",
            "line 1 restored",
            "braid: lossy down",
        ],
    );
    assert_renders(&svg);
    // A bad target is refused before anything is built.
    let mut c = Command::new(BRAID);
    c.args(["demo", "--plot", "demo.png"]);
    let bad = run_bounded(c, SHORT);
    assert!(!bad.ok());
    assert!(
        bad.stderr.contains("must end in .svg"),
        "{}",
        bad.describe()
    );
}
