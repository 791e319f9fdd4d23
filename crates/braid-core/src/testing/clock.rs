//! The simulator's clocks: one arbitrary monotonic origin and one fixed
//! wall time, the only clock readings in braid-core.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

/// Unix time at [`epoch`] (15 January 2027): the wall clock every
/// simulated device starts with, so handshake timestamps are the same on
/// every run.
pub const WALL_SECS: u64 = 1_800_000_000;

/// The origin of virtual time. Only differences from it matter; it is
/// read once per process and is the same for every device and net.
pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // The one clock read of the core, for tests: an origin, never a time.
    #[allow(clippy::disallowed_methods)]
    *EPOCH.get_or_init(Instant::now)
}

/// The wall clock at [`epoch`]: [`WALL_SECS`] after the Unix epoch.
pub fn wall() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(WALL_SECS)
}
