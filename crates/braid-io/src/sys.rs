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
