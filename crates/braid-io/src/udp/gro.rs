//! Receiving, with UDP receive coalescing (`UDP_GRO`) when the kernel has
//! it.
//!
//! With GRO the kernel may hand one message holding many datagrams from one
//! source (consecutive, all `segment` bytes long but the last). Such a
//! message does not fit a batch slot, so with GRO on each message of a
//! `recvmmsg` is pointed at slots, one datagram's length apiece, and then
//! at a large scratch buffer (`scatter.rs`): as long as the datagrams have
//! the length of the last coalesced message's, each lands in a slot of
//! its own without a copy. What does not is received into the scratch
//! buffer and then copied into slots, one copy per datagram. Either way
//! the stack was walked once per message.
//!
//! A message may hold more datagrams than the batch has slots left. Those
//! stay in the scratch buffer and are handed out first by the next call,
//! which only asks the kernel for more once they are gone; a call that
//! leaves some behind always returns a full batch. How many messages to
//! ask for is sized from the datagrams per message of the previous call,
//! so a steady coalesced flow rarely leaves anything behind.
//!
//! Without GRO (or with it switched off) datagrams go straight into the
//! slots, as many per call as the batch holds.

use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use braid_core::batch::PacketBatch;

use super::cmsg::{arrival_time, gro_segment, CmsgBuf};
use super::fd::SocketFd;
use super::pktinfo;
use super::scatter::{self, Allot, Layout};
use crate::sockaddr::{decode_addr, UNSPECIFIED};
use braid_core::batch::LocalAddr;

/// Scratch buffers for coalesced messages, i.e. messages per `recvmmsg`
/// with GRO on.
const COALESCED_MESSAGES: usize = 16;

/// Bytes per scratch buffer: the largest UDP payload there is.
const COALESCED_BYTES: usize = 1 << 16;

/// A received message waiting in a scratch buffer to be split.
#[derive(Clone, Copy, Debug)]
struct Coalesced {
    /// Which scratch buffer holds it.
    buf: usize,
    len: usize,
    /// Bytes per datagram (the last may be shorter); `len` for a single one.
    segment: usize,
    addr: SocketAddr,
    /// Which of our addresses it was sent to.
    local: LocalAddr,
    time: Option<SystemTime>,
    /// The kernel cut it short: one empty slot stands for it.
    truncated: bool,
}

/// Received messages in their scratch buffers, and how far they have been
/// handed out.
#[derive(Debug, Default)]
struct Pending {
    /// `COALESCED_MESSAGES` buffers of `COALESCED_BYTES`, allocated on
    /// first use.
    bufs: Vec<u8>,
    msgs: Vec<Coalesced>,
    /// The message being handed out, and the offset of its next datagram.
    next: usize,
    offset: usize,
    /// Most datagrams in one message of the last receive (at least 1).
    per_message: usize,
    /// The datagram length of the last message that held several: where
    /// the next receive cuts its messages into slots.
    segment: Option<usize>,
    /// The message whose datagrams were longer than the batch's slots and
    /// held back once, for a batch with bigger ones (its datagrams share
    /// a length: offered to small slots again, all of them are dropped).
    held: Option<usize>,
    /// The longest datagram held back or dropped for the slots' size by
    /// this receive (moved to the socket's count after it).
    oversize: Option<usize>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.next >= self.msgs.len()
    }

    /// Splits waiting messages into slots `start..` of `batch` (one datagram
    /// per slot, in order), stopping when the batch is full; returns the
    /// index of the first slot left free.
    ///
    /// A datagram longer than the slots (the peer's MTU is bigger than
    /// ours, or went up before ours did) stops it the first time, so the
    /// owner can come back with a batch whose slots hold it; the second
    /// time it leaves its slot empty.
    fn hand_out(
        &mut self,
        batch: &mut PacketBatch,
        start: usize,
        mut times: Option<&mut [Option<SystemTime>]>,
    ) -> usize {
        let cap = batch.capacity();
        let stride = batch.stride();
        let mut i = start;
        while i < cap && !self.is_empty() {
            let m = self.msgs[self.next];
            // `recv_coalesced` keeps len <= COALESCED_BYTES, so the message
            // stays inside its own buffer.
            let buf = &self.bufs[m.buf * COALESCED_BYTES..][..m.len];
            // A segment size of 0 would hand out empty slots forever
            // without moving on: such a message is one datagram.
            let segment = if m.segment == 0 { m.len } else { m.segment };
            loop {
                if i == cap {
                    return i;
                }
                // offset < len here (it only grows until it reaches len).
                let len = segment.min(m.len - self.offset);
                if !m.truncated && len > stride {
                    self.oversize = self.oversize.max(Some(len));
                    if self.held != Some(self.next) {
                        self.held = Some(self.next);
                        return i;
                    }
                }
                // A datagram longer than the slot cannot be delivered whole;
                // like a truncated one it leaves its slot empty.
                let kept = if m.truncated || len > stride { 0 } else { len };
                batch.slot_buf_mut(i)[..kept]
                    .copy_from_slice(&buf[self.offset..self.offset + kept]);
                batch.set_packet(i, 0, kept, m.addr);
                batch.set_local(i, m.local);
                if let Some(t) = times.as_deref_mut().and_then(|t| t.get_mut(i)) {
                    *t = m.time;
                }
                i += 1;
                self.offset += len;
                if self.offset >= m.len {
                    break;
                }
            }
            self.next += 1;
            self.offset = 0;
        }
        i
    }
}

/// The arrays one `recvmmsg` call points the kernel at, and what a
/// coalesced receive left over.
///
/// The pointers in `hdrs` are only meaningful during the call that set
/// them: every call rebuilds the headers it passes.
#[derive(Debug, Default)]
pub(super) struct RxScratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    /// A coalesced receive's iovecs: each message's slots, then its
    /// scratch buffer, one message after the other.
    scatter: Vec<libc::iovec>,
    allots: Vec<Allot>,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<CmsgBuf>,
    pending: Pending,
}

// SAFETY: the raw pointers inside `hdrs`/`iovs` are never dereferenced
// outside the `recvmmsg` call that set them (each call rewrites them
// first), so moving the arrays to another thread is sound; access is
// serialised by the Mutex around the scratch.
unsafe impl Send for RxScratch {}

impl RxScratch {
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Grows the arrays to hold `n` messages; allocates only the first time
    /// a batch this large is seen.
    fn reserve(&mut self, n: usize) {
        if self.hdrs.len() >= n {
            return;
        }
        // SAFETY (for the three zeroed() calls): mmsghdr, iovec and
        // sockaddr_storage are plain C structs for which all-zero bytes
        // (null pointers, zero lengths) are valid.
        self.hdrs.resize_with(n, || unsafe { mem::zeroed() });
        self.iovs.resize_with(n, || unsafe { mem::zeroed() });
        self.addrs.resize_with(n, || unsafe { mem::zeroed() });
        self.cmsgs.resize(n, [0; 16]);
    }

    /// Points message `k` at `iovs[k]` (already filled), `addrs[k]` and
    /// `cmsgs[k]` (the local address, and the timestamp and GRO segment
    /// size when asked for).
    fn set_hdr(&mut self, k: usize) {
        let iov: *mut libc::iovec = &mut self.iovs[k];
        self.set_hdr_iovs(k, iov, 1);
    }

    /// Points message `k` at `count` iovecs from `iov` on, `addrs[k]` and
    /// `cmsgs[k]`.
    fn set_hdr_iovs(&mut self, k: usize, iov: *mut libc::iovec, count: usize) {
        let name: *mut libc::sockaddr_storage = &mut self.addrs[k];
        let cmsg: *mut CmsgBuf = &mut self.cmsgs[k];
        let h = &mut self.hdrs[k];
        h.msg_len = 0;
        h.msg_hdr.msg_name = name.cast();
        h.msg_hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = crate::sys::kernel_int(count);
        h.msg_hdr.msg_flags = 0;
        h.msg_hdr.msg_control = cmsg.cast();
        h.msg_hdr.msg_controllen = crate::sys::kernel_int(mem::size_of::<CmsgBuf>());
    }
}

impl SocketFd {
    /// Receives into `batch` with the scratch `s`; see
    /// [`UdpSocket::recv_batch`](super::UdpSocket::recv_batch).
    pub(super) fn recv_into(
        &self,
        s: &mut RxScratch,
        batch: &mut PacketBatch,
        mut times: Option<&mut [Option<SystemTime>]>,
    ) -> io::Result<usize> {
        batch.clear();
        let mut filled = s.pending.hand_out(batch, 0, times.as_deref_mut());
        // Room left while messages still wait means one was held back for
        // bigger slots: it must go first, so nothing new comes in.
        if filled < batch.capacity() && s.pending.is_empty() {
            filled = if self.gro_enabled() {
                self.recv_coalesced(s, batch, filled, times)?
            } else {
                self.recv_direct(s, batch, filled, times)?
            };
        }
        batch.set_len(filled);
        if let Some(len) = s.pending.oversize.take() {
            self.oversize.fetch_max(len, Ordering::Relaxed);
        }
        Ok(filled)
    }

    /// One `recvmmsg` into slots `start..`; returns the first free slot.
    fn recv_direct(
        &self,
        s: &mut RxScratch,
        batch: &mut PacketBatch,
        start: usize,
        mut times: Option<&mut [Option<SystemTime>]>,
    ) -> io::Result<usize> {
        let cap = batch.capacity();
        let stride = batch.stride();
        let n = cap - start;
        s.reserve(n);
        let base = batch.arena_mut()[start * stride..].as_mut_ptr();
        for k in 0..n {
            s.iovs[k] = libc::iovec {
                // SAFETY: slot start+k spans stride bytes from
                // (start+k)*stride, inside the capacity*stride arena.
                iov_base: unsafe { base.add(k * stride) }.cast(),
                iov_len: stride,
            };
            s.set_hdr(k);
        }
        // SAFETY: the first `n` headers point at live iovecs, sockaddr and
        // control buffers in `s`, and the iovecs at disjoint slots of the
        // batch arena, which `batch` (borrowed mutably) keeps alive and
        // unaliased for the duration of the call.
        let got = unsafe { self.recvmmsg(&mut s.hdrs[..n]) }?;
        for k in 0..got {
            let h = &s.hdrs[k].msg_hdr;
            let addr = decode_addr(&s.addrs[k], h.msg_namelen).unwrap_or(UNSPECIFIED);
            // With MSG_TRUNC asked for, msg_len is the datagram's own
            // length even when the slot took less of it.
            let len = if h.msg_flags & libc::MSG_TRUNC != 0 {
                let whole = s.hdrs[k].msg_len as usize;
                s.pending.oversize = s.pending.oversize.max(Some(whole));
                0
            } else {
                (s.hdrs[k].msg_len as usize).min(stride)
            };
            batch.set_packet(start + k, 0, len, addr);
            batch.set_local(start + k, pktinfo::local_of(h));
            if let Some(t) = times.as_deref_mut().and_then(|t| t.get_mut(start + k)) {
                *t = arrival_time(h);
            }
        }
        Ok(start + got)
    }

    /// One `recvmmsg` whose messages land in slots `start..` where they
    /// can and in the scratch buffers where not (see `scatter.rs`), then
    /// what is in the scratch buffers is split into the slots that
    /// follow; returns the first free slot.
    fn recv_coalesced(
        &self,
        s: &mut RxScratch,
        batch: &mut PacketBatch,
        start: usize,
        mut times: Option<&mut [Option<SystemTime>]>,
    ) -> io::Result<usize> {
        let cap = batch.capacity();
        let stride = batch.stride();
        let p = &mut s.pending;
        if p.bufs.is_empty() {
            p.bufs = vec![0; COALESCED_MESSAGES * COALESCED_BYTES];
            p.msgs.reserve(COALESCED_MESSAGES);
        }
        let per = p.per_message.max(1);
        let segment = p.segment;
        let free = cap - start;
        // Bulk (several datagrams a message): enough messages to fill the
        // batch, the last one into what remains.
        let n =
            if per > 1 { free.div_ceil(per) } else { free }.clamp(1, COALESCED_MESSAGES.min(free));
        scatter::plan(start, cap, n, per, segment, stride, &mut s.allots);
        s.reserve(n);
        if s.scatter.len() < cap + COALESCED_MESSAGES {
            // SAFETY: an all-zero iovec (null, 0) is valid.
            s.scatter
                .resize_with(cap + COALESCED_MESSAGES, || unsafe { mem::zeroed() });
        }
        let arena = batch.arena_mut().as_mut_ptr();
        let bufs = s.pending.bufs.as_mut_ptr();
        let mut at = 0;
        for k in 0..n {
            let a = s.allots[k];
            let first = at;
            for j in 0..a.slots {
                s.scatter[at] = libc::iovec {
                    // SAFETY: slot a.first + j < cap spans stride >= piece
                    // bytes from (a.first + j) * stride, inside the
                    // capacity * stride arena.
                    iov_base: unsafe { arena.add((a.first + j) * stride) }.cast(),
                    iov_len: a.piece,
                };
                at += 1;
            }
            s.scatter[at] = libc::iovec {
                // SAFETY: buffer k < COALESCED_MESSAGES spans
                // COALESCED_BYTES from k * COALESCED_BYTES, inside `bufs`.
                iov_base: unsafe { bufs.add(k * COALESCED_BYTES) }.cast(),
                iov_len: COALESCED_BYTES,
            };
            at += 1;
            let iov: *mut libc::iovec = &mut s.scatter[first];
            s.set_hdr_iovs(k, iov, a.slots + 1);
        }
        // SAFETY: the first `n` headers point at live iovecs, sockaddr and
        // control buffers in `s`; the iovecs point at disjoint slots of the
        // batch arena (the plan hands each slot to one message) and at
        // disjoint scratch buffers, which `batch` (borrowed mutably) and
        // `s` keep alive and unaliased during the call (the pending
        // messages were all handed out: the caller only receives when the
        // batch has room left after that).
        let got = unsafe { self.recvmmsg(&mut s.hdrs[..n]) }?;
        let p = &mut s.pending;
        p.msgs.clear();
        p.next = 0;
        p.offset = 0;
        p.held = None;
        p.per_message = 1;
        // The first slot after what landed where it belongs.
        let mut end = start;
        let mut gathering = false;
        for k in 0..got {
            let h = &s.hdrs[k].msg_hdr;
            let a = s.allots[k];
            let whole = s.hdrs[k].msg_len as usize;
            let truncated = h.msg_flags & libc::MSG_TRUNC != 0 || whole > COALESCED_BYTES;
            // The kernel never reports more than the iovecs held but with
            // MSG_TRUNC; clamped anyway, since hand_out slices with it.
            let len = whole.min(COALESCED_BYTES);
            let segment = if truncated { None } else { gro_segment(h) };
            if let Some(seg) = segment.filter(|&seg| seg < len) {
                p.per_message = p.per_message.max(len.div_ceil(seg));
                p.segment = Some(seg);
            }
            let addr = decode_addr(&s.addrs[k], h.msg_namelen).unwrap_or(UNSPECIFIED);
            let local = pktinfo::local_of(h);
            let time = if times.is_some() {
                arrival_time(h)
            } else {
                None
            };
            let layout = scatter::layout(len, segment, truncated, a);
            let last = k + 1 == got && a.first + a.slots == cap;
            match layout {
                Layout::Direct { datagrams, rest } if !gathering && (rest == 0 || last) => {
                    let piece = segment.filter(|&seg| seg < len).unwrap_or(len.max(1));
                    for j in 0..datagrams {
                        let from = j * piece;
                        let dlen = piece.min(len - from.min(len));
                        batch.set_packet(a.first + j, 0, dlen, addr);
                        batch.set_local(a.first + j, local);
                        if let Some(t) = times.as_deref_mut().and_then(|t| t.get_mut(a.first + j)) {
                            *t = time;
                        }
                    }
                    // The slots it did not need, up to the next message's.
                    if k + 1 < got {
                        for i in a.first + datagrams..a.first + a.slots {
                            batch.set_packet(i, 0, 0, addr);
                        }
                    }
                    end = a.first + datagrams;
                    if rest > 0 {
                        // Whole datagrams that ran on into the scratch
                        // buffer: the next call hands them out first.
                        let seg = segment.unwrap_or(rest);
                        p.msgs.push(Coalesced {
                            buf: k,
                            len: rest,
                            segment: seg,
                            addr,
                            local,
                            time,
                            truncated: false,
                        });
                    }
                }
                _ => {
                    gathering = true;
                    if !truncated {
                        let scratch = &mut p.bufs[k * COALESCED_BYTES..(k + 1) * COALESCED_BYTES];
                        let slots = &*batch;
                        scatter::gather(len, a, scratch, |i| &slots.slot_buf(i)[..a.piece]);
                    }
                    p.msgs.push(Coalesced {
                        buf: k,
                        len,
                        segment: segment.unwrap_or(len),
                        addr,
                        local,
                        time,
                        truncated,
                    });
                }
            }
        }
        if gathering {
            Ok(p.hand_out(batch, end, times))
        } else {
            // What ran on past the batch waits: the batch is full.
            Ok(if p.msgs.is_empty() { end } else { cap })
        }
    }

    /// `recvmmsg` without waiting; returns how many messages arrived (0
    /// when none was ready).
    ///
    /// # Safety
    /// Every header must point at live, writable buffers that stay
    /// unaliased for the duration of the call.
    unsafe fn recvmmsg(&self, hdrs: &mut [libc::mmsghdr]) -> io::Result<usize> {
        loop {
            // SAFETY: the caller vouches for the headers.
            let r = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    hdrs.len() as libc::c_uint,
                    // MSG_TRUNC: a truncated datagram reports its length.
                    crate::sys::kernel_int(libc::MSG_DONTWAIT | libc::MSG_TRUNC),
                    std::ptr::null_mut(),
                )
            };
            match crate::sys::cvt(r) {
                Ok(n) => return Ok(n as usize),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => return Ok(0),
                    _ => return Err(e),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(port: u16) -> SocketAddr {
        SocketAddr::new([198, 18, 0, 1].into(), port)
    }

    /// Pending messages built by hand: (len, segment, port) each; byte j of
    /// a message is `j as u8 ^ port`.
    fn pending(msgs: &[(usize, usize, u16)]) -> Pending {
        let mut p = Pending {
            bufs: vec![0; msgs.len() * COALESCED_BYTES],
            ..Pending::default()
        };
        for (k, &(len, segment, port)) in msgs.iter().enumerate() {
            for (j, b) in p.bufs[k * COALESCED_BYTES..][..len].iter_mut().enumerate() {
                *b = j as u8 ^ port as u8;
            }
            p.msgs.push(Coalesced {
                buf: k,
                len,
                segment,
                addr: src(port),
                local: LocalAddr::NONE,
                time: Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(port as u64)),
                truncated: false,
            });
        }
        p
    }

    /// (len, first byte, port, time secs) of slots 0..n.
    fn slots(
        b: &PacketBatch,
        times: &[Option<SystemTime>],
        n: usize,
    ) -> Vec<(usize, u8, u16, u64)> {
        (0..n)
            .map(|i| {
                let t = times[i]
                    .unwrap()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap();
                (
                    b.packet(i).len(),
                    b.packet(i).first().copied().unwrap_or(0),
                    b.addr(i).port(),
                    t.as_secs(),
                )
            })
            .collect()
    }

    #[test]
    fn splits_every_segment_into_its_own_slot() {
        // 1000 + 1000 + 500 bytes from port 7, then one 300-byte datagram.
        let mut p = pending(&[(2500, 1000, 7), (300, 300, 9)]);
        let mut b = PacketBatch::new(8, 2048);
        let mut times = [None; 8];
        assert_eq!(p.hand_out(&mut b, 0, Some(&mut times)), 4);
        assert!(p.is_empty());
        assert_eq!(
            slots(&b, &times, 4),
            [
                (1000, 7, 7, 7),
                (1000, (1000u32 as u8) ^ 7, 7, 7),
                (500, (2000u32 as u8) ^ 7, 7, 7),
                (300, 9, 9, 9)
            ]
        );
        for j in 0..500 {
            assert_eq!(b.packet(2)[j], (2000 + j) as u8 ^ 7);
        }
    }

    #[test]
    fn what_does_not_fit_waits_for_the_next_batch() {
        let mut p = pending(&[(5000, 1000, 7), (100, 100, 8)]);
        let mut b = PacketBatch::new(3, 2048);
        let mut times = [Some(SystemTime::UNIX_EPOCH); 3];
        assert_eq!(p.hand_out(&mut b, 1, Some(&mut times)), 3);
        assert_eq!(
            slots(&b, &times[..], 3)[1..],
            [(1000, 7, 7, 7), (1000, (1000u32 as u8) ^ 7, 7, 7)]
        );
        assert!(!p.is_empty());
        assert_eq!(p.hand_out(&mut b, 0, Some(&mut times)), 3);
        assert_eq!(b.packet(0)[0], (2000u32 as u8) ^ 7);
        assert_eq!(b.packet(2)[0], (4000u32 as u8) ^ 7);
        assert_eq!(p.hand_out(&mut b, 0, Some(&mut times)), 1);
        assert_eq!(slots(&b, &times, 1), [(100, 8, 8, 8)]);
        assert!(p.is_empty());
        assert_eq!(p.hand_out(&mut b, 0, None), 0);
    }

    #[test]
    fn a_segment_size_of_zero_is_one_datagram_not_a_loop() {
        // Not what recv_coalesced records, but hand_out must still move
        // on: one slot for the whole message, then the next message.
        let mut p = pending(&[(300, 0, 7), (0, 0, 8), (20, 10, 9)]);
        let mut b = PacketBatch::new(8, 2048);
        assert_eq!(p.hand_out(&mut b, 0, None), 4);
        assert!(p.is_empty());
        let got: Vec<(usize, u16)> = (0..4)
            .map(|i| (b.packet(i).len(), b.addr(i).port()))
            .collect();
        assert_eq!(got, [(300, 7), (0, 8), (10, 9), (10, 9)]);
    }

    #[test]
    fn a_segment_size_above_the_message_is_one_datagram() {
        let mut p = pending(&[(1000, 65535, 7)]);
        let mut b = PacketBatch::new(4, 2048);
        assert_eq!(p.hand_out(&mut b, 0, None), 1);
        assert_eq!(b.packet(0).len(), 1000);
        assert!(p.is_empty());
    }

    #[test]
    fn a_message_as_long_as_its_buffer_splits_to_the_end() {
        let mut p = pending(&[(COALESCED_BYTES, 1400, 7)]);
        let mut b = PacketBatch::new(64, 2048);
        let n = p.hand_out(&mut b, 0, None);
        assert_eq!(n, COALESCED_BYTES.div_ceil(1400));
        assert!(p.is_empty());
        let total: usize = (0..n).map(|i| b.packet(i).len()).sum();
        assert_eq!(total, COALESCED_BYTES);
        assert_eq!(b.packet(n - 1).len(), COALESCED_BYTES % 1400);
    }

    #[test]
    fn oversized_truncated_and_empty_datagrams_leave_empty_slots() {
        let mut p = pending(&[(6000, 3000, 1), (0, 0, 2), (10, 10, 3)]);
        p.msgs[2].truncated = true;
        let mut b = PacketBatch::new(8, 2048);
        // Held back once for bigger slots, then dropped.
        assert_eq!(p.hand_out(&mut b, 0, None), 0);
        assert_eq!(p.oversize, Some(3000));
        assert!(!p.is_empty());
        assert_eq!(p.hand_out(&mut b, 0, None), 4);
        let lens: Vec<usize> = (0..4).map(|i| b.packet(i).len()).collect();
        assert_eq!(lens, [0, 0, 0, 0]);
        let ports: Vec<u16> = (0..4).map(|i| b.addr(i).port()).collect();
        assert_eq!(ports, [1, 1, 2, 3]);
    }

    #[test]
    fn a_datagram_held_back_goes_whole_into_bigger_slots() {
        let mut p = pending(&[(300, 300, 1), (6000, 3000, 2), (10, 10, 3)]);
        let mut small = PacketBatch::new(8, 2048);
        assert_eq!(p.hand_out(&mut small, 0, None), 1);
        assert_eq!(small.packet(0).len(), 300);
        assert_eq!(p.oversize, Some(3000));
        let mut big = PacketBatch::new(8, 4096);
        assert_eq!(p.hand_out(&mut big, 0, None), 3);
        let lens: Vec<usize> = (0..3).map(|i| big.packet(i).len()).collect();
        assert_eq!(lens, [3000, 3000, 10]);
        // Byte j of message 1 is j ^ its port: the second one starts at 3000.
        assert_eq!(big.packet(1)[0], (3000usize as u8) ^ 2);
        assert!(p.is_empty());
    }
}
