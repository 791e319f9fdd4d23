//! Ctrl-C and friends: a stop signal only raises a flag, so a long run can
//! leave its loop and let the `Lab` be dropped (which removes everything)
//! instead of dying with namespaces left behind.

use super::process::LabResult;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP_SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_SIGNALLED.store(true, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP only raise a flag from now on (for the whole
/// process: call it from a command's entry point, never from a library or
/// a test).
pub fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(
                sig,
                on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

/// True once a stop signal caught by `catch_stop_signals` arrived.
pub fn stop_signalled() -> bool {
    STOP_SIGNALLED.load(Ordering::SeqCst)
}

/// `Err("interrupted")` once a stop signal arrived.
pub fn check_stop() -> LabResult<()> {
    if stop_signalled() {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

/// Sleeps, but returns `Err("interrupted")` early when a stop signal came.
pub fn sleep_unless_stopped(d: Duration) -> LabResult<()> {
    let end = Instant::now() + d;
    loop {
        check_stop()?;
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}
