//! TUN offload against the real kernel: two network namespaces, each with
//! a braid-io TUN, joined by a userspace relay (TUN A read_batch -> TUN B
//! write_batch and back). A TCP transfer between the namespaces goes
//! through it, so the kernel's TSO super-packets are split on every read
//! and the segments coalesced again on every write. Needs root.
//!
//! The relay checks every packet it reads (length within the MTU, valid
//! IPv4 and TCP checksums) and the transfer checks every byte. Run with
//! offload on and off; `relay_throughput` (ignored, run it in release with
//! `--ignored --nocapture`) prints Gbit/s for both.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use braid_core::batch::{PacketBatch, HEADROOM, TAILROOM};
use braid_io::{wait, Interest, Offload, OffloadStats, Tun};

const MTU: usize = 1420;
const ADDR_A: &str = "198.19.77.1";
const ADDR_B: &str = "198.19.77.2";
/// Safety net against a hung transfer; a failure, not a performance bound.
const IO_TIMEOUT: Duration = Duration::from_secs(60);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A network namespace that is deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!(
            "bio-off-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        let ns = Netns(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.0];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// Runs `f` on a new thread that lives in this namespace (TUNs and
    /// sockets belong to the namespace of the thread that creates them).
    fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let path = format!("/run/netns/{}", self.0);
        thread::spawn(move || {
            let ns = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: setns on a valid namespace descriptor only changes
            // this thread's network namespace.
            let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TUN named `bt0` in `ns`, addressed `addr`/24, up, MTU [`MTU`].
fn tun_in(ns: &Netns, mode: Offload, addr: &str) -> Tun {
    let tun = ns
        .spawn(move || Tun::create_with("bt0", mode).unwrap())
        .join()
        .unwrap();
    ns.ip(&["link", "set", "bt0", "mtu", &MTU.to_string()]);
    ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", "bt0"]);
    ns.ip(&["link", "set", "bt0", "up"]);
    tun
}

/// Byte `i` of the test stream.
fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(7) ^ (i >> 11)) as u8
}

fn sum16(parts: &[&[u8]]) -> u32 {
    let mut sum = 0u32;
    let mut carry_byte: Option<u8> = None;
    for p in parts {
        for &b in *p {
            match carry_byte.take() {
                None => carry_byte = Some(b),
                Some(hi) => sum += u16::from_be_bytes([hi, b]) as u32,
            }
        }
    }
    if let Some(hi) = carry_byte {
        sum += (hi as u32) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// Problems found in one packet read from a TUN (`None`: fine).
fn check_packet(p: &[u8]) -> Option<String> {
    if p.len() > MTU {
        return Some(format!("{} bytes > MTU {MTU}", p.len()));
    }
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None; // IPv6 noise (router solicitations, MLD)
    }
    let ihl = (p[0] & 0xf) as usize * 4;
    if sum16(&[&p[..ihl]]) != 0xffff {
        return Some("bad IPv4 header checksum".into());
    }
    if u16::from_be_bytes([p[2], p[3]]) as usize != p.len() {
        return Some("IPv4 total length != packet length".into());
    }
    if p[9] == 6 {
        let l4 = &p[ihl..];
        let len = (l4.len() as u16).to_be_bytes();
        if sum16(&[&p[12..20], &[0, 6, len[0], len[1]], l4]) != 0xffff {
            return Some("bad TCP checksum".into());
        }
    }
    None
}

/// Moves packets A -> B and B -> A until `stop`, checking each one read.
struct Relay {
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<(Tun, Tun, Vec<String>)>>,
    moved: Arc<AtomicU64>,
}

impl Relay {
    fn start(a: Tun, b: Tun, check: bool, slots: usize) -> Relay {
        let stop = Arc::new(AtomicBool::new(false));
        let moved = Arc::new(AtomicU64::new(0));
        let (stop2, moved2) = (stop.clone(), moved.clone());
        let handle = thread::spawn(move || {
            // Slots only just MTU-sized: a segment longer than the MTU
            // would not fit.
            let mut batch = PacketBatch::new(slots, MTU + HEADROOM + TAILROOM);
            let mut problems = Vec::new();
            let fds = [
                (a.as_raw_fd(), Interest::READABLE),
                (b.as_raw_fd(), Interest::READABLE),
            ];
            while !stop2.load(Ordering::Relaxed) {
                wait(&fds, Some(Duration::from_millis(20))).unwrap();
                for (from, to) in [(&a, &b), (&b, &a)] {
                    // Drain, but also honour segments held back by a full batch.
                    loop {
                        let read = from.read_batch(&mut batch).unwrap();
                        let n = read.packets;
                        if n == 0 {
                            assert!(read.emptied, "an empty read must say the TUN was empty");
                            break;
                        }
                        if check {
                            for i in 0..n {
                                assert_eq!(batch.offset(i), HEADROOM);
                                if let Some(p) = check_packet(batch.packet(i)) {
                                    if problems.len() < 10 {
                                        problems.push(p);
                                    }
                                }
                            }
                        }
                        to.write_batch(&batch).unwrap();
                        moved2.fetch_add(n as u64, Ordering::Relaxed);
                        if n < batch.capacity() && !from.has_pending() {
                            break;
                        }
                    }
                }
            }
            (a, b, problems)
        });
        Relay {
            stop,
            handle: Some(handle),
            moved,
        }
    }

    fn finish(mut self) -> (Tun, Tun, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Two namespaces joined by the relay. Bind the result as `(a, b, relay)`
/// so the relay (and its TUNs) goes before the namespaces.
fn lab(mode: Offload, check: bool, slots: usize) -> (Netns, Netns, Relay) {
    let a = Netns::new();
    let b = Netns::new();
    let tun_a = tun_in(&a, mode, ADDR_A);
    let tun_b = tun_in(&b, mode, ADDR_B);
    let want = mode == Offload::Auto;
    assert_eq!(tun_a.offload_enabled(), want, "offload on this kernel");
    assert_eq!(tun_b.offload_enabled(), want);
    (a, b, Relay::start(tun_a, tun_b, check, slots))
}

/// Client in A sends `total` pattern bytes to a server in B, which echoes
/// them; both directions are checked byte for byte.
fn echo_transfer(a: &Netns, b: &Netns, total: u64) {
    let server_addr: SocketAddr = format!("{ADDR_B}:5201").parse().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = b.spawn(move || {
        let listener = TcpListener::bind(server_addr).unwrap();
        ready_tx.send(()).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        conn.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = 0u64;
        loop {
            let n = conn.read(&mut buf).expect("server read");
            if n == 0 {
                break;
            }
            for (k, &byte) in buf[..n].iter().enumerate() {
                assert_eq!(
                    byte,
                    pattern(got + k as u64),
                    "server: byte {}",
                    got + k as u64
                );
            }
            got += n as u64;
            conn.write_all(&buf[..n]).expect("server echo");
        }
        got
    });
    ready_rx.recv().unwrap();
    let client = a.spawn(move || {
        let conn = TcpStream::connect_timeout(&server_addr, IO_TIMEOUT).unwrap();
        conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        conn.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut reader = conn.try_clone().unwrap();
        let echo = thread::spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            let mut got = 0u64;
            loop {
                let n = reader.read(&mut buf).expect("client read");
                if n == 0 {
                    break;
                }
                for (k, &byte) in buf[..n].iter().enumerate() {
                    assert_eq!(
                        byte,
                        pattern(got + k as u64),
                        "echo: byte {}",
                        got + k as u64
                    );
                }
                got += n as u64;
            }
            got
        });
        let mut conn = conn;
        let mut chunk = vec![0u8; 1 << 20];
        let mut sent = 0u64;
        while sent < total {
            let n = chunk.len().min((total - sent) as usize);
            for (k, byte) in chunk[..n].iter_mut().enumerate() {
                *byte = pattern(sent + k as u64);
            }
            conn.write_all(&chunk[..n]).expect("client write");
            sent += n as u64;
        }
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        echo.join().unwrap()
    });
    assert_eq!(server.join().unwrap(), total, "bytes the server got");
    assert_eq!(client.join().unwrap(), total, "bytes echoed back");
}

fn relay_transfer(mode: Offload, slots: usize) -> (OffloadStats, OffloadStats) {
    let (a, b, relay) = lab(mode, true, slots);
    echo_transfer(&a, &b, 8 << 20);
    let (tun_a, tun_b, problems) = relay.finish();
    assert!(
        problems.is_empty(),
        "packets read from the TUNs: {problems:?}"
    );
    assert_eq!(tun_a.dropped() + tun_b.dropped(), 0, "drops in the relay");
    println!(
        "{mode:?}: A {:?}, B {:?}",
        tun_a.offload_stats(),
        tun_b.offload_stats()
    );
    (tun_a.offload_stats(), tun_b.offload_stats())
}

#[test]
fn relay_with_offload() {
    // 128 slots like the daemon.
    let (a, b) = relay_transfer(Offload::Auto, 128);
    // The kernel did hand over super-packets, and we wrote some back.
    for s in [a, b] {
        assert!(s.super_packets_read > 0, "{s:?}");
        assert!(s.segments_read > s.super_packets_read, "{s:?}");
        assert!(s.super_packets_written > 0, "{s:?}");
        assert!(s.segments_written > s.super_packets_written, "{s:?}");
    }
}

#[test]
fn relay_with_offload_and_small_batches() {
    // Fewer slots than a super-packet has segments: the rest of each waits
    // for the next read_batch (has_pending), none is lost.
    let (a, _) = relay_transfer(Offload::Auto, 7);
    assert!(a.segments_read > 7 * a.super_packets_read, "{a:?}");
}

#[test]
fn relay_without_offload() {
    let (a, b) = relay_transfer(Offload::Off, 128);
    assert_eq!(a, OffloadStats::default());
    assert_eq!(b, OffloadStats::default());
}

/// One TCP stream A -> B through the relay for a few seconds.
fn stream_gbps(mode: Offload, seconds: u64) -> f64 {
    let (a, b, relay) = lab(mode, false, 128);
    let server_addr: SocketAddr = format!("{ADDR_B}:5202").parse().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = b.spawn(move || {
        let listener = TcpListener::bind(server_addr).unwrap();
        ready_tx.send(()).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        let start = Instant::now();
        loop {
            let n = conn.read(&mut buf).expect("server read");
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        got as f64 * 8.0 / start.elapsed().as_secs_f64() / 1e9
    });
    ready_rx.recv().unwrap();
    a.spawn(move || {
        let mut conn = TcpStream::connect_timeout(&server_addr, IO_TIMEOUT).unwrap();
        conn.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let chunk = vec![0x5au8; 1 << 20];
        let end = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < end {
            conn.write_all(&chunk).expect("client write");
        }
    })
    .join()
    .unwrap();
    let gbps = server.join().unwrap();
    let moved = relay.moved.load(Ordering::Relaxed);
    let (tun_a, tun_b, _) = relay.finish();
    println!(
        "offload {mode:?}: {gbps:.2} Gbit/s, {moved} packets relayed, A {:?}, B {:?}",
        tun_a.offload_stats(),
        tun_b.offload_stats()
    );
    gbps
}

#[test]
#[ignore = "a measurement: cargo test --release -p braid-io --test tun_offload -- --ignored --nocapture"]
fn relay_throughput() {
    let on = stream_gbps(Offload::Auto, 4);
    let off = stream_gbps(Offload::Off, 4);
    println!(
        "one TCP stream through the two-TUN relay: offload {on:.2} Gbit/s, plain {off:.2} Gbit/s"
    );
}
