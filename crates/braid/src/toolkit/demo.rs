//! `braid demo`: the whole product on one machine, for a first look.
//!
//! ```text
//!  netns <p>-a                                           netns <p>-b
//!  ┌───────────────────────┐  line 1: veth 198.18.77.0/24 ┌──────────────────────────────┐
//!  │ braid <p>a            ├──────────────────────────────┤ braid netem: 2 % loss  ──┐   │
//!  │ 198.19.77.1           │  line 2: veth 198.18.78.0/24 │                          ├─► braid <p>b
//!  │ iperf3 client         ├──────────────────────────────┤ braid netem: 3 ms ± 1 ms ┘   │ 198.19.77.2
//!  └───────────────────────┘                              └──────────────────────────────┘
//! ```
//!
//! Every packet goes over both lines (`Mode = redundant`); the receiver's
//! reorder window puts them back in order and drops the second copies.
//! Midway the lossy line is cut, later restored, and the tunnel carries on.
//! Everything the demo creates is removed on the way out, also after an
//! error or Ctrl-C.

use crate::toolkit::lab::braid::extra_counter;
use crate::toolkit::lab::{self, IfaceConf, Lab, LabResult, PeerConf};
use crate::toolkit::plot::{self, sample, Mark, MarkKind, Panel, Series};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TUNNEL_A: &str = "198.19.77.1";
const TUNNEL_B: &str = "198.19.77.2";

fn step(text: &str) {
    println!("\n== {text}");
}

/// Runs the demo; `seconds` is the length of the iperf3 run; with `plot`,
/// the run is also drawn there as an SVG.
pub fn run_demo(seconds: u32, plot: Option<&Path>) -> LabResult<()> {
    lab::require_tools(&["ip", "iperf3", "ping"])?;
    let seconds = seconds.max(4);
    let mut lab = Lab::new("d")?;
    let (a, b) = (lab.name("a"), lab.name("b"));

    step("two network namespaces joined by two lines (veth pairs)");
    let ns_a = lab.netns("a")?;
    let ns_b = lab.netns("b")?;
    lab.veth(
        (&ns_a, "line1", "198.18.77.1/24"),
        (&ns_b, "line1", "198.18.77.2/24"),
    )?;
    lab.veth(
        (&ns_a, "line2", "198.18.78.1/24"),
        (&ns_b, "line2", "198.18.78.2/24"),
    )?;
    println!("   line 1: 198.18.77.1 <-> 198.18.77.2      line 2: 198.18.78.1 <-> 198.18.78.2");

    step("braid netem makes line 1 lossy (2 %) and line 2 jittery (3 ms ± 1 ms, reorders)");
    let lossy = lab.netem(
        &ns_b,
        "lossy",
        "198.18.77.2:5001",
        "127.0.0.1:51820",
        &["--loss", "2%", "--seed", "1"],
    )?;
    let jittery = lab.netem(
        &ns_b,
        "jittery",
        "198.18.78.2:5002",
        "127.0.0.1:51820",
        &["--delay", "3ms", "--jitter", "1ms", "--seed", "2"],
    )?;

    step("a braid tunnel over both lines (Mode = redundant)");
    let (ka, kb) = (lab::Keys::generate(), lab::Keys::generate());
    let conf_a = IfaceConf {
        private_key: ka.private,
        address: vec![format!("{TUNNEL_A}/24")],
        peers: vec![PeerConf {
            public_key: kb.public,
            allowed_ips: vec![format!("{TUNNEL_B}/32")],
            braid_lines: vec![
                "Path = lossy bind=line1 endpoint=198.18.77.2:5001".into(),
                "Path = jittery bind=line2 endpoint=198.18.78.2:5002".into(),
                "Mode = redundant".into(),
            ],
            ..Default::default()
        }],
        ..Default::default()
    }
    .wg_quick();
    let conf_b = IfaceConf {
        private_key: kb.private,
        listen_port: Some(51820),
        address: vec![format!("{TUNNEL_B}/24")],
        peers: vec![PeerConf {
            public_key: ka.public,
            allowed_ips: vec![format!("{TUNNEL_A}/32")],
            ..Default::default()
        }],
        ..Default::default()
    }
    .wg_quick();
    println!(
        "{}",
        conf_a
            .lines()
            .filter(|l| !l.starts_with("PrivateKey"))
            .map(|l| format!("   {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    lab.braid_up(&ns_b, &b, &conf_b)?;
    lab.braid_up(&ns_a, &a, &conf_a)?;
    if !lab.ping_until_reply(&ns_a, TUNNEL_B, Duration::from_secs(10)) {
        return Err("no reply through the tunnel".into());
    }
    println!("   ping {TUNNEL_B}: reply through the tunnel");

    step(&format!(
        "iperf3, one TCP stream for {seconds} s; line 1 is cut at {} s and restored at {} s",
        seconds / 3,
        2 * seconds / 3
    ));
    let mut client = lab.cmd_in(&ns_a, "iperf3");
    client.args(["-c", TUNNEL_B, "-t", &seconds.to_string(), "-J"]);
    let mut server = lab.cmd_in(&ns_b, "iperf3");
    server.args(["-s", "-1", "-B", TUNNEL_B]);
    let server = lab.spawn(server, "iperf3-server.log")?;
    std::thread::sleep(Duration::from_millis(300));
    let client = lab.spawn(client, "iperf3-client.json")?;
    let start = Instant::now();
    let start_unix_ms = unix_ms(SystemTime::now());
    let mut lines = sample::LineRates::new(&["line 1 (lossy)", "line 2 (jittery)"], start);
    lines.poll(start, &[&lossy, &jittery]);
    let (mut total, mut marks) = (Vec::new(), Vec::new());
    let mut last = live_counters(&lab, &ns_b, &b)?;
    let (mut cut, mut restored) = (false, false);
    println!(
        "   {:>4}  {:>10}  {:<28} {:<28} {:>9} {:>9} {:>6}",
        "t", "Mbit/s", "line 1 (lossy)", "line 2 (jittery)", "accepted", "buffered", "lost"
    );
    for t in 1..=seconds {
        std::thread::sleep(
            (start + Duration::from_secs(t.into())).saturating_duration_since(Instant::now()),
        );
        lines.poll(Instant::now(), &[&lossy, &jittery]);
        if !cut && t >= seconds / 3 {
            lossy.control("cut")?;
            cut = true;
            marks.push(mark(start, MarkKind::Cut, "line 1 cut"));
            println!("   --- line 1 cut ---");
        }
        if !restored && t >= 2 * seconds / 3 {
            lossy.control("restore")?;
            restored = true;
            marks.push(mark(start, MarkKind::Restore, "line 1 restored"));
            println!("   --- line 1 restored ---");
        }
        let now = live_counters(&lab, &ns_b, &b)?;
        let mbit = (now.rx_bytes.saturating_sub(last.rx_bytes)) as f64 * 8.0 / 1e6;
        total.push((start.elapsed().as_secs_f64(), mbit));
        println!(
            "   {:>3}s  {:>10.1}  {:<28} {:<28} {:>9} {:>9} {:>6}",
            t,
            mbit,
            now.paths.first().cloned().unwrap_or_default(),
            now.paths.get(1).cloned().unwrap_or_default(),
            now.accepted,
            now.buffered,
            now.lost
        );
        last = now;
    }
    lab.wait(client, Duration::from_secs(5));
    let report = lab.stop(client, "iperf3-client.json");
    lab.stop(server, "iperf3-server.log");
    if let Ok(report) = lab::iperf::Report::parse(&report) {
        if let Some(bps) = report.received_bps {
            println!(
                "   iperf3: {:.1} Mbit/s over {seconds} s, through a cut line",
                bps / 1e6
            );
        }
    }

    if let Some(path) = plot {
        // braid's own word on when it saw line 1 go and come back: the
        // sending side's events (the side with the Path lines).
        let events = lab
            .braid_show(&ns_a, &a, true)
            .ok()
            .and_then(|j| crate::uapi::snapshot_from_json(&j).ok())
            .map(|s| s.events)
            .unwrap_or_default();
        marks.extend(sample::event_marks(
            &events,
            start_unix_ms,
            f64::from(seconds) + 1.0,
        ));
        marks.sort_by(|x, y| x.at.total_cmp(&y.at));
        let mut series = lines.series();
        series.push(Series {
            label: "total arrived (braid)".into(),
            points: total,
            total: true,
        });
        let panel = Panel {
            title: format!(
                "braid demo: Mode = redundant over a lossy (2 %) and a jittery (3 ms ± 1 ms) line, one TCP stream for {seconds} s"
            ),
            series,
            marks,
        };
        plot::write_svg(path, "braid demo", &[panel])?;
        println!("   plot: {}", path.display());
    }

    step("braid show, on both sides");
    for (ns, name) in [(&ns_a, &a), (&ns_b, &b)] {
        println!("{}", lab.braid_show(ns, name, false)?);
    }
    step("cleaning up");
    drop(lab);
    println!("   done: namespaces, daemons, relays and files removed");
    Ok(())
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn mark(start: Instant, kind: MarkKind, label: &str) -> Mark {
    Mark {
        at: start.elapsed().as_secs_f64(),
        kind,
        label: label.into(),
    }
}

#[derive(Default)]
struct Live {
    rx_bytes: u64,
    accepted: u64,
    buffered: u64,
    lost: u64,
    paths: Vec<String>,
}

/// The receiving side's counters, from `braid show --json`.
fn live_counters(lab: &Lab, ns: &str, name: &str) -> LabResult<Live> {
    let json = lab.braid_show(ns, name, true)?;
    let v: serde_json::Value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let peer = &v["peers"][0];
    let extra = |key: &str| extra_counter(&peer["extra"], key).unwrap_or(0);
    let paths = peer["paths"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let rtt = p["rtt_us"].as_u64().map_or(String::new(), |r| {
                        format!(" rtt {:.1} ms", r as f64 / 1000.0)
                    });
                    format!("{}{rtt}", p["state"].as_str().unwrap_or("?"))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Live {
        rx_bytes: peer["rx_bytes"].as_u64().unwrap_or(0),
        accepted: extra("accepted"),
        buffered: extra("buffered"),
        lost: extra("lost"),
        paths,
    })
}
