//! End-to-end interoperability tests: braid against braid and against
//! Debian's `wireguard-go`, over a veth pair between two network namespaces.
//! See `common/mod.rs` for the topology and the cleanup rules.
//!
//! These tests need root, `/dev/net/tun`, iproute2, wireguard-tools,
//! wireguard-go, iperf3 and ping. Outside CI a missing prerequisite skips the
//! test with a printed reason; with `CI=true` it fails.

use crate::harness::*;
use std::path::Path;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ss", "wg", "wireguard-go", "iperf3", "ping"];

// ---------------------------------------------------------------------------
// A pair of tunnel endpoints
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Impl {
    Braid,
    WireguardGo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// 198.18/16 underlay, 198.19/16 tunnel
    V4,
    /// 2001:db8:0::/48 underlay, 2001:db8:1::/48 tunnel
    V6,
}

enum Side<'a> {
    Braid(BraidUp<'a>),
    /// Held for its Drop (stops wireguard-go).
    #[allow(dead_code)]
    WgGo(WgGo),
}

fn start_side<'a>(
    env: &TestEnv,
    ns: &'a Netns,
    ifname: &str,
    conf: &IfaceConf,
    imp: Impl,
) -> Side<'a> {
    match imp {
        Impl::Braid => {
            let mut b = BraidUp::start(env, ns, ifname, conf, BraidMode::Daemon);
            b.assert_up();
            Side::Braid(b)
        }
        Impl::WireguardGo => Side::WgGo(wg_go(env, ns, ifname, conf)),
    }
}

/// Everything `wg show`/`ip` can tell about both sides, for failure messages.
fn diag(sides: &[(&Netns, &str)]) -> String {
    let mut s = String::new();
    for (ns, ifname) in sides {
        s += &format!("\n===== {} / {ifname} =====\n", ns.name);
        s += &wg_show(ns, ifname).combined();
        s += &ns.ip(&["-br", "addr"]).combined();
        s += &ns.ip(&["route"]).combined();
    }
    s
}

fn b64_to_hex(key: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Panic if `text` contains `secret` (base64, or its hex in either case).
fn assert_no_secret(what: &str, text: &str, secret: &str, secret_name: &str) {
    assert!(
        !text.contains(secret),
        "{what} printed the {secret_name} (base64): it must never appear in output"
    );
    if let Some(hex) = b64_to_hex(secret) {
        let lower = text.to_ascii_lowercase();
        assert!(
            !lower.contains(&hex),
            "{what} printed the {secret_name} (hex): it must never appear in output"
        );
    }
}

/// Two namespaces over a veth; `ia` on side A (initiator, has an Endpoint),
/// `ib` on side B (responder, no Endpoint). Handshake, pings both ways,
/// iperf3 both ways, `wg show` and `braid show --json` on braid sides, and a
/// clean `braid down`.
fn pair_test(test: &str, ia: Impl, ib: Impl, fam: Family) {
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let x = env.octet();
    let nsa = env.netns("a");
    let nsb = env.netns("b");
    let (va, vb) = (env.ifname("va"), env.ifname("vb"));
    // underlay (ua, ub), its prefix length, endpoint of B, tunnel (ta, tb) and its prefix length
    let (ua, ub, ulen, ep_b, ta, tb, tlen, host) = match fam {
        Family::V4 => (
            format!("198.18.{x}.1"),
            format!("198.18.{x}.2"),
            24,
            format!("198.18.{x}.2:51821"),
            format!("198.19.{x}.1"),
            format!("198.19.{x}.2"),
            24,
            32,
        ),
        Family::V6 => (
            format!("2001:db8:0:{x:x}::1"),
            format!("2001:db8:0:{x:x}::2"),
            64,
            format!("[2001:db8:0:{x:x}::2]:51821"),
            format!("2001:db8:1:{x:x}::1"),
            format!("2001:db8:1:{x:x}::2"),
            64,
            128,
        ),
    };
    let _veth = Veth::new(
        &nsa,
        &va,
        &format!("{ua}/{ulen}"),
        &nsb,
        &vb,
        &format!("{ub}/{ulen}"),
    )
    .or_panic();

    let (ka, kb) = (wg_keys(), wg_keys());
    let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
    let conf_a = IfaceConf {
        private_key: ka.private.clone(),
        listen_port: Some(51820),
        address: vec![format!("{ta}/{tlen}")],
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: vec![format!("{tb}/{host}")],
            endpoint: Some(ep_b),
            ..Default::default()
        }],
        ..Default::default()
    };
    let conf_b = IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(51821),
        address: vec![format!("{tb}/{tlen}")],
        peers: vec![PeerConf {
            public_key: ka.public.clone(),
            allowed_ips: vec![format!("{ta}/{host}")],
            endpoint: None,
            ..Default::default()
        }],
        ..Default::default()
    };

    // Responder first, so the initiator's first handshake gets an answer.
    let mut side_b = start_side(&env, &nsb, &ifb, &conf_b, ib);
    let mut side_a = start_side(&env, &nsa, &ifa, &conf_a, ia);
    let both = [(&nsa, ifa.as_str()), (&nsb, ifb.as_str())];

    // Handshake: the initiator speaks first.
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: no reply from {tb} through the tunnel within {LONG:?} (handshake never completed?){}",
        diag(&both)
    );
    let p = ping(&nsa, &tb, 5);
    assert!(
        p.received == 5 && p.loss_percent == 0.0,
        "{test}: A->B ping after handshake lost packets:\n{}{}",
        p.output,
        diag(&both)
    );
    let p = ping(&nsb, &ta, 5);
    assert!(
        p.received == 5 && p.loss_percent == 0.0,
        "{test}: B->A ping lost packets:\n{}{}",
        p.output,
        diag(&both)
    );

    // Throughput, one direction at a time, one test at a time.
    {
        let _lock = iperf_lock();
        let fwd = iperf3(&env, &nsa, &nsb, &tb, 2, false)
            .unwrap_or_else(|e| panic!("{test}: iperf3 A->B failed: {e}{}", diag(&both)));
        let rev = iperf3(&env, &nsa, &nsb, &tb, 2, true)
            .unwrap_or_else(|e| panic!("{test}: iperf3 B->A (-R) failed: {e}{}", diag(&both)));
        eprintln!(
            "[{test}] iperf3 TCP 2 s: A({ia:?}) -> B({ib:?}) {:.3} Gbit/s, B -> A {:.3} Gbit/s",
            fwd / 1e9,
            rev / 1e9
        );
        assert!(
            fwd > 0.0 && rev > 0.0,
            "{test}: iperf3 measured zero throughput"
        );
    }

    // After bulk sending in both directions and a pause, light traffic
    // still gets through both ways (braid hands the TUN from its outbound
    // thread back to its main thread when sending turns light or idle).
    std::thread::sleep(Duration::from_millis(500));
    for (from, to, dir) in [(&nsa, &tb, "A->B"), (&nsb, &ta, "B->A")] {
        let p = ping(from, to, 5);
        assert!(
            p.received == 5 && p.loss_percent == 0.0,
            "{test}: {dir} ping after the bulk transfers lost packets:\n{}{}",
            p.output,
            diag(&both)
        );
    }

    // Status as seen by the stock tools (and braid's own view) on each side.
    for (side, ns, ifname, keys) in [(&side_a, &nsa, &ifa, &ka), (&side_b, &nsb, &ifb, &kb)] {
        let show = assert_wg_show_handshake_and_transfer(ns, ifname);
        assert_no_secret(
            &format!("wg show {ifname}"),
            &show,
            &keys.private,
            "private key",
        );
        if let Side::Braid(_) = side {
            let plain = ns.run(BRAID, &["show", ifname], SHORT);
            assert!(plain.ok(), "braid show {ifname}: {}", plain.describe());
            assert_no_secret(
                "braid show",
                &plain.combined(),
                &keys.private,
                "private key",
            );
            let json = ns.run(BRAID, &["show", ifname, "--json"], SHORT);
            assert!(json.ok(), "braid show {ifname} --json: {}", json.describe());
            let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap_or_else(|e| {
                panic!(
                    "braid show {ifname} --json is not JSON ({e}):\n{}",
                    json.stdout
                )
            });
            assert!(!v.is_null(), "braid show --json printed null");
            assert_no_secret(
                "braid show --json",
                &json.combined(),
                &keys.private,
                "private key",
            );
        }
    }

    // `braid down` removes what `braid up` created.
    for (side, ns, ifname) in [(&mut side_a, &nsa, &ifa), (&mut side_b, &nsb, &ifb)] {
        if let Side::Braid(b) = side {
            let out = b.down();
            assert!(out.ok(), "braid down {ifname}: {}", out.describe());
            let gone = wait_until(LONG, || {
                !ns.has_link(ifname)
                    && !sock_path(ifname).exists()
                    && ns.pids_of(Path::new(BRAID)).is_empty()
            });
            assert!(
                gone,
                "after `braid down {ifname}`: link present={}, socket present={}, braid pids={:?}",
                ns.has_link(ifname),
                sock_path(ifname).exists(),
                ns.pids_of(Path::new(BRAID))
            );
        }
    }
}

#[test]
fn wireguard_go_to_wireguard_go() {
    pair_test(
        "wireguard_go_to_wireguard_go",
        Impl::WireguardGo,
        Impl::WireguardGo,
        Family::V4,
    );
}

#[test]
fn wireguard_go_to_wireguard_go_ipv6() {
    pair_test(
        "wireguard_go_to_wireguard_go_ipv6",
        Impl::WireguardGo,
        Impl::WireguardGo,
        Family::V6,
    );
}

/// IPv6 underlay and IPv6 inside the tunnel (2001:db8::/32 only).
#[test]
fn braid_initiator_wireguard_go_responder_ipv6() {
    pair_test(
        "braid_initiator_wireguard_go_responder_ipv6",
        Impl::Braid,
        Impl::WireguardGo,
        Family::V6,
    );
}

#[test]
fn braid_to_braid() {
    pair_test("braid_to_braid", Impl::Braid, Impl::Braid, Family::V4);
}

#[test]
fn braid_initiator_wireguard_go_responder() {
    pair_test(
        "braid_initiator_wireguard_go_responder",
        Impl::Braid,
        Impl::WireguardGo,
        Family::V4,
    );
}

#[test]
fn wireguard_go_initiator_braid_responder() {
    pair_test(
        "wireguard_go_initiator_braid_responder",
        Impl::WireguardGo,
        Impl::Braid,
        Family::V4,
    );
}

// ---------------------------------------------------------------------------
// wg-quick with a userspace implementation
// ---------------------------------------------------------------------------

/// `wg-quick up FILE` with `WG_QUICK_USERSPACE_IMPLEMENTATION`; on drop
/// `wg-quick down FILE` and forced cleanup of the implementation's processes.
struct WgQuick<'a> {
    ns: &'a Netns,
    ifname: String,
    file: String,
    exe: std::path::PathBuf,
    downed: bool,
}

impl WgQuick<'_> {
    fn down(&mut self) -> Out {
        self.downed = true;
        self.ns
            .run("wg-quick", &["down", &self.file], Duration::from_secs(30))
    }
}

impl Drop for WgQuick<'_> {
    fn drop(&mut self) {
        if !self.downed {
            let _ = self.down();
        }
        force_cleanup(self.ns, &self.ifname, &self.exe);
        keep_daemon_log(&self.ifname, Path::new(&self.file));
    }
}

fn wg_quick_test(test: &str, userspace: &Path) {
    let mut tools = TOOLS.to_vec();
    tools.push("wg-quick");
    if !preflight(test, &tools) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (ta, tb) = (format!("198.19.{x}.1"), format!("198.19.{x}.2"));

    // B: wireguard-go responder.
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let _wg_b = wg_go(&env, &nsb, &ifb, &conf_b);

    // A: wg-quick + userspace implementation, initiator. No DNS, no default route.
    let file = env.write(&format!("{ifa}.conf"), &conf_a.wg_quick());
    let file_s = file.to_string_lossy().into_owned();
    let mut quick = WgQuick {
        ns: &nsa,
        ifname: ifa.clone(),
        file: file_s.clone(),
        exe: std::fs::canonicalize(userspace).unwrap_or_else(|_| userspace.to_path_buf()),
        downed: false,
    };
    let mut c = nsa.cmd("wg-quick");
    c.args(["up", &file_s])
        .env("WG_QUICK_USERSPACE_IMPLEMENTATION", userspace);
    let up = run_bounded(c, Duration::from_secs(30));
    let both = [(&nsa, ifa.as_str()), (&nsb, ifb.as_str())];
    assert!(
        up.ok(),
        "{test}: wg-quick up: {}{}",
        up.describe(),
        diag(&both)
    );
    assert!(
        !nsa.pids_of(&quick.exe).is_empty(),
        "{test}: no {} process in {} after wg-quick up",
        quick.exe.display(),
        nsa.name
    );

    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "{test}: no reply from {tb} through the tunnel within {LONG:?}{}",
        diag(&both)
    );
    let p = ping(&nsa, &tb, 5);
    assert!(
        p.loss_percent == 0.0,
        "{test}: A->B ping lost packets:\n{}",
        p.output
    );
    let p = ping(&nsb, &ta, 5);
    assert!(
        p.loss_percent == 0.0,
        "{test}: B->A ping lost packets:\n{}",
        p.output
    );
    assert_wg_show_handshake_and_transfer(&nsa, &ifa);

    let down = quick.down();
    assert!(down.ok(), "{test}: wg-quick down: {}", down.describe());
    let gone = wait_until(LONG, || {
        !nsa.has_link(&ifa) && !sock_path(&ifa).exists() && nsa.pids_of(&quick.exe).is_empty()
    });
    assert!(
        gone,
        "{test}: after wg-quick down: link present={}, socket present={}, {} pids={:?}",
        nsa.has_link(&ifa),
        sock_path(&ifa).exists(),
        quick.exe.display(),
        nsa.pids_of(&quick.exe)
    );
}

#[test]
fn wg_quick_with_wireguard_go_userspace() {
    // Harness sanity check for `wg_quick_with_braid_userspace`.
    let wg_go = which("wireguard-go").unwrap_or_else(|| "/usr/bin/wireguard-go".into());
    wg_quick_test("wg_quick_with_wireguard_go_userspace", &wg_go);
}

#[test]
fn wg_quick_with_braid_userspace() {
    wg_quick_test("wg_quick_with_braid_userspace", Path::new(BRAID));
}

// ---------------------------------------------------------------------------
// Configuration errors
// ---------------------------------------------------------------------------

/// Does `text` refer to line `n` (`file:N`, `line N`, …)?
fn mentions_line(text: &str, n: usize) -> bool {
    let t = text.to_ascii_lowercase();
    [
        format!(":{n}"),
        format!("line {n}"),
        format!("line: {n}"),
        format!("line={n}"),
        format!("line#{n}"),
    ]
    .iter()
    .any(|pat| {
        t.match_indices(pat.as_str())
            .any(|(i, _)| !t[i + pat.len()..].starts_with(|c: char| c.is_ascii_digit()))
    })
}

#[test]
fn config_error_names_file_line_key() {
    let test = "config_error_names_file_line_key";
    if !preflight(test, &["ip", "wg"]) {
        return;
    }
    let env = TestEnv::new(test);
    let x = env.octet();
    let ns = env.netns("c");
    let k = wg_keys();
    let peer = wg_keys();
    let truncated = &k.private[..k.private.len() - 4];

    // (key, 1-based line, replacement line)
    let cases: Vec<(&str, usize, String)> = vec![
        ("ListenPort", 4, "ListenPort = notaport".to_string()),
        ("PublicKey", 7, "PublicKey = not-a-key".to_string()),
        ("AllowedIPs", 8, format!("AllowedIPs = 198.19.{x}.2/33")),
        ("PrivateKey", 2, format!("PrivateKey = {truncated}")),
    ];
    for (i, (key, line, bad)) in cases.iter().enumerate() {
        let mut lines = vec![
            "[Interface]".to_string(),
            format!("PrivateKey = {}", k.private),
            format!("Address = 198.19.{x}.1/24"),
            "ListenPort = 51820".to_string(),
            String::new(),
            "[Peer]".to_string(),
            format!("PublicKey = {}", peer.public),
            format!("AllowedIPs = 198.19.{x}.2/32"),
            format!("Endpoint = 198.18.{x}.2:51821"),
        ];
        assert!(lines[line - 1].starts_with(key), "test table out of sync");
        lines[line - 1] = bad.clone();
        let ifname = env.ifname(&format!("c{i}"));
        let fname = format!("{ifname}.conf");
        let path = env.write(&fname, &(lines.join("\n") + "\n"));

        let out = ns.run(
            BRAID,
            &["up", &path.to_string_lossy()],
            Duration::from_secs(30),
        );
        // Clean up whatever a buggy `braid up` might have created, before asserting.
        let leftover_links: Vec<String> = ns.links().into_iter().filter(|l| l != "lo").collect();
        let sock_existed = sock_path(&ifname).exists();
        let leftover_pids = ns.pids();
        if !leftover_links.is_empty() || sock_existed || !leftover_pids.is_empty() {
            let _ = ns.run(BRAID, &["down", &ifname], SHORT);
            force_cleanup(&ns, &ifname, Path::new(BRAID));
        }

        let ctx = format!("broken {key} on line {line} of {fname}");
        assert!(!out.timed_out, "{ctx}: braid up hung: {}", out.describe());
        assert!(
            out.status.is_some() && !out.ok(),
            "{ctx}: braid up must exit non-zero: {}",
            out.describe()
        );
        assert_no_secret(
            &format!("braid up ({ctx})"),
            &out.combined(),
            &k.private,
            "private key",
        );
        if *key == "PrivateKey" {
            assert!(
                !out.combined().contains(truncated),
                "{ctx}: braid up echoed the malformed private key value"
            );
        }
        let err = &out.stderr;
        assert!(
            err.contains(&fname),
            "{ctx}: stderr does not name the file:\n{err}"
        );
        assert!(
            mentions_line(err, *line),
            "{ctx}: stderr does not name line {line}:\n{err}"
        );
        assert!(
            err.to_ascii_lowercase().contains(&key.to_ascii_lowercase()),
            "{ctx}: stderr does not name the key {key}:\n{err}"
        );
        assert!(
            leftover_links.is_empty(),
            "{ctx}: braid up left interfaces behind: {leftover_links:?}"
        );
        assert!(
            !sock_existed,
            "{ctx}: braid up left {} behind",
            sock_path(&ifname).display()
        );
        assert!(
            leftover_pids.is_empty(),
            "{ctx}: braid up left processes behind: {leftover_pids:?}"
        );
        eprintln!("[{test}] {ctx}: ok: {}", err.trim());
    }
}

// ---------------------------------------------------------------------------
// Secrets never printed
// ---------------------------------------------------------------------------

#[test]
fn private_key_never_printed() {
    let test = "private_key_never_printed";
    if !preflight(test, &["ip", "wg", "ping"]) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let psk = genkey(); // any 32 random bytes in base64
    let tb = format!("198.19.{x}.2");
    let (mut conf_a, mut conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.peers[0].preshared_key = Some(psk.clone());
    conf_b.peers[0].preshared_key = Some(psk.clone());

    // B in the foreground (its whole log captured), A daemonized via `braid up`.
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Foreground);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    a.assert_up();

    let mut outputs: Vec<(String, String)> = Vec::new();
    outputs.push((
        "braid up (daemon)".into(),
        a.up.as_ref().map(|o| o.combined()).unwrap_or_default(),
    ));

    let reply = ping_until_reply(&nsa, &tb, LONG);
    // Status commands in both namespaces, after traffic.
    for (ns, ifname) in [(&nsa, &ifa), (&nsb, &ifb)] {
        for args in [
            vec!["show"],
            vec!["show", ifname.as_str()],
            vec!["show", "--json"],
            vec!["show", ifname.as_str(), "--json"],
        ] {
            let o = ns.run(BRAID, &args, SHORT);
            outputs.push((format!("braid {}", args.join(" ")), o.combined()));
        }
        for args in [
            vec!["show"],
            vec!["show", ifname.as_str()],
            vec!["show", "all"],
        ] {
            let o = ns.run("wg", &args, SHORT);
            assert!(o.ok(), "wg {}: {}", args.join(" "), o.describe());
            outputs.push((format!("wg {}", args.join(" ")), o.combined()));
        }
    }
    let down_a = a.down();
    let down_b = b.down();
    outputs.push(("braid down (a)".into(), down_a.combined()));
    outputs.push(("braid down (b)".into(), down_b.combined()));
    outputs.push((
        "daemon log (a, inherited stdout/stderr)".into(),
        a.log_text(),
    ));
    outputs.push(("foreground log (b)".into(), b.log_text()));

    for (what, text) in &outputs {
        assert_no_secret(what, text, &ka.private, "private key of A");
        assert_no_secret(what, text, &kb.private, "private key of B");
        assert_no_secret(what, text, &psk, "preshared key");
    }
    // Only meaningful if the daemons actually did something worth logging.
    assert!(
        reply,
        "{test}: tunnel never passed traffic, so the log check proves little"
    );
    assert!(down_a.ok(), "braid down {ifa}: {}", down_a.describe());
    assert!(down_b.ok(), "braid down {ifb}: {}", down_b.describe());
}

// ---------------------------------------------------------------------------
// Key tools
// ---------------------------------------------------------------------------

#[test]
fn braid_genkey_pubkey_match_wg() {
    let test = "braid_genkey_pubkey_match_wg";
    if !preflight(test, &["wg"]) {
        return;
    }
    let g = braid_genkey();
    assert!(g.ok(), "braid genkey: {}", g.describe());
    let private = g.stdout.trim().to_string();
    assert_eq!(
        private.len(),
        44,
        "braid genkey: not a base64 32-byte key: {private:?}"
    );
    assert_eq!(
        b64_to_hex(&private).map(|h| h.len()),
        Some(64),
        "braid genkey: not base64"
    );
    let theirs = pubkey(&private);
    let ours = braid_pubkey(&private);
    assert!(ours.ok(), "braid pubkey: {}", ours.describe());
    assert_eq!(
        ours.stdout.trim(),
        theirs,
        "braid pubkey disagrees with wg pubkey"
    );
    // And the other way round: braid pubkey of a wg-generated key.
    let k = wg_keys();
    let ours = braid_pubkey(&k.private);
    assert!(ours.ok(), "braid pubkey: {}", ours.describe());
    assert_eq!(
        ours.stdout.trim(),
        k.public,
        "braid pubkey disagrees with wg pubkey"
    );
}
