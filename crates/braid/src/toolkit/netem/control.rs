//! What steers a running relay besides datagrams: epoll with a nanosecond
//! timeout, signals (through a signalfd, so they arrive as events in the same
//! loop instead of interrupting it) and the `--control` unix socket.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The kernel's `struct __kernel_timespec`, which epoll_pwait2 takes: 64-bit
/// fields on every target, where a libc's `timespec` may have a 32-bit
/// `time_t`.
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// An epoll instance; level-triggered, tokens are caller-chosen u64s.
pub struct Epoll {
    fd: OwnedFd,
    /// epoll_pwait2 (kernel 5.11+) takes a timespec; older kernels get
    /// epoll_wait with milliseconds rounded up.
    has_pwait2: bool,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            // SAFETY: `fd` was just created and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            has_pwait2: true,
        })
    }

    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(drop)
    }

    pub fn del(&self, fd: RawFd) {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL (kernel ≥ 2.6.9).
        // Failure only means the fd was not registered.
        unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits up to `timeout` (`None`: forever); returns how many of
    /// `events` were filled. EINTR counts as zero events.
    pub fn wait(
        &mut self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        let r = if self.has_pwait2 {
            let ts = timeout.map(|t| KernelTimespec {
                tv_sec: t.as_secs().min(i64::MAX as u64) as i64,
                tv_nsec: i64::from(t.subsec_nanos()),
            });
            let tsp = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const KernelTimespec);
            // The system call itself, not libc's wrapper, which glibc has
            // and musl does not.
            // SAFETY: `events` is writable for `max` entries; `tsp` is null
            // or points at a live __kernel_timespec; a null sigmask keeps
            // the mask (its size is then not read).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd.as_raw_fd(),
                    events.as_mut_ptr(),
                    max,
                    tsp,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            } as libc::c_int;
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                self.has_pwait2 = false;
                return self.wait(events, timeout);
            }
            r
        } else {
            let ms = timeout.map_or(-1, |t| {
                t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
            });
            // SAFETY: `events` is writable for `max` entries.
            unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, ms) }
        };
        match cvt(r) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }
}

/// SIGUSR1, SIGUSR2, SIGINT and SIGTERM, delivered through a signalfd.
pub struct Signals {
    fd: OwnedFd,
}

pub const HANDLED_SIGNALS: [libc::c_int; 4] =
    [libc::SIGUSR1, libc::SIGUSR2, libc::SIGINT, libc::SIGTERM];

impl Signals {
    /// Blocks the signals (so they queue for the fd instead of running the
    /// default action) and opens the signalfd. Call before starting threads.
    pub fn new() -> io::Result<Signals> {
        // SAFETY: sigset_t is a plain bit set; sigemptyset initialises it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a live sigset_t; the signal numbers are valid.
        unsafe {
            libc::sigemptyset(&mut set);
            for s in HANDLED_SIGNALS {
                libc::sigaddset(&mut set, s);
            }
        }
        // SAFETY: `set` is initialised; the old mask is not wanted.
        let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        // SAFETY: `set` is initialised; -1 asks for a new descriptor.
        let fd = cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
        Ok(Signals {
            // SAFETY: `fd` was just created and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The next pending signal, if any.
    pub fn read(&self) -> Option<libc::c_int> {
        // SAFETY: signalfd_siginfo is plain data; all-zero is valid.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: `info` is writable for `size` bytes.
        let r = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        (r == size as isize).then_some(info.ssi_signo as libc::c_int)
    }
}

impl AsRawFd for Signals {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A request read from the control socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Cut,
    Restore,
    Stats {
        json: bool,
    },
    /// `rate 10mbit`: cap both directions at this rate from now on.
    Rate(u64),
}

pub fn parse_command(line: &str) -> Result<Command, String> {
    match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["cut"] => Ok(Command::Cut),
        ["restore"] => Ok(Command::Restore),
        ["stats"] => Ok(Command::Stats { json: false }),
        ["stats", "json"] => Ok(Command::Stats { json: true }),
        ["rate", v] => super::args::parse_rate_change("rate", v).map(Command::Rate),
        ["rate", ..] => Err("rate needs one rate, e.g. rate 10mbit".into()),
        _ => Err(format!(
            "unknown command {:?} (cut, restore, rate RATE, stats, stats json)",
            line.trim()
        )),
    }
}

/// Most control connections open at once; more are refused.
pub const MAX_CONNS: usize = 16;
/// A line longer than this closes the connection.
const MAX_LINE: usize = 4096;

struct Conn {
    stream: UnixStream,
    buf: Vec<u8>,
}

/// The `--control` socket and its connections. Each complete line gets a
/// one-line answer.
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    conns: Vec<Option<Conn>>,
}

impl ControlServer {
    /// Binds `path`, replacing a stale socket left by a dead relay but not
    /// one that still answers.
    pub fn bind(path: &Path) -> Result<ControlServer, String> {
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "--control {}: another process is serving this socket",
                    path.display()
                ));
            }
            let _ = std::fs::remove_file(path);
        }
        let listener =
            UnixListener::bind(path).map_err(|e| format!("--control {}: {e}", path.display()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("--control {}: {e}", path.display()))?;
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
            conns: (0..MAX_CONNS).map(|_| None).collect(),
        })
    }

    pub fn listener_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Accepts pending connections; registers each with `register(fd, index)`.
    pub fn accept(&mut self, mut register: impl FnMut(RawFd, usize) -> bool) {
        while let Ok((stream, _)) = self.listener.accept() {
            let Some(i) = self.conns.iter().position(Option::is_none) else {
                let _ = (&stream).write_all(b"error: too many control connections\n");
                continue;
            };
            if stream.set_nonblocking(true).is_err() || !register(stream.as_raw_fd(), i) {
                continue;
            }
            self.conns[i] = Some(Conn {
                stream,
                buf: Vec::with_capacity(256),
            });
        }
    }

    /// Reads what connection `i` sent and answers each complete line with
    /// `answer`. A closed connection is dropped, which also takes its fd out
    /// of the epoll set.
    pub fn readable(
        &mut self,
        i: usize,
        mut answer: impl FnMut(Result<Command, String>) -> String,
    ) {
        let Some(Some(conn)) = self.conns.get_mut(i) else {
            return;
        };
        let mut chunk = [0u8; 1024];
        let mut closed = false;
        // Reads stop once more than a line's worth waits, so a client that
        // never sends a newline cannot grow the buffer beyond
        // MAX_LINE + 1024; the rest stays in the socket, and epoll (level
        // triggered) reports it again once these lines are answered.
        while conn.buf.len() <= MAX_LINE {
            match conn.stream.read(&mut chunk) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => conn.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        // At EOF a last line without a newline still counts.
        if closed && !conn.buf.is_empty() && !conn.buf.ends_with(b"\n") {
            conn.buf.push(b'\n');
        }
        while let Some(nl) = conn.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = conn.buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            if line.trim().is_empty() {
                continue;
            }
            let mut reply = answer(parse_command(&line));
            reply.push('\n');
            // Answers are small; a client that does not read them loses them.
            let _ = conn.stream.set_nonblocking(false);
            let _ = conn
                .stream
                .set_write_timeout(Some(Duration::from_millis(100)));
            let ok = conn.stream.write_all(reply.as_bytes()).is_ok();
            let _ = conn.stream.set_nonblocking(true);
            if !ok {
                closed = true;
                break;
            }
        }
        if conn.buf.len() > MAX_LINE {
            closed = true;
        }
        if closed {
            self.conns[i] = None;
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands() {
        assert_eq!(parse_command("cut\n"), Ok(Command::Cut));
        assert_eq!(parse_command(" restore "), Ok(Command::Restore));
        assert_eq!(parse_command("stats"), Ok(Command::Stats { json: false }));
        assert_eq!(
            parse_command("stats json\n"),
            Ok(Command::Stats { json: true })
        );
        assert!(parse_command("reboot").is_err());
        assert_eq!(
            parse_command("rate 10mbit\n"),
            Ok(Command::Rate(10_000_000))
        );
        assert_eq!(
            parse_command("rate 1gbit"),
            Ok(Command::Rate(1_000_000_000))
        );
        for bad in [
            "rate",
            "rate 0mbit",
            "rate 10",
            "rate ten",
            "rate 1mbit 2mbit",
        ] {
            let e = parse_command(bad).unwrap_err();
            assert!(e.contains("rate"), "{bad}: {e}");
        }
    }

    #[test]
    fn lines_are_answered_and_an_endless_one_is_cut_off() {
        let dir = std::env::temp_dir().join(format!("braid-netem-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.sock");
        let mut server = ControlServer::bind(&path).unwrap();
        let mut client = UnixStream::connect(&path).unwrap();
        let mut registered = Vec::new();
        server.accept(|_, i| {
            registered.push(i);
            true
        });
        assert_eq!(registered, [0]);

        client.write_all(b"cut\nstats json\n").unwrap();
        let mut seen = Vec::new();
        server.readable(0, |cmd| {
            seen.push(cmd);
            "ok".into()
        });
        assert_eq!(seen, [Ok(Command::Cut), Ok(Command::Stats { json: true })]);
        let mut answers = [0u8; 6];
        client.read_exact(&mut answers).unwrap();
        assert_eq!(&answers, b"ok\nok\n");

        // More than a line's worth without a newline (small enough for any
        // socket buffer): no command, and the connection goes.
        client.write_all(&[b'x'; 2 * MAX_LINE]).unwrap();
        seen.clear();
        server.readable(0, |cmd| {
            seen.push(cmd);
            "ok".into()
        });
        assert!(seen.is_empty());
        assert!(server.conns[0].is_none(), "closed");
        drop(server);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
