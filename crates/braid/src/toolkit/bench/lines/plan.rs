//! What `braid bench lines` runs: the line profiles of the seed's table and
//! one [`Case`] per transfer, in the order they run.

/// The lab's addresses: tunnel addresses of A and B.
pub(super) const TUNNEL_A: &str = "198.19.93.1";
pub(super) const TUNNEL_B: &str = "198.19.93.2";
/// (interface in both namespaces, address in A, address in B, relay port).
pub(super) const LINES: [(&str, &str, &str, u16); 2] = [
    ("line1", "198.18.93.1", "198.18.93.2", 5001),
    ("line2", "198.18.94.1", "198.18.94.2", 5002),
];
pub(super) const B_PORT: u16 = 51820;
pub(super) const SECTIONS: [&str; 5] = ["seed", "loss", "cut", "aggregate", "unequal"];

/// What the command line asked for.
pub(super) struct Opts {
    pub(super) quick: bool,
    pub(super) json: bool,
    pub(super) short: u32,
    pub(super) long: u32,
    pub(super) runs: usize,
    pub(super) only: Vec<String>,
}

/// A line profile of the seed's table.
pub(super) struct Profile {
    pub(super) key: &'static str,
    pub(super) label: &'static str,
    pub(super) flags: &'static [&'static str],
    /// The same line without jitter (what the "line" column shows).
    pub(super) twin: &'static str,
    pub(super) long: bool,
}

pub(super) const PROFILES: [Profile; 5] = [
    Profile {
        key: "none",
        label: "no delay",
        flags: &[],
        twin: "none",
        long: false,
    },
    Profile {
        key: "3ms",
        label: "3 ms",
        flags: &["--delay", "3ms"],
        twin: "3ms",
        long: false,
    },
    Profile {
        key: "3ms±1ms",
        label: "3 ms ± 1 ms",
        flags: &["--delay", "3ms", "--jitter", "1ms"],
        twin: "3ms",
        long: false,
    },
    Profile {
        key: "200ms",
        label: "200 ms",
        flags: &["--delay", "200ms"],
        twin: "200ms",
        long: true,
    },
    Profile {
        key: "200ms±50ms",
        label: "200 ms ± 50 ms",
        flags: &["--delay", "200ms", "--jitter", "50ms"],
        twin: "200ms",
        long: true,
    },
];

pub(super) const WINDOWS: [&str; 2] = ["256K", "8M"];

/// How the tunnel is built for a case.
#[derive(Clone)]
pub(super) struct Setup {
    pub(super) mode: &'static str,
    /// `ReorderHold =` value; None leaves the default (adaptive window).
    pub(super) hold: Option<&'static str>,
    /// `braid netem` flags, one entry per line.
    pub(super) lines: Vec<Vec<String>>,
}

#[derive(Clone)]
pub(super) enum Measure {
    /// One TCP stream, with `iperf3 -w` and `-C` (congestion control)
    /// when given.
    Tcp {
        window: Option<&'static str>,
        cc: Option<&'static str>,
    },
    /// A constant-rate UDP stream; `cut` = (cut, restore) of line 1, in
    /// seconds after the client started.
    Udp {
        rate: &'static str,
        len: u32,
        cut: Option<(f64, f64)>,
    },
}

pub(super) struct Case {
    pub(super) key: String,
    /// Repetition of the same key (0-based); tables show the median.
    pub(super) run: usize,
    pub(super) label: String,
    pub(super) setup: Setup,
    pub(super) measure: Measure,
    pub(super) seconds: u32,
}

pub(super) fn flags(base: &[&str], seed: u32) -> Vec<String> {
    let mut v: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    v.extend(["--seed".to_string(), seed.to_string()]);
    v
}

pub(super) fn plan(o: &Opts) -> Vec<Case> {
    let mut cases = Vec::new();
    let wants = |s: &str| o.only.iter().any(|x| x == s);
    if wants("seed") {
        let profiles: Vec<&Profile> = PROFILES.iter().filter(|p| !o.quick || !p.long).collect();
        let windows: &[&str] = if o.quick { &WINDOWS[..1] } else { &WINDOWS };
        for w in windows {
            // Short lines: `runs` interleaved rounds; 200 ms lines once.
            let rounds =
                (0..o.runs).flat_map(|r| profiles.iter().filter(|p| !p.long).map(move |p| (r, *p)));
            let long = profiles.iter().filter(|p| p.long).map(|p| (0, *p));
            for (run, p) in rounds.chain(long).collect::<Vec<_>>() {
                for hold in [Some("0"), None] {
                    let runs = if p.long { 1 } else { o.runs };
                    cases.push(Case {
                        key: seed_key(p.key, w, hold.is_some()),
                        run,
                        label: format!(
                            "1. one line {}, -w {w}, {}{}",
                            p.label,
                            if hold.is_some() {
                                "ReorderHold = 0"
                            } else {
                                "window"
                            },
                            run_label(run, runs)
                        ),
                        setup: Setup {
                            mode: "redundant",
                            hold,
                            lines: vec![flags(p.flags, 11)],
                        },
                        measure: Measure::Tcp {
                            window: Some(w),
                            cc: None,
                        },
                        seconds: if p.long { o.long } else { o.short },
                    });
                }
            }
        }
    }
    if wants("loss") {
        // Lines of a fixed capacity (the seed's were 200 Mb/s), so the TCP
        // comparison is about what the loss costs, not about how much CPU
        // two relays and two copies of every packet take on this machine.
        let lossy = || flags(&["--loss", "2%", "--rate", "200mbit"], 11);
        let lossy2 = || flags(&["--loss", "2%", "--rate", "200mbit"], 22);
        cases.push(Case {
            key: "loss/udp".into(),
            run: 0,
            label: "2. two 200 Mbit/s lines 2 % loss, redundant, UDP 50 Mbit/s".into(),
            setup: Setup {
                mode: "redundant",
                hold: None,
                lines: vec![lossy(), lossy2()],
            },
            measure: Measure::Udp {
                rate: "50M",
                len: 1200,
                cut: None,
            },
            seconds: o.short,
        });
        for run in 0..o.runs {
            cases.push(Case {
                key: "loss/tcp".into(),
                run,
                label: format!(
                    "2. two 200 Mbit/s lines 2 % loss, redundant, TCP{}",
                    run_label(run, o.runs)
                ),
                setup: Setup {
                    mode: "redundant",
                    hold: None,
                    lines: vec![lossy(), lossy2()],
                },
                measure: Measure::Tcp {
                    window: None,
                    cc: None,
                },
                seconds: o.short,
            });
            cases.push(Case {
                key: "loss/clean".into(),
                run,
                label: format!(
                    "2. one clean 200 Mbit/s line, TCP (reference){}",
                    run_label(run, o.runs)
                ),
                setup: Setup {
                    mode: "redundant",
                    hold: None,
                    lines: vec![flags(&["--rate", "200mbit"], 11)],
                },
                measure: Measure::Tcp {
                    window: None,
                    cc: None,
                },
                seconds: o.short,
            });
        }
    }
    if wants("cut") {
        let (secs, cut) = if o.quick {
            (6, (2.0, 4.0))
        } else {
            (10, (3.5, 6.5))
        };
        for mode in ["redundant", "failover"] {
            cases.push(Case {
                key: format!("cut/{mode}"),
                run: 0,
                label: format!(
                    "3. two lines 3 ms, line 1 cut {:.1}–{:.1} s, {mode}, UDP 20 Mbit/s",
                    cut.0, cut.1
                ),
                setup: Setup {
                    mode,
                    hold: None,
                    lines: vec![
                        flags(&["--delay", "3ms"], 11),
                        flags(&["--delay", "3ms"], 22),
                    ],
                },
                measure: Measure::Udp {
                    rate: "20M",
                    len: 1000,
                    cut: Some(cut),
                },
                seconds: secs,
            });
        }
    }
    if wants("aggregate") {
        for mode in ["aggregate", "redundant"] {
            cases.push(Case {
                key: format!("agg/{mode}"),
                run: 0,
                label: format!("4. two lines 100 Mbit/s, 10 ms and 30 ms, {mode}, TCP"),
                setup: Setup {
                    mode,
                    hold: None,
                    lines: vec![
                        flags(&["--rate", "100mbit", "--delay", "10ms"], 11),
                        flags(&["--rate", "100mbit", "--delay", "30ms"], 22),
                    ],
                },
                measure: Measure::Tcp {
                    window: None,
                    cc: None,
                },
                seconds: o.long,
            });
        }
    }
    if wants("unequal") {
        for (variant, _, line2) in UNEQUAL {
            for cc in CONGESTION_CONTROLS {
                let mut lines = vec![flags(FAST_LINE, 11)];
                if let Some(line2) = line2 {
                    lines.push(flags(line2, 22));
                }
                cases.push(Case {
                    key: unequal_key(variant, cc),
                    run: 0,
                    label: format!("5. {}, TCP {cc}", unequal_label(variant)),
                    setup: Setup {
                        mode: "aggregate",
                        hold: None,
                        lines,
                    },
                    measure: Measure::Tcp {
                        window: None,
                        cc: Some(cc),
                    },
                    seconds: if o.quick { 4 } else { 10 },
                });
            }
        }
    }
    cases
}

/// Section 5's fast line: 100 Mbit/s, 10 ms one way, a 100 ms queue.
pub(super) const FAST_LINE: &[&str] = &["--rate", "100mbit", "--delay", "10ms", "--queue", "100ms"];

/// Section 5's cases: (key, label, the second line's flags; none: the fast
/// line alone, the reference every bond is judged against).
pub(super) const UNEQUAL: [(&str, &str, Option<&[&str]>); 4] = [
    ("best", "the fast line alone (100 Mbit/s, 10 ms)", None),
    (
        "bond",
        "100 Mbit/s 10 ms + 25 Mbit/s 40 ms",
        Some(&["--rate", "25mbit", "--delay", "40ms", "--queue", "100ms"]),
    ),
    (
        "slow",
        "100 Mbit/s 10 ms + 2 Mbit/s 300 ms",
        Some(&["--rate", "2mbit", "--delay", "300ms", "--queue", "100ms"]),
    ),
    (
        "lossy",
        "100 Mbit/s 10 ms + 25 Mbit/s 40 ms with 2 % loss",
        Some(&[
            "--rate", "25mbit", "--delay", "40ms", "--queue", "100ms", "--loss", "2%",
        ]),
    ),
];

/// The inner TCP's congestion control: cubic (what most users' machines
/// run) and bbr (this machine's default, which shrugs off loss and
/// reordering).
pub(super) const CONGESTION_CONTROLS: [&str; 2] = ["cubic", "bbr"];

pub(super) fn unequal_key(variant: &str, cc: &str) -> String {
    format!("unequal/{variant}/{cc}")
}

pub(super) fn unequal_label(variant: &str) -> &'static str {
    UNEQUAL.iter().find(|u| u.0 == variant).map_or("?", |u| u.1)
}

/// "3 × 5 s (median)" or "15 s".
pub(super) fn runs_text(runs: usize, seconds: u32) -> String {
    if runs > 1 {
        format!("median of {runs} × {seconds} s")
    } else {
        format!("{seconds} s")
    }
}

pub(super) fn run_label(run: usize, runs: usize) -> String {
    if runs > 1 {
        format!(", run {}/{runs}", run + 1)
    } else {
        String::new()
    }
}

pub(super) fn seed_key(profile: &str, window: &str, hold0: bool) -> String {
    format!(
        "seed/{profile}/{window}/{}",
        if hold0 { "hold0" } else { "window" }
    )
}
