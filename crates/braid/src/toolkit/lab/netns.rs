//! Network namespaces and the veth pairs between them, as guards: a
//! dropped [`Netns`] terminates every process inside it (by PID) and is
//! deleted, which also destroys its interfaces.

use super::process::LabResult;
use super::process::{pid_alive, pid_exe, run_bounded, run_program, terminate_pid, Out};
use super::process::{wait_until, LONG, SHORT};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A network namespace the lab created; removed on drop.
pub struct Netns {
    pub name: String,
}

impl AsRef<str> for Netns {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

impl Netns {
    /// Creates namespace `name` with its loopback up (an existing one of
    /// that name is an error: it may be another run's).
    pub fn new(name: &str) -> LabResult<Netns> {
        run_program("ip", &["netns", "add", name], SHORT).check("ip netns add")?;
        let ns = Netns::existing(name);
        ns.ip(&["link", "set", "lo", "up"]).check("lo up")?;
        Ok(ns)
    }

    /// Takes charge of an existing namespace (a leftover of an earlier run
    /// of ours): it is removed when the guard is dropped.
    pub fn existing(name: &str) -> Netns {
        Netns {
            name: name.to_string(),
        }
    }

    /// A `Command` that runs `prog` inside this namespace.
    pub fn cmd(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        cmd_in(&self.name, prog)
    }

    /// Runs `prog args…` inside the namespace with a bounded wait.
    pub fn run(&self, prog: &str, args: &[&str], timeout: Duration) -> Out {
        run_in(&self.name, prog, args, timeout)
    }

    /// `ip -n NS args…`
    pub fn ip(&self, args: &[&str]) -> Out {
        ip_in(&self.name, args)
    }

    /// PIDs of all processes living in this namespace.
    pub fn pids(&self) -> Vec<i32> {
        run_program("ip", &["netns", "pids", &self.name], SHORT)
            .stdout
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|&p| pid_alive(p))
            .collect()
    }

    /// PIDs in this namespace whose executable is `exe`.
    pub fn pids_of(&self, exe: &Path) -> Vec<i32> {
        let want = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
        self.pids()
            .into_iter()
            .filter(|&p| {
                pid_exe(p)
                    .map(|e| {
                        e == want
                            || e.to_string_lossy().trim_end_matches(" (deleted)")
                                == want.to_string_lossy()
                    })
                    .unwrap_or(false)
            })
            .collect()
    }

    /// Names of the links in the namespace.
    pub fn links(&self) -> Vec<String> {
        self.ip(&["-o", "link", "show"])
            .stdout
            .lines()
            .filter_map(|l| l.split(':').nth(1))
            .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
            .collect()
    }

    pub fn has_link(&self, name: &str) -> bool {
        self.links().iter().any(|l| l == name)
    }

    /// Is `name` present and administratively up?
    pub fn link_up(&self, name: &str) -> bool {
        let o = self.ip(&["-o", "link", "show", "dev", name]);
        let flags = o
            .stdout
            .split_once('<')
            .and_then(|(_, r)| r.split_once('>'))
            .map(|(f, _)| f);
        o.ok()
            && flags
                .map(|f| f.split(',').any(|x| x == "UP"))
                .unwrap_or(false)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Everything in this namespace was started by us.
        for _round in 0..3 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                terminate_pid(pid, Duration::from_secs(3));
            }
        }
        let _ = run_program("ip", &["netns", "del", &self.name], SHORT);
    }
}

/// A command to run inside namespace `ns` (`ip netns exec NS PROGRAM`).
pub fn cmd_in(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

/// Runs `prog args…` inside namespace `ns` with a bounded wait.
pub fn run_in(ns: &str, prog: &str, args: &[&str], timeout: Duration) -> Out {
    let mut c = cmd_in(ns, prog);
    c.args(args);
    run_bounded(c, timeout)
}

/// `ip -n NS args…`
pub fn ip_in(ns: &str, args: &[&str]) -> Out {
    let mut c = Command::new("ip");
    c.args(["-n", ns]).args(args);
    run_bounded(c, SHORT)
}

/// A veth pair with one end in each namespace, addressed and up. Deleting
/// either namespace removes it too; the guard also deletes it explicitly.
pub struct Veth {
    ns_a: String,
    pub a: String,
    pub b: String,
}

impl Veth {
    /// Interface `a` (address `addr_a`, with prefix) in `ns_a` and `b` in
    /// `ns_b`; returns once both ends have carrier.
    pub fn new(
        ns_a: impl AsRef<str>,
        a: &str,
        addr_a: &str,
        ns_b: impl AsRef<str>,
        b: &str,
        addr_b: &str,
    ) -> LabResult<Veth> {
        let (ns_a, ns_b) = (ns_a.as_ref(), ns_b.as_ref());
        // Created directly inside the namespaces: never appears in the root one.
        run_program(
            "ip",
            &[
                "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b,
            ],
            SHORT,
        )
        .check("create veth pair")?;
        let v = Veth {
            ns_a: ns_a.to_string(),
            a: a.to_string(),
            b: b.to_string(),
        };
        for (ns, dev, addr) in [(ns_a, a, addr_a), (ns_b, b, addr_b)] {
            let mut args = vec!["addr", "add", addr, "dev", dev];
            if addr.contains(':') {
                args.push("nodad"); // usable at once, no duplicate address detection wait
            }
            ip_in(ns, &args).check("veth address")?;
            ip_in(ns, &["link", "set", dev, "up"]).check("veth up")?;
        }
        // Wait for carrier on both ends (operstate UP), so the first packets
        // are not lost to link bring-up.
        let carrier = |ns: &str, dev: &str| {
            let o = ip_in(ns, &["-o", "link", "show", "dev", dev]);
            o.ok() && o.stdout.contains("state UP") && !o.stdout.contains("NO-CARRIER")
        };
        if !wait_until(LONG, || carrier(ns_a, a) && carrier(ns_b, b)) {
            return Err(format!("veth {a}/{b} never got carrier"));
        }
        Ok(v)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = run_program("ip", &["-n", &self.ns_a, "link", "del", &self.a], SHORT);
    }
}
