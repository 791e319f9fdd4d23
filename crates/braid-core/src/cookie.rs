//! mac1, mac2 and cookie replies: WireGuard's defence against handshake
//! floods (paper §5.4.4, §5.4.7).
//!
//! Every handshake message carries mac1, keyed by the receiver's public key,
//! so only someone who knows that key can make us do Diffie-Hellman work.
//! Under load, the responder also wants mac2, keyed by a cookie that proves
//! the sender owns its source address; a sender without one gets a cookie
//! reply instead of a handshake response.

use crate::consts::{COOKIE_SECRET_LATENCY, COOKIE_SECRET_MAX_AGE};
use crate::crypto::{self, hash, mac, Hash, MAC_LEN};
use crate::messages::{self, cookie_reply as cr};
use rand_core::RngCore;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use zeroize::Zeroize;

const LABEL_MAC1: &[u8] = b"mac1----";
const LABEL_COOKIE: &[u8] = b"cookie--";

/// HASH(LABEL_MAC1 || public key): the key of mac1 for messages to that key.
pub fn mac1_key(public: &[u8; 32]) -> Hash {
    hash(&[LABEL_MAC1, public])
}

/// HASH(LABEL_COOKIE || public key): encrypts cookies from that key's owner.
pub fn cookie_key(public: &[u8; 32]) -> Hash {
    hash(&[LABEL_COOKIE, public])
}

fn address_bytes(addr: SocketAddr, out: &mut [u8; 18]) -> usize {
    match addr {
        SocketAddr::V4(a) => {
            out[..4].copy_from_slice(&a.ip().octets());
            out[4..6].copy_from_slice(&a.port().to_be_bytes());
            6
        }
        SocketAddr::V6(a) => {
            out[..16].copy_from_slice(&a.ip().octets());
            out[16..18].copy_from_slice(&a.port().to_be_bytes());
            18
        }
    }
}

/// The responder's side: checks macs and makes cookies.
pub struct CookieChecker {
    mac1_key: Hash,
    cookie_key: Hash,
    secret: [u8; 32],
    secret_born: Option<Instant>,
}

impl Drop for CookieChecker {
    fn drop(&mut self) {
        self.secret.zeroize();
    }
}

/// What the macs of a handshake message say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacVerdict {
    /// mac1 is wrong: drop silently.
    Invalid,
    /// mac1 is right, mac2 missing or wrong.
    Mac1Only,
    /// Both right: the sender proved its address.
    Mac1AndMac2,
}

impl CookieChecker {
    pub fn new(local_public: &[u8; 32]) -> Self {
        CookieChecker {
            mac1_key: mac1_key(local_public),
            cookie_key: cookie_key(local_public),
            secret: [0; 32],
            secret_born: None,
        }
    }

    /// `by` passed unseen (a suspend): the secret is that much older (one
    /// too old for an `Instant` is renewed at its next use).
    pub fn age_by(&mut self, by: Duration) {
        self.secret_born = self.secret_born.and_then(|b| b.checked_sub(by));
    }

    /// The cookie for `src` under the current secret, which is renewed from
    /// `rng` when it has expired.
    fn cookie(&mut self, now: Instant, src: SocketAddr, rng: &mut impl RngCore) -> [u8; MAC_LEN] {
        let expired = match self.secret_born {
            None => true,
            Some(born) => now.saturating_duration_since(born) >= COOKIE_SECRET_MAX_AGE,
        };
        if expired {
            rng.fill_bytes(&mut self.secret);
            self.secret_born = Some(now);
        }
        let mut a = [0u8; 18];
        let n = address_bytes(src, &mut a);
        mac(&self.secret, &a[..n])
    }

    /// Checks mac1 and (when `check_mac2`) mac2 of a handshake message.
    pub fn verify(
        &mut self,
        now: Instant,
        msg: &[u8],
        src: SocketAddr,
        check_mac2: bool,
    ) -> MacVerdict {
        if !self.verify_mac1(msg) {
            MacVerdict::Invalid
        } else if check_mac2 && self.verify_mac2(now, msg, src) {
            MacVerdict::Mac1AndMac2
        } else {
            MacVerdict::Mac1Only
        }
    }

    /// Whether mac1 of a handshake message is right: the sender knows our
    /// public key.
    pub fn verify_mac1(&self, msg: &[u8]) -> bool {
        // The macs are the last 32 bytes; anything shorter has none (the
        // device passes whole handshake messages, but a short slice must
        // not underflow the offsets).
        if msg.len() < 2 * MAC_LEN {
            return false;
        }
        let m1 = messages::mac1_range(msg.len());
        let m2 = messages::mac2_range(msg.len());
        crypto::ct_eq(&mac(&self.mac1_key, &msg[..m1]), &msg[m1..m2])
    }

    /// Whether mac2 of a handshake message (whose mac1 was checked) carries
    /// the cookie we would give `src` now.
    pub fn verify_mac2(&mut self, now: Instant, msg: &[u8], src: SocketAddr) -> bool {
        if msg.len() < 2 * MAC_LEN {
            return false;
        }
        // An expired secret yields a cookie no sender can have: mac2 fails.
        let live = self
            .secret_born
            .is_some_and(|b| now.saturating_duration_since(b) < COOKIE_SECRET_MAX_AGE);
        if !live {
            return false;
        }
        let m2 = messages::mac2_range(msg.len());
        let mut a = [0u8; 18];
        let n = address_bytes(src, &mut a);
        let cookie = mac(&self.secret, &a[..n]);
        crypto::ct_eq(&mac(&cookie, &msg[..m2]), &msg[m2..])
    }

    /// Writes a cookie reply to handshake message `msg` from `src`, whose
    /// sender index is `receiver_index`.
    pub fn create_reply(
        &mut self,
        now: Instant,
        msg: &[u8],
        src: SocketAddr,
        receiver_index: u32,
        rng: &mut impl RngCore,
        out: &mut [u8; messages::COOKIE_REPLY_LEN],
    ) {
        let cookie = self.cookie(now, src, rng);
        let mut nonce = [0u8; 24];
        rng.fill_bytes(&mut nonce);
        let m1 = messages::mac1_range(msg.len());
        let mac1 = &msg[m1..m1 + MAC_LEN];
        messages::write_header(out, messages::TYPE_COOKIE_REPLY);
        out[cr::RECEIVER..cr::RECEIVER + 4].copy_from_slice(&receiver_index.to_le_bytes());
        out[cr::NONCE..cr::NONCE + 24].copy_from_slice(&nonce);
        let sealed = crypto::xseal_cookie(&self.cookie_key, &nonce, &cookie, mac1);
        out[cr::COOKIE..].copy_from_slice(&sealed);
    }
}

/// The initiator's side, per peer: adds macs and remembers cookies.
pub struct CookieState {
    mac1_key: Hash,
    cookie_key: Hash,
    cookie: Option<([u8; MAC_LEN], Instant)>,
    /// mac1 of the last handshake message we sent: the cookie reply's AAD.
    last_mac1: Option<[u8; MAC_LEN]>,
}

impl Drop for CookieState {
    fn drop(&mut self) {
        if let Some((cookie, _)) = self.cookie.as_mut() {
            cookie.zeroize();
        }
    }
}

impl CookieState {
    pub fn new(peer_public: &[u8; 32]) -> Self {
        CookieState {
            mac1_key: mac1_key(peer_public),
            cookie_key: cookie_key(peer_public),
            cookie: None,
            last_mac1: None,
        }
    }

    /// `by` passed unseen (a suspend): the cookie we hold is that much
    /// older (one too old for an `Instant` is dropped).
    pub fn age_by(&mut self, by: Duration) {
        if let Some((cookie, got)) = self.cookie.as_mut() {
            match got.checked_sub(by) {
                Some(g) => *got = g,
                None => {
                    cookie.zeroize();
                    self.cookie = None;
                }
            }
        }
    }

    /// Fills mac1 and mac2 of an outgoing handshake message.
    pub fn add_macs(&mut self, now: Instant, msg: &mut [u8]) {
        let m1 = messages::mac1_range(msg.len());
        let m2 = messages::mac2_range(msg.len());
        let mac1 = mac(&self.mac1_key, &msg[..m1]);
        msg[m1..m2].copy_from_slice(&mac1);
        self.last_mac1 = Some(mac1);
        // Constants: 120 s - 5 s.
        let fresh = self.cookie.filter(|(_, got)| {
            now.saturating_duration_since(*got) < COOKIE_SECRET_MAX_AGE - COOKIE_SECRET_LATENCY
        });
        match fresh {
            Some((cookie, _)) => {
                let mac2 = mac(&cookie, &msg[..m2]);
                msg[m2..].copy_from_slice(&mac2);
            }
            None => msg[m2..].fill(0),
        }
    }

    /// Takes the cookie from a reply to our last handshake message.
    pub fn consume_reply(
        &mut self,
        now: Instant,
        msg: &[u8; messages::COOKIE_REPLY_LEN],
    ) -> Result<(), crypto::AuthError> {
        let last_mac1 = self.last_mac1.ok_or(crypto::AuthError)?;
        let nonce: [u8; 24] = msg[cr::NONCE..cr::NONCE + 24].try_into().expect("24 bytes");
        let sealed: [u8; 32] = msg[cr::COOKIE..].try_into().expect("32 bytes");
        let cookie = crypto::xopen_cookie(&self.cookie_key, &nonce, &sealed, &last_mac1)?;
        self.cookie = Some((cookie, now));
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cookie_round_trip_enables_mac2() {
        let responder_public = [3u8; 32];
        let mut checker = CookieChecker::new(&responder_public);
        let mut state = CookieState::new(&responder_public);
        let now = Instant::now();
        let src: SocketAddr = "198.18.0.2:4000".parse().unwrap();
        let mut msg = [1u8; messages::INITIATION_LEN];
        state.add_macs(now, &mut msg);
        assert_eq!(checker.verify(now, &msg, src, false), MacVerdict::Mac1Only);
        assert_eq!(checker.verify(now, &msg, src, true), MacVerdict::Mac1Only);
        let mut reply = [0u8; messages::COOKIE_REPLY_LEN];
        checker.create_reply(now, &msg, src, 7, &mut rand_core::OsRng, &mut reply);
        state.consume_reply(now, &reply).unwrap();
        state.add_macs(now, &mut msg);
        assert_eq!(
            checker.verify(now, &msg, src, true),
            MacVerdict::Mac1AndMac2
        );
        // Another source address does not own this cookie.
        let other: SocketAddr = "198.18.0.3:4000".parse().unwrap();
        assert_eq!(checker.verify(now, &msg, other, true), MacVerdict::Mac1Only);
        // After the secret's lifetime the cookie is worthless.
        let later = now + COOKIE_SECRET_MAX_AGE + Duration::from_secs(1);
        assert_eq!(checker.verify(later, &msg, src, true), MacVerdict::Mac1Only);
        // A wrong mac1 is rejected outright.
        msg[0] ^= 1;
        assert_eq!(checker.verify(now, &msg, src, true), MacVerdict::Invalid);
    }

    #[test]
    fn forged_cookie_reply_is_rejected() {
        let mut state = CookieState::new(&[3u8; 32]);
        let reply = [0u8; messages::COOKIE_REPLY_LEN];
        assert!(state.consume_reply(Instant::now(), &reply).is_err());
        let mut msg = [1u8; messages::INITIATION_LEN];
        state.add_macs(Instant::now(), &mut msg);
        assert!(state.consume_reply(Instant::now(), &reply).is_err());
    }

    #[test]
    fn messages_too_short_for_macs_are_invalid_not_a_panic() {
        let mut checker = CookieChecker::new(&[3u8; 32]);
        let src: SocketAddr = "198.18.0.2:4000".parse().unwrap();
        for len in [0, 1, MAC_LEN, 2 * MAC_LEN - 1] {
            let msg = vec![0u8; len];
            for mac2 in [false, true] {
                assert_eq!(
                    checker.verify(Instant::now(), &msg, src, mac2),
                    MacVerdict::Invalid,
                    "{len} bytes"
                );
            }
        }
    }

    #[test]
    fn cookie_and_secret_ages_never_underflow() {
        // A cookie or secret stamped later than now (clock readings out of
        // order): still fresh, no underflow; centuries later: expired.
        let responder_public = [3u8; 32];
        let mut checker = CookieChecker::new(&responder_public);
        let mut state = CookieState::new(&responder_public);
        let now = Instant::now() + Duration::from_secs(1000);
        let src: SocketAddr = "198.18.0.2:4000".parse().unwrap();
        let mut msg = [1u8; messages::INITIATION_LEN];
        state.add_macs(now, &mut msg);
        let mut reply = [0u8; messages::COOKIE_REPLY_LEN];
        checker.create_reply(now, &msg, src, 7, &mut rand_core::OsRng, &mut reply);
        state.consume_reply(now, &reply).unwrap();
        let earlier = now - Duration::from_secs(1000);
        state.add_macs(earlier, &mut msg);
        assert_eq!(
            checker.verify(earlier, &msg, src, true),
            MacVerdict::Mac1AndMac2
        );
        let far = now + Duration::from_secs(1 << 40);
        state.add_macs(far, &mut msg);
        assert_eq!(&msg[messages::mac2_range(msg.len())..], &[0u8; MAC_LEN]);
        assert_eq!(checker.verify(far, &msg, src, true), MacVerdict::Mac1Only);
    }
}
