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

/// What one live pair does over a simulated minute (a packet each way every
/// 100 ms, a persistent keepalive) while the responder also knows `idle`
/// peers that never speak: how many times its peers were woken, how many
/// packets got through, and how many deadlines are scheduled at the end.
fn live_minute_beside(idle: u32) -> (u64, usize, usize) {
    use braid_core::testing::{Net, A, B};
    use braid_netem::link::{LinkModel, LinkParams};
    use std::time::Duration;
    let mut net = Net::pair();
    let params = LinkParams {
        delay: Duration::from_millis(5),
        ..LinkParams::default()
    };
    net.connect(
        (A, 0),
        (B, 0),
        LinkModel::new(params.clone(), 1),
        LinkModel::new(params, 2),
    );
    // What a server's roaming clients are before they connect: a key and
    // a /32 each, no endpoint.
    let now = net.now;
    for n in 0..idle {
        let pid = net[B].device.add_peer(key(n)).unwrap();
        net[B]
            .device
            .add_allowed_ip(pid, addr(1000 + n), 32)
            .unwrap();
        net[B].device.set_persistent_keepalive(now, pid, 25);
    }
    net[A].device.set_persistent_keepalive(now, 0, 25);
    let mut changed = Vec::new();
    net[B].device.take_changed_peers(&mut changed);
    assert_eq!(
        changed.len(),
        1 + idle as usize,
        "each peer changed as it was added"
    );
    changed.clear();
    let woken_before = net[B].device.peers_woken();
    for _ in 0..600 {
        net.send(A, B, b"ping");
        net.send(B, A, b"pong");
        net.run_for(Duration::from_millis(100));
    }
    let woken = net[B].device.peers_woken() - woken_before;
    // What a watcher of changes (the daemon's event log) looks at: the
    // live peer only.
    net[B].device.take_changed_peers(&mut changed);
    assert_eq!(changed, [0], "only the live peer changed");
    let delivered = net[A].delivered.len() + net[B].delivered.len();
    let scheduled = usize::from(net[B].device.poll_timeout().is_some());
    (woken, delivered, scheduled)
}

/// Idle peers cost nothing per wake-up: the responder's timers wake
/// exactly the same peers, as often, with 5,000 idle peers beside the
/// live one as with none (a scan per wake-up would visit 5,000 each
/// time). Their persistent keepalives wait for an endpoint and a session,
/// which they never get, so they schedule nothing.
#[test]
fn idle_peers_are_never_woken() {
    let (alone, delivered_alone, _) = live_minute_beside(0);
    let (crowded, delivered_crowded, scheduled) = live_minute_beside(5_000);
    println!(
        "peers woken over a minute: {alone} with no idle peer, {crowded} beside 5,000; \
         packets delivered {delivered_alone} and {delivered_crowded}"
    );
    assert!(alone > 0, "the live peer's timers ran");
    assert_eq!(crowded, alone);
    assert_eq!(delivered_crowded, delivered_alone);
    assert_eq!(delivered_alone, 2 * 600);
    assert_eq!(scheduled, 1);
}

/// A batch of initiations from several peers: their DH work done in parts
/// on threads of their own (as the daemon does on every core), outside the
/// device, gives every peer its session, as one thread does; one from a
/// key that is no peer's gets no response (and no response DH work).
#[test]
fn initiations_answered_in_parts_on_threads_all_complete() {
    use braid_core::batch::PacketBatch;
    use braid_core::device::CryptoJobs;
    use braid_core::testing::{clock, device, ipv4, receive, transmit};
    use std::net::SocketAddr;
    const PEERS: u8 = 7;
    let now = clock::epoch();
    let server_addr: SocketAddr = "198.18.0.1:51820".parse().unwrap();
    let mut server = device(1);
    let server_key = server.public_key().unwrap();
    // The last one is a stranger: the server does not know its key.
    let mut clients: Vec<_> = (0..=PEERS).map(|n| device(n + 2)).collect();
    let mut batch = PacketBatch::new(64, 2048);
    for (n, client) in clients.iter_mut().enumerate() {
        let at_client = client.add_peer(server_key).unwrap();
        client.set_endpoint(at_client, server_addr);
        client.add_allowed_ip(at_client, addr(0), 32).unwrap();
        if n < usize::from(PEERS) {
            let at_server = server.add_peer(client.public_key().unwrap()).unwrap();
            server
                .add_allowed_ip(at_server, addr(1 + n as u32), 32)
                .unwrap();
        }
        // A packet for the server starts the client's handshake.
        let packet = ipv4([198, 19, 0, 2 + n as u8], [198, 19, 0, 0], 17, b"hello");
        let mut out = PacketBatch::new(1, 2048);
        out.push_with(braid_core::batch::HEADROOM, server_addr, |b| {
            b[..packet.len()].copy_from_slice(&packet);
            packet.len()
        });
        client.encapsulate(now, &mut out);
        let sent = transmit(client, now);
        assert_eq!(sent.len(), 1, "one initiation from client {n}");
        let from: SocketAddr = format!("198.18.1.{}:51820", n + 2).parse().unwrap();
        batch.push_with(0, from, |b| {
            b[..sent[0].len()].copy_from_slice(&sent[0]);
            sent[0].len()
        });
    }
    let mut jobs = CryptoJobs::new();
    server.prepare_decapsulate(now, &mut batch, &mut jobs);
    assert_eq!(jobs.initiations(), usize::from(PEERS) + 1);
    let rejected = server.counters.handshake_rejected;
    std::thread::scope(|s| {
        for part in jobs.initiation_parts(3) {
            s.spawn(move || part.run());
        }
    });
    server.finish_decapsulate(now, &mut batch, &mut jobs);
    let responses = transmit(&mut server, now);
    let kinds: Vec<u8> = responses.iter().map(|r| r[0]).collect();
    assert_eq!(
        responses.len(),
        usize::from(PEERS),
        "one response each: {kinds:?}"
    );
    assert_eq!(
        server.counters.handshake_rejected,
        rejected + 1,
        "the stranger's"
    );
    for (n, client) in clients.iter_mut().take(PEERS.into()).enumerate() {
        let replies: Vec<(SocketAddr, &[u8])> = responses
            .iter()
            .map(|r| (server_addr, r.as_slice()))
            .collect();
        receive(client, now, &replies);
        let info = client.peer_info(0).unwrap();
        assert_eq!(info.counters.handshakes_completed, 1, "client {n}");
    }
}

/// Removing peers one by one clears exactly their own AllowedIPs (found
/// from what each was given, not by a walk of the table), also after some
/// moved to other peers and back; the table ends with the others' only.
#[test]
fn removing_peers_one_by_one_leaves_the_others_prefixes() {
    let mut d = device(1);
    let pids: Vec<usize> = (0..2000).map(|n| d.add_peer(key(n)).unwrap()).collect();
    for (n, &pid) in pids.iter().enumerate() {
        d.add_allowed_ip(pid, addr(n as u32), 32).unwrap();
    }
    // Peer 1's address moves to peer 0 and back to 1, peer 3's to peer 2
    // for good; peer 0 gets one more many times over (its list compacts).
    d.add_allowed_ip(pids[0], addr(1), 32).unwrap();
    d.add_allowed_ip(pids[1], addr(1), 32).unwrap();
    d.add_allowed_ip(pids[2], addr(3), 32).unwrap();
    for _ in 0..100 {
        d.add_allowed_ip(pids[4], addr(5000), 32).unwrap();
        d.add_allowed_ip(pids[0], addr(5000), 32).unwrap();
    }
    for n in (0..2000).step_by(2) {
        assert!(d.remove_peer(&key(n)));
    }
    let infos = d.peer_infos();
    assert_eq!(infos.len(), 1000);
    for (pid, info) in &infos {
        let n = pids.iter().position(|p| p == pid).unwrap() as u32;
        let want: Vec<_> = match n {
            1 => vec![(addr(1), 32)],
            3 => vec![],
            _ => vec![(addr(n), 32)],
        };
        assert_eq!(info.allowed_ips, want, "peer {n}");
    }
    // Peer 2's (removed) took peer 3's address with it; 5000 went with 0.
    assert_eq!(
        d.peer_infos()
            .iter()
            .map(|(_, i)| i.allowed_ips.len())
            .sum::<usize>(),
        999
    );
}

/// One peer's AllowedIPs listed from what it was given come in the table's
/// order (IPv4 first, by address, shorter first), as one walk of the table
/// lists them, whatever order they were added in.
#[test]
fn a_peers_own_listing_is_in_the_tables_order() {
    let mut d = device(1);
    let pid = d.add_peer(key(1)).unwrap();
    let other = d.add_peer(key(2)).unwrap();
    let given: [(&str, u8); 8] = [
        ("2001:db8::1", 128),
        ("198.19.7.9", 32),
        ("198.19.0.0", 16),
        ("2001:db8::", 32),
        ("198.18.0.0", 15),
        ("198.19.7.0", 24),
        ("198.19.7.200", 24),
        ("2001:db8:1::", 48),
    ];
    for (addr, prefix) in given {
        d.add_allowed_ip(pid, addr.parse().unwrap(), prefix)
            .unwrap();
    }
    // One of them moves to the other peer.
    d.add_allowed_ip(other, "2001:db8::".parse().unwrap(), 32)
        .unwrap();
    let walked = d
        .peer_infos()
        .into_iter()
        .find(|(p, _)| *p == pid)
        .unwrap()
        .1
        .allowed_ips;
    assert_eq!(d.allowed_ips_of(pid), walked);
    assert_eq!(walked.len(), 6, "{walked:?}");
    assert_eq!(
        d.allowed_ips_of(other),
        d.peer_info(other).unwrap().allowed_ips
    );
}
