//! Builds datagrams whose type and length the fuzzer steers, so every
//! message kind is reached instead of being dropped by the length check.

use crate::input::Input;
use crate::pair::MAX_DATAGRAM;
use braid_core::cookie::mac1_key;
use braid_core::crypto::{mac, MAC_LEN};
use braid_core::messages::{self, *};

/// One datagram: a selector byte picks initiation, response, cookie reply,
/// data (ChaCha or AES), extension, or raw bytes; the body comes from the
/// input (zero-padded to the kind's exact length).
pub fn datagram(input: &mut Input) -> Vec<u8> {
    let selector = input.u8();
    let (ty, mut msg) = match selector % 8 {
        0 => (TYPE_INITIATION, exact(input, INITIATION_LEN)),
        1 => (TYPE_RESPONSE, exact(input, RESPONSE_LEN)),
        2 => (TYPE_COOKIE_REPLY, exact(input, COOKIE_REPLY_LEN)),
        3 => (TYPE_DATA, data_sized(input)),
        4 => (TYPE_DATA_AES, data_sized(input)),
        5 => {
            let payload = 1 + input.u8() as usize % braid_core::ext::MAX_PAYLOAD;
            (TYPE_BRAID, exact(input, DATA_MIN_LEN + payload))
        }
        6 => {
            // Anything at all, reserved bytes included.
            let n = input.u16() as usize % (MAX_DATAGRAM + 1);
            return input.bytes(n).to_vec();
        }
        _ => {
            let ty = input.u8();
            let n = input.u8() as usize;
            (ty, exact(input, n.max(4)))
        }
    };
    messages::write_header(&mut msg, ty);
    msg
}

/// `len` bytes from the input, zero-padded.
pub fn exact(input: &mut Input, len: usize) -> Vec<u8> {
    let mut v = input.bytes(len).to_vec();
    v.resize(len, 0);
    v
}

fn data_sized(input: &mut Input) -> Vec<u8> {
    let body = input.u16() as usize % (MAX_DATAGRAM - DATA_MIN_LEN + 1);
    exact(input, DATA_MIN_LEN + body)
}

/// Gives a handshake message the right mac1 for `receiver_public`, so it
/// gets past the door to the Noise code (mac1 only proves the sender knows
/// the receiver's public key, which a fuzzer may as well know).
pub fn fix_mac1(msg: &mut [u8], receiver_public: &[u8; 32]) {
    if msg.len() < 2 * MAC_LEN {
        return;
    }
    let m1 = messages::mac1_range(msg.len());
    let m = mac(&mac1_key(receiver_public), &msg[..m1]);
    msg[m1..m1 + MAC_LEN].copy_from_slice(&m);
}

/// Overwrites the receiver index of a response, cookie reply, data or
/// extension message (so it names a live handshake or session).
pub fn set_receiver(msg: &mut [u8], index: u32) {
    let at = match msg.first() {
        Some(&TYPE_RESPONSE) => response::RECEIVER,
        Some(&TYPE_COOKIE_REPLY) => cookie_reply::RECEIVER,
        Some(&(TYPE_DATA | TYPE_DATA_AES | TYPE_BRAID)) => data::RECEIVER,
        _ => return,
    };
    if msg.len() >= at + 4 {
        msg[at..at + 4].copy_from_slice(&index.to_le_bytes());
    }
}

/// Flips bytes of `msg` at input-chosen places (a mutation of a valid
/// message the fuzzer cannot forge itself).
pub fn mutate(input: &mut Input, msg: &mut [u8]) {
    let n = input.u8() % 4;
    for _ in 0..n {
        if msg.is_empty() {
            return;
        }
        let at = input.u16() as usize % msg.len();
        msg[at] ^= input.u8() | 1;
    }
}
