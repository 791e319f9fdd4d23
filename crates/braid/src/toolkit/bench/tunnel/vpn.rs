//! The VPN implementations `braid bench tunnel` can measure, and how each
//! one is brought up between the lab's two namespaces: braid through
//! `braid up`, wireguard-go and boringtun in the foreground configured with
//! `wg setconf`, OpenVPN 2.6 in TLS point-to-point mode with a throw-away
//! CA, or no tunnel at all. Each tunnel reports the processes that carry
//! its packets, so their CPU time can be charged to the transfer.

use crate::toolkit::lab::{self, run, ChildId, Lab, LabResult};
use crate::uapi;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The port every VPN listens on in namespace B.
pub const VPN_PORT: u16 = 51820;
/// Where a `braid netem` line listens in B when the underlay is impaired.
pub const NETEM_PORT: u16 = 5001;
/// WireGuard's usual tunnel MTU for a 1500-byte underlay.
const WG_MTU: &str = "1420";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VpnKind {
    Braid,
    /// No tunnel: the measurement goes straight over the veth pair.
    None,
    WireguardGo(String),
    Boringtun(String),
    /// OpenVPN 2.6; `cipher_none` turns encryption off (`--cipher none`).
    OpenVpn {
        cipher_none: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cipher {
    Auto,
    ChaCha20Poly1305,
    Aes256Gcm,
}

impl Cipher {
    pub fn parse(s: &str) -> Result<Cipher, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Cipher::Auto),
            "chacha20poly1305" | "chacha20-poly1305" | "chacha" => Ok(Cipher::ChaCha20Poly1305),
            "aes256gcm" | "aes-256-gcm" | "aes" => Ok(Cipher::Aes256Gcm),
            _ => Err(format!(
                "--cipher: {s:?} is not one of auto, chacha20poly1305, aes256gcm"
            )),
        }
    }

    /// The value of braid's `Cipher =` key (None: leave the key out).
    fn braid_value(self) -> Option<&'static str> {
        match self {
            Cipher::Auto => None,
            Cipher::ChaCha20Poly1305 => Some("chacha20poly1305"),
            Cipher::Aes256Gcm => Some("aes256gcm"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cipher::Auto => "auto",
            Cipher::ChaCha20Poly1305 => "chacha20poly1305",
            Cipher::Aes256Gcm => "aes256gcm",
        }
    }
}

impl VpnKind {
    /// `braid`, `none`, `wireguard-go[=PATH]`, `boringtun[=PATH]`,
    /// `openvpn`, `openvpn-none`.
    pub fn parse(s: &str) -> Result<VpnKind, String> {
        let (kind, path) = match s.split_once('=') {
            Some((k, p)) if !p.is_empty() => (k, Some(p.to_string())),
            Some((k, _)) => return Err(format!("--vpn {k}=: the path is empty")),
            None => (s, None),
        };
        let no_path = |v: VpnKind| match &path {
            Some(_) => Err(format!("--vpn {kind} takes no path")),
            None => Ok(v),
        };
        match kind {
            "braid" => no_path(VpnKind::Braid),
            "none" => no_path(VpnKind::None),
            "openvpn" => no_path(VpnKind::OpenVpn { cipher_none: false }),
            "openvpn-none" => no_path(VpnKind::OpenVpn { cipher_none: true }),
            "wireguard-go" => Ok(VpnKind::WireguardGo(
                path.unwrap_or_else(|| "wireguard-go".into()),
            )),
            "boringtun" => Ok(VpnKind::Boringtun(
                path.unwrap_or_else(|| "boringtun-cli".into()),
            )),
            _ => Err(format!(
                "--vpn: {s:?} is not one of braid, none, wireguard-go[=PATH], \
                 boringtun[=PATH], openvpn, openvpn-none"
            )),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            VpnKind::Braid => "braid",
            VpnKind::None => "none",
            VpnKind::WireguardGo(_) => "wireguard-go",
            VpnKind::Boringtun(_) => "boringtun",
            VpnKind::OpenVpn { cipher_none: false } => "openvpn",
            VpnKind::OpenVpn { cipher_none: true } => "openvpn-none",
        }
    }

    /// Refuses cipher choices the implementation cannot make.
    pub fn check_cipher(&self, cipher: Cipher) -> Result<(), String> {
        match (self, cipher) {
            (VpnKind::Braid, _) | (_, Cipher::Auto) => Ok(()),
            (VpnKind::WireguardGo(_) | VpnKind::Boringtun(_), Cipher::ChaCha20Poly1305) => Ok(()),
            (VpnKind::OpenVpn { cipher_none: false }, _) => Ok(()),
            (other, c) => Err(format!(
                "--cipher {} does not apply to --vpn {}",
                c.name(),
                other.name()
            )),
        }
    }

    /// Every program this kind needs, with how to install it.
    pub fn tools(&self) -> Vec<(String, String)> {
        let apt = |p: &str| format!("apt-get install {p}");
        let mut t = vec![
            ("ip".to_string(), apt("iproute2")),
            ("iperf3".to_string(), apt("iperf3")),
            ("ping".to_string(), apt("iputils-ping")),
        ];
        match self {
            VpnKind::Braid | VpnKind::None => {}
            VpnKind::WireguardGo(p) => {
                t.push(("wg".into(), apt("wireguard-tools")));
                t.push((
                    p.clone(),
                    "apt-get install wireguard-go, or for the newest: \
                     GOBIN=DIR go install golang.zx2c4.com/wireguard@latest \
                     and --vpn wireguard-go=DIR/wireguard"
                        .into(),
                ));
            }
            VpnKind::Boringtun(p) => {
                t.push(("wg".into(), apt("wireguard-tools")));
                t.push((
                    p.clone(),
                    "cargo install boringtun-cli --root DIR, then \
                     --vpn boringtun=DIR/bin/boringtun-cli"
                        .into(),
                ));
            }
            VpnKind::OpenVpn { .. } => {
                t.push(("openvpn".into(), apt("openvpn")));
                t.push(("openssl".into(), apt("openssl")));
            }
        }
        t
    }

    /// A one-line version string of the implementation.
    pub fn version(&self) -> String {
        let first_line = |program: &str, arg: &str| {
            let out = Command::new(program).arg(arg).output().ok();
            let text = out
                .map(|o| {
                    let mut t = String::from_utf8_lossy(&o.stdout).into_owned();
                    t.push_str(&String::from_utf8_lossy(&o.stderr));
                    t
                })
                .unwrap_or_default();
            text.lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("unknown version")
                .trim()
                .to_string()
        };
        match self {
            VpnKind::Braid => format!("braid {}", env!("CARGO_PKG_VERSION")),
            VpnKind::None => "raw veth, no tunnel".into(),
            VpnKind::WireguardGo(p) => first_line(p, "--version"),
            VpnKind::Boringtun(p) => first_line(p, "--version"),
            VpnKind::OpenVpn { .. } => first_line("openvpn", "--version")
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// The lab's addresses: underlay on the veth pair, tunnel inside.
pub struct Net {
    pub ns_a: String,
    pub ns_b: String,
    pub underlay_b: String,
    pub tunnel_a: String,
    pub tunnel_b: String,
    /// Where A sends its tunnel packets: B's VPN port, or the netem line.
    pub endpoint_host: String,
    pub endpoint_port: u16,
    /// braid `--paths 2`: A's two lines (its veth, B's address on it).
    pub redundant_lines: Option<[(String, String); 2]>,
    /// braid `--transport tcp`: both peers get `Transport = tcp`.
    pub transport_tcp: bool,
    /// `--vpn-realtime N`: braid's `RealtimePriority = N`, `chrt -r N` for
    /// the others.
    pub realtime_priority: Option<u8>,
    /// `--vpn-queues N`: braid's `Queues = N`.
    pub queues: Option<usize>,
}

/// A tunnel that is up: where to send traffic and whom to charge for it.
pub struct Tunnel {
    /// The address iperf3 and ping aim at in namespace B.
    pub target: String,
    /// The processes that carry the tunnel's packets (empty without one).
    pub pids: Vec<u32>,
}

pub fn bring_up(lab: &mut Lab, kind: &VpnKind, cipher: Cipher, net: &Net) -> LabResult<Tunnel> {
    let tunnel = match kind {
        VpnKind::None => {
            return Ok(Tunnel {
                target: net.underlay_b.clone(),
                pids: Vec::new(),
            })
        }
        VpnKind::Braid => braid(lab, cipher, net)?,
        VpnKind::WireguardGo(p) => wg_userspace(lab, p, &["-f"], net)?,
        VpnKind::Boringtun(p) => wg_userspace(lab, p, &["-f", "--disable-drop-privileges"], net)?,
        VpnKind::OpenVpn { cipher_none } => openvpn(lab, cipher, *cipher_none, net)?,
    };
    // OpenVPN's TLS handshake takes a moment; the others answer at once.
    if !ping_until_reply(lab, &net.ns_a, &tunnel.target, Duration::from_secs(30))? {
        return Err(format!(
            "no ping reply through the {} tunnel to {} within 30 s{}",
            kind.name(),
            tunnel.target,
            logs_tail(lab)
        ));
    }
    Ok(tunnel)
}

fn ping_until_reply(lab: &Lab, ns: &str, dst: &str, within: Duration) -> LabResult<bool> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        lab::check_stop()?;
        if lab.ping_until_reply(ns, dst, Duration::from_millis(500)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The last lines of the VPN logs in the lab directory, for an error.
fn logs_tail(lab: &Lab) -> String {
    let mut out = String::new();
    for side in ["a", "b"] {
        let path = lab.dir().join(format!("vpn-{side}.log"));
        if let Ok(text) = std::fs::read_to_string(&path) {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(5)..].join("\n    ");
            if !tail.is_empty() {
                out.push_str(&format!("\n  {}:\n    {tail}", path.display()));
            }
        }
    }
    out
}

fn braid(lab: &mut Lab, cipher: Cipher, net: &Net) -> LabResult<Tunnel> {
    let ((key_a, pub_a), (key_b, pub_b)) = (lab::keypair(), lab::keypair());
    let cipher_line = cipher
        .braid_value()
        .map(|c| format!("Cipher = {c}\n"))
        .unwrap_or_default();
    let peer_route = match &net.redundant_lines {
        None => format!("Endpoint = {}:{}\n", net.endpoint_host, net.endpoint_port),
        Some(lines) => {
            let mut s = String::from("Mode = redundant\n");
            for (i, (veth, host)) in lines.iter().enumerate() {
                s.push_str(&format!(
                    "Path = line{} bind={veth} endpoint={host}:{}\n",
                    i + 1,
                    net.endpoint_port
                ));
            }
            s
        }
    };
    let transport = if net.transport_tcp {
        "Transport = tcp\n"
    } else {
        ""
    };
    let realtime_line = net
        .realtime_priority
        .map(|p| format!("RealtimePriority = {p}\n"))
        .unwrap_or_default()
        + &net
            .queues
            .map(|n| format!("Queues = {n}\n"))
            .unwrap_or_default();
    let conf_a = format!(
        "[Interface]\nPrivateKey = {key_a}\nAddress = {}/24\nListenPort = {VPN_PORT}\n{cipher_line}{realtime_line}\n\
         [Peer]\nPublicKey = {pub_b}\nAllowedIPs = {}/32\n{peer_route}{transport}",
        net.tunnel_a, net.tunnel_b
    );
    let conf_b = format!(
        "[Interface]\nPrivateKey = {key_b}\nAddress = {}/24\nListenPort = {VPN_PORT}\n{cipher_line}{realtime_line}\n\
         [Peer]\nPublicKey = {pub_a}\nAllowedIPs = {}/32\n{transport}",
        net.tunnel_b, net.tunnel_a
    );
    let (if_a, if_b) = (lab.name("a"), lab.name("b"));
    lab.braid_up(&net.ns_b, &if_b, &conf_b)?;
    lab.braid_up(&net.ns_a, &if_a, &conf_a)?;
    let mut pids = Vec::new();
    for name in [&if_a, &if_b] {
        let path = uapi::socket_path(name);
        pids.push(socket_peer_pid(&path).ok_or_else(|| {
            format!(
                "cannot tell which process serves {} (braid up {name})",
                path.display()
            )
        })?);
    }
    Ok(Tunnel {
        target: net.tunnel_b.clone(),
        pids,
    })
}

/// The process on the other end of a unix socket (SO_PEERCRED).
fn socket_peer_pid(path: &Path) -> Option<u32> {
    let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
    let pid = crate::uapi::peer_credentials(&stream)?.pid;
    u32::try_from(pid).ok().filter(|&pid| pid > 0)
}

/// Waits for a foreground VPN's UAPI socket; fails early if it died.
fn wait_for_socket(lab: &mut Lab, id: ChildId, path: &Path, log: &str) -> LabResult<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        lab::check_stop()?;
        if lab.exited(id) || Instant::now() > deadline {
            let text = lab.stop(id, log);
            return Err(format!(
                "no UAPI socket {} from the VPN process: {}",
                path.display(),
                text.trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// wireguard-go or boringtun: a foreground process per namespace that
/// creates the TUN device and serves `/var/run/wireguard/NAME.sock`, then
/// `wg setconf` and `ip` as wg-quick would do.
/// `program` in `ns`, under `chrt -r PRIORITY` when asked: every thread it
/// starts inherits the class (as `RealtimePriority` does for braid's
/// data plane).
fn realtime_cmd(lab: &Lab, ns: &str, program: &str, priority: Option<u8>) -> Command {
    match priority {
        None => lab.cmd_in(ns, program),
        Some(p) => {
            let mut cmd = lab.cmd_in(ns, "chrt");
            cmd.args(["-r", &p.to_string(), program]);
            cmd
        }
    }
}

fn wg_userspace(lab: &mut Lab, program: &str, flags: &[&str], net: &Net) -> LabResult<Tunnel> {
    let ((key_a, pub_a), (key_b, pub_b)) = (lab::keypair(), lab::keypair());
    let sides = [
        (
            "b",
            &net.ns_b,
            &net.tunnel_b,
            key_b,
            pub_a,
            &net.tunnel_a,
            None,
        ),
        (
            "a",
            &net.ns_a,
            &net.tunnel_a,
            key_a,
            pub_b,
            &net.tunnel_b,
            Some(format!("{}:{}", net.endpoint_host, net.endpoint_port)),
        ),
    ];
    let mut pids = Vec::new();
    for (side, ns, addr, key, peer, allowed, endpoint) in sides {
        let ifname = lab.name(side);
        let log = format!("vpn-{side}.log");
        let mut cmd = realtime_cmd(lab, ns, program, net.realtime_priority);
        cmd.args(flags).arg(&ifname);
        let id = lab.spawn(cmd, &log)?;
        let socket = uapi::socket_path(&ifname);
        lab.remove_on_drop(socket.clone());
        wait_for_socket(lab, id, &socket, &log)?;
        let endpoint_line = endpoint
            .map(|e| format!("Endpoint = {e}\n"))
            .unwrap_or_default();
        let conf = format!(
            "[Interface]\nPrivateKey = {key}\nListenPort = {VPN_PORT}\n\n\
             [Peer]\nPublicKey = {peer}\nAllowedIPs = {allowed}/32\n{endpoint_line}"
        );
        let file = lab.write_private(&format!("wg-{side}.conf"), &conf)?;
        run(lab.cmd_in(ns, "wg").arg("setconf").arg(&ifname).arg(&file))?;
        run(Command::new("ip").args([
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            &ifname,
        ]))?;
        run(Command::new("ip").args(["-n", ns, "link", "set", &ifname, "mtu", WG_MTU, "up"]))?;
        pids.push(lab.pid(id).ok_or("the VPN process vanished")?);
    }
    Ok(Tunnel {
        target: net.tunnel_b.clone(),
        pids,
    })
}

/// A throw-away CA and one certificate each for the OpenVPN server (B) and
/// client (A), made with openssl in the lab directory.
fn openvpn_pki(lab: &Lab) -> LabResult<()> {
    let dir = lab.dir();
    let openssl = |args: &[&str]| run(Command::new("openssl").current_dir(dir).args(args));
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=braid-bench-ca",
            ],
        ]
        .concat(),
    )?;
    for who in ["server", "client"] {
        let (key, csr, crt) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.crt"),
        );
        let subject = format!("/CN=braid-bench-{who}");
        openssl(
            &[
                &["req"][..],
                &ec,
                &["-keyout", &key, "-out", &csr, "-subj", &subject],
            ]
            .concat(),
        )?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
        ])?;
    }
    Ok(())
}

/// OpenVPN 2.6 point-to-point over UDP with TLS (static keys cannot carry
/// an AEAD data channel), no compression, userspace data channel (no DCO).
fn openvpn(lab: &mut Lab, cipher: Cipher, cipher_none: bool, net: &Net) -> LabResult<Tunnel> {
    openvpn_pki(lab)?;
    let data_cipher = match (cipher_none, cipher) {
        (true, _) => "none",
        (false, Cipher::ChaCha20Poly1305) => "CHACHA20-POLY1305",
        (false, _) => "AES-256-GCM",
    };
    let dir = lab.dir().to_path_buf();
    let file = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let mut pids = Vec::new();
    let port = VPN_PORT.to_string();
    let remote_port = net.endpoint_port.to_string();
    for side in ["b", "a"] {
        let server = side == "b";
        let (ns, local, remote) = if server {
            (&net.ns_b, &net.tunnel_b, &net.tunnel_a)
        } else {
            (&net.ns_a, &net.tunnel_a, &net.tunnel_b)
        };
        let who = if server { "server" } else { "client" };
        let mut cmd = realtime_cmd(lab, ns, "openvpn", net.realtime_priority);
        cmd.args([
            "--dev",
            &lab.name(side),
            "--dev-type",
            "tun",
            "--proto",
            "udp",
        ])
        .args(["--ifconfig", local, remote, "--lport", &port])
        .args(["--ca", &file("ca.crt")])
        .args(["--cert", &file(&format!("{who}.crt"))])
        .args(["--key", &file(&format!("{who}.key"))])
        .args(["--disable-dco", "--verb", "3"])
        .args(["--cipher", data_cipher, "--data-ciphers", data_cipher]);
        if cipher_none {
            cmd.args(["--auth", "none"]);
        }
        if server {
            cmd.args(["--tls-server", "--dh", "none"]);
        } else {
            cmd.args(["--tls-client", "--remote", &net.endpoint_host, &remote_port]);
        }
        let log = format!("vpn-{side}.log");
        let id = lab.spawn(cmd, &log)?;
        std::thread::sleep(Duration::from_millis(200));
        if lab.exited(id) {
            let text = lab.stop(id, &log);
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            return Err(format!(
                "openvpn ({who}) exited at once: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ));
        }
        pids.push(lab.pid(id).ok_or("the openvpn process vanished")?);
    }
    Ok(Tunnel {
        target: net.tunnel_b.clone(),
        pids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vpn_kinds_parse() {
        assert_eq!(VpnKind::parse("braid"), Ok(VpnKind::Braid));
        assert_eq!(
            VpnKind::parse("wireguard-go=/x/wireguard"),
            Ok(VpnKind::WireguardGo("/x/wireguard".into()))
        );
        assert_eq!(
            VpnKind::parse("boringtun"),
            Ok(VpnKind::Boringtun("boringtun-cli".into()))
        );
        assert!(VpnKind::parse("braid=/x").is_err());
        assert!(VpnKind::parse("tinc").is_err());
        assert!(VpnKind::parse("wireguard-go=").is_err());
    }

    #[test]
    fn ciphers_only_where_they_apply() {
        let wg = VpnKind::WireguardGo("wireguard-go".into());
        assert!(wg.check_cipher(Cipher::Aes256Gcm).is_err());
        assert!(wg.check_cipher(Cipher::ChaCha20Poly1305).is_ok());
        assert!(VpnKind::None.check_cipher(Cipher::Aes256Gcm).is_err());
        assert!(VpnKind::Braid.check_cipher(Cipher::Aes256Gcm).is_ok());
        assert_eq!(Cipher::parse("AES-256-GCM"), Ok(Cipher::Aes256Gcm));
        assert_eq!(Cipher::Auto.braid_value(), None);
    }
}
