//! What an idle peer costs in memory (issue 22 item 4): its slot in the
//! peer table and a few small entries (its key in the index, its AllowedIP
//! in the trie), nothing allocated for what it would need once it speaks
//! (reorder window samples, paths, staged packets). Measured with a
//! counting allocator around the system's, in this test binary only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

/// Bytes allocated and not yet freed, by this binary's allocator.
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator as it came; the
// counter is all that is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[test]
fn an_idle_peer_costs_its_slot_and_little_else() {
    // A reorder window allocates its samples and slots when packets come.
    let before = live();
    let window = braid_core::reorder::ReorderWindow::new(Default::default());
    assert_eq!(live() - before, 0, "a new reorder window allocates nothing");
    drop(window);

    let mut d = braid_core::testing::device(2);
    let peers = 10_000u32;
    let before = live();
    for n in 0..peers {
        let mut key = [0x11u8; 32];
        key[..4].copy_from_slice(&n.to_le_bytes());
        let pid = d.add_peer(key).unwrap();
        let addr = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 0)) + n);
        d.add_allowed_ip(pid, addr.into(), 32).unwrap();
    }
    let per_peer = (live() - before) / peers as isize;
    let slot = std::mem::size_of::<Option<braid_core::peer::Peer>>() as isize;
    println!(
        "heap per idle peer: {per_peer} bytes, of which its slot {slot} (the peer table \
         grows by doubling: up to twice that is reserved, untouched pages are not resident)"
    );
    // The slot, the table's doubling, and about a hundred bytes of index
    // and trie entries: nothing that grows with what a peer would carry.
    assert!(
        per_peer < 2 * slot + 512,
        "{per_peer} bytes per idle peer (slot {slot})"
    );
}
