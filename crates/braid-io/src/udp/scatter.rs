//! Coalesced receives straight into the batch's slots.
//!
//! A GRO message holds up to 64 datagrams of one size (the last may be
//! shorter). Received whole into a scratch buffer, each datagram then had
//! to be copied into a slot of its own. Here each message gets iovecs that
//! point at slots, one datagram's length apiece, followed by its scratch
//! buffer: the kernel's one copy puts every datagram where the core
//! decrypts it. The datagram length is not known before the call, so it is
//! taken from the last coalesced message (a bulk flow keeps it), and each
//! message gets as many slots as the largest message of the last call
//! had datagrams.
//!
//! Whatever does not match the plan takes the old way: a message whose
//! datagrams have another length, or a single datagram longer than its
//! slot, is gathered into its scratch buffer and split by copying, and so
//! is every message after it (their slots are needed by the copies). Only
//! the last message of a call may run past its slots into its scratch
//! buffer: that rest waits for the next call, as a coalesced receive's
//! leftovers always did, and the batch is full.
//!
//! A message that came shorter than its slots leaves the rest of them
//! empty (`len == 0`), which the core skips.

/// Where one message of a coalesced receive may land: `slots` slots from
/// `first` on, `piece` bytes in each, then its scratch buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Allot {
    pub first: usize,
    pub slots: usize,
    pub piece: usize,
}

/// Plans `n` messages into slots `start..cap`: `per` slots each, with
/// pieces of `segment` bytes (the expected datagram length); when `per` is
/// above one the last message takes the slots that remain. A message with
/// one slot gets the whole `stride`: any single datagram that fits a slot
/// lands there. Without a known `segment`, every message gets one slot.
///
/// Needs `start < cap` and `n <= cap - start` (each message gets a slot).
pub(super) fn plan(
    start: usize,
    cap: usize,
    n: usize,
    per: usize,
    segment: Option<usize>,
    stride: usize,
    out: &mut Vec<Allot>,
) {
    out.clear();
    debug_assert!(start < cap && n >= 1 && n <= cap - start);
    let segment = segment.filter(|&s| s > 0 && s <= stride);
    let mut first = start;
    for k in 0..n {
        let left = cap - first;
        let slots = match segment {
            None => 1,
            Some(_) if k + 1 == n && per > 1 => left,
            Some(_) => per.clamp(1, left - (n - 1 - k)),
        };
        let piece = match segment {
            Some(s) if slots > 1 => s,
            _ => stride,
        };
        out.push(Allot {
            first,
            slots,
            piece,
        });
        first += slots;
    }
}

/// How a received message lies in its [`Allot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// Its first `datagrams` datagrams fill its slots from the first on;
    /// `rest` bytes (whole datagrams) ran on into its scratch buffer.
    Direct { datagrams: usize, rest: usize },
    /// Not as planned: gather it and split it by copying.
    Gather,
}

/// Where a message of `len` bytes whose datagrams are `segment` bytes long
/// (None or `>= len`: one datagram) landed, given its allotment.
pub(super) fn layout(len: usize, segment: Option<usize>, truncated: bool, a: Allot) -> Layout {
    if truncated {
        return Layout::Gather;
    }
    let segment = segment.filter(|&s| s > 0 && s < len);
    match segment {
        // One datagram (or an empty one): whole in the first slot.
        None if len <= a.piece => Layout::Direct {
            datagrams: 1,
            rest: 0,
        },
        None => Layout::Gather,
        Some(s) if s == a.piece && a.slots > 1 => {
            let in_slots = len.min(a.slots * s);
            Layout::Direct {
                datagrams: in_slots.div_ceil(s),
                rest: len - in_slots,
            }
        }
        Some(_) => Layout::Gather,
    }
}

/// Makes a message contiguous at the start of `scratch`: its first
/// `a.slots * a.piece` bytes (or fewer) were received into the slots
/// `piece(j)` returns, the rest into the start of `scratch`.
///
/// Needs `len <= scratch.len()`.
pub(super) fn gather<'a>(
    len: usize,
    a: Allot,
    scratch: &mut [u8],
    mut piece: impl FnMut(usize) -> &'a [u8],
) {
    let in_slots = len.min(a.slots * a.piece);
    let tail = len - in_slots;
    scratch.copy_within(..tail, in_slots);
    for j in 0..a.slots {
        let from = j * a.piece;
        if from >= in_slots {
            break;
        }
        let n = a.piece.min(in_slots - from);
        scratch[from..from + n].copy_from_slice(&piece(a.first + j)[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allots(
        start: usize,
        cap: usize,
        n: usize,
        per: usize,
        seg: Option<usize>,
    ) -> Vec<(usize, usize, usize)> {
        let mut v = Vec::new();
        plan(start, cap, n, per, seg, 2048, &mut v);
        v.iter().map(|a| (a.first, a.slots, a.piece)).collect()
    }

    #[test]
    fn plans_cover_the_free_slots_in_order() {
        // Bulk: 44 datagrams a message, the last message takes the rest.
        assert_eq!(
            allots(0, 128, 3, 44, Some(1452)),
            [(0, 44, 1452), (44, 44, 1452), (88, 40, 1452)]
        );
        // One datagram a message: a whole slot each.
        assert_eq!(
            allots(0, 8, 3, 1, Some(100)),
            [(0, 1, 2048), (1, 1, 2048), (2, 1, 2048)]
        );
        // No segment known yet: one slot each.
        assert_eq!(
            allots(5, 8, 3, 1, None),
            [(5, 1, 2048), (6, 1, 2048), (7, 1, 2048)]
        );
        // Every message keeps at least one slot.
        assert_eq!(
            allots(0, 4, 4, 40, Some(1000)),
            [(0, 1, 2048), (1, 1, 2048), (2, 1, 2048), (3, 1, 2048)]
        );
        // A segment longer than the slots cannot be planned for.
        assert_eq!(allots(0, 4, 2, 2, Some(4000)), [(0, 1, 2048), (1, 1, 2048)]);
        for (start, cap, n, per) in [(0, 128, 16, 1), (7, 128, 3, 44), (0, 16, 16, 3)] {
            let a = allots(start, cap, n, per, Some(1000));
            assert_eq!(a.len(), n);
            assert_eq!(a[0].0, start);
            assert!(a
                .windows(2)
                .all(|w| w[0].0 + w[0].1 == w[1].0 && w[0].1 >= 1));
            let end = a[n - 1].0 + a[n - 1].1;
            assert!(if per > 1 {
                end == cap
            } else {
                end == start + n
            });
        }
    }

    #[test]
    fn layouts() {
        let a = Allot {
            first: 0,
            slots: 3,
            piece: 1000,
        };
        let one = Allot {
            first: 0,
            slots: 1,
            piece: 2048,
        };
        let d = |datagrams, rest| Layout::Direct { datagrams, rest };
        // (len, segment, truncated, allotment, layout)
        let cases = [
            (2500, Some(1000), false, a, d(3, 0)),
            (3000, Some(1000), false, a, d(3, 0)),
            (1000, None, false, a, d(1, 0)),
            (1001, None, false, a, Layout::Gather),
            (4500, Some(1000), false, a, d(3, 1500)),
            (2500, Some(900), false, a, Layout::Gather),
            (2500, Some(1000), true, a, Layout::Gather),
            (0, None, false, a, d(1, 0)),
            (2048, None, false, one, d(1, 0)),
            (2049, None, false, one, Layout::Gather),
            (300, Some(100), false, one, Layout::Gather),
            (300, Some(300), false, one, d(1, 0)),
            (300, Some(500), false, one, d(1, 0)),
        ];
        for (i, (len, seg, trunc, allot, want)) in cases.into_iter().enumerate() {
            assert_eq!(layout(len, seg, trunc, allot), want, "case {i}");
        }
    }

    #[test]
    fn gathering_puts_slot_pieces_before_the_tail() {
        // Messages of every length received as pieces of 1000 bytes into
        // slots 2..5, the rest at the start of the scratch buffer.
        let msg: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        for len in [0, 1, 999, 1000, 2600, 3000, 3001, 5000] {
            let a = Allot {
                first: 2,
                slots: 3,
                piece: 1000,
            };
            let mut slots = vec![vec![0xeeu8; 1000]; 5];
            let in_slots = len.min(3000);
            for j in 0..3 {
                let from = (j * 1000).min(in_slots);
                let to = (from + 1000).min(in_slots);
                slots[2 + j][..to - from].copy_from_slice(&msg[from..to]);
            }
            let mut scratch = vec![0xddu8; 8000];
            scratch[..len - in_slots].copy_from_slice(&msg[in_slots..len]);
            gather(len, a, &mut scratch, |i| &slots[i][..]);
            assert_eq!(&scratch[..len], &msg[..len], "len {len}");
        }
    }
}
