//! The two measurements: datagrams forwarded per second, and the error of
//! the configured delay.

use super::load::{receiver, sender, socket};
use super::relay::Relay;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What the command line asked for.
pub(super) struct Opts {
    pub(super) seconds: f64,
    pub(super) runs: usize,
    pub(super) size: usize,
    pub(super) rate: u64,
    pub(super) json: bool,
}

/// Datagrams per second delivered through one relay.
pub(super) fn forwarding_run(netem: bool, o: &Opts) -> Result<(f64, f64), String> {
    let sink = socket();
    let to = sink.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let rx = receiver(sink, false, stop.clone(), got.clone(), |_| {});
    let (relay, listen) = if netem {
        Relay::netem(to, &[])?
    } else {
        Relay::plain(to)
    };
    let src = socket();
    src.connect(listen).unwrap();
    let tx = sender(
        src,
        o.size,
        None,
        Instant::now(),
        stop.clone(),
        sent.clone(),
    );
    thread::sleep(Duration::from_millis(500));
    let (g0, s0, t0) = (
        got.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        Instant::now(),
    );
    thread::sleep(Duration::from_secs_f64(o.seconds));
    let (g1, s1, t1) = (
        got.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        Instant::now(),
    );
    stop.store(true, Ordering::Relaxed);
    let _ = tx.join();
    drop(relay);
    let _ = rx.join();
    let secs = (t1 - t0).as_secs_f64();
    Ok(((g1 - g0) as f64 / secs, (s1 - s0) as f64 / secs))
}

pub(super) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// |one-way delay − `delay_ns`| in ns, one per datagram.
pub(super) fn delay_run(o: &Opts, delay_ns: u64) -> Result<(Vec<u64>, u64), String> {
    let sink = socket();
    let to = sink.local_addr().unwrap();
    let base = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::with_capacity(
        (o.rate as f64 * (o.seconds + 2.0)) as usize,
    )));
    let warm = base + Duration::from_millis(300);
    let rx = {
        let errors = errors.clone();
        // Not busy-polling: on two cores a spinning receiver preempts the
        // sender between its time stamp and its sendmmsg.
        receiver(sink, false, stop.clone(), got.clone(), move |batch| {
            // Uncontended until the end: the main thread only takes it
            // after the receiver stopped.
            let mut e = errors.lock().unwrap();
            for (at, h) in batch {
                if *at < warm {
                    continue;
                }
                let now = at.duration_since(base).as_nanos() as u64;
                let sent = u64::from_le_bytes(h[8..16].try_into().unwrap());
                e.push(now.saturating_sub(sent).abs_diff(delay_ns));
            }
        })
    };
    let (relay, listen) = Relay::netem(
        to,
        &["--delay", &format!("{}us", delay_ns / 1000), "--realtime"],
    )?;
    let src = socket();
    src.connect(listen).unwrap();
    // Ten datagrams per tick keeps the sender's own timer out of the way.
    let per_tick = 10usize;
    let tick = Duration::from_nanos(1_000_000_000 * per_tick as u64 / o.rate);
    let tx = sender(
        src,
        o.size,
        Some((tick, per_tick)),
        base,
        stop.clone(),
        sent.clone(),
    );
    thread::sleep(Duration::from_secs_f64(o.seconds) + Duration::from_millis(300));
    let offered = sent.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let _ = tx.join();
    // Let the last ones through before the relay stops.
    thread::sleep(Duration::from_millis(20));
    drop(relay);
    let _ = rx.join();
    let v = std::mem::take(&mut *errors.lock().unwrap());
    Ok((v, offered))
}

pub(super) fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}
