//! Byte views of the inner packets the tunnel carries: IPv4, IPv6 and TCP
//! headers read in place.
//!
//! A view is a `&[u8]` whose length was checked once, when it was made;
//! its accessors then read fixed offsets. Nothing is copied or allocated,
//! so the per-packet code (routing, the MSS clamp, too-big answers, the ACK
//! test of the reorder window) reads headers through here at no cost over
//! hand-written indexing. Only the fixed part of each header is checked:
//! whether a claimed length (IHL, total or payload length, data offset)
//! fits the packet is for the caller to test, as each caller treats a lie
//! differently.

/// IP protocol (IPv4) or next-header (IPv6) numbers this crate looks at.
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_ICMPV6: u8 = 58;

/// Fixed header lengths.
pub const IPV4_HEADER: usize = 20;
pub const IPV6_HEADER: usize = 40;
pub const TCP_HEADER: usize = 20;

/// TCP flag bits (byte 13 of the header).
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const ACK: u8 = 0x10;
}

/// The IP version nibble of `packet`, if it has a first byte.
#[inline]
pub fn version(packet: &[u8]) -> Option<u8> {
    packet.first().map(|b| b >> 4)
}

/// An inner IP packet: IPv4 with at least its 20 fixed bytes, or IPv6 with
/// its 40.
#[derive(Clone, Copy, Debug)]
pub enum Ip<'a> {
    V4(Ipv4<'a>),
    V6(Ipv6<'a>),
}

impl<'a> Ip<'a> {
    /// The view of `packet` by its version nibble; `None` for another
    /// version or a packet shorter than its fixed header.
    #[inline]
    pub fn new(packet: &'a [u8]) -> Option<Ip<'a>> {
        match version(packet)? {
            4 if packet.len() >= IPV4_HEADER => Some(Ip::V4(Ipv4(packet))),
            6 if packet.len() >= IPV6_HEADER => Some(Ip::V6(Ipv6(packet))),
            _ => None,
        }
    }

    /// The protocol (IPv4) or first next header (IPv6).
    #[inline]
    pub fn protocol(&self) -> u8 {
        match self {
            Ip::V4(h) => h.protocol(),
            Ip::V6(h) => h.next_header(),
        }
    }

    /// Where the payload starts: the IHL in bytes (unchecked) or 40.
    #[inline]
    pub fn header_len(&self) -> usize {
        match self {
            Ip::V4(h) => h.header_len(),
            Ip::V6(_) => IPV6_HEADER,
        }
    }

    /// The packet's length as its header claims it (unchecked).
    #[inline]
    pub fn claimed_len(&self) -> usize {
        match self {
            Ip::V4(h) => h.total_len(),
            // At most 40 + 65 535: no overflow.
            Ip::V6(h) => IPV6_HEADER + h.payload_len(),
        }
    }
}

/// An IPv4 header: `bytes` is the packet, at least 20 bytes, version 4.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4<'a>(&'a [u8]);

impl<'a> Ipv4<'a> {
    #[inline]
    pub fn new(packet: &'a [u8]) -> Option<Ipv4<'a>> {
        (packet.len() >= IPV4_HEADER && packet[0] >> 4 == 4).then_some(Ipv4(packet))
    }

    /// The whole packet the view was made of.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The IHL in bytes (may be below 20 or beyond the packet).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.0[0] & 0x0f) * 4
    }

    /// The total length field.
    #[inline]
    pub fn total_len(&self) -> usize {
        usize::from(u16::from_be_bytes([self.0[2], self.0[3]]))
    }

    /// Don't fragment.
    #[inline]
    pub fn dont_fragment(&self) -> bool {
        self.0[6] & 0x40 != 0
    }

    /// More fragments.
    #[inline]
    pub fn more_fragments(&self) -> bool {
        self.0[6] & 0x20 != 0
    }

    /// The fragment offset (in units of 8 bytes).
    #[inline]
    pub fn fragment_offset(&self) -> u16 {
        u16::from_be_bytes([self.0[6] & 0x1f, self.0[7]])
    }

    /// A fragment: more fragments follow or the offset is not zero.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        u16::from_be_bytes([self.0[6], self.0[7]]) & 0x3fff != 0
    }

    #[inline]
    pub fn protocol(&self) -> u8 {
        self.0[9]
    }

    #[inline]
    pub fn src(&self) -> [u8; 4] {
        [self.0[12], self.0[13], self.0[14], self.0[15]]
    }

    #[inline]
    pub fn dst(&self) -> [u8; 4] {
        [self.0[16], self.0[17], self.0[18], self.0[19]]
    }
}

/// An IPv6 header: `bytes` is the packet, at least 40 bytes, version 6.
#[derive(Clone, Copy, Debug)]
pub struct Ipv6<'a>(&'a [u8]);

impl<'a> Ipv6<'a> {
    #[inline]
    pub fn new(packet: &'a [u8]) -> Option<Ipv6<'a>> {
        (packet.len() >= IPV6_HEADER && packet[0] >> 4 == 6).then_some(Ipv6(packet))
    }

    /// The whole packet the view was made of.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The payload length field.
    #[inline]
    pub fn payload_len(&self) -> usize {
        usize::from(u16::from_be_bytes([self.0[4], self.0[5]]))
    }

    /// The first next header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.0[6]
    }

    #[inline]
    pub fn src(&self) -> [u8; 16] {
        addr16(&self.0[8..24])
    }

    #[inline]
    pub fn dst(&self) -> [u8; 16] {
        addr16(&self.0[24..40])
    }
}

#[inline]
fn addr16(b: &[u8]) -> [u8; 16] {
    let mut a = [0; 16];
    a.copy_from_slice(b);
    a
}

/// A TCP header: `bytes` starts at the header and holds at least its 20
/// fixed bytes.
#[derive(Clone, Copy, Debug)]
pub struct Tcp<'a>(&'a [u8]);

impl<'a> Tcp<'a> {
    #[inline]
    pub fn new(segment: &'a [u8]) -> Option<Tcp<'a>> {
        (segment.len() >= TCP_HEADER).then_some(Tcp(segment))
    }

    /// The data offset in bytes: where the payload starts (may be below 20
    /// or beyond the segment).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.0[12] >> 4) * 4
    }

    /// The flag byte (see [`tcp_flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.0[13]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_read_the_fixed_headers() {
        let mut v4 = [0u8; 40];
        v4[0] = 0x46;
        v4[2..4].copy_from_slice(&40u16.to_be_bytes());
        v4[6] = 0x40 | 0x01;
        v4[7] = 0x02;
        v4[9] = PROTO_TCP;
        v4[12..16].copy_from_slice(&[10, 0, 0, 1]);
        v4[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let Some(Ip::V4(h)) = Ip::new(&v4) else {
            panic!("not IPv4")
        };
        assert_eq!(h.header_len(), 24);
        assert_eq!(h.total_len(), 40);
        assert!(h.dont_fragment() && !h.more_fragments());
        assert_eq!(h.fragment_offset(), 0x102);
        assert!(h.is_fragment());
        assert_eq!(h.protocol(), PROTO_TCP);
        assert_eq!((h.src(), h.dst()), ([10, 0, 0, 1], [10, 0, 0, 2]));
        assert_eq!(Ip::V4(h).claimed_len(), 40);

        let mut v6 = [0u8; 60];
        v6[0] = 0x60;
        v6[4..6].copy_from_slice(&20u16.to_be_bytes());
        v6[6] = PROTO_TCP;
        v6[8] = 0xfd;
        v6[39] = 2;
        let ip = Ip::new(&v6).expect("IPv6");
        assert_eq!(
            (ip.protocol(), ip.header_len(), ip.claimed_len()),
            (6, 40, 60)
        );
        let Ip::V6(h) = ip else { panic!("not IPv6") };
        assert_eq!(h.src()[0], 0xfd);
        assert_eq!(h.dst()[15], 2);

        let mut tcp = [0u8; 20];
        tcp[12] = 0x50;
        tcp[13] = tcp_flags::SYN | tcp_flags::ACK;
        let t = Tcp::new(&tcp).expect("20 bytes");
        assert_eq!((t.header_len(), t.flags()), (20, 0x12));
    }

    #[test]
    fn short_or_foreign_packets_have_no_view() {
        assert!(Ip::new(&[]).is_none());
        assert!(Ip::new(&[0x45; 19]).is_none());
        assert!(Ip::new(&[0x60; 39]).is_none());
        assert!(Ip::new(&[0x55; 60]).is_none());
        assert!(Ipv4::new(&[0x60; 40]).is_none());
        assert!(Ipv6::new(&[0x45; 40]).is_none());
        assert!(Tcp::new(&[0; 19]).is_none());
    }
}
