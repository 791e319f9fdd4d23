//! One TCP connection of a line, with a receive side and a send side that
//! lock separately: the thread that decrypts reads while the thread that
//! encrypts writes, as they do on a UDP socket.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use braid_core::batch::PacketBatch;

use super::frames::{frame_prefix, RxBuffer, TxBacklog, PREFIX};
use super::sys::{self, Epoll};

/// Most iovecs one sendmsg takes (IOV_MAX on Linux).
const IOV_MAX: usize = 1024;

pub struct Connection {
    pub token: u64,
    pub stream: TcpStream,
    /// The address datagrams from it are tagged with and replies go to.
    pub remote: SocketAddr,
    pub opened: Instant,
    established: AtomicBool,
    broken: AtomicBool,
    /// The core authenticated a message from `remote` on this line.
    authenticated: AtomicBool,
    rx: Mutex<RxSide>,
    tx: Mutex<TxSide>,
}

pub struct RxSide {
    buffer: RxBuffer,
    /// Epoll said there is something to read (or an error to collect).
    readable: bool,
    pub last_frame: Instant,
}

struct TxSide {
    backlog: TxBacklog,
    /// Epoll also reports when the socket turns writable (a backlog waits).
    watching_writable: bool,
    prefixes: Vec<[u8; PREFIX]>,
    iov: Vec<libc::iovec>,
}

// SAFETY: the iovecs only point anywhere during one send call, which holds
// the side's mutex; between calls they are stale and never dereferenced.
unsafe impl Send for TxSide {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Buffers hold no invariant a panicking holder could break.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Connection {
    pub fn new(
        token: u64,
        stream: TcpStream,
        remote: SocketAddr,
        established: bool,
        rx_bytes: usize,
        tx_bytes: usize,
    ) -> Connection {
        Connection {
            token,
            stream,
            remote,
            opened: Instant::now(),
            established: AtomicBool::new(established),
            broken: AtomicBool::new(false),
            authenticated: AtomicBool::new(false),
            rx: Mutex::new(RxSide {
                buffer: RxBuffer::new(rx_bytes),
                readable: false,
                last_frame: Instant::now(),
            }),
            tx: Mutex::new(TxSide {
                backlog: TxBacklog::new(tx_bytes),
                watching_writable: !established,
                prefixes: Vec::new(),
                iov: Vec::new(),
            }),
        }
    }

    pub fn is_established(&self) -> bool {
        self.established.load(Ordering::Acquire)
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    pub fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Relaxed)
    }

    pub fn authenticate(&self) {
        self.authenticated.store(true, Ordering::Relaxed);
    }

    pub fn break_off(&self) {
        self.broken.store(true, Ordering::Relaxed);
    }

    pub fn rx(&self) -> MutexGuard<'_, RxSide> {
        lock(&self.rx)
    }

    pub fn has_frame(&self) -> bool {
        self.rx().buffer.has_frame()
    }

    /// Handles what epoll reported; returns true when this completed the
    /// TCP handshake of a connecting socket.
    pub fn on_event(&self, epoll: &Epoll, flags: u32) -> bool {
        let error = flags & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
        let writable = flags & libc::EPOLLOUT as u32 != 0;
        let mut opened = false;
        if !self.is_established() && (error || writable) {
            if sys::take_error(self.stream.as_raw_fd()).is_err() {
                self.break_off();
                return false;
            }
            self.established.store(true, Ordering::Release);
            opened = true;
        }
        if writable {
            let mut tx = lock(&self.tx);
            self.flush(epoll, &mut tx);
        }
        if error || flags & libc::EPOLLIN as u32 != 0 {
            self.rx().readable = true;
        }
        opened
    }

    /// Writes what the backlog holds; stops watching for writability once
    /// it is empty.
    fn flush(&self, epoll: &Epoll, tx: &mut TxSide) {
        while self.is_established() && !tx.backlog.is_empty() {
            let unsent = tx.backlog.unsent();
            let mut iov = [libc::iovec {
                iov_base: unsent.as_ptr() as *mut libc::c_void,
                iov_len: unsent.len(),
            }];
            match sys::send_vectored(self.stream.as_raw_fd(), &mut iov) {
                Ok(n) => tx.backlog.consumed(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.break_off();
                    tx.backlog.clear();
                    return;
                }
            }
        }
        let waiting = !tx.backlog.is_empty();
        self.watch_writable(epoll, tx, waiting);
    }

    fn watch_writable(&self, epoll: &Epoll, tx: &mut TxSide, on: bool) {
        if self.is_established()
            && tx.watching_writable != on
            && epoll
                .modify(self.stream.as_raw_fd(), self.token, on)
                .is_ok()
        {
            tx.watching_writable = on;
        }
    }

    /// Writes the datagrams in `slots` of `batch`: straight from the batch
    /// with one sendmsg when nothing waits before them, else (and for what
    /// the kernel does not take) into the bounded backlog. Returns how many
    /// went out or wait; the others are dropped.
    ///
    /// Panics if a datagram in `slots` is longer than
    /// [`MAX_FRAME`](super::MAX_FRAME): the caller leaves those out.
    pub fn send(&self, epoll: &Epoll, batch: &PacketBatch, slots: &[usize]) -> usize {
        let mut guard = lock(&self.tx);
        let tx = &mut *guard;
        if !tx.backlog.is_empty() {
            self.flush(epoll, tx);
        }
        if self.is_broken() {
            return 0;
        }
        if !self.is_established() || !tx.backlog.is_empty() {
            let queued = slots
                .iter()
                .filter(|&&s| tx.backlog.push(batch.packet(s)))
                .count();
            let waiting = !tx.backlog.is_empty();
            self.watch_writable(epoll, tx, waiting);
            return queued;
        }
        let per_call = IOV_MAX / 2;
        let mut done = 0;
        for (n_chunk, chunk) in slots.chunks(per_call).enumerate() {
            tx.prefixes.clear();
            tx.prefixes
                .extend(chunk.iter().map(|&s| frame_prefix(batch.packet(s))));
            tx.iov.clear();
            for (k, &s) in chunk.iter().enumerate() {
                let body = batch.packet(s);
                tx.iov.push(libc::iovec {
                    iov_base: tx.prefixes[k].as_ptr() as *mut libc::c_void,
                    iov_len: PREFIX,
                });
                tx.iov.push(libc::iovec {
                    iov_base: body.as_ptr() as *mut libc::c_void,
                    iov_len: body.len(),
                });
            }
            let mut wrote = loop {
                match sys::send_vectored(self.stream.as_raw_fd(), &mut tx.iov) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                    Err(_) => {
                        self.break_off();
                        tx.backlog.clear();
                        return done;
                    }
                }
            };
            // Whole frames the kernel took, then the rest of a frame it took
            // part of, then as many further frames as the backlog holds.
            // `wrote` never exceeds the iovecs' total, so the loop stops
            // inside the chunk and the subtraction is guarded by its test.
            let mut k = 0;
            while k < chunk.len() && wrote >= PREFIX + batch.packet(chunk[k]).len() {
                wrote -= PREFIX + batch.packet(chunk[k]).len();
                k += 1;
            }
            done += k;
            if k == chunk.len() {
                continue;
            }
            if wrote > 0 {
                tx.backlog.push_rest(batch.packet(chunk[k]), wrote);
                done += 1;
                k += 1;
            }
            let unsent = &slots[n_chunk * per_call + k..];
            done += unsent
                .iter()
                .filter(|&&s| tx.backlog.push(batch.packet(s)))
                .count();
            break;
        }
        let waiting = !tx.backlog.is_empty();
        self.watch_writable(epoll, tx, waiting);
        done
    }

    /// Moves whole frames into `batch`, reading from the socket while it
    /// had something and the batch has room. Returns whether any frame
    /// arrived.
    pub fn receive(&self, batch: &mut PacketBatch, line: u16, now: Instant) -> bool {
        let mut guard = self.rx();
        let rx = &mut *guard;
        let mut got = false;
        loop {
            match rx.buffer.drain_into(batch, self.remote, line) {
                Ok(0) => {}
                Ok(_) => {
                    rx.last_frame = now;
                    got = true;
                }
                Err(_) => {
                    self.break_off();
                    return got;
                }
            }
            if batch.is_full() || !rx.readable || !self.is_established() {
                rx.readable = false;
                return got;
            }
            let spare = rx.buffer.spare();
            let room = spare.len();
            match (&self.stream).read(spare) {
                Ok(0) => {
                    self.break_off();
                    return got;
                }
                Ok(n) => {
                    rx.buffer.filled(n);
                    // A short read emptied the socket; a full one may have
                    // left more, read on the next pass after draining.
                    rx.readable = n == room;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => rx.readable = false,
                Err(_) => {
                    self.break_off();
                    return got;
                }
            }
        }
    }
}
