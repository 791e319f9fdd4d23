//! The data plane's batches: how many packets one I/O call moves and how
//! big a slot is. Slots follow the largest packet the interface has to
//! carry (its MTU, or a longer datagram a peer with a bigger MTU sent), so
//! any MTU up to 65535 works while a usual one keeps small slots.

use braid_core::batch::PacketBatch;

/// Packets per I/O batch at most (as wireguard-go).
pub const BATCH: usize = 128;
/// Bytes per slot at least: a jumbo-frame packet and WireGuard's overhead.
const MIN_SLOT_BYTES: usize = 9 * 1024 + 256;
/// What a slot holds beyond the packet: the headroom the core turns into
/// a WireGuard header, its tag and padding, and some slack.
const SLOT_OVERHEAD: usize = 256;
/// A batch's arena stays about this big: bigger slots, fewer of them (a
/// batch of 64 KiB packets moves a megabyte per call all the same).
const ARENA_BYTES: usize = BATCH * MIN_SLOT_BYTES;
/// Slots per batch at least, however big they are.
const MIN_BATCH: usize = 16;

/// The largest MTU braid carries (an IP packet's length field is 16 bits).
pub const MAX_MTU: u32 = 65535;

/// The slot size for packets (or datagrams) of up to `len` bytes.
pub fn stride_for(len: usize) -> usize {
    len.saturating_add(SLOT_OVERHEAD).max(MIN_SLOT_BYTES)
}

/// Slots per batch for slots of `stride` bytes.
fn capacity_for(stride: usize) -> usize {
    (ARENA_BYTES / stride).clamp(MIN_BATCH, BATCH)
}

/// A batch of the data plane with slots of `stride` bytes, on huge pages
/// where the kernel has them: in alternating one-stream runs that took
/// 3–4 % off the CPU per GB.
pub fn data_plane_batch(stride: usize) -> PacketBatch {
    let mut batch = PacketBatch::new(capacity_for(stride), stride);
    // Only advice: without huge pages the batch works as well, a little
    // slower.
    let _ = braid_io::advise_huge_pages(batch.huge_page_region());
    batch
}

/// Replaces `batch` by one with slots of `stride` bytes when its own are
/// smaller (an MTU went up: an allocation then, none per packet). Slots
/// never shrink: an MTU lowered again keeps the bigger ones.
pub fn fit(batch: &mut PacketBatch, stride: usize) {
    if batch.stride() < stride {
        *batch = data_plane_batch(stride);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::batch::{HEADROOM, TAILROOM};

    #[test]
    fn slots_hold_the_largest_packet_and_batches_keep_their_size() {
        // (largest packet, stride, slots per batch)
        let cases = [
            (1420, MIN_SLOT_BYTES, BATCH),
            (9000, MIN_SLOT_BYTES, BATCH),
            (34_736, 34_736 + SLOT_OVERHEAD, 34),
            (65_535, 65_535 + SLOT_OVERHEAD, 18),
            (65_535 + 32, 65_567 + SLOT_OVERHEAD, 18),
            (usize::MAX, usize::MAX, MIN_BATCH),
        ];
        for (len, stride, slots) in cases {
            assert_eq!(stride_for(len), stride, "{len}");
            assert_eq!(capacity_for(stride), slots, "{len}");
            if len <= 65_567 {
                // An IP packet read at HEADROOM and sealed in place fits.
                assert!(HEADROOM + len + TAILROOM <= stride);
            }
        }
        let mut b = data_plane_batch(stride_for(1420));
        fit(&mut b, stride_for(1500));
        assert_eq!((b.stride(), b.capacity()), (MIN_SLOT_BYTES, BATCH));
        fit(&mut b, stride_for(34_736));
        assert_eq!((b.stride(), b.capacity()), (34_736 + SLOT_OVERHEAD, 34));
        fit(&mut b, stride_for(1420));
        assert_eq!(b.stride(), 34_736 + SLOT_OVERHEAD, "never shrinks");
    }
}
