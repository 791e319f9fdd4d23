//! Optional LZ4 compression of inner packets between braid peers
//! (`Compression = lz4`; off by default because packet lengths of
//! compressed traffic leak secrets to anyone who can inject plaintext:
//! VORACLE, CRIME/BREACH).
//!
//! Negotiated per session like the AES offer: a hello flag
//! ([`HELLO_OFFERS_LZ4`](crate::ext::HELLO_OFFERS_LZ4)) says "I can open
//! compressed packets"; a side compresses only towards a peer that offered
//! it on the current session and only when it offers it too. Stock
//! WireGuard peers never see a hello, so they never get one.
//!
//! Wire format, inside the encrypted payload of an ordinary data message
//! (so an observer cannot tell which packets were compressed, and the
//! message type and counter stay WireGuard's):
//!
//! ```text
//!  0xB4 | compressed length (u16, little-endian) | LZ4 block | zero padding
//! ```
//!
//! The first byte of an IP packet is its version nibble (4 or 6), so 0xB4
//! can never start one. A packet that does not get at least 16 bytes (one
//! padding block) shorter is sent as is.
//! Decompression writes into a buffer of at most the MTU, so a crafted
//! block cannot expand beyond one packet.

use lz4_flex::block::{compress_into_with_table, decompress_into, CompressTable};

/// First plaintext byte of a compressed packet.
pub const MARKER: u8 = 0xB4;
/// Marker and compressed length.
pub const HEADER_LEN: usize = 3;
/// Shorter packets (TCP ACKs, most DNS) are not worth the attempt.
pub const MIN_COMPRESS_LEN: usize = 128;
/// A packet is sent compressed only when this saves at least this much.
pub const MIN_SAVING: usize = 16;
/// The largest packet braid compresses or decompresses (the largest MTU).
pub const MAX_PACKET: usize = 9000;
/// Worst-case LZ4 block size for a `MAX_PACKET` input (LZ4's bound:
/// n + n/255 + 16).
const MAX_BLOCK: usize = MAX_PACKET + MAX_PACKET / 255 + 16;

/// `Compression =` in `[Interface]` or `[Peer]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionPolicy {
    #[default]
    Off,
    Lz4,
}

impl CompressionPolicy {
    pub const NAMES: &'static str = "lz4 or off";

    pub fn parse(s: &str) -> Option<CompressionPolicy> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "none" => Some(CompressionPolicy::Off),
            "lz4" => Some(CompressionPolicy::Lz4),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CompressionPolicy::Off => "off",
            CompressionPolicy::Lz4 => "lz4",
        }
    }
}

/// Why a compressed packet was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecompressError {
    /// The header's length does not fit the plaintext.
    BadHeader,
    /// Not a valid LZ4 block, or it expands beyond the limit.
    BadBlock,
}

/// The compressor's working memory, allocated once: LZ4's hash table and
/// one block buffer, so no packet allocates.
pub struct Lz4 {
    table: CompressTable,
    scratch: Box<[u8]>,
}

impl Default for Lz4 {
    fn default() -> Self {
        Lz4::new()
    }
}

impl Lz4 {
    pub fn new() -> Lz4 {
        Lz4 {
            table: CompressTable::default(),
            scratch: vec![0u8; MAX_BLOCK].into_boxed_slice(),
        }
    }

    /// Compresses the packet in `buf[..len]` in place when that makes it
    /// shorter; returns the new length, or `None` (then `buf` is unchanged
    /// and the packet goes out as it is).
    pub fn compress_in_place(&mut self, buf: &mut [u8], len: usize) -> Option<usize> {
        if !(MIN_COMPRESS_LEN..=MAX_PACKET).contains(&len) || len > buf.len() {
            return None;
        }
        let n = compress_into_with_table(&buf[..len], &mut self.scratch, &mut self.table).ok()?;
        // Less than one 16-byte padding block saved buys nothing on the
        // wire and would cost the receiver a decompression. (n is at most
        // MAX_BLOCK: no overflow.)
        if HEADER_LEN + n + MIN_SAVING > len {
            return None;
        }
        buf[0] = MARKER;
        // n < len <= MAX_PACKET: fits the u16.
        buf[1..HEADER_LEN].copy_from_slice(&(n as u16).to_le_bytes());
        buf[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&self.scratch[..n]);
        Some(HEADER_LEN + n)
    }

    /// Restores the packet compressed in `buf[..len]` (marker first;
    /// padding after the block is ignored) in place. The result may be
    /// longer than `len` but never longer than `max_len` or `buf`.
    pub fn decompress_in_place(
        &mut self,
        buf: &mut [u8],
        len: usize,
        max_len: usize,
    ) -> Result<usize, DecompressError> {
        // A claimed length beyond the buffer is the caller's mistake, but it
        // must be refused rather than let the block's slice run past it.
        if len < HEADER_LEN || len > buf.len() || buf[0] != MARKER {
            return Err(DecompressError::BadHeader);
        }
        // Peer-supplied, at most 65 535: the sum cannot overflow.
        let block_len = usize::from(u16::from_le_bytes([buf[1], buf[2]]));
        if HEADER_LEN + block_len > len {
            return Err(DecompressError::BadHeader);
        }
        let limit = max_len.min(buf.len()).min(self.scratch.len());
        let block = &buf[HEADER_LEN..HEADER_LEN + block_len];
        let n = decompress_into(block, &mut self.scratch[..limit])
            .map_err(|_| DecompressError::BadBlock)?;
        buf[..n].copy_from_slice(&self.scratch[..n]);
        Ok(n)
    }
}

/// Whether a decrypted payload is a compressed packet.
pub fn is_compressed(plain: &[u8]) -> bool {
    plain.first() == Some(&MARKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_with_payload(payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    /// A small deterministic pseudo-random byte stream.
    fn noise(n: usize, mut x: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn compressible_packet_round_trips_and_shrinks() {
        let text = b"GET /index.html HTTP/1.1\r\nHost: example.test\r\n".repeat(30);
        let packet = ipv4_with_payload(&text[..1380]);
        let mut buf = vec![0u8; 1500];
        buf[..packet.len()].copy_from_slice(&packet);
        let mut lz4 = Lz4::new();
        let n = lz4
            .compress_in_place(&mut buf, packet.len())
            .expect("shrinks");
        assert!(n < packet.len() / 4, "{n}");
        assert!(is_compressed(&buf[..n]));
        // Padding after the block (WireGuard pads to 16) is ignored.
        buf[n..n + 13].fill(0);
        let back = lz4.decompress_in_place(&mut buf, n + 13, 1420).unwrap();
        assert_eq!(&buf[..back], &packet[..]);
    }

    #[test]
    fn incompressible_and_small_packets_are_left_alone() {
        let mut lz4 = Lz4::new();
        let packet = ipv4_with_payload(&noise(1380, 42));
        let mut buf = packet.clone();
        assert_eq!(lz4.compress_in_place(&mut buf, packet.len()), None);
        assert_eq!(buf, packet);
        let small = ipv4_with_payload(&[0; 60]);
        let mut buf = small.clone();
        assert_eq!(lz4.compress_in_place(&mut buf, small.len()), None);
        assert!(!is_compressed(&ipv4_with_payload(&[])));
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        assert!(!is_compressed(&v6));
    }

    #[test]
    fn a_bomb_cannot_expand_beyond_the_limit() {
        // 60 000 zeros compress to a few hundred bytes; the limit is 1420.
        let mut src = vec![0u8; 60_000];
        src[0] = 0x45;
        let mut table = CompressTable::default();
        let mut block = vec![0u8; 70_000];
        let n = compress_into_with_table(&src, &mut block, &mut table).unwrap();
        let mut buf = vec![0u8; 9472];
        buf[0] = MARKER;
        buf[1..3].copy_from_slice(&(n as u16).to_le_bytes());
        buf[3..3 + n].copy_from_slice(&block[..n]);
        let mut lz4 = Lz4::new();
        assert_eq!(
            lz4.decompress_in_place(&mut buf, 3 + n, 1420),
            Err(DecompressError::BadBlock)
        );
    }

    #[test]
    fn malformed_input_is_refused_not_a_panic() {
        let mut lz4 = Lz4::new();
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![MARKER],
            vec![MARKER, 10, 0, 1, 2], // length beyond the payload
            vec![MARKER, 3, 0, 0xff, 0xff, 0xff], // literal run past the end
            vec![0x45, 0, 0],
        ];
        for (i, c) in cases.iter().enumerate() {
            let mut buf = c.clone();
            buf.resize(64, 0);
            assert!(
                lz4.decompress_in_place(&mut buf, c.len(), 1420).is_err(),
                "case {i}"
            );
        }
        // Random blocks: any outcome but a panic, never beyond the limit.
        for seed in 1..300u64 {
            let mut buf = noise(200, seed);
            buf[0] = MARKER;
            buf[1..3].copy_from_slice(&150u16.to_le_bytes());
            if let Ok(n) = lz4.decompress_in_place(&mut buf, 200, 100) {
                assert!(n <= 100);
            }
        }
    }

    #[test]
    fn policy_names() {
        assert_eq!(
            CompressionPolicy::parse("LZ4"),
            Some(CompressionPolicy::Lz4)
        );
        assert_eq!(
            CompressionPolicy::parse("off"),
            Some(CompressionPolicy::Off)
        );
        assert_eq!(CompressionPolicy::parse("lzo"), None);
        assert_eq!(CompressionPolicy::default().name(), "off");
    }

    #[test]
    fn lengths_beyond_the_buffer_are_refused_not_a_panic() {
        let mut lz4 = Lz4::new();
        // (case, buffer, claimed length): the header's block length may
        // claim anything up to 65 535, and the length passed in may exceed
        // the buffer.
        let mut block_max = vec![MARKER, 0xff, 0xff, 0];
        block_max.resize(64, 0);
        let cases: [(u8, Vec<u8>, usize); 4] = [
            (1, vec![MARKER, 10, 0, 1, 2], 5000),
            (2, vec![MARKER, 0xff, 0xff], usize::MAX),
            (3, block_max.clone(), 64),
            (4, block_max, 70_000),
        ];
        for (case, mut buf, len) in cases {
            assert_eq!(
                lz4.decompress_in_place(&mut buf, len, 1420),
                Err(DecompressError::BadHeader),
                "case {case}"
            );
        }
        let text = b"GET /index.html HTTP/1.1\r\n".repeat(20);
        let mut buf = text.clone();
        assert_eq!(lz4.compress_in_place(&mut buf, text.len() + 1), None);
        assert_eq!(lz4.compress_in_place(&mut buf, usize::MAX), None);
        assert_eq!(buf, text);
    }
}
