//! Reading a TSO super-packet straight into its segments' slots.
//!
//! A super-packet of 64 KiB becomes ~45 segments, each the super-packet's
//! headers (fixed up) and its slice of the payload. Read whole into a
//! scratch buffer, every payload byte was then copied into a slot. Here
//! the `readv` itself cuts it: the first slot's iovec takes the headers
//! and one segment's payload, each further slot's iovec starts where its
//! segment's payload goes (after room for the headers), so only the
//! headers are written afterwards ([`Tso::place_segment`]). Where the
//! cuts go is taken from the last super-packet (a TCP flow keeps its
//! header length and segment size); a packet that does not match (a plain
//! packet longer than the first cut, other headers, another segment size)
//! is made whole in the scratch buffer and handled as before.

use std::io;
use std::sync::atomic::Ordering;

use braid_core::batch::{PacketBatch, HEADROOM};

use super::fd::{Step, TunFd, NO_ADDR};
use super::offload_io::{iovec_mut, Pending, ReadScratch, MAX_READ};
use crate::offload::split::Tso;
use crate::offload::{complete_checksum, VnetHdr, F_NEEDS_CSUM, GSO_NONE, VNET_HDR_LEN};

/// Headers longer than this (IPv6 extension headers, say) are not
/// foreseen: such super-packets are split by copying.
const MAX_HEADER: usize = 128;

/// Where a read cuts the slots: headers of `hdr_len` bytes, then
/// `segment` payload bytes per slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Guess {
    hdr_len: usize,
    segment: usize,
}

impl Guess {
    /// The cuts for super-packets like `tso`.
    pub(super) fn of(tso: &Tso) -> Option<Guess> {
        (tso.header_len() <= MAX_HEADER && tso.segment_size() > 0).then(|| Guess {
            hdr_len: tso.header_len(),
            segment: tso.segment_size(),
        })
    }

    /// Whether a segment fits slots with room for `max` bytes.
    pub(super) fn fits(&self, max: usize) -> bool {
        self.hdr_len + self.segment <= max
    }

    /// Where the part of slot `j` (counted from the read's first slot) that
    /// the read fills starts within the slot, and how long it is.
    fn cut(&self, j: usize) -> (usize, usize) {
        if j == 0 {
            (HEADROOM, self.hdr_len + self.segment)
        } else {
            (HEADROOM + self.hdr_len, self.segment)
        }
    }
}

/// What one scattered read did.
pub(super) enum Scattered {
    /// Delivered or dropped a packet: read on.
    Again,
    /// The TUN had nothing.
    Empty,
    /// Stop reading: a packet or segments wait (in the scratch's
    /// `oversize` or `pending`), for bigger slots if this says how big.
    Stop(Option<usize>),
}

impl TunFd {
    /// One `readv` cut by `g` into slots `*n..` of `batch` (at least two),
    /// then the scratch buffer; delivers what it read and moves `*n` on.
    pub(super) fn read_scattered(
        &self,
        rx: &mut ReadScratch,
        batch: &mut PacketBatch,
        n: &mut usize,
        max: usize,
        g: Guess,
    ) -> io::Result<Scattered> {
        let k = batch.capacity() - *n;
        let stride = batch.stride();
        rx.iovs.clear();
        rx.iovs.push(iovec_mut(&mut rx.vnet));
        let arena = batch.arena_mut().as_mut_ptr();
        for j in 0..k {
            let (from, len) = g.cut(j);
            rx.iovs.push(libc::iovec {
                // SAFETY: slot *n + j < capacity spans `stride` bytes from
                // (*n + j) * stride, and from + len <= HEADROOM + max <=
                // stride (the caller checked `g.fits(max)`).
                iov_base: unsafe { arena.add((*n + j) * stride + from) }.cast(),
                iov_len: len,
            });
        }
        rx.iovs.push(iovec_mut(&mut rx.buf[..]));
        // The kernel returns at most the iovecs' total.
        let len = match self.readv(&rx.iovs)? {
            Step::Done(len) if len >= VNET_HDR_LEN => len - VNET_HDR_LEN,
            Step::Done(_) | Step::Skip => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Ok(Scattered::Again);
            }
            Step::WouldBlock => return Ok(Scattered::Empty),
        };
        if len > MAX_READ {
            // Longer than any packet a TUN gives (the iovecs hold more):
            // nothing below would have room to make it whole.
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(Scattered::Again);
        }
        let vnet = VnetHdr::decode(&rx.vnet);
        let first = g.hdr_len + g.segment;
        let in_slots_cap = g.hdr_len + k * g.segment;
        if vnet.gso_type == GSO_NONE && len <= first.min(max) {
            // A plain packet, whole in the first slot.
            let pkt = &mut batch.slot_buf_mut(*n)[HEADROOM..HEADROOM + len];
            if vnet.flags & F_NEEDS_CSUM != 0
                && !complete_checksum(pkt, vnet.csum_start, vnet.csum_offset)
            {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Ok(Scattered::Again);
            }
            batch.set_packet(*n, HEADROOM, len, NO_ADDR);
            *n += 1;
            return Ok(Scattered::Again);
        }
        if vnet.gso_type != GSO_NONE {
            let head = &batch.slot_buf(*n)[HEADROOM..HEADROOM + first];
            match Tso::parse_head(head, len, &vnet) {
                Ok(tso)
                    if tso.header_len() == g.hdr_len
                        && tso.segment_size() == g.segment
                        && tso.max_segment_len() <= max =>
                {
                    return Ok(self.place(rx, batch, n, max, tso, len, in_slots_cap));
                }
                _ => {}
            }
        }
        // Not as foreseen: whole in the scratch buffer, then as before.
        let in_slots = len.min(in_slots_cap);
        rx.buf.copy_within(..len - in_slots, in_slots);
        let mut at = 0;
        for j in 0..k {
            if at >= in_slots {
                break;
            }
            let (from, cut) = g.cut(j);
            let take = cut.min(in_slots - at);
            rx.buf[at..at + take].copy_from_slice(&batch.slot_buf(*n + j)[from..from + take]);
            at += take;
        }
        Ok(self.take_whole(rx, batch, n, max, len, vnet))
    }

    /// A super-packet that was read as `g` foresaw: the headers go in
    /// front of every segment's payload, in place; segments past the
    /// batch's slots (in the scratch buffer) wait in `rx.pending`.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        rx: &mut ReadScratch,
        batch: &mut PacketBatch,
        n: &mut usize,
        max: usize,
        tso: Tso,
        len: usize,
        in_slots_cap: usize,
    ) -> Scattered {
        let h = tso.header_len();
        let segments = tso.segments();
        self.count_super_packet(rx, &tso);
        let mut header = [0u8; MAX_HEADER];
        header[..h].copy_from_slice(&batch.slot_buf(*n)[HEADROOM..HEADROOM + h]);
        let here = segments.min(batch.capacity() - *n);
        for i in 0..here {
            let out = &mut batch.slot_buf_mut(*n + i)[HEADROOM..HEADROOM + max];
            let seg_len = tso.place_segment(&header[..h], i, out);
            batch.set_packet(*n + i, HEADROOM, seg_len, NO_ADDR);
        }
        *n += here;
        if here == segments {
            return Scattered::Again;
        }
        // The rest ran on into the scratch buffer: laid out there as in
        // the super-packet (headers first), for `deliver` to split.
        rx.buf.copy_within(..len - in_slots_cap, in_slots_cap);
        rx.buf[..h].copy_from_slice(&header[..h]);
        rx.pending = Some(Pending {
            tso,
            len,
            next: here,
        });
        Scattered::Stop(None)
    }

    /// A packet of `len` bytes whole at the start of `rx.buf`: what a
    /// read into the scratch buffer did with it.
    fn take_whole(
        &self,
        rx: &mut ReadScratch,
        batch: &mut PacketBatch,
        n: &mut usize,
        max: usize,
        len: usize,
        vnet: VnetHdr,
    ) -> Scattered {
        if len > MAX_READ {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Scattered::Again;
        }
        if vnet.gso_type == GSO_NONE {
            if len > max {
                // Waits, whole, for a batch with bigger slots.
                rx.oversize = Some((len, vnet));
                return Scattered::Stop(Some(len));
            }
            let pkt = &mut batch.slot_buf_mut(*n)[HEADROOM..HEADROOM + len];
            pkt.copy_from_slice(&rx.buf[..len]);
            if vnet.flags & F_NEEDS_CSUM != 0
                && !complete_checksum(pkt, vnet.csum_start, vnet.csum_offset)
            {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Scattered::Again;
            }
            batch.set_packet(*n, HEADROOM, len, NO_ADDR);
            *n += 1;
            return Scattered::Again;
        }
        let Ok(tso) = Tso::parse(&rx.buf[..len], &vnet) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Scattered::Again;
        };
        self.count_super_packet(rx, &tso);
        let mut p = Pending { tso, len, next: 0 };
        if tso.max_segment_len() > max {
            // Segments longer than the slots (an MTU raised just now): the
            // super-packet waits for a batch with bigger ones.
            rx.pending = Some(p);
            return Scattered::Stop(Some(tso.max_segment_len()));
        }
        self.deliver(batch, n, max, &rx.buf, &mut p);
        if p.next < p.tso.segments() {
            rx.pending = Some(p);
            return Scattered::Stop(None);
        }
        Scattered::Again
    }

    /// Counts a super-packet read and learns from it.
    fn count_super_packet(&self, rx: &mut ReadScratch, tso: &Tso) {
        rx.reserve = rx.reserve.max(tso.segments());
        rx.guess = Guess::of(tso);
        self.stats
            .super_packets_read
            .fetch_add(1, Ordering::Relaxed);
        self.stats
            .segments_read
            .fetch_add(tso.segments() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    //! The offload read against a `SOCK_SEQPACKET` socket pair, which,
    //! like a TUN, hands one whole message to each `readv`: what the
    //! scattered reads put in the batch must equal the copying split.

    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::atomic::AtomicU64;

    use super::*;
    use crate::offload::tests::{payload, split_all, super_packet, tcp_packet, Spec};
    use crate::offload::{TCP_ACK, TCP_PSH};
    use crate::tun::fd::{Counters, TunRead};
    use braid_core::batch::TAILROOM;

    fn pair() -> (TunFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors into `fds`.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0, "socketpair: {}", io::Error::last_os_error());
        // SAFETY: both descriptors are new and owned by nothing else.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let tun = TunFd {
            fd: a,
            dropped: AtomicU64::new(0),
            stats: Counters::default(),
        };
        (tun, b)
    }

    /// Queues one "TUN packet": the vnet header, then `pkt`.
    fn send(fd: &OwnedFd, vnet: &VnetHdr, pkt: &[u8]) {
        let mut msg = vnet.encode().to_vec();
        msg.extend_from_slice(pkt);
        // SAFETY: `msg` is a live buffer of `msg.len()` bytes.
        let r = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        assert_eq!(
            r,
            msg.len() as isize,
            "send: {}",
            io::Error::last_os_error()
        );
    }

    const PLAIN: VnetHdr = VnetHdr {
        flags: 0,
        gso_type: GSO_NONE,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
    };

    /// What the TUN would give for `sent` (plain packets as they are,
    /// super-packets split by copying).
    fn expected(sent: &[(VnetHdr, Vec<u8>)]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (vnet, pkt) in sent {
            if vnet.gso_type == GSO_NONE {
                out.push(pkt.clone());
            } else {
                out.extend(split_all(vnet, pkt));
            }
        }
        out
    }

    /// Sends `sent`, reads until the socket is empty and nothing waits,
    /// and checks the packets; returns the reads' results.
    fn round(
        tun: &TunFd,
        peer: &OwnedFd,
        rx: &mut ReadScratch,
        batch: &mut PacketBatch,
        sent: &[(VnetHdr, Vec<u8>)],
    ) -> Vec<TunRead> {
        for (vnet, pkt) in sent {
            send(peer, vnet, pkt);
        }
        let mut got = Vec::new();
        let mut reads = Vec::new();
        for _ in 0..100 {
            let r = tun.read_batch_offload(rx, batch).unwrap();
            reads.push(r);
            for i in 0..batch.len() {
                got.push(batch.packet(i).to_vec());
            }
            if r.emptied && !rx.has_pending() {
                break;
            }
        }
        let want = expected(sent);
        assert_eq!(got.len(), want.len(), "packet count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g == w,
                "packet {i} differs ({} and {} bytes)",
                g.len(),
                w.len()
            );
        }
        reads
    }

    fn spec(ipv6: bool) -> Spec {
        Spec {
            ipv6,
            flags: TCP_ACK | TCP_PSH,
            ..Spec::default()
        }
    }

    /// Whether the last read went into the slots as foreseen: the scratch
    /// buffer, marked before, was not written.
    fn mark(rx: &mut ReadScratch) {
        rx.buf[..64].fill(0xee);
    }
    fn untouched(rx: &ReadScratch) -> bool {
        rx.buf[..64].iter().all(|&b| b == 0xee)
    }

    #[test]
    fn super_packets_like_the_last_land_in_the_slots() {
        for ipv6 in [false, true] {
            let (tun, peer) = pair();
            let mut rx = ReadScratch::new(true);
            let mut batch = PacketBatch::new(64, 2048);
            let s = spec(ipv6);
            // The first one teaches the shape (read whole, split by
            // copying).
            round(
                &tun,
                &peer,
                &mut rx,
                &mut batch,
                &[super_packet(&s, &payload(20_000), 1368)],
            );
            let h = if ipv6 { 40 } else { 20 } + 32;
            assert_eq!(
                rx.guess,
                Some(Guess {
                    hdr_len: h,
                    segment: 1368
                })
            );
            // Then: a short last segment, a full one, a single segment
            // shorter than one, each straight into the slots.
            for data in [10_001, 8 * 1368, 700] {
                mark(&mut rx);
                let sp = super_packet(&s, &payload(data), 1368);
                round(&tun, &peer, &mut rx, &mut batch, &[sp]);
                assert!(
                    untouched(&rx),
                    "ipv6 {ipv6}, {data} B: not read into the slots"
                );
            }
            // Small plain packets (ACKs) land whole in the first slot.
            mark(&mut rx);
            let ack = (PLAIN, tcp_packet(&s, &[]));
            round(&tun, &peer, &mut rx, &mut batch, &[ack.clone(), ack]);
            assert!(untouched(&rx));
            assert_eq!(tun.dropped.load(Ordering::Relaxed), 0);
            assert_eq!(tun.stats.super_packets_read.load(Ordering::Relaxed), 4);
        }
    }

    #[test]
    fn what_the_guess_did_not_foresee_is_split_by_copying() {
        let (tun, peer) = pair();
        let mut rx = ReadScratch::new(true);
        let mut batch = PacketBatch::new(64, 2048);
        let s = spec(false);
        round(
            &tun,
            &peer,
            &mut rx,
            &mut batch,
            &[super_packet(&s, &payload(20_000), 1368)],
        );
        let taught = rx.guess;
        let no_options = Spec {
            options: Vec::new(),
            ..spec(false)
        };
        let unforeseen = [
            // Another segment size.
            super_packet(&s, &payload(9_000), 1000),
            // Other headers (no TCP options): 20 bytes shorter.
            super_packet(&no_options, &payload(9_000), 1368),
            // IPv6 after IPv4.
            super_packet(&spec(true), &payload(9_000), 1368),
            // A plain packet longer than the first slot's cut.
            (PLAIN, tcp_packet(&s, &payload(1_400))),
            // Not splittable (a UDP GSO type): dropped.
            (
                VnetHdr {
                    gso_type: 3,
                    ..super_packet(&s, &payload(3_000), 1368).0
                },
                super_packet(&s, &payload(3_000), 1368).1,
            ),
        ];
        for (k, sp) in unforeseen.iter().enumerate() {
            // Each with the IPv4 shape guessed again.
            rx.guess = taught;
            mark(&mut rx);
            let dropped = tun.dropped.load(Ordering::Relaxed);
            if k == 4 {
                send(&peer, &sp.0, &sp.1);
                let r = tun.read_batch_offload(&mut rx, &mut batch).unwrap();
                assert_eq!((r.packets, r.emptied), (0, true));
                assert_eq!(tun.dropped.load(Ordering::Relaxed), dropped + 1);
                continue;
            }
            round(&tun, &peer, &mut rx, &mut batch, std::slice::from_ref(sp));
            assert!(!untouched(&rx), "case {k} was not made whole");
            assert_eq!(tun.dropped.load(Ordering::Relaxed), dropped);
        }
        // The shape of the last super-packet read is guessed next.
        rx.guess = taught;
        round(
            &tun,
            &peer,
            &mut rx,
            &mut batch,
            &[super_packet(&spec(true), &payload(5_000), 1000)],
        );
        assert_eq!(
            rx.guess,
            Some(Guess {
                hdr_len: 72,
                segment: 1000
            })
        );
    }

    #[test]
    fn segments_past_the_last_slot_wait_for_the_next_batch() {
        let (tun, peer) = pair();
        let mut rx = ReadScratch::new(true);
        let mut batch = PacketBatch::new(8, 2048);
        let s = spec(false);
        round(
            &tun,
            &peer,
            &mut rx,
            &mut batch,
            &[super_packet(&s, &payload(5_000), 1368)],
        );
        // 30 segments into batches of 8: the first 8 into the slots, the
        // rest from the scratch buffer over three more reads.
        let sp = super_packet(&s, &payload(30 * 1368 - 5), 1368);
        let reads = round(&tun, &peer, &mut rx, &mut batch, &[sp]);
        // (A read that ends on a super-packet's last segments does not
        // look further: the next one finds the socket empty.)
        let counts: Vec<usize> = reads.iter().map(|r| r.packets).filter(|&n| n > 0).collect();
        assert_eq!(counts, [8, 8, 8, 6]);
        assert_eq!(tun.dropped.load(Ordering::Relaxed), 0);
        // A batch that has fewer slots left than the super-packet has
        // segments: a plain packet first, then the super-packet.
        let ack = (PLAIN, tcp_packet(&s, &[]));
        let sp = super_packet(&s, &payload(8 * 1368), 1368);
        round(&tun, &peer, &mut rx, &mut batch, &[ack, sp]);
    }

    #[test]
    fn a_plain_packet_longer_than_the_slots_waits_for_bigger_ones() {
        let (tun, peer) = pair();
        let mut rx = ReadScratch::new(true);
        let s = spec(false);
        // Slots that hold exactly one segment of the guessed shape.
        let tight = HEADROOM + 52 + 1368 + TAILROOM;
        let mut small = PacketBatch::new(16, tight);
        round(
            &tun,
            &peer,
            &mut rx,
            &mut small,
            &[super_packet(&s, &payload(5_000), 1368)],
        );
        assert!(rx.guess.is_some_and(|g| g.fits(52 + 1368)));
        let long = tcp_packet(&s, &payload(1_448));
        send(&peer, &PLAIN, &long);
        let r = tun.read_batch_offload(&mut rx, &mut small).unwrap();
        assert_eq!((r.packets, r.oversize), (0, Some(long.len())));
        let mut big = PacketBatch::new(16, 2048);
        let r = tun.read_batch_offload(&mut rx, &mut big).unwrap();
        assert_eq!(r.packets, 1);
        assert_eq!(big.packet(0), &long[..]);
    }
}
