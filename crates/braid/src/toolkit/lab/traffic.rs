//! Measured traffic through a tunnel, from threads that enter the lab's
//! network namespaces (setns is per thread):
//!
//! - [`UdpSequence`]: numbered datagrams at a fixed rate; the receiver counts
//!   missing, duplicated, out-of-order and corrupted ones.
//! - [`TcpTransfer`]: a paced stream of pseudo-random bytes; SHA-256 of what
//!   was sent against what arrived.
//!
//! Every loop is bounded in time; nothing here asserts how fast anything
//! went. A thread that cannot set itself up (enter the namespace, bind its
//! socket) panics, and `finish` passes that panic on to its caller.

use ring::digest::{Context, SHA256};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runs `f` on a new thread inside network namespace `ns`.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: setns with a namespace fd we own; it only moves this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// 8 MiB receive and send buffers for `socket` (SO_RCVBUFFORCE and
/// SO_SNDBUFFORCE, which root may set beyond the system's limits); where
/// that fails the socket keeps its default buffers.
pub fn big_buffers(socket: &impl AsRawFd) {
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        let v: libc::c_int = 8 << 20;
        // SAFETY: passes a live c_int and its size; failure is harmless.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

const SEQ_PAYLOAD: usize = 256;

/// The byte at `i` of datagram `seq`: a corrupted datagram cannot pass.
fn seq_byte(seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(2_654_435_761) >> 7) as u8 ^ (i as u8).wrapping_mul(31)
}

#[derive(Debug, Default, Clone)]
pub struct SeqReport {
    pub sent: u64,
    pub send_errors: u64,
    pub received: u64,
    pub missing: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    pub corrupted: u64,
}

impl SeqReport {
    pub fn loss_percent(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        100.0 * self.missing as f64 / self.sent as f64
    }
}

impl std::fmt::Display for SeqReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UDP sequence: sent {} (send errors {}), received {}, missing {} ({:.2} %), \
             duplicated {}, out of order {}, corrupted {}",
            self.sent,
            self.send_errors,
            self.received,
            self.missing,
            self.loss_percent(),
            self.duplicated,
            self.out_of_order,
            self.corrupted
        )
    }
}

/// Numbered datagrams from `tx_ns` to `dst` (in `rx_ns`) at `rate` per
/// second for `duration`.
pub struct UdpSequence {
    sender: JoinHandle<(u64, u64)>,
    receiver: JoinHandle<(SeqReport, Vec<bool>)>,
}

impl UdpSequence {
    pub fn start(tx_ns: &str, rx_ns: &str, dst: SocketAddr, rate: u32, duration: Duration) -> Self {
        Self::start_until(tx_ns, rx_ns, dst, rate, duration, Default::default())
    }

    /// Like [`UdpSequence::start`], but the sender also stops as soon as
    /// `stop` is set: `duration` is then the longest it runs.
    pub fn start_until(
        tx_ns: &str,
        rx_ns: &str,
        dst: SocketAddr,
        rate: u32,
        duration: Duration,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let total = (rate as f64 * duration.as_secs_f64()) as u64;
        let sender_done = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let done = sender_done.clone();
        let receiver = in_netns(rx_ns, move || {
            let socket = UdpSocket::bind(SocketAddr::new(
                std::net::Ipv4Addr::UNSPECIFIED.into(),
                dst.port(),
            ))
            .expect("bind the sequence receiver");
            // Room for seconds of the sequence, so a receiver thread that
            // is not scheduled for a while loses nothing to its buffer.
            big_buffers(&socket);
            socket
                .set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            ready_tx.send(()).unwrap();
            receive_sequence(&socket, total, &done)
        });
        ready_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("sequence receiver did not start");
        let done = sender_done;
        let sender = in_netns(tx_ns, move || {
            let socket = UdpSocket::bind("0.0.0.0:0").expect("bind the sequence sender");
            let start = Instant::now();
            let mut buf = [0u8; SEQ_PAYLOAD];
            let (mut sent, mut errors) = (0, 0);
            for seq in 0..total {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                sent += 1;
                let due = start + Duration::from_secs_f64(seq as f64 / rate as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                buf[..8].copy_from_slice(&seq.to_le_bytes());
                for (i, b) in buf.iter_mut().enumerate().skip(8) {
                    *b = seq_byte(seq, i);
                }
                if socket.send_to(&buf, dst).is_err() {
                    errors += 1;
                }
            }
            done.store(true, Ordering::SeqCst);
            (sent, errors)
        });
        UdpSequence { sender, receiver }
    }

    pub fn finish(self) -> SeqReport {
        let (sent, send_errors) = self.sender.join().expect("sequence sender panicked");
        let (mut report, seen) = self.receiver.join().expect("sequence receiver panicked");
        report.sent = sent;
        report.send_errors = send_errors;
        report.missing = seen[..sent as usize].iter().filter(|s| !**s).count() as u64;
        report
    }
}

/// Receives until the sender is done and the line has been quiet for 2 s
/// (bounded: at most 60 s after the sender is done); which datagrams came.
fn receive_sequence(
    socket: &UdpSocket,
    total: u64,
    sender_done: &AtomicBool,
) -> (SeqReport, Vec<bool>) {
    let mut seen = vec![false; total as usize];
    let mut report = SeqReport::default();
    let mut highest: Option<u64> = None;
    let mut last_arrival = Instant::now();
    let mut done_at: Option<Instant> = None;
    let mut buf = [0u8; 2048];
    loop {
        if done_at.is_none() && sender_done.load(Ordering::SeqCst) {
            done_at = Some(Instant::now());
        }
        if let Some(t) = done_at {
            let quiet = last_arrival.max(t).elapsed() > Duration::from_secs(2);
            if quiet || t.elapsed() > Duration::from_secs(60) {
                break;
            }
        }
        let n = match socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => panic!("sequence receiver: {e}"),
        };
        last_arrival = Instant::now();
        report.received += 1;
        let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
        let intact =
            n == SEQ_PAYLOAD && seq < total && (8..SEQ_PAYLOAD).all(|i| buf[i] == seq_byte(seq, i));
        if !intact {
            report.corrupted += 1;
            continue;
        }
        if std::mem::replace(&mut seen[seq as usize], true) {
            report.duplicated += 1;
            continue;
        }
        if highest.is_some_and(|h| seq < h) {
            report.out_of_order += 1;
        }
        highest = Some(highest.map_or(seq, |h| h.max(seq)));
    }
    (report, seen)
}

#[derive(Debug, Clone)]
pub struct TransferReport {
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub sent_sha256: String,
    pub received_sha256: String,
    pub error: Option<String>,
}

impl TransferReport {
    pub fn intact(&self) -> bool {
        self.error.is_none()
            && self.sent_bytes == self.received_bytes
            && self.sent_sha256 == self.received_sha256
    }
}

impl std::fmt::Display for TransferReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TCP transfer: sent {} B sha256 {}…, received {} B sha256 {}…: {}",
            self.sent_bytes,
            &self.sent_sha256[..16],
            self.received_bytes,
            &self.received_sha256[..16],
            match (&self.error, self.intact()) {
                (Some(e), _) => format!("FAILED ({e})"),
                (None, true) => "intact".to_string(),
                (None, false) => "MISMATCH".to_string(),
            }
        )
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A stream of pseudo-random bytes (xorshift), cheap enough not to be the
/// bottleneck, different in every chunk.
struct Stream(u64);

impl Stream {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            chunk.copy_from_slice(&self.0.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// A TCP stream from `tx_ns` to `dst` (in `rx_ns`), paced at `bytes_per_sec`
/// for `duration`, then closed; both ends hash what they handled.
pub struct TcpTransfer {
    sender: JoinHandle<Result<(u64, String), String>>,
    receiver: JoinHandle<Result<(u64, String), String>>,
}

/// How long a stalled read or write (a cut line) may block before the
/// transfer counts as failed.
const STALL_LIMIT: Duration = Duration::from_secs(90);

impl TcpTransfer {
    pub fn start(
        tx_ns: &str,
        rx_ns: &str,
        dst: SocketAddr,
        bytes_per_sec: u64,
        duration: Duration,
    ) -> Self {
        Self::start_until(
            tx_ns,
            rx_ns,
            dst,
            bytes_per_sec,
            duration,
            Default::default(),
        )
    }

    /// Like [`TcpTransfer::start`], but the sender also stops as soon as
    /// `stop` is set: `duration` is then the longest it sends.
    pub fn start_until(
        tx_ns: &str,
        rx_ns: &str,
        dst: SocketAddr,
        bytes_per_sec: u64,
        duration: Duration,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let (ready_tx, ready_rx) = mpsc::channel();
        let receiver = in_netns(rx_ns, move || {
            let listener = TcpListener::bind(SocketAddr::new(
                std::net::Ipv4Addr::UNSPECIFIED.into(),
                dst.port(),
            ))
            .map_err(|e| format!("listen: {e}"))?;
            ready_tx.send(()).unwrap();
            listener.set_nonblocking(true).unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut conn = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) => return Err(format!("accept: {e}")),
                }
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(STALL_LIMIT)).unwrap();
            let mut hash = Context::new(&SHA256);
            let mut total = 0u64;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = conn
                    .read(&mut buf)
                    .map_err(|e| format!("receive after {total} bytes: {e}"))?;
                if n == 0 {
                    break;
                }
                hash.update(&buf[..n]);
                total += n as u64;
            }
            Ok((total, hex(hash.finish().as_ref())))
        });
        ready_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("TCP receiver did not start");
        let sender = in_netns(tx_ns, move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut conn = loop {
                match TcpStream::connect_timeout(&dst, Duration::from_secs(5)) {
                    Ok(c) => break c,
                    Err(e) if Instant::now() > deadline => {
                        return Err(format!("connect {dst}: {e}"))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            };
            conn.set_write_timeout(Some(STALL_LIMIT)).unwrap();
            let mut stream = Stream(0x9e37_79b9_7f4a_7c15);
            let mut hash = Context::new(&SHA256);
            let mut buf = vec![0u8; 32 * 1024];
            let start = Instant::now();
            let mut total = 0u64;
            while start.elapsed() < duration && !stop.load(Ordering::SeqCst) {
                let due = start + Duration::from_secs_f64(total as f64 / bytes_per_sec as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                stream.fill(&mut buf);
                conn.write_all(&buf)
                    .map_err(|e| format!("send after {total} bytes: {e}"))?;
                hash.update(&buf);
                total += buf.len() as u64;
            }
            conn.shutdown(std::net::Shutdown::Write)
                .map_err(|e| format!("shutdown: {e}"))?;
            // Wait for the receiver's close so every byte was delivered.
            let _ = conn.set_read_timeout(Some(STALL_LIMIT));
            let _ = conn.read(&mut buf);
            Ok((total, hex(hash.finish().as_ref())))
        });
        TcpTransfer { sender, receiver }
    }

    pub fn finish(self) -> TransferReport {
        let sent = self.sender.join().expect("TCP sender panicked");
        let received = self.receiver.join().expect("TCP receiver panicked");
        let error = match (&sent, &received) {
            (Err(e), _) => Some(format!("sender: {e}")),
            (_, Err(e)) => Some(format!("receiver: {e}")),
            _ => None,
        };
        let (sent_bytes, sent_sha256) = sent.unwrap_or((0, "-".repeat(64)));
        let (received_bytes, received_sha256) = received.unwrap_or((0, "-".repeat(64)));
        TransferReport {
            sent_bytes,
            received_bytes,
            sent_sha256,
            received_sha256,
            error,
        }
    }
}
