//! The Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s handshake of WireGuard (paper
//! §5.4), as pure functions over fixed-size messages. Keys, ephemerals and
//! the timestamp are passed in, so known-answer tests can pin every byte.
//! mac1/mac2 are not filled here (see `cookie`).

use crate::crypto::{self, hash, kdf1, kdf2, kdf3, AuthError, Hash, Key};
use crate::messages::{self, initiation as ini, response as rsp};
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroize;

pub const CONSTRUCTION: &[u8] = b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
pub const IDENTIFIER: &[u8] = b"WireGuard v1 zx2c4 Jason@zx2c4.com";

/// TAI64N timestamp: 8 bytes big-endian TAI seconds, 4 bytes nanoseconds.
pub type Timestamp = [u8; 12];

/// The initial chaining key and hash, identical for every handshake.
fn initial_chain() -> (Hash, Hash) {
    let ck = hash(&[CONSTRUCTION]);
    let h = hash(&[&ck, IDENTIFIER]);
    (ck, h)
}

/// X25519, refusing a low-order `public`: its result is all zeros whatever
/// our scalar, so anyone can compute it and it authenticates nobody. Linux
/// WireGuard (`curve25519` returning false) and wireguard-go (`isZero` on the
/// shared secret) refuse it the same way; `was_contributory` compares in
/// constant time.
fn dh(private: &StaticSecret, public: &[u8; 32]) -> Result<[u8; 32], AuthError> {
    let shared = private.diffie_hellman(&PublicKey::from(*public));
    if shared.was_contributory() {
        Ok(shared.to_bytes())
    } else {
        Err(AuthError)
    }
}

/// The u-coordinates of every point of small order, canonical (below p =
/// 2^255 − 19), little-endian: 0 (order 2), 1 and p − 1 (order 4, one on
/// the curve, one on its twist) and the two of order 8. The curve's group
/// is Z/8 × Z/ℓ and its twist's Z/4 × Z/ℓ′, so there are no others; the
/// test `small_order_list_matches_the_dh_definition` checks each against
/// the DH definition below.
const SMALL_ORDER_U: [[u8; 32]; 5] = [
    [0; 32],
    [
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ],
    [
        0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
];

/// `public` as X25519 reads it (bit 255 ignored), reduced below p.
fn canonical_u(public: &[u8; 32]) -> [u8; 32] {
    let mut u = *public;
    u[31] &= 0x7f;
    // At or above p = 2^255 − 19 only when bytes 1..=31 are all ones (the
    // top one 0x7f) and byte 0 is 0xed or more; u − p is then byte 0 − 0xed.
    let high_all_ones = u[1..31].iter().all(|&b| b == 0xff) && u[31] == 0x7f;
    if high_all_ones && u[0] >= 0xed {
        let low = u[0] - 0xed;
        u = [0; 32];
        u[0] = low;
    }
    u
}

/// Whether `public` is a point of small order (the all-zero key is one):
/// every DH with it gives zero, so no handshake with it can authenticate
/// anyone. Configuration and the userspace API refuse such keys. A
/// comparison with the five such points, not a DH: `wg setconf` of
/// 100,000 peers checks 100,000 keys.
pub fn is_low_order(public: &[u8; 32]) -> bool {
    SMALL_ORDER_U.contains(&canonical_u(public))
}

/// [`is_low_order`] by its definition: any clamped scalar is a multiple
/// of the cofactor 8, which kills the small-order part of a point, so the
/// DH result is zero exactly when the point has no other part, whatever
/// the scalar. What the fast check is tested against.
pub fn is_low_order_by_dh(public: &[u8; 32]) -> bool {
    dh(&StaticSecret::from([0x42; 32]), public).is_err()
}

/// Our static identity.
pub struct LocalStatic {
    pub private: StaticSecret,
    pub public: [u8; 32],
}

impl LocalStatic {
    pub fn new(private_bytes: [u8; 32]) -> Self {
        let private = StaticSecret::from(private_bytes);
        let public = PublicKey::from(&private).to_bytes();
        LocalStatic { private, public }
    }
}

/// What we know about a peer for handshaking.
pub struct RemoteStatic {
    pub public: [u8; 32],
    pub preshared: [u8; 32],
    /// DH(our static, their static), computed once per key change; `None`
    /// for a low-order key (then every handshake with this peer fails).
    pub static_static: Option<[u8; 32]>,
}

impl RemoteStatic {
    pub fn new(local: &LocalStatic, public: [u8; 32], preshared: [u8; 32]) -> Self {
        RemoteStatic {
            public,
            preshared,
            static_static: dh(&local.private, &public).ok(),
        }
    }

    /// Without DH(our static, theirs) yet (`static_static` is `None`
    /// until [`derive_static_static`](Self::derive_static_static)): a
    /// peer costs no DH before its first handshake, so configuring
    /// 100,000 peers does not cost 100,000 of them.
    pub fn deferred(public: [u8; 32], preshared: [u8; 32]) -> Self {
        RemoteStatic {
            public,
            preshared,
            static_static: None,
        }
    }

    /// Computes DH(our static, theirs) (`None` for a low-order key).
    pub fn derive_static_static(&mut self, local: &LocalStatic) {
        self.static_static = dh(&local.private, &self.public).ok();
    }
}

impl Drop for RemoteStatic {
    fn drop(&mut self) {
        self.preshared.zeroize();
        if let Some(ss) = self.static_static.as_mut() {
            ss.zeroize();
        }
    }
}

/// The transport keys a completed handshake yields.
pub struct SessionKeys {
    pub send: Key,
    pub recv: Key,
}

impl Drop for SessionKeys {
    fn drop(&mut self) {
        self.send.zeroize();
        self.recv.zeroize();
    }
}

/// Initiator state kept between sending an initiation and its response.
pub struct InitiatorHandshake {
    chaining_key: Hash,
    hash: Hash,
    ephemeral: StaticSecret,
    pub local_index: u32,
}

impl Drop for InitiatorHandshake {
    fn drop(&mut self) {
        self.chaining_key.zeroize();
    }
}

/// Writes an initiation (without macs) into `out` and returns the state to
/// finish the handshake with; `Err` (nothing written) when the peer's key
/// is of low order.
pub fn create_initiation(
    local: &LocalStatic,
    remote: &RemoteStatic,
    ephemeral: StaticSecret,
    timestamp: &Timestamp,
    local_index: u32,
    out: &mut [u8; messages::INITIATION_LEN],
) -> Result<InitiatorHandshake, AuthError> {
    let static_static = remote.static_static.ok_or(AuthError)?;
    let (ck, h) = initial_chain();
    let h = hash(&[&h, &remote.public]);
    let e_pub = PublicKey::from(&ephemeral).to_bytes();
    let ck = kdf1(&ck, &e_pub);
    let h = hash(&[&h, &e_pub]);
    let (ck, k) = kdf2(&ck, &dh(&ephemeral, &remote.public)?);

    messages::write_header(out, messages::TYPE_INITIATION);
    out[ini::SENDER..ini::SENDER + 4].copy_from_slice(&local_index.to_le_bytes());
    out[ini::EPHEMERAL..ini::EPHEMERAL + 32].copy_from_slice(&e_pub);
    crypto::seal(
        &k,
        0,
        &local.public,
        &h,
        &mut out[ini::STATIC..ini::STATIC + ini::STATIC_LEN],
    );
    let h = hash(&[&h, &out[ini::STATIC..ini::STATIC + ini::STATIC_LEN]]);
    let (ck, k) = kdf2(&ck, &static_static);
    crypto::seal(
        &k,
        0,
        timestamp,
        &h,
        &mut out[ini::TIMESTAMP..ini::TIMESTAMP + ini::TIMESTAMP_LEN],
    );
    let h = hash(&[
        &h,
        &out[ini::TIMESTAMP..ini::TIMESTAMP + ini::TIMESTAMP_LEN],
    ]);
    out[ini::MAC1..].fill(0);
    Ok(InitiatorHandshake {
        chaining_key: ck,
        hash: h,
        ephemeral,
        local_index,
    })
}

/// A decrypted initiation: who sent it and the state to answer it with.
pub struct ReceivedInitiation {
    pub peer_public: [u8; 32],
    pub timestamp: Timestamp,
    pub remote_index: u32,
    remote_ephemeral: [u8; 32],
    chaining_key: Hash,
    hash: Hash,
}

impl Drop for ReceivedInitiation {
    fn drop(&mut self) {
        self.chaining_key.zeroize();
    }
}

/// Decrypts an initiation addressed to `local`. The caller then checks that
/// `peer_public` is a known peer and that the timestamp is newer than the
/// last one from that peer.
pub fn consume_initiation(
    local: &LocalStatic,
    msg: &[u8; messages::INITIATION_LEN],
) -> Result<ReceivedInitiation, AuthError> {
    let (ck, h) = initial_chain();
    let h = hash(&[&h, &local.public]);
    let mut e_pub = [0u8; 32];
    e_pub.copy_from_slice(&msg[ini::EPHEMERAL..ini::EPHEMERAL + 32]);
    let ck = kdf1(&ck, &e_pub);
    let h = hash(&[&h, &e_pub]);
    let (ck, k) = kdf2(&ck, &dh(&local.private, &e_pub)?);
    let sealed_static = &msg[ini::STATIC..ini::STATIC + ini::STATIC_LEN];
    let mut peer_public = [0u8; 32];
    crypto::open(&k, 0, sealed_static, &h, &mut peer_public)?;
    let h = hash(&[&h, sealed_static]);
    let (ck, k) = kdf2(&ck, &dh(&local.private, &peer_public)?);
    let sealed_ts = &msg[ini::TIMESTAMP..ini::TIMESTAMP + ini::TIMESTAMP_LEN];
    let mut timestamp = [0u8; 12];
    crypto::open(&k, 0, sealed_ts, &h, &mut timestamp)?;
    let h = hash(&[&h, sealed_ts]);
    Ok(ReceivedInitiation {
        peer_public,
        timestamp,
        remote_index: messages::read_u32(msg, ini::SENDER),
        remote_ephemeral: e_pub,
        chaining_key: ck,
        hash: h,
    })
}

/// Writes the response (without macs) to a received initiation and returns
/// the responder's transport keys; `Err` (nothing written) for a low-order
/// key, which [`consume_initiation`] has already refused for any initiation
/// it let through. [`response_dh`] then [`finish_response`], in one call.
pub fn create_response(
    received: &ReceivedInitiation,
    remote: &RemoteStatic,
    ephemeral: StaticSecret,
    local_index: u32,
    out: &mut [u8; messages::RESPONSE_LEN],
) -> Result<SessionKeys, AuthError> {
    debug_assert_eq!(remote.public, received.peer_public);
    let dh = response_dh(received, &ephemeral)?;
    finish_response(received, dh, &remote.preshared, local_index, out)
}

/// The responder's Diffie-Hellman work on a received initiation (the
/// ephemeral's public key, DH with the initiator's ephemeral and static
/// keys): everything before the preshared key, so a responder can do it
/// without knowing the peer yet, away from its device lock.
pub struct ResponseDh {
    chaining_key: Hash,
    hash: Hash,
    ephemeral_public: [u8; 32],
}

impl Drop for ResponseDh {
    fn drop(&mut self) {
        self.chaining_key.zeroize();
    }
}

/// The first half of [`create_response`]: three scalar multiplications.
pub fn response_dh(
    received: &ReceivedInitiation,
    ephemeral: &StaticSecret,
) -> Result<ResponseDh, AuthError> {
    let e_pub = PublicKey::from(ephemeral).to_bytes();
    let ck = kdf1(&received.chaining_key, &e_pub);
    let h = hash(&[&received.hash, &e_pub]);
    let ck = kdf1(&ck, &dh(ephemeral, &received.remote_ephemeral)?);
    let ck = kdf1(&ck, &dh(ephemeral, &received.peer_public)?);
    Ok(ResponseDh {
        chaining_key: ck,
        hash: h,
        ephemeral_public: e_pub,
    })
}

/// The second half of [`create_response`]: the preshared key, the
/// response message and the keys (hashes only, no DH).
pub fn finish_response(
    received: &ReceivedInitiation,
    dh: ResponseDh,
    preshared: &[u8; 32],
    local_index: u32,
    out: &mut [u8; messages::RESPONSE_LEN],
) -> Result<SessionKeys, AuthError> {
    let (ck, tau, k) = kdf3(&dh.chaining_key, preshared);
    let h = hash(&[&dh.hash, &tau]);

    messages::write_header(out, messages::TYPE_RESPONSE);
    out[rsp::SENDER..rsp::SENDER + 4].copy_from_slice(&local_index.to_le_bytes());
    out[rsp::RECEIVER..rsp::RECEIVER + 4].copy_from_slice(&received.remote_index.to_le_bytes());
    out[rsp::EPHEMERAL..rsp::EPHEMERAL + 32].copy_from_slice(&dh.ephemeral_public);
    crypto::seal(
        &k,
        0,
        &[],
        &h,
        &mut out[rsp::EMPTY..rsp::EMPTY + crypto::TAG_LEN],
    );
    out[rsp::MAC1..].fill(0);
    let (recv, send) = kdf2(&ck, &[]);
    Ok(SessionKeys { send, recv })
}

/// Checks a response against our pending initiation and returns the
/// initiator's transport keys.
pub fn consume_response(
    state: &InitiatorHandshake,
    local: &LocalStatic,
    remote: &RemoteStatic,
    msg: &[u8; messages::RESPONSE_LEN],
) -> Result<SessionKeys, AuthError> {
    let mut e_pub = [0u8; 32];
    e_pub.copy_from_slice(&msg[rsp::EPHEMERAL..rsp::EPHEMERAL + 32]);
    let ck = kdf1(&state.chaining_key, &e_pub);
    let h = hash(&[&state.hash, &e_pub]);
    let ck = kdf1(&ck, &dh(&state.ephemeral, &e_pub)?);
    let ck = kdf1(&ck, &dh(&local.private, &e_pub)?);
    let (ck, tau, k) = kdf3(&ck, &remote.preshared);
    let h = hash(&[&h, &tau]);
    let mut empty = [0u8; 0];
    crypto::open(
        &k,
        0,
        &msg[rsp::EMPTY..rsp::EMPTY + crypto::TAG_LEN],
        &h,
        &mut empty,
    )?;
    let (send, recv) = kdf2(&ck, &[]);
    Ok(SessionKeys { send, recv })
}

/// The step of a TAI64N's nanoseconds: [`tai64n`] rounds down to it.
const WHITENER: u32 = 1 << 24;

/// The earliest timestamp [`tai64n`] makes that is later than `t` (one
/// whitened step on); `t` itself when none is (the end of TAI64).
pub fn tai64n_after(t: &Timestamp) -> Timestamp {
    let secs = u64::from_be_bytes(t[..8].try_into().expect("8 bytes"));
    let nanos = u32::from_be_bytes(t[8..].try_into().expect("4 bytes"));
    // Below 10^9 in any timestamp made here; a larger one counts as a
    // full second.
    let next = (nanos / WHITENER * WHITENER).saturating_add(WHITENER);
    let (secs, nanos) = if next < 1_000_000_000 {
        (secs, next)
    } else {
        match secs.checked_add(1) {
            Some(s) => (s, 0),
            None => return *t,
        }
    };
    let mut out = [0u8; 12];
    out[..8].copy_from_slice(&secs.to_be_bytes());
    out[8..].copy_from_slice(&nanos.to_be_bytes());
    out
}

/// TAI64N of a time given as seconds and nanoseconds since the Unix epoch.
/// Nanoseconds are rounded down to ~16.8 ms, as WireGuard does, so the
/// timestamp does not leak a precise clock.
pub fn tai64n(unix_secs: u64, nanos: u32) -> Timestamp {
    const TAI64_BASE: u64 = (1 << 62) + 10;
    let mut t = [0u8; 12];
    // Saturates: a clock 2^62 s past 1970 sends the largest timestamp (which
    // the peer then keeps as its replay floor) rather than a wrapped small one.
    t[..8].copy_from_slice(&TAI64_BASE.saturating_add(unix_secs).to_be_bytes());
    t[8..].copy_from_slice(&(nanos / WHITENER * WHITENER).to_be_bytes());
    t
}
