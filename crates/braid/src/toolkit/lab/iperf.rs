//! iperf3 between two namespaces, and the one reader of its JSON report
//! (`iperf3 -J`): [`Report`].

use super::netns::{cmd_in, run_in};
use super::process::LabResult;
use super::process::{wait_until, ChildGuard, LONG, SHORT};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// What an `iperf3 -J` run reported, TCP or UDP. The figures iperf3 left
/// out are `None`; `json` is the whole report.
#[derive(Debug, Clone)]
pub struct Report {
    /// Bits per second that arrived: `end.sum_received` (TCP) or
    /// `end.sum` (UDP, what the receiver counted).
    pub received_bps: Option<f64>,
    /// Bytes that arrived, and the seconds the receiver measured over
    /// (same place).
    pub received_bytes: Option<f64>,
    pub seconds: Option<f64>,
    /// TCP retransmissions the sender counted (`end.sum_sent.retransmits`).
    pub retransmits: Option<u64>,
    /// Bits per second of every interval (`intervals[].sum`).
    pub interval_bps: Vec<f64>,
    /// What the receiver counted per interval, (start s, end s, bytes):
    /// the server's intervals when the client asked for them
    /// (`--get-server-output`, for a test from client to server),
    /// otherwise the client's own (the sender's count on a normal test).
    pub receiver_intervals: Vec<(f64, f64, f64)>,
    /// True when `receiver_intervals` are the server's.
    pub intervals_from_server: bool,
    /// What only a UDP test reports (`start.test_start.protocol` is UDP).
    pub udp: Option<UdpFigures>,
    pub json: Value,
}

/// The datagram counts of a UDP test.
#[derive(Debug, Clone, PartialEq)]
pub struct UdpFigures {
    /// Lost and counted by the receiver, and its jitter (`end.sum`).
    pub lost_packets: u64,
    pub packets: u64,
    pub lost_percent: f64,
    pub jitter_ms: Option<f64>,
    /// Sent, and over how long, by the sender's count (`end.sum_sent`).
    pub sent_packets: Option<u64>,
    pub sent_seconds: Option<f64>,
    /// Arrived out of order (`end.sum_received.out_of_order`).
    pub out_of_order: Option<u64>,
}

impl Report {
    /// Reads iperf3's `-J` output; `Err` when it is not JSON, reports an
    /// error, or is a UDP report without its datagram counts.
    pub fn parse(text: &str) -> LabResult<Report> {
        let json: Value = serde_json::from_str(text)
            .map_err(|e| format!("iperf3 -J output is not JSON ({e})"))?;
        Report::from_json(json)
    }

    /// [`Report::parse`] of an already parsed report.
    pub fn from_json(json: Value) -> LabResult<Report> {
        if let Some(err) = json.get("error") {
            return Err(format!("iperf3 error: {err}"));
        }
        let is_udp = json["start"]["test_start"]["protocol"].as_str() == Some("UDP");
        let end = &json["end"];
        let (sum, sent) = (&end["sum"], &end["sum_sent"]);
        let udp = if is_udp {
            let count = |key: &str| {
                sum[key]
                    .as_u64()
                    .ok_or(format!("iperf3 UDP report without {key}"))
            };
            Some(UdpFigures {
                lost_packets: count("lost_packets")?,
                packets: count("packets")?,
                lost_percent: sum["lost_percent"].as_f64().unwrap_or(0.0),
                jitter_ms: sum["jitter_ms"].as_f64(),
                sent_packets: sent["packets"].as_u64(),
                sent_seconds: sent["seconds"].as_f64(),
                out_of_order: end["sum_received"]["out_of_order"].as_u64(),
            })
        } else {
            None
        };
        let received = if is_udp { sum } else { &end["sum_received"] };
        let spans = |intervals: &Value| -> Vec<(f64, f64, f64)> {
            intervals
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|i| {
                            let s = &i["sum"];
                            Some((
                                s["start"].as_f64()?,
                                s["end"].as_f64()?,
                                s["bytes"].as_f64()?,
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let server = spans(&json["server_output_json"]["intervals"]);
        let intervals_from_server = !server.is_empty();
        let receiver_intervals = if intervals_from_server {
            server
        } else {
            spans(&json["intervals"])
        };
        Ok(Report {
            receiver_intervals,
            intervals_from_server,
            received_bps: received["bits_per_second"].as_f64(),
            received_bytes: received["bytes"].as_f64(),
            seconds: received["seconds"].as_f64(),
            retransmits: sent["retransmits"].as_u64(),
            interval_bps: json["intervals"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|i| i["sum"]["bits_per_second"].as_f64().unwrap_or(0.0))
                        .collect()
                })
                .unwrap_or_default(),
            udp,
            json,
        })
    }
}

impl Report {
    /// Bits per second that arrived from `from` seconds after the start to
    /// the end of the test, from [`Report::receiver_intervals`] (whole
    /// intervals that end after `from`, so `from` should fall on an
    /// interval boundary). `None` without intervals there.
    pub fn bps_from(&self, from: f64) -> Option<f64> {
        let tail: Vec<&(f64, f64, f64)> = self
            .receiver_intervals
            .iter()
            .filter(|(start, _, _)| *start >= from - 0.01)
            .collect();
        let first = tail.first()?.0;
        let last = tail.iter().map(|i| i.1).fold(first, f64::max);
        let bytes: f64 = tail.iter().map(|i| i.2).sum();
        (last > first).then(|| bytes * 8.0 / (last - first))
    }
}

/// The port the lab's iperf3 servers listen on (each in its own namespace).
pub const PORT: &str = "5201";

/// One iperf3 run: a one-shot server (`-s -1`) on `server_addr` in
/// `server_ns` (its output in `server_log`), and once it listens, the
/// client `-c server_addr -J` with `client_args` in `client_ns`, bounded by
/// `timeout`.
pub fn run(
    client_ns: &str,
    server_ns: &str,
    server_addr: &str,
    client_args: &[&str],
    server_log: &Path,
    timeout: Duration,
) -> LabResult<Report> {
    let mut c = cmd_in(server_ns, "iperf3");
    c.args(["-s", "-1", "-B", server_addr, "-p", PORT]);
    let mut server = ChildGuard::spawn(c, "iperf3 server", server_log)?;
    let listening = wait_until(LONG, || {
        !server.running()
            || run_in(
                server_ns,
                "ss",
                &["-Hltn", &format!("sport = :{PORT}")],
                SHORT,
            )
            .stdout
            .contains(PORT)
    });
    if !listening || !server.running() {
        return Err(format!(
            "iperf3 server did not start:\n{}",
            server.log_text()
        ));
    }
    let args: Vec<&str> = ["-c", server_addr, "-p", PORT, "-J"]
        .into_iter()
        .chain(client_args.iter().copied())
        .collect();
    let out = run_in(client_ns, "iperf3", &args, timeout);
    drop(server);
    Report::parse(&out.stdout).map_err(|e| format!("{e}: {}", out.describe()))
}

/// A TCP run of `secs` seconds (`reverse`: `-R`, the server sends).
pub fn tcp(
    client_ns: &str,
    server_ns: &str,
    server_addr: &str,
    secs: u32,
    reverse: bool,
    server_log: &Path,
) -> LabResult<Report> {
    let t = secs.to_string();
    let mut args = vec!["-t", &t, "--connect-timeout", "20000"];
    if reverse {
        args.push("-R");
    }
    let timeout = Duration::from_secs(secs as u64 + 30);
    run(
        client_ns,
        server_ns,
        server_addr,
        &args,
        server_log,
        timeout,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tcp_and_udp_reports() {
        let tcp = r#"{"start":{"test_start":{"protocol":"TCP"}},
            "intervals":[{"sum":{"bits_per_second":1e6}}],
            "end":{"sum_sent":{"retransmits":3},
            "sum_received":{"bits_per_second":2e6,"bytes":1000,"seconds":4.0}}}"#;
        let r = Report::parse(tcp).unwrap();
        assert_eq!(r.udp, None);
        assert_eq!(r.received_bps, Some(2e6));
        assert_eq!(r.retransmits, Some(3));
        assert_eq!(r.interval_bps, vec![1e6]);
        let udp = r#"{"start":{"test_start":{"protocol":"UDP"}},
            "end":{"sum":{"bits_per_second":5e5,"lost_packets":2,
            "packets":100,"lost_percent":2,"jitter_ms":0.5},
            "sum_sent":{"packets":100,"seconds":1.0},
            "sum_received":{"bits_per_second":4e5,"out_of_order":1}}}"#;
        let r = Report::parse(udp).unwrap();
        assert_eq!(r.received_bps, Some(5e5));
        let u = r.udp.unwrap();
        assert_eq!((u.lost_packets, u.packets, u.lost_percent), (2, 100, 2.0));
        assert_eq!((u.sent_packets, u.out_of_order), (Some(100), Some(1)));
        assert_eq!(u.jitter_ms, Some(0.5));
        let no_counts = r#"{"start":{"test_start":{"protocol":"UDP"}},"end":{"sum":{}}}"#;
        assert!(Report::parse(no_counts).is_err());
        assert!(Report::parse(r#"{"error":"busy"}"#).is_err());
        // The last seconds: the server's intervals when they are there.
        let iv =
            |s: f64, b: f64| format!(r#"{{"sum":{{"start":{s},"end":{},"bytes":{b}}}}}"#, s + 1.0);
        let client: Vec<String> = (0..4).map(|s| iv(s as f64, 1e6)).collect();
        let server: Vec<String> = (0..4)
            .map(|s| iv(s as f64, if s < 2 { 1e6 } else { 2.5e5 }))
            .collect();
        let text = format!(
            r#"{{"start":{{"test_start":{{"protocol":"TCP"}}}},"intervals":[{}],
            "server_output_json":{{"intervals":[{}]}},"end":{{}}}}"#,
            client.join(","),
            server.join(",")
        );
        let r = Report::parse(&text).unwrap();
        assert!(r.intervals_from_server);
        assert_eq!(r.bps_from(2.0), Some(2e6));
        assert_eq!(r.bps_from(0.0), Some(5e6));
        assert_eq!(r.bps_from(9.0), None);
        let text = format!(
            r#"{{"start":{{"test_start":{{"protocol":"TCP"}}}},"intervals":[{}],"end":{{}}}}"#,
            client.join(",")
        );
        let r = Report::parse(&text).unwrap();
        assert!(!r.intervals_from_server);
        assert_eq!(r.bps_from(2.0), Some(8e6));
        assert!(Report::parse("no").is_err());
    }
}
