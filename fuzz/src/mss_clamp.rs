//! MSS clamping on arbitrary packets never panics, and on a TCP SYN with a
//! correct checksum it keeps the checksum correct (the incremental update
//! must match a full recomputation), never raises an MSS, and is idempotent.

use crate::input::Input;
use braid_core::mss::{clamp, clamp_with, MssLimit};
use braid_io::offload::checksum::{checksum, pseudo_header};

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let selector = input.u8();
    let limit = input.u16();
    if selector & 1 == 0 {
        // Raw bytes, as the TUN may hand them over.
        let mut packet = input.bytes(usize::MAX).to_vec();
        clamp_with(&mut packet, MssLimit::from_mtu(usize::from(limit)));
        clamp(&mut packet, limit);
        return;
    }
    let ipv6 = selector & 2 != 0;
    let options = input.short_bytes();
    let option_words = options.len().div_ceil(4).min(10);
    let tcp_hdr = 20 + option_words * 4;
    let payload = input.short_bytes();
    let ip_hdr = if ipv6 { 40 } else { 20 };
    let total = ip_hdr + tcp_hdr + payload.len();
    let mut p = vec![0u8; total];
    if ipv6 {
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((tcp_hdr + payload.len()) as u16).to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[8..24].copy_from_slice(&input.array::<16>());
        p[24..40].copy_from_slice(&input.array::<16>());
    } else {
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..20].copy_from_slice(&input.array::<8>());
    }
    let tcp = &mut p[ip_hdr..];
    tcp[..12].copy_from_slice(&input.array::<12>());
    tcp[12] = ((tcp_hdr / 4) as u8) << 4;
    tcp[13] = input.u8() | 0x02; // SYN
    let n = options.len().min(40);
    tcp[20..20 + n].copy_from_slice(&options[..n]);
    tcp[20 + tcp_hdr - 20..].copy_from_slice(payload);
    set_tcp_checksum(&mut p, ip_hdr);
    let before = mss_values(&p[ip_hdr..ip_hdr + tcp_hdr]);

    let changed = clamp(&mut p, limit);
    assert!(tcp_checksum_ok(&p, ip_hdr), "clamp broke the TCP checksum");
    let after = mss_values(&p[ip_hdr..ip_hdr + tcp_hdr]);
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(&after) {
        assert!(a <= b, "MSS raised from {b} to {a}");
        assert_eq!(*a, (*b).min(limit), "MSS {b} not clamped to {limit}");
    }
    assert_eq!(changed, before != after);
    assert!(
        !clamp(&mut p, limit),
        "clamping twice changed the packet again"
    );
}

fn pseudo(p: &[u8], ip_hdr: usize) -> u64 {
    let l4 = (p.len() - ip_hdr) as u32;
    if ip_hdr == 40 {
        pseudo_header(&p[8..24], &p[24..40], 6, l4)
    } else {
        pseudo_header(&p[12..16], &p[16..20], 6, l4)
    }
}

fn set_tcp_checksum(p: &mut [u8], ip_hdr: usize) {
    p[ip_hdr + 16..ip_hdr + 18].fill(0);
    let c = checksum(&p[ip_hdr..], pseudo(p, ip_hdr));
    p[ip_hdr + 16..ip_hdr + 18].copy_from_slice(&c.to_be_bytes());
}

fn tcp_checksum_ok(p: &[u8], ip_hdr: usize) -> bool {
    checksum(&p[ip_hdr..], pseudo(p, ip_hdr)) == 0
}

/// The MSS options a clamp would see, walking the options as it does.
fn mss_values(tcp: &[u8]) -> Vec<u16> {
    let mut out = Vec::new();
    let mut at = 20;
    while at < tcp.len() {
        match tcp[at] {
            0 => break,
            1 => at += 1,
            kind => {
                let Some(&len) = tcp.get(at + 1) else { break };
                let len = usize::from(len);
                if len < 2 || at + len > tcp.len() {
                    break;
                }
                if kind == 2 && len == 4 {
                    out.push(u16::from_be_bytes([tcp[at + 2], tcp[at + 3]]));
                }
                at += len;
            }
        }
    }
    out
}
