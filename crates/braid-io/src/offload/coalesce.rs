//! GRO on the write side: packets of one TCP flow that arrive together in a
//! write batch leave as one super-packet, so the kernel runs its receive
//! path once per 64 KiB instead of once per segment.
//!
//! [`Planner::plan`] groups the packets of a batch; [`write_gso_header`]
//! builds the `virtio_net_hdr` plus rewritten IP/TCP header a group is
//! written with, and the members' payloads follow it straight from their
//! slots. Only plain bulk data joins a group: a TCP segment with ACK or
//! ACK|PSH, payload, no IPv4 options or fragmentation, no IPv6 extension
//! headers, and every header field equal to the group's first member except
//! length, IPv4 ID and checksums. Segments must continue the sequence
//! exactly, be no longer than the first (a shorter one or a PSH ends the
//! group) and carry byte-identical TCP options (timestamps included).
//!
//! Every member's checksums are verified first (the IPv4 header's, and
//! TCP's over the pseudo header), as the kernel's GRO does: a super-packet
//! is written with `F_NEEDS_CSUM`, so the kernel computes its checksum
//! instead of checking the members', and a segment damaged before the far
//! end sealed it would reach the application looking valid. A segment whose
//! checksum fails goes out alone, as it came, for the kernel to drop.
//!
//! Groups are emitted in the order of their first member. Packets of
//! different flows may thereby overtake each other; within a flow the order
//! is kept, because any TCP packet of a flow that does not join its open
//! group closes it.

use super::checksum;
use super::header::{
    be16, be32, fix_ipv4_checksum, put16, VnetHdr, F_NEEDS_CSUM, GSO_TCPV4, GSO_TCPV6, IPPROTO_TCP,
    TCP_ACK, TCP_CSUM_OFFSET, TCP_PSH, VNET_HDR_LEN,
};

/// Largest IP packet a group may become (IPv4 total length; IPv6 stays
/// below it too, so one limit serves both).
pub const MAX_SUPER_LEN: usize = 65535;

/// Most packets in one group; bounds the `iovec`s of one write.
pub const MAX_MEMBERS: usize = 64;

/// Flows that can have an open group at the same time; more flows than
/// this in one batch close the oldest.
const OPEN_FLOWS: usize = 8;

/// Room [`write_gso_header`] needs: `virtio_net_hdr` plus the largest IP
/// and TCP headers a group can have.
pub const GSO_HEADER_MAX: usize = VNET_HDR_LEN + 40 + 60;

const NONE: u32 = u32::MAX;

/// Where the headers of a TCP packet end, for a packet whose layout the
/// planner understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TcpView {
    ipv6: bool,
    tcp_at: usize,
    hdr_len: usize,
}

impl TcpView {
    /// A TCP packet without IPv4 options or fragmentation, without IPv6
    /// extension headers, whose IP length matches the slice.
    ///
    /// Read by hand, not through `braid_core::ip` as `split` does: through
    /// the view, `cargo bench -p braid-io --bench offload gro` took 1.42 µs
    /// instead of 1.29 µs per 44 segments (this runs per received packet).
    fn parse(pkt: &[u8]) -> Option<TcpView> {
        let (ipv6, tcp_at) = match pkt.first()? >> 4 {
            4 if pkt.len() >= 20
                && pkt[0] == 0x45
                && pkt[9] == IPPROTO_TCP
                && be16(pkt, 6) & 0x3fff == 0
                && be16(pkt, 2) as usize == pkt.len() =>
            {
                (false, 20)
            }
            6 if pkt.len() >= 40
                && pkt[6] == IPPROTO_TCP
                && be16(pkt, 4) as usize + 40 == pkt.len() =>
            {
                (true, 40)
            }
            _ => return None,
        };
        let tcp_len = (*pkt.get(tcp_at + 12)? >> 4) as usize * 4;
        let hdr_len = tcp_at + tcp_len;
        if tcp_len < 20 || hdr_len > pkt.len() {
            return None;
        }
        Some(TcpView {
            ipv6,
            tcp_at,
            hdr_len,
        })
    }

    /// Addresses and ports: the flow.
    fn same_flow(&self, a: &[u8], other: &TcpView, b: &[u8]) -> bool {
        let addrs = if self.ipv6 { 8..40 } else { 12..20 };
        self.ipv6 == other.ipv6
            && a[addrs.clone()] == b[addrs]
            && a[self.tcp_at..self.tcp_at + 4] == b[other.tcp_at..other.tcp_at + 4]
    }

    fn flags(&self, pkt: &[u8]) -> u8 {
        pkt[self.tcp_at + 13]
    }

    fn seq(&self, pkt: &[u8]) -> u32 {
        be32(pkt, self.tcp_at + 4)
    }

    fn payload_len(&self, pkt: &[u8]) -> usize {
        pkt.len() - self.hdr_len
    }

    /// Whether the IPv4 header checksum and the TCP checksum (over the
    /// pseudo header) hold.
    fn checksums_ok(&self, pkt: &[u8]) -> bool {
        let (src, dst) = if self.ipv6 {
            (&pkt[8..24], &pkt[24..40])
        } else {
            if checksum::checksum(&pkt[..20], 0) != 0 {
                return false;
            }
            (&pkt[12..16], &pkt[16..20])
        };
        let tcp = &pkt[self.tcp_at..];
        // A packet is at most 64 KiB (checked by parse): the length fits.
        let pseudo = checksum::pseudo_header(src, dst, IPPROTO_TCP, tcp.len() as u32);
        checksum::checksum(tcp, pseudo) == 0
    }

    /// Plain bulk data: ACK or ACK|PSH and a payload.
    fn is_data(&self, pkt: &[u8]) -> bool {
        let f = self.flags(pkt);
        (f == TCP_ACK || f == TCP_ACK | TCP_PSH) && self.payload_len(pkt) > 0
    }

    /// Every header field that must match for `b` to join a group headed by
    /// `a` (same flow already established): IP fields other than length,
    /// ID and checksum; TCP ack, window, data offset and options.
    fn same_headers(&self, a: &[u8], b: &[u8]) -> bool {
        let ip_same = if self.ipv6 {
            a[..4] == b[..4] && a[7] == b[7]
        } else {
            a[1] == b[1] && a[6..9] == b[6..9]
        };
        let t = self.tcp_at;
        ip_same
            && a[t + 8..t + 13] == b[t + 8..t + 13]
            && a[t + 14..t + 16] == b[t + 14..t + 16]
            && a[t + 20..self.hdr_len] == b[t + 20..self.hdr_len]
    }
}

/// Packets written together: one, or a TCP super-packet's worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// Batch index of the first member.
    pub first: usize,
    /// How many packets the group holds.
    pub members: usize,
    last: u32,
    /// Layout of the first member; `None` for a packet that never joins.
    view: Option<TcpView>,
    gso_size: usize,
    payload_total: usize,
    next_seq: u32,
    psh: bool,
}

impl Group {
    /// Whether the group goes out as one super-packet (otherwise its one
    /// packet is written as it is).
    pub fn is_coalesced(&self) -> bool {
        self.members > 1
    }

    /// IP plus TCP header bytes of each member (0 for a non-TCP packet).
    pub fn hdr_len(&self) -> usize {
        self.view.map_or(0, |v| v.hdr_len)
    }
}

/// Plans the groups of a write batch; holds its arrays across batches so
/// planning allocates nothing once they have grown to the batch size.
#[derive(Debug, Default)]
pub struct Planner {
    groups: Vec<Group>,
    /// Batch index of the next member of the same group, per packet.
    next: Vec<u32>,
    /// Groups that may still grow, oldest first.
    open: Vec<usize>,
}

impl Planner {
    pub fn new() -> Planner {
        Planner {
            groups: Vec::new(),
            next: Vec::new(),
            open: Vec::with_capacity(OPEN_FLOWS),
        }
    }

    /// Groups packets `0..n`, where `packet(i)` is packet `i` (an empty
    /// one is skipped: it is in no group).
    ///
    /// Panics if `n` does not fit the `u32` batch indices below `NONE`
    /// (a batch is at most a few thousand packets).
    pub fn plan<'a>(&mut self, n: usize, packet: impl Fn(usize) -> &'a [u8]) {
        // Checked once here, so every `i as u32` below is exact.
        assert!(n < NONE as usize, "batch too large to plan");
        self.groups.clear();
        self.open.clear();
        self.next.clear();
        self.next.resize(n, NONE);
        for i in 0..n {
            let pkt = packet(i);
            if pkt.is_empty() {
                continue;
            }
            let Some(view) = TcpView::parse(pkt) else {
                self.push_single(i, None);
                continue;
            };
            let flow = self.open.iter().position(|&g| {
                let head = &self.groups[g];
                let hv = head.view.as_ref().unwrap();
                hv.same_flow(packet(head.first), &view, pkt)
            });
            // A damaged segment is no data to merge: it goes out alone.
            let data = view.is_data(pkt) && view.checksums_ok(pkt);
            if let Some(k) = flow {
                let g = self.open[k];
                if data && self.try_append(g, packet(self.groups[g].first), i, pkt, &view) {
                    continue;
                }
                // Whatever comes next of this flow must follow this packet.
                self.open.remove(k);
            }
            if !data {
                self.push_single(i, Some(view));
                continue;
            }
            let psh = view.flags(pkt) & TCP_PSH != 0;
            let payload = view.payload_len(pkt);
            self.groups.push(Group {
                first: i,
                members: 1,
                last: i as u32,
                view: Some(view),
                gso_size: payload,
                payload_total: payload,
                // Sequence numbers are modulo 2^32: wrapping is the intent.
                next_seq: view.seq(pkt).wrapping_add(payload as u32),
                psh,
            });
            if !psh {
                if self.open.len() == OPEN_FLOWS {
                    self.open.remove(0);
                }
                self.open.push(self.groups.len() - 1);
            }
        }
    }

    fn push_single(&mut self, i: usize, view: Option<TcpView>) {
        self.groups.push(Group {
            first: i,
            members: 1,
            last: i as u32,
            view,
            gso_size: 0,
            payload_total: 0,
            next_seq: 0,
            psh: false,
        });
    }

    /// Adds packet `i` to open group `g` if it continues it; closes the
    /// group when `i` is its last possible member.
    fn try_append(&mut self, g: usize, head: &[u8], i: usize, pkt: &[u8], view: &TcpView) -> bool {
        let group = &mut self.groups[g];
        let hv = group.view.unwrap();
        let payload = view.payload_len(pkt);
        // Every term is bounded by a packet length (payload_total by this
        // very test before): the sum cannot overflow.
        let fits = group.members < MAX_MEMBERS
            && hv.hdr_len + group.payload_total + payload <= MAX_SUPER_LEN
            && payload <= group.gso_size
            && view.seq(pkt) == group.next_seq
            && hv.hdr_len == view.hdr_len
            && hv.same_headers(head, pkt);
        if !fits {
            return false;
        }
        self.next[group.last as usize] = i as u32;
        group.last = i as u32;
        group.members += 1;
        group.payload_total += payload;
        // Sequence numbers are modulo 2^32: wrapping is the intent.
        group.next_seq = group.next_seq.wrapping_add(payload as u32);
        group.psh = view.flags(pkt) & TCP_PSH != 0;
        if group.psh || payload < group.gso_size {
            self.open.retain(|&o| o != g);
        }
        true
    }

    /// The groups of the last [`plan`](Self::plan), in write order.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Batch indices of `group`'s members, in sequence order.
    pub fn members(&self, group: &Group) -> Members<'_> {
        Members {
            next: &self.next,
            at: group.first as u32,
        }
    }
}

/// Iterator over a group's batch indices; see [`Planner::members`].
pub struct Members<'a> {
    next: &'a [u32],
    at: u32,
}

impl Iterator for Members<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.at == NONE {
            return None;
        }
        let i = self.at as usize;
        self.at = self.next[i];
        Some(i)
    }
}

/// Writes the `virtio_net_hdr` and the IP/TCP header a coalesced group is
/// sent with to the front of `out` (at least [`GSO_HEADER_MAX`] bytes);
/// returns their length. `head` is the group's first member.
///
/// The header is the first member's with the lengths of the whole group,
/// PSH if the last member had it, and in the TCP checksum field the
/// pseudo-header sum the kernel completes (`F_NEEDS_CSUM`) per segment.
pub fn write_gso_header(group: &Group, head: &[u8], out: &mut [u8]) -> usize {
    let view = group.view.expect("a coalesced group is TCP");
    let hdr_len = view.hdr_len;
    // The planner keeps total <= MAX_SUPER_LEN (65535) for a coalesced
    // group and hdr_len <= 100, so every `as u16` below is exact; IPv6's
    // total >= 40 + 20.
    let total = hdr_len + group.payload_total;
    let vnet = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: if view.ipv6 { GSO_TCPV6 } else { GSO_TCPV4 },
        hdr_len: hdr_len as u16,
        gso_size: group.gso_size as u16,
        csum_start: view.tcp_at as u16,
        csum_offset: TCP_CSUM_OFFSET,
    };
    out[..VNET_HDR_LEN].copy_from_slice(&vnet.encode());
    let h = &mut out[VNET_HDR_LEN..VNET_HDR_LEN + hdr_len];
    h.copy_from_slice(&head[..hdr_len]);
    let (src, dst) = if view.ipv6 {
        put16(h, 4, (total - 40) as u16);
        (8..24, 24..40)
    } else {
        put16(h, 2, total as u16);
        fix_ipv4_checksum(h, 20);
        (12..16, 16..20)
    };
    let t = view.tcp_at;
    if group.psh {
        h[t + 13] |= TCP_PSH;
    }
    let pseudo = checksum::pseudo_header(&h[src], &h[dst], IPPROTO_TCP, (total - t) as u32);
    let partial = checksum::fold(pseudo);
    put16(h, t + 16, partial);
    VNET_HDR_LEN + hdr_len
}
