//! The few helpers every system call here goes through: errno to
//! `io::Error`, socket options, memory advice. A leaf: the modules that make
//! the calls import it, so none reaches back into the crate root.

/// Returns the current `errno` as an `io::Error`.
pub(crate) fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Converts a `-1`-on-error libc return value into an `io::Result`.
pub(crate) fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret == -1 {
        Err(last_error())
    } else {
        Ok(ret)
    }
}

/// Sets an integer socket option on `fd`.
pub fn setsockopt_int(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Asks the kernel to back `region` (a batch's
/// [`huge_page_region`](braid_core::batch::PacketBatch::huge_page_region))
/// with transparent huge pages, which Debian's default (`madvise`) only
/// does when asked. It is advice: a kernel without them (`EINVAL`) leaves
/// the memory as it was, and the caller may ignore the error.
pub fn advise_huge_pages(region: &mut [u8]) -> std::io::Result<()> {
    if region.is_empty() {
        return Ok(());
    }
    // SAFETY: the range is memory this process owns (a live mutable
    // slice); MADV_HUGEPAGE changes how it is backed, never its contents.
    cvt(unsafe {
        libc::madvise(
            region.as_mut_ptr().cast(),
            region.len(),
            libc::MADV_HUGEPAGE,
        )
    })
    .map(drop)
}

/// `value` in the integer type a kernel-facing field or argument has in
/// this target's libc, which is not the same everywhere: `msg_controllen`
/// and `cmsg_len` are `size_t` in glibc and `socklen_t` in musl,
/// `msg_iovlen` is `size_t` in glibc and `int` in musl, the flags of
/// `recvmmsg`/`sendmmsg` are `int` in glibc and `unsigned` in musl, and the
/// request of `ioctl` is `unsigned long` in glibc and `int` in musl. The
/// values braid passes there are small (a control buffer's size, a batch's
/// count, a flag, an ioctl number), so one that does not fit is a bug, and
/// it panics rather than being silently cut as a cast would.
pub fn kernel_int<T: TryFrom<U>, U: Copy + std::fmt::Debug>(value: U) -> T {
    match T::try_from(value) {
        Ok(v) => v,
        Err(_) => panic!(
            "{value:?} does not fit the {} the kernel interface takes here",
            std::any::type_name::<T>()
        ),
    }
}

/// `d` as a `timespec`, field by field: musl's has padding on 32-bit
/// targets (no struct literal) and its `time_t` is 64 bits where glibc's
/// may be 32. Seconds past what `time_t` holds become 68 years, which is
/// forever to every caller here.
pub fn timespec_of(d: std::time::Duration) -> libc::timespec {
    // SAFETY: all-zero timespec is valid.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    ts.tv_sec = d
        .as_secs()
        .try_into()
        .unwrap_or_else(|_| kernel_int(i32::MAX));
    // Below 10^9: fits every target's c_long.
    ts.tv_nsec = d.subsec_nanos() as libc::c_long;
    ts
}

/// The text of a NUL-terminated `c_char` array such as `ifr_name`; a
/// `c_char` is signed on x86 and unsigned on ARM, a byte either way.
pub(crate) fn c_chars_to_string(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Like [`cvt`] for `ssize_t` results (read/write).
pub(crate) fn cvt_size(ret: libc::ssize_t) -> std::io::Result<usize> {
    if ret < 0 {
        Err(last_error())
    } else {
        Ok(ret as usize)
    }
}

/// Ties socket `fd` to interface `dev` (SO_BINDTODEVICE): what it sends
/// leaves through that interface whatever the routing table prefers.
pub(crate) fn bind_to_device(fd: std::os::fd::RawFd, dev: &str) -> std::io::Result<()> {
    // SAFETY: passes the interface name bytes and their exact length.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            dev.as_ptr().cast(),
            dev.len() as libc::socklen_t,
        )
    })
    .map(drop)
}
