//! The Debian package and the systemd unit, as a user gets them:
//! `scripts/package` builds the .deb (from the binary under test, so the
//! gate needs no release build), dpkg installs it into a scratch root
//! (`--root`, maintainer scripts run chrootless with `$DPKG_ROOT`), and
//! then, with tools nobody here wrote:
//!
//! - the installed `braid --version` runs and says the package's version;
//! - postinst made the system user `braid` (no shell, no home);
//! - `systemd-analyze verify` finds nothing to say about `braid@.service`
//!   (its commands exist, its `Documentation=` man pages resolve);
//! - `systemd-analyze security` rates its exposure "OK" or better;
//! - man reads the installed pages; the examples are there;
//! - purging removes every file again.
//!
//! There is no running systemd here (PID 1 is not systemd), so
//! `systemctl enable --now` and `systemctl reload` themselves are not run;
//! what they run is (`reload::` runs the unit's ExecReload command and
//! checks its Type=notify readiness with a real daemon).

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const TOOLS: &[&str] = &["dpkg", "dpkg-deb", "useradd", "systemd-analyze", "man"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Packaging compresses and dpkg installs: on a busy 2-core machine that
/// took over 20 s. The bound only stops a hung step; it is not a speed test.
const HANG: std::time::Duration = std::time::Duration::from_secs(600);

fn run(c: Command) -> Out {
    run_bounded(c, HANG)
}

/// An empty system for dpkg: its database and the account files useradd
/// edits.
fn scratch_root(dir: &Path) -> PathBuf {
    let root = dir.join("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for (file, text) in [
        ("var/lib/dpkg/status", ""),
        ("etc/passwd", "root:x:0:0:root:/root:/bin/bash\n"),
        ("etc/group", "root:x:0:\n"),
        ("etc/shadow", "root:*::0:99999:7:::\n"),
        ("etc/gshadow", "root:*::\n"),
    ] {
        std::fs::write(root.join(file), text).unwrap();
    }
    root
}

fn dpkg(root: &Path, args: &[&str]) -> Out {
    let mut c = Command::new("dpkg");
    c.arg(format!("--root={}", root.display()))
        .args(["--force-script-chrootless", "--log=/dev/null"])
        .args(args);
    run(c)
}

#[test]
fn the_package_installs_runs_and_its_unit_passes_systemd_analyze() {
    let test = "the_package_installs_runs_and_its_unit_passes_systemd_analyze";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let out_dir = env.dir.join("debian");
    let mut c = Command::new("bash");
    c.arg(repo_root().join("scripts/package"))
        .args(["--binary", BRAID, "--out"])
        .arg(&out_dir);
    let built = run(c).expect_ok("scripts/package");
    let deb = PathBuf::from(built.stdout.trim());
    let version = run_program(BRAID, &["--version"], SHORT).stdout;
    let version = version
        .split_whitespace()
        .nth(1)
        .expect("braid --version names a version");
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("braid_{version}_")) && name.ends_with(".deb"),
        "{name}"
    );
    eprintln!(
        "[{test}] built {} ({} bytes)",
        deb.display(),
        std::fs::metadata(&deb).unwrap().len()
    );

    let info = run_program("dpkg-deb", &["--field", &deb.to_string_lossy()], SHORT)
        .expect_ok("dpkg-deb --field");
    eprintln!("[{test}] control:\n{}", info.stdout);
    assert!(info.stdout.contains("Package: braid\n"));
    assert!(info.stdout.contains(&format!("Version: {version}\n")));
    assert!(info.stdout.contains("iproute2"), "Depends names iproute2");

    let contents = run_program("dpkg-deb", &["--contents", &deb.to_string_lossy()], SHORT)
        .expect_ok("dpkg-deb --contents")
        .stdout;
    for file in [
        "./usr/bin/braid",
        "./lib/systemd/system/braid@.service",
        "./usr/share/man/man8/braid.8.gz",
        "./usr/share/man/man8/braid-syncconf.8.gz",
        "./usr/share/man/man5/braid.conf.5.gz",
        "./usr/share/bash-completion/completions/braid",
        "./usr/share/zsh/vendor-completions/_braid",
        "./usr/share/fish/vendor_completions.d/braid.fish",
        "./usr/share/doc/braid/examples/dual-line-router.conf",
        "./usr/share/doc/braid/examples/server-many-peers.conf",
        "./usr/share/doc/braid/examples/road-warrior.conf",
        "./usr/share/doc/braid/copyright",
    ] {
        assert!(
            contents.contains(file),
            "the package lacks {file}:\n{contents}"
        );
    }

    let root = scratch_root(&env.dir);
    let installed = dpkg(&root, &["--force-depends", "-i", &deb.to_string_lossy()]);
    eprintln!("[{test}] dpkg -i:\n{}", installed.combined());
    assert!(installed.ok(), "{}", installed.describe());

    let braid = root.join("usr/bin/braid");
    let said = run_program(&braid.to_string_lossy(), &["--version"], SHORT)
        .expect_ok("installed braid --version");
    eprintln!("[{test}] installed braid --version: {}", said.stdout.trim());
    assert_eq!(said.stdout.trim(), format!("braid {version}"));

    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    let user = passwd
        .lines()
        .find(|l| l.starts_with("braid:"))
        .unwrap_or_else(|| panic!("postinst made no user braid:\n{passwd}"));
    eprintln!("[{test}] {user}");
    let fields: Vec<&str> = user.split(':').collect();
    let uid: u32 = fields[2].parse().unwrap();
    assert!(uid > 0 && uid < 1000, "a system uid: {user}");
    assert_eq!(fields[6], "/usr/sbin/nologin", "{user}");
    // Again (an upgrade): the user is not made twice.
    assert!(dpkg(&root, &["--force-depends", "-i", &deb.to_string_lossy()]).ok());
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert_eq!(passwd.matches("braid:").count(), 1, "{passwd}");

    // systemd-analyze reads the unit where it is installed; the targets it
    // refers to come from this machine's systemd.
    let units = root.join("lib/systemd/system");
    for entry in std::fs::read_dir("/lib/systemd/system").unwrap().flatten() {
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "target") {
            std::fs::copy(&p, units.join(p.file_name().unwrap())).unwrap();
        }
    }
    let root_arg = format!("--root={}", root.display());
    let mut c = Command::new("systemd-analyze");
    c.args(["verify", &root_arg, "braid@wg0.service"])
        .env("MANPATH", root.join("usr/share/man"));
    let verify = run(c);
    eprintln!(
        "[{test}] systemd-analyze verify: {}",
        verify.combined().trim()
    );
    assert!(verify.ok(), "{}", verify.describe());
    assert!(
        verify.combined().trim().is_empty(),
        "systemd-analyze verify warns:\n{}",
        verify.combined()
    );

    let mut c = Command::new("systemd-analyze");
    c.args([
        "security",
        "--offline=true",
        &root_arg,
        "--threshold=49",
        "braid@wg0.service",
    ]);
    let security = run(c);
    let overall = security
        .stdout
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or("")
        .to_string();
    eprintln!("[{test}] systemd-analyze security: {}", overall.trim());
    assert!(
        security.ok(),
        "exposure above 4.9 (\"OK\"):\n{}",
        security.stdout
    );
    for hardened in [
        "✓ ProtectSystem=",
        "✓ ProtectHome=",
        "✓ PrivateTmp=",
        "✓ CapabilityBoundingSet=~CAP_SYS_ADMIN",
        "✓ RestrictNamespaces=~net",
        "✓ MemoryDenyWriteExecute=",
        "✓ RestrictSUIDSGID=",
        "✓ NotifyAccess=",
    ] {
        assert!(
            security.stdout.contains(hardened),
            "not {hardened}:\n{}",
            security.stdout
        );
    }

    let mut c = Command::new("man");
    c.arg("-l")
        .arg(root.join("usr/share/man/man5/braid.conf.5.gz"))
        .env("MANWIDTH", "80")
        .env("MAN_KEEP_FORMATTING", "0");
    let page = run(c).expect_ok("man -l braid.conf.5.gz");
    assert!(page.stdout.contains("ReorderHold"), "{}", page.stdout);

    let purged = dpkg(&root, &["--purge", "braid"]);
    assert!(purged.ok(), "{}", purged.describe());
    for gone in [
        "usr/bin/braid",
        "lib/systemd/system/braid@.service",
        "usr/share/doc/braid",
    ] {
        assert!(!root.join(gone).exists(), "{gone} is left after purge");
    }
}
