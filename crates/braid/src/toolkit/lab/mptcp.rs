//! The anchor people bond lines with today (OpenMPTCProuter): the kernel's
//! Multipath TCP with one subflow per line, each subflow inside its own
//! stock WireGuard tunnel (the newest wireguard-go) across one line.
//!
//! ```text
//!  netns A (client)                                netns B (server)
//!  wg1 198.19.95.1 ── line 1 ──► endpoint 1 ──► wireguard-go :port1  wg1 198.19.95.2
//!  wg2 198.19.96.1 ── line 2 ──► endpoint 2 ──► wireguard-go :port2  wg2 198.19.96.2
//!  mptcpize run iperf3 -c 198.19.95.2          mptcpize run iperf3 -s -B 198.19.95.2
//! ```
//!
//! The first subflow goes 198.19.95.1 → 198.19.95.2 through tunnel 1; the
//! client's endpoint `ip mptcp endpoint add 198.19.96.1 dev wg2 subflow`
//! opens the second from 198.19.96.1, which a policy rule (and the
//! endpoint's device) sends through tunnel 2. `ip mptcp limits set subflow
//! 2 add_addr_accepted 2` on both ends. What is needed and missing is
//! reported as a reason ([`MptcpTools::find`]), so a caller can say "not
//! measured: …" instead of failing.

use super::netns::{ip_in, run_in};
use super::process::{tool_exists, LabResult, SHORT};
use super::setup::{ChildId, Lab};
use super::uapi::sock_path;
use std::path::PathBuf;

/// Tunnel addresses: tunnel `i` (0 or 1) has 198.19.{95+i}.1 in A and
/// 198.19.{95+i}.2 in B.
pub const TUNNEL_NET: [u8; 2] = [95, 96];
/// The address the MPTCP server listens on (B's end of tunnel 1).
pub const SERVER: &str = "198.19.95.2";
/// The policy routing table of the second subflow in A.
const TABLE: &str = "96";

/// What the anchor needs: the newest wireguard-go, `mptcpize`, `wg` and a
/// kernel with MPTCP.
#[derive(Debug, Clone)]
pub struct MptcpTools {
    pub wireguard_go: PathBuf,
    /// What `wireguard-go --version` printed first ("wireguard-go v0.0.…").
    pub version: String,
}

impl MptcpTools {
    /// Finds what the anchor needs; `Err` says what is missing and how to
    /// get it. With `install`, a missing newest wireguard-go is installed
    /// first (`go install golang.zx2c4.com/wireguard@latest`,
    /// GOTOOLCHAIN=auto, at most 5 minutes), as bench/compare does.
    pub fn find(install: bool) -> Result<MptcpTools, String> {
        if std::fs::read_to_string("/proc/sys/net/mptcp/enabled").is_err() {
            return Err("this kernel has no Multipath TCP (/proc/sys/net/mptcp/enabled)".into());
        }
        if !tool_exists("mptcpize") {
            return Err("mptcpize is missing (apt-get install mptcpize)".into());
        }
        if !tool_exists("wg") {
            return Err("wg is missing (apt-get install wireguard-tools)".into());
        }
        let (wg_go, version) = super::wireguard_go::newest(install)?;
        Ok(MptcpTools {
            wireguard_go: wg_go,
            version,
        })
    }
}

/// One side of one tunnel.
#[derive(Debug, Clone)]
pub struct TunnelEnd {
    pub ns: String,
    pub ifname: String,
    pub child: ChildId,
}

/// Two wireguard-go tunnels between A and B, with MPTCP set up over them.
/// Take down with [`Lab::mptcp_down`] (the lab's guard removes whatever
/// is left if that never happens).
#[derive(Debug)]
pub struct MptcpTunnels {
    pub ns_a: String,
    pub ns_b: String,
    /// (A's end, B's end) of tunnel 1 and tunnel 2.
    pub tunnels: Vec<(TunnelEnd, TunnelEnd)>,
}

impl MptcpTunnels {
    /// A's tunnel address of tunnel `i`.
    pub fn client_addr(i: usize) -> String {
        format!("198.19.{}.1", TUNNEL_NET[i])
    }

    /// The TCP subflows of MPTCP connections to `SERVER:port` in A that
    /// have sent at least [`DATA_SUBFLOW_BYTES`] so far, as their local
    /// addresses (`ss -Htni`: sockets with tcp-ulp-mptcp and their
    /// bytes_sent). iperf3's control connection, MPTCP too, sends less.
    pub fn subflows(&self, port: &str) -> Vec<String> {
        let out = run_in(&self.ns_a, "ss", &["-Htni", "state", "established"], SHORT);
        subflows_in_ss(&out.stdout, &format!("{SERVER}:{port}"))
            .into_iter()
            .filter(|(_, sent)| *sent >= DATA_SUBFLOW_BYTES)
            .map(|(local, _)| local)
            .collect()
    }
}

/// What a subflow must have sent to count as carrying the transfer.
pub const DATA_SUBFLOW_BYTES: u64 = 64 * 1024;

/// The MPTCP subflows to `peer` in `ss -Htni` text (a socket line, then
/// its info line with `tcp-ulp-mptcp`): (local address, bytes sent).
pub fn subflows_in_ss(text: &str, peer: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with(char::is_whitespace) {
            if let Some(local) = current.take() {
                if line.contains("tcp-ulp-mptcp") {
                    let sent = line
                        .split_whitespace()
                        .find_map(|f| f.strip_prefix("bytes_sent:"))
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    out.push((local, sent));
                }
            }
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Recv-Q Send-Q Local Peer (with `state established`, no State column).
        current = fields
            .iter()
            .rposition(|f| *f == peer)
            .and_then(|i| i.checked_sub(1))
            .map(|i| {
                let local = fields[i];
                let host = local.rsplit_once(':').map_or(local, |(h, _)| h);
                host.split('%').next().unwrap_or(host).to_string()
            });
    }
    out
}

impl Lab {
    /// Two wireguard-go tunnels from `ns_a` to `ns_b`: tunnel `i` sends to
    /// `endpoints[i]` (an address of B reached over line `i`, e.g. a `braid
    /// netem` relay) and B's end listens on `b_ports[i]` (where the relay
    /// forwards to). Then MPTCP: limits on both ends, the subflow endpoint
    /// and its policy route in A. Every process and interface belongs to
    /// the lab.
    pub fn mptcp_up(
        &mut self,
        tools: &MptcpTools,
        ns_a: &str,
        ns_b: &str,
        endpoints: [&str; 2],
        b_ports: [u16; 2],
    ) -> LabResult<MptcpTunnels> {
        let mut t = MptcpTunnels {
            ns_a: ns_a.to_string(),
            ns_b: ns_b.to_string(),
            tunnels: Vec::new(),
        };
        match self.mptcp_build(tools, &mut t, endpoints, b_ports) {
            Ok(()) => Ok(t),
            Err(e) => {
                self.mptcp_down(t);
                Err(e)
            }
        }
    }

    fn mptcp_build(
        &mut self,
        tools: &MptcpTools,
        t: &mut MptcpTunnels,
        endpoints: [&str; 2],
        b_ports: [u16; 2],
    ) -> LabResult<()> {
        let (ns_a, ns_b) = (t.ns_a.clone(), t.ns_b.clone());
        // The second subflow leaves by tunnel 2 with a source of tunnel 2
        // and the server's address of tunnel 1: no reverse-path filter.
        for ns in [&ns_a, &ns_b] {
            for key in ["all", "default"] {
                run_in(
                    ns,
                    "sysctl",
                    &["-qw", &format!("net.ipv4.conf.{key}.rp_filter=0")],
                    SHORT,
                )
                .check("sysctl rp_filter")?;
            }
        }
        let (ka, kb) = (
            super::config::Keys::generate(),
            super::config::Keys::generate(),
        );
        let key_a = self.write_private("mptcp-a.key", &ka.private)?;
        let key_b = self.write_private("mptcp-b.key", &kb.private)?;
        for i in 0..2 {
            let net = TUNNEL_NET[i];
            let (name_a, name_b) = (
                self.name(&format!("m{}", i + 1)),
                self.name(&format!("n{}", i + 1)),
            );
            let a = self.wireguard_go(tools, &ns_a, &name_a)?;
            let b = self.wireguard_go(tools, &ns_b, &name_b)?;
            t.tunnels.push((a.clone(), b.clone()));
            // A's second tunnel also carries the second subflow to the
            // server's address of tunnel 1.
            let a_allowed = if i == 0 {
                format!("198.19.{net}.0/24")
            } else {
                format!("198.19.{}.0/24,198.19.{net}.0/24", TUNNEL_NET[0])
            };
            let port = b_ports[i].to_string();
            let wg = |ns: &str, args: &[&str]| {
                run_in(ns, "wg", args, SHORT).check("wg set (wireguard-go)")
            };
            wg(
                &ns_b,
                &[
                    "set",
                    &b.ifname,
                    "private-key",
                    &key_b.to_string_lossy(),
                    "listen-port",
                    &port,
                    "peer",
                    &ka.public,
                    "allowed-ips",
                    &format!("198.19.{net}.1/32"),
                ],
            )?;
            wg(
                &ns_a,
                &[
                    "set",
                    &a.ifname,
                    "private-key",
                    &key_a.to_string_lossy(),
                    "peer",
                    &kb.public,
                    "allowed-ips",
                    &a_allowed,
                    "endpoint",
                    endpoints[i],
                ],
            )?;
            for (end, host) in [(&a, 1), (&b, 2)] {
                let addr = format!("198.19.{net}.{host}/24");
                ip_in(&end.ns, &["addr", "add", &addr, "dev", &end.ifname])
                    .check("tunnel address")?;
                ip_in(&end.ns, &["link", "set", &end.ifname, "up"]).check("tunnel up")?;
            }
        }
        let a2 = t.tunnels[1].0.ifname.clone();
        let src2 = MptcpTunnels::client_addr(1);
        ip_in(
            &ns_a,
            &[
                "rule", "add", "from", &src2, "table", TABLE, "priority", "96",
            ],
        )
        .check("ip rule for the second subflow")?;
        ip_in(
            &ns_a,
            &[
                "route",
                "add",
                &format!("198.19.{}.0/24", TUNNEL_NET[0]),
                "dev",
                &a2,
                "table",
                TABLE,
            ],
        )
        .check("route of the second subflow")?;
        for ns in [&ns_a, &ns_b] {
            ip_in(
                ns,
                &[
                    "mptcp",
                    "limits",
                    "set",
                    "subflow",
                    "2",
                    "add_addr_accepted",
                    "2",
                ],
            )
            .check("ip mptcp limits")?;
        }
        ip_in(
            &ns_a,
            &["mptcp", "endpoint", "add", &src2, "dev", &a2, "subflow"],
        )
        .check("ip mptcp endpoint")?;
        Ok(())
    }

    /// `wireguard-go -f IFNAME` in `ns`, owned by the lab; returns once its
    /// UAPI socket is there.
    fn wireguard_go(&mut self, tools: &MptcpTools, ns: &str, ifname: &str) -> LabResult<TunnelEnd> {
        let sock = sock_path(ifname);
        self.remove_on_drop(sock.clone());
        let mut c = self.cmd_in(ns, &tools.wireguard_go);
        c.args(["-f", ifname]);
        let log = format!("{ifname}.wireguard-go.log");
        let child = self.spawn(c, &log)?;
        let ready = super::process::wait_until(super::process::LONG, || {
            sock.exists() || self.exited(child)
        });
        if !ready || self.exited(child) {
            let text = self.stop(child, &log);
            return Err(format!(
                "wireguard-go {ifname} did not come up: {}",
                text.trim()
            ));
        }
        Ok(TunnelEnd {
            ns: ns.to_string(),
            ifname: ifname.to_string(),
            child,
        })
    }

    /// Takes the anchor down: MPTCP endpoint and policy route, then both
    /// tunnels (their processes by PID, their interfaces, sockets).
    pub fn mptcp_down(&mut self, t: MptcpTunnels) {
        let _ = ip_in(&t.ns_a, &["mptcp", "endpoint", "flush"]);
        let _ = ip_in(
            &t.ns_a,
            &[
                "rule",
                "del",
                "from",
                &MptcpTunnels::client_addr(1),
                "table",
                TABLE,
            ],
        );
        let _ = ip_in(&t.ns_a, &["route", "flush", "table", TABLE]);
        for (a, b) in t.tunnels {
            for end in [a, b] {
                let log = format!("{}.wireguard-go.log", end.ifname);
                self.stop(end.child, &log);
                let _ = ip_in(&end.ns, &["link", "del", &end.ifname]);
                let _ = std::fs::remove_file(sock_path(&end.ifname));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subflows_are_read_from_ss() {
        let text = "\
0      0      198.19.95.1:43538 198.19.95.2:5201
\t cubic wscale:10,10 rto:204 bytes_sent:175823680 tcp-ulp-mptcp flags:Mmec token:0000(id:0)/82fb5c55(id:0)
0      3158984 198.19.96.1%bl1m2:42843 198.19.95.2:5201
\t cubic wscale:10,10 tcp-ulp-mptcp flags:Jjec token:82fb5c55(id:0)/20de8d25(id:1)
0      0      198.18.93.1:40000 198.18.93.2:22
\t cubic wscale:7,7
0      0      198.19.95.1:50000 198.19.95.2:5201
\t cubic wscale:7,7 (plain TCP)
";
        assert_eq!(
            subflows_in_ss(text, "198.19.95.2:5201"),
            [
                ("198.19.95.1".to_string(), 175823680),
                ("198.19.96.1".to_string(), 0)
            ]
        );
        assert!(subflows_in_ss("", "198.19.95.2:5201").is_empty());
        assert_eq!(MptcpTunnels::client_addr(1), "198.19.96.1");
    }
}
