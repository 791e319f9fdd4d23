//! Which queue of a multi-queue TUN a packet written to it goes through.
//!
//! The kernel picks the queue a packet leaving the interface (one the
//! daemon reads and sends) is read from by its flow: when the daemon
//! writes a packet of a flow on queue `q`, the kernel notes `q` for that
//! flow (a hash that is the same in both directions), and the flow's
//! packets the other way are read from `q` from then on. A flow the daemon
//! never wrote goes by the hash alone. So each flow is served by one queue
//! and its pipeline, in order, as long as the daemon writes each flow's
//! packets to one queue always: this module's choice, from the addresses,
//! protocol and ports, the same for both directions of a flow.

/// The queue out of `queues` for `pkt` (an IPv4 or IPv6 packet): the same
/// for every packet of a flow, in either direction. Something that is not
/// an IP packet, and every packet when there is one queue, goes to 0.
pub(super) fn queue_for(pkt: &[u8], queues: usize) -> usize {
    if queues <= 1 {
        return 0;
    }
    let Some(key) = FlowKey::parse(pkt) else {
        return 0;
    };
    // Multiply-shift: the high half of hash × queues is below queues and
    // spreads as evenly as the hash.
    ((u64::from(key.hash()) * queues as u64) >> 32) as usize
}

/// A flow's endpoints, ordered so both directions give the same key.
struct FlowKey {
    low_addr: u128,
    high_addr: u128,
    protocol: u8,
    low_port: u16,
    high_port: u16,
}

const TCP: u8 = 6;
const UDP: u8 = 17;

impl FlowKey {
    fn parse(pkt: &[u8]) -> Option<FlowKey> {
        let (src, dst, protocol, l4) = match pkt.first()? >> 4 {
            4 if pkt.len() >= 20 => {
                let ihl = usize::from(pkt[0] & 0x0f) * 4;
                // Flags and fragment offset: a fragment (not the first one)
                // has no ports, so no fragment is told apart by them.
                let fragmented = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff != 0;
                let src = u32::from_be_bytes(pkt[12..16].try_into().ok()?);
                let dst = u32::from_be_bytes(pkt[16..20].try_into().ok()?);
                let l4 = (!fragmented).then(|| pkt.get(ihl..)).flatten();
                (u128::from(src), u128::from(dst), pkt[9], l4)
            }
            // Extension headers are not followed: such a packet's flow is
            // its addresses and first next-header value.
            6 if pkt.len() >= 40 => {
                let src = u128::from_be_bytes(pkt[8..24].try_into().ok()?);
                let dst = u128::from_be_bytes(pkt[24..40].try_into().ok()?);
                (src, dst, pkt[6], pkt.get(40..))
            }
            _ => return None,
        };
        let (src_port, dst_port) = match l4 {
            Some(l4) if (protocol == TCP || protocol == UDP) && l4.len() >= 4 => (
                u16::from_be_bytes([l4[0], l4[1]]),
                u16::from_be_bytes([l4[2], l4[3]]),
            ),
            _ => (0, 0),
        };
        Some(FlowKey {
            low_addr: src.min(dst),
            high_addr: src.max(dst),
            protocol,
            low_port: src_port.min(dst_port),
            high_port: src_port.max(dst_port),
        })
    }

    /// 32 well-mixed bits of the key (not a keyed hash: where a flow's
    /// packets are handled is no secret, and a peer that crowds its flows
    /// onto one queue only slows itself).
    fn hash(&self) -> u32 {
        let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
        for word in [
            self.low_addr as u64,
            (self.low_addr >> 64) as u64,
            self.high_addr as u64,
            (self.high_addr >> 64) as u64,
            u64::from(self.protocol) << 32
                | u64::from(self.low_port) << 16
                | u64::from(self.high_port),
        ] {
            h = (h ^ word).wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^= h >> 33;
        }
        (h >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(src: [u8; 4], dst: [u8; 4], protocol: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = protocol;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    fn ipv6(src: u128, dst: u128, protocol: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 60];
        p[0] = 0x60;
        p[6] = protocol;
        p[8..24].copy_from_slice(&src.to_be_bytes());
        p[24..40].copy_from_slice(&dst.to_be_bytes());
        p[40..42].copy_from_slice(&sport.to_be_bytes());
        p[42..44].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn both_directions_of_a_flow_share_a_queue() {
        for port in 1000..1200u16 {
            let out = ipv4([198, 19, 0, 1], [198, 19, 0, 2], TCP, port, 5201);
            let back = ipv4([198, 19, 0, 2], [198, 19, 0, 1], TCP, 5201, port);
            assert_eq!(queue_for(&out, 4), queue_for(&back, 4));
            let a = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
            let b = 0x2001_0db8_0000_0000_0000_0000_0000_0002;
            let out = ipv6(a, b, UDP, port, 53);
            let back = ipv6(b, a, UDP, 53, port);
            assert_eq!(queue_for(&out, 3), queue_for(&back, 3));
        }
    }

    #[test]
    fn flows_spread_over_every_queue() {
        let queues = 4;
        let mut per_queue = [0usize; 4];
        for port in 0..4000u16 {
            let pkt = ipv4([198, 19, 0, 1], [198, 19, 0, 2], TCP, 40000 + port, 5201);
            per_queue[queue_for(&pkt, queues)] += 1;
        }
        // 1000 each if even; a fifth either way is plenty for steering.
        for (q, &n) in per_queue.iter().enumerate() {
            assert!((800..=1200).contains(&n), "queue {q} got {n} of 4000 flows");
        }
    }

    #[test]
    fn fragments_and_odd_packets_stay_on_their_flow_or_queue_zero() {
        let whole = ipv4([198, 19, 0, 1], [198, 19, 0, 2], UDP, 4000, 4001);
        let mut later_fragment = whole.clone();
        later_fragment[7] = 0xb9; // offset 185 × 8 bytes
        let mut first_fragment = whole.clone();
        first_fragment[6] = 0x20; // more fragments
                                  // The fragments of one datagram share a queue, whatever their ports.
        assert_eq!(queue_for(&later_fragment, 8), queue_for(&first_fragment, 8));
        assert_eq!(queue_for(&[], 8), 0);
        assert_eq!(queue_for(&[0x45, 0, 0], 8), 0, "a truncated header");
        assert_eq!(queue_for(&[0x00; 40], 8), 0, "not IP");
        assert_eq!(queue_for(&whole, 1), 0);
    }
}
