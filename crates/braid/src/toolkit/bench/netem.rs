//! `braid bench netem`: how fast the relay forwards and how precisely it
//! delays, on this machine, in one run.
//!
//! 1. Forwarding: a sender thread blasts 1400-byte datagrams with sendmmsg
//!    through a relay to a receiver thread that counts them (recvmmsg). The
//!    relay is either `braid netem` (a child process, no impairment) or a
//!    plain relay with one recv_from/send_to per datagram, as socat does.
//!    Same load generator, same run; median of several runs each. The relay
//!    is pinned to the last CPU, the load generator to the others, so "one
//!    core" means one core.
//! 2. Delay error: `braid netem --delay 3ms` at 50 000 datagrams/s; the
//!    sender writes its send time into each datagram, the receiver takes
//!    the one-way delay on the same clock and reports |delay − 3 ms| at the
//!    50th and 99th percentile.

use super::args::Args;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

const USAGE: &str = "\
usage: braid bench netem [--seconds 3] [--runs 3] [--size 1400] [--rate 50000] [--json]

Measures `braid netem` on this machine: forwarding rate without impairment
(vs a one-syscall-per-datagram relay, same load, same run) and the delay
error for --delay 3ms at --rate datagrams/s.
";

struct Opts {
    seconds: f64,
    runs: usize,
    size: usize,
    rate: u64,
    json: bool,
}

fn parse(argv: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        seconds: 3.0,
        runs: 3,
        size: 1400,
        rate: 50_000,
        json: false,
    };
    let mut args = Args::new(argv);
    while let Some(a) = args.next() {
        match a {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--seconds" => o.seconds = args.number(a, 0.01..=3600.0)?,
            "--runs" => o.runs = args.number(a, 1..=100)?,
            "--size" => o.size = args.number(a, 16..=65000)?,
            "--rate" => o.rate = args.number(a, 100..=1_000_000)?,
            _ => {
                return Err(format!(
                    "unknown flag {a:?}; see `braid bench netem --help`"
                ))
            }
        }
    }
    Ok(Some(o))
}

fn cpus() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins `pid` (0: the calling thread) to the CPUs in `which`.
fn pin(pid: libc::pid_t, which: std::ops::Range<usize>) {
    // SAFETY: cpu_set_t is a plain bit set; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in which {
        // SAFETY: `c` is below the number of CPUs, far below CPU_SETSIZE.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed. Failure (e.g.
    // a restricted cpuset) only makes the numbers noisier.
    unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// The relay gets the last CPU, the load generator the others.
fn relay_cpus() -> std::ops::Range<usize> {
    let n = cpus();
    n.saturating_sub(1)..n
}

fn load_cpus() -> std::ops::Range<usize> {
    let n = cpus();
    0..n.saturating_sub(1).max(1)
}

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP socket");
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
    s
}

/// Messages per sendmmsg/recvmmsg of the load generator.
const GEN_BATCH: usize = 64;

/// Headers for `bufs`, each a whole message; no addresses (the sockets
/// are connected, or the source does not matter).
fn headers(bufs: &mut [Vec<u8>], iovs: &mut Vec<libc::iovec>) -> Vec<libc::mmsghdr> {
    iovs.clear();
    for b in bufs.iter_mut() {
        iovs.push(libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        });
    }
    iovs.iter_mut()
        .map(|iov| {
            // SAFETY: an all-zero mmsghdr is valid (null pointers, zero lengths).
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect()
}

/// Counts what arrives until `stop`; `on_batch` sees each received batch:
/// every datagram's arrival time (the kernel's stamp, so the receiver's own
/// wake-up latency does not count) and its first 16 bytes.
fn receiver(
    sock: UdpSocket,
    spin: bool,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    mut on_batch: impl FnMut(&[(Instant, [u8; 16])]) + Send + 'static,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        pin(0, load_cpus());
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        // Without kernel stamps the delays fall back to the time of reading.
        let _ =
            braid_io::setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
        let mut bufs: Vec<Vec<u8>> = (0..GEN_BATCH).map(|_| vec![0u8; 2048]).collect();
        let mut iovs = Vec::with_capacity(GEN_BATCH);
        let mut hdrs = headers(&mut bufs, &mut iovs);
        let mut controls = vec![[0u64; 8]; GEN_BATCH];
        let mut got = vec![(Instant::now(), [0u8; 16]); GEN_BATCH];
        while !stop.load(Ordering::Relaxed) {
            for (h, c) in hdrs.iter_mut().zip(controls.iter_mut()) {
                h.msg_hdr.msg_control = c.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = std::mem::size_of::<[u64; 8]>();
            }
            // SAFETY: the headers point at `iovs`, `bufs` and `controls`,
            // all alive and unmoved for the duration of the call.
            let n = unsafe {
                libc::recvmmsg(
                    sock.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    GEN_BATCH as libc::c_uint,
                    if spin {
                        libc::MSG_DONTWAIT
                    } else {
                        libc::MSG_WAITFORONE
                    },
                    std::ptr::null_mut(),
                )
            };
            if n <= 0 {
                continue;
            }
            let (now, wall) = (Instant::now(), SystemTime::now());
            let n = n as usize;
            for k in 0..n {
                let at = braid_io::udp::arrival_time(&hdrs[k].msg_hdr)
                    .and_then(|t| wall.duration_since(t).ok())
                    .and_then(|age| now.checked_sub(age))
                    .unwrap_or(now);
                got[k].0 = at;
                got[k].1.copy_from_slice(&bufs[k][..16]);
            }
            count.fetch_add(n as u64, Ordering::Relaxed);
            on_batch(&got[..n]);
        }
    })
}

/// Sends as fast as it can (`every` None) or `per_tick` datagrams every
/// `every`, each stamped with its send time relative to `base`.
fn sender(
    sock: UdpSocket,
    size: usize,
    pace: Option<(Duration, usize)>,
    base: Instant,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        pin(0, load_cpus());
        // SAFETY: prctl with PR_SET_TIMERSLACK takes plain integers.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        if pace.is_some() {
            // Paced (delay test): nothing may preempt us between taking
            // the timestamp and handing the datagrams to the kernel.
            let param = libc::sched_param { sched_priority: 10 };
            // SAFETY: sched_setscheduler on this thread with a valid param;
            // failing only makes the numbers noisier.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
        }
        let per = pace.map_or(GEN_BATCH, |(_, n)| n.min(GEN_BATCH));
        let mut bufs: Vec<Vec<u8>> = (0..per).map(|_| vec![0xa5u8; size]).collect();
        let mut iovs = Vec::with_capacity(per);
        let mut next = Instant::now();
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            if let Some((every, _)) = pace {
                next += every;
                let now = Instant::now();
                if next > now {
                    thread::sleep(next - now);
                }
            }
            let stamp = Instant::now().duration_since(base).as_nanos() as u64;
            for b in bufs.iter_mut() {
                b[..8].copy_from_slice(&seq.to_le_bytes());
                b[8..16].copy_from_slice(&stamp.to_le_bytes());
                seq += 1;
            }
            let mut hdrs = headers(&mut bufs, &mut iovs);
            // SAFETY: the headers point at `iovs` and `bufs`, alive and
            // unmoved for the duration of the call; the kernel only reads.
            let n = unsafe {
                libc::sendmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), per as libc::c_uint, 0)
            };
            if n > 0 {
                sent.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    })
}

/// A relay under test, stopped on drop.
enum Relay {
    Netem(Child),
    Plain(Arc<AtomicBool>, Option<thread::JoinHandle<()>>),
}

impl Relay {
    fn netem(to: SocketAddr, extra: &[&str]) -> Result<(Relay, SocketAddr), String> {
        let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        let port = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut child = Command::new(exe)
            .arg("netem")
            .args(["--listen", &listen.to_string(), "--to", &to.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting braid netem: {e}"))?;
        let mut line = String::new();
        let _ = BufReader::new(child.stderr.take().unwrap()).read_line(&mut line);
        if !line.contains("relaying") {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("braid netem did not start: {}", line.trim()));
        }
        pin(child.id() as libc::pid_t, relay_cpus());
        Ok((Relay::Netem(child), listen))
    }

    /// One recv_from and one send per datagram, like socat.
    fn plain(to: SocketAddr) -> (Relay, SocketAddr) {
        let listen = socket();
        let addr = listen.local_addr().unwrap();
        let up = socket();
        up.connect(to).unwrap();
        listen
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let h = thread::spawn(move || {
            pin(0, relay_cpus());
            let mut buf = vec![0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                if let Ok((n, _)) = listen.recv_from(&mut buf) {
                    let _ = up.send(&buf[..n]);
                }
            }
        });
        (Relay::Plain(stop, Some(h)), addr)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        match self {
            Relay::Netem(child) => {
                // SAFETY: kill by the PID of our own, not yet reaped child.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                let _ = child.wait();
            }
            Relay::Plain(stop, h) => {
                stop.store(true, Ordering::Relaxed);
                if let Some(h) = h.take() {
                    let _ = h.join();
                }
            }
        }
    }
}

/// Datagrams per second delivered through one relay.
fn forwarding_run(netem: bool, o: &Opts) -> Result<(f64, f64), String> {
    let sink = socket();
    let to = sink.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let rx = receiver(sink, false, stop.clone(), got.clone(), |_| {});
    let (relay, listen) = if netem {
        Relay::netem(to, &[])?
    } else {
        Relay::plain(to)
    };
    let src = socket();
    src.connect(listen).unwrap();
    let tx = sender(
        src,
        o.size,
        None,
        Instant::now(),
        stop.clone(),
        sent.clone(),
    );
    thread::sleep(Duration::from_millis(500));
    let (g0, s0, t0) = (
        got.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        Instant::now(),
    );
    thread::sleep(Duration::from_secs_f64(o.seconds));
    let (g1, s1, t1) = (
        got.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        Instant::now(),
    );
    stop.store(true, Ordering::Relaxed);
    let _ = tx.join();
    drop(relay);
    let _ = rx.join();
    let secs = (t1 - t0).as_secs_f64();
    Ok(((g1 - g0) as f64 / secs, (s1 - s0) as f64 / secs))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// |one-way delay − `delay_ns`| in ns, one per datagram.
fn delay_run(o: &Opts, delay_ns: u64) -> Result<(Vec<u64>, u64), String> {
    let sink = socket();
    let to = sink.local_addr().unwrap();
    let base = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::with_capacity(
        (o.rate as f64 * (o.seconds + 2.0)) as usize,
    )));
    let warm = base + Duration::from_millis(300);
    let rx = {
        let errors = errors.clone();
        // Not busy-polling: on two cores a spinning receiver preempts the
        // sender between its time stamp and its sendmmsg.
        receiver(sink, false, stop.clone(), got.clone(), move |batch| {
            // Uncontended until the end: the main thread only takes it
            // after the receiver stopped.
            let mut e = errors.lock().unwrap();
            for (at, h) in batch {
                if *at < warm {
                    continue;
                }
                let now = at.duration_since(base).as_nanos() as u64;
                let sent = u64::from_le_bytes(h[8..16].try_into().unwrap());
                e.push(now.saturating_sub(sent).abs_diff(delay_ns));
            }
        })
    };
    let (relay, listen) = Relay::netem(
        to,
        &["--delay", &format!("{}us", delay_ns / 1000), "--realtime"],
    )?;
    let src = socket();
    src.connect(listen).unwrap();
    // Ten datagrams per tick keeps the sender's own timer out of the way.
    let per_tick = 10usize;
    let tick = Duration::from_nanos(1_000_000_000 * per_tick as u64 / o.rate);
    let tx = sender(
        src,
        o.size,
        Some((tick, per_tick)),
        base,
        stop.clone(),
        sent.clone(),
    );
    thread::sleep(Duration::from_secs_f64(o.seconds) + Duration::from_millis(300));
    let offered = sent.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let _ = tx.join();
    // Let the last ones through before the relay stops.
    thread::sleep(Duration::from_millis(20));
    drop(relay);
    let _ = rx.join();
    let v = std::mem::take(&mut *errors.lock().unwrap());
    Ok((v, offered))
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    let mut table = Vec::new();
    let mut results = serde_json::Map::new();
    for (netem, name) in [
        (true, "braid netem (recvmmsg/sendmmsg)"),
        (false, "plain relay (recv_from/send_to)"),
    ] {
        let mut pps = Vec::new();
        let mut offered = Vec::new();
        for r in 0..o.runs {
            eprint!(
                "bench netem: forwarding {}B via {name}, run {}/{} … ",
                o.size,
                r + 1,
                o.runs
            );
            let (p, s) = forwarding_run(netem, &o)?;
            eprintln!(
                "{:.0} pkt/s ({:.2} Gbit/s), offered {:.0} pkt/s",
                p,
                p * o.size as f64 * 8.0 / 1e9,
                s
            );
            pps.push(p);
            offered.push(s);
        }
        let m = median(&mut pps.clone());
        let gbps = m * o.size as f64 * 8.0 / 1e9;
        table.push((
            name,
            m,
            gbps,
            pps.iter().cloned().fold(f64::MAX, f64::min),
            pps.iter().cloned().fold(0.0, f64::max),
            median(&mut offered),
        ));
        results.insert(
            if netem { "netem" } else { "plain" }.into(),
            json!({"median_pps": m, "median_gbps": gbps, "runs_pps": pps}),
        );
    }
    // 1 µs: what the loopback path itself adds (sender, relay wake-up,
    // receiver), to tell it apart from the relay's timing.
    let mut delays = Vec::new();
    for (label, ns) in [("3ms", 3_000_000u64), ("1us", 1_000)] {
        eprint!(
            "bench netem: delay error, --delay {label} at {} pkt/s of {}B for {} s … ",
            o.rate, o.size, o.seconds
        );
        let (mut errs, offered) = delay_run(&o, ns)?;
        errs.sort_unstable();
        eprintln!("{} samples", errs.len());
        delays.push((
            label,
            offered,
            errs.len(),
            pct(&errs, 0.5),
            pct(&errs, 0.99),
            pct(&errs, 1.0),
        ));
    }
    if o.json {
        let d: Vec<_> = delays
            .iter()
            .map(|(label, offered, n, p50, p99, max)| {
                json!({"delay": label, "rate_pps": o.rate, "size": o.size,
                       "offered": offered, "samples": n,
                       "p50_us": p50, "p99_us": p99, "max_us": max})
            })
            .collect();
        let j = json!({
            "forwarding": {"size": o.size, "seconds": o.seconds, "runs": o.runs,
                           "netem": results["netem"], "plain": results["plain"]},
            "delay_error": d,
        });
        println!("{j}");
        return Ok(());
    }
    println!(
        "forwarding, {} B datagrams, loopback, {} runs of {} s, relay on its own core",
        o.size, o.runs, o.seconds
    );
    println!("| relay | median pkt/s | Gbit/s | min pkt/s | max pkt/s | offered pkt/s |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, m, g, lo, hi, off) in &table {
        println!("| {name} | {m:.0} | {g:.2} | {lo:.0} | {hi:.0} | {off:.0} |");
    }
    println!("netem / plain: {:.2}×", table[0].1 / table[1].1);
    println!();
    println!(
        "delay error |one-way delay − configured|, {} pkt/s of {} B, {} s (after 0.3 s warm-up)",
        o.rate, o.size, o.seconds
    );
    println!("| --delay | p50 | p99 | max | measured/sent |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (label, offered, n, p50, p99, max) in &delays {
        println!("| {label} | {p50:.1} µs | {p99:.1} µs | {max:.1} µs | {n}/{offered} |");
    }
    Ok(())
}
