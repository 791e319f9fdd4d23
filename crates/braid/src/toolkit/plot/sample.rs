//! The figures a plot is made of, gathered while a transfer runs: what
//! each line carried per second (its `braid netem` relay's counter of
//! bytes forwarded from A to B), what arrived in total (iperf3's
//! intervals, or braid's own count), and braid's events turned into marks.

use super::{Mark, MarkKind, Series};
use crate::log::RecentEvent;
use crate::toolkit::lab::NetemLine;
use std::time::{Duration, Instant};

/// How often the relays are read.
pub const EVERY: Duration = Duration::from_secs(1);

/// Bytes each line forwarded, read from its relay once a second.
pub struct LineRates {
    names: Vec<String>,
    start: Instant,
    next: Instant,
    /// Per line: (seconds since start, bytes forwarded so far).
    samples: Vec<Vec<(f64, u64)>>,
}

impl LineRates {
    /// For lines `names` (in the order of the relays given to `poll`),
    /// from `start` (the transfer's start).
    pub fn new(names: &[&str], start: Instant) -> LineRates {
        LineRates {
            names: names.iter().map(|n| n.to_string()).collect(),
            start,
            next: start,
            samples: vec![Vec::new(); names.len()],
        }
    }

    /// Reads the relays if a second has passed since the last read (call
    /// it as often as convenient).
    pub fn poll(&mut self, now: Instant, relays: &[&NetemLine]) {
        if now < self.next {
            return;
        }
        self.next += EVERY;
        if self.next <= now {
            // A late read: keep whole seconds from here on.
            self.next = now + EVERY;
        }
        let at = now.saturating_duration_since(self.start).as_secs_f64();
        for (samples, relay) in self.samples.iter_mut().zip(relays) {
            if let Some(bytes) = forwarded_up(relay) {
                samples.push((at, bytes));
            }
        }
    }

    /// One series per line, Mbit/s per interval between reads.
    pub fn series(&self) -> Vec<Series> {
        self.names
            .iter()
            .zip(&self.samples)
            .map(|(name, samples)| Series {
                label: name.clone(),
                points: rate_points(samples),
                total: false,
            })
            .collect()
    }
}

/// The relay's bytes forwarded from its clients (A) to its target (B).
fn forwarded_up(relay: &NetemLine) -> Option<u64> {
    let stats = relay.control("stats json").ok()?;
    let v: serde_json::Value = serde_json::from_str(&stats).ok()?;
    v["up"]["forwarded_bytes"].as_u64()
}

/// Mbit/s over each interval between two (seconds, bytes so far)
/// readings, at the interval's end.
pub fn rate_points(samples: &[(f64, u64)]) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .filter_map(|w| {
            let ((t0, b0), (t1, b1)) = (w[0], w[1]);
            (t1 > t0).then(|| (t1, b1.saturating_sub(b0) as f64 * 8.0 / (t1 - t0) / 1e6))
        })
        .collect()
}

/// iperf3's intervals (start s, end s, bytes) as Mbit/s at each end.
pub fn interval_points(intervals: &[(f64, f64, f64)]) -> Vec<(f64, f64)> {
    intervals
        .iter()
        .filter(|(s, e, _)| e > s)
        .map(|(s, e, bytes)| (*e, bytes * 8.0 / (e - s) / 1e6))
        .collect()
}

/// braid's events about paths going down or up (`peer KEY: path NAME to
/// ADDR down (was up)`) between `from_unix_ms` and `seconds` later, as
/// marks at seconds since `from_unix_ms`.
pub fn event_marks(events: &[RecentEvent], from_unix_ms: u64, seconds: f64) -> Vec<Mark> {
    events
        .iter()
        .filter_map(|e| {
            let at = (e.unix_ms.checked_sub(from_unix_ms)?) as f64 / 1000.0;
            if at > seconds {
                return None;
            }
            let rest = e.text.split_once(": path ")?.1;
            let name = rest.split_whitespace().next()?;
            let (kind, word) = if rest.contains(" down") {
                (MarkKind::Down, "down")
            } else if rest.ends_with(" up") {
                (MarkKind::Up, "up")
            } else {
                return None;
            };
            Some(Mark {
                at,
                kind,
                label: format!("braid: {name} {word}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_from_counter_readings() {
        let pts = rate_points(&[
            (0.0, 0),
            (1.0, 1_250_000),
            (2.0, 1_250_000),
            (3.5, 2_000_000),
        ]);
        assert_eq!(pts, vec![(1.0, 10.0), (2.0, 0.0), (3.5, 4.0)]);
        assert!(rate_points(&[(1.0, 5)]).is_empty());
        // A counter that went back (a new relay) is no negative rate.
        assert_eq!(rate_points(&[(0.0, 100), (1.0, 0)]), vec![(1.0, 0.0)]);
    }

    #[test]
    fn iperf_intervals_become_points() {
        let pts = interval_points(&[
            (0.0, 1.0, 1_250_000.0),
            (1.0, 2.0, 2_500_000.0),
            (2.0, 2.0, 1.0),
        ]);
        assert_eq!(pts, vec![(1.0, 10.0), (2.0, 20.0)]);
    }

    #[test]
    fn path_events_become_marks() {
        let ev = |ms: u64, text: &str| RecentEvent {
            unix_ms: ms,
            level: "info".into(),
            text: text.into(),
        };
        let events = [
            ev(500, "peer K=: path lossy to 198.18.77.2:5001 down (was up)"),
            ev(
                10_250,
                "peer K=: path lossy to 198.18.77.2:5001 down (was up)",
            ),
            ev(12_000, "peer K=: handshake completed, session up"),
            ev(13_500, "peer K=: path lossy to 198.18.77.2:5001 up"),
            ev(99_000, "peer K=: path lossy to 198.18.77.2:5001 up"),
        ];
        let marks = event_marks(&events, 1_000, 20.0);
        assert_eq!(
            marks,
            vec![
                Mark {
                    at: 9.25,
                    kind: MarkKind::Down,
                    label: "braid: lossy down".into()
                },
                Mark {
                    at: 12.5,
                    kind: MarkKind::Up,
                    label: "braid: lossy up".into()
                },
            ]
        );
    }
}
