//! Building the lab, bringing the tunnel up and measuring every round.

use super::measure::{Path, PingSample, Progress, Transfer};
use super::plan::{Opts, TUNNEL_A, TUNNEL_B, UNDERLAY2_A, UNDERLAY2_B, UNDERLAY_A, UNDERLAY_B};
use super::report::{fmt, Report, Round};
use super::underlay_loss;
use super::vpn::{self, Net, VpnKind};
use crate::toolkit::bench::crypto;
use crate::toolkit::lab::{self, Lab, LabResult};
use crate::toolkit::plot::{self, Panel, Series};
use serde_json::json;
use std::time::Instant;

pub(super) fn per_gb(seconds: Option<f64>, bytes: f64) -> Option<f64> {
    seconds.filter(|_| bytes > 0.0).map(|s| s / (bytes / 1e9))
}

/// The transfers of a round, in order, as `--plot` names them.
pub(super) const TRANSFERS: [&str; 3] = [
    "one TCP stream A→B (with ping)",
    "4 TCP streams A→B",
    "one TCP stream B→A (-R)",
];

/// Mbit/s at seconds since a transfer started.
pub(super) type PerSecond = Vec<(f64, f64)>;

/// One round's numbers, and each transfer's Mbit/s per second (in the
/// order of [`TRANSFERS`]).
pub(super) fn round(
    path: &mut Path,
    o: &Opts,
    aead_s_per_gb: Option<f64>,
    progress: &mut Progress,
    n: usize,
) -> LabResult<(Round, [PerSecond; 3])> {
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
        per_gb(single.vpn_cpu_s, single.bytes)
            .zip(aead_s_per_gb)
            .map(|(vpn, aead)| vpn - aead),
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
    let per_second = [single.per_second, parallel.per_second, reverse.per_second];
    Ok((Round { metrics, details }, per_second))
}

pub(super) fn check_tools(vpn: &VpnKind) -> Result<(), String> {
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
pub(super) fn measure_all(o: &Opts, progress: &mut Progress) -> LabResult<Report> {
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
        realtime_priority: o.vpn_realtime,
        queues: o.vpn_queues,
        redundant_lines: second_line.map(|(veth1, veth2)| {
            [
                (veth1, UNDERLAY_B.to_string()),
                (veth2, UNDERLAY2_B.to_string()),
            ]
        }),
    };
    // What the AEAD alone costs per GB through the tunnel: sealing on one
    // side and opening on the other, 1420-byte packets, one core, measured
    // now on this machine (the same loops as `braid bench crypto`).
    let aead_s_per_gb = o.data_cipher().map(|c| {
        progress.line(&format!("measuring {} alone", c.name()));
        let t = std::time::Duration::from_millis(300);
        let (seal, open) = (crypto::seal_rate(c, 1420, t), crypto::open_rate(c, 1420, t));
        1e9 / seal + 1e9 / open
    });
    progress.line("bringing the tunnel up");
    let tunnel = vpn::bring_up(&mut lab, &o.vpn, o.cipher, &net)?;
    let namespaces = lab.namespaces().to_vec();
    let mut rounds = Vec::new();
    let mut panels: Vec<Panel> = TRANSFERS
        .iter()
        .map(|t| Panel {
            title: format!("{}: {t}", o.label()),
            ..Panel::default()
        })
        .collect();
    for n in 1..=o.rounds {
        lab::check_stop()?;
        let mut path = Path {
            lab: &mut lab,
            ns_a: &ns_a,
            ns_b: &ns_b,
            target: &tunnel.target,
            seconds: o.seconds,
            pids: &tunnel.pids,
            cc: o.cc.as_deref(),
        };
        let (r, per_second) = round(&mut path, o, aead_s_per_gb, progress, n)?;
        for (panel, points) in panels.iter_mut().zip(per_second) {
            panel.series.push(Series {
                label: format!("round {n}"),
                points,
                total: o.rounds == 1,
            });
        }
        progress.line(&format!(
            "round {n}/{}: {} / {} / {} Gbit/s (1 / 4 / reverse), {} CPU-s/GB, ping {} / {} ms (idle p50 / loaded p99)",
            o.rounds,
            fmt(r.metrics[0]),
            fmt(r.metrics[1]),
            fmt(r.metrics[2]),
            fmt(r.metrics[3]),
            fmt(r.metrics[6]),
            fmt(r.metrics[9]),
        ));
        rounds.push(r);
    }
    if let Some(line) = netem_line {
        lab.stop(line.id, &line.log);
    }
    if let Some(file) = &o.plot {
        plot::write_svg(file, "braid bench tunnel", &panels)?;
        progress.line(&format!("plot: {}", file.display()));
    }
    Ok(Report {
        label: o.label(),
        version: o.vpn.version(),
        netem: o.netem.clone(),
        namespaces,
        pids: tunnel.pids,
        target: tunnel.target,
        rounds,
        aead: o.data_cipher().zip(aead_s_per_gb),
        wall_s: start.elapsed().as_secs_f64(),
    })
    // The lab is dropped here, or on any early return above: namespaces,
    // daemons, relays and files go.
}
