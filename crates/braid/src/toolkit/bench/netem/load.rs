//! The load generator: pinned threads that send and count datagrams in
//! batches (sendmmsg/recvmmsg) on loopback sockets.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

pub(super) fn cpus() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins `pid` (0: the calling thread) to the CPUs in `which`.
pub(super) fn pin(pid: libc::pid_t, which: std::ops::Range<usize>) {
    // SAFETY: cpu_set_t is a plain bit set; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in which {
        // SAFETY: `c` is below the number of CPUs, far below CPU_SETSIZE.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed. Failure (e.g.
    // a restricted cpuset) only makes the numbers noisier.
    unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// The relay gets the last CPU, the load generator the others.
pub(super) fn relay_cpus() -> std::ops::Range<usize> {
    let n = cpus();
    n.saturating_sub(1)..n
}

pub(super) fn load_cpus() -> std::ops::Range<usize> {
    let n = cpus();
    0..n.saturating_sub(1).max(1)
}

pub(super) fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP socket");
    crate::toolkit::lab::traffic::big_buffers(&s);
    s
}

/// Messages per sendmmsg/recvmmsg of the load generator.
pub(super) const GEN_BATCH: usize = 64;

/// Headers for `bufs`, each a whole message; no addresses (the sockets
/// are connected, or the source does not matter).
pub(super) fn headers(bufs: &mut [Vec<u8>], iovs: &mut Vec<libc::iovec>) -> Vec<libc::mmsghdr> {
    iovs.clear();
    for b in bufs.iter_mut() {
        iovs.push(libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        });
    }
    iovs.iter_mut()
        .map(|iov| {
            // SAFETY: an all-zero mmsghdr is valid (null pointers, zero lengths).
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect()
}

/// Counts what arrives until `stop`; `on_batch` sees each received batch:
/// every datagram's arrival time (the kernel's stamp, so the receiver's own
/// wake-up latency does not count) and its first 16 bytes.
pub(super) fn receiver(
    sock: UdpSocket,
    spin: bool,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    mut on_batch: impl FnMut(&[(Instant, [u8; 16])]) + Send + 'static,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        pin(0, load_cpus());
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        // Without kernel stamps the delays fall back to the time of reading.
        let _ =
            braid_io::setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
        let mut bufs: Vec<Vec<u8>> = (0..GEN_BATCH).map(|_| vec![0u8; 2048]).collect();
        let mut iovs = Vec::with_capacity(GEN_BATCH);
        let mut hdrs = headers(&mut bufs, &mut iovs);
        let mut controls = vec![[0u64; 8]; GEN_BATCH];
        let mut got = vec![(Instant::now(), [0u8; 16]); GEN_BATCH];
        while !stop.load(Ordering::Relaxed) {
            for (h, c) in hdrs.iter_mut().zip(controls.iter_mut()) {
                h.msg_hdr.msg_control = c.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = braid_io::kernel_int(std::mem::size_of::<[u64; 8]>());
            }
            // SAFETY: the headers point at `iovs`, `bufs` and `controls`,
            // all alive and unmoved for the duration of the call.
            let n = unsafe {
                libc::recvmmsg(
                    sock.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    GEN_BATCH as libc::c_uint,
                    braid_io::kernel_int(if spin {
                        libc::MSG_DONTWAIT
                    } else {
                        libc::MSG_WAITFORONE
                    }),
                    std::ptr::null_mut(),
                )
            };
            if n <= 0 {
                continue;
            }
            let (now, wall) = (Instant::now(), SystemTime::now());
            let n = n as usize;
            for k in 0..n {
                let at = braid_io::udp::arrival_time(&hdrs[k].msg_hdr)
                    .and_then(|t| wall.duration_since(t).ok())
                    .and_then(|age| now.checked_sub(age))
                    .unwrap_or(now);
                got[k].0 = at;
                got[k].1.copy_from_slice(&bufs[k][..16]);
            }
            count.fetch_add(n as u64, Ordering::Relaxed);
            on_batch(&got[..n]);
        }
    })
}

/// Sends as fast as it can (`every` None) or `per_tick` datagrams every
/// `every`, each stamped with its send time relative to `base`.
pub(super) fn sender(
    sock: UdpSocket,
    size: usize,
    pace: Option<(Duration, usize)>,
    base: Instant,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        pin(0, load_cpus());
        // SAFETY: prctl with PR_SET_TIMERSLACK takes plain integers.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        if pace.is_some() {
            // Paced (delay test): nothing may preempt us between taking
            // the timestamp and handing the datagrams to the kernel.
            // Failing only makes the numbers noisier.
            let _ = braid_io::realtime_this_thread(libc::SCHED_FIFO, 10);
        }
        let per = pace.map_or(GEN_BATCH, |(_, n)| n.min(GEN_BATCH));
        let mut bufs: Vec<Vec<u8>> = (0..per).map(|_| vec![0xa5u8; size]).collect();
        let mut iovs = Vec::with_capacity(per);
        let mut next = Instant::now();
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            if let Some((every, _)) = pace {
                next += every;
                let now = Instant::now();
                if next > now {
                    thread::sleep(next - now);
                }
            }
            let stamp = Instant::now().duration_since(base).as_nanos() as u64;
            for b in bufs.iter_mut() {
                b[..8].copy_from_slice(&seq.to_le_bytes());
                b[8..16].copy_from_slice(&stamp.to_le_bytes());
                seq += 1;
            }
            let mut hdrs = headers(&mut bufs, &mut iovs);
            // SAFETY: the headers point at `iovs` and `bufs`, alive and
            // unmoved for the duration of the call; the kernel only reads.
            let n = unsafe {
                libc::sendmmsg(sock.as_raw_fd(), hdrs.as_mut_ptr(), per as libc::c_uint, 0)
            };
            if n > 0 {
                sent.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    })
}
