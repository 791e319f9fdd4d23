//! Unit tests of a path's probes, loss and state.
#![allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time

use super::*;
use crate::test_time::end_of_time;

fn path() -> Path {
    Path::new("test", 0, "198.18.0.1:51820".parse().unwrap(), true)
}

#[test]
fn echoed_timestamps_from_the_dawn_of_time_saturate() {
    let t0 = Instant::now();
    let far = end_of_time(t0);
    let mut p = path();
    for _ in 0..3 {
        let seq = p.take_probe_seq();
        // The peer echoes the oldest timestamp there is, seen at the
        // latest instant there is: an RTT of centuries, 7 * srtt beyond
        // Duration.
        p.on_echo(far, seq, t0, 1);
    }
    let srtt = p.srtt.expect("sampled");
    assert!(srtt >= (far - t0) / 8, "{srtt:?}");
    p.on_rx(far, 100);
    assert!(p.update_state(far));
    assert!(
        p.is_up(),
        "the dead-after allowance is capped, not overflowed"
    );
    assert!(crate::pmtud::probe_timeout(p.srtt, p.rttvar) <= crate::pmtud::PROBE_TIMEOUT_MAX);
}

#[test]
fn echoes_of_unsent_probes_or_from_the_future_measure_nothing() {
    let now = Instant::now() + Duration::from_secs(10);
    let mut p = path();
    for _ in 0..5 {
        p.take_probe_seq();
    }
    // (case, seq): probes not sent yet, however far ahead.
    for (case, seq) in [(1, 5u32), (2, 100), (3, 5 + (1 << 31) - 1)] {
        p.on_echo(now, seq, now - Duration::from_millis(1), 5);
        assert_eq!((p.srtt, p.echo_bits), (None, 0), "case {case}");
    }
    // A sent probe echoed with a timestamp later than now: it was
    // answered, but there is no round trip to learn from.
    p.on_echo(now, 4, now + Duration::from_secs(1), 5);
    assert_eq!((p.srtt, p.min_rtt, p.echo_bits), (None, None, 1));
    p.on_echo(now, 3, now - Duration::from_millis(20), 5);
    assert_eq!(p.srtt, Some(Duration::from_millis(20)));
    assert_eq!(p.counters.echoes_received, 5);
}

#[test]
fn loss_window_survives_the_probe_sequence_wrapping() {
    let now = Instant::now();
    let mut p = path();
    p.next_probe_seq = u32::MAX - 9;
    let seqs: Vec<u32> = (0..20).map(|_| p.take_probe_seq()).collect();
    assert_eq!(seqs[9], u32::MAX);
    assert_eq!(seqs[10], 0);
    // Only the ten probes before the wrap are answered: 7 of the 17
    // probes old enough to count are lost, wherever the wrap falls.
    for &s in &seqs[..10] {
        p.on_echo(now, s, now, 20);
    }
    assert!((p.loss() - 7.0 / 17.0).abs() < 1e-12, "{}", p.loss());
    for &s in &seqs[10..] {
        p.on_echo(now, s, now, 20);
    }
    assert_eq!(p.loss(), 0.0);
}

#[test]
fn reverse_loss_counts_modulo_2_32_and_ignores_wild_jumps() {
    let mut p = path();
    // 2^32 - 5 probes received without loss so far, then the peer's
    // sequence wraps; one probe (seq 0) is lost.
    p.probes_received = u64::from(u32::MAX) - 4;
    p.highest_probe_seq_received = Some(u32::MAX - 5);
    for seq in (u32::MAX - 4..=u32::MAX).chain(1..=4) {
        p.on_probe(seq);
    }
    assert_eq!(p.highest_probe_seq_received, Some(4));
    let want = 1.0 / (1.0 + p.probes_received as f64);
    assert!(
        (p.reverse_loss() - want).abs() < 1e-18,
        "{}",
        p.reverse_loss()
    );

    // A fresh path: ten probes, then one numbered u32::MAX (far behind
    // in serial order) must not make everything look lost.
    let mut p = path();
    for seq in 0..10 {
        p.on_probe(seq);
    }
    assert_eq!(p.on_probe(u32::MAX), 11);
    assert_eq!(p.highest_probe_seq_received, Some(9));
    assert_eq!(p.reverse_loss(), 0.0);
    // A jump forward by almost 2^31 is taken at its word, within 0..=1.
    p.on_probe((1 << 31) - 1);
    let l = p.reverse_loss();
    assert!(l > 0.99 && l <= 1.0, "{l}");
}

#[test]
fn forward_loss_reads_the_peers_count_modulo_2_32() {
    let mut p = path();
    // 2^32 + 103 probes sent; the peer got all but ten of the ones old
    // enough to count, and its 32-bit count has wrapped.
    p.counters.probes_sent = (1 << 32) + 103;
    p.peer_rx_probes = ((1u64 << 32) + 90) as u32;
    let want = 10.0 / ((1u64 << 32) + 100) as f64;
    assert!((p.forward_loss() - want).abs() < 1e-18);
    // A peer claiming more than we sent (restarted, or lying): no loss.
    for ahead in [1, 100, (1 << 31) - 1] {
        p.peer_rx_probes = 100u32.wrapping_add(ahead);
        assert_eq!(p.forward_loss(), 0.0, "{ahead} ahead");
    }
    // Whatever it claims, the loss is a fraction.
    for claim in [0, 1, 1 << 31, u32::MAX - 1, u32::MAX] {
        p.peer_rx_probes = claim;
        assert!((0.0..=1.0).contains(&p.forward_loss()), "{claim}");
    }
    p.counters.probes_sent = 0;
    assert_eq!(p.forward_loss(), 0.0);
}

#[test]
fn counters_saturate() {
    let now = Instant::now();
    let mut p = path();
    p.counters = PathCounters {
        rx_packets: u64::MAX,
        rx_bytes: u64::MAX - 1,
        tx_packets: u64::MAX,
        tx_bytes: u64::MAX - 1,
        first_arrivals: 0,
        probes_sent: u64::MAX,
        echoes_received: u64::MAX,
        data_rx_packets: u64::MAX,
        data_rx_bytes: u64::MAX - 1,
        resent: 0,
    };
    p.probes_received = u64::MAX;
    p.on_rx(now, usize::MAX);
    p.on_tx(1500);
    p.on_data_rx(now, usize::MAX);
    let seq = p.take_probe_seq();
    p.on_echo(now, seq, now, 0);
    assert_eq!(p.on_probe(7), u32::MAX);
    let c = p.counters;
    assert_eq!(
        [c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes],
        [u64::MAX; 4]
    );
    assert_eq!([c.probes_sent, c.echoes_received], [u64::MAX; 2]);
    assert_eq!([c.data_rx_packets, c.data_rx_bytes], [u64::MAX; 2]);
    assert_eq!(p.probes_received, u64::MAX);
}

// ----- The aggregate scheduler ------------------------------------------------

mod scheduler {
    use super::*;
    use crate::path::schedule::MAX_BACKLOG;
    use proptest::prelude::*;

    /// Two up paths with estimates (bytes/s, one-way delay µs); `None`:
    /// no feedback yet.
    fn paths(now: Instant, estimates: [Option<(f64, i64)>; 2]) -> Vec<Path> {
        estimates
            .iter()
            .map(|e| {
                let mut p = path();
                p.state = PathState::Up;
                if let Some((rate, delay)) = *e {
                    p.outbound.set_estimate(now, rate, delay);
                }
                p
            })
            .collect()
    }

    /// Offers packets of `len` bytes at `offered` bytes/s for `secs`;
    /// returns the bytes each path got.
    fn offer(paths: &mut [Path], t0: Instant, offered: f64, len: usize, secs: f64) -> [f64; 2] {
        let mut got = [0.0; 2];
        let gap = len as f64 / offered;
        let mut out = [0usize; MAX_PATHS];
        for k in 0..(secs / gap) as u64 {
            let now = t0 + Duration::from_secs_f64(k as f64 * gap);
            assert_eq!(select(Mode::Aggregate, paths, now, len, false, &mut out), 1);
            got[out[0]] += len as f64;
        }
        got
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// While what is offered fits in the lines' estimates, no line is
        /// given more than its estimate (over the run, plus one planned
        /// queue and a packet), wherever the packets are offered from.
        #[test]
        fn never_beyond_a_lines_estimate(
            r0 in 1e5f64..2e7, r1 in 1e5f64..2e7,
            d0 in 0i64..100_000, d1 in 0i64..100_000,
            load in 0.1f64..0.95, len in 500usize..1500,
        ) {
            let t0 = Instant::now();
            let mut ps = paths(t0, [Some((r0, d0)), Some((r1, d1))]);
            let secs = 1.0;
            let got = offer(&mut ps, t0, load * (r0 + r1), len, secs);
            for (i, r) in [r0, r1].into_iter().enumerate() {
                let bound = r * (secs + MAX_BACKLOG.as_secs_f64()) + len as f64;
                prop_assert!(got[i] <= bound, "path {i}: {} > {bound}", got[i]);
            }
        }

        /// A line with no feedback yet gets nothing while another is
        /// measured, however much is offered.
        #[test]
        fn a_line_without_feedback_waits_for_it(
            rate in 1e5f64..1e7, load in 0.1f64..10.0, len in 500usize..1500,
        ) {
            let t0 = Instant::now();
            let mut ps = paths(t0, [Some((rate, 5_000)), None]);
            let got = offer(&mut ps, t0, load * rate, len, 0.5);
            prop_assert_eq!(got[1], 0.0);
        }

        /// A line whose delay is more than MAX_BACKLOG above the other's
        /// carries nothing: what it carried would come after the peer's
        /// window stopped waiting for it.
        #[test]
        fn a_far_line_carries_nothing(
            rate in 1e5f64..1e7, slow in 1e3f64..1e8, load in 0.1f64..10.0,
            extra_ms in 151i64..2_000,
        ) {
            let t0 = Instant::now();
            let mut ps = paths(t0, [Some((rate, 1_000)), Some((slow, 1_000 + extra_ms * 1_000))]);
            let got = offer(&mut ps, t0, load * rate, 1400, 0.5);
            prop_assert_eq!(got[1], 0.0);
        }
    }

    /// Before a probe found the quick line queued, its estimate is a guess
    /// that only grows: a burst beyond it stays on that line rather than
    /// going to the slower one (and arriving a delay difference later).
    /// Once the estimate is measured, it binds.
    #[test]
    fn a_quick_line_at_its_first_guess_keeps_a_burst_to_itself() {
        let t0 = Instant::now();
        let mut ps = paths(t0, [None, None]);
        ps[0].outbound.set_delay(t0, 10_000);
        ps[1].outbound.set_delay(t0, 40_000);
        let burst = 6.0 * estimate::INITIAL_RATE;
        let got = offer(&mut ps, t0, burst, 1400, 0.2);
        assert_eq!(got[1], 0.0, "{got:?}");
        let t1 = t0 + Duration::from_secs(1);
        for (p, delay) in ps.iter_mut().zip([10_000, 40_000]) {
            p.outbound.set_estimate(t1, estimate::INITIAL_RATE, delay);
        }
        let got = offer(&mut ps, t1, burst, 1400, 0.5);
        let share = got[1] / (got[0] + got[1]);
        assert!(share > 0.3, "{share}: {got:?}");
    }

    /// The quicker line alone while it keeps up; both, by capacity, when
    /// it does not.
    #[test]
    fn the_slower_line_takes_only_what_the_quicker_cannot() {
        let t0 = Instant::now();
        // 10 and 2.5 MB/s (80 and 20 Mbit/s), 5 and 20 ms.
        let mut ps = paths(t0, [Some((10e6, 5_000)), Some((2.5e6, 20_000))]);
        let got = offer(&mut ps, t0, 8e6, 1400, 2.0);
        assert_eq!(got[1], 0.0, "{got:?}");
        let t1 = t0 + Duration::from_secs(3);
        let got = offer(&mut ps, t1, 12e6, 1400, 2.0);
        let share = got[1] / (got[0] + got[1]);
        // 2 of 12 MB/s beyond the quick line, less the 15 ms it queues
        // before the slow line is worth it.
        assert!((0.14..0.18).contains(&share), "{share}: {got:?}");
    }

    /// Offers packets of `len` bytes for `secs`, each one `len / rate(t)`
    /// after the one before (`t`: seconds since `t0`), with the probe
    /// interval's ticks; returns the packets each path got in each second
    /// (the last one perhaps partial), and the longest the first path's clock
    /// was ahead.
    fn offer_paced(
        paths: &mut [Path],
        t0: Instant,
        rate: impl Fn(f64) -> f64,
        len: usize,
        secs: f64,
    ) -> (Vec<[u32; 2]>, Duration) {
        let mut got = vec![[0u32; 2]; secs.ceil() as usize];
        let mut longest = Duration::ZERO;
        let mut out = [0usize; MAX_PATHS];
        let mut next_tick = 0.0;
        let mut t = 0.0;
        while t < secs {
            let now = t0 + Duration::from_secs_f64(t);
            if t >= next_tick {
                for p in paths.iter_mut() {
                    p.outbound.on_tick(now, p.counters.tx_bytes);
                }
                next_tick += PROBE_INTERVAL.as_secs_f64();
            }
            longest = longest.max(paths[0].outbound.backlog(now));
            assert_eq!(select(Mode::Aggregate, paths, now, len, false, &mut out), 1);
            got[t as usize][out[0]] += 1;
            paths[out[0]].on_tx(len);
            t += len as f64 / rate(t);
        }
        (got, longest)
    }

    /// bbr in its steady state at `base` bytes/s: 1.25× for one 20 ms round
    /// trip, 0.75× for the next, then six at 1×.
    fn bbr_cycle(base: f64) -> impl Fn(f64) -> f64 {
        move |t: f64| {
            let gain = match ((t / 0.02) as u64) % 8 {
                0 => 1.25,
                1 => 0.75,
                _ => 1.0,
            };
            gain * base
        }
    }

    /// 100 Mbit/s with 10 ms and 25 Mbit/s with 40 ms: the `bond` row of
    /// `braid bench lines`.
    const BOND: [(f64, i64); 2] = [(12.5e6, 10_000), (3.125e6, 40_000)];

    /// A sender paced at what the quick line delivers (bbr) queues it a few
    /// milliseconds, never the delay difference, so the earliest arrival
    /// alone would give the slower line nothing and the sender would never
    /// see more than the quick line delivers. Once the quick line has been
    /// busy and calm for a while, what queues on it beyond 2 ms goes to the
    /// slower line, at no more than that line's rate.
    #[test]
    fn a_calm_quick_line_spills_what_queues_on_it_early() {
        let t0 = Instant::now();
        let mut ps = paths(t0, BOND.map(Some));
        let (got, _) = offer_paced(&mut ps, t0, bbr_cycle(12.5e6), 1400, 0.25);
        assert_eq!(got[0][1], 0, "not calm for long enough yet: {got:?}");
        let t1 = t0 + Duration::from_millis(250);
        let (got, longest) = offer_paced(&mut ps, t1, bbr_cycle(12.5e6), 1400, 3.0);
        for g in &got[1..] {
            // The probe's extra quarter for 20 ms of every 160: about 280
            // packets a second, and the slower line takes 2232 at its rate.
            assert!((100..=400).contains(&g[1]), "{got:?}");
        }
        assert!(longest < Duration::from_millis(8), "{longest:?}");
    }

    /// A sender whose window keeps the quick line queued beyond two thirds of
    /// the delay difference (cubic) gets the earliest arrival's split: every
    /// packet on the slower line would make the ones after it wait at the
    /// peer, and it gets the slower line once the queue is as long as the
    /// delay difference anyway.
    #[test]
    fn a_quick_line_kept_queued_spills_nothing_early() {
        let t0 = Instant::now();
        let mut ps = paths(t0, BOND.map(Some));
        // 25 ms of queue at once, then the line's own rate.
        let queued = |t: f64| if t < 0.025 { 25e6 } else { 12.5e6 };
        let (got, _) = offer_paced(&mut ps, t0, queued, 1400, 4.0);
        assert!(got.iter().all(|g| g[1] == 0), "{got:?}");
    }

    /// A burst after a quiet spell is not a paced sender: it stays on the
    /// quick line while its queue is shorter than the delay difference,
    /// however calm the line was before.
    #[test]
    fn a_burst_on_a_quiet_quick_line_spills_nothing_early() {
        let t0 = Instant::now();
        let mut ps = paths(t0, BOND.map(Some));
        // Half the quick line's rate for 2 s, then 25 ms at twice it.
        let burst = |t: f64| {
            if (2.0..2.025).contains(&t) {
                25e6
            } else {
                6.25e6
            }
        };
        let (got, longest) = offer_paced(&mut ps, t0, burst, 1400, 3.0);
        assert!(got.iter().all(|g| g[1] == 0), "{got:?}");
        assert!(longest > Duration::from_millis(20), "{longest:?}");
    }
}

/// Probes echoed every 50 ms with the one-way delay `queue_ms` above the
/// line's 10 ms; those for which `lost(seq)` holds never come back.
fn echo_probes(
    p: &mut Path,
    now: &mut Instant,
    count: u32,
    queue_ms: u64,
    lost: impl Fn(u32) -> bool,
) {
    for _ in 0..count {
        *now += PROBE_INTERVAL;
        let seq = p.take_probe_seq_at(*now);
        if lost(seq) {
            continue;
        }
        let sent_us = u64::from(seq) * 50_000;
        let report = Delivery {
            received_us: sent_us + 10_000 + queue_ms * 1000,
            data_bytes: 0,
            data_packets: 0,
        };
        p.on_echo(*now, seq, *now - Duration::from_millis(20), seq + 1);
        p.outbound.on_report(*now, seq, sent_us, report);
    }
}

#[test]
fn probes_a_full_queue_drops_are_not_the_lines_own_loss() {
    let mut now = Instant::now();
    let mut p = path();
    // An idle clean line, then a queue of 60 ms that drops every fifth
    // probe: the round-trip probe loss sees the drops, the line's own
    // loss does not.
    echo_probes(&mut p, &mut now, 40, 0, |_| false);
    assert_eq!(p.own_loss(), 0.0);
    echo_probes(&mut p, &mut now, 40, 60, |s| s.is_multiple_of(5));
    assert!(p.loss() > 0.05, "{}", p.loss());
    assert_eq!(p.own_loss(), 0.0);
    // The queue gone, every tenth probe still lost: the line's own.
    echo_probes(&mut p, &mut now, 100, 0, |s| s.is_multiple_of(10));
    let own = p.own_loss();
    assert!((0.05..0.15).contains(&own), "{own}");
    // Echoes reordered or far ahead (a path that was down) add nothing.
    let before = p.outbound.quiet_probe_loss_if_known();
    let seq = p.take_probe_seq_at(now);
    let far = seq + 1000;
    for s in [seq.wrapping_sub(5), far] {
        let report = Delivery {
            received_us: u64::from(s) * 50_000 + 10_000,
            data_bytes: 0,
            data_packets: 0,
        };
        p.outbound.on_report(now, s, u64::from(s) * 50_000, report);
    }
    assert_eq!(p.outbound.quiet_probe_loss_if_known(), before);
    // ...and the count goes on from the echoes that follow.
    for _ in 0..1001 {
        p.take_probe_seq();
    }
    echo_probes(&mut p, &mut now, 100, 0, |_| false);
    assert!(p.own_loss() < own, "{}", p.own_loss());
}

#[test]
fn a_peer_without_reports_reads_all_probe_loss_as_the_lines() {
    let mut now = Instant::now();
    let mut p = path();
    for _ in 0..40 {
        now += PROBE_INTERVAL;
        let seq = p.take_probe_seq_at(now);
        if !seq.is_multiple_of(4) {
            p.on_echo(now, seq, now - Duration::from_millis(20), seq + 1);
        }
    }
    assert!(!p.outbound.is_measured());
    assert!(p.own_loss() > 0.2, "{}", p.own_loss());
}

/// A line behind the scheduler's clock whose probe finds no queue grows
/// its estimate only when it delivered about the estimate. A line the
/// scheduler gives its estimate's worth now and then (the probe after it
/// finds the planned queue) and leaves idle in between drains faster than
/// planned in between, and the largest delivery of the last half second
/// is its estimate. Growing on that took the bench's 25 Mbit/s line of
/// the `bond` row to 31, so the second line's packets came later than
/// planned and the receiver held the quick line's behind them.
#[test]
fn the_estimate_grows_only_for_a_line_that_delivered_it() {
    // (intervals of every four that carry the estimate's worth, whether
    // the estimate should grow)
    for (busy_of_4, grows) in [(1, false), (4, true)] {
        let mut now = Instant::now();
        let mut p = path();
        let rate = 25e6 / 8.0;
        p.outbound.set_estimate(now, rate, 10_000);
        let mut bytes = 0;
        let planned = Duration::from_millis(40);
        for i in 0..40 {
            now += PROBE_INTERVAL;
            p.outbound.busy_until = Some(now + planned);
            p.outbound.limited = true;
            let seq = p.take_probe_seq_at(now);
            let sent_us = u64::from(seq) * 50_000;
            let busy = i % 4 >= 4 - busy_of_4;
            let share = if busy { 1.0 } else { 0.2 };
            bytes += (rate * share * PROBE_INTERVAL.as_secs_f64()) as u64;
            // After an interval that carried the estimate's worth with the
            // line busy, the probe finds the queue planned; after an idle
            // one, none.
            let queue_us = if busy && busy_of_4 < 4 { 40_000 } else { 0 };
            let report = Delivery {
                received_us: sent_us + 10_000 + queue_us,
                data_bytes: bytes,
                data_packets: bytes / 1200,
            };
            p.outbound.on_report(now, seq, sent_us, report);
        }
        let estimate = p.outbound.rate() / rate;
        assert_eq!(
            estimate > 1.2,
            grows,
            "{busy_of_4} of 4 intervals busy: the estimate is {estimate:.2} times the line"
        );
    }
}
