//! Whatever arrives from the network or the TUN, the device neither panics
//! nor delivers anything unauthenticated (a property test until the fuzz
//! targets of a later issue exist).

use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::device::Device;
use braid_core::testing::{self, clock};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

fn device() -> (Device, Instant) {
    let mut d = testing::device(3);
    let pid = d.add_peer([0x44; 32]).unwrap();
    d.set_endpoint(pid, "198.18.0.9:51820".parse().unwrap());
    d.add_allowed_ip(pid, IpAddr::V4(Ipv4Addr::new(198, 19, 0, 0)), 16)
        .unwrap();
    (d, clock::epoch())
}

/// Datagrams that look like WireGuard messages (right type and length) with
/// random content, or anything at all.
fn datagram() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        (
            1u8..=4,
            prop_oneof![Just(148usize), Just(92), Just(64), 32usize..200]
        )
            .prop_flat_map(|(ty, len)| proptest::collection::vec(any::<u8>(), len)
                .prop_map(move |mut v| {
                    v[0] = ty;
                    v[1..4].fill(0);
                    v
                })),
    ]
}

proptest! {
    #[test]
    fn random_datagrams_deliver_nothing(batch in proptest::collection::vec(datagram(), 1..32)) {
        let (mut d, now) = device();
        let mut b = PacketBatch::new(batch.len(), 2048);
        let src: SocketAddr = "198.18.5.5:1234".parse().unwrap();
        for dg in &batch {
            b.push_with(0, src, |buf| { buf[..dg.len()].copy_from_slice(dg); dg.len() });
        }
        d.decapsulate(now, &mut b);
        for i in 0..b.len() {
            prop_assert!(b.packet(i).is_empty(), "an unauthenticated datagram reached the TUN");
        }
        d.handle_timeout(now + Duration::from_secs(30));
        let mut out = PacketBatch::new(64, 2048);
        while d.poll_transmit(now, &mut out) { out.clear(); }
    }

    #[test]
    fn random_tun_packets_never_panic(packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1500), 1..32)) {
        let (mut d, now) = device();
        let mut b = PacketBatch::new(packets.len(), 2048);
        for p in &packets {
            b.push_with(HEADROOM, "0.0.0.0:0".parse().unwrap(), |buf| { buf[..p.len()].copy_from_slice(p); p.len() });
        }
        d.encapsulate(now, &mut b);
        let mut out = PacketBatch::new(64, 2048);
        while d.poll_transmit(now, &mut out) { out.clear(); }
        d.handle_timeout(now + Duration::from_secs(200));
    }
}
