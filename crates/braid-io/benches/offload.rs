//! The per-packet work of TUN offload: checksums, splitting a 64 KiB TSO
//! super-packet, planning and writing the header of a coalesced write.
//!
//! `cargo bench -p braid-io --bench offload`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

use braid_io::offload::checksum;
use braid_io::offload::coalesce::{write_gso_header, Planner, GSO_HEADER_MAX};
use braid_io::offload::split::Tso;
use braid_io::offload::{VnetHdr, F_NEEDS_CSUM, GSO_TCPV4, IPPROTO_TCP, TCP_ACK};

const MSS: usize = 1368;
/// NOP NOP timestamp, as Linux sends it.
const OPTIONS: [u8; 12] = [1, 1, 8, 10, 0, 0, 1, 2, 0, 0, 3, 4];

/// An IPv4 TCP packet with timestamps, `payload` bytes of data and valid
/// checksums.
fn tcp4(seq: u32, id: u16, payload: usize) -> Vec<u8> {
    let total = 20 + 32 + payload;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&id.to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = IPPROTO_TCP;
    p[12..16].copy_from_slice(&[198, 19, 1, 1]);
    p[16..20].copy_from_slice(&[198, 19, 1, 2]);
    let c = checksum::checksum(&p[..20], 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&40000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5201u16.to_be_bytes());
    p[24..28].copy_from_slice(&seq.to_be_bytes());
    p[28..32].copy_from_slice(&7777u32.to_be_bytes());
    p[32] = 8 << 4;
    p[33] = TCP_ACK;
    p[34..36].copy_from_slice(&500u16.to_be_bytes());
    p[40..52].copy_from_slice(&OPTIONS);
    for (i, b) in p[52..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let pseudo = checksum::pseudo_header(&p[12..16], &p[16..20], IPPROTO_TCP, (total - 20) as u32);
    let c = checksum::checksum(&p[20..], pseudo);
    p[36..38].copy_from_slice(&c.to_be_bytes());
    p
}

fn checksums(c: &mut Criterion) {
    let mut g = c.benchmark_group("checksum");
    for len in [1420usize, 65535] {
        let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("{len} bytes"), |b| {
            b.iter(|| checksum::checksum(black_box(&data), 0))
        });
    }
    g.finish();
}

fn tso_split(c: &mut Criterion) {
    let payload = 65535 - 52;
    let pkt = tcp4(1, 1, payload);
    let hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 52,
        gso_size: MSS as u16,
        csum_start: 20,
        csum_offset: 16,
    };
    let tso = Tso::parse(&pkt, &hdr).unwrap();
    let stride = 1420 + 47;
    let mut out = vec![0u8; tso.segments() * stride];
    let mut g = c.benchmark_group("tso split");
    g.throughput(Throughput::Bytes(pkt.len() as u64));
    g.bench_function(format!("64 KiB into {} segments", tso.segments()), |b| {
        b.iter(|| {
            let tso = Tso::parse(black_box(&pkt), &hdr).unwrap();
            for (i, slot) in out.chunks_mut(stride).enumerate() {
                tso.write_segment(&pkt, i, &mut slot[16..]);
            }
        })
    });
    g.finish();
}

fn gro_coalesce(c: &mut Criterion) {
    let pkts: Vec<Vec<u8>> = (0..44u32)
        .map(|i| tcp4(1 + i * MSS as u32, i as u16, MSS))
        .collect();
    let mut planner = Planner::new();
    let mut header = [0u8; GSO_HEADER_MAX];
    let mut g = c.benchmark_group("gro coalesce");
    g.throughput(Throughput::Elements(pkts.len() as u64));
    g.bench_function("plan + header, 44 segments", |b| {
        b.iter(|| {
            planner.plan(pkts.len(), |i| black_box(&pkts[i]));
            let group = &planner.groups()[0];
            assert_eq!(group.members, 44);
            write_gso_header(group, &pkts[group.first], &mut header)
        })
    });
    g.finish();
}

criterion_group!(benches, checksums, tso_split, gro_coalesce);
criterion_main!(benches);
