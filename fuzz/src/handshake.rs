//! The handshake state machines: B as responder and A as initiator fed
//! real, forged (with real crypto and fuzzer-chosen fields) and mutated
//! initiations, responses and cookie replies, between time steps, retries
//! and floods that put the responder under load. The fuzzer computes mac1
//! itself (it only proves knowledge of the receiver's public key), so no
//! MAC check stops it at the door; AEAD is passed by forging with the real
//! keys rather than by switching crypto off.

use crate::input::Input;
use crate::pair::{source, Pair, A_ADDR, A_PRIVATE, B_ADDR, PSK};
use crate::steer;
use braid_core::consts::UNDER_LOAD_HANDSHAKES_PER_SECOND;
use braid_core::cookie::{CookieChecker, CookieState};
use braid_core::messages::{INITIATION_LEN, RESPONSE_LEN, TYPE_INITIATION};
use braid_core::noise::{self, LocalStatic, RemoteStatic};
use braid_core::testing::clock;
use std::time::Duration;
use x25519_dalek::StaticSecret;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut pair = Pair::new();
    let a_public = pair.a().public_key().expect("key set");
    let b_public = pair.b().public_key().expect("key set");
    // What the forger knows: A's key (or a stranger's), B's public key.
    let a_local = LocalStatic::new(A_PRIVATE);
    let stranger = LocalStatic::new([0x33; 32]);
    // The forger's own mac2 state for messages to B.
    let mut forger_cookie = CookieState::new(&b_public);
    // Last real initiation A sent, to build responses to and replay.
    let mut last_initiation: Option<[u8; INITIATION_LEN]> = None;
    let mut steps = 0;
    while !input.is_empty() && steps < 48 {
        steps += 1;
        let op = input.u8();
        match op % 10 {
            0 => {
                // A initiates for real (or retries) and B hears it.
                let (now, pb) = (pair.now(), pair.pb);
                pair.a_mut().set_persistent_keepalive(now, pb, 0);
                pair.a_mut().set_persistent_keepalive(now, pb, 25);
                for d in pair.transmit(true) {
                    if d.len() == INITIATION_LEN {
                        last_initiation = d.as_slice().try_into().ok();
                    }
                    if input.bool() {
                        pair.deliver(false, A_ADDR, &[&d]);
                    }
                }
            }
            1 => {
                // A forged initiation with real crypto and chosen fields.
                let local = if input.bool() { &a_local } else { &stranger };
                let psk = if input.bool() { PSK } else { input.array() };
                let remote = RemoteStatic::new(local, b_public, psk);
                let timestamp = if input.bool() {
                    input.array()
                } else {
                    let since = pair.now().saturating_duration_since(clock::epoch());
                    let secs = clock::WALL_SECS + since.as_secs() + u64::from(input.u8() % 3);
                    noise::tai64n(secs, since.subsec_nanos())
                };
                let ephemeral = StaticSecret::from(input.array::<32>());
                let sender = input.u32();
                let mut msg = [0u8; INITIATION_LEN];
                if noise::create_initiation(local, &remote, ephemeral, &timestamp, sender, &mut msg)
                    .is_err()
                {
                    continue;
                }
                forger_cookie.add_macs(pair.now(), &mut msg);
                if input.bool() {
                    steer::mutate(&mut input, &mut msg);
                    steer::fix_mac1(&mut msg, &b_public);
                }
                pair.deliver(false, source(op >> 4), &[&msg]);
            }
            2 => {
                // B answers a real initiation; the response, maybe mutated
                // (mac1 refreshed), goes to A.
                let Some(ini) = last_initiation else { continue };
                pair.deliver(false, A_ADDR, &[&ini]);
                for mut d in pair.transmit(false) {
                    if input.bool() {
                        steer::mutate(&mut input, &mut d);
                        if input.bool() {
                            steer::fix_mac1(&mut d, &a_public);
                        }
                    }
                    pair.deliver(true, source(op >> 4), &[&d]);
                }
            }
            3 => {
                // A forged response to A's real initiation: real Noise with
                // a chosen ephemeral, sender index and maybe a wrong PSK.
                let Some(ini) = last_initiation else { continue };
                let b_local = LocalStatic::new(crate::pair::B_PRIVATE);
                let Ok(received) = noise::consume_initiation(&b_local, &ini) else {
                    continue;
                };
                let psk = if input.bool() { PSK } else { input.array() };
                let remote = RemoteStatic::new(&b_local, a_public, psk);
                let ephemeral = StaticSecret::from(input.array::<32>());
                let mut msg = [0u8; RESPONSE_LEN];
                if noise::create_response(&received, &remote, ephemeral, input.u32(), &mut msg)
                    .is_err()
                {
                    continue;
                }
                if input.bool() {
                    steer::mutate(&mut input, &mut msg);
                }
                steer::fix_mac1(&mut msg, &a_public);
                pair.deliver(true, source(op >> 4), &[&msg]);
            }
            4 => {
                // A cookie reply to A's last initiation, made with B's real
                // cookie key; A's next initiation carries mac2.
                let Some(ini) = last_initiation else { continue };
                let mut checker = CookieChecker::new(&b_public);
                let mut rng = SeedRng(input.u64());
                let mut reply = [0u8; 64];
                let receiver = u32::from_le_bytes(ini[4..8].try_into().expect("4 bytes"));
                checker.create_reply(pair.now(), &ini, A_ADDR, receiver, &mut rng, &mut reply);
                if input.bool() {
                    steer::mutate(&mut input, &mut reply);
                }
                pair.deliver(true, source(op >> 4), &[&reply]);
                // The forger learns cookies the same way.
                let _ = forger_cookie.consume_reply(pair.now(), &reply);
            }
            5 => {
                let ms = u64::from(input.u16()) * u64::from(input.u8() % 8 + 1);
                pair.advance(Duration::from_millis(ms));
            }
            6 => {
                // Any steered handshake-sized message to either side, mac1
                // fixed for its receiver.
                let to_a = input.bool();
                let mut msg = steer::datagram(&mut input);
                steer::fix_mac1(&mut msg, if to_a { &a_public } else { &b_public });
                pair.deliver(to_a, source(op >> 4), &[&msg]);
            }
            7 => {
                // A flood of bad initiations puts B under load: from now on
                // it answers mac1-only initiations with cookie replies.
                let mut junk = [0u8; INITIATION_LEN];
                junk[0] = TYPE_INITIATION;
                let flood: Vec<&[u8]> = vec![&junk[..]; 64];
                for _ in 0..UNDER_LOAD_HANDSHAKES_PER_SECOND / 64 + 1 {
                    pair.deliver(false, B_ADDR, &flood);
                }
            }
            8 => {
                // B's answers (responses, cookie replies) reach A, a subset.
                let mask = input.u8();
                for (i, d) in pair.transmit(false).into_iter().enumerate() {
                    if mask & (1 << (i % 8)) != 0 {
                        pair.deliver(true, B_ADDR, &[&d]);
                    }
                }
            }
            _ => pair.exchange(input.u8() as usize % 4 + 1),
        }
        // Keep A's queue from growing without bound between steps.
        if op & 0x08 != 0 {
            pair.transmit(true);
        }
    }
}

/// A tiny deterministic generator for cookie secrets and nonces.
struct SeedRng(u64);

impl rand_core::RngCore for SeedRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
