//! Waking the event loop from another thread.
//!
//! The event loop sleeps in [`crate::poll::wait`]; a control request (status,
//! shutdown, a config change) arriving on another thread needs a descriptor
//! to make that sleep end. An eventfd is the cheapest such descriptor: one
//! counter, no pipe buffer, and any number of wakes coalesce into one.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// An eventfd-backed wake-up signal; see the module documentation.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub fn new() -> io::Result<Waker> {
        // SAFETY: eventfd takes no pointers; the flags are valid constants.
        let fd =
            crate::sys::cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker { fd })
    }

    /// Makes the descriptor readable until the next [`drain`](Self::drain).
    pub fn wake(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live local u64, as eventfd requires.
        let r = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        match crate::sys::cvt_size(r) {
            Ok(_) => Ok(()),
            // The counter is saturated: it is readable already, which is all
            // a wake means.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Resets the signal; returns whether any wake was pending.
    pub fn drain(&self) -> io::Result<bool> {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live local u64, as eventfd requires.
        let r = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut v as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        match crate::sys::cvt_size(r) {
            Ok(_) => Ok(v != 0),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl AsRawFd for Waker {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::poll::{wait, Interest};
    use std::time::Duration;

    #[test]
    fn wake_then_drain() {
        let w = Waker::new().unwrap();
        let fds = [(w.as_raw_fd(), Interest::READABLE)];
        assert!(wait(&fds, Some(Duration::ZERO)).unwrap().is_timeout());
        assert!(!w.drain().unwrap());
        w.wake().unwrap();
        w.wake().unwrap();
        let r = wait(&fds, Some(Duration::from_secs(5))).unwrap();
        assert!(r.is_readable(0));
        assert!(w.drain().unwrap());
        assert!(!w.drain().unwrap());
        assert!(wait(&fds, Some(Duration::ZERO)).unwrap().is_timeout());
    }

    #[test]
    fn wake_from_other_thread() {
        let w = std::sync::Arc::new(Waker::new().unwrap());
        let w2 = w.clone();
        let t = std::thread::spawn(move || w2.wake().unwrap());
        let fds = [(w.as_raw_fd(), Interest::READABLE)];
        let r = wait(&fds, Some(Duration::from_secs(10))).unwrap();
        assert!(r.is_readable(0));
        assert!(w.drain().unwrap());
        t.join().unwrap();
    }
}
