//! A datagram's local address (`IP_PKTINFO` / `IPV6_PKTINFO`): the kernel
//! says which of our addresses a received datagram was sent to, and a sent
//! one leaves from the address we name, so a reply comes from where the
//! peer wrote to (WireGuard's sticky sockets; see braid-core's
//! `device/sticky.rs`).
//!
//! The dual-stack IPv6 socket gets `IPV6_PKTINFO` for IPv4 datagrams too,
//! with the address v4-mapped; for sending, Linux takes an `IPV6_PKTINFO`
//! with a v4-mapped address on the way to an IPv4 peer as well. An IPv4-only
//! socket uses `IP_PKTINFO`.

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::RawFd;

use braid_core::batch::LocalAddr;

use super::cmsg::find;
use crate::sys::setsockopt_int;

/// Control data of one sent message: a `UDP_SEGMENT` and a pktinfo.
pub(super) type SendCmsgBuf = [u64; 8];

/// Asks the kernel to attach the local address to every received datagram.
pub(super) fn enable(fd: RawFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)
    }
}

/// The local address a received message was sent to, from its control
/// data (`LocalAddr::NONE` when the kernel attached none).
pub(super) fn local_of(msg: &libc::msghdr) -> LocalAddr {
    let v6 = find::<libc::in6_pktinfo, _>(msg, libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, |data| {
        // SAFETY: an IPV6_PKTINFO message carries an in6_pktinfo (`find`
        // checked the length); read unaligned, CMSG_DATA promises nothing.
        let info: libc::in6_pktinfo = unsafe { std::ptr::read_unaligned(data.cast()) };
        let ip = Ipv6Addr::from(info.ipi6_addr.s6_addr);
        let ip = match ip.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(ip),
        };
        LocalAddr {
            ip: Some(ip),
            ifindex: info.ipi6_ifindex as u32,
        }
    });
    if let Some(local) = v6 {
        return local;
    }
    find::<libc::in_pktinfo, _>(msg, libc::IPPROTO_IP, libc::IP_PKTINFO, |data| {
        // SAFETY: as above, for IP_PKTINFO and its in_pktinfo.
        let info: libc::in_pktinfo = unsafe { std::ptr::read_unaligned(data.cast()) };
        LocalAddr {
            // The header's destination (ipi_spec_dst is the route's pick).
            ip: Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                info.ipi_addr.s_addr,
            )))),
            ifindex: info.ipi_ifindex as u32,
        }
    })
    .unwrap_or(LocalAddr::NONE)
}

/// Whether `local` can be said on a socket of this family: an IPv6
/// address only on an IPv6 socket.
pub(super) fn usable(local: LocalAddr, ipv6_socket: bool) -> bool {
    match local.ip {
        Some(IpAddr::V6(_)) => ipv6_socket,
        Some(IpAddr::V4(_)) => true,
        None => false,
    }
}

/// Points `msg` at `buf` holding a `UDP_SEGMENT` of `segment` bytes (when
/// given) and the pktinfo that makes it leave from `local` (when it has an
/// address, see [`usable`]).
pub(super) fn set_send_control(
    msg: &mut libc::msghdr,
    buf: &mut SendCmsgBuf,
    segment: Option<u16>,
    local: LocalAddr,
    ipv6_socket: bool,
) {
    let seg_len = mem::size_of::<u16>() as libc::c_uint;
    let info_len = if ipv6_socket {
        mem::size_of::<libc::in6_pktinfo>()
    } else {
        mem::size_of::<libc::in_pktinfo>()
    } as libc::c_uint;
    let with_local = usable(local, ipv6_socket);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let total = unsafe {
        segment.map_or(0, |_| libc::CMSG_SPACE(seg_len))
            + if with_local {
                libc::CMSG_SPACE(info_len)
            } else {
                0
            }
    };
    if total == 0 {
        msg.msg_control = std::ptr::null_mut();
        msg.msg_controllen = 0;
        return;
    }
    debug_assert!(total as usize <= mem::size_of::<SendCmsgBuf>());
    *buf = [0; 8];
    msg.msg_control = buf.as_mut_ptr().cast();
    msg.msg_controllen = total as _;
    // SAFETY: msg_control points at `buf`, aligned for cmsghdr and at least
    // msg_controllen bytes, which the CMSG_SPACE of every message written
    // below adds up to; CMSG_FIRSTHDR/CMSG_NXTHDR stay within it and each
    // header has room for its data.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        if let Some(segment) = segment {
            (*cmsg).cmsg_level = libc::SOL_UDP;
            (*cmsg).cmsg_type = libc::UDP_SEGMENT;
            (*cmsg).cmsg_len = libc::CMSG_LEN(seg_len) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment);
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
        if !with_local {
            return;
        }
        (*cmsg).cmsg_len = libc::CMSG_LEN(info_len) as _;
        match (local.ip, ipv6_socket) {
            (Some(ip), true) => {
                (*cmsg).cmsg_level = libc::IPPROTO_IPV6;
                (*cmsg).cmsg_type = libc::IPV6_PKTINFO;
                let addr = match ip {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let mut info: libc::in6_pktinfo = mem::zeroed();
                info.ipi6_addr.s6_addr = addr.octets();
                info.ipi6_ifindex = interface_for(addr, local.ifindex) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast(), info);
            }
            (Some(IpAddr::V4(v4)), false) => {
                (*cmsg).cmsg_level = libc::IPPROTO_IP;
                (*cmsg).cmsg_type = libc::IP_PKTINFO;
                let mut info: libc::in_pktinfo = mem::zeroed();
                info.ipi_spec_dst.s_addr = u32::from(v4).to_be();
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast(), info);
            }
            _ => {}
        }
    }
}

/// The interface to name with a source address: only a link-local IPv6
/// one needs it (the same fe80:: may be on every interface); for any other
/// the routing table picks the way, as it would for the address alone.
fn interface_for(addr: Ipv6Addr, ifindex: u32) -> u32 {
    if addr.segments()[0] & 0xffc0 == 0xfe80 {
        ifindex
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg_with(
        buf: &mut SendCmsgBuf,
        segment: Option<u16>,
        local: LocalAddr,
        v6: bool,
    ) -> libc::msghdr {
        // SAFETY: all-zero msghdr is valid (null pointers, zero lengths).
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        set_send_control(&mut msg, buf, segment, local, v6);
        msg
    }

    fn local(ip: &str, ifindex: u32) -> LocalAddr {
        LocalAddr {
            ip: Some(ip.parse().unwrap()),
            ifindex,
        }
    }

    #[test]
    fn what_is_written_reads_back() {
        // (socket is IPv6, local address, what comes back)
        let cases = [
            (true, local("198.18.0.20", 3), local("198.18.0.20", 0)),
            (true, local("2001:db8::20", 3), local("2001:db8::20", 0)),
            (true, local("fe80::1", 3), local("fe80::1", 3)),
            (false, local("198.18.0.20", 3), LocalAddr::NONE),
            (false, local("2001:db8::20", 3), LocalAddr::NONE),
            (true, LocalAddr::NONE, LocalAddr::NONE),
        ];
        for (i, (v6, l, back)) in cases.into_iter().enumerate() {
            for segment in [None, Some(1452)] {
                let mut buf = [0; 8];
                let msg = msg_with(&mut buf, segment, l, v6);
                // What is sent on an IPv4 socket is an IP_PKTINFO's
                // spec_dst, which local_of (reading ipi_addr) leaves out.
                if v6 || l.ip.is_none() {
                    assert_eq!(local_of(&msg), back, "case {i}, segment {segment:?}");
                }
                let seg = find::<u16, _>(&msg, libc::SOL_UDP, libc::UDP_SEGMENT, |d| {
                    // SAFETY: set_send_control wrote a u16 there.
                    unsafe { std::ptr::read_unaligned(d.cast::<u16>()) }
                });
                assert_eq!(seg, segment, "case {i}");
                let nothing = segment.is_none() && !usable(l, v6);
                assert_eq!(msg.msg_control.is_null(), nothing, "case {i}");
            }
        }
    }

    #[test]
    fn an_ipv4_socket_says_the_source_in_ip_pktinfo() {
        let mut buf = [0; 8];
        let msg = msg_with(&mut buf, Some(100), local("198.18.0.20", 7), false);
        let spec_dst = find::<libc::in_pktinfo, _>(&msg, libc::IPPROTO_IP, libc::IP_PKTINFO, |d| {
            // SAFETY: set_send_control wrote an in_pktinfo there.
            let info: libc::in_pktinfo = unsafe { std::ptr::read_unaligned(d.cast()) };
            (
                Ipv4Addr::from(u32::from_be(info.ipi_spec_dst.s_addr)),
                info.ipi_ifindex,
            )
        });
        assert_eq!(spec_dst, Some((Ipv4Addr::new(198, 18, 0, 20), 0)));
    }
}
