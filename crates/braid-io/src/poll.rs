//! Readiness waiting for the daemon's event loop.
//!
//! The loop only ever watches a few descriptors (TUN, UDP socket(s), the
//! waker), so plain `poll(2)` is enough and needs no registration state; the
//! results live in a fixed-size array so waiting never allocates.

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Most descriptors one [`wait`] call accepts.
pub const MAX_FDS: usize = 16;

/// What to wait for on one descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest {
    events: libc::c_short,
}

impl Interest {
    pub const READABLE: Interest = Interest {
        events: libc::POLLIN,
    };
    pub const WRITABLE: Interest = Interest {
        events: libc::POLLOUT,
    };
    pub const BOTH: Interest = Interest {
        events: libc::POLLIN | libc::POLLOUT,
    };
}

/// The outcome of [`wait`]: per descriptor, in the order they were passed.
///
/// An error or hang-up condition reports the descriptor as ready for
/// whatever was asked, so the caller's next read/write surfaces the error
/// instead of the loop spinning on it.
#[derive(Clone, Copy, Debug)]
pub struct Readiness {
    revents: [libc::c_short; MAX_FDS],
    n: usize,
}

impl Readiness {
    /// True when `index` (position in the `fds` slice) can be read.
    pub fn is_readable(&self, index: usize) -> bool {
        self.get(index) & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0
    }

    /// True when `index` (position in the `fds` slice) can be written.
    pub fn is_writable(&self, index: usize) -> bool {
        self.get(index) & (libc::POLLOUT | libc::POLLERR | libc::POLLHUP) != 0
    }

    /// True when nothing became ready before the timeout.
    pub fn is_timeout(&self) -> bool {
        self.revents[..self.n].iter().all(|&r| r == 0)
    }

    fn get(&self, index: usize) -> libc::c_short {
        if index < self.n {
            self.revents[index]
        } else {
            0
        }
    }
}

/// Waits until one of `fds` is ready or `timeout` passes (`None`: forever).
///
/// Interrupted waits (`EINTR`) are resumed with the remaining time. A closed
/// descriptor (`POLLNVAL`) is an `EBADF` error rather than a readiness, since
/// waiting on it again would return immediately forever.
pub fn wait(fds: &[(RawFd, Interest)], timeout: Option<Duration>) -> io::Result<Readiness> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("poll: {} descriptors, at most {MAX_FDS}", fds.len()),
        ));
    }
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_FDS];
    for (p, &(fd, interest)) in pfds.iter_mut().zip(fds) {
        p.fd = fd;
        p.events = interest.events;
    }
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        let ms = match (timeout, deadline) {
            (None, _) => -1,
            // A timeout too large to represent: effectively forever.
            (Some(_), None) => -1,
            (Some(_), Some(d)) => to_poll_ms(d.saturating_duration_since(Instant::now())),
        };
        // SAFETY: `pfds` is a valid, writable array of `pollfd` and we pass
        // at most its length (`fds.len() <= MAX_FDS`).
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut out = Readiness {
            revents: [0; MAX_FDS],
            n: fds.len(),
        };
        for (o, p) in out.revents.iter_mut().zip(&pfds[..fds.len()]) {
            if p.revents & libc::POLLNVAL != 0 {
                return Err(io::Error::from_raw_os_error(libc::EBADF));
            }
            *o = p.revents;
        }
        return Ok(out);
    }
}

/// Milliseconds for poll(2), rounded up so a sub-millisecond timeout does
/// not turn into a busy loop of zero-timeout polls.
fn to_poll_ms(d: Duration) -> libc::c_int {
    let ms = d.as_nanos().div_ceil(1_000_000);
    ms.min(libc::c_int::MAX as u128) as libc::c_int
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up() {
        assert_eq!(to_poll_ms(Duration::ZERO), 0);
        assert_eq!(to_poll_ms(Duration::from_micros(1)), 1);
        assert_eq!(to_poll_ms(Duration::from_millis(7)), 7);
        assert_eq!(to_poll_ms(Duration::from_secs(u64::MAX)), libc::c_int::MAX);
    }

    #[test]
    fn too_many_fds() {
        let fds = [(0, Interest::READABLE); MAX_FDS + 1];
        assert!(wait(&fds, Some(Duration::ZERO)).is_err());
    }
}
