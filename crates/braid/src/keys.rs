//! WireGuard key types and their two textual encodings: base64 (what `wg`
//! and config files use) and lowercase hex (what the UAPI socket uses).
//!
//! Secret keys zeroize on drop, print `(hidden)` under `Debug`, have no
//! `Display`, and their parse errors never echo the input.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use zeroize::{Zeroize, Zeroizing};

pub const KEY_LEN: usize = 32;
/// Length of a base64-encoded key, as printed by `wg genkey`.
pub const KEY_LEN_BASE64: usize = 44;
pub const KEY_LEN_HEX: usize = 64;

/// Why a key failed to parse. Deliberately carries no copy of the input,
/// so it is safe to log even when the input was a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyParseError {
    Base64,
    Hex,
    /// A public key of small order (the all-zero key is one), refused for
    /// a peer: see [`PublicKey::usable_for_peer`].
    LowOrder,
}

impl fmt::Display for KeyParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyParseError::Base64 => f.write_str("not a valid base64-encoded 32-byte key"),
            KeyParseError::Hex => f.write_str("not a valid 64-character hex-encoded key"),
            KeyParseError::LowOrder => f.write_str(
                "a low-order point (such as the all-zero key): every handshake with it \
                 could be forged by anyone who knows this interface's public key",
            ),
        }
    }
}

impl std::error::Error for KeyParseError {}

fn decode_base64(s: &str) -> Result<[u8; KEY_LEN], KeyParseError> {
    // `wg` insists on exactly 44 characters ending in a single '='; the
    // base64 engine additionally rejects non-zero trailing bits, as wg does.
    let b = s.as_bytes();
    if b.len() != KEY_LEN_BASE64 || b[KEY_LEN_BASE64 - 1] != b'=' || b[KEY_LEN_BASE64 - 2] == b'=' {
        return Err(KeyParseError::Base64);
    }
    let mut buf = Zeroizing::new([0u8; KEY_LEN + 1]);
    match STANDARD.decode_slice(b, &mut buf[..]) {
        Ok(KEY_LEN) => {
            let mut out = [0u8; KEY_LEN];
            out.copy_from_slice(&buf[..KEY_LEN]);
            Ok(out)
        }
        _ => Err(KeyParseError::Base64),
    }
}

fn encode_base64(k: &[u8; KEY_LEN]) -> Zeroizing<String> {
    let mut buf = [0u8; KEY_LEN_BASE64];
    let n = STANDARD
        .encode_slice(k, &mut buf)
        .expect("44 bytes always fit a 32-byte key");
    debug_assert_eq!(n, KEY_LEN_BASE64);
    let s = String::from_utf8(buf[..n].to_vec()).expect("base64 is ASCII");
    buf.zeroize();
    Zeroizing::new(s)
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn decode_hex(s: &str) -> Result<[u8; KEY_LEN], KeyParseError> {
    let b = s.as_bytes();
    if b.len() != KEY_LEN_HEX {
        return Err(KeyParseError::Hex);
    }
    let mut out = [0u8; KEY_LEN];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        match (hex_val(pair[0]), hex_val(pair[1])) {
            (Some(h), Some(l)) => out[i] = (h << 4) | l,
            _ => {
                out.zeroize();
                return Err(KeyParseError::Hex);
            }
        }
    }
    Ok(out)
}

fn encode_hex(k: &[u8; KEY_LEN]) -> Zeroizing<String> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(KEY_LEN_HEX);
    for &byte in k {
        s.push(DIGITS[(byte >> 4) as usize] as char);
        s.push(DIGITS[(byte & 0xf) as usize] as char);
    }
    Zeroizing::new(s)
}

/// Comparison whose time does not depend on where the keys differ.
fn ct_eq(a: &[u8; KEY_LEN], b: &[u8; KEY_LEN]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn random_bytes() -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    // A system without a working RNG cannot safely run a VPN at all.
    getrandom::getrandom(&mut k).expect("operating system random number generator failed");
    k
}

/// An X25519 static private key.
#[derive(Clone)]
pub struct PrivateKey([u8; KEY_LEN]);

impl PrivateKey {
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        PrivateKey(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Like `wg genkey`: random bytes, clamped as RFC 7748 prescribes so the
    /// stored key is exactly the scalar used.
    pub fn generate() -> Self {
        let mut k = random_bytes();
        k[0] &= 248;
        k[31] = (k[31] & 127) | 64;
        PrivateKey(k)
    }

    pub fn public_key(&self) -> PublicKey {
        let secret = x25519_dalek::StaticSecret::from(self.0);
        PublicKey(*x25519_dalek::PublicKey::from(&secret).as_bytes())
    }

    pub fn is_zero(&self) -> bool {
        ct_eq(&self.0, &[0; KEY_LEN])
    }

    pub fn from_base64(s: &str) -> Result<Self, KeyParseError> {
        decode_base64(s).map(PrivateKey)
    }

    pub fn to_base64(&self) -> Zeroizing<String> {
        encode_base64(&self.0)
    }

    pub fn from_hex(s: &str) -> Result<Self, KeyParseError> {
        decode_hex(s).map(PrivateKey)
    }

    pub fn to_hex(&self) -> Zeroizing<String> {
        encode_hex(&self.0)
    }
}

impl Drop for PrivateKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(hidden)")
    }
}

impl PartialEq for PrivateKey {
    fn eq(&self, other: &Self) -> bool {
        ct_eq(&self.0, &other.0)
    }
}
impl Eq for PrivateKey {}

impl FromStr for PrivateKey {
    type Err = KeyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_base64(s)
    }
}

/// A symmetric preshared key mixed into the handshake (`wg genpsk`).
#[derive(Clone)]
pub struct PresharedKey([u8; KEY_LEN]);

impl PresharedKey {
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        PresharedKey(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    pub fn generate() -> Self {
        PresharedKey(random_bytes())
    }

    /// The UAPI uses an all-zero key to mean "no preshared key".
    pub fn is_zero(&self) -> bool {
        ct_eq(&self.0, &[0; KEY_LEN])
    }

    pub fn from_base64(s: &str) -> Result<Self, KeyParseError> {
        decode_base64(s).map(PresharedKey)
    }

    pub fn to_base64(&self) -> Zeroizing<String> {
        encode_base64(&self.0)
    }

    pub fn from_hex(s: &str) -> Result<Self, KeyParseError> {
        decode_hex(s).map(PresharedKey)
    }

    pub fn to_hex(&self) -> Zeroizing<String> {
        encode_hex(&self.0)
    }
}

impl Drop for PresharedKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for PresharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PresharedKey(hidden)")
    }
}

impl PartialEq for PresharedKey {
    fn eq(&self, other: &Self) -> bool {
        ct_eq(&self.0, &other.0)
    }
}
impl Eq for PresharedKey {}

impl FromStr for PresharedKey {
    type Err = KeyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_base64(s)
    }
}

/// An X25519 public key; not secret, so it displays (as base64, like `wg`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        PublicKey(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    pub fn from_base64(s: &str) -> Result<Self, KeyParseError> {
        decode_base64(s).map(PublicKey)
    }

    pub fn to_base64(&self) -> String {
        encode_base64(&self.0).to_string()
    }

    pub fn from_hex(s: &str) -> Result<Self, KeyParseError> {
        decode_hex(s).map(PublicKey)
    }

    pub fn to_hex(&self) -> String {
        encode_hex(&self.0).to_string()
    }

    /// This key, if it can be a peer's: a low-order point makes every
    /// Diffie-Hellman result zero, which anyone can compute, so the core
    /// could never authenticate that peer. Linux WireGuard refuses to add
    /// such a peer as well.
    pub fn usable_for_peer(self) -> Result<Self, KeyParseError> {
        if braid_core::noise::is_low_order(&self.0) {
            Err(KeyParseError::LowOrder)
        } else {
            Ok(self)
        }
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&encode_base64(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl FromStr for PublicKey {
    type Err = KeyParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_base64(s)
    }
}

impl serde::Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> serde::Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        PublicKey::from_base64(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7748 §6.1, Alice.
    const ALICE_PRIV_HEX: &str = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a";
    const ALICE_PUB_HEX: &str = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a";

    #[test]
    fn rfc7748_alice() {
        let sk = PrivateKey::from_hex(ALICE_PRIV_HEX).unwrap();
        assert_eq!(sk.public_key().to_hex(), ALICE_PUB_HEX);
        assert_eq!(*sk.to_hex(), ALICE_PRIV_HEX);

        let b64 = sk.to_base64();
        assert_eq!(b64.len(), 44);
        assert!(b64.ends_with('=') && !b64.ends_with("=="));
        assert_eq!(PrivateKey::from_base64(&b64).unwrap(), sk);

        let pk = sk.public_key();
        assert_eq!(
            pk.to_base64(),
            "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo="
        );
        assert_eq!(pk.to_string().parse::<PublicKey>().unwrap(), pk);
        assert_eq!(PublicKey::from_hex(ALICE_PUB_HEX).unwrap(), pk);
    }

    #[test]
    fn generated_keys_are_clamped_and_round_trip() {
        for _ in 0..32 {
            let sk = PrivateKey::generate();
            let b = sk.as_bytes();
            assert_eq!(b[0] & 7, 0);
            assert_eq!(b[31] & 128, 0);
            assert_eq!(b[31] & 64, 64);
            assert_eq!(PrivateKey::from_base64(&sk.to_base64()).unwrap(), sk);
            let psk = PresharedKey::generate();
            assert_eq!(PresharedKey::from_hex(&psk.to_hex()).unwrap(), psk);
        }
    }

    #[test]
    fn rejects_malformed_encodings() {
        let good = PrivateKey::from_hex(ALICE_PRIV_HEX).unwrap().to_base64();
        let bad = [
            "",
            &good[..43],                  // missing padding
            &format!("{}A", &good[..43]), // no '='
            &format!("{}=", &*good),      // too long
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
            "!AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            // Non-canonical: the last symbol carries non-zero unused bits.
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=",
        ];
        for s in bad {
            assert_eq!(
                PublicKey::from_base64(s),
                Err(KeyParseError::Base64),
                "{s:?}"
            );
        }
        assert!(PublicKey::from_base64("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").is_ok());
        for s in ["", "00", &"g".repeat(64), &"0".repeat(63), &"0".repeat(65)] {
            assert_eq!(PublicKey::from_hex(s), Err(KeyParseError::Hex), "{s:?}");
        }
        assert!(PresharedKey::from_hex(&"AB".repeat(32)).is_ok());
    }

    #[test]
    fn secrets_do_not_leak_through_debug_or_errors() {
        let sk = PrivateKey::from_hex(ALICE_PRIV_HEX).unwrap();
        let dbg = format!("{sk:?}");
        assert!(dbg.contains("hidden") && !dbg.contains("7707"));
        let psk = PresharedKey::from_bytes([7; 32]);
        assert!(format!("{psk:?}").contains("hidden"));
        let secret_ish = "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2Vj";
        let err = PrivateKey::from_base64(secret_ish).unwrap_err();
        assert!(!err.to_string().contains("c2Vj"));
    }

    #[test]
    fn public_key_serde() {
        let pk = PrivateKey::from_hex(ALICE_PRIV_HEX).unwrap().public_key();
        let json = serde_json::to_string(&pk).unwrap();
        assert_eq!(json, "\"hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=\"");
        assert_eq!(serde_json::from_str::<PublicKey>(&json).unwrap(), pk);
    }
}
