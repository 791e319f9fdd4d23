//! `braid bench peers`: what a server's peers cost it (issue 22). One
//! interface with N idle peers (random keys, one address each, no endpoint,
//! as a server's roaming clients are before they connect) and one live peer
//! over a veth, braid and the newest wireguard-go side by side in one run:
//! `wg setconf` and `wg show` times, idle CPU, RSS, the live peer's ping
//! and single-stream TCP; then thousands of peers initiating at once
//! (handshakes per second, time until all have a session). Prints the
//! table and checks the issue's targets: braid's own at the largest N,
//! those against wireguard-go at the largest N both measured
//! (wireguard-go holds at most 65,536 peers: `MaxPeers`).
//!
//! ```text
//!   netns S (server)                          netns C (client)
//!   VPN under test, N idle peers + 1 live     the live peer (same VPN)
//!   198.19.0.1/24 on the tunnel               198.19.0.2/24
//!   veth 198.18.61.1/24  ══════════════════  veth 198.18.61.2/24
//! ```
//!
//! The handshake part uses a second pair of namespaces (198.18.62.0/24):
//! the server knows the initiating peers only, and the client namespace
//! sends their initiations from addresses of 198.18.128.0/17 (see
//! `handshakes`).

mod handshakes;
mod report;
mod run;
mod upload;

use super::args::{require_root, Args};
use crate::toolkit::lab;
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage: braid bench peers [--peers LIST] [--vpn LIST] [--handshake-peers N]
           [--spread S] [--idle-seconds S] [--tcp-seconds S] [--pings N]
           [--upload-peers N] [--upload-seconds S] [--upload-queues LIST]
           [--upload-size B] [--json]

A server interface with N idle peers (random keys, one address each, no
endpoint) and one live peer, for each N of --peers, on braid and the newest
wireguard-go side by side: wg setconf and wg show times, idle CPU, RSS,
the live peer's ping p50/p99 and single-stream TCP; then N peers that all
initiate within a few seconds (a server after a restart): handshakes per
second and the time until every one has a session; then N peers that all
upload at once (a fresh server each, braid once per --upload-queues):
what the server delivers to its TUN, its CPU per packet and, for braid,
the share its sockets beyond the first received. Checks the targets of
issue 22 at the largest N. Needs root, wg, iperf3 (and for wireguard-go
the newest build, installed with go if it is missing).

  --peers LIST          idle peers per row (default 0,10000,60000,100000;
                        wireguard-go holds at most 65,536)
  --vpn LIST            braid, wireguard-go[=PATH] (default both)
  --handshake-peers N   peers initiating at once (default 10000; 0: none)
  --spread S            their first initiations over S seconds (default 2)
  --idle-seconds S      idle CPU measured over S seconds (default 10)
  --tcp-seconds S       the live peer's TCP stream (default 5)
  --pings N             the live peer's pings, 10 ms apart (default 200)
  --upload-peers N      peers uploading at once (default 1000; 0: none)
  --upload-seconds S    how long they send (default 5)
  --upload-queues LIST  braid's Queues for the uploads (default 1,2)
  --upload-size B       their inner packets' size, 29-1420 (default 1420)
  --json                one JSON object instead of the table
";

/// The VPN under test (and its live peer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vpn {
    Braid,
    WireguardGo(PathBuf),
}

impl Vpn {
    pub fn name(&self) -> &'static str {
        match self {
            Vpn::Braid => "braid",
            Vpn::WireguardGo(_) => "wireguard-go",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub peers: Vec<usize>,
    pub vpns: Vec<Vpn>,
    /// `wireguard-go` named without a path: the newest, found (or
    /// installed) when the bench starts.
    pub newest_wireguard_go: bool,
    pub handshake_peers: usize,
    pub spread: Duration,
    pub idle: Duration,
    pub tcp_seconds: u32,
    pub pings: u16,
    pub upload_peers: usize,
    pub upload_seconds: Duration,
    pub upload_queues: Vec<usize>,
    pub upload_size: usize,
    pub json: bool,
}

/// The most idle peers a row may have (a device holds 2^20).
const MAX_IDLE_PEERS: usize = 1_000_000;

fn parse_args(argv: &[String]) -> Result<Option<Options>, String> {
    let mut o = Options {
        peers: vec![0, 10_000, 60_000, 100_000],
        vpns: vec![Vpn::Braid, Vpn::WireguardGo(PathBuf::new())],
        newest_wireguard_go: true,
        handshake_peers: 10_000,
        spread: Duration::from_secs(2),
        idle: Duration::from_secs(10),
        tcp_seconds: 5,
        pings: 200,
        upload_peers: 1000,
        upload_seconds: Duration::from_secs(5),
        upload_queues: vec![1, 2],
        upload_size: upload::MAX_PACKET,
        json: false,
    };
    let mut a = Args::new(argv);
    while let Some(flag) = a.next() {
        match flag {
            "-h" | "--help" => return Ok(None),
            "--peers" => {
                o.peers = a
                    .value(flag)?
                    .split(',')
                    .map(|n| {
                        n.trim()
                            .replace('_', "")
                            .parse::<usize>()
                            .ok()
                            .filter(|&n| n <= MAX_IDLE_PEERS)
                            .ok_or_else(|| {
                                format!("--peers: {n:?} is not a number from 0 to {MAX_IDLE_PEERS}")
                            })
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--vpn" => {
                o.vpns.clear();
                o.newest_wireguard_go = false;
                for v in a.value(flag)?.split(',') {
                    match v.trim().split_once('=') {
                        None if v.trim() == "braid" => o.vpns.push(Vpn::Braid),
                        None if v.trim() == "wireguard-go" => {
                            o.newest_wireguard_go = true;
                            o.vpns.push(Vpn::WireguardGo(PathBuf::new()));
                        }
                        Some(("wireguard-go", path)) if !path.is_empty() => {
                            o.vpns.push(Vpn::WireguardGo(path.into()))
                        }
                        _ => {
                            return Err(format!(
                                "--vpn: {v:?} is not braid, wireguard-go or wireguard-go=PATH"
                            ))
                        }
                    }
                }
            }
            "--handshake-peers" => {
                o.handshake_peers = a.number(flag, 0..=handshakes::MAX_INITIATORS)?
            }
            "--spread" => o.spread = Duration::from_secs_f64(a.number(flag, 0.0..=60.0)?),
            "--idle-seconds" => o.idle = Duration::from_secs_f64(a.number(flag, 0.1..=600.0)?),
            "--tcp-seconds" => o.tcp_seconds = a.number(flag, 1..=600)?,
            "--pings" => o.pings = a.number(flag, 1..=10_000)?,
            "--upload-peers" => o.upload_peers = a.number(flag, 0..=handshakes::MAX_INITIATORS)?,
            "--upload-seconds" => {
                o.upload_seconds = Duration::from_secs_f64(a.number(flag, 0.1..=600.0)?)
            }
            "--upload-queues" => {
                o.upload_queues = a
                    .value(flag)?
                    .split(',')
                    .map(|q| {
                        q.trim()
                            .parse::<usize>()
                            .ok()
                            .filter(|q| (1..=64).contains(q))
                            .ok_or_else(|| {
                                format!("--upload-queues: {q:?} is not a number from 1 to 64")
                            })
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--upload-size" => {
                o.upload_size = a.number(flag, upload::MIN_PACKET..=upload::MAX_PACKET)?
            }
            "--json" => o.json = true,
            other => return Err(format!("unknown flag {other:?}\n\n{USAGE}")),
        }
    }
    if o.peers.is_empty() || o.vpns.is_empty() {
        return Err("--peers and --vpn need at least one value each".into());
    }
    Ok(Some(o))
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(mut o) = parse_args(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    require_root("peers")?;
    lab::require_tools(&["wg", "iperf3", "ip"])?;
    if o.newest_wireguard_go {
        let (path, version) = lab::wireguard_go::newest(true)?;
        if !o.json {
            println!("wireguard-go: {} ({version})", path.display());
        }
        for v in &mut o.vpns {
            if *v == Vpn::WireguardGo(PathBuf::new()) {
                *v = Vpn::WireguardGo(path.clone());
            }
        }
    }
    lab::catch_stop_signals();
    let results = run::measure_all(&o)?;
    if o.json {
        println!("{}", report::json(&o, &results));
    } else {
        print!("{}", report::table(&o, &results));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolkit::bench::args::argv;

    #[test]
    fn flags_and_their_errors() {
        let o = parse_args(&[]).unwrap().unwrap();
        assert_eq!(o.peers, [0, 10_000, 60_000, 100_000]);
        assert_eq!(o.vpns.len(), 2);
        assert!(o.newest_wireguard_go);
        let o = parse_args(&argv(
            "--peers 0,1_000 --vpn braid,wireguard-go=/x/wg --handshake-peers 50 --json \
             --upload-queues 1,4 --upload-size 100",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(o.peers, [0, 1000]);
        assert_eq!(
            o.vpns,
            [Vpn::Braid, Vpn::WireguardGo(PathBuf::from("/x/wg"))]
        );
        assert!(!o.newest_wireguard_go);
        assert_eq!(o.handshake_peers, 50);
        assert_eq!(o.upload_queues, [1, 4]);
        assert_eq!(o.upload_size, 100);
        assert!(o.json);
        for (bad, says) in [
            ("--peers 5,x", "--peers: \"x\""),
            ("--peers 2000000", "--peers"),
            ("--vpn openvpn", "--vpn: \"openvpn\""),
            ("--vpn wireguard-go=", "--vpn"),
            ("--handshake-peers 40000", "--handshake-peers"),
            ("--pings 0", "--pings"),
            ("--upload-queues 1,0", "--upload-queues: \"0\""),
            ("--upload-size 20", "--upload-size"),
            ("--upload-peers 40000", "--upload-peers"),
            ("--idle-seconds", "needs a value"),
            ("--frobnicate", "unknown flag"),
        ] {
            let e = parse_args(&argv(bad)).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(parse_args(&argv("--help")).unwrap().is_none());
    }
}
