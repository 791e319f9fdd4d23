use super::*;

fn panel() -> Panel {
    let line = |label: &str, f: fn(f64) -> f64| Series {
        label: label.into(),
        points: (1..=12).map(|t| (f64::from(t), f(f64::from(t)))).collect(),
        total: false,
    };
    Panel {
        title: "two lines, line 1 cut 4–8 s".into(),
        series: vec![
            line(
                "line1",
                |t| if (4.0..8.0).contains(&t) { 0.0 } else { 40.0 },
            ),
            line("line2", |_| 40.0),
            Series {
                label: "total (iperf3)".into(),
                points: (1..=12).map(|t| (f64::from(t), 38.0)).collect(),
                total: true,
            },
        ],
        marks: vec![
            Mark {
                at: 4.0,
                kind: MarkKind::Cut,
                label: "line1 cut".into(),
            },
            Mark {
                at: 4.3,
                kind: MarkKind::Down,
                label: "braid: line1 down".into(),
            },
            Mark {
                at: 8.0,
                kind: MarkKind::Restore,
                label: "line1 restored".into(),
            },
        ],
    }
}

#[test]
fn the_svg_has_every_series_mark_and_axis() {
    let svg = render_svg("braid bench lines", &[panel(), panel()]).unwrap();
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{}",
        &svg[..80]
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    for text in [
        "braid bench lines",
        "two lines, line 1 cut 4–8 s",
        "line1",
        "line2",
        "total (iperf3)",
        "line1 cut",
        "braid: line1 down",
        "line1 restored",
        "seconds",
        "Mbit/s",
    ] {
        assert!(svg.contains(text), "no {text:?} in the SVG");
    }
    // Two panels: the caption twice.
    assert_eq!(svg.matches("two lines, line 1 cut 4–8 s").count(), 2);
    assert!(svg.contains("<polyline"), "no lines drawn");
}

#[test]
fn no_transfer_still_makes_a_picture_that_says_so() {
    let svg = render_svg("braid demo", &[]).unwrap();
    assert!(svg.contains("no transfer was measured"));
}

/// A renderer nobody here wrote reads it (librsvg's rsvg-convert, Debian
/// package librsvg2-bin): the SVG converts to a PNG. Skipped without it,
/// except under CI.
#[test]
fn rsvg_convert_renders_it() {
    use std::process::Command;
    if Command::new("rsvg-convert")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").is_err(),
            "rsvg-convert missing (apt-get install librsvg2-bin)"
        );
        eprintln!("skipped: no rsvg-convert");
        return;
    }
    let dir = std::env::temp_dir().join(format!("braid-plot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (svg, png) = (dir.join("p.svg"), dir.join("p.png"));
    write_svg(&svg, "braid bench lines", &[panel()]).unwrap();
    let out = Command::new("rsvg-convert")
        .arg("-o")
        .arg(&png)
        .arg(&svg)
        .output()
        .unwrap();
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && size > 1000,
        "rsvg-convert: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn plot_targets_are_checked_before_anything_runs() {
    assert!(parse_target("--plot", "out.svg").is_ok());
    assert!(parse_target("--plot", "/tmp/out.svg").is_ok());
    let e = parse_target("--plot", "out.png").unwrap_err();
    assert!(e.contains("must end in .svg"), "{e}");
    let e = parse_target("--plot", "/no/such/dir/out.svg").unwrap_err();
    assert!(e.contains("/no/such/dir does not exist"), "{e}");
}
