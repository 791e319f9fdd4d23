//! A peer key that is a point of small order (the all-zero placeholder is
//! one) makes every Diffie-Hellman result zero, which anyone can compute:
//! unless zero results are refused, anyone who knows our public key can
//! complete a handshake as that peer. Linux WireGuard and wireguard-go
//! refuse them; so does braid.

use braid_core::cookie::CookieState;
use braid_core::messages::INITIATION_LEN;
use braid_core::noise::{self, LocalStatic, RemoteStatic};
use braid_core::testing::{clock, device, receive, transmit};
use std::net::SocketAddr;
use std::time::Instant;
use x25519_dalek::StaticSecret;

/// Encodings of points of small order on Curve25519: 0, 1, the two points
/// of order 8, p − 1, p and p + 1 (the last two non-canonical).
const LOW_ORDER: [&str; 7] = [
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
];

fn key(hex: &str) -> [u8; 32] {
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    k
}

/// The fast check (a comparison with the small-order points) says what
/// the DH definition says: for every small-order encoding (p and p + 1
/// are the non-canonical ones that fit in 255 bits), for each with bit
/// 255 set (X25519 ignores it), and for random keys, many near p.
#[test]
fn small_order_list_matches_the_dh_definition() {
    let mut encodings: Vec<[u8; 32]> = LOW_ORDER.iter().map(|h| key(h)).collect();
    for k in encodings.clone() {
        let mut high = k;
        high[31] |= 0x80;
        encodings.push(high);
    }
    for k in &encodings {
        assert!(noise::is_low_order_by_dh(k), "{k:02x?} is of small order");
        assert!(noise::is_low_order(k), "{k:02x?}");
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let mut k = [0u8; 32];
        for b in &mut k {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            *b = rng as u8;
        }
        // Near p too, where the reduction matters.
        if rng.is_multiple_of(4) {
            k[1..31].fill(0xff);
            k[31] = 0x7f | (k[31] & 0x80);
        }
        assert_eq!(
            noise::is_low_order(&k),
            noise::is_low_order_by_dh(&k),
            "{k:02x?}"
        );
    }
}

#[test]
fn low_order_points_are_recognised_and_real_keys_are_not() {
    for hex in LOW_ORDER {
        assert!(noise::is_low_order(&key(hex)), "{hex}");
    }
    for seed in 1..=32u8 {
        let public = LocalStatic::new([seed; 32]).public;
        assert!(!noise::is_low_order(&public), "the key of [{seed}; 32]");
    }
}

/// The forger knows B's public key and claims the static key zero, for
/// which DH(static, B) is zero whatever B's private key is.
fn forged_initiation(b_public: [u8; 32], now: Instant) -> [u8; INITIATION_LEN] {
    let forger = LocalStatic {
        private: StaticSecret::from([9; 32]),
        public: [0; 32],
    };
    let to_b = RemoteStatic {
        public: b_public,
        preshared: [0; 32],
        static_static: Some([0; 32]),
    };
    let mut msg = [0u8; INITIATION_LEN];
    noise::create_initiation(
        &forger,
        &to_b,
        StaticSecret::from([7; 32]),
        &noise::tai64n(clock::WALL_SECS + 1, 0),
        0x1234,
        &mut msg,
    )
    .expect("the forger's own arithmetic");
    CookieState::new(&b_public).add_macs(now, &mut msg);
    msg
}

#[test]
fn a_forged_initiation_from_the_zero_key_gets_no_response() {
    let now = clock::epoch();
    let mut b = device(2);
    let b_public = b.public_key().unwrap();
    // The placeholder key a user left in a config, no preshared key.
    b.add_peer([0; 32])
        .expect("the core takes it; the config refuses it");
    let src: SocketAddr = "198.18.7.1:40000".parse().unwrap();
    receive(&mut b, now, &[(src, &forged_initiation(b_public, now))]);
    assert_eq!(transmit(&mut b, now).len(), 0, "no handshake response");
    assert_eq!(b.counters.handshake_rejected, 1);
    let pid = b.find_peer(&[0; 32]).unwrap();
    assert_eq!(b.peer(pid).unwrap().counters.handshake_responses_sent, 0);
}

/// Initiations `a` sends within two seconds to a peer with `public` that
/// has a path and a persistent keepalive (which starts a handshake).
fn initiations_to(public: [u8; 32]) -> usize {
    let now = clock::epoch();
    let later = now + std::time::Duration::from_secs(2);
    let mut a = device(1);
    let pid = a.add_peer(public).unwrap();
    assert!(a.add_path(pid, "l", 0, "198.18.7.2:51820".parse().unwrap()));
    a.set_persistent_keepalive(now, pid, 1);
    a.handle_timeout(later);
    transmit(&mut a, later).len()
}

#[test]
fn no_initiation_goes_to_a_low_order_peer() {
    assert!(initiations_to(LocalStatic::new([5; 32]).public) > 0);
    for hex in LOW_ORDER {
        assert_eq!(initiations_to(key(hex)), 0, "{hex}");
    }
}
