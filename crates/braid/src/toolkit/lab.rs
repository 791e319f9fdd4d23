//! A throw-away network lab for the demo and the benchmarks: network
//! namespaces, veth pairs, `braid netem` lines, braid tunnels and iperf3,
//! all removed again when the `Lab` is dropped (also after an error or a
//! panic). Underlay addresses come from 198.18.0.0/16, tunnel addresses
//! from 198.19.0.0/16; every name carries a per-run prefix so runs never
//! collide.

use crate::keys::PrivateKey;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub type LabResult<T> = Result<T, String>;

/// A child process the lab started (netem, iperf3 server…).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildId(usize);

pub struct Lab {
    prefix: String,
    braid: PathBuf,
    dir: PathBuf,
    namespaces: Vec<String>,
    interfaces: Vec<(String, String)>,
    children: Vec<Option<Child>>,
    /// Files outside the lab directory to remove on drop (a VPN's UAPI
    /// socket, which a killed process leaves behind).
    stray_files: Vec<PathBuf>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        // SIGTERM first, so children remove what they made (sockets, TUN
        // devices); whoever has not exited after a grace period is killed.
        for child in self.children.iter_mut().flatten() {
            if matches!(child.try_wait(), Ok(None)) {
                // SAFETY: a signal to a child we started and have not reaped.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        for child in self.children.iter_mut().flatten() {
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for (ns, name) in std::mem::take(&mut self.interfaces) {
            let _ = self
                .braid_in(&ns)
                .args(["down", &name])
                .stderr(Stdio::null())
                .status();
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        for file in &self.stray_files {
            let _ = std::fs::remove_file(file);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs a command; its stdout on success, a message naming it otherwise.
pub fn run(cmd: &mut Command) -> LabResult<String> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| format!("{shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{shown} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

static STOP_SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_SIGNALLED.store(true, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP only raise a flag, so a benchmark can leave
/// its loop and let the `Lab` be dropped (which removes everything) instead
/// of dying with namespaces left behind.
pub fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(
                sig,
                on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

/// True once a stop signal caught by `catch_stop_signals` arrived.
pub fn stop_signalled() -> bool {
    STOP_SIGNALLED.load(Ordering::SeqCst)
}

/// `Err("interrupted")` once a stop signal arrived.
pub fn check_stop() -> LabResult<()> {
    if stop_signalled() {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

/// Sleeps, but returns `Err("interrupted")` early when a stop signal came.
pub fn sleep_unless_stopped(d: Duration) -> LabResult<()> {
    let end = Instant::now() + d;
    loop {
        check_stop()?;
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// True when `tool` is a runnable file (a path) or found on PATH.
pub fn tool_exists(tool: &str) -> bool {
    if tool.contains('/') {
        use std::os::unix::fs::PermissionsExt;
        return std::fs::metadata(tool)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    }
    Command::new("sh")
        .args(["-c", &format!("command -v '{tool}'")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Fails with a hint when a tool the lab needs is missing.
pub fn require_tools(tools: &[&str]) -> LabResult<()> {
    for tool in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(format!(
                "`{tool}` is not installed (apt-get install iproute2 iperf3 iputils-ping)"
            ));
        }
    }
    Ok(())
}

impl Lab {
    /// `tag` (a letter or two) goes into every name, with the process id.
    pub fn new(tag: &str) -> LabResult<Lab> {
        let braid = std::env::current_exe().map_err(|e| e.to_string())?;
        let prefix = format!("b{tag}{}", std::process::id() % 10_000);
        let dir = std::env::temp_dir().join(format!("braid-lab-{prefix}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Lab {
            prefix,
            braid,
            dir,
            namespaces: Vec::new(),
            interfaces: Vec::new(),
            children: Vec::new(),
            stray_files: Vec::new(),
        })
    }

    /// `<prefix><suffix>`: a name for an interface (at most 15 bytes).
    pub fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes `path` when the lab is dropped (after its children stopped).
    pub fn remove_on_drop(&mut self, path: PathBuf) {
        self.stray_files.push(path);
    }

    /// The namespaces this lab created (and removes when dropped).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// The process id of a child still owned by the lab.
    pub fn pid(&self, id: ChildId) -> Option<u32> {
        self.children[id.0].as_ref().map(Child::id)
    }

    /// True when a child has exited (or was already stopped).
    pub fn exited(&mut self, id: ChildId) -> bool {
        match self.children[id.0].as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// Creates namespace `<prefix>-<role>` with its loopback up.
    pub fn netns(&mut self, role: &str) -> LabResult<String> {
        let ns = format!("{}-{role}", self.prefix);
        run(Command::new("ip").args(["netns", "add", &ns]))?;
        self.namespaces.push(ns.clone());
        run(Command::new("ip").args(["-n", &ns, "link", "set", "lo", "up"]))?;
        Ok(ns)
    }

    /// A veth pair between two namespaces, addressed (`198.18.x.y/24`) and up.
    /// Each side is (namespace, interface, address with prefix).
    pub fn veth(&mut self, a: (&str, &str, &str), b: (&str, &str, &str)) -> LabResult<()> {
        run(Command::new("ip").args([
            "link", "add", a.1, "netns", a.0, "type", "veth", "peer", "name", b.1, "netns", b.0,
        ]))?;
        for (ns, ifn, addr) in [a, b] {
            run(Command::new("ip").args(["-n", ns, "addr", "add", addr, "dev", ifn]))?;
            run(Command::new("ip").args(["-n", ns, "link", "set", ifn, "up"]))?;
        }
        Ok(())
    }

    /// A command to run inside `ns`.
    pub fn cmd_in(&self, ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }

    /// This braid binary, run in namespace `ns`.
    pub fn braid_in(&self, ns: &str) -> Command {
        self.cmd_in(ns, &self.braid)
    }

    /// Starts a child process the lab owns (killed on drop).
    pub fn spawn(&mut self, mut cmd: Command, log: &str) -> LabResult<ChildId> {
        let log_file = std::fs::File::create(self.dir.join(log)).map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("{cmd:?}: {e}"))?;
        self.children.push(Some(child));
        Ok(ChildId(self.children.len() - 1))
    }

    /// Waits up to `within` for a child to exit by itself; true if it did.
    pub fn wait(&mut self, id: ChildId, within: Duration) -> bool {
        let Some(child) = self.children[id.0].as_mut() else {
            return true;
        };
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Stops a child (SIGTERM, then kill) and returns what it logged.
    pub fn stop(&mut self, id: ChildId, log: &str) -> String {
        if let Some(mut child) = self.children[id.0].take() {
            // SAFETY: a signal to a child we started and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        std::fs::read_to_string(self.dir.join(log)).unwrap_or_default()
    }

    /// A `braid netem` line in `ns`: datagrams to `listen` go to `to`, with
    /// `impairments` (netem flags). Controlled through its unix socket.
    pub fn netem(
        &mut self,
        ns: &str,
        name: &str,
        listen: &str,
        to: &str,
        impairments: &[&str],
    ) -> LabResult<NetemLine> {
        let control = self.dir.join(format!("{name}.ctl"));
        let mut cmd = self.braid_in(ns);
        cmd.args(["netem", "--listen", listen, "--to", to, "--control"])
            .arg(&control)
            .args(impairments);
        let log = format!("netem-{name}.log");
        let id = self.spawn(cmd, &log)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !control.exists() {
            if Instant::now() > deadline {
                let text = self.stop(id, &log);
                return Err(format!("braid netem {name} did not start: {}", text.trim()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(NetemLine { id, control, log })
    }

    /// Writes a private file (configs hold keys).
    pub fn write_private(&self, file: &str, text: &str) -> LabResult<PathBuf> {
        let path = self.dir.join(file);
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        f.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
        Ok(path)
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

    /// Pings until a reply comes (bounded); true when one did.
    pub fn ping_until_reply(&self, ns: &str, dst: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let ok = self
                .cmd_in(ns, "ping")
                .args(["-c", "1", "-W", "1", dst])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return true;
            }
        }
        false
    }

    /// Runs iperf3 from `client_ns` to a one-shot server on `dst` in
    /// `server_ns`; returns iperf3's JSON report.
    pub fn iperf3(
        &mut self,
        client_ns: &str,
        server_ns: &str,
        dst: &str,
        args: &[&str],
    ) -> LabResult<serde_json::Value> {
        let mut server = self.cmd_in(server_ns, "iperf3");
        server.args(["-s", "-1", "-B", dst]);
        let id = self.spawn(server, "iperf3-server.log")?;
        std::thread::sleep(Duration::from_millis(300));
        let out = run(self
            .cmd_in(client_ns, "iperf3")
            .args(["-c", dst, "-J"])
            .args(args));
        self.stop(id, "iperf3-server.log");
        let out = out?;
        serde_json::from_str(&out).map_err(|e| format!("iperf3 printed no JSON ({e})"))
    }
}

/// A running `braid netem` line.
pub struct NetemLine {
    pub id: ChildId,
    control: PathBuf,
    pub log: String,
}

impl NetemLine {
    /// Sends a control command (`cut`, `restore`, `stats json`).
    pub fn control(&self, command: &str) -> LabResult<String> {
        use std::io::{BufRead, BufReader};
        let mut s = std::os::unix::net::UnixStream::connect(&self.control)
            .map_err(|e| format!("{}: {e}", self.control.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        writeln!(s, "{command}").map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(s)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        Ok(line.trim().to_string())
    }
}

/// A fresh key pair's halves as config text (private, public).
pub fn keypair() -> (String, String) {
    let k = PrivateKey::generate();
    (k.to_base64().to_string(), k.public_key().to_base64())
}

/// Bits per second an iperf3 TCP report says arrived.
pub fn received_bps(report: &serde_json::Value) -> Option<f64> {
    report["end"]["sum_received"]["bits_per_second"].as_f64()
}
