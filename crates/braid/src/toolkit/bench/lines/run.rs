//! Running one case: relays and tunnels up, one bounded iperf3 transfer
//! (with cuts sent to the relays on time), the counters of both sides, and
//! everything down again.

use super::plan::{Case, Measure, Setup, B_PORT, LINES, TUNNEL_A, TUNNEL_B};
use crate::toolkit::lab::mptcp::{self, MptcpTools, MptcpTunnels};
use crate::toolkit::lab::{self, iperf, Lab, LabResult, NetemLine};
use crate::toolkit::plot::{sample, Mark, MarkKind, Panel, Series};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What one case measured.
pub(super) struct Outcome {
    pub(super) result: Result<Value, String>,
    pub(super) notes: Vec<String>,
    pub(super) counters: Value,
    pub(super) show: String,
    pub(super) wall: f64,
    /// The transfer per second (with `--plot`).
    pub(super) panel: Option<Panel>,
}

/// What a transfer looked like second by second, for `--plot`.
pub(super) struct Trace {
    lines: sample::LineRates,
    marks: Vec<Mark>,
    start_unix_ms: u64,
    total: Vec<(f64, f64)>,
}

pub(super) struct Bench {
    pub(super) lab: Lab,
    pub(super) ns_a: String,
    pub(super) ns_b: String,
    pub(super) if_a: String,
    pub(super) if_b: String,
    pub(super) keys: ((String, String), (String, String)),
    /// What the MPTCP anchor needs, looked for at its first case (`Err`:
    /// why it cannot be measured).
    pub(super) mptcp_tools: Option<Result<MptcpTools, String>>,
    /// `--plot`: every transfer is traced.
    pub(super) plot: bool,
    pub(super) trace: Option<Trace>,
}

/// Where a transfer goes and how: iperf3's server address, and whether
/// both ends run under `mptcpize` (the MPTCP anchor's tunnels).
pub(super) struct Transfer<'a> {
    pub(super) server: &'a str,
    pub(super) mptcp: Option<&'a MptcpTunnels>,
}

impl Bench {
    pub(super) fn new(plot: bool) -> LabResult<Bench> {
        let mut lab = Lab::new("l")?;
        let (if_a, if_b) = (lab.name("a"), lab.name("b"));
        let ns_a = lab.netns("a")?;
        let ns_b = lab.netns("b")?;
        for (ifn, a, b, _) in LINES {
            lab.veth(
                (&ns_a, ifn, &format!("{a}/24")),
                (&ns_b, ifn, &format!("{b}/24")),
            )?;
        }
        Ok(Bench {
            lab,
            ns_a,
            ns_b,
            if_a,
            if_b,
            keys: (lab::keypair(), lab::keypair()),
            mptcp_tools: None,
            plot,
            trace: None,
        })
    }

    /// Relays and tunnels for a case; the relays are returned so the
    /// caller can cut them and must stop them.
    pub(super) fn up(
        &mut self,
        setup: &Setup,
        notes: &mut Vec<String>,
    ) -> LabResult<Vec<NetemLine>> {
        let netems = self.relays(setup, |_| B_PORT)?;
        if let Err(e) = self.tunnels(setup, notes) {
            self.down(netems);
            return Err(e);
        }
        Ok(netems)
    }

    /// A `braid netem` relay per line of `setup` in B, line `i` forwarding
    /// to 127.0.0.1:`to_port(i)`.
    pub(super) fn relays(
        &mut self,
        setup: &Setup,
        to_port: impl Fn(usize) -> u16,
    ) -> LabResult<Vec<NetemLine>> {
        let mut netems = Vec::new();
        for (i, f) in setup.lines.iter().enumerate() {
            let (ifn, _, b, port) = LINES[i];
            let args: Vec<&str> = f.iter().map(String::as_str).collect();
            match self.lab.netem(
                &self.ns_b,
                ifn,
                &format!("{b}:{port}"),
                &format!("127.0.0.1:{}", to_port(i)),
                &args,
            ) {
                Ok(n) => netems.push(n),
                Err(e) => {
                    self.stop_netems(netems);
                    return Err(e);
                }
            }
        }
        Ok(netems)
    }

    pub(super) fn tunnels(&mut self, setup: &Setup, notes: &mut Vec<String>) -> LabResult<()> {
        let ((key_a, pub_a), (key_b, pub_b)) = self.keys.clone();
        let mut peer_opts = format!("Mode = {}\n", setup.mode);
        if let Some(h) = setup.hold {
            let _ = writeln!(peer_opts, "ReorderHold = {h}");
        }
        let mut paths = String::new();
        for &(ifn, _, b, port) in LINES.iter().take(setup.lines.len()) {
            let _ = writeln!(paths, "Path = {ifn} bind={ifn} endpoint={b}:{port}");
        }
        let conf_a = format!(
            "[Interface]\nPrivateKey = {key_a}\nAddress = {TUNNEL_A}/24\n\n[Peer]\nPublicKey = {pub_b}\nAllowedIPs = {TUNNEL_B}/32\n{paths}{peer_opts}"
        );
        let conf_b = format!(
            "[Interface]\nPrivateKey = {key_b}\nAddress = {TUNNEL_B}/24\nListenPort = {B_PORT}\n\n[Peer]\nPublicKey = {pub_a}\nAllowedIPs = {TUNNEL_A}/32\n{peer_opts}"
        );
        let (ns_a, ns_b, if_a, if_b) = (
            self.ns_a.clone(),
            self.ns_b.clone(),
            self.if_a.clone(),
            self.if_b.clone(),
        );
        self.lab.braid_up(&ns_b, &if_b, &conf_b)?;
        self.lab.braid_up(&ns_a, &if_a, &conf_a)?;
        lab::check_stop()?;
        if !self
            .lab
            .ping_until_reply(&ns_a, TUNNEL_B, Duration::from_secs(10))
        {
            return Err("no ping reply through the tunnel within 10 s".into());
        }
        // Every path probed and up on both sides before the transfer.
        let want = setup.lines.len();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let a = self.paths_up(&ns_a, &if_a);
            let b = self.paths_up(&ns_b, &if_b);
            if a >= want && b >= want {
                break;
            }
            if Instant::now() > deadline {
                notes.push(format!(
                    "only {a} of {want} paths up in A and {b} in B after 5 s; measured anyway"
                ));
                break;
            }
            lab::sleep_unless_stopped(Duration::from_millis(50))?;
        }
        Ok(())
    }

    pub(super) fn paths_up(&self, ns: &str, name: &str) -> usize {
        self.lab
            .braid_show(ns, name, true)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| {
                v["peers"][0]["paths"]
                    .as_array()
                    .map(|ps| ps.iter().filter(|p| p["state"] == "up").count())
            })
            .unwrap_or(0)
    }

    pub(super) fn stop_netems(&mut self, netems: Vec<NetemLine>) {
        for n in netems {
            self.lab.stop(n.id, &n.log);
        }
    }

    pub(super) fn down(&mut self, netems: Vec<NetemLine>) {
        let (ns_a, ns_b, if_a, if_b) = (
            self.ns_a.clone(),
            self.ns_b.clone(),
            self.if_a.clone(),
            self.if_b.clone(),
        );
        let _ = self.lab.braid_down(&ns_a, &if_a);
        let _ = self.lab.braid_down(&ns_b, &if_b);
        self.stop_netems(netems);
    }

    /// `braid show` of both sides: (JSON, text).
    pub(super) fn counters(&self) -> (Value, String) {
        let mut j = serde_json::Map::new();
        let mut text = String::new();
        for (side, ns, name) in [("a", &self.ns_a, &self.if_a), ("b", &self.ns_b, &self.if_b)] {
            let v = self
                .lab
                .braid_show(ns, name, true)
                .ok()
                .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                .unwrap_or(Value::Null);
            j.insert(side.into(), v);
            let t = self
                .lab
                .braid_show(ns, name, false)
                .unwrap_or_else(|e| format!("braid show failed: {e}\n"));
            let _ = writeln!(text, "--- {side} side ({name}) ---\n{}", t.trim_end());
        }
        (Value::Object(j), text)
    }

    /// One iperf3 client run (with a one-shot server in B); `actions`
    /// (seconds after the client started, line index, control command)
    /// are sent to the relays during the run. Returns iperf3's report.
    pub(super) fn iperf(
        &mut self,
        to: &Transfer,
        args: &[String],
        seconds: u32,
        actions: &[(f64, usize, &str)],
        netems: &[NetemLine],
    ) -> LabResult<(Value, Vec<String>)> {
        let mut last_err = String::new();
        // Under mptcpize, iperf3's sockets are MPTCP ones.
        let program = |lab: &Lab, ns: &str| {
            if to.mptcp.is_some() {
                let mut c = lab.cmd_in(ns, "mptcpize");
                c.args(["run", "iperf3"]);
                c
            } else {
                lab.cmd_in(ns, "iperf3")
            }
        };
        // The MPTCP subflows are looked at once, mid-transfer.
        let look_at = f64::from(seconds) / 2.0;
        for attempt in 0..2 {
            let mut subflows = Vec::new();
            let mut looked = to.mptcp.is_none();
            let mut server = program(&self.lab, &self.ns_b);
            server.args(["-s", "-1", "-B", to.server]);
            let server = self.lab.spawn(server, "iperf3-server.log")?;
            if let Err(e) = lab::sleep_unless_stopped(Duration::from_millis(400)) {
                self.lab.stop(server, "iperf3-server.log");
                return Err(e);
            }
            let mut client = program(&self.lab, &self.ns_a);
            client.args(["-c", to.server, "-J"]).args(args);
            let client = match self.lab.spawn(client, "iperf3-client.json") {
                Ok(c) => c,
                Err(e) => {
                    self.lab.stop(server, "iperf3-server.log");
                    return Err(e);
                }
            };
            let start = Instant::now();
            let names: Vec<&str> = LINES.iter().take(netems.len()).map(|l| l.0).collect();
            let mut trace = self.plot.then(|| Trace {
                lines: sample::LineRates::new(&names, start),
                marks: Vec::new(),
                start_unix_ms: unix_ms(SystemTime::now()),
                total: Vec::new(),
            });
            let relays: Vec<&NetemLine> = netems.iter().collect();
            let limit = Duration::from_secs(u64::from(seconds) + 30);
            let mut next = 0;
            let mut failure = None;
            while !self.lab.wait(client, Duration::from_millis(20)) {
                if lab::stop_signalled() {
                    failure = Some("interrupted".to_string());
                    break;
                }
                if start.elapsed() > limit {
                    failure = Some(format!(
                        "iperf3 did not finish within {} s",
                        limit.as_secs()
                    ));
                    break;
                }
                if !looked && start.elapsed().as_secs_f64() >= look_at {
                    looked = true;
                    if let Some(t) = to.mptcp {
                        subflows = t.subflows(iperf::PORT);
                    }
                }
                if let Some(t) = trace.as_mut() {
                    t.lines.poll(Instant::now(), &relays);
                }
                if let Some(&(at, line, cmd)) = actions.get(next) {
                    if start.elapsed().as_secs_f64() >= at {
                        next += 1;
                        if let Some(t) = trace.as_mut() {
                            t.marks.push(action_mark(start, line, cmd));
                        }
                        match netems[line].control(cmd) {
                            Ok(reply) if reply.to_lowercase().contains("error") => {
                                failure = Some(format!("netem {cmd}: {reply}"));
                                break;
                            }
                            Ok(_) => {}
                            Err(e) => {
                                failure = Some(format!("netem {cmd}: {e}"));
                                break;
                            }
                        }
                    }
                }
            }
            let out = self.lab.stop(client, "iperf3-client.json");
            self.lab.stop(server, "iperf3-server.log");
            if let Some(f) = failure {
                return Err(f);
            }
            if next < actions.len() {
                return Err("the transfer ended before every cut/restore was sent".into());
            }
            let v: Value = match serde_json::from_str(&out) {
                Ok(v) => v,
                Err(e) => {
                    last_err = format!("iperf3 printed no JSON ({e}): {}", out.trim());
                    continue;
                }
            };
            match v["error"].as_str() {
                Some(err) if attempt == 0 && err.contains("connect") => {
                    last_err = format!("iperf3: {err}");
                    continue;
                }
                Some(err) => return Err(format!("iperf3: {err}")),
                None => {
                    if let Some(mut t) = trace {
                        t.total = iperf::Report::from_json(v.clone())
                            .map(|r| sample::interval_points(&r.receiver_intervals))
                            .unwrap_or_default();
                        self.trace = Some(t);
                    }
                    return Ok((v, subflows));
                }
            }
        }
        Err(last_err)
    }

    pub(super) fn run_case(&mut self, case: &Case) -> Outcome {
        if case.extra.mptcp {
            return self.run_mptcp_case(case);
        }
        let started = Instant::now();
        let mut notes = Vec::new();
        let netems = match self.up(&case.setup, &mut notes) {
            Ok(n) => n,
            Err(e) => return failed(e, notes, started),
        };
        let to = Transfer {
            server: TUNNEL_B,
            mptcp: None,
        };
        let result = self.transfer(case, &to, &netems).map(|(v, _)| v);
        let panel = self.panel(case, true);
        let (mut counters, mut show) = self.counters();
        let relays = relay_stats(&netems, &mut show);
        check_rates(case, &relays, &mut notes);
        if let Value::Object(m) = &mut counters {
            m.insert("netem".into(), Value::Array(relays));
        }
        self.down(netems);
        Outcome {
            result,
            notes,
            counters,
            show,
            wall: started.elapsed().as_secs_f64(),
            panel,
        }
    }

    /// The panel of the transfer just traced (`None` without `--plot`):
    /// each line's relay, iperf3's receiver, the cuts and rate changes
    /// sent, and, where braid ran, when side A saw a line go down or up.
    fn panel(&mut self, case: &Case, braid: bool) -> Option<Panel> {
        let t = self.trace.take()?;
        let mut marks = t.marks;
        if braid {
            let events = self
                .lab
                .braid_show(&self.ns_a, &self.if_a, true)
                .ok()
                .and_then(|j| crate::uapi::snapshot_from_json(&j).ok())
                .map(|s| s.events)
                .unwrap_or_default();
            marks.extend(sample::event_marks(
                &events,
                t.start_unix_ms,
                f64::from(case.seconds) + 1.0,
            ));
        }
        marks.sort_by(|a, b| a.at.total_cmp(&b.at));
        let mut series = t.lines.series();
        for (s, flags) in series.iter_mut().zip(&case.setup.lines) {
            let shown: Vec<&str> = flags
                .split(|f| f == "--seed")
                .next()
                .unwrap_or_default()
                .iter()
                .map(String::as_str)
                .collect();
            if !shown.is_empty() {
                s.label = format!("{} ({})", s.label, shown.join(" "));
            }
        }
        series.push(Series {
            label: "total arrived (iperf3)".into(),
            points: t.total,
            total: true,
        });
        Some(Panel {
            title: case.label.clone(),
            series,
            marks,
        })
    }

    /// The case's iperf3 run (TCP or UDP) with its relay commands, and
    /// its summary.
    fn transfer(
        &mut self,
        case: &Case,
        to: &Transfer,
        netems: &[NetemLine],
    ) -> LabResult<(Value, Vec<String>)> {
        let t = case.seconds.to_string();
        match &case.measure {
            Measure::Tcp { window, cc } => {
                let mut args = tcp_args(case.seconds, *window, *cc, &case.extra);
                if self.plot && !args.iter().any(|a| a == "--get-server-output") {
                    // What arrived per second, counted where it arrived.
                    args.push("--get-server-output".into());
                }
                let actions: Vec<(f64, usize, &str)> = case
                    .extra
                    .actions
                    .iter()
                    .map(|(at, line, cmd)| (*at, *line, cmd.as_str()))
                    .collect();
                let (v, subflows) = self.iperf(to, &args, case.seconds, &actions, netems)?;
                Ok((tcp_summary(&v, case.extra.tail_from)?, subflows))
            }
            Measure::Udp { rate, len, cut } => {
                let mut args: Vec<String> = ["-u", "-b", rate, "-l", &len.to_string(), "-t", &t]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                if self.plot {
                    args.push("--get-server-output".into());
                }
                let actions: Vec<(f64, usize, &str)> = cut
                    .map(|(c, r)| vec![(c, 0, "cut"), (r, 0, "restore")])
                    .unwrap_or_default();
                let (v, subflows) = self.iperf(to, &args, case.seconds, &actions, netems)?;
                Ok((udp_summary(&v)?, subflows))
            }
        }
    }

    /// The MPTCP anchor on the case's lines: the same relays (forwarding
    /// to one wireguard-go tunnel each), `mptcpize run iperf3`, and whether
    /// both subflows carried traffic.
    fn run_mptcp_case(&mut self, case: &Case) -> Outcome {
        let started = Instant::now();
        let mut notes = Vec::new();
        let tools = self
            .mptcp_tools
            .get_or_insert_with(|| MptcpTools::find(true))
            .clone();
        let tools = match tools {
            Ok(t) => t,
            Err(e) => return failed(format!("not measured: {e}"), notes, started),
        };
        if case.setup.lines.len() != 2 {
            return failed("the MPTCP anchor needs two lines".into(), notes, started);
        }
        let netems = match self.relays(&case.setup, mptcp_port) {
            Ok(n) => n,
            Err(e) => return failed(e, notes, started),
        };
        let endpoints: Vec<String> = LINES
            .iter()
            .map(|(_, _, b, port)| format!("{b}:{port}"))
            .collect();
        let (ns_a, ns_b) = (self.ns_a.clone(), self.ns_b.clone());
        let tunnels = match self.lab.mptcp_up(
            &tools,
            &ns_a,
            &ns_b,
            [&endpoints[0], &endpoints[1]],
            [mptcp_port(0), mptcp_port(1)],
        ) {
            Ok(t) => t,
            Err(e) => {
                self.stop_netems(netems);
                return failed(e, notes, started);
            }
        };
        let result = self.mptcp_transfer(case, &tunnels, &netems, &tools);
        let panel = self.panel(case, false);
        let mut show = String::new();
        let relays = relay_stats(&netems, &mut show);
        check_rates(case, &relays, &mut notes);
        let result = result.map(|(mut v, subflows)| {
            v["mptcp"] = mptcp_evidence(&tools.version, &subflows, &relays);
            v
        });
        let _ = writeln!(
            show,
            "--- MPTCP in A (ss -HMn) ---\n{}",
            lab::netns::run_in(&ns_a, "ss", &["-HMn"], lab::process::SHORT)
                .stdout
                .trim_end()
        );
        if let Ok(v) = &result {
            if v["mptcp"]["two_subflows"] != true {
                notes.push(format!(
                    "MPTCP did not carry traffic on both lines: {}",
                    v["mptcp"]["summary"].as_str().unwrap_or("")
                ));
            }
        }
        self.lab.mptcp_down(tunnels);
        self.stop_netems(netems);
        Outcome {
            result,
            notes,
            counters: json!({ "netem": relays }),
            show,
            wall: started.elapsed().as_secs_f64(),
            panel,
        }
    }

    fn mptcp_transfer(
        &mut self,
        case: &Case,
        tunnels: &MptcpTunnels,
        netems: &[NetemLine],
        tools: &MptcpTools,
    ) -> LabResult<(Value, Vec<String>)> {
        // Both tunnels through before the transfer (handshakes done).
        for i in 0..2 {
            let peer = format!("198.19.{}.2", mptcp::TUNNEL_NET[i]);
            if !self
                .lab
                .ping_until_reply(&self.ns_a, &peer, Duration::from_secs(10))
            {
                return Err(format!(
                    "no ping reply through wireguard-go tunnel {} ({}) within 10 s",
                    i + 1,
                    tools.version
                ));
            }
        }
        let to = Transfer {
            server: mptcp::SERVER,
            mptcp: Some(tunnels),
        };
        self.transfer(case, &to, netems)
    }
}

/// B's wireguard-go port of the MPTCP anchor's tunnel over line `i`.
pub(super) fn mptcp_port(i: usize) -> u16 {
    B_PORT + 1 + i as u16
}

fn failed(e: String, notes: Vec<String>, started: Instant) -> Outcome {
    Outcome {
        result: Err(e),
        notes,
        counters: Value::Null,
        show: String::new(),
        wall: started.elapsed().as_secs_f64(),
        panel: None,
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A relay command sent during a transfer, as a mark on its plot.
fn action_mark(start: Instant, line: usize, cmd: &str) -> Mark {
    let kind = match cmd {
        "cut" => MarkKind::Cut,
        "restore" => MarkKind::Restore,
        _ => MarkKind::Rate,
    };
    let label = match kind {
        MarkKind::Cut => format!("line{} cut", line + 1),
        MarkKind::Restore => format!("line{} restored", line + 1),
        _ => format!("line{}: {cmd}", line + 1),
    };
    Mark {
        at: start.elapsed().as_secs_f64(),
        kind,
        label,
    }
}

/// Every relay's counters (`stats json`), also appended to `show`.
fn relay_stats(netems: &[NetemLine], show: &mut String) -> Vec<Value> {
    let mut relays = Vec::new();
    for (i, n) in netems.iter().enumerate() {
        let stats = n.control("stats json").unwrap_or_else(|e| e);
        let _ = writeln!(show, "--- braid netem {} ---\n{stats}", LINES[i].0);
        relays.push(serde_json::from_str::<Value>(&stats).unwrap_or(json!(stats)));
    }
    relays
}

/// A note for every `rate RATE` sent to a relay during the case whose line
/// does not run at that rate at the end (the relays report their rate).
pub(super) fn check_rates(case: &Case, relays: &[Value], notes: &mut Vec<String>) {
    for (_, line, cmd) in &case.extra.actions {
        let Some(rate) = cmd.strip_prefix("rate ") else {
            continue;
        };
        let want = crate::toolkit::netem::args::parse_rate_change("rate", rate).ok();
        let have = relays.get(*line).and_then(|r| r["up"]["rate_bps"].as_u64());
        if want.is_none() || have != want {
            notes.push(format!(
                "line {} should run at {rate} after the change, but its relay reports {:?} bit/s",
                line + 1,
                have
            ));
        }
    }
}

/// Bytes below which a line is taken not to have carried a subflow (the
/// handshakes, keepalives and iperf3's control connection are far less).
pub(super) const SUBFLOW_MIN_BYTES: f64 = 64.0 * 1024.0;

/// Whether the MPTCP transfer used both lines: the relays' forwarded
/// bytes A → B per line, and the subflows `ss` showed mid-transfer.
pub(super) fn mptcp_evidence(version: &str, subflows: &[String], relays: &[Value]) -> Value {
    let bytes: Vec<f64> = relays
        .iter()
        .map(|r| r["up"]["forwarded_bytes"].as_f64().unwrap_or(0.0))
        .collect();
    let both = bytes.len() == 2 && bytes.iter().all(|b| *b >= SUBFLOW_MIN_BYTES);
    let mut local: Vec<&String> = subflows.iter().collect();
    local.sort();
    local.dedup();
    let summary = format!(
        "{} subflow(s) carrying data (ss, mid-transfer) from {}; line bytes A→B {}{}",
        subflows.len(),
        if local.is_empty() {
            "nowhere".to_string()
        } else {
            local
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" and ")
        },
        bytes
            .iter()
            .map(|b| format!("{:.1} MB", b / 1e6))
            .collect::<Vec<_>>()
            .join(" / "),
        if both { "" } else { " (NOT both lines)" }
    );
    json!({
        "wireguard_go": version,
        "subflows_seen": subflows,
        "line_bytes_up": bytes,
        "two_subflows": both,
        "summary": summary,
    })
}

/// iperf3's client arguments of a TCP case.
pub(super) fn tcp_args(
    seconds: u32,
    window: Option<&str>,
    cc: Option<&str>,
    extra: &super::plan::Extra,
) -> Vec<String> {
    let mut args = vec!["-t".to_string(), seconds.to_string()];
    if let Some(w) = window {
        args.extend(["-w".to_string(), w.to_string()]);
    }
    if let Some(cc) = cc {
        args.extend(["-C".to_string(), cc.to_string()]);
    }
    if extra.streams > 1 {
        args.extend(["-P".to_string(), extra.streams.to_string()]);
    }
    if extra.tail_from.is_some() {
        // The receiver's own intervals for "the last seconds".
        args.push("--get-server-output".to_string());
    }
    args
}

/// The figures of a TCP case, from iperf3's report; with `tail_from`, also
/// what arrived from that second on.
pub(super) fn tcp_summary(v: &Value, tail_from: Option<f64>) -> LabResult<Value> {
    let r = iperf::Report::from_json(v.clone())?;
    let bps = r.received_bps.ok_or("iperf3 report without sum_received")?;
    let mut out = json!({
        "mbps": bps / 1e6,
        "seconds": r.seconds,
        "bytes": r.received_bytes,
        "retransmits": r.retransmits,
        "intervals_mbps": r
            .interval_bps
            .iter()
            .map(|b| (b / 1e4).round() / 100.0)
            .collect::<Vec<_>>(),
    });
    if let Some(from) = tail_from {
        let tail = r
            .bps_from(from)
            .ok_or(format!("iperf3 report without intervals from {from} s on"))?;
        out["tail_from"] = json!(from);
        out["tail_mbps"] = json!(tail / 1e6);
        out["tail_counted_by"] = json!(if r.intervals_from_server {
            "receiver"
        } else {
            "sender"
        });
    }
    Ok(out)
}

/// The figures of a UDP case, from iperf3's report: loss, and the outage a
/// loss means at the sender's datagram rate.
pub(super) fn udp_summary(v: &Value) -> LabResult<Value> {
    let r = iperf::Report::from_json(v.clone())?;
    let u = r.udp.as_ref().ok_or("iperf3 report is not a UDP one")?;
    let seconds = r.seconds.unwrap_or(0.0);
    // What the sender sent per second (its own count and time).
    let sent = u.sent_packets.unwrap_or(u.packets);
    let sent_secs = u.sent_seconds.unwrap_or(seconds);
    let rate = if sent_secs > 0.0 {
        sent as f64 / sent_secs
    } else {
        0.0
    };
    Ok(json!({
        "lost_packets": u.lost_packets,
        "packets": u.packets,
        "lost_percent": u.lost_percent,
        "seconds": seconds,
        "rate_pps": rate,
        "outage_ms": if rate > 0.0 { u.lost_packets as f64 / rate * 1000.0 } else { f64::NAN },
        "out_of_order": u.out_of_order,
        "mbps": r.received_bps.unwrap_or(0.0) / 1e6,
        "jitter_ms": u.jitter_ms,
    }))
}
