#![allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time

use super::*;

fn packet(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// The fragments of `packet` for a line carrying `payload`-byte
/// plaintexts, each padded to a multiple of 16 as WireGuard pads them.
fn split(packet: &[u8], payload: usize, id: u32) -> Vec<Vec<u8>> {
    let (count, chunk) = plan(packet.len(), payload).expect("needs splitting");
    (0..count)
        .map(|k| {
            let data = &packet[k * chunk..((k + 1) * chunk).min(packet.len())];
            let mut out = vec![0u8; HEADER_LEN + data.len()];
            let n = write(&mut out, id, k, count, k * chunk, data);
            out.resize(n.next_multiple_of(16).min(payload), 0);
            assert!(out.len() <= payload, "fragment {k} fits");
            out
        })
        .collect()
}

#[test]
fn plans_fit_the_line_and_need_no_more_pieces_than_it_takes() {
    // (packet, plaintext the line carries, fragments)
    for (len, payload, count) in [
        (1280, 1268, 2),
        (1280, 1200, 2),
        (1500, 1268, 2),
        (9000, 1268, 8),
        (65535, 1268, 53),
        (65535, 576, 116),
    ] {
        let (n, chunk) = plan(len, payload).unwrap();
        assert_eq!(n, count, "{len} over {payload}");
        assert!(HEADER_LEN + chunk <= payload);
        assert!(n * chunk >= len && (n - 1) * chunk < len);
    }
    assert_eq!(plan(1268, 1268), None, "fits whole");
    assert_eq!(plan(65535, 500), None, "more than 128 pieces");
    assert_eq!(plan(70000, 1268), None, "no such packet");
    assert_eq!(plan(100, HEADER_LEN), None);
}

#[test]
fn fragments_join_in_any_order_and_duplicates_change_nothing() {
    let now = Instant::now();
    let p = packet(9000);
    let frags = split(&p, 1268, 7);
    let mut r = Reassembly::default();
    let mut order: Vec<usize> = (0..frags.len()).rev().collect();
    order.insert(3, 5);
    for (k, &i) in order.iter().enumerate() {
        let got = r.insert(now, 1, &frags[i]);
        if k + 1 < order.len() {
            assert_eq!(got, Joined::Pending, "fragment {i}");
        } else {
            assert_eq!(got, Joined::Complete(9000));
        }
    }
    let mut out = vec![0u8; 9000];
    assert_eq!(r.take_into(&mut out), 9000);
    assert_eq!(out, p);
    assert_eq!((r.partial_packets(), r.dropped), (0, 0));
}

#[test]
fn packets_of_two_sessions_or_ids_stay_apart() {
    let now = Instant::now();
    let (a, b) = (packet(1500), packet(1400));
    let fa = split(&a, 1268, 1);
    let fb = split(&b, 1268, 1);
    let mut r = Reassembly::default();
    assert_eq!(r.insert(now, 10, &fa[0]), Joined::Pending);
    assert_eq!(r.insert(now, 11, &fb[0]), Joined::Pending);
    assert_eq!(r.insert(now, 11, &fb[1]), Joined::Complete(1400));
    let mut out = vec![0u8; 1500];
    assert_eq!(r.take_into(&mut out), 1400);
    assert_eq!(&out[..1400], &b[..]);
    assert_eq!(r.insert(now, 10, &fa[1]), Joined::Complete(1500));
    assert_eq!(r.take_into(&mut out), 1500);
    assert_eq!(out, a);
}

#[test]
fn a_packet_whose_fragments_stop_coming_is_given_up() {
    let t0 = Instant::now();
    let frags = split(&packet(3000), 1268, 9);
    let mut r = Reassembly::default();
    assert_eq!(r.insert(t0, 1, &frags[0]), Joined::Pending);
    // Its last fragment, too late: the packet was given up, this one
    // starts over and waits alone.
    let late = t0 + PARTIAL_TIMEOUT;
    assert_eq!(r.insert(late, 1, &frags[2]), Joined::Pending);
    assert_eq!(r.dropped, 1);
    assert_eq!(r.partial_packets(), 1);
}

#[test]
fn memory_is_bounded_whatever_a_peer_sends() {
    let now = Instant::now();
    let mut r = Reassembly::default();
    // Many packets' first fragments of 65535-byte packets: at most
    // MAX_PARTIAL are held, the oldest give way.
    let frags = split(&packet(65535), 1268, 0);
    for id in 0..1000u32 {
        let mut f = frags[frags.len() - 1].clone();
        f[1..5].copy_from_slice(&id.to_le_bytes());
        let t = now + Duration::from_micros(u64::from(id));
        assert_eq!(r.insert(t, 1, &f), Joined::Pending);
    }
    assert_eq!(r.partial_packets(), MAX_PARTIAL);
    assert!(
        r.held_bytes() <= (2 * MAX_PARTIAL + 2) * 65535,
        "{} bytes held",
        r.held_bytes()
    );
    assert_eq!(r.dropped, 1000 - MAX_PARTIAL as u64);
}

#[test]
fn inconsistent_or_malformed_fragments_are_refused() {
    let now = Instant::now();
    let p = packet(3000);
    let frags = split(&p, 1268, 4);
    let mut r = Reassembly::default();
    assert_eq!(r.insert(now, 1, &frags[0]), Joined::Pending);
    // The same id claiming another count.
    let mut other = frags[1].clone();
    other[6] = 5;
    assert_eq!(r.insert(now, 1, &other), Joined::Refused);
    assert_eq!(r.partial_packets(), 0, "the packet it spoiled is given up");
    // Fields out of range.
    let field = |at: usize, v: &[u8]| {
        let mut f = frags[0].clone();
        f[at..at + v.len()].copy_from_slice(v);
        f
    };
    for bad in [
        field(6, &[1]),          // one piece is no fragment
        field(6, &[129]),        // too many
        field(5, &[3]),          // index past count (3 of 3)
        field(9, &[0, 0]),       // no data
        field(7, &[0xff, 0xff]), // beyond 65535
        field(9, &[0xff, 0x04]), // more data than it carries
        frags[0][..HEADER_LEN - 1].to_vec(),
        vec![0x45; 40],
    ] {
        assert_eq!(
            r.insert(now, 1, &bad),
            Joined::Refused,
            "{:?}",
            &bad[..HEADER_LEN.min(bad.len())]
        );
    }
    assert_eq!(r.partial_packets(), 0);
}
