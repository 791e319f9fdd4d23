//! `braid netem` over real loopback UDP (127.0.0.1 only, free ports).
//!
//! Each test starts the relay as a child process, sends seeded traffic
//! through it, waits until the relay's own counters (its control socket)
//! account for every datagram, then stops it and checks that the process
//! and its sockets are gone.
//!
//! No verdict rests on how fast anything ran. What the relay decides is
//! seeded and checked exactly: which datagrams are lost, duplicated or
//! corrupted, and the delay drawn for each one (reproduced here with the
//! same `LinkModel`, seed and parameters). Wall-clock figures (measured
//! delay, its spread, throughput, queueing) are printed; of them only
//! causal bounds are asserted, ones a slow or loaded machine can only move
//! away from the limit: no datagram arrives before its drawn delay, and no
//! more bytes pass a rate cap than the time since the first was sent
//! allows.

use braid::toolkit::lab::traffic::big_buffers;
use braid_netem::link::{Fate, LinkModel};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

const BRAID: &str = env!("CARGO_BIN_EXE_braid");
/// Bound for "this should happen" waits; only a missing behaviour (or a
/// machine stalled for this long) runs into it.
const LONG: Duration = Duration::from_secs(30);
/// 99.9 % two-sided normal quantile.
const Z: f64 = 3.29;

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn ns_since_base(t: Instant) -> u64 {
    t.duration_since(base()).as_nanos() as u64
}

fn udp() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    big_buffers(&s);
    s
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Datagrams the kernel dropped on the UDP socket bound to 127.0.0.1:`port`
/// (its receive buffer was full), from `/proc/net/udp`.
fn kernel_drops(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let local = [
        format!("0100007F:{port:04X}"),
        format!("7F000001:{port:04X}"),
    ];
    table
        .lines()
        .skip(1)
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            local
                .iter()
                .any(|a| f.get(1) == Some(&a.as_str()))
                .then(|| f.get(12)?.parse::<u64>().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no socket on 127.0.0.1:{port} in /proc/net/udp:\n{table}"))
}

/// A running `braid netem`; killed by PID if the test ends without `stop`.
/// It always has a control socket: the tests read its counters there.
struct Netem {
    child: Child,
    pid: i32,
    listen: SocketAddr,
    control: PathBuf,
    done: bool,
}

impl Netem {
    /// Starts a relay from a free port to `to`; `--json` is always added so
    /// `stop` can read the final counters, and `--control` unless `args`
    /// has one.
    fn start(to: SocketAddr, args: &[&str]) -> Netem {
        static N: AtomicU32 = AtomicU32::new(0);
        let given = args
            .iter()
            .position(|a| *a == "--control")
            .map(|i| PathBuf::from(args[i + 1]));
        let control = given.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!(
                "braid-netem-test-{}-{}.sock",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ))
        });
        for _ in 0..5 {
            let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let mut cmd = Command::new(BRAID);
            cmd.arg("netem")
                .args(["--listen", &listen.to_string(), "--to", &to.to_string()])
                .args(args)
                .arg("--json");
            if given.is_none() {
                cmd.arg("--control").arg(&control);
            }
            let mut child = cmd
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let pid = child.id() as i32;
            let (tx, rx) = mpsc::channel();
            let stderr = child.stderr.take().unwrap();
            thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            let mut n = Netem {
                child,
                pid,
                listen,
                control: control.clone(),
                done: false,
            };
            match rx.recv_timeout(LONG) {
                Ok(line) if line.contains("relaying") => return n,
                // Lost the race for the port: try another.
                Ok(line) if line.contains("--listen") => {
                    n.wait_exit();
                    continue;
                }
                other => panic!("braid netem did not start: {other:?}"),
            }
        }
        panic!("no free port for --listen");
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + LONG;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                self.done = true;
                return st;
            }
            assert!(Instant::now() < deadline, "braid netem did not exit");
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill by the PID of our own child, which is not reaped yet.
        assert_eq!(unsafe { libc::kill(self.pid, sig) }, 0);
    }

    /// One request on the control socket, one line back.
    fn control(&self, line: &str) -> String {
        let mut s = UnixStream::connect(&self.control).unwrap();
        s.set_read_timeout(Some(LONG)).unwrap();
        s.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        let mut out = String::new();
        r.read_line(&mut out).unwrap();
        out.trim_end().to_string()
    }

    fn stats(&self) -> Value {
        serde_json::from_str(&self.control("stats json")).unwrap()
    }

    /// SIGTERM, then the final counters; checks that nothing is left.
    fn stop(self) -> Value {
        self.signal(libc::SIGTERM);
        self.finish()
    }

    /// Waits for a relay that stops by itself, returns its final counters.
    fn finish(mut self) -> Value {
        let st = self.wait_exit();
        assert!(st.success(), "braid netem exited with {st}");
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert!(
            !PathBuf::from(format!("/proc/{}", self.pid)).exists(),
            "process {} still there",
            self.pid
        );
        UdpSocket::bind(self.listen).expect("the listen port is free again");
        assert!(
            !self.control.exists(),
            "control socket {} left behind",
            self.control.display()
        );
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        if !self.done {
            // SAFETY: kill by the PID of our own, not yet reaped child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = self.child.wait();
            let _ = std::fs::remove_file(&self.control);
        }
    }
}

fn u(v: &Value, path: &str) -> u64 {
    let mut x = v;
    for k in path.split('.') {
        x = &x[k];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

/// A datagram: sequence number, send time (ns since `base`), filler.
fn packet(seq: u64, size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size.max(16)];
    p[..8].copy_from_slice(&seq.to_le_bytes());
    p[8..16].copy_from_slice(&ns_since_base(Instant::now()).to_le_bytes());
    p
}

struct Arrival {
    at: Instant,
    data: Vec<u8>,
}

impl Arrival {
    fn seq(&self) -> u64 {
        u64::from_le_bytes(self.data[..8].try_into().unwrap())
    }
    /// When it was sent, ns since `base`.
    fn sent_ns(&self) -> u64 {
        u64::from_le_bytes(self.data[8..16].try_into().unwrap())
    }
    /// One-way delay through the relay: from just before the sender handed
    /// it to the kernel to just after the receiver got it.
    fn delay(&self) -> Duration {
        Duration::from_nanos(ns_since_base(self.at) - self.sent_ns())
    }
}

/// Collects what arrives on `sock` until `stop` is set, counting it in
/// `count` as it goes.
fn receiver(
    sock: &UdpSocket,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) -> thread::JoinHandle<Vec<Arrival>> {
    let sock = sock.try_clone().unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::SeqCst) {
            if let Ok(n) = sock.recv(&mut buf) {
                got.push(Arrival {
                    at: Instant::now(),
                    data: buf[..n].to_vec(),
                });
                count.fetch_add(1, Ordering::SeqCst);
            }
        }
        got
    })
}

/// Sends `n` datagrams made by `make` through `relay` (up direction), in
/// bursts of `burst` back to back, one burst every `every`, and returns
/// what arrived at `sink`.
///
/// It returns once the relay's counters account for every datagram: each
/// was offered to the line (or dropped by the kernel before the relay read
/// it), none is left in the delay line, and every copy the relay forwarded
/// has been received (or dropped by the kernel at the sink). No quiet
/// period is guessed; a relay or receiver that falls behind is waited for.
fn traffic(
    relay: &Netem,
    sink: &UdpSocket,
    n: u64,
    burst: u64,
    every: Duration,
    make: impl Fn(u64) -> Vec<u8>,
) -> Vec<Arrival> {
    let sink_port = sink.local_addr().unwrap().port();
    let before = relay.stats();
    let (listen_drops, sink_drops) = (kernel_drops(relay.listen.port()), kernel_drops(sink_port));
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let rx = receiver(sink, stop.clone(), count.clone());
    let client = udp();
    let start = Instant::now();
    for i in 0..n {
        if i > 0 && i % burst == 0 {
            let due = start + every * (i / burst) as u32;
            if let Some(w) = due.checked_duration_since(Instant::now()) {
                thread::sleep(w);
            }
        }
        client.send_to(&make(i), relay.listen).unwrap();
    }
    let delta = |now: &Value, key: &str| u(now, key) - u(&before, key);
    let deadline = Instant::now() + LONG;
    loop {
        let now = relay.stats();
        let offered = delta(&now, "up.offered");
        let dropped_in = kernel_drops(relay.listen.port()) - listen_drops;
        let in_flight = u(&now, "up.in_flight_packets");
        let forwarded = delta(&now, "up.forwarded_packets");
        let dropped_out = kernel_drops(sink_port) - sink_drops;
        let received = count.load(Ordering::SeqCst);
        if offered + dropped_in == n && in_flight == 0 && received + dropped_out == forwarded {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the relay did not account for {n} datagrams within {LONG:?}: offered {offered} \
             (+{dropped_in} dropped by the kernel before it), {in_flight} in flight, \
             {received} of {forwarded} forwarded received (+{dropped_out} dropped at the sink)"
        );
        thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    rx.join().unwrap()
}

/// [`traffic`] paced at `per_ms` datagrams per millisecond.
fn paced(
    relay: &Netem,
    sink: &UdpSocket,
    n: u64,
    per_ms: u64,
    make: impl Fn(u64) -> Vec<u8>,
) -> Vec<Arrival> {
    traffic(relay, sink, n, per_ms, Duration::from_millis(1), make)
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    (m, v.sqrt())
}

/// Arrivals whose sequence number is below one that arrived earlier.
fn inversions(got: &[Arrival]) -> usize {
    let mut max = None;
    let mut n = 0;
    for a in got {
        let s = a.seq();
        if max.is_some_and(|m| s < m) {
            n += 1;
        }
        max = max.max(Some(s));
    }
    n
}

fn run_fail(args: &[&str]) -> String {
    let out = Command::new(BRAID)
        .arg("netem")
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The delay the relay's up line draws for each of its first `n` datagrams
/// of `len` bytes under `args`: the same arguments parsed as `braid netem`
/// parses them, the same `LinkModel` and seed. For a line with delay and
/// jitter only, each datagram takes its draws in arrival order whatever
/// the time, so this is the relay's own schedule, datagram by datagram
/// (before `--no-reorder` holds some of them back further).
fn drawn_delays(args: &[&str], n: usize, len: usize) -> Vec<Duration> {
    let mut full: Vec<String> = ["--listen", "127.0.0.1:1", "--to", "127.0.0.1:2"]
        .iter()
        .chain(args)
        .map(|s| s.to_string())
        .collect();
    full.push("--json".into());
    let cfg = braid::toolkit::netem::args::parse(&full)
        .unwrap()
        .expect("a configuration");
    let mut params = cfg.up.clone();
    params.reorder = true;
    let mut model = LinkModel::new(params, cfg.seed);
    let t0 = Instant::now();
    (0..n)
        .map(|i| match model.offer(t0, len) {
            Fate::Delivered {
                first,
                duplicate: None,
            } => first.at - t0,
            other => panic!("datagram {i} under {args:?}: {other:?}"),
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Checks every arrival against its drawn delay (none may come sooner: the
/// relay holds it at least that long after it arrived, which is after it
/// was sent) and prints the measured delay next to the drawn one.
fn check_delays(test: &str, got: &[Arrival], drawn: &[Duration]) {
    for a in got {
        let (seq, d) = (a.seq() as usize, a.delay());
        assert!(
            d >= drawn[seq],
            "{test}: datagram {seq} arrived {:.3} ms after it was sent, before its drawn delay of {:.3} ms",
            ms(d),
            ms(drawn[seq])
        );
    }
    let measured: Vec<f64> = got.iter().map(|a| ms(a.delay())).collect();
    let late: Vec<f64> = got
        .iter()
        .map(|a| ms(a.delay() - drawn[a.seq() as usize]))
        .collect();
    let (dm, dsd) = mean_sd(&drawn.iter().map(|d| ms(*d)).collect::<Vec<_>>());
    let (mm, msd) = mean_sd(&measured);
    let (lm, _) = mean_sd(&late);
    let worst = late.iter().cloned().fold(0.0, f64::max);
    eprintln!(
        "[{test}] drawn delay {dm:.3} ± {dsd:.3} ms; measured {mm:.3} ± {msd:.3} ms; \
         later than drawn by {lm:.3} ms on average, {worst:.3} ms at most"
    );
}

#[test]
fn bad_arguments_are_rejected_before_anything_starts() {
    // We hold the listen port: an argument error must come before the bind
    // would fail.
    let held = udp();
    let listen = held.local_addr().unwrap().to_string();
    let base = ["--listen", &listen, "--to", "127.0.0.1:9"];
    for (extra, needles) in [
        (vec!["--delay", "-5ms"], vec!["--delay", "-5ms"]),
        (vec!["--delay", "20"], vec!["--delay", "20", "unit"]),
        (vec!["--loss", "150%"], vec!["--loss", "150%"]),
        (vec!["--rate", "10mbyte"], vec!["--rate", "10mbyte", "unit"]),
        (vec!["--queue", "5parsecs"], vec!["--queue", "5parsecs"]),
        (
            vec!["--jitter-dist", "cauchy"],
            vec!["--jitter-dist", "cauchy"],
        ),
        (
            vec!["--restore-at", "3s"],
            vec!["--restore-at", "3s", "--cut-at"],
        ),
        (
            vec!["--cut-at", "5s", "--restore-at", "2s"],
            vec!["--restore-at", "2s"],
        ),
        (vec!["--up", "--loss 200%"], vec!["--up", "--loss", "200%"]),
        (vec!["--down", "--cut-at 1s"], vec!["--down", "--cut-at"]),
        (vec!["--mtu", "0"], vec!["--mtu", "0"]),
        (vec!["--frobnicate"], vec!["--frobnicate"]),
    ] {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(&extra);
        let err = run_fail(&args);
        for n in needles {
            assert!(err.contains(n), "{extra:?}: {err:?} does not mention {n:?}");
        }
        assert!(!err.contains("bind"), "{extra:?}: {err:?}");
    }
    let err = run_fail(&["--to", "127.0.0.1:9"]);
    assert!(err.contains("--listen"), "{err}");
}

/// Which datagrams a seeded line loses depends on the seed and the order
/// they arrive in, not on time: the count is checked against its binomial
/// interval (one fixed draw per seed) and the lost set must repeat.
#[test]
fn loss_rate_is_within_its_binomial_interval_and_repeats_with_the_seed() {
    let sink = udp();
    let n = 5000u64;
    let p = 0.10;
    let mut runs = Vec::new();
    for _ in 0..2 {
        let relay = Netem::start(
            sink.local_addr().unwrap(),
            &["--loss", "10%", "--seed", "7"],
        );
        let got = paced(&relay, &sink, n, 20, |i| packet(i, 100));
        let stats = relay.stop();
        assert_eq!(u(&stats, "up.offered"), n, "{stats}");
        let lost = n - got.len() as u64;
        let half = Z * (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (lost as f64 - n as f64 * p).abs() <= half,
            "{lost} of {n} lost, expected {} ± {half:.0}",
            n as f64 * p
        );
        assert_eq!(u(&stats, "up.dropped.loss"), lost, "{stats}");
        assert_eq!(u(&stats, "up.forwarded_packets"), got.len() as u64);
        let mut seqs: Vec<u64> = got.iter().map(Arrival::seq).collect();
        seqs.sort();
        runs.push(seqs);
    }
    assert_eq!(runs[0], runs[1], "the same seed lost different datagrams");
}

#[test]
fn uniform_jitter_spreads_delay_and_reorders() {
    let test = "uniform_jitter";
    let args = ["--delay", "20ms", "--jitter", "4ms", "--seed", "3"];
    let sink = udp();
    let relay = Netem::start(sink.local_addr().unwrap(), &args);
    let got = paced(&relay, &sink, 1000, 2, |i| packet(i, 200));
    let stats = relay.stop();
    assert_eq!(got.len(), 1000);
    // The relay's schedule: uniform on [16, 24] ms, mean 20, sd 4/√3.
    let drawn = drawn_delays(&args, 1000, 200);
    assert!(drawn
        .iter()
        .all(|d| (16.0 - 1e-6..=24.0 + 1e-6).contains(&ms(*d))));
    let (mean, sd) = mean_sd(&drawn.iter().map(|d| ms(*d)).collect::<Vec<_>>());
    let sd0 = 4.0 / 3f64.sqrt();
    assert!(
        (mean - 20.0).abs() <= Z * sd0 / 1000f64.sqrt(),
        "drawn mean {mean:.3} ms"
    );
    assert!((sd / sd0 - 1.0).abs() < 0.1, "drawn sd {sd:.3} ms");
    check_delays(test, &got, &drawn);
    // Reordering: a datagram that arrives before one sent earlier is one
    // the relay counted (it sends in the order of its schedule). Among 1000
    // draws dozens of neighbours differ by 6 ms or more, far more than two
    // back-to-back sends are apart, so this cannot come out zero.
    let (inv, reordered) = (inversions(&got), u(&stats, "up.reordered"));
    eprintln!("[{test}] {inv} arrivals after a later-sent one; the relay reordered {reordered}");
    assert!(
        inv > 0 && reordered > 0,
        "{inv} inversions, {reordered} reordered"
    );
}

#[test]
fn normal_jitter_has_the_configured_spread() {
    let test = "normal_jitter";
    let args = [
        "--delay",
        "30ms",
        "--jitter",
        "4ms",
        "--jitter-dist",
        "normal",
        "--seed",
        "5",
    ];
    let sink = udp();
    let relay = Netem::start(sink.local_addr().unwrap(), &args);
    let got = paced(&relay, &sink, 1000, 2, |i| packet(i, 200));
    relay.stop();
    assert_eq!(got.len(), 1000);
    // The relay's schedule: normal, mean 30 ms, sd 4 ms.
    let drawn = drawn_delays(&args, 1000, 200);
    let (mean, sd) = mean_sd(&drawn.iter().map(|d| ms(*d)).collect::<Vec<_>>());
    assert!(
        (mean - 30.0).abs() <= Z * 4.0 / 1000f64.sqrt(),
        "drawn mean {mean:.3} ms"
    );
    assert!((sd / 4.0 - 1.0).abs() < 0.1, "drawn sd {sd:.3} ms");
    check_delays(test, &got, &drawn);
}

#[test]
fn no_reorder_keeps_arrival_order() {
    let test = "no_reorder";
    let args = [
        "--delay",
        "20ms",
        "--jitter",
        "4ms",
        "--no-reorder",
        "--seed",
        "3",
    ];
    let sink = udp();
    let relay = Netem::start(sink.local_addr().unwrap(), &args);
    let got = paced(&relay, &sink, 1000, 2, |i| packet(i, 200));
    let stats = relay.stop();
    assert_eq!(got.len(), 1000);
    assert_eq!(inversions(&got), 0);
    assert_eq!(u(&stats, "up.reordered"), 0);
    // Holding datagrams back for order only adds to the drawn delays.
    check_delays(test, &got, &drawn_delays(&args, 1000, 200));
}

#[test]
fn bursty_loss_has_the_configured_mean_burst_length() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--loss", "10%", "--loss-burst", "4", "--seed", "11"],
    );
    let n = 10_000u64;
    let got = paced(&relay, &sink, n, 25, |i| packet(i, 64));
    let stats = relay.stop();
    // Every datagram offered, in order: the lost ones are the seed's.
    assert_eq!(u(&stats, "up.offered"), n, "{stats}");
    let mut arrived = vec![false; n as usize];
    for a in &got {
        arrived[a.seq() as usize] = true;
    }
    let mut bursts = Vec::new();
    let mut run = 0;
    for &ok in &arrived {
        if ok {
            if run > 0 {
                bursts.push(run as f64);
            }
            run = 0;
        } else {
            run += 1;
        }
    }
    if run > 0 {
        bursts.push(run as f64);
    }
    let lost: f64 = bursts.iter().sum();
    assert_eq!(u(&stats, "up.dropped.loss"), lost as u64);
    let rate = lost / n as f64;
    assert!((0.06..=0.14).contains(&rate), "loss rate {rate:.3}");
    // Burst lengths are geometric with mean 4 (sd √12 ≈ 3.46).
    let (mean, _) = mean_sd(&bursts);
    let half = Z * 12f64.sqrt() / (bursts.len() as f64).sqrt();
    assert!(
        (mean - 4.0).abs() <= half,
        "mean burst {mean:.2} over {} bursts (±{half:.2})",
        bursts.len()
    );
}

/// 64 bytes: the sequence number three times (a flipped bit in one copy is
/// outvoted), then a pattern derived from it.
fn pattern(seq: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(64);
    for _ in 0..3 {
        p.extend_from_slice(&seq.to_le_bytes());
    }
    while p.len() < 64 {
        p.push((seq as usize * 31 + p.len()) as u8);
    }
    p
}

#[test]
fn duplication_and_single_bit_corruption_rates() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--dup", "5%", "--corrupt", "5%", "--seed", "13"],
    );
    let n = 4000u64;
    let got = paced(&relay, &sink, n, 20, |i| pattern(i as u32));
    let stats = relay.stop();
    assert_eq!(u(&stats, "up.offered"), n, "{stats}");
    let mut copies = vec![0u32; n as usize];
    let mut corrupted = 0u64;
    for a in &got {
        assert_eq!(a.data.len(), 64);
        let s: Vec<u32> = (0..3)
            .map(|k| u32::from_le_bytes(a.data[k * 4..k * 4 + 4].try_into().unwrap()))
            .collect();
        let seq = if s[0] == s[1] || s[0] == s[2] {
            s[0]
        } else {
            s[1]
        };
        copies[seq as usize] += 1;
        let bits: u32 = a
            .data
            .iter()
            .zip(pattern(seq))
            .map(|(x, y)| (x ^ y).count_ones())
            .sum();
        assert!(bits <= 1, "datagram {seq} has {bits} flipped bits");
        corrupted += bits as u64;
    }
    assert!(
        copies.iter().all(|&c| c == 1 || c == 2),
        "lost or tripled datagrams"
    );
    let dups = copies.iter().filter(|&&c| c == 2).count() as u64;
    let within = |k: u64, trials: f64, p: f64| {
        (k as f64 - trials * p).abs() <= Z * (trials * p * (1.0 - p)).sqrt()
    };
    assert!(within(dups, n as f64, 0.05), "{dups} of {n} duplicated");
    assert!(
        within(corrupted, got.len() as f64, 0.05),
        "{corrupted} of {} corrupted",
        got.len()
    );
    assert_eq!(u(&stats, "up.duplicated"), dups);
    assert_eq!(u(&stats, "up.corrupted"), corrupted);
}

/// A 20 Mbit/s line with a 50 ms queue, offered bursts of 250 datagrams of
/// 1000 bytes every 50 ms (40 Mbit/s on average; each burst is twice what
/// the queue holds, so it overflows unless the sender takes 30 ms or more
/// for every single burst).
#[test]
fn rate_cap_holds_and_the_queue_drops_when_overdriven() {
    let test = "rate_cap";
    let (n, size, rate_bps) = (7500u64, 1000usize, 20e6);
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--rate", "20mbit", "--queue", "50ms", "--seed", "1"],
    );
    // The queue as the relay itself reports it, sampled while the traffic
    // runs: never more than 50 ms of the line plus the datagram being
    // serialised (0.4 ms), 126 000 bytes.
    let sampling = AtomicBool::new(true);
    let (got, deepest) = thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut deepest = 0;
            while sampling.load(Ordering::SeqCst) {
                deepest = deepest.max(u(&relay.stats(), "up.queue_bytes"));
                thread::sleep(Duration::from_millis(2));
            }
            deepest
        });
        let got = traffic(&relay, &sink, n, 250, Duration::from_millis(50), |i| {
            packet(i, size)
        });
        sampling.store(false, Ordering::SeqCst);
        (got, sampler.join().unwrap())
    });
    let stats = relay.stop();
    let offered = u(&stats, "up.offered");
    let drops = u(&stats, "up.dropped.queue");
    assert_eq!(drops + got.len() as u64, offered, "{stats}");
    assert!(
        got.iter().all(|a| a.data.len() == size),
        "a datagram changed size"
    );

    // Every datagram the line carried took 0.4 ms of it, all after the
    // first one was sent and before the last one arrived; a slow machine
    // only stretches that span.
    let first_sent = got.iter().map(Arrival::sent_ns).min().unwrap();
    let last_in = got.iter().map(|a| ns_since_base(a.at)).max().unwrap();
    let span = (last_in - first_sent) as f64 / 1e9;
    let carried = got.len() as f64 * size as f64 * 8.0;
    let through = (got[got.len() - 1].at - got[0].at).as_secs_f64();
    let worst = got.iter().map(|a| ms(a.delay())).fold(0.0, f64::max);
    eprintln!(
        "[{test}] {} of {offered} carried, {drops} dropped by the queue; \
         {:.3} Mbit/s from the first send to the last arrival, {:.3} Mbit/s between \
         first and last arrival; longest delay {worst:.1} ms; deepest queue seen {deepest} B",
        got.len(),
        carried / span / 1e6,
        (got.len() - 1) as f64 * size as f64 * 8.0 / through / 1e6
    );
    // 1 % for rounding and for the relay's clock reading (see the report).
    assert!(
        carried / span <= rate_bps * 1.01,
        "{:.2} Mbit/s left a 20 Mbit/s line",
        carried / span / 1e6
    );
    assert!(
        drops > 0,
        "bursts twice the queue's size were never dropped"
    );
    assert!(deepest <= 126_000, "the queue held {deepest} bytes");
}

#[test]
fn datagrams_over_the_mtu_vanish() {
    let sink = udp();
    let relay = Netem::start(sink.local_addr().unwrap(), &["--mtu", "1300"]);
    let got = paced(&relay, &sink, 400, 10, |i| {
        packet(i, if i % 2 == 0 { 1200 } else { 1400 })
    });
    let stats = relay.stop();
    assert_eq!(got.len(), 200);
    assert!(got.iter().all(|a| a.data.len() == 1200 && a.seq() % 2 == 0));
    assert_eq!(u(&stats, "up.dropped.mtu"), 200);
}

/// `--cut-at`/`--restore-at` against the relay's own clock: batches of
/// datagrams, each between two `stats` answers. A batch with the line cut
/// in both is lost whole, one with it up in both (before the cut time, or
/// after the restore was seen) arrives whole; the line is never reported
/// cut before the cut time, nor restored before the restore time. The cut
/// lasts 4.5 s, so a batch falls into it on any machine that runs the test
/// thread at all in that time.
#[test]
fn cut_and_restore_on_schedule() {
    let test = "cut_schedule";
    let (cut_at, restore_at) = (0.5, 5.0);
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--cut-at", "500ms", "--restore-at", "5s"],
    );
    let cut = |s: &Value| s["cut"].as_bool().expect("cut");
    let uptime = |s: &Value| s["uptime_s"].as_f64().expect("uptime_s");
    let mut seen_cut = false;
    let check = |s: &Value, seen_cut: bool| {
        if cut(s) {
            assert!(uptime(s) >= cut_at, "cut at {} s: {s}", uptime(s));
        } else if seen_cut {
            assert!(uptime(s) >= restore_at, "restored at {} s: {s}", uptime(s));
        }
    };
    let (mut whole_cut, mut whole_before, mut whole_after, mut mixed) = (0, 0, 0, 0);
    let mut seq = 0u64;
    let deadline = Instant::now() + LONG;
    while whole_after == 0 {
        assert!(
            Instant::now() < deadline,
            "{test}: no batch before the cut, in it and after it within {LONG:?} \
             ({whole_before}, {whole_cut}, {whole_after})"
        );
        let before = relay.stats();
        check(&before, seen_cut);
        let restored = seen_cut && !cut(&before);
        seen_cut |= cut(&before);
        let first = seq;
        let got = paced(&relay, &sink, 10, 10, |i| packet(first + i, 100));
        seq += 10;
        let after = relay.stats();
        check(&after, seen_cut);
        let lost = u(&after, "up.dropped.cut") - u(&before, "up.dropped.cut");
        assert_eq!(lost + got.len() as u64, 10, "{before} -> {after}");
        if cut(&before) && cut(&after) {
            assert_eq!(got.len(), 0, "{test}: datagrams passed a cut line");
            whole_cut += 1;
        } else if !cut(&after) && (restored || !seen_cut && uptime(&after) < cut_at) {
            assert_eq!(
                got.len(),
                10,
                "{test}: datagrams lost on a line that was up"
            );
            if restored {
                assert!(whole_cut > 0, "{test}: restored without a cut batch seen");
                whole_after += 1;
            } else {
                whole_before += 1;
            }
        } else {
            mixed += 1;
        }
        seen_cut |= cut(&after);
        thread::sleep(Duration::from_millis(50));
    }
    let stats = relay.stop();
    eprintln!(
        "[{test}] batches of 10: {whole_before} before the cut, {whole_cut} in it, \
         {whole_after} after it, {mixed} across a change; {} cut in all",
        u(&stats, "up.dropped.cut")
    );
    assert_eq!(
        u(&stats, "up.dropped.cut") + u(&stats, "up.forwarded_packets"),
        seq
    );
}

/// How many of 20 datagrams get through now.
fn probe(relay: &Netem, sink: &UdpSocket) -> usize {
    paced(relay, sink, 20, 10, |i| packet(i, 100)).len()
}

fn wait_cut(relay: &Netem, cut: bool) {
    let deadline = Instant::now() + LONG;
    while relay.stats()["cut"].as_bool() != Some(cut) {
        assert!(Instant::now() < deadline, "the line never became cut={cut}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cut_and_restore_by_signal_and_control_socket() {
    let sink = udp();
    let path = std::env::temp_dir().join(format!("braid-netem-cut-{}.sock", std::process::id()));
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--control", path.to_str().unwrap(), "--delay", "1ms"],
    );
    assert_eq!(probe(&relay, &sink), 20);
    relay.signal(libc::SIGUSR1);
    wait_cut(&relay, true);
    assert_eq!(probe(&relay, &sink), 0);
    relay.signal(libc::SIGUSR2);
    wait_cut(&relay, false);
    assert_eq!(probe(&relay, &sink), 20);
    assert_eq!(relay.control("cut"), "ok");
    assert_eq!(probe(&relay, &sink), 0);
    assert_eq!(relay.control("restore"), "ok");
    assert_eq!(probe(&relay, &sink), 20);
    let line = relay.control("stats");
    assert!(line.contains("up:") && line.contains("down:"), "{line}");
    assert!(relay.control("reboot").starts_with("error"));
    let stats = relay.stop();
    assert_eq!(u(&stats, "up.dropped.cut"), 40);
    assert_eq!(u(&stats, "up.forwarded_packets"), 60);
}

#[test]
fn replies_reach_the_client_they_belong_to() {
    let server = udp();
    let path =
        std::env::temp_dir().join(format!("braid-netem-clients-{}.sock", std::process::id()));
    let relay = Netem::start(
        server.local_addr().unwrap(),
        &[
            "--control",
            path.to_str().unwrap(),
            "--down",
            "--delay 2ms --jitter 1ms",
        ],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let server = server.try_clone().unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::SeqCst) {
                if let Ok((n, from)) = server.recv_from(&mut buf) {
                    let mut r = b"echo:".to_vec();
                    r.extend_from_slice(&buf[..n]);
                    server.send_to(&r, from).unwrap();
                }
            }
        })
    };
    let clients = [udp(), udp()];
    for c in &clients {
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
    }
    for i in 0..100 {
        for (k, c) in clients.iter().enumerate() {
            c.send_to(format!("{k}:{i}").as_bytes(), relay.listen)
                .unwrap();
        }
        if i % 10 == 9 {
            thread::sleep(Duration::from_millis(1));
        }
    }
    // Each client reads until its 100 replies are in (bounded).
    let deadline = Instant::now() + LONG;
    for (k, c) in clients.iter().enumerate() {
        let mut buf = [0u8; 2048];
        let mut n = 0;
        while n < 100 {
            assert!(
                Instant::now() < deadline,
                "client {k}: {n} of 100 replies within {LONG:?}: {}",
                relay.control("stats")
            );
            if let Ok(len) = c.recv(&mut buf) {
                let s = std::str::from_utf8(&buf[..len]).unwrap();
                assert!(s.starts_with(&format!("echo:{k}:")), "client {k} got {s:?}");
                n += 1;
            }
        }
    }
    let live = relay.stats();
    assert_eq!(live["clients"].as_u64(), Some(2));
    stop.store(true, Ordering::SeqCst);
    echo.join().unwrap();
    let stats = relay.stop();
    assert_eq!(u(&stats, "down.forwarded_packets"), 200);
    for (k, c) in clients.iter().enumerate() {
        c.set_nonblocking(true).unwrap();
        assert!(
            c.recv(&mut [0u8; 2048]).is_err(),
            "client {k} got a reply too many"
        );
    }
}

#[test]
fn duration_stops_the_relay_by_itself() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--duration", "300ms", "--stats-interval", "50ms"],
    );
    let stats = relay.finish();
    // A lower bound only: it may stop later on a busy machine, never sooner.
    assert!(stats["uptime_s"].as_f64().unwrap() >= 0.3);
    assert_eq!(u(&stats, "up.offered"), 0);
}
