//! `braid netem` over real loopback UDP (127.0.0.1 only, free ports).
//!
//! Each test starts the relay as a child process, sends seeded traffic
//! through it and checks the statistics against confidence intervals (not
//! exact values), then stops it and checks that the process and its
//! sockets are gone. Waits are bounded; nothing asserts how fast anything
//! ran, only what arrived and when relative to when it was sent.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

const BRAID: &str = env!("CARGO_BIN_EXE_braid");
/// Bound for "this should happen" waits.
const LONG: Duration = Duration::from_secs(15);
/// 99.9 % two-sided normal quantile.
const Z: f64 = 3.29;

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn ns_since_base(t: Instant) -> u64 {
    t.duration_since(base()).as_nanos() as u64
}

fn big_buffers(s: &UdpSocket) {
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        let v: libc::c_int = 8 << 20;
        // SAFETY: passes a live c_int and its size; failure is harmless.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
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

/// A running `braid netem`; killed by PID if the test ends without `stop`.
struct Netem {
    child: Child,
    pid: i32,
    listen: SocketAddr,
    control: Option<PathBuf>,
    done: bool,
}

impl Netem {
    /// Starts a relay from a free port to `to`; `--json` is always added so
    /// `stop` can read the final counters.
    fn start(to: SocketAddr, args: &[&str]) -> Netem {
        for _ in 0..5 {
            let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let control = args
                .iter()
                .position(|a| *a == "--control")
                .map(|i| PathBuf::from(args[i + 1]));
            let mut child = Command::new(BRAID)
                .arg("netem")
                .args(["--listen", &listen.to_string(), "--to", &to.to_string()])
                .args(args)
                .arg("--json")
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
                control,
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
        let mut s = UnixStream::connect(self.control.as_ref().unwrap()).unwrap();
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
        if let Some(c) = &self.control {
            assert!(!c.exists(), "control socket {} left behind", c.display());
        }
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        if !self.done {
            // SAFETY: kill by the PID of our own, not yet reaped child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = self.child.wait();
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
    /// One-way delay through the relay.
    fn delay(&self) -> Duration {
        let sent = u64::from_le_bytes(self.data[8..16].try_into().unwrap());
        Duration::from_nanos(ns_since_base(self.at) - sent)
    }
}

/// Collects what arrives on `sock` until `done` is set and nothing came
/// for `quiet`.
fn receiver(
    sock: &UdpSocket,
    done: Arc<AtomicBool>,
    quiet: Duration,
) -> thread::JoinHandle<Vec<Arrival>> {
    let sock = sock.try_clone().unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        let mut last = Instant::now();
        let hard = Instant::now() + Duration::from_secs(30);
        loop {
            match sock.recv(&mut buf) {
                Ok(n) => {
                    let at = Instant::now();
                    got.push(Arrival {
                        at,
                        data: buf[..n].to_vec(),
                    });
                    last = at;
                }
                Err(_) => {
                    if done.load(Ordering::SeqCst) && last.elapsed() > quiet
                        || Instant::now() > hard
                    {
                        break;
                    }
                }
            }
        }
        got
    })
}

/// Sends `n` datagrams made by `make` to `to`, `per_ms` per millisecond,
/// and returns what arrived at `sink`.
fn traffic(
    to: SocketAddr,
    sink: &UdpSocket,
    n: u64,
    per_ms: u64,
    quiet: Duration,
    make: impl Fn(u64) -> Vec<u8>,
) -> Vec<Arrival> {
    let done = Arc::new(AtomicBool::new(false));
    let rx = receiver(sink, done.clone(), quiet);
    let client = udp();
    let start = Instant::now();
    for i in 0..n {
        if i > 0 && i % per_ms == 0 {
            let due = start + Duration::from_millis(i / per_ms);
            if let Some(w) = due.checked_duration_since(Instant::now()) {
                thread::sleep(w);
            }
        }
        client.send_to(&make(i), to).unwrap();
    }
    done.store(true, Ordering::SeqCst);
    rx.join().unwrap()
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
        let got = traffic(
            relay.listen,
            &sink,
            n,
            20,
            Duration::from_millis(200),
            |i| packet(i, 100),
        );
        let stats = relay.stop();
        let lost = n - got.len() as u64;
        let half = Z * (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (lost as f64 - n as f64 * p).abs() <= half,
            "{lost} of {n} lost, expected {} ± {half:.0}",
            n as f64 * p
        );
        assert_eq!(u(&stats, "up.offered"), n);
        assert_eq!(u(&stats, "up.dropped.loss"), lost, "{stats}");
        assert_eq!(u(&stats, "up.forwarded_packets"), got.len() as u64);
        let mut seqs: Vec<u64> = got.iter().map(Arrival::seq).collect();
        seqs.sort();
        runs.push(seqs);
    }
    assert_eq!(runs[0], runs[1], "the same seed lost different datagrams");
}

fn delays_ms(got: &[Arrival]) -> Vec<f64> {
    got.iter().map(|a| a.delay().as_secs_f64() * 1e3).collect()
}

#[test]
fn uniform_jitter_spreads_delay_and_reorders() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--delay", "20ms", "--jitter", "4ms", "--seed", "3"],
    );
    let got = traffic(
        relay.listen,
        &sink,
        1000,
        2,
        Duration::from_millis(300),
        |i| packet(i, 200),
    );
    let stats = relay.stop();
    assert_eq!(got.len(), 1000);
    let d = delays_ms(&got);
    let (mean, sd) = mean_sd(&d);
    let min = d.iter().cloned().fold(f64::MAX, f64::min);
    // Uniform on [16, 24] ms: mean 20, sd 4/√3 = 2.31 (plus a little
    // loopback and scheduling latency, which only adds).
    assert!((19.6..=22.0).contains(&mean), "mean {mean:.2} ms");
    assert!((1.9..=2.9).contains(&sd), "sd {sd:.2} ms");
    assert!(
        min >= 16.0,
        "a datagram arrived after {min:.3} ms, before delay - jitter"
    );
    let inv = inversions(&got);
    assert!(inv > 50, "only {inv} reordered arrivals");
    assert!(u(&stats, "up.reordered") > 50, "{stats}");
}

#[test]
fn normal_jitter_has_the_configured_spread() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &[
            "--delay",
            "30ms",
            "--jitter",
            "4ms",
            "--jitter-dist",
            "normal",
            "--seed",
            "5",
        ],
    );
    let got = traffic(
        relay.listen,
        &sink,
        1000,
        2,
        Duration::from_millis(300),
        |i| packet(i, 200),
    );
    relay.stop();
    assert_eq!(got.len(), 1000);
    let (mean, sd) = mean_sd(&delays_ms(&got));
    assert!((29.4..=32.0).contains(&mean), "mean {mean:.2} ms");
    assert!((3.4..=4.8).contains(&sd), "sd {sd:.2} ms");
}

#[test]
fn no_reorder_keeps_arrival_order() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &[
            "--delay",
            "20ms",
            "--jitter",
            "4ms",
            "--no-reorder",
            "--seed",
            "3",
        ],
    );
    let got = traffic(
        relay.listen,
        &sink,
        1000,
        2,
        Duration::from_millis(300),
        |i| packet(i, 200),
    );
    let stats = relay.stop();
    assert_eq!(got.len(), 1000);
    assert_eq!(inversions(&got), 0);
    assert_eq!(u(&stats, "up.reordered"), 0);
    let min = delays_ms(&got).into_iter().fold(f64::MAX, f64::min);
    assert!(min >= 16.0, "{min:.3} ms");
}

#[test]
fn bursty_loss_has_the_configured_mean_burst_length() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--loss", "10%", "--loss-burst", "4", "--seed", "11"],
    );
    let n = 10_000u64;
    let got = traffic(
        relay.listen,
        &sink,
        n,
        25,
        Duration::from_millis(200),
        |i| packet(i, 64),
    );
    let stats = relay.stop();
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
    let got = traffic(
        relay.listen,
        &sink,
        n,
        20,
        Duration::from_millis(200),
        |i| pattern(i as u32),
    );
    let stats = relay.stop();
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

#[test]
fn rate_cap_holds_and_the_queue_drops_when_overdriven() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--rate", "20mbit", "--queue", "50ms", "--seed", "1"],
    );
    // 5 datagrams of 1000 bytes per ms is 40 Mbit/s: twice the rate.
    let got = traffic(
        relay.listen,
        &sink,
        7500,
        5,
        Duration::from_millis(300),
        |i| packet(i, 1000),
    );
    let stats = relay.stop();
    assert!(got.len() > 100);
    let span = got.last().unwrap().at - got[0].at;
    let bits = (got.len() - 1) as f64 * 8000.0;
    let rate = bits / span.as_secs_f64();
    assert!(
        (rate / 20e6 - 1.0).abs() < 0.05,
        "{:.2} Mbit/s through a 20 Mbit/s line",
        rate / 1e6
    );
    let drops = u(&stats, "up.dropped.queue");
    assert!(drops > 2000, "only {drops} queue drops at twice the rate");
    assert_eq!(drops + got.len() as u64, 7500);
    // The queue holds at most 50 ms (+ one datagram's 0.4 ms).
    let worst = delays_ms(&got).into_iter().fold(0.0, f64::max);
    assert!(worst < 50.0 + 0.4 + 20.0, "{worst:.1} ms in a 50 ms queue");
}

#[test]
fn datagrams_over_the_mtu_vanish() {
    let sink = udp();
    let relay = Netem::start(sink.local_addr().unwrap(), &["--mtu", "1300"]);
    let got = traffic(
        relay.listen,
        &sink,
        400,
        10,
        Duration::from_millis(200),
        |i| packet(i, if i % 2 == 0 { 1200 } else { 1400 }),
    );
    let stats = relay.stop();
    assert_eq!(got.len(), 200);
    assert!(got.iter().all(|a| a.data.len() == 1200 && a.seq() % 2 == 0));
    assert_eq!(u(&stats, "up.dropped.mtu"), 200);
}

#[test]
fn cut_and_restore_on_schedule() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--cut-at", "300ms", "--restore-at", "700ms"],
    );
    let got = traffic(
        relay.listen,
        &sink,
        1000,
        1,
        Duration::from_millis(200),
        |i| packet(i, 100),
    );
    let stats = relay.stop();
    // The largest hole in send times is the cut.
    let sent: Vec<u64> = got
        .iter()
        .map(|a| u64::from_le_bytes(a.data[8..16].try_into().unwrap()))
        .collect();
    let gap = sent.windows(2).map(|w| w[1] - w[0]).max().unwrap() as f64 / 1e6;
    assert!(
        (330.0..=470.0).contains(&gap),
        "the line was down {gap:.0} ms"
    );
    let cut = u(&stats, "up.dropped.cut");
    assert_eq!(cut + got.len() as u64, 1000);
    assert!(
        got.len() > 400 && cut > 300,
        "{cut} cut, {} arrived",
        got.len()
    );
}

/// How many of 20 datagrams get through now.
fn probe(relay: &Netem, sink: &UdpSocket) -> usize {
    traffic(
        relay.listen,
        sink,
        20,
        10,
        Duration::from_millis(150),
        |i| packet(i, 100),
    )
    .len()
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
        c.set_read_timeout(Some(Duration::from_millis(300)))
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
    for (k, c) in clients.iter().enumerate() {
        let mut buf = [0u8; 2048];
        let mut n = 0;
        while let Ok(len) = c.recv(&mut buf) {
            let s = std::str::from_utf8(&buf[..len]).unwrap();
            assert!(s.starts_with(&format!("echo:{k}:")), "client {k} got {s:?}");
            n += 1;
        }
        assert_eq!(n, 100, "client {k}");
    }
    let live = relay.stats();
    assert_eq!(live["clients"].as_u64(), Some(2));
    stop.store(true, Ordering::SeqCst);
    echo.join().unwrap();
    let stats = relay.stop();
    assert_eq!(u(&stats, "down.forwarded_packets"), 200);
}

#[test]
fn duration_stops_the_relay_by_itself() {
    let sink = udp();
    let relay = Netem::start(
        sink.local_addr().unwrap(),
        &["--duration", "300ms", "--stats-interval", "50ms"],
    );
    let stats = relay.finish();
    assert!(stats["uptime_s"].as_f64().unwrap() >= 0.3);
    assert_eq!(u(&stats, "up.offered"), 0);
}
