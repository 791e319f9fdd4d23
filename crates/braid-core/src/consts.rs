//! Every protocol limit in one place (WireGuard paper §6, Linux `messages.h`).

use std::time::Duration;

/// Start a new handshake after this many messages on one session.
pub const REKEY_AFTER_MESSAGES: u64 = 1 << 60;
/// Never use a session for more messages than this (2^64 − 2^13 − 1).
pub const REJECT_AFTER_MESSAGES: u64 = u64::MAX - (1 << 13);
/// The initiator starts a new handshake when its session is this old.
pub const REKEY_AFTER_TIME: Duration = Duration::from_secs(120);
/// A session older than this is never used to send or receive.
pub const REJECT_AFTER_TIME: Duration = Duration::from_secs(180);
/// Give up retrying a handshake after this long.
pub const REKEY_ATTEMPT_TIME: Duration = Duration::from_secs(90);
/// Resend an unanswered handshake initiation after this (plus jitter).
pub const REKEY_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound of the random jitter added to handshake retries.
pub const REKEY_TIMEOUT_JITTER_MAX: Duration = Duration::from_millis(334);
/// Send a keepalive when data arrived and nothing went back for this long.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many initiations are retried before giving up (90 s / 5 s).
pub const MAX_TIMER_HANDSHAKES: u32 =
    (REKEY_ATTEMPT_TIME.as_secs() / REKEY_TIMEOUT.as_secs()) as u32;
/// The responder's cookie secret changes this often; a cookie is valid as long.
pub const COOKIE_SECRET_MAX_AGE: Duration = Duration::from_secs(120);
/// A received cookie is used only while younger than this (allows for latency).
pub const COOKIE_SECRET_LATENCY: Duration = Duration::from_secs(5);
/// At most this many initiations per second are consumed from one peer.
pub const INITIATIONS_PER_SECOND: u32 = 50;
/// Packets queued per peer while its handshake is in flight.
pub const MAX_STAGED_PACKETS: usize = 128;
/// Handshake messages per second above which the device is "under load" and
/// answers initiations without a valid mac2 with a cookie reply.
pub const UNDER_LOAD_HANDSHAKES_PER_SECOND: u32 = 256;
/// Once under load, stay so for this long.
pub const UNDER_LOAD_AFTER: Duration = Duration::from_secs(1);
/// Handshake messages given Diffie-Hellman work per received batch (or
/// per wake-up of the driver that drains the initiation queue), so a flood
/// of well-formed initiations cannot hold up the data packets around them.
/// Admitted initiations beyond it wait in the initiation queue; responses
/// beyond it are dropped.
pub const MAX_HANDSHAKES_PER_BATCH: u32 = 8;
/// Admitted initiations (mac1 valid; under load mac2 too) that wait for
/// their Diffie-Hellman work at most (wireguard-go's QueueHandshakeSize);
/// one more is dropped and counted.
pub const MAX_QUEUED_INITIATIONS: usize = 1024;
/// With this many initiations waiting the device is under load, as with
/// more than `UNDER_LOAD_HANDSHAKES_PER_SECOND` (wireguard-go: an eighth
/// of its queue).
pub const UNDER_LOAD_QUEUED_INITIATIONS: usize = MAX_QUEUED_INITIATIONS / 8;
/// Peers one device holds (as the Linux module's MAX_PEERS_PER_DEVICE).
pub const MAX_PEERS: usize = 1 << 20;
/// Control messages (handshakes, cookies, keepalives) waiting for output.
pub const MAX_QUEUED_CONTROL: usize = 1024;
/// Data payloads are padded to a multiple of this (up to the MTU).
pub const PADDING_MULTIPLE: usize = 16;
/// Default tunnel MTU: 1500-byte line minus 80 bytes of IPv6+UDP+WireGuard.
pub const DEFAULT_MTU: usize = 1420;
