//! `braid syncconf` (what `systemctl reload braid@NAME` runs: the unit's
//! ExecReload) and the readiness notifications of `Type=notify`, end to
//! end with a real daemon in namespaces:
//!
//! ```text
//!   netns a                                       netns b
//!   va1 198.18.x.1/25   ──────── line 1 ────────  vb1 198.18.x.2/25
//!   va2 198.18.x.129/25 ──────── line 2 ────────  vb2 198.18.x.130/25
//!   braid A (daemon): Path l1 [+ l2 by reload]    braid B (foreground,
//!                                                 $NOTIFY_SOCKET = ours)
//! ```
//!
//! While a checked TCP stream and a ping run through the tunnel, A's file
//! gains a line and an AllowedIPs network, loses a line and changes mode;
//! B's gains a peer and loses it again. Each reload must take effect, keep
//! the session (no handshake) and the stream intact; a file with a mistake
//! must change nothing and say where the mistake is; stock `wg syncconf`
//! must not cost the session either; B must say READY=1
//! once up, RELOADING=1/READY=1 around its reloads and STOPPING=1 at the end.

use crate::harness::*;
use braid::toolkit::lab::traffic::TcpTransfer;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

const TOOLS: &[&str] = &["ip", "ping", "wg"];

/// The notification socket a service manager would hold.
struct Manager {
    socket: UnixDatagram,
    path: std::path::PathBuf,
}

impl Manager {
    fn new(env: &TestEnv) -> Manager {
        let path = env.path("notify");
        let socket = UnixDatagram::bind(&path).expect("bind the notification socket");
        // As /run/systemd/notify: the daemon writes to it after giving up root.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(&env.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        Manager { socket, path }
    }

    /// The next notification that holds `what`, within `limit`; the ones
    /// before it too.
    fn wait_for(&self, what: &str, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            if let Ok(n) = self.socket.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = msg.lines().any(|l| l == what);
                seen.push(msg);
                if done {
                    return seen;
                }
            }
        }
        panic!("no {what} within {limit:?}; got {seen:?}");
    }
}

/// A's config: line 1 always, line 2 and the extra network when asked.
fn config_a(x: u8, ka: &Keys, kb: &Keys, peer_lines: &[String], extra_net: bool) -> IfaceConf {
    let mut allowed = vec![format!("198.19.{x}.2/32")];
    if extra_net {
        allowed.push(format!("198.19.{}.0/24", x + 1));
    }
    IfaceConf {
        private_key: ka.private.clone(),
        address: vec![format!("198.19.{x}.1/24")],
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: allowed,
            keepalive: Some(25),
            braid_lines: peer_lines.to_vec(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn config_b(x: u8, kb: &Keys, ka: &Keys, extra_peer: Option<&Keys>) -> IfaceConf {
    let mut peers = vec![PeerConf {
        public_key: ka.public.clone(),
        allowed_ips: vec![format!("198.19.{x}.1/32")],
        ..Default::default()
    }];
    if let Some(k) = extra_peer {
        peers.push(PeerConf {
            public_key: k.public.clone(),
            allowed_ips: vec![format!("198.19.{x}.77/32")],
            ..Default::default()
        });
    }
    IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(51821),
        address: vec![format!("198.19.{x}.2/24")],
        peers,
        ..Default::default()
    }
}

/// `braid syncconf NAME FILE` inside `ns`, as the unit's ExecReload runs it.
fn syncconf(env: &TestEnv, ns: &Netns, ifname: &str, conf: &IfaceConf) -> Out {
    let file = env.write(&format!("{ifname}.conf"), &conf.wg_quick());
    ns.run(BRAID, &["syncconf", ifname, &file.to_string_lossy()], LONG)
}

/// (handshakes initiated, completed, latest handshake) of the first peer.
fn handshakes(ns: &Netns, ifname: &str) -> (u64, u64, u64) {
    let (v, text) = braid_show_json(ns, ifname);
    let peer = &v["peers"][0];
    let counter =
        |name| extra_counter(&peer["extra"], name).unwrap_or_else(|| panic!("{name}: {text}"));
    (
        counter("handshakes_initiated"),
        counter("handshakes_completed"),
        peer["last_handshake_time_sec"].as_u64().unwrap_or(0),
    )
}

/// The first peer's paths from `braid show --json`: (name, tx packets).
fn paths(ns: &Netns, ifname: &str) -> Vec<(String, u64)> {
    let (v, _) = braid_show_json(ns, ifname);
    v["peers"][0]["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("").to_string(),
                p["tx_packets"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn path_names(ns: &Netns, ifname: &str) -> Vec<String> {
    paths(ns, ifname).into_iter().map(|(n, _)| n).collect()
}

#[test]
fn reload_applies_a_changed_file_without_dropping_the_session() {
    let test = "reload_applies_a_changed_file_without_dropping_the_session";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let manager = Manager::new(&env);
    let x = env.octet();
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let _line1 = Veth::new(
        &nsa,
        "va1",
        &format!("198.18.{x}.1/25"),
        &nsb,
        "vb1",
        &format!("198.18.{x}.2/25"),
    )
    .or_panic();
    let _line2 = Veth::new(
        &nsa,
        "va2",
        &format!("198.18.{x}.129/25"),
        &nsb,
        "vb2",
        &format!("198.18.{x}.130/25"),
    )
    .or_panic();
    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let l1 = format!("Path = l1 bind=va1 endpoint=198.18.{x}.2:51821");
    let l2 = format!("Path = l2 bind=198.18.{x}.129 endpoint=198.18.{x}.130:51821");

    // B under a "service manager": foreground, notifying our socket.
    let notify = manager.path.display().to_string();
    let mut b = up_with_env(
        &env,
        &nsb,
        &ifb,
        &config_b(x, &kb, &ka, None),
        &[("NOTIFY_SOCKET", &notify)],
    );
    let ready = manager.wait_for("READY=1", LONG);
    let last = ready.last().unwrap();
    eprintln!("[{test}] B said: {last:?}");
    assert!(
        last.contains(&format!("STATUS=interface {ifb} is up")),
        "{last}"
    );
    assert!(last.contains(&format!("MAINPID={}", b.pid())), "{last}");
    // An extra tunnel address on B, in the network A's reload will add.
    nsb.ip(&[
        "addr",
        "add",
        &format!("198.19.{}.1/32", x + 1),
        "dev",
        &ifb,
    ])
    .expect_ok("ip addr add");

    let mut a = BraidUp::start(
        &env,
        &nsa,
        &ifa,
        &config_a(x, &ka, &kb, std::slice::from_ref(&l1), false),
        BraidMode::Daemon,
    );
    a.assert_up();
    let b_tunnel = format!("198.19.{x}.2");
    assert!(
        ping_until_reply(&nsa, &b_tunnel, Duration::from_secs(20)),
        "no tunnel:\n{}",
        a.log_text()
    );
    let extra = format!("198.19.{}.1", x + 1);
    assert_eq!(
        ping(&nsa, &extra, 1).received,
        0,
        "{extra} is not routed into the tunnel yet"
    );

    // A checked TCP stream and a ping run through every reload below.
    let to_b: std::net::SocketAddr = format!("{b_tunnel}:7311").parse().unwrap();
    let stream = TcpTransfer::start(&nsa.name, &nsb.name, to_b, 2 << 20, Duration::from_secs(12));
    let pinger = {
        let ns = nsa.name.clone();
        let dst = b_tunnel.clone();
        std::thread::spawn(move || ping_counted(ns, &["-i", "0.02"], &dst, 500))
    };
    std::thread::sleep(Duration::from_secs(1));
    let before = handshakes(&nsa, &ifa);
    let before_b = handshakes(&nsb, &ifb);

    // 1. A gains line 2 and a network.
    let out = syncconf(
        &env,
        &nsa,
        &ifa,
        &config_a(x, &ka, &kb, &[l1.clone(), l2.clone()], true),
    );
    eprintln!("[{test}] reload 1:\n{}", out.combined());
    assert!(out.ok(), "{}", out.describe());
    assert!(
        out.stdout.contains("peers: 0 added, 0 removed, 1 kept"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("paths added: l2"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains(&format!("routes added: 198.19.{}.0/24", x + 1)),
        "{}",
        out.stdout
    );
    assert_eq!(path_names(&nsa, &ifa), ["l1", "l2"]);
    assert!(
        ping_until_reply(&nsa, &extra, Duration::from_secs(10)),
        "the new AllowedIPs network is not reached"
    );
    assert!(
        wait_until(Duration::from_secs(10), || paths(&nsa, &ifa)
            .iter()
            .any(|(n, tx)| n == "l2" && *tx > 0)),
        "line 2 carries nothing: {:?}",
        paths(&nsa, &ifa)
    );

    // 2. A mistake: nothing changes, and the error says where.
    let bad = env.write(
        &format!("{ifa}.conf"),
        &format!(
            "{}Moed = failover\n",
            config_a(x, &ka, &kb, std::slice::from_ref(&l1), false).wg_quick()
        ),
    );
    let out = nsa.run(BRAID, &["syncconf", &ifa, &bad.to_string_lossy()], LONG);
    eprintln!("[{test}] bad file: {}", out.stderr.trim());
    assert!(!out.ok());
    assert!(
        out.stderr.contains(&format!("{ifa}.conf:")) && out.stderr.contains("key 'Moed'"),
        "{}",
        out.stderr
    );
    assert_eq!(
        path_names(&nsa, &ifa),
        ["l1", "l2"],
        "the bad file changed the paths"
    );
    // One the daemon refuses (a line it cannot open) changes nothing either.
    let out = syncconf(
        &env,
        &nsa,
        &ifa,
        &config_a(
            x,
            &ka,
            &kb,
            &[
                l1.clone(),
                "Path = l3 bind=nosuchdev0 endpoint=198.18.9.9:51821".into(),
            ],
            false,
        ),
    );
    eprintln!("[{test}] refused by the daemon: {}", out.stderr.trim());
    assert!(
        !out.ok() && out.stderr.contains("nothing changed") && out.stderr.contains("l3"),
        "{}",
        out.combined()
    );
    assert_eq!(path_names(&nsa, &ifa), ["l1", "l2"]);
    assert!(
        ping(&nsa, &extra, 2).received > 0,
        "the refused file took the route away"
    );

    // 3. A loses line 1 and the network, and fails over instead.
    let out = syncconf(
        &env,
        &nsa,
        &ifa,
        &config_a(x, &ka, &kb, &[l2.clone(), "Mode = failover".into()], false),
    );
    eprintln!("[{test}] reload 3:\n{}", out.combined());
    assert!(out.ok(), "{}", out.describe());
    assert!(out.stdout.contains("paths removed: l1"), "{}", out.stdout);
    assert!(
        out.stdout.contains("peers with changed braid settings: 1"),
        "{}",
        out.stdout
    );
    assert_eq!(path_names(&nsa, &ifa), ["l2"]);
    assert_eq!(
        ping(&nsa, &extra, 1).received,
        0,
        "the removed network is still routed"
    );

    // 4. B gains a peer, then loses it; B tells its manager each time.
    let extra_peer = wg_keys();
    let out = syncconf(&env, &nsb, &ifb, &config_b(x, &kb, &ka, Some(&extra_peer)));
    assert!(
        out.ok() && out.stdout.contains("peers: 1 added, 0 removed, 1 kept"),
        "{}",
        out.combined()
    );
    let notes = manager.wait_for("READY=1", LONG);
    assert!(notes.iter().any(|n| n.contains("RELOADING=1")), "{notes:?}");
    let peers = nsb
        .run("wg", &["show", &ifb, "peers"], SHORT)
        .expect_ok("wg show peers");
    assert!(
        peers.stdout.contains(&extra_peer.public),
        "{}",
        peers.stdout
    );
    let out = syncconf(&env, &nsb, &ifb, &config_b(x, &kb, &ka, None));
    assert!(
        out.ok() && out.stdout.contains("peers: 0 added, 1 removed, 1 kept"),
        "{}",
        out.combined()
    );
    manager.wait_for("READY=1", LONG);

    // Stock `wg syncconf` (what wg-quick@.service reloads with) on B: the
    // unchanged private key it sends again keeps the session too.
    let plain = env.write(
        &format!("{ifb}.setconf"),
        &config_b(x, &kb, &ka, None).wg_setconf(),
    );
    nsb.run("wg", &["syncconf", &ifb, &plain.to_string_lossy()], SHORT)
        .expect_ok("wg syncconf");

    // 5. A key only a restart applies is reported, not applied.
    let mut moved = config_a(x, &ka, &kb, &[l2.clone(), "Mode = failover".into()], false);
    moved.address.push(format!("198.19.{x}.99/24"));
    let out = syncconf(&env, &nsa, &ifa, &moved);
    assert!(
        out.ok()
            && out
                .stdout
                .contains("Address in [Interface] changed: not applied"),
        "{}",
        out.combined()
    );

    let report = stream.finish();
    let pings = pinger.join().expect("ping thread");
    let after = handshakes(&nsa, &ifa);
    let after_b = handshakes(&nsb, &ifb);
    eprintln!("[{test}] {report}");
    eprintln!(
        "[{test}] ping through the reloads: {} sent, {} received; handshakes A {before:?} -> {after:?}, B {before_b:?} -> {after_b:?}",
        pings.transmitted, pings.received
    );
    assert!(report.intact(), "{report}");
    assert!(pings.received > 0 && pings.transmitted > 0, "{pings:?}");
    assert_eq!(after, before, "a reload made A handshake again");
    assert_eq!(after_b, before_b, "a reload made B handshake again");

    // Stopping: B says so.
    b.ask_to_stop();
    manager.wait_for("STOPPING=1", LONG);
    b.wait_exit(LONG);
    a.down();
}
