//! Known-answer test: braid's handshake must produce, byte for byte, what an
//! independent implementation of the WireGuard paper computes
//! (`tests/vectors/gen_handshake.py`, Python hashlib + `cryptography`).

use braid_core::cookie::CookieState;
use braid_core::noise::{self, LocalStatic, RemoteStatic};
use braid_core::testing::clock;
use braid_core::{crypto, messages};
use serde_json::Value;
use x25519_dalek::StaticSecret;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn key(v: &Value, name: &str) -> [u8; 32] {
    unhex(v[name].as_str().unwrap()).try_into().unwrap()
}

#[test]
fn handshake_matches_independent_implementation() {
    let v: Value = serde_json::from_str(include_str!("vectors/handshake.json")).unwrap();
    let now = clock::epoch();
    let initiator = LocalStatic::new(key(&v, "static_i"));
    let responder = LocalStatic::new(key(&v, "static_r"));
    let psk = key(&v, "psk");
    let i_view = RemoteStatic::new(&initiator, responder.public, psk);
    let r_view = RemoteStatic::new(&responder, initiator.public, psk);
    let ts: [u8; 12] = unhex(v["timestamp"].as_str().unwrap()).try_into().unwrap();
    assert_eq!(
        noise::tai64n(1_700_000_000, 5_000_000),
        ts,
        "TAI64N rounds nanoseconds down"
    );

    let mut init = [0u8; messages::INITIATION_LEN];
    let state = noise::create_initiation(
        &initiator,
        &i_view,
        StaticSecret::from(key(&v, "ephemeral_i")),
        &ts,
        v["index_i"].as_u64().unwrap() as u32,
        &mut init,
    )
    .unwrap();
    CookieState::new(&responder.public).add_macs(now, &mut init);
    assert_eq!(
        init.to_vec(),
        unhex(v["initiation"].as_str().unwrap()),
        "initiation"
    );

    let received = noise::consume_initiation(&responder, &init).unwrap();
    assert_eq!(received.peer_public, initiator.public);
    assert_eq!(received.timestamp, ts);
    let mut resp = [0u8; messages::RESPONSE_LEN];
    let r_keys = noise::create_response(
        &received,
        &r_view,
        StaticSecret::from(key(&v, "ephemeral_r")),
        v["index_r"].as_u64().unwrap() as u32,
        &mut resp,
    )
    .unwrap();
    CookieState::new(&initiator.public).add_macs(now, &mut resp);
    assert_eq!(
        resp.to_vec(),
        unhex(v["response"].as_str().unwrap()),
        "response"
    );

    let i_keys = noise::consume_response(&state, &initiator, &i_view, &resp).unwrap();
    assert_eq!(i_keys.send, key(&v, "initiator_send"));
    assert_eq!(i_keys.recv, key(&v, "initiator_recv"));
    assert_eq!(r_keys.send, i_keys.recv);
    assert_eq!(r_keys.recv, i_keys.send);

    // A transport data message with counter 0.
    let payload = unhex(v["data_payload"].as_str().unwrap());
    let mut data = vec![0u8; messages::DATA_HEADER_LEN + payload.len() + crypto::TAG_LEN];
    data[0] = messages::TYPE_DATA;
    data[4..8].copy_from_slice(&(v["index_r"].as_u64().unwrap() as u32).to_le_bytes());
    crypto::seal(&i_keys.send, 0, &payload, &[], &mut data[16..]);
    assert_eq!(
        data,
        unhex(v["data_message"].as_str().unwrap()),
        "data message"
    );
}

#[test]
fn tampered_messages_are_rejected() {
    let v: Value = serde_json::from_str(include_str!("vectors/handshake.json")).unwrap();
    let responder = LocalStatic::new(key(&v, "static_r"));
    let init: [u8; messages::INITIATION_LEN] =
        unhex(v["initiation"].as_str().unwrap()).try_into().unwrap();
    for byte in [8, 40, 87, 88, 115] {
        let mut bad = init;
        bad[byte] ^= 0x80;
        assert!(
            noise::consume_initiation(&responder, &bad).is_err(),
            "flip at {byte}"
        );
    }
    // Addressed to someone else.
    let stranger = LocalStatic::new([42u8; 32]);
    assert!(noise::consume_initiation(&stranger, &init).is_err());
}
