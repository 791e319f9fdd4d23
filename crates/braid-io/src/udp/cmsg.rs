//! Control messages: the receive timestamp and GRO segment size the kernel
//! attaches to a received datagram (what is attached to a sent one, and
//! the local address, are in `pktinfo.rs`).

use std::mem;
use std::time::{Duration, SystemTime};

/// A control-message buffer; u64 elements keep it aligned for `cmsghdr`.
/// Room for a timestamp (32 bytes), a GRO segment size (24 bytes) and the
/// local address (40 bytes), with some to spare.
pub(super) type CmsgBuf = [u64; 16];

/// The SCM_TIMESTAMPNS arrival time in a received message's control data
/// (for callers that run recvmmsg themselves, like the netem benchmark).
pub fn arrival_time(msg: &libc::msghdr) -> Option<SystemTime> {
    find::<libc::timespec, _>(msg, libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, |data| {
        // SAFETY: the data of an SCM_TIMESTAMPNS message is a timespec
        // (`find` checked it is that long); read unaligned because
        // CMSG_DATA promises no alignment.
        let ts: libc::timespec = unsafe { std::ptr::read_unaligned(data.cast()) };
        timespec_to_time(ts.tv_sec, ts.tv_nsec)
    })
    .flatten()
}

/// A wall-clock time from a timespec's fields; `None` for what no clock
/// reading is (before 1970, nanoseconds outside 0..1e9, past what
/// `SystemTime` holds), where plain casts and `+` would wrap or panic.
/// Generic over the fields' types, which differ between libcs (musl's
/// `time_t` is 64 bits even on 32-bit targets, glibc's follows the word).
fn timespec_to_time(sec: impl TryInto<u64>, nsec: impl TryInto<u32>) -> Option<SystemTime> {
    let sec: u64 = sec.try_into().ok()?;
    let nsec = nsec.try_into().ok().filter(|&n| n < 1_000_000_000)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(sec, nsec))
}

/// The size of the datagrams a GRO-coalesced message was built from (the
/// last one may be shorter); `None` when the message is one datagram.
pub(super) fn gro_segment(msg: &libc::msghdr) -> Option<usize> {
    find::<libc::c_int, _>(msg, libc::SOL_UDP, libc::UDP_GRO, |data| {
        // SAFETY: the kernel writes the segment size of a UDP_GRO message
        // as an int.
        let size: libc::c_int = unsafe { std::ptr::read_unaligned(data.cast()) };
        size.max(0) as usize
    })
    .filter(|&s| s > 0)
}

/// Runs `read` on the data of the first control message of `level`/`kind`,
/// if that message carries at least a `D` (a shorter one is ignored: its
/// data would be read past its end).
pub(super) fn find<D, T>(
    msg: &libc::msghdr,
    level: libc::c_int,
    kind: libc::c_int,
    read: impl FnOnce(*const u8) -> T,
) -> Option<T> {
    if msg.msg_control.is_null() {
        return None;
    }
    // A control message's data is a few bytes: its size fits a c_uint.
    // SAFETY: CMSG_LEN is a pure size computation.
    let needed = unsafe { libc::CMSG_LEN(mem::size_of::<D>() as libc::c_uint) } as usize;
    // SAFETY: `msg` was filled by recvmsg/recvmmsg with a control buffer the
    // caller owns; the CMSG_* helpers stay within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == level && (*cmsg).cmsg_type == kind {
                if ((*cmsg).cmsg_len as usize) < needed {
                    return None;
                }
                return Some(read(libc::CMSG_DATA(cmsg)));
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

#[cfg(test)]
mod extremes {
    use super::*;

    /// A control buffer holding one message of `level`/`kind` whose header
    /// claims `cmsg_len` bytes, its data `data`.
    fn message(
        level: libc::c_int,
        kind: libc::c_int,
        data: &[u8],
        cmsg_len: usize,
    ) -> ([u64; 12], usize) {
        let mut buf = [0u64; 12];
        let hdr = mem::size_of::<libc::cmsghdr>();
        // SAFETY: `buf` is 96 bytes, aligned for cmsghdr, and the header
        // plus the (at most 24 bytes of) data fit in it.
        unsafe {
            let cmsg = buf.as_mut_ptr().cast::<libc::cmsghdr>();
            (*cmsg).cmsg_level = level;
            (*cmsg).cmsg_type = kind;
            (*cmsg).cmsg_len = cmsg_len as _;
            let at = buf.as_mut_ptr().cast::<u8>().add(hdr);
            std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len());
        }
        (buf, mem::size_of_val(&buf))
    }

    fn msghdr(buf: &mut [u64; 12], controllen: usize) -> libc::msghdr {
        // SAFETY: all-zero msghdr is valid (null pointers, zero lengths).
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_control = buf.as_mut_ptr().cast();
        msg.msg_controllen = controllen as _;
        msg
    }

    fn timespec_bytes(sec: i64, nsec: i64) -> Vec<u8> {
        // SAFETY: all-zero timespec is valid (musl's has padding on
        // 32-bit targets, so it cannot be written as a literal there).
        let mut ts: libc::timespec = unsafe { mem::zeroed() };
        ts.tv_sec = crate::sys::kernel_int(sec);
        ts.tv_nsec = crate::sys::kernel_int(nsec);
        // SAFETY: timespec is plain data of its size.
        unsafe {
            std::slice::from_raw_parts(
                (&ts as *const libc::timespec).cast::<u8>(),
                mem::size_of_val(&ts),
            )
        }
        .to_vec()
    }

    fn stamp(sec: i64, nsec: i64) -> Option<SystemTime> {
        let data = timespec_bytes(sec, nsec);
        // SAFETY: CMSG_LEN is a pure size computation.
        let full = unsafe { libc::CMSG_LEN(data.len() as libc::c_uint) } as usize;
        let (mut buf, len) = message(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &data, full);
        arrival_time(&msghdr(&mut buf, len))
    }

    #[test]
    fn arrival_times_at_the_extremes_are_none_not_a_panic() {
        assert_eq!(
            stamp(5, 7),
            Some(SystemTime::UNIX_EPOCH + Duration::new(5, 7))
        );
        assert_eq!(
            stamp(0, 999_999_999),
            Some(SystemTime::UNIX_EPOCH + Duration::new(0, 999_999_999))
        );
        assert_eq!(stamp(-1, 0), None, "before 1970");
        assert_eq!(stamp(5, 1_000_000_000), None, "nanoseconds past a second");
        assert_eq!(stamp(5, -1), None);
        // The latest a timespec can say on this target (time_t is 32 bits
        // on 32-bit glibc): SystemTime holds it on Linux, and checked_add
        // would refuse rather than wrap where it did not. musl marks
        // time_t deprecated (its width changed in 1.2); the test wants
        // whatever it is here.
        #[allow(deprecated)]
        let latest: i64 = crate::sys::kernel_int(libc::time_t::MAX);
        assert!(stamp(latest, 999_999_999).is_some());
    }

    #[test]
    fn a_control_message_shorter_than_its_data_is_ignored() {
        let data = 1400i32.to_ne_bytes();
        // SAFETY: CMSG_LEN is a pure size computation.
        let full = unsafe { libc::CMSG_LEN(4) } as usize;
        let (mut buf, len) = message(libc::SOL_UDP, libc::UDP_GRO, &data, full);
        assert_eq!(gro_segment(&msghdr(&mut buf, len)), Some(1400));
        let (mut buf, len) = message(libc::SOL_UDP, libc::UDP_GRO, &data, full - 1);
        assert_eq!(gro_segment(&msghdr(&mut buf, len)), None);
        // A segment size of 0 or below is no segment size.
        for bad in [0i32, -1, i32::MIN] {
            let (mut buf, len) = message(libc::SOL_UDP, libc::UDP_GRO, &bad.to_ne_bytes(), full);
            assert_eq!(gro_segment(&msghdr(&mut buf, len)), None, "{bad}");
        }
        // A timestamp cut short (by a byte) is no timestamp.
        let ts = timespec_bytes(5, 7);
        // SAFETY: CMSG_LEN is a pure size computation.
        let short = unsafe { libc::CMSG_LEN((ts.len() - 1) as libc::c_uint) } as usize;
        let (mut buf, len) = message(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &ts, short);
        assert_eq!(arrival_time(&msghdr(&mut buf, len)), None);
    }
}
