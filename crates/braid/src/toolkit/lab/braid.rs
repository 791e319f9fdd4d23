//! braid itself in the lab: `braid up`, `down` and `show` inside a
//! namespace, reading `braid show --json`, and cleaning up after a braid
//! (or any userspace WireGuard) that did not go away by itself.

use super::netns::Netns;
use super::process::LabResult;
use super::process::{run, terminate_pid, wait_until, SHORT};
use super::setup::Lab;
use super::uapi::sock_path;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

impl Lab {
    /// This braid binary, run in namespace `ns`.
    pub fn braid_in(&self, ns: &str) -> Command {
        self.cmd_in(ns, &self.braid)
    }

    /// `braid up` of `<name>.conf` (written from `config`) inside `ns`.
    pub fn braid_up(&mut self, ns: &str, name: &str, config: &str) -> LabResult<()> {
        let file = self.write_private(&format!("{name}.conf"), config)?;
        run(self.braid_in(ns).arg("up").arg(&file))?;
        self.interfaces.push((ns.to_string(), name.to_string()));
        // The lab's own files go with it; so does what the daemon logged.
        self.remove_on_drop(PathBuf::from(crate::background::log_path(name)));
        Ok(())
    }

    pub fn braid_down(&mut self, ns: &str, name: &str) -> LabResult<()> {
        self.interfaces.retain(|(n, i)| !(n == ns && i == name));
        run(self.braid_in(ns).args(["down", name])).map(drop)
    }

    /// `braid show NAME` (text, or JSON with `json`).
    pub fn braid_show(&self, ns: &str, name: &str, json: bool) -> LabResult<String> {
        let mut c = self.braid_in(ns);
        c.args(["show", name]);
        if json {
            c.arg("--json");
        }
        run(&mut c)
    }
}

/// `BRAID show IFNAME --json` inside `ns` (`braid` is the binary), parsed
/// (`Null` if it failed), and its raw text.
pub fn show_json(ns: &Netns, braid: &Path, ifname: &str) -> (Value, String) {
    let braid = braid.to_string_lossy();
    let out = ns.run(&braid, &["show", ifname, "--json"], SHORT);
    let v = serde_json::from_str(&out.stdout).unwrap_or_default();
    (v, out.stdout)
}

/// The counter `name` in an `extra` list of `braid show --json` (the
/// interface's or a peer's): `[["name", value], ...]`.
pub fn extra_counter(extra: &Value, name: &str) -> Option<u64> {
    extra
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e[0] == name)
        .and_then(|e| e[1].as_u64())
}

/// Stops whatever runs an interface `ifname` inside `ns`, after the polite
/// way (`braid down`, `wg-quick down`) was tried: waits for the processes
/// of `exe` in that namespace to go, then SIGTERM/SIGKILL them by PID,
/// deletes the link if it is still there, and removes the UAPI socket file.
pub fn force_cleanup(ns: &Netns, ifname: &str, exe: &Path) {
    if !wait_until(Duration::from_secs(5), || ns.pids_of(exe).is_empty()) {
        for pid in ns.pids_of(exe) {
            eprintln!(
                "cleanup: {} (pid {pid}) still running in {}, terminating",
                exe.display(),
                ns.name
            );
            terminate_pid(pid, Duration::from_secs(3));
        }
    }
    if ns.has_link(ifname) {
        let _ = ns.ip(&["link", "del", ifname]);
    }
    let _ = std::fs::remove_file(sock_path(ifname));
}

/// Moves what a braid daemon of `ifname` logged (a daemon puts it in
/// /var/log/braid) next to `beside`, one of the caller's files.
pub fn keep_daemon_log(ifname: &str, beside: &Path) {
    let daemon_log = PathBuf::from(crate::background::log_path(ifname));
    if daemon_log.exists() {
        let kept = beside.with_file_name(format!("{ifname}.daemon.log"));
        if std::fs::rename(&daemon_log, &kept).is_err() {
            let _ = std::fs::copy(&daemon_log, &kept);
            let _ = std::fs::remove_file(&daemon_log);
        }
    }
}
