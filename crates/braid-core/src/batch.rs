//! Packet batches: the unit that crosses the I/O boundary.
//!
//! A batch is one contiguous arena of `capacity` slots of `stride` bytes each,
//! allocated once and reused for every batch. The I/O layer fills slots
//! straight from the kernel (recvmmsg, TUN reads), the core transforms them in
//! place (encrypt: IP packet -> datagram; decrypt: datagram -> IP packet) and
//! the I/O layer writes them out again. Nothing is allocated per packet.
//!
//! An arena of half a [`HUGE_PAGE`] or more starts on a huge-page boundary,
//! so the I/O layer can ask the kernel to back it with huge pages
//! ([`huge_page_region`](PacketBatch::huge_page_region)): a full batch
//! touches a hundred slots spread over a megabyte, and with 4 KiB pages
//! each of them costs a TLB entry (on a virtual machine, a two-level walk
//! when it misses).
//!
//! Each slot carries the byte range it holds (`offset`, `len`) and, for
//! datagrams, the remote address. A slot whose packet was consumed (a
//! handshake message, a dropped packet) has `len == 0` and is skipped on
//! output.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

/// Bytes kept free in front of an IP packet read from the TUN so it can be
/// turned into a WireGuard data message in place (type, receiver, counter).
pub const HEADROOM: usize = 16;

/// Bytes kept free behind a packet for the AEAD tag and WireGuard's padding
/// to a multiple of 16.
pub const TAILROOM: usize = 16 + 15;

/// Our end of a datagram: the local address it arrived at (and the
/// interface), or the one it is to leave from. A reply leaves from where
/// the peer wrote to, as in Linux WireGuard and wireguard-go ("sticky
/// sockets"); `ip: None` lets the routing table pick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LocalAddr {
    pub ip: Option<IpAddr>,
    /// The interface it arrived on (0: unknown); needed to leave from an
    /// IPv6 link-local address.
    pub ifindex: u32,
}

impl LocalAddr {
    pub const NONE: LocalAddr = LocalAddr {
        ip: None,
        ifindex: 0,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    offset: usize,
    len: usize,
    addr: SocketAddr,
    /// Which local line (socket) sends it or received it; 0 is the main one.
    line: u16,
    local: LocalAddr,
}

const UNSPECIFIED: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

const EMPTY_SLOT: Slot = Slot {
    offset: 0,
    len: 0,
    addr: UNSPECIFIED,
    line: 0,
    local: LocalAddr::NONE,
};

/// Extra destinations a slot's bytes go to (redundant multipath sends the
/// same datagram on several lines without copying it).
pub const MAX_EXTRA_COPIES_PER_SLOT: usize = 7;

/// Another destination for the bytes of slot `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy {
    pub slot: usize,
    pub line: u16,
    pub addr: SocketAddr,
    pub local: LocalAddr,
}

/// The huge-page size large arenas are aligned to (x86-64 and arm64 with
/// 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// A reusable batch of packets; see the module documentation.
pub struct PacketBatch {
    data: Vec<u8>,
    /// Where slot 0 starts in `data`: a [`HUGE_PAGE`] boundary for large
    /// arenas, 0 otherwise.
    base: usize,
    stride: usize,
    slots: Vec<Slot>,
    len: usize,
    copies: Vec<Copy>,
}

impl PacketBatch {
    /// Allocates `capacity` slots of `stride` bytes each (the only allocation).
    pub fn new(capacity: usize, stride: usize) -> Self {
        assert!(capacity > 0 && stride > HEADROOM + TAILROOM);
        // Checked so that a size that cannot exist fails here, in release
        // builds too, rather than wrapping to a small arena.
        let too_large = "batch arena larger than the address space";
        let arena = capacity.checked_mul(stride).expect(too_large);
        let (data, base) = if arena >= HUGE_PAGE / 2 {
            // Room to start on a boundary and to end on one: the slack is
            // address space the kernel never backs unless it is touched.
            let data = vec![0; arena.checked_add(2 * HUGE_PAGE).expect(too_large)];
            let base = (HUGE_PAGE - data.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
            (data, base)
        } else {
            (vec![0; arena], 0)
        };
        PacketBatch {
            data,
            base,
            stride,
            slots: vec![EMPTY_SLOT; capacity],
            len: 0,
            copies: Vec::with_capacity(capacity * MAX_EXTRA_COPIES_PER_SLOT),
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Bytes per slot.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Number of slots in use (including consumed ones with `len == 0`).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.copies.clear();
    }

    /// Sets how many slots are in use, e.g. after recvmmsg filled `n` of them.
    pub fn set_len(&mut self, n: usize) {
        assert!(n <= self.slots.len());
        self.len = n;
    }

    /// The packet held in slot `i` (empty when consumed).
    pub fn packet(&self, i: usize) -> &[u8] {
        let s = &self.slots[i];
        let start = self.base + i * self.stride + s.offset;
        &self.data[start..start + s.len]
    }

    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        let s = self.slots[i];
        let start = self.base + i * self.stride + s.offset;
        &mut self.data[start..start + s.len]
    }

    /// The whole `stride` bytes of slot `i`, whatever it holds now.
    pub fn slot_buf_mut(&mut self, i: usize) -> &mut [u8] {
        let start = self.base + i * self.stride;
        &mut self.data[start..start + self.stride]
    }

    /// The whole `stride` bytes of slot `i`, to read.
    pub fn slot_buf(&self, i: usize) -> &[u8] {
        let start = self.base + i * self.stride;
        &self.data[start..start + self.stride]
    }

    /// The whole slot buffer together with the current (offset, len).
    pub fn slot_parts_mut(&mut self, i: usize) -> (&mut [u8], usize, usize) {
        let s = self.slots[i];
        let start = self.base + i * self.stride;
        (&mut self.data[start..start + self.stride], s.offset, s.len)
    }

    /// Declares what slot `i` holds (on line 0 unless `set_line` says
    /// otherwise, from no particular local address unless `set_local` says
    /// otherwise).
    pub fn set_packet(&mut self, i: usize, offset: usize, len: usize, addr: SocketAddr) {
        // Written so that it cannot wrap: `offset + len` could, and then
        // pass the check in a release build.
        assert!(len <= self.stride && offset <= self.stride - len);
        self.slots[i] = Slot {
            offset,
            len,
            addr,
            line: 0,
            local: LocalAddr::NONE,
        };
    }

    /// The local address slot `i`'s datagram arrived at or leaves from.
    pub fn local(&self, i: usize) -> LocalAddr {
        self.slots[i].local
    }

    pub fn set_local(&mut self, i: usize, local: LocalAddr) {
        self.slots[i].local = local;
    }

    /// Sets the local address of every datagram in use and of every copy
    /// to what `source` says for its (line, destination).
    pub fn set_locals(&mut self, mut source: impl FnMut(u16, SocketAddr) -> LocalAddr) {
        for s in self.slots[..self.len].iter_mut().filter(|s| s.len > 0) {
            s.local = source(s.line, s.addr);
        }
        for c in &mut self.copies {
            c.local = source(c.line, c.addr);
        }
    }

    pub fn line(&self, i: usize) -> u16 {
        self.slots[i].line
    }

    pub fn set_line(&mut self, i: usize, line: u16) {
        self.slots[i].line = line;
    }

    /// Sends the bytes of slot `i` also to `addr` on `line`. Returns false
    /// when the batch has no room for more copies (the copy is not sent).
    pub fn add_copy(&mut self, i: usize, line: u16, addr: SocketAddr) -> bool {
        if self.copies.len() == self.copies.capacity() {
            return false;
        }
        self.copies.push(Copy {
            slot: i,
            line,
            addr,
            local: LocalAddr::NONE,
        });
        true
    }

    /// Extra destinations, in the order they were added.
    pub fn copies(&self) -> &[Copy] {
        &self.copies
    }

    /// Marks slot `i` as consumed: it is skipped on output.
    pub fn consume(&mut self, i: usize) {
        self.slots[i].len = 0;
        self.copies.retain(|c| c.slot != i);
    }

    pub fn offset(&self, i: usize) -> usize {
        self.slots[i].offset
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        self.slots[i].addr
    }

    /// Appends a packet written by `write` into the next free slot's buffer
    /// at `offset`; `write` returns the length it wrote. Returns false when
    /// the batch is full.
    pub fn push_with(
        &mut self,
        offset: usize,
        addr: SocketAddr,
        write: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        if self.is_full() {
            return false;
        }
        let i = self.len;
        let len = write(&mut self.slot_buf_mut(i)[offset..]);
        self.set_packet(i, offset, len, addr);
        self.len += 1;
        true
    }

    /// The raw arena, for building iovecs: slot `i` starts at `i * stride`.
    pub fn arena_mut(&mut self) -> &mut [u8] {
        let end = self.base + self.capacity() * self.stride;
        &mut self.data[self.base..end]
    }

    /// The whole huge pages the slots lie in, for the I/O layer to advise
    /// the kernel about; empty for an arena smaller than half a huge page.
    pub fn huge_page_region(&mut self) -> &mut [u8] {
        let arena = self.capacity() * self.stride;
        // Only a large arena was given the slack to be aligned.
        if self.data.len() == arena {
            return &mut [];
        }
        let len = arena.next_multiple_of(HUGE_PAGE);
        &mut self.data[self.base..self.base + len]
    }

    /// The slots in use as one [`SlotRange`], to be split into ranges that
    /// different threads work on at once.
    pub fn slot_range(&mut self) -> SlotRange<'_> {
        let end = self.base + self.len * self.stride;
        SlotRange {
            data: &mut self.data[self.base..end],
            first: 0,
            stride: self.stride,
            slots: &self.slots[..self.len],
        }
    }
}

/// Consecutive slots of a batch, borrowed apart from the others: the
/// packets of two ranges can be changed on two threads at once. Slots keep
/// their batch-wide indices.
pub struct SlotRange<'a> {
    /// From the start of slot `first` to the end of the range's last slot.
    data: &'a mut [u8],
    first: usize,
    stride: usize,
    slots: &'a [Slot],
}

impl<'a> SlotRange<'a> {
    /// The packet held in slot `i`, which must lie in this range.
    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        let k = i.checked_sub(self.first).expect("slot before the range");
        let s = self.slots[k];
        // k is a slot of the range and offset + len <= stride (set_packet).
        let start = k * self.stride + s.offset;
        &mut self.data[start..start + s.len]
    }

    /// Splits into the slots before `at` and those from `at` on; `at` lies
    /// in the range or just past its end.
    pub fn split_at(self, at: usize) -> (SlotRange<'a>, SlotRange<'a>) {
        let k = at.checked_sub(self.first).expect("split before the range");
        let (head_data, tail_data) = self.data.split_at_mut(k * self.stride);
        let (head_slots, tail_slots) = self.slots.split_at(k);
        (
            SlotRange {
                data: head_data,
                first: self.first,
                stride: self.stride,
                slots: head_slots,
            },
            SlotRange {
                data: tail_data,
                first: at,
                stride: self.stride,
                slots: tail_slots,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_split_apart_and_keep_indices() {
        let mut b = PacketBatch::new(4, 64);
        for k in 0..4u8 {
            assert!(b.push_with(HEADROOM, UNSPECIFIED, |buf| {
                buf[..2].copy_from_slice(&[k, k]);
                2
            }));
        }
        let (mut head, tail) = b.slot_range().split_at(1);
        let (mut mid, mut last) = tail.split_at(3);
        head.packet_mut(0)[0] = 10;
        mid.packet_mut(1)[0] = 11;
        mid.packet_mut(2)[1] = 12;
        last.packet_mut(3)[0] = 13;
        assert_eq!(b.packet(0), [10, 0]);
        assert_eq!(b.packet(1), [11, 1]);
        assert_eq!(b.packet(2), [2, 12]);
        assert_eq!(b.packet(3), [13, 3]);
    }

    #[test]
    #[should_panic]
    fn a_slot_outside_the_range_is_refused() {
        let mut b = PacketBatch::new(2, 64);
        for _ in 0..2 {
            b.push_with(HEADROOM, UNSPECIFIED, |_| 1);
        }
        let (_, mut tail) = b.slot_range().split_at(1);
        tail.packet_mut(0);
    }

    #[test]
    fn push_and_consume() {
        let mut b = PacketBatch::new(2, 64);
        let a: SocketAddr = "198.18.0.1:51820".parse().unwrap();
        assert!(b.push_with(HEADROOM, a, |buf| {
            buf[..3].copy_from_slice(b"abc");
            3
        }));
        assert!(b.push_with(0, a, |_| 0));
        assert!(!b.push_with(0, a, |_| 0));
        assert_eq!(b.packet(0), b"abc");
        assert_eq!(b.offset(0), HEADROOM);
        assert_eq!(b.addr(0), a);
        b.consume(0);
        assert!(b.packet(0).is_empty());
        assert_eq!(b.len(), 2);
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn a_large_arena_starts_and_ends_on_huge_pages() {
        let (capacity, stride) = (128, 9 * 1024 + 256);
        let mut b = PacketBatch::new(capacity, stride);
        let a: SocketAddr = "198.18.0.1:51820".parse().unwrap();
        let arena = b.arena_mut();
        assert_eq!(arena.len(), capacity * stride);
        let start = arena.as_ptr() as usize;
        assert_eq!(start % HUGE_PAGE, 0);
        let region = b.huge_page_region();
        assert_eq!(region.as_ptr() as usize, start);
        assert_eq!(region.len(), HUGE_PAGE);
        // Slots are where the arena says: slot i at i * stride.
        b.slot_buf_mut(capacity - 1)[..2].copy_from_slice(b"hi");
        assert_eq!(b.arena_mut()[(capacity - 1) * stride..][..2], *b"hi");
        b.set_packet(capacity - 1, 0, 2, a);
        assert_eq!(b.packet(capacity - 1), b"hi");
        // A small arena is left as it is.
        let mut small = PacketBatch::new(4, 2048);
        assert!(small.huge_page_region().is_empty());
        assert_eq!(small.arena_mut().len(), 4 * 2048);
    }
}
