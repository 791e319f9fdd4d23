//! Socket addresses to and from the kernel's `sockaddr` forms, for the UDP
//! and the TCP sockets.
//!
//! A dual-stack socket speaks IPv6 only: IPv4 peers become v4-mapped
//! addresses on the way out and plain [`SocketAddr::V4`] on the way in, so
//! the core never sees the mapping.

use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

pub(crate) const UNSPECIFIED: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// Whether a socket of the given family can send to `addr` at all.
pub(crate) fn reachable(addr: SocketAddr, ipv6: bool) -> bool {
    ipv6 || match addr {
        SocketAddr::V4(_) => true,
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some(),
    }
}

/// `addr` as a sockaddr of its own family (what `bind` and `connect` of a
/// socket made for that family take).
pub(crate) fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len =
        encode_addr(addr, addr.is_ipv6(), &mut ss).expect("an address reaches its own family");
    (ss, len)
}

/// Writes `addr` as a sockaddr for a socket of the given family into `out`;
/// returns its length, or `None` when an IPv4 socket cannot reach it.
/// IPv4 addresses become v4-mapped on an IPv6 socket.
pub(crate) fn encode_addr(
    addr: SocketAddr,
    ipv6: bool,
    out: &mut libc::sockaddr_storage,
) -> Option<libc::socklen_t> {
    let ptr: *mut libc::sockaddr_storage = out;
    if ipv6 {
        let (ip, port, flow, scope) = match addr {
            SocketAddr::V4(a) => (a.ip().to_ipv6_mapped(), a.port(), 0, 0),
            SocketAddr::V6(a) => (*a.ip(), a.port(), a.flowinfo(), a.scope_id()),
        };
        let sin6 = libc::sockaddr_in6 {
            sin6_family: libc::AF_INET6 as libc::sa_family_t,
            sin6_port: port.to_be(),
            sin6_flowinfo: flow,
            sin6_addr: libc::in6_addr {
                s6_addr: ip.octets(),
            },
            sin6_scope_id: scope,
        };
        // SAFETY: sockaddr_storage is larger than and suitably aligned for
        // sockaddr_in6, and `ptr` comes from a live &mut.
        unsafe { ptr.cast::<libc::sockaddr_in6>().write(sin6) };
        Some(mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
    } else {
        let a = match addr {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
                Some(ip) => SocketAddrV4::new(ip, a.port()),
                None => return None,
            },
        };
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: sockaddr_storage is larger than and suitably aligned for
        // sockaddr_in, and `ptr` comes from a live &mut.
        unsafe { ptr.cast::<libc::sockaddr_in>().write(sin) };
        Some(mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
    }
}

/// Reads a sockaddr the kernel filled in; v4-mapped IPv6 addresses come
/// back as [`SocketAddr::V4`].
pub(crate) fn decode_addr(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let ptr: *const libc::sockaddr_storage = ss;
    match ss.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, the
            // storage is large and aligned enough for one.
            let sin = unsafe { ptr.cast::<libc::sockaddr_in>().read() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6, the
            // storage is large and aligned enough for one.
            let sin6 = unsafe { ptr.cast::<libc::sockaddr_in6>().read() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            Some(match ip.to_ipv4_mapped() {
                Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
                None => SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    port,
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(a: &str, ipv6: bool) -> Option<SocketAddr> {
        // SAFETY: all-zero sockaddr_storage is valid.
        let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = encode_addr(a.parse().unwrap(), ipv6, &mut ss)?;
        decode_addr(&ss, len)
    }

    #[test]
    fn address_conversion() {
        let v4: SocketAddr = "198.18.1.2:51820".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::7]:443".parse().unwrap();
        assert_eq!(roundtrip("198.18.1.2:51820", true), Some(v4));
        assert_eq!(roundtrip("198.18.1.2:51820", false), Some(v4));
        assert_eq!(roundtrip("[2001:db8::7]:443", true), Some(v6));
        assert_eq!(roundtrip("[2001:db8::7]:443", false), None);
        assert_eq!(roundtrip("[::ffff:198.18.1.2]:51820", false), Some(v4));
        assert_eq!(roundtrip("[::ffff:198.18.1.2]:51820", true), Some(v4));
    }

    #[test]
    fn reachability_matches_encoding() {
        for (a, ipv6) in [
            ("198.18.1.2:1", false),
            ("198.18.1.2:1", true),
            ("[2001:db8::7]:1", false),
            ("[2001:db8::7]:1", true),
            ("[::ffff:198.18.1.2]:1", false),
        ] {
            // SAFETY: all-zero sockaddr_storage is valid.
            let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
            let addr: SocketAddr = a.parse().unwrap();
            assert_eq!(
                reachable(addr, ipv6),
                encode_addr(addr, ipv6, &mut ss).is_some(),
                "{a} ipv6={ipv6}"
            );
        }
    }
}
