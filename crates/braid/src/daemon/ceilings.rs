//! Each path's MTU search is capped by the MTU of the local line it leaves
//! on: the MTU of the route to the path's remote, asked of the kernel with
//! a UDP socket bound as the line is and connected to the remote
//! (connecting sends nothing).
//!
//! A server has a path per peer, tens of thousands of them, and the main
//! thread that looks the routes up also receives. So a round of lookups
//! (every [`CEILING_REFRESH`]) goes [`PER_CALL`] paths at a time, one slice
//! per tick of the main thread, through one socket per line and address
//! family that is re-connected for each remote: four system calls and a
//! socket per path at once made a 10,000-peer server stop receiving for
//! about 0.1 s every 5 s.

use crate::config::Bind;
use braid_core::device::PathRoute;
use braid_io::netcfg;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How often each path's line MTU is looked up again (at the least: a
/// round over more paths than 50 slices a second reach takes longer).
pub const CEILING_REFRESH: Duration = Duration::from_secs(5);
/// Paths looked up per call: a few milliseconds of the main thread.
pub const PER_CALL: usize = 512;

/// Where the lookups are: the paths of the running round not looked up
/// yet, and when the next round starts.
#[derive(Debug, Default)]
pub struct Round {
    next: Option<Instant>,
    pending: Vec<PathRoute>,
}

impl Round {
    /// Whether a new round starts at `now` (none running, and its time
    /// has come); if so, the next one is due [`CEILING_REFRESH`] later.
    pub fn starts(&mut self, now: Instant) -> bool {
        if !self.pending.is_empty() || self.next.is_some_and(|t| now < t) {
            return false;
        }
        self.next = Some(now + CEILING_REFRESH);
        true
    }

    /// The paths of the round that starts now.
    pub fn fill(&mut self, routes: Vec<PathRoute>) {
        self.pending = routes;
    }

    /// The next slice to look up: at most [`PER_CALL`] paths.
    pub fn slice(&mut self) -> Vec<PathRoute> {
        let keep = self.pending.len().saturating_sub(PER_CALL);
        self.pending.split_off(keep)
    }

    /// Drops the running round; a new one starts at the next call (the
    /// interface MTU changed).
    pub fn restart(&mut self) {
        self.next = None;
        self.pending.clear();
    }
}

/// Looks route MTUs up, keeping a socket per line and address family for
/// the lookups of one slice.
#[derive(Default)]
pub struct RouteMtu {
    /// (line, IPv6) and its socket; `None` where one could not be made
    /// (not tried again within the slice).
    sockets: Vec<((u16, bool), Option<UdpSocket>)>,
}

impl RouteMtu {
    /// The MTU of the route to `remote` from `line`, bound as `bind()`
    /// says (asked only when the line's socket is made).
    pub fn lookup(
        &mut self,
        line: u16,
        bind: impl FnOnce() -> Option<Bind>,
        remote: SocketAddr,
    ) -> Option<usize> {
        let key = (line, remote.is_ipv6());
        let at = match self.sockets.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                self.sockets
                    .push((key, probe_socket(bind().as_ref(), remote.is_ipv6())));
                self.sockets.len() - 1
            }
        };
        route_mtu(self.sockets[at].1.as_ref()?, remote)
    }
}

/// A UDP socket bound as a line with `bind` is, for remotes of one family.
fn probe_socket(bind: Option<&Bind>, ipv6: bool) -> Option<UdpSocket> {
    let local_any = if ipv6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    let local = match bind {
        Some(Bind::Address(a)) if a.is_ipv6() == ipv6 => *a,
        _ => local_any,
    };
    let socket = UdpSocket::bind(SocketAddr::new(local, 0)).ok()?;
    let device = match bind {
        Some(Bind::Interface(dev)) => Some(dev.clone()),
        Some(Bind::Address(a)) => netcfg::interface_with_address(*a),
        None => None,
    };
    if let Some(dev) = device {
        // SAFETY: setsockopt on a socket we own, with a buffer of the given
        // length that outlives the call.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_BINDTODEVICE,
                dev.as_ptr().cast(),
                dev.len() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return None;
        }
    }
    Some(socket)
}

/// The MTU of the route from `socket` to `remote`: it is connected there
/// (a UDP socket may be connected again to another address) and asked.
fn route_mtu(socket: &UdpSocket, remote: SocketAddr) -> Option<usize> {
    socket.connect(remote).ok()?;
    let (level, name) = if remote.is_ipv6() {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `mtu`, which lives
    // on this stack frame for the whole call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&mut mtu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && mtu > 0).then_some(mtu as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(n: usize) -> Vec<PathRoute> {
        (0..n)
            .map(|i| PathRoute {
                pid: i,
                path: 0,
                line: 0,
                remote: SocketAddr::from(([198, 18, (i / 250) as u8, (i % 250) as u8], 51820)),
            })
            .collect()
    }

    #[test]
    fn a_round_goes_a_slice_at_a_time_and_the_next_waits_its_turn() {
        let t0 = Instant::now();
        let mut r = Round::default();
        assert!(r.starts(t0), "the first call starts a round");
        r.fill(routes(1200));
        let mut seen = Vec::new();
        for expected in [PER_CALL, PER_CALL, 1200 - 2 * PER_CALL] {
            assert!(!r.starts(t0), "no new round while one runs");
            let s = r.slice();
            assert_eq!(s.len(), expected);
            seen.extend(s.into_iter().map(|p| p.pid));
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..1200).collect::<Vec<_>>(), "every path once");
        assert!(r.slice().is_empty());
        assert!(!r.starts(t0 + CEILING_REFRESH - Duration::from_millis(1)));
        assert!(r.starts(t0 + CEILING_REFRESH));
        // A new interface MTU: a new round at once, the old one dropped.
        r.fill(routes(700));
        let _ = r.slice();
        r.restart();
        assert!(r.slice().is_empty());
        assert!(r.starts(t0 + CEILING_REFRESH));
    }

    #[test]
    fn one_socket_per_line_and_family_answers_every_remote() {
        let mut m = RouteMtu::default();
        let mut binds_asked = 0;
        for host in 1..=20u8 {
            let mtu = m
                .lookup(
                    0,
                    || {
                        binds_asked += 1;
                        None
                    },
                    SocketAddr::from(([127, 0, 0, host], 9)),
                )
                .expect("a route to loopback");
            assert!(mtu >= 1280, "{mtu}");
        }
        assert_eq!(binds_asked, 1, "one socket for one line and family");
        assert_eq!(m.sockets.len(), 1);
        let v6 = m.lookup(0, || None, "[::1]:9".parse().unwrap());
        // A machine without IPv6 has no route: no answer, and no panic.
        if let Some(mtu) = v6 {
            assert!(mtu >= 1280, "{mtu}");
        }
        assert_eq!(m.sockets.len(), 2);
    }
}
