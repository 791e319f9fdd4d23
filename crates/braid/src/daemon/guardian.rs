//! The root guardian of a daemon that dropped its privileges: a small
//! process forked before the drop (and before braid starts any thread, see
//! [`crate::threads`]) that holds
//! no socket, no TUN and no key, and only waits on a socket pair for the
//! steps of the way down that need root:
//!
//! - `PreDown` hooks, on the daemon's request, before the TUN goes;
//! - `PostDown` hooks once the daemon is gone (its end of the pair closed);
//! - removing the UAPI socket from the root-owned `/var/run/wireguard`.
//!
//! It ignores stop signals (a Ctrl-C or a service manager's SIGTERM to the
//! whole group must not cut the teardown short) and exits as soon as the
//! daemon has, whatever way the daemon ended.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use super::hooks::run_hooks;

/// Messages from the daemon, one byte each.
const SOCKET_CREATED: u8 = b'S';
const UP: u8 = b'U';
const PRE_DOWN: u8 = b'D';
const PRE_DOWN_DONE: u8 = b'K';

/// The daemon's end of the link to its guardian. Dropping it (or the
/// daemon's death) starts the guardian's final clean-up.
pub struct Guardian {
    link: UnixStream,
}

/// What the guardian needs to know, copied into it at the fork.
pub struct Duties {
    pub name: String,
    pub socket: PathBuf,
    pub pre_down: Vec<String>,
    pub post_down: Vec<String>,
}

impl Guardian {
    /// Forks the guardian. Must be called before braid starts any thread
    /// (checked), so the child may allocate and run commands.
    pub fn start(duties: Duties) -> io::Result<Guardian> {
        if !crate::threads::none_started() {
            return Err(crate::threads::started_error("the privilege guardian"));
        }
        let (daemon_end, guardian_end) = UnixStream::pair()?;
        // SAFETY: no thread of braid's exists (checked above; a user-mode
        // emulator's own thread runs none of braid's code), so the child
        // may do anything the parent could.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(daemon_end);
            guard(guardian_end, &duties);
        }
        drop(guardian_end);
        Ok(Guardian { link: daemon_end })
    }

    /// The UAPI socket now exists and is ours to remove at the end.
    pub fn socket_created(&mut self) -> io::Result<()> {
        self.link.write_all(&[SOCKET_CREATED])
    }

    /// Set-up is complete: `PostDown` runs at the end.
    pub fn up(&mut self) -> io::Result<()> {
        self.link.write_all(&[UP])
    }

    /// Runs the `PreDown` hooks as root and waits until they are done.
    pub fn pre_down(&mut self) -> io::Result<()> {
        self.link.write_all(&[PRE_DOWN])?;
        let mut reply = [0u8];
        self.link.read_exact(&mut reply)?;
        if reply[0] != PRE_DOWN_DONE {
            return Err(io::Error::other("guardian: unexpected reply to PreDown"));
        }
        Ok(())
    }
}

/// The guardian's whole life; never returns.
fn guard(mut link: UnixStream, duties: &Duties) -> ! {
    close_inherited_fds(link.as_raw_fd());
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: setting a signal to be ignored.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let name = &duties.name;
    let mut socket_id = None;
    let mut up = false;
    let mut byte = [0u8];
    loop {
        match link.read(&mut byte) {
            Ok(1) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            _ => break,
        }
        match byte[0] {
            SOCKET_CREATED => socket_id = file_id(&duties.socket),
            UP => up = true,
            PRE_DOWN => {
                if let Err(e) = run_hooks(name, &duties.pre_down) {
                    crate::error!(name, "{e}");
                }
                let _ = link.write_all(&[PRE_DOWN_DONE]);
            }
            _ => {}
        }
    }
    if up {
        if let Err(e) = run_hooks(name, &duties.post_down) {
            crate::error!(name, "{e}");
        }
    }
    // Only the socket this daemon created: a new daemon may already own the name.
    if socket_id.is_some() && file_id(&duties.socket) == socket_id {
        let _ = std::fs::remove_file(&duties.socket);
    }
    // SAFETY: _exit skips the parent's atexit handlers and buffers, which
    // belong to the daemon.
    unsafe { libc::_exit(0) }
}

/// (device, inode) of a file, to tell "our" socket from a later one.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Closes everything inherited but stdio and `keep`: holding the TUN open
/// would keep the interface alive after the daemon. `close_range` (Linux
/// 5.9) does it in one call; where it fails (an older kernel, a seccomp
/// filter) each descriptor under the limit is closed one by one.
fn close_inherited_fds(keep: libc::c_int) {
    let ranges = [(3, keep - 1), (keep + 1, libc::c_int::MAX)];
    for (first, last) in ranges {
        if first > last {
            continue;
        }
        // SAFETY: close_range on descriptors this process owns alone.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first as u32, last as u32, 0u32) };
        if rc != 0 {
            // SAFETY: sysconf has no preconditions.
            let limit = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
            let limit = libc::c_int::try_from(limit).unwrap_or(1 << 20).max(1024);
            for fd in first..=last.min(limit) {
                // SAFETY: closing a descriptor this process owns alone (or
                // none: EBADF is ignored).
                unsafe { libc::close(fd) };
            }
        }
    }
}
