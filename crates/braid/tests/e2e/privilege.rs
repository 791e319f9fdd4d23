//! Least privilege, end to end: a daemon started as root runs as `braid`
//! (or, where no such user exists, as `nobody`, with a warning) with only
//! CAP_NET_ADMIN and CAP_NET_BIND_SERVICE (CAP_NET_ADMIN also
//! ambient, for the `ip` commands it runs), the tunnel still works
//! (also UAPI changes that need those capabilities), the UAPI socket is
//! 0600 and root's, `braid down` still cleans up, and a config file open to
//! the group is refused with the `chmod 600` hint.
//!
//! ```text
//!  netns a: braid (foreground) ── veth 198.18.x.1/.2 ── netns b: braid (daemon)
//! ```

use crate::harness::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "wg"];

/// The fields of /proc/PID/status this test reads.
fn status_field(pid: i32, field: &str) -> String {
    field_of(&format!("/proc/{pid}/status"), field)
}

fn field_of(status_file: &str, field: &str) -> String {
    let status = std::fs::read_to_string(status_file).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {field} in {status_file}"))
}

/// The uid of `user`, if /etc/passwd has it.
fn uid_of(user: &str) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    passwd
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{user}:x:")))
        .and_then(|r| r.split(':').next())
        .map(str::to_string)
}

#[test]
fn daemon_runs_unprivileged_with_only_kept_capabilities() {
    let test = "daemon_runs_unprivileged_with_only_kept_capabilities";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    let pid = a.child.as_ref().expect("foreground child").pid();

    assert!(
        ping_until_reply(&nsa, &format!("198.19.{x}.2"), Duration::from_secs(20)),
        "no ping through the tunnel after the privilege drop:\n{}",
        a.log_text()
    );

    let uid = status_field(pid, "Uid");
    let cap_eff = status_field(pid, "CapEff");
    let cap_prm = status_field(pid, "CapPrm");
    let cap_inh = status_field(pid, "CapInh");
    let cap_bnd = status_field(pid, "CapBnd");
    let cap_amb = status_field(pid, "CapAmb");
    let no_new_privs = status_field(pid, "NoNewPrivs");
    eprintln!(
        "[{test}] daemon pid {pid}: Uid {uid}; CapEff {cap_eff} CapPrm {cap_prm} \
         CapInh {cap_inh} CapBnd {cap_bnd} CapAmb {cap_amb}; NoNewPrivs {no_new_privs}"
    );
    // The dedicated user if the machine has one, else the fallback.
    let (user, user_uid) = match uid_of("braid") {
        Some(uid) => ("braid", uid),
        None => ("nobody", uid_of("nobody").expect("a user nobody")),
    };
    assert!(
        uid.split_whitespace().all(|u| u == user_uid),
        "real, effective, saved and fs uid should all be {user} ({user_uid}): {uid}"
    );
    let net_admin_and_bind = "0000000000001400";
    assert_eq!(cap_eff, net_admin_and_bind, "effective capabilities");
    assert_eq!(cap_prm, net_admin_and_bind, "permitted capabilities");
    assert_eq!(cap_bnd, net_admin_and_bind, "bounding set");
    // CAP_NET_ADMIN passes on to the `ip` commands the daemon runs.
    assert_eq!(cap_inh, "0000000000001000", "inheritable capabilities");
    assert_eq!(cap_amb, "0000000000001000", "ambient capabilities");
    assert_eq!(no_new_privs, "1");
    // Capabilities, the bounding set and no-new-privs are per thread:
    // every thread has the reduced ones, the UAPI's among them.
    let tasks: Vec<(String, String)> = threads(pid)
        .into_iter()
        .map(|(name, dir)| (name, dir.join("status").display().to_string()))
        .collect();
    assert!(tasks.len() >= 2, "the daemon has its threads: {tasks:?}");
    for (name, status) in &tasks {
        let who = format!("thread {name} ({status})");
        assert!(
            field_of(status, "Uid")
                .split_whitespace()
                .all(|u| u == user_uid),
            "{who}: Uid"
        );
        assert_eq!(
            field_of(status, "CapEff"),
            net_admin_and_bind,
            "{who}: CapEff"
        );
        assert_eq!(
            field_of(status, "CapPrm"),
            net_admin_and_bind,
            "{who}: CapPrm"
        );
        assert_eq!(
            field_of(status, "CapBnd"),
            net_admin_and_bind,
            "{who}: CapBnd"
        );
        assert_eq!(field_of(status, "NoNewPrivs"), "1", "{who}: NoNewPrivs");
    }
    eprintln!(
        "[{test}] every thread reduced: {:?}",
        tasks.iter().map(|t| &t.0).collect::<Vec<_>>()
    );
    assert!(
        a.log_text().contains(&format!("running as user {user}")),
        "{}",
        a.log_text()
    );
    // Falling back to nobody is worth a warning that says how to do better.
    let warned = a.log_text().contains("useradd --system");
    assert_eq!(warned, user == "nobody", "{}", a.log_text());

    // The guardian is the only other braid process in the namespace: root,
    // it waits for the daemon's end.
    let others: Vec<i32> = nsa
        .pids_of(std::path::Path::new(BRAID))
        .into_iter()
        .filter(|&p| p != pid)
        .collect();
    assert_eq!(others.len(), 1, "one guardian expected: {others:?}");
    eprintln!(
        "[{test}] guardian pid {}: Uid {}; threads {}; open fds {}",
        others[0],
        status_field(others[0], "Uid"),
        status_field(others[0], "Threads"),
        std::fs::read_dir(format!("/proc/{}/fd", others[0]))
            .map(|d| d.count())
            .unwrap_or(0)
    );

    let sock = sock_path(&ifa);
    let meta = std::fs::metadata(&sock).expect("UAPI socket");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "UAPI socket mode");
    assert_eq!(meta.uid(), 0, "UAPI socket owner");

    // UAPI changes that need the kept capabilities: SO_MARK (CAP_NET_ADMIN)
    // and a port below 1024 (CAP_NET_BIND_SERVICE).
    nsa.run("wg", &["set", &ifa, "fwmark", "0x77"], SHORT)
        .expect_ok("wg set fwmark as the unprivileged daemon");
    nsa.run("wg", &["set", &ifa, "listen-port", "501"], SHORT)
        .expect_ok("wg set listen-port 501 as the unprivileged daemon");
    let shown = nsa
        .run("wg", &["show", &ifa, "listen-port"], SHORT)
        .expect_ok("wg show listen-port")
        .stdout;
    assert_eq!(shown.trim(), "501");
    let braid_show = nsa.run(BRAID, &["show", &ifa], SHORT);
    assert!(braid_show.ok(), "braid show: {}", braid_show.describe());
    assert!(
        ping_until_reply(&nsa, &format!("198.19.{x}.2"), Duration::from_secs(20)),
        "no ping after moving to port 501"
    );

    // The way down: the interface and, through the guardian, the socket go.
    let down = a.down();
    assert!(down.ok(), "braid down: {}", down.describe());
    assert!(!sock.exists(), "UAPI socket left behind");
    assert!(
        wait_until(LONG, || !nsa.has_link(&ifa)),
        "interface left behind"
    );
    assert!(
        wait_until(LONG, || !others.iter().any(|&p| pid_alive(p))),
        "guardian still running after the daemon stopped"
    );
}

#[test]
fn config_open_to_group_is_refused_with_chmod_hint() {
    let test = "config_open_to_group_is_refused_with_chmod_hint";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let ns = env.netns("a");
    let ifname = env.ifname("a");
    let conf = IfaceConf {
        private_key: wg_keys().private,
        ..Default::default()
    };
    let path = env.write(&format!("{ifname}.conf"), &conf.wg_quick());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = ns.run(BRAID, &["up", &path.to_string_lossy()], SHORT);
    eprintln!("[{test}] braid up said: {}", out.stderr.trim());
    assert!(!out.ok(), "a group-readable config was accepted");
    assert!(out.stderr.contains("group or others"), "{}", out.describe());
    assert!(out.stderr.contains("mode 0640"), "{}", out.describe());
    assert!(
        out.stderr
            .contains(&format!("chmod 600 {}", path.display())),
        "{}",
        out.describe()
    );
    assert!(!ns.has_link(&ifname), "an interface was created anyway");
    assert!(!sock_path(&ifname).exists());
}
