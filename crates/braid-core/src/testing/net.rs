//! The net: nodes (a device, its sockets, its TUN), lines between their
//! sockets, datagrams in flight, and the loop that runs them in virtual
//! time. See the module documentation of `testing` for the model.

use super::capture::{check_tun_packet, Arrival, Datagram, Refusals};
use super::clock;
use super::fixtures::{device, ipv4, NodeId};
use crate::batch::{PacketBatch, HEADROOM};
use crate::device::{Device, PeerInfo};
use crate::peer::PeerId;
use braid_netem::link::{apply_corruption, Fate, LinkModel, LinkParams};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::{Index, IndexMut};
use std::time::{Duration, Instant};

/// Bytes per batch slot: a 9000-byte (jumbo) path MTU probe fits.
pub const STRIDE: usize = 9 * 1024 + 256;

/// Slots per batch a device fills or reads in one call.
const BATCH: usize = 64;

/// `poll_transmit` calls after which a device that still has more to send
/// is taken to be broken (a million datagrams).
const MAX_TRANSMIT_ROUNDS: usize = 1 << 14;

/// A local UDP socket: the line (the `line` of a batch slot) it serves and
/// its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Socket {
    pub line: u16,
    pub addr: SocketAddr,
}

/// One simulated machine.
pub struct Node {
    pub device: Device,
    /// Line 0 first; a datagram leaves from the socket of its slot's line.
    pub sockets: Vec<Socket>,
    /// The node's tunnel address: packets it sends come from it.
    pub tun: Ipv4Addr,
    /// What reached the node's TUN, in order.
    pub delivered: Vec<Vec<u8>>,
}

/// A line between two sockets: one seeded [`LinkModel`] per direction.
pub struct Line {
    /// (node, line) at each end.
    pub ends: [(NodeId, u16); 2],
    /// `links[0]` carries `ends[0]` → `ends[1]`, `links[1]` the way back.
    pub links: [LinkModel; 2],
}

/// A copy of a datagram on its way.
#[derive(Debug, Clone)]
pub struct InFlight {
    pub at: Instant,
    pub from: NodeId,
    pub src: SocketAddr,
    pub to: NodeId,
    /// The receiving socket's line.
    pub to_line: u16,
    /// The line carrying it (`None`: the zero-delay wire).
    pub line: Option<usize>,
    pub bytes: Vec<u8>,
    /// The message type before any damage.
    pub kind: u8,
    pub corrupted: bool,
    pub duplicate: bool,
}

/// Decides for each datagram a device sends whether it goes on (true) or
/// is lost (false), before any line sees it.
pub type Filter = Box<dyn FnMut(&Datagram) -> bool>;

/// Devices, lines and a virtual clock; see the module documentation.
pub struct Net {
    /// The virtual clock: every device call gets it as `now`.
    pub now: Instant,
    pub nodes: Vec<Node>,
    pub lines: Vec<Line>,
    /// Every datagram a device sent, in order (before the filter).
    pub capture: Vec<Datagram>,
    /// Every copy handed to a receiver by the event loop, in order.
    pub arrivals: Vec<Arrival>,
    pub filter: Option<Filter>,
    /// Copies in flight by (arrival, order put on): equal times arrive in
    /// the order they were sent.
    flight: BTreeMap<(Instant, u64), InFlight>,
    sent: u64,
    tx: PacketBatch,
    rx: PacketBatch,
    tun: PacketBatch,
}

impl Default for Net {
    fn default() -> Self {
        Net::new()
    }
}

impl Index<NodeId> for Net {
    type Output = Node;
    fn index(&self, n: NodeId) -> &Node {
        &self.nodes[n]
    }
}

impl IndexMut<NodeId> for Net {
    fn index_mut(&mut self, n: NodeId) -> &mut Node {
        &mut self.nodes[n]
    }
}

impl Net {
    /// An empty net at [`clock::epoch`].
    pub fn new() -> Net {
        Net {
            now: clock::epoch(),
            nodes: Vec::new(),
            lines: Vec::new(),
            capture: Vec::new(),
            arrivals: Vec::new(),
            filter: None,
            flight: BTreeMap::new(),
            sent: 0,
            tx: PacketBatch::new(BATCH, STRIDE),
            rx: PacketBatch::new(BATCH, STRIDE),
            tun: PacketBatch::new(BATCH, STRIDE),
        }
    }

    /// Nodes A and B, peers of each other; A knows B's endpoint, B learns
    /// A's from its handshake. No line: a zero-delay wire joins them.
    pub fn pair() -> Net {
        let mut net = Net::new();
        let (a, b) = (net.add_node(), net.add_node());
        let (pb, _) = net.peers(a, b);
        let b_addr = net.addr(b);
        net[a].device.set_endpoint(pb, b_addr);
        net
    }

    /// Adds node `n` (the next index): `device(n + 1)`, one socket (line
    /// 0) at 198.18.0.(n + 1):51820, tunnel address 198.19.0.(n + 1).
    pub fn add_node(&mut self) -> NodeId {
        let n = self.nodes.len();
        let host = u8::try_from(n + 1).expect("at most 255 nodes");
        self.nodes.push(Node {
            device: device(host),
            sockets: vec![Socket {
                line: 0,
                addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, host)), 51820),
            }],
            tun: Ipv4Addr::new(198, 19, 0, host),
            delivered: Vec::new(),
        });
        n
    }

    /// Makes `a` and `b` peers, each allowing the other's tunnel address
    /// (/32); no endpoint. Returns (b's id at a, a's id at b).
    pub fn peers(&mut self, a: NodeId, b: NodeId) -> (PeerId, PeerId) {
        let key = |net: &Net, n: NodeId| net[n].device.public_key().expect("node has a key");
        let (a_key, b_key) = (key(self, a), key(self, b));
        let pb = self[a].device.add_peer(b_key).expect("room for a peer");
        let pa = self[b].device.add_peer(a_key).expect("room for a peer");
        for (at, pid, other) in [(a, pb, b), (b, pa, a)] {
            let tun = IpAddr::V4(self[other].tun);
            self[at]
                .device
                .add_allowed_ip(pid, tun, 32)
                .expect("valid prefix");
        }
        (pb, pa)
    }

    /// The address of `node`'s first socket.
    pub fn addr(&self, node: NodeId) -> SocketAddr {
        self[node].sockets[0].addr
    }

    /// Moves `node`'s first socket to `addr` (a NAT rebinding): datagrams
    /// to the old address now leave the net.
    pub fn set_addr(&mut self, node: NodeId, addr: SocketAddr) {
        self[node].sockets[0].addr = addr;
    }

    /// The tunnel address of `node` as bytes.
    pub fn tun(&self, node: NodeId) -> [u8; 4] {
        self[node].tun.octets()
    }

    /// Joins socket `a.1` of node `a.0` and socket `b.1` of node `b.0`
    /// with a line: `there` carries a → b, `back` b → a. Returns its index.
    pub fn connect(
        &mut self,
        a: (NodeId, u16),
        b: (NodeId, u16),
        there: LinkModel,
        back: LinkModel,
    ) -> usize {
        self.lines.push(Line {
            ends: [a, b],
            links: [there, back],
        });
        self.lines.len() - 1
    }

    /// [`connect`](Self::connect) with the same impairments both ways, each
    /// direction drawing from its own fixed seed (1 there, 2 back).
    pub fn connect_alike(
        &mut self,
        a: (NodeId, u16),
        b: (NodeId, u16),
        params: LinkParams,
    ) -> usize {
        let back = LinkModel::new(params.clone(), 2);
        self.connect(a, b, LinkModel::new(params, 1), back)
    }

    /// The link of `line` in the direction of node `towards`.
    pub fn link(&self, line: usize, towards: NodeId) -> &LinkModel {
        let l = &self.lines[line];
        &l.links[usize::from(l.ends[0].0 == towards)]
    }

    pub fn link_mut(&mut self, line: usize, towards: NodeId) -> &mut LinkModel {
        let l = &mut self.lines[line];
        &mut l.links[usize::from(l.ends[0].0 == towards)]
    }

    /// Cuts (or restores) every line, both ways.
    pub fn set_cut(&mut self, cut: bool) {
        for l in &mut self.lines {
            for link in &mut l.links {
                link.set_cut(cut);
            }
        }
    }

    /// The first peer of `node`'s device, as `wg show` sees it.
    pub fn peer_info(&self, node: NodeId) -> PeerInfo {
        let d = &self[node].device;
        let pid = d.peer_ids().next().expect("node has a peer");
        d.peer_info(pid).expect("peer exists")
    }

    // ----- traffic -----

    /// An IPv4 packet from `from`'s tunnel address to `to`'s carrying
    /// `payload` enters `from`'s TUN (see [`Net::send_packet`]).
    pub fn send(&mut self, from: NodeId, to: NodeId, payload: &[u8]) {
        let packet = ipv4(self.tun(from), self.tun(to), 17, payload);
        self.send_packet(from, &packet);
    }

    /// `packet` enters `from`'s TUN: what the device seals goes on the
    /// lines, then whatever else it has to send.
    pub fn send_packet(&mut self, from: NodeId, packet: &[u8]) {
        for d in self.encapsulate(from, packet) {
            self.ship(d);
        }
        self.flush(from);
    }

    /// `packet` enters `from`'s TUN; returns the datagrams the device made
    /// of it without sending them.
    pub fn encapsulate(&mut self, from: NodeId, packet: &[u8]) -> Vec<Datagram> {
        let mut batch = std::mem::replace(&mut self.tx, PacketBatch::new(1, HEADROOM * 4));
        batch.clear();
        batch.push_with(HEADROOM, SocketAddr::from(([0, 0, 0, 0], 0)), |b| {
            b[..packet.len()].copy_from_slice(packet);
            packet.len()
        });
        let now = self.now;
        self.nodes[from].device.encapsulate(now, &mut batch);
        let out = self.datagrams(from, &batch);
        self.tx = batch;
        out
    }

    /// Everything `node` wants to send now, taken without sending it.
    pub fn poll_transmit(&mut self, node: NodeId) -> Vec<Datagram> {
        let mut batch = std::mem::replace(&mut self.tx, PacketBatch::new(1, HEADROOM * 4));
        let mut out = Vec::new();
        let now = self.now;
        for _ in 0..MAX_TRANSMIT_ROUNDS {
            batch.clear();
            let more = self.nodes[node].device.poll_transmit(now, &mut batch);
            out.extend(self.datagrams(node, &batch));
            if !more {
                self.tx = batch;
                return out;
            }
        }
        panic!("node {node} never runs out of datagrams to send");
    }

    /// Sends everything `node` wants to send now.
    pub fn flush(&mut self, node: NodeId) {
        for d in self.poll_transmit(node) {
            self.ship(d);
        }
    }

    /// Hands `datagrams` (source, bytes) to `to` as one received batch on
    /// its first socket, and writes what comes out to its TUN (checked,
    /// recorded in `delivered`). Sends nothing. Returns the packets
    /// written to the TUN.
    pub fn receive(&mut self, to: NodeId, datagrams: &[(SocketAddr, &[u8])]) -> usize {
        let line = self[to].sockets[0].line;
        self.receive_on(to, line, datagrams)
    }

    /// [`Net::receive`] of one datagram from `src`, then `to` sends what it
    /// has to: what a UDP socket's read loop does.
    pub fn deliver(&mut self, to: NodeId, src: SocketAddr, bytes: &[u8]) -> usize {
        let n = self.receive(to, &[(src, bytes)]);
        self.flush(to);
        n
    }

    /// Copies in flight, next to arrive first.
    pub fn in_flight(&self) -> impl Iterator<Item = &InFlight> {
        self.flight.values()
    }

    /// Takes the copy put in flight last off its line.
    pub fn take_last_in_flight(&mut self) -> Option<InFlight> {
        let key = *self.flight.keys().max_by_key(|k| k.1)?;
        self.flight.remove(&key)
    }

    /// Loses everything in flight.
    pub fn clear_in_flight(&mut self) {
        self.flight.clear();
    }

    // ----- time -----

    /// Runs the net until `until`: each step takes the next event, a copy
    /// arriving (first, on a tie) or a device's timer, and moves the clock
    /// to it. Then the clock stands at `until`.
    pub fn run_until(&mut self, until: Instant) {
        assert!(until >= self.now, "virtual time runs forward");
        loop {
            let next_copy = self.flight.keys().next().map(|k| k.0);
            let next_timer = self
                .nodes
                .iter()
                .filter_map(|n| n.device.poll_timeout())
                .min();
            let Some(t) = next_copy
                .into_iter()
                .chain(next_timer)
                .min()
                .filter(|t| *t <= until)
            else {
                break;
            };
            self.now = self.now.max(t);
            if next_copy == Some(t) {
                let (_, copy) = self.flight.pop_first().expect("a copy is due");
                self.arrive(copy);
            } else {
                self.fire_timers();
            }
        }
        self.now = until;
    }

    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// Everything due by now (copies on zero-delay wires, timers).
    pub fn settle(&mut self) {
        self.run_until(self.now);
    }

    /// Every device's due timers and a budget of its queued initiations,
    /// then their TUN output, then what they send.
    pub fn fire_timers(&mut self) {
        let now = self.now;
        for n in &mut self.nodes {
            n.device.handle_timeout(now);
            n.device.answer_queued_initiations(now);
        }
        for n in 0..self.nodes.len() {
            self.drain_tun(n);
        }
        for n in 0..self.nodes.len() {
            self.flush(n);
        }
    }

    // ----- internals -----

    /// The datagrams of a batch `from` filled: each slot, then its copies.
    fn datagrams(&self, from: NodeId, batch: &PacketBatch) -> Vec<Datagram> {
        let mut out = Vec::new();
        for i in 0..batch.len() {
            let bytes = batch.packet(i);
            if bytes.is_empty() {
                continue;
            }
            let copies = batch.copies().iter().filter(|c| c.slot == i);
            let dests = [(batch.line(i), batch.addr(i))]
                .into_iter()
                .chain(copies.map(|c| (c.line, c.addr)));
            for (line, dst) in dests {
                let src = self.nodes[from]
                    .sockets
                    .iter()
                    .find(|s| s.line == line)
                    .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |s| s.addr);
                out.push(Datagram {
                    from,
                    line,
                    src,
                    dst,
                    to: self.owner(dst).map(|(n, _)| n),
                    bytes: bytes.to_vec(),
                });
            }
        }
        out
    }

    /// The node and socket line with address `addr`.
    fn owner(&self, addr: SocketAddr) -> Option<(NodeId, u16)> {
        self.nodes.iter().enumerate().find_map(|(n, node)| {
            node.sockets
                .iter()
                .find(|s| s.addr == addr)
                .map(|s| (n, s.line))
        })
    }

    /// Records `d`, then puts it on its line (or the wire) unless the
    /// filter loses it or its address is outside the net.
    fn ship(&mut self, d: Datagram) {
        self.capture.push(d.clone());
        if let Some(filter) = &mut self.filter {
            if !filter(&d) {
                return;
            }
        }
        let Some((to, to_line)) = self.owner(d.dst) else {
            return;
        };
        assert!(
            self[d.from].sockets.iter().any(|s| s.line == d.line),
            "node {} sent on line {} it has no socket for",
            d.from,
            d.line
        );
        let ends = [(d.from, d.line), (to, to_line)];
        let line = self
            .lines
            .iter()
            .position(|l| l.ends == ends || l.ends == [ends[1], ends[0]]);
        let copy = InFlight {
            at: self.now,
            from: d.from,
            src: d.src,
            to,
            to_line,
            line,
            kind: d.kind(),
            bytes: d.bytes,
            corrupted: false,
            duplicate: false,
        };
        let Some(line) = line else {
            self.put_in_flight(copy);
            return;
        };
        let now = self.now;
        let Fate::Delivered { first, duplicate } =
            self.link_mut(line, to).offer(now, copy.bytes.len())
        else {
            return;
        };
        for (delivery, dup) in std::iter::once((first, false)).chain(duplicate.map(|d| (d, true))) {
            let mut c = copy.clone();
            c.at = delivery.at;
            c.duplicate = dup;
            if let Some(bit) = delivery.corrupt_bit {
                apply_corruption(&mut c.bytes, bit);
                c.corrupted = true;
            }
            self.put_in_flight(c);
        }
    }

    fn put_in_flight(&mut self, copy: InFlight) {
        self.sent += 1;
        self.flight.insert((copy.at, self.sent), copy);
    }

    /// A copy arrives: the receiver reads it, writes its TUN, sends.
    fn arrive(&mut self, copy: InFlight) {
        let before = Refusals::of(&self[copy.to].device);
        let tun = self.receive_on(copy.to, copy.to_line, &[(copy.src, &copy.bytes)]);
        let refused = Refusals::of(&self[copy.to].device).since(before);
        self.arrivals.push(Arrival {
            from: copy.from,
            to: copy.to,
            line: copy.line,
            kind: copy.kind,
            len: copy.bytes.len(),
            corrupted: copy.corrupted,
            duplicate: copy.duplicate,
            tun,
            refused,
        });
        self.flush(copy.to);
    }

    fn receive_on(&mut self, to: NodeId, line: u16, datagrams: &[(SocketAddr, &[u8])]) -> usize {
        let mut batch = std::mem::replace(&mut self.rx, PacketBatch::new(1, HEADROOM * 4));
        if batch.capacity() < datagrams.len() {
            batch = PacketBatch::new(datagrams.len(), STRIDE);
        }
        batch.clear();
        for (i, (src, bytes)) in datagrams.iter().enumerate() {
            batch.push_with(0, *src, |b| {
                b[..bytes.len()].copy_from_slice(bytes);
                bytes.len()
            });
            batch.set_line(i, line);
        }
        let now = self.now;
        self.nodes[to].device.decapsulate(now, &mut batch);
        let mut n = 0;
        for i in 0..batch.len() {
            if !batch.packet(i).is_empty() {
                self.write_tun(to, batch.packet(i));
                n += 1;
            }
        }
        self.rx = batch;
        n + self.drain_tun(to)
    }

    /// Writes what `node`'s reorder windows and shapers released to its
    /// TUN; returns how many packets.
    fn drain_tun(&mut self, node: NodeId) -> usize {
        let mut batch = std::mem::replace(&mut self.tun, PacketBatch::new(1, HEADROOM * 4));
        let mut n = 0;
        loop {
            batch.clear();
            let more = self.nodes[node].device.poll_tun(self.now, &mut batch);
            for i in 0..batch.len() {
                if !batch.packet(i).is_empty() {
                    self.write_tun(node, batch.packet(i));
                    n += 1;
                }
            }
            if !more {
                break;
            }
        }
        self.tun = batch;
        n
    }

    fn write_tun(&mut self, node: NodeId, packet: &[u8]) {
        let sources: Vec<Ipv4Addr> = (0..self.nodes.len())
            .filter(|&n| n != node)
            .map(|n| self[n].tun)
            .collect();
        check_tun_packet(packet, &sources);
        self[node].delivered.push(packet.to_vec());
    }
}
