//! Every table an outside packet stream, peer or path can grow stays within
//! its named limit: each test offers ten times the limit and counts.

use braid_core::batch::PacketBatch;
use braid_core::consts::*;
use braid_core::cookie::CookieState;
use braid_core::messages::INITIATION_LEN;
use braid_core::noise::{self, LocalStatic, RemoteStatic};
use braid_core::path::MAX_PATHS;
use braid_core::peer::Peer;
use braid_core::reorder::{ReorderConfig, ReorderWindow};
use braid_core::testing::{clock, device, receive, transmit};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use x25519_dalek::StaticSecret;

const TENFOLD: usize = 10;

fn source(n: usize) -> SocketAddr {
    let ip = u32::from(Ipv4Addr::new(198, 18, 100, 0)) + n as u32;
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), 40_000)
}

/// An initiation from `from` to `to` (macs filled) with a given timestamp.
fn initiation(from: &LocalStatic, to: [u8; 32], seconds: u64, index: u32) -> [u8; INITIATION_LEN] {
    let remote = RemoteStatic::new(from, to, [0; 32]);
    let mut msg = [0u8; INITIATION_LEN];
    noise::create_initiation(
        from,
        &remote,
        StaticSecret::from([index as u8 | 1; 32]),
        &noise::tai64n(seconds, 0),
        index,
        &mut msg,
    )
    .expect("the responder's key is not of low order");
    CookieState::new(&to).add_macs(clock::epoch(), &mut msg);
    msg
}

#[test]
fn peers_stop_at_the_limit() {
    const LIMIT: usize = 50;
    const { assert!(MAX_PEERS >= LIMIT) };
    let mut d = device(1);
    d.set_peer_limit(LIMIT);
    let added = (0..TENFOLD * LIMIT)
        .filter(|&i| {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            d.add_peer(key).is_some()
        })
        .count();
    assert_eq!(added, LIMIT);
    assert_eq!(d.peer_count(), LIMIT);
    // Existing peers are still found; the limit never goes above MAX_PEERS.
    let mut first = [0u8; 32];
    first[0] = 1;
    assert!(d.add_peer(first).is_some());
    d.set_peer_limit(usize::MAX);
    let mut key = [0xee; 32];
    key[0] = 0;
    assert!(d.add_peer(key).is_some());
}

#[test]
fn paths_per_peer_stop_at_max_paths() {
    let mut peer = Peer::new([4; 32]);
    let now = clock::epoch();
    // A braid peer (it spoke braid in its session) learns a path from
    // every new source.
    let keys = braid_core::noise::SessionKeys {
        send: [1; 32],
        recv: [2; 32],
    };
    let session = braid_core::session::Keypair::new(&keys, 7, 8, now, true, None);
    peer.keypairs.current = Some(Box::new(session));
    peer.braid_session = Some(7);
    assert!(peer.speaks_braid());
    for n in 0..TENFOLD * MAX_PATHS {
        peer.authenticated_rx(now, 0, source(n), 100);
        assert!(peer.paths.len() <= MAX_PATHS);
    }
    assert_eq!(peer.paths.len(), MAX_PATHS);
    let configured = (0..TENFOLD * MAX_PATHS)
        .filter(|&n| peer.add_path("p", 1, source(1000 + n)))
        .count();
    assert_eq!(configured, 0, "no room left for configured paths");
    assert_eq!(peer.paths.len(), MAX_PATHS);
}

#[test]
fn staged_packets_stop_at_the_limit_and_buffers_are_recycled() {
    let mut peer = Peer::new([4; 32]);
    let packet = [0x45u8; 1400];
    for _ in 0..TENFOLD * MAX_STAGED_PACKETS {
        peer.stage(&packet);
    }
    assert_eq!(peer.staged.len(), MAX_STAGED_PACKETS);
    assert_eq!(
        peer.counters.staged_dropped,
        ((TENFOLD - 1) * MAX_STAGED_PACKETS) as u64
    );
}

#[test]
fn staged_packets_of_a_device_without_answer_stay_bounded() {
    let mut a = device(1);
    let pid = a.add_peer(device(2).public_key().unwrap()).unwrap();
    a.set_endpoint(pid, source(1));
    a.add_allowed_ip(pid, IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)), 32)
        .unwrap();
    let now = clock::epoch();
    let mut batch = PacketBatch::new(64, 2048);
    for _ in 0..(TENFOLD * MAX_STAGED_PACKETS) / 64 {
        batch.clear();
        for _ in 0..64 {
            batch.push_with(braid_core::batch::HEADROOM, source(0), |b| {
                let mut p = [0u8; 60];
                p[0] = 0x45;
                p[2..4].copy_from_slice(&60u16.to_be_bytes());
                p[16..20].copy_from_slice(&[198, 19, 0, 2]);
                b[..60].copy_from_slice(&p);
                60
            });
        }
        a.encapsulate(now, &mut batch);
        transmit(&mut a, now).len();
    }
    let peer = a.peer(pid).unwrap();
    assert_eq!(peer.staged.len(), MAX_STAGED_PACKETS);
    // The handshake went out once (REKEY_TIMEOUT spaces new ones).
    assert_eq!(peer.counters.handshakes_initiated, 1);
}

#[test]
fn receiver_indices_stay_within_four_per_peer() {
    let mut b = device(2);
    let a_key = LocalStatic::new([9; 32]);
    b.add_peer(a_key.public).unwrap();
    let b_pub = b.public_key().unwrap();
    let t0 = clock::epoch();
    let spacing = Duration::from_secs(1) / INITIATIONS_PER_SECOND * 2;
    for n in 0..40u32 {
        let msg = initiation(&a_key, b_pub, clock::WALL_SECS + n as u64, n);
        receive(&mut b, t0 + spacing * n, &[(source(0), &msg)]);
        assert!(b.index_count() <= 4, "after {n}: {}", b.index_count());
    }
    assert_eq!(
        b.peer_info(0).unwrap().counters.handshake_responses_sent,
        40,
        "every initiation was answered"
    );
    // The initiator side: retries replace the pending index, never add.
    let mut a = device(3);
    let pid = a.add_peer(b_pub).unwrap();
    a.set_endpoint(pid, source(1));
    a.set_persistent_keepalive(t0, pid, 1);
    let mut now = t0;
    while now < t0 + REKEY_ATTEMPT_TIME * 2 {
        now += Duration::from_millis(500);
        a.handle_timeout(now);
        transmit(&mut a, now).len();
        assert!(a.index_count() <= 1);
    }
    assert!(a.peer(pid).unwrap().counters.handshakes_initiated > 10);
}

#[test]
fn queued_control_messages_stop_at_the_limit() {
    let mut b = device(2);
    let b_pub = b.public_key().unwrap();
    let strangers: Vec<_> = (0..16u8)
        .map(|i| initiation(&LocalStatic::new([i + 40; 32]), b_pub, 1, i as u32))
        .collect();
    let now = clock::epoch();
    let offered = TENFOLD * MAX_QUEUED_CONTROL;
    for chunk in (0..offered).collect::<Vec<_>>().chunks(128) {
        let batch: Vec<(SocketAddr, &[u8])> = chunk
            .iter()
            .map(|&n| (source(n), &strangers[n % 16][..]))
            .collect();
        receive(&mut b, now, &batch);
    }
    assert!(b.counters.cookie_replies_sent > 0, "under load");
    assert!(b.counters.control_queue_full > 0);
    assert_eq!(transmit(&mut b, now).len(), MAX_QUEUED_CONTROL);
}

#[test]
fn a_reorder_window_holds_at_most_its_capacity() {
    let cfg = ReorderConfig {
        capacity: 32,
        ..ReorderConfig::default()
    };
    let mut w = ReorderWindow::new(cfg.clone());
    w.set_live_paths(1);
    let now = clock::epoch();
    w.delivered_in_place(now, 0, 0);
    // Counter 1 never comes: everything after it would wait.
    let packet = [0u8; 1000];
    for counter in 2..(2 + (TENFOLD * cfg.capacity) as u64) {
        w.insert(now, counter, 0, &packet);
        assert!(w.held_packets() <= cfg.capacity);
        assert!(w.held_packets() + w.ready_packets() <= 2 * cfg.capacity);
    }
    assert!(w.allocated_slots() <= 2 * cfg.capacity + 1);
}
