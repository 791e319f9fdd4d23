//! Splitting a packet over several data messages, between braid peers,
//! when a line cannot carry a whole one (IPv6's 1280 bytes through a line
//! that drops UDP payloads over 1300, nested tunnels): the job of
//! OpenVPN's `fragment`, done inside WireGuard's data messages.
//!
//! Each fragment is the plaintext of an ordinary data message, so it is
//! encrypted, authenticated and replay-checked like any packet, and the
//! reorder window sees one counter per fragment (the whole packet takes
//! the place of the fragment that completed it, the others count as
//! empty). Negotiated per session like compression: a hello flag
//! ([`HELLO_OFFERS_FRAGMENTS`](crate::ext::HELLO_OFFERS_FRAGMENTS)) says
//! "I can join fragments"; only a peer that said so gets them.
//!
//! Wire format, inside the encrypted payload (little-endian):
//!
//! ```text
//!  0xB5 | id (u32) | index (u8) | count (u8) | offset (u16) | length (u16) | data | padding
//! ```
//!
//! 0xB5, like compression's 0xB4, can start no IP packet (the version
//! nibble is 4 or 6). Joining is bounded: a peer has at most
//! [`MAX_PARTIAL`] packets in the making, each at most 65535 bytes in
//! [`MAX_FRAGMENTS`] pieces; one not complete within [`PARTIAL_TIMEOUT`]
//! is given up. Buffers are kept for reuse: nothing is allocated per
//! packet once a peer's first ones were joined.

use std::time::{Duration, Instant};

/// First plaintext byte of a fragment.
pub const MARKER: u8 = 0xB5;
/// Marker, id, index, count, offset, length.
pub const HEADER_LEN: usize = 11;
/// Fragments per packet at most.
pub const MAX_FRAGMENTS: usize = 128;
/// The smallest plaintext one fragment's data message may carry: below
/// it a packet of 65535 bytes would need more than [`MAX_FRAGMENTS`].
pub const MIN_PAYLOAD: usize = 576;
/// Packets a peer may have in the making at once.
pub const MAX_PARTIAL: usize = 4;
/// A packet whose fragments do not all arrive within this is given up
/// (its data messages took the reorder window's hold and more).
pub const PARTIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest packet there is.
const MAX_PACKET: usize = 65535;

/// Whether a decrypted payload is a fragment.
pub fn is_fragment(plain: &[u8]) -> bool {
    plain.first() == Some(&MARKER)
}

/// How a packet of `len` bytes is split so each fragment's plaintext is
/// at most `payload` bytes: (fragments, data bytes in each but the last).
/// `None` when it needs no splitting or cannot be split that small.
pub fn plan(len: usize, payload: usize) -> Option<(usize, usize)> {
    if len <= payload || len > MAX_PACKET || payload <= HEADER_LEN {
        return None;
    }
    let room = payload - HEADER_LEN;
    let count = len.div_ceil(room);
    if count > MAX_FRAGMENTS {
        return None;
    }
    // Even pieces (rounded up to 16, WireGuard's padding step, when that
    // still fits): the last one is then not a sliver.
    let even = len.div_ceil(count);
    let chunk = even.next_multiple_of(16).min(room);
    Some((len.div_ceil(chunk), chunk))
}

/// Writes fragment `index` of `count` (data `data`, at `offset` of its
/// packet, packet `id`) into `out`; returns its length. `out` must hold
/// `HEADER_LEN + data.len()` bytes.
pub fn write(
    out: &mut [u8],
    id: u32,
    index: usize,
    count: usize,
    offset: usize,
    data: &[u8],
) -> usize {
    debug_assert!(count <= MAX_FRAGMENTS && index < count && offset + data.len() <= MAX_PACKET);
    out[0] = MARKER;
    out[1..5].copy_from_slice(&id.to_le_bytes());
    out[5] = index as u8;
    out[6] = count as u8;
    out[7..9].copy_from_slice(&(offset as u16).to_le_bytes());
    out[9..11].copy_from_slice(&(data.len() as u16).to_le_bytes());
    out[HEADER_LEN..HEADER_LEN + data.len()].copy_from_slice(data);
    HEADER_LEN + data.len()
}

/// A fragment's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub id: u32,
    pub index: usize,
    pub count: usize,
    pub offset: usize,
    pub len: usize,
}

/// Reads a fragment (plaintext with padding after it); `None` unless its
/// fields are consistent: 2..=MAX_FRAGMENTS pieces, the index among them,
/// some data, all of it there and within a packet's 65535 bytes.
pub fn parse(plain: &[u8]) -> Option<(Header, &[u8])> {
    if plain.len() < HEADER_LEN || plain[0] != MARKER {
        return None;
    }
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([plain[at], plain[at + 1]]));
    let h = Header {
        id: u32::from_le_bytes(plain[1..5].try_into().ok()?),
        index: usize::from(plain[5]),
        count: usize::from(plain[6]),
        offset: u16_at(7),
        len: u16_at(9),
    };
    let ok = (2..=MAX_FRAGMENTS).contains(&h.count)
        && h.index < h.count
        && h.len > 0
        && h.offset + h.len <= MAX_PACKET
        && HEADER_LEN + h.len <= plain.len();
    ok.then(|| (h, &plain[HEADER_LEN..HEADER_LEN + h.len]))
}

/// One packet being joined.
#[derive(Debug)]
struct Partial {
    /// The session (our receiver index) and the sender's id.
    key: (u32, u32),
    count: usize,
    /// Bit i: fragment i arrived.
    have: u128,
    /// The packet's length, once its last fragment arrived.
    total: Option<usize>,
    data: Vec<u8>,
    started: Instant,
}

/// What [`Reassembly::insert`] made of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// The packet is whole: `len` bytes, for [`Reassembly::take_into`].
    Complete(usize),
    /// More fragments are to come.
    Pending,
    /// Not a valid fragment, or not consistent with the others of its
    /// packet: dropped.
    Refused,
}

/// The packets a peer is sending in fragments; see the module docs.
#[derive(Debug, Default)]
pub struct Reassembly {
    partials: Vec<Partial>,
    /// Buffers of packets done, for the next ones.
    spare: Vec<Vec<u8>>,
    /// The packet completed last, until taken.
    done: Option<Vec<u8>>,
    /// Fragments of packets given up (timed out, crowded out by newer
    /// ones, or inconsistent).
    pub dropped: u64,
}

impl Reassembly {
    /// Adds a fragment (`plain`, with padding after it) that arrived in
    /// session `session` at `now`.
    pub fn insert(&mut self, now: Instant, session: u32, plain: &[u8]) -> Joined {
        let Some((h, data)) = parse(plain) else {
            self.dropped = self.dropped.saturating_add(1);
            return Joined::Refused;
        };
        self.expire(now);
        let key = (session, h.id);
        let at = match self.partials.iter().position(|p| p.key == key) {
            Some(at) => at,
            None => {
                if self.partials.len() == MAX_PARTIAL {
                    // The oldest gives way: its fragments are not coming.
                    let oldest = (0..self.partials.len())
                        .min_by_key(|&i| self.partials[i].started)
                        .unwrap_or(0);
                    self.give_up(oldest);
                }
                let mut data = self.spare.pop().unwrap_or_default();
                data.clear();
                self.partials.push(Partial {
                    key,
                    count: h.count,
                    have: 0,
                    total: None,
                    data,
                    started: now,
                });
                self.partials.len() - 1
            }
        };
        let p = &mut self.partials[at];
        let last = h.index + 1 == h.count;
        let end = h.offset + h.len;
        let consistent = p.count == h.count
            && p.total.is_none_or(|t| end <= t && (!last || end == t))
            && (!last || p.data.len() <= end);
        if !consistent {
            self.give_up(at);
            self.dropped = self.dropped.saturating_add(1);
            return Joined::Refused;
        }
        if p.data.len() < end {
            p.data.resize(end, 0);
        }
        p.data[h.offset..end].copy_from_slice(data);
        p.have |= 1 << h.index;
        if last {
            p.total = Some(end);
        }
        let all = if p.count == 128 {
            u128::MAX
        } else {
            (1u128 << p.count) - 1
        };
        match p.total {
            Some(total) if p.have == all => {
                let mut p = self.partials.swap_remove(at);
                p.data.truncate(total);
                if let Some(old) = self.done.replace(p.data) {
                    if self.spare.len() <= MAX_PARTIAL {
                        self.spare.push(old);
                    }
                }
                Joined::Complete(total)
            }
            _ => Joined::Pending,
        }
    }

    /// Copies the packet the last [`insert`](Self::insert) completed into
    /// `out` (which must hold it) and keeps its buffer for reuse.
    pub fn take_into(&mut self, out: &mut [u8]) -> usize {
        let Some(data) = self.done.take() else {
            return 0;
        };
        let n = data.len().min(out.len());
        out[..n].copy_from_slice(&data[..n]);
        if self.spare.len() <= MAX_PARTIAL {
            self.spare.push(data);
        }
        n
    }

    /// Forgets the packet the last [`insert`](Self::insert) completed
    /// (it cannot be delivered); counted as given up.
    pub fn discard_done(&mut self) {
        if let Some(data) = self.done.take() {
            self.dropped = self.dropped.saturating_add(1);
            if self.spare.len() <= MAX_PARTIAL {
                self.spare.push(data);
            }
        }
    }

    /// Packets now in the making.
    pub fn partial_packets(&self) -> usize {
        self.partials.len()
    }

    /// Bytes held for joining (what a peer can make us keep).
    pub fn held_bytes(&self) -> usize {
        let held: usize = self.partials.iter().map(|p| p.data.capacity()).sum();
        let spare: usize = self.spare.iter().map(Vec::capacity).sum();
        held + spare + self.done.as_ref().map_or(0, Vec::capacity)
    }

    fn expire(&mut self, now: Instant) {
        while let Some(at) = self
            .partials
            .iter()
            .position(|p| now.saturating_duration_since(p.started) >= PARTIAL_TIMEOUT)
        {
            self.give_up(at);
        }
    }

    fn give_up(&mut self, at: usize) {
        let p = self.partials.swap_remove(at);
        self.dropped = self.dropped.saturating_add(u64::from(p.have.count_ones()));
        // At most MAX_PARTIAL + 1 buffers are kept.
        if self.spare.len() <= MAX_PARTIAL {
            self.spare.push(p.data);
        }
    }
}

#[cfg(test)]
mod tests;
