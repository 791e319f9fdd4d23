//! Whether braid has started a thread yet, for the two forks whose child
//! runs more than async-signal-safe code (it allocates, writes to stderr,
//! runs commands): `braid up` detaching ([`crate::background::daemonize`])
//! and the privilege guardian ([`crate::daemon::guardian`]). Such a fork is
//! sound only while no other thread of braid's exists, one that could hold
//! a lock (the allocator's, stderr's) the child would then wait on forever.
//!
//! On a native host a program starts with one thread, so "one thread now"
//! answers it. Under a user-mode emulator the process has one more from
//! before `main`, and a forked child gets it back at once: qemu-user's RCU
//! thread, which is how braid's aarch64 build is tested. That thread runs
//! only the emulator's code, never braid's, and qemu keeps its own state
//! consistent across fork. So `main` notes how many threads exist before
//! braid starts any ([`note_start`]), and the forks require that number: on
//! a native host exactly one, as before.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Threads the process had when `main` began (one unless [`note_start`]
/// saw more).
static AT_START: AtomicUsize = AtomicUsize::new(1);

/// The process's threads now, from `/proc/self/status` (None: unreadable).
pub fn count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

/// Notes the threads that exist before braid starts one; the first thing
/// `main` does. Without it, one thread is what [`none_started`] expects.
pub fn note_start() {
    if let Some(n) = count() {
        AT_START.store(n, Ordering::Relaxed);
    }
}

/// How many threads the process had when `main` began.
pub fn at_start() -> usize {
    AT_START.load(Ordering::Relaxed)
}

/// True while braid has started no thread: the count is what it was when
/// `main` began. Unreadable counts as false.
pub fn none_started() -> bool {
    count() == Some(at_start())
}

/// The error of a fork that needs [`none_started`], naming `what` forks.
pub fn started_error(what: &str) -> std::io::Error {
    std::io::Error::other(format!(
        "internal error: {what} must be forked before braid starts a thread \
         (threads now: {}, when braid started: {})",
        count().map_or("unknown".to_string(), |n| n.to_string()),
        at_start()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the copy of this test binary that [`a_started_thread_forbids_the_fork`] runs.
    const ALONE: &str = "BRAID_THREADS_TEST_ALONE";

    /// The other tests of this binary start and end threads of their own
    /// at any moment, so the check runs in a copy of the binary that runs
    /// only it (`--test-threads=1`).
    #[test]
    fn a_started_thread_forbids_the_fork() {
        if std::env::var_os(ALONE).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "threads::tests::a_started_thread_forbids_the_fork",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env(ALONE, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            assert!(text.contains("1 passed"), "{text}");
            return;
        }
        note_start();
        assert!(none_started(), "nothing started yet");
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            started_tx.send(()).unwrap();
            let _ = stop_rx.recv();
        });
        started_rx.recv().unwrap();
        assert!(!none_started(), "a thread of ours is running");
        let error = started_error("the test's child").to_string();
        assert!(
            error.contains(&format!("when braid started: {}", at_start())),
            "{error}"
        );
        stop_tx.send(()).unwrap();
        t.join().unwrap();
        // Its end is seen within a moment (the kernel reaps it after join).
        let gone = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            none_started()
        });
        assert!(gone, "the joined thread is still counted");
    }
}
