//! Two devices with deterministic keys, seeds and simulated time, and the
//! plumbing to move datagrams between them, shared by the datagram and
//! handshake targets.

use braid_core::batch::PacketBatch;
use braid_core::device::Device;
use braid_core::peer::PeerId;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

pub const A_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 51820);
pub const B_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)), 51820);
pub const A_TUN: [u8; 4] = [198, 19, 0, 1];
pub const B_TUN: [u8; 4] = [198, 19, 0, 2];
pub const PSK: [u8; 32] = [7; 32];
pub const A_PRIVATE: [u8; 32] = [0x11; 32];
pub const B_PRIVATE: [u8; 32] = [0x22; 32];

/// Largest datagram a target hands to a device.
pub const MAX_DATAGRAM: usize = 2048;
const STRIDE: usize = 4096;

/// Source addresses a fuzzed datagram may claim: the peer's endpoint, a
/// stranger, and an IPv6 one.
pub fn source(choice: u8) -> SocketAddr {
    match choice % 4 {
        0 => B_ADDR,
        1 => A_ADDR,
        2 => "198.18.7.7:4000".parse().expect("literal"),
        _ => "[2001:db8::2]:51820".parse().expect("literal"),
    }
}

/// The origin of simulated time; only differences from it matter.
pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    #[allow(clippy::disallowed_methods)] // the fuzzer needs one arbitrary origin
    *EPOCH.get_or_init(Instant::now)
}

pub struct Pair {
    pub now: Instant,
    pub a: Device,
    pub b: Device,
    /// B as a peer of A, and A as a peer of B.
    pub pb: PeerId,
    pub pa: PeerId,
    batch: PacketBatch,
    out: PacketBatch,
}

impl Pair {
    /// A and B know each other (A has B's endpoint); no handshake yet.
    pub fn new() -> Pair {
        let now = epoch();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut a = Device::new(now, wall, [1; 32]);
        let mut b = Device::new(now, wall, [2; 32]);
        a.set_private_key(Some(A_PRIVATE));
        b.set_private_key(Some(B_PRIVATE));
        let pb = a
            .add_peer(b.public_key().expect("key set"))
            .expect("not ours");
        let pa = b
            .add_peer(a.public_key().expect("key set"))
            .expect("not ours");
        a.set_preshared_key(pb, PSK);
        b.set_preshared_key(pa, PSK);
        a.set_endpoint(pb, B_ADDR);
        a.add_allowed_ip(pb, IpAddr::V4(Ipv4Addr::from(B_TUN)), 32)
            .expect("valid prefix");
        b.add_allowed_ip(pa, IpAddr::V4(Ipv4Addr::from(A_TUN)), 32)
            .expect("valid prefix");
        Pair {
            now,
            a,
            b,
            pb,
            pa,
            batch: PacketBatch::new(64, STRIDE),
            out: PacketBatch::new(64, STRIDE),
        }
    }

    /// A completed handshake (A initiated) confirmed by a keepalive, and
    /// the extension hellos exchanged: both sides have a current session.
    pub fn established() -> Pair {
        let mut pair = Pair::new();
        let (now, pb) = (pair.now, pair.pb);
        pair.a.set_persistent_keepalive(now, pb, 25);
        pair.exchange(8);
        assert!(
            pair.a
                .peer(pair.pb)
                .is_some_and(|p| p.keypairs.current.is_some())
                && pair
                    .b
                    .peer(pair.pa)
                    .is_some_and(|p| p.keypairs.current.is_some()),
            "the setup handshake must complete"
        );
        pair
    }

    /// Hands datagrams to A (`to_a`) or B as if UDP received them from
    /// `src` on line 0, and checks what comes out of the tunnel.
    pub fn deliver(&mut self, to_a: bool, src: SocketAddr, datagrams: &[&[u8]]) {
        self.batch.clear();
        for d in datagrams {
            let d = &d[..d.len().min(MAX_DATAGRAM)];
            self.batch.push_with(0, src, |b| {
                b[..d.len()].copy_from_slice(d);
                d.len()
            });
        }
        let now = self.now;
        let (dev, peer_tun) = if to_a {
            (&mut self.a, B_TUN)
        } else {
            (&mut self.b, A_TUN)
        };
        dev.decapsulate(now, &mut self.batch);
        for i in 0..self.batch.len() {
            check_tun_packet(self.batch.packet(i), peer_tun);
        }
        loop {
            self.out.clear();
            let more = dev.poll_tun(&mut self.out);
            for i in 0..self.out.len() {
                check_tun_packet(self.out.packet(i), peer_tun);
            }
            if !more {
                break;
            }
        }
    }

    /// Takes what A (`from_a`) or B wants to send, as owned datagrams.
    pub fn transmit(&mut self, from_a: bool) -> Vec<Vec<u8>> {
        let now = self.now;
        let dev = if from_a { &mut self.a } else { &mut self.b };
        let mut sent = Vec::new();
        // Bounded: a device queues at most MAX_QUEUED_CONTROL messages.
        for _ in 0..64 {
            self.out.clear();
            let more = dev.poll_transmit(now, &mut self.out);
            for i in 0..self.out.len() {
                if !self.out.packet(i).is_empty() {
                    sent.push(self.out.packet(i).to_vec());
                }
                for c in self.out.copies() {
                    if c.slot == i {
                        sent.push(self.out.packet(i).to_vec());
                    }
                }
            }
            if !more {
                break;
            }
        }
        sent
    }

    /// Lets the devices talk over a perfect line for up to `rounds` rounds.
    pub fn exchange(&mut self, rounds: usize) {
        for _ in 0..rounds {
            let to_b = self.transmit(true);
            let to_a = self.transmit(false);
            if to_a.is_empty() && to_b.is_empty() {
                return;
            }
            for d in &to_b {
                self.deliver(false, A_ADDR, &[d]);
            }
            for d in &to_a {
                self.deliver(true, B_ADDR, &[d]);
            }
        }
    }

    /// Moves simulated time on and fires both devices' timers.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        let now = self.now;
        self.a.handle_timeout(now);
        self.b.handle_timeout(now);
    }

    /// An IP packet from `src_tun` enters A's (`on_a`) or B's TUN.
    pub fn send_from_tun(&mut self, on_a: bool, packet: &[u8]) {
        self.batch.clear();
        let packet = &packet[..packet.len().min(1500)];
        self.batch
            .push_with(braid_core::batch::HEADROOM, B_ADDR, |b| {
                b[..packet.len()].copy_from_slice(packet);
                packet.len()
            });
        let now = self.now;
        let dev = if on_a { &mut self.a } else { &mut self.b };
        dev.encapsulate(now, &mut self.batch);
    }
}

impl Default for Pair {
    fn default() -> Self {
        Pair::new()
    }
}

/// Cryptokey routing: whatever reaches the TUN is an IP packet whose source
/// is the sending peer's allowed address (consumed slots are empty).
fn check_tun_packet(packet: &[u8], peer_tun: [u8; 4]) {
    if packet.is_empty() {
        return;
    }
    assert!(
        packet.len() >= 20,
        "runt packet reached the TUN: {packet:?}"
    );
    assert_eq!(packet[0] >> 4, 4, "non-IPv4 packet from an IPv4-only peer");
    assert_eq!(packet[12..16], peer_tun, "packet with a foreign source");
    let total = u16::from_be_bytes([packet[2], packet[3]]) as usize;
    assert_eq!(
        total,
        packet.len(),
        "TUN packet length differs from its header"
    );
}

/// An IPv4 packet from `src` to `dst` around `payload` (UDP, no checksum).
pub fn ipv4_packet(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}
