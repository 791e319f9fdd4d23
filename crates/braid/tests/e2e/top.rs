//! `braid top` (issue 23 item 2) as a person sees it: run in tmux at
//! 80 × 24 inside the namespace of a braid interface with two lines, read
//! with `capture-pane`; a line cut shows as down with its event, a stopped
//! daemon as not running, and `q` quits. `braid top` of an interface that
//! is not running says so.

use crate::harness::*;
use crate::two_lines::TwoLines;
use std::process::Command;

/// A tmux server of this test's own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Out {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "-f", "/dev/null"]).args(args);
        run_bounded(c, SHORT)
    }

    /// The pane's text as it is now.
    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout
    }

    /// Waits until the screen shows every one of `wanted`; the last screen.
    fn wait_for(&self, wanted: &[&str]) -> (bool, String) {
        let mut screen = String::new();
        let ok = wait_until(LONG, || {
            screen = self.screen();
            wanted.iter().all(|w| screen.contains(w))
        });
        (ok, screen)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

#[test]
fn braid_top_in_tmux_shows_lines_a_cut_a_stop_and_quits_on_q() {
    if !preflight(
        "braid_top_in_tmux_shows_lines_a_cut_a_stop_and_quits_on_q",
        &["ip", "wg", "ping", "tmux"],
    ) {
        return;
    }
    let env = TestEnv::new("top");
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let lab = TwoLines::start_impaired(&env, [&nsa, &nsb], [None, None], &["Mode = redundant"]);
    let ifa = lab.ifa.clone();

    // Not running: said at once, before any terminal is needed.
    let missing = nsa.run(BRAID, &["top", "nosuch0"], SHORT);
    println!("braid top nosuch0: {}", missing.stderr.trim());
    assert!(!missing.ok());
    assert!(
        missing.stderr.contains(
            "nosuch0 is not running: no braid daemon answers on /var/run/wireguard/nosuch0.sock"
        ),
        "{}",
        missing.describe()
    );

    // Traffic both ways for the rates, bounded.
    let mut pinger = ChildGuard::spawn(
        {
            let mut c = nsa.cmd("ping");
            c.args(["-q", "-i", "0.01", "-s", "1200", "-w", "60", &lab.tb]);
            c
        },
        "ping",
        &env.path("ping.log"),
    )
    .or_panic();

    let tmux = Tmux {
        socket: format!("braid-e2e-{}", env.prefix),
    };
    let command = format!(
        "ip netns exec {} {BRAID} top {ifa}; echo \"braid top exited with $?\"; sleep 60",
        nsa.name
    );
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "80",
        "-y",
        "24",
        &command,
    ]);
    assert!(started.ok(), "tmux: {}", started.describe());
    let (ok, screen) = tmux.wait_for(&[
        &format!("braid top {ifa}"),
        " clean    up",
        " bad      up",
        "redundant",
        "ms",
        "reorder hold",
        "accepted",
        "events",
    ]);
    println!("--- braid top, both lines up (80 x 24) ---\n{screen}");
    assert!(ok, "braid top did not show both lines up:\n{screen}");
    // A rate on the clean line, and the sparkline's bars.
    let mut screen = String::new();
    let ok = wait_until(LONG, || {
        screen = tmux.screen();
        let clean = screen
            .lines()
            .find(|l| l.starts_with(" clean"))
            .unwrap_or("");
        clean.contains(|c| ('▁'..='█').contains(&c))
            && clean
                .split('↓')
                .nth(1)
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    });
    assert!(ok, "no rate or sparkline on the clean line:\n{screen}");
    for line in screen.lines() {
        assert!(line.chars().count() <= 80, "wider than 80: {line:?}");
    }

    // Line 2 goes down: its row says so, and the event list has it.
    nsa.ip(&["link", "set", "va2", "down"])
        .expect_ok("va2 down");
    let (ok, screen) = tmux.wait_for(&[" bad      down", "path bad to", "down (was up)"]);
    println!("--- braid top, line 2 cut ---\n{screen}");
    assert!(ok, "the cut line never showed as down:\n{screen}");
    nsa.ip(&["link", "set", "va2", "up"]).expect_ok("va2 up");

    // The daemon stops: the view says the interface is not running.
    let down = nsa.run(BRAID, &["down", &ifa], LONG);
    assert!(down.ok(), "braid down: {}", down.describe());
    let (ok, screen) = tmux.wait_for(&[&format!("{ifa} is not running (since"), "q quits"]);
    println!("--- braid top, daemon stopped ---\n{screen}");
    assert!(ok, "a stopped interface was not said to be:\n{screen}");

    // q quits, with status 0 and the terminal given back.
    let sent = tmux.cmd(&["send-keys", "-t", "top", "q"]);
    assert!(sent.ok(), "{}", sent.describe());
    let (ok, screen) = tmux.wait_for(&["braid top exited with 0"]);
    assert!(ok, "q did not quit braid top:\n{screen}");
    pinger.terminate();
    drop(tmux);
    lab.stop();
}
