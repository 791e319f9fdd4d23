//! Scheduling classes: the benches' real-time threads, and the daemon's
//! opt-in real-time data plane (`RealtimePriority =`).
//!
//! The data plane's threads are put at `SCHED_RR` with the kernel's
//! reset-on-fork flag, so what they start (`ip`, hooks, other threads)
//! runs in the normal class again. Every data-plane thread sets itself,
//! after the daemon dropped its privileges: [`allow_realtime`] raises
//! `RLIMIT_RTPRIO` while it still may (an unprivileged thread may choose a
//! real-time priority up to that limit); where it may not, the daemon
//! keeps CAP_SYS_NICE instead.

/// Linux's flag for `sched_setscheduler`'s policy: children (processes and
/// threads) start in the normal class. Not in the `libc` crate for Linux.
const SCHED_RESET_ON_FORK: libc::c_int = 0x4000_0000;

/// The highest priority `SCHED_RR` and `SCHED_FIFO` take on Linux.
pub const MAX_REALTIME_PRIORITY: u8 = 99;

/// Puts the calling thread in the real-time class `policy` (`SCHED_FIFO`
/// or `SCHED_RR`) at `priority`; threads and processes it starts later
/// inherit it. Through `pthread_setschedparam`, not `sched_setscheduler`:
/// on Linux both act on the one thread, but musl's `sched_setscheduler`
/// always fails with ENOSYS (POSIX means it for the whole process).
pub fn realtime_this_thread(policy: libc::c_int, priority: libc::c_int) -> std::io::Result<()> {
    // SAFETY: all-zero sched_param is valid (musl's has more fields than
    // the priority, so no struct literal).
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = priority;
    // SAFETY: this thread's own handle and a live sched_param.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), policy, &param) };
    match rc {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

/// Puts the calling thread at `SCHED_RR` `priority`, with nothing it
/// starts inheriting that. The raw system call (thread id 0 is the caller),
/// because the C libraries' wrappers differ in what they let through.
pub fn realtime_data_plane_thread(priority: u8) -> std::io::Result<()> {
    // SAFETY: as in `realtime_this_thread`.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = libc::c_int::from(priority);
    // SAFETY: thread 0 is the caller; the sched_param lives across the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_RR | SCHED_RESET_ON_FORK,
            &param as *const libc::sched_param,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Raises this process's `RLIMIT_RTPRIO` to at least `priority` (needs
/// CAP_SYS_RESOURCE when the hard limit is below it), so its threads may
/// enter the real-time class later without CAP_SYS_NICE.
pub fn allow_realtime(priority: u8) -> std::io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid resource and a live rlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let wanted = libc::rlim_t::from(priority);
    if limit.rlim_cur >= wanted {
        return Ok(());
    }
    limit.rlim_cur = wanted;
    limit.rlim_max = limit.rlim_max.max(wanted);
    // SAFETY: a valid resource and a live rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_RTPRIO, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's scheduling policy (with the reset-on-fork flag
/// when it is set) and priority, as the kernel reports them. Raw system
/// calls: musl's wrappers fail with ENOSYS (POSIX means the process).
pub fn this_thread_policy() -> (libc::c_int, libc::c_int) {
    // SAFETY: thread 0 is the caller; no pointer.
    let policy = unsafe { libc::syscall(libc::SYS_sched_getscheduler, 0) } as libc::c_int;
    // SAFETY: as in `realtime_this_thread`.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    // SAFETY: thread 0 is the caller; the sched_param lives across the call.
    unsafe {
        libc::syscall(
            libc::SYS_sched_getparam,
            0,
            &mut param as *mut libc::sched_param,
        )
    };
    (policy, param.sched_priority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_plane_thread_is_round_robin_and_its_children_are_not() {
        let outcome = std::thread::spawn(|| {
            // Raising the limit needs CAP_SYS_RESOURCE, which containers
            // often lack; CAP_SYS_NICE alone is enough to enter.
            let _ = allow_realtime(5);
            if realtime_data_plane_thread(5).is_err() {
                // Neither root nor CAP_SYS_NICE: nothing to check here.
                return None;
            }
            let own = this_thread_policy();
            let child = std::thread::spawn(this_thread_policy).join().unwrap();
            Some((own, child))
        })
        .join()
        .unwrap();
        if let Some((own, child)) = outcome {
            assert_eq!(own.0 & !SCHED_RESET_ON_FORK, libc::SCHED_RR);
            assert_eq!(own.1, 5);
            assert_eq!(child, (libc::SCHED_OTHER, 0));
        }
    }
}
