//! The measurements of `braid bench peers`, each in a lab of its own: a
//! row (one VPN, N idle peers) and the handshake storm (one VPN, its
//! initiating peers).

use super::handshakes::{HandshakeFigures, Initiators, SOURCE_NET};
use super::upload::{self, Sent};
use super::{Options, Vpn};
use crate::keys::{PrivateKey, PublicKey};
use crate::toolkit::bench::tunnel::measure::{parse_ping, process_cpu_seconds};
use crate::toolkit::lab::process::{run_bounded, wait_until};
use crate::toolkit::lab::{self, iperf, ChildId, Lab, LabResult};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

const PORT: u16 = 51820;
const SERVER_TUNNEL: &str = "198.19.0.1";
const CLIENT_TUNNEL: &str = "198.19.0.2";
/// The server's port the uploads go to (discard's).
const SINK_PORT: u16 = 9;
/// Bound on one `wg` call: setconf of a million peers included.
const WG_TIMEOUT: Duration = Duration::from_secs(600);

/// One row: a VPN with `idle_peers` beside the live one.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub vpn: &'static str,
    pub idle_peers: usize,
    pub setconf_s: f64,
    pub show_s: f64,
    /// Peers `wg show` listed (the idle ones and the live one).
    pub shown_peers: usize,
    /// The server's CPU while nothing is sent, percent of one core.
    pub idle_cpu_pct: f64,
    pub rss_mb: f64,
    pub ping_p50_ms: Option<f64>,
    pub ping_p99_ms: Option<f64>,
    pub pings_answered: usize,
    pub pings_sent: usize,
    pub tcp_gbps: Option<f64>,
}

/// The handshake storm on one VPN.
#[derive(Debug, Clone, PartialEq)]
pub struct Storm {
    pub vpn: &'static str,
    pub figures: HandshakeFigures,
    /// The server's CPU seconds while it lasted.
    pub server_cpu_s: f64,
    /// What braid's server counted about the handshakes it did not
    /// answer (`braid show`: cookie replies, the initiation queue full or
    /// waited on too long, responses over the batch's budget, rate
    /// limited, flood dropped); empty for wireguard-go.
    pub server_counters: Vec<(&'static str, u64)>,
}

/// braid's device counters that say why an initiation got no response.
const STORM_COUNTERS: [&str; 6] = [
    "cookie_replies_sent",
    "handshake_queue_full",
    "handshake_queue_stale",
    "handshake_over_budget",
    "handshake_rate_limited",
    "handshake_flood_dropped",
];

/// Many peers uploading at once to one VPN.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    pub vpn: &'static str,
    /// braid's `Queues` (and so its sockets on the port); `None` for
    /// wireguard-go.
    pub queues: Option<usize>,
    pub peers: usize,
    /// Peers that got a session and so sent.
    pub sessions: usize,
    /// Inner packet size.
    pub size: usize,
    pub sent: Sent,
    /// Packets the server wrote to its TUN meanwhile.
    pub delivered: u64,
    pub server_cpu_s: f64,
    /// braid: sockets on its port, and datagrams that came in on the ones
    /// beyond the first during the upload.
    pub sockets: Option<u64>,
    pub datagrams_on_other_sockets: Option<u64>,
}

impl Upload {
    pub fn delivered_per_second(&self) -> f64 {
        self.delivered as f64 / self.sent.elapsed.as_secs_f64().max(1e-9)
    }

    /// Inner bytes delivered, in Gbit/s.
    pub fn delivered_gbps(&self) -> f64 {
        self.delivered_per_second() * self.size as f64 * 8.0 / 1e9
    }

    /// The server's CPU per packet it delivered, in µs.
    pub fn cpu_us_per_packet(&self) -> Option<f64> {
        (self.delivered > 0).then(|| self.server_cpu_s * 1e6 / self.delivered as f64)
    }

    /// Share of the delivered packets that came in on sockets beyond the
    /// first.
    pub fn other_sockets_share(&self) -> Option<f64> {
        let n = self.datagrams_on_other_sockets?;
        (self.delivered > 0).then(|| n as f64 / self.delivered as f64)
    }
}

/// A row or storm that could not be measured, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub vpn: &'static str,
    pub part: Part,
    pub why: String,
}

/// Which part of the bench a failure is of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Part {
    /// The row with this many idle peers.
    Row(usize),
    Storm,
    /// The upload, with braid's `Queues` (`None`: wireguard-go).
    Upload(Option<usize>),
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::Row(n) => write!(f, "{n} idle peers"),
            Part::Storm => f.write_str("handshake storm"),
            Part::Upload(Some(q)) => write!(f, "upload with Queues = {q}"),
            Part::Upload(None) => f.write_str("upload"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Results {
    pub rows: Vec<Row>,
    pub storms: Vec<Storm>,
    pub uploads: Vec<Upload>,
    /// What failed is reported, and the rest still runs: wireguard-go
    /// refuses more than 65,536 peers, for one.
    pub failures: Vec<Failure>,
}

/// Every row (peer counts in the outer loop, so both VPNs of one count run
/// close together in time), then the storms, then the uploads.
pub fn measure_all(o: &Options) -> Result<Results, String> {
    let mut r = Results::default();
    for &idle in &o.peers {
        for vpn in &o.vpns {
            lab::check_stop()?;
            if !o.json {
                eprintln!("{}: {idle} idle peers …", vpn.name());
            }
            match measure_row(vpn, idle, o) {
                Ok(row) => {
                    if !o.json {
                        eprintln!("  {}", super::report::row_line(&row));
                    }
                    r.rows.push(row);
                }
                Err(why) => failed(&mut r, vpn, Part::Row(idle), why)?,
            }
        }
    }
    if o.handshake_peers > 0 {
        for vpn in &o.vpns {
            lab::check_stop()?;
            if !o.json {
                eprintln!(
                    "{}: {} peers initiating within {:.0?} …",
                    vpn.name(),
                    o.handshake_peers,
                    o.spread
                );
            }
            match measure_storm(vpn, o) {
                Ok(storm) => r.storms.push(storm),
                Err(why) => failed(&mut r, vpn, Part::Storm, why)?,
            }
        }
    }
    if o.upload_peers > 0 {
        for vpn in &o.vpns {
            let queue_counts = match vpn {
                Vpn::Braid => o.upload_queues.clone(),
                Vpn::WireguardGo(_) => vec![1],
            };
            for queues in queue_counts {
                lab::check_stop()?;
                let part = Part::Upload((*vpn == Vpn::Braid).then_some(queues));
                if !o.json {
                    eprintln!(
                        "{}: {} peers uploading for {:.0?} ({part}) …",
                        vpn.name(),
                        o.upload_peers,
                        o.upload_seconds
                    );
                }
                match measure_upload(vpn, queues, o) {
                    Ok(upload) => {
                        if !o.json {
                            eprintln!("  {}", super::report::upload_line(&upload));
                        }
                        r.uploads.push(upload);
                    }
                    Err(why) => failed(&mut r, vpn, part, why)?,
                }
            }
        }
    }
    Ok(r)
}

/// Notes that `part` could not be measured on `vpn` (unless the bench
/// was stopped, which ends it).
fn failed(r: &mut Results, vpn: &Vpn, part: Part, why: String) -> Result<(), String> {
    lab::check_stop()?;
    eprintln!("  failed: {why}");
    r.failures.push(Failure {
        vpn: vpn.name(),
        part,
        why,
    });
    Ok(())
}

/// The VPN's server or client in `ns` on interface `ifname`, empty, its
/// userspace API socket up; returns the process.
fn start_vpn(lab: &mut Lab, vpn: &Vpn, ns: &str, ifname: &str) -> LabResult<(ChildId, u32)> {
    start_vpn_with_queues(lab, vpn, ns, ifname, 1)
}

/// [`start_vpn`] with braid's `Queues` (a config file then, which is where
/// that key lives; its peers still come by `wg setconf`). wireguard-go has
/// no such setting.
fn start_vpn_with_queues(
    lab: &mut Lab,
    vpn: &Vpn,
    ns: &str,
    ifname: &str,
    queues: usize,
) -> LabResult<(ChildId, u32)> {
    let log = format!("{ifname}.log");
    let mut cmd = match vpn {
        Vpn::Braid if queues > 1 => {
            let key = PrivateKey::generate();
            let text = format!(
                "[Interface]\nPrivateKey = {}\nQueues = {queues}\n",
                &*key.to_base64()
            );
            let file = lab.write_private(&format!("{ifname}.conf"), &text)?;
            let mut c = lab.braid_in(ns);
            c.args(["up", "-f", "--keep-root"]).arg(file);
            c
        }
        Vpn::Braid => {
            let mut c = lab.braid_in(ns);
            // The name first: flags before it would be `braid`'s own.
            c.args([ifname, "-f", "--keep-root"]);
            c
        }
        Vpn::WireguardGo(path) => {
            let mut c = lab.cmd_in(ns, path);
            c.args(["-f", ifname]).env("LOG_LEVEL", "error");
            c
        }
    };
    cmd.stdin(std::process::Stdio::null());
    let id = lab.spawn(cmd, &log)?;
    let socket = lab::uapi::sock_path(ifname);
    lab.remove_on_drop(socket.clone());
    let up = wait_until(lab::process::LONG, || socket.exists() || lab.exited(id));
    let pid = lab.pid(id);
    match pid {
        Some(pid) if up && !lab.exited(id) => Ok((id, pid)),
        _ => Err(format!(
            "{} {ifname} did not come up: {}",
            vpn.name(),
            std::fs::read_to_string(lab.dir().join(&log)).unwrap_or_default()
        )),
    }
}

/// `wg setconf IFNAME FILE` in `ns`; returns how long it took. A refusal
/// names what the VPN logged last.
fn setconf(lab: &Lab, ns: &str, ifname: &str, file: &std::path::Path) -> LabResult<Duration> {
    let mut cmd = lab.cmd_in(ns, "wg");
    cmd.arg("setconf").arg(ifname).arg(file);
    let start = Instant::now();
    let out = run_bounded(cmd, WG_TIMEOUT);
    if !out.ok() {
        let log =
            std::fs::read_to_string(lab.dir().join(format!("{ifname}.log"))).unwrap_or_default();
        let last = log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(format!(
            "wg setconf failed ({}); the VPN's log ends: {last:?}",
            out.describe().lines().next().unwrap_or("")
        ));
    }
    Ok(start.elapsed())
}

/// Addresses the tunnel interface and brings it up.
fn address(ns: &str, ifname: &str, addr: &str) -> LabResult<()> {
    lab::netns::ip_in(ns, &["addr", "add", addr, "dev", ifname]).check("address")?;
    lab::netns::ip_in(ns, &["link", "set", ifname, "mtu", "1420", "up"]).check("link up")?;
    Ok(())
}

/// The address of idle peer `i`: /32s of 198.19.0.0/16 beyond the
/// tunnel's own /24 while they last, then /128s of 2001:db8:1::/64.
fn idle_peer_address(i: usize) -> String {
    const V4: usize = 250 * 250;
    if i < V4 {
        format!("198.19.{}.{}/32", 1 + i / 250, 1 + i % 250)
    } else {
        let j = i - V4;
        format!("2001:db8:1::{:x}:{:x}/128", j >> 16, j & 0xffff)
    }
}

/// A `wg setconf` file: our key and port, the given peers, then `idle`
/// peers with random keys and an address each.
fn setconf_text(
    private: &PrivateKey,
    peers: &[(PublicKey, String, Option<String>)],
    idle: usize,
) -> String {
    let mut text = String::with_capacity(128 + (peers.len() + idle) * 110);
    let _ = write!(
        text,
        "[Interface]\nPrivateKey = {}\nListenPort = {PORT}\n",
        &*private.to_base64()
    );
    for (key, allowed, endpoint) in peers {
        let _ = write!(
            text,
            "\n[Peer]\nPublicKey = {key}\nAllowedIPs = {allowed}\n"
        );
        if let Some(e) = endpoint {
            let _ = writeln!(text, "Endpoint = {e}");
        }
    }
    for i in 0..idle {
        let key = PrivateKey::generate().public_key();
        let _ = write!(
            text,
            "\n[Peer]\nPublicKey = {key}\nAllowedIPs = {}\n",
            idle_peer_address(i)
        );
    }
    text
}

fn rss_mb(pid: u32) -> LabResult<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .ok_or_else(|| format!("/proc/{pid}/status has no VmRSS"))
}

fn measure_row(vpn: &Vpn, idle: usize, o: &Options) -> LabResult<Row> {
    let mut lab = Lab::new("p")?;
    let (s, c) = (lab.netns("s")?, lab.netns("c")?);
    let (vs, vc) = (lab.name("vs"), lab.name("vc"));
    lab.veth((&s, &vs, "198.18.61.1/24"), (&c, &vc, "198.18.61.2/24"))?;
    let (server_if, client_if) = (lab.name("s"), lab.name("c"));
    let (server_key, client_key) = (PrivateKey::generate(), PrivateKey::generate());
    let (_, server_pid) = start_vpn(&mut lab, vpn, &s, &server_if)?;
    let text = setconf_text(
        &server_key,
        &[(client_key.public_key(), format!("{CLIENT_TUNNEL}/32"), None)],
        idle,
    );
    let file = lab.write_private("server.conf", &text)?;
    drop(text);
    let setconf_s = setconf(&lab, &s, &server_if, &file)?.as_secs_f64();
    address(&s, &server_if, &format!("{SERVER_TUNNEL}/24"))?;
    start_vpn(&mut lab, vpn, &c, &client_if)?;
    let text = setconf_text(
        &client_key,
        &[(
            server_key.public_key(),
            format!("{SERVER_TUNNEL}/32"),
            Some(format!("198.18.61.1:{PORT}")),
        )],
        0,
    );
    let file = lab.write_private("client.conf", &text)?;
    setconf(&lab, &c, &client_if, &file)?;
    address(&c, &client_if, &format!("{CLIENT_TUNNEL}/24"))?;
    if !lab.ping_until_reply(&c, SERVER_TUNNEL, Duration::from_secs(30)) {
        return Err("the live peer got no ping answer through the tunnel".into());
    }

    let mut show = lab.cmd_in(&s, "wg");
    show.args(["show", &server_if]);
    let start = Instant::now();
    let shown = run_bounded(show, WG_TIMEOUT).check("wg show")?;
    let show_s = start.elapsed().as_secs_f64();
    let shown_peers = shown
        .stdout
        .lines()
        .filter(|l| l.starts_with("peer: "))
        .count();

    let cpu_before = process_cpu_seconds(server_pid)?;
    let idle_start = Instant::now();
    lab::sleep_unless_stopped(o.idle)?;
    let idle_cpu_pct = (process_cpu_seconds(server_pid)? - cpu_before)
        / idle_start.elapsed().as_secs_f64()
        * 100.0;
    let rss_mb = rss_mb(server_pid)?;

    let mut echo = lab.braid_in(&c);
    echo.args(["bench", "echo", "--interval", "10ms", "--count"])
        .arg(o.pings.to_string())
        .args(["--wait", "1s", SERVER_TUNNEL]);
    let pings =
        parse_ping(&run_bounded(echo, Duration::from_secs(u64::from(o.pings) / 100 + 30)).stdout);

    let report = iperf::tcp(
        &c,
        &s,
        SERVER_TUNNEL,
        o.tcp_seconds,
        false,
        &lab.dir().join("iperf3-server.log"),
    )?;
    Ok(Row {
        vpn: vpn.name(),
        idle_peers: idle,
        setconf_s,
        show_s,
        shown_peers,
        idle_cpu_pct,
        rss_mb,
        ping_p50_ms: pings.percentile(50.0),
        ping_p99_ms: pings.percentile(99.0),
        pings_answered: pings.rtts_ms.len(),
        pings_sent: pings.sent,
        tcp_gbps: report.received_bps.map(|b| b / 1e9),
    })
}

/// A fresh server whose peers are `initiators`, in a lab of its own: the
/// server's namespace, the client's (which holds the initiators'
/// addresses), the server's interface and process.
struct StormLab {
    lab: Lab,
    server_ns: String,
    client_ns: String,
    server_if: String,
    server_pid: u32,
    server: SocketAddrV4,
}

fn storm_lab(
    vpn: &Vpn,
    queues: usize,
    server_key: &PrivateKey,
    initiators: &Initiators,
) -> LabResult<StormLab> {
    let mut lab = Lab::new("h")?;
    let (s, c) = (lab.netns("s")?, lab.netns("c")?);
    let (vs, vc) = (lab.name("vs"), lab.name("vc"));
    lab.veth((&s, &vs, "198.18.62.1/24"), (&c, &vc, "198.18.62.2/24"))?;
    // The initiators' addresses are the client's; the server answers them
    // through the veth.
    lab::netns::ip_in(&c, &["route", "add", "local", SOURCE_NET, "dev", "lo"])
        .check("the initiators' addresses")?;
    lab::netns::ip_in(&s, &["route", "add", SOURCE_NET, "via", "198.18.62.2"])
        .check("the route back to them")?;
    let server_if = lab.name("s");
    let (_, server_pid) = start_vpn_with_queues(&mut lab, vpn, &s, &server_if, queues)?;
    let peers: Vec<(PublicKey, String, Option<String>)> = initiators
        .public_keys()
        .enumerate()
        .map(|(i, k)| (PublicKey::from_bytes(k), idle_peer_address(i), None))
        .collect();
    let file = lab.write_private("server.conf", &setconf_text(server_key, &peers, 0))?;
    setconf(&lab, &s, &server_if, &file)?;
    address(&s, &server_if, &format!("{SERVER_TUNNEL}/24"))?;
    Ok(StormLab {
        lab,
        server_ns: s,
        client_ns: c,
        server_if,
        server_pid,
        server: SocketAddrV4::new(Ipv4Addr::new(198, 18, 62, 1), PORT),
    })
}

/// `o.handshake_peers` peers of a fresh server all initiate within
/// `o.spread`; how long until every one has a session.
fn measure_storm(vpn: &Vpn, o: &Options) -> LabResult<Storm> {
    let server_key = PrivateKey::generate();
    let mut initiators = Initiators::new(o.handshake_peers, *server_key.public_key().as_bytes())?;
    let l = storm_lab(vpn, 1, &server_key, &initiators)?;
    let (server, spread, limit) = (l.server, o.spread, o.spread + Duration::from_secs(120));
    let cpu_before = process_cpu_seconds(l.server_pid)?;
    let figures =
        lab::traffic::in_netns(&l.client_ns, move || initiators.run(server, spread, limit))
            .join()
            .map_err(|_| "the initiators' thread panicked".to_string())??;
    let server_cpu_s = process_cpu_seconds(l.server_pid)? - cpu_before;
    let server_counters = match vpn {
        Vpn::Braid => braid_counters(&l, &STORM_COUNTERS),
        Vpn::WireguardGo(_) => Vec::new(),
    };
    Ok(Storm {
        vpn: vpn.name(),
        figures,
        server_cpu_s,
        server_counters,
    })
}

/// The braid server's counters of `names` that `braid show --json` has.
fn braid_counters(l: &StormLab, names: &[&'static str]) -> Vec<(&'static str, u64)> {
    let mut show = l.lab.braid_in(&l.server_ns);
    show.args(["show", &l.server_if, "--json"]);
    let out = run_bounded(show, lab::process::SHORT);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    names
        .iter()
        .filter_map(|&name| Some((name, lab::braid::extra_counter(&v["extra"], name)?)))
        .collect()
}

/// Packets the interface took in from the VPN (written to its TUN).
fn tun_packets_in(ns: &str, ifname: &str) -> LabResult<u64> {
    let out = lab::netns::ip_in(ns, &["-s", "-j", "link", "show", "dev", ifname])
        .check("ip -s link show")?;
    let v: serde_json::Value =
        serde_json::from_str(&out.stdout).map_err(|e| format!("ip -s -j link show: {e}"))?;
    v[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .ok_or_else(|| format!("ip -s -j link show {ifname}: no rx packets: {}", out.stdout))
}

/// `o.upload_peers` peers get their sessions, then all send to the server
/// at once for `o.upload_seconds`.
fn measure_upload(vpn: &Vpn, queues: usize, o: &Options) -> LabResult<Upload> {
    let server_key = PrivateKey::generate();
    let mut initiators = Initiators::new(o.upload_peers, *server_key.public_key().as_bytes())?;
    let l = storm_lab(vpn, queues, &server_key, &initiators)?;
    // The port the packets go to: a socket that holds it and is never read,
    // so the kernel drops them there without an ICMP answer.
    let sink = lab::traffic::in_netns(&l.server_ns, || UdpSocket::bind(("0.0.0.0", SINK_PORT)))
        .join()
        .map_err(|_| "the sink's thread panicked".to_string())?
        .map_err(|e| format!("bind the sink port {SINK_PORT}: {e}"))?;
    let server = l.server;
    let (spread, limit) = (o.spread, o.spread + Duration::from_secs(120));
    let (initiators, handshakes) = lab::traffic::in_netns(&l.client_ns, move || {
        let figures = initiators.run(server, spread, limit);
        (initiators, figures)
    })
    .join()
    .map_err(|_| "the initiators' thread panicked".to_string())?;
    let handshakes = handshakes?;
    let (socket, sessions) = initiators
        .into_sessions()
        .ok_or("the initiators have no socket")?;
    let other_sockets = |l: &StormLab| match vpn {
        Vpn::Braid => braid_counters(l, &["udp_sockets", "udp_socket_datagrams"]),
        Vpn::WireguardGo(_) => Vec::new(),
    };
    let counters_before = other_sockets(&l);
    let before = (
        tun_packets_in(&l.server_ns, &l.server_if)?,
        process_cpu_seconds(l.server_pid)?,
    );
    let inner_to = SocketAddrV4::new(SERVER_TUNNEL.parse().expect("an address"), SINK_PORT);
    let (seconds, size) = (o.upload_seconds, o.upload_size);
    let sent = lab::traffic::in_netns(&l.client_ns, move || {
        upload::send_all(
            &socket,
            sessions,
            server,
            inner_to,
            initiator_tunnel_address,
            size,
            seconds,
        )
    })
    .join()
    .map_err(|_| "the uploading thread panicked".to_string())??;
    // What was sent and not yet opened gets its moment.
    lab::sleep_unless_stopped(Duration::from_millis(200))?;
    let after = (
        tun_packets_in(&l.server_ns, &l.server_if)?,
        process_cpu_seconds(l.server_pid)?,
    );
    drop(sink);
    let counters_after = other_sockets(&l);
    let counter = |name| {
        let of = |c: &[(&str, u64)]| c.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        Some((of(&counters_before)?, of(&counters_after)?))
    };
    Ok(Upload {
        vpn: vpn.name(),
        queues: (*vpn == Vpn::Braid).then_some(queues),
        peers: o.upload_peers,
        sessions: handshakes.completed,
        size,
        sent,
        delivered: after.0.saturating_sub(before.0),
        server_cpu_s: after.1 - before.1,
        sockets: counter("udp_sockets").map(|(_, n)| n),
        datagrams_on_other_sockets: counter("udp_socket_datagrams")
            .map(|(b, a)| a.saturating_sub(b)),
    })
}

/// The tunnel address of initiating peer `i` (its AllowedIPs): IPv4 for
/// every one of them (at most `MAX_INITIATORS`).
fn initiator_tunnel_address(i: usize) -> Ipv4Addr {
    let allowed = idle_peer_address(i);
    allowed
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(Ipv4Addr::UNSPECIFIED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_peer_addresses_are_distinct_and_stay_in_the_test_ranges() {
        let mut seen = std::collections::HashSet::new();
        for i in (0..200_000).step_by(7) {
            let a = idle_peer_address(i);
            assert!(
                a.starts_with("198.19.") || a.starts_with("2001:db8:1::"),
                "{a}"
            );
            assert!(
                !a.starts_with("198.19.0."),
                "{a} is in the tunnel's own /24"
            );
            assert!(a.parse::<crate::cidr::IpCidr>().is_ok(), "{a}");
            assert!(seen.insert(a));
        }
    }

    #[test]
    fn a_setconf_file_names_every_peer() {
        let key = PrivateKey::generate();
        let live = (
            PrivateKey::generate().public_key(),
            "198.19.0.2/32".to_string(),
            Some("198.18.61.1:51820".to_string()),
        );
        let text = setconf_text(&key, &[live], 3);
        assert_eq!(text.matches("[Peer]").count(), 4);
        assert!(text.contains("Endpoint = 198.18.61.1:51820\n"));
        assert!(text.contains("AllowedIPs = 198.19.1.3/32\n"));
        assert!(text.starts_with("[Interface]\nPrivateKey = "));
    }
}
