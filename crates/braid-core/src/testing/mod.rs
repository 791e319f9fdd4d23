//! A simulator for tests, behind the `testing` feature: N devices whose
//! sockets are joined by simulated lines, run in virtual time. braid-core's
//! simulated-time tests and the fuzz bodies (`fuzz/`) use it; no build of
//! braid turns it on.
//!
//! ```text
//!   node A                                                      node B
//!   TUN ─▶ Device ─▶ socket ── line: LinkModel A→B (delay, loss, ──▶ socket ─▶ Device ─▶ TUN
//!   (delivered,        (line 1)       jitter, cut, …)               (line 0)           (delivered,
//!    checked)                  ◀── LinkModel B→A ──                                     checked)
//! ```
//!
//! - **Nodes** ([`Net::add_node`]): node `n` is [`device`]`(n + 1)` with a
//!   socket for line 0 at 198.18.0.(n + 1):51820 and the tunnel address
//!   198.19.0.(n + 1); [`Net::peers`] makes two nodes peers. A datagram
//!   leaves from the socket of its slot's line and goes to the node that
//!   owns its destination address (none: it leaves the net, captured).
//! - **Lines** ([`Net::connect`]): one seeded [`LinkModel`](braid_netem::link::LinkModel)
//!   per direction, the model the `braid netem` relay uses, so every
//!   impairment it makes can be put under the protocol. Sockets no line
//!   joins talk over a zero-delay wire.
//! - **Clock** ([`clock`]): virtual time starts at [`clock::epoch`]; the
//!   wall clock there is [`clock::WALL_SECS`]. [`Net::run_until`] takes
//!   events in order, the next copy to arrive (first on a tie; equal
//!   arrival times in sending order) or the next device timer; a device
//!   that receives a datagram writes its TUN and then sends; a timer event
//!   fires every device's timers, then their TUN output, then what they
//!   send. For lock-step use, [`Net::receive`], [`Net::poll_transmit`] and
//!   [`Net::encapsulate`] do one step each and send nothing.
//! - **Capture and delivery checks** ([`capture`]): every datagram sent
//!   ([`Net::capture`]), every copy handed over and why the receiver
//!   refused it ([`Net::arrivals`]), every packet a TUN got
//!   ([`Node::delivered`]), each checked to be a whole IPv4 packet from
//!   another node's tunnel address.

pub mod capture;
pub mod clock;
mod net;

pub use capture::{Arrival, Datagram, Refusals};
pub use net::{Filter, InFlight, Line, Net, Node, Socket, STRIDE};

use crate::device::Device;

/// A node's index in its [`Net`].
pub type NodeId = usize;

/// The first three nodes.
pub const A: NodeId = 0;
pub const B: NodeId = 1;
pub const C: NodeId = 2;

/// A device at [`clock::epoch`] whose randomness is seeded with `seed` and
/// whose private key is `seed × 0x11` in every byte.
pub fn device(seed: u8) -> Device {
    let mut d = Device::new(clock::epoch(), clock::wall(), [seed; 32]);
    d.set_private_key(Some([seed.wrapping_mul(0x11); 32]));
    d
}

/// An IPv4 packet (TTL 64, protocol `proto`, no options) from `src` to
/// `dst` around `payload`.
pub fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}
