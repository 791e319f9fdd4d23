//! braid's extension messages, exchanged only between braid peers inside a
//! WireGuard session: same header as a data message (type `TYPE_BRAID`,
//! receiver index, counter), sealed with the session's keys but under a
//! nonce space of their own (a 4-byte prefix where data nonces have zeros),
//! so they neither collide with nor leave gaps in the data counters that
//! the reorder window follows.
//!
//! Payloads (little-endian), first byte the kind:
//! - `Hello { path, flags }`: "I speak braid"; sent on every path after a
//!   handshake, it also tells the responder which paths exist, and in
//!   `flags` what the sender offers (`HELLO_OFFERS_AES`, `HELLO_OFFERS_LZ4`).
//! - `Probe { path, seq, sent_us, rx_probes }` and `Echo { … }`: RTT, loss
//!   in both directions, liveness; `path` is the prober's path index,
//!   `sent_us` its clock, echoed unchanged. An echo may add a `Delivery`
//!   about the path the probe came on: the echoer's clock when it arrived
//!   and the data bytes and packets it has received there, from which the
//!   prober measures the line's capacity, queue and loss (`path::estimate`).
//!   An echo without one (18 bytes) is what braid sent before it measured.
//! - `PmtuProbe { path, seq, size }`: path MTU discovery (see `pmtud`); the
//!   payload is zero-padded to `size` bytes so the datagram is exactly as
//!   big as a data message carrying a `size`-byte packet. `PmtuAck` answers
//!   it, small, with the same fields.
//! - `Repair { from, count }`: the sender's data messages with counters
//!   `from..from + count` (of the session the request is sealed in) did
//!   not arrive; re-send them if you still have them (see `repair`).
//! - `NoRepair { from, count }`: the answer for those of them the sender
//!   will not re-send (no longer kept, or lost by a line that loses only
//!   when full: congestion, left to the inner TCP), so the receiver's
//!   window gives their gaps up at once instead of waiting a round trip.
//! - `Sent { next, repairs, behind }`: which data counters (of the session it is
//!   sealed in) went on which of the sender's paths, so the receiver's
//!   reorder window gives up a gap no idle or sparse line can fill without
//!   waiting the hold: `next` is the counter the sender's next data
//!   message gets, and for each of its paths `i` (the index its probes
//!   carry), counters `next - behind[i]..next` did not go on path `i`
//!   (`behind[i] = 0`: the latest one did; `u32::MAX`: nothing in the last
//!   2^32 did). Bit `i` of `repairs`: the sender re-sends what its path
//!   `i` loses, when asked (see `repair`); a gap no such path carried is
//!   not worth asking for.
//! - `Filler { path }`: padding sent back to back between two probes on a
//!   line that carries little (a probe train, see `path::estimate`): the
//!   receiver counts its bytes as delivered on that path, so the echo of
//!   the second probe says how fast the line drained the train. Zero-padded
//!   to any length from 2 bytes.
//! - Parity pieces (kind `fec::KIND_PARITY`): the XOR of a group of data
//!   messages sent on a line that loses packets, from which the receiver
//!   rebuilds one it lost; their format is in `fec`.

pub const MAX_PAYLOAD: usize = 48;
/// The nonce prefix that separates extension messages from data messages.
pub const NONCE_PREFIX: [u8; 4] = *b"brd1";
pub const VERSION: u8 = 1;

/// Hello flag: the sender can open AES-256-GCM data on this session.
pub const HELLO_OFFERS_AES: u8 = 1;
/// Hello flag: the sender can open LZ4-compressed packets on this session
/// (`Compression = lz4`, see `compress`).
pub const HELLO_OFFERS_LZ4: u8 = 2;
/// Hello flag: the sender joins packets split into fragments (see
/// `fragment`); braid offers it whenever its extensions are on.
pub const HELLO_OFFERS_FRAGMENTS: u8 = 4;
/// Hello flag: the sender rebuilds lost data messages from parity (see
/// `fec`), so parity may be sent to it.
pub const HELLO_OFFERS_PARITY: u8 = 8;

const KIND_HELLO: u8 = 1;
const KIND_PROBE: u8 = 2;
const KIND_ECHO: u8 = 3;
const KIND_PMTU_PROBE: u8 = 4;
const KIND_PMTU_ACK: u8 = 5;
const KIND_REPAIR: u8 = 6;
const REPAIR_LEN: usize = 1 + 8 + 2;
const KIND_SENT: u8 = 7;
const KIND_FILLER: u8 = 8;
const KIND_NO_REPAIR: u8 = 9;
/// A filler's fields: kind, path.
pub const FILLER_HEAD_LEN: usize = 2;
/// A `Sent` message's fixed part: kind, path count, `repairs`, `next`.
const SENT_HEAD_LEN: usize = 1 + 1 + 1 + 8;

pub use crate::path::Delivery;
use crate::path::MAX_PATHS;

/// The largest padded payload: a PMTU probe of the largest size searched
/// (its datagram then is the largest UDP payload there is).
pub const MAX_PADDED_PAYLOAD: usize = crate::pmtud::MAX_PLPMTU;
/// A PMTU probe's or ack's fields: kind, path, seq, size.
pub const PMTU_LEN: usize = 1 + 1 + 4 + 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtMessage {
    Hello { version: u8, path: u8, flags: u8 },
    Probe(ProbeBody),
    Echo(ProbeBody, Option<Delivery>),
    PmtuProbe(PmtuBody),
    PmtuAck(PmtuBody),
    Repair { from: u64, count: u16 },
    NoRepair { from: u64, count: u16 },
    Sent(SentBody),
    Filler { path: u8 },
}

/// See `Sent` in the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentBody {
    pub next: u64,
    /// How many of `behind` are paths of the sender (at most `MAX_PATHS`).
    pub paths: u8,
    /// Bit `i`: what path `i` loses is re-sent when asked.
    pub repairs: u8,
    pub behind: [u32; MAX_PATHS],
}

impl SentBody {
    /// Counters `from..to` that did not go on the sender's path `i` (empty
    /// for a path it does not have).
    pub fn unassigned(&self, i: usize) -> (u64, u64) {
        if i >= usize::from(self.paths).min(MAX_PATHS) {
            return (self.next, self.next);
        }
        (
            self.next.saturating_sub(u64::from(self.behind[i])),
            self.next,
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmtuBody {
    /// The prober's path index.
    pub path: u8,
    pub seq: u32,
    /// The inner size probed; a probe's payload is this long.
    pub size: u16,
}

impl PmtuBody {
    /// Writes a probe's payload (fields, then zeros up to `size`) into
    /// `out`; returns its length, or `None` when `out` is too short.
    pub fn encode_probe(&self, out: &mut [u8]) -> Option<usize> {
        let len = (self.size as usize).max(PMTU_LEN);
        let out = out.get_mut(..len)?;
        self.write(KIND_PMTU_PROBE, out);
        out[PMTU_LEN..].fill(0);
        Some(len)
    }

    fn write(&self, kind: u8, out: &mut [u8]) {
        out[0] = kind;
        out[1] = self.path;
        out[2..6].copy_from_slice(&self.seq.to_le_bytes());
        out[6..8].copy_from_slice(&self.size.to_le_bytes());
    }

    fn read(payload: &[u8]) -> Option<PmtuBody> {
        Some(PmtuBody {
            path: payload[1],
            seq: u32::from_le_bytes(payload[2..6].try_into().ok()?),
            size: u16::from_le_bytes(payload[6..8].try_into().ok()?),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeBody {
    pub path: u8,
    pub seq: u32,
    pub sent_us: u64,
    /// How many probes the sender of this message has received on this
    /// path from the other side.
    pub rx_probes: u32,
}

const PROBE_LEN: usize = 1 + 1 + 4 + 8 + 4;
/// An echo with a `Delivery`: received_us, data_bytes, data_packets.
const ECHO_DELIVERY_LEN: usize = PROBE_LEN + 3 * 8;

impl ExtMessage {
    /// Writes the payload into `out`; returns its length.
    pub fn encode(&self, out: &mut [u8; MAX_PAYLOAD]) -> usize {
        match *self {
            ExtMessage::Hello {
                version,
                path,
                flags,
            } => {
                out[..4].copy_from_slice(&[KIND_HELLO, version, path, flags]);
                4
            }
            ExtMessage::Probe(b) | ExtMessage::Echo(b, _) => {
                out[0] = if matches!(self, ExtMessage::Probe(_)) {
                    KIND_PROBE
                } else {
                    KIND_ECHO
                };
                out[1] = b.path;
                out[2..6].copy_from_slice(&b.seq.to_le_bytes());
                out[6..14].copy_from_slice(&b.sent_us.to_le_bytes());
                out[14..18].copy_from_slice(&b.rx_probes.to_le_bytes());
                let ExtMessage::Echo(_, Some(d)) = self else {
                    return PROBE_LEN;
                };
                out[18..26].copy_from_slice(&d.received_us.to_le_bytes());
                out[26..34].copy_from_slice(&d.data_bytes.to_le_bytes());
                out[34..42].copy_from_slice(&d.data_packets.to_le_bytes());
                ECHO_DELIVERY_LEN
            }
            ExtMessage::PmtuProbe(b) | ExtMessage::PmtuAck(b) => {
                let kind = if matches!(self, ExtMessage::PmtuProbe(_)) {
                    KIND_PMTU_PROBE
                } else {
                    KIND_PMTU_ACK
                };
                // A probe encoded here is unpadded; see `encode_probe`.
                b.write(kind, &mut out[..PMTU_LEN]);
                PMTU_LEN
            }
            ExtMessage::Repair { from, count } | ExtMessage::NoRepair { from, count } => {
                out[0] = if matches!(self, ExtMessage::Repair { .. }) {
                    KIND_REPAIR
                } else {
                    KIND_NO_REPAIR
                };
                out[1..9].copy_from_slice(&from.to_le_bytes());
                out[9..11].copy_from_slice(&count.to_le_bytes());
                REPAIR_LEN
            }
            ExtMessage::Filler { path } => {
                out[..FILLER_HEAD_LEN].copy_from_slice(&[KIND_FILLER, path]);
                FILLER_HEAD_LEN
            }
            ExtMessage::Sent(b) => {
                let n = usize::from(b.paths).min(MAX_PATHS);
                out[0] = KIND_SENT;
                out[1] = n as u8;
                out[2] = b.repairs;
                out[3..11].copy_from_slice(&b.next.to_le_bytes());
                for (i, behind) in b.behind[..n].iter().enumerate() {
                    let at = SENT_HEAD_LEN + 4 * i;
                    out[at..at + 4].copy_from_slice(&behind.to_le_bytes());
                }
                SENT_HEAD_LEN + 4 * n
            }
        }
    }

    /// Parses a payload; `None` unless kind and length match exactly.
    pub fn decode(payload: &[u8]) -> Option<ExtMessage> {
        match (payload.first()?, payload.len()) {
            (&KIND_HELLO, 4) => Some(ExtMessage::Hello {
                version: payload[1],
                path: payload[2],
                flags: payload[3],
            }),
            (&kind @ (KIND_PROBE | KIND_ECHO), n)
                if n == PROBE_LEN || (kind == KIND_ECHO && n == ECHO_DELIVERY_LEN) =>
            {
                let u64_at =
                    |at: usize| payload[at..at + 8].try_into().ok().map(u64::from_le_bytes);
                let body = ProbeBody {
                    path: payload[1],
                    seq: u32::from_le_bytes(payload[2..6].try_into().ok()?),
                    sent_us: u64_at(6)?,
                    rx_probes: u32::from_le_bytes(payload[14..18].try_into().ok()?),
                };
                if kind == KIND_PROBE {
                    return Some(ExtMessage::Probe(body));
                }
                let delivery = if n == ECHO_DELIVERY_LEN {
                    Some(Delivery {
                        received_us: u64_at(18)?,
                        data_bytes: u64_at(26)?,
                        data_packets: u64_at(34)?,
                    })
                } else {
                    None
                };
                Some(ExtMessage::Echo(body, delivery))
            }
            // A probe's padding must be what it claims, so a probe cut
            // short on the way is no answer for its size.
            (&KIND_PMTU_PROBE, n) if n >= PMTU_LEN => {
                let b = PmtuBody::read(payload)?;
                (n == (b.size as usize).max(PMTU_LEN)).then_some(ExtMessage::PmtuProbe(b))
            }
            (&KIND_PMTU_ACK, PMTU_LEN) => Some(ExtMessage::PmtuAck(PmtuBody::read(payload)?)),
            (&kind @ (KIND_REPAIR | KIND_NO_REPAIR), REPAIR_LEN) => {
                let from = u64::from_le_bytes(payload[1..9].try_into().ok()?);
                let count = u16::from_le_bytes(payload[9..11].try_into().ok()?);
                Some(if kind == KIND_REPAIR {
                    ExtMessage::Repair { from, count }
                } else {
                    ExtMessage::NoRepair { from, count }
                })
            }
            (&KIND_FILLER, n) if n >= FILLER_HEAD_LEN => {
                Some(ExtMessage::Filler { path: payload[1] })
            }
            (&KIND_SENT, n) if n >= SENT_HEAD_LEN => {
                let paths = payload[1];
                if usize::from(paths) > MAX_PATHS || n != SENT_HEAD_LEN + 4 * usize::from(paths) {
                    return None;
                }
                let mut behind = [0u32; MAX_PATHS];
                for (i, b) in behind[..usize::from(paths)].iter_mut().enumerate() {
                    let at = SENT_HEAD_LEN + 4 * i;
                    *b = u32::from_le_bytes(payload[at..at + 4].try_into().ok()?);
                }
                Some(ExtMessage::Sent(SentBody {
                    next: u64::from_le_bytes(payload[3..11].try_into().ok()?),
                    paths,
                    repairs: payload[2],
                    behind,
                }))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strict_lengths() {
        let msgs = [
            ExtMessage::Hello {
                version: 1,
                path: 3,
                flags: HELLO_OFFERS_AES,
            },
            ExtMessage::Probe(ProbeBody {
                path: 1,
                seq: 7,
                sent_us: 123_456_789,
                rx_probes: 5,
            }),
            ExtMessage::Echo(
                ProbeBody {
                    path: 0,
                    seq: u32::MAX,
                    sent_us: u64::MAX,
                    rx_probes: 0,
                },
                None,
            ),
            ExtMessage::Echo(
                ProbeBody {
                    path: 7,
                    seq: 3,
                    sent_us: 1,
                    rx_probes: 2,
                },
                Some(Delivery {
                    received_us: u64::MAX,
                    data_bytes: 1 << 40,
                    data_packets: 12_345,
                }),
            ),
            ExtMessage::Repair {
                from: u64::MAX,
                count: u16::MAX,
            },
            ExtMessage::NoRepair { from: 3, count: 1 },
            ExtMessage::Sent(SentBody {
                next: u64::MAX,
                paths: MAX_PATHS as u8,
                repairs: 0xff,
                behind: [0, 1, 2, 3, 4, 5, u32::MAX - 1, u32::MAX],
            }),
            ExtMessage::Sent(SentBody {
                next: 7,
                paths: 2,
                repairs: 2,
                behind: [3, u32::MAX, 0, 0, 0, 0, 0, 0],
            }),
        ];
        for m in msgs {
            let mut buf = [0u8; MAX_PAYLOAD];
            let n = m.encode(&mut buf);
            assert_eq!(ExtMessage::decode(&buf[..n]), Some(m));
            assert_eq!(ExtMessage::decode(&buf[..n - 1]), None);
            assert_eq!(ExtMessage::decode(&buf[..n + 1]), None);
        }
        assert_eq!(ExtMessage::decode(&[]), None);
        let ack = ExtMessage::PmtuAck(PmtuBody {
            path: 2,
            seq: 9,
            size: 1440,
        });
        let mut buf = [0u8; MAX_PAYLOAD];
        let n = ack.encode(&mut buf);
        assert_eq!(ExtMessage::decode(&buf[..n]), Some(ack));
        assert_eq!(ExtMessage::decode(&buf[..n + 1]), None);
        assert_eq!(ExtMessage::decode(&[9, 0, 0]), None);
        // More paths than a peer has, or a count that does not match.
        let mut sent = [0u8; SENT_HEAD_LEN + 4 * (MAX_PATHS + 1)];
        sent[0] = KIND_SENT;
        sent[1] = MAX_PATHS as u8 + 1;
        assert_eq!(ExtMessage::decode(&sent), None);
        sent[1] = 1;
        assert_eq!(ExtMessage::decode(&sent[..SENT_HEAD_LEN + 8]), None);
    }

    #[test]
    fn a_filler_is_any_length_from_its_fields() {
        let mut buf = [0u8; MAX_PAYLOAD];
        let m = ExtMessage::Filler { path: 3 };
        let n = m.encode(&mut buf);
        assert_eq!(n, FILLER_HEAD_LEN);
        for len in [n, n + 1, MAX_PAYLOAD] {
            assert_eq!(ExtMessage::decode(&buf[..len]), Some(m));
        }
        assert_eq!(ExtMessage::decode(&buf[..1]), None);
    }

    #[test]
    fn sent_says_which_counters_missed_each_path() {
        let b = SentBody {
            next: 100,
            paths: 3,
            repairs: 0,
            behind: [0, 10, u32::MAX, 0, 0, 0, 0, 0],
        };
        assert_eq!(b.unassigned(0), (100, 100));
        assert_eq!(b.unassigned(1), (90, 100));
        // Further back than the counter goes: everything below `next`.
        assert_eq!(b.unassigned(2), (0, 100));
        // A path the sender does not have: nothing said.
        assert_eq!(b.unassigned(3), (100, 100));
        assert_eq!(b.unassigned(usize::MAX), (100, 100));
    }

    #[test]
    fn pmtu_probe_is_padded_to_its_size() {
        let body = PmtuBody {
            path: 1,
            seq: 42,
            size: 1400,
        };
        let mut buf = vec![0xffu8; MAX_PADDED_PAYLOAD];
        let n = body.encode_probe(&mut buf).unwrap();
        assert_eq!(n, 1400);
        assert!(buf[PMTU_LEN..n].iter().all(|&b| b == 0));
        assert_eq!(
            ExtMessage::decode(&buf[..n]),
            Some(ExtMessage::PmtuProbe(body))
        );
        // Cut short or grown, it is no probe of that size.
        assert_eq!(ExtMessage::decode(&buf[..n - 1]), None);
        assert_eq!(ExtMessage::decode(&buf[..n + 1]), None);
        assert_eq!(body.encode_probe(&mut buf[..1399]), None);
    }

    #[test]
    fn extreme_field_values_decode_exactly_or_not_at_all() {
        // Every field at its limits round-trips; nothing here does
        // arithmetic on them beyond `max` with the header length.
        for v in [0u32, 1, u32::MAX - 1, u32::MAX] {
            for m in [
                ExtMessage::Probe(ProbeBody {
                    path: u8::MAX,
                    seq: v,
                    sent_us: u64::from(v) << 32 | u64::from(v),
                    rx_probes: !v,
                }),
                ExtMessage::PmtuAck(PmtuBody {
                    path: u8::MAX,
                    seq: v,
                    size: u16::MAX,
                }),
            ] {
                let mut buf = [0u8; MAX_PAYLOAD];
                let n = m.encode(&mut buf);
                assert_eq!(ExtMessage::decode(&buf[..n]), Some(m));
            }
        }
        // A PMTU probe claiming a size below its own fields is as long as
        // its fields; one claiming 65 535 bytes must be that long.
        for (size, len, ok) in [
            (0u16, PMTU_LEN, true),
            (1, PMTU_LEN, true),
            (PMTU_LEN as u16, PMTU_LEN, true),
            (0, PMTU_LEN + 1, false),
            (u16::MAX, usize::from(u16::MAX), true),
            (u16::MAX, usize::from(u16::MAX) - 1, false),
            (u16::MAX, MAX_PADDED_PAYLOAD, false),
        ] {
            let body = PmtuBody {
                path: 0,
                seq: u32::MAX,
                size,
            };
            let mut buf = vec![0u8; len];
            body.write(KIND_PMTU_PROBE, &mut buf);
            let want = ok.then_some(ExtMessage::PmtuProbe(body));
            assert_eq!(ExtMessage::decode(&buf), want, "size {size}, {len} bytes");
        }
        // Nobody pads a probe past the largest payload there is room for.
        let body = PmtuBody {
            path: 0,
            seq: 0,
            size: u16::MAX,
        };
        assert_eq!(body.encode_probe(&mut vec![0u8; MAX_PADDED_PAYLOAD]), None);
    }
}
