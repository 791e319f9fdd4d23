//! Sending with UDP segmentation offload (`UDP_SEGMENT`).
//!
//! Runs of datagrams to one destination that share a length (the last may
//! be shorter) leave as one message whose iovecs point at the batch slots;
//! the kernel cuts it into datagrams again, far below us, so the stack is
//! walked once per run instead of once per datagram. Nothing is copied.
//!
//! The kernel may refuse: no `UDP_SEGMENT` at all (seen at bind), or `EIO`
//! (a device without checksum offload) / `EINVAL` (some IPv6 setups, UDP
//! checksums off) on a coalesced send. Then GSO is switched off for the
//! socket and the rest of the batch goes again one datagram per message.
//! `EMSGSIZE` on a coalesced send means its segments exceed the path MTU;
//! sent one by one they would be fragmented instead, so that message alone
//! is sent again without GSO.

use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use braid_core::batch::{LocalAddr, PacketBatch};

use super::fd::SocketFd;
use super::pktinfo::{self, SendCmsgBuf};
use crate::poll::{self, Interest};
use crate::sockaddr::{encode_addr, reachable};

/// How long [`UdpSocket::send_batch`](super::UdpSocket::send_batch) waits for a full send buffer to drain
/// before it drops the rest of the batch.
const SEND_WAIT: Duration = Duration::from_millis(100);

/// The kernel's limit on segments per GSO message (UDP_MAX_SEGMENTS).
pub(super) const MAX_SEGMENTS: usize = 64;

/// Payload bytes per GSO message: under the 65507 an IPv4 UDP datagram may
/// carry, with room to spare for IPv6 extension headers.
pub(super) const MAX_MESSAGE_BYTES: usize = 65_000;

// A message of two or more datagrams has segment + another <= max_bytes,
// so its segment size fits the u16 of UDP_SEGMENT (see build_messages).
const _: () = assert!(MAX_MESSAGE_BYTES <= u16::MAX as usize);

/// One datagram to send: the batch slot holding its bytes, where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Datagram {
    pub slot: usize,
    pub addr: SocketAddr,
    pub len: usize,
    /// Where it leaves from (`LocalAddr::NONE`: the routing table picks).
    pub local: LocalAddr,
}

/// Datagrams `first..first + count` (indices into the datagram list) sent
/// as one message; with `count > 1` the kernel splits it every `segment`
/// bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Group {
    pub first: usize,
    pub count: usize,
    pub segment: usize,
}

/// What one GSO message may hold.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub max_segments: usize,
    pub max_bytes: usize,
}

/// The limits with GSO on.
pub(super) const GSO: Limits = Limits {
    max_segments: MAX_SEGMENTS,
    max_bytes: MAX_MESSAGE_BYTES,
};

/// The limits with GSO off: one datagram per message.
pub(super) const SINGLE: Limits = Limits {
    max_segments: 1,
    max_bytes: 0,
};

/// Appends the datagrams of `batch` that go out on `line` (all when
/// `None`) to `out`, in sending order: the slots in order, then the extra
/// copies in the order they were added. Empty slots are skipped.
pub(super) fn collect_datagrams(batch: &PacketBatch, line: Option<u16>, out: &mut Vec<Datagram>) {
    let primaries = (0..batch.len())
        .filter(|&i| line.is_none_or(|l| batch.line(i) == l))
        .map(|i| (i, batch.addr(i), batch.local(i)));
    let copies = batch
        .copies()
        .iter()
        .filter(|c| line.is_none_or(|l| c.line == l))
        .map(|c| (c.slot, c.addr, c.local));
    for (slot, addr, local) in primaries.chain(copies) {
        let len = batch.packet(slot).len();
        if len > 0 {
            out.push(Datagram {
                slot,
                addr,
                len,
                local,
            });
        }
    }
}

/// Splits `datagrams[from..]` into messages, appended to `out`.
///
/// A message is a run of consecutive datagrams to one address, from one
/// local address, where all have the length of the first, except that a shorter one may end it
/// (that is how the kernel cuts a GSO payload). A longer datagram, another
/// address, or reaching a limit starts the next message; a datagram never
/// moves past another, so order per destination holds.
pub(super) fn plan_groups(
    datagrams: &[Datagram],
    from: usize,
    limits: Limits,
    out: &mut Vec<Group>,
) {
    let mut current: Option<(Group, usize, SocketAddr, bool)> = None;
    for (i, d) in datagrams.iter().enumerate().skip(from) {
        if let Some((g, bytes, addr, closed)) = &mut current {
            // bytes <= max_bytes, d.len <= a slot: the sum cannot overflow.
            let fits = !*closed
                && *addr == d.addr
                && datagrams[g.first].local == d.local
                && d.len <= g.segment
                && g.count < limits.max_segments
                && *bytes + d.len <= limits.max_bytes;
            if fits {
                g.count += 1;
                *bytes += d.len;
                *closed = d.len < g.segment;
                continue;
            }
            out.push(*g);
        }
        let group = Group {
            first: i,
            count: 1,
            segment: d.len,
        };
        current = Some((group, d.len, d.addr, false));
    }
    if let Some((g, ..)) = current {
        out.push(g);
    }
}

/// The arrays one `sendmmsg` call points the kernel at.
///
/// The pointers in `hdrs` are only meaningful during the call that set
/// them: every send rebuilds the headers it passes.
#[derive(Debug, Default)]
pub(super) struct TxScratch {
    datagrams: Vec<Datagram>,
    groups: Vec<Group>,
    /// One per message (group).
    hdrs: Vec<libc::mmsghdr>,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<SendCmsgBuf>,
    /// One per datagram: a message's iovecs are its group's datagrams.
    iovs: Vec<libc::iovec>,
}

// SAFETY: the raw pointers inside `hdrs`/`iovs` are never dereferenced
// outside the `sendmmsg` call that set them (each send rewrites them
// first), so moving the arrays to another thread is sound; access is
// serialised by the Mutex around the scratch.
unsafe impl Send for TxScratch {}

impl TxScratch {
    /// Grows every array to hold `n` datagrams (and so up to `n` messages);
    /// allocates only the first time a batch this large is seen.
    fn reserve(&mut self, n: usize) {
        self.datagrams.clear();
        self.groups.clear();
        self.datagrams.reserve(n);
        self.groups.reserve(n);
        if self.hdrs.len() >= n {
            return;
        }
        // SAFETY (for the three zeroed() calls): mmsghdr, iovec and
        // sockaddr_storage are plain C structs for which all-zero bytes
        // (null pointers, zero lengths) are valid.
        self.hdrs.resize_with(n, || unsafe { mem::zeroed() });
        self.iovs.resize_with(n, || unsafe { mem::zeroed() });
        self.addrs.resize_with(n, || unsafe { mem::zeroed() });
        self.cmsgs.resize(n, [0; 8]);
    }

    /// Fills message headers `from..` for groups `from..`.
    fn build_messages(&mut self, batch: &PacketBatch, ipv6: bool, from: usize) {
        for k in from..self.groups.len() {
            let g = self.groups[k];
            for j in g.first..g.first + g.count {
                let pkt = batch.packet(self.datagrams[j].slot);
                self.iovs[j] = libc::iovec {
                    // sendmmsg only reads through this pointer.
                    iov_base: pkt.as_ptr() as *mut libc::c_void,
                    iov_len: pkt.len(),
                };
            }
            let namelen = encode_addr(self.datagrams[g.first].addr, ipv6, &mut self.addrs[k])
                .expect("unreachable destinations were left out of the plan");
            let iov: *mut libc::iovec = &mut self.iovs[g.first];
            let name: *mut libc::sockaddr_storage = &mut self.addrs[k];
            let h = &mut self.hdrs[k];
            h.msg_len = 0;
            h.msg_hdr.msg_name = name.cast();
            h.msg_hdr.msg_namelen = namelen;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = crate::sys::kernel_int(g.count);
            h.msg_hdr.msg_flags = 0;
            // Exact: with two or more datagrams the segment is below
            // MAX_MESSAGE_BYTES, itself asserted to fit a u16.
            let segment = (g.count > 1).then_some(g.segment as u16);
            let local = self.datagrams[g.first].local;
            pktinfo::set_send_control(&mut h.msg_hdr, &mut self.cmsgs[k], segment, local, ipv6);
        }
    }

    /// Message `k` again, leaving from the routing table's pick: its
    /// local address is not ours any more.
    fn without_local(&mut self, batch: &PacketBatch, ipv6: bool, k: usize) -> Option<IpAddr> {
        let g = self.groups[k];
        let gone = self.datagrams[g.first].local.ip;
        for d in &mut self.datagrams[g.first..g.first + g.count] {
            d.local = LocalAddr::NONE;
        }
        let rest = self.groups.split_off(k + 1);
        self.groups.truncate(k);
        self.groups.push(g);
        self.build_messages(batch, ipv6, k);
        self.groups.extend(rest);
        gone
    }

    /// Datagrams in messages `from..to`.
    fn datagrams_in(&self, from: usize, to: usize) -> usize {
        self.groups[from..to].iter().map(|g| g.count).sum()
    }
}

impl SocketFd {
    /// Sends `batch` (only line `line`'s datagrams, if given) with the
    /// scratch `s`; see [`UdpSocket::send_batch`](super::UdpSocket::send_batch).
    pub(super) fn send_filtered(
        &self,
        s: &mut TxScratch,
        batch: &PacketBatch,
        line: Option<u16>,
    ) -> io::Result<usize> {
        s.reserve(batch.len() + batch.copies().len());
        collect_datagrams(batch, line, &mut s.datagrams);
        let before = s.datagrams.len();
        s.datagrams.retain(|d| reachable(d.addr, self.ipv6));
        self.count_dropped(before - s.datagrams.len());
        let limits = if self.gso_enabled() { GSO } else { SINGLE };
        plan_groups(&s.datagrams, 0, limits, &mut s.groups);
        s.build_messages(batch, self.ipv6, 0);

        let mut pos = 0;
        let mut sent = 0;
        let mut deadline: Option<Instant> = None;
        while pos < s.groups.len() {
            let count = s.groups.len();
            // SAFETY: headers pos..count point at live iovecs, sockaddrs and
            // control buffers in `s`, and the iovecs at packets of `batch`,
            // borrowed for the duration of the call; the kernel only reads
            // them.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    s.hdrs[pos..].as_mut_ptr(),
                    (count - pos) as libc::c_uint,
                    crate::sys::kernel_int(libc::MSG_DONTWAIT),
                )
            };
            match crate::sys::cvt(r) {
                // n <= count - pos: sendmmsg never reports more messages
                // than it was given.
                Ok(n) => {
                    sent += s.datagrams_in(pos, pos + n as usize);
                    pos += n as usize;
                }
                // sendmmsg reports an error only when the first message it
                // tried failed, so `pos` is the culprit.
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN | libc::ENOBUFS) => {
                        let d = *deadline.get_or_insert_with(|| Instant::now() + SEND_WAIT);
                        let left = d.saturating_duration_since(Instant::now());
                        let ready = !left.is_zero()
                            && poll::wait(
                                &[(self.fd.as_raw_fd(), Interest::WRITABLE)],
                                Some(left),
                            )?
                            .is_writable(0);
                        if !ready {
                            self.count_dropped(s.datagrams_in(pos, count));
                            break;
                        }
                    }
                    Some(libc::EBADF | libc::ENOTSOCK | libc::EFAULT) => return Err(e),
                    // The source it was to leave from is no longer ours
                    // (removed, or its interface went): it leaves from
                    // the routing table's pick, now and from then on.
                    Some(libc::EINVAL | libc::EADDRNOTAVAIL | libc::ENETUNREACH)
                        if pktinfo::usable(s.datagrams[s.groups[pos].first].local, self.ipv6) =>
                    {
                        if let Some(ip) = s.without_local(batch, self.ipv6, pos) {
                            self.refuse_source(ip);
                        }
                    }
                    Some(libc::EIO | libc::EINVAL) if s.groups[pos].count > 1 => {
                        // The kernel will not segment for us: from here on,
                        // one datagram per message.
                        self.gso.store(false, Ordering::Relaxed);
                        let first = s.groups[pos].first;
                        s.groups.truncate(pos);
                        plan_groups(&s.datagrams, first, SINGLE, &mut s.groups);
                        s.build_messages(batch, self.ipv6, pos);
                    }
                    Some(libc::EMSGSIZE) if s.groups[pos].count > 1 => {
                        // Segments above the path MTU: the kernel would
                        // fragment them sent one by one, but not a GSO
                        // message. Only this message goes singly.
                        let g = s.groups[pos];
                        let end = g.first + g.count;
                        s.groups.truncate(pos);
                        plan_groups(&s.datagrams[..end], g.first, SINGLE, &mut s.groups);
                        plan_groups(&s.datagrams, end, limits, &mut s.groups);
                        s.build_messages(batch, self.ipv6, pos);
                    }
                    _ => {
                        self.count_dropped(s.groups[pos].count);
                        pos += 1;
                    }
                },
            }
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dg(addr: &str, len: usize) -> Datagram {
        Datagram {
            slot: 0,
            addr: addr.parse().unwrap(),
            len,
            local: LocalAddr::NONE,
        }
    }

    #[test]
    fn another_local_address_splits() {
        let from = |ip: &str, len| Datagram {
            local: LocalAddr {
                ip: Some(ip.parse().unwrap()),
                ifindex: 0,
            },
            ..dg(A, len)
        };
        let list = [
            from("198.18.0.20", 1000),
            from("198.18.0.20", 1000),
            from("198.18.0.21", 1000),
            dg(A, 1000),
        ];
        assert_eq!(plan(&list, GSO), [(0, 2, 1000), (2, 1, 1000), (3, 1, 1000)]);
    }

    /// (first, count, segment) of each planned message.
    fn plan(list: &[Datagram], limits: Limits) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        plan_groups(list, 0, limits, &mut out);
        out.iter().map(|g| (g.first, g.count, g.segment)).collect()
    }

    const A: &str = "198.18.0.1:51820";
    const B: &str = "198.18.0.2:51820";

    #[test]
    fn equal_lengths_share_a_message() {
        let list = [dg(A, 1000), dg(A, 1000), dg(A, 1000)];
        assert_eq!(plan(&list, GSO), [(0, 3, 1000)]);
    }

    #[test]
    fn a_shorter_datagram_ends_the_message() {
        let list = [
            dg(A, 1000),
            dg(A, 1000),
            dg(A, 400),
            dg(A, 400),
            dg(A, 1000),
        ];
        assert_eq!(plan(&list, GSO), [(0, 3, 1000), (3, 1, 400), (4, 1, 1000)]);
        // ... even when a still shorter one follows.
        let list = [dg(A, 1000), dg(A, 400), dg(A, 300)];
        assert_eq!(plan(&list, GSO), [(0, 2, 1000), (2, 1, 300)]);
    }

    #[test]
    fn a_longer_datagram_starts_a_new_message() {
        let list = [dg(A, 400), dg(A, 400), dg(A, 1000), dg(A, 1000)];
        assert_eq!(plan(&list, GSO), [(0, 2, 400), (2, 2, 1000)]);
    }

    #[test]
    fn another_destination_splits() {
        let list = [dg(A, 1000), dg(B, 1000), dg(B, 1000), dg(A, 1000)];
        assert_eq!(plan(&list, GSO), [(0, 1, 1000), (1, 2, 1000), (3, 1, 1000)]);
        // The same IP on another port is another destination.
        let list = [dg(A, 100), dg("198.18.0.1:51821", 100)];
        assert_eq!(plan(&list, GSO), [(0, 1, 100), (1, 1, 100)]);
    }

    #[test]
    fn at_most_64_segments() {
        let list = vec![dg(A, 100); 150];
        assert_eq!(
            plan(&list, GSO),
            [(0, 64, 100), (64, 64, 100), (128, 22, 100)]
        );
    }

    #[test]
    fn at_most_65000_bytes() {
        // 43 * 1500 = 64500; a 44th would pass the cap.
        let list = vec![dg(A, 1500); 50];
        assert_eq!(plan(&list, GSO), [(0, 43, 1500), (43, 7, 1500)]);
        // A single oversized datagram still gets a message (and fails alone).
        let list = [dg(A, 66_000), dg(A, 66_000)];
        assert_eq!(plan(&list, GSO), [(0, 1, 66_000), (1, 1, 66_000)]);
    }

    #[test]
    fn without_gso_every_datagram_is_a_message() {
        let list = [dg(A, 100), dg(A, 100), dg(A, 50)];
        assert_eq!(plan(&list, SINGLE), [(0, 1, 100), (1, 1, 100), (2, 1, 50)]);
    }

    #[test]
    fn replanning_from_the_middle_appends() {
        let list = [dg(A, 100), dg(A, 100), dg(A, 100)];
        let mut out = vec![Group {
            first: 0,
            count: 1,
            segment: 100,
        }];
        plan_groups(&list, 1, GSO, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!((out[1].first, out[1].count), (1, 2));
    }

    #[test]
    fn datagrams_follow_lines_and_copies() {
        let a: SocketAddr = A.parse().unwrap();
        let b: SocketAddr = B.parse().unwrap();
        let mut batch = PacketBatch::new(4, 2048);
        for (i, line) in [0u16, 1, 0, 1].into_iter().enumerate() {
            batch.push_with(0, a, |buf| {
                buf[0] = i as u8;
                100
            });
            batch.set_line(i, line);
        }
        batch.consume(2);
        assert!(batch.add_copy(0, 1, b));
        assert!(batch.add_copy(1, 1, b));
        assert!(batch.add_copy(3, 0, b));

        let collect = |line| {
            let mut out = Vec::new();
            collect_datagrams(&batch, line, &mut out);
            out.iter().map(|d| (d.slot, d.addr)).collect::<Vec<_>>()
        };
        assert_eq!(collect(Some(0)), [(0, a), (3, b)]);
        assert_eq!(collect(Some(1)), [(1, a), (3, a), (0, b), (1, b)]);
        assert_eq!(
            collect(None),
            [(0, a), (1, a), (3, a), (0, b), (1, b), (3, b)]
        );

        // Line 1: the primaries to `a` form one message, the copies to `b`
        // another.
        let mut list = Vec::new();
        collect_datagrams(&batch, Some(1), &mut list);
        assert_eq!(plan(&list, GSO), [(0, 2, 100), (2, 2, 100)]);
    }
}
