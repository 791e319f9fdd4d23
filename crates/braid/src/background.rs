//! Becoming a daemon the way `wg-quick` users expect: `braid up` returns
//! only once the interface is up (or prints why it is not), with the daemon
//! left running in the background and its output in [`log_path`]; signals
//! ask the event loop to stop.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::sd_notify::Notifier;

/// Where a daemon started without `--foreground` writes its output.
pub fn log_path(name: &str) -> String {
    format!("/var/log/braid/{name}.log")
}

/// Where the forked daemon reports "ready" or the error that stopped it;
/// for a foreground daemon under a service manager, also its notification
/// socket (`$NOTIFY_SOCKET`, see [`crate::sd_notify`]).
pub struct ReadyPipe {
    pipe: Option<File>,
    notifier: Option<Notifier>,
}

impl ReadyPipe {
    /// For a foreground daemon: readiness is printed, not piped, and told
    /// to the service manager if one is listening. Call before any thread
    /// starts (it takes `$NOTIFY_SOCKET` out of the environment).
    pub fn foreground() -> Self {
        let notifier = Notifier::from_env().unwrap_or_else(|e| {
            eprintln!("braid: warning: no readiness notification: {e}");
            None
        });
        ReadyPipe {
            pipe: None,
            notifier,
        }
    }

    pub fn ready(&mut self, message: &str) {
        match self.pipe.take() {
            Some(mut f) => {
                let _ = writeln!(f, "OK {message}");
            }
            // The journal has the daemon's own "up" line already.
            None if crate::log::to_journal() => {}
            None => eprintln!("{message}"),
        }
        if let Some(n) = &self.notifier {
            if let Err(e) = n.ready(message.trim().trim_start_matches("braid: ")) {
                eprintln!("braid: warning: cannot notify the service manager: {e}");
            }
        }
    }

    pub fn failed(&mut self, error: &str) {
        if let Some(mut f) = self.pipe.take() {
            let _ = writeln!(f, "ERR {error}");
        }
        if let Some(n) = &self.notifier {
            let _ = n.status(&format!("failed: {error}"));
        }
    }

    /// The service manager's socket, for what the daemon tells it later
    /// (reloads, the stop).
    pub fn take_notifier(&mut self) -> Option<Notifier> {
        self.notifier.take()
    }
}

/// Forks. The parent waits for the child's readiness report and exits with
/// its outcome; the child returns its end of the pipe and carries on
/// detached, with stdio on `log_path`. Must run before braid starts any
/// thread (checked, see [`crate::threads`]).
pub fn daemonize(log_path: &str) -> std::io::Result<ReadyPipe> {
    if !crate::threads::none_started() {
        return Err(crate::threads::started_error("the daemon"));
    }
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: no thread of braid's exists yet (checked above), so the child
    // may carry on as the parent would.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid > 0 {
        // SAFETY: both fds came from pipe2 and are owned by us alone.
        let (mut reader, writer) =
            unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        drop(writer);
        let mut report = String::new();
        let _ = reader.read_to_string(&mut report);
        match report.split_once(' ') {
            Some(("OK", msg)) => {
                eprint!("{msg}");
                std::process::exit(0);
            }
            Some(("ERR", err)) => {
                eprint!("braid: {err}");
                std::process::exit(1);
            }
            _ => {
                eprintln!("braid: the daemon exited before the interface came up (see {log_path})");
                std::process::exit(1);
            }
        }
    }
    // SAFETY: both fds came from pipe2; the child owns its copies.
    let (reader, writer) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    drop(reader);
    // SAFETY: setsid in a fresh child that is not a group leader.
    unsafe { libc::setsid() };
    redirect_stdio(log_path)?;
    Ok(ReadyPipe {
        pipe: Some(writer),
        notifier: None,
    })
}

fn redirect_stdio(log_path: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = std::path::Path::new(log_path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log_path)?;
    let null = File::open("/dev/null")?;
    // SAFETY: dup2 onto the standard descriptors with fds we own.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(log.as_raw_fd(), 1);
        libc::dup2(log.as_raw_fd(), 2);
    }
    Ok(())
}

static STOP: AtomicBool = AtomicBool::new(false);
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: write(2) is async-signal-safe; the eventfd outlives the loop.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

/// SIGTERM, SIGINT and SIGHUP stop the daemon; the event loop is woken
/// through its eventfd.
pub fn install_stop_signals(wake_fd: RawFd) {
    WAKE_FD.store(wake_fd, Ordering::SeqCst);
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: installing a handler that only touches atomics and write(2).
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    // SAFETY: ignoring SIGPIPE so a vanished UAPI client is an error, not death.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
