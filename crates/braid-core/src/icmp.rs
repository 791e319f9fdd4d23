//! ICMP "fragmentation needed" (IPv4) and ICMPv6 "packet too big" answers
//! for inner packets too big for the tunnel: written back to the TUN, they
//! make the inner sender (a local socket or a host behind a router) lower
//! its path MTU instead of losing packets silently.
//!
//! The answer comes from the packet's destination address, as if the far
//! end of the tunnel had sent it: the kernel accepts it from the TUN (its
//! own address as the source would be a martian) and matches it to the
//! sender's socket by the quoted headers.

/// IPv4 answers quote at most this much so they stay within 576 bytes
/// (RFC 1812 §4.3.2.3).
const IPV4_ANSWER_MAX: usize = 576;
/// ICMPv6 errors fit in IPv6's minimum MTU (RFC 4443 §2.4).
const IPV6_ANSWER_MAX: usize = 1280;
use crate::ip::{Ip, Ipv4, Ipv6, IPV4_HEADER, IPV6_HEADER, PROTO_ICMP, PROTO_ICMPV6};

const ICMP_HEADER: usize = 8;
const TTL: u8 = 64;

/// Writes into `out` the answer to `packet` telling its sender that `mtu`
/// is the most the tunnel carries; returns its length. `None` when no
/// answer is due: the packet may be fragmented (IPv4 without DF), is a
/// fragment or an ICMP error itself, comes from an address that cannot be
/// answered, or is malformed; or `out` is too small.
pub fn packet_too_big(packet: &[u8], mtu: usize, out: &mut [u8]) -> Option<usize> {
    match Ip::new(packet)? {
        Ip::V4(header) => ipv4(header, mtu, out),
        Ip::V6(header) => ipv6(header, mtu, out),
    }
}

fn ipv4(header: Ipv4<'_>, mtu: usize, out: &mut [u8]) -> Option<usize> {
    let packet = header.bytes();
    let ihl = header.header_len();
    if ihl < IPV4_HEADER || packet.len() < ihl {
        return None;
    }
    if !header.dont_fragment() || header.fragment_offset() != 0 {
        return None;
    }
    if header.protocol() == PROTO_ICMP && is_icmpv4_error(packet.get(ihl).copied()) {
        return None;
    }
    let (src, dst) = (header.src(), header.dst());
    let unanswerable = |a: [u8; 4]| a[0] == 0 || a[0] == 127 || a[0] >= 224;
    if unanswerable(src) || unanswerable(dst) {
        return None;
    }
    let quote = packet
        .len()
        .min(IPV4_ANSWER_MAX - IPV4_HEADER - ICMP_HEADER);
    let total = IPV4_HEADER + ICMP_HEADER + quote;
    let out = out.get_mut(..total)?;
    out[0] = 0x45;
    out[1] = 0xc0; // internetwork control, as Linux sends its ICMP errors
    out[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    out[4..8].fill(0); // id 0, may be fragmented
    out[8] = TTL;
    out[9] = PROTO_ICMP;
    out[10..12].fill(0);
    out[12..16].copy_from_slice(&dst);
    out[16..20].copy_from_slice(&src);
    let ip_sum = checksum(&[&out[..IPV4_HEADER]]);
    out[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let icmp = &mut out[IPV4_HEADER..];
    icmp[0] = 3; // destination unreachable
    icmp[1] = 4; // fragmentation needed and DF set
    icmp[2..6].fill(0);
    let next_hop_mtu = mtu.clamp(68, usize::from(u16::MAX)) as u16;
    icmp[6..8].copy_from_slice(&next_hop_mtu.to_be_bytes());
    icmp[ICMP_HEADER..].copy_from_slice(&packet[..quote]);
    let sum = checksum(&[icmp]);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    Some(total)
}

/// ICMP errors are never answered with another (RFC 1122 §3.2.2).
fn is_icmpv4_error(icmp_type: Option<u8>) -> bool {
    // Destination unreachable, source quench, redirect, time exceeded,
    // parameter problem; unknown or truncated counts as an error too.
    !matches!(icmp_type, Some(0 | 8 | 13 | 14 | 15 | 16 | 17 | 18))
}

fn ipv6(header: Ipv6<'_>, mtu: usize, out: &mut [u8]) -> Option<usize> {
    let packet = header.bytes();
    // ICMPv6 error types are below 128 (RFC 4443 §2.1).
    if header.next_header() == PROTO_ICMPV6 && packet.get(IPV6_HEADER).is_none_or(|&t| t < 128) {
        return None;
    }
    let (src, dst) = (header.src(), header.dst());
    let unanswerable = |a: [u8; 16]| a == [0; 16] || a[0] == 0xff || a == LOOPBACK_V6;
    if unanswerable(src) || unanswerable(dst) {
        return None;
    }
    let quote = packet
        .len()
        .min(IPV6_ANSWER_MAX - IPV6_HEADER - ICMP_HEADER);
    let payload = ICMP_HEADER + quote;
    let total = IPV6_HEADER + payload;
    let out = out.get_mut(..total)?;
    out[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    out[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
    out[6] = PROTO_ICMPV6;
    out[7] = TTL;
    out[8..24].copy_from_slice(&dst);
    out[24..40].copy_from_slice(&src);
    let icmp = &mut out[IPV6_HEADER..];
    icmp[0] = 2; // packet too big
    icmp[1] = 0;
    icmp[2..4].fill(0);
    // IPv6 links carry at least 1280 bytes; Linux ignores smaller values.
    let mtu = mtu.clamp(1280, u32::MAX as usize) as u32;
    icmp[4..8].copy_from_slice(&mtu.to_be_bytes());
    icmp[ICMP_HEADER..].copy_from_slice(&packet[..quote]);
    let pseudo_len = (payload as u32).to_be_bytes();
    let pseudo_tail = [0, 0, 0, PROTO_ICMPV6];
    let sum = checksum(&[&dst, &src, &pseudo_len, &pseudo_tail, icmp]);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    Some(total)
}

const LOOPBACK_V6: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The Internet checksum (RFC 1071) over the concatenation of `parts`
/// (each but the last of even length).
pub fn checksum(parts: &[&[u8]]) -> u16 {
    // In range: an answer is at most IPV6_ANSWER_MAX bytes plus the pseudo
    // header, some 660 words of at most 0xffff, far from u32's limit.
    let mut sum: u32 = 0;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests;
