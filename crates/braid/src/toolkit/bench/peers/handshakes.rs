//! The handshake part of `braid bench peers`: thousands of a server's peers
//! initiate within a few seconds, as they do after the server restarts,
//! and the bench counts how long until every one has a session.
//!
//! Each simulated peer behaves as a WireGuard initiator does: it sends an
//! initiation from its own source address, sends another after
//! REKEY_TIMEOUT (5 s, plus up to 1/3 s of jitter) while no response has
//! come, and when a cookie reply comes (a responder under load) it keeps
//! the cookie for the mac2 of its next initiation. All of them share one
//! UDP socket: each datagram leaves from the peer's address (IP_PKTINFO),
//! one of a range the client namespace routes to itself (`ip route add
//! local RANGE dev lo`), and answers come back on the same socket.

use braid_core::consts::{REKEY_TIMEOUT, REKEY_TIMEOUT_JITTER_MAX};
use braid_core::cookie::CookieState;
use braid_core::deadlines::DeadlineQueue;
use braid_core::messages::{
    self, COOKIE_REPLY_LEN, INITIATION_LEN, RESPONSE_LEN, TYPE_COOKIE_REPLY, TYPE_RESPONSE,
};
use braid_core::noise::{
    self, InitiatorHandshake, LocalStatic, RemoteStatic, SessionKeys, Timestamp,
};
use rand_core::{OsRng, RngCore};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use x25519_dalek::StaticSecret;

/// The peers' source addresses: 198.18.128.1 and on, one each.
pub const SOURCE_NET: &str = "198.18.128.0/17";
const FIRST_SOURCE: u32 = u32::from_be_bytes([198, 18, 128, 1]);
/// At most this many peers (the addresses of [`SOURCE_NET`]).
pub const MAX_INITIATORS: usize = 32_000;

/// Sends before the socket is read again: answers are taken in while the
/// first initiations still go out.
const SENDS_PER_ROUND: usize = 64;

struct Initiator {
    local: LocalStatic,
    remote: RemoteStatic,
    cookie: CookieState,
    source: Ipv4Addr,
    /// The initiation waiting for its response.
    pending: Option<InitiatorHandshake>,
    /// The first initiation, made before the clock starts.
    first: Option<([u8; INITIATION_LEN], InitiatorHandshake)>,
    attempts: u32,
    last_timestamp: Timestamp,
    done_after: Option<Duration>,
    /// Once its response checked: the server's index for this peer and
    /// the keys of the session.
    session: Option<(u32, SessionKeys)>,
}

/// What happened while the peers initiated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HandshakeFigures {
    pub peers: usize,
    /// Peers that have a session (their response arrived and checked).
    pub completed: usize,
    /// From the first initiation to the last peer's session; `None` when
    /// not every peer got one within the limit.
    pub all_after: Option<Duration>,
    /// From the first initiation until half of them had one.
    pub half_after: Option<Duration>,
    pub initiations_sent: u64,
    pub cookie_replies: u64,
    /// Responses that did not belong to a pending initiation or did not
    /// check.
    pub responses_refused: u64,
    pub elapsed: Duration,
}

impl HandshakeFigures {
    /// Handshakes per second: every peer over the time until the last one
    /// had its session.
    pub fn per_second(&self) -> Option<f64> {
        self.all_after
            .map(|t| self.completed as f64 / t.as_secs_f64().max(1e-9))
    }
}

/// `count` peers of the server whose public key is `server_public`, with
/// keys of their own; [`public_keys`](Self::public_keys) configures the
/// server, [`run`](Self::run) starts them.
pub struct Initiators {
    peers: Vec<Initiator>,
    /// The socket of [`run`](Self::run), kept for
    /// [`into_sessions`](Self::into_sessions): the server knows each peer
    /// by the port it initiated from.
    socket: Option<UdpSocket>,
}

impl Initiators {
    /// Makes the peers and their first initiations (the key work is done
    /// here, before any clock starts).
    pub fn new(count: usize, server_public: [u8; 32]) -> Result<Initiators, String> {
        if count > MAX_INITIATORS {
            return Err(format!(
                "at most {MAX_INITIATORS} initiating peers (addresses of {SOURCE_NET})"
            ));
        }
        let peers = (0..count)
            .map(|i| {
                let mut private = [0u8; 32];
                OsRng.fill_bytes(&mut private);
                let local = LocalStatic::new(private);
                let remote = RemoteStatic::new(&local, server_public, [0; 32]);
                let mut p = Initiator {
                    cookie: CookieState::new(&server_public),
                    local,
                    remote,
                    source: Ipv4Addr::from(FIRST_SOURCE + i as u32),
                    pending: None,
                    first: None,
                    attempts: 0,
                    last_timestamp: [0; 12],
                    done_after: None,
                    session: None,
                };
                p.first = p.initiation(i);
                p
            })
            .collect();
        Ok(Initiators {
            peers,
            socket: None,
        })
    }

    pub fn public_keys(&self) -> impl Iterator<Item = [u8; 32]> + '_ {
        self.peers.iter().map(|p| p.local.public)
    }

    /// Starts the peers' first initiations over `spread`, then runs them as
    /// WireGuard initiators until every one has a session or `limit` has
    /// passed. Runs on the calling thread (inside the client namespace).
    pub fn run(
        &mut self,
        server: SocketAddrV4,
        spread: Duration,
        limit: Duration,
    ) -> Result<HandshakeFigures, String> {
        let socket = UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("bind: {e}"))?;
        crate::toolkit::lab::traffic::big_buffers(&socket);
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("nonblocking: {e}"))?;
        let n = self.peers.len();
        let mut figures = HandshakeFigures {
            peers: n,
            ..HandshakeFigures::default()
        };
        let start = Instant::now();
        let mut due = DeadlineQueue::new();
        for i in 0..n {
            let offset = spread.mul_f64(i as f64 / n.max(1) as f64);
            due.set(i, Some(start + offset));
        }
        let mut buf = [0u8; 256];
        let mut finish_times = Vec::with_capacity(n);
        while figures.completed < n && start.elapsed() < limit {
            let now = Instant::now();
            let mut sent = 0;
            while sent < SENDS_PER_ROUND {
                let Some(i) = due.pop_due(now) else {
                    break;
                };
                let p = &mut self.peers[i];
                if p.done_after.is_some() {
                    continue;
                }
                let made = match p.first.take() {
                    Some(first) => Some(first),
                    None => p.initiation(i),
                };
                let Some((mut msg, state)) = made else {
                    continue;
                };
                p.cookie.add_macs(now, &mut msg);
                match send_from(&socket, p.source, server, &msg) {
                    Ok(()) => {
                        p.pending = Some(state);
                        figures.initiations_sent += 1;
                        sent += 1;
                        let jitter = Duration::from_nanos(
                            OsRng.next_u64() % REKEY_TIMEOUT_JITTER_MAX.as_nanos() as u64,
                        );
                        due.set(i, Some(now + REKEY_TIMEOUT + jitter));
                    }
                    // A full socket buffer: this one goes in the next round.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        p.first = Some((msg, state));
                        due.set(i, Some(now));
                        break;
                    }
                    Err(e) => return Err(format!("send from {}: {e}", p.source)),
                }
            }
            let mut received = 0;
            loop {
                let len = match socket.recv(&mut buf) {
                    Ok(len) => len,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(format!("receive: {e}")),
                };
                received += 1;
                let now = Instant::now();
                match self.answer(&buf[..len], now, start, &mut figures) {
                    Some(i) => {
                        finish_times.push(now - start);
                        due.set(i, None);
                    }
                    None => continue,
                }
            }
            if sent == 0 && received == 0 {
                // Nothing to do until the next send or answer.
                let wait = due
                    .next()
                    .map_or(Duration::from_millis(1), |t| {
                        t.saturating_duration_since(now)
                    })
                    .min(Duration::from_millis(1));
                wait_readable(&socket, wait);
            }
        }
        figures.elapsed = start.elapsed();
        self.socket = Some(socket);
        finish_times.sort();
        figures.half_after = finish_times.get(n.div_ceil(2).saturating_sub(1)).copied();
        if figures.completed == n {
            figures.all_after = finish_times.last().copied();
        }
        Ok(figures)
    }

    /// A datagram from the server: a response completes its peer (returned),
    /// a cookie reply is kept for the peer's next initiation.
    fn answer(
        &mut self,
        datagram: &[u8],
        now: Instant,
        start: Instant,
        figures: &mut HandshakeFigures,
    ) -> Option<usize> {
        let kind = *datagram.first()?;
        if kind == TYPE_COOKIE_REPLY && datagram.len() == COOKIE_REPLY_LEN {
            let receiver = messages::read_u32(datagram, messages::cookie_reply::RECEIVER);
            let p = self.peers.get_mut(peer_of(receiver))?;
            let msg: &[u8; COOKIE_REPLY_LEN] = datagram.try_into().ok()?;
            if p.cookie.consume_reply(now, msg).is_ok() {
                figures.cookie_replies += 1;
            }
            return None;
        }
        if kind != TYPE_RESPONSE || datagram.len() != RESPONSE_LEN {
            return None;
        }
        let receiver = messages::read_u32(datagram, messages::response::RECEIVER);
        let i = peer_of(receiver);
        let p = self.peers.get_mut(i)?;
        let msg: &[u8; RESPONSE_LEN] = datagram.try_into().ok()?;
        let keys = p
            .pending
            .as_ref()
            .filter(|h| p.done_after.is_none() && h.local_index == receiver)
            .and_then(|h| noise::consume_response(h, &p.local, &p.remote, msg).ok());
        let Some(keys) = keys else {
            figures.responses_refused += 1;
            return None;
        };
        let server_index = messages::read_u32(datagram, messages::response::SENDER);
        p.session = Some((server_index, keys));
        p.pending = None;
        p.done_after = Some(now - start);
        figures.completed += 1;
        Some(i)
    }
}

impl Initiators {
    /// The peers that have a session, after [`run`](Self::run): each with
    /// its source address, the index the server gave it and its keys; and
    /// the socket they initiated from.
    pub fn into_sessions(self) -> Option<(UdpSocket, Vec<Session>)> {
        let sessions = self
            .peers
            .into_iter()
            .enumerate()
            .filter_map(|(i, mut p)| {
                let (receiver, keys) = p.session.take()?;
                Some(Session {
                    peer: i,
                    source: p.source,
                    receiver,
                    keys,
                })
            })
            .collect();
        Some((self.socket?, sessions))
    }
}

/// One peer's session with the server.
pub struct Session {
    /// Which initiating peer (its index among them).
    pub peer: usize,
    pub source: Ipv4Addr,
    /// The server's index for the session: data messages carry it.
    pub receiver: u32,
    pub keys: SessionKeys,
}

impl Initiator {
    /// A new initiation of peer `i` (its sender index says which peer and
    /// which attempt), with a timestamp later than its last.
    fn initiation(&mut self, i: usize) -> Option<([u8; INITIATION_LEN], InitiatorHandshake)> {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let timestamp = noise::tai64n(since.as_secs(), since.subsec_nanos())
            .max(noise::tai64n_after(&self.last_timestamp));
        self.last_timestamp = timestamp;
        let mut ephemeral = [0u8; 32];
        OsRng.fill_bytes(&mut ephemeral);
        let index = sender_index(i, self.attempts);
        self.attempts += 1;
        let mut msg = [0u8; INITIATION_LEN];
        let state = noise::create_initiation(
            &self.local,
            &self.remote,
            StaticSecret::from(ephemeral),
            &timestamp,
            index,
            &mut msg,
        )
        .ok()?;
        Some((msg, state))
    }
}

/// Sender indices: the peer in the high bits, the attempt in the low 8.
fn sender_index(peer: usize, attempt: u32) -> u32 {
    ((peer as u32) << 8) | (attempt & 0xff)
}

fn peer_of(index: u32) -> usize {
    (index >> 8) as usize
}

/// Sends `msg` to `dst` from local address `src` (IP_PKTINFO), on a socket
/// bound to the wildcard address.
pub fn send_from(
    socket: &UdpSocket,
    src: Ipv4Addr,
    dst: SocketAddrV4,
    msg: &[u8],
) -> std::io::Result<()> {
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: dst.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*dst.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let info = libc::in_pktinfo {
        ipi_ifindex: 0,
        ipi_spec_dst: libc::in_addr {
            s_addr: u32::from(src).to_be(),
        },
        ipi_addr: libc::in_addr { s_addr: 0 },
    };
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // u64s: aligned for the cmsghdr inside.
    let mut control = [0u64; 8];
    // SAFETY: CMSG_SPACE of a small constant size has no preconditions.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::in_pktinfo>() as u32) };
    debug_assert!(space as usize <= std::mem::size_of_val(&control));
    // SAFETY: an all-zero msghdr is valid; its pointers are set below to
    // values that live until sendmsg returns.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_name = (&addr as *const libc::sockaddr_in).cast_mut().cast();
    header.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    header.msg_iov = &mut iov;
    header.msg_iovlen = braid_io::kernel_int(1usize);
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = braid_io::kernel_int(space);
    // SAFETY: the control buffer holds CMSG_SPACE(in_pktinfo) bytes, so the
    // first header and its data fit in it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        (*cmsg).cmsg_level = libc::IPPROTO_IP;
        (*cmsg).cmsg_type = libc::IP_PKTINFO;
        (*cmsg).cmsg_len = braid_io::kernel_int(libc::CMSG_LEN(
            std::mem::size_of::<libc::in_pktinfo>() as u32,
        ));
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::in_pktinfo>(), info);
    }
    // SAFETY: header points at live buffers of the lengths it gives.
    let rc = unsafe { libc::sendmsg(socket.as_raw_fd(), &header, 0) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `socket` is readable or `timeout` has passed.
fn wait_readable(socket: &UdpSocket, timeout: Duration) {
    let mut fd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, 1000) as libc::c_int;
    // SAFETY: one pollfd that lives across the call.
    unsafe { libc::poll(&mut fd, 1, ms) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_indices_name_the_peer_and_the_attempt() {
        for (peer, attempt) in [(0, 0), (1, 1), (9_999, 255), (31_999, 256)] {
            let index = sender_index(peer, attempt);
            assert_eq!(peer_of(index), peer);
            assert_eq!(index & 0xff, attempt & 0xff);
        }
    }

    #[test]
    fn handshakes_per_second_is_every_peer_over_the_time_to_the_last() {
        let f = HandshakeFigures {
            peers: 10_000,
            completed: 10_000,
            all_after: Some(Duration::from_secs(4)),
            ..HandshakeFigures::default()
        };
        assert_eq!(f.per_second(), Some(2_500.0));
        let unfinished = HandshakeFigures {
            completed: 9_000,
            all_after: None,
            ..f
        };
        assert_eq!(unfinished.per_second(), None);
    }
}
