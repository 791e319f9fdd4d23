//! The daemon's side of path MTU discovery (the search itself is
//! `braid_core::pmtud`, run by the device):
//!
//! - each path's search is capped by the MTU of the local line it leaves
//!   on, looked up from the routing table now and then, a slice of the
//!   paths at a time ([`super::ceilings`]);
//! - the TUN MTU follows the smallest size the live paths carry (unless
//!   the config fixes `MTU =`), and with it `MssFix = auto`;
//! - an inner packet bigger than that is answered with ICMP "fragmentation
//!   needed" / ICMPv6 "packet too big" written back to the TUN, at a
//!   bounded rate, instead of vanishing.
//!
//! [`PathMtu`] is the state; it lives in the data plane's `Shared`, whose
//! main thread drives it (`Shared::follow_path_mtu`,
//! `Shared::refresh_path_ceilings`) and whose outbound thread has it answer
//! oversize packets. Nothing here takes the data plane's locks.

use super::batch::MAX_MTU;
use super::ceilings::Round;
use braid_core::batch::{PacketBatch, HEADROOM};
use braid_core::device::{Device, PathRoute};
use braid_core::icmp;
use braid_core::pmtud::MIN_PLPMTU;
use braid_io::Tun;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Too-big answers: a burst of this many, refilled at `ANSWERS_PER_SECOND`
/// (a sender needs one to adapt; a flood of oversize packets must not turn
/// into a flood of answers).
const ANSWER_BURST: f64 = 20.0;
const ANSWERS_PER_SECOND: f64 = 100.0;
/// The largest TUN MTU braid sets by itself, following the paths: a
/// 9000-byte jumbo line's, over IPv4. Beyond it the MTU is the user's to
/// set (`MTU =`, up to 65535).
pub const AUTO_CEILING: usize = 9000 - 60;
/// Answers per batch slot: room for the largest (an ICMPv6 of 1280 bytes).
const ANSWER_SLOT: usize = 1280 + HEADROOM + 64;

pub struct PathMtu {
    /// The config fixes no `MTU =`: the TUN MTU follows the paths.
    auto: bool,
    /// The MTU used when no path says anything: the configured or default
    /// one; with the MTU fixed, the interface's as last set (wg-quick, or
    /// `ip link set … mtu` where the interface is).
    default: AtomicU32,
    /// Inner packets longer than this are answered as too big (0: no limit
    /// known yet). Read per batch by the outbound thread.
    limit: AtomicU32,
    /// The TUN MTU this module set last.
    applied: AtomicU32,
    /// The target setting failed for last (0: none), not tried again: an
    /// interface moved to another namespace cannot be changed by a daemon
    /// that gave up root (see `Tun::set_mtu`).
    refused: AtomicU32,
    ceilings: Mutex<Round>,
    answers: Mutex<Answers>,
}

struct Answers {
    batch: PacketBatch,
    tokens: f64,
    refilled: Instant,
    sent: u64,
    suppressed: u64,
}

impl Answers {
    /// Tops the budget up for the time since the last answer and empties
    /// the batch for new ones.
    fn start(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * ANSWERS_PER_SECOND).min(ANSWER_BURST);
        self.refilled = now;
        self.batch.clear();
    }
}

impl PathMtu {
    /// `configured`: the config's `MTU =`, if any; `mtu` what the TUN has.
    pub fn new(configured: Option<u32>, mtu: u32, batch: usize) -> PathMtu {
        PathMtu {
            auto: configured.is_none(),
            default: AtomicU32::new(mtu),
            limit: AtomicU32::new(0),
            applied: AtomicU32::new(mtu),
            refused: AtomicU32::new(0),
            ceilings: Mutex::new(Round::default()),
            answers: Mutex::new(Answers {
                batch: PacketBatch::new(batch, ANSWER_SLOT),
                tokens: ANSWER_BURST,
                refilled: Instant::now(),
                sent: 0,
                suppressed: 0,
            }),
        }
    }

    /// (answers sent, answers suppressed by the rate limit).
    pub fn answer_counts(&self) -> (u64, u64) {
        let a = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        (a.sent, a.suppressed)
    }

    /// Under the device lock: the interface MTU, the largest any peer's
    /// live paths carry now (the default MTU while no path says anything),
    /// capped to what braid carries; the device pads no packet beyond it,
    /// and answers longer packets to a peer whose paths carry less itself
    /// (see [`PathMtu::write_peer_answers`]).
    pub fn target(&self, device: &mut Device) -> u32 {
        let default = self.default.load(Ordering::Relaxed) as usize;
        let target = device.refresh_path_mtus(default, !self.auto);
        device.set_padding_cap(target);
        capped_mtu(target)
    }

    /// The interface MTU is `mtu` now. With the MTU fixed that is what
    /// the paths are held to (and searched up to); either way the lines'
    /// ceilings are looked up again at once.
    pub fn interface_mtu_set(&self, mtu: u32) {
        if !self.auto {
            self.default.store(mtu, Ordering::Relaxed);
        }
        self.round().restart();
    }

    /// The largest size each path's search looks for: with the MTU fixed,
    /// the interface's (a bigger one is never sent); following the paths,
    /// [`AUTO_CEILING`] (what braid sets the TUN to by itself).
    pub fn search_ceiling(&self) -> usize {
        if self.auto {
            AUTO_CEILING
        } else {
            self.default.load(Ordering::Relaxed) as usize
        }
    }

    /// Writes the device's ICMP "too big" answers (packets too long for
    /// their peer's paths) to the TUN, within the same rate limit as
    /// [`answer_oversize`](Self::answer_oversize); `take` moves them out of
    /// the device (under its lock) into the batch it is given.
    pub fn write_peer_answers(
        &self,
        tun: &Tun,
        take: impl FnOnce(&mut PacketBatch) -> usize,
    ) -> std::io::Result<()> {
        let mut a = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        let a = &mut *a;
        a.start(Instant::now());
        let taken = take(&mut a.batch);
        // Within the budget, the first ones go; the rest are suppressed.
        let allowed = (a.tokens.max(0.0) as usize).min(taken);
        a.tokens -= allowed as f64;
        a.sent = a.sent.saturating_add(allowed as u64);
        a.suppressed = a.suppressed.saturating_add((taken - allowed) as u64);
        for i in allowed..taken {
            a.batch.consume(i);
        }
        if allowed > 0 {
            tun.write_batch(&a.batch)?;
        }
        Ok(())
    }

    /// Outside the device lock: makes `target` the too-big limit and, when
    /// the TUN MTU follows the paths and differs, sets it on `tun`'s
    /// interface, in whatever namespace it is now (`name` is for the log).
    /// Returns the TUN MTU it set, for the data plane to record.
    pub fn follow(&self, target: u32, name: &str, tun: &Tun) -> Option<u32> {
        self.limit.store(target, Ordering::Relaxed);
        if !self.auto
            || self.applied.load(Ordering::Relaxed) == target
            || self.refused.load(Ordering::Relaxed) == target
        {
            return None;
        }
        match tun.set_mtu(target) {
            Ok(()) => {
                self.refused.store(0, Ordering::Relaxed);
                let was = self.applied.swap(target, Ordering::Relaxed);
                let ipv6 = if (target as usize) < MIN_PLPMTU {
                    " (below 1280: IPv6 cannot pass; a stock WireGuard peer's line carries \
                     no more, and only braid peers take packets in pieces)"
                } else {
                    ""
                };
                crate::info!(name, "path MTU: tunnel MTU {was} -> {target}{ipv6}");
                Some(target)
            }
            Err(e) => {
                self.refused.store(target, Ordering::Relaxed);
                crate::warn!(name, "cannot set the tunnel MTU to {target}: {e}");
                None
            }
        }
    }

    /// Logs how peers' packets go now where that changed (held below IPv6's
    /// 1280 bytes, split into fragments, or neither any more).
    pub fn log_notices(&self, name: &str, device: &mut Device) {
        let mut notices = Vec::new();
        device.take_mtu_notices(&mut notices);
        for n in notices {
            let peer = key_text(&n.public_key);
            let line = match (n.fragment_payload, n.limit) {
                (Some(_), _) => format!(
                    "peer {peer}: its lines carry less than the packets sent to it; longer ones \
                     go in pieces, which the peer joins (braid fragments; `braid mtu` shows the \
                     size)"
                ),
                (None, Some(limit)) if n.ipv6_blocked() => format!(
                    "peer {peer}: its lines carry {limit}-byte packets at most, below IPv6's \
                     1280: IPv6 cannot pass{}",
                    if n.joins_fragments {
                        ""
                    } else {
                        " (the peer does not take packets in pieces: stock WireGuard)"
                    }
                ),
                _ => format!("peer {peer}: its packets go whole again"),
            };
            crate::info!(name, "path MTU: {line}");
        }
    }

    /// Forgets the target setting the MTU failed for, so it is tried again
    /// (the interface moved: back home it can be set).
    pub fn retry_refused(&self) {
        self.refused.store(0, Ordering::Relaxed);
    }

    fn round(&self) -> std::sync::MutexGuard<'_, Round> {
        self.ceilings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The paths whose lines' MTUs to look up now: the next slice of the
    /// running round, or of a new one made of `routes()` when one is due
    /// (every `CEILING_REFRESH`; at once on the first call). `routes` is
    /// called without this module's lock held.
    pub fn ceiling_slice(
        &self,
        now: Instant,
        routes: impl FnOnce() -> Vec<PathRoute>,
    ) -> Vec<PathRoute> {
        if self.round().starts(now) {
            let all = routes();
            self.round().fill(all);
        }
        self.round().slice()
    }

    /// Consumes every packet of `batch` (read from the TUN) that is longer
    /// than the paths carry, answering its sender through the TUN.
    pub fn answer_oversize(&self, tun: &Tun, batch: &mut PacketBatch) -> std::io::Result<()> {
        let limit = self.limit.load(Ordering::Relaxed) as usize;
        if limit == 0 || (0..batch.len()).all(|i| batch.packet(i).len() <= limit) {
            return Ok(());
        }
        let mut a = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        let a = &mut *a;
        a.start(Instant::now());
        for i in 0..batch.len() {
            let packet = batch.packet(i);
            if packet.len() <= limit {
                continue;
            }
            if a.tokens >= 1.0 && !a.batch.is_full() {
                let mut written = false;
                a.batch
                    .push_with(HEADROOM, SocketAddr::from(([0, 0, 0, 0], 0)), |out| {
                        let n = icmp::packet_too_big(packet, limit, out).unwrap_or(0);
                        written = n > 0;
                        n
                    });
                if written {
                    a.tokens -= 1.0;
                    a.sent = a.sent.saturating_add(1);
                }
            } else {
                a.suppressed = a.suppressed.saturating_add(1);
            }
            batch.consume(i);
        }
        if !a.batch.is_empty() {
            tun.write_batch(&a.batch)?;
        }
        Ok(())
    }
}

/// A path MTU target as the TUN MTU braid can carry: capped before the
/// cast, so a target above u32::MAX becomes MAX_MTU rather than whatever
/// its low 32 bits say.
fn capped_mtu(target: usize) -> u32 {
    target.min(MAX_MTU as usize) as u32
}

/// One path's discovery as `braid mtu` shows it (`None` while not running).
pub fn snapshot(p: &braid_core::pmtud::Pmtud) -> Option<crate::uapi::PmtuSnapshot> {
    if p.state() == braid_core::pmtud::PmtuState::Disabled {
        return None;
    }
    let (fits, too_big) = p.bounds();
    Some(crate::uapi::PmtuSnapshot {
        state: p.state().name().to_string(),
        mtu: p.plpmtu(),
        max: p.max(),
        fits,
        too_big,
        probing: p.probing(),
        probes_sent: p.counters.probes_sent,
        probes_lost: p.counters.probes_lost,
        black_holes: p.counters.black_holes,
    })
}

/// A public key as config files write it (it is no secret).
fn key_text(key: &[u8; 32]) -> String {
    crate::keys::PublicKey::from_bytes(*key).to_base64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_targets_are_capped_before_the_cast() {
        assert_eq!(capped_mtu(1420), 1420);
        assert_eq!(capped_mtu(MAX_MTU as usize + 1), MAX_MTU);
        // Its low 32 bits say 100: truncated, the tunnel MTU would be 100.
        assert_eq!(capped_mtu((1 << 32) + 100), MAX_MTU);
        assert_eq!(capped_mtu(usize::MAX), MAX_MTU);
    }
}
