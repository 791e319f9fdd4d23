//! The offload halves of [`Tun::read_batch`] and [`Tun::write_batch`]:
//! each read may bring a TSO super-packet to split into the batch, each
//! write sends the coalesced groups of the batch with one `writev` apiece.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use braid_core::batch::{PacketBatch, HEADROOM, TAILROOM};

use super::fd::{Step, TunFd, TunRead, NO_ADDR};
use crate::offload::coalesce::{write_gso_header, Planner, GSO_HEADER_MAX, MAX_MEMBERS};
use crate::offload::split::Tso;
use crate::offload::{complete_checksum, VnetHdr, F_NEEDS_CSUM, GSO_NONE, VNET_HDR_LEN};

/// Largest packet one offload read can return: a 64 KiB IPv4 super-packet,
/// or an IPv6 one whose 64 KiB payload follows a 40-byte header (plus slack).
const MAX_READ: usize = 65535 + 40 + 64;

/// The `virtio_net_hdr` of a packet that needs nothing from the kernel.
static PLAIN_VNET_HDR: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];

/// Read side of offload: the buffer a super-packet lands in, and what is
/// left of one that did not fit the last batch.
#[derive(Debug)]
pub(super) struct ReadScratch {
    vnet: [u8; VNET_HDR_LEN],
    /// [`MAX_READ`] bytes in offload mode, empty otherwise.
    buf: Vec<u8>,
    pending: Option<Pending>,
    /// A plain packet longer than the last batch's slots (an MTU raised
    /// just now), kept whole at the start of `buf` for the next call: its
    /// length and header.
    oversize: Option<(usize, VnetHdr)>,
    /// Most segments one super-packet has split into so far: another read
    /// only happens while the batch has that much room left, so a
    /// super-packet rarely has to wait in `pending`.
    reserve: usize,
}

/// A super-packet in [`ReadScratch::buf`] whose segments from `next` on
/// are still to be delivered.
#[derive(Debug)]
struct Pending {
    tso: Tso,
    len: usize,
    next: usize,
}

/// Write side of offload: the grouping of a batch and the arrays of one
/// `writev`.
#[derive(Debug)]
pub(super) struct WriteScratch {
    planner: Planner,
    iovs: Vec<libc::iovec>,
    header: [u8; GSO_HEADER_MAX],
}

// SAFETY: the pointers in `iovs` are only meaningful during the `writev`
// that follows their construction (every write rebuilds them) and are
// never dereferenced outside it; access is serialised by the Mutex.
unsafe impl Send for WriteScratch {}

impl ReadScratch {
    pub(super) fn new(offload: bool) -> ReadScratch {
        ReadScratch {
            vnet: [0; VNET_HDR_LEN],
            buf: if offload {
                vec![0; MAX_READ]
            } else {
                Vec::new()
            },
            pending: None,
            oversize: None,
            reserve: 1,
        }
    }

    pub(super) fn has_pending(&self) -> bool {
        self.pending.is_some() || self.oversize.is_some()
    }
}

impl WriteScratch {
    pub(super) fn new() -> WriteScratch {
        WriteScratch {
            planner: Planner::new(),
            iovs: Vec::new(),
            header: [0; GSO_HEADER_MAX],
        }
    }
}

impl TunFd {
    pub(super) fn read_batch_offload(
        &self,
        rx: &mut ReadScratch,
        batch: &mut PacketBatch,
    ) -> io::Result<TunRead> {
        batch.clear();
        // PacketBatch::new asserts stride > HEADROOM + TAILROOM.
        let max = batch.stride() - HEADROOM - TAILROOM;
        let capacity = batch.capacity();
        let mut n = 0;
        let mut emptied = false;
        let mut oversize = None;
        // What waited for bigger slots gets one more call: delivered if
        // they are big enough now, dropped if not.
        if let Some((len, vnet)) = rx.oversize.take() {
            if len <= max {
                let pkt = &mut batch.slot_buf_mut(n)[HEADROOM..HEADROOM + len];
                pkt.copy_from_slice(&rx.buf[..len]);
                if vnet.flags & F_NEEDS_CSUM != 0
                    && !complete_checksum(pkt, vnet.csum_start, vnet.csum_offset)
                {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                } else {
                    batch.set_packet(n, HEADROOM, len, NO_ADDR);
                    n += 1;
                }
            } else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(mut p) = rx.pending.take() {
            self.deliver(batch, &mut n, max, &rx.buf, &mut p);
            if p.next < p.tso.segments() {
                rx.pending = Some(p);
            }
        }
        // The counters below (`dropped`, `stats`) are u64s that fetch_add
        // one per packet: at a billion a second they last 584 years.
        while rx.pending.is_none() && n < capacity && (n == 0 || capacity - n >= rx.reserve) {
            // The packet goes straight into the slot; only what does not
            // fit there (a super-packet) spills into the scratch buffer.
            let spill = max.min(MAX_READ);
            let slot = &mut batch.slot_buf_mut(n)[HEADROOM..HEADROOM + max];
            let iovs = [
                iovec_mut(&mut rx.vnet),
                iovec_mut(slot),
                iovec_mut(&mut rx.buf[spill..]),
            ];
            // The kernel returns at most the iovecs' total, so `len` is at
            // most max + (MAX_READ - spill): what the checks below rely on.
            let len = match self.readv(&iovs) {
                Ok(Step::Done(len)) if len >= VNET_HDR_LEN => len - VNET_HDR_LEN,
                Ok(Step::Done(_)) | Ok(Step::Skip) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Ok(Step::WouldBlock) => {
                    emptied = true;
                    break;
                }
                Err(_) if n > 0 => break,
                Err(e) => return Err(e),
            };
            let vnet = VnetHdr::decode(&rx.vnet);
            if vnet.gso_type == GSO_NONE {
                if len > max {
                    // The slot holds its head, the scratch buffer (from
                    // `spill`, which is `max`) its tail: made whole there,
                    // it waits for a batch with bigger slots.
                    rx.buf[..max].copy_from_slice(&batch.slot_buf_mut(n)[HEADROOM..HEADROOM + max]);
                    rx.oversize = Some((len, vnet));
                    oversize = Some(len);
                    break;
                }
                let pkt = &mut batch.slot_buf_mut(n)[HEADROOM..HEADROOM + len];
                if vnet.flags & F_NEEDS_CSUM != 0
                    && !complete_checksum(pkt, vnet.csum_start, vnet.csum_offset)
                {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                batch.set_packet(n, HEADROOM, len, NO_ADDR);
                n += 1;
                continue;
            }
            // A super-packet: make it contiguous in the scratch buffer, then
            // write its segments into the slots from `n` on.
            if len > MAX_READ {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let head = len.min(max);
            rx.buf[..head].copy_from_slice(&batch.slot_buf_mut(n)[HEADROOM..HEADROOM + head]);
            let tso = match Tso::parse(&rx.buf[..len], &vnet) {
                Ok(tso) => tso,
                Err(_) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            rx.reserve = rx.reserve.max(tso.segments());
            self.stats
                .super_packets_read
                .fetch_add(1, Ordering::Relaxed);
            self.stats
                .segments_read
                .fetch_add(tso.segments() as u64, Ordering::Relaxed);
            let mut p = Pending { tso, len, next: 0 };
            if tso.max_segment_len() > max {
                // Segments longer than the slots (an MTU raised just now):
                // the super-packet waits for a batch with bigger ones.
                oversize = Some(tso.max_segment_len());
                rx.pending = Some(p);
                break;
            }
            self.deliver(batch, &mut n, max, &rx.buf, &mut p);
            if p.next < p.tso.segments() {
                rx.pending = Some(p);
            }
        }
        batch.set_len(n);
        Ok(TunRead {
            packets: n,
            emptied,
            oversize,
        })
    }

    /// Writes the remaining segments of `p` (in `buf`) into the slots from
    /// `*n` on, as many as fit; drops them all if a segment is longer than
    /// a slot.
    fn deliver(
        &self,
        batch: &mut PacketBatch,
        n: &mut usize,
        max: usize,
        buf: &[u8],
        p: &mut Pending,
    ) {
        if p.tso.max_segment_len() > max {
            // Its second chance (see `read_batch_offload`), or the caller
            // shrank the stride since the last call.
            // p.next <= segments(): it only counts segments written.
            let left = p.tso.segments() - p.next;
            self.dropped.fetch_add(left as u64, Ordering::Relaxed);
            p.next = p.tso.segments();
            return;
        }
        while p.next < p.tso.segments() && *n < batch.capacity() {
            let out = &mut batch.slot_buf_mut(*n)[HEADROOM..HEADROOM + max];
            let len = p.tso.write_segment(&buf[..p.len], p.next, out);
            batch.set_packet(*n, HEADROOM, len, NO_ADDR);
            *n += 1;
            p.next += 1;
        }
    }

    fn readv(&self, iovs: &[libc::iovec]) -> io::Result<Step> {
        loop {
            // SAFETY: every iovec was built by `iovec_mut` from a live,
            // exclusively borrowed buffer of its length that outlives this
            // call.
            let r = unsafe {
                libc::readv(
                    self.fd.as_raw_fd(),
                    iovs.as_ptr(),
                    iovs.len() as libc::c_int,
                )
            };
            return match crate::sys::cvt_size(r) {
                Ok(0) => Ok(Step::WouldBlock),
                Ok(len) => Ok(Step::Done(len)),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => Ok(Step::WouldBlock),
                    _ => Err(e),
                },
            };
        }
    }

    fn writev(&self, iovs: &[libc::iovec]) -> io::Result<Step> {
        loop {
            // SAFETY: every iovec points into a live buffer of its length
            // for this call; writev only reads them.
            let r = unsafe {
                libc::writev(
                    self.fd.as_raw_fd(),
                    iovs.as_ptr(),
                    iovs.len() as libc::c_int,
                )
            };
            return match crate::sys::cvt_size(r) {
                Ok(len) => Ok(Step::Done(len)),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => Ok(Step::WouldBlock),
                    Some(libc::EBADF | libc::EBADFD | libc::EFAULT) => Err(e),
                    _ => Ok(Step::Skip),
                },
            };
        }
    }
}

/// An iovec over `b` for a call that only reads it (writev).
fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
    }
}

/// An iovec over `b` for a call that writes into it (readv).
fn iovec_mut(b: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: b.len(),
    }
}

/// Writes the batch's coalesced groups, each to the descriptor `queue_of`
/// its first packet (all of a group are one flow); see
/// [`Tun::write_batch`](super::Tun::write_batch).
pub(super) fn write_batch_offload<'q>(
    tx: &mut WriteScratch,
    batch: &PacketBatch,
    queue_of: impl Fn(&[u8]) -> &'q TunFd,
) -> io::Result<usize> {
    let WriteScratch {
        planner,
        iovs,
        header,
    } = &mut *tx;
    if iovs.capacity() < MAX_MEMBERS + 1 {
        iovs.reserve(MAX_MEMBERS + 1);
    }
    planner.plan(batch.len(), |i| batch.packet(i));
    let groups = planner.groups();
    let mut written = 0;
    for (k, group) in groups.iter().enumerate() {
        let head = batch.packet(group.first);
        let dev = queue_of(head);
        iovs.clear();
        if group.is_coalesced() {
            let len = write_gso_header(group, head, header);
            iovs.push(iovec(&header[..len]));
            for i in planner.members(group) {
                iovs.push(iovec(&batch.packet(i)[group.hdr_len()..]));
            }
        } else {
            iovs.push(iovec(&PLAIN_VNET_HDR));
            iovs.push(iovec(head));
        }
        match dev.writev(iovs)? {
            Step::Done(_) => {
                written += group.members;
                if group.is_coalesced() {
                    dev.stats
                        .super_packets_written
                        .fetch_add(1, Ordering::Relaxed);
                    dev.stats
                        .segments_written
                        .fetch_add(group.members as u64, Ordering::Relaxed);
                }
            }
            Step::Skip if group.is_coalesced() => {
                // The kernel refused the super-packet; its members may
                // still be fine one by one.
                for i in planner.members(group) {
                    let one = [iovec(&PLAIN_VNET_HDR), iovec(batch.packet(i))];
                    match dev.writev(&one)? {
                        Step::Done(_) => written += 1,
                        _ => {
                            dev.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            Step::Skip => {
                dev.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Step::WouldBlock => {
                let rest: usize = groups[k..].iter().map(|g| g.members).sum();
                dev.dropped.fetch_add(rest as u64, Ordering::Relaxed);
                break;
            }
        }
    }
    Ok(written)
}
