//! What a WireGuard user does with `wg` and `wg-quick` (issue 20, item 8),
//! with braid as wg-quick's userspace implementation
//! (`WG_QUICK_USERSPACE_IMPLEMENTATION=braid`) and, as the reference, with
//! wireguard-go: `wg-quick up` of a file with addresses of both families,
//! `MTU`, `DNS` (servers and a search domain, through the real resolvconf,
//! openresolv), `Table`, hooks and `SaveConfig = true`; `wg set` at run
//! time, `wg-quick save`, `wg-quick down` (which saves), and `wg-quick up`
//! of the saved file; `wg syncconf` of `wg-quick strip` after the file
//! changed (a peer added, allowed IPs changed, a peer removed).
//!
//! resolvconf writes /etc/resolv.conf: wg-quick runs in a mount namespace
//! of its own where /etc/resolvconf.conf points resolvconf at files in
//! the test's directory, so the host's DNS settings are never touched.
//!
//! ```text
//!   netns a: wg-quick up <P>a.conf (braid | wireguard-go)  ─veth─  netns b: <P>b (same implementation)
//! ```

use crate::harness::*;
use braid::toolkit::lab::wireguard_go;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "wg", "wg-quick", "resolvconf", "unshare"];

/// Runs in the private mount namespace: points resolvconf at the test's
/// files, `wg-quick up`, then does `save` and `down` when the test asks
/// (files `go-save`, `go-down`; after 5 minutes it goes down anyway),
/// writing each command's exit status next to its log.
const SCRIPT: &str = r#"set -u
dir=$1 conf=$2
printf 'resolv_conf=%s\nstate_dir=%s\n' "$dir/resolv.conf" "$dir/resolvconf-state" > "$dir/resolvconf.conf"
: > "$dir/resolv.conf"
mount --bind "$dir/resolvconf.conf" /etc/resolvconf.conf || exit 90
mount --bind "$dir/resolv.conf" /etc/resolv.conf || exit 91
step() {
    wg-quick "$1" "$conf" > "$dir/$1.log" 2>&1
    echo $? > "$dir/$1.status"
}
step up
for _ in $(seq 1 3000); do
    [ -e "$dir/go-save" ] && [ ! -e "$dir/save.status" ] && step save
    [ -e "$dir/go-down" ] && break
    sleep 0.1
done
step down
"#;

/// One `wg-quick up` … `down` in the private mount namespace.
struct Session<'a> {
    ns: &'a Netns,
    ifname: String,
    dir: PathBuf,
    exe: PathBuf,
    script: ChildGuard,
}

impl<'a> Session<'a> {
    /// `wg-quick up CONF` with `exe` as the implementation; waits for it.
    fn up(env: &TestEnv, ns: &'a Netns, conf: &Path, exe: &Path, round: u32) -> Session<'a> {
        let dir = env.path(&format!("round{round}"));
        fs::create_dir_all(&dir).expect("round directory");
        let script = env.write("wg-quick-session.sh", SCRIPT);
        let mut c = ns.cmd("unshare");
        c.args(["--mount", "--propagation", "private", "bash"])
            .arg(&script)
            .arg(&dir)
            .arg(conf)
            .env("WG_QUICK_USERSPACE_IMPLEMENTATION", exe);
        let log = dir.join("session.log");
        let mut script = ChildGuard::spawn(c, "wg-quick session", &log).or_panic();
        let ifname = conf
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let status = dir.join("up.status");
        assert!(
            wait_until(Duration::from_secs(60), || status.exists()
                || !script.running()),
            "wg-quick up did not finish"
        );
        let s = Session {
            ns,
            ifname,
            dir,
            exe: exe.to_path_buf(),
            script,
        };
        assert_eq!(
            s.status("up"),
            Some(0),
            "wg-quick up: {}\n{}",
            s.log("up"),
            s.log("session")
        );
        s
    }

    fn status(&self, step: &str) -> Option<i32> {
        fs::read_to_string(self.dir.join(format!("{step}.status")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn log(&self, step: &str) -> String {
        fs::read_to_string(self.dir.join(format!("{step}.log"))).unwrap_or_default()
    }

    /// /etc/resolv.conf as resolvconf wrote it in the session.
    fn resolv_conf(&self) -> String {
        fs::read_to_string(self.dir.join("resolv.conf")).unwrap_or_default()
    }

    /// Asks the session for `step` and waits for its status.
    fn run(&mut self, step: &str) -> i32 {
        fs::write(self.dir.join(format!("go-{step}")), b"").expect("signal file");
        let status = self.dir.join(format!("{step}.status"));
        let script = &mut self.script;
        assert!(
            wait_until(Duration::from_secs(60), || status.exists()
                || !script.running()),
            "wg-quick {step} did not finish"
        );
        self.status(step).unwrap_or(-1)
    }

    /// `wg-quick save` while up.
    fn save(&mut self) {
        let status = self.run("save");
        assert_eq!(status, 0, "wg-quick save: {}", self.log("save"));
    }

    /// `wg-quick down`; checks that the interface, its socket and the
    /// implementation's process are gone.
    fn down(mut self) {
        let status = self.run("down");
        assert_eq!(status, 0, "wg-quick down: {}", self.log("down"));
        assert!(self.script.wait_exit(Duration::from_secs(10)).is_some());
        let ns = self.ns;
        let (ifname, exe) = (self.ifname.clone(), self.exe.clone());
        assert!(
            wait_until(LONG, || !ns.has_link(&ifname)
                && !sock_path(&ifname).exists()
                && ns.pids_of(&exe).is_empty()),
            "after wg-quick down: link {}, socket {}, processes {:?}",
            ns.has_link(&ifname),
            sock_path(&ifname).exists(),
            ns.pids_of(&exe)
        );
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if self.script.running() {
            // The script's wait ends: it runs `wg-quick down` itself.
            let _ = fs::write(self.dir.join("go-down"), b"");
            self.script.wait_exit(Duration::from_secs(30));
        }
        force_cleanup(self.ns, &self.ifname, &self.exe);
    }
}

/// The peers of a config text, each as (public key, sorted allowed IPs,
/// endpoint, keepalive): what `wg syncconf` must make the interface hold.
fn peers_of(text: &str) -> BTreeSet<(String, Vec<String>, String, String)> {
    let mut peers = BTreeSet::new();
    let mut cur: Option<(String, Vec<String>, String, String)> = None;
    for line in text.lines().map(str::trim) {
        if line.eq_ignore_ascii_case("[peer]") || line.eq_ignore_ascii_case("[interface]") {
            if let Some(mut p) = cur.take() {
                p.1.sort();
                peers.insert(p);
            }
            if line.eq_ignore_ascii_case("[peer]") {
                cur = Some(Default::default());
            }
            continue;
        }
        let (Some(p), Some((k, v))) = (cur.as_mut(), line.split_once('=')) else {
            continue;
        };
        let v = v.trim().to_string();
        match k.trim().to_ascii_lowercase().as_str() {
            "publickey" => p.0 = v,
            "allowedips" => p.1.extend(v.split(',').map(|s| s.trim().to_string())),
            "endpoint" => p.2 = v,
            "persistentkeepalive" => p.3 = v,
            _ => {}
        }
    }
    if let Some(mut p) = cur.take() {
        p.1.sort();
        peers.insert(p);
    }
    peers
}

#[derive(Clone, Debug)]
enum Impl {
    Braid,
    WireguardGo(PathBuf),
}

impl Impl {
    fn exe(&self) -> PathBuf {
        match self {
            Impl::Braid => PathBuf::from(BRAID),
            Impl::WireguardGo(exe) => exe.clone(),
        }
    }
}

/// The responder in b, held for its Drop.
#[allow(dead_code)]
enum End<'a> {
    Braid(BraidUp<'a>),
    WgGo(WgGo),
}

fn responder<'a>(
    env: &TestEnv,
    ns: &'a Netns,
    ifname: &str,
    conf: &IfaceConf,
    imp: &Impl,
) -> End<'a> {
    match imp {
        Impl::Braid => {
            let mut b = BraidUp::start(env, ns, ifname, conf, BraidMode::Daemon);
            b.assert_up();
            End::Braid(b)
        }
        Impl::WireguardGo(exe) => {
            End::WgGo(WgGo::start_exe(exe, ns, ifname, conf, &env.dir).or_panic())
        }
    }
}

fn implementation(test: &str, go: bool) -> Option<Impl> {
    if !preflight(test, TOOLS) {
        return None;
    }
    if !go {
        return Some(Impl::Braid);
    }
    let (exe, version) = wireguard_go::reference();
    if which(&exe.to_string_lossy()).is_none() && !exe.is_file() {
        assert!(!in_ci(), "{test}: no wireguard-go");
        eprintln!("SKIPPED {test}: no wireguard-go");
        return None;
    }
    eprintln!("[{test}] wireguard-go: {} ({version})", exe.display());
    Some(Impl::WireguardGo(fs::canonicalize(&exe).unwrap_or(exe)))
}

/// `wg-quick up` with everything a wg-quick file holds, `wg set` at run
/// time, `wg-quick save`, `down` (saving again), `up` of the saved file.
fn full_file(test: &str, go: bool) {
    let Some(imp) = implementation(test, go) else {
        return;
    };
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let kc = wg_keys();
    let v6 = |host: &str| format!("2001:db8:1:{x:x}::{host}");
    let (_, mut conf_b) = tunnel_confs(&ka, &kb, x);
    conf_b.address.push(format!("{}/64", v6("2")));
    conf_b.peers[0].allowed_ips.push(format!("{}/128", v6("1")));
    let _b = responder(&env, &nsb, &ifb, &conf_b, &imp);
    let marks = env.path("hooks");
    let conf_a = format!(
        "[Interface]\n\
         PrivateKey = {private}\n\
         ListenPort = 51820\n\
         Address = 198.19.{x}.1/24, {a6}/64\n\
         MTU = 1380\n\
         DNS = 198.19.{x}.53, {dns6}, braid.test\n\
         Table = auto\n\
         SaveConfig = true\n\
         PreUp = echo pre-up %i >> {marks}\n\
         PostUp = echo post-up %i >> {marks}\n\
         PreDown = echo pre-down %i >> {marks}\n\
         PostDown = echo post-down %i >> {marks}\n\
         \n\
         [Peer]\n\
         PublicKey = {pub_b}\n\
         AllowedIPs = 198.19.{x}.2/32, {b6}/128\n\
         Endpoint = 198.18.{x}.2:51821\n\
         PersistentKeepalive = 25\n",
        private = ka.private,
        a6 = v6("1"),
        dns6 = v6("53"),
        b6 = v6("2"),
        marks = marks.display(),
        pub_b = kb.public,
    );
    let conf = env.write(&format!("{ifa}.conf"), &conf_a);
    let mut s = Session::up(&env, &nsa, &conf, &imp.exe(), 1);
    for dst in [format!("198.19.{x}.2"), v6("2")] {
        assert!(ping_until_reply(&nsa, &dst, LONG), "no ping to {dst}");
    }
    let link = nsa.ip(&["link", "show", "dev", &ifa]).stdout;
    assert!(link.contains("mtu 1380"), "{link}");
    let resolv = s.resolv_conf();
    eprintln!("[{test}] /etc/resolv.conf in wg-quick's mount namespace:\n{resolv}");
    for want in [
        format!("nameserver 198.19.{x}.53"),
        format!("nameserver {}", v6("53")),
        "search braid.test".into(),
    ] {
        assert!(resolv.contains(&want), "no `{want}`:\n{resolv}");
    }
    let hooks = fs::read_to_string(&marks).unwrap_or_default();
    assert_eq!(hooks, format!("pre-up {ifa}\npost-up {ifa}\n"));

    // At run time: a peer added, a keepalive changed; `wg-quick save`.
    nsa.run(
        "wg",
        &[
            "set",
            &ifa,
            "peer",
            &kc.public,
            "allowed-ips",
            &format!("198.19.{x}.3/32"),
            "endpoint",
            &format!("198.18.{x}.3:51822"),
        ],
        SHORT,
    )
    .expect_ok("wg set: a peer added");
    nsa.run(
        "wg",
        &["set", &ifa, "peer", &kb.public, "persistent-keepalive", "7"],
        SHORT,
    )
    .expect_ok("wg set: keepalive");
    s.save();
    let saved = fs::read_to_string(&conf).unwrap_or_default();
    let lines: BTreeSet<&str> = saved.lines().map(str::trim).collect();
    for want in [
        format!("Address = 198.19.{x}.1/24"),
        format!("Address = {}/64", v6("1")),
        format!("DNS = 198.19.{x}.53"),
        format!("DNS = {}", v6("53")),
        "MTU = 1380".into(),
        "Table = auto".into(),
        "SaveConfig = true".into(),
        "ListenPort = 51820".into(),
        format!("PostUp = echo post-up %i >> {}", marks.display()),
        format!("PublicKey = {}", kc.public),
        format!("AllowedIPs = 198.19.{x}.3/32"),
        format!("Endpoint = 198.18.{x}.3:51822"),
        "PersistentKeepalive = 7".into(),
    ] {
        assert!(
            lines.contains(want.as_str()),
            "the saved file lacks `{want}`"
        );
    }
    let peers = peers_of(&saved);
    assert_eq!(peers.len(), 2, "two peers saved");
    eprintln!(
        "[{test}] saved {} lines: [Interface] keys {:?}",
        lines.len(),
        saved
            .lines()
            .filter_map(|l| l.split_once(" = ").map(|(k, _)| k.trim()))
            .filter(|k| *k != "PrivateKey")
            .collect::<Vec<_>>()
    );
    s.down();
    let resolv = fs::read_to_string(env.path("round1/resolv.conf")).unwrap_or_default();
    assert!(
        !resolv.contains("nameserver"),
        "resolvconf kept the servers after down:\n{resolv}"
    );
    let hooks = fs::read_to_string(&marks).unwrap_or_default();
    assert!(
        hooks.ends_with(&format!("pre-down {ifa}\npost-down {ifa}\n")),
        "{hooks}"
    );

    // The saved file comes up as it was left.
    let s = Session::up(&env, &nsa, &conf, &imp.exe(), 2);
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    let show = nsa.run("wg", &["show", &ifa, "peers"], SHORT).stdout;
    assert!(show.contains(&kc.public), "{show}");
    let keepalive = nsa
        .run("wg", &["show", &ifa, "persistent-keepalive"], SHORT)
        .stdout;
    assert!(
        keepalive.contains(&format!("{}\t7", kb.public)),
        "{keepalive}"
    );
    s.down();
}

/// `wg syncconf IFNAME <(wg-quick strip IFNAME)` after the file changed:
/// the interface then holds exactly the file's peers, and the session
/// with the peer that stayed goes on.
fn strip_and_syncconf(test: &str, go: bool) {
    let Some(imp) = implementation(test, go) else {
        return;
    };
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (kc, kd) = (wg_keys(), wg_keys());
    let (conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    let _b = responder(&env, &nsb, &ifb, &conf_b, &imp);
    let conf = env.write(&format!("{ifa}.conf"), &conf_a.wg_quick());
    let s = Session::up(&env, &nsa, &conf, &imp.exe(), 1);
    let tb = format!("198.19.{x}.2");
    assert!(ping_until_reply(&nsa, &tb, LONG));
    let handshake = |nsa: &Netns| {
        nsa.run("wg", &["show", &ifa, "latest-handshakes"], SHORT)
            .stdout
            .lines()
            .find(|l| l.starts_with(&kb.public))
            .map(str::to_string)
            .unwrap_or_default()
    };
    let before = handshake(&nsa);
    let sync = |text: &str| {
        fs::write(&conf, text).expect("config file");
        let cmd = format!("wg syncconf {ifa} <(wg-quick strip {})", conf.display());
        nsa.run("bash", &["-c", &cmd], SHORT)
            .expect_ok("wg syncconf <(wg-quick strip)");
        let shown = nsa
            .run("wg", &["showconf", &ifa], SHORT)
            .expect_ok("wg showconf");
        let want = peers_of(text);
        let got = peers_of(&shown.stdout);
        assert_eq!(
            got.iter().map(|p| (&p.0, &p.1)).collect::<Vec<_>>(),
            want.iter().map(|p| (&p.0, &p.1)).collect::<Vec<_>>(),
            "wg showconf after syncconf"
        );
        got.len()
    };
    // A peer added, B given an IPv6 prefix as well.
    let mut changed = conf_a.clone();
    changed.peers[0]
        .allowed_ips
        .push(format!("2001:db8:1:{x:x}::2/128"));
    for (k, host) in [(&kc, 3), (&kd, 4)] {
        changed.peers.push(PeerConf {
            public_key: k.public.clone(),
            allowed_ips: vec![format!("198.19.{x}.{host}/32")],
            endpoint: Some(format!("198.18.{x}.{host}:51821")),
            ..Default::default()
        });
    }
    assert_eq!(sync(&changed.wg_quick()), 3);
    // One of them removed, the other's prefixes changed.
    changed.peers.remove(1);
    changed.peers[1].allowed_ips = vec![format!("198.19.{x}.40/30")];
    assert_eq!(sync(&changed.wg_quick()), 2);
    let p = ping(&nsa, &tb, 3);
    assert_eq!(p.received, 3, "{}", p.output);
    assert_eq!(
        handshake(&nsa),
        before,
        "syncconf started a new handshake with the peer that stayed"
    );
    eprintln!("[{test}] syncconf: 3 peers, then 2; the session with b went on");
    s.down();
}

#[test]
fn wg_quick_file_with_dns_hooks_and_save_config_braid() {
    full_file("wg_quick_file_with_dns_hooks_and_save_config_braid", false);
}

#[test]
fn wg_quick_file_with_dns_hooks_and_save_config_wireguard_go_reference() {
    full_file(
        "wg_quick_file_with_dns_hooks_and_save_config_wireguard_go_reference",
        true,
    );
}

#[test]
fn wg_quick_strip_and_wg_syncconf_braid() {
    strip_and_syncconf("wg_quick_strip_and_wg_syncconf_braid", false);
}

#[test]
fn wg_quick_strip_and_wg_syncconf_wireguard_go_reference() {
    strip_and_syncconf(
        "wg_quick_strip_and_wg_syncconf_wireguard_go_reference",
        true,
    );
}

/// `IMPL NAME` in the foreground in `ns` (`wireguard-go -f NAME`, `braid
/// -f NAME`: how wg-quick starts either, without its daemonizing), up and
/// answering `wg show`.
fn userspace(env: &TestEnv, ns: &Netns, ifname: &str, imp: &Impl) -> ChildGuard {
    let mut c = ns.cmd(imp.exe());
    c.args(["-f", ifname]);
    let log = env.path(&format!("{ifname}.{}.log", next_number()));
    let mut child = ChildGuard::spawn(c, ifname, &log).or_panic();
    assert!(
        wait_until(LONG, || !child.running()
            || (sock_path(ifname).exists()
                && ns.run("wg", &["show", ifname], SHORT).ok())),
        "{ifname} did not come up:\n{}",
        child.log_text()
    );
    child
}

/// `wg show NAME dump` with what depends on time and traffic blanked
/// (latest handshake, bytes), peers sorted.
fn dump_without_traffic(ns: &Netns, ifname: &str) -> Vec<String> {
    let out = ns
        .run("wg", &["show", ifname, "dump"], SHORT)
        .expect_ok("wg show dump");
    let mut lines: Vec<String> = out
        .stdout
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let mut f: Vec<&str> = l.split('\t').collect();
            if i > 0 && f.len() == 8 {
                f[4] = "-";
                f[5] = "-";
                f[6] = "-";
            }
            f.join("\t")
        })
        .collect();
    lines[1..].sort();
    lines
}

/// `wg showconf NAME`, peers sorted.
fn showconf_sorted(ns: &Netns, ifname: &str) -> String {
    let out = ns
        .run("wg", &["showconf", ifname], SHORT)
        .expect_ok("wg showconf");
    let mut sections: Vec<String> = out
        .stdout
        .split("\n[")
        .map(|s| s.trim().to_string())
        .collect();
    sections[1..].sort();
    sections.join("\n[")
}

/// The steps of [`wg_set_and_show_agree_with_wireguard_go`], on one
/// implementation: what `wg showconf` and `wg show dump` say after each.
fn wg_steps(
    test: &str,
    imp: &Impl,
    keys: &[Keys; 4],
    psk: &Path,
) -> Vec<(String, String, Vec<String>)> {
    let env = TestEnv::new(test);
    // Configuration only: no traffic, so the same endpoints serve both
    // implementations' runs.
    let nsa = env.netns("a");
    let ifa = env.ifname("a");
    let [ka, kb, kc, ka2] = keys;
    let (conf_a, _) = tunnel_confs(ka, kb, 77);
    let _a = userspace(&env, &nsa, &ifa, imp);
    let file = env.write("a.setconf", &conf_a.wg_setconf());
    let psk = psk.to_string_lossy().into_owned();
    let key2 = env.write("a2.key", &format!("{}\n", ka2.private));
    let key2 = key2.to_string_lossy().into_owned();
    let steps: Vec<(&str, Vec<String>)> = vec![
        (
            "setconf",
            vec!["setconf".into(), ifa.clone(), file.to_string_lossy().into()],
        ),
        (
            "fwmark",
            vec!["set".into(), ifa.clone(), "fwmark".into(), "0x1234".into()],
        ),
        (
            "listen-port",
            vec![
                "set".into(),
                ifa.clone(),
                "listen-port".into(),
                "51830".into(),
            ],
        ),
        (
            "peer added",
            [
                "set",
                &ifa,
                "peer",
                &kc.public,
                "allowed-ips",
                "198.19.77.3/32,198.19.77.64/26",
                "endpoint",
                "198.18.77.3:51822",
                "persistent-keepalive",
                "15",
                "preshared-key",
                &psk,
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "allowed-ips replaced",
            [
                "set",
                &ifa,
                "peer",
                &kc.public,
                "allowed-ips",
                "198.19.77.3/32",
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "allowed-ips cleared",
            ["set", &ifa, "peer", &kc.public, "allowed-ips", ""]
                .map(String::from)
                .to_vec(),
        ),
        (
            "keepalive off",
            [
                "set",
                &ifa,
                "peer",
                &kc.public,
                "persistent-keepalive",
                "off",
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "peer removed",
            ["set", &ifa, "peer", &kc.public, "remove"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "fwmark off",
            ["set", &ifa, "fwmark", "off"].map(String::from).to_vec(),
        ),
        (
            "private key",
            ["set", &ifa, "private-key", &key2]
                .map(String::from)
                .to_vec(),
        ),
    ];
    let mut seen = Vec::new();
    for (name, args) in steps {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        nsa.run("wg", &args, SHORT).expect_ok(&format!("wg {name}"));
        seen.push((
            name.to_string(),
            showconf_sorted(&nsa, &ifa),
            dump_without_traffic(&nsa, &ifa),
        ));
    }
    seen
}

/// The same `wg setconf` and `wg set` steps on braid and on wireguard-go,
/// with the same keys: `wg showconf` and `wg show dump` (less the traffic
/// figures) must say the same after every step.
#[test]
fn wg_set_and_show_agree_with_wireguard_go() {
    let test = "wg_set_and_show_agree_with_wireguard_go";
    let Some(go) = implementation(test, true) else {
        return;
    };
    let keys = [wg_keys(), wg_keys(), wg_keys(), wg_keys()];
    let dir = std::env::temp_dir().join(format!("braid-e2e-psk-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("psk dir");
    let psk = dir.join("psk");
    write_private(&psk, &format!("{}\n", genkey())).or_panic();
    let braid = wg_steps(&format!("{test}_braid"), &Impl::Braid, &keys, &psk);
    let reference = wg_steps(&format!("{test}_wireguard_go"), &go, &keys, &psk);
    let _ = fs::remove_dir_all(&dir);
    for ((step, conf, dump), (_, conf_go, dump_go)) in braid.iter().zip(&reference) {
        // Keys never go to the test's output: compared, not printed.
        assert!(
            conf == conf_go,
            "after `{step}` wg showconf differs from wireguard-go's"
        );
        assert!(
            dump == dump_go,
            "after `{step}` wg show dump differs from wireguard-go's"
        );
        eprintln!(
            "[{test}] after {step}: showconf and dump agree ({} peer lines)",
            dump.len() - 1
        );
    }
    assert_eq!(braid.len(), reference.len());
}

/// `AllowedIPs = 0.0.0.0/0, ::/0` through wg-quick: it marks the
/// implementation's socket (`wg set fwmark`) and routes everything else
/// into the tunnel with policy rules; only the tunnel leads to an address
/// behind b, and `down` takes the rules away.
fn default_route(test: &str, go: bool) {
    let Some(imp) = implementation(test, go) else {
        return;
    };
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    nsb.ip(&["addr", "add", "198.18.250.1/32", "dev", "lo"])
        .expect_ok("address behind b");
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.peers[0].allowed_ips = vec!["0.0.0.0/0".into(), "::/0".into()];
    let _b = responder(&env, &nsb, &ifb, &conf_b, &imp);
    let conf = env.write(&format!("{ifa}.conf"), &conf_a.wg_quick());
    let s = Session::up(&env, &nsa, &conf, &imp.exe(), 1);
    let fwmark = nsa.run("wg", &["show", &ifa, "fwmark"], SHORT).stdout;
    assert_eq!(fwmark.trim(), "0xca6c", "wg-quick's mark");
    assert!(
        ping_until_reply(&nsa, "198.18.250.1", LONG),
        "nothing behind b through the default route"
    );
    let p = ping(&nsa, &format!("198.18.{x}.2"), 2);
    assert_eq!(p.received, 2, "the underlay: {}", p.output);
    let rules = nsa.ip(&["-4", "rule"]).stdout;
    assert!(
        rules.contains("not from all fwmark 0xca6c lookup 51820"),
        "{rules}"
    );
    s.down();
    let rules = nsa.ip(&["-4", "rule"]).stdout;
    assert!(!rules.contains("51820"), "rules left after down:\n{rules}");
}

#[test]
fn wg_quick_default_route_braid() {
    default_route("wg_quick_default_route_braid", false);
}

#[test]
fn wg_quick_default_route_wireguard_go_reference() {
    default_route("wg_quick_default_route_wireguard_go_reference", true);
}
