//! [`Lab`]: one owner for a whole setup (namespaces, veths, children,
//! braid interfaces, files) that removes all of it when dropped, for the
//! demo and the benches.

use super::netns::{Netns, Veth};
use super::process::{ChildGuard, LabResult};
use super::{config, iperf, netns, ping};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A child process the lab started (netem, iperf3 server…).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildId(pub(super) usize);

pub struct Lab {
    pub(super) prefix: String,
    pub(super) braid: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) children: Vec<Option<ChildGuard>>,
    /// braid interfaces to take down, as (namespace, name).
    pub(super) interfaces: Vec<(String, String)>,
    pub(super) veths: Vec<Veth>,
    pub(super) namespaces: Vec<Netns>,
    /// Their names, as handed out.
    pub(super) namespace_names: Vec<String>,
    /// Files outside the lab directory to remove on drop (a VPN's UAPI
    /// socket, which a killed process leaves behind).
    pub(super) stray_files: Vec<PathBuf>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        // SIGTERM first, so children remove what they made (sockets, TUN
        // devices); whoever has not exited after a grace period is killed.
        for child in self.children.iter_mut().flatten() {
            child.ask_to_stop();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        for child in self.children.iter_mut().flatten() {
            child.terminate_within(deadline.saturating_duration_since(Instant::now()));
        }
        for (ns, name) in std::mem::take(&mut self.interfaces) {
            let _ = run_quietly(self.braid_in(&ns).args(["down", &name]));
        }
        // Veths first, then the namespaces (and whatever still runs there).
        self.veths.clear();
        self.namespaces.clear();
        for file in &self.stray_files {
            let _ = std::fs::remove_file(file);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run_quietly(cmd: &mut Command) -> std::io::Result<std::process::ExitStatus> {
    cmd.stderr(std::process::Stdio::null()).status()
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
            children: Vec::new(),
            interfaces: Vec::new(),
            veths: Vec::new(),
            namespaces: Vec::new(),
            namespace_names: Vec::new(),
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
        &self.namespace_names
    }

    /// The process id of a child still owned by the lab.
    pub fn pid(&self, id: ChildId) -> Option<u32> {
        self.children[id.0].as_ref().map(|c| c.pid() as u32)
    }

    /// True when a child has exited (or was already stopped).
    pub fn exited(&mut self, id: ChildId) -> bool {
        match self.children[id.0].as_mut() {
            Some(child) => !child.running(),
            None => true,
        }
    }

    /// Creates namespace `<prefix>-<role>` with its loopback up.
    pub fn netns(&mut self, role: &str) -> LabResult<String> {
        let ns = Netns::new(&format!("{}-{role}", self.prefix))?;
        self.namespace_names.push(ns.name.clone());
        self.namespaces.push(ns);
        Ok(self.namespace_names.last().cloned().unwrap_or_default())
    }

    /// A veth pair between two namespaces, addressed (`198.18.x.y/24`) and up.
    /// Each side is (namespace, interface, address with prefix).
    pub fn veth(&mut self, a: (&str, &str, &str), b: (&str, &str, &str)) -> LabResult<()> {
        let veth = Veth::new(a.0, a.1, a.2, b.0, b.1, b.2)?;
        self.veths.push(veth);
        Ok(())
    }

    /// A command to run inside `ns`.
    pub fn cmd_in(&self, ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        netns::cmd_in(ns, program)
    }

    /// Starts a child process the lab owns (killed on drop).
    pub fn spawn(&mut self, cmd: Command, log: &str) -> LabResult<ChildId> {
        let child = ChildGuard::spawn(cmd, log, &self.dir.join(log))?;
        self.children.push(Some(child));
        Ok(ChildId(self.children.len() - 1))
    }

    /// Waits up to `within` for a child to exit by itself; true if it did.
    pub fn wait(&mut self, id: ChildId, within: Duration) -> bool {
        match self.children[id.0].as_mut() {
            Some(child) => child.wait_exit(within).is_some(),
            None => true,
        }
    }

    /// Stops a child (SIGTERM, then kill) and returns what it logged.
    pub fn stop(&mut self, id: ChildId, log: &str) -> String {
        if let Some(mut child) = self.children[id.0].take() {
            child.terminate_within(Duration::from_secs(3));
        }
        std::fs::read_to_string(self.dir.join(log)).unwrap_or_default()
    }

    /// Writes a private file in the lab's directory (configs hold keys).
    pub fn write_private(&self, file: &str, text: &str) -> LabResult<PathBuf> {
        let path = self.dir.join(file);
        config::write_private(&path, text)?;
        Ok(path)
    }

    /// Pings until a reply comes (bounded); true when one did.
    pub fn ping_until_reply(&self, ns: &str, dst: &str, within: Duration) -> bool {
        ping::ping_until_reply(ns, dst, within)
    }

    /// Runs iperf3 from `client_ns` to a one-shot server on `dst` in
    /// `server_ns`, with the client's `args` (`-t` is honoured for the
    /// bound); returns iperf3's JSON report.
    pub fn iperf3(
        &mut self,
        client_ns: &str,
        server_ns: &str,
        dst: &str,
        args: &[&str],
    ) -> LabResult<serde_json::Value> {
        let secs = args
            .iter()
            .position(|a| *a == "-t")
            .and_then(|i| args.get(i + 1)?.parse::<u64>().ok())
            .unwrap_or(10);
        let log = self.dir.join("iperf3-server.log");
        let timeout = Duration::from_secs(secs + 60);
        iperf::run(client_ns, server_ns, dst, args, &log, timeout).map(|r| r.json)
    }
}
