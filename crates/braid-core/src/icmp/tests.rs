use super::*;

/// A TCP packet of `len` bytes, 198.19.0.1 → 198.19.1.2, DF as given.
fn tcp_v4(len: usize, df: bool) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[6] = if df { 0x40 } else { 0 };
    p[8] = 63;
    p[9] = 6;
    p[12..16].copy_from_slice(&[198, 19, 0, 1]);
    p[16..20].copy_from_slice(&[198, 19, 1, 2]);
    let sum = checksum(&[&p[..20]]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    for (i, b) in p[20..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

fn tcp_v6(len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    p[6] = 6;
    p[7] = 63;
    p[8..24].copy_from_slice(&v6(1));
    p[24..40].copy_from_slice(&v6(2));
    for (i, b) in p[40..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

/// 2001:db8::n
fn v6(n: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[15] = n;
    a
}

#[test]
fn checksum_known_answer_from_rfc_1071() {
    // RFC 1071 §3: the sum of 0001 f203 f4f5 f6f7 is ddf2.
    assert_eq!(
        checksum(&[&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]]),
        !0xddf2
    );
    // Odd lengths pad with a zero byte; split parts give the same sum.
    assert_eq!(checksum(&[&[0x12, 0x34, 0x56]]), !0x6834);
    assert_eq!(
        checksum(&[&[0x00, 0x01], &[0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]]),
        !0xddf2
    );
}

#[test]
fn ipv4_fragmentation_needed_answers_the_sender() {
    let packet = tcp_v4(1500, true);
    let mut out = [0u8; 2048];
    let n = packet_too_big(&packet, 1368, &mut out).expect("answer");
    let a = &out[..n];
    assert_eq!(n, 576, "quotes up to 576 bytes in all");
    assert_eq!(a[0], 0x45);
    assert_eq!(u16::from_be_bytes([a[2], a[3]]) as usize, n);
    assert_eq!(a[9], 1);
    assert_eq!(
        &a[12..16],
        &[198, 19, 1, 2],
        "from the packet's destination"
    );
    assert_eq!(&a[16..20], &[198, 19, 0, 1], "to its sender");
    assert_eq!(checksum(&[&a[..20]]), 0, "IPv4 header checksum verifies");
    let icmp = &a[20..];
    assert_eq!((icmp[0], icmp[1]), (3, 4));
    assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), 1368);
    assert_eq!(&icmp[8..], &packet[..548], "the original headers quoted");
    assert_eq!(checksum(&[icmp]), 0, "ICMP checksum verifies");
}

#[test]
fn ipv4_short_packet_is_quoted_whole() {
    let packet = tcp_v4(100, true);
    let mut out = [0u8; 2048];
    let n = packet_too_big(&packet, 1280, &mut out).unwrap();
    assert_eq!(n, 20 + 8 + 100);
    assert_eq!(checksum(&[&out[20..n]]), 0);
}

#[test]
fn ipv6_packet_too_big_answers_the_sender() {
    let packet = tcp_v6(1500);
    let mut out = [0u8; 2048];
    let n = packet_too_big(&packet, 1368, &mut out).expect("answer");
    let a = &out[..n];
    assert_eq!(n, 1280, "fits IPv6's minimum MTU");
    assert_eq!(a[0] >> 4, 6);
    assert_eq!(u16::from_be_bytes([a[4], a[5]]) as usize, n - 40);
    assert_eq!(a[6], 58);
    assert_eq!(&a[8..24], &v6(2));
    assert_eq!(&a[24..40], &v6(1));
    let icmp = &a[40..];
    assert_eq!((icmp[0], icmp[1]), (2, 0));
    assert_eq!(u32::from_be_bytes(icmp[4..8].try_into().unwrap()), 1368);
    assert_eq!(&icmp[8..], &packet[..1280 - 48]);
    let len = (icmp.len() as u32).to_be_bytes();
    assert_eq!(
        checksum(&[&a[8..24], &a[24..40], &len, &[0, 0, 0, 58], icmp]),
        0,
        "ICMPv6 checksum with the pseudo-header verifies"
    );
}

#[test]
fn ipv6_mtu_is_never_below_1280() {
    let mut out = [0u8; 2048];
    let n = packet_too_big(&tcp_v6(1400), 1200, &mut out).unwrap();
    assert_eq!(u32::from_be_bytes(out[44..48].try_into().unwrap()), 1280);
    assert!(n <= 1280);
}

#[test]
fn no_answer_where_none_is_due() {
    let mut out = [0u8; 2048];
    // May be fragmented: the kernel's business, not ours.
    assert_eq!(packet_too_big(&tcp_v4(1500, false), 1368, &mut out), None);
    // A fragment other than the first.
    let mut frag = tcp_v4(1500, true);
    frag[7] = 10;
    assert_eq!(packet_too_big(&frag, 1368, &mut out), None);
    // An ICMP error (destination unreachable) is never answered…
    let mut icmp_err = tcp_v4(1500, true);
    icmp_err[9] = 1;
    icmp_err[20] = 3;
    assert_eq!(packet_too_big(&icmp_err, 1368, &mut out), None);
    // …an echo request is.
    icmp_err[20] = 8;
    assert!(packet_too_big(&icmp_err, 1368, &mut out).is_some());
    // Multicast or unspecified sources.
    let mut mcast = tcp_v4(1500, true);
    mcast[12] = 224;
    assert_eq!(packet_too_big(&mcast, 1368, &mut out), None);
    let mut v6_err = tcp_v6(1500);
    v6_err[6] = 58;
    v6_err[40] = 1;
    assert_eq!(packet_too_big(&v6_err, 1368, &mut out), None);
    v6_err[40] = 128; // echo request
    assert!(packet_too_big(&v6_err, 1368, &mut out).is_some());
    let mut v6_mcast = tcp_v6(1500);
    v6_mcast[24] = 0xff;
    assert_eq!(packet_too_big(&v6_mcast, 1368, &mut out), None);
    // Truncated, unknown version, or no room for the answer.
    assert_eq!(
        packet_too_big(&tcp_v4(1500, true)[..10], 1368, &mut out),
        None
    );
    assert_eq!(packet_too_big(&[0x50; 60], 1368, &mut out), None);
    assert_eq!(
        packet_too_big(&tcp_v4(1500, true), 1368, &mut out[..100]),
        None
    );
}
