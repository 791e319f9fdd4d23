#![allow(clippy::disallowed_methods)] // tests pick an arbitrary origin for virtual time
//! Two braid peers over two lines in simulated time, each line a seeded
//! `LinkModel` per direction:
//!
//! ```text
//!   A line 1 (198.18.1.1) ──link 1──┐
//!                                   ├── B 198.18.0.2:51820 (one socket)
//!   A line 2 (198.18.2.1) ──link 2──┘
//! ```
//!
//! A knows both paths from its config; B learns them from authenticated
//! traffic. Checks redundant, failover and aggregate behaviour.

use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::device::Device;
use braid_core::link::{apply_corruption, Fate, LinkModel, LinkParams};
use braid_core::path::Mode;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

const B_ADDR: &str = "198.18.0.2:51820";
const A_TUN: [u8; 4] = [198, 19, 0, 1];
const B_TUN: [u8; 4] = [198, 19, 0, 2];

fn a_addr(line: u16) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(198, 18, line as u8, 1)),
        40000 + line,
    )
}

struct InFlight {
    to_b: bool,
    line: u16,
    at: Instant,
    bytes: Vec<u8>,
}

struct Net {
    now: Instant,
    a: Device,
    b: Device,
    /// Per line (index 1 and 2): A→B and B→A.
    up: Vec<LinkModel>,
    down: Vec<LinkModel>,
    flight: Vec<InFlight>,
    got_a: Vec<u32>,
    got_b: Vec<u32>,
    sent_on_line_to_b: [u64; 3],
}

fn ipv4(src: [u8; 4], dst: [u8; 4], seq: u32) -> Vec<u8> {
    let mut p = vec![0u8; 20 + 100];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&120u16.to_be_bytes());
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p[20..24].copy_from_slice(&seq.to_be_bytes());
    p
}

impl Net {
    fn new(mode: Mode, line1: LinkParams, line2: LinkParams, seed: u64) -> Net {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut a = Device::new(now, wall, [1; 32]);
        let mut b = Device::new(now, wall, [2; 32]);
        a.set_private_key(Some([0x11; 32]));
        b.set_private_key(Some([0x22; 32]));
        let pb = a.add_peer(b.public_key().unwrap()).unwrap();
        let pa = b.add_peer(a.public_key().unwrap()).unwrap();
        a.add_path(pb, "line1", 1, B_ADDR.parse().unwrap());
        a.add_path(pb, "line2", 2, B_ADDR.parse().unwrap());
        a.set_mode(pb, mode);
        b.set_mode(pa, mode);
        a.add_allowed_ip(pb, IpAddr::V4(Ipv4Addr::from(B_TUN)), 32)
            .unwrap();
        b.add_allowed_ip(pa, IpAddr::V4(Ipv4Addr::from(A_TUN)), 32)
            .unwrap();
        let unused = LinkParams::default();
        Net {
            now,
            a,
            b,
            up: vec![
                LinkModel::new(unused.clone(), 0),
                LinkModel::new(line1.clone(), seed),
                LinkModel::new(line2.clone(), seed + 1),
            ],
            down: vec![
                LinkModel::new(unused, 0),
                LinkModel::new(line1, seed + 2),
                LinkModel::new(line2, seed + 3),
            ],
            flight: Vec::new(),
            got_a: Vec::new(),
            got_b: Vec::new(),
            sent_on_line_to_b: [0; 3],
        }
    }

    /// Puts a batch that `from_a` (or B) sent onto the lines.
    fn emit(&mut self, from_a: bool, batch: &PacketBatch) {
        let mut dests: Vec<(usize, u16, SocketAddr)> = (0..batch.len())
            .map(|i| (i, batch.line(i), batch.addr(i)))
            .collect();
        dests.extend(batch.copies().iter().map(|c| (c.slot, c.line, c.addr)));
        for (i, line, addr) in dests {
            let bytes = batch.packet(i);
            if bytes.is_empty() {
                continue;
            }
            // B has one socket; which A line a datagram takes follows its
            // destination address.
            let line = if from_a { line } else { addr.port() - 40000 };
            assert!(line == 1 || line == 2, "datagram on line {line} to {addr}");
            if from_a {
                self.sent_on_line_to_b[line as usize] += 1;
            }
            let model = if from_a {
                &mut self.up[line as usize]
            } else {
                &mut self.down[line as usize]
            };
            if let Fate::Delivered { first, duplicate } = model.offer(self.now, bytes.len()) {
                for d in std::iter::once(first).chain(duplicate) {
                    let mut copy = bytes.to_vec();
                    if let Some(bit) = d.corrupt_bit {
                        apply_corruption(&mut copy, bit);
                    }
                    self.flight.push(InFlight {
                        to_b: from_a,
                        line,
                        at: d.at,
                        bytes: copy,
                    });
                }
            }
        }
    }

    fn flush(&mut self, a: bool) {
        let mut out = PacketBatch::new(64, 2048);
        loop {
            out.clear();
            let now = self.now;
            let more = if a {
                self.a.poll_transmit(now, &mut out)
            } else {
                self.b.poll_transmit(now, &mut out)
            };
            self.emit(a, &out);
            if !more {
                break;
            }
        }
    }

    fn send(&mut self, from_a: bool, seq: u32) {
        let pkt = if from_a {
            ipv4(A_TUN, B_TUN, seq)
        } else {
            ipv4(B_TUN, A_TUN, seq)
        };
        let mut batch = PacketBatch::new(1, 2048);
        batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
            b[..pkt.len()].copy_from_slice(&pkt);
            pkt.len()
        });
        let now = self.now;
        if from_a {
            self.a.encapsulate(now, &mut batch)
        } else {
            self.b.encapsulate(now, &mut batch)
        }
        self.emit(from_a, &batch);
        self.flush(from_a);
    }

    fn deliver(&mut self, f: InFlight) {
        let mut batch = PacketBatch::new(1, 2048);
        let src = if f.to_b {
            a_addr(f.line)
        } else {
            B_ADDR.parse().unwrap()
        };
        batch.push_with(0, src, |b| {
            b[..f.bytes.len()].copy_from_slice(&f.bytes);
            f.bytes.len()
        });
        batch.set_line(0, if f.to_b { 0 } else { f.line });
        let now = self.now;
        if f.to_b {
            self.b.decapsulate(now, &mut batch)
        } else {
            self.a.decapsulate(now, &mut batch)
        }
        let p = batch.packet(0).to_vec();
        self.record(f.to_b, &p);
        self.drain_tun(f.to_b);
        self.flush(!f.to_b);
    }

    fn record(&mut self, at_b: bool, p: &[u8]) {
        if p.len() >= 24 {
            let seq = u32::from_be_bytes(p[20..24].try_into().unwrap());
            if at_b {
                self.got_b.push(seq)
            } else {
                self.got_a.push(seq)
            }
        }
    }

    /// What the reorder windows released goes to the TUN after the batch.
    fn drain_tun(&mut self, b: bool) {
        let mut out = PacketBatch::new(64, 2048);
        loop {
            out.clear();
            let more = if b {
                self.b.poll_tun(&mut out)
            } else {
                self.a.poll_tun(&mut out)
            };
            for i in 0..out.len() {
                let p = out.packet(i).to_vec();
                self.record(b, &p);
            }
            if !more {
                break;
            }
        }
    }

    fn run_until(&mut self, until: Instant) {
        loop {
            let next_packet = self.flight.iter().map(|f| f.at).min();
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
                let i = self.flight.iter().position(|f| f.at == t).unwrap();
                let f = self.flight.swap_remove(i);
                self.deliver(f);
            } else {
                let now = self.now;
                self.a.handle_timeout(now);
                self.b.handle_timeout(now);
                self.drain_tun(true);
                self.drain_tun(false);
                self.flush(true);
                self.flush(false);
            }
        }
        self.now = until;
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// A stream A→B of `count` packets every `gap`, after the tunnel is up.
    fn stream(&mut self, count: u32, gap: Duration, mut at_step: impl FnMut(&mut Net, u32)) {
        for seq in 0..count {
            at_step(self, seq);
            self.send(true, seq);
            self.run_for(gap);
        }
        self.run_for(Duration::from_secs(1));
    }

    fn establish(&mut self) {
        self.send(true, u32::MAX);
        self.run_for(Duration::from_secs(1));
        self.got_b.clear();
        let pid = self.b.peer_ids().next().unwrap();
        let info = self.b.peer_info(pid).unwrap();
        assert!(
            info.speaks_braid && info.paths.len() == 2,
            "B learned both lines: {:?}",
            info.paths
        );
    }
}

fn lossy(loss: f64) -> LinkParams {
    LinkParams {
        delay: Duration::from_millis(5),
        loss,
        ..LinkParams::default()
    }
}

fn unique(v: &[u32]) -> usize {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.dedup();
    s.len()
}

#[test]
fn redundant_two_lossy_lines_lose_almost_nothing() {
    let mut net = Net::new(Mode::Redundant, lossy(0.02), lossy(0.02), 7);
    net.establish();
    let n = 20_000;
    net.stream(n, Duration::from_micros(500), |_, _| {});
    let got = unique(&net.got_b) as u32;
    // Independent 2 % on each line: 0.04 % expected, ≤ 0.1 % required.
    assert!(n - got <= n / 1000, "lost {} of {n}", n - got);
    assert_eq!(
        got as usize,
        net.got_b.len(),
        "no duplicate reached the TUN"
    );
    assert!(
        net.sent_on_line_to_b[1] > n as u64 && net.sent_on_line_to_b[2] > n as u64,
        "every packet on both lines"
    );
}

#[test]
fn redundant_survives_a_cut_line_without_loss() {
    let mut net = Net::new(Mode::Redundant, lossy(0.0), lossy(0.0), 9);
    net.establish();
    net.stream(6000, Duration::from_millis(1), |net, seq| match seq {
        1500 => net.up[1].set_cut(true),
        1500..=4500 if seq == 4500 => net.up[1].set_cut(false),
        _ => {}
    });
    assert_eq!(
        unique(&net.got_b),
        6000,
        "nothing lost while line 1 was cut"
    );
    let pid = net.a.peer_ids().next().unwrap();
    let paths = net.a.peer_info(pid).unwrap().paths;
    assert!(
        paths.iter().all(|p| p.is_up()),
        "line 1 came back: {paths:?}"
    );
}

#[test]
fn failover_switches_within_300_ms() {
    let mut net = Net::new(Mode::Failover, lossy(0.0), lossy(0.0), 11);
    net.establish();
    let cut_at = 2000u32;
    net.stream(5000, Duration::from_millis(1), |net, seq| {
        if seq == cut_at {
            net.up[1].set_cut(true);
            net.down[1].set_cut(true);
        }
    });
    // Before the cut everything went on line 1 only.
    let mut got = net.got_b.clone();
    got.sort_unstable();
    got.dedup();
    let missing: Vec<u32> = (0..5000)
        .filter(|s| got.binary_search(s).is_err())
        .collect();
    assert!(
        missing.iter().all(|&s| s >= cut_at),
        "loss only after the cut: {:?}",
        &missing[..missing.len().min(5)]
    );
    // 1 packet per ms: the outage in packets is the switch time in ms.
    eprintln!(
        "failover: {} packets (ms) lost after the cut",
        missing.len()
    );
    assert!(missing.len() <= 300, "switched after {} ms", missing.len());
    assert!(
        !missing.is_empty(),
        "failover does not duplicate, so the cut costs something"
    );
}

#[test]
fn aggregate_spreads_packets_over_both_lines() {
    let mut net = Net::new(Mode::Aggregate, lossy(0.0), lossy(0.0), 13);
    net.establish();
    let before = net.sent_on_line_to_b;
    net.stream(4000, Duration::from_micros(250), |_, _| {});
    let l1 = net.sent_on_line_to_b[1] - before[1];
    let l2 = net.sent_on_line_to_b[2] - before[2];
    assert!(l1 > 1000 && l2 > 1000, "both lines carry data: {l1} / {l2}");
    assert!(l1 + l2 < 4000 + 4000 / 2, "not duplicated: {l1} + {l2}");
    assert_eq!(unique(&net.got_b), 4000);
}

#[test]
fn stock_peer_gets_only_the_primary_path() {
    let mut net = Net::new(Mode::Redundant, lossy(0.0), lossy(0.0), 15);
    net.b.set_extensions(false);
    net.send(true, u32::MAX);
    net.run_for(Duration::from_secs(1));
    net.got_b.clear();
    let before = net.sent_on_line_to_b;
    net.stream(500, Duration::from_millis(1), |_, _| {});
    let data_l2 = net.sent_on_line_to_b[2] - before[2];
    // Hellos stop after a few attempts; data never goes on line 2.
    assert!(
        data_l2 <= 12,
        "line 2 carried {data_l2} datagrams to a stock peer"
    );
    assert_eq!(unique(&net.got_b), 500);
}
