//! `MetricsListen =` (issue 23 item 1): `/metrics` scraped over HTTP from
//! inside the namespace, read by `promtool check metrics`, and scraped by
//! a real Prometheus server whose query API then answers with braid's
//! series; a port in use or a bad value stops `braid up` with nothing
//! changed.

use crate::harness::*;
use braid::toolkit::lab::traffic::in_netns;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const METRICS: &str = "127.0.0.1:9586";
const PROMETHEUS: &str = "127.0.0.1:9090";

/// One HTTP/1.1 request to `addr` from inside `ns`: (status line, headers
/// and body as one text).
fn http(ns: &Netns, method: &str, addr: &str, path: &str) -> (String, String) {
    let (target, request) = (
        addr.to_string(),
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n"),
    );
    let reply = in_netns(&ns.name, move || {
        let mut s = TcpStream::connect(&target).map_err(|e| format!("connect {target}: {e}"))?;
        s.set_read_timeout(Some(SHORT)).map_err(|e| e.to_string())?;
        s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        let mut reply = String::new();
        s.read_to_string(&mut reply).map_err(|e| e.to_string())?;
        Ok::<String, String>(reply)
    })
    .join()
    .expect("the HTTP thread")
    .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"));
    let status = reply.lines().next().unwrap_or("").to_string();
    (status, reply)
}

/// The value of the sample whose line starts with `prefix` (name and
/// labels), if there is one.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn body(reply: &str) -> &str {
    reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[test]
fn metrics_are_served_checked_by_promtool_and_scraped_by_prometheus() {
    if !preflight(
        "metrics_are_served_checked_by_promtool_and_scraped_by_prometheus",
        &["ip", "wg", "ping", "promtool", "prometheus"],
    ) {
        return;
    }
    let env = TestEnv::new("metrics");
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (mut ca, cb) = tunnel_confs(&ka, &kb, x);
    ca.braid_lines = vec![format!("MetricsListen = {METRICS}")];
    let mut b = BraidUp::start(&env, &nsb, &ifb, &cb, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &ca, BraidMode::Daemon);
    a.assert_up();
    assert!(
        ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG),
        "no reply through the tunnel"
    );
    let peer = format!("interface=\"{ifa}\",peer=\"{}\"", kb.public);
    let path_up = format!("braid_path_up{{{peer},path=\"endpoint\"}}");
    let rtt = format!("braid_path_rtt_seconds{{{peer},path=\"endpoint\"}}");
    // The path is up, and has its RTT, once its first probes came back.
    let mut text = String::new();
    let up = wait_until(LONG, || {
        let (_, reply) = http(&nsa, "GET", METRICS, "/metrics");
        text = body(&reply).to_string();
        sample(&text, &path_up) == Some(1.0) && sample(&text, &rtt).is_some()
    });
    assert!(up, "{path_up} never 1 with an RTT:\n{text}");
    let (status, reply) = http(&nsa, "GET", METRICS, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{reply}");
    assert!(
        reply.contains("Content-Type: text/plain; version=0.0.4"),
        "{reply}"
    );
    let text = body(&reply).to_string();
    println!("--- /metrics of {ifa} ({} lines) ---", text.lines().count());
    for line in text.lines().filter(|l| !l.starts_with('#')).take(40) {
        println!("{line}");
    }
    for name in [
        format!("braid_peer_received_bytes_total{{{peer}}}"),
        format!("braid_peer_sent_bytes_total{{{peer}}}"),
        format!("braid_peer_handshake_age_seconds{{{peer}}}"),
        format!("braid_peer_reorder_accepted_packets_total{{{peer}}}"),
        format!("braid_path_first_arrivals_total{{{peer},path=\"endpoint\"}}"),
        format!("braid_path_probe_loss_ratio{{{peer},path=\"endpoint\",direction=\"out\"}}"),
        format!("braid_invalid_datagrams_total{{interface=\"{ifa}\"}}"),
        format!("braid_tunnel_mtu_bytes{{interface=\"{ifa}\"}}"),
        "process_resident_memory_bytes".to_string(),
        "process_cpu_seconds_total".to_string(),
    ] {
        assert!(sample(&text, &name).is_some(), "no {name} in:\n{text}");
    }
    assert!(
        sample(&text, &format!("braid_peer_received_bytes_total{{{peer}}}")) > Some(0.0),
        "nothing received:\n{text}"
    );
    // Every number the daemon reports has a typed name.
    assert!(!text.contains(" untyped"), "untyped metrics:\n{text}");
    // No secret in any form.
    for secret in [&ka.private, &kb.private] {
        assert!(!text.contains(&secret[..20]), "a private key in /metrics");
    }

    // Prometheus' own checker, lint included.
    let mut check = std::process::Command::new("promtool");
    check.args(["check", "metrics"]);
    let out = run_bounded_stdin(&mut check, Some(&text), SHORT);
    println!("promtool check metrics: {}", out.describe());
    assert!(
        out.ok() && out.stdout.trim().is_empty() && out.stderr.trim().is_empty(),
        "promtool check metrics: {}",
        out.describe()
    );

    // What else the server answers.
    let (status, reply) = http(&nsa, "HEAD", METRICS, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body(&reply), "", "HEAD has no body");
    assert_eq!(
        http(&nsa, "GET", METRICS, "/nope").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        http(&nsa, "POST", METRICS, "/metrics").0,
        "HTTP/1.1 405 Method Not Allowed"
    );

    // A real Prometheus scrapes it every second.
    let config = env.write(
        "prometheus.yml",
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: braid\n    static_configs:\n      - targets: ['{METRICS}']\n"
        ),
    );
    let data = env.path("prometheus-data");
    let mut prom = nsa.cmd("prometheus");
    prom.arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg(format!("--web.listen-address={PROMETHEUS}"));
    let mut prom = ChildGuard::spawn(prom, "prometheus", &env.path("prometheus.log")).or_panic();
    let query = |q: &str| {
        nsa.run(
            "promtool",
            &["query", "instant", &format!("http://{PROMETHEUS}"), q],
            SHORT,
        )
    };
    let mut answer = String::new();
    let scraped = wait_until(Duration::from_secs(60), || {
        let out = query(&format!("braid_path_up{{interface=\"{ifa}\"}}"));
        answer = out.describe();
        out.ok() && out.stdout.contains("path=\"endpoint\"") && out.stdout.contains("=> 1")
    });
    assert!(
        scraped && prom.running(),
        "Prometheus never had braid_path_up: {answer}\n{}",
        tail(&prom.log_text(), 3000)
    );
    let up = query("up{job=\"braid\"}");
    println!(
        "promtool query instant 'up{{job=\"braid\"}}': {}",
        up.stdout.trim()
    );
    assert!(up.stdout.contains("=> 1"), "{}", up.describe());
    let rate = query(&format!(
        "braid_peer_received_bytes_total{{interface=\"{ifa}\"}}"
    ));
    println!("braid_peer_received_bytes_total: {}", rate.stdout.trim());
    assert!(rate.stdout.contains(&kb.public), "{}", rate.describe());
    prom.terminate();
    a.down();
    b.down();
}

#[test]
fn a_metrics_port_in_use_or_a_bad_value_stops_braid_up_with_nothing_changed() {
    if !preflight(
        "a_metrics_port_in_use_or_a_bad_value_stops_braid_up",
        &["ip", "wg"],
    ) {
        return;
    }
    let env = TestEnv::new("metrics_refused");
    let (x, (nsa, ifa, ka), (_nsb, _ifb, kb), _veth) = env.two_sides();
    let (mut ca, _) = tunnel_confs(&ka, &kb, x);
    // Something else holds the port in the namespace.
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let holder = in_netns(&nsa.name, move || {
        let listener = std::net::TcpListener::bind(METRICS);
        let _ = bound_tx.send(listener.is_ok());
        let _ = hold_rx.recv_timeout(LONG);
        drop(listener);
    });
    assert!(
        bound_rx.recv_timeout(SHORT).unwrap_or(false),
        "could not hold {METRICS}"
    );
    ca.braid_lines = vec![format!("MetricsListen = {METRICS}")];
    let file = env.write(&format!("{ifa}.conf"), &ca.wg_quick());
    let up = nsa.run(BRAID, &["up", &file.to_string_lossy()], LONG);
    let _ = hold_tx.send(());
    let _ = holder.join();
    println!("braid up with {METRICS} taken: {}", up.describe());
    assert!(!up.ok(), "braid up succeeded with its metrics port taken");
    assert!(
        up.stderr.contains(&format!("MetricsListen {METRICS}")) && up.stderr.contains("in use"),
        "{}",
        up.describe()
    );
    assert!(!nsa.has_link(&ifa), "the interface was left behind");
    assert!(!sock_path(&ifa).exists(), "the socket was left behind");

    for (line, fragment) in [
        (
            "MetricsListen = localhost:9586",
            "key 'MetricsListen': invalid address",
        ),
        (
            "LogLevel = loud",
            "key 'LogLevel': unknown log level \"loud\"",
        ),
    ] {
        ca.braid_lines = vec![line.to_string()];
        let file = env.write(&format!("{ifa}.conf"), &ca.wg_quick());
        let up = nsa.run(BRAID, &["up", &file.to_string_lossy()], LONG);
        println!("braid up with `{line}`: {}", up.stderr.trim());
        assert!(!up.ok(), "braid up took `{line}`");
        // The file, the line and the key.
        let at = format!("{ifa}.conf:");
        assert!(
            up.stderr.contains(&at) && up.stderr.contains(fragment),
            "{}",
            up.describe()
        );
        assert!(!nsa.has_link(&ifa), "`{line}` left an interface behind");
    }
}
