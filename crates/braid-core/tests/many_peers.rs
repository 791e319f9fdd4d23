//! The bookkeeping that keeps the userspace API linear in the number of
//! peers: AllowedIPs listed for all peers in one walk, prefixes counted per
//! peer, freed peer slots reused.

use braid_core::testing::device;
use std::net::{IpAddr, Ipv4Addr};

fn key(n: u32) -> [u8; 32] {
    let mut k = [0x11u8; 32];
    k[..4].copy_from_slice(&n.to_le_bytes());
    k
}

fn addr(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + n))
}

#[test]
fn allowed_ips_of_every_peer_from_one_listing() {
    let mut d = device(1);
    let pids: Vec<usize> = (0..1000).map(|n| d.add_peer(key(n)).unwrap()).collect();
    for (n, &pid) in pids.iter().enumerate() {
        d.add_allowed_ip(pid, addr(n as u32), 32).unwrap();
    }
    // A prefix moves from peer 0 to peer 1: each keeps what it holds.
    d.add_allowed_ip(pids[1], addr(0), 32).unwrap();
    let infos = d.peer_infos();
    assert_eq!(infos.len(), 1000);
    for (pid, info) in &infos {
        assert_eq!(info.allowed_ips, d.peer_info(*pid).unwrap().allowed_ips);
    }
    assert!(infos[0].1.allowed_ips.is_empty());
    assert_eq!(infos[1].1.allowed_ips, [(addr(0), 32), (addr(1), 32)]);
    assert_eq!(d.peer(pids[0]).unwrap().allowed_prefixes, 0);
    assert_eq!(d.peer(pids[1]).unwrap().allowed_prefixes, 2);
    // Clearing a peer with none changes nothing; clearing one with some
    // removes exactly its own.
    d.clear_allowed_ips(pids[0]);
    d.clear_allowed_ips(pids[1]);
    assert!(d.peer_info(pids[1]).unwrap().allowed_ips.is_empty());
    assert_eq!(d.peer_info(pids[2]).unwrap().allowed_ips, [(addr(2), 32)]);
}

#[test]
fn a_removed_peers_slot_is_reused_clean() {
    let mut d = device(1);
    let a = d.add_peer(key(1)).unwrap();
    let b = d.add_peer(key(2)).unwrap();
    d.add_allowed_ip(a, addr(1), 32).unwrap();
    assert!(d.remove_peer(&key(1)));
    assert!(d.peer(a).is_none());
    let c = d.add_peer(key(3)).unwrap();
    assert_eq!(c, a, "the freed slot is reused");
    assert!(d.peer_info(c).unwrap().allowed_ips.is_empty());
    assert_eq!(d.peer(c).unwrap().allowed_prefixes, 0);
    assert_eq!(d.peer_ids().collect::<Vec<_>>(), [a, b]);
    // Removing every peer leaves nothing behind, and slots are reused.
    d.remove_all_peers();
    assert_eq!(d.peer_count(), 0);
    assert_eq!(d.index_count(), 0);
    let again: Vec<usize> = (10..12).map(|n| d.add_peer(key(n)).unwrap()).collect();
    assert!(again.iter().all(|&p| p == a || p == b));
}
