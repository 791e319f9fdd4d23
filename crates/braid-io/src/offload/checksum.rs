//! The Internet checksum (RFC 1071) and the TCP/UDP pseudo-header sum.
//!
//! Every segment split from a TSO super-packet gets a full TCP checksum, so
//! this runs over every byte the TUN hands us: it sums eight bytes at a time
//! in native byte order (the one's-complement sum is byte-order independent
//! up to a final swap, RFC 1071 §2(B)) into two 128-bit lanes, which the
//! compiler turns into add-with-carry chains that do not wait on each other.

/// Adds `data` to the unfolded one's-complement sum `initial` and returns
/// the new unfolded sum.
///
/// Sums compose: `partial(b, partial(a, 0)) == partial(a ++ b, 0)` as long
/// as `a` has an even length.
pub fn partial(data: &[u8], initial: u64) -> u64 {
    let mut lane0 = initial as u128;
    let mut lane1 = 0u128;
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        lane0 += u64::from_ne_bytes(c[..8].try_into().unwrap()) as u128;
        lane1 += u64::from_ne_bytes(c[8..].try_into().unwrap()) as u128;
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 16];
    tail[..rest.len()].copy_from_slice(rest);
    lane0 += u64::from_ne_bytes(tail[..8].try_into().unwrap()) as u128;
    lane1 += u64::from_ne_bytes(tail[8..].try_into().unwrap()) as u128;
    // 2^128 would need more than 2^64 words: no overflow for any slice.
    let sum = lane0 + lane1;
    add_carry(sum as u64, (sum >> 64) as u64)
}

/// One's-complement addition of two unfolded sums.
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + carry as u64
}

/// Folds an unfolded sum to 16 bits, as the big-endian value a checksum
/// field holds (not complemented).
pub fn fold(sum: u64) -> u16 {
    let s = (sum & 0xffff_ffff) + (sum >> 32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    u16::from_be(s as u16)
}

/// The checksum to store for `data` summed on top of `initial` (e.g. a
/// pseudo-header sum): the complement of the folded sum. Write it with
/// `to_be_bytes`. Over data that already holds its correct checksum the
/// result is 0.
pub fn checksum(data: &[u8], initial: u64) -> u16 {
    !fold(partial(data, initial))
}

/// The unfolded sum of the TCP/UDP pseudo header: `src` and `dst` are the
/// 4- or 16-byte addresses, `l4_len` the length of the transport header
/// plus payload. One form serves both families: IPv4's 16-bit length word
/// and IPv6's 32-bit one add up to the same sum for lengths below 64 KiB.
pub fn pseudo_header(src: &[u8], dst: &[u8], proto: u8, l4_len: u32) -> u64 {
    let mut words = [0u8; 8];
    words[..4].copy_from_slice(&l4_len.to_be_bytes());
    words[7] = proto;
    partial(&words, partial(dst, partial(src, 0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The textbook byte-at-a-time definition, to check the fast one.
    fn reference(data: &[u8]) -> u16 {
        let mut sum: u64 = 0;
        for c in data.chunks(2) {
            sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u64;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the sum of these bytes is 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(partial(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data, 0), !0xddf2);
    }

    #[test]
    fn ipv4_header_verifies_to_zero() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let c = checksum(&h, 0);
        assert_eq!(c, 0xb861);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(checksum(&h, 0), 0);
    }

    #[test]
    fn pseudo_header_matches_a_spelled_out_one() {
        let src = [198, 19, 1, 1];
        let dst = [198, 19, 1, 2];
        let mut v4 = Vec::new();
        v4.extend_from_slice(&src);
        v4.extend_from_slice(&dst);
        v4.extend_from_slice(&[0, 6, 0x05, 0xdc]);
        assert_eq!(fold(pseudo_header(&src, &dst, 6, 1500)), reference(&v4));
        let s6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let d6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut v6 = Vec::new();
        v6.extend_from_slice(&s6);
        v6.extend_from_slice(&d6);
        v6.extend_from_slice(&[0, 0, 0xff, 0xff, 0, 0, 0, 6]);
        assert_eq!(fold(pseudo_header(&s6, &d6, 6, 65535)), reference(&v6));
    }

    proptest! {
        #[test]
        fn matches_reference(data in proptest::collection::vec(any::<u8>(), 0..3000), init in any::<u16>()) {
            let fast = fold(partial(&data, init as u64));
            let mut with_init = init.to_ne_bytes().to_vec();
            with_init.extend_from_slice(&data);
            prop_assert_eq!(fast, reference(&with_init));
        }

        #[test]
        fn composes_at_even_splits(data in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..300) {
            let cut = (cut * 2).min(data.len() & !1);
            let split = partial(&data[cut..], partial(&data[..cut], 0));
            prop_assert_eq!(fold(split), fold(partial(&data, 0)));
        }
    }
}
