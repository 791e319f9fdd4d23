//! Two devices with deterministic keys, seeds and simulated time (a
//! `braid_core::testing` net of two nodes), moved in lock step by the
//! datagram and handshake targets: they hand datagrams over themselves
//! rather than running the net's lines.

use braid_core::device::Device;
use braid_core::peer::PeerId;
use braid_core::testing::{self, Net, NodeId};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The addresses and keys `testing::Net::pair` gives A and B.
pub const A_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 51820);
pub const B_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)), 51820);
pub const A_TUN: [u8; 4] = [198, 19, 0, 1];
pub const B_TUN: [u8; 4] = [198, 19, 0, 2];
pub const PSK: [u8; 32] = [7; 32];
pub const A_PRIVATE: [u8; 32] = [0x11; 32];
pub const B_PRIVATE: [u8; 32] = [0x22; 32];

/// Largest datagram a target hands to a device.
pub const MAX_DATAGRAM: usize = 2048;

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

pub struct Pair {
    /// Nodes `testing::A` and `testing::B`; every TUN write is checked
    /// there (cryptokey routing).
    pub net: Net,
    /// B as a peer of A, and A as a peer of B.
    pub pb: PeerId,
    pub pa: PeerId,
}

/// The node of A (`to_a`) or B.
fn node(a: bool) -> NodeId {
    if a {
        testing::A
    } else {
        testing::B
    }
}

impl Pair {
    /// A and B know each other (A has B's endpoint), with a preshared key;
    /// no handshake yet.
    pub fn new() -> Pair {
        let mut net = Net::pair();
        debug_assert_eq!(
            (net.addr(testing::A), net.addr(testing::B)),
            (A_ADDR, B_ADDR)
        );
        debug_assert_eq!((net.tun(testing::A), net.tun(testing::B)), (A_TUN, B_TUN));
        let (pb, pa) = (0, 0);
        net[testing::A].device.set_preshared_key(pb, PSK);
        net[testing::B].device.set_preshared_key(pa, PSK);
        Pair { net, pb, pa }
    }

    /// A completed handshake (A initiated) confirmed by a keepalive, and
    /// the extension hellos exchanged: both sides have a current session.
    pub fn established() -> Pair {
        let mut pair = Pair::new();
        let (now, pb) = (pair.now(), pair.pb);
        pair.a_mut().set_persistent_keepalive(now, pb, 25);
        pair.exchange(8);
        assert!(
            pair.a()
                .peer(pair.pb)
                .is_some_and(|p| p.keypairs.current.is_some())
                && pair
                    .b()
                    .peer(pair.pa)
                    .is_some_and(|p| p.keypairs.current.is_some()),
            "the setup handshake must complete"
        );
        pair
    }

    pub fn now(&self) -> Instant {
        self.net.now
    }

    pub fn a(&self) -> &Device {
        &self.net[testing::A].device
    }

    pub fn b(&self) -> &Device {
        &self.net[testing::B].device
    }

    pub fn a_mut(&mut self) -> &mut Device {
        &mut self.net[testing::A].device
    }

    pub fn b_mut(&mut self) -> &mut Device {
        &mut self.net[testing::B].device
    }

    /// Hands datagrams to A (`to_a`) or B as if UDP received them from
    /// `src` on line 0; what comes out of the tunnel is checked.
    pub fn deliver(&mut self, to_a: bool, src: SocketAddr, datagrams: &[&[u8]]) {
        let batch: Vec<(SocketAddr, &[u8])> = datagrams
            .iter()
            .map(|d| (src, &d[..d.len().min(MAX_DATAGRAM)]))
            .collect();
        self.net.receive(node(to_a), &batch);
    }

    /// Takes what A (`from_a`) or B wants to send, as owned datagrams.
    pub fn transmit(&mut self, from_a: bool) -> Vec<Vec<u8>> {
        self.net
            .poll_transmit(node(from_a))
            .into_iter()
            .map(|d| d.bytes)
            .collect()
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

    /// Moves simulated time on, fires both devices' timers and answers a
    /// budget of their queued initiations (a driver's wake-up).
    pub fn advance(&mut self, by: Duration) {
        self.net.now += by;
        let now = self.net.now;
        self.a_mut().handle_timeout(now);
        self.a_mut().answer_queued_initiations(now);
        self.b_mut().handle_timeout(now);
        self.b_mut().answer_queued_initiations(now);
    }

    /// An IP packet enters A's (`on_a`) or B's TUN. What the device seals
    /// at once is dropped; what it queues (a handshake) `transmit` takes.
    pub fn send_from_tun(&mut self, on_a: bool, packet: &[u8]) {
        let packet = &packet[..packet.len().min(1500)];
        self.net.encapsulate(node(on_a), packet);
    }
}

impl Default for Pair {
    fn default() -> Self {
        Pair::new()
    }
}

/// An IPv4 packet from `src` to `dst` around `payload` (no checksum).
pub fn ipv4_packet(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    testing::ipv4(src, dst, proto, payload)
}
