//! Impaired lines: a `braid netem` relay the lab owns, controlled through
//! its unix socket.

use super::process::LabResult;
use super::setup::{ChildId, Lab};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A running `braid netem` line.
pub struct NetemLine {
    pub id: ChildId,
    control: PathBuf,
    pub log: String,
}

impl NetemLine {
    /// Sends a control command (`cut`, `restore`, `stats json`).
    pub fn control(&self, command: &str) -> LabResult<String> {
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

impl Lab {
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
}
