//! Two lines between two namespaces for tests of how braid uses them
//! (`doctor_paths`, `aggregate`):
//!
//! ```text
//!   netns a                                     netns b
//!   va1 198.18.X.1/25   ──── line 1 (clean) ─── vb1 198.18.X.2/25   [relay :5001]
//!   va2 198.18.X.129/25 ──── line 2 (bad) ───── vb2 198.18.X.130/25 [relay :5002]
//!                          braid netem relays → 127.0.0.1:51821, braid
//! ```

use crate::harness::*;

pub const PORT_B: u16 = 51821;
/// Where each line's relay listens (on that line's address in b).
const RELAY_PORTS: [u16; 2] = [5001, 5002];

/// A `braid netem` relay in `ns` from `listen` to b's braid, started and
/// relaying.
fn relay(env: &TestEnv, ns: &Netns, listen: &str, seed: u64, impairment: &[&str]) -> ChildGuard {
    let mut relay = ns.cmd(BRAID);
    relay.args([
        "netem",
        "--listen",
        listen,
        "--to",
        &format!("127.0.0.1:{PORT_B}"),
        "--seed",
        &(6 + seed).to_string(),
    ]);
    relay.args(impairment);
    let log = env.path(&format!("netem-{seed}.log"));
    let mut relay = ChildGuard::spawn(relay, "braid netem", &log).or_panic();
    let relaying = wait_until(LONG, || {
        !relay.running() || relay.log_text().contains("relaying")
    });
    assert!(
        relaying && relay.running(),
        "{}: braid netem did not start:\n{}",
        env.test,
        relay.log_text()
    );
    relay
}

/// Two namespaces joined by two veth lines, each either direct or through
/// a `braid netem` relay in namespace b with its own impairments. Side a
/// has a path on each (`clean`, line 1, and `bad`, line 2); both ends get
/// the same extra `[Peer]` lines (`Mode`, `ReorderHold`).
pub struct TwoLines<'e> {
    pub env: &'e TestEnv,
    pub tb: String,
    pub ifa: String,
    pub ifb: String,
    pub nsa: &'e Netns,
    pub nsb: &'e Netns,
    // Dropped in this order: daemons, relays, then the lines.
    sides: Vec<BraidUp<'e>>,
    relays: Vec<ChildGuard>,
    _lines: [Veth; 2],
}

impl<'e> TwoLines<'e> {
    /// Line 1 direct, line 2 through a relay with `impairment`.
    pub fn start(
        env: &'e TestEnv,
        namespaces: [&'e Netns; 2],
        impairment: &[&str],
        peer_lines: &[&str],
    ) -> TwoLines<'e> {
        Self::start_impaired(env, namespaces, [None, Some(impairment)], peer_lines)
    }

    /// Each line through a relay with its impairments (`None`: direct).
    pub fn start_impaired(
        env: &'e TestEnv,
        namespaces: [&'e Netns; 2],
        impairments: [Option<&[&str]>; 2],
        peer_lines: &[&str],
    ) -> TwoLines<'e> {
        Self::start_configured(env, namespaces, impairments, peer_lines, &[])
    }

    /// Like [`TwoLines::start_impaired`], with `interface_lines` in both
    /// ends' `[Interface]`.
    pub fn start_configured(
        env: &'e TestEnv,
        [nsa, nsb]: [&'e Netns; 2],
        impairments: [Option<&[&str]>; 2],
        peer_lines: &[&str],
        interface_lines: &[&str],
    ) -> TwoLines<'e> {
        let test = &env.test;
        let x = env.octet();
        let line = |n: u8, a: u8| {
            Veth::new(
                nsa,
                &format!("va{n}"),
                &format!("198.18.{x}.{a}/25"),
                nsb,
                &format!("vb{n}"),
                &format!("198.18.{x}.{}/25", a + 1),
            )
            .or_panic()
        };
        let lines = [line(1, 1), line(2, 129)];
        let mut relays = Vec::new();
        let mut endpoints = [
            format!("198.18.{x}.2:{PORT_B}"),
            format!("198.18.{x}.130:{PORT_B}"),
        ];
        for (n, impairment) in impairments.iter().enumerate() {
            let Some(impairment) = impairment else {
                continue;
            };
            let listen = format!("198.18.{x}.{}:{}", [2, 130][n], RELAY_PORTS[n]);
            relays.push(relay(env, nsb, &listen, n as u64, impairment));
            endpoints[n] = listen;
        }
        let (ka, kb) = (wg_keys(), wg_keys());
        let (ifa, ifb) = (env.ifname("a"), env.ifname("b"));
        let (ta, tb) = (format!("198.19.{x}.1"), format!("198.19.{x}.2"));
        let peer_lines: Vec<String> = peer_lines.iter().map(|l| l.to_string()).collect();
        let interface_lines: Vec<String> = interface_lines.iter().map(|l| l.to_string()).collect();
        let conf_b = IfaceConf {
            private_key: kb.private.clone(),
            listen_port: Some(PORT_B),
            address: vec![format!("{tb}/24")],
            braid_lines: interface_lines.clone(),
            peers: vec![PeerConf {
                public_key: ka.public.clone(),
                allowed_ips: vec![format!("{ta}/32")],
                braid_lines: peer_lines.clone(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut braid_lines = vec![
            format!("Path = clean bind=va1 endpoint={}", endpoints[0]),
            format!("Path = bad bind=va2 endpoint={}", endpoints[1]),
        ];
        braid_lines.extend(peer_lines);
        let conf_a = IfaceConf {
            private_key: ka.private.clone(),
            address: vec![format!("{ta}/24")],
            braid_lines: interface_lines,
            peers: vec![PeerConf {
                public_key: kb.public.clone(),
                allowed_ips: vec![format!("{tb}/32")],
                braid_lines,
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut lab = TwoLines {
            env,
            tb,
            ifa: ifa.clone(),
            ifb: ifb.clone(),
            nsa,
            nsb,
            sides: Vec::new(),
            relays,
            _lines: lines,
        };
        for (ns, ifname, conf) in [(nsb, &ifb, &conf_b), (nsa, &ifa, &conf_a)] {
            let mut side = BraidUp::start(env, ns, ifname, conf, BraidMode::Daemon);
            side.assert_up();
            lab.sides.push(side);
        }
        assert!(
            ping_until_reply(lab.nsa, &lab.tb, LONG),
            "{test}: no reply from {} through the tunnel",
            lab.tb
        );
        lab
    }

    /// The paths of side a's peer, from `braid show --json`.
    pub fn paths(&self) -> Vec<serde_json::Value> {
        let (show, _) = braid_show_json(self.nsa, &self.ifa);
        show["peers"][0]["paths"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Starts the lab as [`TwoLines::start_configured`] does, again and
    /// again (up to 16 times), until `landed` says the kernel's hash of the
    /// lines' ports put them on the sockets the test needs (with `Queues`
    /// above 1 a line lands on one socket of the group by its ports, and
    /// each start gives a's lines new ones). `None` if it never did.
    pub fn start_until(
        env: &'e TestEnv,
        namespaces: [&'e Netns; 2],
        impairments: [Option<&[&str]>; 2],
        peer_lines: &[&str],
        interface_lines: &[&str],
        mut landed: impl FnMut(&TwoLines<'e>, u32) -> bool,
    ) -> Option<TwoLines<'e>> {
        for start in 1..=16 {
            let lab =
                Self::start_configured(env, namespaces, impairments, peer_lines, interface_lines);
            if landed(&lab, start) {
                return Some(lab);
            }
            lab.stop();
        }
        None
    }

    /// Stops the relays (they run the braid binary too, and the tunnel's
    /// cleanup terminates braid processes it finds left over), then both
    /// tunnel ends.
    pub fn stop(mut self) {
        for relay in &mut self.relays {
            relay.terminate();
        }
        for side in self.sides.iter_mut().rev() {
            side.down();
        }
    }
}
