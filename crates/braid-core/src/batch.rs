//! Packet batches: the unit that crosses the I/O boundary.
//!
//! A batch is one contiguous arena of `capacity` slots of `stride` bytes each,
//! allocated once and reused for every batch. The I/O layer fills slots
//! straight from the kernel (recvmmsg, TUN reads), the core transforms them in
//! place (encrypt: IP packet -> datagram; decrypt: datagram -> IP packet) and
//! the I/O layer writes them out again. Nothing is allocated per packet.
//!
//! Each slot carries the byte range it holds (`offset`, `len`) and, for
//! datagrams, the remote address. A slot whose packet was consumed (a
//! handshake message, a dropped packet) has `len == 0` and is skipped on
//! output.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// Bytes kept free in front of an IP packet read from the TUN so it can be
/// turned into a WireGuard data message in place (type, receiver, counter).
pub const HEADROOM: usize = 16;

/// Bytes kept free behind a packet for the AEAD tag and WireGuard's padding
/// to a multiple of 16.
pub const TAILROOM: usize = 16 + 15;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    offset: usize,
    len: usize,
    addr: SocketAddr,
    /// Which local line (socket) sends it or received it; 0 is the main one.
    line: u16,
}

const UNSPECIFIED: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

const EMPTY_SLOT: Slot = Slot {
    offset: 0,
    len: 0,
    addr: UNSPECIFIED,
    line: 0,
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
}

/// A reusable batch of packets; see the module documentation.
pub struct PacketBatch {
    data: Vec<u8>,
    stride: usize,
    slots: Vec<Slot>,
    len: usize,
    copies: Vec<Copy>,
}

impl PacketBatch {
    /// Allocates `capacity` slots of `stride` bytes each (the only allocation).
    pub fn new(capacity: usize, stride: usize) -> Self {
        assert!(capacity > 0 && stride > HEADROOM + TAILROOM);
        PacketBatch {
            data: vec![0; capacity * stride],
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
        let start = i * self.stride + s.offset;
        &self.data[start..start + s.len]
    }

    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        let s = self.slots[i];
        let start = i * self.stride + s.offset;
        &mut self.data[start..start + s.len]
    }

    /// The whole `stride` bytes of slot `i`, whatever it holds now.
    pub fn slot_buf_mut(&mut self, i: usize) -> &mut [u8] {
        let start = i * self.stride;
        &mut self.data[start..start + self.stride]
    }

    /// The whole slot buffer together with the current (offset, len).
    pub fn slot_parts_mut(&mut self, i: usize) -> (&mut [u8], usize, usize) {
        let s = self.slots[i];
        let start = i * self.stride;
        (&mut self.data[start..start + self.stride], s.offset, s.len)
    }

    /// Declares what slot `i` holds (on line 0 unless `set_line` says otherwise).
    pub fn set_packet(&mut self, i: usize, offset: usize, len: usize, addr: SocketAddr) {
        assert!(offset + len <= self.stride);
        self.slots[i] = Slot {
            offset,
            len,
            addr,
            line: 0,
        };
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
        &mut self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
