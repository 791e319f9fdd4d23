//! A TCP segment damaged before the far end sealed it arrives
//! authenticated, but its checksum is wrong: the receiving host must drop
//! it. braid's TUN side merges segments of one flow into a super-packet
//! whose checksum the kernel computes itself (`F_NEEDS_CSUM`), so it
//! checks every segment's checksum first and writes a damaged one alone,
//! for the kernel to count and drop (`Tcp: InCsumErrors`), as kernel GRO
//! would.
//!
//! ```text
//!  netns a: raw socket ─► braid a ══ veth ══ braid b ─► TUN ─► kernel of b
//!           3 segments of one flow, the middle one damaged, 20 times
//! ```

use crate::harness::*;
use braid_io::offload::checksum;
use std::net::Ipv4Addr;
use std::time::Duration;

const TRAINS: u32 = 20;
const PAYLOAD: usize = 1000;

/// An IPv4 TCP segment (ACK) from `src` to `dst` with valid checksums.
fn segment(src: Ipv4Addr, dst: Ipv4Addr, seq: u32) -> Vec<u8> {
    let total = 20 + 20 + PAYLOAD;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[6] = 0x40; // don't fragment
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = checksum::checksum(&p[..20], 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&40_000u16.to_be_bytes());
    p[22..24].copy_from_slice(&9u16.to_be_bytes());
    p[24..28].copy_from_slice(&seq.to_be_bytes());
    p[28..32].copy_from_slice(&1u32.to_be_bytes());
    p[32] = 5 << 4;
    p[33] = 0x10; // ACK
    p[34..36].copy_from_slice(&1000u16.to_be_bytes());
    for (i, b) in p[40..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let pseudo = checksum::pseudo_header(&p[12..16], &p[16..20], 6, (total - 20) as u32);
    let c = checksum::checksum(&p[20..], pseudo);
    p[36..38].copy_from_slice(&c.to_be_bytes());
    p
}

/// Sends `packets` as they are (IP header included) from a raw socket.
fn send_raw(packets: &[Vec<u8>], dst: Ipv4Addr) {
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(dst.octets()),
        },
        sin_zero: [0; 8],
    };
    for p in packets {
        // SAFETY: `p` and `addr` are live for the call; sendto only reads them.
        let n = unsafe {
            libc::sendto(
                fd,
                p.as_ptr().cast(),
                p.len(),
                0,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        assert_eq!(
            n as usize,
            p.len(),
            "sendto: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: closing the socket made above.
    unsafe { libc::close(fd) };
}

/// `Tcp: InCsumErrors` of namespace `ns` (/proc/net/snmp).
fn tcp_checksum_errors(ns: &Netns) -> u64 {
    let snmp = ns
        .run("cat", &["/proc/net/snmp"], SHORT)
        .expect_ok("cat /proc/net/snmp")
        .stdout;
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap_or(""), tcp.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "InCsumErrors")
        .and_then(|(_, v)| v.parse().ok())
        .expect("InCsumErrors in /proc/net/snmp")
}

#[test]
fn a_damaged_segment_is_dropped_by_the_receiving_host() {
    let test = "damaged_segment";
    if !preflight(test, &["ip", "ping"]) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    a.assert_up();
    let (ta, tb) = (Ipv4Addr::new(198, 19, x, 1), Ipv4Addr::new(198, 19, x, 2));
    assert!(ping_until_reply(&nsa, &tb.to_string(), LONG), "no tunnel");

    let before = tcp_checksum_errors(&nsb);
    let trains: Vec<Vec<u8>> = (0..TRAINS)
        .flat_map(|t| {
            let seq = 1_000_000 + t * 100_000;
            let mut train: Vec<Vec<u8>> = (0..3)
                .map(|k| segment(ta, tb, seq + k * PAYLOAD as u32))
                .collect();
            // Damaged after its checksum was made: a flipped payload bit.
            train[1][40 + 77] ^= 0x04;
            train
        })
        .collect();
    let ns = nsa.name.clone();
    braid::toolkit::lab::traffic::in_netns(&ns, move || {
        for train in trains.chunks(3) {
            send_raw(train, tb);
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .join()
    .expect("the sending thread");
    let mut after = before;
    wait_until(SHORT, || {
        after = tcp_checksum_errors(&nsb);
        after >= before + u64::from(TRAINS)
    });
    eprintln!(
        "[{test}] B's Tcp InCsumErrors: {before} -> {after} ({TRAINS} damaged segments sent)"
    );
    assert_eq!(
        after - before,
        u64::from(TRAINS),
        "every damaged segment must reach B's kernel as it is and be dropped there"
    );
    a.down();
    b.down();
}
