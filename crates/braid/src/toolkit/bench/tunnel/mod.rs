//! `braid bench tunnel`: throughput, latency and CPU cost of one VPN
//! between two network namespaces, the same way for braid and for the
//! implementations it is compared with (bench/compare runs it once each).
//!
//! ```text
//!  netns <p>-a                                   netns <p>-b
//!  iperf3 -c, ping                               iperf3 -s
//!  tunnel 198.19.90.1 ── VPN A ══ veth ══ VPN B ── tunnel 198.19.90.2
//!                       198.18.90.1     198.18.90.2 [:5001 braid netem → :51820]
//! ```
//!
//! Each round: one TCP stream A → B (with ping under load and the VPN
//! processes' CPU time), four parallel streams, one stream B → A (-R), and
//! idle ping. Median, min and max over the rounds. The lab (namespaces,
//! daemons, relays, files) is removed on the way out, also after an error,
//! Ctrl-C, SIGTERM or SIGHUP.

mod measure;
mod underlay_loss;
mod vpn;

use crate::toolkit::lab::{self, Lab, LabResult};
pub(crate) use measure::percentile;
use measure::{Path, PingSample, Progress, Transfer};
use serde_json::{json, Map, Value};
use std::time::Instant;
use vpn::{Cipher, Net, VpnKind};

const USAGE: &str = "\
usage: braid bench tunnel [--vpn KIND] [--cipher auto|chacha20poly1305|aes256gcm]
                          [--seconds N] [--rounds R] [--netem \"FLAGS\"]
                          [--paths 1|2] [--transport udp|tcp] [--loss PCT]
                          [--quick] [--json] [--label TEXT]

Measures one VPN between two network namespaces joined by veth: iperf3 one
TCP stream, four streams and one reverse stream (Gbit/s), ICMP echo every
10 ms idle and under load (p50/p99; `braid bench echo`, which sleeps
between probes where iputils ping busy-waits), and the CPU seconds the VPN
processes spend per GB of the single stream. A progress line on stderr, a
table (or --json) on stdout.

  --vpn KIND        braid (default: this binary, `braid up`),
                    none (raw veth, no tunnel),
                    wireguard-go[=PATH], boringtun[=PATH] (boringtun-cli),
                    openvpn (2.6, TLS, AES-256-GCM), openvpn-none (no cipher)
  --cipher C        braid: written as `Cipher = C` (auto writes nothing);
                    openvpn: its data cipher
  --seconds N       length of each iperf3 run (default 5, quick 1)
  --rounds R        repeat everything R times; median, min, max (default 3,
                    quick 1)
  --netem \"FLAGS\"   impair the underlay with `braid netem FLAGS` (e.g.
                    \"--delay 5ms --loss 0.1%\"); needs a tunnel
  --paths 2         braid only: two veth lines, every packet sent on both
                    (Mode = redundant) and put back in order by the
                    reorder window; what duplication costs
  --transport tcp   braid only: both peers `Transport = tcp` (datagrams
                    framed on one TCP connection; braid netem cannot relay it)
  --loss PCT        drop PCT % of the underlay packets in each direction
                    (an nft rule in B's namespace; any protocol)
  --quick           short runs, for tests
  --json            one JSON object: per-round numbers, medians, min, max
  --label TEXT      the case's name in the progress line and the output

Needs root, ip, iperf3, ping, and the VPN's own tools.
";

/// Underlay (veth) and tunnel addresses.
const UNDERLAY_A: &str = "198.18.90.1";
const UNDERLAY_B: &str = "198.18.90.2";
const TUNNEL_A: &str = "198.19.90.1";
const TUNNEL_B: &str = "198.19.90.2";
/// The second line of `--paths 2`.
const UNDERLAY2_A: &str = "198.18.91.1";
const UNDERLAY2_B: &str = "198.18.91.2";

struct Opts {
    vpn: VpnKind,
    cipher: Cipher,
    seconds: u32,
    rounds: usize,
    netem: Option<String>,
    paths: u32,
    transport_tcp: bool,
    loss: Option<f64>,
    quick: bool,
    json: bool,
    label: Option<String>,
}

fn parse(argv: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        vpn: VpnKind::Braid,
        cipher: Cipher::Auto,
        seconds: 0,
        rounds: 0,
        netem: None,
        paths: 1,
        transport_tcp: false,
        loss: None,
        quick: false,
        json: false,
        label: None,
    };
    let (mut seconds, mut rounds) = (None, None);
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let number = |name: &str, v: String, max: u32| {
            v.parse::<u32>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or(format!("{name}: {v:?} is not a number from 1 to {max}"))
        };
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--quick" => o.quick = true,
            "--vpn" => o.vpn = VpnKind::parse(&val(a)?)?,
            "--cipher" => o.cipher = Cipher::parse(&val(a)?)?,
            "--seconds" => seconds = Some(number(a, val(a)?, 600)?),
            "--rounds" => rounds = Some(number(a, val(a)?, 50)? as usize),
            "--netem" => o.netem = Some(val(a)?),
            "--label" => o.label = Some(val(a)?),
            "--paths" => o.paths = number(a, val(a)?, 2)?,
            "--transport" => {
                o.transport_tcp = match val(a)?.as_str() {
                    "udp" => false,
                    "tcp" => true,
                    v => return Err(format!("--transport: {v:?} is not udp or tcp")),
                }
            }
            "--loss" => o.loss = Some(underlay_loss::parse(&val(a)?)?),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    o.vpn.check_cipher(o.cipher)?;
    if o.netem.is_some() && o.vpn == VpnKind::None {
        return Err("--netem impairs the tunnel's UDP underlay; --vpn none has no tunnel".into());
    }
    if o.paths > 1 && o.vpn != VpnKind::Braid {
        return Err("--paths 2 needs --vpn braid (the others have one line)".into());
    }
    if o.transport_tcp && (o.vpn != VpnKind::Braid || o.netem.is_some()) {
        return Err(
            "--transport tcp needs --vpn braid and no --netem (netem relays UDP; use --loss)"
                .into(),
        );
    }
    o.seconds = seconds.unwrap_or(if o.quick { 1 } else { 5 });
    o.rounds = rounds.unwrap_or(if o.quick { 1 } else { 3 });
    Ok(Some(o))
}

impl Opts {
    fn idle_pings(&self) -> usize {
        if self.quick {
            50
        } else {
            200
        }
    }

    fn label(&self) -> String {
        self.label.clone().unwrap_or_else(|| {
            let mut l = self.vpn.name().to_string();
            if self.cipher != Cipher::Auto {
                l = format!("{l} {}", self.cipher.name());
            }
            if self.paths > 1 {
                l = format!("{l} {} paths redundant", self.paths);
            }
            if self.transport_tcp {
                l = format!("{l} over TCP");
            }
            if let Some(p) = self.loss {
                l = format!("{l}, {p}% loss");
            }
            l
        })
    }
}

/// The numbers each round yields, in the order of the table. Keys are the
/// JSON names.
const METRICS: [(&str, &str, &str); 9] = [
    ("single_gbps", "one TCP stream A→B", "Gbit/s"),
    ("parallel4_gbps", "4 TCP streams A→B", "Gbit/s"),
    ("reverse_gbps", "one TCP stream B→A", "Gbit/s"),
    ("cpu_s_per_gb", "VPN CPU (both sides)", "CPU-s/GB"),
    ("system_cpu_s_per_gb", "whole machine CPU", "CPU-s/GB"),
    ("ping_idle_p50_ms", "ping idle p50", "ms"),
    ("ping_idle_p99_ms", "ping idle p99", "ms"),
    ("ping_loaded_p50_ms", "ping under load p50", "ms"),
    ("ping_loaded_p99_ms", "ping under load p99", "ms"),
];

/// One round: the metrics (None where nothing was measured) and details.
struct Round {
    metrics: Vec<Option<f64>>,
    details: Value,
}

fn per_gb(seconds: Option<f64>, bytes: f64) -> Option<f64> {
    seconds.filter(|_| bytes > 0.0).map(|s| s / (bytes / 1e9))
}

fn round(path: &mut Path, o: &Opts, progress: &mut Progress, n: usize) -> LabResult<Round> {
    let at = (n, o.rounds);
    let single: Transfer = path.transfer(&[], true, progress, at, "1 stream + ping")?;
    let parallel = path.transfer(&["-P", "4"], false, progress, at, "4 streams")?;
    let reverse = path.transfer(&["-R"], false, progress, at, "reverse stream")?;
    let idle = path.idle_ping(o.idle_pings(), progress, at)?;
    let loaded = single.pings.unwrap_or(PingSample {
        sent: 0,
        rtts_ms: Vec::new(),
    });
    let metrics = vec![
        Some(single.gbps),
        Some(parallel.gbps),
        Some(reverse.gbps),
        per_gb(single.vpn_cpu_s, single.bytes),
        per_gb(Some(single.system_cpu_s), single.bytes),
        idle.percentile(50.0),
        idle.percentile(99.0),
        loaded.percentile(50.0),
        loaded.percentile(99.0),
    ];
    let details = json!({
        "single_bytes": single.bytes,
        "single_retransmits": single.retransmits,
        "vpn_cpu_s": single.vpn_cpu_s,
        "system_cpu_s": single.system_cpu_s,
        "parallel4_retransmits": parallel.retransmits,
        "reverse_retransmits": reverse.retransmits,
        "ping_idle_sent": idle.sent,
        "ping_idle_received": idle.rtts_ms.len(),
        "ping_loaded_sent": loaded.sent,
        "ping_loaded_received": loaded.rtts_ms.len(),
    });
    Ok(Round { metrics, details })
}

fn fmt(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) if x >= 10.0 => format!("{x:.1}"),
        Some(x) if x >= 0.1 => format!("{x:.2}"),
        Some(x) => format!("{x:.3}"),
    }
}

struct Report {
    label: String,
    version: String,
    netem: Option<String>,
    namespaces: Vec<String>,
    pids: Vec<u32>,
    target: String,
    rounds: Vec<Round>,
    wall_s: f64,
}

impl Report {
    fn spread(&self, metric: usize) -> Option<(f64, f64, f64)> {
        let v: Vec<Option<f64>> = self.rounds.iter().map(|r| r.metrics[metric]).collect();
        measure::spread(&v)
    }

    fn print_text(&self, o: &Opts) {
        let underlay = match &self.netem {
            Some(n) => format!("veth through `braid netem {n}`"),
            None => "veth".into(),
        };
        println!(
            "braid bench tunnel: {} ({}), cipher {}, {underlay}, {} round(s) × {} s per iperf3 run",
            self.label,
            self.version,
            o.cipher.name(),
            o.rounds,
            o.seconds
        );
        println!(
            "{:<24}{:>10}{:>10}{:>10}{:>10}",
            "", "unit", "median", "min", "max"
        );
        for (i, (_, name, unit)) in METRICS.iter().enumerate() {
            let (med, min, max) = match self.spread(i) {
                Some((a, b, c)) => (Some(a), Some(b), Some(c)),
                None => (None, None, None),
            };
            println!(
                "{name:<24}{unit:>10}{:>10}{:>10}{:>10}",
                fmt(med),
                fmt(min),
                fmt(max)
            );
        }
        if self.pids.is_empty() {
            println!("(no tunnel: no VPN process to charge CPU to)");
        }
        println!(
            "whole-machine CPU includes iperf3, the kernel and anything else running; {:.0} s in all",
            self.wall_s
        );
    }

    fn json(&self, o: &Opts) -> Value {
        let pick = |f: &dyn Fn((f64, f64, f64)) -> f64| {
            let mut m = Map::new();
            for (i, (key, _, _)) in METRICS.iter().enumerate() {
                m.insert((*key).into(), json!(self.spread(i).map(f)));
            }
            Value::Object(m)
        };
        let per_round: Vec<Value> = self
            .rounds
            .iter()
            .enumerate()
            .map(|(n, r)| {
                let mut m = Map::new();
                m.insert("round".into(), json!(n + 1));
                for (i, (key, _, _)) in METRICS.iter().enumerate() {
                    m.insert((*key).into(), json!(r.metrics[i]));
                }
                m.insert("details".into(), r.details.clone());
                Value::Object(m)
            })
            .collect();
        json!({
            "bench": "tunnel",
            "label": self.label,
            "vpn": o.vpn.name(),
            "vpn_version": self.version,
            "cipher": o.cipher.name(),
            "netem": self.netem,
            "seconds": o.seconds,
            "rounds": o.rounds,
            "quick": o.quick,
            "target": self.target,
            "namespaces": self.namespaces,
            "vpn_pids": self.pids,
            "metrics": METRICS.iter().map(|(k, name, unit)| json!({"key": k, "name": name, "unit": unit})).collect::<Vec<_>>(),
            "per_round": per_round,
            "median": pick(&|s| s.0),
            "min": pick(&|s| s.1),
            "max": pick(&|s| s.2),
            "wall_s": self.wall_s,
        })
    }
}

fn check_tools(vpn: &VpnKind) -> Result<(), String> {
    let missing: Vec<String> = vpn
        .tools()
        .into_iter()
        .filter(|(tool, _)| !lab::tool_exists(tool))
        .map(|(tool, hint)| format!("`{tool}` is not installed ({hint})"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "bench tunnel --vpn {}: {}",
            vpn.name(),
            missing.join("; ")
        ))
    }
}

/// Builds the lab, brings the tunnel up and measures every round.
fn measure_all(o: &Opts, progress: &mut Progress) -> LabResult<Report> {
    let start = Instant::now();
    let mut lab = Lab::new("t")?;
    let ns_a = lab.netns("a")?;
    let ns_b = lab.netns("b")?;
    let veth = lab.name("u");
    lab.veth(
        (&ns_a, &veth, &format!("{UNDERLAY_A}/24")),
        (&ns_b, &veth, &format!("{UNDERLAY_B}/24")),
    )?;
    if let Some(percent) = o.loss {
        underlay_loss::apply(&lab, &ns_b, &veth, percent)?;
    }
    let second_line = if o.paths > 1 {
        let veth2 = lab.name("v");
        lab.veth(
            (&ns_a, &veth2, &format!("{UNDERLAY2_A}/24")),
            (&ns_b, &veth2, &format!("{UNDERLAY2_B}/24")),
        )?;
        Some((veth, veth2))
    } else {
        None
    };
    let mut netem_lines = Vec::new();
    let endpoint_port = match &o.netem {
        Some(flags) => {
            let flags: Vec<&str> = flags.split_whitespace().collect();
            let underlays: &[&str] = if second_line.is_some() {
                &[UNDERLAY_B, UNDERLAY2_B]
            } else {
                &[UNDERLAY_B]
            };
            for (i, underlay) in underlays.iter().enumerate() {
                netem_lines.push(lab.netem(
                    &ns_b,
                    &format!("underlay{}", i + 1),
                    &format!("{underlay}:{}", vpn::NETEM_PORT),
                    &format!("127.0.0.1:{}", vpn::VPN_PORT),
                    &flags,
                )?);
            }
            vpn::NETEM_PORT
        }
        None => vpn::VPN_PORT,
    };
    let netem_line = netem_lines.first();
    let net = Net {
        ns_a: ns_a.clone(),
        ns_b: ns_b.clone(),
        underlay_b: UNDERLAY_B.into(),
        tunnel_a: TUNNEL_A.into(),
        tunnel_b: TUNNEL_B.into(),
        endpoint_host: UNDERLAY_B.into(),
        endpoint_port,
        transport_tcp: o.transport_tcp,
        redundant_lines: second_line.map(|(veth1, veth2)| {
            [
                (veth1, UNDERLAY_B.to_string()),
                (veth2, UNDERLAY2_B.to_string()),
            ]
        }),
    };
    progress.line("bringing the tunnel up");
    let tunnel = vpn::bring_up(&mut lab, &o.vpn, o.cipher, &net)?;
    let namespaces = lab.namespaces().to_vec();
    let mut rounds = Vec::new();
    for n in 1..=o.rounds {
        lab::check_stop()?;
        let mut path = Path {
            lab: &mut lab,
            ns_a: &ns_a,
            ns_b: &ns_b,
            target: &tunnel.target,
            seconds: o.seconds,
            pids: &tunnel.pids,
        };
        let r = round(&mut path, o, progress, n)?;
        progress.line(&format!(
            "round {n}/{}: {} / {} / {} Gbit/s (1 / 4 / reverse), {} CPU-s/GB, ping {} / {} ms (idle p50 / loaded p99)",
            o.rounds,
            fmt(r.metrics[0]),
            fmt(r.metrics[1]),
            fmt(r.metrics[2]),
            fmt(r.metrics[3]),
            fmt(r.metrics[5]),
            fmt(r.metrics[8]),
        ));
        rounds.push(r);
    }
    if let Some(line) = netem_line {
        lab.stop(line.id, &line.log);
    }
    Ok(Report {
        label: o.label(),
        version: o.vpn.version(),
        netem: o.netem.clone(),
        namespaces,
        pids: tunnel.pids,
        target: tunnel.target,
        rounds,
        wall_s: start.elapsed().as_secs_f64(),
    })
    // The lab is dropped here, or on any early return above: namespaces,
    // daemons, relays and files go.
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("bench tunnel needs root (network namespaces, TUN)".into());
    }
    check_tools(&o.vpn)?;
    lab::catch_stop_signals();
    let mut progress = Progress::new(&o.label());
    let report = measure_all(&o, &mut progress);
    if lab::stop_signalled() {
        return Err("interrupted; the lab was removed".into());
    }
    let report = report.map_err(|e| format!("bench tunnel --vpn {}: {e}", o.vpn.name()))?;
    if o.json {
        println!("{}", report.json(&o));
    } else {
        report.print_text(&o);
    }
    Ok(())
}
