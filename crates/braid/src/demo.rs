//! `braid demo`: the whole product on one machine, for a first look.
//!
//! ```text
//!   netns <p>-a                                   netns <p>-b
//!   ┌──────────────────────────┐   veth pair    ┌──────────────────────────┐
//!   │ braid  <p>a 198.19.77.1 ─┼─ 198.18.77.1 ──┼─ 198.18.77.2 ── <p>b     │
//!   │ iperf3 client, ping      │   underlay     │ braid 198.19.77.2, iperf3│
//!   └──────────────────────────┘                └──────────────────────────┘
//! ```
//!
//! Everything it creates (namespaces, daemons, the iperf3 server, config
//! files) is removed on the way out, also after an error or Ctrl-C.

use crate::keys::PrivateKey;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const UNDERLAY_A: &str = "198.18.77.1";
const UNDERLAY_B: &str = "198.18.77.2";
const TUNNEL_A: &str = "198.19.77.1";
const TUNNEL_B: &str = "198.19.77.2";

/// Removes what the demo made, in reverse order, whatever happened.
struct Cleanup {
    braid: PathBuf,
    namespaces: Vec<String>,
    interfaces: Vec<(String, String)>,
    children: Vec<Child>,
    dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for (ns, name) in &self.interfaces {
            let _ = Command::new("ip")
                .args(["netns", "exec", ns])
                .arg(&self.braid)
                .args(["down", name])
                .stderr(Stdio::null())
                .status();
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(cmd: &mut Command) -> Result<String, String> {
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

fn in_ns(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args))
}

fn write_private(path: &Path, text: &str) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(text.as_bytes()).map_err(|e| e.to_string())
}

fn step(text: &str) {
    println!("\n== {text}");
}

/// Runs the demo; `seconds` is the length of the iperf3 run.
pub fn run_demo(seconds: u32) -> Result<(), String> {
    let braid = std::env::current_exe().map_err(|e| e.to_string())?;
    for tool in ["ip", "iperf3", "ping"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .map_or(true, |s| !s.success())
        {
            return Err(format!(
                "`{tool}` is not installed (apt-get install iproute2 iperf3 iputils-ping)"
            ));
        }
    }
    let prefix = format!("bd{}", std::process::id() % 100_000);
    let (ns_a, ns_b) = (format!("{prefix}-a"), format!("{prefix}-b"));
    let (if_a, if_b) = (format!("{prefix}a"), format!("{prefix}b"));
    let dir = std::env::temp_dir().join(format!("braid-demo-{prefix}"));
    let mut cleanup = Cleanup {
        braid: braid.clone(),
        namespaces: Vec::new(),
        interfaces: Vec::new(),
        children: Vec::new(),
        dir: dir.clone(),
    };
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;

    step(&format!(
        "two network namespaces, {ns_a} and {ns_b}, joined by a veth pair"
    ));
    for ns in [&ns_a, &ns_b] {
        ip(&["netns", "add", ns])?;
        cleanup.namespaces.push(ns.clone());
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
    }
    ip(&[
        "link", "add", "veth-a", "netns", &ns_a, "type", "veth", "peer", "name", "veth-b", "netns",
        &ns_b,
    ])?;
    ip(&[
        "-n",
        &ns_a,
        "addr",
        "add",
        &format!("{UNDERLAY_A}/24"),
        "dev",
        "veth-a",
    ])?;
    ip(&[
        "-n",
        &ns_b,
        "addr",
        "add",
        &format!("{UNDERLAY_B}/24"),
        "dev",
        "veth-b",
    ])?;
    ip(&["-n", &ns_a, "link", "set", "veth-a", "up"])?;
    ip(&["-n", &ns_b, "link", "set", "veth-b", "up"])?;
    println!("   underlay {UNDERLAY_A} <-> {UNDERLAY_B}");

    step("a braid tunnel between them (wg-quick config files, fresh keys)");
    let (key_a, key_b) = (PrivateKey::generate(), PrivateKey::generate());
    let conf_a = format!(
        "[Interface]\nPrivateKey = {}\nAddress = {TUNNEL_A}/24\nListenPort = 51820\n\n[Peer]\nPublicKey = {}\nAllowedIPs = {TUNNEL_B}/32\nEndpoint = {UNDERLAY_B}:51820\nPersistentKeepalive = 25\n",
        &*key_a.to_base64(),
        key_b.public_key()
    );
    let conf_b = format!(
        "[Interface]\nPrivateKey = {}\nAddress = {TUNNEL_B}/24\nListenPort = 51820\n\n[Peer]\nPublicKey = {}\nAllowedIPs = {TUNNEL_A}/32\n",
        &*key_b.to_base64(),
        key_a.public_key()
    );
    let (file_a, file_b) = (
        dir.join(format!("{if_a}.conf")),
        dir.join(format!("{if_b}.conf")),
    );
    write_private(&file_a, &conf_a)?;
    write_private(&file_b, &conf_b)?;
    for (ns, file, name) in [(&ns_b, &file_b, &if_b), (&ns_a, &file_a, &if_a)] {
        println!("   ip netns exec {ns} braid up {}", file.display());
        run(in_ns(ns, &braid).arg("up").arg(file))?;
        cleanup.interfaces.push((ns.clone(), name.clone()));
    }

    step(&format!("ping {TUNNEL_B} through the tunnel"));
    let ping = run(in_ns(&ns_a, "ping").args(["-c", "3", "-i", "0.2", "-W", "2", TUNNEL_B]))?;
    for line in ping
        .lines()
        .filter(|l| l.contains("time=") || l.contains("packet loss"))
    {
        println!("   {line}");
    }

    step(&format!(
        "iperf3, one TCP stream for {seconds} s through the tunnel"
    ));
    let server = in_ns(&ns_b, "iperf3")
        .args(["-s", "-1", "-B", TUNNEL_B])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("iperf3 server: {e}"))?;
    cleanup.children.push(server);
    std::thread::sleep(Duration::from_millis(300));
    let status = in_ns(&ns_a, "iperf3")
        .args([
            "-c",
            TUNNEL_B,
            "-t",
            &seconds.to_string(),
            "-f",
            "m",
            "--forceflush",
        ])
        .status()
        .map_err(|e| format!("iperf3 client: {e}"))?;
    if !status.success() {
        return Err("iperf3 through the tunnel failed".into());
    }

    step("braid show, on both sides");
    for (ns, name) in [(&ns_a, &if_a), (&ns_b, &if_b)] {
        let out = run(in_ns(ns, &braid).args(["show", name]))?;
        println!("{out}");
    }
    step("cleaning up");
    drop(cleanup);
    println!("   done: namespaces, daemons and files removed");
    Ok(())
}
