//! Impaired lines: a `braid netem` relay the lab owns, controlled through
//! its unix socket.

use super::process::LabResult;
use super::setup::{ChildId, Lab};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether relays started from now on run at real-time priority
/// (`braid bench lines --realtime`).
static REALTIME_RELAYS: AtomicBool = AtomicBool::new(false);

/// Starts every later relay at real-time priority (`braid netem
/// --realtime`): the lines keep their timing when other work competes for
/// the CPU. Only the relays: the tunnel's ends and iperf3 stay in the
/// normal class. With them at real-time priority as well, a saturated
/// 2-core machine used up the kernel's real-time budget (95 % of each
/// second) and every real-time thread, the relays too, stood still for
/// about 25 ms once a second; a ± 1 ms line then reordered by 25 ms.
pub fn realtime_relays() {
    REALTIME_RELAYS.store(true, Ordering::Relaxed);
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
        if REALTIME_RELAYS.load(Ordering::Relaxed) {
            cmd.arg("--realtime");
        }
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
