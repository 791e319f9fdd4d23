//! braid built for another CPU, run under qemu-user against the native
//! braid: the static aarch64 build (what a router runs) carries ping and
//! TCP with each cipher, and `Cipher = auto` and `braid doctor` follow the
//! emulated CPU's AES and carry-less-multiply instructions.
//!
//! ```text
//!  netns a: qemu-aarch64 -cpu MODEL braid (daemon) ── veth 198.18.x.1/.2 ── netns b: braid (native, daemon)
//!           198.19.x.1, initiator                                          198.19.x.2
//! ```
//!
//! The aarch64 binary is the one `BRAID_TEST_AARCH64_BIN` names (the gate
//! builds it: `cargo build -p braid --target aarch64-unknown-linux-musl`);
//! without it these tests skip, or fail under `CI=true`. The CPU models
//! without AES or carry-less multiply are x86-64 ones (the native braid
//! under qemu-x86_64): Debian 12's qemu 7.2 has no aarch64 model without
//! the crypto extension and no property that removes it.

use crate::harness::*;
use braid::toolkit::lab::traffic::TcpTransfer;
use braid_core::cipher::aes_hardware;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Names the aarch64 braid binary under test.
const AARCH64_BIN: &str = "BRAID_TEST_AARCH64_BIN";
/// A core from a router's SoC; qemu's model has the crypto extension.
const ARM_WITH_CRYPTO: &str = "cortex-a53";
/// How long an emulated `braid up`, `down` or `doctor` may take.
const EMULATED: Duration = Duration::from_secs(90);

/// The aarch64 braid binary, or why the test cannot run (a skip, or a
/// failure in CI).
fn aarch64_binary(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os(AARCH64_BIN).map(PathBuf::from);
    match found {
        Some(p) if p.is_file() => Some(p),
        other => {
            let msg = format!(
                "{test}: no aarch64 braid ({AARCH64_BIN}={other:?}); build it with \
                 `cargo build -p braid --target aarch64-unknown-linux-musl` (bash scripts/cross \
                 aarch64-unknown-linux-musl installs what that needs) and set {AARCH64_BIN} to \
                 target/aarch64-unknown-linux-musl/debug/braid"
            );
            assert!(
                !in_ci(),
                "{msg} (CI=true: a missing prerequisite is a failure)"
            );
            eprintln!("SKIPPED {msg}");
            None
        }
    }
}

/// Which binary runs under which emulator with which CPU model.
#[derive(Clone)]
struct Emulation {
    qemu: PathBuf,
    cpu: String,
    binary: PathBuf,
}

impl Emulation {
    fn new(qemu: &str, cpu: &str, binary: &Path) -> Emulation {
        Emulation {
            qemu: which(qemu).unwrap_or_else(|| panic!("{qemu} (apt-get install qemu-user)")),
            cpu: cpu.to_string(),
            binary: binary.to_path_buf(),
        }
    }

    /// `braid ARGS` under the emulator, inside `ns`.
    fn cmd(&self, ns: &Netns) -> Command {
        let mut c = ns.cmd(&self.qemu);
        c.args(["-cpu", &self.cpu]).arg(&self.binary);
        c
    }

    fn describe(&self) -> String {
        format!(
            "{} -cpu {} {}",
            self.qemu.display(),
            self.cpu,
            self.binary.display()
        )
    }
}

/// An emulated braid daemon (`braid up FILE`); `braid down` and forced
/// cleanup (its processes by PID, the link, the socket) on drop.
struct EmulatedBraid<'a> {
    ns: &'a Netns,
    ifname: String,
    emulation: Emulation,
    log: PathBuf,
}

impl<'a> EmulatedBraid<'a> {
    fn up(
        env: &TestEnv,
        ns: &'a Netns,
        ifname: &str,
        conf: &IfaceConf,
        emulation: &Emulation,
    ) -> EmulatedBraid<'a> {
        let path = env.write(&format!("{ifname}.conf"), &conf.wg_quick());
        let log = env.path(&format!("{ifname}.emulated.log"));
        let guard = EmulatedBraid {
            ns,
            ifname: ifname.to_string(),
            emulation: emulation.clone(),
            log: log.clone(),
        };
        let mut c = emulation.cmd(ns);
        c.arg("up").arg(&path);
        let err = env.path(&format!("{ifname}.emulated-stderr.log"));
        let out = run_bounded_files(&mut c, None, EMULATED, &log, &err);
        assert!(
            out.ok(),
            "{} up: {}\n{}",
            emulation.describe(),
            out.describe(),
            std::fs::read_to_string(braid::background::log_path(ifname)).unwrap_or_default()
        );
        assert!(
            wait_until(LONG, || ns.link_up(ifname)),
            "{ifname} not up in {}",
            ns.name
        );
        guard
    }
}

impl Drop for EmulatedBraid<'_> {
    fn drop(&mut self) {
        let mut c = self.emulation.cmd(self.ns);
        c.args(["down", &self.ifname]);
        let out = run_bounded(c, EMULATED);
        if !out.ok() {
            eprintln!("cleanup: {}", out.describe());
        }
        force_cleanup(self.ns, &self.ifname, &self.emulation.qemu);
        keep_daemon_log(&self.ifname, &self.log);
    }
}

/// The cipher of the native side's session (`ifname` in `ns`) with the
/// emulated peer once it has settled: both ends have said what they offer
/// (`speaks_braid`), and, bounded, it is `expected`. A ping from `from`
/// to `dst` each round keeps data flowing; the cipher is read once more
/// after a few more, so one that changes late is seen too.
fn settled_cipher(ns: &Netns, ifname: &str, from: &Netns, dst: &str, expected: &str) -> String {
    let read = || {
        let (v, _) = braid_show_json(ns, ifname);
        let peer = &v["peers"][0];
        let cipher = peer["cipher"].as_str().unwrap_or("").to_string();
        (
            extra_counter(&peer["extra"], "speaks_braid") == Some(1),
            cipher,
        )
    };
    wait_until(Duration::from_secs(30), || {
        let _ = ping_counted(&from.name, &["-W", "1"], dst, 1);
        read() == (true, expected.to_string())
    });
    let _ = ping_counted(&from.name, &["-W", "1"], dst, 3);
    read().1
}

/// `uid`/`CapEff` of the emulated daemon's first thread: the process in
/// `ns` that runs the emulator and gave root up (its guardian keeps root).
fn dropped_daemon(ns: &Netns, qemu: &Path) -> Option<(i32, String, String)> {
    ns.pids_of(qemu).into_iter().find_map(|pid| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        };
        let uid = field("Uid");
        (!uid.starts_with("0 ")).then(|| (pid, uid, field("CapEff")))
    })
}

/// Ping and a short TCP transfer each way between 198.19.x.1 (in `nsa`)
/// and 198.19.x.2 (in `nsb`); panics unless every byte arrived intact.
fn ping_and_tcp(label: &str, nsa: &Netns, nsb: &Netns, x: u8) {
    let (a, b) = (format!("198.19.{x}.1"), format!("198.19.{x}.2"));
    assert!(
        ping_until_reply(&nsa.name, &b, Duration::from_secs(60)),
        "{label}: no ping through the tunnel"
    );
    let p = ping(&nsa.name, &b, 10);
    eprintln!(
        "[{label}] ping {b}: {} of {} answered",
        p.received, p.transmitted
    );
    assert!(p.received > 0, "{label}: {}", p.output);
    for (from, to, dst) in [(nsa, nsb, &b), (nsb, nsa, &a)] {
        let report = TcpTransfer::start(
            &from.name,
            &to.name,
            format!("{dst}:5301").parse().unwrap(),
            1_000_000,
            Duration::from_secs(2),
        )
        .finish();
        eprintln!("[{label}] {} -> {}: {report}", from.name, to.name);
        assert!(report.intact(), "{label}: {report}");
        assert!(report.received_bytes > 0, "{label}: nothing carried");
    }
}

#[test]
fn aarch64_braid_under_qemu_carries_ping_and_tcp_with_each_cipher() {
    let test = "aarch64_braid_under_qemu_carries_ping_and_tcp_with_each_cipher";
    if !preflight(test, &["ip", "ping", "qemu-aarch64"]) {
        return;
    }
    let Some(binary) = aarch64_binary(test) else {
        return;
    };
    let emulation = Emulation::new("qemu-aarch64", ARM_WITH_CRYPTO, &binary);
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    for cipher in ["chacha20poly1305", "aes256gcm"] {
        let label = format!("aarch64 {ARM_WITH_CRYPTO}, Cipher = {cipher}");
        let (mut conf_a, mut conf_b) = tunnel_confs(&ka, &kb, x);
        conf_a.braid_lines.push(format!("Cipher = {cipher}"));
        conf_b.braid_lines.push(format!("Cipher = {cipher}"));
        let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
        b.assert_up();
        let a = EmulatedBraid::up(&env, &nsa, &ifa, &conf_a, &emulation);
        ping_and_tcp(&label, &nsa, &nsb, x);
        let used = settled_cipher(&nsb, &ifb, &nsa, &format!("198.19.{x}.2"), cipher);
        eprintln!("[{label}] the native side's session: cipher {used}");
        assert_eq!(used, cipher, "{label}");
        // The guardian forked and the daemon gave root up under the
        // emulator too (as root the lab has no `braid` user: nobody).
        let daemon = dropped_daemon(&nsa, &emulation.qemu);
        eprintln!("[{label}] emulated daemon (pid, Uid, CapEff): {daemon:?}");
        let (_, uid, cap_eff) = daemon.expect("an emulated daemon that gave root up");
        assert!(uid.split(' ').all(|u| u != "0"), "Uid {uid}");
        assert_eq!(cap_eff, "0000000000001400");
        drop(a);
        drop(b);
    }
}

/// `braid doctor --json` under `emulation` in `ns`: its `cpu` finding.
fn doctor_cpu_line(ns: &Netns, emulation: &Emulation) -> String {
    let mut c = emulation.cmd(ns);
    c.args(["doctor", "--json"]);
    let out = run_bounded(c, EMULATED);
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json ({e}): {}", out.describe()));
    let checks = v["checks"].as_array().cloned().unwrap_or_default();
    let cpu = checks
        .iter()
        .find(|c| c["check"] == "cpu")
        .unwrap_or_else(|| panic!("no cpu check: {}", out.stdout));
    cpu["finding"].as_str().unwrap_or("").to_string()
}

#[test]
fn cipher_auto_follows_the_emulated_cpu() {
    let test = "cipher_auto_follows_the_emulated_cpu";
    if !preflight(test, &["ip", "ping", "qemu-aarch64", "qemu-x86_64"]) {
        return;
    }
    let Some(arm) = aarch64_binary(test) else {
        return;
    };
    let native = Path::new(BRAID);
    // (emulator, CPU model, binary, has AES and carry-less multiply)
    let cases = [
        ("qemu-aarch64", ARM_WITH_CRYPTO, arm.as_path(), true),
        ("qemu-x86_64", "Westmere", native, true),
        ("qemu-x86_64", "Westmere,-pclmulqdq", native, false),
        ("qemu-x86_64", "qemu64", native, false),
    ];
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    for (qemu, cpu, binary, fast_aes) in cases {
        let emulation = Emulation::new(qemu, cpu, binary);
        let label = format!("{qemu} -cpu {cpu}");
        let finding = doctor_cpu_line(&nsa, &emulation);
        eprintln!("[{label}] braid doctor: cpu: {finding}");
        let (choice, other) = if fast_aes {
            ("AES-256-GCM", "ChaCha20-Poly1305")
        } else {
            ("ChaCha20-Poly1305", "AES-256-GCM")
        };
        assert!(
            finding.contains(&format!("Cipher = auto chooses {choice}")),
            "{label}: {finding}"
        );
        assert!(
            !finding.contains(&format!("chooses {other}")),
            "{label}: {finding}"
        );
        assert_eq!(
            finding.contains("missing: "),
            !fast_aes,
            "{label}: names what is missing, only then: {finding}"
        );

        // Cipher = auto on both ends: AES-256-GCM only if both offer it.
        let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
        let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
        b.assert_up();
        let a = EmulatedBraid::up(&env, &nsa, &ifa, &conf_a, &emulation);
        let dst = format!("198.19.{x}.2");
        assert!(
            ping_until_reply(&nsa.name, &dst, Duration::from_secs(60)),
            "{label}: no ping through the tunnel"
        );
        let expected = if fast_aes && aes_hardware() {
            "aes256gcm"
        } else {
            "chacha20poly1305"
        };
        let used = settled_cipher(&nsb, &ifb, &nsa, &dst, expected);
        eprintln!("[{label}] Cipher = auto on both ends: the session uses {used}");
        assert_eq!(used, expected, "{label}");
        drop(a);
        drop(b);
    }
}
