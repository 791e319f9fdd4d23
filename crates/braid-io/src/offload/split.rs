//! TSO split: one TCP super-packet read from the TUN (`virtio_net_hdr` with
//! `gso_type` TCPV4/TCPV6) becomes the MSS-sized IP packets the kernel would
//! have put on the wire.
//!
//! Each segment is the super-packet's IP and TCP headers followed by its
//! `gso_size` slice of the payload (the last one shorter), with the fields
//! a NIC's TSO engine would fix: IPv4 total length, ID (+1 per segment) and
//! header checksum, IPv6 payload length, TCP sequence number, FIN/PSH only
//! on the last segment, CWR only on the first, and a full TCP checksum.
//! The `virtio_net_hdr.hdr_len` is not trusted (it can be too short); the
//! headers' length comes from the packet itself.

use super::checksum;
use super::header::{
    be16, be32, fix_ipv4_checksum, put16, put32, VnetHdr, GSO_ECN, GSO_TCPV4, GSO_TCPV6,
    IPPROTO_TCP, TCP_CWR, TCP_FIN, TCP_PSH,
};
use braid_core::ip::{Ip, Tcp, PROTO_TCP};

/// Why a super-packet cannot be split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// Not TCPV4/TCPV6 (we never offer UDP segmentation).
    GsoType,
    /// The IP header disagrees with `gso_type`, is truncated, or the TCP
    /// header is not where `csum_start` says.
    Headers,
    /// `gso_size` is 0.
    SegmentSize,
    /// A segment would be longer than the 16-bit length field of its IP
    /// header can say (`gso_size` close to 64 KiB in a packet that long).
    TooLong,
}

/// A parsed super-packet: where its headers end and how it segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tso {
    ipv6: bool,
    /// Start of the TCP header (IPv4 header or IPv6 header plus extensions).
    tcp_at: usize,
    /// IP plus TCP header bytes, copied in front of every segment.
    hdr_len: usize,
    /// Payload bytes per segment (the last one may be shorter).
    gso_size: usize,
    /// Payload bytes in the whole super-packet.
    payload_len: usize,
}

impl Tso {
    /// Checks that `pkt` (the bytes after the `virtio_net_hdr`) is a TCP
    /// super-packet this module can split.
    pub fn parse(pkt: &[u8], hdr: &VnetHdr) -> Result<Tso, SplitError> {
        let ipv6 = match hdr.gso_type & !GSO_ECN {
            GSO_TCPV4 => false,
            GSO_TCPV6 => true,
            _ => return Err(SplitError::GsoType),
        };
        if hdr.gso_size == 0 {
            return Err(SplitError::SegmentSize);
        }
        let tcp_at = hdr.csum_start as usize;
        let ip_ok = match Ip::new(pkt) {
            Some(Ip::V4(h)) if !ipv6 => h.protocol() == PROTO_TCP && h.header_len() == tcp_at,
            Some(Ip::V6(_)) if ipv6 => tcp_at >= 40,
            _ => false,
        };
        let tcp = match pkt.get(tcp_at..).and_then(Tcp::new) {
            Some(tcp) if ip_ok && tcp_at >= 20 => tcp,
            _ => return Err(SplitError::Headers),
        };
        let tcp_len = tcp.header_len();
        let hdr_len = tcp_at + tcp_len;
        if tcp_len < 20 || pkt.len() < hdr_len {
            return Err(SplitError::Headers);
        }
        // tcp_at <= 65535 (a u16 field) and tcp_len <= 60: no sum above
        // overflows, and `hdr_len <= pkt.len()` was just checked.
        let tso = Tso {
            ipv6,
            tcp_at,
            hdr_len,
            gso_size: hdr.gso_size as usize,
            payload_len: pkt.len() - hdr_len,
        };
        // write_segment stores each segment's length in 16 bits: IPv4's
        // total length counts the whole packet, IPv6's payload length what
        // follows the 40-byte header.
        let longest = if ipv6 {
            40 + u16::MAX as usize
        } else {
            u16::MAX as usize
        };
        if tso.max_segment_len() > longest {
            return Err(SplitError::TooLong);
        }
        Ok(tso)
    }

    /// How many segments the super-packet makes (at least one, even with
    /// no payload).
    pub fn segments(&self) -> usize {
        self.payload_len.div_ceil(self.gso_size).max(1)
    }

    /// Length of the longest segment (the first).
    pub fn max_segment_len(&self) -> usize {
        self.hdr_len + self.gso_size.min(self.payload_len)
    }

    /// Writes segment `i` of the super-packet `pkt` (the same bytes given
    /// to [`parse`](Self::parse)) to the front of `out`; returns its length.
    ///
    /// Panics if `i >= self.segments()` or `out` is shorter than
    /// [`max_segment_len`](Self::max_segment_len).
    pub fn write_segment(&self, pkt: &[u8], i: usize, out: &mut [u8]) -> usize {
        let last = i + 1 == self.segments();
        let start = i * self.gso_size;
        let end = (start + self.gso_size).min(self.payload_len);
        let payload = &pkt[self.hdr_len + start..self.hdr_len + end];
        let len = self.hdr_len + payload.len();
        let seg = &mut out[..len];
        seg[..self.hdr_len].copy_from_slice(&pkt[..self.hdr_len]);
        seg[self.hdr_len..].copy_from_slice(payload);

        // `parse` refused segments whose length these fields cannot hold,
        // and len >= hdr_len >= tcp_at + 20 >= 60 for IPv6.
        let (src, dst) = if self.ipv6 {
            put16(seg, 4, (len - 40) as u16);
            (8..24, 24..40)
        } else {
            put16(seg, 2, len as u16);
            // The IP ID counts modulo 2^16, as a NIC's TSO increments it:
            // wrapping (and the truncating cast of `i`) is the intent.
            put16(seg, 4, be16(pkt, 4).wrapping_add(i as u16));
            fix_ipv4_checksum(seg, self.tcp_at);
            (12..16, 16..20)
        };

        let tcp = self.tcp_at;
        // TCP sequence numbers are modulo 2^32: wrapping is the intent.
        put32(seg, tcp + 4, be32(pkt, tcp + 4).wrapping_add(start as u32));
        let mut flags = seg[tcp + 13];
        if !last {
            flags &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            flags &= !TCP_CWR;
        }
        seg[tcp + 13] = flags;
        put16(seg, tcp + 16, 0);
        let pseudo = checksum::pseudo_header(&seg[src], &seg[dst], IPPROTO_TCP, (len - tcp) as u32);
        let c = checksum::checksum(&seg[tcp..], pseudo);
        put16(seg, tcp + 16, c);
        len
    }
}
