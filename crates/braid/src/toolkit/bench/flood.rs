//! `braid bench handshake-flood`: a bounded handshake flood against one
//! responder, from many source addresses, and what it cost the responder.
//!
//! Three kinds of initiation take turns: random bytes with the initiation
//! type and length (fail mac1), initiations from random static keys with a
//! valid mac1 for the responder (the most work a stranger can cause), and,
//! when given, a captured real initiation replayed as is. Every source
//! address gets its own socket, so the responder's cookie replies come
//! back and are counted. With `--interface` the responder's own counters
//! (read over its UAPI socket) say what it did with the flood; with
//! `--pid` its CPU time (utime + stime from /proc) is measured.

use crate::uapi;
use braid_core::cookie::CookieState;
use braid_core::messages::{
    COOKIE_REPLY_LEN, INITIATION_LEN, RESPONSE_LEN, TYPE_COOKIE_REPLY, TYPE_INITIATION,
    TYPE_RESPONSE,
};
use braid_core::noise::{self, LocalStatic, RemoteStatic};
use rand_chacha::ChaCha20Rng;
use rand_core::{OsRng, RngCore, SeedableRng};
use serde_json::json;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use x25519_dalek::StaticSecret;

pub const USAGE: &str = "\
usage: braid bench handshake-flood --target ADDR:PORT --public KEY
           --source IP [--sources N] [--seconds S] [--rate PPS]
           [--replay HEX] [--interface NAME] [--pid PID] [--json]

Floods ADDR:PORT (a WireGuard responder whose public key is KEY) with
handshake initiations for S seconds (default 5, at most 60) at PPS packets
a second (default 20000; 0 = as fast as possible), from N consecutive
source addresses starting at IP (default 1; each must be assigned to an
interface here). Prints the rate offered, the cookie replies received and,
with --interface/--pid, what the responder handled and its CPU time.

  --replay HEX     a captured initiation (hex) to replay among the others
  --interface NAME the responder's interface, to read its counters (UAPI)
  --pid PID        the responder's process, to read its CPU time
";

const MAX_SECONDS: f64 = 60.0;
const MAX_SOURCES: u32 = 4096;
/// Distinct valid-mac1 initiations made up front (each costs two DH).
const CRAFTED: usize = 64;
/// Sends between two sweeps of the sockets for replies.
const SENDS_PER_SWEEP: u64 = 256;

struct Args {
    target: SocketAddr,
    public: [u8; 32],
    first_source: IpAddr,
    sources: u32,
    seconds: f64,
    rate: u64,
    replay: Option<Vec<u8>>,
    interface: Option<String>,
    pid: Option<u32>,
    json: bool,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut it = args.iter();
    let (mut target, mut public, mut first_source) = (None, None, None);
    let mut a = Args {
        target: "0.0.0.0:0".parse().expect("literal"),
        public: [0; 32],
        first_source: IpAddr::from([0, 0, 0, 0]),
        sources: 1,
        seconds: 5.0,
        rate: 20_000,
        replay: None,
        interface: None,
        pid: None,
        json: false,
    };
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        let bad = |what: &str, v: &str| format!("{flag}: {v:?} is not {what}");
        match flag.as_str() {
            "--target" => {
                let v = value()?;
                target = Some(v.parse().map_err(|_| bad("an ADDR:PORT", &v))?);
            }
            "--public" => {
                let v = value()?;
                let key = crate::keys::PublicKey::from_base64(&v)
                    .and_then(crate::keys::PublicKey::usable_for_peer)
                    .map_err(|_| bad("a public key", &v))?;
                public = Some(*key.as_bytes());
            }
            "--source" => {
                let v = value()?;
                first_source = Some(v.parse().map_err(|_| bad("an IP address", &v))?);
            }
            "--sources" => {
                let v = value()?;
                a.sources = v.parse().map_err(|_| bad("a count", &v))?;
                if a.sources == 0 || a.sources > MAX_SOURCES {
                    return Err(format!("--sources must be 1..={MAX_SOURCES}"));
                }
            }
            "--seconds" => {
                let v = value()?;
                a.seconds = v.parse().map_err(|_| bad("a number", &v))?;
                if !(a.seconds > 0.0 && a.seconds <= MAX_SECONDS) {
                    return Err(format!("--seconds must be in (0, {MAX_SECONDS}]"));
                }
            }
            "--rate" => {
                let v = value()?;
                a.rate = v.parse().map_err(|_| bad("packets a second", &v))?;
            }
            "--replay" => {
                let v = value()?;
                let bytes = decode_hex(&v).ok_or_else(|| bad("hex", &v))?;
                if bytes.len() != INITIATION_LEN || bytes[0] != TYPE_INITIATION {
                    return Err(format!(
                        "--replay: {} bytes of type {}, not an initiation",
                        bytes.len(),
                        bytes.first().copied().unwrap_or(0)
                    ));
                }
                a.replay = Some(bytes);
            }
            "--interface" => a.interface = Some(value()?),
            "--pid" => {
                let v = value()?;
                a.pid = Some(v.parse().map_err(|_| bad("a process id", &v))?);
            }
            "--json" => a.json = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    a.target = target.ok_or(format!("--target is required\n{USAGE}"))?;
    a.public = public.ok_or(format!("--public is required\n{USAGE}"))?;
    a.first_source = first_source.ok_or(format!("--source is required\n{USAGE}"))?;
    Ok(a)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn nth_address(first: IpAddr, n: u32) -> IpAddr {
    match first {
        IpAddr::V4(v4) => IpAddr::V4((u32::from(v4).wrapping_add(n)).into()),
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6).wrapping_add(n as u128)).into()),
    }
}

/// An initiation to `responder` from a random static key, with valid mac1.
pub fn stranger_initiation(responder: &[u8; 32]) -> [u8; INITIATION_LEN] {
    let mut key = [0u8; 32];
    OsRng.fill_bytes(&mut key);
    let stranger = LocalStatic::new(key);
    let remote = RemoteStatic::new(&stranger, *responder, [0; 32]);
    let mut eph = [0u8; 32];
    OsRng.fill_bytes(&mut eph);
    let timestamp = noise::tai64n(OsRng.next_u64() >> 2, 0);
    let mut msg = [0u8; INITIATION_LEN];
    noise::create_initiation(
        &stranger,
        &remote,
        StaticSecret::from(eph),
        &timestamp,
        OsRng.next_u32(),
        &mut msg,
    )
    .expect("--public refuses low-order keys");
    CookieState::new(responder).add_macs(Instant::now(), &mut msg);
    msg
}

/// The responder's counters (UAPI "extra") and CPU ticks at one moment.
#[derive(Default, Clone)]
struct ResponderSample {
    counters: Vec<(String, u64)>,
    cpu_ticks: Option<u64>,
}

impl ResponderSample {
    fn take(a: &Args) -> ResponderSample {
        let counters = a
            .interface
            .as_deref()
            .and_then(|n| uapi::query_braid(uapi::socket_path(n)).ok())
            .map(|s| s.extra)
            .unwrap_or_default();
        ResponderSample {
            counters,
            cpu_ticks: a.pid.and_then(cpu_ticks),
        }
    }

    fn get(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }
}

/// utime + stime of `pid`, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the comm: state is field 3, utime 14 and stime 15 (1-based).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Handshake counters of the responder that say it dealt with a message.
const HANDLED: [&str; 9] = [
    "invalid_mac",
    "cookie_replies_sent",
    "handshake_rejected",
    "handshake_flood_dropped",
    "handshake_rate_limited",
    "handshake_over_budget",
    "handshake_queue_full",
    "handshake_queue_stale",
    "control_queue_full",
];

pub fn run(args: &[String]) -> Result<(), String> {
    let a = parse_args(args)?;
    let sockets: Vec<UdpSocket> = (0..a.sources)
        .map(|n| {
            let ip = nth_address(a.first_source, n);
            let s = UdpSocket::bind((ip, 0))
                .map_err(|e| format!("bind source {ip}: {e} (is it assigned here?)"))?;
            s.set_nonblocking(true)
                .map_err(|e| format!("source {ip}: {e}"))?;
            Ok(s)
        })
        .collect::<Result<_, String>>()?;
    let crafted: Vec<[u8; INITIATION_LEN]> = (0..CRAFTED)
        .map(|_| stranger_initiation(&a.public))
        .collect();
    let mut bogus = [0u8; INITIATION_LEN];
    // Random enough for garbage, and no system call per packet.
    let mut seed = [0u8; 32];
    OsRng.fill_bytes(&mut seed);
    let mut junk = ChaCha20Rng::from_seed(seed);

    let before = ResponderSample::take(&a);
    let start = Instant::now();
    let duration = Duration::from_secs_f64(a.seconds);
    let kinds = if a.replay.is_some() { 3 } else { 2 };
    let (mut sent, mut send_errors, mut cookies, mut responses) = (0u64, 0u64, 0u64, 0u64);
    let mut buf = [0u8; 256];
    loop {
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        if a.rate > 0 && sent as f64 >= elapsed.as_secs_f64() * a.rate as f64 {
            std::thread::sleep(Duration::from_micros(200));
        } else {
            let socket = &sockets[(sent % a.sources as u64) as usize];
            let msg: &[u8] = match sent % kinds {
                0 => {
                    junk.fill_bytes(&mut bogus);
                    bogus[..4].copy_from_slice(&[TYPE_INITIATION, 0, 0, 0]);
                    &bogus
                }
                1 => &crafted[(sent / kinds) as usize % CRAFTED],
                _ => a.replay.as_deref().expect("three kinds only with a replay"),
            };
            match socket.send_to(msg, a.target) {
                Ok(_) => sent += 1,
                Err(_) => send_errors += 1,
            }
            if sent % SENDS_PER_SWEEP != 0 {
                continue;
            }
        }
        for s in &sockets {
            while let Ok((n, _)) = s.recv_from(&mut buf) {
                match (buf[0], n) {
                    (TYPE_COOKIE_REPLY, COOKIE_REPLY_LEN) => cookies += 1,
                    (TYPE_RESPONSE, RESPONSE_LEN) => responses += 1,
                    _ => {}
                }
            }
        }
    }
    let flood_time = start.elapsed().as_secs_f64();
    // Stragglers: what the responder still answers shortly after.
    std::thread::sleep(Duration::from_millis(200));
    for s in &sockets {
        while let Ok((n, _)) = s.recv_from(&mut buf) {
            match (buf[0], n) {
                (TYPE_COOKIE_REPLY, COOKIE_REPLY_LEN) => cookies += 1,
                (TYPE_RESPONSE, RESPONSE_LEN) => responses += 1,
                _ => {}
            }
        }
    }
    let after = ResponderSample::take(&a);

    let handled: u64 = HANDLED
        .iter()
        .map(|n| after.get(n).saturating_sub(before.get(n)))
        .sum();
    let cpu_seconds = match (before.cpu_ticks, after.cpu_ticks) {
        (Some(b), Some(e)) => Some(e.saturating_sub(b) as f64 / ticks_per_second() as f64),
        _ => None,
    };
    let counters: serde_json::Map<String, serde_json::Value> = HANDLED
        .iter()
        .map(|n| {
            (
                n.to_string(),
                json!(after.get(n).saturating_sub(before.get(n))),
            )
        })
        .collect();
    let report = json!({
        "seconds": flood_time,
        "sources": a.sources,
        "sent": sent,
        "send_errors": send_errors,
        "offered_pps": sent as f64 / flood_time,
        "cookie_replies_received": cookies,
        "responses_received": responses,
        "handled": a.interface.as_ref().map(|_| handled),
        "handled_pps": a.interface.as_ref().map(|_| handled as f64 / flood_time),
        "responder_counters": counters,
        "responder_cpu_seconds": cpu_seconds,
        "responder_cpu_percent": cpu_seconds.map(|c| 100.0 * c / flood_time),
    });
    if a.json {
        println!("{report}");
        return Ok(());
    }
    println!(
        "flood: {sent} initiations in {flood_time:.1} s from {} sources = {:.0} pps offered",
        a.sources,
        sent as f64 / flood_time
    );
    println!("cookie replies received: {cookies}; handshake responses received: {responses}");
    if a.interface.is_some() {
        println!(
            "responder handled {handled} = {:.0} pps: {}",
            handled as f64 / flood_time,
            HANDLED
                .iter()
                .map(|n| format!("{n} {}", after.get(n).saturating_sub(before.get(n))))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(c) = cpu_seconds {
        println!(
            "responder CPU: {c:.2} s = {:.0} % of one core",
            100.0 * c / flood_time
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_addresses() {
        assert_eq!(decode_hex("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(decode_hex("0"), None);
        assert_eq!(decode_hex("zz"), None);
        let first: IpAddr = "198.18.251.250".parse().unwrap();
        assert_eq!(
            nth_address(first, 10),
            "198.18.252.4".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn own_cpu_time_is_readable() {
        assert!(cpu_ticks(std::process::id()).is_some());
    }
}
