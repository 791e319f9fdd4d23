//! Statistical checks of the model. Every run is seeded, so each check
//! is deterministic; the bounds are still honest 99.9 % intervals, so
//! a change of seed should (almost always) pass too.

use super::*;

/// Two-sided 99.9 % normal quantile.
const Z: f64 = 3.2905;

/// An arbitrary origin for virtual time; only offsets from it matter.
#[allow(clippy::disallowed_methods)]
fn origin() -> Instant {
    Instant::now()
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// True when `k` successes in `n` trials fit probability `p` at 99.9 %
/// (normal approximation, plus one count of slack for p near 0 or 1).
fn binomial_ok(k: u64, n: u64, p: f64) -> bool {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (k as f64 - mean).abs() <= Z * sd + 1.0
}

fn copies(f: Fate) -> Vec<Delivery> {
    match f {
        Fate::Dropped(_) => vec![],
        Fate::Delivered { first, duplicate } => std::iter::once(first).chain(duplicate).collect(),
    }
}

/// Lengths of the runs of `true` (loss bursts) in a loss sequence.
fn bursts(lost: &[bool]) -> Vec<usize> {
    let mut runs = Vec::new();
    let mut run = 0;
    for &l in lost {
        if l {
            run += 1;
        } else if run > 0 {
            runs.push(run);
            run = 0;
        }
    }
    if run > 0 {
        runs.push(run);
    }
    runs
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn std_dev(xs: &[f64]) -> f64 {
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// Offers `n` datagrams of `len` bytes, `gap` apart; returns the offer
/// times and fates.
fn offer_all(link: &mut LinkModel, n: usize, gap: Duration, len: usize) -> Vec<(Instant, Fate)> {
    let t0 = origin();
    (0..n)
        .map(|i| {
            let now = t0 + gap * i as u32;
            (now, link.offer(now, len))
        })
        .collect()
}

fn check_conservation(c: &LinkCounters) {
    let drops = c.dropped_mtu + c.dropped_cut + c.dropped_loss + c.dropped_queue;
    assert_eq!(c.offered + c.duplicated, c.delivered + drops, "{c:?}");
}

#[test]
fn perfect_line_delivers_everything_at_once() {
    let p = LinkParams::default();
    assert!(p.is_perfect());
    assert_eq!(p.validate(), Ok(()));
    let mut link = LinkModel::new(p, 1);
    for (now, fate) in offer_all(&mut link, 1000, us(1), 1500) {
        let want = Delivery {
            at: now,
            corrupt_bit: None,
        };
        assert_eq!(
            fate,
            Fate::Delivered {
                first: want,
                duplicate: None
            }
        );
    }
    let c = link.counters();
    assert_eq!((c.offered, c.delivered, c.reordered), (1000, 1000, 0));
    check_conservation(&c);
}

#[test]
fn independent_loss_rate_is_within_its_confidence_interval() {
    const N: u64 = 100_000;
    // (case, loss)
    let cases = [
        (1, 0.0),
        (2, 0.001),
        (3, 0.01),
        (4, 0.05),
        (5, 0.25),
        (6, 0.5),
        (7, 0.99),
        (8, 1.0),
    ];
    for (case, loss) in cases {
        let params = LinkParams {
            loss,
            ..LinkParams::default()
        };
        params.validate().unwrap();
        let mut link = LinkModel::new(params, 100 + case);
        let fates = offer_all(&mut link, N as usize, us(10), 100);
        let lost = fates
            .iter()
            .filter(|(_, f)| *f == Fate::Dropped(DropCause::Loss))
            .count() as u64;
        let c = link.counters();
        assert_eq!(c.dropped_loss, lost, "case {case}");
        assert_eq!(c.delivered, N - lost, "case {case}");
        check_conservation(&c);
        if loss == 0.0 {
            assert_eq!(lost, 0, "case {case}: no loss at 0 %");
        } else if loss == 1.0 {
            assert_eq!(lost, N, "case {case}: everything lost at 100 %");
        } else {
            assert!(
                binomial_ok(lost, N, loss),
                "case {case}: {lost} of {N} lost at p = {loss}"
            );
        }
        // Independent: loss runs are geometric, mean 1 / (1 − p).
        if loss > 0.0 && loss < 1.0 {
            let lost: Vec<bool> = fates
                .iter()
                .map(|(_, f)| matches!(f, Fate::Dropped(_)))
                .collect();
            let runs: Vec<f64> = bursts(&lost).into_iter().map(|r| r as f64).collect();
            let want = 1.0 / (1.0 - loss);
            let sd = (loss / (1.0 - loss).powi(2) / runs.len() as f64).sqrt();
            let got = mean(&runs);
            assert!(
                (got - want).abs() <= Z * sd + 1e-9,
                "case {case}: mean run {got}, want {want}"
            );
        }
    }
}

#[test]
fn burst_estimator_counts_runs() {
    let seq = [
        false, true, true, false, true, false, false, true, true, true,
    ];
    assert_eq!(bursts(&seq), vec![2, 1, 3]);
    assert_eq!(bursts(&[true, true]), vec![2]);
    assert!(bursts(&[false; 4]).is_empty());
    assert!(bursts(&[]).is_empty());
}

#[test]
fn gilbert_elliott_long_run_loss_and_mean_burst_length() {
    const N: usize = 400_000;
    // (case, loss, mean burst)
    let cases = [
        (1, 0.01, 1.0),
        (2, 0.01, 4.0),
        (3, 0.05, 2.5),
        (4, 0.1, 3.0),
        (5, 0.2, 10.0),
        (6, 0.3, 25.0),
        // The limit of bursts of one: loss and no loss alternate.
        (7, 0.5, 1.0),
        (8, 0.9, 9.0),
    ];
    for (case, loss, burst) in cases {
        let params = LinkParams {
            loss,
            loss_burst: Some(burst),
            ..LinkParams::default()
        };
        params
            .validate()
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        let mut link = LinkModel::new(params, 200 + case);
        let lost: Vec<bool> = offer_all(&mut link, N, us(10), 100)
            .iter()
            .map(|(_, f)| match f {
                Fate::Dropped(DropCause::Loss) => true,
                Fate::Delivered { .. } => false,
                other => panic!("case {case}: {other:?}"),
            })
            .collect();
        let n_lost = lost.iter().filter(|&&l| l).count();
        assert_eq!(link.counters().dropped_loss, n_lost as u64);

        // Long-run loss: the samples are a two-state Markov chain whose
        // second eigenvalue λ = 1 − enter − leave inflates the variance
        // of the mean by (1 + λ) / (1 − λ).
        let leave = 1.0 / burst;
        let enter = loss * leave / (1.0 - loss);
        let lambda = 1.0 - enter - leave;
        let sd = (loss * (1.0 - loss) / N as f64 * (1.0 + lambda) / (1.0 - lambda)).sqrt();
        let rate = n_lost as f64 / N as f64;
        assert!(
            (rate - loss).abs() <= Z * sd + 1.0 / N as f64,
            "case {case}: long-run loss {rate}, want {loss} ± {}",
            Z * sd
        );

        // Bursts are geometric with mean `burst`, variance b (b − 1).
        let runs: Vec<f64> = bursts(&lost).into_iter().map(|r| r as f64).collect();
        let got = mean(&runs);
        let sd = (burst * (burst - 1.0) / runs.len() as f64).sqrt();
        assert!(
            (got - burst).abs() <= Z * sd + 1e-9,
            "case {case}: mean burst {got} over {} bursts, want {burst} ± {}",
            runs.len(),
            Z * sd
        );
        // And burstier than independent loss at the same rate (whose
        // runs average 1 / (1 − p)), unless bursts of one were asked.
        if burst > 1.0 / (1.0 - loss) + 0.5 {
            assert!(got > 1.0 / (1.0 - loss) + 0.25, "case {case}: {got}");
        }
    }
}

#[test]
fn gilbert_elliott_with_zero_loss_never_loses() {
    let params = LinkParams {
        loss_burst: Some(5.0),
        ..LinkParams::default()
    };
    params.validate().unwrap();
    let mut link = LinkModel::new(params, 3);
    offer_all(&mut link, 10_000, us(1), 10);
    assert_eq!(link.counters().dropped_loss, 0);
}

#[test]
fn duplication_and_corruption_rates() {
    const N: u64 = 100_000;
    const LEN: usize = 100;
    // (case, duplicate, corrupt)
    let cases = [
        (1, 0.0, 0.0),
        (2, 0.01, 0.0),
        (3, 0.0, 0.01),
        (4, 0.005, 0.001),
        (5, 0.2, 0.3),
        (6, 1.0, 0.0),
        (7, 0.0, 1.0),
    ];
    for (case, duplicate, corrupt) in cases {
        let params = LinkParams {
            duplicate,
            corrupt,
            ..LinkParams::default()
        };
        params.validate().unwrap();
        let mut link = LinkModel::new(params, 300 + case);
        let fates = offer_all(&mut link, N as usize, us(10), LEN);
        let mut dups = 0;
        let mut all = Vec::new();
        for (_, f) in fates {
            if let Fate::Delivered {
                duplicate: Some(_), ..
            } = f
            {
                dups += 1;
            }
            all.extend(copies(f));
        }
        let corrupted = all.iter().filter(|d| d.corrupt_bit.is_some()).count() as u64;
        let c = link.counters();
        assert_eq!(
            (c.duplicated, c.corrupted),
            (dups, corrupted),
            "case {case}"
        );
        assert_eq!(c.delivered, all.len() as u64, "case {case}");
        check_conservation(&c);
        assert!(
            binomial_ok(dups, N, duplicate),
            "case {case}: {dups} duplicates"
        );
        // Each copy is corrupted independently.
        assert!(
            binomial_ok(corrupted, all.len() as u64, corrupt),
            "case {case}: {corrupted} of {} corrupted",
            all.len()
        );
        for d in &all {
            if let Some(bit) = d.corrupt_bit {
                assert!(bit < LEN * 8, "case {case}: bit {bit} outside {LEN} bytes");
            }
        }
    }
}

#[test]
fn corrupt_bit_is_inside_the_packet_and_covers_it() {
    let params = LinkParams {
        corrupt: 1.0,
        ..LinkParams::default()
    };
    // (case, length): every bit of a short packet gets hit; never
    // past the end of any.
    for (case, len) in [(1, 1usize), (2, 2), (3, 13), (4, 1500)] {
        let mut link = LinkModel::new(params.clone(), 400 + case);
        let mut hit = vec![0u32; len * 8];
        let n = (len * 8 * 50).max(2000);
        for (_, f) in offer_all(&mut link, n, us(1), len) {
            let bit = copies(f)[0].corrupt_bit.expect("corrupt = 100 %");
            assert!(
                bit < len * 8,
                "case {case}: bit {bit} of a {len}-byte packet"
            );
            hit[bit] += 1;
        }
        if len <= 13 {
            assert!(hit.iter().all(|&h| h > 0), "case {case}: {hit:?}");
        }
    }
    // An empty datagram has no bit to flip.
    let mut link = LinkModel::new(params, 5);
    for (_, f) in offer_all(&mut link, 100, us(1), 0) {
        assert_eq!(copies(f)[0].corrupt_bit, None);
    }
    assert_eq!(link.counters().corrupted, 0);
}

#[test]
fn apply_corruption_flips_exactly_one_bit() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    for len in [1usize, 2, 7, 64, 1500] {
        for _ in 0..200 {
            let mut orig = vec![0u8; len];
            rng.fill_bytes(&mut orig);
            let bit = (rng.next_u64() % (len as u64 * 8)) as usize;
            let mut p = orig.clone();
            apply_corruption(&mut p, bit);
            let flipped: u32 = orig.iter().zip(&p).map(|(a, b)| (a ^ b).count_ones()).sum();
            assert_eq!(flipped, 1, "len {len} bit {bit}");
            assert_eq!(orig[bit / 8] ^ p[bit / 8], 1 << (bit % 8));
            apply_corruption(&mut p, bit);
            assert_eq!(p, orig, "flipping twice restores");
        }
    }
    // A bit past the end changes nothing (and does not panic).
    let mut p = vec![0xa5u8; 4];
    apply_corruption(&mut p, 32);
    apply_corruption(&mut [], 0);
    assert_eq!(p, vec![0xa5u8; 4]);
}

/// Delays (arrival − offer) of every copy, in offer order.
fn delays(params: LinkParams, seed: u64, n: usize, gap: Duration) -> (Vec<f64>, LinkModel) {
    let mut link = LinkModel::new(params, seed);
    let d = offer_all(&mut link, n, gap, 100)
        .into_iter()
        .flat_map(|(now, f)| {
            copies(f)
                .into_iter()
                .map(move |d| (d.at - now).as_secs_f64())
        })
        .collect();
    (d, link)
}

#[test]
fn uniform_jitter_stays_within_bounds_with_the_right_mean() {
    // (case, delay ms, jitter ms)
    for (case, d, j) in [(1, 3, 1), (2, 20, 5), (3, 1, 1), (4, 100, 30)] {
        let params = LinkParams {
            delay: ms(d),
            jitter: ms(j),
            ..LinkParams::default()
        };
        let (xs, link) = delays(params, 500 + case, 50_000, ms(1));
        let (lo, hi) = (ms(d - j).as_secs_f64(), ms(d + j).as_secs_f64());
        for &x in &xs {
            assert!(
                (lo..=hi).contains(&x),
                "case {case}: delay {x} outside [{lo}, {hi}]"
            );
        }
        let js = ms(j).as_secs_f64();
        // Uniform on [d − j, d + j]: sd j / √3; the extremes come close.
        let sd = js / 3f64.sqrt();
        let m = mean(&xs);
        let want = ms(d).as_secs_f64();
        assert!(
            (m - want).abs() <= Z * sd / (xs.len() as f64).sqrt(),
            "case {case}: mean {m}"
        );
        let s = std_dev(&xs);
        assert!((s - sd).abs() < 0.02 * sd, "case {case}: sd {s}, want {sd}");
        let min = xs.iter().cloned().fold(f64::MAX, f64::min);
        let max = xs.iter().cloned().fold(f64::MIN, f64::max);
        assert!(
            min - lo < 0.001 * js && hi - max < 0.001 * js,
            "case {case}: {min}..{max}"
        );
        assert!(link.counters().reordered > 0 || 2 * j <= 1, "case {case}");
    }
}

#[test]
fn no_jitter_means_exactly_the_delay() {
    let params = LinkParams {
        delay: ms(7),
        ..LinkParams::default()
    };
    let (xs, link) = delays(params, 8, 1000, us(3));
    assert!(xs.iter().all(|&x| x == ms(7).as_secs_f64()));
    assert_eq!(link.counters().reordered, 0);
}

/// Standard normal cumulative distribution (Abramowitz–Stegun 7.1.26
/// for erf, error below 1.5e-7).
fn phi(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

#[test]
fn normal_jitter_has_the_configured_standard_deviation() {
    const N: usize = 100_000;
    // (case, delay ms, jitter ms): far from zero, so no clipping.
    for (case, d, j) in [(1, 20, 2), (2, 50, 10), (3, 3, 1)] {
        let params = LinkParams {
            delay: ms(d),
            jitter: ms(j),
            jitter_dist: JitterDist::Normal,
            ..LinkParams::default()
        };
        let (xs, _) = delays(params, 600 + case, N, us(100));
        let (want_m, want_s) = (ms(d).as_secs_f64(), ms(j).as_secs_f64());
        let m = mean(&xs);
        let s = std_dev(&xs);
        assert!(
            (m - want_m).abs() <= Z * want_s / (N as f64).sqrt(),
            "case {case}: mean {m}"
        );
        // The sample sd of a normal has standard error σ / √(2n).
        assert!(
            (s - want_s).abs() <= Z * want_s / (2.0 * N as f64).sqrt(),
            "case {case}: sd {s}"
        );
        // About 68.3 % within one sd, 95.4 % within two.
        for (k, p) in [(1.0, 0.682_689), (2.0, 0.954_500)] {
            let inside = xs
                .iter()
                .filter(|&&x| (x - want_m).abs() <= k * want_s)
                .count() as u64;
            assert!(
                binomial_ok(inside, N as u64, p),
                "case {case}: {inside} within {k} sd"
            );
        }
    }
}

#[test]
fn normal_jitter_is_clipped_at_zero_delay() {
    // 1 ms ± 2 ms (normal): a delay below zero would be Φ(−0.5) ≈ 30.9 %
    // of draws; they arrive at once (zero delay), never before the offer.
    const N: usize = 100_000;
    let params = LinkParams {
        delay: ms(1),
        jitter: ms(2),
        jitter_dist: JitterDist::Normal,
        ..LinkParams::default()
    };
    let (xs, _) = delays(params, 9, N, us(100));
    assert!(xs.iter().all(|&x| x >= 0.0));
    let zero = xs.iter().filter(|&&x| x == 0.0).count() as u64;
    let p = phi(-0.5);
    assert!((p - 0.308_537_5).abs() < 1e-6);
    assert!(
        binomial_ok(zero, N as u64, p),
        "{zero} clipped of {N}, want {p}"
    );
    // The mean is lifted accordingly: E[max(0, X)] for X ~ N(1, 2) ms.
    let (mu, s) = (1.0f64, 2.0f64);
    let pdf = (-(mu / s).powi(2) / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let want = (mu * phi(mu / s) + s * pdf) / 1000.0;
    let m = mean(&xs);
    assert!(
        (m - want).abs() < Z * 0.002 / (N as f64).sqrt(),
        "mean {m}, want {want}"
    );
}

/// Copies whose arrival precedes that of a copy offered earlier.
fn count_reordered(arrivals: &[Instant]) -> u64 {
    let mut latest: Option<Instant> = None;
    let mut n = 0;
    for &a in arrivals {
        match latest {
            Some(l) if a < l => n += 1,
            _ => latest = Some(a),
        }
    }
    n
}

#[test]
fn jitter_reorders_unless_told_not_to() {
    // (case, jitter dist, gap between offers µs, reorder, expect reordering)
    let cases = [
        (1, JitterDist::Uniform, 100, true, true),
        (2, JitterDist::Uniform, 1000, true, true),
        // Offered slower than the jitter range (2 ms): order kept.
        (3, JitterDist::Uniform, 2001, true, false),
        (4, JitterDist::Uniform, 100, false, false),
        (5, JitterDist::Normal, 1000, true, true),
        (6, JitterDist::Normal, 100, false, false),
    ];
    for (case, dist, gap, reorder, expect) in cases {
        let params = LinkParams {
            delay: ms(3),
            jitter: ms(1),
            jitter_dist: dist,
            reorder,
            duplicate: 0.01,
            ..LinkParams::default()
        };
        let mut link = LinkModel::new(params, 700 + case);
        let mut arrivals = Vec::new();
        // (earliest, latest) arrival of each offer's copies.
        let mut spans = Vec::new();
        for (now, f) in offer_all(&mut link, 20_000, us(gap), 100) {
            let cs = copies(f);
            for d in &cs {
                assert!(d.at >= now, "case {case}: arrives before it was sent");
                if dist == JitterDist::Uniform {
                    // Holding a copy back for order never makes it
                    // later than the latest bound of an earlier offer.
                    assert!(d.at <= now + ms(4), "case {case}");
                }
                arrivals.push(d.at);
            }
            if let (Some(lo), Some(hi)) =
                (cs.iter().map(|d| d.at).min(), cs.iter().map(|d| d.at).max())
            {
                spans.push((lo, hi));
            }
        }
        // The counter also counts a duplicate that overtakes its twin.
        let n = count_reordered(&arrivals);
        assert_eq!(link.counters().reordered, n, "case {case}: counter agrees");
        let overtaken = spans.windows(2).filter(|w| w[1].0 < w[0].1).count();
        if expect {
            assert!(overtaken > 100, "case {case}: only {overtaken} reordered");
        } else {
            assert_eq!(
                overtaken, 0,
                "case {case}: no datagram overtakes an earlier one"
            );
        }
        if !reorder {
            assert_eq!(n, 0, "case {case}");
            assert!(
                arrivals.windows(2).all(|w| w[0] <= w[1]),
                "case {case}: monotone"
            );
        }
    }
}

#[test]
fn rate_cap_holds_and_the_time_queue_drops_the_excess() {
    // 10 Mbit/s, 1250-byte datagrams: 1 ms each on the wire. Offered at
    // twice that for 2 s, behind a 50 ms queue and 5 ms of delay.
    const LEN: usize = 1250;
    let params = LinkParams {
        delay: ms(5),
        rate_bps: Some(10_000_000),
        queue: QueueLimit::Time(ms(50)),
        ..LinkParams::default()
    };
    params.validate().unwrap();
    let mut link = LinkModel::new(params, 10);
    let t0 = origin();
    let mut departures = Vec::new();
    for i in 0..4000u32 {
        let now = t0 + us(500) * i;
        let waited = link.queue_delay(now);
        assert!(waited <= ms(51), "queue {waited:?}");
        match link.offer(now, LEN) {
            Fate::Delivered {
                first,
                duplicate: None,
            } => {
                assert!(waited <= ms(50), "accepted into a full queue");
                // Serialization, then the line's delay.
                let sojourn = first.at - now - ms(5);
                assert!(sojourn >= ms(1) && sojourn <= ms(51) + us(1), "{sojourn:?}");
                departures.push(first.at - ms(5));
            }
            Fate::Dropped(DropCause::Queue) => assert!(waited > ms(50), "dropped with room"),
            f => panic!("{f:?}"),
        }
    }
    let c = link.counters();
    check_conservation(&c);
    assert_eq!(c.dropped_queue + departures.len() as u64, 4000);
    // 2 s at the line rate plus what the queue holds at the end.
    let want = 2000 + 50;
    assert!(
        (departures.len() as i64 - want).abs() <= 2,
        "{} delivered, {} dropped",
        departures.len(),
        c.dropped_queue
    );
    assert!(departures
        .windows(2)
        .all(|w| w[1] - w[0] >= ms(1) - Duration::from_nanos(2)));
    let span = (*departures.last().unwrap() - departures[0]).as_secs_f64();
    let bps = (departures.len() - 1) as f64 * LEN as f64 * 8.0 / span;
    assert!((bps / 10e6 - 1.0).abs() < 0.001, "throughput {bps} bit/s");
}

#[test]
fn rate_cap_byte_queue_drops_the_excess() {
    // 10 Mbit/s, 1000-byte datagrams (0.8 ms), offered every 0.2 ms; the
    // queue holds 10 000 bytes.
    const LEN: usize = 1000;
    const LIMIT: u64 = 10_000;
    let params = LinkParams {
        rate_bps: Some(10_000_000),
        queue: QueueLimit::Bytes(LIMIT),
        ..LinkParams::default()
    };
    let mut link = LinkModel::new(params, 11);
    let t0 = origin();
    let mut departures = Vec::new();
    for i in 0..10_000u32 {
        let now = t0 + us(200) * i;
        let queued = link.queue_bytes(now);
        assert!(queued <= LIMIT, "{queued} bytes queued");
        match link.offer(now, LEN) {
            Fate::Delivered { first, .. } => {
                assert!(queued + LEN as u64 <= LIMIT);
                assert!(
                    first.at - now <= Duration::from_secs_f64(LIMIT as f64 * 8.0 / 10e6) + us(1)
                );
                departures.push(first.at);
            }
            Fate::Dropped(DropCause::Queue) => assert!(queued + LEN as u64 > LIMIT),
            f => panic!("{f:?}"),
        }
    }
    let c = link.counters();
    check_conservation(&c);
    // 2 s at 1250 datagrams/s, 5000 offered.
    assert!(
        (departures.len() as i64 - 2500).abs() <= 12,
        "{}",
        departures.len()
    );
    assert_eq!(c.dropped_queue, 10_000 - departures.len() as u64);
    let span = (*departures.last().unwrap() - departures[0]).as_secs_f64();
    let bps = (departures.len() - 1) as f64 * LEN as f64 * 8.0 / span;
    assert!((bps / 10e6 - 1.0).abs() < 0.001, "throughput {bps} bit/s");
    // A datagram larger than the whole queue never fits.
    assert_eq!(
        link.offer(t0 + ms(10_000), LIMIT as usize + 1),
        Fate::Dropped(DropCause::Queue)
    );
}

#[test]
fn under_the_rate_nothing_queues() {
    let params = LinkParams {
        rate_bps: Some(100_000_000),
        ..LinkParams::default()
    };
    let mut link = LinkModel::new(params, 12);
    // 1500 bytes take 120 µs; offered every 200 µs.
    for (now, f) in offer_all(&mut link, 5000, us(200), 1500) {
        let at = copies(f)[0].at;
        assert!(
            (at - now).abs_diff(us(120)) < Duration::from_nanos(2),
            "{:?}",
            at - now
        );
    }
    assert_eq!(link.counters().dropped_queue, 0);
    assert_eq!(link.queue_bytes(origin() + ms(10_000)), 0);
}

#[test]
fn mtu_drops_only_larger_datagrams() {
    let params = LinkParams {
        mtu: Some(1280),
        ..LinkParams::default()
    };
    let mut link = LinkModel::new(params, 13);
    let t = origin();
    // (case, length, dropped)
    let cases = [
        (1, 0, false),
        (2, 1, false),
        (3, 1279, false),
        (4, 1280, false),
        (5, 1281, true),
        (6, 1500, true),
        (7, 65_535, true),
    ];
    for (case, len, dropped) in cases {
        let f = link.offer(t, len);
        assert_eq!(
            f == Fate::Dropped(DropCause::Mtu),
            dropped,
            "case {case}: {f:?}"
        );
        assert_eq!(matches!(f, Fate::Delivered { .. }), !dropped, "case {case}");
    }
    assert_eq!(link.counters().dropped_mtu, 3);
}

#[test]
fn cut_drops_everything_while_set() {
    let params = LinkParams {
        delay: ms(3),
        mtu: Some(1400),
        ..LinkParams::default()
    };
    let mut link = LinkModel::new(params, 14);
    let t0 = origin();
    assert!(!link.is_cut());
    assert!(matches!(link.offer(t0, 100), Fate::Delivered { .. }));
    link.set_cut(true);
    assert!(link.is_cut());
    for i in 1..=1000u32 {
        assert_eq!(
            link.offer(t0 + us(10) * i, 100),
            Fate::Dropped(DropCause::Cut)
        );
    }
    // Oversized datagrams are counted as MTU drops even while cut.
    assert_eq!(link.offer(t0 + ms(20), 1500), Fate::Dropped(DropCause::Mtu));
    link.set_cut(false);
    assert!(!link.is_cut());
    let now = t0 + ms(30);
    assert_eq!(
        link.offer(now, 100),
        Fate::Delivered {
            first: Delivery {
                at: now + ms(3),
                corrupt_bit: None
            },
            duplicate: None
        }
    );
    let c = link.counters();
    assert_eq!((c.dropped_cut, c.dropped_mtu, c.delivered), (1000, 1, 2));
    check_conservation(&c);
}

/// Default parameters changed by `f`.
fn with(f: impl FnOnce(&mut LinkParams)) -> LinkParams {
    let mut p = LinkParams::default();
    f(&mut p);
    p
}

#[test]
fn validate_rejects_out_of_range_values() {
    let burst = |loss, b| with(|p| (p.loss, p.loss_burst) = (loss, Some(b)));
    // (case, params, the error names)
    let bad = [
        (1, with(|p| p.loss = 1.01), "loss"),
        (2, with(|p| p.loss = -0.01), "loss"),
        (3, with(|p| p.loss = f64::NAN), "loss"),
        (4, with(|p| p.loss = f64::INFINITY), "loss"),
        (5, with(|p| p.duplicate = -1e-9), "duplicate"),
        (6, with(|p| p.duplicate = f64::NAN), "duplicate"),
        (7, with(|p| p.corrupt = 2.0), "corrupt"),
        (8, with(|p| p.corrupt = -0.0001), "corrupt"),
        (9, burst(0.1, 0.5), "burst"),
        (10, burst(0.1, 0.0), "burst"),
        (11, burst(0.1, -3.0), "burst"),
        (12, burst(0.1, f64::NAN), "burst"),
        (13, burst(0.1, f64::INFINITY), "burst"),
        (14, burst(1.0, 2.0), "loss"),
        (15, with(|p| p.rate_bps = Some(0)), "rate"),
        (16, with(|p| p.mtu = Some(0)), "mtu"),
        // Bursts of b packets, each followed by at least one good one,
        // lose at most b / (b + 1): these cannot be made.
        (17, burst(0.6, 1.0), "burst"),
        (18, burst(0.9, 2.0), "burst"),
        (19, burst(0.99, 50.0), "burst"),
        // Arrival times would overflow.
        (20, with(|p| p.delay = Duration::MAX), "delay"),
        (
            21,
            with(|p| (p.delay, p.jitter) = (MAX_DELAY, ms(1))),
            "delay",
        ),
    ];
    for (case, p, word) in bad {
        let e = p
            .validate()
            .expect_err(&format!("case {case}: {p:?} accepted"));
        assert!(e.contains(word), "case {case}: {e:?} should name {word}");
    }
    let good = [
        (101, LinkParams::default()),
        (102, with(|p| p.loss = 1.0)),
        (103, with(|p| (p.duplicate, p.corrupt) = (1.0, 1.0))),
        (104, burst(0.5, 1.0)),
        (105, burst(0.9, 9.0)),
        (106, burst(0.99, 99.0)),
        (107, burst(0.0, 1.0)),
        (108, with(|p| (p.rate_bps, p.mtu) = (Some(1), Some(1)))),
        (109, with(|p| (p.delay, p.jitter) = (ms(1), ms(5)))),
        (110, with(|p| p.delay = MAX_DELAY)),
    ];
    for (case, p) in good {
        assert_eq!(p.validate(), Ok(()), "case {case}");
    }
}

#[test]
fn longest_valid_delay_does_not_overflow() {
    for dist in [JitterDist::Uniform, JitterDist::Normal] {
        let p = with(|p| (p.delay, p.jitter, p.jitter_dist) = (MAX_DELAY - ms(1), ms(1), dist));
        p.validate().unwrap();
        let mut link = LinkModel::new(p, 15);
        offer_all(&mut link, 1000, us(1), 100);
        assert_eq!(link.counters().delivered, 1000);
    }
}

fn everything() -> LinkParams {
    LinkParams {
        delay: ms(3),
        jitter: ms(1),
        jitter_dist: JitterDist::Normal,
        reorder: true,
        loss: 0.02,
        loss_burst: Some(3.0),
        duplicate: 0.01,
        corrupt: 0.01,
        rate_bps: Some(50_000_000),
        queue: QueueLimit::Bytes(30_000),
        mtu: Some(1400),
    }
}

/// A datagram's fate with arrival times as offsets from the origin.
type Outcome = Result<Vec<(Duration, Option<usize>)>, DropCause>;

fn run(seed: u64) -> (Vec<Outcome>, LinkCounters) {
    let mut link = LinkModel::new(everything(), seed);
    let t0 = origin();
    let fates = (0..20_000u32)
        .map(|i| {
            let f = link.offer(t0 + us(100) * i, (i as usize * 37) % 1500);
            match f {
                Fate::Dropped(c) => Err(c),
                Fate::Delivered { .. } => Ok(copies(f)
                    .iter()
                    .map(|d| (d.at - t0, d.corrupt_bit))
                    .collect()),
            }
        })
        .collect();
    (fates, link.counters())
}

#[test]
fn same_seed_same_fates_different_seed_different() {
    let (a, ca) = run(7);
    let (b, cb) = run(7);
    let (c, cc) = run(8);
    assert_eq!(a, b);
    assert_eq!(ca, cb);
    assert_ne!(a, c);
    assert_ne!(ca, cc);
    // Every impairment happened, and the counters add up.
    for k in [ca, cc] {
        check_conservation(&k);
        assert!(
            k.dropped_mtu > 0 && k.dropped_loss > 0 && k.dropped_queue > 0,
            "{k:?}"
        );
        assert!(
            k.duplicated > 0 && k.corrupted > 0 && k.reordered > 0,
            "{k:?}"
        );
    }
    // Differently seeded runs differ in which datagrams they lose.
    let lost = |fs: &[Outcome]| {
        fs.iter()
            .map(|f| *f == Err(DropCause::Loss))
            .collect::<Vec<_>>()
    };
    assert_ne!(lost(&a), lost(&c));
}

#[test]
fn extreme_rates_and_byte_queues_neither_panic_nor_wrap() {
    let t0 = origin();
    // (case, rate, queue, length, fate of the first and of a second
    // datagram offered at the same instant)
    let huge = usize::MAX;
    let cases = [
        // Unvalidated rate 0: nothing passes (no NaN, no panic).
        (1, 0, QueueLimit::Bytes(u64::MAX), 1, false, false),
        (2, 0, DEFAULT_QUEUE, 0, false, false),
        // 1 bit/s: 2^67 bits take longer than a Duration holds.
        (3, 1, QueueLimit::Bytes(u64::MAX), huge, false, false),
        (4, 1, QueueLimit::Time(Duration::MAX), 1, true, true),
        // u64::MAX bit/s sends u64::MAX bytes in 8 s; then the queue
        // holds 8 s of it, more bytes than u64 counts: full, not a wrap.
        (5, u64::MAX, QueueLimit::Bytes(u64::MAX), huge, true, false),
        (6, u64::MAX, DEFAULT_QUEUE, 1500, true, true),
    ];
    for (case, rate, queue, len, first, second) in cases {
        let mut link = LinkModel::new(
            LinkParams {
                rate_bps: Some(rate),
                queue,
                ..LinkParams::default()
            },
            20 + case,
        );
        for (i, want) in [first, second].into_iter().enumerate() {
            match link.offer(t0, len) {
                Fate::Delivered { first, .. } => {
                    assert!(want, "case {case}, datagram {i}: delivered");
                    assert!(first.at >= t0, "case {case}");
                }
                f => assert!(
                    !want && f == Fate::Dropped(DropCause::Queue),
                    "case {case}, datagram {i}: {f:?}"
                ),
            }
        }
        check_conservation(&link.counters());
    }
    // At 1 bit/s one byte takes 8 s; at u64::MAX bit/s 1500 take none.
    let mut slow = LinkModel::new(with(|p| p.rate_bps = Some(1)), 30);
    assert_eq!(copies(slow.offer(t0, 1))[0].at, t0 + Duration::from_secs(8));
    let mut fast = LinkModel::new(with(|p| p.rate_bps = Some(u64::MAX)), 31);
    assert_eq!(copies(fast.offer(t0, 1500))[0].at, t0);
}

#[test]
fn a_queue_without_end_fills_time_itself_then_drops() {
    // 1 bit/s behind a queue of Duration::MAX: every 2^57-byte datagram
    // takes 2^60 s, until departures would leave after the last instant
    // there is.
    let params = with(|p| (p.rate_bps, p.queue) = (Some(1), QueueLimit::Time(Duration::MAX)));
    let mut link = LinkModel::new(params, 32);
    let t0 = origin();
    let mut latest = t0;
    let mut delivered = 0;
    for _ in 0..100 {
        match link.offer(t0, 1 << 57) {
            Fate::Delivered { first, .. } => {
                assert!(first.at > latest, "departures are serialised");
                latest = first.at;
                delivered += 1;
            }
            f => assert_eq!(f, Fate::Dropped(DropCause::Queue)),
        }
    }
    assert!(delivered < 100, "no instant is 100 × 2^60 s away");
    assert!(link.queue_delay(t0) >= Duration::from_secs(1 << 60) * delivered);
    assert_eq!(link.counters().dropped_queue, 100 - u64::from(delivered));
    check_conservation(&link.counters());
}

#[test]
fn delays_beyond_validation_are_dropped_not_panics() {
    let t0 = origin();
    // (case, delay, jitter, distribution)
    let cases = [
        (1, Duration::MAX, Duration::ZERO, JitterDist::Uniform),
        (2, Duration::MAX, ms(1), JitterDist::Uniform),
        (3, Duration::MAX, ms(1), JitterDist::Normal),
        (4, ms(1), Duration::MAX, JitterDist::Uniform),
        (5, ms(1), Duration::MAX, JitterDist::Normal),
    ];
    for (case, delay, jitter, jitter_dist) in cases {
        let p = with(|p| (p.delay, p.jitter, p.jitter_dist) = (delay, jitter, jitter_dist));
        assert!(p.validate().is_err(), "case {case}");
        let mut link = LinkModel::new(p, 40 + case);
        for _ in 0..100 {
            match link.offer(t0, 100) {
                // Jitter may draw a delay that still fits.
                Fate::Delivered { first, .. } => assert!(first.at >= t0, "case {case}"),
                f => assert_eq!(f, Fate::Dropped(DropCause::Queue), "case {case}"),
            }
        }
        assert!(link.counters().dropped_queue > 0, "case {case}");
        check_conservation(&link.counters());
    }
}

#[test]
fn corrupting_a_datagram_of_any_length() {
    let mut link = LinkModel::new(with(|p| p.corrupt = 1.0), 50);
    for len in [1usize << 61, usize::MAX / 8 + 1, usize::MAX] {
        let bit = copies(link.offer(origin(), len))[0]
            .corrupt_bit
            .expect("corrupt = 100 %");
        assert!(bit / 8 < len, "bit {bit} of {len} bytes");
    }
    assert_eq!(link.counters().corrupted, 3);
}

#[test]
fn unvalidated_burst_parameters_lose_what_they_say() {
    const N: usize = 10_000;
    // (case, loss, burst, lowest and highest share lost)
    let cases = [
        (1, 1.0, 3.0, 1.0, 1.0),
        (2, 1.0, f64::NAN, 1.0, 1.0),
        // A NaN or zero burst is a burst of one: loss and delivery
        // alternate at 50 %.
        (3, 0.5, f64::NAN, 0.5, 0.5),
        (4, 0.5, 0.0, 0.5, 0.5),
        (5, 0.2, -1.0, 0.15, 0.25),
    ];
    for (case, loss, burst, lo, hi) in cases {
        let p = with(|p| (p.loss, p.loss_burst) = (loss, Some(burst)));
        assert!(p.validate().is_err(), "case {case}");
        let mut link = LinkModel::new(p, 60 + case);
        offer_all(&mut link, N, us(10), 100);
        let share = link.counters().dropped_loss as f64 / N as f64;
        assert!(
            (lo - 0.01..=hi + 0.01).contains(&share),
            "case {case}: {share}"
        );
    }
}

#[test]
fn counters_saturate() {
    let mut link = LinkModel::new(everything(), 70);
    link.counters = LinkCounters {
        offered: u64::MAX,
        delivered: u64::MAX,
        duplicated: u64::MAX,
        corrupted: u64::MAX,
        reordered: u64::MAX,
        dropped_mtu: u64::MAX,
        dropped_cut: u64::MAX,
        dropped_loss: u64::MAX,
        dropped_queue: u64::MAX,
    };
    let before = link.counters();
    let t0 = origin();
    for i in 0..20_000u32 {
        link.offer(t0 + us(100) * i, (i as usize * 37) % 1500);
        if i == 10_000 {
            link.set_cut(true);
        }
    }
    assert_eq!(link.counters(), before);
}

#[test]
fn a_rate_change_applies_after_what_is_queued() {
    // 1000 bytes/s; two 1000-byte datagrams queued, then the rate falls
    // to 100 bytes/s: the queued ones keep their times, the next one waits
    // for them and then takes 10 s.
    let params = LinkParams {
        rate_bps: Some(8000),
        queue: QueueLimit::Time(Duration::from_secs(60)),
        ..LinkParams::default()
    };
    let mut link = LinkModel::new(params, 1);
    let t0 = origin();
    let at = |f: Fate| copies(f)[0].at;
    assert_eq!(at(link.offer(t0, 1000)), t0 + ms(1000));
    assert_eq!(at(link.offer(t0, 1000)), t0 + ms(2000));
    link.set_rate(800).unwrap();
    assert_eq!(link.params().rate_bps, Some(800));
    assert_eq!(at(link.offer(t0, 1000)), t0 + ms(12_000));
    assert!(link.set_rate(0).is_err());
    assert_eq!(link.params().rate_bps, Some(800));
}
