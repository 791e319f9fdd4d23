//! The TUN offload parsers on arbitrary input: TSO super-packets split
//! into segments that fit the size the splitter promised, partial checksum
//! completion, and the write-side coalescing planner, whose groups must
//! cover every packet exactly once within the super-packet limits.

use crate::input::Input;
use braid_io::offload::coalesce::{
    write_gso_header, Planner, GSO_HEADER_MAX, MAX_MEMBERS, MAX_SUPER_LEN,
};
use braid_io::offload::split::Tso;
use braid_io::offload::{complete_checksum, VnetHdr, GSO_TCPV4, GSO_TCPV6, VNET_HDR_LEN};

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    if input.bool() {
        split(&mut input);
    } else {
        coalesce(&mut input);
    }
}

fn split(input: &mut Input) {
    let raw: [u8; VNET_HDR_LEN] = input.array();
    let mut hdr = VnetHdr::decode(&raw);
    let steer = input.u8();
    let mut pkt = input.bytes(usize::MAX).to_vec();
    if steer & 1 != 0 {
        // Point the header at the packet so parsing gets past the door.
        let v6 = pkt.first().is_some_and(|b| b >> 4 == 6);
        hdr.gso_type = (hdr.gso_type & 0x80) | if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
        hdr.csum_start = match (v6, pkt.first()) {
            (true, _) => 40,
            (false, Some(b)) => u16::from(b & 0x0f) * 4,
            (false, None) => 20,
        };
        hdr.gso_size = hdr.gso_size.max(1);
    }
    let mut copy = pkt.clone();
    let _ = complete_checksum(&mut copy, hdr.csum_start, hdr.csum_offset);
    let Ok(tso) = Tso::parse(&pkt, &hdr) else {
        return;
    };
    let max = tso.max_segment_len();
    let mut out = vec![0u8; max];
    // Bounded: a 1-byte segment size could mean 64 K segments.
    for i in 0..tso.segments().min(256) {
        let len = tso.write_segment(&pkt, i, &mut out);
        assert!(len <= max, "segment {i} is {len} bytes, over {max}");
    }
    if tso.segments() > 1 {
        let last = tso.segments() - 1;
        let len = tso.write_segment(&pkt, last, &mut out);
        assert!(len <= max);
    }
    pkt.clear();
}

fn coalesce(input: &mut Input) {
    let template = input.bytes(60).to_vec();
    let mut packets: Vec<Vec<u8>> = Vec::new();
    while !input.is_empty() && packets.len() < 2 * MAX_MEMBERS {
        let kind = input.u8();
        let p = if kind & 1 == 0 && template.len() >= 40 {
            // A variation of one TCP packet: same flow, other sequence
            // numbers, flags and payload lengths, so groups form.
            let mut p = template.clone();
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl + 8 <= p.len() {
                p[ihl + 4..ihl + 8].copy_from_slice(&input.u32().to_be_bytes());
            }
            let n = input.u16() as usize % 1500;
            p.extend(std::iter::repeat_n(kind, n));
            let total = p.len() as u16;
            if p[0] >> 4 == 4 {
                p[2..4].copy_from_slice(&total.to_be_bytes());
            } else if p.len() >= 40 {
                p[4..6].copy_from_slice(&(total.saturating_sub(40)).to_be_bytes());
            }
            p
        } else {
            input.short_bytes().to_vec()
        };
        packets.push(p);
    }
    let mut planner = Planner::new();
    planner.plan(packets.len(), |i| &packets[i]);
    let mut seen = vec![false; packets.len()];
    let mut header = [0u8; GSO_HEADER_MAX];
    for group in planner.groups() {
        let members: Vec<usize> = planner.members(group).collect();
        assert_eq!(members.len(), group.members, "member count");
        assert!(group.members <= MAX_MEMBERS);
        for &i in &members {
            assert!(!packets[i].is_empty(), "an empty packet joined a group");
            assert!(!seen[i], "packet {i} in two groups");
            seen[i] = true;
        }
        if group.is_coalesced() {
            let head = &packets[group.first];
            let len = write_gso_header(group, head, &mut header);
            assert!(len <= GSO_HEADER_MAX);
            let payload: usize = members
                .iter()
                .map(|&i| packets[i].len() - group.hdr_len())
                .sum();
            assert!(
                group.hdr_len() + payload <= MAX_SUPER_LEN,
                "super-packet too long"
            );
        }
    }
    for (i, p) in packets.iter().enumerate() {
        assert_eq!(seen[i], !p.is_empty(), "packet {i} in no group");
    }
}
