//! A real TUN interface: kernel -> TUN -> read_batch, write_batch -> TUN ->
//! kernel. Needs root (CAP_NET_ADMIN) and /dev/net/tun.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

use braid_core::batch::{PacketBatch, HEADROOM, TAILROOM};
use braid_io::{netcfg, wait, Interest, Tun};

/// Deletes the interface even when the test panics before the `Tun` is
/// dropped on purpose (dropping the `Tun` alone would do, but this also
/// covers a leak through a bug in the code under test).
struct LinkGuard(String);

impl Drop for LinkGuard {
    fn drop(&mut self) {
        if netcfg::link_exists(&self.0) {
            let _ = Command::new("ip").args(["link", "del", &self.0]).status();
        }
    }
}

/// Held by each test from picking its subnet until its interface is gone:
/// two tests of this file run at once would otherwise pick the same /24
/// (neither has added its address yet) and route into each other's TUN.
static SUBNET: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn hold_subnets() -> std::sync::MutexGuard<'static, ()> {
    SUBNET.lock().unwrap_or_else(|e| e.into_inner())
}

/// A 198.19.x.0/24 that no interface uses yet, derived from our pid.
fn free_subnet() -> u8 {
    let start = std::process::id() as usize;
    for k in 0..250 {
        let x = ((start + k) % 250 + 1) as u8;
        let out = Command::new("ip")
            .args([
                "-4",
                "route",
                "show",
                "to",
                "match",
                &format!("198.19.{x}.1"),
            ])
            .output()
            .unwrap();
        // Only a default route (or nothing) matches: the /24 is free.
        let taken = String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| !l.starts_with("default"));
        if !taken {
            return x;
        }
    }
    panic!("no free 198.19.x.0/24");
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// IPv4 + UDP (checksum 0) into `out`; returns the length.
fn build_udp4(
    out: &mut [u8],
    src: Ipv4Addr,
    sport: u16,
    dst: Ipv4Addr,
    dport: u16,
    payload: &[u8],
) -> usize {
    let total = 20 + 8 + payload.len();
    let p = &mut out[..total];
    p[0] = 0x45;
    p[1] = 0;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
    p[8] = 64;
    p[9] = 17;
    p[10..12].fill(0);
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[26..28].fill(0);
    p[28..].copy_from_slice(payload);
    total
}

#[test]
fn tun_round_trip() {
    let _subnets = hold_subnets();
    let want = format!("bio{}t", std::process::id());
    if netcfg::link_exists(&want) {
        netcfg::link_del(&want).unwrap();
    }
    let tun = Tun::create(&want).unwrap();
    let _guard = LinkGuard(want.clone());
    assert_eq!(tun.name(), want);
    let name = want.as_str();
    assert!(netcfg::link_exists(name));

    let x = free_subnet();
    let local = Ipv4Addr::new(198, 19, x, 1);
    let remote = Ipv4Addr::new(198, 19, x, 2);
    netcfg::link_set_mtu(name, 1400).unwrap();
    assert_eq!(netcfg::link_mtu(name).unwrap(), 1400);
    netcfg::addr_add(name, &format!("{local}/24")).unwrap();
    netcfg::addr_add(name, &format!("{local}/24")).unwrap(); // idempotent
    netcfg::link_set_up(name).unwrap();

    // --- kernel -> TUN -> read_batch ---
    let sock = StdUdpSocket::bind(SocketAddr::from((local, 0))).unwrap();
    let lport = sock.local_addr().unwrap().port();
    sock.send_to(b"hello from the kernel", (remote, 9999))
        .unwrap();

    let stride = 1400 + HEADROOM + TAILROOM;
    let mut batch = PacketBatch::new(16, stride);
    let fds = [(tun.as_raw_fd(), Interest::READABLE)];
    let mut found = false;
    while !found {
        let r = wait(&fds, Some(Duration::from_secs(30))).unwrap();
        assert!(!r.is_timeout(), "the datagram never reached the TUN");
        let n = tun.read_batch(&mut batch).unwrap().packets;
        assert_eq!(n, batch.len());
        for i in 0..n {
            assert_eq!(batch.offset(i), HEADROOM);
            let p = batch.packet(i);
            // Skip anything else the kernel sends (IPv6 router solicitations, MLD...).
            if p[0] >> 4 != 4 || p[9] != 17 || p[16..20] != remote.octets() {
                continue;
            }
            assert_eq!(&p[12..16], &local.octets());
            let ihl = (p[0] & 0xf) as usize * 4;
            assert_eq!(checksum(&p[..ihl]), 0, "kernel's header checksum");
            let udp = &p[ihl..];
            assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), lport);
            assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 9999);
            assert_eq!(&udp[8..], b"hello from the kernel");
            found = true;
        }
    }
    // Nothing ready: 0 packets and the TUN reported empty, not an error.
    loop {
        let read = tun.read_batch(&mut batch).unwrap();
        if read.packets == 0 {
            assert!(read.emptied, "an empty read must say the TUN was empty");
            break;
        }
    }
    assert!(batch.is_empty());

    // --- a packet longer than the slot is dropped, not truncated ---
    let mut small = PacketBatch::new(4, 300 + HEADROOM + TAILROOM);
    let dropped_before = tun.dropped();
    sock.send_to(&[7u8; 1000], (remote, 9999)).unwrap();
    sock.send_to(b"short", (remote, 9999)).unwrap();
    let mut found = false;
    while !found {
        let r = wait(&fds, Some(Duration::from_secs(30))).unwrap();
        assert!(!r.is_timeout(), "the short datagram never reached the TUN");
        tun.read_batch(&mut small).unwrap();
        for i in 0..small.len() {
            let p = small.packet(i);
            assert!(p.len() <= 300);
            if p[0] >> 4 == 4 && p[9] == 17 && p[16..20] == remote.octets() {
                assert_eq!(&p[28..], b"short");
                found = true;
            }
        }
    }
    assert!(tun.dropped() > dropped_before);

    // --- with offload, a packet longer than the slots waits for bigger
    // ones (an MTU raised under a running reader) and comes first ---
    if tun.offload_enabled() {
        sock.send_to(&[9u8; 1000], (remote, 9999)).unwrap();
        let mut oversize = None;
        while oversize.is_none() {
            let r = wait(&fds, Some(Duration::from_secs(30))).unwrap();
            assert!(!r.is_timeout(), "the long datagram never reached the TUN");
            oversize = tun.read_batch(&mut small).unwrap().oversize;
        }
        assert_eq!(oversize, Some(1028));
        assert!(tun.has_pending(), "it waits in the TUN's scratch");
        let read = tun.read_batch(&mut batch).unwrap();
        assert!(read.packets >= 1 && read.oversize.is_none());
        let p = batch.packet(0);
        assert_eq!(p.len(), 1028);
        assert_eq!(&p[16..20], &remote.octets());
        assert!(p[28..].iter().all(|&b| b == 9));
        assert!(!tun.has_pending());
    }

    // --- write_batch -> TUN -> kernel ---
    let dropped_before = tun.dropped();
    let mut batch = PacketBatch::new(4, stride);
    // A malformed packet (not IPv4/IPv6: EINVAL) must not abort the batch.
    batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
        b[..8].fill(0);
        8
    });
    // A consumed slot is skipped.
    batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
        build_udp4(b, remote, 4242, local, lport, b"not me")
    });
    batch.consume(1);
    batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
        build_udp4(b, remote, 4242, local, lport, b"hello from the tunnel")
    });
    assert_eq!(tun.write_batch(&batch).unwrap(), 1);
    assert_eq!(tun.dropped(), dropped_before + 1);

    let r = wait(
        &[(sock.as_raw_fd(), Interest::READABLE)],
        Some(Duration::from_secs(5)),
    )
    .unwrap();
    assert!(
        r.is_readable(0),
        "the packet written to the TUN never arrived"
    );
    let mut buf = [0u8; 256];
    let (n, from) = sock.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello from the tunnel");
    assert_eq!(from, SocketAddr::from((remote, 4242)));

    // --- routes ---
    let dest = format!("198.18.{x}.0/24");
    netcfg::route_add(&dest, name, None).unwrap();
    netcfg::route_add(&dest, name, None).unwrap(); // replace: idempotent
    let show = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(show(&["-4", "route", "show", "dev", name]).contains(&dest));
    netcfg::route_add(&dest, name, Some(51820 + x as u32)).unwrap();
    let table = (51820 + x as u32).to_string();
    assert!(show(&["-4", "route", "show", "table", &table]).contains(&dest));
    netcfg::route_del(&dest, name, Some(51820 + x as u32)).unwrap();
    netcfg::route_del(&dest, name, None).unwrap();
    assert!(!show(&["-4", "route", "show", "dev", name]).contains(&dest));
    let e = netcfg::route_del(&dest, name, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("ip -4 route del {dest} dev {name}")),
        "{e}"
    );

    if std::path::Path::new("/proc/sys/net/ipv6").exists() {
        let a6 = format!("2001:db8:{x:x}::1/64");
        netcfg::addr_add(name, &a6).unwrap();
        assert!(show(&["-6", "addr", "show", "dev", name]).contains(&format!("2001:db8:{x:x}::1")));
        let d6 = format!("2001:db8:{x:x}:1::/64");
        netcfg::route_add(&d6, name, None).unwrap();
        assert!(show(&["-6", "route", "show", "dev", name]).contains(&d6));
        netcfg::route_del(&d6, name, None).unwrap();
    }

    // --- closing the descriptor removes the interface ---
    drop(tun);
    // The kernel removes it asynchronously; give a loaded machine 20 s.
    for _ in 0..2000 {
        if !netcfg::link_exists(name) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !netcfg::link_exists(name),
        "the TUN outlived its descriptor"
    );
}

#[test]
fn rejects_bad_names() {
    assert!(Tun::create("0123456789abcdef").is_err());
    assert!(Tun::create("a/b").is_err());
}

/// With several queues, the kernel hands the packets of a flow leaving the
/// interface to the queue that flow's packets were written to: what makes
/// one pipeline per queue keep each flow in order.
#[test]
fn multi_queue_flows_come_back_on_the_queue_they_were_written_to() {
    let _subnets = hold_subnets();
    for (mode, tag) in [
        (braid_io::Offload::Auto, 'a'),
        (braid_io::Offload::Off, 'p'),
    ] {
        let want = format!("bio{}q{tag}", std::process::id());
        let tun = Tun::create_queues(&want, mode, 2).unwrap();
        let _guard = LinkGuard(want.clone());
        assert_eq!(tun.queue_count(), 2);
        let name = want.as_str();
        let x = free_subnet();
        let local = Ipv4Addr::new(198, 19, x, 1);
        let remote = Ipv4Addr::new(198, 19, x, 2);
        netcfg::addr_add(name, &format!("{local}/24")).unwrap();
        netcfg::link_set_up(name).unwrap();

        let stride = 1500 + HEADROOM + TAILROOM;
        let mut batch = PacketBatch::new(16, stride);
        let mut used = [0usize; 2];
        // 24 flows: all on one queue by chance once in 8 million runs.
        for flow in 0..24u16 {
            let sock = StdUdpSocket::bind(SocketAddr::from((local, 0))).unwrap();
            let lport = sock.local_addr().unwrap().port();
            let rport = 40000 + flow;
            let mut inbound = PacketBatch::new(1, stride);
            inbound.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
                build_udp4(b, remote, rport, local, lport, b"in")
            });
            let queue = tun.queue_for_packet(inbound.packet(0));
            assert_eq!(tun.write_batch(&inbound).unwrap(), 1);
            let mut buf = [0u8; 64];
            sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let (n, _) = sock
                .recv_from(&mut buf)
                .expect("the written packet arrives");
            assert_eq!(&buf[..n], b"in");
            sock.send_to(b"out", (remote, rport)).unwrap();
            let fds = [
                (tun.queue_fd(0), Interest::READABLE),
                (tun.queue_fd(1), Interest::READABLE),
            ];
            let mut came_on = None;
            while came_on.is_none() {
                let r = wait(&fds, Some(Duration::from_secs(30))).unwrap();
                assert!(!r.is_timeout(), "flow {flow}'s answer never left the TUN");
                for q in 0..2 {
                    if !r.is_readable(q) {
                        continue;
                    }
                    tun.read_batch_on(q, &mut batch).unwrap();
                    for i in 0..batch.len() {
                        let p = batch.packet(i);
                        let ours = p[0] >> 4 == 4
                            && p[9] == 17
                            && p[16..20] == remote.octets()
                            && u16::from_be_bytes([p[22], p[23]]) == rport;
                        if ours {
                            came_on = Some(q);
                        }
                    }
                }
            }
            assert_eq!(came_on, Some(queue), "flow {flow} ({mode:?})");
            used[queue] += 1;
        }
        assert!(used[0] > 0 && used[1] > 0, "flows per queue: {used:?}");
    }
}

#[test]
fn queue_counts_out_of_range_are_refused() {
    let e = Tun::create_queues("bioq0", braid_io::Offload::Auto, 0).unwrap_err();
    assert!(e.to_string().contains("expected 1-64"), "{e}");
    let e = Tun::create_queues("bioq0", braid_io::Offload::Auto, 65).unwrap_err();
    assert!(e.to_string().contains("65 TUN queues"), "{e}");
}
