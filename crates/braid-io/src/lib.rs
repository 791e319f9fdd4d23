//! braid's Linux I/O layer.
//!
//! The protocol core (`braid-core`) never touches the operating system; this
//! crate is the only place that does. It is deliberately thin: plain `libc`
//! calls, no async runtime, so the daemon's event loop stays a simple
//! `poll` over a handful of file descriptors and every syscall moves a whole
//! [`PacketBatch`](braid_core::batch::PacketBatch) rather than one packet.
//! Batching is where the throughput comes from (one `recvmmsg`/`sendmmsg`
//! per batch instead of one syscall per datagram), and reusing the batch
//! arena plus per-socket scratch arrays keeps the hot path allocation-free.
//!
//! Interface configuration shells out to `ip` (iproute2) instead of speaking
//! rtnetlink: it runs a few times per `braid up`, never on the data path, and
//! `ip`'s own error messages are the most useful thing to show an operator.

pub mod netcfg;
pub mod offload;
pub mod poll;
mod sched;
mod sockaddr;
mod sys;
pub mod tcp;
pub mod tun;
pub mod udp;
pub mod wake;

pub use poll::{wait, Interest, Readiness};
pub use sched::{
    allow_realtime, realtime_data_plane_thread, realtime_this_thread, this_thread_policy,
    MAX_REALTIME_PRIORITY,
};
pub use sys::{advise_huge_pages, kernel_int, setsockopt_int, timespec_of};
pub use tcp::TcpLine;
pub use tun::{is_removed_error, LinkState, Offload, OffloadStats, Tun, TunRead, MAX_QUEUES};
pub use udp::UdpSocket;
pub use wake::Waker;
