//! Fixed buffers for the copies in the delay line, and the heap that
//! orders them.

use std::cmp::Ordering;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

/// Pool slots for ordinary datagrams…
const SMALL: usize = 2048;
const N_SMALL: usize = 16384;
/// …and a few for jumbo ones.
const LARGE: usize = 65536;
const N_LARGE: usize = 64;

/// A copy waiting in the delay line. The heap is a max-heap, so the order
/// is reversed: the earliest delivery, then the earliest arrival, on top.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Due {
    pub at: Instant,
    pub seq: u64,
    pub id: u32,
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Where a pooled copy goes.
#[derive(Clone, Copy)]
pub(super) struct Meta {
    pub len: u32,
    /// Up: the client whose socket sends it (valid while `gen` matches).
    pub client: u32,
    pub gen: u32,
    /// Up: the upstream; down: the client's address.
    pub addr: SocketAddr,
}

const ANY: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// Fixed buffers for datagrams in the delay line.
pub(super) struct Pool {
    small: Vec<u8>,
    large: Vec<u8>,
    free_small: Vec<u32>,
    free_large: Vec<u32>,
    pub meta: Vec<Meta>,
}

impl Pool {
    pub fn new() -> Pool {
        Pool {
            // Zeroed allocations are mapped lazily: only slots in use cost
            // memory.
            small: vec![0; N_SMALL * SMALL],
            large: vec![0; N_LARGE * LARGE],
            free_small: (0..N_SMALL as u32).rev().collect(),
            free_large: (N_SMALL as u32..(N_SMALL + N_LARGE) as u32).rev().collect(),
            meta: vec![
                Meta {
                    len: 0,
                    client: 0,
                    gen: 0,
                    addr: ANY,
                };
                N_SMALL + N_LARGE
            ],
        }
    }

    /// Copies the pool can hold at once (at most this many per direction
    /// can be in the delay line).
    pub fn capacity() -> usize {
        N_SMALL + N_LARGE
    }

    pub fn alloc(&mut self, len: usize) -> Option<u32> {
        if len <= SMALL {
            self.free_small.pop().or_else(|| self.free_large.pop())
        } else if len <= LARGE {
            self.free_large.pop()
        } else {
            None
        }
    }

    pub fn free(&mut self, id: u32) {
        if (id as usize) < N_SMALL {
            self.free_small.push(id);
        } else {
            self.free_large.push(id);
        }
    }

    pub fn buf(&self, id: u32) -> &[u8] {
        let id = id as usize;
        if id < N_SMALL {
            &self.small[id * SMALL..(id + 1) * SMALL]
        } else {
            let id = id - N_SMALL;
            &self.large[id * LARGE..(id + 1) * LARGE]
        }
    }

    pub fn buf_mut(&mut self, id: u32) -> &mut [u8] {
        let id = id as usize;
        if id < N_SMALL {
            &mut self.small[id * SMALL..(id + 1) * SMALL]
        } else {
            let id = id - N_SMALL;
            &mut self.large[id * LARGE..(id + 1) * LARGE]
        }
    }
}
