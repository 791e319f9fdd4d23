//! Logs (issue 23 item 7): `LogLevel =` and `-v` decide what is written,
//! one line per event; under systemd's journal (stderr is the stream
//! `JOURNAL_STREAM` names) a line has its syslog priority and no time of
//! ours, elsewhere the time in UTC and the level; a line going down is a
//! warning; no key but public ones is ever written.

use crate::harness::*;
use std::os::unix::fs::MetadataExt;

/// `2026-11-27T00:17:02.403Z ` at the start of a line.
fn has_timestamp(line: &str) -> bool {
    braid::log::parse_utc_timestamp(line.get(..24).unwrap_or("")).is_some()
}

#[test]
fn levels_journal_format_and_no_secrets() {
    if !preflight(
        "levels_journal_format_and_no_secrets",
        &["ip", "wg", "ping"],
    ) {
        return;
    }
    let env = TestEnv::new("logs");
    let JoinedPair {
        x,
        nsa,
        nsb,
        va,
        veth,
        ..
    } = env.joined_pair();
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let psk = braid_genkey().stdout.trim().to_string();
    let (mut ca, mut cb) = tunnel_confs(&ka, &kb, x);
    ca.peers[0].preshared_key = Some(psk.clone());
    cb.peers[0].preshared_key = Some(psk.clone());
    ca.braid_lines = vec!["LogLevel = debug".into()];
    // error, and one -v: warnings and errors.
    cb.braid_lines = vec!["LogLevel = error".into()];

    let mut b = BraidUp::start_with(&env, &nsb, &ifb, &cb, BraidMode::Daemon, &["-v"]);
    b.assert_up();
    // Side a in the foreground, its stderr a file posing as the journal's
    // stream: JOURNAL_STREAM names its device and inode, as systemd does.
    let journal = env.path(&format!("{ifa}.{}.log", env.n));
    std::fs::write(&journal, "").expect("the journal file");
    let meta = std::fs::metadata(&journal).expect("stat");
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let mut a = up_with_env(
        &env,
        &nsa,
        &ifa,
        &ca,
        &[
            ("JOURNAL_STREAM", &stream),
            ("BRAID_TEST_REKEY_AFTER_SECS", "2"),
        ],
    );
    assert!(
        ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG),
        "no reply through the tunnel"
    );
    // Traffic keeps the keys turning over (a rekey is due on sending).
    let mut pinger = ChildGuard::spawn(
        {
            let mut c = nsa.cmd("ping");
            c.args(["-q", "-i", "0.2", "-w", "60", &format!("198.19.{x}.2")]);
            c
        },
        "ping",
        &env.path("ping.log"),
    )
    .or_panic();
    // A rekey or two (debug), then the line down (warn) and up (info).
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    assert!(
        wait_until(LONG, || read(&journal)
            .contains("handshake completed (new keys)")),
        "no rekey logged at debug:\n{}",
        read(&journal)
    );
    // Down until both sides have said so (each notices on its own).
    let b_log = std::path::PathBuf::from(braid::background::log_path(&ifb));
    nsa.ip(&["link", "set", &va, "down"]).expect_ok("line down");
    let a_down = wait_until(LONG, || read(&journal).contains("down (was up)"));
    let b_down = wait_until(LONG, || read(&b_log).contains("down (was up)"));
    nsa.ip(&["link", "set", &va, "up"]).expect_ok("line up");
    assert!(
        a_down,
        "the line going down was not logged:\n{}",
        read(&journal)
    );
    assert!(b_down, "side b logged no line down:\n{}", read(&b_log));
    let back_up = |text: &str| {
        text.lines()
            .skip_while(|l| !l.contains("down (was up)"))
            .any(|l| l.contains("path endpoint to ") && l.ends_with(" up"))
    };
    assert!(
        wait_until(LONG, || back_up(&read(&journal))),
        "the line coming back was not logged:\n{}",
        read(&journal)
    );

    let a_text = read(&journal);
    println!(
        "--- side a, LogLevel = debug, under the journal ---\n{}",
        tail(&a_text, 3000)
    );
    let ours: Vec<&str> = a_text
        .lines()
        .filter(|l| l.contains(&format!("braid[{ifa}]")))
        .collect();
    assert!(ours.len() >= 5, "{a_text}");
    for line in &ours {
        let ok = ["<3>", "<4>", "<6>", "<7>"]
            .iter()
            .any(|p| line.starts_with(&format!("{p}braid[{ifa}]: ")));
        assert!(ok, "not a journal line: {line:?}");
        assert!(!has_timestamp(line) && !line.contains("Z info"), "{line:?}");
    }
    for (priority, what) in [
        ("<6>", "handshake completed, session up"),
        ("<7>", "handshake completed (new keys)"),
        ("<4>", "path endpoint to "),
        ("<6>", "path endpoint to "),
        ("<6>", "up, listening on UDP port"),
    ] {
        assert!(
            ours.iter()
                .any(|l| l.starts_with(priority) && l.contains(what)),
            "no {priority} line with {what:?}:\n{a_text}"
        );
    }

    let b_text = read(&b_log);
    println!("--- side b, LogLevel = error and -v, in its log file ---\n{b_text}");
    let lines: Vec<&str> = b_text.lines().filter(|l| !l.is_empty()).collect();
    assert!(!lines.is_empty());
    for line in &lines {
        assert!(has_timestamp(line), "no timestamp: {line:?}");
        let rest = &line[25..];
        assert!(
            rest.starts_with(&format!("warn  braid[{ifb}]: "))
                || rest.starts_with(&format!("error braid[{ifb}]: ")),
            "above warn with LogLevel = error and -v: {line:?}"
        );
    }
    assert!(b_text.contains("down (was up)"), "{b_text}");
    assert!(
        !b_text.contains("new keys") && !b_text.contains("up, listening"),
        "{b_text}"
    );

    // Never a secret, in any form.
    let mut secrets = vec![ka.private.clone(), kb.private.clone(), psk.clone()];
    for key in [&ka.private, &kb.private, &psk] {
        secrets.push(
            braid::keys::PresharedKey::from_base64(key)
                .unwrap()
                .to_hex()
                .to_string(),
        );
    }
    for secret in &secrets {
        for (side, text) in [("a", &a_text), ("b", &b_text)] {
            assert!(
                !text.contains(&secret[..16]),
                "a secret in side {side}'s log"
            );
        }
    }
    pinger.terminate();
    a.terminate();
    b.down();
    drop(veth);
}

#[test]
fn a_bad_log_level_for_braid_name_is_refused() {
    if !preflight("a_bad_log_level_for_braid_name_is_refused", &["ip"]) {
        return;
    }
    let env = TestEnv::new("logs_env");
    let ns = env.netns("a");
    let name = env.ifname("x");
    let mut c = ns.cmd(BRAID);
    c.args([name.as_str(), "--foreground"])
        .env("LOG_LEVEL", "loud");
    let out = run_bounded(c, SHORT);
    println!("LOG_LEVEL=loud braid {name}: {}", out.stderr.trim());
    assert!(!out.ok());
    assert!(
        out.stderr
            .contains("LOG_LEVEL=\"loud\": expected error, warn, info or debug (or silent)"),
        "{}",
        out.describe()
    );
    assert!(!ns.has_link(&name), "an interface was made");
}

/// `LogLevel` changed in the file and `braid syncconf` (what `systemctl
/// reload` runs): the new level holds at once, with no restart, and the
/// reload itself is logged.
#[test]
fn a_reload_changes_the_log_level_at_once() {
    if !preflight(
        "a_reload_changes_the_log_level_at_once",
        &["ip", "wg", "ping"],
    ) {
        return;
    }
    let env = TestEnv::new("logs_reload");
    let JoinedPair {
        x,
        nsa,
        nsb,
        va,
        veth,
        ..
    } = env.joined_pair();
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let (mut ca, cb) = tunnel_confs(&ka, &kb, x);
    ca.braid_lines = vec!["LogLevel = error".into()];
    let mut b = BraidUp::start(&env, &nsb, &ifb, &cb, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &ca, BraidMode::Daemon);
    a.assert_up();
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    let log = std::path::PathBuf::from(braid::background::log_path(&ifa));
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !read().contains("up, listening"),
        "info at LogLevel = error:\n{}",
        read()
    );

    ca.braid_lines = vec!["LogLevel = info".into()];
    let file = env.write(&format!("{ifa}.conf"), &ca.wg_quick());
    let sync = nsa.run(BRAID, &["syncconf", &ifa, &file.to_string_lossy()], LONG);
    assert!(sync.ok(), "braid syncconf: {}", sync.describe());
    // The reload's own line is already at the new level.
    assert!(
        wait_until(LONG, || read().contains("log level info")),
        "the reload was not logged at info:\n{}",
        read()
    );
    nsa.ip(&["link", "set", &va, "down"]).expect_ok("line down");
    let down = wait_until(LONG, || read().contains("down (was up)"));
    nsa.ip(&["link", "set", &va, "up"]).expect_ok("line up");
    assert!(down, "no line down after the reload:\n{}", read());
    assert!(
        wait_until(LONG, || read().lines().any(|l| l.contains(" info  ")
            && l.contains("path endpoint to ")
            && l.ends_with(" up"))),
        "no info line for the line coming back:\n{}",
        read()
    );
    println!(
        "--- {ifa}: LogLevel = error, then info by braid syncconf ---\n{}",
        read()
    );
    a.down();
    b.down();
    drop(veth);
}
