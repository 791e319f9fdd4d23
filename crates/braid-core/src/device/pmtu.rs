//! Path MTU discovery between braid peers: each path's `Pmtud` decides what
//! to probe; this sends its padded probes (built straight into the output
//! batch, so a 9 KB probe costs no allocation), answers the peer's and
//! tells the I/O layer what the tunnel MTU may be.

use super::state::{Device, QueuedProbe};
use crate::batch::PacketBatch;
use crate::ext::{ExtMessage, PmtuBody, MAX_PADDED_PAYLOAD};
use crate::messages::{DATA_HEADER_LEN, DATA_MIN_LEN};
use crate::peer::PeerId;
use crate::pmtud::{self, max_for_link, MIN_PLPMTU};
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

/// Notices waiting for the driver at most; more are dropped (each says
/// how a peer's packets go now, the newest matter).
pub(super) const MAX_MTU_NOTICES: usize = 64;

/// How a peer's packets go now, when that changed in a way worth a log
/// line: held below IPv6's 1280 bytes (so IPv6 cannot pass), or split
/// into fragments its lines carry; or neither any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtuNotice {
    pub public_key: [u8; 32],
    /// Packets longer than this are answered "too big" (`None`: no limit
    /// below the interface MTU).
    pub limit: Option<usize>,
    /// Longer packets go in pieces of this much plaintext.
    pub fragment_payload: Option<usize>,
    /// Whether the peer joins fragments (a braid peer).
    pub joins_fragments: bool,
}

impl MtuNotice {
    /// Whether IPv6 cannot pass to this peer: its packets are held below
    /// 1280 bytes and it cannot take pieces.
    pub fn ipv6_blocked(&self) -> bool {
        self.fragment_payload.is_none() && self.limit.is_some_and(|l| l < MIN_PLPMTU)
    }
}

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
        let fragments = p.joins_fragments();
        for (i, path) in p.paths.iter_mut().enumerate() {
            if fragments {
                // Lines below 1280 still carry its packets, in pieces.
                path.pmtu.set_floor(now, pmtud::MIN_FRAGMENTED);
            }
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
                    // Sizes are at most MAX_PLPMTU (65 475): they fit the u16.
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

    /// Every path of the peers that have a session, with its line, so the
    /// I/O layer can tell each path's discovery (and a stock peer's limit)
    /// the MTU of the line it leaves on. Idle peers cost nothing: a peer
    /// is asked about once it has a session.
    pub fn path_routes(&mut self) -> Vec<PathRoute> {
        self.peers.settle();
        let mut v = Vec::new();
        for &pid in self.peers.with_session() {
            let Some(p) = self.peers.get(pid) else {
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

    /// The local line of a path has MTU `link_mtu`: the ceiling of its
    /// search, which looks no further than `largest` either (the tunnel
    /// MTU that could use it: a size the interface never sends is not
    /// worth probing, and its probe would not fit the driver's slots).
    pub fn set_path_link_mtu(
        &mut self,
        now: Instant,
        route: PathRoute,
        link_mtu: usize,
        largest: usize,
    ) {
        let Some(path) = self.peers[route.pid]
            .as_mut()
            .and_then(|p| p.paths.get_mut(route.path))
            .filter(|path| path.remote == route.remote)
        else {
            return;
        };
        let max = max_for_link(link_mtu, route.remote.is_ipv6()).min(largest);
        path.pmtu.set_max(now, max);
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

    /// The tunnel MTU of one peer now: for a braid peer the smallest
    /// discovered size over its live paths (over all of them when none is
    /// live), never below 1280 for one that joins fragments (what its
    /// lines do not carry goes in pieces); for a stock WireGuard peer with
    /// a session `default`, or less when its local lines carry less
    /// (nothing is discovered there); `None` when the peer says nothing yet.
    // What the peer table counts (`PathMtuSays`), checked against it in
    // debug builds.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub(super) fn peer_path_mtu(p: &crate::peer::Peer, default: usize) -> Option<usize> {
        if p.speaks_braid() {
            let carry = Self::path_carry(p, |_| true)?;
            Some(Self::limit_for(p, carry))
        } else if p.keypairs.current.is_some() {
            Some(Self::stock_line_limit(p).map_or(default, |l| l.min(default)))
        } else {
            None
        }
    }

    /// The smallest size the live paths (all of them when none is live:
    /// what they carried last still holds, no flapping back to the default
    /// while a line is cut) that `counted` keeps carry.
    pub(super) fn path_carry(
        p: &crate::peer::Peer,
        counted: impl Fn(&crate::path::Path) -> bool,
    ) -> Option<usize> {
        let any_up = p.paths.iter().any(|path| path.is_up());
        p.paths
            .iter()
            .filter(|path| path.is_up() || !any_up)
            .filter(|path| counted(path))
            .map(|path| path.pmtu.plpmtu())
            .min()
    }

    /// What a stock WireGuard peer's local lines carry (from their MTUs;
    /// nothing is discovered there), rounded down to WireGuard's padding
    /// step: the peer pads what it sends to a multiple of 16 (up to its
    /// own MTU), so a packet as long as this comes back padded no longer.
    /// Below 1280 IPv6 cannot pass.
    pub(super) fn stock_line_limit(p: &crate::peer::Peer) -> Option<usize> {
        let line = p
            .paths
            .iter()
            .filter_map(|path| path.pmtu.line_max())
            .min()?;
        Some(line - line % crate::consts::PADDING_MULTIPLE)
    }

    /// The tunnel MTU every peer can take now: the smallest of the peers'
    /// (see [`refresh_path_mtus`](Self::refresh_path_mtus) for the
    /// interface MTU braid uses); `default` when no peer says anything.
    pub fn path_mtu_target(&self, default: usize) -> usize {
        self.peers.path_mtu_target(default)
    }

    /// The largest packet a braid peer's live paths are known to carry:
    /// the smallest size one of them confirmed while a bigger one failed.
    /// `None` while nothing failed: a search still under way refuses no
    /// packet (an ICMP "too big" from it would lower the sender's path MTU
    /// for minutes, below what the path turns out to carry).
    pub(super) fn peer_known_limit(p: &crate::peer::Peer) -> Option<usize> {
        if !p.speaks_braid() {
            return Self::stock_line_limit(p);
        }
        Self::path_carry(p, |path| path.pmtu.bounds().1.is_some())
    }

    /// What one data message to `p` may carry when a line was seen to
    /// carry less than what goes to it and `p` joins fragments (see
    /// `Peer::fragment_payload`).
    fn fragment_payload(p: &crate::peer::Peer) -> Option<usize> {
        if p.joins_fragments() {
            Self::peer_known_limit(p)
        } else {
            None
        }
    }

    /// A peer's limit as a ceiling of the packets sent to it whole or in
    /// pieces: at least 1280 for one that joins fragments.
    pub(super) fn limit_for(p: &crate::peer::Peer, carry: usize) -> usize {
        if p.joins_fragments() {
            carry.max(MIN_PLPMTU)
        } else {
            carry
        }
    }

    /// The interface MTU: the largest any peer's paths carry now (`default`
    /// when no peer says anything). Each peer whose paths carry less gets
    /// that as its limit: a longer packet to it is answered with ICMP "too
    /// big" (see [`take_too_big`](Self::take_too_big)) and not sent, as a
    /// router does for a route with a smaller MTU. So one peer with a poor
    /// path, or one that ignores path MTU probes, lowers only its own
    /// packets, not the interface for every peer.
    ///
    /// `fixed`: the interface MTU is `default` whatever the paths say
    /// (`MTU =`, or set by whoever drives the interface); then a peer is
    /// limited below it only by what its paths were seen not to carry, and
    /// every peer by what one UDP datagram carries (`MAX_PLPMTU`).
    ///
    /// What each peer says is counted as it changes, and a peer's limit is
    /// set when the device works on it: this costs O(log n), and walks the
    /// peers with a session only when the interface MTU or the mode
    /// changed, never every peer (the daemon asks ten times a second).
    pub fn refresh_path_mtus(&mut self, default: usize, fixed: bool) -> usize {
        self.peers.refresh_path_mtus(default, fixed)
    }

    /// Sets a peer's limit and fragment payload; a notice when it crossed
    /// into (or out of) being split or held below 1280.
    pub(super) fn set_limits(
        notices: &mut Vec<MtuNotice>,
        p: &mut crate::peer::Peer,
        limit: Option<usize>,
    ) {
        let notice = |p: &crate::peer::Peer| MtuNotice {
            public_key: p.public_key(),
            limit: p.mtu_limit,
            fragment_payload: p.fragment_payload,
            joins_fragments: p.joins_fragments(),
        };
        let before = notice(p);
        p.mtu_limit = limit;
        p.fragment_payload = Self::fragment_payload(p);
        let after = notice(p);
        let worth = |n: &MtuNotice| (n.ipv6_blocked(), n.fragment_payload.is_some());
        if worth(&before) != worth(&after) && notices.len() < MAX_MTU_NOTICES {
            notices.push(after);
        }
    }

    /// Moves the notices of peers whose packets now go differently (see
    /// [`MtuNotice`]) into `out`, for the driver's log.
    pub fn take_mtu_notices(&mut self, out: &mut Vec<MtuNotice>) {
        self.peers.take_mtu_notices(out);
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
