#![allow(clippy::disallowed_methods)] // tests pick an arbitrary origin for virtual time
//! Two braid devices over one simulated line whose MTU can change: path
//! MTU discovery runs through real sealed, padded probes and their acks.

use braid_core::batch::PacketBatch;
use braid_core::device::Device;
use braid_core::link::{Fate, LinkModel, LinkParams};
use braid_core::pmtud::PmtuState;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

const A_ADDR: &str = "198.18.1.1:40001";
const B_ADDR: &str = "198.18.0.2:51820";
const STRIDE: usize = 9 * 1024 + 256;

struct Net {
    now: Instant,
    a: Device,
    b: Device,
    to_b: LinkModel,
    to_a: LinkModel,
    /// (arrives, towards B, bytes)
    flight: Vec<(Instant, bool, Vec<u8>)>,
}

impl Net {
    fn new(line: LinkParams) -> Net {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut a = Device::new(now, wall, [1; 32]);
        let mut b = Device::new(now, wall, [2; 32]);
        a.set_private_key(Some([0x11; 32]));
        b.set_private_key(Some([0x22; 32]));
        let pb = a.add_peer(b.public_key().unwrap()).unwrap();
        let pa = b.add_peer(a.public_key().unwrap()).unwrap();
        a.add_path(pb, "line1", 1, B_ADDR.parse().unwrap());
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        a.add_allowed_ip(pb, any, 0).unwrap();
        b.add_allowed_ip(pa, any, 0).unwrap();
        a.set_persistent_keepalive(now, pb, 25);
        let mut net = Net {
            now,
            a,
            b,
            to_b: LinkModel::new(line.clone(), 1),
            to_a: LinkModel::new(line, 2),
            flight: Vec::new(),
        };
        net.flush();
        net
    }

    fn set_mtu(&mut self, mtu: Option<usize>) {
        let params = LinkParams {
            mtu,
            delay: Duration::from_millis(5),
            ..LinkParams::default()
        };
        self.to_b = LinkModel::new(params.clone(), 3);
        self.to_a = LinkModel::new(params, 4);
    }

    fn flush(&mut self) {
        let mut out = PacketBatch::new(16, STRIDE);
        for from_a in [true, false] {
            loop {
                out.clear();
                let dev = if from_a { &mut self.a } else { &mut self.b };
                let more = dev.poll_transmit(self.now, &mut out);
                for i in 0..out.len() {
                    let bytes = out.packet(i);
                    if bytes.is_empty() {
                        continue;
                    }
                    let model = if from_a {
                        &mut self.to_b
                    } else {
                        &mut self.to_a
                    };
                    if let Fate::Delivered { first, .. } = model.offer(self.now, bytes.len()) {
                        self.flight.push((first.at, from_a, bytes.to_vec()));
                    }
                }
                if !more {
                    break;
                }
            }
        }
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        loop {
            let next_packet = self.flight.iter().map(|f| f.0).min();
            let next_timer = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = [next_packet, next_timer]
                .into_iter()
                .flatten()
                .min()
                .filter(|t| *t <= until)
            else {
                break;
            };
            self.now = self.now.max(t);
            if next_packet == Some(t) {
                let i = self.flight.iter().position(|f| f.0 == t).unwrap();
                let (_, to_b, bytes) = self.flight.swap_remove(i);
                let mut batch = PacketBatch::new(1, STRIDE);
                let src: SocketAddr = if to_b { A_ADDR } else { B_ADDR }.parse().unwrap();
                batch.push_with(0, src, |b| {
                    b[..bytes.len()].copy_from_slice(&bytes);
                    bytes.len()
                });
                batch.set_line(0, if to_b { 0 } else { 1 });
                let now = self.now;
                if to_b {
                    self.b.decapsulate(now, &mut batch);
                } else {
                    self.a.decapsulate(now, &mut batch);
                }
            } else {
                let now = self.now;
                self.a.handle_timeout(now);
                self.b.handle_timeout(now);
            }
            self.flush();
        }
        self.now = until;
    }

    fn a_path(&self) -> braid_core::path::Path {
        let pid = self.a.peer_ids().next().unwrap();
        self.a.peer_info(pid).unwrap().paths[0].clone()
    }

    /// Runs until A's path settles; returns the simulated time it took.
    fn settle(&mut self) -> Duration {
        let start = self.now;
        for _ in 0..600 {
            self.run_for(Duration::from_millis(50));
            if self.a_path().pmtu.state() == PmtuState::SearchComplete {
                return self.now - start;
            }
        }
        panic!("no convergence: {:?}", self.a_path().pmtu);
    }
}

/// The datagram A makes of an IPv4 packet of `len` bytes.
fn sealed_len(net: &mut Net, len: usize) -> usize {
    let mut batch = PacketBatch::new(1, STRIDE);
    batch.push_with(
        braid_core::batch::HEADROOM,
        "0.0.0.0:0".parse().unwrap(),
        |b| {
            b[..len].fill(0);
            b[0] = 0x45;
            b[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            b[9] = 17;
            b[12..16].copy_from_slice(&[198, 19, 0, 1]);
            b[16..20].copy_from_slice(&[198, 19, 0, 2]);
            len
        },
    );
    let now = net.now;
    net.a.encapsulate(now, &mut batch);
    batch.packet(0).len()
}

#[test]
fn probes_find_the_line_and_a_black_hole_is_recovered() {
    let mut net = Net::new(LinkParams {
        delay: Duration::from_millis(5),
        ..LinkParams::default()
    });
    net.settle();
    // An IPv4 line of (assumed) 1500: 1500 − 28 − 32.
    assert_eq!(net.a_path().pmtu.plpmtu(), 1440);
    assert_eq!(net.a.path_mtu_target(1420), 1440);

    // The line now drops datagrams above 1400 bytes: 1368-byte packets fit.
    net.set_mtu(Some(1400));
    net.run_for(Duration::from_millis(100));
    let took = {
        let start = net.now;
        for _ in 0..600 {
            net.run_for(Duration::from_millis(50));
            let p = net.a_path().pmtu;
            if p.counters.black_holes > 0 && p.state() == PmtuState::SearchComplete {
                break;
            }
        }
        net.now - start
    };
    let p = net.a_path().pmtu;
    assert_eq!(p.counters.black_holes, 1);
    assert_eq!(p.plpmtu(), 1368);
    assert!(net.a_path().is_up(), "small probes kept the path up");
    assert_eq!(net.a.path_mtu_target(1420), 1368);
    assert!(took < Duration::from_secs(10), "{took:?} of simulated time");

    // A packet that fits the path must not be padded past it: with the
    // interface MTU at 1420 WireGuard would pad 1368 to 1376 (a 1408-byte
    // datagram the line drops); capped at the target it stays 1400.
    net.a.set_mtu(1420);
    assert_eq!(sealed_len(&mut net, 1368), 1408);
    let target = net.a.path_mtu_target(1420);
    net.a.set_padding_cap(target);
    assert_eq!(sealed_len(&mut net, 1368), 1400);

    // The limit goes away: the raise timer finds the ceiling again.
    net.set_mtu(None);
    net.run_for(braid_core::pmtud::RAISE_INTERVAL + Duration::from_secs(3));
    assert_eq!(net.a_path().pmtu.plpmtu(), 1440);
}
