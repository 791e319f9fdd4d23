//! The relay under test: `braid netem` as a child process, or a plain
//! one-datagram-per-syscall relay thread, pinned to its own core.

use super::load::{pin, relay_cpus, socket};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// A relay under test, stopped on drop.
pub(super) enum Relay {
    Netem(Child),
    Plain(Arc<AtomicBool>, Option<thread::JoinHandle<()>>),
}

impl Relay {
    pub(super) fn netem(to: SocketAddr, extra: &[&str]) -> Result<(Relay, SocketAddr), String> {
        let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
        let port = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut child = Command::new(exe)
            .arg("netem")
            .args(["--listen", &listen.to_string(), "--to", &to.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting braid netem: {e}"))?;
        let mut line = String::new();
        let _ = BufReader::new(child.stderr.take().unwrap()).read_line(&mut line);
        if !line.contains("relaying") {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("braid netem did not start: {}", line.trim()));
        }
        pin(child.id() as libc::pid_t, relay_cpus());
        Ok((Relay::Netem(child), listen))
    }

    /// One recv_from and one send per datagram, like socat.
    pub(super) fn plain(to: SocketAddr) -> (Relay, SocketAddr) {
        let listen = socket();
        let addr = listen.local_addr().unwrap();
        let up = socket();
        up.connect(to).unwrap();
        listen
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let h = thread::spawn(move || {
            pin(0, relay_cpus());
            let mut buf = vec![0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                if let Ok((n, _)) = listen.recv_from(&mut buf) {
                    let _ = up.send(&buf[..n]);
                }
            }
        });
        (Relay::Plain(stop, Some(h)), addr)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        match self {
            Relay::Netem(child) => {
                // SAFETY: kill by the PID of our own, not yet reaped child.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                let _ = child.wait();
            }
            Relay::Plain(stop, h) => {
                stop.store(true, Ordering::Relaxed);
                if let Some(h) = h.take() {
                    let _ = h.join();
                }
            }
        }
    }
}
