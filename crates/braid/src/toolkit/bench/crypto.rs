//! `braid bench crypto`: an `openssl speed`-style table of the data-path
//! AEAD operation, for every cipher braid speaks.
//!
//! Each cell seals (or opens) packets of one size in place for a bounded
//! time, exactly as the data path does: `ring`'s `LessSafeKey`, an empty
//! AAD, a 16-byte tag after the body and WireGuard's nonce (4 zero bytes,
//! then the 64-bit counter in little endian). Opening verifies real
//! ciphertexts: a few packets are sealed first, and every timed open copies
//! one of them (L1/L2 resident) into the work buffer and opens it there, as
//! a received datagram is opened in the buffer the kernel copied it into.
//! "All cores" runs one thread per core, each on its own key, started
//! together, and sums their rates.
//!
//! When `openssl` is on the PATH, `openssl speed -mr -evp CIPHER -seconds 1
//! -bytes N` runs for the same sizes (one core, encryption only) and its
//! numbers are shown as "openssl seal" next to the ratio braid/openssl.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::{IsTerminal, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: braid bench crypto [--quick] [--json] [--seconds S] [--no-openssl]

Throughput of the data-path AEAD (ring, in place, 16-byte tag, WireGuard
nonce) for ChaCha20-Poly1305 and AES-256-GCM: seal and open, one core and
all cores, packets of 64, 256, 1024, 1420, 8192 and 16384 bytes, in MB/s
(10^6 bytes of plaintext per second). Next to it, what `openssl speed -evp`
measures for the same cipher on one core, when openssl is installed.

  --seconds S    time per cell (default 1, quick 0.2)
  --quick        a smoke run: 0.2 s per cell, openssl only at 1420 bytes
  --json         print everything as JSON
  --no-openssl   do not run openssl
";

/// Packet sizes (bytes of plaintext), the columns of the table.
pub const SIZES: [usize; 6] = [64, 256, 1024, 1420, 8192, 16384];
const TAG_LEN: usize = 16;
/// Sealed packets the open loop cycles through.
const OPEN_RING: usize = 4;
/// Bound on one `openssl speed` run (it is asked for 1 s).
const OPENSSL_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cipher {
    ChaCha20Poly1305,
    Aes256Gcm,
}

impl Cipher {
    pub const ALL: [Cipher; 2] = [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm];

    pub fn name(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "ChaCha20-Poly1305",
            Cipher::Aes256Gcm => "AES-256-GCM",
        }
    }

    /// The spelling of `Cipher =` in the configuration.
    pub fn id(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "chacha20poly1305",
            Cipher::Aes256Gcm => "aes256gcm",
        }
    }

    fn openssl_name(self) -> &'static str {
        match self {
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
            Cipher::Aes256Gcm => "aes-256-gcm",
        }
    }

    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Cipher::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    Seal,
    Open,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Seal => "seal",
            Op::Open => "open",
        }
    }
}

struct Opts {
    seconds: f64,
    quick: bool,
    json: bool,
    openssl: bool,
}

fn parse(argv: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        seconds: 1.0,
        quick: false,
        json: false,
        openssl: true,
    };
    let mut seconds = None;
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--quick" => o.quick = true,
            "--no-openssl" => o.openssl = false,
            "--seconds" => {
                let v = it.next().ok_or("--seconds needs a value")?;
                seconds = Some(
                    v.parse::<f64>()
                        .ok()
                        .filter(|s| (0.01..=60.0).contains(s))
                        .ok_or(format!(
                            "--seconds: {v:?} is not a time in seconds (0.01-60)"
                        ))?,
                );
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    o.seconds = seconds.unwrap_or(if o.quick { 0.2 } else { 1.0 });
    Ok(Some(o))
}

/// WireGuard's nonce: 4 zero bytes, then the counter in little endian.
fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

fn key(cipher: Cipher, seed: usize) -> LessSafeKey {
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = (i.wrapping_mul(29) ^ seed.wrapping_mul(151) ^ 0x5a) as u8;
    }
    LessSafeKey::new(UnboundKey::new(cipher.algorithm(), &k).expect("32-byte key"))
}

/// Seals `body` in place and writes the tag after it, as the data path does.
fn seal(key: &LessSafeKey, counter: u64, packet: &mut [u8], len: usize) {
    let (body, tag) = packet.split_at_mut(len);
    let t = key
        .seal_in_place_separate_tag(nonce(counter), Aad::empty(), body)
        .expect("seal");
    tag[..TAG_LEN].copy_from_slice(t.as_ref());
}

/// Runs one operation on `size`-byte packets for `dur` on this thread and
/// returns plaintext bytes per second.
fn measure(cipher: Cipher, op: Op, size: usize, dur: Duration, seed: usize) -> f64 {
    let key = key(cipher, seed);
    let mut work = vec![0u8; size + TAG_LEN];
    for (i, b) in work.iter_mut().enumerate() {
        *b = (i * 7 + seed) as u8;
    }
    // Check the clock about every 64 KiB of data.
    let batch = (65536 / size).max(1) as u64;
    let mut ops = 0u64;
    let start = Instant::now();
    match op {
        Op::Seal => loop {
            for _ in 0..batch {
                seal(&key, ops, &mut work, size);
                ops += 1;
            }
            std::hint::black_box(&mut work);
            if start.elapsed() >= dur {
                break;
            }
        },
        Op::Open => {
            let sealed: Vec<Vec<u8>> = (0..OPEN_RING as u64)
                .map(|c| {
                    let mut p = work.clone();
                    seal(&key, c, &mut p, size);
                    p
                })
                .collect();
            let start = Instant::now();
            loop {
                for _ in 0..batch {
                    let i = (ops % OPEN_RING as u64) as usize;
                    work.copy_from_slice(&sealed[i]);
                    let plain = key
                        .open_in_place(nonce(i as u64), Aad::empty(), &mut work)
                        .expect("a sealed packet opens");
                    std::hint::black_box(plain);
                    ops += 1;
                }
                if start.elapsed() >= dur {
                    break;
                }
            }
            return (ops * size as u64) as f64 / start.elapsed().as_secs_f64();
        }
    }
    (ops * size as u64) as f64 / start.elapsed().as_secs_f64()
}

/// Bytes of `size`-byte packets one core seals per second, measured for
/// `dur` (what `braid doctor` runs to pick the faster cipher here).
pub fn seal_rate(cipher: Cipher, size: usize, dur: Duration) -> f64 {
    measure(cipher, Op::Seal, size, dur, 0)
}

/// One thread per core, each on its own key, started together; the sum of
/// their rates.
fn measure_parallel(cipher: Cipher, op: Op, size: usize, dur: Duration, threads: usize) -> f64 {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    measure(cipher, op, size, dur, t + 1)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .sum()
    })
}

struct Row {
    cipher: Cipher,
    op: Op,
    threads: usize,
    all_cores: bool,
    rates: Vec<f64>,
}

struct OpensslRow {
    cipher: Cipher,
    rates: Vec<Option<f64>>,
}

struct Cpu {
    arch: &'static str,
    model: Option<String>,
    features: Vec<(&'static str, bool)>,
}

fn cpu_info() -> Cpu {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |names: &[&str]| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            names.contains(&k.trim()).then(|| v.trim().to_string())
        })
    };
    let flags: Vec<String> = field(&["flags", "Features"])
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let has = |f: &str| flags.iter().any(|x| x == f);
    let arch = std::env::consts::ARCH;
    let features = match arch {
        "x86_64" | "x86" => ["aes", "pclmulqdq", "avx2", "vaes", "avx512f"]
            .into_iter()
            .map(|f| (f, has(f)))
            .collect(),
        "aarch64" => vec![
            ("aes", has("aes")),
            ("pmull", has("pmull")),
            ("neon", has("asimd")),
        ],
        _ => Vec::new(),
    };
    let model = field(&["model name", "Model", "CPU part"]);
    Cpu {
        arch,
        model,
        features,
    }
}

/// Runs `openssl speed -mr -evp` for one cipher and size, bounded in time;
/// bytes per second, or why not.
fn openssl_speed(cipher: Cipher, size: usize) -> Result<f64, String> {
    let mut child = Command::new("openssl")
        .args([
            "speed",
            "-mr",
            "-evp",
            cipher.openssl_name(),
            "-seconds",
            "1",
            "-bytes",
        ])
        .arg(size.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("openssl: {e}"))?;
    let deadline = Instant::now() + OPENSSL_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "openssl speed took over {} s",
                    OPENSSL_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("openssl: {e}")),
        }
    }
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    parse_openssl(&out, size).ok_or_else(|| "no result in openssl's output".to_string())
}

/// Bytes per second from `openssl speed -mr` output for one size: the last
/// field of the `+F` line, else `+R:count:name:seconds` × size.
fn parse_openssl(out: &str, size: usize) -> Option<f64> {
    let positive = |v: f64| (v.is_finite() && v > 0.0).then_some(v);
    if let Some(v) = out
        .lines()
        .find(|l| l.starts_with("+F:"))
        .and_then(|l| l.rsplit(':').next()?.trim().parse::<f64>().ok())
    {
        return positive(v);
    }
    let r = out.lines().find(|l| l.starts_with("+R:"))?;
    let f: Vec<&str> = r.split(':').collect();
    let count: f64 = f.get(1)?.parse().ok()?;
    let secs: f64 = f.last()?.parse().ok()?;
    positive(count * size as f64 / secs)
}

fn openssl_version() -> Option<String> {
    let out = Command::new("openssl")
        .arg("version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn progress(tty: bool, msg: &str) {
    let mut e = std::io::stderr().lock();
    if tty {
        let _ = write!(e, "\r\x1b[K{msg}");
    } else {
        let _ = writeln!(e, "{msg}");
    }
    let _ = e.flush();
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(o) = parse(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dur = Duration::from_secs_f64(o.seconds);
    let warmup = Duration::from_secs_f64((o.seconds / 10.0).min(0.05));
    let tty = std::io::stderr().is_terminal();
    let cpu = cpu_info();

    let mut rows = Vec::new();
    let total = Cipher::ALL.len() * 2 * 2 * SIZES.len();
    let mut done = 0;
    for cipher in Cipher::ALL {
        for op in [Op::Seal, Op::Open] {
            for all_cores in [false, true] {
                let n = if all_cores { threads } else { 1 };
                let mut rates = Vec::new();
                for &size in &SIZES {
                    done += 1;
                    progress(
                        tty,
                        &format!(
                            "[{done:>2}/{total}] {} {} {} {size} bytes …",
                            cipher.name(),
                            op.name(),
                            if all_cores {
                                format!("{n} threads")
                            } else {
                                "1 thread".to_string()
                            }
                        ),
                    );
                    measure_parallel(cipher, op, size, warmup, n);
                    rates.push(measure_parallel(cipher, op, size, dur, n));
                }
                rows.push(Row {
                    cipher,
                    op,
                    threads: n,
                    all_cores,
                    rates,
                });
            }
        }
    }

    let version = if o.openssl { openssl_version() } else { None };
    let mut openssl_rows = Vec::new();
    let mut openssl_errors = Vec::new();
    if version.is_some() {
        let sizes: Vec<usize> = if o.quick { vec![1420] } else { SIZES.to_vec() };
        for cipher in Cipher::ALL {
            let mut rates = vec![None; SIZES.len()];
            for &size in &sizes {
                progress(
                    tty,
                    &format!(
                        "openssl speed -evp {} -bytes {size} …",
                        cipher.openssl_name()
                    ),
                );
                match openssl_speed(cipher, size) {
                    Ok(v) => {
                        let i = SIZES.iter().position(|&s| s == size).expect("a size");
                        rates[i] = Some(v);
                    }
                    Err(e) => openssl_errors.push(format!("{} {size} bytes: {e}", cipher.name())),
                }
            }
            openssl_rows.push(OpensslRow { cipher, rates });
        }
    }
    if tty {
        progress(tty, "");
    }

    let rate = |c: Cipher, op: Op, all: bool, size: usize| {
        let i = SIZES.iter().position(|&s| s == size).expect("a size");
        rows.iter()
            .find(|r| r.cipher == c && r.op == op && r.all_cores == all)
            .map_or(0.0, |r| r.rates[i])
    };
    // Fastest at 1420 bytes on one core: the mean of seal and open.
    let score = |c: Cipher| (rate(c, Op::Seal, false, 1420) + rate(c, Op::Open, false, 1420)) / 2.0;
    let fastest = Cipher::ALL
        .into_iter()
        .max_by(|a, b| score(*a).total_cmp(&score(*b)))
        .expect("a cipher");
    let slowest = Cipher::ALL
        .into_iter()
        .min_by(|a, b| score(*a).total_cmp(&score(*b)))
        .expect("a cipher");
    let ratio = |c: Cipher, i: usize| {
        let o = openssl_rows.iter().find(|r| r.cipher == c)?.rates[i]?;
        Some(rate(c, Op::Seal, false, SIZES[i]) / o)
    };

    if o.json {
        let doc = json!({
            "unit": "bytes/s of plaintext",
            "library": "ring",
            "seconds_per_cell": o.seconds,
            "threads": threads,
            "sizes": SIZES,
            "cpu": {
                "arch": cpu.arch,
                "model": cpu.model,
                "features": cpu.features.iter().map(|(k, v)| (k.to_string(), json!(v)))
                    .collect::<serde_json::Map<String, Value>>(),
            },
            "results": rows.iter().map(|r| json!({
                "cipher": r.cipher.name(),
                "id": r.cipher.id(),
                "op": r.op.name(),
                "cores": if r.all_cores { "all" } else { "one" },
                "threads": r.threads,
                "bytes_per_sec": r.rates,
            })).collect::<Vec<_>>(),
            "fastest_1420_one_core": fastest.name(),
            "openssl": {
                "ran": version.is_some(),
                "version": version,
                "errors": openssl_errors,
                "rows": openssl_rows.iter().map(|r| json!({
                    "cipher": r.cipher.name(),
                    "id": r.cipher.id(),
                    "op": "seal",
                    "cores": "one",
                    "bytes_per_sec": r.rates,
                    "braid_over_openssl": (0..SIZES.len()).map(|i| ratio(r.cipher, i)).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            },
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
        return Ok(());
    }

    let mut s = String::new();
    let _ = writeln!(
        s,
        "braid bench crypto: ring, in place, 16-byte tag, WireGuard nonce; {} s per cell; {threads} cores",
        o.seconds
    );
    let _ = writeln!(
        s,
        "CPU: {} ({}); {}",
        cpu.model.as_deref().unwrap_or("unknown"),
        cpu.arch,
        if cpu.features.is_empty() {
            "no features checked on this architecture".to_string()
        } else {
            cpu.features
                .iter()
                .map(|(k, v)| format!("{k} {}", if *v { "yes" } else { "no" }))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let _ = writeln!(
        s,
        "The numbers are in MB/s (10^6 bytes of plaintext per second)."
    );
    let label_w = 36;
    let _ = write!(s, "{:<label_w$}", "type");
    for size in SIZES {
        let _ = write!(s, "{:>12}", format!("{size} bytes"));
    }
    s.push('\n');
    for cipher in Cipher::ALL {
        for r in rows.iter().filter(|r| r.cipher == cipher) {
            let label = format!(
                "{} {} {}",
                cipher.name(),
                r.op.name(),
                if r.all_cores {
                    format!("all cores ({})", r.threads)
                } else {
                    "one core".to_string()
                }
            );
            let _ = write!(s, "{label:<label_w$}");
            for v in &r.rates {
                let _ = write!(s, "{:>12.2}", v / 1e6);
            }
            s.push('\n');
        }
        if let Some(r) = openssl_rows.iter().find(|r| r.cipher == cipher) {
            let _ = write!(s, "{:<label_w$}", format!("{} openssl seal", cipher.name()));
            for v in &r.rates {
                match v {
                    Some(v) => {
                        let _ = write!(s, "{:>12.2}", v / 1e6);
                    }
                    None => {
                        let _ = write!(s, "{:>12}", "-");
                    }
                }
            }
            s.push('\n');
            let _ = write!(
                s,
                "{:<label_w$}",
                format!("{} braid/openssl seal", cipher.name())
            );
            for i in 0..SIZES.len() {
                match ratio(cipher, i) {
                    Some(x) => {
                        let _ = write!(s, "{:>12}", format!("{x:.2}x"));
                    }
                    None => {
                        let _ = write!(s, "{:>12}", "-");
                    }
                }
            }
            s.push('\n');
        }
    }
    match &version {
        Some(v) => {
            let _ = writeln!(
                s,
                "openssl: {v}; `openssl speed -evp` encrypts on one core{}",
                if o.quick {
                    " (quick: 1420 bytes only)"
                } else {
                    ""
                }
            );
        }
        None if o.openssl => {
            let _ = writeln!(s, "openssl: not installed, no comparison");
        }
        None => {
            let _ = writeln!(s, "openssl: not run (--no-openssl)");
        }
    }
    for e in &openssl_errors {
        let _ = writeln!(s, "openssl: {e}");
    }
    let _ = writeln!(
        s,
        "Fastest at 1420 bytes on one core: {} (seal {:.0} MB/s, open {:.0} MB/s), {:.2}x {}",
        fastest.name(),
        rate(fastest, Op::Seal, false, 1420) / 1e6,
        rate(fastest, Op::Open, false, 1420) / 1e6,
        score(fastest) / score(slowest).max(f64::MIN_POSITIVE),
        slowest.name(),
    );
    print!("{s}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_openssl_machine_readable() {
        let out = "+DT:AES-256-GCM:1:1420\n+R:935933:AES-256-GCM:0.990000\n+H:1420\n+F:25:AES-256-GCM:1342449353.54\n";
        assert_eq!(parse_openssl(out, 1420), Some(1342449353.54));
        let only_r = "+R:1000:ChaCha20-Poly1305:0.5\n";
        assert_eq!(parse_openssl(only_r, 64), Some(128000.0));
        assert_eq!(parse_openssl("garbage", 64), None);
    }

    #[test]
    fn nonce_is_wireguards() {
        let n = nonce(0x0102_0304_0506_0708);
        assert_eq!(n.as_ref(), &[0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn open_verifies_what_seal_wrote() {
        for c in Cipher::ALL {
            let k = key(c, 3);
            let mut p = vec![9u8; 100 + TAG_LEN];
            seal(&k, 5, &mut p, 100);
            assert_ne!(&p[..100], &[9u8; 100][..]);
            let mut bad = p.clone();
            bad[0] ^= 1;
            assert!(k.open_in_place(nonce(5), Aad::empty(), &mut bad).is_err());
            let plain = k.open_in_place(nonce(5), Aad::empty(), &mut p).unwrap();
            assert_eq!(plain, &[9u8; 100][..]);
        }
    }
}
