//! Datagrams on a byte stream: each one is sent as a 2-byte big-endian
//! length followed by its bytes. The receive side keeps one buffer per
//! connection that may end in half a frame; the send side keeps the bytes
//! the kernel did not take yet, bounded, so a slow connection drops new
//! datagrams instead of queueing seconds of them.

use std::net::SocketAddr;

use braid_core::batch::PacketBatch;

/// Bytes of the length prefix in front of every datagram.
pub const PREFIX: usize = 2;

/// The largest datagram a frame can carry.
pub const MAX_FRAME: usize = u16::MAX as usize;

/// Why a stream cannot be read any further.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A zero-length frame: no WireGuard message is empty, so the stream
    /// is not braid's.
    Empty,
    /// A frame longer than a batch slot: nothing braid sends is that long.
    TooLong(usize),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Empty => write!(f, "zero-length frame"),
            FrameError::TooLong(n) => write!(f, "frame of {n} bytes is longer than any datagram"),
        }
    }
}

/// Received stream bytes of one connection not yet turned into datagrams.
pub struct RxBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RxBuffer {
    /// `capacity` must hold at least one largest frame.
    pub fn new(capacity: usize) -> RxBuffer {
        assert!(capacity >= PREFIX + MAX_FRAME);
        RxBuffer {
            buf: vec![0; capacity],
            start: 0,
            end: 0,
        }
    }

    /// Where the next read may write; moves a trailing partial frame to the
    /// front first when the tail is too short for a whole frame.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.buf.len() - self.end < PREFIX + MAX_FRAME {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Records that a read put `n` bytes into [`spare`](Self::spare).
    pub fn filled(&mut self, n: usize) {
        self.end += n;
        debug_assert!(self.end <= self.buf.len());
    }

    /// Whether a whole frame waits in the buffer.
    pub fn has_frame(&self) -> bool {
        let avail = self.end - self.start;
        if avail < PREFIX {
            return false;
        }
        let len = u16::from_be_bytes([self.buf[self.start], self.buf[self.start + 1]]) as usize;
        avail >= PREFIX + len
    }

    /// Moves whole frames into the free slots of `batch`, each tagged with
    /// `remote` and `line`, until the batch is full or only a partial frame
    /// is left. Returns how many frames it moved.
    pub fn drain_into(
        &mut self,
        batch: &mut PacketBatch,
        remote: SocketAddr,
        line: u16,
    ) -> Result<usize, FrameError> {
        let mut moved = 0;
        while !batch.is_full() && self.end - self.start >= PREFIX {
            let len = u16::from_be_bytes([self.buf[self.start], self.buf[self.start + 1]]) as usize;
            if len == 0 {
                return Err(FrameError::Empty);
            }
            if len > batch.stride() {
                return Err(FrameError::TooLong(len));
            }
            if self.end - self.start < PREFIX + len {
                break;
            }
            let body = self.start + PREFIX;
            let frame = &self.buf[body..body + len];
            batch.push_with(0, remote, |slot| {
                slot[..len].copy_from_slice(frame);
                len
            });
            batch.set_line(batch.len() - 1, line);
            self.start = body + len;
            moved += 1;
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(moved)
    }
}

/// Stream bytes of one connection the kernel has not accepted yet.
pub struct TxBacklog {
    buf: Vec<u8>,
    sent: usize,
    limit: usize,
}

impl TxBacklog {
    /// Holds at most `limit` bytes of whole frames, plus the rest of a
    /// frame the kernel took only part of (the stream must finish it).
    pub fn new(limit: usize) -> TxBacklog {
        TxBacklog {
            buf: Vec::with_capacity(limit + PREFIX + MAX_FRAME),
            sent: 0,
            limit,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sent == self.buf.len()
    }

    /// The bytes still to write.
    pub fn unsent(&self) -> &[u8] {
        &self.buf[self.sent..]
    }

    /// Records that the kernel took `n` bytes of [`unsent`](Self::unsent).
    pub fn consumed(&mut self, n: usize) {
        self.sent += n;
        if self.sent == self.buf.len() {
            self.buf.clear();
            self.sent = 0;
        }
    }

    /// Forgets everything (the connection broke: a half-written frame must
    /// not start the next stream).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.sent = 0;
    }

    /// Appends the tail `frame[skip..]` of a frame (prefix included) that
    /// the kernel took the first `skip` bytes of; always fits.
    pub fn push_rest(&mut self, datagram: &[u8], skip: usize) {
        let prefix = (datagram.len() as u16).to_be_bytes();
        if skip < PREFIX {
            self.buf.extend_from_slice(&prefix[skip..]);
            self.buf.extend_from_slice(datagram);
        } else {
            self.buf.extend_from_slice(&datagram[skip - PREFIX..]);
        }
    }

    /// Appends a whole frame if it fits under the limit; false means the
    /// caller drops the datagram.
    pub fn push(&mut self, datagram: &[u8]) -> bool {
        if self.buf.len() - self.sent + PREFIX + datagram.len() > self.limit {
            return false;
        }
        if self.sent > 0 && self.buf.len() + PREFIX + datagram.len() > self.buf.capacity() {
            self.buf.drain(..self.sent);
            self.sent = 0;
        }
        self.push_rest(datagram, 0);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    const REMOTE: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 9));

    fn frame(bytes: &[u8]) -> Vec<u8> {
        let mut v = (bytes.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(bytes);
        v
    }

    fn feed(rx: &mut RxBuffer, bytes: &[u8]) {
        let spare = rx.spare();
        spare[..bytes.len()].copy_from_slice(bytes);
        rx.filled(bytes.len());
    }

    #[test]
    fn frames_split_anywhere_come_out_whole_and_in_order() {
        let datagrams: Vec<Vec<u8>> = (1..=20u8).map(|n| vec![n; n as usize * 37]).collect();
        let stream: Vec<u8> = datagrams.iter().flat_map(|d| frame(d)).collect();
        for chunk in [1, 2, 3, 7, 100, 1000, stream.len()] {
            let mut rx = RxBuffer::new(PREFIX + MAX_FRAME + 100);
            let mut batch = PacketBatch::new(32, 2048);
            let mut got = Vec::new();
            for piece in stream.chunks(chunk) {
                feed(&mut rx, piece);
                batch.clear();
                rx.drain_into(&mut batch, REMOTE, 3).unwrap();
                for i in 0..batch.len() {
                    assert_eq!(batch.line(i), 3);
                    assert_eq!(batch.addr(i), REMOTE);
                    got.push(batch.packet(i).to_vec());
                }
            }
            assert_eq!(got, datagrams, "chunk {chunk}");
            assert!(!rx.has_frame());
        }
    }

    #[test]
    fn a_full_batch_leaves_the_rest_for_the_next_call() {
        let mut rx = RxBuffer::new(PREFIX + MAX_FRAME);
        for n in 0..5u8 {
            feed(&mut rx, &frame(&[n; 10]));
        }
        let mut batch = PacketBatch::new(3, 128);
        assert_eq!(rx.drain_into(&mut batch, REMOTE, 0), Ok(3));
        assert!(rx.has_frame());
        batch.clear();
        assert_eq!(rx.drain_into(&mut batch, REMOTE, 0), Ok(2));
        assert_eq!(batch.packet(1), &[4u8; 10]);
        assert!(!rx.has_frame());
    }

    #[test]
    fn empty_and_oversized_frames_end_the_stream() {
        let mut rx = RxBuffer::new(PREFIX + MAX_FRAME);
        feed(&mut rx, &[0, 0]);
        let mut batch = PacketBatch::new(4, 128);
        assert_eq!(rx.drain_into(&mut batch, REMOTE, 0), Err(FrameError::Empty));
        let mut rx = RxBuffer::new(PREFIX + MAX_FRAME);
        feed(&mut rx, &frame(&[1; 200]));
        assert_eq!(
            rx.drain_into(&mut batch, REMOTE, 0),
            Err(FrameError::TooLong(200))
        );
    }

    #[test]
    fn backlog_is_bounded_but_always_finishes_a_started_frame() {
        let mut tx = TxBacklog::new(100);
        tx.push_rest(&[7; 300], 1);
        assert_eq!(tx.unsent().len(), 301);
        assert_eq!(tx.unsent()[0], 44); // low byte of the 300-byte prefix
        assert!(!tx.push(&[1; 10]), "over the limit: dropped");
        tx.consumed(301);
        assert!(tx.is_empty());
        assert!(tx.push(&[1; 40]));
        assert!(tx.push(&[2; 40]));
        assert!(!tx.push(&[3; 40]));
        assert_eq!(tx.unsent(), [frame(&[1; 40]), frame(&[2; 40])].concat());
        tx.consumed(42);
        assert!(tx.push(&[3; 40]));
        assert_eq!(tx.unsent(), [frame(&[2; 40]), frame(&[3; 40])].concat());
    }
}
