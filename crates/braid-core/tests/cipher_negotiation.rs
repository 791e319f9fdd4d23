#![allow(clippy::disallowed_methods)] // tests pick an arbitrary origin for virtual time
//! The data cipher two peers end up with, in simulated time over a perfect
//! 1 ms line: AES-256-GCM only when both offer it, ChaCha20-Poly1305 with
//! anyone else (stock WireGuard included), and data flows either way.

use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::cipher::{CipherPolicy, DataCipher};
use braid_core::device::Device;
use braid_core::messages::{TYPE_DATA, TYPE_DATA_AES};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

const A_ADDR: &str = "198.18.0.1:51820";
const B_ADDR: &str = "198.18.0.2:51820";
const A_TUN: [u8; 4] = [198, 19, 0, 1];
const B_TUN: [u8; 4] = [198, 19, 0, 2];
const LATENCY: Duration = Duration::from_millis(1);

/// One end: its device, whether it runs braid's extensions, its policy and
/// whether its CPU has AES instructions.
#[derive(Clone, Copy)]
struct End {
    extensions: bool,
    policy: CipherPolicy,
    aes_hardware: bool,
}

const BRAID_AES: End = End {
    extensions: true,
    policy: CipherPolicy::Auto,
    aes_hardware: true,
};

struct Pair {
    now: Instant,
    a: Device,
    b: Device,
    /// (deliver at, to B?, bytes)
    flight: Vec<(Instant, bool, Vec<u8>)>,
    /// Types of the data messages each side sent, in order.
    data_types_from_a: Vec<u8>,
    data_types_from_b: Vec<u8>,
    delivered_to_b: usize,
    delivered_to_a: usize,
}

fn device(seed: u8, key: u8, end: End, now: Instant) -> Device {
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut d = Device::new(now, wall, [seed; 32]);
    d.set_private_key(Some([key; 32]));
    d.set_extensions(end.extensions);
    d.set_cipher(end.policy);
    d.set_aes_hardware(end.aes_hardware);
    d
}

impl Pair {
    fn new(a_end: End, b_end: End) -> Pair {
        let now = Instant::now();
        let mut a = device(1, 0x11, a_end, now);
        let mut b = device(2, 0x22, b_end, now);
        let pb = a.add_peer(b.public_key().unwrap()).unwrap();
        let pa = b.add_peer(a.public_key().unwrap()).unwrap();
        a.set_endpoint(pb, B_ADDR.parse().unwrap());
        a.add_allowed_ip(pb, IpAddr::V4(Ipv4Addr::from(B_TUN)), 32)
            .unwrap();
        b.add_allowed_ip(pa, IpAddr::V4(Ipv4Addr::from(A_TUN)), 32)
            .unwrap();
        Pair {
            now,
            a,
            b,
            flight: Vec::new(),
            data_types_from_a: Vec::new(),
            data_types_from_b: Vec::new(),
            delivered_to_b: 0,
            delivered_to_a: 0,
        }
    }

    fn ship(&mut self, from_a: bool, batch: &PacketBatch) {
        for i in 0..batch.len() {
            let bytes = batch.packet(i);
            if bytes.is_empty() {
                continue;
            }
            if matches!(bytes[0], TYPE_DATA | TYPE_DATA_AES) {
                let log = if from_a {
                    &mut self.data_types_from_a
                } else {
                    &mut self.data_types_from_b
                };
                log.push(bytes[0]);
            }
            self.flight
                .push((self.now + LATENCY, from_a, bytes.to_vec()));
        }
    }

    fn send_packet(&mut self, from_a: bool) {
        let (src, dst) = if from_a {
            (A_TUN, B_TUN)
        } else {
            (B_TUN, A_TUN)
        };
        let mut packet = vec![0u8; 120];
        packet[0] = 0x45;
        packet[2..4].copy_from_slice(&120u16.to_be_bytes());
        packet[9] = 17;
        packet[12..16].copy_from_slice(&src);
        packet[16..20].copy_from_slice(&dst);
        let mut batch = PacketBatch::new(4, 2048);
        batch.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |b| {
            b[..packet.len()].copy_from_slice(&packet);
            packet.len()
        });
        let now = self.now;
        let dev = if from_a { &mut self.a } else { &mut self.b };
        dev.encapsulate(now, &mut batch);
        self.ship(from_a, &batch);
    }

    /// Runs both devices for `span` of virtual time in 1 ms steps.
    fn run(&mut self, span: Duration) {
        let end = self.now + span;
        while self.now < end {
            self.now += Duration::from_millis(1);
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) =
                self.flight.drain(..).partition(|(at, _, _)| *at <= now);
            self.flight = later;
            for (_, to_b, bytes) in due {
                let mut batch = PacketBatch::new(1, 2048);
                let from: SocketAddr = if to_b { A_ADDR } else { B_ADDR }.parse().unwrap();
                batch.push_with(0, from, |b| {
                    b[..bytes.len()].copy_from_slice(&bytes);
                    bytes.len()
                });
                let dev = if to_b { &mut self.b } else { &mut self.a };
                dev.decapsulate(now, &mut batch);
                let delivered = (0..batch.len())
                    .filter(|&i| !batch.packet(i).is_empty())
                    .count();
                if to_b {
                    self.delivered_to_b += delivered;
                } else {
                    self.delivered_to_a += delivered;
                }
            }
            for from_a in [true, false] {
                let dev = if from_a { &mut self.a } else { &mut self.b };
                dev.handle_timeout(now);
                let mut out = PacketBatch::new(64, 2048);
                loop {
                    out.clear();
                    let dev = if from_a { &mut self.a } else { &mut self.b };
                    let more = dev.poll_transmit(now, &mut out);
                    self.ship(from_a, &out);
                    if !more {
                        break;
                    }
                }
            }
        }
    }

    /// Sends `n` packets each way, one per virtual millisecond, then lets
    /// the line drain.
    fn exchange(&mut self, n: usize) {
        for _ in 0..n {
            self.send_packet(true);
            self.send_packet(false);
            self.run(Duration::from_millis(1));
        }
        self.run(Duration::from_millis(20));
    }

    fn cipher_of_a(&self) -> Option<DataCipher> {
        self.a.peer_info(0).and_then(|p| p.cipher)
    }

    fn cipher_of_b(&self) -> Option<DataCipher> {
        self.b.peer_info(0).and_then(|p| p.cipher)
    }
}

/// Brings the session up and lets hellos cross, then sends data both ways.
fn negotiate(a: End, b: End) -> Pair {
    let mut pair = Pair::new(a, b);
    pair.send_packet(true);
    pair.run(Duration::from_millis(300));
    pair.data_types_from_a.clear();
    pair.data_types_from_b.clear();
    pair.delivered_to_a = 0;
    pair.delivered_to_b = 0;
    pair.exchange(50);
    pair
}

fn all(types: &[u8], ty: u8) -> bool {
    !types.is_empty() && types.iter().all(|&t| t == ty)
}

#[test]
fn two_braid_peers_with_aes_hardware_move_to_aes() {
    let pair = negotiate(BRAID_AES, BRAID_AES);
    assert_eq!(pair.cipher_of_a(), Some(DataCipher::Aes256Gcm));
    assert_eq!(pair.cipher_of_b(), Some(DataCipher::Aes256Gcm));
    assert!(all(&pair.data_types_from_a, TYPE_DATA_AES));
    assert!(all(&pair.data_types_from_b, TYPE_DATA_AES));
    assert_eq!(pair.delivered_to_b, 50);
    assert_eq!(pair.delivered_to_a, 50);
}

#[test]
fn anyone_not_offering_aes_keeps_chacha() {
    let no_hw = End {
        aes_hardware: false,
        ..BRAID_AES
    };
    let chacha_only = End {
        policy: CipherPolicy::ChaCha20Poly1305,
        ..BRAID_AES
    };
    let stock = End {
        extensions: false,
        ..BRAID_AES
    };
    let forced_without_hw = End {
        policy: CipherPolicy::Aes256Gcm,
        aes_hardware: false,
        ..BRAID_AES
    };
    // (A, B, the cipher both must use)
    let cases = [
        (BRAID_AES, no_hw, DataCipher::ChaCha20Poly1305),
        (no_hw, no_hw, DataCipher::ChaCha20Poly1305),
        (chacha_only, BRAID_AES, DataCipher::ChaCha20Poly1305),
        (BRAID_AES, chacha_only, DataCipher::ChaCha20Poly1305),
        (BRAID_AES, stock, DataCipher::ChaCha20Poly1305),
        (stock, BRAID_AES, DataCipher::ChaCha20Poly1305),
        // `Cipher = aes256gcm` offers it even without the hardware.
        (forced_without_hw, BRAID_AES, DataCipher::Aes256Gcm),
        (forced_without_hw, no_hw, DataCipher::ChaCha20Poly1305),
    ];
    for (i, (a, b, want)) in cases.into_iter().enumerate() {
        let pair = negotiate(a, b);
        assert_eq!(pair.cipher_of_a(), Some(want), "case {i}: A");
        assert_eq!(pair.cipher_of_b(), Some(want), "case {i}: B");
        let ty = match want {
            DataCipher::ChaCha20Poly1305 => TYPE_DATA,
            DataCipher::Aes256Gcm => TYPE_DATA_AES,
        };
        assert!(all(&pair.data_types_from_a, ty), "case {i}: A's data types");
        assert!(all(&pair.data_types_from_b, ty), "case {i}: B's data types");
        assert_eq!(pair.delivered_to_b, 50, "case {i}: delivered to B");
        assert_eq!(pair.delivered_to_a, 50, "case {i}: delivered to A");
    }
}

#[test]
fn a_peer_policy_overrides_the_interface() {
    let mut pair = Pair::new(BRAID_AES, BRAID_AES);
    pair.a
        .set_peer_cipher(0, Some(CipherPolicy::ChaCha20Poly1305));
    pair.send_packet(true);
    pair.run(Duration::from_millis(300));
    pair.data_types_from_a.clear();
    pair.data_types_from_b.clear();
    pair.exchange(10);
    assert_eq!(pair.cipher_of_a(), Some(DataCipher::ChaCha20Poly1305));
    assert_eq!(pair.cipher_of_b(), Some(DataCipher::ChaCha20Poly1305));
    assert!(all(&pair.data_types_from_b, TYPE_DATA));
}

#[test]
fn a_rekeyed_session_negotiates_again() {
    let mut pair = negotiate(BRAID_AES, BRAID_AES);
    // Past REKEY_AFTER_TIME the initiator starts a new session, which
    // begins in ChaCha20-Poly1305 and moves to AES after the hellos.
    for _ in 0..130 {
        pair.exchange(1);
        pair.run(Duration::from_secs(1));
    }
    pair.data_types_from_a.clear();
    pair.data_types_from_b.clear();
    pair.exchange(20);
    assert_eq!(pair.cipher_of_a(), Some(DataCipher::Aes256Gcm));
    assert!(all(&pair.data_types_from_a, TYPE_DATA_AES));
    assert!(all(&pair.data_types_from_b, TYPE_DATA_AES));
}
