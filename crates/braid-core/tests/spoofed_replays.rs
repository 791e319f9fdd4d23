//! A copy of a data message whose counter was already taken is either a
//! second line's copy or a spoof: only an authenticated one may change the
//! reorder window or the path it came on (a forged one could move the
//! path's progress and make the window give gaps up early).

use braid_core::testing::{Net, A, B};

#[test]
fn a_forged_copy_of_a_seen_counter_changes_no_path_and_no_window() {
    let mut net = Net::pair();
    net.send(A, B, b"hello");
    net.settle();
    let sent = net.encapsulate(
        A,
        &braid_core::testing::ipv4(net.tun(A), net.tun(B), 17, b"x"),
    );
    assert_eq!(sent.len(), 1, "one data message on the one path");
    let real = sent[0].bytes.clone();
    let src = net.addr(A);
    assert_eq!(
        net.deliver(B, src, &real),
        1,
        "the real message is delivered"
    );

    let before = net.peer_info(B);
    let mut forged = real.clone();
    let last = forged.len() - 1;
    forged[last] ^= 0x80; // a broken tag, the counter of the real one
    for _ in 0..100 {
        assert_eq!(net.deliver(B, src, &forged), 0);
    }
    let after = net.peer_info(B);
    assert_eq!(
        after.paths[0].counters.rx_packets,
        before.paths[0].counters.rx_packets
    );
    assert_eq!(
        after.paths[0].counters.rx_bytes,
        before.paths[0].counters.rx_bytes
    );
    assert_eq!(after.reorder, before.reorder, "the window heard nothing");
    assert_eq!(
        after.counters.auth_failed,
        before.counters.auth_failed + 100
    );

    // The real copy again is a duplicate the window and the path may count.
    assert_eq!(net.deliver(B, src, &real), 0);
    let again = net.peer_info(B);
    assert_eq!(
        again.paths[0].counters.rx_packets,
        after.paths[0].counters.rx_packets + 1
    );
    assert_eq!(again.counters.replayed, after.counters.replayed + 1);
}
