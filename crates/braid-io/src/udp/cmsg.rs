//! Control messages: the receive timestamp and GRO segment size the kernel
//! attaches to a received datagram, and the GSO segment size we attach to a
//! sent one.

use std::mem;
use std::time::{Duration, SystemTime};

/// A control-message buffer; u64 elements keep it aligned for `cmsghdr`.
/// Room for a timestamp (32 bytes) and a GRO segment size (24 bytes).
pub(super) type CmsgBuf = [u64; 12];

/// Room for the one `UDP_SEGMENT` control message of a sent message.
pub(super) type SegmentCmsgBuf = [u64; 4];

/// The SCM_TIMESTAMPNS arrival time in a received message's control data
/// (for callers that run recvmmsg themselves, like the netem benchmark).
pub fn arrival_time(msg: &libc::msghdr) -> Option<SystemTime> {
    find(msg, libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, |data| {
        // SAFETY: the data of an SCM_TIMESTAMPNS message is a timespec;
        // read unaligned because CMSG_DATA promises no alignment.
        let ts: libc::timespec = unsafe { std::ptr::read_unaligned(data.cast()) };
        SystemTime::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    })
}

/// The size of the datagrams a GRO-coalesced message was built from (the
/// last one may be shorter); `None` when the message is one datagram.
pub(super) fn gro_segment(msg: &libc::msghdr) -> Option<usize> {
    find(msg, libc::SOL_UDP, libc::UDP_GRO, |data| {
        // SAFETY: the kernel writes the segment size of a UDP_GRO message
        // as an int.
        let size: libc::c_int = unsafe { std::ptr::read_unaligned(data.cast()) };
        size.max(0) as usize
    })
    .filter(|&s| s > 0)
}

/// Points `msg` at `buf` holding one `UDP_SEGMENT` message: the kernel cuts
/// the payload into datagrams of `segment` bytes (the last may be shorter).
pub(super) fn set_segment(msg: &mut libc::msghdr, buf: &mut SegmentCmsgBuf, segment: u16) {
    let data_len = mem::size_of::<u16>() as libc::c_uint;
    msg.msg_control = buf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as usize;
    debug_assert!(msg.msg_controllen <= mem::size_of::<SegmentCmsgBuf>());
    // SAFETY: msg_control points at `buf`, which is at least
    // msg_controllen bytes and aligned for cmsghdr, so CMSG_FIRSTHDR returns
    // a valid, writable header with room for a u16 of data behind it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(msg);
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = libc::UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment);
    }
}

/// Runs `read` on the data of the first control message of `level`/`kind`.
fn find<T>(
    msg: &libc::msghdr,
    level: libc::c_int,
    kind: libc::c_int,
    read: impl FnOnce(*const u8) -> T,
) -> Option<T> {
    if msg.msg_control.is_null() {
        return None;
    }
    // SAFETY: `msg` was filled by recvmsg/recvmmsg with a control buffer the
    // caller owns; the CMSG_* helpers stay within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == level && (*cmsg).cmsg_type == kind {
                return Some(read(libc::CMSG_DATA(cmsg)));
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_cmsg_reads_back() {
        // SAFETY: all-zero msghdr is valid (null pointers, zero lengths).
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        let mut buf: SegmentCmsgBuf = [0; 4];
        set_segment(&mut msg, &mut buf, 1452);
        let got = find(&msg, libc::SOL_UDP, libc::UDP_SEGMENT, |d| {
            // SAFETY: set_segment wrote a u16 there.
            unsafe { std::ptr::read_unaligned(d.cast::<u16>()) }
        });
        assert_eq!(got, Some(1452));
        assert_eq!(gro_segment(&msg), None);
        assert_eq!(arrival_time(&msg), None);
    }
}
