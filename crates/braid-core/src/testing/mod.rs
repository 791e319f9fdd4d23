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
mod fixtures;
mod net;

pub use capture::{Arrival, Datagram, Refusals};
pub use fixtures::{device, ipv4, receive, transmit, NodeId, A, B, C};
pub use net::{Filter, InFlight, Line, Net, Node, Socket, STRIDE};
