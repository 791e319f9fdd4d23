//! What `braid bench peers` prints: the rows, the handshake storms, and
//! the targets of issue 22 checked at the largest number of idle peers.

#[cfg(test)]
use super::run::Failure;
use super::run::{Results, Row, Storm, Upload};
use super::Options;
use serde_json::json;
use std::fmt::Write as _;

/// One target and what was measured against it.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub target: String,
    /// `Some(met)`, or `None` with why it could not be judged.
    pub met: Option<bool>,
    pub measured: String,
}

fn row<'a>(r: &'a Results, vpn: &str, idle: usize) -> Option<&'a Row> {
    r.rows.iter().find(|x| x.vpn == vpn && x.idle_peers == idle)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2} ms"))
}

fn gbps(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// A row in one line (progress while the bench runs).
pub fn row_line(x: &Row) -> String {
    format!(
        "setconf {:.2} s, show {:.2} s ({} peers), idle CPU {:.2} %, RSS {:.0} MB, \
         ping p50 {} p99 {} ({}/{} answered), TCP {} Gbit/s",
        x.setconf_s,
        x.show_s,
        x.shown_peers,
        x.idle_cpu_pct,
        x.rss_mb,
        ms(x.ping_p50_ms),
        ms(x.ping_p99_ms),
        x.pings_answered,
        x.pings_sent,
        gbps(x.tcp_gbps)
    )
}

/// The targets at the largest number of idle peers measured.
pub fn verdicts(o: &Options, r: &Results) -> Vec<Verdict> {
    let n = o.peers.iter().copied().max().unwrap_or(0);
    let at = row(r, "braid", n);
    let base = row(r, "braid", 0);
    // Against wireguard-go: at the most idle peers both were measured with
    // (it holds at most 65,536).
    let both = o
        .peers
        .iter()
        .copied()
        .filter(|&m| row(r, "braid", m).is_some() && row(r, "wireguard-go", m).is_some())
        .max()
        .unwrap_or(n);
    let (at_both, wg) = (row(r, "braid", both), row(r, "wireguard-go", both));
    let judge = |target: String,
                 values: Option<(f64, f64)>,
                 ok: &dyn Fn(f64, f64) -> bool,
                 show: &dyn Fn(f64, f64) -> String,
                 missing: &str| match values {
        Some((a, b)) => Verdict {
            target,
            met: Some(ok(a, b)),
            measured: show(a, b),
        },
        None => Verdict {
            target,
            met: None,
            measured: format!("not measured: {missing}"),
        },
    };
    let no_base = format!("needs braid with 0 and with {n} idle peers");
    let no_wg = format!("needs braid and wireguard-go with {both} idle peers");
    vec![
        judge(
            format!("live peer TCP with {n} idle peers >= 95 % of braid's with none"),
            at.zip(base)
                .and_then(|(a, b)| Some((a.tcp_gbps?, b.tcp_gbps?))),
            &|a, b| a >= 0.95 * b,
            &|a, b| format!("{a:.2} against {b:.2} Gbit/s ({:.0} %)", 100.0 * a / b),
            &no_base,
        ),
        judge(
            format!("live peer ping p50 with {n} idle peers <= 1.2x braid's with none"),
            at.zip(base)
                .and_then(|(a, b)| Some((a.ping_p50_ms?, b.ping_p50_ms?))),
            &|a, b| a <= 1.2 * b,
            &|a, b| format!("{a:.3} against {b:.3} ms ({:.2}x)", a / b),
            &no_base,
        ),
        judge(
            format!("idle CPU with {n} idle peers <= 1 % of a core"),
            at.map(|a| (a.idle_cpu_pct, 1.0)),
            &|a, b| a <= b,
            &|a, _| format!("{a:.2} %"),
            &format!("needs braid with {n} idle peers"),
        ),
        judge(
            format!("wg show with {n} idle peers <= 1 s"),
            at.map(|a| (a.show_s, 1.0)),
            &|a, b| a <= b,
            &|a, _| format!("{a:.2} s"),
            &format!("needs braid with {n} idle peers"),
        ),
        judge(
            format!("wg setconf of {both} idle peers no slower than wireguard-go"),
            at_both.zip(wg).map(|(a, w)| (a.setconf_s, w.setconf_s)),
            &|a, b| a <= b,
            &|a, b| format!("{a:.2} against {b:.2} s"),
            &no_wg,
        ),
        judge(
            format!("RSS with {both} idle peers <= 0.5x wireguard-go's"),
            at_both.zip(wg).map(|(a, w)| (a.rss_mb, w.rss_mb)),
            &|a, b| a <= 0.5 * b,
            &|a, b| format!("{a:.0} against {b:.0} MB ({:.2}x)", a / b),
            &no_wg,
        ),
    ]
}

fn storm_cells(s: &Storm) -> [String; 7] {
    let f = &s.figures;
    [
        s.vpn.to_string(),
        f.peers.to_string(),
        f.all_after.map_or_else(
            || format!("{} of {} after {:.0?}", f.completed, f.peers, f.elapsed),
            |t| format!("{:.2} s", t.as_secs_f64()),
        ),
        f.per_second().map_or("-".into(), |v| format!("{v:.0}")),
        f.half_after
            .map_or("-".into(), |t| format!("{:.2} s", t.as_secs_f64())),
        format!("{} / {}", f.initiations_sent, f.cookie_replies),
        format!("{:.1} s", s.server_cpu_s),
    ]
}

fn upload_vpn(u: &Upload) -> String {
    match u.queues {
        Some(q) => format!("{} (Queues = {q})", u.vpn),
        None => u.vpn.to_string(),
    }
}

fn upload_cells(u: &Upload) -> [String; 10] {
    [
        upload_vpn(u),
        format!("{} of {}", u.sessions, u.peers),
        format!("{} B", u.size),
        u.sent.datagrams.to_string(),
        u.delivered.to_string(),
        format!("{:.0}", u.delivered_per_second()),
        format!("{:.2}", u.delivered_gbps()),
        format!("{:.2} s", u.server_cpu_s),
        u.cpu_us_per_packet()
            .map_or("-".into(), |v| format!("{v:.2}")),
        match (u.sockets, u.other_sockets_share()) {
            (Some(n), Some(share)) => format!("{:.0} % ({n} sockets)", share * 100.0),
            _ => "-".into(),
        },
    ]
}

/// An upload in one line (progress while the bench runs).
pub fn upload_line(u: &Upload) -> String {
    let c = upload_cells(u);
    format!(
        "{} sessions, {} sent, {} delivered ({}/s, {} Gbit/s), server CPU {}, {} µs/packet, on sockets 2..: {}",
        c[1], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
    )
}

/// The whole report: rows, storms, uploads, verdicts.
pub fn table(o: &Options, r: &Results) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n| VPN | idle peers | wg setconf | wg show | idle CPU | RSS | ping p50 | ping p99 | TCP (live peer) |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for x in &r.rows {
        let _ = writeln!(
            t,
            "| {} | {} | {:.2} s | {:.2} s | {:.2} % | {:.0} MB | {} | {} | {} Gbit/s |",
            x.vpn,
            x.idle_peers,
            x.setconf_s,
            x.show_s,
            x.idle_cpu_pct,
            x.rss_mb,
            ms(x.ping_p50_ms),
            ms(x.ping_p99_ms),
            gbps(x.tcp_gbps)
        );
    }
    if !r.storms.is_empty() {
        let _ = writeln!(
            t,
            "\n| VPN | initiating peers | all have a session after | handshakes/s | half after | initiations / cookie replies | server CPU |"
        );
        let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|");
        for s in &r.storms {
            let _ = writeln!(t, "| {} |", storm_cells(s).join(" | "));
        }
        for s in r.storms.iter().filter(|s| !s.server_counters.is_empty()) {
            let counted: Vec<String> = s
                .server_counters
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            let _ = writeln!(t, "\n{}'s server counted: {}", s.vpn, counted.join(", "));
        }
    }
    if !r.uploads.is_empty() {
        let _ = writeln!(
            t,
            "\n| VPN | uploading peers | packet | sent | delivered | delivered/s | Gbit/s | server CPU | µs/packet | on sockets 2.. |"
        );
        let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for u in &r.uploads {
            let _ = writeln!(t, "| {} |", upload_cells(u).join(" | "));
        }
    }
    for f in &r.failures {
        let _ = writeln!(t, "\nnot measured: {} {}: {}", f.vpn, f.part, f.why);
    }
    let _ = writeln!(t, "\nTargets (issue 22):");
    for v in verdicts(o, r) {
        let mark = match v.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        let _ = writeln!(t, "  {mark:6} {}: {}", v.target, v.measured);
    }
    t
}

pub fn json(o: &Options, r: &Results) -> serde_json::Value {
    json!({
        "rows": r.rows.iter().map(|x| json!({
            "vpn": x.vpn,
            "idle_peers": x.idle_peers,
            "setconf_s": x.setconf_s,
            "show_s": x.show_s,
            "shown_peers": x.shown_peers,
            "idle_cpu_pct": x.idle_cpu_pct,
            "rss_mb": x.rss_mb,
            "ping_p50_ms": x.ping_p50_ms,
            "ping_p99_ms": x.ping_p99_ms,
            "pings_answered": x.pings_answered,
            "pings_sent": x.pings_sent,
            "tcp_gbps": x.tcp_gbps,
        })).collect::<Vec<_>>(),
        "handshakes": r.storms.iter().map(|s| json!({
            "vpn": s.vpn,
            "peers": s.figures.peers,
            "completed": s.figures.completed,
            "all_after_s": s.figures.all_after.map(|t| t.as_secs_f64()),
            "half_after_s": s.figures.half_after.map(|t| t.as_secs_f64()),
            "per_second": s.figures.per_second(),
            "initiations_sent": s.figures.initiations_sent,
            "cookie_replies": s.figures.cookie_replies,
            "responses_refused": s.figures.responses_refused,
            "server_cpu_s": s.server_cpu_s,
            "server_counters": s.server_counters.iter()
                .map(|(name, n)| (name.to_string(), json!(n)))
                .collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
        "uploads": r.uploads.iter().map(|u| json!({
            "vpn": u.vpn,
            "queues": u.queues,
            "peers": u.peers,
            "sessions": u.sessions,
            "packet_bytes": u.size,
            "seconds": u.sent.elapsed.as_secs_f64(),
            "sent": u.sent.datagrams,
            "client_waits": u.sent.waits,
            "delivered": u.delivered,
            "delivered_per_second": u.delivered_per_second(),
            "delivered_gbps": u.delivered_gbps(),
            "server_cpu_s": u.server_cpu_s,
            "cpu_us_per_packet": u.cpu_us_per_packet(),
            "udp_sockets": u.sockets,
            "datagrams_on_other_sockets": u.datagrams_on_other_sockets,
        })).collect::<Vec<_>>(),
        "failures": r.failures.iter().map(|f| json!({
            "vpn": f.vpn, "part": f.part.to_string(), "why": f.why,
        })).collect::<Vec<_>>(),
        "verdicts": verdicts(o, r).iter().map(|v| json!({
            "target": v.target, "met": v.met, "measured": v.measured,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::handshakes::HandshakeFigures;
    use super::super::upload::Sent;
    use super::*;
    use std::time::Duration;

    fn row(vpn: &'static str, idle: usize, tcp: f64, p50: f64, setconf: f64, rss: f64) -> Row {
        Row {
            vpn,
            idle_peers: idle,
            setconf_s: setconf,
            show_s: 0.5,
            shown_peers: idle + 1,
            idle_cpu_pct: 0.2,
            rss_mb: rss,
            ping_p50_ms: Some(p50),
            ping_p99_ms: Some(2.0 * p50),
            pings_answered: 200,
            pings_sent: 200,
            tcp_gbps: Some(tcp),
        }
    }

    fn options(peers: &[usize]) -> Options {
        let mut o = super::super::parse_args(&[]).unwrap().unwrap();
        o.peers = peers.to_vec();
        o
    }

    #[test]
    fn verdicts_judge_the_largest_count_against_braid_alone_and_wireguard_go() {
        let r = Results {
            rows: vec![
                row("braid", 0, 4.0, 0.20, 0.01, 14.0),
                row("wireguard-go", 0, 3.0, 0.25, 0.01, 10.0),
                row("braid", 100_000, 3.9, 0.23, 1.0, 300.0),
                row("wireguard-go", 100_000, 2.0, 0.30, 8.0, 2400.0),
            ],
            storms: vec![],
            uploads: vec![],
            failures: vec![],
        };
        let v = verdicts(&options(&[0, 100_000]), &r);
        assert_eq!(v.len(), 6);
        assert!(v.iter().all(|v| v.met == Some(true)), "{v:#?}");
        assert!(v[0].target.contains("100000 idle peers"));
        // Slower live TCP and a bigger RSS miss.
        let mut worse = r.clone();
        worse.rows[2].tcp_gbps = Some(3.0);
        worse.rows[2].rss_mb = 1300.0;
        let v = verdicts(&options(&[0, 100_000]), &worse);
        assert_eq!(v[0].met, Some(false));
        assert_eq!(v[5].met, Some(false));
        // Without wireguard-go the comparisons with it are not judged.
        let braid_only = Results {
            rows: r
                .rows
                .iter()
                .filter(|x| x.vpn == "braid")
                .cloned()
                .collect(),
            storms: vec![],
            uploads: vec![],
            failures: vec![],
        };
        let v = verdicts(&options(&[0, 100_000]), &braid_only);
        assert_eq!(v[4].met, None);
        assert!(v[4].measured.starts_with("not measured"));
        assert_eq!(v[0].met, Some(true));
    }

    #[test]
    fn comparisons_with_wireguard_go_use_the_most_peers_both_were_measured_with() {
        let r = Results {
            rows: vec![
                row("braid", 0, 4.0, 0.20, 0.01, 14.0),
                row("wireguard-go", 0, 3.0, 0.25, 0.01, 10.0),
                row("braid", 60_000, 4.0, 0.20, 0.5, 180.0),
                row("wireguard-go", 60_000, 2.0, 0.30, 6.0, 1500.0),
                row("braid", 100_000, 3.9, 0.21, 0.8, 300.0),
            ],
            storms: vec![],
            uploads: vec![],
            failures: vec![],
        };
        let v = verdicts(&options(&[0, 60_000, 100_000]), &r);
        assert!(v[0].target.contains("100000 idle peers"), "{}", v[0].target);
        assert!(v[4].target.contains("60000 idle peers"), "{}", v[4].target);
        assert_eq!(v[4].measured, "0.50 against 6.00 s");
        assert!(v[5].target.contains("60000 idle peers"));
        assert!(v.iter().all(|v| v.met == Some(true)), "{v:#?}");
    }

    #[test]
    fn the_table_has_a_line_per_row_and_storm() {
        let r = Results {
            rows: vec![row("braid", 0, 4.0, 0.2, 0.01, 14.0)],
            storms: vec![Storm {
                vpn: "braid",
                figures: HandshakeFigures {
                    peers: 10_000,
                    completed: 10_000,
                    all_after: Some(Duration::from_secs(8)),
                    half_after: Some(Duration::from_secs(3)),
                    initiations_sent: 19_000,
                    cookie_replies: 9_000,
                    responses_refused: 0,
                    elapsed: Duration::from_secs(8),
                },
                server_cpu_s: 4.0,
                server_counters: vec![("handshake_over_budget", 12)],
            }],
            uploads: vec![Upload {
                vpn: "braid",
                queues: Some(2),
                peers: 1000,
                sessions: 1000,
                size: 1420,
                sent: Sent {
                    peers: 1000,
                    datagrams: 2_000_000,
                    bytes: 2_840_000_000,
                    waits: 10,
                    elapsed: Duration::from_secs(5),
                },
                delivered: 1_000_000,
                server_cpu_s: 4.0,
                sockets: Some(2),
                datagrams_on_other_sockets: Some(450_000),
            }],
            failures: vec![Failure {
                vpn: "wireguard-go",
                part: super::super::run::Part::Row(100_000),
                why: "wg setconf failed".into(),
            }],
        };
        let t = table(&options(&[0]), &r);
        assert!(t.contains("| braid | 0 | 0.01 s | 0.50 s | 0.20 % | 14 MB | 0.20 ms | 0.40 ms | 4.00 Gbit/s |"), "{t}");
        assert!(
            t.contains("| braid | 10000 | 8.00 s | 1250 | 3.00 s | 19000 / 9000 | 4.0 s |"),
            "{t}"
        );
        assert!(t.contains("Targets (issue 22):"));
        assert!(t.contains("braid's server counted: handshake_over_budget 12"));
        assert!(t.contains("not measured: wireguard-go 100000 idle peers: wg setconf failed"));
        assert!(
            t.contains(
                "| braid (Queues = 2) | 1000 of 1000 | 1420 B | 2000000 | 1000000 | 200000 | 2.27 | 4.00 s | 4.00 | 45 % (2 sockets) |"
            ),
            "{t}"
        );
        let j = json(&options(&[0]), &r);
        assert_eq!(j["handshakes"][0]["per_second"], 1250.0);
        assert_eq!(j["rows"][0]["idle_peers"], 0);
        assert_eq!(j["uploads"][0]["delivered_per_second"], 200_000.0);
        assert_eq!(j["failures"][0]["part"], "100000 idle peers");
    }
}
