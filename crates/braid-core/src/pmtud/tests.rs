use super::*;

/// A line that silently drops every probe above `limit` (inner size), with
/// a fixed round trip; driven in 10 ms steps of simulated time.
struct Line {
    limit: usize,
    rtt: Duration,
    up: bool,
    /// Acknowledgements on their way back: (arrives, seq, size).
    acks: Vec<(Instant, u32, usize)>,
}

const STEP: Duration = Duration::from_millis(10);
const TIMEOUT: Duration = Duration::from_millis(150);

impl Line {
    fn new(limit: usize) -> Line {
        Line {
            limit,
            rtt: Duration::from_millis(20),
            up: true,
            acks: Vec::new(),
        }
    }

    /// Runs for `d`; returns every probe size sent.
    fn run(&mut self, pmtud: &mut Pmtud, now: &mut Instant, d: Duration) -> Vec<usize> {
        let end = *now + d;
        let mut sent = Vec::new();
        while *now < end {
            *now += STEP;
            let t = *now;
            self.acks.retain(|&(at, seq, size)| {
                if at <= t {
                    pmtud.on_ack(t, seq, size);
                    false
                } else {
                    true
                }
            });
            if let Some(p) = pmtud.poll(t, self.up, TIMEOUT) {
                sent.push(p.size);
                if self.up && p.size <= self.limit {
                    self.acks.push((t + self.rtt, p.seq, p.size));
                }
            }
        }
        sent
    }

    /// Runs until the search is complete; returns how long it took.
    fn until_complete(&mut self, pmtud: &mut Pmtud, now: &mut Instant) -> Duration {
        let start = *now;
        for _ in 0..2000 {
            self.run(pmtud, now, STEP);
            if pmtud.state() == PmtuState::SearchComplete {
                return *now - start;
            }
        }
        panic!("no convergence: {pmtud:?}");
    }
}

#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
fn started(max: usize) -> (Pmtud, Instant) {
    let now = Instant::now();
    let mut p = Pmtud::new(max);
    p.start(now);
    (p, now)
}

#[test]
fn clean_line_finds_the_ceiling_above_the_base() {
    // An IPv4 line of 1500: WireGuard's 1420 leaves 20 bytes unused.
    let max = max_for_link(1500, false);
    assert_eq!(max, 1440);
    let (mut p, mut now) = started(max);
    assert_eq!(
        p.plpmtu(),
        BASE_PLPMTU,
        "carries the base before any answer"
    );
    let mut line = Line::new(usize::MAX);
    line.until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), 1440);
    assert_eq!(p.bounds(), (1440, None));
    assert_eq!(p.counters.probes_lost, 0);
}

#[test]
fn ipv6_line_of_1500_is_exactly_wireguards_default() {
    let max = max_for_link(1500, true);
    assert_eq!(max, BASE_PLPMTU);
    let (mut p, mut now) = started(max);
    Line::new(usize::MAX).until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), 1420);
    assert!(p.counters.probes_sent <= MAX_PROBES as u64);
}

#[test]
fn narrow_line_below_the_base_is_found_exactly() {
    for limit in [1281, 1300, 1339, 1340, 1400, 1419] {
        let (mut p, mut now) = started(1440);
        Line::new(limit).until_complete(&mut p, &mut now);
        assert_eq!(p.plpmtu(), limit, "limit {limit}");
        assert_eq!(p.bounds(), (limit, Some(limit + 1)), "limit {limit}");
    }
}

#[test]
fn size_between_base_and_ceiling_is_found_exactly() {
    let (mut p, mut now) = started(MAX_PLPMTU);
    let mut line = Line::new(4000);
    line.until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), 4000);
}

#[test]
fn nothing_above_the_minimum_settles_at_the_minimum() {
    let (mut p, mut now) = started(1440);
    Line::new(MIN_PLPMTU).until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), MIN_PLPMTU);
}

#[test]
fn a_size_counts_as_too_big_only_after_max_probes_losses() {
    let (mut p, mut now) = started(1440);
    let mut line = Line::new(1420);
    // Base is acked, the ceiling is tried MAX_PROBES times (one burst)
    // before halving.
    let sent = line.run(&mut p, &mut now, Duration::from_millis(600));
    let mut sizes = sent.clone();
    sizes.dedup();
    assert_eq!(&sizes[..3], &[1420, 1440, 1430], "{sent:?}");
    let ceiling_tries = sent.iter().filter(|&&s| s == 1440).count();
    assert_eq!(ceiling_tries, MAX_PROBES as usize, "{sent:?}");
    // A lost probe never lowers what data carries.
    assert_eq!(p.plpmtu(), 1420);
}

#[test]
fn black_hole_is_detected_and_recovered_within_seconds() {
    let (mut p, mut now) = started(1440);
    let mut line = Line::new(usize::MAX);
    line.until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), 1440);
    line.run(&mut p, &mut now, Duration::from_secs(5));
    assert_eq!(p.plpmtu(), 1440, "confirmations keep it");

    // The line starts dropping everything above 1340.
    line.limit = 1340;
    let start = now;
    let mut detected = None;
    for _ in 0..1000 {
        line.run(&mut p, &mut now, STEP);
        if p.plpmtu() < 1440 && detected.is_none() {
            detected = Some(now - start);
            assert_eq!(p.plpmtu(), MIN_PLPMTU, "the minimum is carried meanwhile");
        }
        if detected.is_some() && p.state() == PmtuState::SearchComplete {
            break;
        }
    }
    let detected = detected.expect("black hole seen");
    let recovered = now - start;
    assert_eq!(p.plpmtu(), 1340);
    assert_eq!(p.counters.black_holes, 1);
    // One confirmation interval plus MAX_PROBES timeouts to notice…
    assert!(
        detected <= CONFIRM_INTERVAL + TIMEOUT * 3 + STEP * 4,
        "{detected:?}"
    );
    // …and a bounded search after it (simulated time, not wall time).
    assert!(recovered < Duration::from_secs(8), "{recovered:?}");
}

#[test]
fn raise_timer_searches_up_again_when_the_limit_goes_away() {
    let (mut p, mut now) = started(1440);
    let mut line = Line::new(1340);
    line.until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), 1340);
    line.limit = usize::MAX;
    line.run(&mut p, &mut now, RAISE_INTERVAL - Duration::from_secs(1));
    assert_eq!(p.plpmtu(), 1340, "no search up before the raise timer");
    line.run(&mut p, &mut now, Duration::from_secs(3));
    assert_eq!(p.plpmtu(), 1440);
    assert_eq!(p.state(), PmtuState::SearchComplete);
    assert_eq!(p.bounds(), (1440, None));
}

#[test]
fn no_raise_timer_at_the_ceiling() {
    let (mut p, mut now) = started(1440);
    let mut line = Line::new(usize::MAX);
    line.until_complete(&mut p, &mut now);
    let before = p.counters.probes_sent;
    line.run(&mut p, &mut now, RAISE_INTERVAL * 2);
    // Only confirmations: one per interval.
    let confirmations = p.counters.probes_sent - before;
    let expected = (RAISE_INTERVAL * 2).as_millis() / CONFIRM_INTERVAL.as_millis();
    assert!(confirmations as u128 <= expected + 1, "{confirmations}");
    assert!(p.poll_timeout().is_some());
}

#[test]
fn a_dead_path_is_no_black_hole() {
    let (mut p, mut now) = started(1440);
    let mut line = Line::new(usize::MAX);
    line.until_complete(&mut p, &mut now);
    line.up = false;
    line.run(&mut p, &mut now, Duration::from_secs(10));
    assert_eq!(p.plpmtu(), 1440);
    assert_eq!(p.counters.black_holes, 0);
    assert_eq!(p.counters.probes_lost, 0);
    line.up = true;
    line.run(&mut p, &mut now, Duration::from_secs(3));
    assert_eq!(p.plpmtu(), 1440);
}

#[test]
fn late_or_forged_acks_change_nothing() {
    let (mut p, now) = started(1440);
    let probe = p.poll(now, true, TIMEOUT).expect("base probe");
    p.on_ack(now, probe.seq.wrapping_add(1), probe.size);
    p.on_ack(now, probe.seq, probe.size + 1);
    assert_eq!(p.state(), PmtuState::Base);
    p.on_ack(now, probe.seq, probe.size);
    assert_eq!(p.state(), PmtuState::Search);
    p.on_ack(now, probe.seq, probe.size);
    assert_eq!(p.counters.probes_acked, 1);
}

#[test]
fn lower_ceiling_cuts_at_once_higher_one_is_searched() {
    let (mut p, mut now) = started(1440);
    let mut line = Line::new(usize::MAX);
    line.until_complete(&mut p, &mut now);
    p.set_max(now, 1400);
    assert_eq!(p.plpmtu(), 1400);
    p.set_max(now, MAX_PLPMTU);
    line.until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), MAX_PLPMTU);
}

#[test]
fn probe_timeout_follows_rtt_within_bounds() {
    assert_eq!(probe_timeout(None, Duration::ZERO), PROBE_TIMEOUT_MAX);
    let t = probe_timeout(Some(Duration::from_millis(100)), Duration::from_millis(10));
    assert_eq!(t, Duration::from_millis(240));
    let t = probe_timeout(Some(Duration::from_micros(200)), Duration::ZERO);
    assert_eq!(t, PROBE_TIMEOUT_MIN);
}

#[test]
fn a_limit_still_there_costs_one_burst_per_raise() {
    let (mut p, mut now) = started(1440);
    let mut line = Line::new(1340);
    line.until_complete(&mut p, &mut now);
    let lost = p.counters.probes_lost;
    line.run(&mut p, &mut now, RAISE_INTERVAL + Duration::from_secs(2));
    assert_eq!(p.plpmtu(), 1340);
    assert_eq!(p.state(), PmtuState::SearchComplete);
    assert_eq!(p.counters.probes_lost - lost, MAX_PROBES as u64);
    assert_eq!(p.bounds(), (1340, Some(1341)));
}

#[test]
fn probe_timeout_saturates_on_absurd_rtts() {
    // (case, srtt, rttvar): RTTs from echoed timestamps may be anything.
    let cases = [
        (1, Duration::MAX, Duration::MAX),
        (2, Duration::MAX, Duration::ZERO),
        (3, Duration::ZERO, Duration::MAX),
        (4, Duration::MAX / 2, Duration::MAX / 4),
    ];
    for (case, srtt, rttvar) in cases {
        assert_eq!(
            probe_timeout(Some(srtt), rttvar),
            PROBE_TIMEOUT_MAX,
            "case {case}"
        );
    }
}

#[test]
fn any_timeout_passed_to_poll_is_bounded() {
    let (mut p, now) = started(1440);
    let probe = p.poll(now, true, Duration::MAX).expect("base probe");
    assert_eq!(probe.size, BASE_PLPMTU);
    // The rest of the burst, then the wait: never longer than the maximum.
    while p.poll(now, true, Duration::MAX).is_some() {}
    assert_eq!(p.poll_timeout(), Some(now + PROBE_TIMEOUT_MAX));
    // Then the base counts as lost and the search goes below it.
    let next = p
        .poll(now + PROBE_TIMEOUT_MAX, true, Duration::MAX)
        .expect("next size");
    assert_eq!(next.seq, probe.seq.wrapping_add(u32::from(MAX_PROBES)));
    assert!(next.size < BASE_PLPMTU);
    assert_eq!(p.counters.probes_lost, u64::from(MAX_PROBES));
    assert_eq!(p.state(), PmtuState::Error);
}

#[test]
fn sequence_numbers_wrap_within_a_burst() {
    // The sequence passes u32::MAX → 0 during the search.
    for start in [u32::MAX - 2, u32::MAX - 1, u32::MAX] {
        let now = started(1440).1;
        let mut p = Pmtud::new(1440);
        p.next_seq = start;
        p.start(now);
        let mut now = now;
        // A clean line answering at once.
        let mut seen = Vec::new();
        for _ in 0..2000 {
            now += STEP;
            if let Some(req) = p.poll(now, true, TIMEOUT) {
                seen.push(req.seq);
                p.on_ack(now, req.seq, req.size);
            }
            if p.state() == PmtuState::SearchComplete {
                break;
            }
        }
        assert_eq!(p.plpmtu(), 1440, "start {start}");
        assert_eq!(seen[0], start);
        assert_eq!(seen[1], start.wrapping_add(1), "{seen:?}");
        assert_eq!(p.counters.probes_lost, 0);
    }
}

#[test]
fn acks_with_wild_sequence_numbers_or_sizes_change_nothing() {
    let (mut p, now) = started(1440);
    p.next_seq = u32::MAX - 1;
    let probe = p.poll(now, true, TIMEOUT).expect("base probe");
    assert_eq!(probe.seq, u32::MAX - 1);
    // (case, seq, size): none of them is the probe that is out.
    let forged = [
        (1, probe.seq.wrapping_add(1), probe.size), // not sent yet
        (2, probe.seq.wrapping_sub(1), probe.size),
        (3, 0, probe.size),
        (4, u32::MAX / 2, probe.size),
        (5, probe.seq, 0),
        (6, probe.seq, usize::MAX),
        (7, probe.seq, usize::from(u16::MAX)),
    ];
    for (case, seq, size) in forged {
        p.on_ack(now, seq, size);
        assert_eq!(p.state(), PmtuState::Base, "case {case}");
        assert_eq!(p.counters.probes_acked, 0, "case {case}");
    }
    p.on_ack(now, probe.seq, probe.size);
    assert_eq!(p.state(), PmtuState::Search);
}

#[test]
fn absurd_ceilings_are_clamped() {
    // (case, link MTU or inner size, ceiling used)
    for (case, max, want) in [
        (1, 0, MIN_PLPMTU),
        (2, 1, MIN_PLPMTU),
        (3, usize::MAX, MAX_PLPMTU),
    ] {
        let (mut p, mut now) = started(max);
        assert_eq!(p.max(), want, "case {case}");
        Line::new(usize::MAX).until_complete(&mut p, &mut now);
        assert_eq!(p.plpmtu(), want, "case {case}");
        p.set_max(now, usize::MAX - 1);
        assert_eq!(p.max(), MAX_PLPMTU, "case {case}");
        p.set_max(now, 0);
        assert_eq!(
            (p.max(), p.plpmtu()),
            (MIN_PLPMTU, MIN_PLPMTU),
            "case {case}"
        );
    }
    assert_eq!(max_for_link(0, true), 0);
    assert_eq!(max_for_link(usize::MAX, false), 65535 - 60);
    assert_eq!(max_for_link(65536, false), 65475);
    assert_eq!(max_for_link(65536, true), 65536 - 80);
    assert_eq!(max_for_link(9000, true), 9000 - 80);
}

#[test]
fn a_line_that_carries_nothing_settles_at_the_minimum() {
    let (mut p, mut now) = started(MAX_PLPMTU);
    Line::new(0).until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), MIN_PLPMTU);
    assert_eq!(p.bounds(), (MIN_PLPMTU, Some(MIN_PLPMTU + 1)));
}

#[test]
fn counters_saturate() {
    let (mut p, mut now) = started(1440);
    p.counters = PmtuCounters {
        probes_sent: u64::MAX,
        probes_acked: u64::MAX,
        probes_lost: u64::MAX - 1,
        black_holes: u64::MAX,
    };
    let mut line = Line::new(usize::MAX);
    line.until_complete(&mut p, &mut now);
    line.run(&mut p, &mut now, Duration::from_secs(2));
    line.limit = 1340;
    line.until_complete(&mut p, &mut now);
    line.run(&mut p, &mut now, Duration::from_secs(5));
    assert_eq!(p.plpmtu(), 1340);
    let c = p.counters;
    assert_eq!(
        [c.probes_sent, c.probes_acked, c.probes_lost, c.black_holes],
        [u64::MAX; 4]
    );
}

/// A line that cannot carry 1280 bytes (UDP payloads over 1300 dropped:
/// 1268 inner): with the floor lowered for a peer that joins fragments
/// the search finds 1268; without, it settles at the minimum it never
/// confirmed.
#[test]
fn a_lowered_floor_finds_a_line_below_1280() {
    let (mut p, mut now) = started(1440);
    p.set_floor(now, MIN_FRAGMENTED);
    let took = Line::new(1268).until_complete(&mut p, &mut now);
    assert_eq!((p.plpmtu(), p.bounds()), (1268, (1268, Some(1269))));
    eprintln!("1268 found in {took:?} of simulated time");
    let (mut p, mut now) = started(1440);
    Line::new(1268).until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), MIN_PLPMTU);
    // Lowered during the search, in the error state: carrying the
    // floor at once, then what the line allows.
    let (mut p, mut now) = started(1440);
    let mut line = Line::new(1200);
    line.run(&mut p, &mut now, Duration::from_millis(400));
    assert_eq!((p.state(), p.plpmtu()), (PmtuState::Error, MIN_PLPMTU));
    p.set_floor(now, 0);
    assert_eq!(
        p.plpmtu(),
        MIN_FRAGMENTED,
        "the floor is clamped to the least a fragment needs"
    );
    line.until_complete(&mut p, &mut now);
    assert_eq!(p.plpmtu(), 1200);
}

/// A local line below 1280 (a low-MTU underlay): the ceiling follows it
/// once the floor allows, and what the line allows stays known either way.
#[test]
fn a_local_line_below_1280_is_the_ceiling_once_the_floor_allows() {
    let (mut p, now) = started(1440);
    assert_eq!(p.line_max(), None, "not looked up yet");
    p.set_max(now, max_for_link(1328, false));
    assert_eq!((p.line_max(), p.max()), (Some(1268), MIN_PLPMTU));
    p.set_floor(now, MIN_FRAGMENTED);
    assert_eq!((p.line_max(), p.max()), (Some(1268), 1268));
    assert_eq!(p.plpmtu(), 1268, "the base is cut to the ceiling");
}
