//! `wireguard-go`, the reference userspace WireGuard, as the other end of
//! a tunnel: started in a namespace, configured with `wg setconf` and `ip`.

use super::config::{write_private, IfaceConf};
use super::netns::Netns;
use super::process::LabResult;
use super::process::{run_bounded, tool_exists, wait_until, ChildGuard, LONG, SHORT};
use super::uapi::sock_path;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// Where bench/compare (and this) keep the newest wireguard-go:
/// `$BRAID_BENCH_CACHE/bin/wireguard`, default `~/.cache/braid-bench`.
pub fn newest_wireguard_go_path() -> PathBuf {
    let cache = std::env::var_os("BRAID_BENCH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            Path::new(&home).join(".cache/braid-bench")
        });
    cache.join("bin/wireguard")
}

/// The `go` to install wireguard-go with, if there is one.
fn go_binary() -> Option<PathBuf> {
    if tool_exists("go") {
        return Some("go".into());
    }
    let local = PathBuf::from("/usr/local/go/bin/go");
    local.exists().then_some(local)
}

/// The newest wireguard-go and what its `--version` printed first
/// ("wireguard-go v0.0.…"); `Err` says what is missing and how to get it.
/// With `install`, a missing one is installed first (`go install
/// golang.zx2c4.com/wireguard@latest`, GOTOOLCHAIN=auto, at most 5
/// minutes), as bench/compare does.
pub fn newest(install: bool) -> Result<(PathBuf, String), String> {
    let wg_go = newest_wireguard_go_path();
    if !wg_go.exists() && install {
        let Some(go) = go_binary() else {
            return Err(format!(
                "the newest wireguard-go is not at {} and there is no Go toolchain to install it",
                wg_go.display()
            ));
        };
        let bin = wg_go.parent().unwrap_or(Path::new("."));
        let _ = std::fs::create_dir_all(bin);
        eprintln!(
            "installing the newest wireguard-go: go install golang.zx2c4.com/wireguard@latest into {}",
            bin.display()
        );
        let mut c = Command::new(go);
        c.args(["install", "golang.zx2c4.com/wireguard@latest"])
            .env("GOBIN", bin)
            .env("GOTOOLCHAIN", "auto");
        let out = run_bounded(c, Duration::from_secs(300));
        if !out.ok() {
            let last = out.stderr.trim().lines().last().unwrap_or("").to_string();
            return Err(format!(
                "go install of the newest wireguard-go failed: {last}"
            ));
        }
    }
    if !wg_go.exists() {
        return Err(format!(
            "the newest wireguard-go is not at {} (GOBIN={} GOTOOLCHAIN=auto go install golang.zx2c4.com/wireguard@latest, or bash bench/compare)",
            wg_go.display(),
            wg_go.parent().unwrap_or(Path::new(".")).display()
        ));
    }
    let mut c = Command::new(&wg_go);
    c.arg("--version");
    let out = run_bounded(c, SHORT);
    let version = out.stdout.lines().next().unwrap_or("").trim().to_string();
    if !version.starts_with("wireguard-go") {
        return Err(format!(
            "{} --version printed {:?}, not a wireguard-go version",
            wg_go.display(),
            out.stdout.trim()
        ));
    }
    Ok((wg_go, version))
}

/// The wireguard-go a reference run uses, and what its `--version` says:
/// `$BRAID_WIREGUARD_GO` when set, else the newest (bench/compare's cache,
/// see [`newest_wireguard_go_path`],
/// or `go install`'s default `~/go/bin/wireguard`) when one is there, else
/// Debian's `wireguard-go` from the PATH.
pub fn reference() -> (PathBuf, String) {
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    let chosen = std::env::var_os("BRAID_WIREGUARD_GO").map(PathBuf::from);
    let candidates = [
        newest_wireguard_go_path(),
        Path::new(&home).join("go/bin/wireguard"),
    ];
    let exe = chosen
        .or_else(|| candidates.into_iter().find(|p| p.is_file()))
        .unwrap_or_else(|| PathBuf::from("wireguard-go"));
    let mut c = Command::new(&exe);
    c.arg("--version");
    let out = run_bounded(c, SHORT);
    let version = out.stdout.lines().next().unwrap_or("").trim().to_string();
    (exe, version)
}
