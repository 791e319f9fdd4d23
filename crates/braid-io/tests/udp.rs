//! Batched UDP over loopback: sendmmsg out, recvmmsg in.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use braid_core::batch::PacketBatch;
use braid_io::{wait, Interest, UdpSocket};

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

/// Datagram `i`: its index, then a pattern; sizes vary from 2 to ~1400.
fn payload(i: usize, out: &mut [u8]) -> usize {
    let len = 2 + (i * 97) % 1399;
    out[0] = i as u8;
    out[1] = (i >> 8) as u8;
    for (j, b) in out[2..len].iter_mut().enumerate() {
        *b = (i + j * 7) as u8;
    }
    len
}

fn check(pkt: &[u8]) -> usize {
    let i = pkt[0] as usize | (pkt[1] as usize) << 8;
    let mut want = [0u8; 2048];
    let len = payload(i, &mut want);
    assert_eq!(pkt.len(), len, "length of datagram {i}");
    assert_eq!(pkt, &want[..len], "contents of datagram {i}");
    i
}

/// Receives until `n` datagrams arrived (or a 5 s poll finds nothing) and
/// returns (index, source) for each.
fn recv_n(sock: &UdpSocket, n: usize, batch_cap: usize) -> Vec<(usize, SocketAddr)> {
    let mut batch = PacketBatch::new(batch_cap, 2048);
    let mut got = Vec::new();
    while got.len() < n {
        let r = wait(
            &[(sock.as_raw_fd(), Interest::READABLE)],
            Some(Duration::from_secs(30)),
        )
        .unwrap();
        assert!(
            !r.is_timeout(),
            "only {} of {n} datagrams arrived",
            got.len()
        );
        let k = sock.recv_batch(&mut batch).unwrap();
        assert_eq!(k, batch.len());
        // Slots a coalesced message did not need stay empty.
        for i in (0..k).filter(|&i| !batch.packet(i).is_empty()) {
            assert_eq!(batch.offset(i), 0);
            got.push((check(batch.packet(i)), batch.addr(i)));
        }
    }
    got
}

#[test]
fn batch_of_64_over_v4_and_v6_loopback() {
    let a = UdpSocket::bind(0).unwrap();
    let b = UdpSocket::bind(0).unwrap();
    assert!(a.is_ipv6(), "dual-stack socket expected on this host");
    let (pa, pb) = (a.local_port(), b.local_port());
    assert_ne!(pb, 0);

    let mut batch = PacketBatch::new(64, 2048);
    for i in 0..64 {
        let ip = if i % 2 == 0 { V4 } else { V6 };
        assert!(batch.push_with(0, SocketAddr::new(ip, pb), |buf| payload(i, buf)));
    }
    assert_eq!(a.send_batch(&batch).unwrap(), 64);
    assert_eq!(a.dropped(), 0);

    // A batch smaller than what is queued: several recvmmsg calls.
    let mut got = recv_n(&b, 64, 16);
    got.sort_by_key(|g| g.0);
    for (i, (idx, src)) in got.into_iter().enumerate() {
        assert_eq!(idx, i);
        let ip = if i % 2 == 0 { V4 } else { V6 };
        // IPv4 arrives as V4, not as ::ffff:127.0.0.1.
        assert_eq!(src, SocketAddr::new(ip, pa), "source of datagram {i}");
    }
    // Nothing else queued.
    let mut batch = PacketBatch::new(8, 2048);
    assert_eq!(b.recv_batch(&mut batch).unwrap(), 0);
    assert!(batch.is_empty());
}

#[test]
fn skips_empty_slots_and_per_destination_errors() {
    let a = UdpSocket::bind(0).unwrap();
    let v4only = UdpSocket::bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(!v4only.is_ipv6());
    let b = UdpSocket::bind(0).unwrap();
    let to_b = SocketAddr::new(V4, b.local_port());

    // Slots: ok, consumed, too big for UDP (EMSGSIZE), ok, ok to IPv6.
    let mut batch = PacketBatch::new(5, 70_000);
    batch.push_with(0, to_b, |buf| payload(0, buf));
    batch.push_with(0, to_b, |buf| payload(1, buf));
    batch.consume(1);
    batch.push_with(0, to_b, |buf| {
        buf[..66_000].fill(0xee);
        66_000
    });
    batch.push_with(0, to_b, |buf| payload(3, buf));
    batch.push_with(0, SocketAddr::new(V6, b.local_port()), |buf| {
        payload(4, buf)
    });
    assert_eq!(a.send_batch(&batch).unwrap(), 3);
    assert_eq!(a.dropped(), 1);
    let mut got: Vec<usize> = recv_n(&b, 3, 8).into_iter().map(|g| g.0).collect();
    got.sort();
    assert_eq!(got, [0, 3, 4]);

    // An IPv4-only socket cannot reach an IPv6 peer: that one is dropped.
    assert_eq!(v4only.send_batch(&batch).unwrap(), 2);
    assert_eq!(v4only.dropped(), 2);
    let got = recv_n(&b, 2, 8);
    for (_, src) in got {
        assert_eq!(src, SocketAddr::new(V4, v4only.local_port()));
    }
}

#[test]
fn truncated_datagram_leaves_slot_empty() {
    let a = UdpSocket::bind(0).unwrap();
    let b = UdpSocket::bind(0).unwrap();
    let mut out = PacketBatch::new(2, 4096);
    let to_b = SocketAddr::new(V6, b.local_port());
    out.push_with(0, to_b, |buf| {
        buf[..3000].fill(1);
        3000
    });
    out.push_with(0, to_b, |buf| payload(7, buf));
    assert_eq!(a.send_batch(&out).unwrap(), 2);

    let mut batch = PacketBatch::new(4, 1024);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        // With GRO the long one is held back once (for a batch with bigger
        // slots, which this one never gets): no longer in the socket.
        wait_readable(&b);
        let k = b.recv_batch(&mut batch).unwrap();
        for i in 0..k {
            seen.push(batch.packet(i).len());
            if !batch.packet(i).is_empty() {
                check(batch.packet(i));
            }
        }
    }
    assert_eq!(seen, [0, payload(7, &mut [0; 2048])]);
    assert_eq!(b.take_oversize(), Some(3000));
}

#[test]
fn send_and_recv_from_two_threads() {
    let a = Arc::new(UdpSocket::bind(0).unwrap());
    let to_self = SocketAddr::new(V4, a.local_port());
    let rounds = 50;
    let sender = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut batch = PacketBatch::new(8, 2048);
            let mut sent = 0;
            for r in 0..rounds {
                batch.clear();
                for i in 0..8 {
                    batch.push_with(0, to_self, |buf| payload(r * 8 + i, buf));
                }
                sent += a.send_batch(&batch).unwrap();
            }
            sent
        })
    };
    let got = recv_n(&a, rounds * 8, 32);
    assert_eq!(sender.join().unwrap(), rounds * 8);
    let mut idx: Vec<usize> = got.iter().map(|g| g.0).collect();
    idx.sort();
    assert_eq!(idx, (0..rounds * 8).collect::<Vec<_>>());
}

/// The value of an integer `SOL_SOCKET` option.
fn socket_option(fd: i32, option: libc::c_int) -> usize {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value`/`len` are a writable int and its size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "getsockopt {option}");
    value as usize
}

/// Redundant lines put every packet into the receiving socket once per
/// line, so the buffers are what braid asks for even above the sysctl
/// limit, which root (as the tests run) may pass.
#[test]
fn socket_buffers_are_forced_to_what_braid_asks_for() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: forcing socket buffers needs root");
        return;
    }
    let socket = UdpSocket::bind(0).unwrap();
    let fd = socket.as_raw_fd();
    // The kernel reports twice what was set (its bookkeeping share).
    assert_eq!(
        socket_option(fd, libc::SO_RCVBUF),
        2 * braid_io::udp::SOCKET_BUFFER
    );
    assert_eq!(
        socket_option(fd, libc::SO_SNDBUF),
        2 * braid_io::udp::SOCKET_BUFFER
    );
}

/// Waits (bounded) until `sock` is readable or holds datagrams already.
fn wait_readable(sock: &UdpSocket) {
    if sock.has_pending() {
        return;
    }
    let r = wait(
        &[(sock.as_raw_fd(), Interest::READABLE)],
        Some(Duration::from_secs(30)),
    )
    .unwrap();
    assert!(!r.is_timeout(), "nothing arrived");
}

/// A datagram longer than the batch's slots (a peer with a bigger MTU):
/// with GRO it waits once for a batch whose slots hold it, and
/// `take_oversize` says how long it is; offered to small slots a second
/// time it is dropped. Without GRO it is dropped at once, its length
/// still reported. The datagrams around it arrive either way.
#[test]
fn a_datagram_longer_than_the_slots_waits_for_bigger_ones_or_is_reported() {
    for gro in [true, false] {
        let a = UdpSocket::bind(0).unwrap();
        let b = UdpSocket::bind(0).unwrap();
        b.set_gro(gro).unwrap();
        let to = SocketAddr::new(V4, b.local_port());
        let mut batch = PacketBatch::new(4, 40_000);
        for len in [100, 34_768, 200] {
            batch.push_with(0, to, |buf| {
                buf[..len].fill(len as u8);
                len
            });
        }
        assert_eq!(a.send_batch(&batch).unwrap(), 3);

        let mut small = PacketBatch::new(8, 2048);
        let mut big = PacketBatch::new(8, 40_000);
        let mut lens = Vec::new();
        // First a small batch, then (once something was too long) a big one.
        let mut grown = false;
        while lens.len() < if gro { 3 } else { 2 } {
            wait_readable(&b);
            let into = if grown { &mut big } else { &mut small };
            let n = b.recv_batch(into).unwrap();
            lens.extend((0..n).map(|i| into.packet(i).len()).filter(|&l| l > 0));
            if let Some(len) = b.take_oversize() {
                assert_eq!(len, 34_768, "gro {gro}");
                grown = true;
            }
        }
        assert!(grown, "gro {gro}: the long datagram was reported");
        let want: &[usize] = if gro {
            &[100, 34_768, 200]
        } else {
            &[100, 200]
        };
        assert_eq!(lens, want, "gro {gro}");
    }
    // Offered twice to slots too small, it is dropped, not held forever.
    let a = UdpSocket::bind(0).unwrap();
    let b = UdpSocket::bind(0).unwrap();
    let to = SocketAddr::new(V4, b.local_port());
    let mut batch = PacketBatch::new(2, 40_000);
    for len in [34_768, 300] {
        batch.push_with(0, to, |buf| len.min(buf.len()));
    }
    assert_eq!(a.send_batch(&batch).unwrap(), 2);
    let mut small = PacketBatch::new(8, 2048);
    let mut lens = Vec::new();
    for _ in 0..10 {
        if lens.contains(&300) {
            break;
        }
        wait_readable(&b);
        let n = b.recv_batch(&mut small).unwrap();
        lens.extend((0..n).map(|i| small.packet(i).len()).filter(|&l| l > 0));
    }
    assert_eq!(lens, [300]);
    assert_eq!(b.take_oversize(), Some(34_768));
    assert!(!b.has_pending());
}

/// Which of our addresses a datagram arrived at comes with it (loopback
/// answers to all of 127/8), and a datagram leaves from the local address
/// its slot names; one that is not ours leaves from the routing table's
/// pick instead, and is reported.
#[test]
fn local_addresses_in_and_out() {
    use braid_core::batch::LocalAddr;
    let a = UdpSocket::bind(0).unwrap();
    let b = UdpSocket::bind(0).unwrap();
    let local = |ip: &str| LocalAddr {
        ip: Some(ip.parse().unwrap()),
        ifindex: 0,
    };
    // In: a writes to b at 127.0.0.2 and at 127.0.0.1.
    let mut out = PacketBatch::new(4, 2048);
    for (i, to) in ["127.0.0.2", "127.0.0.1"].into_iter().enumerate() {
        let to = SocketAddr::new(to.parse().unwrap(), b.local_port());
        out.push_with(0, to, |buf| payload(i, buf));
    }
    assert_eq!(a.send_batch(&out).unwrap(), 2);
    let mut batch = PacketBatch::new(8, 2048);
    let mut arrived = Vec::new();
    while arrived.len() < 2 {
        wait_readable(&b);
        let n = b.recv_batch(&mut batch).unwrap();
        arrived.extend(
            (0..n)
                .filter(|&i| !batch.packet(i).is_empty())
                .map(|i| (check(batch.packet(i)), batch.local(i).ip)),
        );
    }
    arrived.sort_by_key(|a| a.0);
    assert_eq!(
        arrived,
        [
            (0, Some("127.0.0.2".parse().unwrap())),
            (1, Some("127.0.0.1".parse().unwrap()))
        ]
    );
    // Out: b answers from 127.0.0.3, then (not an address of this host)
    // from 198.18.254.254, which leaves from the routing table's pick.
    let to_a = SocketAddr::new(V4, a.local_port());
    for (i, from, seen) in [
        (2, "127.0.0.3", "127.0.0.3"),
        (3, "198.18.254.254", "127.0.0.1"),
    ] {
        let mut out = PacketBatch::new(2, 2048);
        out.push_with(0, to_a, |buf| payload(i, buf));
        out.set_local(0, local(from));
        assert_eq!(b.send_batch(&out).unwrap(), 1, "from {from}");
        let got = recv_n(&a, 1, 4);
        assert_eq!(
            got[0],
            (i, SocketAddr::new(seen.parse().unwrap(), b.local_port()))
        );
    }
    assert_eq!(
        b.take_refused_sources(),
        ["198.18.254.254".parse::<std::net::IpAddr>().unwrap()]
    );
    assert!(b.take_refused_sources().is_empty(), "reported once");
}

/// Everything each socket of `group` holds now (the senders are done):
/// per socket, the (index, source) of each datagram.
fn drain_group(group: &[UdpSocket]) -> Vec<Vec<(usize, SocketAddr)>> {
    let mut batch = PacketBatch::new(64, 2048);
    group
        .iter()
        .map(|sock| {
            let mut got = Vec::new();
            loop {
                batch.clear();
                if sock.recv_batch(&mut batch).unwrap() == 0 {
                    break got;
                }
                for i in (0..batch.len()).filter(|&i| !batch.packet(i).is_empty()) {
                    got.push((check(batch.packet(i)), batch.addr(i)));
                }
            }
        })
        .collect()
}

#[test]
fn socket_group_spreads_senders_and_keeps_each_on_one_socket() {
    let group = UdpSocket::bind_group(0, 2).unwrap();
    let port = group[0].local_port();
    assert_ne!(port, 0);
    assert_eq!(group[1].local_port(), port, "one port for the group");
    // 32 senders, 8 datagrams each, over IPv4 and IPv6.
    let senders: Vec<UdpSocket> = (0..32).map(|_| UdpSocket::bind(0).unwrap()).collect();
    for round in 0..8 {
        let mut batch = PacketBatch::new(senders.len(), 2048);
        for (s, sender) in senders.iter().enumerate() {
            batch.clear();
            let ip = if s % 2 == 0 { V4 } else { V6 };
            let i = s * 8 + round;
            assert!(batch.push_with(0, SocketAddr::new(ip, port), |buf| payload(i, buf)));
            assert_eq!(sender.send_batch(&batch).unwrap(), 1);
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let got = drain_group(&group);
    let total: usize = got.iter().map(Vec::len).sum();
    assert_eq!(total, 32 * 8, "every datagram reached the group once");
    for (k, socket) in got.iter().enumerate() {
        assert!(
            !socket.is_empty(),
            "socket {k} of the group received nothing"
        );
        for &(i, src) in socket {
            let sender = i / 8;
            assert_eq!(src.port(), senders[sender].local_port());
            // Every datagram of this sender is on this socket.
            let here = socket.iter().filter(|&&(j, _)| j / 8 == sender).count();
            assert_eq!(here, 8, "sender {sender} split over the group's sockets");
        }
    }
}

#[test]
fn socket_group_of_one_is_a_plain_socket_and_zero_is_refused() {
    let group = UdpSocket::bind_group(0, 1).unwrap();
    assert_eq!(group.len(), 1);
    // Without SO_REUSEPORT the port is the socket's alone.
    let taken = UdpSocket::bind(group[0].local_port());
    assert!(taken.is_err(), "a second socket bound the same port");
    let zero = UdpSocket::bind_group(0, 0).map(|_| ()).unwrap_err();
    assert!(zero.to_string().contains("not 0"), "{zero}");
    let many = UdpSocket::bind_group(0, braid_io::udp::MAX_GROUP + 1)
        .map(|_| ())
        .unwrap_err();
    assert!(many.to_string().contains("1 to 64"), "{many}");
}
