//! Least privilege. Once the TUN, the UDP sockets and the UAPI socket exist,
//! the daemon becomes an unprivileged user and keeps only the capabilities
//! its running work still needs ([`KEPT_CAPABILITIES`]); what only root may
//! do on the way down is left to the [`super::guardian`]. Also the check that
//! a file holding a private key is not open to other users.

use std::ffi::CString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The user a daemon started as root becomes, unless told otherwise.
pub const DEFAULT_USER: &str = "nobody";

// Capability numbers from <linux/capability.h>.
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_NET_ADMIN: u32 = 12;

/// What the daemon still does after the drop, and the capability each needs:
/// - CAP_NET_ADMIN: `fwmark` set over the UAPI (SO_MARK), the forced receive
///   buffer of a socket re-bound for a new `listen-port` (SO_RCVBUFFORCE),
///   MTU changes, and removing its policy routing rules on the way down.
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

/// Whether, and to whom, the daemon gives up root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Privileges {
    /// Stay as started (`--keep-root`, or not started as root).
    Keep,
    /// Become this user (name from the passwd database).
    DropTo(String),
}

impl Privileges {
    /// The policy for a daemon: drop to `user` (default [`DEFAULT_USER`])
    /// when running as root, unless `keep_root`.
    pub fn choose(user: Option<&str>, keep_root: bool) -> Privileges {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if keep_root || !root {
            Privileges::Keep
        } else {
            Privileges::DropTo(user.unwrap_or(DEFAULT_USER).to_string())
        }
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

/// Becomes `target` for good, keeping only [`KEPT_CAPABILITIES`] (effective
/// and permitted; CAP_NET_ADMIN also inheritable and ambient for the `ip`
/// commands netcfg runs; nothing regainable: the bounding set loses the
/// rest and no-new-privs is set).
///
/// Threads that already exist change user with the process (glibc applies
/// setuid to every thread) but lose all their capabilities; threads started
/// afterwards inherit the kept ones from this thread.
pub fn drop_to(target: Target) -> io::Result<()> {
    let kept = kept_mask();
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

/// Why a file with these permission bits must not hold a private key, or
/// `None` if it may. Any access by group or others counts: a group-writable
/// config can be made to route traffic anywhere.
pub fn shared_mode_problem(mode: u32, path: &Path) -> Option<String> {
    let mode = mode & 0o7777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "open to group or others (mode {mode:04o}), and it holds a private key; \
             braid refuses it: fix with `chmod 600 {}`",
            path.display()
        )
    })
}

/// Refuses a regular file that group or others may read or write (pipes
/// such as `/dev/stdin` are not checked: they are nobody else's).
pub fn check_private_file(path: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Ok(());
    }
    match shared_mode_problem(meta.permissions().mode(), path) {
        Some(problem) => Err(io::Error::new(io::ErrorKind::PermissionDenied, problem)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_modes_pass() {
        for mode in [0o600, 0o400, 0o700, 0o100600, 0o4600] {
            assert_eq!(
                shared_mode_problem(mode, Path::new("/x.conf")),
                None,
                "{mode:o}"
            );
        }
    }

    #[test]
    fn shared_modes_are_refused_with_the_fix() {
        for mode in [0o640, 0o604, 0o644, 0o620, 0o602, 0o660, 0o666, 0o100644] {
            let msg = shared_mode_problem(mode, Path::new("/etc/wireguard/wg0.conf"))
                .unwrap_or_else(|| panic!("mode {mode:o} accepted"));
            assert!(msg.contains("group or others"), "{msg}");
            assert!(msg.contains("chmod 600 /etc/wireguard/wg0.conf"), "{msg}");
            assert!(msg.contains(&format!("{:04o}", mode & 0o7777)), "{msg}");
        }
    }

    #[test]
    fn check_reads_the_file_mode() {
        let dir = std::env::temp_dir().join(format!("braid-priv-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("k.conf");
        std::fs::write(&path, "x").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = check_private_file(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_private_file(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kept_mask_is_net_admin_and_bind_service() {
        assert_eq!(kept_mask(), 0x1400);
    }

    #[test]
    fn choose_keeps_when_asked() {
        assert_eq!(Privileges::choose(Some("x"), true), Privileges::Keep);
    }
}
