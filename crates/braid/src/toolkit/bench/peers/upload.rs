//! The upload part of `braid bench peers`: once the initiating peers have
//! their sessions, all of them send data to the server at once, as a
//! server's many clients upload. The server is measured by what it
//! delivers to its TUN and the CPU it spends per packet; with braid's
//! `Queues = N` also by how its N sockets shared the datagrams, which is
//! what spreads the receiving over cores on a larger machine.
//!
//! Each data message is what a WireGuard initiator sends: its session's
//! counter, the server's index, and an IPv4/UDP packet from the peer's own
//! tunnel address, sealed with ChaCha20-Poly1305 (the stock cipher, which
//! braid and wireguard-go both open). The packets go to a UDP port of the
//! server that a socket holds and never reads, so the kernel drops them
//! there without an answer.

use super::handshakes::{send_from, Session};
use braid_core::crypto::{self, TAG_LEN};
use braid_core::messages::{DATA_HEADER_LEN, TYPE_DATA};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const IPV4_HEADER: usize = 20;
const UDP_HEADER: usize = 8;
/// The smallest inner packet: the headers and one byte.
pub const MIN_PACKET: usize = IPV4_HEADER + UDP_HEADER + 1;
/// The largest: what a 1420-byte tunnel MTU carries.
pub const MAX_PACKET: usize = 1420;
/// Sends between looks at the clock.
const SENDS_PER_CHECK: u32 = 64;

/// What the peers sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sent {
    pub peers: usize,
    pub datagrams: u64,
    /// The inner packets' bytes.
    pub bytes: u64,
    /// Times the client's socket buffer was full (it then waited).
    pub waits: u64,
    pub elapsed: Duration,
}

/// One peer's sender: its session and the counter of its next message.
struct Sender {
    source: Ipv4Addr,
    receiver: u32,
    key: crypto::Key,
    counter: u64,
    /// Its inner packet (the payload is the same for every message).
    packet: Vec<u8>,
}

impl Drop for Sender {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.key);
    }
}

/// The inner IPv4/UDP packet of `size` bytes from `from` to `to`.
pub fn inner_packet(from: Ipv4Addr, to: SocketAddrV4, size: usize) -> Vec<u8> {
    let size = size.clamp(MIN_PACKET, MAX_PACKET);
    let mut p = vec![0u8; size];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(size as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&from.octets());
    p[16..20].copy_from_slice(&to.ip().octets());
    let sum = braid_core::icmp::checksum(&[&p[..IPV4_HEADER]]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp = &mut p[IPV4_HEADER..];
    udp[0..2].copy_from_slice(&9u16.to_be_bytes());
    udp[2..4].copy_from_slice(&to.port().to_be_bytes());
    udp[4..6].copy_from_slice(&((size - IPV4_HEADER) as u16).to_be_bytes());
    // Checksum 0: none, which IPv4 allows for UDP.
    p
}

/// Every peer of `sessions` sends `size`-byte packets to `inner_to`
/// through `server`, in turn and as fast as `socket` takes them, for
/// `seconds`. `inner_from(peer)` is each peer's tunnel address (its
/// AllowedIPs). Runs on the calling thread (inside the client namespace).
pub fn send_all(
    socket: &UdpSocket,
    sessions: Vec<Session>,
    server: SocketAddrV4,
    inner_to: SocketAddrV4,
    inner_from: impl Fn(usize) -> Ipv4Addr,
    size: usize,
    seconds: Duration,
) -> Result<Sent, String> {
    let mut senders: Vec<Sender> = sessions
        .into_iter()
        .map(|s| Sender {
            source: s.source,
            receiver: s.receiver,
            key: s.keys.send,
            counter: 0,
            packet: inner_packet(inner_from(s.peer), inner_to, size),
        })
        .collect();
    let mut sent = Sent {
        peers: senders.len(),
        ..Sent::default()
    };
    if senders.is_empty() {
        return Err("no peer has a session to upload with".into());
    }
    let mut datagram = vec![0u8; DATA_HEADER_LEN + MAX_PACKET + TAG_LEN];
    let start = Instant::now();
    let mut next = 0;
    'run: loop {
        for _ in 0..SENDS_PER_CHECK {
            let s = &mut senders[next];
            let len = DATA_HEADER_LEN + s.packet.len() + TAG_LEN;
            let (header, body) = datagram[..len].split_at_mut(DATA_HEADER_LEN);
            header.fill(0);
            header[0] = TYPE_DATA;
            header[4..8].copy_from_slice(&s.receiver.to_le_bytes());
            header[8..16].copy_from_slice(&s.counter.to_le_bytes());
            crypto::seal(&s.key, s.counter, &s.packet, &[], body);
            match send_from(socket, s.source, server, &datagram[..len]) {
                Ok(()) => {
                    s.counter += 1;
                    sent.datagrams += 1;
                    sent.bytes += s.packet.len() as u64;
                    next = (next + 1) % senders.len();
                }
                // A full socket buffer: the same message once there is room.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    sent.waits += 1;
                    wait_writable(socket);
                }
                Err(e) => return Err(format!("send from {}: {e}", s.source)),
            }
        }
        if start.elapsed() >= seconds {
            break 'run;
        }
    }
    sent.elapsed = start.elapsed();
    Ok(sent)
}

/// Waits (at most a millisecond) until `socket` takes another datagram.
fn wait_writable(socket: &UdpSocket) {
    let _ = braid_io::wait(
        &[(socket.as_raw_fd(), braid_io::Interest::WRITABLE)],
        Some(Duration::from_millis(1)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inner_packet_is_a_checked_ipv4_udp_packet_of_its_size() {
        let to = SocketAddrV4::new(Ipv4Addr::new(198, 19, 0, 1), 9);
        let p = inner_packet(Ipv4Addr::new(198, 19, 3, 7), to, 1420);
        assert_eq!(p.len(), 1420);
        assert_eq!(u16::from_be_bytes([p[2], p[3]]), 1420);
        // A header with its checksum in sums to zero.
        assert_eq!(braid_core::icmp::checksum(&[&p[..IPV4_HEADER]]), 0);
        assert_eq!(&p[12..16], &[198, 19, 3, 7]);
        assert_eq!(&p[16..20], &[198, 19, 0, 1]);
        assert_eq!(u16::from_be_bytes([p[22], p[23]]), 9);
        assert_eq!(u16::from_be_bytes([p[24], p[25]]), 1400);
        assert_eq!(inner_packet(Ipv4Addr::LOCALHOST, to, 5).len(), MIN_PACKET);
        assert_eq!(
            inner_packet(Ipv4Addr::LOCALHOST, to, 9000).len(),
            MAX_PACKET
        );
    }
}
