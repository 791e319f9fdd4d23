//! `braid bench echo`: ICMP echo round trips at a fixed interval, printed
//! one per line as ping prints them, then p50/p99.
//!
//! `braid bench tunnel` measures latency with this instead of iputils
//! ping. That ping busy-waits (`sched_yield` in a loop) whenever its next
//! probe is due within 1000/HZ ms, and it reads HZ as `_SC_CLK_TCK`, 100:
//! at one probe per 10 ms it spins between every reply and the next probe,
//! about 40 % of a core. On a two-core machine that is a fifth of what the
//! VPN under test has to work with. This prober sleeps in `ppoll` until the
//! next probe or reply instead, and takes the same timestamps ping takes:
//! the clock just before sending and the kernel's receive stamp
//! (`SO_TIMESTAMPNS`), so the numbers mean the same thing.

use braid_io::offload::checksum::checksum;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant, SystemTime};

pub const USAGE: &str = "\
usage: braid bench echo [--interval D] [--count N] [--deadline D] [--wait D] TARGET

Sends N ICMP echo requests to TARGET (IPv4 or IPv6), one every D, and
prints each reply's round trip as ping does (`icmp_seq=K time=T ms`), then
how many were sent and received and the p50/p99. Sleeps between probes
(iputils ping busy-waits at short intervals). Needs root (a raw socket).

  --interval D   time between requests (default 10ms; us, ms or s)
  --count N      requests to send (default 100, at most 65535)
  --deadline D   stop after D in all, answered or not (default: no limit)
  --wait D       after the last request, how long to wait for its reply
                 (default 1s)
";

/// Bytes after the 8-byte ICMP header, as ping sends by default.
const PAYLOAD: usize = 56;
const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;

#[derive(Debug, PartialEq)]
struct Args {
    target: IpAddr,
    interval: Duration,
    count: u16,
    deadline: Option<Duration>,
    wait: Duration,
}

fn parse_args(argv: &[String]) -> Result<Option<Args>, String> {
    use braid_netem::units::duration as parse_duration;
    let mut target = None;
    let mut a = Args {
        target: IpAddr::from([0, 0, 0, 0]),
        interval: Duration::from_millis(10),
        count: 100,
        deadline: None,
        wait: Duration::from_secs(1),
    };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--interval" => a.interval = parse_duration(flag, &value()?)?,
            "--deadline" => a.deadline = Some(parse_duration(flag, &value()?)?),
            "--wait" => a.wait = parse_duration(flag, &value()?)?,
            "--count" => {
                let v = value()?;
                a.count = match v.parse::<u16>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--count: {v:?} is not a count in 1..=65535")),
                };
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            s => {
                if target.is_some() {
                    return Err(format!("one TARGET only; {s:?} is a second\n{USAGE}"));
                }
                target = Some(
                    s.parse()
                        .map_err(|_| format!("TARGET: {s:?} is not an IP address"))?,
                );
            }
        }
    }
    if a.interval.is_zero() {
        return Err("--interval must be more than 0".into());
    }
    a.target = target.ok_or_else(|| format!("TARGET is missing\n{USAGE}"))?;
    Ok(Some(a))
}

pub fn run(argv: &[String]) -> Result<(), String> {
    let Some(args) = parse_args(argv)? else {
        print!("{USAGE}");
        return Ok(());
    };
    let socket = EchoSocket::open(args.target)
        .map_err(|e| format!("bench echo: raw ICMP socket: {e} (needs root)"))?;
    let rtts = probe(&socket, &args, &mut |seq, ms| {
        println!(
            "{PAYLOAD_PLUS_HEADER} bytes from {}: icmp_seq={seq} time={ms:.3} ms",
            args.target
        );
    })
    .map_err(|e| format!("bench echo {}: {e}", args.target))?;
    println!("\n--- {} echo statistics ---", args.target);
    println!(
        "{} packets transmitted, {} received",
        rtts.sent,
        rtts.received.len()
    );
    let mut sorted = rtts.received.clone();
    sorted.sort_by(f64::total_cmp);
    if let (Some(p50), Some(p99)) = (
        crate::toolkit::bench::stats::percentile(&sorted, 50.0),
        crate::toolkit::bench::stats::percentile(&sorted, 99.0),
    ) {
        println!("rtt p50/p99 = {p50:.3}/{p99:.3} ms");
    }
    Ok(())
}

const PAYLOAD_PLUS_HEADER: usize = PAYLOAD + 8;

/// What one run gathered: requests sent, round trips of the replies (ms).
struct Rtts {
    sent: u16,
    received: Vec<f64>,
}

/// Sends `args.count` requests at `args.interval` and collects the replies,
/// calling `on_reply(seq, ms)` for each as it comes.
fn probe(
    socket: &EchoSocket,
    args: &Args,
    on_reply: &mut dyn FnMut(u16, f64),
) -> std::io::Result<Rtts> {
    // Both ends of a round trip on the realtime clock: the kernel stamps
    // arrivals with it.
    let mut sent_at: Vec<Option<SystemTime>> = vec![None; usize::from(args.count) + 1];
    let mut rtts = Rtts {
        sent: 0,
        received: Vec::with_capacity(usize::from(args.count)),
    };
    let start = Instant::now();
    let stop_at = args.deadline.map(|d| start + d);
    let mut next_send = start;
    let mut last_sent = start;
    let mut buf = [0u8; 1500];
    loop {
        let now = Instant::now();
        if stop_at.is_some_and(|t| now >= t) {
            break;
        }
        if rtts.sent < args.count && now >= next_send {
            rtts.sent += 1;
            sent_at[usize::from(rtts.sent)] = Some(SystemTime::now());
            socket.send_request(rtts.sent)?;
            last_sent = now;
            // A fixed schedule; a late wake-up does not make a burst.
            next_send = (next_send + args.interval).max(now);
        }
        let all_sent = rtts.sent == args.count;
        if all_sent
            && (rtts.received.len() == usize::from(args.count) || now >= last_sent + args.wait)
        {
            break;
        }
        let mut wake = if all_sent {
            last_sent + args.wait
        } else {
            next_send
        };
        if let Some(t) = stop_at {
            wake = wake.min(t);
        }
        if !socket.wait_readable(wake.saturating_duration_since(Instant::now()))? {
            continue;
        }
        while let Some((seq, arrived)) = socket.recv_reply(&mut buf)? {
            let Some(sent) = sent_at.get_mut(usize::from(seq)).and_then(Option::take) else {
                continue; // not ours, a duplicate, or never sent
            };
            let arrived = arrived.unwrap_or_else(SystemTime::now);
            let ms = arrived
                .duration_since(sent)
                .map_or(0.0, |d| d.as_secs_f64() * 1e3);
            rtts.received.push(ms);
            on_reply(seq, ms);
        }
    }
    Ok(rtts)
}

/// A raw ICMP (or ICMPv6) socket that sends echo requests with one
/// identifier and reads back the replies that carry it.
struct EchoSocket {
    fd: OwnedFd,
    target: IpAddr,
    ident: u16,
}

impl EchoSocket {
    fn open(target: IpAddr) -> std::io::Result<EchoSocket> {
        let (family, protocol) = match target {
            IpAddr::V4(_) => (libc::AF_INET, libc::IPPROTO_ICMP),
            IpAddr::V6(_) => (libc::AF_INET6, libc::IPPROTO_ICMPV6),
        };
        // SAFETY: plain socket(2); the result is checked before use.
        let fd = unsafe {
            libc::socket(
                family,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                protocol,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        braid_io::setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        Ok(EchoSocket {
            fd,
            target,
            ident: (std::process::id() & 0xffff) as u16,
        })
    }

    fn send_request(&self, seq: u16) -> std::io::Result<()> {
        let mut packet = [0u8; 8 + PAYLOAD];
        packet[0] = match self.target {
            IpAddr::V4(_) => ECHO_REQUEST_V4,
            IpAddr::V6(_) => ECHO_REQUEST_V6,
        };
        packet[4..6].copy_from_slice(&self.ident.to_be_bytes());
        packet[6..8].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in packet[8..].iter_mut().enumerate() {
            *b = i as u8;
        }
        // The kernel fills in the ICMPv6 checksum (it needs the addresses).
        if self.target.is_ipv4() {
            let sum = checksum(&packet, 0);
            packet[2..4].copy_from_slice(&sum.to_be_bytes());
        }
        let (addr, len) = socket_address(self.target);
        // SAFETY: `packet` and `addr` outlive the call; `len` is addr's size.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&addr as *const libc::sockaddr_storage).cast(),
                len,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout` for something to read; false when it passed.
    fn wait_readable(&self, timeout: Duration) -> std::io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = braid_io::timespec_of(timeout);
        // SAFETY: one valid pollfd; `ts` lives across the call.
        let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(rc > 0)
    }

    /// The next echo reply with our identifier: its sequence number and the
    /// kernel's arrival stamp. None when nothing is left.
    fn recv_reply(&self, buf: &mut [u8]) -> std::io::Result<Option<(u16, Option<SystemTime>)>> {
        loop {
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // u64 elements keep the control buffer aligned for cmsghdr.
            let mut control = [0u64; 16];
            // SAFETY: msghdr is plain data; zero is a valid empty value.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = braid_io::kernel_int(std::mem::size_of_val(&control));
            // SAFETY: `msg` points at `iov` (into `buf`) and `control`, all
            // alive and sized as stated.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                return match e.kind() {
                    std::io::ErrorKind::WouldBlock => Ok(None),
                    std::io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            let packet = &buf[..n as usize];
            if let Some(seq) = self.reply_seq(packet) {
                return Ok(Some((seq, braid_io::udp::arrival_time(&msg))));
            }
        }
    }

    /// The sequence number if `packet` (as a raw socket of this family
    /// delivers it) is an echo reply to us.
    fn reply_seq(&self, packet: &[u8]) -> Option<u16> {
        let (icmp, reply_type) = match self.target {
            // IPv4 raw sockets deliver the IP header too.
            IpAddr::V4(_) => {
                let header_len = braid_core::ip::Ipv4::new(packet)?.header_len();
                (packet.get(header_len..)?, ECHO_REPLY_V4)
            }
            IpAddr::V6(_) => (packet, ECHO_REPLY_V6),
        };
        if icmp.len() < 8 || icmp[0] != reply_type || icmp[1] != 0 {
            return None;
        }
        if u16::from_be_bytes([icmp[4], icmp[5]]) != self.ident {
            return None;
        }
        Some(u16::from_be_bytes([icmp[6], icmp[7]]))
    }
}

fn socket_address(ip: IpAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match ip {
        IpAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        IpAddr::V6(v6) => {
            // SAFETY: sockaddr_in6 is plain data; zero is a valid value.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = v6.octets();
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let a = parse_args(&strings(&[
            "--interval",
            "20ms",
            "--count",
            "7",
            "--deadline",
            "3s",
            "198.19.90.2",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            a,
            Args {
                target: "198.19.90.2".parse().unwrap(),
                interval: Duration::from_millis(20),
                count: 7,
                deadline: Some(Duration::from_secs(3)),
                wait: Duration::from_secs(1),
            }
        );
        assert!(parse_args(&strings(&["--help"])).unwrap().is_none());
        let err = |v: &[&str]| parse_args(&strings(v)).unwrap_err();
        assert!(err(&[]).contains("TARGET is missing"));
        assert!(err(&["host.example"]).contains("not an IP address"));
        assert!(err(&["--count", "0", "::1"]).contains("--count"));
        assert!(err(&["--count", "70000", "::1"]).contains("--count"));
        assert!(err(&["--interval", "0ms", "::1"]).contains("more than 0"));
        assert!(err(&["--interval", "10", "::1"]).contains("no unit"));
        assert!(err(&["::1", "::2"]).contains("second"));
        assert!(err(&["--bogus", "::1"]).contains("unknown option --bogus"));
    }

    #[test]
    fn replies_are_matched_by_identifier_type_and_sequence() {
        let s = |target: &str| EchoSocket {
            fd: placeholder_fd(),
            target: target.parse().unwrap(),
            ident: 0x1234,
        };
        let v4 = s("198.19.90.2");
        let mut reply = vec![0x45u8; 20];
        reply.extend_from_slice(&[ECHO_REPLY_V4, 0, 0, 0, 0x12, 0x34, 0, 9]);
        assert_eq!(v4.reply_seq(&reply), Some(9));
        reply[20] = ECHO_REQUEST_V4; // our own request, seen on loopback
        assert_eq!(v4.reply_seq(&reply), None);
        reply[20] = ECHO_REPLY_V4;
        reply[25] = 0x35; // another prober's identifier
        assert_eq!(v4.reply_seq(&reply), None);
        assert_eq!(v4.reply_seq(&reply[..24]), None);
        let v6 = s("2001:db8::2");
        assert_eq!(
            v6.reply_seq(&[ECHO_REPLY_V6, 0, 0, 0, 0x12, 0x34, 1, 2]),
            Some(0x0102)
        );
        assert_eq!(
            v6.reply_seq(&[ECHO_REPLY_V4, 0, 0, 0, 0x12, 0x34, 1, 2]),
            None
        );
    }

    /// A descriptor for tests that never touch the socket.
    fn placeholder_fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    /// Echo on loopback (needs root for the raw socket; skipped without).
    #[test]
    fn loopback_round_trips() {
        for target in ["127.0.0.1", "::1"] {
            let target: IpAddr = target.parse().unwrap();
            // A machine without IPv6 on loopback has no ::1 to echo.
            if std::net::UdpSocket::bind((target, 0)).is_err() {
                continue;
            }
            let socket = match EchoSocket::open(target) {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return,
                Err(e) => panic!("{e}"),
            };
            let args = Args {
                target,
                interval: Duration::from_millis(2),
                count: 5,
                // Generous: probe returns as soon as all five are back, and
                // a loaded machine must not turn a late reply into a fail.
                deadline: Some(Duration::from_secs(30)),
                wait: Duration::from_secs(20),
            };
            let mut seqs = Vec::new();
            let rtts = probe(&socket, &args, &mut |seq, _| seqs.push(seq)).unwrap();
            assert_eq!(rtts.sent, 5);
            assert_eq!(seqs, vec![1, 2, 3, 4, 5], "{target}");
            assert!(rtts.received.iter().all(|ms| *ms >= 0.0));
        }
    }
}
