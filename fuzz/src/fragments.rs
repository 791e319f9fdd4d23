//! Joining fragments (`braid_core::fragment`): real pieces of
//! fuzzer-chosen packets, cut at a fuzzer-chosen line size, delivered in a
//! fuzzer-chosen order with duplicates, forged and mutated pieces and time
//! steps in between. Once every piece of a packet came (each packet has an
//! id of its own), what comes out whole is that packet, byte for byte,
//! unless a forged piece may have spoiled it; what is held stays within
//! the bounds whatever arrives.

use crate::input::Input;
use braid_core::fragment::{self, Joined, Reassembly, MAX_PARTIAL};
use std::time::{Duration, Instant};

/// A packet sent, by (session, id), and what a complete one must equal
/// (`None` once a forged piece may have spoiled it).
type Sent = ((u32, u32), Option<Vec<u8>>);

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    #[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
    let mut now = Instant::now();
    let mut r = Reassembly::default();
    let mut sent: Vec<Sent> = Vec::new();
    let mut pieces: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut next_id = 0u32;
    let mut steps = 0;
    while !input.is_empty() && steps < 256 {
        steps += 1;
        match input.u8() % 6 {
            0 => {
                // A packet split as the sender does.
                let len = usize::from(input.u16()) % 70_000;
                let payload = 12 + usize::from(input.u16()) % 2000;
                let session = u32::from(input.u8() % 3);
                let id = next_id;
                next_id = next_id.wrapping_add(1);
                let fill = input.u8();
                let packet: Vec<u8> = (0..len).map(|i| fill ^ (i as u8)).collect();
                if let Some((count, chunk)) = fragment::plan(len, payload) {
                    assert!(
                        count <= fragment::MAX_FRAGMENTS && chunk + fragment::HEADER_LEN <= payload
                    );
                    sent.push(((session, id), Some(packet.clone())));
                    for k in 0..count {
                        let data = &packet[k * chunk..((k + 1) * chunk).min(len)];
                        let mut out = vec![0u8; fragment::HEADER_LEN + data.len() + 15];
                        let n = fragment::write(&mut out, id, k, count, k * chunk, data);
                        out.truncate(n + usize::from(input.u8() % 16));
                        pieces.push((session, out));
                    }
                }
            }
            1 | 2 => {
                // Deliver a pending piece (any of them: reordering).
                if !pieces.is_empty() {
                    let at = usize::from(input.u16()) % pieces.len();
                    let (session, piece) = if input.bool() {
                        pieces.swap_remove(at)
                    } else {
                        pieces[at].clone() // a duplicate later
                    };
                    deliver(&mut r, now, session, &piece, &sent);
                }
            }
            3 => {
                // A forged or mutated piece.
                let mut piece = match pieces.is_empty() {
                    true => input.short_bytes().to_vec(),
                    false => pieces[usize::from(input.u8()) % pieces.len()].1.clone(),
                };
                if !piece.is_empty() {
                    let at = usize::from(input.u16()) % piece.len();
                    piece[at] ^= input.u8() | 1;
                }
                // A forged piece can spoil any packet still in the making
                // (as an authenticated peer could): those are not judged.
                for (_, packet) in &mut sent {
                    *packet = None;
                }
                let session = u32::from(input.u8() % 3);
                if let Joined::Complete(len) = r.insert(now, session, &piece) {
                    let mut out = vec![0u8; len];
                    assert_eq!(r.take_into(&mut out), len);
                }
            }
            4 => now += Duration::from_millis(u64::from(input.u16())),
            _ => {
                for (_, packet) in &mut sent {
                    *packet = None;
                }
                let session = u32::from(input.u8() % 3);
                let raw = input.short_bytes();
                if let Joined::Complete(len) = r.insert(now, session, raw) {
                    let mut out = vec![0u8; len];
                    assert_eq!(r.take_into(&mut out), len);
                }
            }
        }
        assert!(r.partial_packets() <= MAX_PARTIAL);
        assert!(
            r.held_bytes() <= (2 * MAX_PARTIAL + 2) * 65_535,
            "{}",
            r.held_bytes()
        );
    }
}

/// Delivers one genuine piece; a packet it completes is the one sent
/// under its (session, id), unless a forged piece may have spoiled it.
fn deliver(r: &mut Reassembly, now: Instant, session: u32, piece: &[u8], sent: &[Sent]) {
    let Some((h, _)) = fragment::parse(piece) else {
        panic!(
            "a genuine piece did not parse: {:?}",
            &piece[..piece.len().min(16)]
        );
    };
    if let Joined::Complete(len) = r.insert(now, session, piece) {
        let mut out = vec![0u8; len];
        assert_eq!(r.take_into(&mut out), len);
        let want = sent.iter().find(|(k, _)| *k == (session, h.id));
        if let Some((_, Some(packet))) = want {
            assert!(
                out == *packet,
                "packet {} of session {session} joined wrong",
                h.id
            );
        }
    }
}
