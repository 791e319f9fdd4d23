//! Processes the lab starts and commands it runs: every wait is bounded,
//! and a process is only ever signalled by its PID, and only when the lab
//! started it (directly, or inside a namespace the lab created).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// What every lab step returns: the value, or what went wrong in words.
pub type LabResult<T> = Result<T, String>;

/// Generous bound for "this should happen" waits: nothing fails for being
/// slow, only for something not happening within this bound.
pub const LONG: Duration = Duration::from_secs(20);
/// Bound for commands that should return promptly (`wg show`, `ip ...`).
pub const SHORT: Duration = Duration::from_secs(10);

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
    match tools.iter().find(|tool| !tool_exists(tool)) {
        Some(tool) => Err(format!(
            "`{tool}` is not installed (apt-get install iproute2 iperf3 iputils-ping)"
        )),
        None => Ok(()),
    }
}

/// Finds `tool` on PATH or in the usual sbin/bin directories (or as an
/// absolute path).
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

/// What a command run with a bounded wait did.
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

    /// `Err` with a readable message (`context: …`) unless it succeeded.
    pub fn check(self, context: &str) -> LabResult<Out> {
        if self.ok() {
            Ok(self)
        } else {
            Err(format!("{context}: {}", self.describe()))
        }
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

/// Numbers the temporary output files of bounded runs (and anything else
/// that needs a name unique within this process).
pub fn next_number() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// The temporary files of bounded runs: `braid-e2e-out-<pid>-<n>.{out,err}`.
pub const OUT_FILE_PREFIX: &str = "braid-e2e-out-";

fn describe_cmd(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` with stdin closed, captures stdout/stderr, waits at most
/// `timeout`.
///
/// Output goes to temporary files rather than pipes: a command that starts a
/// daemon (`braid up`, `wg-quick up`) may leave the daemon holding the write
/// end, and we must not wait for EOF on it.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Out {
    run_bounded_stdin(&mut cmd, None, timeout)
}

/// [`run_bounded`] with `stdin` written to the command's standard input.
pub fn run_bounded_stdin(cmd: &mut Command, stdin: Option<&str>, timeout: Duration) -> Out {
    let base = std::env::temp_dir().join(format!(
        "{OUT_FILE_PREFIX}{}-{}",
        std::process::id(),
        next_number()
    ));
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
    let files = fs::File::create(out_path).and_then(|o| Ok((o, fs::File::create(err_path)?)));
    let (out_file, err_file) = match files {
        Ok(files) => files,
        Err(e) => {
            return Out {
                what,
                status: None,
                stdout: String::new(),
                stderr: format!("cannot create the output files: {e}"),
                timed_out: false,
            }
        }
    };
    cmd.stdout(Stdio::from(out_file))
        .stderr(Stdio::from(err_file))
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

/// Runs a program with arguments (in no namespace), bounded by `timeout`.
pub fn run_program(prog: &str, args: &[&str], timeout: Duration) -> Out {
    let mut c = Command::new(prog);
    c.args(args);
    run_bounded(c, timeout)
}

/// Polls `f` every 50 ms until it returns true or `timeout` passes.
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
/// started (directly, or inside a namespace we created).
pub fn terminate_pid(pid: i32, grace: Duration) {
    if pid <= 1 || !pid_alive(pid) {
        return;
    }
    // SAFETY: plain kill(2) on a specific PID.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    if wait_until(grace, || !pid_alive(pid)) {
        return;
    }
    // SAFETY: as above.
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
    pub fn spawn(mut cmd: Command, name: &str, log: &Path) -> LabResult<ChildGuard> {
        let what = describe_cmd(&cmd);
        let f = fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let f2 = f.try_clone().map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(f))
            .stderr(Stdio::from(f2));
        let child = cmd.spawn().map_err(|e| format!("spawn `{what}`: {e}"))?;
        Ok(ChildGuard {
            child: Some(child),
            name: name.to_string(),
            log: log.to_path_buf(),
        })
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

    /// Waits for the child to exit on its own, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut st = None;
        wait_until(timeout, || {
            st = self.exit_status();
            st.is_some()
        });
        st
    }

    /// Sends SIGTERM if it still runs (see [`ChildGuard::terminate_within`]).
    pub fn ask_to_stop(&mut self) {
        if self.running() {
            // SAFETY: a signal to a child we started and have not reaped.
            unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        }
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL; always reaps.
    pub fn terminate_within(&mut self, grace: Duration) {
        self.ask_to_stop();
        if let Some(mut c) = self.child.take() {
            let exited = wait_until(grace, || !matches!(c.try_wait(), Ok(None)));
            if !exited {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }

    /// SIGTERM, up to 5 s grace, SIGKILL; always reaps.
    pub fn terminate(&mut self) {
        self.terminate_within(Duration::from_secs(5));
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.terminate();
    }
}
