//! Per-source rate limit on handshake messages, as WireGuard's responder
//! applies under load (kernel `ratelimiter.c`, wireguard-go `ratelimiter`).
//!
//! A message reaches the limiter only once its mac2 proved that the sender
//! receives at its source address, so the table holds real sources, not
//! spoofed ones. Each source is a token bucket: `HANDSHAKES_PER_SOURCE_PER_SECOND`
//! messages a second on average, `HANDSHAKE_BURST_PER_SOURCE` at once. An
//! IPv6 source is its /64, since one host can pick any address of its
//! prefix. The table is bounded: an idle source is collected after
//! `SOURCE_IDLE_EXPIRY`, and while `MAX_RATELIMITED_SOURCES` are tracked a
//! new source is refused (until collection frees room) rather than letting
//! the table grow.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Average handshake messages a second one source may have processed.
pub const HANDSHAKES_PER_SOURCE_PER_SECOND: u64 = 20;
/// Handshake messages one source may send back to back.
pub const HANDSHAKE_BURST_PER_SOURCE: u64 = 5;
/// Sources tracked at once; beyond this a new source is refused. The
/// Linux module's largest table (`max_entries`, 8 × 8192 buckets on a
/// host with more than 1 GiB): 10,000 peers of a server that restarted
/// come back with their cookies within about two seconds, and an idle
/// source is collected only after `SOURCE_IDLE_EXPIRY`; 8192 refused over
/// a thousand of them in `braid bench peers` (each then waited 5 s for its
/// next try). At most a few MB, and only sources that proved their
/// address with a mac2.
pub const MAX_RATELIMITED_SOURCES: usize = 65_536;
/// A source unseen this long is forgotten (its bucket is full again by then).
pub const SOURCE_IDLE_EXPIRY: Duration = Duration::from_secs(1);

/// Tokens are nanoseconds: one message costs this many.
const MESSAGE_COST_NS: u64 = 1_000_000_000 / HANDSHAKES_PER_SOURCE_PER_SECOND;
const BUCKET_MAX_NS: u64 = MESSAGE_COST_NS * HANDSHAKE_BURST_PER_SOURCE;

/// A source as the limiter sees it: an IPv4 address or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    V4([u8; 4]),
    V6Prefix([u8; 8]),
}

impl Source {
    fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4.octets()),
                None => {
                    let o = v6.octets();
                    Source::V6Prefix(o[..8].try_into().expect("8 bytes"))
                }
            },
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    last: Instant,
    tokens_ns: u64,
}

/// What `allow` decided, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// The source spent its budget.
    RateLimited,
    /// The table is full of other sources.
    TableFull,
}

#[derive(Default)]
pub struct SourceRateLimiter {
    buckets: HashMap<Source, Bucket>,
    last_collection: Option<Instant>,
}

impl SourceRateLimiter {
    pub fn new() -> SourceRateLimiter {
        SourceRateLimiter::default()
    }

    /// Sources tracked now (never more than `MAX_RATELIMITED_SOURCES`).
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Takes one message's worth from `ip`'s bucket, if it has it.
    pub fn allow(&mut self, now: Instant, ip: IpAddr) -> Decision {
        self.collect_idle(now);
        let source = Source::of(ip);
        if let Some(b) = self.buckets.get_mut(&source) {
            // In u128 any idle time fits; the minimum brings it back to u64.
            let earned = now.saturating_duration_since(b.last).as_nanos();
            b.tokens_ns = (b.tokens_ns as u128 + earned).min(BUCKET_MAX_NS as u128) as u64;
            // A `now` earlier than the last one earns nothing, and must not
            // move `last` back either: the same interval would pay twice.
            b.last = b.last.max(now);
            if b.tokens_ns < MESSAGE_COST_NS {
                return Decision::RateLimited;
            }
            b.tokens_ns -= MESSAGE_COST_NS;
            return Decision::Allowed;
        }
        if self.buckets.len() >= MAX_RATELIMITED_SOURCES {
            return Decision::TableFull;
        }
        self.buckets.insert(
            source,
            Bucket {
                last: now,
                tokens_ns: BUCKET_MAX_NS - MESSAGE_COST_NS,
            },
        );
        Decision::Allowed
    }

    /// At most once per `SOURCE_IDLE_EXPIRY`, forgets idle sources: they
    /// would have a full bucket anyway, so forgetting them changes nothing.
    fn collect_idle(&mut self, now: Instant) {
        let due = self
            .last_collection
            .is_none_or(|t| now.saturating_duration_since(t) >= SOURCE_IDLE_EXPIRY);
        if !due {
            return;
        }
        self.last_collection = Some(self.last_collection.map_or(now, |t| t.max(now)));
        self.buckets
            .retain(|_, b| now.saturating_duration_since(b.last) < SOURCE_IDLE_EXPIRY);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // an arbitrary origin for virtual time
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + i))
    }

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let mut rl = SourceRateLimiter::new();
        let t0 = Instant::now();
        let ip = v4(1);
        let burst = (0..100)
            .filter(|_| rl.allow(t0, ip) == Decision::Allowed)
            .count();
        assert_eq!(burst as u64, HANDSHAKE_BURST_PER_SOURCE);
        // Ten seconds of one message a millisecond: the average rate holds.
        let mut allowed = 0u64;
        for ms in 1..=10_000 {
            let now = t0 + Duration::from_millis(ms);
            if rl.allow(now, ip) == Decision::Allowed {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 10 * HANDSHAKES_PER_SOURCE_PER_SECOND);
        // Another source is not affected.
        assert_eq!(
            rl.allow(t0 + Duration::from_secs(10), v4(2)),
            Decision::Allowed
        );
    }

    #[test]
    fn ipv6_sources_share_their_slash_64() {
        let mut rl = SourceRateLimiter::new();
        let now = Instant::now();
        let base = u128::from("2001:db8:0:1::".parse::<Ipv6Addr>().unwrap());
        let allowed = (0..100u128)
            .map(|i| IpAddr::V6(Ipv6Addr::from(base + i * 0x1_0000_0001)))
            .filter(|&ip| rl.allow(now, ip) == Decision::Allowed)
            .count();
        assert_eq!(allowed as u64, HANDSHAKE_BURST_PER_SOURCE);
        assert_eq!(rl.len(), 1);
        let other: IpAddr = "2001:db8:0:2::1".parse().unwrap();
        assert_eq!(rl.allow(now, other), Decision::Allowed);
        // An IPv4-mapped address is its IPv4 address.
        let mapped: IpAddr = "::ffff:198.18.0.1".parse().unwrap();
        assert_eq!(rl.allow(now, mapped), Decision::Allowed);
        assert_eq!(rl.allow(now, v4(1)), Decision::Allowed);
        assert_eq!(rl.len(), 3);
    }

    #[test]
    fn the_table_is_bounded_and_collected() {
        let mut rl = SourceRateLimiter::new();
        let t0 = Instant::now();
        let offered = 10 * MAX_RATELIMITED_SOURCES as u32;
        let refused = (0..offered)
            .filter(|&i| rl.allow(t0, v4(i)) == Decision::TableFull)
            .count();
        assert_eq!(rl.len(), MAX_RATELIMITED_SOURCES);
        assert_eq!(refused, offered as usize - MAX_RATELIMITED_SOURCES);
        // Idle sources go after the expiry; new ones get room again.
        let later = t0 + SOURCE_IDLE_EXPIRY;
        assert_eq!(rl.allow(later, v4(offered)), Decision::Allowed);
        assert_eq!(rl.len(), 1);
    }

    #[test]
    fn collection_never_hands_a_busy_source_a_fresh_burst() {
        let mut rl = SourceRateLimiter::new();
        let t0 = Instant::now();
        // A source asking every millisecond for three seconds, across
        // three collections: one burst, then the rate, nothing more.
        let allowed = (0..3000)
            .filter(|&ms| rl.allow(t0 + Duration::from_millis(ms), v4(1)) == Decision::Allowed)
            .count() as u64;
        let earned = (2999 * HANDSHAKES_PER_SOURCE_PER_SECOND) / 1000;
        assert_eq!(allowed, HANDSHAKE_BURST_PER_SOURCE + earned);
        assert_eq!(rl.len(), 1);
    }

    #[test]
    fn time_going_backwards_mints_no_tokens() {
        let mut rl = SourceRateLimiter::new();
        let t = Instant::now() + Duration::from_secs(100);
        let ip = v4(1);
        while rl.allow(t, ip) == Decision::Allowed {}
        // An earlier `now` (another thread's clock reading): nothing.
        assert_eq!(
            rl.allow(t - Duration::from_secs(10), ip),
            Decision::RateLimited
        );
        // Back at the present plus one message's worth: exactly one.
        let later = t + Duration::from_nanos(MESSAGE_COST_NS);
        assert_eq!(rl.allow(later, ip), Decision::Allowed);
        assert_eq!(rl.allow(later, ip), Decision::RateLimited);
        assert_eq!(rl.len(), 1);
    }

    #[test]
    fn centuries_of_idleness_earn_one_burst() {
        let mut rl = SourceRateLimiter::new();
        let t0 = Instant::now();
        let ip = v4(1);
        while rl.allow(t0, ip) == Decision::Allowed {}
        // As if collection had just run, so the bucket itself refills:
        // 2^40 s is more nanoseconds than u64 holds.
        let far = t0 + Duration::from_secs(1 << 40);
        rl.last_collection = Some(far);
        let burst = (0..100)
            .filter(|_| rl.allow(far, ip) == Decision::Allowed)
            .count();
        assert_eq!(burst as u64, HANDSHAKE_BURST_PER_SOURCE);
    }
}
