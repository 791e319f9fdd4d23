//! Datagrams into a device with an established session (a real handshake
//! at setup): raw and steered datagrams, data and extension messages that
//! B really sealed but with fuzzer-chosen counters, ciphers and contents,
//! mutations of them, replays, time steps and real traffic in between.
//! Whatever reaches A's TUN must be an IP packet from B's allowed address
//! (checked in `Pair::deliver`).

use crate::input::Input;
use crate::pair::{ipv4_packet, source, Pair, A_ADDR, A_TUN, B_ADDR, B_TUN};
use crate::steer;
use braid_core::cipher::{write_data_header, DataCipher};
use braid_core::crypto::TAG_LEN;
use braid_core::ext::{Delivery, ExtMessage, ProbeBody, MAX_PAYLOAD};
use braid_core::fec;
use braid_core::messages::{DATA_HEADER_LEN, TYPE_BRAID};
use std::time::Duration;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut pair = Pair::established();
    let mut sent: Vec<Vec<u8>> = Vec::new();
    let mut counter = 0u64;
    let mut steps = 0;
    while !input.is_empty() && steps < 64 {
        steps += 1;
        let op = input.u8();
        let datagram = match op % 9 {
            0 => {
                let mut msg = steer::datagram(&mut input);
                if input.bool() {
                    if let Some(index) = a_index(&pair, input.u8()) {
                        steer::set_receiver(&mut msg, index);
                    }
                }
                Some(msg)
            }
            1 | 2 => {
                counter = next_counter(&mut input, counter);
                sealed_data(&pair, &mut input, counter)
            }
            3 => sealed_ext(&pair, &mut input),
            4 => {
                counter = next_counter(&mut input, counter);
                sealed_data(&pair, &mut input, counter).map(|mut msg| {
                    steer::mutate(&mut input, &mut msg);
                    msg
                })
            }
            5 => {
                let pick = input.u8() as usize;
                (!sent.is_empty()).then(|| sent[pick % sent.len()].clone())
            }
            6 => {
                let ms = u64::from(input.u16()) * u64::from(input.u8() % 4 + 1);
                pair.advance(Duration::from_millis(ms));
                None
            }
            7 => {
                // Real traffic both ways, and whatever the devices say.
                let body = input.short_bytes().to_vec();
                pair.send_from_tun(false, &ipv4_packet(B_TUN, A_TUN, 17, &body));
                pair.send_from_tun(true, &ipv4_packet(A_TUN, B_TUN, 17, &body));
                pair.exchange(4);
                None
            }
            _ => {
                // What B would send anyway (keepalives, probes), in a
                // fuzzer-chosen subset.
                let mask = input.u8();
                for (i, d) in pair.transmit(false).into_iter().enumerate() {
                    if mask & (1 << (i % 8)) != 0 {
                        pair.deliver(true, B_ADDR, &[&d]);
                    }
                }
                None
            }
        };
        if let Some(d) = datagram {
            let src = if op & 0x80 != 0 {
                source(op >> 4)
            } else {
                B_ADDR
            };
            pair.deliver(true, src, &[&d]);
            if sent.len() < 32 {
                sent.push(d);
            }
        }
        // A's answers go back to B over a perfect line.
        for d in pair.transmit(true) {
            pair.deliver(false, A_ADDR, &[&d]);
        }
    }
}

/// A's receiving index of its current, previous or next session.
fn a_index(pair: &Pair, which: u8) -> Option<u32> {
    let p = pair.a().peer(pair.pb)?;
    let kp = match which % 3 {
        0 => p.keypairs.current.as_ref(),
        1 => p.keypairs.previous.as_ref(),
        _ => p.keypairs.next.as_ref(),
    };
    kp.map(|k| k.local_index)
}

/// Mostly the next counter, sometimes a jump, a step back or anything.
fn next_counter(input: &mut Input, last: u64) -> u64 {
    match input.u8() % 6 {
        0 | 1 => last.saturating_add(1),
        2 => last.saturating_sub(u64::from(input.u8())),
        3 => last.saturating_add(u64::from(input.u16())),
        4 => last,
        _ => input.u64(),
    }
}

/// A data message B's current session really sealed, with the given
/// counter: an IP packet for A's TUN (from B's or a foreign address, IPv4
/// or arbitrary bytes), a keepalive, or padding of any length.
fn sealed_data(pair: &Pair, input: &mut Input, counter: u64) -> Option<Vec<u8>> {
    let kp = pair.b().peer(pair.pa)?.keypairs.current.as_ref()?;
    let shape = input.u8();
    let body = input.short_bytes();
    let plain = match shape % 5 {
        0 => ipv4_packet(B_TUN, A_TUN, 17, body),
        1 => ipv4_packet(B_TUN, A_TUN, 6, body),
        2 => ipv4_packet([198, 19, 9, 9], A_TUN, 17, body),
        3 => Vec::new(),
        _ => body.to_vec(),
    };
    let padded = plain.len() + (shape as usize >> 3) % 17;
    let cipher = if shape & 0x80 != 0 {
        DataCipher::Aes256Gcm
    } else {
        DataCipher::ChaCha20Poly1305
    };
    let mut buf = vec![0u8; DATA_HEADER_LEN + padded + TAG_LEN];
    buf[DATA_HEADER_LEN..DATA_HEADER_LEN + plain.len()].copy_from_slice(&plain);
    let n = write_data_header(
        &mut buf,
        cipher,
        kp.remote_index,
        counter,
        plain.len(),
        padded,
    );
    buf.truncate(n);
    kp.keys().seal(&mut buf);
    Some(buf)
}

/// An extension message B's current session really sealed, with a
/// fuzzer-chosen counter and a well-formed or arbitrary payload.
fn sealed_ext(pair: &Pair, input: &mut Input) -> Option<Vec<u8>> {
    let kp = pair.b().peer(pair.pa)?.keypairs.current.as_ref()?;
    let counter = u64::from(input.u16());
    let shape = input.u8();
    let body = ProbeBody {
        path: input.u8() % 8,
        seq: input.u32(),
        sent_us: input.u64(),
        rx_probes: input.u32(),
    };
    if shape % 8 == 7 {
        let piece = parity_piece(input);
        let mut out = vec![0u8; DATA_HEADER_LEN + piece.len() + TAG_LEN];
        let n = kp.seal_ext_for_fuzzing(counter, &piece, &mut out);
        out.truncate(n);
        return Some(out);
    }
    let mut payload = [0u8; MAX_PAYLOAD];
    let len = match shape % 7 {
        0 => ExtMessage::Hello {
            version: input.u8(),
            path: input.u8(),
            flags: input.u8(),
        }
        .encode(&mut payload),
        1 => ExtMessage::Probe(body).encode(&mut payload),
        2 => ExtMessage::Echo(body, None).encode(&mut payload),
        3 => ExtMessage::Echo(
            body,
            Some(Delivery {
                received_us: input.u64(),
                data_bytes: input.u64(),
                data_packets: input.u64(),
            }),
        )
        .encode(&mut payload),
        4 => ExtMessage::Repair {
            from: input.u64(),
            count: input.u16(),
        }
        .encode(&mut payload),
        5 => ExtMessage::NoRepair {
            from: input.u64(),
            count: input.u16(),
        }
        .encode(&mut payload),
        _ => {
            let n = 1 + input.u8() as usize % MAX_PAYLOAD;
            let raw = input.bytes(n);
            payload[..raw.len()].copy_from_slice(raw);
            raw.len().max(1)
        }
    };
    let mut out = vec![0u8; DATA_HEADER_LEN + MAX_PAYLOAD + TAG_LEN];
    let n = kp.seal_ext_for_fuzzing(counter, &payload[..len], &mut out);
    out.truncate(n);
    debug_assert_eq!(out[0], TYPE_BRAID);
    Some(out)
}

/// A parity piece (see `braid_core::fec`) with fuzzer-chosen fields, its
/// bytes as long as its fields say (or not, on request), naming counters
/// near the ones the fuzzer seals data with.
fn parity_piece(input: &mut Input) -> Vec<u8> {
    let members = 1 + input.u8() % fec::MAX_GROUP as u8;
    let index = input.u8() % 3;
    let mut v = vec![fec::KIND_PARITY, input.u8() % 4, members, index];
    v.extend_from_slice(&u64::from(input.u16()).to_le_bytes());
    let mut offset = 0u16;
    for _ in 1..members {
        offset = offset.saturating_add(1 + u16::from(input.u8() % 8));
        v.extend_from_slice(&offset.to_le_bytes());
    }
    let parity_len = input.u16() % 1600;
    v.extend_from_slice(&input.u16().to_le_bytes());
    v.extend_from_slice(&parity_len.to_le_bytes());
    let n = if input.bool() {
        fec::piece_len(usize::from(parity_len), usize::from(index))
    } else {
        input.u16() as usize % (2 * fec::PIECE_MAX)
    };
    let bytes = input.bytes(n);
    v.extend_from_slice(bytes);
    v.resize(v.len() + n - bytes.len(), 0);
    v
}
