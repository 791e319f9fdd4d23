//! The last AllowedIPs answer within one batch. The packets of a batch
//! mostly go to one address (a TCP stream's segments) or come from one,
//! and a longest-prefix match in a table of 100,000 peers walks about
//! seventeen nodes, each a cache miss: the next packet with the same
//! address takes the answer again. Forgotten at the start of every batch
//! (AllowedIPs change only between calls).

use crate::allowed_ips::AllowedIps;
use crate::ip::Ip;
use crate::peer::PeerId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Address {
    V4([u8; 4]),
    V6([u8; 16]),
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct RouteMemo {
    last: Option<(Address, Option<PeerId>)>,
}

impl RouteMemo {
    pub(super) fn forget(&mut self) {
        self.last = None;
    }

    /// The peer owning the destination (`source` false) or source address
    /// of `ip`.
    pub(super) fn lookup(
        &mut self,
        table: &AllowedIps<PeerId>,
        ip: &Ip<'_>,
        source: bool,
    ) -> Option<PeerId> {
        let address = match (ip, source) {
            (Ip::V4(h), false) => Address::V4(h.dst()),
            (Ip::V4(h), true) => Address::V4(h.src()),
            (Ip::V6(h), false) => Address::V6(h.dst()),
            (Ip::V6(h), true) => Address::V6(h.src()),
        };
        if let Some((a, owner)) = self.last {
            if a == address {
                return owner;
            }
        }
        let owner = match address {
            Address::V4(a) => table.lookup_v4(a),
            Address::V6(a) => table.lookup_v6(a),
        };
        self.last = Some((address, owner));
        owner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn packet(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&20u16.to_be_bytes());
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn the_same_address_again_gets_the_same_answer_until_forgotten() {
        let mut table = AllowedIps::new();
        table.insert(IpAddr::from([198, 19, 0, 2]), 32, 7).unwrap();
        let mut memo = RouteMemo::default();
        let to_7 = packet([198, 19, 0, 1], [198, 19, 0, 2]);
        let ip = Ip::new(&to_7).unwrap();
        assert_eq!(memo.lookup(&table, &ip, false), Some(7));
        assert_eq!(
            memo.lookup(&table, &ip, true),
            None,
            "the source is no one's"
        );
        assert_eq!(memo.lookup(&table, &ip, false), Some(7));
        // A change between batches is seen once the memo is forgotten.
        table.insert(IpAddr::from([198, 19, 0, 2]), 32, 8).unwrap();
        memo.forget();
        assert_eq!(memo.lookup(&table, &ip, false), Some(8));
    }
}
