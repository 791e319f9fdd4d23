//! UDP GSO on send and GRO on receive, over loopback: whatever the kernel
//! coalesces or segments, every datagram arrives whole, once, and in order
//! per destination, exactly as without the offloads.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use braid_core::batch::PacketBatch;
use braid_io::{wait, Interest, UdpSocket};

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);
const BATCH: usize = 128;
const STRIDE: usize = 2048;

/// A small deterministic generator (no rand dependency).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Datagram `id`: its id, then bytes derived from it.
fn fill(id: u32, out: &mut [u8]) {
    out[..4].copy_from_slice(&id.to_le_bytes());
    for (j, b) in out[4..].iter_mut().enumerate() {
        *b = (id as usize * 31 + j * 7) as u8;
    }
}

/// The id of a received datagram, after checking its bytes.
fn verify(pkt: &[u8]) -> u32 {
    assert!(pkt.len() >= 4, "datagram of {} bytes", pkt.len());
    let id = u32::from_le_bytes(pkt[..4].try_into().unwrap());
    let mut want = vec![0; pkt.len()];
    fill(id, &mut want);
    assert_eq!(pkt, &want[..], "contents of datagram {id}");
    id
}

/// Fills `batch` with 128 datagrams in runs: a run goes to one destination
/// with one size, sometimes ended by a shorter datagram, sometimes cut by a
/// longer one; some slots get copies to other destinations on other lines.
/// Returns the ids in the order each (line, destination) should see them.
fn make_batch(
    batch: &mut PacketBatch,
    rng: &mut Lcg,
    next_id: &mut u32,
    dests: &[SocketAddr],
    lines: u16,
    expected: &mut HashMap<(u16, SocketAddr), Vec<u32>>,
) {
    const SIZES: [usize; 6] = [8, 60, 200, 1000, 1400, 1452];
    batch.clear();
    while batch.len() < BATCH {
        let dest = dests[rng.below(dests.len())];
        let line = rng.below(lines as usize) as u16;
        let size = SIZES[rng.below(SIZES.len())];
        let run = 1 + rng.below(80);
        for k in 0..run {
            if batch.is_full() {
                break;
            }
            let len = match rng.below(10) {
                0 if k + 1 == run => 4 + rng.below(size.max(5) - 4),
                1 => SIZES[rng.below(SIZES.len())],
                _ => size,
            };
            let id = *next_id;
            *next_id += 1;
            let i = batch.len();
            batch.push_with(0, dest, |buf| {
                fill(id, &mut buf[..len]);
                len
            });
            batch.set_line(i, line);
        }
    }
    for i in 0..BATCH {
        if rng.below(8) == 0 {
            let line = rng.below(lines as usize) as u16;
            let dest = dests[rng.below(dests.len())];
            assert!(batch.add_copy(i, line, dest));
        }
    }
    // Sending order: the slots, then the copies.
    for i in 0..batch.len() {
        let id = u32::from_le_bytes(batch.packet(i)[..4].try_into().unwrap());
        expected
            .entry((batch.line(i), batch.addr(i)))
            .or_default()
            .push(id);
    }
    for c in batch.copies() {
        let id = u32::from_le_bytes(batch.packet(c.slot)[..4].try_into().unwrap());
        expected.entry((c.line, c.addr)).or_default().push(id);
    }
}

/// Receives from `sock` until `want` datagrams arrived, with a batch of
/// `cap` slots; returns (source, id) in arrival order.
fn receive(sock: &UdpSocket, want: usize, cap: usize) -> Vec<(SocketAddr, u32)> {
    let mut batch = PacketBatch::new(cap, STRIDE);
    let mut got = Vec::with_capacity(want);
    while got.len() < want {
        // Datagrams split from a coalesced message may wait in the
        // socket's scratch while the socket itself has nothing.
        if !sock.has_pending() {
            let r = wait(
                &[(sock.as_raw_fd(), Interest::READABLE)],
                Some(Duration::from_secs(5)),
            )
            .unwrap();
            assert!(
                !r.is_timeout(),
                "only {} of {want} datagrams arrived",
                got.len()
            );
        }
        let n = sock.recv_batch(&mut batch).unwrap();
        assert_eq!(n, batch.len());
        // Slots a coalesced message did not need stay empty.
        for i in (0..n).filter(|&i| !batch.packet(i).is_empty()) {
            assert_eq!(batch.offset(i), 0);
            got.push((batch.addr(i), verify(batch.packet(i))));
        }
    }
    got
}

/// Sends `rounds` batches from `senders` (line i sends on `senders[i]`)
/// to `receivers` over v4 and v6 loopback and checks what each receiver
/// got, per source, against the sending order.
fn exchange(senders: &[UdpSocket], receivers: &[UdpSocket], rounds: usize, recv_cap: usize) {
    let dests: Vec<SocketAddr> = receivers
        .iter()
        .flat_map(|r| [V4, V6].map(|ip| SocketAddr::new(ip, r.local_port())))
        .collect();
    let mut rng = Lcg(0x5eed);
    let mut next_id = 0;
    let mut batch = PacketBatch::new(BATCH, STRIDE);
    for _ in 0..rounds {
        let mut expected = HashMap::new();
        make_batch(
            &mut batch,
            &mut rng,
            &mut next_id,
            &dests,
            senders.len() as u16,
            &mut expected,
        );
        let mut total = 0;
        for (line, s) in senders.iter().enumerate() {
            let want: usize = expected
                .iter()
                .filter(|((l, _), _)| *l == line as u16)
                .map(|(_, ids)| ids.len())
                .sum();
            let sent = if senders.len() == 1 {
                s.send_batch(&batch).unwrap()
            } else {
                s.send_batch_on_line(&batch, line as u16).unwrap()
            };
            assert_eq!(sent, want, "datagrams sent on line {line}");
            assert_eq!(s.dropped(), 0);
            total += want;
        }
        let mut arrived = 0;
        for r in receivers {
            // What this receiver should get, keyed by the source it sees.
            let mut want: HashMap<SocketAddr, Vec<u32>> = HashMap::new();
            for ((line, dest), ids) in &expected {
                if dest.port() == r.local_port() {
                    let src = SocketAddr::new(dest.ip(), senders[*line as usize].local_port());
                    want.entry(src).or_default().extend(ids);
                }
            }
            let count = want.values().map(Vec::len).sum();
            let mut got: HashMap<SocketAddr, Vec<u32>> = HashMap::new();
            for (src, id) in receive(r, count, recv_cap) {
                got.entry(src).or_default().push(id);
            }
            assert_eq!(got, want, "datagrams per source at port {}", r.local_port());
            arrived += count;
        }
        assert_eq!(arrived, total);
    }
    for r in receivers {
        let mut b = PacketBatch::new(8, STRIDE);
        assert_eq!(r.recv_batch(&mut b).unwrap(), 0, "nothing more queued");
        assert!(!r.has_pending());
    }
}

/// A receiver with GRO and one without.
fn receivers() -> [UdpSocket; 2] {
    let gro = UdpSocket::bind(0).unwrap();
    let plain = UdpSocket::bind(0).unwrap();
    plain.set_gro(false).unwrap();
    assert!(!plain.gro_enabled());
    [gro, plain]
}

#[test]
fn offloads_are_available_here() {
    let s = UdpSocket::bind(0).unwrap();
    assert!(s.gso_enabled(), "this kernel has UDP_SEGMENT");
    assert!(s.gro_enabled(), "this kernel has UDP_GRO");
    s.disable_gso();
    assert!(!s.gso_enabled());
}

#[test]
fn mixed_batches_arrive_whole_and_in_order_with_gso() {
    let sender = UdpSocket::bind(0).unwrap();
    // Smaller than a coalesced run: split datagrams wait for the next call.
    exchange(&[sender], &receivers(), 20, 24);
    let sender = UdpSocket::bind(0).unwrap();
    exchange(&[sender], &receivers(), 5, 128);
}

#[test]
fn mixed_batches_arrive_identically_without_gso() {
    let sender = UdpSocket::bind(0).unwrap();
    sender.disable_gso();
    exchange(&[sender], &receivers(), 20, 24);
    let sender = UdpSocket::bind(0).unwrap();
    sender.disable_gso();
    exchange(&[sender], &receivers(), 5, 128);
}

#[test]
fn lines_and_copies_with_gso() {
    let lines = [
        UdpSocket::bind(0).unwrap(),
        UdpSocket::bind(0).unwrap(),
        UdpSocket::bind(0).unwrap(),
    ];
    lines[2].disable_gso();
    exchange(&lines, &receivers(), 10, 32);
}

#[test]
fn a_coalesced_run_outlasting_the_batch_is_handed_out_next_call() {
    let sender = UdpSocket::bind(0).unwrap();
    let receiver = UdpSocket::bind(0).unwrap();
    let to = SocketAddr::new(V4, receiver.local_port());
    let mut batch = PacketBatch::new(BATCH, STRIDE);
    for id in 0..64 {
        batch.push_with(0, to, |buf| {
            fill(id, &mut buf[..1000]);
            1000
        });
    }
    assert_eq!(sender.send_batch(&batch).unwrap(), 64);
    // Loopback hands the 64-segment GSO message to a GRO socket whole.
    let got = receive(&receiver, 10, 10);
    assert!(
        receiver.has_pending(),
        "54 datagrams of the coalesced message wait"
    );
    let rest = receive(&receiver, 54, 10);
    let ids: Vec<u32> = got.iter().chain(&rest).map(|g| g.1).collect();
    assert_eq!(ids, (0..64).collect::<Vec<_>>());
    assert!(!receiver.has_pending());
}

#[test]
fn timestamps_reach_every_split_datagram() {
    let sender = UdpSocket::bind(0).unwrap();
    let receiver = UdpSocket::bind(0).unwrap();
    receiver.enable_rx_timestamps().unwrap();
    let to = SocketAddr::new(V6, receiver.local_port());
    let mut batch = PacketBatch::new(BATCH, STRIDE);
    for id in 0..100 {
        batch.push_with(0, to, |buf| {
            fill(id, &mut buf[..500]);
            500
        });
    }
    assert_eq!(sender.send_batch(&batch).unwrap(), 100);
    let mut rx = PacketBatch::new(BATCH, STRIDE);
    let mut times = [None; BATCH];
    let mut ids = Vec::new();
    while ids.len() < 100 {
        if !receiver.has_pending() {
            let r = wait(
                &[(receiver.as_raw_fd(), Interest::READABLE)],
                Some(Duration::from_secs(5)),
            )
            .unwrap();
            assert!(!r.is_timeout());
        }
        let n = receiver.recv_batch_timed(&mut rx, &mut times).unwrap();
        for (i, time) in times.iter().enumerate().take(n) {
            if rx.packet(i).is_empty() {
                continue;
            }
            ids.push(verify(rx.packet(i)));
            assert!(time.is_some(), "datagram {} has a timestamp", ids.len());
        }
    }
    assert_eq!(ids, (0..100).collect::<Vec<_>>());
}

/// Runs `f` on a thread in a network namespace of its own (gone when the
/// thread ends), with loopback up at `mtu`.
fn in_private_netns<T: Send + 'static>(
    mtu: u32,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    std::thread::spawn(move || {
        // SAFETY: unshare takes no pointers; it moves only this thread.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            eprintln!(
                "skipped: unshare(CLONE_NEWNET): {}",
                std::io::Error::last_os_error()
            );
            return None;
        }
        let ok = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up", "mtu", &mtu.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip link set lo up in the private namespace");
        Some(f())
    })
    .join()
    .unwrap()
}

/// 128 datagrams to `to`, in runs of two 1400-byte ones and a 100-byte
/// one.
fn runs_of_three(to: SocketAddr) -> PacketBatch {
    let mut batch = PacketBatch::new(BATCH, STRIDE);
    for id in 0..BATCH as u32 {
        let len = if id % 3 == 2 { 100 } else { 1400 };
        batch.push_with(0, to, |buf| {
            fill(id, &mut buf[..len]);
            len
        });
    }
    batch
}

#[test]
fn segments_above_the_mtu_go_singly_and_gso_stays_on() {
    // The kernel refuses a GSO message whose segments exceed the path MTU
    // (EMSGSIZE) but fragments the same datagrams sent one by one.
    let result = in_private_netns(1280, || {
        let sender = UdpSocket::bind(0).unwrap();
        let receiver = UdpSocket::bind(0).unwrap();
        assert!(sender.gso_enabled());
        let to = SocketAddr::new(V4, receiver.local_port());
        let sent = sender.send_batch(&runs_of_three(to)).unwrap();
        let ids: Vec<u32> = receive(&receiver, BATCH, BATCH)
            .into_iter()
            .map(|g| g.1)
            .collect();
        (sent, sender.dropped(), sender.gso_enabled(), ids)
    });
    let Some((sent, dropped, gso, ids)) = result else {
        return;
    };
    assert_eq!((sent, dropped), (BATCH, 0));
    assert!(gso, "an oversized message says nothing about GSO itself");
    assert_eq!(ids, (0..BATCH as u32).collect::<Vec<_>>());
}

#[test]
fn kernel_refusing_gso_switches_it_off_without_losing_the_batch() {
    let sender = UdpSocket::bind(0).unwrap();
    let receiver = UdpSocket::bind(0).unwrap();
    // Without UDP checksums the kernel refuses every GSO message (EINVAL),
    // as a driver without checksum offload would (EIO).
    let one: libc::c_int = 1;
    // SAFETY: passes a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            sender.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_NO_CHECK: {}", std::io::Error::last_os_error());
    assert!(sender.gso_enabled());
    let to = SocketAddr::new(V4, receiver.local_port());
    assert_eq!(sender.send_batch(&runs_of_three(to)).unwrap(), BATCH);
    assert_eq!(sender.dropped(), 0);
    assert!(
        !sender.gso_enabled(),
        "GSO is off after the kernel refused it"
    );
    let ids: Vec<u32> = receive(&receiver, BATCH, BATCH)
        .into_iter()
        .map(|g| g.1)
        .collect();
    assert_eq!(ids, (0..BATCH as u32).collect::<Vec<_>>());
}

/// Sends 1400-byte datagrams as fast as one thread can for about 2 s while
/// another receives them; prints rates and CPU time. Compare with
/// `cargo test --release -p braid-io --test udp_offload -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput_with_and_without_offloads() {
    let on_off = |on| if on { "on " } else { "off" };
    for (gso, gro) in [(true, true), (false, false), (true, false), (false, true)] {
        let (sent, datagrams, bytes, secs, cpu) = blast(gso, gro, Duration::from_secs(2));
        println!(
            "GSO {} GRO {}: {:>9.0} datagrams/s received ({:.1}% of sent) {:>6.2} Gbit/s, CPU {:.2} s in {:.2} s ({:.0} ns CPU per datagram)",
            on_off(gso),
            on_off(gro),
            datagrams as f64 / secs,
            100.0 * datagrams as f64 / sent.max(1) as f64,
            bytes as f64 * 8.0 / secs / 1e9,
            cpu,
            secs,
            cpu * 1e9 / datagrams.max(1) as f64,
        );
    }
}

/// CPU time of the whole process so far (user + system), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// (datagrams sent, datagrams received, bytes received, seconds, CPU
/// seconds).
fn blast(gso: bool, gro: bool, run: Duration) -> (u64, u64, u64, f64, f64) {
    const LEN: usize = 1400;
    let sender = UdpSocket::bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    let receiver = UdpSocket::bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    if !gso {
        sender.disable_gso();
    }
    receiver.set_gro(gro).unwrap();
    let to = SocketAddr::new(V4, receiver.local_port());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let rx = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut batch = PacketBatch::new(BATCH, STRIDE);
            let (mut n, mut bytes) = (0u64, 0u64);
            loop {
                if !receiver.has_pending() {
                    let r = wait(
                        &[(receiver.as_raw_fd(), Interest::READABLE)],
                        Some(Duration::from_millis(200)),
                    )
                    .unwrap();
                    if r.is_timeout() && stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return (n, bytes);
                    }
                }
                let k = receiver.recv_batch(&mut batch).unwrap();
                let full = (0..k).filter(|&i| !batch.packet(i).is_empty());
                n += full.clone().count() as u64;
                bytes += full.map(|i| batch.packet(i).len() as u64).sum::<u64>();
            }
        })
    };
    let mut batch = PacketBatch::new(BATCH, STRIDE);
    for id in 0..BATCH as u32 {
        batch.push_with(0, to, |buf| {
            fill(id, &mut buf[..LEN]);
            LEN
        });
    }
    let mut sent = 0;
    while start.elapsed() < run {
        sent += sender.send_batch(&batch).unwrap() as u64;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (n, bytes) = rx.join().unwrap();
    // The receiver's last idle 200 ms wait is not part of the transfer.
    let secs = start.elapsed().as_secs_f64() - 0.2;
    (sent, n, bytes, secs, cpu_seconds() - cpu0)
}
