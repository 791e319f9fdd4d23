//! Parity for what a bonded peer sends on a line that loses packets of its
//! own, so the receiver rebuilds a lost one without asking for it again.
//!
//! A re-send (see `repair`) costs a round trip on the quickest line, behind
//! its queue: every loss of the slower line holds the whole in-order stream
//! that long, and a TCP inside stalls behind it. Here the sender XORs the
//! padded plaintexts of `GROUP` consecutive data messages of such a line
//! into one parity and sends it, as an extension message, on the quickest
//! line, where it usually arrives before the group's last member. The
//! receiver keeps what arrived on a protected line until its group's parity
//! has come; once all but one member are there, the parity and the others
//! give the missing one back (the plaintext of a counter the peer sealed,
//! authenticated by the parity's own tag and the members' tags). A member
//! that was only late is rebuilt early, and its copy is then a replay.
//!
//! Parity messages, like re-sends, are sent only for lines that lose of
//! their own (`repair::OWN_LOSS`): congestion drops must reach the inner
//! TCP. A group of `GROUP` costs the quickest line one message per `GROUP`
//! of the lossy one's (in two pieces when the packets are long: a piece,
//! its fields and the extension header must fit the path MTU that full
//! data messages fill).
//!
//! Payload of a piece (little-endian), after the kind byte:
//! `path` (the sender's path index), `members`, `piece`, `first` (u64, the
//! first member's counter), `members - 1` offsets (u16, each member's
//! counter minus `first`, increasing), `len_xor` (u16, the XOR of the
//! members' plaintext lengths), `parity_len` (u16, the longest), then the
//! piece's bytes: the parity goes in as few pieces of at most `PIECE_MAX`
//! bytes as it fits, all as long as each other but the last (`pieces`,
//! `piece_len`).

use crate::path::MAX_PATHS;
use std::time::{Duration, Instant};

/// Members of a group.
pub const GROUP: usize = 8;
/// The most members a received group may name.
pub const MAX_GROUP: usize = 16;
/// A group still open this long after its first member closes with what
/// it has when the next member comes (sparse traffic).
const MAX_GROUP_AGE: Duration = Duration::from_millis(20);
/// Parity bytes one message carries at most.
pub const PIECE_MAX: usize = 720;
/// The kind byte of a parity piece (see `ext`).
pub const KIND_PARITY: u8 = 10;
/// Fixed fields of a piece: kind, path, members, piece, first.
const HEAD_LEN: usize = 1 + 1 + 1 + 1 + 8;
/// A piece's payload at most: fields, offsets, lengths and bytes.
pub const MAX_PIECE_PAYLOAD: usize = HEAD_LEN + 2 * (MAX_GROUP - 1) + 4 + PIECE_MAX;
/// Received plaintexts kept, by counter.
const RX_COPIES: usize = 2048;
/// Received parities kept until their groups are complete.
const RX_GROUPS: usize = 64;
/// A received parity older than this is forgotten.
const RX_GROUP_LIFETIME: Duration = Duration::from_secs(1);
/// A line the peer sent parity for is protected (its arrivals kept) this
/// long after the latest parity.
const PROTECT_FOR: Duration = Duration::from_secs(2);
/// The most pieces of one parity (`RxGroup::have` has a bit for each).
const MAX_PIECES: usize = 4;
/// The longest plaintext a parity covers (an MTU of 2880; longer packets
/// go unprotected).
const MAX_PLAIN: usize = MAX_PIECES * PIECE_MAX;

/// How many pieces a parity of `parity_len` bytes goes in.
pub fn pieces(parity_len: usize) -> usize {
    parity_len.div_ceil(PIECE_MAX).max(1)
}

/// How many bytes piece `i` of a parity of `parity_len` bytes carries.
pub fn piece_len(parity_len: usize, i: usize) -> usize {
    piece_range(parity_len, i).len()
}

/// The bytes of piece `i` of a parity of `parity_len` bytes.
fn piece_range(parity_len: usize, i: usize) -> std::ops::Range<usize> {
    let size = parity_len.div_ceil(pieces(parity_len));
    let start = (i * size).min(parity_len);
    start..(start + size).min(parity_len)
}

fn xor_into(acc: &mut [u8], bytes: &[u8]) {
    for (a, b) in acc.iter_mut().zip(bytes) {
        *a ^= b;
    }
}

/// One group's parity, as the sender builds it or the receiver collects it.
#[derive(Debug, Default)]
struct Parity {
    session: u32,
    first: u64,
    /// `offsets[..members]`: each member's counter minus `first`.
    offsets: [u16; MAX_GROUP],
    members: usize,
    len_xor: u16,
    len: usize,
    bytes: Vec<u8>,
}

impl Parity {
    fn counters(&self) -> impl Iterator<Item = u64> + '_ {
        self.offsets[..self.members]
            .iter()
            .map(|&o| self.first + u64::from(o))
    }

    fn restart(&mut self, session: u32, first: u64) {
        self.session = session;
        self.first = first;
        self.members = 0;
        self.len_xor = 0;
        // Only the previous group's bytes are not zero.
        let used = self.len.min(self.bytes.len());
        self.bytes[..used].fill(0);
        self.len = 0;
    }

    /// Writes piece `i` of the parity; returns the payload's length.
    fn encode_piece(&self, path: u8, i: usize, out: &mut [u8; MAX_PIECE_PAYLOAD]) -> usize {
        out[0] = KIND_PARITY;
        out[1] = path;
        out[2] = self.members as u8;
        out[3] = i as u8;
        out[4..12].copy_from_slice(&self.first.to_le_bytes());
        let mut at = HEAD_LEN;
        for o in &self.offsets[1..self.members] {
            out[at..at + 2].copy_from_slice(&o.to_le_bytes());
            at += 2;
        }
        out[at..at + 2].copy_from_slice(&self.len_xor.to_le_bytes());
        out[at + 2..at + 4].copy_from_slice(&(self.len as u16).to_le_bytes());
        at += 4;
        let range = piece_range(self.len, i);
        let n = range.len();
        out[at..at + n].copy_from_slice(&self.bytes[range]);
        at + n
    }
}

/// A parity piece as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The sender's path index of the line the group went on.
    pub path: u8,
    pub first: u64,
    offsets: [u16; MAX_GROUP],
    members: usize,
    len_xor: u16,
    parity_len: usize,
    index: usize,
    bytes: &'a [u8],
}

impl<'a> Piece<'a> {
    /// Parses a parity piece's payload (kind byte included); `None` unless
    /// every field is consistent and the length is exact.
    pub fn decode(payload: &'a [u8]) -> Option<Piece<'a>> {
        if payload.len() < HEAD_LEN || payload[0] != KIND_PARITY {
            return None;
        }
        let members = usize::from(payload[2]);
        if !(1..=MAX_GROUP).contains(&members) {
            return None;
        }
        let index = usize::from(payload[3]);
        let first = u64::from_le_bytes(payload[4..12].try_into().ok()?);
        let mut offsets = [0u16; MAX_GROUP];
        let mut at = HEAD_LEN;
        for i in 1..members {
            let o = u16::from_le_bytes(payload.get(at..at + 2)?.try_into().ok()?);
            if o <= offsets[i - 1] {
                return None;
            }
            offsets[i] = o;
            at += 2;
        }
        let len_xor = u16::from_le_bytes(payload.get(at..at + 2)?.try_into().ok()?);
        let parity_len = usize::from(u16::from_le_bytes(
            payload.get(at + 2..at + 4)?.try_into().ok()?,
        ));
        at += 4;
        if parity_len > MAX_PLAIN || index >= pieces(parity_len) {
            return None;
        }
        let bytes = &payload[at..];
        if bytes.len() != piece_range(parity_len, index).len() {
            return None;
        }
        first.checked_add(u64::from(offsets[members - 1]))?;
        Some(Piece {
            path: payload[1],
            first,
            offsets,
            members,
            len_xor,
            parity_len,
            index,
            bytes,
        })
    }
}

/// The sender's open group for each of a peer's paths.
#[derive(Debug, Default)]
pub struct ParityEncoder {
    open: [Option<(Instant, Parity)>; MAX_PATHS],
    scratch: Option<Box<[u8; MAX_PIECE_PAYLOAD]>>,
    /// Parity messages (pieces) written.
    pub sent: u64,
}

impl ParityEncoder {
    /// Adds data message `counter` of `session` (padded plaintext `plain`),
    /// sent on `path`, to that path's group. `emit` gets the payload of
    /// each parity piece of a group this closes.
    pub fn add(
        &mut self,
        now: Instant,
        session: u32,
        path: usize,
        counter: u64,
        plain: &[u8],
        mut emit: impl FnMut(&[u8]),
    ) {
        if path >= MAX_PATHS || plain.len() > MAX_PLAIN {
            return;
        }
        let scratch = self
            .scratch
            .get_or_insert_with(|| Box::new([0; MAX_PIECE_PAYLOAD]));
        let slot = &mut self.open[path];
        // Closed with what it has: too old, of another session, or too far
        // behind for an offset.
        if let Some((started, g)) = slot.as_mut().filter(|(_, g)| g.members > 0) {
            let stale = now.saturating_duration_since(*started) >= MAX_GROUP_AGE
                || g.session != session
                || counter <= g.first
                || counter - g.first > u64::from(u16::MAX);
            if stale {
                if g.session == session && counter > g.first {
                    self.sent += emit_pieces(g, path, scratch, &mut emit);
                }
                g.members = 0;
            }
        }
        let (started, g) = slot.get_or_insert_with(|| {
            (
                now,
                Parity {
                    bytes: vec![0; MAX_PLAIN],
                    ..Parity::default()
                },
            )
        });
        if g.members == 0 {
            g.restart(session, counter);
            *started = now;
        }
        g.offsets[g.members] = (counter - g.first) as u16;
        g.members += 1;
        g.len_xor ^= plain.len() as u16;
        g.len = g.len.max(plain.len());
        xor_into(&mut g.bytes, plain);
        if g.members == GROUP {
            self.sent += emit_pieces(g, path, scratch, &mut emit);
            g.members = 0;
        }
    }
}

fn emit_pieces(
    g: &Parity,
    path: usize,
    scratch: &mut [u8; MAX_PIECE_PAYLOAD],
    emit: &mut impl FnMut(&[u8]),
) -> u64 {
    let n = pieces(g.len);
    for i in 0..n {
        let len = g.encode_piece(path as u8, i, scratch);
        emit(&scratch[..len]);
    }
    n as u64
}

#[derive(Debug, Default)]
struct RxCopy {
    session: u32,
    counter: u64,
    len: usize,
    bytes: Vec<u8>,
}

#[derive(Debug, Default)]
struct RxGroup {
    parity: Parity,
    /// Our path the group's line reaches us on.
    path: usize,
    at: Option<Instant>,
    /// Bit `i`: piece `i` is here.
    have: u8,
    /// Rebuilt, complete or given up.
    done: bool,
}

impl RxGroup {
    fn complete(&self) -> bool {
        self.at.is_some() && self.have.count_ones() as usize == pieces(self.parity.len)
    }
}

/// The receiver's side: copies of what arrived on protected lines and
/// the parities waiting for their groups.
#[derive(Debug, Default)]
pub struct ParityDecoder {
    copies: Vec<RxCopy>,
    groups: Vec<RxGroup>,
    next_group: usize,
    protected: [Option<Instant>; MAX_PATHS],
    rebuilt_bytes: Vec<u8>,
    /// Messages rebuilt from parity.
    pub rebuilt: u64,
    /// Parity pieces received.
    pub pieces: u64,
}

impl ParityDecoder {
    /// Whether what arrives on `path` (our index) is kept for parity.
    pub fn protects(&self, now: Instant, path: usize) -> bool {
        self.protected
            .get(path)
            .copied()
            .flatten()
            .is_some_and(|until| now < until)
    }

    /// Keeps the plaintext of data message `counter` of `session`, which
    /// arrived on a protected line.
    pub fn keep(&mut self, session: u32, counter: u64, plain: &[u8]) {
        if plain.len() > MAX_PLAIN {
            return;
        }
        if self.copies.is_empty() {
            self.copies.resize_with(RX_COPIES, RxCopy::default);
        }
        let c = &mut self.copies[(counter % RX_COPIES as u64) as usize];
        c.session = session;
        c.counter = counter;
        c.len = plain.len();
        if c.bytes.len() < plain.len() {
            c.bytes.resize(plain.len(), 0);
        }
        c.bytes[..plain.len()].copy_from_slice(plain);
    }

    /// Takes a piece of a parity for data messages of `session`; `path`
    /// (our index) is the line its group went on, from now on protected.
    pub fn add_piece(&mut self, now: Instant, session: u32, path: usize, piece: &Piece) {
        self.pieces = self.pieces.saturating_add(1);
        if let Some(p) = self.protected.get_mut(path) {
            *p = Some(now + PROTECT_FOR);
        }
        if self.groups.is_empty() {
            self.groups.resize_with(RX_GROUPS, RxGroup::default);
        }
        let same = |g: &RxGroup| {
            g.at.is_some()
                && g.parity.session == session
                && g.parity.first == piece.first
                && g.parity.members == piece.members
        };
        let i = match self.groups.iter().position(same) {
            Some(i) => i,
            None => {
                let i = self.next_group;
                self.next_group = (i + 1) % RX_GROUPS;
                let g = &mut self.groups[i];
                if g.parity.bytes.len() < MAX_PLAIN {
                    g.parity.bytes.resize(MAX_PLAIN, 0);
                }
                g.parity.restart(session, piece.first);
                g.parity.members = piece.members;
                g.parity.offsets = piece.offsets;
                g.parity.len_xor = piece.len_xor;
                g.parity.len = piece.parity_len;
                g.at = Some(now);
                g.path = path;
                g.have = 0;
                g.done = false;
                i
            }
        };
        let g = &mut self.groups[i];
        // The other pieces of the group must agree on the group's fields.
        if g.parity.offsets != piece.offsets
            || g.parity.len_xor != piece.len_xor
            || g.parity.len != piece.parity_len
        {
            return;
        }
        let range = piece_range(g.parity.len, piece.index);
        g.parity.bytes[range].copy_from_slice(piece.bytes);
        g.have |= 1 << piece.index;
    }

    /// A message of `session` that parity can give back now: its counter,
    /// the path (ours) it was sent on and its plaintext. `received(counter)` says whether the replay window
    /// has taken that counter already. Call again until `None`.
    pub fn rebuild(
        &mut self,
        now: Instant,
        session: u32,
        received: impl Fn(u64) -> bool,
    ) -> Option<(u64, usize, &[u8])> {
        let copies = &self.copies;
        let kept = |c: u64| {
            copies
                .get((c % RX_COPIES as u64) as usize)
                .filter(|x| x.session == session && x.counter == c && x.len > 0)
        };
        let mut found = None;
        for (i, g) in self.groups.iter_mut().enumerate() {
            if g.done || !g.complete() || g.parity.session != session {
                continue;
            }
            if g.at
                .is_some_and(|at| now.saturating_duration_since(at) > RX_GROUP_LIFETIME)
            {
                g.done = true;
                continue;
            }
            let mut missing = None;
            let mut absent = 0;
            for c in g.parity.counters() {
                if kept(c).is_some() {
                    continue;
                }
                if received(c) {
                    // Here, but not kept (it came on another line): the
                    // group cannot give anything back.
                    absent = usize::MAX;
                    break;
                }
                absent += 1;
                missing = Some(c);
            }
            match (absent, missing) {
                (0, _) | (usize::MAX, _) => g.done = true,
                (1, Some(c)) => {
                    g.done = true;
                    found = Some((i, c));
                    break;
                }
                _ => {}
            }
        }
        let (i, counter) = found?;
        let g = &self.groups[i];
        let out = &mut self.rebuilt_bytes;
        out.clear();
        out.extend_from_slice(&g.parity.bytes[..g.parity.len]);
        let mut len = g.parity.len_xor;
        for c in g.parity.counters().filter(|&c| c != counter) {
            let copy = kept(c).expect("checked above");
            if copy.len > out.len() {
                return None;
            }
            xor_into(out, &copy.bytes[..copy.len]);
            len ^= copy.len as u16;
        }
        let len = usize::from(len);
        if len > out.len() {
            return None;
        }
        self.rebuilt = self.rebuilt.saturating_add(1);
        Some((counter, g.path, &self.rebuilt_bytes[..len]))
    }

    /// Bytes held (for memory accounting).
    pub fn allocated_bytes(&self) -> usize {
        self.copies
            .iter()
            .map(|c| c.bytes.capacity())
            .sum::<usize>()
            + self
                .groups
                .iter()
                .map(|g| g.parity.bytes.capacity())
                .sum::<usize>()
            + self.rebuilt_bytes.capacity()
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;

    /// A plaintext of `len` bytes that says which counter it is.
    fn plain(counter: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (counter as usize * 31 + i) as u8)
            .collect()
    }

    /// The pieces the encoder emits for `members` (counter, length) sent
    /// on path 1 of session 7.
    fn encode(now: Instant, members: &[(u64, usize)]) -> Vec<Vec<u8>> {
        let mut enc = ParityEncoder::default();
        let mut out = Vec::new();
        for &(c, len) in members {
            enc.add(now, 7, 1, c, &plain(c, len), |p| out.push(p.to_vec()));
        }
        assert_eq!(enc.sent, out.len() as u64);
        out
    }

    #[test]
    fn one_lost_member_of_a_group_comes_back_exactly() {
        let now = Instant::now();
        // Unequal lengths, sparse counters, long enough for two pieces.
        let members: Vec<(u64, usize)> = (0..GROUP as u64)
            .map(|i| (100 + 7 * i, 1420 - 16 * (i as usize % 3)))
            .collect();
        let pieces_out = encode(now, &members);
        assert_eq!(pieces_out.len(), 2, "1420 bytes go in two pieces");
        for lost in 0..GROUP {
            let mut dec = ParityDecoder::default();
            for (i, &(c, len)) in members.iter().enumerate() {
                if i != lost {
                    dec.keep(7, c, &plain(c, len));
                }
            }
            let (c_lost, len_lost) = members[lost];
            // The first piece alone gives nothing back.
            let first = Piece::decode(&pieces_out[0]).unwrap();
            dec.add_piece(now, 7, 1, &first);
            assert!(dec.rebuild(now, 7, |_| false).is_none());
            dec.add_piece(now, 7, 1, &Piece::decode(&pieces_out[1]).unwrap());
            let received = |c: u64| c != c_lost;
            let (c, path, bytes) = dec.rebuild(now, 7, received).expect("rebuilt");
            assert_eq!((c, path), (c_lost, 1));
            assert_eq!(bytes, &plain(c_lost, len_lost)[..], "member {lost}");
            assert!(dec.rebuild(now, 7, received).is_none(), "once");
            assert!(dec.protects(now, 1) && !dec.protects(now, 0));
        }
    }

    #[test]
    fn long_packets_go_in_more_pieces_and_longer_ones_unprotected() {
        let now = Instant::now();
        let members: Vec<(u64, usize)> = (0..GROUP as u64).map(|i| (i, 2000)).collect();
        let out = encode(now, &members);
        assert_eq!(out.len(), 3);
        let mut dec = ParityDecoder::default();
        for &(c, len) in &members[1..] {
            dec.keep(7, c, &plain(c, len));
        }
        for p in &out {
            assert!(
                dec.rebuild(now, 7, |_| false).is_none(),
                "before every piece"
            );
            dec.add_piece(now, 7, 1, &Piece::decode(p).unwrap());
        }
        let (c, _, bytes) = dec.rebuild(now, 7, |c| c != 0).unwrap();
        assert_eq!((c, bytes), (0, &plain(0, 2000)[..]));
        let too_long: Vec<(u64, usize)> = (0..GROUP as u64).map(|i| (i, MAX_PLAIN + 1)).collect();
        assert!(encode(now, &too_long).is_empty());
    }

    #[test]
    fn two_lost_members_or_an_unkept_one_give_nothing_back() {
        let now = Instant::now();
        let members: Vec<(u64, usize)> = (0..GROUP as u64).map(|i| (i, 200)).collect();
        let pieces_out = encode(now, &members);
        assert_eq!(pieces_out.len(), 1);
        let piece = Piece::decode(&pieces_out[0]).unwrap();
        let mut dec = ParityDecoder::default();
        for &(c, len) in &members[2..] {
            dec.keep(7, c, &plain(c, len));
        }
        dec.add_piece(now, 7, 1, &piece);
        assert!(dec.rebuild(now, 7, |_| false).is_none(), "two missing");
        // One of them arrives (kept): the other comes back.
        dec.keep(7, 1, &plain(1, 200));
        let (c, _, bytes) = dec.rebuild(now, 7, |c| c != 0).unwrap();
        assert_eq!((c, bytes), (0, &plain(0, 200)[..]));
        // Another session's parity or copies do not mix.
        let mut dec = ParityDecoder::default();
        for &(c, len) in &members[1..] {
            dec.keep(8, c, &plain(c, len));
        }
        dec.add_piece(now, 7, 1, &piece);
        assert!(dec.rebuild(now, 7, |_| false).is_none());
        // A member received but not kept (it came on another line).
        let mut dec = ParityDecoder::default();
        for &(c, len) in &members[2..] {
            dec.keep(7, c, &plain(c, len));
        }
        dec.add_piece(now, 7, 1, &piece);
        assert!(dec.rebuild(now, 7, |c| c == 1).is_none());
    }

    #[test]
    fn groups_close_on_age_session_and_distance() {
        let now = Instant::now();
        let mut enc = ParityEncoder::default();
        let mut out = Vec::new();
        let mut add = |enc: &mut ParityEncoder, at: Instant, session: u32, c: u64| {
            enc.add(at, session, 0, c, &plain(c, 64), |p| out.push(p.to_vec()));
        };
        add(&mut enc, now, 1, 1);
        add(&mut enc, now, 1, 2);
        // Too old: the two go out as a group of two before the third.
        add(&mut enc, now + MAX_GROUP_AGE, 1, 3);
        // Another session: the open group is dropped, not sent.
        add(&mut enc, now + MAX_GROUP_AGE, 2, 4);
        // Too far for an offset: sent with what it has.
        add(&mut enc, now + MAX_GROUP_AGE, 2, 4 + 70_000);
        let groups: Vec<_> = out.iter().map(|p| Piece::decode(p).unwrap()).collect();
        assert_eq!(groups.len(), 2);
        assert_eq!((groups[0].first, groups[0].members), (1, 2));
        assert_eq!((groups[1].first, groups[1].members), (4, 1));
    }

    #[test]
    fn pieces_decode_exactly_or_not_at_all() {
        let now = Instant::now();
        let members: Vec<(u64, usize)> = (0..GROUP as u64).map(|i| (3 * i, 1000)).collect();
        let p = encode(now, &members).remove(0);
        assert!(Piece::decode(&p).is_some());
        assert!(Piece::decode(&p[..p.len() - 1]).is_none(), "short");
        let mut long = p.clone();
        long.push(0);
        assert!(Piece::decode(&long).is_none(), "long");
        for bad in [
            |p: &mut Vec<u8>| p[0] = 9,                   // another kind
            |p: &mut Vec<u8>| p[2] = 0,                   // no members
            |p: &mut Vec<u8>| p[2] = MAX_GROUP as u8 + 1, // too many
            |p: &mut Vec<u8>| p[3] = 2,                   // no such piece
            |p: &mut Vec<u8>| p[HEAD_LEN] = 0,            // offsets not increasing
            |p: &mut Vec<u8>| p[4..12].fill(0xff),        // counters overflow
        ] {
            let mut q = p.clone();
            bad(&mut q);
            assert!(Piece::decode(&q).is_none(), "{q:?}");
        }
        for n in 0..HEAD_LEN + 20 {
            let _ = Piece::decode(&p[..n]);
        }
    }
}
