//! The clocks a device is told about, in virtual time
//! (`braid_core::testing`): the wall clock (`Device::set_wall_clock`),
//! which makes the TAI64N timestamps of initiations, and time that passed
//! while the monotonic clock stood still (`Device::time_passed_unseen`,
//! a suspend), which ages sessions and timers.
//!
//! The net's clock is every device's monotonic clock; the true wall time
//! is [`clock::wall`] at [`clock::epoch`] plus the virtual time since.

use braid_core::consts::*;
use braid_core::device::Device;
use braid_core::messages::{TYPE_DATA, TYPE_DATA_AES, TYPE_INITIATION};
use braid_core::testing::{clock, Net, A, B};
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

const TEN_MINUTES: Duration = Duration::from_secs(600);

/// The true wall time at the net's `now`.
fn true_wall(net: &Net) -> SystemTime {
    clock::wall() + (net.now - clock::epoch())
}

/// A restarts: a new device with A's key and its peer B (endpoint and
/// allowed IP as `Net::pair` made them), whose wall clock reads `wall`.
fn restart_a(net: &mut Net, wall: SystemTime) {
    let b_key = net[B].device.public_key().expect("B has a key");
    let mut d = Device::new(net.now, wall, [0xa1; 32]);
    d.set_private_key(Some([0x11; 32]));
    let pid = d.add_peer(b_key).expect("room for a peer");
    d.set_endpoint(pid, net.addr(B));
    d.add_allowed_ip(pid, IpAddr::V4(net[B].tun), 32)
        .expect("valid prefix");
    net[A].device = d;
}

/// Packet `n` enters A's TUN, for B.
fn send_a(net: &mut Net, n: u8) {
    net.send(A, B, &[n; 40]);
}

/// A and B after one handshake (A's timestamp from a correct clock) and
/// one packet.
fn up() -> Net {
    let mut net = Net::pair();
    send_a(&mut net, 1);
    net.run_for(Duration::from_secs(1));
    assert_eq!(net[B].delivered.len(), 1);
    net
}

#[test]
fn a_device_started_with_its_clock_behind_gets_through_once_told_the_time() {
    let mut net = up();
    net.run_for(Duration::from_secs(60));
    // A restarts before NTP set the clock: ten minutes behind. Its
    // timestamps are older than the one B saw, so B takes them for replays.
    let behind = true_wall(&net) - TEN_MINUTES;
    restart_a(&mut net, behind);
    let refused = net[B].device.counters.handshake_flood_dropped;
    send_a(&mut net, 2);
    net.run_for(Duration::from_secs(1));
    assert_eq!(net[B].delivered.len(), 1, "B refused A's stale timestamp");
    assert!(net[B].device.counters.handshake_flood_dropped > refused);
    // NTP steps the clock and the driver tells the device: A's next retry
    // carries the true time, and B accepts it.
    let (now, wall) = (net.now, true_wall(&net));
    net[A].device.set_wall_clock(now, wall);
    net.run_for(REKEY_TIMEOUT + REKEY_TIMEOUT_JITTER_MAX + Duration::from_secs(1));
    assert_eq!(
        net[B].delivered.len(),
        2,
        "the staged packet went over a new session"
    );
    let last = net.peer_info(A).last_handshake.expect("A has a handshake");
    assert!(
        last >= wall && last <= true_wall(&net),
        "\"latest handshake\" reads the true time"
    );
}

#[test]
fn a_clock_stepped_back_still_gives_a_peer_rising_timestamps() {
    let mut net = up();
    // The wall clock steps ten minutes back while A runs (B saw a
    // timestamp from before the step).
    let (now, wall) = (net.now, true_wall(&net) - TEN_MINUTES);
    net[A].device.set_wall_clock(now, wall);
    // The session expires: the next packet needs a new handshake, which
    // B must accept although A's clock reads earlier than before.
    net.run_for(REJECT_AFTER_TIME + Duration::from_secs(1));
    let refused = net[B].device.counters.handshake_flood_dropped;
    send_a(&mut net, 2);
    net.run_for(Duration::from_secs(1));
    assert_eq!(net[B].delivered.len(), 2, "B accepted the new handshake");
    assert_eq!(net[B].device.counters.handshake_flood_dropped, refused);
    // "Latest handshake" reads A's (stepped) clock all the same.
    let last = net.peer_info(A).last_handshake.expect("A has a handshake");
    assert!(last < true_wall(&net) - Duration::from_secs(300));
}

#[test]
fn after_a_suspend_past_reject_after_time_the_old_session_is_not_used() {
    for slept in [REJECT_AFTER_TIME + Duration::from_secs(20), TEN_MINUTES] {
        let mut net = up();
        let initiated = net.peer_info(A).counters.handshakes_initiated;
        // A slept: its monotonic clock (the net's) did not move, and the
        // driver says how long it was gone; timers now due fire.
        let now = net.now;
        net[A].device.time_passed_unseen(now, slept);
        net.settle();
        // Past 3 × REJECT_AFTER_TIME the keys are gone (ZeroKeyMaterial
        // came due), short of it they are only too old to use.
        let keys_left = net[A].device.index_count();
        assert_eq!(
            keys_left == 0,
            slept > REJECT_AFTER_TIME * 3,
            "after {slept:?}"
        );
        let captured = net.capture.len();
        send_a(&mut net, 2);
        assert_eq!(
            net.capture[captured].bytes[0], TYPE_INITIATION,
            "after {slept:?}: an initiation, not data on the session from before"
        );
        net.run_for(Duration::from_secs(1));
        assert_eq!(net[B].delivered.len(), 2, "after {slept:?}");
        let c = net.peer_info(A).counters;
        assert_eq!(c.handshakes_initiated, initiated + 1, "after {slept:?}");
        assert_eq!(c.handshakes_completed, 2, "after {slept:?}");
    }
}

#[test]
fn a_short_suspend_keeps_the_session_and_rekeys_when_it_is_due() {
    let mut net = up();
    // Slept past REKEY_AFTER_TIME but not REJECT_AFTER_TIME: the session
    // still carries data, and the initiator starts a new handshake.
    let now = net.now;
    net[A]
        .device
        .time_passed_unseen(now, REKEY_AFTER_TIME + Duration::from_secs(5));
    net.settle();
    let captured = net.capture.len();
    send_a(&mut net, 2);
    let kinds: Vec<u8> = net.capture[captured..].iter().map(|d| d.bytes[0]).collect();
    assert!(
        matches!(kinds.first(), Some(&(TYPE_DATA | TYPE_DATA_AES))),
        "data on the old session first: {kinds:?}"
    );
    assert!(kinds.contains(&TYPE_INITIATION), "and a rekey: {kinds:?}");
    net.run_for(Duration::from_secs(1));
    assert_eq!(net[B].delivered.len(), 2);
    assert_eq!(net.peer_info(A).counters.handshakes_completed, 2);
}
