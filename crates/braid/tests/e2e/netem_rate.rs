//! `braid netem`'s rate changes over real loopback UDP: `rate RATE` on the
//! control socket and `--rate-at`, with their errors. The only timing
//! asserted is a causal bound (a slow machine can only move away from
//! it): after the rate falls, no more bytes pass than the new rate allows
//! in the time since the first was sent, plus what the queue holds.

use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BRAID: &str = env!("CARGO_BIN_EXE_braid");
const LONG: Duration = Duration::from_secs(30);

/// A relay we started; SIGTERM (by its PID) and reaped on drop.
struct Relay {
    child: Child,
    control: std::path::PathBuf,
}

impl Drop for Relay {
    fn drop(&mut self) {
        // SAFETY: kill by the PID of our own child, not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + LONG;
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.control);
    }
}

impl Relay {
    fn control(&self, line: &str) -> String {
        let mut s = UnixStream::connect(&self.control).unwrap();
        s.set_read_timeout(Some(LONG)).unwrap();
        s.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out).unwrap();
        out.trim_end().to_string()
    }
}

/// A relay from `listen` (its socket is handed over by port: bound here,
/// closed, then bound by the relay) to `to`, with `args`.
fn relay(to: u16, args: &[&str], tag: &str) -> (Relay, u16) {
    let control = std::env::temp_dir().join(format!(
        "braid-netem-rate-{}-{tag}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&control);
    for _ in 0..5 {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(BRAID)
            .args(["netem", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--to", &format!("127.0.0.1:{to}"), "--control"])
            .arg(&control)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut r = Relay {
            child,
            control: control.clone(),
        };
        let deadline = Instant::now() + LONG;
        while !r.control.exists() {
            if r.child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if r.control.exists() {
            return (r, port);
        }
        // Lost the race for the port: another one.
    }
    panic!("braid netem did not start");
}

#[test]
fn rate_on_command_holds_the_new_rate() {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap().port();
    let (r, port) = relay(to, &["--rate", "100mbit", "--queue", "50ms"], "cmd");
    for (bad, words) in [
        ("rate 0mbit", "above 0"),
        ("rate fast", "rate"),
        ("rate", "one rate"),
        ("rate 10", "unit"),
    ] {
        let reply = r.control(bad);
        assert!(
            reply.starts_with("error") && reply.contains(words),
            "{bad}: {reply}"
        );
    }
    // 800 kbit/s: 100 datagrams of 1000 bytes per second.
    assert_eq!(r.control("rate 800kbit"), "ok");
    let src = UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_nonblocking(true).unwrap();
    // Five times what the line carries, for 0.6 s, then 0.2 s to drain.
    let start = Instant::now();
    let (mut sent, mut got) = (0u64, 0u64);
    let mut buf = [0u8; 2048];
    while start.elapsed() < Duration::from_millis(800) {
        let due = start.elapsed().as_millis().min(600) as u64 / 2;
        while sent < due {
            src.send_to(&[7u8; 1000], ("127.0.0.1", port)).unwrap();
            sent += 1;
        }
        while sink.recv_from(&mut buf).is_ok() {
            got += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed = start.elapsed().as_secs_f64();
    // What 100 datagrams/s allow since the first was sent, plus one
    // already on the wire.
    let bound = (elapsed * 100.0).ceil() as u64 + 1;
    eprintln!("{got} of {sent} datagrams in {elapsed:.3} s through 800 kbit/s (bound {bound})");
    assert!(got >= 1, "nothing passed");
    assert!(got <= bound, "{got} datagrams passed, at most {bound} may");
    let stats: serde_json::Value = serde_json::from_str(&r.control("stats json")).unwrap();
    // Offered at five times the rate behind a 50 ms queue: most of it
    // was dropped there.
    let dropped = stats["up"]["dropped"]["queue"].as_u64().unwrap();
    assert!(dropped + got <= sent && dropped >= sent / 2, "{stats}");
}

#[test]
fn rate_at_is_checked_and_announced() {
    for (args, words) in [
        (vec!["--rate-at", "3s"], "needs a rate"),
        (vec!["--rate-at", "3s", "0kbit"], "above 0"),
        (vec!["--rate-at", "soon", "1mbit"], "--rate-at"),
    ] {
        let out = Command::new(BRAID)
            .args(["netem", "--listen", "127.0.0.1:9", "--to", "127.0.0.1:9"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains("--rate-at") && err.contains(words),
            "{args:?}: {err}"
        );
    }
    let help = Command::new(BRAID)
        .args(["netem", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--rate-at 3s 10mbit") && help.contains("rate 10mbit"));
}
