//! Path MTU discovery between braid peers: each path's `Pmtud` decides what
//! to probe; this sends its padded probes (built straight into the output
//! batch, so a 9 KB probe costs no allocation), answers the peer's and
//! tells the I/O layer what the tunnel MTU may be.

use super::state::{Device, QueuedProbe};
use crate::batch::PacketBatch;
use crate::ext::{ExtMessage, PmtuBody, MAX_PADDED_PAYLOAD};
use crate::messages::{DATA_HEADER_LEN, DATA_MIN_LEN};
use crate::peer::PeerId;
use crate::pmtud::{self, max_for_link};
use std::net::SocketAddr;
use std::time::Instant;

/// Probes waiting for `poll_transmit` (at most one per path is out at a
/// time, so this only overflows with hundreds of peers).
const MAX_QUEUED_PROBES: usize = 256;

/// ICMP "too big" answers waiting for the driver at most; more are dropped
/// (a sender needs one to adapt).
pub const MAX_QUEUED_TOO_BIG: usize = 64;
/// The longest answer: an ICMPv6 "packet too big" is at most 1280 bytes.
const TOO_BIG_ANSWER_MAX: usize = 1280;
const UNSPECIFIED_ADDR: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

/// A path as the I/O layer needs it to look up its line's MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathRoute {
    pub pid: PeerId,
    pub path: usize,
    pub line: u16,
    pub remote: SocketAddr,
}

impl Device {
    /// Runs on the path-probe timer of a braid peer: lets each path's
    /// discovery expire late probes and queue the next one.
    pub(super) fn probe_path_mtu(&mut self, now: Instant, pid: PeerId) {
        let Some(p) = self.peers[pid].as_mut() else {
            return;
        };
        for (i, path) in p.paths.iter_mut().enumerate() {
            path.pmtu.start(now);
            let timeout = pmtud::probe_timeout(path.srtt, path.rttvar);
            let Some(req) = path.pmtu.poll(now, path.is_up(), timeout) else {
                continue;
            };
            if self.pmtu_probes.len() >= MAX_QUEUED_PROBES {
                self.counters.control_queue_full =
                    self.counters.control_queue_full.saturating_add(1);
                continue;
            }
            self.pmtu_probes.push_back(QueuedProbe {
                pid,
                line: path.line,
                remote: path.remote,
                body: PmtuBody {
                    path: i as u8, // i < MAX_PATHS
                    seq: req.seq,
                    // Sizes are at most MAX_PLPMTU; the cap (9216) fits u16.
                    size: req.size.min(MAX_PADDED_PAYLOAD) as u16,
                },
            });
        }
    }

    /// A PMTU probe or ack arrived from `src` on `line` (authenticated).
    pub(super) fn receive_pmtu(
        &mut self,
        now: Instant,
        pid: PeerId,
        line: u16,
        src: SocketAddr,
        msg: ExtMessage,
    ) {
        match msg {
            ExtMessage::PmtuProbe(b) => self.queue_ext(now, pid, line, src, ExtMessage::PmtuAck(b)),
            ExtMessage::PmtuAck(b) => {
                let Some(p) = self.peers[pid].as_mut() else {
                    return;
                };
                if let Some(path) = p.paths.get_mut(b.path as usize) {
                    path.pmtu.on_ack(now, b.seq, b.size as usize);
                }
            }
            _ => {}
        }
    }

    pub(super) fn has_pmtu_probes(&self) -> bool {
        !self.pmtu_probes.is_empty()
    }

    /// Seals queued probes into `out`, each padded to its size.
    pub(super) fn transmit_pmtu_probes(&mut self, now: Instant, out: &mut PacketBatch) {
        while !out.is_full() {
            let Some(q) = self.pmtu_probes.pop_front() else {
                return;
            };
            let Some(kp) = self.peers[q.pid]
                .as_mut()
                .and_then(|p| p.keypairs.current.as_mut())
                .filter(|k| k.is_valid(now))
            else {
                continue;
            };
            if out.stride() < DATA_MIN_LEN + q.body.size as usize {
                continue; // the I/O layer's slots cannot hold it: never fits
            }
            out.push_with(0, q.remote, |b| {
                match q.body.encode_probe(&mut b[DATA_HEADER_LEN..]) {
                    Some(n) => kp.seal_ext_in_place(b, n),
                    None => 0,
                }
            });
            out.set_line(out.len() - 1, q.line);
        }
    }

    /// Every path of the braid peers that have a session, with its line,
    /// so the I/O layer can tell each path's discovery the MTU of the line
    /// it leaves on (discovery runs only there: idle peers cost nothing).
    pub fn path_routes(&mut self) -> Vec<PathRoute> {
        self.peers.settle();
        let mut v = Vec::new();
        for &pid in self.peers.with_session() {
            let Some(p) = self.peers.get(pid).filter(|p| p.speaks_braid()) else {
                continue;
            };
            for (i, path) in p.paths.iter().enumerate() {
                v.push(PathRoute {
                    pid,
                    path: i,
                    line: path.line,
                    remote: path.remote,
                });
            }
        }
        v
    }

    /// The local line of a path has MTU `link_mtu`: the ceiling of its search.
    pub fn set_path_link_mtu(&mut self, now: Instant, route: PathRoute, link_mtu: usize) {
        let Some(path) = self.peers[route.pid]
            .as_mut()
            .and_then(|p| p.paths.get_mut(route.path))
            .filter(|path| path.remote == route.remote)
        else {
            return;
        };
        path.pmtu
            .set_max(now, max_for_link(link_mtu, route.remote.is_ipv6()));
        self.peers.settle();
    }

    /// Caps WireGuard's padding at `mtu` (the path MTU target): a packet
    /// that fits the path must not be padded past it, which the interface
    /// MTU alone would allow when it is fixed above the path MTU.
    pub fn set_padding_cap(&mut self, mtu: usize) {
        self.padding_cap = mtu;
    }

    pub(super) fn padding_mtu(&self) -> usize {
        self.mtu.min(self.padding_cap)
    }

    /// The tunnel MTU every peer can take now: the smallest of the peers'
    /// (for a braid peer the smallest discovered size over its live paths,
    /// over all of them when none is live; for a stock WireGuard peer with
    /// a session `default`), `default` when no peer says anything. See
    /// [`refresh_path_mtus`](Self::refresh_path_mtus) for the interface
    /// MTU braid uses.
    pub fn path_mtu_target(&self, default: usize) -> usize {
        self.peers.path_mtu_target(default)
    }

    /// The interface MTU: the largest any peer's paths carry now (`default`
    /// when no peer says anything). Each peer whose paths carry less gets
    /// that as its limit: a longer packet to it is answered with ICMP "too
    /// big" (see [`take_too_big`](Self::take_too_big)) and not sent, as a
    /// router does for a route with a smaller MTU. So one peer with a poor
    /// path, or one that ignores path MTU probes, lowers only its own
    /// packets, not the interface for every peer. What each peer says is
    /// counted as it changes, so this costs O(log n), not a walk of the
    /// peers (the daemon asks ten times a second).
    pub fn refresh_path_mtus(&mut self, default: usize) -> usize {
        self.peers.refresh_path_mtus(default)
    }

    /// Queues the ICMP "too big" answer to `packet` (for a peer whose paths
    /// carry at most `limit`), for [`take_too_big`](Self::take_too_big).
    /// False when no answer is due (an IPv4 packet that may be fragmented,
    /// an ICMP error, …): then the packet goes out as it is, and the outer
    /// datagram is fragmented on the way, as WireGuard's are. At most
    /// [`MAX_QUEUED_TOO_BIG`] answers wait; beyond that the packet is
    /// dropped and counted (its sender retries and gets an answer then).
    pub(super) fn queue_too_big(&mut self, packet: &[u8], limit: usize) -> bool {
        if self.too_big.len() == self.too_big_len {
            if self.too_big_len == MAX_QUEUED_TOO_BIG {
                let mut probe = [0u8; TOO_BIG_ANSWER_MAX];
                let due = crate::icmp::packet_too_big(packet, limit, &mut probe).is_some();
                if due {
                    self.counters.too_big_queue_full =
                        self.counters.too_big_queue_full.saturating_add(1);
                }
                return due;
            }
            self.too_big.push(vec![0; TOO_BIG_ANSWER_MAX]);
        }
        let buf = &mut self.too_big[self.too_big_len];
        buf.resize(TOO_BIG_ANSWER_MAX, 0);
        match crate::icmp::packet_too_big(packet, limit, buf) {
            Some(n) => {
                buf.truncate(n);
                self.too_big_len += 1;
                true
            }
            None => false,
        }
    }

    /// Whether ICMP "too big" answers wait for the TUN.
    pub fn has_too_big(&self) -> bool {
        self.too_big_len > 0
    }

    /// Moves the waiting ICMP "too big" answers into `out` (for the TUN, at
    /// `HEADROOM`), as many as fit; returns how many.
    pub fn take_too_big(&mut self, out: &mut PacketBatch) -> usize {
        let mut n = 0;
        while n < self.too_big_len && !out.is_full() {
            let answer = &self.too_big[n];
            out.push_with(crate::batch::HEADROOM, UNSPECIFIED_ADDR, |slot| {
                slot[..answer.len()].copy_from_slice(answer);
                answer.len()
            });
            n += 1;
        }
        // The ones that did not fit move to the front, in order.
        self.too_big[..self.too_big_len].rotate_left(n);
        self.too_big_len -= n;
        n
    }
}
