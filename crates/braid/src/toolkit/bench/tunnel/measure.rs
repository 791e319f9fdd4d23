//! What one round of `braid bench tunnel` measures, and the small
//! statistics it needs: iperf3 transfers, ICMP echo round-trip times
//! (idle and under load, from `braid bench echo`), and the CPU time of
//! the VPN processes from /proc.

use crate::toolkit::bench::stats;
use crate::toolkit::lab::{self, ChildId, Lab, LabResult};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Pings at this interval, as root may.
const PING_INTERVAL_S: f64 = 0.01;
/// How long into a transfer the under-load ping starts (past TCP's start).
const LOADED_PING_DELAY: Duration = Duration::from_millis(500);

/// One stderr line that says where the benchmark is; rewritten in place on
/// a terminal, printed once per phase otherwise (logs stay readable).
pub struct Progress {
    case: String,
    tty: bool,
    shown: usize,
}

impl Progress {
    pub fn new(case: &str) -> Progress {
        Progress {
            case: case.to_string(),
            tty: std::io::stderr().is_terminal(),
            shown: 0,
        }
    }

    /// `left`: seconds left in the phase; a new phase prints a line when
    /// stderr is not a terminal.
    pub fn update(&mut self, round: usize, rounds: usize, phase: &str, left: u64, new_phase: bool) {
        let text = format!(
            "[{}] round {round}/{rounds}: {phase}, {left} s left",
            self.case
        );
        if self.tty {
            eprint!("\r{text:<width$}", width = self.shown);
            self.shown = text.chars().count();
            let _ = std::io::stderr().flush();
        } else if new_phase {
            eprintln!("{text}");
        }
    }

    /// A finished line that stays (a round's summary, a note).
    pub fn line(&mut self, text: &str) {
        if self.tty && self.shown > 0 {
            eprint!("\r{:width$}\r", "", width = self.shown);
            self.shown = 0;
        }
        eprintln!("[{}] {text}", self.case);
    }
}

/// What a round of measurements needs from the lab.
pub struct Path<'a> {
    pub lab: &'a mut Lab,
    pub ns_a: &'a str,
    pub ns_b: &'a str,
    /// The address in B that iperf3 and ping aim at.
    pub target: &'a str,
    pub seconds: u32,
    /// Processes whose CPU time is charged to the single-stream transfer.
    pub pids: &'a [u32],
    /// iperf3's congestion control (`-C`), if one was asked for.
    pub cc: Option<&'a str>,
}

/// One iperf3 transfer's outcome.
pub struct Transfer {
    pub gbps: f64,
    pub bytes: f64,
    pub retransmits: Option<u64>,
    /// CPU seconds of the VPN processes over the transfer (None: no VPN).
    pub vpn_cpu_s: Option<f64>,
    /// CPU seconds the whole machine was busy over the transfer.
    pub system_cpu_s: f64,
    /// Ping RTTs (ms) while it ran, when asked for.
    pub pings: Option<PingSample>,
    /// Mbit/s per second by iperf3's intervals (the client's: the sender
    /// for A→B, the receiver for -R), for `--plot`.
    pub per_second: Vec<(f64, f64)>,
}

pub struct PingSample {
    pub sent: usize,
    pub rtts_ms: Vec<f64>,
}

impl PingSample {
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let mut v = self.rtts_ms.clone();
        v.sort_by(f64::total_cmp);
        stats::percentile(&v, p)
    }
}

impl Path<'_> {
    /// One iperf3 run A → B (`args` add -P 4, -R…) against a one-shot server
    /// in B; `loaded_ping` also pings B during it.
    pub fn transfer(
        &mut self,
        args: &[&str],
        loaded_ping: bool,
        progress: &mut Progress,
        round: (usize, usize),
        phase: &str,
    ) -> LabResult<Transfer> {
        let mut last_err = String::new();
        // A fresh server may not be listening yet: one retry on "connect".
        for attempt in 0..2 {
            match self.try_transfer(args, loaded_ping, progress, round, phase) {
                Ok(t) => return Ok(t),
                Err(e) if attempt == 0 && e.contains("connect") => last_err = e,
                Err(e) => return Err(e),
            }
        }
        Err(last_err)
    }

    fn try_transfer(
        &mut self,
        args: &[&str],
        loaded_ping: bool,
        progress: &mut Progress,
        (round, rounds): (usize, usize),
        phase: &str,
    ) -> LabResult<Transfer> {
        let mut server = self.lab.cmd_in(self.ns_b, "iperf3");
        server.args(["-s", "-1", "-B", self.target]);
        let server = self.lab.spawn(server, "iperf3-server.log")?;
        let result = lab::sleep_unless_stopped(Duration::from_millis(300))
            .and_then(|()| self.run_client(args, loaded_ping, progress, (round, rounds), phase));
        self.lab.stop(server, "iperf3-server.log");
        result
    }

    fn run_client(
        &mut self,
        args: &[&str],
        loaded_ping: bool,
        progress: &mut Progress,
        (round, rounds): (usize, usize),
        phase: &str,
    ) -> LabResult<Transfer> {
        let seconds = self.seconds.to_string();
        let mut client = self.lab.cmd_in(self.ns_a, "iperf3");
        client
            .args(["-c", self.target, "-J", "-t", &seconds])
            .args(args);
        if let Some(cc) = self.cc {
            // iperf3 hands it to the server too, which sends with -R.
            client.args(["-C", cc]);
        }
        let cpu_before = self.vpn_cpu_seconds()?;
        let system_before = system_busy_seconds()?;
        let client = self.lab.spawn(client, "iperf3-client.json")?;
        let start = Instant::now();
        let limit = Duration::from_secs(u64::from(self.seconds) + 30);
        let mut ping: Option<ChildId> = None;
        let mut shown_left = u64::MAX;
        let outcome = loop {
            if self.lab.wait(client, Duration::from_millis(50)) {
                break Ok(());
            }
            if lab::stop_signalled() {
                break Err("interrupted".to_string());
            }
            let elapsed = start.elapsed();
            if elapsed > limit {
                break Err(format!(
                    "iperf3 did not finish within {} s",
                    limit.as_secs()
                ));
            }
            if loaded_ping && ping.is_none() && elapsed >= LOADED_PING_DELAY {
                // Pings while the stream is surely still running.
                let span = f64::from(self.seconds) - LOADED_PING_DELAY.as_secs_f64() - 0.3;
                let count = ((span / PING_INTERVAL_S) as usize).max(20);
                match self.spawn_ping(count, "ping-loaded.log") {
                    Ok(id) => ping = Some(id),
                    Err(e) => break Err(e),
                }
            }
            let left = u64::from(self.seconds).saturating_sub(elapsed.as_secs());
            if left != shown_left {
                progress.update(round, rounds, phase, left, shown_left == u64::MAX);
                shown_left = left;
            }
        };
        let cpu_after = self.vpn_cpu_seconds();
        let system_after = system_busy_seconds();
        let out = self.lab.stop(client, "iperf3-client.json");
        let pings = ping.map(|id| self.finish_ping(id, "ping-loaded.log"));
        outcome?;
        let report = lab::iperf::Report::parse(&out)
            .map_err(|e| format!("iperf3 -c {} {}: {e}", self.target, args.join(" ")))?;
        let bps = report
            .received_bps
            .ok_or("iperf3 report without sum_received")?;
        let bytes = report
            .received_bytes
            .ok_or("iperf3 report without sum_received.bytes")?;
        let vpn_cpu_s = match (cpu_before, cpu_after?) {
            (Some(before), Some(after)) => Some(after - before),
            _ => None,
        };
        Ok(Transfer {
            gbps: bps / 1e9,
            bytes,
            retransmits: report.retransmits,
            vpn_cpu_s,
            system_cpu_s: system_after? - system_before,
            pings,
            per_second: crate::toolkit::plot::sample::interval_points(&report.receiver_intervals),
        })
    }

    /// `count` echo requests from A to the target at the ping interval,
    /// by `braid bench echo` (iputils ping would busy-wait between them,
    /// taking CPU from the VPN under test).
    fn spawn_ping(&mut self, count: usize, log: &str) -> LabResult<ChildId> {
        let deadline = (count as f64 * PING_INTERVAL_S).ceil() as u64 + 3;
        let mut echo = self.lab.braid_in(self.ns_a);
        echo.args(["bench", "echo", "--interval"])
            .arg(format!("{}ms", PING_INTERVAL_S * 1e3))
            .args(["--count", &count.to_string()])
            .args(["--deadline", &format!("{deadline}s"), "--wait", "1s"])
            .arg(self.target);
        self.lab.spawn(echo, log)
    }

    fn finish_ping(&mut self, id: ChildId, log: &str) -> PingSample {
        // It ends by itself within its deadline; stop() only bounds the wait.
        self.lab.wait(id, Duration::from_secs(5));
        let text = self.lab.stop(id, log);
        parse_ping(&text)
    }

    /// Idle round-trip times: `count` pings with nothing else running.
    pub fn idle_ping(
        &mut self,
        count: usize,
        progress: &mut Progress,
        (round, rounds): (usize, usize),
    ) -> LabResult<PingSample> {
        let id = self.spawn_ping(count, "ping-idle.log")?;
        let start = Instant::now();
        let expected = count as f64 * PING_INTERVAL_S;
        let mut shown_left = u64::MAX;
        while !self.lab.wait(id, Duration::from_millis(50)) {
            if lab::stop_signalled() {
                self.lab.stop(id, "ping-idle.log");
                return Err("interrupted".into());
            }
            let left = (expected - start.elapsed().as_secs_f64()).max(0.0).ceil() as u64;
            if left != shown_left {
                progress.update(round, rounds, "idle ping", left, shown_left == u64::MAX);
                shown_left = left;
            }
        }
        Ok(parse_ping(&self.lab.stop(id, "ping-idle.log")))
    }

    /// utime + stime of every VPN process (all threads), in seconds; None
    /// when there is no VPN process.
    fn vpn_cpu_seconds(&self) -> LabResult<Option<f64>> {
        if self.pids.is_empty() {
            return Ok(None);
        }
        let mut total = 0.0;
        for &pid in self.pids {
            total += process_cpu_seconds(pid)?;
        }
        Ok(Some(total))
    }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// utime + stime of a process in seconds. /proc/PID/stat sums every
/// thread of the process, live and exited.
pub fn process_cpu_seconds(pid: u32) -> LabResult<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .map_err(|e| format!("{path}: {e} (did the VPN process exit?)"))?;
    cpu_seconds_from_stat(&stat).ok_or_else(|| format!("{path}: unexpected format"))
}

fn cpu_seconds_from_stat(stat: &str) -> Option<f64> {
    // The command name may hold spaces and parentheses: fields are counted
    // from the last ')'. After it come state (field 3) … utime (14), stime (15).
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks_per_second())
}

/// Seconds all CPUs together spent busy (not idle or waiting) since boot.
pub fn system_busy_seconds() -> LabResult<f64> {
    let stat = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    busy_seconds_from_proc_stat(&stat).ok_or_else(|| "/proc/stat: no cpu line".to_string())
}

fn busy_seconds_from_proc_stat(stat: &str) -> Option<f64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is inside user).
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)? + v.get(7)?;
    Some(busy / clock_ticks_per_second())
}

/// Replies' RTTs from ping's output, and how many were sent.
pub fn parse_ping(text: &str) -> PingSample {
    let rtts_ms = text
        .lines()
        .filter_map(|l| {
            let (_, after) = l.split_once("time=")?;
            after.split_whitespace().next()?.parse::<f64>().ok()
        })
        .collect::<Vec<_>>();
    // "N packets transmitted, M received"; without the summary (ping was
    // stopped), the highest icmp_seq stands in.
    let sent = text
        .lines()
        .find_map(|l| {
            let (n, _) = l.split_once(" packets transmitted")?;
            n.trim().parse().ok()
        })
        .unwrap_or(rtts_ms.len());
    PingSample { sent, rtts_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_tricky_name() {
        let stat = "4242 (my (odd) vpn) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0";
        let ticks = clock_ticks_per_second();
        assert_eq!(cpu_seconds_from_stat(stat), Some(300.0 / ticks));
    }

    #[test]
    fn proc_stat_busy_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 10 50 9000 70 5 15 2 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n";
        let ticks = clock_ticks_per_second();
        assert_eq!(busy_seconds_from_proc_stat(stat), Some(182.0 / ticks));
    }

    #[test]
    fn ping_output() {
        let text = "PING 198.19.90.2 (198.19.90.2) 56(84) bytes of data.\n\
            64 bytes from 198.19.90.2: icmp_seq=1 ttl=64 time=0.051 ms\n\
            64 bytes from 198.19.90.2: icmp_seq=2 ttl=64 time=1.25 ms\n\n\
            --- 198.19.90.2 ping statistics ---\n\
            3 packets transmitted, 2 received, 33.3333% packet loss, time 20ms\n\
            rtt min/avg/max/mdev = 0.051/0.650/1.250/0.600 ms\n";
        let s = parse_ping(text);
        assert_eq!(s.sent, 3);
        assert_eq!(s.rtts_ms, vec![0.051, 1.25]);
        assert_eq!(s.percentile(50.0), Some(0.051));
        assert_eq!(s.percentile(99.0), Some(1.25));
    }
}
