//! Least privilege. Once the TUN, the UDP sockets and the UAPI socket exist,
//! the daemon becomes an unprivileged user and keeps only the capabilities
//! its running work still needs ([`KEPT_CAPABILITIES`]); what only root may
//! do on the way down is left to the [`super::guardian`].

use std::ffi::CString;
use std::io;

/// The user a daemon started as root becomes, unless told otherwise: a
/// system user of braid's own, which no other process runs as.
pub const DEFAULT_USER: &str = "braid";

/// The user taken when [`DEFAULT_USER`] does not exist (with a warning).
pub const FALLBACK_USER: &str = "nobody";

/// How to create [`DEFAULT_USER`].
pub const CREATE_USER: &str = "useradd --system --no-create-home --shell /usr/sbin/nologin braid";

// Capability numbers from <linux/capability.h>.
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_NICE: u32 = 23;

/// Kept besides [`KEPT_CAPABILITIES`] when `RealtimePriority =` is set and
/// the process's RLIMIT_RTPRIO could not be raised (no CAP_SYS_RESOURCE,
/// as in many containers): the data-plane threads started after the drop
/// need it to enter the real-time class. Effective and permitted only.
pub const REALTIME_CAPABILITY: (u32, &str) = (CAP_SYS_NICE, "CAP_SYS_NICE");

/// What the daemon still does after the drop, and the capability each needs:
/// - CAP_NET_ADMIN: `fwmark` set over the UAPI (SO_MARK), the forced receive
///   buffer of a socket re-bound for a new `listen-port` (SO_RCVBUFFORCE),
///   MTU changes, and removing its policy routing rules and fail-closed
///   routes on the way down.
/// - CAP_NET_BIND_SERVICE: a `listen-port` below 1024 set over the UAPI.
///
/// netcfg changes routes, rules and MTUs by running `ip`, so CAP_NET_ADMIN
/// is also ambient (passed on to those commands); CAP_NET_BIND_SERVICE is not.
///
/// Not kept: CAP_NET_RAW (SO_BINDTODEVICE of `bind=` lines happens at
/// start-up only), CAP_DAC_OVERRIDE (the UAPI socket is already bound),
/// CAP_SETUID and everything else.
pub const KEPT_CAPABILITIES: [(u32, &str); 2] = [
    (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
    (CAP_NET_BIND_SERVICE, "CAP_NET_BIND_SERVICE"),
];

/// Kept capabilities that commands run by the daemon (`ip`) inherit.
pub const AMBIENT_MASK: u64 = 1 << CAP_NET_ADMIN;

/// The kept capabilities as the bit mask `/proc/PID/status` shows (CapEff).
pub fn kept_mask() -> u64 {
    KEPT_CAPABILITIES.iter().fold(0, |m, (c, _)| m | 1 << c)
}

/// The names of what [`drop_to`] keeps, for the log.
pub fn kept_names(realtime: bool) -> Vec<&'static str> {
    let mut names: Vec<&str> = KEPT_CAPABILITIES.iter().map(|c| c.1).collect();
    if realtime {
        names.push(REALTIME_CAPABILITY.1);
    }
    names
}

/// Whether, and to whom, the daemon gives up root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Privileges {
    /// Stay as started (`--keep-root`, or not started as root).
    Keep,
    /// Become this user (name from the passwd database).
    DropTo(String),
}

impl Privileges {
    /// The policy for a daemon: drop to `user` when running as root, unless
    /// `keep_root`; without `user`, to [`DEFAULT_USER`] if it exists, else
    /// to [`FALLBACK_USER`], with a warning to show the operator.
    pub fn choose(user: Option<&str>, keep_root: bool) -> (Privileges, Option<String>) {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        Self::choose_with(root, user, keep_root, |u| lookup_user(u).is_ok())
    }

    /// [`Privileges::choose`] with the facts it depends on passed in.
    pub fn choose_with(
        root: bool,
        user: Option<&str>,
        keep_root: bool,
        user_exists: impl Fn(&str) -> bool,
    ) -> (Privileges, Option<String>) {
        if keep_root || !root {
            return (Privileges::Keep, None);
        }
        if let Some(user) = user {
            return (Privileges::DropTo(user.to_string()), None);
        }
        if user_exists(DEFAULT_USER) {
            return (Privileges::DropTo(DEFAULT_USER.to_string()), None);
        }
        let warning = format!(
            "warning: no user {DEFAULT_USER:?}, so the daemon runs as {FALLBACK_USER:?}; any other \
             process running as {FALLBACK_USER} can signal it, and killing it takes the tunnel \
             down. Create a dedicated user with `{CREATE_USER}` (or pick one with --user)"
        );
        (Privileges::DropTo(FALLBACK_USER.to_string()), Some(warning))
    }
}

/// A user to become: numeric ids resolved before anything is created, so an
/// unknown name fails early.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// Looks `user` up in the passwd database.
pub fn lookup_user(user: &str) -> io::Result<Target> {
    let c_user = CString::new(user)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "user name contains NUL"))?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter for getpwnam_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives it.
    let rc = unsafe {
        libc::getpwnam_r(
            c_user.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "cannot run as user {user:?}: no such user (pick another with --user, or --keep-root)"
            ),
        ));
    }
    if pwd.pw_uid == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("user {user:?} is root (uid 0): that drops no privilege; use --keep-root"),
        ));
    }
    Ok(Target {
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("dropping privileges: {what}: {e}"),
        ));
    }
    Ok(())
}

fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// Becomes `target` for good, keeping only [`KEPT_CAPABILITIES`], and
/// [`REALTIME_CAPABILITY`] if `realtime` (effective and permitted; CAP_NET_ADMIN also inheritable and ambient for the `ip`
/// commands netcfg runs; nothing regainable: the bounding set loses the
/// rest and no-new-privs is set).
///
/// Threads that already exist change user with the process (glibc and musl
/// apply setuid to every thread) but lose all their capabilities; threads
/// started afterwards inherit the kept ones from this thread. The one
/// exception is a user-mode emulator's own thread (qemu-user's, see
/// [`crate::threads`]): qemu passes the guest's setuid on as the per-thread
/// system call, so that thread stays root. qemu-user is for tests; the
/// guest shares its address space with the emulator anyway.
pub fn drop_to(target: Target, realtime: bool) -> io::Result<()> {
    let kept = kept_mask()
        | if realtime {
            1 << REALTIME_CAPABILITY.0
        } else {
            0
        };
    for cap in 0..=last_capability() {
        if kept & (1 << cap) == 0 {
            // SAFETY: prctl with integer arguments only.
            let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
            // EINVAL: the kernel knows fewer capabilities than it claimed.
            if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
                check(rc, "PR_CAPBSET_DROP")?;
            }
        }
    }
    // SAFETY: prctl with integer arguments only.
    check(
        unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) },
        "PR_SET_KEEPCAPS",
    )?;
    // SAFETY: one valid gid in a one-element array.
    check(unsafe { libc::setgroups(1, &target.gid) }, "setgroups")?;
    // SAFETY: plain id-setting calls.
    check(unsafe { libc::setgid(target.gid) }, "setgid")?;
    // SAFETY: as above.
    check(unsafe { libc::setuid(target.uid) }, "setuid")?;
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    for (i, word) in data.iter_mut().enumerate() {
        let bits = (kept >> (32 * i)) as u32;
        word.effective = bits;
        word.permitted = bits;
        word.inheritable = (AMBIENT_MASK >> (32 * i)) as u32;
    }
    // SAFETY: capset reads a v3 header and two data words, both valid here.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) }
        as libc::c_int;
    check(rc, "capset")?;
    // SAFETY: prctl with integer arguments only.
    check(
        unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                CAP_NET_ADMIN as libc::c_ulong,
                0,
                0,
            )
        },
        "PR_CAP_AMBIENT_RAISE CAP_NET_ADMIN",
    )?;
    // SAFETY: prctl with integer arguments only.
    check(
        unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) },
        "PR_SET_KEEPCAPS",
    )?;
    // SAFETY: as above.
    check(
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) },
        "PR_SET_NO_NEW_PRIVS",
    )?;
    // SAFETY: setuid(0) must now fail; if it succeeds the drop did not hold.
    if unsafe { libc::setuid(0) } == 0 {
        return Err(io::Error::other(
            "dropping privileges: root could be regained after setuid",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_mask_is_net_admin_and_bind_service() {
        assert_eq!(kept_mask(), 0x1400);
    }

    #[test]
    fn choose_keeps_when_asked() {
        assert_eq!(Privileges::choose(Some("x"), true).0, Privileges::Keep);
        let any = |_: &str| true;
        assert_eq!(
            Privileges::choose_with(true, None, true, any),
            (Privileges::Keep, None)
        );
        // Not root: nothing to drop.
        assert_eq!(
            Privileges::choose_with(false, None, false, any),
            (Privileges::Keep, None)
        );
    }

    #[test]
    fn choose_prefers_the_dedicated_user() {
        let drop_to = |u: &str| Privileges::DropTo(u.to_string());
        assert_eq!(
            Privileges::choose_with(true, None, false, |u| u == "braid"),
            (drop_to("braid"), None)
        );
        // No user braid: nobody, with a warning that says why and how.
        let (p, warning) = Privileges::choose_with(true, None, false, |u| u == "nobody");
        assert_eq!(p, drop_to("nobody"));
        let warning = warning.expect("a warning for the fallback");
        assert!(warning.contains("can signal it"), "{warning}");
        assert!(warning.contains(CREATE_USER), "{warning}");
        // --user wins, without a warning, whether or not braid exists.
        for exists in [true, false] {
            assert_eq!(
                Privileges::choose_with(true, Some("nobody"), false, |_| exists),
                (drop_to("nobody"), None)
            );
            assert_eq!(
                Privileges::choose_with(true, Some("svc"), false, |_| exists),
                (drop_to("svc"), None)
            );
        }
    }
}
