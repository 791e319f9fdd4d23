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
    /// The congestion controls (`iperf3 -C`; `None`: the machine's
    /// default) the TCP cases of sections 1 and 2 run with, each in turn.
    pub(super) cc: Vec<Option<&'static str>>,
    /// The same for section 4 (only what `--cc` asks for; default: the
    /// machine's).
    pub(super) agg_cc: Vec<Option<&'static str>>,
    /// The congestion controls section 5 runs, each in turn.
    pub(super) unequal_cc: Vec<String>,
    /// The rows of section 5 to run (keys of [`ROWS`]).
    pub(super) rows: Vec<String>,
    /// Rounds of section 5 (interleaved; the tables show medians).
    pub(super) unequal_runs: usize,
    /// `--plot FILE.svg`.
    pub(super) plot: Option<std::path::PathBuf>,
    /// `--realtime`: the relays at real-time priority.
    pub(super) realtime: bool,
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
    pub(super) extra: Extra,
}

/// What only section 5's cases use.
#[derive(Clone, Default, Debug, PartialEq)]
pub(super) struct Extra {
    /// The kernel's MPTCP over two wireguard-go tunnels instead of braid.
    pub(super) mptcp: bool,
    /// Parallel TCP streams (`iperf3 -P`); 0 or 1: one.
    pub(super) streams: u32,
    /// Control commands to the relays during the transfer: (seconds after
    /// the client started, line index, command).
    pub(super) actions: Vec<(f64, usize, String)>,
    /// Also report what arrived from this second on (the receiver's
    /// intervals).
    pub(super) tail_from: Option<f64>,
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
        for (cc, w) in
            o.cc.iter()
                .flat_map(|cc| windows.iter().map(move |w| (*cc, w)))
        {
            // Short lines: `runs` interleaved rounds; 200 ms lines once.
            let rounds =
                (0..o.runs).flat_map(|r| profiles.iter().filter(|p| !p.long).map(move |p| (r, *p)));
            let long = profiles.iter().filter(|p| p.long).map(|p| (0, *p));
            for (run, p) in rounds.chain(long).collect::<Vec<_>>() {
                for hold in [Some("0"), None] {
                    let runs = if p.long { 1 } else { o.runs };
                    cases.push(Case {
                        key: seed_key(p.key, w, hold.is_some(), cc),
                        run,
                        label: format!(
                            "1. one line {}, -w {w}, {}{}{}",
                            p.label,
                            if hold.is_some() {
                                "ReorderHold = 0"
                            } else {
                                "window"
                            },
                            cc_label(cc),
                            run_label(run, runs)
                        ),
                        setup: Setup {
                            mode: "redundant",
                            hold,
                            lines: vec![flags(p.flags, 11)],
                        },
                        measure: Measure::Tcp {
                            window: Some(w),
                            cc,
                        },
                        seconds: if p.long { o.long } else { o.short },
                        extra: Extra::default(),
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
            extra: Extra::default(),
        });
        for (cc, run) in
            o.cc.iter()
                .flat_map(|cc| (0..o.runs).map(move |r| (*cc, r)))
        {
            cases.push(Case {
                key: format!("loss/tcp{}", cc_suffix(cc)),
                run,
                label: format!(
                    "2. two 200 Mbit/s lines 2 % loss, redundant, TCP{}{}",
                    cc_label(cc),
                    run_label(run, o.runs)
                ),
                setup: Setup {
                    mode: "redundant",
                    hold: None,
                    lines: vec![lossy(), lossy2()],
                },
                measure: Measure::Tcp { window: None, cc },
                seconds: o.short,
                extra: Extra::default(),
            });
            cases.push(Case {
                key: format!("loss/clean{}", cc_suffix(cc)),
                run,
                label: format!(
                    "2. one clean 200 Mbit/s line, TCP{} (reference){}",
                    cc_label(cc),
                    run_label(run, o.runs)
                ),
                setup: Setup {
                    mode: "redundant",
                    hold: None,
                    lines: vec![flags(&["--rate", "200mbit"], 11)],
                },
                measure: Measure::Tcp { window: None, cc },
                seconds: o.short,
                extra: Extra::default(),
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
                extra: Extra::default(),
            });
        }
    }
    if wants("aggregate") {
        for (cc, mode) in o
            .agg_cc
            .iter()
            .flat_map(|cc| ["aggregate", "redundant"].map(move |m| (*cc, m)))
        {
            cases.push(Case {
                key: format!("agg/{mode}{}", cc_suffix(cc)),
                run: 0,
                label: format!(
                    "4. two lines 100 Mbit/s, 10 ms and 30 ms, {mode}, TCP{}",
                    cc_label(cc)
                ),
                setup: Setup {
                    mode,
                    hold: None,
                    lines: vec![
                        flags(&["--rate", "100mbit", "--delay", "10ms"], 11),
                        flags(&["--rate", "100mbit", "--delay", "30ms"], 22),
                    ],
                },
                measure: Measure::Tcp { window: None, cc },
                seconds: o.long,
                extra: Extra::default(),
            });
        }
    }
    if wants("unequal") {
        unequal_plan(o, &mut cases);
    }
    cases
}

/// Section 5's lines, `braid netem` flags: rate caps with 100 ms queues.
pub(super) const FAST_LINE: &[&str] = &["--rate", "100mbit", "--delay", "10ms", "--queue", "100ms"];
pub(super) const LINE_25: &[&str] = &["--rate", "25mbit", "--delay", "40ms", "--queue", "100ms"];
pub(super) const LINE_25_LOSSY: &[&str] = &[
    "--rate", "25mbit", "--delay", "40ms", "--queue", "100ms", "--loss", "2%",
];
pub(super) const LINE_2: &[&str] = &["--rate", "2mbit", "--delay", "300ms", "--queue", "100ms"];
pub(super) const EVEN_NEAR: &[&str] = &["--rate", "50mbit", "--delay", "5ms", "--queue", "100ms"];
pub(super) const EVEN_FAR: &[&str] = &["--rate", "50mbit", "--delay", "60ms", "--queue", "100ms"];
pub(super) const WIDE: &[&str] = &["--rate", "200mbit", "--queue", "100ms"];

/// A line measured alone (`Mode = failover` on that line): the "best line"
/// of one or more rows.
pub(super) struct BestLine {
    pub(super) key: &'static str,
    pub(super) label: &'static str,
    pub(super) flags: &'static [&'static str],
}

pub(super) const BEST_LINES: [BestLine; 4] = [
    BestLine {
        key: "fast",
        label: "100 Mbit/s 10 ms alone",
        flags: FAST_LINE,
    },
    BestLine {
        key: "near",
        label: "50 Mbit/s 5 ms alone",
        flags: EVEN_NEAR,
    },
    BestLine {
        key: "l25",
        label: "25 Mbit/s 40 ms alone",
        flags: LINE_25,
    },
    BestLine {
        key: "wide",
        label: "200 Mbit/s alone",
        flags: WIDE,
    },
];

/// What a row must reach (issue 19's targets).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Target {
    /// ≥ `sum` × the sum of the line rates and ≥ `mptcp` × MPTCP's.
    SumAndMptcp { sum: f64, mptcp: f64 },
    /// ≥ this share of the sum of the line rates.
    Sum(f64),
    /// ≥ this share of the best line alone.
    Best(f64),
    /// ≥ this share of another row's braid aggregate (the same lines
    /// without the impairment), same congestion control.
    Row(&'static str, f64),
}

/// A row of section 5.
pub(super) struct Row {
    pub(super) key: &'static str,
    pub(super) label: &'static str,
    pub(super) lines: [&'static [&'static str]; 2],
    /// Line rates in Mbit/s, after a fall where there is one.
    pub(super) sum_mbps: f64,
    /// TCP streams (iperf3 -P).
    pub(super) streams: u32,
    /// Line 1 falls to this rate during the transfer (then only the last
    /// seconds count).
    pub(super) fall_to: Option<&'static str>,
    /// The key of its best line alone.
    pub(super) best: &'static str,
    pub(super) target: Target,
    pub(super) target_text: &'static str,
}

pub(super) const ROWS: [Row; 6] = [
    Row {
        key: "bond",
        label: "100 Mbit/s 10 ms + 25 Mbit/s 40 ms",
        lines: [FAST_LINE, LINE_25],
        sum_mbps: 125.0,
        streams: 1,
        fall_to: None,
        best: "fast",
        target: Target::SumAndMptcp {
            sum: 0.85,
            mptcp: 0.97,
        },
        target_text: "≥ 85 % of sum and ≥ 97 % of MPTCP",
    },
    Row {
        key: "even",
        label: "50 Mbit/s 5 ms + 50 Mbit/s 60 ms",
        lines: [EVEN_NEAR, EVEN_FAR],
        sum_mbps: 100.0,
        streams: 1,
        fall_to: None,
        best: "near",
        target: Target::Sum(0.85),
        target_text: "≥ 85 % of sum",
    },
    Row {
        key: "slow",
        label: "100 Mbit/s 10 ms + 2 Mbit/s 300 ms",
        lines: [FAST_LINE, LINE_2],
        sum_mbps: 102.0,
        streams: 1,
        fall_to: None,
        best: "fast",
        target: Target::Best(0.95),
        target_text: "≥ 95 % of best line",
    },
    Row {
        key: "fall",
        label: "100 + 25, line 1 falls to 10 Mbit/s",
        lines: [FAST_LINE, LINE_25],
        sum_mbps: 35.0,
        streams: 1,
        fall_to: Some("10mbit"),
        best: "l25",
        target: Target::Sum(0.70),
        target_text: "last s ≥ 70 % of 35",
    },
    Row {
        key: "wide",
        label: "200 Mbit/s + 200 Mbit/s, 4 streams",
        lines: [WIDE, WIDE],
        sum_mbps: 400.0,
        streams: 4,
        fall_to: None,
        best: "wide",
        target: Target::Sum(0.90),
        target_text: "≥ 90 % of sum",
    },
    Row {
        key: "lossy",
        label: "100 + 25, 2 % loss on the 25",
        lines: [FAST_LINE, LINE_25_LOSSY],
        sum_mbps: 125.0,
        streams: 1,
        fall_to: None,
        best: "fast",
        target: Target::Row("bond", 0.90),
        target_text: "≥ 90 % of bond row",
    },
];

/// Section 5's timing: transfer length, when line 1 falls, and from when
/// the fall row counts ("the last seconds").
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Timing {
    pub(super) seconds: u32,
    pub(super) fall_at: f64,
    pub(super) tail_from: f64,
}

pub(super) fn unequal_timing(quick: bool) -> Timing {
    if quick {
        Timing {
            seconds: 5,
            fall_at: 2.0,
            tail_from: 3.0,
        }
    } else {
        Timing {
            seconds: 10,
            fall_at: 3.0,
            tail_from: 5.0,
        }
    }
}

/// What runs the transfer of a section 5 case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Who {
    /// braid, `Mode = aggregate` over both lines.
    Braid,
    /// The kernel's MPTCP over two wireguard-go tunnels, one per line.
    Mptcp,
}

impl Who {
    pub(super) fn key(self) -> &'static str {
        match self {
            Who::Braid => "braid",
            Who::Mptcp => "mptcp",
        }
    }
}

pub(super) fn unequal_key(row: &str, cc: &str, who: Who) -> String {
    format!("unequal/{row}/{cc}/{}", who.key())
}

pub(super) fn best_key(line: &str, cc: &str) -> String {
    format!("unequal/best-{line}/{cc}/alone")
}

pub(super) fn best_line(key: &str) -> &'static BestLine {
    BEST_LINES
        .iter()
        .find(|b| b.key == key)
        .unwrap_or(&BEST_LINES[0])
}

/// Section 5's cases, every congestion control in turn: each best line
/// alone, then per row braid and MPTCP next to each other.
pub(super) fn unequal_plan(o: &Opts, cases: &mut Vec<Case>) {
    let t = unequal_timing(o.quick);
    let rows: Vec<&Row> = ROWS
        .iter()
        .filter(|r| o.rows.iter().any(|k| k == r.key))
        .collect();
    let rounds = o.unequal_runs.max(1);
    for (run, cc) in (0..rounds).flat_map(|r| o.unequal_cc.iter().map(move |cc| (r, cc))) {
        let cc: &'static str = congestion_control(cc);
        for b in BEST_LINES
            .iter()
            .filter(|b| rows.iter().any(|r| r.best == b.key))
        {
            let streams = rows
                .iter()
                .filter(|r| r.best == b.key)
                .map(|r| r.streams)
                .max()
                .unwrap_or(1);
            // The 25 Mbit/s line is the fall row's best line: its last
            // seconds count, like the row's.
            let fall = rows.iter().any(|r| r.best == b.key && r.fall_to.is_some());
            cases.push(Case {
                key: best_key(b.key, cc),
                run,
                label: format!(
                    "5. best line: {}, failover, TCP {cc}{}{}",
                    b.label,
                    streams_label(streams),
                    run_label(run, rounds)
                ),
                setup: Setup {
                    mode: "failover",
                    hold: None,
                    lines: vec![flags(b.flags, 11)],
                },
                measure: Measure::Tcp {
                    window: None,
                    cc: Some(cc),
                },
                seconds: t.seconds,
                extra: Extra {
                    streams,
                    tail_from: fall.then_some(t.tail_from),
                    ..Extra::default()
                },
            });
        }
        for row in &rows {
            for who in [Who::Braid, Who::Mptcp] {
                let actions = row
                    .fall_to
                    .map(|r| vec![(t.fall_at, 0, format!("rate {r}"))])
                    .unwrap_or_default();
                cases.push(Case {
                    key: unequal_key(row.key, cc, who),
                    run,
                    label: format!(
                        "5. {}{}, {}, TCP {cc}{}{}",
                        row.label,
                        row.fall_to
                            .map(|_| format!(" at {:.0} s", t.fall_at))
                            .unwrap_or_default(),
                        match who {
                            Who::Braid => "braid aggregate",
                            _ => "MPTCP over 2 × wireguard-go",
                        },
                        streams_label(row.streams),
                        run_label(run, rounds)
                    ),
                    setup: Setup {
                        mode: "aggregate",
                        hold: None,
                        lines: vec![flags(row.lines[0], 11), flags(row.lines[1], 22)],
                    },
                    measure: Measure::Tcp {
                        window: None,
                        cc: Some(cc),
                    },
                    seconds: t.seconds,
                    extra: Extra {
                        mptcp: who == Who::Mptcp,
                        streams: row.streams,
                        actions,
                        tail_from: row.fall_to.map(|_| t.tail_from),
                    },
                });
            }
        }
    }
}

fn streams_label(streams: u32) -> String {
    if streams > 1 {
        format!(", {streams} streams")
    } else {
        String::new()
    }
}

/// The congestion controls a bench may ask iperf3 for (`-C`): 'static
/// names for the cases.
pub(super) const KNOWN_CC: [&str; 5] = ["cubic", "bbr", "reno", "vegas", "westwood"];

fn congestion_control(name: &str) -> &'static str {
    KNOWN_CC
        .iter()
        .find(|c| **c == name)
        .copied()
        .unwrap_or("cubic")
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

pub(super) fn seed_key(profile: &str, window: &str, hold0: bool, cc: Option<&str>) -> String {
    format!(
        "seed/{profile}/{window}/{}{}",
        if hold0 { "hold0" } else { "window" },
        cc_suffix(cc)
    )
}

/// What a case key gets for an explicit congestion control ("/cubic"); none
/// for the machine's default, so the default's keys stay what they were.
pub(super) fn cc_suffix(cc: Option<&str>) -> String {
    cc.map_or(String::new(), |c| format!("/{c}"))
}

/// ", cubic" in a case label; nothing for the machine's default.
pub(super) fn cc_label(cc: Option<&str>) -> String {
    cc.map_or(String::new(), |c| format!(", {c}"))
}
