//! The end-to-end tests' side of the lab: what only tests need (a
//! [`TestEnv`] per test, preflight checks, panicking wrappers over
//! `braid::toolkit::lab`, braid under test as [`BraidUp`]). Namespaces,
//! processes, configs, ping, iperf3 and traffic come from the lab.
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

pub use braid::toolkit::lab::braid::{extra_counter, force_cleanup, keep_daemon_log, show_json};
pub use braid::toolkit::lab::config::{tunnel_confs, write_private, IfaceConf, Keys, PeerConf};
pub use braid::toolkit::lab::netns::{Netns, Veth};
pub use braid::toolkit::lab::ping::{parse_ping, ping, ping_counted, ping_until_reply, PingResult};
pub use braid::toolkit::lab::process::{
    next_number, pid_alive, run_bounded, run_bounded_files, run_bounded_stdin, run_bounded_tick,
    run_program, wait_until, which, ChildGuard, Out, LONG, OUT_FILE_PREFIX, SHORT,
};
pub use braid::toolkit::lab::uapi::{parse_transfers, sock_path, wg_show, WG_RUN_DIR};
pub use braid::toolkit::lab::wireguard_go::WgGo;
pub use braid::toolkit::lab::{iperf, LabResult};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::time::Duration;

/// Path of the braid binary under test.
pub const BRAID: &str = env!("CARGO_BIN_EXE_braid");

const NETNS_PREFIX: &str = "braid-e2e-";

// ---------------------------------------------------------------------------
// Panicking wrappers: a test fails where the lab reports an error
// ---------------------------------------------------------------------------

/// `.or_panic()`: the value, or a panic with the lab's message.
pub trait OrPanic<T> {
    fn or_panic(self) -> T;
}

impl<T> OrPanic<T> for LabResult<T> {
    #[track_caller]
    fn or_panic(self) -> T {
        self.unwrap_or_else(|e| panic!("{e}"))
    }
}

/// `out.expect_ok(context)`: panic with a readable message unless the
/// command succeeded.
pub trait ExpectOk {
    fn expect_ok(self, context: &str) -> Out;
}

impl ExpectOk for Out {
    #[track_caller]
    fn expect_ok(self, context: &str) -> Out {
        self.check(context).or_panic()
    }
}

/// `wg genkey`
pub fn genkey() -> String {
    braid::toolkit::lab::config::wg_genkey().or_panic()
}

/// `wg pubkey` of a private key.
pub fn pubkey(private: &str) -> String {
    braid::toolkit::lab::config::wg_pubkey(private).or_panic()
}

/// A key pair from `wg genkey` / `wg pubkey`.
pub fn wg_keys() -> Keys {
    Keys::from_wg().or_panic()
}

/// `braid genkey`
pub fn braid_genkey() -> Out {
    run_program(BRAID, &["genkey"], SHORT)
}

/// `braid pubkey` of a private key.
pub fn braid_pubkey(private: &str) -> Out {
    let mut c = Command::new(BRAID);
    c.arg("pubkey");
    run_bounded_stdin(&mut c, Some(&format!("{private}\n")), SHORT)
}

/// `wireguard-go` as the other end (see [`WgGo::start`]), files in the
/// test's directory.
pub fn wg_go(env: &TestEnv, ns: &Netns, ifname: &str, conf: &IfaceConf) -> WgGo {
    WgGo::start(ns, ifname, conf, &env.dir).or_panic()
}

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
        "qemu-aarch64" | "qemu-x86_64" => "qemu-user",
        "resolvconf" => "openresolv",
        "nft" => "nftables",
        "systemd-analyze" => "systemd",
        "dpkg" | "dpkg-deb" => "dpkg",
        "useradd" => "passwd",
        "man" => "man-db",
        _ => "?",
    }
}

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
    /// Dropped after `Drop for TestEnv` cleaned up: the next test that
    /// must run alone may start only then.
    _turn: SuiteTurn,
}

/// Which tests run now: any number side by side, or one alone (see
/// [`TestEnv::alone`]). A test waiting to run alone lets no new test start,
/// so it is not starved by the other test thread; no test holds two
/// environments, so that wait cannot close on itself.
struct SuiteGate {
    running: usize,
    alone: bool,
    waiting_alone: usize,
}

static SUITE: Mutex<SuiteGate> = Mutex::new(SuiteGate {
    running: 0,
    alone: false,
    waiting_alone: 0,
});
static SUITE_CHANGED: Condvar = Condvar::new();

/// A test's place in the [`SuiteGate`], given back when dropped.
struct SuiteTurn {
    alone: bool,
}

impl SuiteTurn {
    fn take(alone: bool) -> SuiteTurn {
        let mut gate = SUITE.lock().unwrap_or_else(|e| e.into_inner());
        if alone {
            gate.waiting_alone += 1;
            while gate.alone || gate.running > 0 {
                gate = SUITE_CHANGED.wait(gate).unwrap_or_else(|e| e.into_inner());
            }
            gate.waiting_alone -= 1;
            gate.alone = true;
        } else {
            while gate.alone || gate.waiting_alone > 0 {
                gate = SUITE_CHANGED.wait(gate).unwrap_or_else(|e| e.into_inner());
            }
            gate.running += 1;
        }
        SuiteTurn { alone }
    }
}

impl Drop for SuiteTurn {
    fn drop(&mut self) {
        let mut gate = SUITE.lock().unwrap_or_else(|e| e.into_inner());
        if self.alone {
            gate.alone = false;
        } else {
            gate.running -= 1;
        }
        SUITE_CHANGED.notify_all();
    }
}

std::thread_local! {
    /// The panic of this thread, where and what (see `remember_panics`).
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}
static PANIC_HOOK: Once = Once::new();

/// Keeps each thread's panic (place and message) for [`TestEnv`]'s drop,
/// which repeats it after the logs it prints: CI shows the end of a long
/// output, and the assertion that failed is otherwise above the logs.
fn remember_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{at}: {message}")));
        default(info);
    }));
}

impl TestEnv {
    pub fn new(test: &str) -> TestEnv {
        Self::with_turn(test, SuiteTurn::take(false))
    }

    /// The same for a test that must run with no other test beside it:
    /// one that measures timing a busy host really changes (the other
    /// test's real-time threads and its packets on both cores reorder a
    /// veth by milliseconds). It waits for the tests running now, and no
    /// other starts until it is done.
    pub fn alone(test: &str) -> TestEnv {
        Self::with_turn(test, SuiteTurn::take(true))
    }

    fn with_turn(test: &str, turn: SuiteTurn) -> TestEnv {
        SWEEP.call_once(sweep_stale);
        PANIC_HOOK.call_once(remember_panics);
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
            _turn: turn,
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

    /// Create a fresh namespace `braid-e2e-<prefix>-<role>` (a leftover
    /// of that name can only be ours: the prefix holds our PID).
    pub fn netns(&self, role: &str) -> Netns {
        let name = format!("{NETNS_PREFIX}{}-{role}", self.prefix);
        let _ = run_program("ip", &["netns", "del", &name], SHORT);
        Netns::new(&name).or_panic()
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
        )
        .or_panic();
        JoinedPair {
            veth,
            x,
            nsa,
            nsb,
            va,
            vb,
        }
    }

    /// How most two-sided tests start: [`TestEnv::joined_pair`], then per
    /// side its namespace, tunnel interface name (`<prefix>a`, `<prefix>b`)
    /// and a key pair from `wg`: `(x, (nsa, ifa, ka), (nsb, ifb, kb), veth)`.
    /// Bind `veth` last (`_veth`), so it goes before the namespaces.
    pub fn two_sides(&self) -> (u8, Side, Side, Veth) {
        let JoinedPair {
            x, nsa, nsb, veth, ..
        } = self.joined_pair();
        let (ka, kb) = (wg_keys(), wg_keys());
        let (ifa, ifb) = (self.ifname("a"), self.ifname("b"));
        (x, (nsa, ifa, ka), (nsb, ifb, kb), veth)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Write `text` to `<dir>/<file>` with mode 0600, return the path.
    pub fn write(&self, file: &str, text: &str) -> PathBuf {
        let p = self.path(file);
        write_private(&p, text).or_panic();
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
            if let Some(panic) = LAST_PANIC.with(|p| p.borrow_mut().take()) {
                let head: String = panic.chars().take(800).collect();
                eprintln!("[{}] failed at {head}", self.test);
            }
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// (thread name, /proc directory) of every thread of `pid`.
pub fn threads(pid: i32) -> Vec<(String, PathBuf)> {
    let dir = format!("/proc/{pid}/task");
    fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .flatten()
        .map(|t| {
            let path = t.path();
            let name = fs::read_to_string(path.join("comm")).unwrap_or_default();
            (name.trim().to_string(), path)
        })
        .collect()
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

/// Remove leftovers of earlier runs of this harness whose test process is
/// gone (e.g. it was SIGKILLed, so no Drop ran). Only touches names that
/// follow this harness's convention and whose owning PID is dead: never
/// those of a sibling test (same PID, this process) nor of another test
/// process still running. Runs once per process, before the first test.
fn sweep_stale() {
    let dead = |pid_str: &str| match pid_str.parse::<i32>() {
        Ok(pid) => pid != std::process::id() as i32 && !pid_alive(pid),
        Err(_) => false,
    };
    let list = run_program("ip", &["netns", "list"], SHORT);
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
            drop(Netns::existing(name));
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
        let pid_part = if let Some(r) = fname.strip_prefix(OUT_FILE_PREFIX) {
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

/// Two namespaces and the veth between them (see `TestEnv::joined_pair`).
/// Destructure it with `veth` last, so the veth goes before the namespaces.
/// One side of [`TestEnv::two_sides`]: namespace, tunnel interface, keys.
pub type Side = (Netns, String, Keys);

pub struct JoinedPair {
    pub x: u8,
    pub nsa: Netns,
    pub nsb: Netns,
    pub va: String,
    pub vb: String,
    pub veth: Veth,
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
    let mut child = ChildGuard::spawn(cmd, &format!("braid {ifname}"), &log).or_panic();
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
    show_json(ns, Path::new(BRAID), ifname)
}

/// An interface-wide counter of `braid show IFNAME --json` (its `extra`
/// entries: `tun_queues`, `crypto_helpers`, …); panics, with the output,
/// if there is none.
pub fn interface_counter(ns: &Netns, ifname: &str, name: &str) -> u64 {
    let (show, text) = braid_show_json(ns, ifname);
    extra_counter(&show["extra"], name)
        .unwrap_or_else(|| panic!("`braid show {ifname} --json` has no {name}: {text}"))
}

// ---------------------------------------------------------------------------
// braid under test
// ---------------------------------------------------------------------------

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
        Self::start_with(env, ns, ifname, conf, mode, &[])
    }

    /// [`BraidUp::start`] with more arguments for `braid up` (`-v`, …).
    pub fn start_with(
        env: &TestEnv,
        ns: &'a Netns,
        ifname: &str,
        conf: &IfaceConf,
        mode: BraidMode,
        up_args: &[&str],
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
                c.arg("up")
                    .args(up_args)
                    .arg(&conf_s)
                    .env("RUST_LOG", "debug");
                let err_log = env.path(&format!("{ifname}.braid-stderr.log"));
                let out = run_bounded_files(&mut c, None, Duration::from_secs(30), &log, &err_log);
                g.err_log = Some(err_log);
                g.up = Some(out);
            }
            BraidMode::Foreground => {
                let mut c = ns.cmd(BRAID);
                c.args(["up", "--foreground"])
                    .args(up_args)
                    .arg(&conf_s)
                    .env("RUST_LOG", "debug");
                let mut child = ChildGuard::spawn(c, &format!("braid {ifname}"), &log).or_panic();
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
        let base = self.log.with_extension(format!("down{}", next_number()));
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
// Throughput
// ---------------------------------------------------------------------------

static IPERF_LOCK: Mutex<()> = Mutex::new(());

/// Serialize throughput measurements (iperf3, `braid bench tunnel`)
/// between the tests: all of them share this one process, and
/// two measurements must never share the (2) CPUs. Setup still runs in
/// parallel.
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
    let log = env.path(&format!(
        "iperf3-server-{}.log",
        if reverse { "rev" } else { "fwd" }
    ));
    let report = iperf::tcp(
        &client_ns.name,
        &server_ns.name,
        server_addr,
        secs,
        reverse,
        &log,
    )?;
    report.received_bps.ok_or_else(|| {
        format!(
            "no end.sum_received.bits_per_second in iperf3 output: {}",
            report.json
        )
    })
}
