//! Readiness for a service manager, systemd's `sd_notify` protocol
//! (sd_notify(3)): `KEY=VALUE` lines in one datagram to the Unix socket
//! named by `$NOTIFY_SOCKET` (a path, or `@name` for the abstract
//! namespace). `braid@.service` is `Type=notify`: systemd counts the
//! interface as started when the daemon says `READY=1`, which it says once
//! the interface is up, and a reload as done when it says `READY=1` again.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The variable that names the socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// The service manager's notification socket.
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
}

impl Notifier {
    /// The socket `$NOTIFY_SOCKET` names, if it is set. The variable is
    /// removed, so the commands the daemon runs (hooks, `ip`) and its
    /// guardian cannot speak for it. Call before any thread starts (it
    /// changes the environment).
    pub fn from_env() -> io::Result<Option<Notifier>> {
        let Some(value) = std::env::var_os(NOTIFY_SOCKET) else {
            return Ok(None);
        };
        std::env::remove_var(NOTIFY_SOCKET);
        let value = value.to_str().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "$NOTIFY_SOCKET is not UTF-8")
        })?;
        Notifier::to(value).map(Some)
    }

    /// A notifier for the socket named like `$NOTIFY_SOCKET`'s value.
    pub fn to(name: &str) -> io::Result<Notifier> {
        let to = if let Some(abstract_name) = name.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name.as_bytes())?
        } else if name.starts_with('/') {
            SocketAddr::from_pathname(name)?
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("$NOTIFY_SOCKET {name:?} is neither a path nor @abstract"),
            ));
        };
        Ok(Notifier {
            socket: UnixDatagram::unbound()?,
            to,
        })
    }

    /// Sends one notification: `KEY=VALUE` lines.
    pub fn notify(&self, state: &str) -> io::Result<()> {
        self.socket
            .send_to_addr(state.as_bytes(), &self.to)
            .map(|_| ())
    }

    /// The interface is up (or a reload is done); `status` is what
    /// `systemctl status` shows.
    pub fn ready(&self, status: &str) -> io::Result<()> {
        self.notify(&format!(
            "READY=1\nSTATUS={}\nMAINPID={}",
            one_line(status),
            std::process::id()
        ))
    }

    /// A reload has started; `READY=1` ends it.
    pub fn reloading(&self, now_monotonic_usec: u64) -> io::Result<()> {
        self.notify(&format!(
            "RELOADING=1\nMONOTONIC_USEC={now_monotonic_usec}\nSTATUS=reloading"
        ))
    }

    /// The daemon is on its way down.
    pub fn stopping(&self) -> io::Result<()> {
        self.notify("STOPPING=1\nSTATUS=stopping")
    }

    /// What `systemctl status` shows, nothing else.
    pub fn status(&self, status: &str) -> io::Result<()> {
        self.notify(&format!("STATUS={}", one_line(status)))
    }
}

/// `CLOCK_MONOTONIC` in microseconds, as `MONOTONIC_USEC=` wants it.
pub fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000)
        .saturating_add(ts.tv_nsec as u64 / 1000)
}

/// A status is one line of the notification.
fn one_line(s: &str) -> String {
    s.trim().replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver(name: &str) -> (UnixDatagram, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("braid-notify-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        (UnixDatagram::bind(&path).unwrap(), path)
    }

    fn recv(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn notifications_reach_a_path_socket() {
        let (rx, path) = receiver("path");
        let n = Notifier::to(path.to_str().unwrap()).unwrap();
        n.ready("interface wg0 is up\n(port 51820)").unwrap();
        let got = recv(&rx);
        assert_eq!(
            got,
            format!(
                "READY=1\nSTATUS=interface wg0 is up (port 51820)\nMAINPID={}",
                std::process::id()
            )
        );
        n.reloading(1234).unwrap();
        assert_eq!(
            recv(&rx),
            "RELOADING=1\nMONOTONIC_USEC=1234\nSTATUS=reloading"
        );
        n.stopping().unwrap();
        assert_eq!(recv(&rx), "STOPPING=1\nSTATUS=stopping");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn notifications_reach_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("braid-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        let n = Notifier::to(&format!("@{name}")).unwrap();
        n.status("hello").unwrap();
        assert_eq!(recv(&rx), "STATUS=hello");
    }

    #[test]
    fn a_bad_socket_name_is_an_error_naming_it() {
        let e = Notifier::to("relative/path").err().unwrap();
        assert!(e.to_string().contains("relative/path"), "{e}");
        assert!(monotonic_usec() > 0);
    }
}
