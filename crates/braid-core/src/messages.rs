//! WireGuard's four message formats as fixed byte layouts.
//!
//! A datagram is accepted only when its (type, length) pair matches exactly
//! (data messages: at least the header and a tag). All integers are
//! little-endian. Parsing never panics on any input.

use crate::crypto::{MAC_LEN, TAG_LEN};

pub const TYPE_INITIATION: u8 = 1;
pub const TYPE_RESPONSE: u8 = 2;
pub const TYPE_COOKIE_REPLY: u8 = 3;
pub const TYPE_DATA: u8 = 4;
/// braid's extension messages (probes, hello) between braid peers. Stock
/// WireGuard drops unknown types unread, so it never sees them.
pub const TYPE_BRAID: u8 = 0x62;
/// A data message sealed with AES-256-GCM, sent only to a braid peer that
/// offered it (see `cipher`); otherwise laid out exactly like `TYPE_DATA`.
pub const TYPE_DATA_AES: u8 = 0x63;

pub const INITIATION_LEN: usize = 148;
pub const RESPONSE_LEN: usize = 92;
pub const COOKIE_REPLY_LEN: usize = 64;
/// type(1) reserved(3) receiver(4) counter(8)
pub const DATA_HEADER_LEN: usize = 16;
pub const DATA_MIN_LEN: usize = DATA_HEADER_LEN + TAG_LEN;

/// Offsets inside an initiation.
pub mod initiation {
    pub const SENDER: usize = 4;
    pub const EPHEMERAL: usize = 8;
    pub const STATIC: usize = 40;
    pub const STATIC_LEN: usize = 32 + super::TAG_LEN;
    pub const TIMESTAMP: usize = 88;
    pub const TIMESTAMP_LEN: usize = 12 + super::TAG_LEN;
    pub const MAC1: usize = 116;
    pub const MAC2: usize = 132;
}

/// Offsets inside a response.
pub mod response {
    pub const SENDER: usize = 4;
    pub const RECEIVER: usize = 8;
    pub const EPHEMERAL: usize = 12;
    pub const EMPTY: usize = 44;
    pub const MAC1: usize = 60;
    pub const MAC2: usize = 76;
}

/// Offsets inside a cookie reply.
pub mod cookie_reply {
    pub const RECEIVER: usize = 4;
    pub const NONCE: usize = 8;
    pub const COOKIE: usize = 32;
}

/// Offsets inside a data message.
pub mod data {
    pub const RECEIVER: usize = 4;
    pub const COUNTER: usize = 8;
}

/// What a datagram claims to be, after the (type, length) check only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Initiation,
    Response,
    CookieReply,
    Data,
    Braid,
}

/// Classifies a datagram; `None` for anything WireGuard would drop unread
/// (unknown type, or nonzero reserved bytes, which Linux WireGuard rejects too).
pub fn classify(datagram: &[u8]) -> Option<Kind> {
    let ty = *datagram.first()?;
    if datagram.len() < 4 || datagram[1..4] != [0, 0, 0] {
        return None;
    }
    match (ty, datagram.len()) {
        (TYPE_INITIATION, INITIATION_LEN) => Some(Kind::Initiation),
        (TYPE_RESPONSE, RESPONSE_LEN) => Some(Kind::Response),
        (TYPE_COOKIE_REPLY, COOKIE_REPLY_LEN) => Some(Kind::CookieReply),
        (TYPE_DATA | TYPE_DATA_AES, n) if n >= DATA_MIN_LEN => Some(Kind::Data),
        (TYPE_BRAID, n)
            if n > DATA_MIN_LEN && n <= DATA_MIN_LEN + crate::ext::MAX_PADDED_PAYLOAD =>
        {
            Some(Kind::Braid)
        }
        _ => None,
    }
}

pub fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub fn read_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub fn write_header(b: &mut [u8], ty: u8) {
    b[0] = ty;
    b[1..4].fill(0);
}

/// Byte range covered by mac1 and mac2 of a handshake message of `len` bytes.
/// `len` is a whole handshake message, so at least the two macs: callers
/// pass the fixed-size messages they built, or one whose length
/// `CookieChecker::verify` checked first.
pub fn mac1_range(len: usize) -> usize {
    len - 2 * MAC_LEN
}

pub fn mac2_range(len: usize) -> usize {
    len - MAC_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_case_table() {
        let cases: &[(&[u8], Option<Kind>)] = &[
            (&[], None),
            (&[1], None),
            (&[1, 0, 0, 0], None),
            (&[4; 32], None),
        ];
        for (i, (b, want)) in cases.iter().enumerate() {
            assert_eq!(classify(b), *want, "case {i}");
        }
        let mut m = [0u8; INITIATION_LEN];
        m[0] = 1;
        assert_eq!(classify(&m), Some(Kind::Initiation));
        assert_eq!(classify(&m[..147]), None);
        let mut r = [0u8; RESPONSE_LEN];
        r[0] = 2;
        assert_eq!(classify(&r), Some(Kind::Response));
        let mut c = [0u8; COOKIE_REPLY_LEN];
        c[0] = 3;
        assert_eq!(classify(&c), Some(Kind::CookieReply));
        let mut d = [0u8; DATA_MIN_LEN];
        d[0] = 4;
        assert_eq!(classify(&d), Some(Kind::Data));
        assert_eq!(classify(&d[..DATA_MIN_LEN - 1]), None);
        d[2] = 1;
        assert_eq!(classify(&d), None);
        let mut x = [0u8; 64];
        x[0] = 5;
        assert_eq!(classify(&x), None);
    }
}
