//! What every simulated test starts from: node numbers, seeded devices and
//! IPv4 packets.

use super::clock;
use crate::batch::PacketBatch;
use crate::device::Device;
use std::net::SocketAddr;
use std::time::Instant;

/// A node's index in its [`Net`](super::Net).
pub type NodeId = usize;

/// The first three nodes.
pub const A: NodeId = 0;
pub const B: NodeId = 1;
pub const C: NodeId = 2;

/// A device at [`clock::epoch`] whose randomness is seeded with `seed` and
/// whose private key is `seed × 0x11` in every byte.
pub fn device(seed: u8) -> Device {
    let mut d = Device::new(clock::epoch(), clock::wall(), [seed; 32]);
    d.set_private_key(Some([seed.wrapping_mul(0x11); 32]));
    d
}

/// An IPv4 packet (TTL 64, protocol `proto`, no options) from `src` to
/// `dst` around `payload`.
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
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

/// Hands `datagrams` (source, bytes) to `device` as received, in batches
/// of up to 64 on line 0, as a UDP socket's read loop would.
pub fn receive(device: &mut Device, now: Instant, datagrams: &[(SocketAddr, &[u8])]) {
    for chunk in datagrams.chunks(64) {
        let mut batch = PacketBatch::new(chunk.len(), 2048);
        for (src, bytes) in chunk {
            batch.push_with(0, *src, |b| {
                b[..bytes.len()].copy_from_slice(bytes);
                bytes.len()
            });
        }
        device.decapsulate(now, &mut batch);
    }
}

/// Everything `device` wants to send now (handshakes, cookies, keepalives,
/// probes…), taken out of it.
pub fn transmit(device: &mut Device, now: Instant) -> Vec<Vec<u8>> {
    let mut out = PacketBatch::new(64, 2048);
    let mut sent = Vec::new();
    loop {
        out.clear();
        let more = device.poll_transmit(now, &mut out);
        sent.extend((0..out.len()).map(|i| out.packet(i).to_vec()));
        if !more {
            return sent;
        }
    }
}
