//! `RateLimit` in simulated time (`braid_core::testing`): A limits its
//! peer B to 8 Mbit/s (1000 bytes per millisecond). Each direction is
//! offered three times that for two seconds; what comes out of the other
//! end's TUN must be the rate (plus at most one burst and one queue), in
//! order, whichever side sends.

use braid_core::shaper::{default_burst_bytes, default_queue_bytes};
use braid_core::testing::{Net, NodeId, A, B};
use braid_netem::link::LinkParams;
use std::time::Duration;

const RATE: u64 = 8_000_000;
const PACKET: usize = 1000;
const OFFERED_PER_MS: usize = 3;
const SPAN_MS: u64 = 2000;

/// A, limiting B to `RATE`, and B over a perfect 1 ms line; the tunnel is
/// up both ways and has been quiet for a second (the buckets are full).
fn pair() -> Net {
    let mut net = Net::pair();
    net[A].device.set_rate_limit(0, Some(RATE));
    let line = LinkParams {
        delay: Duration::from_millis(1),
        ..LinkParams::default()
    };
    net.connect_alike((A, 0), (B, 0), line);
    send(&mut net, A, u64::MAX);
    net.run_for(Duration::from_millis(300));
    send(&mut net, B, u64::MAX);
    net.run_for(Duration::from_millis(1000));
    net[A].delivered.clear();
    net[B].delivered.clear();
    net
}

/// A `PACKET`-byte packet numbered `seq` (payload bytes 28..36) enters
/// `from`'s TUN.
fn send(net: &mut Net, from: NodeId, seq: u64) {
    let mut payload = vec![0u8; PACKET - 20];
    payload[8..16].copy_from_slice(&seq.to_le_bytes());
    let to = if from == A { B } else { A };
    net.send(from, to, &payload);
}

/// Sequence numbers of the packets `node`'s TUN got.
fn tun(net: &Net, node: NodeId) -> Vec<u64> {
    net[node]
        .delivered
        .iter()
        .map(|p| u64::from_le_bytes(p[28..36].try_into().unwrap()))
        .filter(|&seq| seq != u64::MAX)
        .collect()
}

/// Offers OFFERED_PER_MS packets per millisecond from one side for
/// SPAN_MS, then lets the queues drain.
fn flood(net: &mut Net, from: NodeId) {
    let mut seq = 0;
    for _ in 0..SPAN_MS {
        for _ in 0..OFFERED_PER_MS {
            send(net, from, seq);
            seq += 1;
        }
        net.run_for(Duration::from_millis(1));
    }
    net.run_for(Duration::from_millis(100));
}

/// The most a limiter may let through in SPAN_MS: the rate, one full
/// bucket and one full queue.
fn ceiling() -> usize {
    let bytes = RATE as usize / 8 * SPAN_MS as usize / 1000
        + default_burst_bytes(RATE) as usize
        + default_queue_bytes(RATE);
    bytes / PACKET + 1
}

fn check(delivered: &[u64], direction: &str) {
    let at_rate = RATE as usize / 8 * SPAN_MS as usize / 1000 / PACKET;
    eprintln!(
        "{direction}: {} of {} packets delivered (rate alone: {at_rate}, ceiling {})",
        delivered.len(),
        SPAN_MS as usize * OFFERED_PER_MS,
        ceiling()
    );
    assert!(
        delivered.len() <= ceiling(),
        "{direction}: {}",
        delivered.len()
    );
    assert!(
        delivered.len() >= at_rate,
        "{direction}: {}",
        delivered.len()
    );
    assert!(
        delivered.windows(2).all(|w| w[0] < w[1]),
        "{direction}: out of order"
    );
}

#[test]
fn outbound_is_held_to_the_rate() {
    let mut pair = pair();
    flood(&mut pair, A);
    check(&tun(&pair, B), "A -> B");
    let info = pair.peer_info(A);
    assert_eq!(info.rate_limit_bits, Some(RATE));
    assert!(info.counters.rate_dropped_tx > 0);
}

#[test]
fn inbound_is_held_to_the_rate() {
    let mut pair = pair();
    flood(&mut pair, B);
    check(&tun(&pair, A), "B -> A");
    let info = pair.peer_info(A);
    assert!(info.counters.rate_dropped_rx > 0);
}

#[test]
fn below_the_rate_nothing_is_dropped_or_delayed_out_of_order() {
    // One packet every 2 ms: half the rate, in both directions.
    let mut pair = pair();
    for seq in 0..1000 {
        send(&mut pair, A, seq);
        send(&mut pair, B, seq);
        pair.run_for(Duration::from_millis(2));
    }
    pair.run_for(Duration::from_millis(100));
    let info = pair.peer_info(A);
    assert_eq!(info.counters.rate_dropped_tx, 0);
    assert_eq!(info.counters.rate_dropped_rx, 0);
    assert_eq!(tun(&pair, B), (0..1000).collect::<Vec<_>>());
    assert_eq!(tun(&pair, A), (0..1000).collect::<Vec<_>>());
}
