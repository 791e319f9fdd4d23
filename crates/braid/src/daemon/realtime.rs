//! `RealtimePriority =`: the data plane's threads in the real-time class.
//!
//! The main thread enters it during start-up, before privileges are
//! dropped, so a refusal stops `braid up` before anything changed. The
//! threads started later (the outbound thread, the crypto helpers) enter
//! it themselves, by a raised `RLIMIT_RTPRIO` or, where that cannot be
//! raised, by CAP_SYS_NICE kept through the drop.
//! Nothing inherits it: control and metrics threads, hooks and `ip` run in
//! the normal class (see `braid_io::realtime_data_plane_thread`).

/// Puts the calling (main) thread at `SCHED_RR` `priority` and lets the
/// process's later threads do the same. Returns whether those threads
/// need CAP_SYS_NICE kept through the privilege drop: when RLIMIT_RTPRIO
/// could not be raised (no CAP_SYS_RESOURCE), it is what lets them. The
/// error names the key and what would allow it.
pub fn enter_at_start(priority: u8) -> std::io::Result<bool> {
    let limit_raised = braid_io::allow_realtime(priority).is_ok();
    braid_io::realtime_data_plane_thread(priority).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "RealtimePriority = {priority}: the kernel refused the real-time class \
                 SCHED_RR ({e}); it needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO of at least \
                 {priority} (for braid@.service, a drop-in with RestrictRealtime=no and \
                 LimitRTPRIO={priority})"
            ),
        )
    })?;
    Ok(!limit_raised)
}

/// What a data-plane thread started after [`enter_at_start`] needs to
/// join the real-time class.
#[derive(Clone, Debug)]
pub struct Realtime {
    /// The interface, for the log.
    pub interface: String,
    pub priority: u8,
}

impl Realtime {
    /// Puts the calling thread at the same priority as the main thread; a
    /// refusal (which the start-up check makes unlikely) is logged, and
    /// the thread goes on in the normal class.
    pub fn join(&self, thread: &str) {
        if let Err(e) = braid_io::realtime_data_plane_thread(self.priority) {
            crate::warn!(
                self.interface,
                "RealtimePriority = {}: thread {thread} stays in the normal class: {e}",
                self.priority
            );
        }
    }
}
