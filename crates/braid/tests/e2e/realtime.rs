//! `RealtimePriority =`, end to end: the threads that move packets run at
//! SCHED_RR with the configured priority, after the privilege drop, while
//! the UAPI thread and the commands braid starts stay in the normal class;
//! and a kernel that refuses the class stops `braid up` with an error that
//! names the key, before any interface exists.
//!
//! ```text
//!  netns a: braid (foreground) ── veth 198.18.x.1/.2 ── netns b: braid (daemon)
//! ```

use crate::harness::*;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "wg"];
const PRIORITY: u32 = 20;
const SCHED_OTHER: u32 = 0;
const SCHED_RR: u32 = 2;

/// (policy, real-time priority) from a /proc/…/stat file: fields 41 and
/// 40, counted after the command name, which may hold spaces.
fn policy_in(stat_file: &str) -> (u32, u32) {
    let stat = std::fs::read_to_string(stat_file).unwrap_or_else(|e| panic!("{stat_file}: {e}"));
    let after_comm = &stat[stat.rfind(')').expect("comm in stat") + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| -> u32 { fields[n - 3].parse().expect("a number") };
    (field(41), field(40))
}

/// (thread name, policy, priority) of every thread of `pid`.
fn thread_policies(pid: i32) -> Vec<(String, u32, u32)> {
    threads(pid)
        .into_iter()
        .map(|(name, dir)| {
            let (policy, priority) = policy_in(&dir.join("stat").display().to_string());
            (name, policy, priority)
        })
        .collect()
}

#[test]
fn realtime_priority_puts_only_the_data_plane_in_the_realtime_class() {
    let test = "realtime_priority_puts_only_the_data_plane_in_the_realtime_class";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (mut conf_a, mut conf_b) = tunnel_confs(&ka, &kb, x);
    let hook_stat = env.path("post-up-hook.stat");
    conf_a.braid_lines = vec![
        format!("RealtimePriority = {PRIORITY}"),
        format!("PostUp = cat /proc/self/stat > {}", hook_stat.display()),
    ];
    conf_b.braid_lines = vec![format!("RealtimePriority = {PRIORITY}")];
    // Some machines refuse the real-time class even to root (a container
    // whose cgroup has no real-time runtime): there braid must refuse to
    // start, which is checked instead.
    let allowed = std::thread::spawn(|| braid_io::realtime_data_plane_thread(1))
        .join()
        .expect("probe thread");
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    if let Err(e) = allowed {
        eprintln!("[{test}] this machine refuses SCHED_RR to root ({e}): checking the refusal");
        let log = b.log_text();
        assert!(
            log.contains(&format!("RealtimePriority = {PRIORITY}")) && !nsb.has_link(&ifb),
            "braid up should have refused, naming the key: {log}"
        );
        return;
    }
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Foreground);
    a.assert_up();
    let pid = a.child.as_ref().expect("foreground child").pid();
    assert!(
        ping_until_reply(&nsa, &format!("198.19.{x}.2"), Duration::from_secs(20)),
        "no ping through the tunnel:\n{}",
        a.log_text()
    );
    // A transfer through both real-time ends, bounded in time.
    let flood = nsa.run(
        "ping",
        &[
            "-c",
            "200",
            "-i",
            "0.002",
            "-s",
            "1300",
            "-W",
            "1",
            &format!("198.19.{x}.2"),
        ],
        Duration::from_secs(20),
    );
    assert!(flood.ok(), "ping flood: {}", flood.describe());

    let threads = thread_policies(pid);
    eprintln!("[{test}] threads (name, policy, priority): {threads:?}");
    let of = |name: &str| {
        threads
            .iter()
            .find(|t| t.0 == name)
            .unwrap_or_else(|| panic!("no thread {name}: {threads:?}"))
    };
    // The main thread carries the process's name.
    for data_plane in ["braid", "braid-outbound"] {
        let (_, policy, priority) = of(data_plane);
        assert_eq!(
            (*policy, *priority),
            (SCHED_RR, PRIORITY),
            "{data_plane}: {threads:?}"
        );
    }
    for normal in threads.iter().filter(|t| t.0.starts_with("braid-uapi")) {
        assert_eq!((normal.1, normal.2), (SCHED_OTHER, 0), "{normal:?}");
    }
    let hook = policy_in(&hook_stat.display().to_string());
    assert_eq!(hook, (SCHED_OTHER, 0), "the PostUp hook's class");
    let log = a.log_text();
    assert!(
        log.contains(&format!("real-time class (SCHED_RR, priority {PRIORITY})")),
        "{log}"
    );
    assert!(!log.contains("stays in the normal class"), "{log}");
    let show = nsa.run(BRAID, &["show", &ifa], SHORT);
    assert!(
        show.ok()
            && show
                .stdout
                .contains(&format!("realtime_priority: {PRIORITY}")),
        "braid show names the priority: {}",
        show.describe()
    );
}

#[test]
fn a_refused_realtime_class_stops_braid_up_before_anything_changes() {
    let test = "a_refused_realtime_class_stops_braid_up_before_anything_changes";
    if !preflight(test, &["ip", "prlimit", "setpriv"]) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (_nsb, _ifb, kb), _veth) = env.two_sides();
    let (mut conf_a, _) = tunnel_confs(&ka, &kb, x);
    conf_a.braid_lines = vec![format!("RealtimePriority = {PRIORITY}")];
    let conf = env.write(&format!("{ifa}.conf"), &conf_a.wg_quick());
    // Root without CAP_SYS_NICE and CAP_SYS_RESOURCE, and no RLIMIT_RTPRIO:
    // like a container that may not use the real-time class.
    let up = nsa.run(
        "prlimit",
        &[
            "--rtprio=0",
            "setpriv",
            "--bounding-set=-sys_nice,-sys_resource",
            BRAID,
            "up",
            "--foreground",
            &conf.display().to_string(),
        ],
        Duration::from_secs(30),
    );
    assert!(!up.ok(), "braid up should fail: {}", up.describe());
    let said = format!("{}{}", up.stdout, up.stderr);
    assert!(
        said.contains(&format!("RealtimePriority = {PRIORITY}")) && said.contains("CAP_SYS_NICE"),
        "the error names the key and what would allow it: {said}"
    );
    assert!(!nsa.has_link(&ifa), "an interface was left: {said}");
    assert!(!sock_path(&ifa).exists(), "a UAPI socket was left");
}
