//! What split and coalesce both read and write: the `virtio_net_hdr`, the
//! GSO and TCP flag values, big-endian field access and the IPv4 header
//! checksum. A leaf, so neither reaches back into `offload` for them.

/// Size of the `virtio_net_hdr` (without `num_buffers`, which TUN only
/// adds when told a 12-byte header size).
pub const VNET_HDR_LEN: usize = 10;

/// `virtio_net_hdr.flags`: the checksum at `csum_start + csum_offset` is
/// partial (the pseudo-header sum) and must be completed over the rest.
pub const F_NEEDS_CSUM: u8 = 1;

/// `virtio_net_hdr.gso_type` values.
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_TCPV6: u8 = 4;
/// Flag bit on `gso_type`: the super-packet carries CWR (ECN).
pub const GSO_ECN: u8 = 0x80;

/// Offset of the checksum inside a TCP header.
pub const TCP_CSUM_OFFSET: u16 = 16;

pub const IPPROTO_TCP: u8 = braid_core::ip::PROTO_TCP;

/// TCP flag bits (byte 13 of the header).
pub const TCP_FIN: u8 = braid_core::ip::tcp_flags::FIN;
pub const TCP_SYN: u8 = braid_core::ip::tcp_flags::SYN;
pub const TCP_RST: u8 = braid_core::ip::tcp_flags::RST;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = braid_core::ip::tcp_flags::ACK;
pub const TCP_URG: u8 = 0x20;
pub const TCP_CWR: u8 = 0x80;

/// A decoded `virtio_net_hdr`. TUN uses the host's byte order for it (we
/// never ask for another with `TUNSETVNETLE`/`BE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn decode(b: &[u8; VNET_HDR_LEN]) -> VnetHdr {
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }

    pub fn encode(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Recomputes the IPv4 header checksum of `ip[..ihl]` in place.
pub(crate) fn fix_ipv4_checksum(ip: &mut [u8], ihl: usize) {
    put16(ip, 10, 0);
    let c = super::checksum::checksum(&ip[..ihl], 0);
    put16(ip, 10, c);
}

/// Completes a partial checksum (`F_NEEDS_CSUM`, no GSO): the field at
/// `csum_start + csum_offset` holds the pseudo-header sum; the sum over
/// `pkt[csum_start..]` including it, complemented, is the real checksum.
/// Returns false (packet untouched) when the offsets do not fit the packet.
pub fn complete_checksum(pkt: &mut [u8], csum_start: u16, csum_offset: u16) -> bool {
    let start = csum_start as usize;
    let at = start + csum_offset as usize;
    if at + 2 > pkt.len() {
        return false;
    }
    let c = super::checksum::checksum(&pkt[start..], 0);
    // As the kernel does: a computed 0 goes out as its equivalent 0xffff,
    // because 0 in a UDP checksum means "none".
    put16(pkt, at, if c == 0 { 0xffff } else { c });
    true
}
