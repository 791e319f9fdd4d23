//! `wireguard-go`, the reference userspace WireGuard, as the other end of
//! a tunnel: started in a namespace, configured with `wg setconf` and `ip`.

use super::config::{write_private, IfaceConf};
use super::netns::Netns;
use super::process::LabResult;
use super::process::{wait_until, ChildGuard, LONG, SHORT};
use super::uapi::sock_path;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `wireguard-go -f NAME` in a namespace. On drop: SIGTERM/SIGKILL by
/// PID, socket file removed.
pub struct WgGo {
    pub ns: String,
    pub ifname: String,
    pub child: ChildGuard,
}

impl WgGo {
    /// Starts interface `ifname` in `ns` with `conf`; its log and setconf
    /// file go to `dir`.
    pub fn start(ns: &Netns, ifname: &str, conf: &IfaceConf, dir: &Path) -> LabResult<WgGo> {
        Self::start_exe(Path::new("wireguard-go"), ns, ifname, conf, dir)
    }

    /// [`WgGo::start`] with the wireguard-go at `exe` (e.g. [`reference`]'s).
    pub fn start_exe(
        exe: &Path,
        ns: &Netns,
        ifname: &str,
        conf: &IfaceConf,
        dir: &Path,
    ) -> LabResult<WgGo> {
        let mut c = ns.cmd(exe);
        c.args(["-f", ifname]).env("LOG_LEVEL", "debug");
        let log = dir.join(format!("{ifname}.wireguard-go.log"));
        let name = format!("wireguard-go {ifname}");
        let mut g = WgGo {
            ns: ns.name.clone(),
            ifname: ifname.to_string(),
            child: ChildGuard::spawn(c, &name, &log)?,
        };
        let sock = sock_path(ifname);
        let ready = wait_until(LONG, || {
            sock.exists() && ns.run("wg", &["show", ifname], SHORT).ok() || !g.child.running()
        });
        if !(ready && g.child.running()) {
            return Err(format!(
                "wireguard-go {ifname} did not come up:\n{}",
                g.child.log_text()
            ));
        }
        let file = dir.join(format!("{ifname}.setconf"));
        write_private(&file, &conf.wg_setconf())?;
        ns.run("wg", &["setconf", ifname, &file.to_string_lossy()], SHORT)
            .check("wg setconf (wireguard-go)")?;
        for a in &conf.address {
            let mut args = vec!["address", "add", a.as_str(), "dev", ifname];
            if a.contains(':') {
                args.push("nodad");
            }
            ns.ip(&args).check("address on wireguard-go tun")?;
        }
        if let Some(m) = conf.mtu {
            ns.ip(&["link", "set", ifname, "mtu", &m.to_string()])
                .check("mtu")?;
        }
        ns.ip(&["link", "set", ifname, "up"])
            .check("wireguard-go tun up")?;
        Ok(g)
    }
}

impl Drop for WgGo {
    fn drop(&mut self) {
        self.child.terminate();
        let _ = std::fs::remove_file(sock_path(&self.ifname));
    }
}

/// The wireguard-go a reference run uses, and what its `--version` says:
/// `$BRAID_WIREGUARD_GO` when set, else the newest (bench/compare's cache,
/// see [`newest_wireguard_go_path`](super::mptcp::newest_wireguard_go_path),
/// or `go install`'s default `~/go/bin/wireguard`) when one is there, else
/// Debian's `wireguard-go` from the PATH.
pub fn reference() -> (PathBuf, String) {
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    let chosen = std::env::var_os("BRAID_WIREGUARD_GO").map(PathBuf::from);
    let candidates = [
        super::mptcp::newest_wireguard_go_path(),
        Path::new(&home).join("go/bin/wireguard"),
    ];
    let exe = chosen
        .or_else(|| candidates.into_iter().find(|p| p.is_file()))
        .unwrap_or_else(|| PathBuf::from("wireguard-go"));
    let mut c = Command::new(&exe);
    c.arg("--version");
    let out = super::process::run_bounded(c, SHORT);
    let version = out.stdout.lines().next().unwrap_or("").trim().to_string();
    (exe, version)
}
