//! A receiving daemon that does not run for a while (preempted on a busy
//! host, or behind another real-time thread's 100 ms slice) finds the
//! datagrams of that while waiting in its socket. Its reorder window must
//! judge them by when they arrived: a gap whose packets wait in the socket
//! is not given up, and the daemon's own delay is not counted as the
//! line's lateness (which would stretch the hold of every later real loss
//! to hundreds of milliseconds).
//!
//! Side a sends UDP to b over a line with 3 ms ± 1 ms (reordering all the
//! time, so the window always holds gaps), and b's daemon is stopped with
//! SIGSTOP for 50 ms, ten times (`Mode = failover` keeps the data on the
//! jittery line; the second line only carries probes, read from another
//! socket after the first). The relay and both daemons run at real-time
//! priority: on a busy host (CI runs other tests beside this one) a
//! starved relay, or a sender preempted between a packet's counter and its
//! send, really reorders by more than the hold, which is not what these
//! tests are about. For the same reason each runs alone, with no other
//! test beside it (`TestEnv::alone`). The second test does the same with
//! `Queues = 2`.

use crate::harness::*;
use crate::two_lines::TwoLines;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "iperf3"];

/// The processes whose command line names `conf` (a `braid up` and the
/// daemon it left), by PID.
fn processes_of(conf: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(conf) {
            pids.push(pid);
        }
    }
    pids
}

fn signal_all(pids: &[i32], signal: libc::c_int) {
    for &pid in pids {
        // SAFETY: kill takes plain integers; these are processes this test
        // started (their command line names its own configuration file).
        unsafe { libc::kill(pid, signal) };
    }
}

#[test]
fn a_receiver_that_ran_late_gives_up_no_gap_whose_packets_wait_in_its_socket() {
    let test = "late_receiver";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::alone(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let lab = TwoLines::start_configured(
        &env,
        [&nsa, &nsb],
        [Some(JITTERY), None],
        &["Mode = failover"],
        &[UNHURRIED],
    );
    let (lateness, text) = stop_b_while_it_receives(test, &lab);
    // The line reorders by 2 ms at most; 50 ms stops must not show.
    assert!(
        lateness < 25_000,
        "{test}: the daemon's own stop was counted as lateness:\n{text}"
    );
    lab.stop();
}

/// With `Queues = 2` the main line's group has two sockets, each read by
/// its own thread, and the kernel puts each line on one of them by its
/// ports. Only the main thread's timers give gaps up: they must wait for
/// what the other thread's socket holds (restarted until the jittery line
/// lands on the second socket and the probes of the other line on the
/// first).
#[test]
fn a_gap_waits_for_the_socket_of_another_thread() {
    let test = "late_receiver_queues";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::alone(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let lab = TwoLines::start_until(
        &env,
        [&nsa, &nsb],
        [Some(JITTERY), None],
        &["Mode = failover"],
        &["Queues = 2", UNHURRIED],
        |lab, start| {
            // Failover: pings go on the jittery line alone.
            let before = interface_counter(lab.nsb, &lab.ifb, "udp_socket_datagrams");
            let pinged = ping_counted(&lab.nsa.name, &["-i", "0.005"], &lab.tb, 200);
            let second = interface_counter(lab.nsb, &lab.ifb, "udp_socket_datagrams") - before;
            eprintln!(
                "[{test}] start {start}: {second} datagrams on b's second socket for {} pings",
                pinged.received
            );
            second >= 150
        },
    )
    .unwrap_or_else(|| {
        panic!("{test}: in 16 starts the jittery line never landed on b's second socket")
    });
    let (lateness, text) = stop_b_while_it_receives(test, &lab);
    // Each packet is measured at its own arrival: what the second thread
    // takes in after a stop is not measured at the arrival of the probes
    // the main thread took in first.
    assert!(
        lateness < 25_000,
        "{test}: the daemon's own stop was counted as lateness:\n{text}"
    );
    lab.stop();
}

/// 3 ms ± 1 ms: reordering all the time, so the window always holds gaps.
/// The relay runs at real-time priority: on a busy host (CI runs other
/// tests beside this one) a starved relay really reorders by more than the
/// hold, which is not what these tests are about.
const JITTERY: &[&str] = &["--delay", "3ms", "--jitter", "1ms", "--realtime"];
/// Both daemons in the real-time class: on a busy host a sending thread
/// preempted between a packet's counter and its send reorders the line
/// by as long as it waited, and the receiver is only to be late when the
/// test stops it.
const UNHURRIED: &str = "RealtimePriority = 20";

/// 60 Mbit/s of UDP from a to b through `lab` while b's daemon is stopped
/// for 50 ms ten times; then b's window must not have given up a gap whose
/// packets were waiting. Returns the window's lateness (µs) and `braid
/// show`.
fn stop_b_while_it_receives(test: &str, lab: &TwoLines) -> (u64, String) {
    let conf_b = lab.env.path(&format!("{}.conf", lab.ifb));
    let pids = processes_of(&conf_b.to_string_lossy());
    assert!(!pids.is_empty(), "{test}: no process runs {conf_b:?}");

    let _cpu = iperf_lock();
    let log = lab.env.path("iperf3-server.log");
    let stream = std::thread::scope(|scope| {
        let stream = scope.spawn(|| {
            iperf::run(
                &lab.nsa.name,
                &lab.nsb.name,
                &lab.tb,
                &[
                    "-u",
                    "-b",
                    "60M",
                    "-l",
                    "1200",
                    "-t",
                    "4",
                    "--connect-timeout",
                    "20000",
                ],
                &log,
                Duration::from_secs(40),
            )
        });
        std::thread::sleep(Duration::from_millis(1500));
        // Each stop shorter than a path takes to be declared down (200 ms
        // without a word): side a must go on sending as before.
        for _ in 0..10 {
            signal_all(&pids, libc::SIGSTOP);
            std::thread::sleep(Duration::from_millis(50));
            signal_all(&pids, libc::SIGCONT);
            std::thread::sleep(Duration::from_millis(150));
        }
        stream.join().expect("the iperf3 thread")
    });
    // Never left stopped, whatever happened above.
    signal_all(&pids, libc::SIGCONT);
    let report = stream.or_panic();

    let (show, text) = braid_show_json(lab.nsb, &lab.ifb);
    let extra = &show["peers"][0]["extra"];
    let counter = |name: &str| {
        extra_counter(extra, name).unwrap_or_else(|| panic!("{test}: no {name} in {text}"))
    };
    let (under, lost, lateness, hold) = (
        counter("under_window"),
        counter("lost"),
        counter("reorder_lateness_us"),
        counter("reorder_hold_us"),
    );
    let (by_hold, by_paths) = (counter("gaps_by_hold"), counter("gaps_by_paths"));
    let summary = format!(
        "under window {under}, lost {lost}, lateness {lateness} µs, hold {hold} µs, \
         gaps by hold {by_hold}, by paths {by_paths}"
    );
    println!(
        "[{test}] b: {summary}; iperf3 UDP lost {:?}",
        report.udp.as_ref().map(|u| u.lost_packets)
    );
    assert!(
        report.udp.as_ref().is_some_and(|u| u.packets > 0),
        "{test}: no UDP report: {}",
        report.json
    );
    // Packets that came after their gap was given up: the window judged
    // by the stopped daemon's clock, which gave up 2-7 in every run (and
    // 4-7 beside two busy loops) before the window ran on arrival stamps;
    // later a stale poll of the main thread and rule 3 at a session's
    // start gave up 1-8 in 10 of 74 runs (docs/dual-line.md), and a gate
    // with both fixed still read 5 (rule 3, lateness 9.8 ms) beside
    // another test. Two are let pass: on a loaded host the sender's
    // threads on two cores reorder the veth for real (a capture saw
    // 29 ms), which is not what the stops test.
    assert!(
        under <= 2,
        "{test}: gaps given up too early: {summary}\n{text}"
    );
    (lateness, text)
}
