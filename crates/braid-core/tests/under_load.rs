//! "Under load" (when handshakes must carry a cookie) counts only messages
//! with a valid mac1: someone who does not know our public key cannot make
//! real peers go through cookie round trips by flooding garbage.

use braid_core::consts::UNDER_LOAD_HANDSHAKES_PER_SECOND;
use braid_core::cookie::CookieState;
use braid_core::messages::{INITIATION_LEN, TYPE_COOKIE_REPLY, TYPE_RESPONSE};
use braid_core::noise::{self, LocalStatic, RemoteStatic};
use braid_core::testing::{clock, device, receive, transmit};
use std::net::SocketAddr;
use std::time::Instant;
use x25519_dalek::StaticSecret;

/// An initiation from `from` to `to` with mac1 (no cookie, so no mac2).
fn initiation(from: &LocalStatic, to: [u8; 32], now: Instant) -> [u8; INITIATION_LEN] {
    let remote = RemoteStatic::new(from, to, [0; 32]);
    let mut msg = [0u8; INITIATION_LEN];
    noise::create_initiation(
        from,
        &remote,
        StaticSecret::from([3; 32]),
        &noise::tai64n(clock::WALL_SECS, 0),
        7,
        &mut msg,
    )
    .unwrap();
    CookieState::new(&to).add_macs(now, &mut msg);
    msg
}

/// The message type of each datagram.
fn types(sent: &[Vec<u8>]) -> Vec<u8> {
    sent.iter().map(|d| d[0]).collect()
}

#[test]
fn a_flood_without_mac1_does_not_put_the_device_under_load() {
    let now = clock::epoch();
    let mut b = device(2);
    let b_public = b.public_key().unwrap();
    let a = LocalStatic::new([1u8.wrapping_mul(0x11); 32]);
    b.add_peer(a.public).unwrap();
    let peer_src: SocketAddr = "198.18.0.1:51820".parse().unwrap();
    let flood_src: SocketAddr = "198.18.66.1:40000".parse().unwrap();

    // Four times the under-load threshold, each a well-formed initiation
    // whose mac1 is wrong, within the same second.
    let mut garbage = initiation(&a, b_public, now);
    let mac1 = INITIATION_LEN - 32;
    garbage[mac1] ^= 1;
    let flood = vec![garbage; 4 * UNDER_LOAD_HANDSHAKES_PER_SECOND as usize];
    let flood: Vec<(SocketAddr, &[u8])> = flood.iter().map(|m| (flood_src, &m[..])).collect();
    receive(&mut b, now, &flood);
    assert_eq!(b.counters.invalid_mac, flood.len() as u64);
    assert_eq!(types(&transmit(&mut b, now)), Vec::<u8>::new());

    // The real peer's initiation (mac1, no cookie) is answered at once.
    receive(&mut b, now, &[(peer_src, &initiation(&a, b_public, now))]);
    assert_eq!(types(&transmit(&mut b, now)), vec![TYPE_RESPONSE]);
    assert_eq!(b.counters.cookie_replies_sent, 0);
}

#[test]
fn a_flood_with_valid_mac1_still_brings_cookies() {
    let now = clock::epoch();
    let mut b = device(2);
    let b_public = b.public_key().unwrap();
    let a = LocalStatic::new([0x11; 32]);
    b.add_peer(a.public).unwrap();
    let src: SocketAddr = "198.18.66.1:40000".parse().unwrap();
    let stranger = LocalStatic::new([0x55; 32]);
    let flood =
        vec![initiation(&stranger, b_public, now); 2 * UNDER_LOAD_HANDSHAKES_PER_SECOND as usize];
    let flood: Vec<(SocketAddr, &[u8])> = flood.iter().map(|m| (src, &m[..])).collect();
    receive(&mut b, now, &flood);
    let types = types(&transmit(&mut b, now));
    assert!(types.contains(&TYPE_COOKIE_REPLY), "{types:?}");
}
