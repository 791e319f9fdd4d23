//! The data plane's batches: how many packets one I/O call moves, how big a
//! slot is, and so the largest MTU braid carries.

use braid_core::batch::PacketBatch;

/// Packets per I/O batch (as wireguard-go).
pub const BATCH: usize = 128;
/// Bytes per batch slot: room for a jumbo-frame MTU plus WireGuard overhead.
const SLOT_BYTES: usize = 9 * 1024 + 256;

/// Largest MTU a slot can carry.
pub const MAX_MTU: u32 = 9000;

/// A batch of the data plane, on huge pages where the kernel has them: in
/// alternating one-stream runs that took 3–4 % off the CPU per GB.
pub fn data_plane_batch() -> PacketBatch {
    let mut batch = PacketBatch::new(BATCH, SLOT_BYTES);
    // Only advice: without huge pages the batch works as well, a little
    // slower.
    let _ = braid_io::advise_huge_pages(batch.huge_page_region());
    batch
}
