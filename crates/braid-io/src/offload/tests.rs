//! Split and coalesce against hand-built packets, checked with a checksum
//! written independently of [`super::checksum`].

use proptest::prelude::*;

use super::coalesce::{write_gso_header, Planner, MAX_MEMBERS};
use super::split::{SplitError, Tso};
use super::*;

/// Byte-at-a-time one's-complement sum, deliberately naive.
fn naive_sum(parts: &[&[u8]]) -> u16 {
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend_from_slice(p);
        if bytes.len() % 2 == 1 && !std::ptr::eq(*p, *parts.last().unwrap()) {
            panic!("odd part in the middle");
        }
    }
    let mut sum: u64 = 0;
    for c in bytes.chunks(2) {
        sum += ((c[0] as u64) << 8) | *c.get(1).unwrap_or(&0) as u64;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Checks the IP header checksum (IPv4) and the TCP checksum of `pkt`.
fn assert_checksums_valid(pkt: &[u8]) {
    let (tcp_at, src, dst) = if pkt[0] >> 4 == 4 {
        let ihl = (pkt[0] & 0xf) as usize * 4;
        assert_eq!(naive_sum(&[&pkt[..ihl]]), 0xffff, "IPv4 header checksum");
        assert_eq!(be16(pkt, 2) as usize, pkt.len(), "IPv4 total length");
        (ihl, &pkt[12..16], &pkt[16..20])
    } else {
        assert_eq!(be16(pkt, 4) as usize + 40, pkt.len(), "IPv6 payload length");
        (40, &pkt[8..24], &pkt[24..40])
    };
    let l4 = &pkt[tcp_at..];
    let len = (l4.len() as u32).to_be_bytes();
    let pseudo = [0, IPPROTO_TCP, len[2], len[3]];
    assert_eq!(naive_sum(&[src, dst, &pseudo, l4]), 0xffff, "TCP checksum");
}

struct Spec {
    ipv6: bool,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: Vec<u8>,
    ttl: u8,
    id: u16,
    sport: u16,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            ipv6: false,
            seq: 1_000_000,
            ack: 7777,
            flags: TCP_ACK,
            window: 500,
            // NOP NOP timestamp
            options: vec![1, 1, 8, 10, 0, 0, 1, 2, 0, 0, 3, 4],
            ttl: 64,
            id: 0xfff0,
            sport: 40000,
        }
    }
}

/// A TCP packet with valid checksums.
fn tcp_packet(s: &Spec, payload: &[u8]) -> Vec<u8> {
    let iph = if s.ipv6 { 40 } else { 20 };
    let tcph = 20 + s.options.len();
    let total = iph + tcph + payload.len();
    let mut p = vec![0u8; total];
    if s.ipv6 {
        p[0] = 0x60;
        p[1] = 0x01;
        p[2] = 0x23;
        p[3] = 0x45;
        put16(&mut p, 4, (total - 40) as u16);
        p[6] = IPPROTO_TCP;
        p[7] = s.ttl;
        p[8..24].copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p[24..40].copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    } else {
        p[0] = 0x45;
        put16(&mut p, 2, total as u16);
        put16(&mut p, 4, s.id);
        put16(&mut p, 6, 0x4000);
        p[8] = s.ttl;
        p[9] = IPPROTO_TCP;
        p[12..16].copy_from_slice(&[198, 19, 1, 1]);
        p[16..20].copy_from_slice(&[198, 19, 1, 2]);
        fix_ipv4_checksum(&mut p, 20);
    }
    let t = iph;
    put16(&mut p, t, s.sport);
    put16(&mut p, t + 2, 5201);
    put32(&mut p, t + 4, s.seq);
    put32(&mut p, t + 8, s.ack);
    p[t + 12] = ((tcph / 4) as u8) << 4;
    p[t + 13] = s.flags;
    put16(&mut p, t + 14, s.window);
    p[t + 20..t + tcph].copy_from_slice(&s.options);
    p[t + tcph..].copy_from_slice(payload);
    let (src, dst) = if s.ipv6 {
        (8..24, 24..40)
    } else {
        (12..16, 16..20)
    };
    let pseudo = checksum::pseudo_header(&p[src], &p[dst], IPPROTO_TCP, (total - t) as u32);
    let c = checksum::checksum(&p[t..], pseudo);
    put16(&mut p, t + 16, c);
    p
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// A super-packet as the kernel hands it over: one big TCP packet with the
/// pseudo-header sum in the checksum field, and its vnet header.
fn super_packet(s: &Spec, data: &[u8], mss: u16) -> (VnetHdr, Vec<u8>) {
    let mut p = tcp_packet(s, data);
    let t = if s.ipv6 { 40 } else { 20 };
    let (src, dst) = if s.ipv6 {
        (8..24, 24..40)
    } else {
        (12..16, 16..20)
    };
    let pseudo = checksum::pseudo_header(&p[src], &p[dst], IPPROTO_TCP, (p.len() - t) as u32);
    let partial = checksum::fold(pseudo);
    put16(&mut p, t + 16, partial);
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: if s.ipv6 { GSO_TCPV6 } else { GSO_TCPV4 },
        hdr_len: 0, // deliberately wrong: must not be trusted
        gso_size: mss,
        csum_start: t as u16,
        csum_offset: 16,
    };
    (hdr, p)
}

fn split_all(hdr: &VnetHdr, pkt: &[u8]) -> Vec<Vec<u8>> {
    let tso = Tso::parse(pkt, hdr).unwrap();
    let mut out = Vec::new();
    for i in 0..tso.segments() {
        let mut buf = vec![0u8; tso.max_segment_len()];
        let n = tso.write_segment(pkt, i, &mut buf);
        buf.truncate(n);
        out.push(buf);
    }
    out
}

fn check_split(ipv6: bool) {
    let data = payload(65535 - 40 - 32 - if ipv6 { 20 } else { 0 });
    let mss = 1368u16;
    let spec = Spec {
        ipv6,
        flags: TCP_ACK | TCP_PSH | TCP_FIN,
        ..Spec::default()
    };
    let (hdr, pkt) = super_packet(&spec, &data, mss);
    let segs = split_all(&hdr, &pkt);
    assert_eq!(segs.len(), data.len().div_ceil(mss as usize));
    let t = if ipv6 { 40 } else { 20 };
    let mut reassembled = Vec::new();
    for (i, seg) in segs.iter().enumerate() {
        assert_checksums_valid(seg);
        let last = i + 1 == segs.len();
        let body = &seg[t + 32..];
        assert!(body.len() == mss as usize || last && body.len() <= mss as usize);
        assert_eq!(be32(seg, t + 4), spec.seq + reassembled.len() as u32);
        assert_eq!(be32(seg, t + 8), spec.ack);
        let flags = seg[t + 13];
        if last {
            assert_eq!(flags, TCP_ACK | TCP_PSH | TCP_FIN);
        } else {
            assert_eq!(flags, TCP_ACK);
        }
        if !ipv6 {
            assert_eq!(be16(seg, 4), spec.id.wrapping_add(i as u16), "IP ID");
        }
        assert_eq!(seg[t + 20..t + 32], spec.options[..]);
        reassembled.extend_from_slice(body);
    }
    assert_eq!(reassembled, data);
}

#[test]
fn splits_ipv4_super_packet() {
    check_split(false);
}

#[test]
fn splits_ipv6_super_packet() {
    check_split(true);
}

#[test]
fn split_rejects_what_it_cannot_handle() {
    let (hdr, pkt) = super_packet(&Spec::default(), &payload(5000), 1000);
    let udp = VnetHdr { gso_type: 3, ..hdr };
    assert_eq!(Tso::parse(&pkt, &udp), Err(SplitError::GsoType));
    let zero = VnetHdr { gso_size: 0, ..hdr };
    assert_eq!(Tso::parse(&pkt, &zero), Err(SplitError::SegmentSize));
    let v6 = VnetHdr {
        gso_type: GSO_TCPV6,
        ..hdr
    };
    assert_eq!(Tso::parse(&pkt, &v6), Err(SplitError::Headers));
    let off = VnetHdr {
        csum_start: 24,
        ..hdr
    };
    assert_eq!(Tso::parse(&pkt, &off), Err(SplitError::Headers));
    assert_eq!(Tso::parse(&pkt[..30], &hdr), Err(SplitError::Headers));
}

#[test]
fn completes_a_partial_checksum() {
    let (_, mut pkt) = super_packet(&Spec::default(), &payload(1001), 1400);
    assert!(complete_checksum(&mut pkt, 20, 16));
    assert_checksums_valid(&pkt);
    assert!(!complete_checksum(&mut pkt, 20, 60000));
}

#[test]
fn split_refuses_segments_an_ip_length_field_cannot_hold() {
    for ipv6 in [false, true] {
        let spec = Spec {
            ipv6,
            ..Spec::default()
        };
        let hdr_len = if ipv6 { 40 } else { 20 } + 32;
        let longest = if ipv6 { 40 + 65535 } else { 65535 };
        // One segment exactly as long as the field can say: it splits.
        let (hdr, pkt) = super_packet(&spec, &payload(longest - hdr_len), u16::MAX);
        let segs = split_all(&hdr, &pkt);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].len(), longest);
        assert_checksums_valid(&segs[0]);
        // One byte more would wrap the length field: refused.
        let (hdr, pkt) = super_packet(&spec, &payload(longest - hdr_len + 1), u16::MAX);
        assert_eq!(
            Tso::parse(&pkt, &hdr),
            Err(SplitError::TooLong),
            "ipv6 {ipv6}"
        );
        // The same packet with a segment size that fits splits.
        let fits = VnetHdr {
            gso_size: 1000,
            ..hdr
        };
        for seg in split_all(&fits, &pkt) {
            assert_checksums_valid(&seg);
        }
    }
}

#[test]
fn vnet_header_fields_at_the_extremes() {
    let spec = Spec {
        // The sequence number wraps within the super-packet.
        seq: u32::MAX - 1500,
        ..Spec::default()
    };
    let (hdr, pkt) = super_packet(&spec, &payload(5000), 1000);
    let expected = split_all(&hdr, &pkt);
    for (i, seg) in expected.iter().enumerate() {
        assert_checksums_valid(seg);
        assert_eq!(be32(seg, 24), spec.seq.wrapping_add(i as u32 * 1000));
    }
    // hdr_len is not trusted: too short, too long or past the packet, the
    // segments are the same.
    for hdr_len in [0, 1, 51, 53, pkt.len() as u16 + 1, u16::MAX] {
        assert_eq!(split_all(&VnetHdr { hdr_len, ..hdr }, &pkt), expected);
    }
    // csum_start (where the TCP header is) at or past the end.
    for csum_start in [pkt.len() as u16 - 19, pkt.len() as u16, u16::MAX] {
        let bad = VnetHdr { csum_start, ..hdr };
        assert_eq!(Tso::parse(&pkt, &bad), Err(SplitError::Headers));
    }
    // The smallest and largest segment sizes.
    let one = VnetHdr { gso_size: 1, ..hdr };
    let tso = Tso::parse(&pkt, &one).unwrap();
    assert_eq!(tso.segments(), 5000);
    let mut out = vec![0u8; tso.max_segment_len()];
    let n = tso.write_segment(&pkt, 4999, &mut out);
    assert_eq!(n, 20 + 32 + 1);
    assert_checksums_valid(&out[..n]);
    let max = VnetHdr {
        gso_size: u16::MAX,
        ..hdr
    };
    let whole = split_all(&max, &pkt);
    assert_eq!(whole.len(), 1);
    assert_eq!(whole[0].len(), pkt.len());
    assert_checksums_valid(&whole[0]);
}

#[test]
fn completing_a_checksum_at_the_extremes() {
    let (_, pkt) = super_packet(&Spec::default(), &payload(1001), 1400);
    let len = pkt.len() as u16;
    for (start, offset) in [
        (u16::MAX, u16::MAX),
        (u16::MAX, 0),
        (0, u16::MAX),
        (len - 1, 0),
        (len, 0),
        (len + 1, 0),
        (len - 2, 1),
    ] {
        let mut p = pkt.clone();
        assert!(
            !complete_checksum(&mut p, start, offset),
            "{start} + {offset}"
        );
        assert_eq!(p, pkt, "left untouched");
    }
    // The field in the last two bytes still fits.
    let mut p = pkt.clone();
    assert!(complete_checksum(&mut p, len - 2, 0));
    assert!(!complete_checksum(&mut [], 0, 0));
}

/// Segments of one flow, as WireGuard would hand them to the TUN.
fn segments(spec: &Spec, sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut seq = spec.seq;
    let mut id = spec.id;
    sizes
        .iter()
        .map(|&n| {
            let p = tcp_packet(
                &Spec {
                    seq,
                    id,
                    options: spec.options.clone(),
                    ..*spec
                },
                &payload(n),
            );
            seq = seq.wrapping_add(n as u32);
            id = id.wrapping_add(1);
            p
        })
        .collect()
}

fn plan(pkts: &[Vec<u8>]) -> Planner {
    let mut p = Planner::new();
    p.plan(pkts.len(), |i| &pkts[i]);
    p
}

/// Group sizes, in write order.
fn shape(p: &Planner) -> Vec<usize> {
    p.groups().iter().map(|g| g.members).collect()
}

/// Builds the super-packet a group is written as (header, then payloads).
fn assemble(p: &Planner, pkts: &[Vec<u8>], g: usize) -> (VnetHdr, Vec<u8>) {
    let group = &p.groups()[g];
    let mut buf = [0u8; coalesce::GSO_HEADER_MAX];
    let n = write_gso_header(group, &pkts[group.first], &mut buf);
    let hdr = VnetHdr::decode(buf[..VNET_HDR_LEN].try_into().unwrap());
    let mut pkt = buf[VNET_HDR_LEN..n].to_vec();
    for i in p.members(group) {
        pkt.extend_from_slice(&pkts[i][group.hdr_len()..]);
    }
    (hdr, pkt)
}

fn check_round_trip(ipv6: bool, last_flags: u8) {
    let spec = Spec {
        ipv6,
        ..Spec::default()
    };
    let mut sizes = vec![1368; 40];
    sizes.push(500);
    let mut pkts = segments(&spec, &sizes);
    // The last segment carries PSH, as a sender's last one of a write does.
    let last = pkts.last_mut().unwrap();
    let t = if ipv6 { 40 } else { 20 };
    last[t + 13] = last_flags;
    put16(last, t + 16, 0);
    let (src, dst) = if ipv6 {
        (8..24, 24..40)
    } else {
        (12..16, 16..20)
    };
    let pseudo =
        checksum::pseudo_header(&last[src], &last[dst], IPPROTO_TCP, (last.len() - t) as u32);
    let c = checksum::checksum(&last[t..], pseudo);
    put16(last, t + 16, c);

    let p = plan(&pkts);
    assert_eq!(shape(&p), vec![41]);
    let (hdr, sp) = assemble(&p, &pkts, 0);
    assert_eq!(hdr.flags, F_NEEDS_CSUM);
    assert_eq!(hdr.gso_size, 1368);
    assert_eq!(hdr.hdr_len as usize, t + 32);
    assert_eq!(hdr.csum_start as usize, t);
    assert_eq!(hdr.csum_offset, 16);
    // The header field holds the pseudo-header sum: completing it over the
    // whole super-packet must give a valid packet.
    let mut completed = sp.clone();
    assert!(complete_checksum(
        &mut completed,
        hdr.csum_start,
        hdr.csum_offset
    ));
    assert_checksums_valid(&completed);
    assert_eq!(split_all(&hdr, &sp), pkts);
}

#[test]
fn coalesce_then_split_round_trips_ipv4() {
    check_round_trip(false, TCP_ACK | TCP_PSH);
    check_round_trip(false, TCP_ACK);
}

#[test]
fn coalesce_then_split_round_trips_ipv6() {
    check_round_trip(true, TCP_ACK | TCP_PSH);
}

#[test]
fn coalesces_up_to_64_kib() {
    let pkts = segments(&Spec::default(), &[1368; 100]);
    let p = plan(&pkts);
    // 47 * 1368 + 52 <= 65535 < 48 * 1368 + 52
    assert_eq!(shape(&p), vec![47, 47, 6]);
    let pkts = segments(&Spec::default(), &[100; 100]);
    assert_eq!(shape(&plan(&pkts)), vec![MAX_MEMBERS, 100 - MAX_MEMBERS]);
}

/// Recomputes the IPv4 header and TCP checksums of an IPv4 packet (TCP at
/// 20), as a sender that changed a field would.
fn refresh_checksums(p: &mut [u8]) {
    if be16(p, 2) as usize == p.len() {
        fix_ipv4_checksum(p, 20);
    }
    put16(p, 20 + 16, 0);
    let pseudo =
        checksum::pseudo_header(&p[12..16], &p[16..20], IPPROTO_TCP, (p.len() - 20) as u32);
    let c = checksum::checksum(&p[20..], pseudo);
    put16(p, 20 + 16, c);
}

/// Packet `i` changed by `f`, its checksums made right again: what differs
/// is the field, not the checksum.
fn modified(pkts: &mut [Vec<u8>], i: usize, f: impl FnOnce(&mut Vec<u8>)) {
    f(&mut pkts[i]);
    refresh_checksums(&mut pkts[i]);
}

#[test]
fn a_segment_whose_checksum_fails_is_never_merged() {
    for ipv6 in [false, true] {
        let spec = Spec {
            ipv6,
            ..Spec::default()
        };
        let t = if ipv6 { 40 } else { 20 };
        // Damaged in its payload, in its TCP header, in its IPv4 header.
        let mut damages: Vec<usize> = vec![t + 40, t + 4];
        if !ipv6 {
            damages.push(8);
        }
        for at in damages {
            for i in 0..3 {
                let mut pkts = segments(&spec, &[1000, 1000, 1000]);
                pkts[i][at] ^= 0x10;
                let p = plan(&pkts);
                let s = shape(&p);
                assert_eq!(s.iter().sum::<usize>(), 3, "every packet is planned");
                let alone = p
                    .groups()
                    .iter()
                    .any(|g| g.first == i && g.members == 1 && !g.is_coalesced());
                assert!(alone, "ipv6 {ipv6}, byte {at} of packet {i}: {s:?}");
            }
        }
        // Undamaged, the three are one group.
        assert_eq!(shape(&plan(&segments(&spec, &[1000, 1000, 1000]))), vec![3]);
    }
}

#[test]
fn does_not_coalesce_what_differs() {
    let base = || segments(&Spec::default(), &[1000, 1000, 1000]);
    let t = 20;
    type Change<'a> = Box<dyn Fn(&mut Vec<u8>) + 'a>;
    let cases: Vec<(&str, Change)> = vec![
        ("other port", Box::new(|p| put16(p, t, 1))),
        ("other address", Box::new(|p| p[15] = 9)),
        (
            "seq gap",
            Box::new(|p| {
                let seq = be32(p, t + 4);
                put32(p, t + 4, seq + 1)
            }),
        ),
        ("SYN", Box::new(|p| p[t + 13] |= TCP_SYN)),
        ("FIN", Box::new(|p| p[t + 13] |= TCP_FIN)),
        ("RST", Box::new(|p| p[t + 13] |= TCP_RST)),
        ("URG", Box::new(|p| p[t + 13] |= TCP_URG)),
        ("no ACK", Box::new(|p| p[t + 13] = 0)),
        ("other ack", Box::new(|p| put32(p, t + 8, 1))),
        ("other window", Box::new(|p| put16(p, t + 14, 1))),
        ("other options", Box::new(|p| p[t + 30] ^= 1)),
        ("other TTL", Box::new(|p| p[8] = 3)),
        ("other TOS", Box::new(|p| p[1] = 4)),
        ("fragment", Box::new(|p| put16(p, 6, 0x2000))),
        ("length mismatch", Box::new(|p| put16(p, 2, 900))),
    ];
    for (what, change) in &cases {
        let mut pkts = base();
        modified(&mut pkts, 1, change);
        let s = shape(&plan(&pkts));
        assert_eq!(
            s.iter().sum::<usize>(),
            3,
            "{what}: every packet is planned"
        );
        assert!(s[0] == 1, "{what}: {s:?}");
    }
    // A PSH ends the group; a shorter segment ends it; a longer one starts
    // a new one.
    let mut pkts = base();
    modified(&mut pkts, 1, |p| p[t + 13] |= TCP_PSH);
    assert_eq!(shape(&plan(&pkts)), vec![2, 1]);
    let pkts = segments(&Spec::default(), &[1000, 500, 500]);
    assert_eq!(shape(&plan(&pkts)), vec![2, 1]);
    let pkts = segments(&Spec::default(), &[500, 1000, 1000]);
    assert_eq!(shape(&plan(&pkts)), vec![1, 2]);
    // A pure ACK has no payload and stays alone.
    let pkts = segments(&Spec::default(), &[0, 0]);
    assert_eq!(shape(&plan(&pkts)), vec![1, 1]);
}

#[test]
fn ipv4_options_pass_through() {
    let mut pkts = segments(&Spec::default(), &[1000, 1000]);
    for p in &mut pkts {
        // Re-make the packet with a 4-byte IPv4 option (NOP x4).
        let mut q = p[..20].to_vec();
        q[0] = 0x46;
        q.extend_from_slice(&[1, 1, 1, 1]);
        q.extend_from_slice(&p[20..]);
        let len = q.len() as u16;
        put16(&mut q, 2, len);
        *p = q;
    }
    assert_eq!(shape(&plan(&pkts)), vec![1, 1]);
}

#[test]
fn interleaved_flows_keep_their_order() {
    let a = segments(&Spec::default(), &[1000, 1000, 1000]);
    let b = segments(
        &Spec {
            sport: 1,
            ..Spec::default()
        },
        &[1000, 1000],
    );
    let udp = vec![0x45u8; 28];
    let pkts = vec![
        a[0].clone(),
        b[0].clone(),
        udp,
        a[1].clone(),
        b[1].clone(),
        a[2].clone(),
    ];
    let p = plan(&pkts);
    assert_eq!(shape(&p), vec![3, 2, 1]);
    let members: Vec<Vec<usize>> = p.groups().iter().map(|g| p.members(g).collect()).collect();
    assert_eq!(members, vec![vec![0, 3, 5], vec![1, 4], vec![2]]);

    // A non-data packet of a flow closes its group: what follows it must
    // not be moved in front of it.
    let mut fin = a[1].clone();
    fin[20 + 13] |= TCP_FIN;
    let pkts = vec![a[0].clone(), fin, a[2].clone()];
    assert_eq!(shape(&plan(&pkts)), vec![1, 1, 1]);
}

#[test]
fn empty_slots_are_skipped() {
    let mut pkts = segments(&Spec::default(), &[1000, 1000, 1000]);
    pkts[1].clear();
    let p = plan(&pkts);
    assert_eq!(shape(&p), vec![1, 1]);
}

proptest! {
    #[test]
    fn split_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..3000),
        gso_type in prop_oneof![Just(GSO_TCPV4), Just(GSO_TCPV6), any::<u8>()],
        gso_size in any::<u16>(),
        csum_start in prop_oneof![Just(20u16), Just(40u16), any::<u16>()],
        first in prop_oneof![Just(0x45u8), Just(0x60u8), any::<u8>()],
    ) {
        let mut pkt = bytes;
        if let Some(b) = pkt.first_mut() { *b = first; }
        if pkt.len() > 9 { pkt[9] = IPPROTO_TCP; }
        let hdr = VnetHdr { flags: F_NEEDS_CSUM, gso_type, hdr_len: 0, gso_size, csum_start, csum_offset: 16 };
        if let Ok(tso) = Tso::parse(&pkt, &hdr) {
            let mut out = vec![0u8; tso.max_segment_len()];
            for i in 0..tso.segments() {
                let n = tso.write_segment(&pkt, i, &mut out);
                prop_assert!(n <= out.len());
            }
        }
        let mut pkt2 = pkt.clone();
        complete_checksum(&mut pkt2, csum_start, 16);
    }

    #[test]
    fn planning_never_panics_and_covers_every_packet(
        picks in proptest::collection::vec((0usize..6, any::<u16>(), any::<u8>(), 0usize..1500), 0..40),
    ) {
        let spec = Spec::default();
        let good = segments(&spec, &[1000; 6]);
        let pkts: Vec<Vec<u8>> = picks
            .iter()
            .map(|&(k, at, val, cut)| {
                let mut p = good[k].clone();
                let at = at as usize % p.len();
                p[at] = val;
                if cut % 5 == 0 { p.truncate(cut.min(p.len())); }
                p
            })
            .collect();
        let p = plan(&pkts);
        let mut seen = vec![false; pkts.len()];
        for g in p.groups() {
            let mut buf = [0u8; coalesce::GSO_HEADER_MAX];
            if g.is_coalesced() {
                write_gso_header(g, &pkts[g.first], &mut buf);
            }
            for i in p.members(g) {
                prop_assert!(!seen[i]);
                seen[i] = true;
            }
        }
        for (i, s) in seen.iter().enumerate() {
            prop_assert_eq!(*s, !pkts[i].is_empty());
        }
    }
}
