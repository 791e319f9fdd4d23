//! `braid bench crypto`: an `openssl speed`-style table of the data-path
//! AEAD operation, for every cipher braid speaks.
//!
//! Each cell seals (or opens) packets of one size in place for a bounded
//! time, exactly as the data path does: ring's `LessSafeKey` for
//! ChaCha20-Poly1305, braid-core's `AesKey` for AES-256-GCM (ring or
//! aws-lc-rs, whichever braid measured faster at start), an empty AAD, a 16-byte tag after the body and WireGuard's nonce (4 zero bytes,
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

mod aead;
mod openssl;
mod report;

use super::args::Args;
use aead::measure_parallel;
pub use aead::{open_rate, seal_rate, Cipher, Op, SIZES};
use report::{OpensslRow, Results, Row};
use std::io::{IsTerminal, Write};
use std::time::Duration;

pub const USAGE: &str = "\
usage: braid bench crypto [--quick] [--json] [--seconds S] [--no-openssl]

Throughput of the data-path AEAD (in place, 16-byte tag, WireGuard nonce;
ring for ChaCha20-Poly1305, for AES-256-GCM the library braid measured
fastest at start: ring or aws-lc-rs) for ChaCha20-Poly1305 and AES-256-GCM: seal and open, one core and
all cores, packets of 64, 256, 1024, 1420, 8192 and 16384 bytes, in MB/s
(10^6 bytes of plaintext per second). Next to it, what `openssl speed -evp`
measures for the same cipher on one core, when openssl is installed.

  --seconds S    time per cell (default 1, quick 0.2)
  --quick        a smoke run: 0.2 s per cell, openssl only at 1420 bytes
  --json         print everything as JSON
  --no-openssl   do not run openssl
";

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
    let mut args = Args::new(argv);
    while let Some(a) = args.next() {
        match a {
            "-h" | "--help" => return Ok(None),
            "--json" => o.json = true,
            "--quick" => o.quick = true,
            "--no-openssl" => o.openssl = false,
            "--seconds" => seconds = Some(args.number(a, 0.01..=60.0)?),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    o.seconds = seconds.unwrap_or(if o.quick { 0.2 } else { 1.0 });
    Ok(Some(o))
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
    let cpu = report::cpu_info();

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

    let version = if o.openssl {
        openssl::openssl_version()
    } else {
        None
    };
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
                match openssl::openssl_speed(cipher, size) {
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

    let results = Results {
        seconds: o.seconds,
        quick: o.quick,
        openssl_asked: o.openssl,
        threads,
        cpu,
        rows,
        openssl_version: version,
        openssl_rows,
        openssl_errors,
    };
    if o.json {
        println!("{}", results.json()?);
    } else {
        print!("{}", results.text());
    }
    Ok(())
}
