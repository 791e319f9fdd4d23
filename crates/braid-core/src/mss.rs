//! TCP MSS clamping: lowers the MSS option of SYN and SYN-ACK segments so
//! that neither end of a TCP connection through the tunnel sends segments
//! the tunnel MTU cannot carry (the path-MTU discovery they would rely on
//! otherwise is often broken by filtered ICMP).
//!
//! Pure functions over IP packets; the checksum is patched incrementally
//! (RFC 1624) instead of recomputed, so a clamp costs a few additions.

use crate::batch::PacketBatch;
use crate::ip::{self, tcp_flags, Ip, Tcp, IPV4_HEADER, IPV6_HEADER, PROTO_TCP, TCP_HEADER};

const TCP_CHECKSUM_AT: usize = 16;
const OPTION_END: u8 = 0;
const OPTION_NOP: u8 = 1;
const OPTION_MSS: u8 = 2;
const OPTION_MSS_LEN: usize = 4;

/// The largest MSS a segment may announce, per IP version of the packet
/// that carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MssLimit {
    pub v4: u16,
    pub v6: u16,
}

impl MssLimit {
    /// The limit that keeps full-sized segments within `tunnel_mtu`.
    pub fn from_mtu(tunnel_mtu: usize) -> MssLimit {
        MssLimit {
            v4: max_mss_for(tunnel_mtu, false),
            v6: max_mss_for(tunnel_mtu, true),
        }
    }

    /// The same limit for both IP versions.
    pub fn fixed(mss: u16) -> MssLimit {
        MssLimit { v4: mss, v6: mss }
    }
}

/// The MSS that fills a packet of `tunnel_mtu` bytes: the MTU less the
/// IP header (20 or 40 bytes) and the TCP header without options (20).
pub fn max_mss_for(tunnel_mtu: usize, is_ipv6: bool) -> u16 {
    let headers = if is_ipv6 { 60 } else { 40 };
    tunnel_mtu
        .saturating_sub(headers)
        .min(usize::from(u16::MAX)) as u16
}

/// Clamps every packet of `batch`; consumed (empty) slots are skipped.
/// Returns how many packets were changed.
pub fn clamp_batch(batch: &mut PacketBatch, limit: MssLimit) -> usize {
    let mut changed = 0;
    for i in 0..batch.len() {
        if clamp_with(batch.packet_mut(i), limit) {
            changed += 1;
        }
    }
    changed
}

/// Clamps one IP packet with the limit of its IP version.
pub fn clamp_with(packet: &mut [u8], limit: MssLimit) -> bool {
    match ip::version(packet) {
        Some(4) => clamp(packet, limit.v4),
        Some(6) => clamp(packet, limit.v6),
        _ => false,
    }
}

/// If `packet` is an IPv4 (unfragmented) or IPv6 (TCP as the first next
/// header) TCP segment with SYN set whose MSS option exceeds `max_mss`,
/// rewrites the option to `max_mss` and fixes the TCP checksum. Returns
/// whether the packet changed. Malformed packets are left alone.
pub fn clamp(packet: &mut [u8], max_mss: u16) -> bool {
    let Some(tcp_at) = tcp_offset(packet) else {
        return false;
    };
    let tcp = &mut packet[tcp_at..];
    let Some(header) = Tcp::new(tcp) else {
        return false;
    };
    if header.flags() & tcp_flags::SYN == 0 {
        return false;
    }
    let header_len = header.header_len();
    if header_len < TCP_HEADER || header_len > tcp.len() {
        return false;
    }
    let mut changed = false;
    let mut at = TCP_HEADER;
    while at < header_len {
        match tcp[at] {
            OPTION_END => break,
            OPTION_NOP => at += 1,
            kind => {
                let Some(&len) = tcp.get(at + 1) else { break };
                // at < header_len <= 60 and len <= 255: the sum is small.
                let len = usize::from(len);
                if len < 2 || at + len > header_len {
                    break;
                }
                if kind == OPTION_MSS && len == OPTION_MSS_LEN {
                    changed |= lower_mss(&mut tcp[..header_len], at + 2, max_mss);
                }
                at += len;
            }
        }
    }
    changed
}

/// Where the TCP header starts, if `packet` is a TCP segment this module
/// may touch. The cheap tests (version, protocol) come first: nearly every
/// packet stops there.
fn tcp_offset(packet: &[u8]) -> Option<usize> {
    match Ip::new(packet)? {
        Ip::V4(h) => {
            if h.protocol() != PROTO_TCP {
                return None;
            }
            // More fragments or a non-zero offset: the TCP header may be
            // elsewhere or cut.
            let header_len = h.header_len();
            if h.is_fragment() || header_len < IPV4_HEADER {
                return None;
            }
            let total = h.total_len();
            (total <= packet.len() && header_len < total).then_some(header_len)
        }
        Ip::V6(h) => {
            if h.next_header() != PROTO_TCP {
                return None;
            }
            // At most 40 + 65 535: no overflow whatever the packet claims.
            (IPV6_HEADER + h.payload_len() <= packet.len()).then_some(IPV6_HEADER)
        }
    }
}

/// Writes `max_mss` into the MSS value at `value_at` of the TCP header
/// `tcp` if it is larger, and patches the checksum by the difference.
fn lower_mss(tcp: &mut [u8], value_at: usize, max_mss: u16) -> bool {
    let old = u16::from_be_bytes([tcp[value_at], tcp[value_at + 1]]);
    if old <= max_mss {
        return false;
    }
    // The checksum sums 16-bit words aligned to the TCP header; after an
    // odd number of NOPs the value straddles two of them.
    let first_word = value_at & !1;
    let words = if value_at.is_multiple_of(2) { 1 } else { 2 };
    let before = sum_words(&tcp[first_word..first_word + 2 * words]);
    tcp[value_at..value_at + 2].copy_from_slice(&max_mss.to_be_bytes());
    let after = sum_words(&tcp[first_word..first_word + 2 * words]);
    let checksum = u16::from_be_bytes([tcp[TCP_CHECKSUM_AT], tcp[TCP_CHECKSUM_AT + 1]]);
    // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), with m and m' the
    // ones'-complement sums of the changed words.
    let sum = u32::from(!checksum) + u32::from(!before) + u32::from(after);
    let updated = !fold(sum);
    tcp[TCP_CHECKSUM_AT..TCP_CHECKSUM_AT + 2].copy_from_slice(&updated.to_be_bytes());
    true
}

/// Ones'-complement sum of big-endian 16-bit words (`bytes` has even length).
fn sum_words(bytes: &[u8]) -> u16 {
    let sum = bytes
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    fold(sum)
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;

    /// MSS, SACK permitted, timestamps, NOP, window scale: what Linux
    /// sends in a SYN.
    fn linux_options(mss: u16) -> Vec<u8> {
        let mut o = vec![2, 4];
        o.extend_from_slice(&mss.to_be_bytes());
        o.extend_from_slice(&[4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7]);
        o
    }

    fn tcp_segment(flags: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
        assert_eq!(options.len() % 4, 0);
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&40000u16.to_be_bytes());
        t[2..4].copy_from_slice(&5201u16.to_be_bytes());
        t[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        t[12] = (((20 + options.len()) / 4) << 4) as u8;
        t[13] = flags;
        t[14..16].copy_from_slice(&64240u16.to_be_bytes());
        t.extend_from_slice(options);
        t.extend_from_slice(payload);
        t
    }

    fn ipv4(tcp: Vec<u8>) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0xab, 0xcd, 0x40, 0, 64, PROTO_TCP, 0, 0];
        p.extend_from_slice(&[198, 19, 0, 1, 198, 19, 0, 2]);
        let total = (20 + tcp.len()) as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&tcp);
        write_tcp_checksum(&mut p);
        p
    }

    fn ipv6(tcp: Vec<u8>) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, PROTO_TCP, 64];
        p[4..6].copy_from_slice(&(tcp.len() as u16).to_be_bytes());
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(&tcp);
        write_tcp_checksum(&mut p);
        p
    }

    /// The TCP checksum computed from scratch, written independently of
    /// the code under test: a plain sum over pseudo-header and segment.
    fn full_checksum(p: &[u8]) -> u16 {
        let (addrs, tcp) = if p[0] >> 4 == 4 {
            (&p[12..20], &p[20..])
        } else {
            (&p[8..40], &p[40..])
        };
        let mut bytes = addrs.to_vec();
        bytes.extend_from_slice(&[0, PROTO_TCP]);
        bytes.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        for (i, &b) in tcp.iter().enumerate() {
            // The checksum field counts as zero.
            bytes.push(if i == 16 || i == 17 { 0 } else { b });
        }
        if bytes.len() % 2 == 1 {
            bytes.push(0);
        }
        let mut sum: u64 = 0;
        for w in bytes.chunks(2) {
            sum += u64::from(w[0]) << 8 | u64::from(w[1]);
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn tcp_at(p: &[u8]) -> usize {
        if p[0] >> 4 == 4 {
            20
        } else {
            40
        }
    }

    fn write_tcp_checksum(p: &mut [u8]) {
        let c = full_checksum(p);
        let t = tcp_at(p);
        p[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    }

    fn stored_checksum(p: &[u8]) -> u16 {
        let t = tcp_at(p);
        u16::from_be_bytes([p[t + 16], p[t + 17]])
    }

    /// The first MSS option's value.
    fn mss_of(p: &[u8]) -> Option<u16> {
        let t = tcp_at(p);
        let end = t + usize::from(p[t + 12] >> 4) * 4;
        let mut at = t + 20;
        while at < end {
            match p[at] {
                0 => return None,
                1 => at += 1,
                2 => return Some(u16::from_be_bytes([p[at + 2], p[at + 3]])),
                _ => at += usize::from(p[at + 1]),
            }
        }
        None
    }

    fn assert_clamped(mut p: Vec<u8>, max: u16, expect_mss: u16) {
        assert!(clamp(&mut p, max));
        assert_eq!(mss_of(&p), Some(expect_mss));
        assert_eq!(stored_checksum(&p), full_checksum(&p));
    }

    #[test]
    fn clamps_ipv4_syn_and_syn_ack() {
        assert_clamped(
            ipv4(tcp_segment(SYN, &linux_options(1460), &[])),
            1240,
            1240,
        );
        assert_clamped(
            ipv4(tcp_segment(SYN | ACK, &linux_options(1460), &[])),
            1240,
            1240,
        );
    }

    #[test]
    fn clamps_ipv6_syn_and_syn_ack() {
        assert_clamped(
            ipv6(tcp_segment(SYN, &linux_options(1440), &[])),
            1220,
            1220,
        );
        assert_clamped(
            ipv6(tcp_segment(SYN | ACK, &linux_options(65495), &[])),
            1220,
            1220,
        );
    }

    #[test]
    fn clamps_an_mss_at_an_odd_offset() {
        // One NOP first puts the value across two checksum words.
        let mut o = vec![1, 2, 4];
        o.extend_from_slice(&1460u16.to_be_bytes());
        o.extend_from_slice(&[1, 1, 0]);
        assert_clamped(ipv4(tcp_segment(SYN, &o, &[])), 1000, 1000);
        assert_clamped(ipv6(tcp_segment(SYN, &o, &[])), 1000, 1000);
    }

    #[test]
    fn checksum_stays_right_for_many_values() {
        for old in [537u16, 1000, 1460, 8960, 0xfffe, 0xffff] {
            for max in [536u16, 999, 1240, 0x00ff, 0xff00] {
                for payload in [&[][..], &[0xff], &[1, 2, 3]] {
                    let p = ipv4(tcp_segment(SYN, &linux_options(old), payload));
                    if old > max {
                        assert_clamped(p, max, max);
                    } else {
                        let mut q = p.clone();
                        assert!(!clamp(&mut q, max));
                        assert_eq!(p, q);
                    }
                }
            }
        }
    }

    #[test]
    fn leaves_a_smaller_or_equal_mss_alone() {
        for mss in [536, 1240] {
            let p = ipv4(tcp_segment(SYN, &linux_options(mss), &[]));
            let mut q = p.clone();
            assert!(!clamp(&mut q, 1240));
            assert_eq!(p, q);
        }
    }

    #[test]
    fn leaves_segments_without_syn_or_mss_alone() {
        let cases = [
            ipv4(tcp_segment(ACK, &linux_options(1460), &[])),
            ipv6(tcp_segment(ACK, &linux_options(1460), b"data")),
            ipv4(tcp_segment(SYN, &[1, 3, 3, 7], &[])),
            ipv4(tcp_segment(SYN, &[], &[])),
            // End of options before the MSS.
            ipv4(tcp_segment(SYN, &[0, 0, 0, 0, 2, 4, 5, 0xb4], &[])),
        ];
        for p in cases {
            let mut q = p.clone();
            assert!(!clamp(&mut q, 1000));
            assert_eq!(p, q);
        }
    }

    #[test]
    fn leaves_non_tcp_and_fragments_alone() {
        let mut udp = ipv4(tcp_segment(SYN, &linux_options(1460), &[]));
        udp[9] = 17;
        let mut fragment = ipv4(tcp_segment(SYN, &linux_options(1460), &[]));
        fragment[6] = 0x20; // more fragments
        let mut later = ipv4(tcp_segment(SYN, &linux_options(1460), &[]));
        later[7] = 1; // offset 8
        let mut v6_ext = ipv6(tcp_segment(SYN, &linux_options(1460), &[]));
        v6_ext[6] = 0; // hop-by-hop options first
        let mut cut = ipv4(tcp_segment(SYN, &linux_options(1460), &[]));
        cut.truncate(30);
        for p in [
            udp,
            fragment,
            later,
            v6_ext,
            cut,
            vec![],
            vec![0x45],
            vec![0x60],
        ] {
            let mut q = p.clone();
            assert!(!clamp(&mut q, 1000));
            assert_eq!(p, q);
        }
    }

    #[test]
    fn malformed_options_stop_the_walk() {
        let cases: [&[u8]; 4] = [
            // Length 0 would loop forever.
            &[3, 0, 2, 4, 5, 0xb4, 0, 0],
            // Length past the header.
            &[3, 9, 2, 4, 5, 0xb4, 0, 0],
            // MSS with the wrong length.
            &[2, 3, 5, 0xb4],
            // Kind without a length byte at the very end.
            &[1, 1, 1, 2],
        ];
        for o in cases {
            let p = ipv4(tcp_segment(SYN, o, &[]));
            let mut q = p.clone();
            assert!(!clamp(&mut q, 1000));
            assert_eq!(p, q);
        }
        // A data offset larger than the packet.
        let mut p = ipv4(tcp_segment(SYN, &linux_options(1460), &[]));
        p[20 + 12] = 0xf0;
        let mut q = p.clone();
        assert!(!clamp(&mut q, 1000));
        assert_eq!(p, q);
    }

    #[test]
    fn limit_follows_the_ip_version() {
        let limit = MssLimit::from_mtu(1280);
        assert_eq!(limit, MssLimit { v4: 1240, v6: 1220 });
        let mut v4 = ipv4(tcp_segment(SYN, &linux_options(1460), &[]));
        let mut v6 = ipv6(tcp_segment(SYN, &linux_options(1440), &[]));
        assert!(clamp_with(&mut v4, limit));
        assert!(clamp_with(&mut v6, limit));
        assert_eq!(mss_of(&v4), Some(1240));
        assert_eq!(mss_of(&v6), Some(1220));
    }

    #[test]
    fn clamps_a_batch_skipping_consumed_slots() {
        let packets = [
            ipv4(tcp_segment(SYN, &linux_options(1460), &[])),
            ipv4(tcp_segment(ACK, &[], b"hello")),
            ipv6(tcp_segment(SYN | ACK, &linux_options(1440), &[])),
        ];
        let mut batch = PacketBatch::new(4, 256);
        for p in &packets {
            assert!(batch.push_with(16, "198.18.0.1:1".parse().unwrap(), |buf| {
                buf[..p.len()].copy_from_slice(p);
                p.len()
            }));
        }
        batch.consume(2);
        assert_eq!(clamp_batch(&mut batch, MssLimit::fixed(1000)), 1);
        assert_eq!(mss_of(batch.packet(0)), Some(1000));
        assert_eq!(batch.packet(1), &packets[1][..]);
    }

    #[test]
    fn max_mss_subtracts_the_headers() {
        assert_eq!(max_mss_for(1420, false), 1380);
        assert_eq!(max_mss_for(1420, true), 1360);
        assert_eq!(max_mss_for(30, true), 0);
        assert_eq!(max_mss_for(1 << 20, false), u16::MAX);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..120),
                                    version in prop_oneof![Just(0x45u8), Just(0x60u8), any::<u8>()],
                                    max in any::<u16>()) {
            if let Some(b) = bytes.first_mut() {
                *b = version;
            }
            if bytes.len() > 9 && version == 0x45 {
                bytes[9] = PROTO_TCP;
            }
            if bytes.len() > 6 && version == 0x60 {
                bytes[6] = PROTO_TCP;
            }
            let _ = clamp(&mut bytes, max);
        }

        #[test]
        fn random_options_never_panic_and_keep_the_checksum(
            options in proptest::collection::vec(
                prop_oneof![Just(2u8), Just(4u8), Just(1u8), any::<u8>()], 0..40
            ).prop_map(|mut o| {
                while o.len() % 4 != 0 {
                    o.push(1);
                }
                o
            }),
            v6 in any::<bool>(),
            max in any::<u16>()) {
            let seg = tcp_segment(SYN, &options, &[]);
            let mut p = if v6 { ipv6(seg) } else { ipv4(seg) };
            let _ = clamp(&mut p, max);
            prop_assert_eq!(stored_checksum(&p), full_checksum(&p));
        }
    }
}
