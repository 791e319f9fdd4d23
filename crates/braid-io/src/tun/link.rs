//! The TUN's interface wherever it lives now.
//!
//! `ip link set NAME netns OTHER` moves the interface to another network
//! namespace while the daemon, its UDP sockets and its descriptor of the
//! TUN stay where they were (wireguard.com/netns). From then on the name
//! means nothing in the daemon's namespace; the descriptor still knows the
//! device:
//! - `TUNGETIFF` gives its current name (it follows renames and moves) and
//!   fails with `EBADFD` once the interface was deleted, wherever;
//! - `TUNGETDEVNETNS` gives a descriptor of the namespace it is in now.
//!
//! With those, [`Tun::link_state`] asks rtnetlink about the interface in its
//! current namespace. A namespace other than the daemon's is reached by its
//! id as the daemon's namespace knows it (`RTM_GETNSID`, assigning one with
//! `RTM_NEWNSID` if there is none yet; the kernel assigns one itself when
//! an interface leaves for that namespace) and `IFLA_TARGET_NETNSID` on the
//! `RTM_GETLINK`. That needs only `CAP_NET_ADMIN`, which the daemon keeps
//! after giving up root, and no `setns` (which needs `CAP_SYS_ADMIN`).
//!
//! No descriptor of the other namespace and no socket in it is kept between
//! calls: either would keep the namespace alive after `ip netns del`, and
//! with it the interface, which the kernel deletes when its namespace goes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::Tun;

// rtnetlink numbers from <linux/rtnetlink.h>, <linux/if_link.h> and
// <linux/net_namespace.h>.
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_TARGET_NETNSID: u16 = 46;
const NETNSA_NSID: u16 = 1;
const NETNSA_FD: u16 = 3;
const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const RTGENMSG_LEN: usize = 4;
const NSID_NOT_ASSIGNED: i32 = -1;

/// What the kernel says about the TUN's interface now; see
/// [`Tun::link_state`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkState {
    /// Its name now (in the namespace it is in).
    pub name: String,
    /// Its index in that namespace (a move may change it).
    pub index: u32,
    pub mtu: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// `None`: in the daemon's own namespace; else the id the daemon's
    /// namespace has for the one it is in.
    pub netns_id: Option<i32>,
}

/// Whether `e`, from a TUN read, write or ioctl, says the interface is gone:
/// the kernel detaches the descriptor when the interface is deleted (in
/// whatever namespace), and every call on it fails with `EBADFD` from then.
pub fn is_removed_error(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EBADFD)
}

impl Tun {
    /// The interface's current name (`TUNGETIFF`): it follows renames and
    /// moves to other namespaces. `EBADFD` once the interface was deleted.
    pub fn current_name(&self) -> io::Result<String> {
        // SAFETY: ifreq is plain old data; all-zero bytes are valid.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        // SAFETY: TUNGETIFF writes one `struct ifreq` through the pointer,
        // which points at `ifr` for the duration of the call.
        crate::sys::cvt(unsafe { libc::ioctl(self.as_raw_fd(), libc::TUNGETIFF, &mut ifr) })?;
        Ok(crate::sys::c_chars_to_string(&ifr.ifr_name))
    }

    /// Whether the interface was deleted (the descriptor is detached).
    pub fn removed(&self) -> bool {
        matches!(self.current_name(), Err(e) if is_removed_error(&e))
    }

    /// A descriptor of the network namespace the interface is in now
    /// (`TUNGETDEVNETNS`, Linux 5.2+; needs `CAP_NET_ADMIN` there). Keep
    /// it only briefly: it keeps that namespace alive.
    pub fn netns(&self) -> io::Result<OwnedFd> {
        // SAFETY: TUNGETDEVNETNS takes no argument and returns a new fd.
        let fd =
            crate::sys::cvt(unsafe { libc::ioctl(self.as_raw_fd(), libc::TUNGETDEVNETNS, 0) })?;
        // SAFETY: the kernel just returned this descriptor; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Whether the interface is in the daemon's (this thread's) namespace.
    pub fn in_own_netns(&self) -> io::Result<bool> {
        let ns = self.netns()?;
        same_file(ns.as_raw_fd(), "/proc/thread-self/ns/net")
    }

    /// Name, index, MTU and up state of the interface, asked in the
    /// namespace it is in now (see the module documentation). An error
    /// for which [`is_removed_error`] holds means the interface is gone.
    pub fn link_state(&self) -> io::Result<LinkState> {
        let name = self.current_name()?;
        let ns = self.netns()?;
        let own = same_file(ns.as_raw_fd(), "/proc/thread-self/ns/net")?;
        let mut nl = Rtnl::open()?;
        let netns_id = if own {
            None
        } else {
            Some(nl.netns_id(ns.as_raw_fd())?)
        };
        drop(ns);
        let mut state = nl.get_link(&name, netns_id)?;
        state.netns_id = netns_id;
        Ok(state)
    }

    /// Sets the interface's MTU in the namespace it is in now. In another
    /// namespace this enters it in a short-lived thread (`setns`), which
    /// needs `CAP_SYS_ADMIN`: a daemon that gave up root cannot, and gets
    /// an error saying so.
    pub fn set_mtu(&self, mtu: u32) -> io::Result<()> {
        let name = self.current_name()?;
        let ns = self.netns()?;
        if same_file(ns.as_raw_fd(), "/proc/thread-self/ns/net")? {
            return set_mtu_here(&name, mtu);
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: setns with a namespace descriptor we own; it only
                // changes this (short-lived) thread's network namespace.
                crate::sys::cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) })
                    .map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!(
                                "entering the network namespace of {name} to set its MTU: {e} \
                                 (needs CAP_SYS_ADMIN; the daemon runs without root)"
                            ),
                        )
                    })?;
                set_mtu_here(&name, mtu)
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("MTU thread panicked")))
        })
    }
}

/// Whether descriptor `fd` and the file at `path` are the same (namespace)
/// file.
fn same_file(fd: RawFd, path: &str) -> io::Result<bool> {
    // SAFETY: stat is plain old data.
    let mut a: libc::stat = unsafe { std::mem::zeroed() };
    let mut b: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat into `a`, which outlives the call.
    crate::sys::cvt(unsafe { libc::fstat(fd, &mut a) })?;
    let c = std::ffi::CString::new(path).map_err(io::Error::other)?;
    // SAFETY: a NUL-terminated path and a stat that outlives the call.
    crate::sys::cvt(unsafe { libc::stat(c.as_ptr(), &mut b) })?;
    Ok(a.st_dev == b.st_dev && a.st_ino == b.st_ino)
}

/// `SIOCSIFMTU` on interface `name` of this thread's namespace.
fn set_mtu_here(name: &str, mtu: u32) -> io::Result<()> {
    // SAFETY: socket with constant arguments.
    let fd = crate::sys::cvt(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: just created, owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all-zero bytes are valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in ifr.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = src as libc::c_char;
    }
    ifr.ifr_ifru.ifru_mtu = i32::try_from(mtu).map_err(io::Error::other)?;
    // SAFETY: SIOCSIFMTU reads one `struct ifreq`, which `ifr` is.
    crate::sys::cvt(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            crate::sys::kernel_int(libc::SIOCSIFMTU),
            &ifr,
        )
    })
    .map(drop)
    .map_err(|e| io::Error::new(e.kind(), format!("setting the MTU of {name} to {mtu}: {e}")))
}

/// A NETLINK_ROUTE socket in the daemon's namespace, for one query.
struct Rtnl {
    fd: OwnedFd,
    seq: u32,
}

impl Rtnl {
    fn open() -> io::Result<Rtnl> {
        // SAFETY: socket with constant arguments.
        let fd = crate::sys::cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        })?;
        // SAFETY: just created, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Bounded: the kernel answers at once, but never wait forever.
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: a timeval and its exact size.
        crate::sys::cvt(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
        Ok(Rtnl { fd, seq: 0 })
    }

    /// The id this namespace has for the namespace `ns` (assigned if none).
    fn netns_id(&mut self, ns: RawFd) -> io::Result<i32> {
        let fd = u32::try_from(ns).map_err(io::Error::other)?;
        let id = self.get_netns_id(fd)?;
        if id != NSID_NOT_ASSIGNED {
            return Ok(id);
        }
        let mut body = vec![0u8; RTGENMSG_LEN];
        put_attr(&mut body, NETNSA_FD, &fd.to_ne_bytes());
        put_attr(&mut body, NETNSA_NSID, &NSID_NOT_ASSIGNED.to_ne_bytes());
        // Someone else may assign one meanwhile: EEXIST is fine.
        match self.request(libc::RTM_NEWNSID, libc::NLM_F_ACK as u16, &body) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(e),
        }
        match self.get_netns_id(fd)? {
            NSID_NOT_ASSIGNED => Err(io::Error::other(
                "the interface's network namespace has no id here",
            )),
            id => Ok(id),
        }
    }

    /// `RTM_GETNSID` of namespace descriptor `fd`.
    fn get_netns_id(&mut self, fd: u32) -> io::Result<i32> {
        let mut body = vec![0u8; RTGENMSG_LEN]; // rtgenmsg: AF_UNSPEC
        put_attr(&mut body, NETNSA_FD, &fd.to_ne_bytes());
        let reply = self.request(libc::RTM_GETNSID, 0, &body)?;
        let id = attrs(reply.get(RTGENMSG_LEN..).unwrap_or_default())
            .find(|(t, _)| *t == NETNSA_NSID)
            .and_then(|(_, v)| v.get(..4))
            .map(|v| i32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
            .unwrap_or(NSID_NOT_ASSIGNED);
        Ok(id)
    }

    /// `RTM_GETLINK` of interface `name`, in the namespace with id `nsid`
    /// (`None`: this one).
    fn get_link(&mut self, name: &str, nsid: Option<i32>) -> io::Result<LinkState> {
        let mut body = vec![0u8; IFINFOMSG_LEN];
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        put_attr(&mut body, IFLA_IFNAME, &cname);
        if let Some(id) = nsid {
            put_attr(&mut body, IFLA_TARGET_NETNSID, &id.to_ne_bytes());
        }
        let reply = self.request(libc::RTM_GETLINK, 0, &body)?;
        if reply.len() < IFINFOMSG_LEN {
            return Err(io::Error::other("short RTM_NEWLINK"));
        }
        let index = u32::from_ne_bytes([reply[4], reply[5], reply[6], reply[7]]);
        let flags = u32::from_ne_bytes([reply[8], reply[9], reply[10], reply[11]]);
        let mut state = LinkState {
            name: name.to_string(),
            index,
            mtu: 0,
            up: flags & libc::IFF_UP as u32 != 0,
            netns_id: nsid,
        };
        for (t, v) in attrs(&reply[IFINFOMSG_LEN..]) {
            match t {
                IFLA_MTU if v.len() >= 4 => {
                    state.mtu = u32::from_ne_bytes([v[0], v[1], v[2], v[3]])
                }
                IFLA_IFNAME => {
                    let n: Vec<u8> = v.iter().copied().take_while(|&b| b != 0).collect();
                    state.name = String::from_utf8_lossy(&n).into_owned();
                }
                _ => {}
            }
        }
        Ok(state)
    }

    /// Sends one request and returns the payload of its answer (after the
    /// netlink header); an error answer becomes its errno. With `NLM_F_ACK`
    /// the answer is the acknowledgement (an empty payload).
    fn request(&mut self, kind: u16, flags: u16, body: &[u8]) -> io::Result<Vec<u8>> {
        self.seq = self.seq.wrapping_add(1);
        let len = NLMSG_HDRLEN + body.len();
        let mut msg = Vec::with_capacity(len);
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&(libc::NLM_F_REQUEST as u16 | flags).to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(body);
        // SAFETY: sockaddr_nl is plain old data; zero is the kernel (pid 0).
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `msg` and `kernel` are live buffers of the given sizes.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&kernel as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        crate::sys::cvt_size(sent)?;
        let mut buf = vec![0u8; 16384];
        // Answers to older requests (none: one socket per query) are skipped.
        for _ in 0..8 {
            // SAFETY: `buf` is a live, writable buffer of its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let n = crate::sys::cvt_size(n)?;
            let mut at = 0;
            while at + NLMSG_HDRLEN <= n {
                let h = &buf[at..];
                let mlen = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
                let mtype = u16::from_ne_bytes([h[4], h[5]]);
                let mseq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
                if mlen < NLMSG_HDRLEN || at + mlen > n {
                    return Err(io::Error::other("malformed netlink answer"));
                }
                let payload = &h[NLMSG_HDRLEN..mlen];
                if mseq == self.seq {
                    if mtype == libc::NLMSG_ERROR as u16 {
                        let code = payload
                            .get(..4)
                            .map(|v| i32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
                            .unwrap_or(-libc::EIO);
                        return if code == 0 {
                            Ok(Vec::new())
                        } else {
                            Err(io::Error::from_raw_os_error(-code))
                        };
                    }
                    return Ok(payload.to_vec());
                }
                at += align(mlen);
            }
        }
        Err(io::Error::other("no netlink answer"))
    }
}

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends one attribute (type, value) to a message body, padded.
fn put_attr(body: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    body.extend_from_slice(&(len as u16).to_ne_bytes());
    body.extend_from_slice(&kind.to_ne_bytes());
    body.extend_from_slice(value);
    body.resize(align(body.len()), 0);
}

/// The attributes of a message body after its fixed header.
fn attrs(mut rest: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        let value = &rest[4..len];
        rest = rest.get(align(len)..).unwrap_or_default();
        Some((kind, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn ip(args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Removes the test's namespace (and with it a TUN moved there) and the
    /// TUN, also when the test fails.
    struct Cleanup {
        netns: String,
        second: String,
        link: String,
    }

    impl Drop for Cleanup {
        fn drop(&mut self) {
            for ns in [&self.netns, &self.second] {
                let _ = Command::new("ip").args(["netns", "del", ns]).output();
            }
            let _ = Command::new("ip")
                .args(["link", "del", &self.link])
                .output();
        }
    }

    /// A real TUN moved to another namespace, looked at there, moved back,
    /// then gone with that namespace. Needs root, `ip` and /dev/net/tun.
    #[test]
    fn follows_the_interface_into_another_namespace_and_sees_it_go() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/dev/net/tun").exists() {
            eprintln!("skipped: needs root and /dev/net/tun");
            return;
        }
        let pid = std::process::id();
        let name = format!("bio{pid}n");
        let netns = format!("braid-io-test-{pid}");
        let second = format!("braid-io-test-{pid}-2");
        let _cleanup = Cleanup {
            netns: netns.clone(),
            second: second.clone(),
            link: name.clone(),
        };
        let tun = Tun::create(&name).unwrap();
        assert_eq!(tun.current_name().unwrap(), name);
        let here = tun.link_state().unwrap();
        assert_eq!((here.name.as_str(), here.netns_id), (name.as_str(), None));
        assert!(!here.up);
        tun.set_mtu(1380).unwrap();
        assert_eq!(tun.link_state().unwrap().mtu, 1380);

        assert!(ip(&["netns", "add", &netns]));
        assert!(ip(&["link", "set", "dev", &name, "netns", &netns]));
        assert!(!tun.in_own_netns().unwrap());
        assert!(ip(&[
            "-n", &netns, "link", "set", "dev", &name, "mtu", "1300", "up"
        ]));
        let there = match tun.link_state() {
            // Every Linux since 4.0 answers RTM_GETNSID; qemu-user, which
            // runs this test for aarch64, translates only link, address
            // and route messages and refuses the rest with EOPNOTSUPP.
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                eprintln!("skipped the rest: this rtnetlink refuses RTM_GETNSID ({e})");
                return;
            }
            state => state.unwrap(),
        };
        assert!(there.netns_id.is_some(), "{there:?}");
        assert_eq!((there.mtu, there.up), (1300, true), "{there:?}");
        // As root this process can enter the namespace to set the MTU.
        tun.set_mtu(1290).unwrap();
        assert_eq!(tun.link_state().unwrap().mtu, 1290);

        // Back to this process's namespace (`netns PID`).
        let back = pid.to_string();
        assert!(ip(&[
            "-n", &netns, "link", "set", "dev", &name, "netns", &back
        ]));
        assert!(tun.in_own_netns().unwrap());
        assert_eq!(tun.link_state().unwrap().netns_id, None);

        // From one other namespace to a second one: this namespace has no
        // id for the second yet (the kernel gives one to the namespace the
        // interface left), so link_state assigns one.
        assert!(ip(&["link", "set", "dev", &name, "netns", &netns]));
        assert!(ip(&["netns", "add", &second]));
        assert!(ip(&[
            "-n", &netns, "link", "set", "dev", &name, "netns", &second
        ]));
        let there = tun.link_state().unwrap();
        assert!(there.netns_id.is_some(), "{there:?}");
        assert_eq!(there.name, name);

        // Gone with its namespace: every call on the descriptor says so.
        assert!(ip(&["netns", "del", &second]));
        let gone = (0..50).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tun.removed()
        });
        assert!(gone, "the TUN outlived its namespace");
        assert!(matches!(tun.link_state(), Err(e) if is_removed_error(&e)));
        let mut batch = braid_core::batch::PacketBatch::new(4, 2048);
        assert!(matches!(tun.read_batch(&mut batch), Err(e) if is_removed_error(&e)));
    }

    #[test]
    fn attributes_round_trip() {
        let mut body = vec![0u8; 4];
        put_attr(&mut body, IFLA_IFNAME, b"wg0\0");
        put_attr(&mut body, IFLA_MTU, &1420u32.to_ne_bytes());
        put_attr(&mut body, 7, b"x");
        let got: Vec<(u16, Vec<u8>)> = attrs(&body[4..]).map(|(t, v)| (t, v.to_vec())).collect();
        assert_eq!(
            got,
            vec![
                (IFLA_IFNAME, b"wg0\0".to_vec()),
                (IFLA_MTU, 1420u32.to_ne_bytes().to_vec()),
                (7, b"x".to_vec()),
            ]
        );
        assert_eq!(body.len() % 4, 0);
    }

    #[test]
    fn truncated_attributes_end_the_walk() {
        let mut body = Vec::new();
        put_attr(&mut body, IFLA_MTU, &1420u32.to_ne_bytes());
        body.truncate(6);
        assert_eq!(attrs(&body).count(), 0);
    }
}
