//! Shared harness for braid's end-to-end tests.
//!
//! Every test builds its own little world out of network namespaces and a
//! veth pair, runs one VPN implementation on each side (braid or
//! `wireguard-go`) and tears everything down again through Drop guards, also
//! when the test fails or panics.
//!
//! ```text
//!      netns braid-e2e-<P>-a                          netns braid-e2e-<P>-b
//!   +---------------------------+                +---------------------------+
//!   |  <P>a  (TUN, tunnel)      |                |  <P>b  (TUN, tunnel)      |
//!   |  198.19.X.1/24            |                |  198.19.X.2/24            |
//!   |  braid | wireguard-go     |                |  braid | wireguard-go     |
//!   |  UDP :51820               |                |  UDP :51821               |
//!   |        |                  |   veth pair    |        |                  |
//!   |  <P>va 198.18.X.1/24 ==========================  <P>vb 198.18.X.2/24   |
//!   +---------------------------+   (underlay)   +---------------------------+
//!        side A = initiator                           side B = responder
//!        (has Endpoint for B)                         (no Endpoint for A)
//! ```
//!
//! `<P>` is a per-run unique prefix `b<pid>_<n>` (pid of the test process, n a
//! counter), so parallel tests and parallel test binaries never collide, and
//! interface names stay within 15 characters. `/var/run/wireguard` is shared by
//! all namespaces, which is why both tunnel interfaces get distinct names.
//!
//! Rules kept here: underlay 198.18.0.0/16, tunnel 198.19.0.0/16, IPv6
//! 2001:db8::/32 only; traffic only between namespaces we create; every wait is
//! bounded; processes are only ever killed by PID, and only ones we started
//! (our children, or processes living in a namespace this test created).

#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Path of the braid binary under test.
pub const BRAID: &str = env!("CARGO_BIN_EXE_braid");

/// Directory where WireGuard userspace implementations put their UAPI sockets.
pub const WG_RUN_DIR: &str = "/var/run/wireguard";

/// Generous bound for "this should happen" waits. Tests never fail for being
/// slow, only for something not happening within this bound.
pub const LONG: Duration = Duration::from_secs(20);
/// Bound for commands that should return promptly (`wg show`, `ip ...`).
pub const SHORT: Duration = Duration::from_secs(10);

const NETNS_PREFIX: &str = "braid-e2e-";

// ---------------------------------------------------------------------------
// Preflight: root, tools, CI policy
// ---------------------------------------------------------------------------

/// True when running under CI (`CI=true`), where missing prerequisites are a
/// failure instead of a skip.
pub fn in_ci() -> bool {
    matches!(
        std::env::var("CI").map(|v| v.to_ascii_lowercase()),
        Ok(ref v) if v == "true" || v == "1" || v == "yes"
    )
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Find `tool` on PATH (or as an absolute path).
pub fn which(tool: &str) -> Option<PathBuf> {
    let p = Path::new(tool);
    if p.is_absolute() {
        return p.exists().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(
            ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
                .iter()
                .map(PathBuf::from),
        )
        .map(|d| d.join(tool))
        .find(|c| c.is_file())
}

/// Check the prerequisites of an end-to-end test. Returns `false` when the
/// test should be skipped (a reason is printed). In CI a missing prerequisite
/// panics instead: CI must never silently skip the e2e suite.
pub fn preflight(test: &str, tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !is_root() {
        missing.push("root privileges (network namespaces, TUN)".to_string());
    }
    for t in tools {
        if which(t).is_none() {
            missing.push(format!("`{t}` (apt-get install {})", apt_package(t)));
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        missing.push("/dev/net/tun".to_string());
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!("{test}: missing prerequisites: {}", missing.join(", "));
    if in_ci() {
        panic!(
            "{msg} (CI=true: missing prerequisites are a failure; run `bash scripts/test` as root)"
        );
    }
    eprintln!("SKIPPED {msg}");
    false
}

fn apt_package(tool: &str) -> &'static str {
    match tool {
        "wg" | "wg-quick" => "wireguard-tools",
        "wireguard-go" => "wireguard-go",
        "iperf3" => "iperf3",
        "ping" => "iputils-ping",
        "ip" | "ss" => "iproute2",
        "tcpdump" => "tcpdump",
        _ => "?",
    }
}

// ---------------------------------------------------------------------------
// Running commands with bounded waits
// ---------------------------------------------------------------------------

/// Result of a command run with a bounded wait.
#[derive(Debug, Clone)]
pub struct Out {
    /// What was run, for messages.
    pub what: String,
    /// `None` when the command did not finish in time (it was killed) or could
    /// not be started.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.status.map(|s| s.success()).unwrap_or(false)
    }

    pub fn combined(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// Panic with a readable message unless the command succeeded.
    pub fn expect_ok(self, context: &str) -> Out {
        if !self.ok() {
            panic!("{context}: {}", self.describe());
        }
        self
    }

    pub fn describe(&self) -> String {
        let status = match (self.timed_out, self.status) {
            (true, _) => "did not finish in time (killed)".to_string(),
            (false, Some(s)) => format!("exited with {s}"),
            (false, None) => "could not be started".to_string(),
        };
        format!(
            "`{}` {status}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

static OUT_COUNTER: AtomicU32 = AtomicU32::new(0);

fn describe_cmd(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Run `cmd` with stdin closed, capture stdout/stderr, wait at most `timeout`.
///
/// Output goes to temporary files rather than pipes: a command that starts a
/// daemon (`braid up`, `wg-quick up`) may leave the daemon holding the write
/// end, and we must not wait for EOF on it.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Out {
    run_bounded_stdin(&mut cmd, None, timeout)
}

pub fn run_bounded_stdin(cmd: &mut Command, stdin: Option<&str>, timeout: Duration) -> Out {
    let n = OUT_COUNTER.fetch_add(1, Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("braid-e2e-out-{}-{n}", std::process::id()));
    let out_path = base.with_extension("out");
    let err_path = base.with_extension("err");
    let result = run_bounded_files(cmd, stdin, timeout, &out_path, &err_path);
    let _ = fs::remove_file(&out_path);
    let _ = fs::remove_file(&err_path);
    result
}

/// Like [`run_bounded_stdin`], but stdout/stderr go to the given files, which
/// are kept: whatever a daemon started by the command writes later to its
/// inherited stdout/stderr stays inspectable there.
pub fn run_bounded_files(
    cmd: &mut Command,
    stdin: Option<&str>,
    timeout: Duration,
    out_path: &Path,
    err_path: &Path,
) -> Out {
    run_bounded_tick(cmd, stdin, timeout, out_path, err_path, &mut || {})
}

/// The general form: `tick` is called on every poll while the command runs
/// (used to reap a foreground daemon of ours that the command stops, so it
/// does not linger as a zombie the command would wait for).
pub fn run_bounded_tick(
    cmd: &mut Command,
    stdin: Option<&str>,
    timeout: Duration,
    out_path: &Path,
    err_path: &Path,
    tick: &mut dyn FnMut(),
) -> Out {
    let what = describe_cmd(cmd);
    let mk = |p: &Path| fs::File::create(p).expect("create temp output file");
    cmd.stdout(Stdio::from(mk(out_path)))
        .stderr(Stdio::from(mk(err_path)))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    match cmd.spawn() {
        Err(e) => Out {
            what,
            status: None,
            stdout: String::new(),
            stderr: format!("spawn failed: {e}"),
            timed_out: false,
        },
        Ok(mut child) => {
            if let (Some(input), Some(mut si)) = (stdin, child.stdin.take()) {
                let _ = si.write_all(input.as_bytes());
                // dropping `si` closes stdin
            }
            let deadline = Instant::now() + timeout;
            let mut status = None;
            let mut timed_out = false;
            loop {
                match child.try_wait() {
                    Ok(Some(s)) => {
                        status = Some(s);
                        break;
                    }
                    Ok(None) if Instant::now() >= deadline => {
                        timed_out = true;
                        let _ = child.kill(); // SIGKILL to our own child, by PID
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => {
                        tick();
                        sleep(Duration::from_millis(20))
                    }
                    Err(_) => break,
                }
            }
            Out {
                what,
                status,
                stdout: fs::read_to_string(out_path).unwrap_or_default(),
                stderr: fs::read_to_string(err_path).unwrap_or_default(),
                timed_out,
            }
        }
    }
}

/// Convenience: run a program with arguments (no namespace).
pub fn run(prog: &str, args: &[&str], timeout: Duration) -> Out {
    let mut c = Command::new(prog);
    c.args(args);
    run_bounded(c, timeout)
}

/// Poll `f` every 50 ms until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------
// Processes: kill by PID only
// ---------------------------------------------------------------------------

/// Is `pid` a live (non-zombie) process?
pub fn pid_alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // state is the field after the parenthesised comm
            let state = stat
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some(Some('Z')) | Some(Some('X')))
        }
    }
}

/// SIGTERM `pid`, wait up to `grace`, then SIGKILL. Only for processes we
/// started (directly, or inside a namespace this test created).
pub fn terminate_pid(pid: i32, grace: Duration) {
    if pid <= 1 || !pid_alive(pid) {
        return;
    }
    // SAFETY: plain kill(2) on a specific PID.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    if wait_until(grace, || !pid_alive(pid)) {
        return;
    }
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_until(Duration::from_secs(5), || !pid_alive(pid));
}

/// The executable of a process, if readable.
pub fn pid_exe(pid: i32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// A child process that is terminated (SIGTERM, then SIGKILL) and reaped on
/// drop. Its stdout and stderr go to `log` (a file), so a daemon's output can
/// be inspected after the fact.
pub struct ChildGuard {
    child: Option<Child>,
    pub name: String,
    pub log: PathBuf,
}

impl ChildGuard {
    pub fn spawn(mut cmd: Command, name: &str, log: &Path) -> ChildGuard {
        let what = describe_cmd(&cmd);
        let f = fs::File::create(log).expect("create child log");
        let f2 = f.try_clone().expect("dup child log");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(f))
            .stderr(Stdio::from(f2));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn `{what}`: {e}"));
        ChildGuard {
            child: Some(child),
            name: name.to_string(),
            log: log.to_path_buf(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(-1)
    }

    /// Still running? (Reaps it if it has exited.)
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            None => false,
            Some(c) => matches!(c.try_wait(), Ok(None)),
        }
    }

    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for the child to exit on its own, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut st = None;
        wait_until(timeout, || {
            st = self.exit_status();
            st.is_some()
        });
        st
    }

    /// SIGTERM, up to 5 s grace, SIGKILL; always reaps.
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(None) = c.try_wait() {
                let pid = c.id() as i32;
                unsafe { libc::kill(pid, libc::SIGTERM) };
                let exited =
                    wait_until(Duration::from_secs(5), || !matches!(c.try_wait(), Ok(None)));
                if !exited {
                    let _ = c.kill();
                }
            }
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.terminate();
    }
}

// ---------------------------------------------------------------------------
// Per-test environment: unique names, temp dir, stale-run sweep
// ---------------------------------------------------------------------------

static RUN_COUNTER: AtomicU32 = AtomicU32::new(0);
static SWEEP: Once = Once::new();

/// One per test: hands out unique names and a temp directory, removes the
/// temp directory and any UAPI socket file of its interfaces on drop.
/// Create it first in a test so that it is dropped last.
pub struct TestEnv {
    pub test: String,
    /// `b<pid>_<n>`
    pub prefix: String,
    pub n: u32,
    pub dir: PathBuf,
    names: Mutex<Vec<String>>,
}

impl TestEnv {
    pub fn new(test: &str) -> TestEnv {
        SWEEP.call_once(sweep_stale);
        let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
        let prefix = format!("b{}_{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("braid-e2e-{prefix}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create test temp dir");
        eprintln!("[{test}] prefix {prefix}, files in {}", dir.display());
        TestEnv {
            test: test.to_string(),
            prefix,
            n,
            dir,
            names: Mutex::new(Vec::new()),
        }
    }

    /// Unique interface name `<prefix><role>`; `role` must start with a letter.
    pub fn ifname(&self, role: &str) -> String {
        assert!(
            role.starts_with(|c: char| c.is_ascii_alphabetic()),
            "role must start with a letter"
        );
        let name = format!("{}{role}", self.prefix);
        assert!(
            name.len() <= 15,
            "interface name {name} longer than 15 characters"
        );
        self.names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.clone());
        name
    }

    /// Create a fresh namespace `braid-e2e-<prefix>-<role>`.
    pub fn netns(&self, role: &str) -> Netns {
        Netns::new(&format!("{NETNS_PREFIX}{}-{role}", self.prefix))
    }

    /// Third octet for this run's underlay/tunnel subnets (cosmetic: the
    /// namespaces isolate runs anyway).
    pub fn octet(&self) -> u8 {
        (10 + self.n % 240) as u8
    }

    /// Namespaces "a" and "b" joined by a veth pair ("va"/"vb") with the
    /// underlay addresses 198.18.X.1/24 and 198.18.X.2/24 (X = `octet()`).
    pub fn joined_pair(&self) -> JoinedPair {
        let x = self.octet();
        let (nsa, nsb) = (self.netns("a"), self.netns("b"));
        let (va, vb) = (self.ifname("va"), self.ifname("vb"));
        let veth = Veth::new(
            &nsa,
            &va,
            &format!("198.18.{x}.1/24"),
            &nsb,
            &vb,
            &format!("198.18.{x}.2/24"),
        );
        JoinedPair {
            veth,
            x,
            nsa,
            nsb,
            va,
            vb,
        }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Write `text` to `<dir>/<file>` with mode 0600, return the path.
    pub fn write(&self, file: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::OpenOptionsExt;
        let p = self.path(file);
        let mut f = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&p)
            .expect("write temp file");
        f.write_all(text.as_bytes()).expect("write temp file");
        p
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        for name in self.names.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = fs::remove_file(sock_path(name));
        }
        if std::thread::panicking() {
            // Keep the logs of a failed test around for inspection.
            eprintln!(
                "[{}] test failed; logs kept in {}",
                self.test,
                self.dir.display()
            );
            for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
                let p = entry.path();
                if p.extension().map(|e| e == "log").unwrap_or(false) {
                    let text = fs::read_to_string(&p).unwrap_or_default();
                    eprintln!(
                        "--- {} (last 4000 bytes) ---\n{}",
                        p.display(),
                        tail(&text, 4000)
                    );
                }
            }
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut i = s.len() - max;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

pub fn sock_path(ifname: &str) -> PathBuf {
    Path::new(WG_RUN_DIR).join(format!("{ifname}.sock"))
}

/// Remove leftovers of earlier runs of this harness whose test process is
/// gone (e.g. it was SIGKILLed, so no Drop ran). Only touches names that
/// follow this harness's convention and whose owning PID is dead.
fn sweep_stale() {
    let dead = |pid_str: &str| match pid_str.parse::<i32>() {
        Ok(pid) => pid != std::process::id() as i32 && !pid_alive(pid),
        Err(_) => false,
    };
    let list = run("ip", &["netns", "list"], SHORT);
    for line in list.stdout.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NETNS_PREFIX) else {
            continue;
        };
        let Some(pid_part) = rest.strip_prefix('b').and_then(|r| r.split('_').next()) else {
            continue;
        };
        if dead(pid_part) {
            eprintln!("removing stale namespace {name} of a dead test run");
            drop(Netns {
                name: name.to_string(),
            });
        }
    }
    // Temp dirs/files: braid-e2e-b<pid>_<n>/ (logs kept after a failure) and
    // braid-e2e-out-<pid>-<n>.{out,err}.
    for entry in fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let fname = entry.file_name().to_string_lossy().into_owned();
        let pid_part = if let Some(r) = fname.strip_prefix("braid-e2e-out-") {
            r.split('-').next()
        } else if let Some(r) = fname.strip_prefix("braid-e2e-b") {
            r.split('_').next()
        } else {
            None
        };
        if pid_part.map(dead).unwrap_or(false) {
            let p = entry.path();
            let _ = if p.is_dir() {
                fs::remove_dir_all(&p)
            } else {
                fs::remove_file(&p)
            };
        }
    }
    for entry in fs::read_dir(WG_RUN_DIR).into_iter().flatten().flatten() {
        let fname = entry.file_name().to_string_lossy().into_owned();
        if let Some(pid_part) = fname
            .strip_suffix(".sock")
            .and_then(|s| s.strip_prefix('b'))
            .and_then(|s| s.split_once('_'))
            .map(|(p, _)| p)
        {
            if dead(pid_part) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Network namespaces and veth
// ---------------------------------------------------------------------------

/// A network namespace; on drop every process inside it is terminated (by
/// PID) and the namespace is deleted, which also destroys its interfaces.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        // Clear a leftover of the same name first (cannot normally happen).
        let _ = run("ip", &["netns", "del", name], SHORT);
        run("ip", &["netns", "add", name], SHORT).expect_ok("ip netns add");
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"]).expect_ok("lo up");
        ns
    }

    /// A `Command` that runs `prog` inside this namespace.
    pub fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, prog]);
        c
    }

    /// Run `prog args…` inside the namespace with a bounded wait.
    pub fn run(&self, prog: &str, args: &[&str], timeout: Duration) -> Out {
        let mut c = self.cmd(prog);
        c.args(args);
        run_bounded(c, timeout)
    }

    /// `ip -n NS args…`
    pub fn ip(&self, args: &[&str]) -> Out {
        let mut c = Command::new("ip");
        c.args(["-n", &self.name]).args(args);
        run_bounded(c, SHORT)
    }

    /// PIDs of all processes living in this namespace.
    pub fn pids(&self) -> Vec<i32> {
        run("ip", &["netns", "pids", &self.name], SHORT)
            .stdout
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|&p| pid_alive(p))
            .collect()
    }

    /// PIDs in this namespace whose executable is `exe`.
    pub fn pids_of(&self, exe: &Path) -> Vec<i32> {
        let want = fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
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
        // Everything in this namespace was started by this test.
        for _round in 0..3 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                terminate_pid(pid, Duration::from_secs(3));
            }
        }
        let _ = run("ip", &["netns", "del", &self.name], SHORT);
    }
}

/// A veth pair with one end in each namespace, addressed and up. Deleting
/// either namespace removes it too; the guard also deletes it explicitly.
/// Two namespaces and the veth between them (see `TestEnv::joined_pair`).
/// Destructure it with `veth` last, so the veth goes before the namespaces.
pub struct JoinedPair {
    pub x: u8,
    pub nsa: Netns,
    pub nsb: Netns,
    pub va: String,
    pub vb: String,
    pub veth: Veth,
}

pub struct Veth {
    ns_a: String,
    pub a: String,
    pub b: String,
}

impl Veth {
    pub fn new(ns_a: &Netns, a: &str, addr_a: &str, ns_b: &Netns, b: &str, addr_b: &str) -> Veth {
        // Created directly inside the namespaces: never appears in the root one.
        run(
            "ip",
            &[
                "link", "add", a, "netns", &ns_a.name, "type", "veth", "peer", "name", b, "netns",
                &ns_b.name,
            ],
            SHORT,
        )
        .expect_ok("create veth pair");
        let v = Veth {
            ns_a: ns_a.name.clone(),
            a: a.to_string(),
            b: b.to_string(),
        };
        for (ns, dev, addr) in [(ns_a, a, addr_a), (ns_b, b, addr_b)] {
            let mut args = vec!["addr", "add", addr, "dev", dev];
            if addr.contains(':') {
                args.push("nodad"); // usable at once, no duplicate address detection wait
            }
            ns.ip(&args).expect_ok("veth address");
            ns.ip(&["link", "set", dev, "up"]).expect_ok("veth up");
        }
        // Wait for carrier on both ends (operstate UP), so the first packets
        // of a test are not lost to link bring-up.
        let carrier = |ns: &Netns, dev: &str| {
            let o = ns.ip(&["-o", "link", "show", "dev", dev]);
            o.ok() && o.stdout.contains("state UP") && !o.stdout.contains("NO-CARRIER")
        };
        let up = wait_until(LONG, || carrier(ns_a, a) && carrier(ns_b, b));
        assert!(up, "veth {a}/{b} never got carrier");
        v
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = run("ip", &["-n", &self.ns_a, "link", "del", &self.a], SHORT);
    }
}

// ---------------------------------------------------------------------------
// Keys and configuration files
// ---------------------------------------------------------------------------

/// `wg genkey`
pub fn genkey() -> String {
    let o = run("wg", &["genkey"], SHORT).expect_ok("wg genkey");
    o.stdout.trim().to_string()
}

/// `wg pubkey` of a private key.
pub fn pubkey(private: &str) -> String {
    let mut c = Command::new("wg");
    c.arg("pubkey");
    let o = run_bounded_stdin(&mut c, Some(&format!("{private}\n")), SHORT).expect_ok("wg pubkey");
    o.stdout.trim().to_string()
}

/// `braid genkey`
pub fn braid_genkey() -> Out {
    run(BRAID, &["genkey"], SHORT)
}

/// `braid pubkey` of a private key.
pub fn braid_pubkey(private: &str) -> Out {
    let mut c = Command::new(BRAID);
    c.arg("pubkey");
    run_bounded_stdin(&mut c, Some(&format!("{private}\n")), SHORT)
}

/// A key pair.
#[derive(Clone, Debug)]
pub struct Keys {
    pub private: String,
    pub public: String,
}

impl Keys {
    pub fn new() -> Keys {
        let private = genkey();
        let public = pubkey(&private);
        Keys { private, public }
    }
}

#[derive(Clone, Debug, Default)]
pub struct PeerConf {
    pub public_key: String,
    pub preshared_key: Option<String>,
    pub allowed_ips: Vec<String>,
    pub endpoint: Option<String>,
    pub keepalive: Option<u16>,
    /// braid's own `[Peer]` lines (Path =, Mode =, …): wg-quick files only.
    pub braid_lines: Vec<String>,
}

/// `braid up --foreground` with extra environment (test and tuning
/// knobs), waiting until the interface answers `wg show`.
pub fn up_with_env(
    env: &TestEnv,
    ns: &Netns,
    ifname: &str,
    conf: &IfaceConf,
    vars: &[(&str, &str)],
) -> ChildGuard {
    let path = env.write(&format!("{ifname}.conf"), &conf.wg_quick());
    let mut cmd = ns.cmd(BRAID);
    cmd.args(["up", "--foreground", &path.to_string_lossy()]);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let log = env.path(&format!("{ifname}.{}.log", env.n));
    let mut child = ChildGuard::spawn(cmd, &format!("braid {ifname}"), &log);
    let ok = wait_until(LONG, || {
        !child.running()
            || (sock_path(ifname).exists()
                && ns.link_up(ifname)
                && ns.run("wg", &["show", ifname], SHORT).ok())
    });
    assert!(
        ok && child.running(),
        "braid {ifname} did not come up:\n{}",
        child.log_text()
    );
    child
}

/// `braid show IFNAME --json` inside `ns`, parsed (`Null` if it failed),
/// and its raw text.
pub fn braid_show_json(ns: &Netns, ifname: &str) -> (serde_json::Value, String) {
    let out = ns.run(BRAID, &["show", ifname, "--json"], SHORT);
    let v = serde_json::from_str(&out.stdout).unwrap_or_default();
    (v, out.stdout)
}

/// The counter `name` in an `extra` list of `braid show --json` (the
/// interface's or a peer's): `[["name", value], ...]`.
pub fn extra_counter(extra: &serde_json::Value, name: &str) -> Option<u64> {
    extra
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e[0] == name)
        .and_then(|e| e[1].as_u64())
}

/// The usual two ends of a tunnel over a [`JoinedPair`] with octet `x`:
/// A at 198.19.x.1 (port 51820) reaching B at 198.18.x.2:51821, B at
/// 198.19.x.2 waiting for A. Tests change the fields they are about.
pub fn tunnel_confs(ka: &Keys, kb: &Keys, x: u8) -> (IfaceConf, IfaceConf) {
    let a = IfaceConf {
        private_key: ka.private.clone(),
        listen_port: Some(51820),
        address: vec![format!("198.19.{x}.1/24")],
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: vec![format!("198.19.{x}.2/32")],
            endpoint: Some(format!("198.18.{x}.2:51821")),
            ..Default::default()
        }],
        ..Default::default()
    };
    let b = IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(51821),
        address: vec![format!("198.19.{x}.2/24")],
        peers: vec![PeerConf {
            public_key: ka.public.clone(),
            allowed_ips: vec![format!("198.19.{x}.1/32")],
            ..Default::default()
        }],
        ..Default::default()
    };
    (a, b)
}

#[derive(Clone, Debug, Default)]
pub struct IfaceConf {
    pub private_key: String,
    pub listen_port: Option<u16>,
    /// wg-quick only (not understood by `wg setconf`)
    pub address: Vec<String>,
    pub mtu: Option<u32>,
    /// braid's own `[Interface]` lines (MssFix =, …): wg-quick files only.
    pub braid_lines: Vec<String>,
    pub peers: Vec<PeerConf>,
}

impl IfaceConf {
    /// wg-quick style file (what `braid up` and `wg-quick up` read).
    pub fn wg_quick(&self) -> String {
        self.render(true)
    }

    /// `wg setconf` style file (what we feed wireguard-go).
    pub fn wg_setconf(&self) -> String {
        self.render(false)
    }

    fn render(&self, quick: bool) -> String {
        let mut s = String::from("[Interface]\n");
        s += &format!("PrivateKey = {}\n", self.private_key);
        if let Some(p) = self.listen_port {
            s += &format!("ListenPort = {p}\n");
        }
        if quick {
            if !self.address.is_empty() {
                s += &format!("Address = {}\n", self.address.join(", "));
            }
            if let Some(m) = self.mtu {
                s += &format!("MTU = {m}\n");
            }
            for line in &self.braid_lines {
                s += &format!("{line}\n");
            }
        }
        for p in &self.peers {
            s += "\n[Peer]\n";
            s += &format!("PublicKey = {}\n", p.public_key);
            if let Some(k) = &p.preshared_key {
                s += &format!("PresharedKey = {k}\n");
            }
            s += &format!("AllowedIPs = {}\n", p.allowed_ips.join(", "));
            if let Some(e) = &p.endpoint {
                s += &format!("Endpoint = {e}\n");
            }
            if let Some(k) = p.keepalive {
                s += &format!("PersistentKeepalive = {k}\n");
            }
            if quick {
                for line in &p.braid_lines {
                    s += &format!("{line}\n");
                }
            }
        }
        s
    }
}

// ---------------------------------------------------------------------------
// wireguard-go peer
// ---------------------------------------------------------------------------

/// `wireguard-go -f NAME` in a namespace, configured with `wg setconf` and
/// `ip`. On drop: SIGTERM/SIGKILL by PID, socket file removed.
pub struct WgGo {
    pub ns: String,
    pub ifname: String,
    pub child: ChildGuard,
}

impl WgGo {
    pub fn start(env: &TestEnv, ns: &Netns, ifname: &str, conf: &IfaceConf) -> WgGo {
        let mut c = ns.cmd("wireguard-go");
        c.args(["-f", ifname]).env("LOG_LEVEL", "debug");
        let log = env.path(&format!("{ifname}.wireguard-go.log"));
        let mut g = WgGo {
            ns: ns.name.clone(),
            ifname: ifname.to_string(),
            child: ChildGuard::spawn(c, &format!("wireguard-go {ifname}"), &log),
        };
        let sock = sock_path(ifname);
        let ready = wait_until(LONG, || {
            sock.exists() && ns.run("wg", &["show", ifname], SHORT).ok() || !g.child.running()
        });
        assert!(
            ready && g.child.running(),
            "wireguard-go {ifname} did not come up:\n{}",
            g.child.log_text()
        );
        let file = env.write(&format!("{ifname}.setconf"), &conf.wg_setconf());
        ns.run("wg", &["setconf", ifname, &file.to_string_lossy()], SHORT)
            .expect_ok("wg setconf (wireguard-go)");
        for a in &conf.address {
            let mut args = vec!["address", "add", a.as_str(), "dev", ifname];
            if a.contains(':') {
                args.push("nodad");
            }
            ns.ip(&args).expect_ok("address on wireguard-go tun");
        }
        if let Some(m) = conf.mtu {
            ns.ip(&["link", "set", ifname, "mtu", &m.to_string()])
                .expect_ok("mtu");
        }
        ns.ip(&["link", "set", ifname, "up"])
            .expect_ok("wireguard-go tun up");
        g.child.name = format!("wireguard-go {ifname}");
        g
    }
}

impl Drop for WgGo {
    fn drop(&mut self) {
        self.child.terminate();
        let _ = fs::remove_file(sock_path(&self.ifname));
    }
}

// ---------------------------------------------------------------------------
// braid daemon
// ---------------------------------------------------------------------------

/// Stop whatever runs an interface `ifname` inside `ns`, after the polite
/// way (`braid down`, `wg-quick down`) was tried: wait for the processes of
/// `exe` in that namespace to go, then SIGTERM/SIGKILL them by PID, delete the
/// link if it is still there, and remove the UAPI socket file.
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
    let _ = fs::remove_file(sock_path(ifname));
}

/// How a braid instance was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BraidMode {
    /// `braid up FILE`: daemonizes, returns once the interface is up.
    Daemon,
    /// `braid up --foreground FILE` as a child of the test.
    Foreground,
}

/// A braid interface brought up with `braid up` in a namespace. On drop:
/// `braid down NAME`, then forced cleanup (processes by PID, link, socket).
pub struct BraidUp<'a> {
    pub ns: &'a Netns,
    pub ifname: String,
    pub conf_path: PathBuf,
    pub mode: BraidMode,
    /// Output of `braid up` (daemon mode).
    pub up: Option<Out>,
    /// The foreground process (foreground mode); its output is in `log`.
    pub child: Option<ChildGuard>,
    /// stdout (daemon mode) or stdout+stderr (foreground) of braid.
    pub log: PathBuf,
    /// stderr of `braid up` and of a daemon that kept it (daemon mode).
    pub err_log: Option<PathBuf>,
    downed: bool,
}

impl<'a> BraidUp<'a> {
    /// Write `<ifname>.conf` and start braid. Does not assert success: call
    /// [`BraidUp::assert_up`] (the guard exists first so cleanup always runs).
    pub fn start(
        env: &TestEnv,
        ns: &'a Netns,
        ifname: &str,
        conf: &IfaceConf,
        mode: BraidMode,
    ) -> BraidUp<'a> {
        let conf_path = env.write(&format!("{ifname}.conf"), &conf.wg_quick());
        let log = env.path(&format!("{ifname}.braid.log"));
        let mut g = BraidUp {
            ns,
            ifname: ifname.to_string(),
            conf_path: conf_path.clone(),
            mode,
            up: None,
            child: None,
            log: log.clone(),
            err_log: None,
            downed: false,
        };
        let conf_s = conf_path.to_string_lossy().into_owned();
        match mode {
            BraidMode::Daemon => {
                let mut c = ns.cmd(BRAID);
                c.args(["up", &conf_s]).env("RUST_LOG", "debug");
                let err_log = env.path(&format!("{ifname}.braid-stderr.log"));
                let out = run_bounded_files(&mut c, None, Duration::from_secs(30), &log, &err_log);
                g.err_log = Some(err_log);
                g.up = Some(out);
            }
            BraidMode::Foreground => {
                let mut c = ns.cmd(BRAID);
                c.args(["up", "--foreground", &conf_s])
                    .env("RUST_LOG", "debug");
                let mut child = ChildGuard::spawn(c, &format!("braid {ifname}"), &log);
                let sock = sock_path(ifname);
                wait_until(LONG, || {
                    !child.running()
                        || (sock.exists()
                            && ns.link_up(ifname)
                            && ns.run("wg", &["show", ifname], SHORT).ok())
                });
                g.child = Some(child);
            }
        }
        g
    }

    /// Panic with diagnostics unless braid is up: `braid up` succeeded (or the
    /// foreground process is alive), the TUN exists and is up, and the UAPI
    /// socket answers `wg show`.
    pub fn assert_up(&mut self) {
        let name = self.ifname.clone();
        if let Some(out) = &self.up {
            assert!(out.ok(), "braid up failed: {}", out.describe());
        }
        if let Some(child) = self.child.as_mut() {
            assert!(
                child.running(),
                "braid up --foreground {name} exited ({:?}):\n{}",
                child.exit_status(),
                child.log_text()
            );
        }
        let ns = self.ns;
        let ok = wait_until(LONG, || ns.link_up(&name));
        assert!(
            ok,
            "braid {name}: interface not present/up in {}: {:?}",
            ns.name,
            ns.links()
        );
        let ok = wait_until(LONG, || sock_path(&name).exists());
        assert!(
            ok,
            "braid {name}: no UAPI socket {}",
            sock_path(&name).display()
        );
        let show = ns.run("wg", &["show", &name], SHORT);
        assert!(
            show.ok(),
            "braid {name}: `wg show` over the UAPI socket failed: {}",
            show.describe()
        );
    }

    /// Daemon/process output so far.
    /// Everything braid wrote: `braid up`'s stdout and stderr including what
    /// a daemon kept writing there later (daemon mode), or the foreground
    /// process's output.
    pub fn log_text(&self) -> String {
        let mut s = fs::read_to_string(&self.log).unwrap_or_default();
        if let Some(p) = &self.err_log {
            s += &fs::read_to_string(p).unwrap_or_default();
        }
        s
    }

    /// `braid down NAME` (once). Returns its output.
    pub fn down(&mut self) -> Out {
        self.downed = true;
        let mut c = self.ns.cmd(BRAID);
        c.args(["down", &self.ifname]);
        let base = self.log.with_extension(format!(
            "down{}",
            OUT_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let (o, e) = (base.with_extension("out"), base.with_extension("err"));
        // A foreground braid is our child: reap it while `braid down` waits
        // for it to go, or it would stay a zombie that looks alive.
        let child = &mut self.child;
        let out = run_bounded_tick(&mut c, None, LONG, &o, &e, &mut || {
            if let Some(ch) = child.as_mut() {
                ch.exit_status();
            }
        });
        let _ = fs::remove_file(&o);
        let _ = fs::remove_file(&e);
        if let Some(child) = self.child.as_mut() {
            child.wait_exit(Duration::from_secs(10));
        }
        out
    }
}

impl Drop for BraidUp<'_> {
    fn drop(&mut self) {
        if !self.downed {
            let out = self.down();
            if !out.ok() {
                eprintln!("cleanup: {}", out.describe());
            }
        }
        if let Some(mut child) = self.child.take() {
            child.terminate();
        }
        force_cleanup(self.ns, &self.ifname, Path::new(BRAID));
        keep_daemon_log(&self.ifname, &self.log);
    }
}

/// Moves what a braid daemon of `ifname` logged (a daemon puts it in
/// /var/log/braid) next to `beside`, one of the test's files: shown if the
/// test failed, removed with them otherwise.
pub fn keep_daemon_log(ifname: &str, beside: &Path) {
    let daemon_log = PathBuf::from(braid::background::log_path(ifname));
    if daemon_log.exists() {
        let kept = beside.with_file_name(format!("{ifname}.daemon.log"));
        if fs::rename(&daemon_log, &kept).is_err() {
            let _ = fs::copy(&daemon_log, &kept);
            let _ = fs::remove_file(&daemon_log);
        }
    }
}

// ---------------------------------------------------------------------------
// wg show parsing
// ---------------------------------------------------------------------------

/// `wg show NAME` inside a namespace (never `dump`/`showconf`, which print
/// the private key).
pub fn wg_show(ns: &Netns, ifname: &str) -> Out {
    ns.run("wg", &["show", ifname], SHORT)
}

/// Parse a human-readable size from `wg show` ("788 B", "1.23 MiB").
pub fn parse_size(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let num: f64 = it.next()?.parse().ok()?;
    let mult = match it.next().unwrap_or("B") {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0f64.powi(4),
        _ => return None,
    };
    Some(num * mult)
}

/// From `wg show` output: (received, sent) bytes of every peer's `transfer:`.
pub fn parse_transfers(show: &str) -> Vec<(f64, f64)> {
    show.lines()
        .filter_map(|l| l.trim().strip_prefix("transfer:"))
        .filter_map(|rest| {
            let (rx, tx) = rest.split_once(',')?;
            let rx = rx.trim().strip_suffix("received")?.trim();
            let tx = tx.trim().strip_suffix("sent")?.trim();
            Some((parse_size(rx)?, parse_size(tx)?))
        })
        .collect()
}

/// Assert `wg show NAME` reports a handshake and nonzero transfer both ways.
pub fn assert_wg_show_handshake_and_transfer(ns: &Netns, ifname: &str) -> String {
    let show = wg_show(ns, ifname).expect_ok(&format!("wg show {ifname}"));
    let text = show.stdout;
    assert!(
        text.lines()
            .any(|l| l.trim().starts_with("latest handshake:")),
        "`wg show {ifname}` has no `latest handshake`:\n{text}"
    );
    let t = parse_transfers(&text);
    assert!(
        !t.is_empty() && t.iter().all(|&(rx, tx)| rx > 0.0 && tx > 0.0),
        "`wg show {ifname}` transfer not nonzero both ways ({t:?}):\n{text}"
    );
    text
}

// ---------------------------------------------------------------------------
// ping and iperf3
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct PingResult {
    pub transmitted: u32,
    pub received: u32,
    pub loss_percent: f64,
    pub output: String,
}

/// Parse `ping` summary: "5 packets transmitted, 5 received, 0% packet loss".
pub fn parse_ping(out: &str) -> Option<PingResult> {
    let line = out.lines().find(|l| l.contains("packets transmitted"))?;
    let mut transmitted = None;
    let mut received = None;
    let mut loss = None;
    for part in line.split(',') {
        let part = part.trim();
        let first = part.split_whitespace().next().unwrap_or("");
        if part.ends_with("packets transmitted") {
            transmitted = first.parse().ok();
        } else if part.ends_with("received") {
            received = first.parse().ok();
        } else if part.ends_with("packet loss") {
            loss = first.trim_end_matches('%').parse().ok();
        }
    }
    Some(PingResult {
        transmitted: transmitted?,
        received: received?,
        loss_percent: loss?,
        output: out.to_string(),
    })
}

/// `ping -c COUNT -i 0.2 DST` inside a namespace, see [`ping_counted`].
pub fn ping(ns: &Netns, dst: &str, count: u32) -> PingResult {
    ping_counted(ns, &["-i", "0.2"], dst, count)
}

/// `ping -c COUNT` with `extra` options (interval, family, size, …) to
/// `dst` inside a namespace: `transmitted` is COUNT and `received` how many
/// of those COUNT requests (icmp_seq 1..=COUNT) were answered.
///
/// With `-c` alone, ping waits for the last reply only twice the slowest
/// round trip so far (or one interval) and calls it lost after that, so a
/// reply held up for a moment on a busy machine would count as a loss. With
/// `-w` it waits until COUNT replies are in (bounded by the deadline),
/// sending further requests meanwhile; those are not counted here. A reply
/// is lost only if it never comes while ping still listens.
pub fn ping_counted(ns: &Netns, extra: &[&str], dst: &str, count: u32) -> PingResult {
    let (c, w) = (count.to_string(), LONG.as_secs().to_string());
    let args: Vec<&str> = ["-n", "-c", &c, "-w", &w]
        .into_iter()
        .chain(extra.iter().copied())
        .chain([dst])
        .collect();
    let out = ns.run("ping", &args, LONG + SHORT);
    let answered = answered_seqs(&out.stdout);
    let received = (1..=count).filter(|s| answered.contains(s)).count() as u32;
    PingResult {
        transmitted: count,
        received,
        loss_percent: 100.0 * (count - received) as f64 / count.max(1) as f64,
        output: out.describe(),
    }
}

/// The icmp_seq of every echo reply ping printed (`… bytes from …`).
pub fn answered_seqs(out: &str) -> std::collections::BTreeSet<u32> {
    out.lines()
        .filter(|l| l.contains(" bytes from "))
        .filter_map(|l| {
            let rest = &l[l.find("icmp_seq=")? + "icmp_seq=".len()..];
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Ping once a second until one reply arrives (the first packet triggers the
/// WireGuard handshake) or `timeout` passes.
pub fn ping_until_reply(ns: &Netns, dst: &str, timeout: Duration) -> bool {
    wait_until(timeout, || {
        ns.run("ping", &["-n", "-c", "1", "-W", "1", dst], SHORT)
            .ok()
    })
}

static IPERF_LOCK: Mutex<()> = Mutex::new(());

/// Serialize throughput measurements between tests of one binary so two
/// iperf3 runs never share the (2) CPUs. Setup still runs in parallel.
pub fn iperf_lock() -> MutexGuard<'static, ()> {
    IPERF_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run one iperf3 TCP test: server (`-s -1`) in `server_ns`, client `-J` in
/// `client_ns` towards `server_addr` for `secs` seconds; `reverse` = `-R`
/// (server sends). Returns `end.sum_received.bits_per_second`.
pub fn iperf3(
    env: &TestEnv,
    client_ns: &Netns,
    server_ns: &Netns,
    server_addr: &str,
    secs: u32,
    reverse: bool,
) -> Result<f64, String> {
    let port = "5201";
    let log = env.path(&format!(
        "iperf3-server-{}.log",
        if reverse { "rev" } else { "fwd" }
    ));
    let mut c = server_ns.cmd("iperf3");
    c.args(["-s", "-1", "-B", server_addr, "-p", port]);
    let mut server = ChildGuard::spawn(c, "iperf3 server", &log);
    let listening = wait_until(LONG, || {
        !server.running()
            || server_ns
                .run("ss", &["-Hltn", &format!("sport = :{port}")], SHORT)
                .stdout
                .contains(port)
    });
    if !listening || !server.running() {
        return Err(format!(
            "iperf3 server did not start:\n{}",
            server.log_text()
        ));
    }
    let t = secs.to_string();
    let mut args = vec![
        "-c",
        server_addr,
        "-p",
        port,
        "-t",
        &t,
        "-J",
        "--connect-timeout",
        "20000",
    ];
    if reverse {
        args.push("-R");
    }
    let out = client_ns.run("iperf3", &args, Duration::from_secs(secs as u64 + 30));
    drop(server);
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|e| format!("iperf3 -J output is not JSON ({e}): {}", out.describe()))?;
    if let Some(err) = v.get("error") {
        return Err(format!("iperf3 error: {err}"));
    }
    v.pointer("/end/sum_received/bits_per_second")
        .and_then(|b| b.as_f64())
        .ok_or_else(|| {
            format!(
                "no end.sum_received.bits_per_second in iperf3 output: {}",
                out.describe()
            )
        })
}
