//! What `braid top` shows, worked out from one snapshot a second (the one
//! `braid show --json` reads): rates from the byte counters' growth, a
//! minute of history per path and direction, the first-arrival share of
//! each path over the last second. No terminal here: the view draws it.

use crate::log::RecentEvent;
use crate::uapi::{DeviceSnapshot, PathSnapshot, PeerSnapshot};
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Instant, SystemTime};

/// Samples kept per path and direction: a minute at one a second.
pub const HISTORY: usize = 60;

/// One interface as `braid top` sees it.
pub struct Interface {
    pub name: String,
    pub status: Status,
    pub peers: Vec<PeerView>,
    pub events: Vec<RecentEvent>,
    /// The previous snapshot and when it was taken, for the rates.
    last: Option<(Instant, DeviceSnapshot)>,
    /// Rate history per (peer key, path name): received, sent (bit/s).
    history: HashMap<(String, String), (VecDeque<f64>, VecDeque<f64>)>,
}

pub enum Status {
    /// Answering.
    Running,
    /// Not answering since then, and why.
    NotRunning { since: SystemTime, why: String },
}

pub struct PeerView {
    pub key: String,
    pub mode: String,
    pub cipher: String,
    pub last_handshake: Option<SystemTime>,
    /// Bits per second over the last interval (`None`: first look).
    pub rx_bps: Option<f64>,
    pub tx_bps: Option<f64>,
    pub paths: Vec<PathView>,
    pub reorder: Reorder,
}

/// The reorder window: what it holds now and its counters.
#[derive(Default)]
pub struct Reorder {
    pub hold_us: u64,
    pub held: u64,
    pub accepted: u64,
    pub buffered: u64,
    pub duplicated: u64,
    pub under_window: u64,
    pub lost: u64,
}

pub struct PathView {
    pub name: String,
    pub state: String,
    pub rtt_us: Option<u64>,
    pub jitter_us: Option<u64>,
    pub loss_out: f64,
    pub loss_in: f64,
    /// Received and sent, bit/s, oldest first (at most [`HISTORY`]).
    pub rx_history: Vec<f64>,
    pub tx_history: Vec<f64>,
    /// Share of the packets this path delivered first, over the last
    /// interval (or since the start when nothing arrived in it).
    pub first_share: Option<f64>,
    pub mtu: Option<usize>,
    /// The scheduler's estimate of the line towards the peer, bit/s.
    pub estimate_bps: Option<u64>,
}

impl Interface {
    pub fn new(name: &str) -> Interface {
        Interface {
            name: name.to_string(),
            status: Status::Running,
            peers: Vec::new(),
            events: Vec::new(),
            last: None,
            history: HashMap::new(),
        }
    }

    /// Takes what one look at the daemon found at `now` (`wall`: the same
    /// moment on the wall clock).
    pub fn update(
        &mut self,
        now: Instant,
        wall: SystemTime,
        looked: Result<DeviceSnapshot, String>,
    ) {
        let snap = match looked {
            Ok(s) => s,
            Err(why) => {
                if let Status::Running = self.status {
                    self.status = Status::NotRunning { since: wall, why };
                } else if let Status::NotRunning { why: w, .. } = &mut self.status {
                    *w = why;
                }
                // A daemon that comes back starts its counters afresh.
                self.last = None;
                return;
            }
        };
        self.status = Status::Running;
        let elapsed = self
            .last
            .as_ref()
            .map(|(at, _)| now.saturating_duration_since(*at).as_secs_f64())
            .filter(|s| *s > 0.0);
        let before = self.last.as_ref().map(|(_, s)| s);
        let mut peers = Vec::with_capacity(snap.peers.len());
        let mut seen = HashSet::new();
        for peer in &snap.peers {
            let key = peer.public_key.to_base64();
            let old = before.and_then(|b| b.peers.iter().find(|p| p.public_key == peer.public_key));
            let rate = |now: u64, then: Option<u64>| {
                let (then, secs) = (then?, elapsed?);
                Some(now.saturating_sub(then) as f64 * 8.0 / secs)
            };
            let firsts: u64 = peer
                .paths
                .iter()
                .map(|p| {
                    p.first_arrivals
                        .saturating_sub(old_path(old, p).map_or(0, |o| o.first_arrivals))
                })
                .sum();
            let total_firsts: u64 = peer.paths.iter().map(|p| p.first_arrivals).sum();
            let mut paths = Vec::with_capacity(peer.paths.len());
            for p in &peer.paths {
                let o = old_path(old, p);
                let hist_key = (key.clone(), p.name.clone());
                seen.insert(hist_key.clone());
                let (rx_h, tx_h) = self.history.entry(hist_key).or_default();
                if let Some(r) = rate(p.rx_bytes, o.map(|o| o.rx_bytes)) {
                    push(rx_h, r);
                }
                if let Some(r) = rate(p.tx_bytes, o.map(|o| o.tx_bytes)) {
                    push(tx_h, r);
                }
                let new_firsts = p
                    .first_arrivals
                    .saturating_sub(o.map_or(0, |o| o.first_arrivals));
                let first_share = if firsts > 0 && o.is_some() {
                    Some(new_firsts as f64 / firsts as f64)
                } else if total_firsts > 0 {
                    Some(p.first_arrivals as f64 / total_firsts as f64)
                } else {
                    None
                };
                paths.push(PathView {
                    name: p.name.clone(),
                    state: p.state.clone(),
                    rtt_us: p.rtt_us,
                    jitter_us: p.jitter_us,
                    loss_out: p.loss_out,
                    loss_in: p.loss_in,
                    rx_history: rx_h.iter().copied().collect(),
                    tx_history: tx_h.iter().copied().collect(),
                    first_share,
                    mtu: p.pmtu.as_ref().map(|m| m.mtu),
                    estimate_bps: p.estimate.as_ref().map(|e| e.rate_bps),
                });
            }
            peers.push(PeerView {
                key,
                mode: peer.mode.clone(),
                cipher: peer.cipher.clone(),
                last_handshake: peer.last_handshake,
                rx_bps: rate(peer.rx_bytes, old.map(|o| o.rx_bytes)),
                tx_bps: rate(peer.tx_bytes, old.map(|o| o.tx_bytes)),
                paths,
                reorder: reorder(peer),
            });
        }
        self.history.retain(|k, _| seen.contains(k));
        self.peers = peers;
        self.events = snap.events.clone();
        self.last = Some((now, snap));
    }
}

fn old_path<'a>(old: Option<&'a PeerSnapshot>, p: &PathSnapshot) -> Option<&'a PathSnapshot> {
    old?.paths.iter().find(|o| o.name == p.name)
}

fn push(h: &mut VecDeque<f64>, v: f64) {
    if h.len() == HISTORY {
        h.pop_front();
    }
    h.push_back(v);
}

fn reorder(peer: &PeerSnapshot) -> Reorder {
    let get = |name: &str| {
        peer.extra
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    };
    Reorder {
        hold_us: get("reorder_hold_us"),
        held: get("reorder_held"),
        accepted: get("accepted"),
        buffered: get("buffered"),
        duplicated: get("duplicated"),
        under_window: get("under_window"),
        lost: get("lost"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::PrivateKey;
    use std::time::Duration;

    fn path(name: &str, rx: u64, tx: u64, firsts: u64) -> PathSnapshot {
        PathSnapshot {
            name: name.into(),
            remote: "198.18.1.1:51820".parse().unwrap(),
            state: "up".into(),
            rx_packets: 0,
            rx_bytes: rx,
            tx_packets: 0,
            tx_bytes: tx,
            first_arrivals: firsts,
            resent: 0,
            rtt_us: Some(3000),
            jitter_us: Some(500),
            loss: 0.0,
            loss_out: 0.0,
            loss_in: 0.0,
            pmtu: None,
            estimate: None,
        }
    }

    fn snap(paths: Vec<PathSnapshot>) -> DeviceSnapshot {
        let mut s = DeviceSnapshot::new(None, 51820, 0);
        let mut p = PeerSnapshot::new(PrivateKey::from_bytes([2; 32]).public_key());
        p.rx_bytes = paths.iter().map(|p| p.rx_bytes).sum();
        p.extra = vec![("accepted".into(), 5), ("reorder_hold_us".into(), 4100)];
        p.paths = paths;
        s.peers = vec![p];
        s
    }

    #[test]
    fn rates_history_and_first_arrival_share() {
        let t0 = Instant::now();
        let w = SystemTime::UNIX_EPOCH;
        let mut i = Interface::new("wg0");
        i.update(
            t0,
            w,
            Ok(snap(vec![path("a", 0, 0, 0), path("b", 0, 0, 0)])),
        );
        assert_eq!(i.peers[0].rx_bps, None, "no rate from one look");
        assert!(i.peers[0].paths[0].rx_history.is_empty());
        // 1.25 MB in 1 s on a, half that on b; a first 3 times out of 4.
        i.update(
            t0 + Duration::from_secs(1),
            w,
            Ok(snap(vec![
                path("a", 1_250_000, 0, 300),
                path("b", 625_000, 0, 100),
            ])),
        );
        let p = &i.peers[0];
        assert_eq!(p.paths[0].rx_history, vec![10_000_000.0]);
        assert_eq!(p.paths[1].rx_history, vec![5_000_000.0]);
        assert_eq!(p.rx_bps, Some(15_000_000.0));
        assert_eq!(p.paths[0].first_share, Some(0.75));
        assert_eq!(p.reorder.accepted, 5);
        assert_eq!(p.reorder.hold_us, 4100);
        // A minute and more: the history keeps the last 60 samples.
        for s in 2..=70u64 {
            i.update(
                t0 + Duration::from_secs(s),
                w,
                Ok(snap(vec![
                    path("a", s * 1_250_000, 0, 300),
                    path("b", 0, 0, 100),
                ])),
            );
        }
        assert_eq!(i.peers[0].paths[0].rx_history.len(), HISTORY);
        // Nothing new arrived first: the share since the start shows.
        assert_eq!(i.peers[0].paths[0].first_share, Some(0.75));
    }

    #[test]
    fn a_daemon_that_goes_away_is_not_running_until_it_answers_again() {
        let t0 = Instant::now();
        let w = SystemTime::UNIX_EPOCH;
        let mut i = Interface::new("wg0");
        i.update(t0, w, Ok(snap(vec![path("a", 0, 0, 0)])));
        i.update(t0, w + Duration::from_secs(5), Err("gone".into()));
        i.update(t0, w + Duration::from_secs(6), Err("still gone".into()));
        match &i.status {
            Status::NotRunning { since, why } => {
                assert_eq!(*since, w + Duration::from_secs(5));
                assert_eq!(why, "still gone");
            }
            Status::Running => panic!("should not be running"),
        }
        // Back, with its counters from zero: no negative or huge rate.
        i.update(
            t0 + Duration::from_secs(7),
            w,
            Ok(snap(vec![path("a", 10, 0, 0)])),
        );
        assert!(matches!(i.status, Status::Running));
        assert_eq!(i.peers[0].rx_bps, None);
    }
}
