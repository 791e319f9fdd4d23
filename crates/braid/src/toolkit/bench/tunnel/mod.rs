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

pub(crate) mod measure;
mod plan;
mod report;
mod run;
mod underlay_loss;
mod vpn;

use crate::toolkit::bench::args::{require_root, Args};
use crate::toolkit::lab;
use measure::Progress;
use plan::Opts;
use vpn::{Cipher, VpnKind};

pub const USAGE: &str = "\
usage: braid bench tunnel [--vpn KIND] [--cipher auto|chacha20poly1305|aes256gcm]
                          [--seconds N] [--rounds R] [--netem \"FLAGS\"]
                          [--paths 1|2] [--transport udp|tcp] [--loss PCT]
                          [--cc cubic|bbr|...] [--vpn-realtime N] [--vpn-queues N] [--quick] [--json] [--label TEXT] [--plot FILE.svg]

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
  --cc NAME         the inner TCP's congestion control in every transfer
                    (iperf3 -C NAME, e.g. cubic or bbr; default: the
                    kernel's, cubic)
  --vpn-realtime N  the VPN's threads at real-time priority N (SCHED_RR,
                    1-99): braid by `RealtimePriority = N`, the others
                    started under `chrt -r N`; iperf3 and ping stay in
                    the normal class (unlike `chrt -r N braid bench ...`)
  --vpn-queues N    braid only: `Queues = N` at both ends (a TUN queue and
                    a sending thread per queue; 1-64)
  --quick           short runs, for tests
  --json            one JSON object: per-round numbers, medians, min, max
  --label TEXT      the case's name in the progress line and the output
  --plot FILE.svg   also draw Mbit/s per second of every transfer
                    (iperf3's intervals: the sender's count for A→B, the
                    receiver's for -R), a panel per kind of transfer, a
                    line per round

Needs root, ip, iperf3, ping, and the VPN's own tools.
";

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
        cc: None,
        vpn_realtime: None,
        vpn_queues: None,
        quick: false,
        json: false,
        label: None,
        plot: None,
    };
    let (mut seconds, mut rounds) = (None, None);
    let mut args = Args::new(argv);
    while let Some(a) = args.next() {
        match a {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--quick" => o.quick = true,
            "--vpn" => o.vpn = VpnKind::parse(&args.value(a)?)?,
            "--cipher" => o.cipher = Cipher::parse(&args.value(a)?)?,
            "--seconds" => seconds = Some(args.number(a, 1..=600)?),
            "--rounds" => rounds = Some(args.number(a, 1..=50)?),
            "--netem" => o.netem = Some(args.value(a)?),
            "--label" => o.label = Some(args.value(a)?),
            "--plot" => o.plot = Some(crate::toolkit::plot::parse_target(a, &args.value(a)?)?),
            "--paths" => o.paths = args.number(a, 1..=2)?,
            "--transport" => {
                o.transport_tcp = match args.value(a)?.as_str() {
                    "udp" => false,
                    "tcp" => true,
                    v => return Err(format!("--transport: {v:?} is not udp or tcp")),
                }
            }
            "--loss" => o.loss = Some(underlay_loss::parse(&args.value(a)?)?),
            "--cc" => o.cc = Some(parse_cc(&args.value(a)?)?),
            "--vpn-realtime" => o.vpn_realtime = Some(args.number(a, 1..=99)?),
            "--vpn-queues" => o.vpn_queues = Some(args.number(a, 1..=braid_io::MAX_QUEUES)?),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    o.vpn.check_cipher(o.cipher)?;
    if o.netem.is_some() && o.vpn == VpnKind::None {
        return Err("--netem impairs the tunnel's UDP underlay; --vpn none has no tunnel".into());
    }
    if o.vpn_realtime.is_some() && o.vpn == VpnKind::None {
        return Err("--vpn-realtime needs a VPN; --vpn none has no tunnel".into());
    }
    if o.vpn_queues.is_some() && o.vpn != VpnKind::Braid {
        return Err("--vpn-queues sets braid's Queues; it needs --vpn braid".into());
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

/// A congestion control's name as the kernel spells them (`bbr`, `cubic`,
/// `reno`, ...); whether it is available shows when iperf3 asks for it.
fn parse_cc(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() < 16
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!(
            "--cc: {name:?} is not a congestion control name (cubic, bbr, ...)"
        ))
    }
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    require_root("tunnel")?;
    run::check_tools(&o.vpn)?;
    lab::catch_stop_signals();
    let mut progress = Progress::new(&o.label());
    let report = run::measure_all(&o, &mut progress);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolkit::bench::args::argv;

    #[test]
    fn vpn_queues_takes_a_queue_count_and_needs_braid() {
        let o = parse(&argv("--vpn-queues 4")).unwrap().unwrap();
        assert_eq!(o.vpn_queues, Some(4));
        assert_eq!(parse(&argv("")).unwrap().unwrap().vpn_queues, None);
        for bad in ["--vpn-queues 0", "--vpn-queues 65", "--vpn-queues all"] {
            assert!(parse(&argv(bad)).is_err(), "{bad}");
        }
        let other = parse(&argv("--vpn wireguard-go --vpn-queues 2"))
            .err()
            .unwrap();
        assert!(
            other.contains("--vpn-queues sets braid's Queues"),
            "{other}"
        );
    }

    #[test]
    fn vpn_realtime_takes_a_real_time_priority_and_needs_a_vpn() {
        let o = parse(&argv("--vpn-realtime 20")).unwrap().unwrap();
        assert_eq!(o.vpn_realtime, Some(20));
        assert_eq!(parse(&argv("")).unwrap().unwrap().vpn_realtime, None);
        for bad in [
            "--vpn-realtime 0",
            "--vpn-realtime 100",
            "--vpn-realtime rr",
        ] {
            assert!(parse(&argv(bad)).is_err(), "{bad}");
        }
        let none = parse(&argv("--vpn none --vpn-realtime 20")).err().unwrap();
        assert!(none.contains("--vpn-realtime needs a VPN"), "{none}");
    }
}
