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
    ///
    /// Invariant behind every subtraction below: `start <= end <=
    /// buf.len()` (`filled` refuses to pass the end).
    pub fn spare(&mut self) -> &mut [u8] {
        if self.buf.len() - self.end < PREFIX + MAX_FRAME {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Records that a read put `n` bytes into [`spare`](Self::spare).
    ///
    /// Panics if `n` is more than `spare` offered: a read cannot return
    /// more than its buffer, and an `end` past the buffer would break
    /// every later slice (checked in release builds too).
    pub fn filled(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.end, "read past the spare room");
        self.end += n;
    }

    /// Whether a whole frame waits in the buffer.
    pub fn has_frame(&self) -> bool {
        let avail = self.end - self.start;
        if avail < PREFIX {
            return false;
        }
        // len <= 65535 from a u16 field, so PREFIX + len cannot overflow.
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
            // PREFIX + len <= PREFIX + MAX_FRAME <= capacity: a frame that
            // has not fully arrived always fits once `spare` compacts.
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
    ///
    /// Panics if `n` is more than was unsent (a send cannot take more than
    /// it was given; `sent` past the end would break every later slice).
    pub fn consumed(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.sent, "sent more than was unsent");
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
    ///
    /// Panics if `datagram` is longer than [`MAX_FRAME`] (its length would
    /// not fit the prefix: the caller drops such datagrams first) or
    /// `skip` is not inside the frame.
    pub fn push_rest(&mut self, datagram: &[u8], skip: usize) {
        let prefix = frame_prefix(datagram);
        assert!(skip < PREFIX + datagram.len(), "skip past the frame");
        if skip < PREFIX {
            self.buf.extend_from_slice(&prefix[skip..]);
            self.buf.extend_from_slice(datagram);
        } else {
            self.buf.extend_from_slice(&datagram[skip - PREFIX..]);
        }
    }

    /// Appends a whole frame if it fits under the limit; false means the
    /// caller drops the datagram (also one longer than [`MAX_FRAME`], which
    /// no prefix can announce).
    pub fn push(&mut self, datagram: &[u8]) -> bool {
        // With datagram.len() <= MAX_FRAME and sent <= buf.len() the sum
        // below is at most limit + 2 * (PREFIX + MAX_FRAME): no overflow.
        if datagram.len() > MAX_FRAME
            || self.buf.len() - self.sent + PREFIX + datagram.len() > self.limit
        {
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

/// The length prefix of `datagram`.
///
/// Panics if it is longer than [`MAX_FRAME`]: a truncated prefix would
/// desynchronise the stream for good, so callers drop such datagrams
/// before they frame them.
pub fn frame_prefix(datagram: &[u8]) -> [u8; PREFIX] {
    u16::try_from(datagram.len())
        .expect("datagrams longer than MAX_FRAME are dropped before framing")
        .to_be_bytes()
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

    #[test]
    fn a_largest_frame_arrives_whole_in_the_smallest_buffer() {
        // The buffer holds exactly one largest frame, which arrives in
        // pieces behind a small one: `spare` has to move it to the front.
        let mut rx = RxBuffer::new(PREFIX + MAX_FRAME);
        let big: Vec<u8> = (0..MAX_FRAME).map(|i| (i % 251) as u8).collect();
        let stream = [frame(&[9; 10]), frame(&big)].concat();
        let mut batch = PacketBatch::new(2, MAX_FRAME);
        let mut got = Vec::new();
        let mut rest = &stream[..];
        while !rest.is_empty() {
            let n = rx.spare().len().min(rest.len()).min(1000);
            assert!(n > 0, "the buffer must always have room for the rest");
            feed(&mut rx, &rest[..n]);
            rest = &rest[n..];
            batch.clear();
            rx.drain_into(&mut batch, REMOTE, 0).unwrap();
            got.extend((0..batch.len()).map(|i| batch.packet(i).to_vec()));
        }
        assert_eq!(got, [vec![9; 10], big]);
        assert!(!rx.has_frame());
    }

    #[test]
    fn length_prefixes_at_the_extremes() {
        let mut batch = PacketBatch::new(4, MAX_FRAME);
        // 65535 announced and only a few bytes there: it waits.
        let mut rx = RxBuffer::new(PREFIX + MAX_FRAME);
        feed(&mut rx, &[0xff, 0xff, 1, 2, 3]);
        assert!(!rx.has_frame());
        assert_eq!(rx.drain_into(&mut batch, REMOTE, 0), Ok(0));
        // The same prefix before slots too small for it ends the stream
        // before anything is copied.
        let mut small = PacketBatch::new(4, 2048);
        assert_eq!(
            rx.drain_into(&mut small, REMOTE, 0),
            Err(FrameError::TooLong(MAX_FRAME))
        );
        assert!(small.is_empty());

        // Half a prefix is no frame; a prefix of 1 waits for its byte.
        let mut rx = RxBuffer::new(PREFIX + MAX_FRAME);
        feed(&mut rx, &[0]);
        assert!(!rx.has_frame());
        assert_eq!(rx.drain_into(&mut batch, REMOTE, 0), Ok(0));
        feed(&mut rx, &[1]);
        assert!(!rx.has_frame());
        assert_eq!(rx.drain_into(&mut batch, REMOTE, 0), Ok(0));
        feed(&mut rx, &[7]);
        assert_eq!(rx.drain_into(&mut batch, REMOTE, 0), Ok(1));
        assert_eq!(batch.packet(0), [7]);

        // A zero-length frame after a good one: the good one is kept.
        let mut rx = RxBuffer::new(PREFIX + MAX_FRAME);
        feed(&mut rx, &[frame(&[4; 3]), vec![0, 0]].concat());
        batch.clear();
        assert_eq!(rx.drain_into(&mut batch, REMOTE, 0), Err(FrameError::Empty));
        assert_eq!(batch.packet(0), [4; 3]);
    }

    #[test]
    fn a_datagram_too_long_for_a_prefix_is_refused_not_truncated() {
        let mut tx = TxBacklog::new(4 * MAX_FRAME);
        assert!(!tx.push(&vec![1; MAX_FRAME + 1]));
        assert!(tx.is_empty());
        assert!(tx.push(&vec![5; MAX_FRAME]));
        assert_eq!(tx.unsent().len(), PREFIX + MAX_FRAME);
        assert_eq!(tx.unsent()[..3], [0xff, 0xff, 5]);
    }

    #[test]
    #[should_panic(expected = "longer than MAX_FRAME")]
    fn framing_an_oversized_datagram_panics_in_every_build() {
        frame_prefix(&vec![0; MAX_FRAME + 1]);
    }

    #[test]
    #[should_panic(expected = "read past the spare room")]
    fn filling_past_the_buffer_panics_in_every_build() {
        let mut rx = RxBuffer::new(PREFIX + MAX_FRAME);
        let room = rx.spare().len();
        rx.filled(room + 1);
    }

    #[test]
    #[should_panic(expected = "sent more than was unsent")]
    fn consuming_past_the_backlog_panics_in_every_build() {
        let mut tx = TxBacklog::new(100);
        assert!(tx.push(&[1; 10]));
        tx.consumed(PREFIX + 11);
    }
}
