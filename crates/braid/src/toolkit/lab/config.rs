//! Keys and interface configurations: one builder, [`IfaceConf`], renders
//! both the wg-quick file (`braid up`, `wg-quick up`) and the `wg setconf`
//! file (wireguard-go).

use super::process::LabResult;
use super::process::{run_bounded_stdin, run_program, SHORT};
use crate::keys::PrivateKey;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;

/// A key pair, base64 as in config files.
#[derive(Clone, Debug)]
pub struct Keys {
    pub private: String,
    pub public: String,
}

impl Keys {
    /// A fresh pair from braid's own key code.
    pub fn generate() -> Keys {
        let k = PrivateKey::generate();
        Keys {
            private: k.to_base64().to_string(),
            public: k.public_key().to_base64(),
        }
    }

    /// A fresh pair from `wg genkey` and `wg pubkey` (wireguard-tools).
    pub fn from_wg() -> LabResult<Keys> {
        let private = wg_genkey()?;
        let public = wg_pubkey(&private)?;
        Ok(Keys { private, public })
    }
}

/// `wg genkey`
pub fn wg_genkey() -> LabResult<String> {
    let out = run_program("wg", &["genkey"], SHORT).check("wg genkey")?;
    Ok(out.stdout.trim().to_string())
}

/// `wg pubkey` of a private key.
pub fn wg_pubkey(private: &str) -> LabResult<String> {
    let mut c = Command::new("wg");
    c.arg("pubkey");
    let out = run_bounded_stdin(&mut c, Some(&format!("{private}\n")), SHORT).check("wg pubkey")?;
    Ok(out.stdout.trim().to_string())
}

/// A fresh key pair's halves as config text (private, public).
pub fn keypair() -> (String, String) {
    let k = Keys::generate();
    (k.private, k.public)
}

/// Writes `text` to a new file only its owner may read (configs hold keys),
/// replacing what was there.
pub fn write_private(path: &Path, text: &str) -> LabResult<()> {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A `[Peer]` section.
#[derive(Clone, Debug, Default)]
pub struct PeerConf {
    pub public_key: String,
    pub preshared_key: Option<String>,
    pub allowed_ips: Vec<String>,
    pub endpoint: Option<String>,
    pub keepalive: Option<u16>,
    /// braid's own `[Peer]` lines (Path =, Mode =, …): wg-quick files only.
    pub braid_lines: Vec<String>,
}

/// An interface and its peers.
#[derive(Clone, Debug, Default)]
pub struct IfaceConf {
    pub private_key: String,
    pub listen_port: Option<u16>,
    /// wg-quick only (not understood by `wg setconf`)
    pub address: Vec<String>,
    pub mtu: Option<u32>,
    /// braid's own `[Interface]` lines (MssFix =, …): wg-quick files only.
    pub braid_lines: Vec<String>,
    pub peers: Vec<PeerConf>,
}

impl IfaceConf {
    /// wg-quick style file (what `braid up` and `wg-quick up` read).
    pub fn wg_quick(&self) -> String {
        self.render(true)
    }

    /// `wg setconf` style file (what wireguard-go is given).
    pub fn wg_setconf(&self) -> String {
        self.render(false)
    }

    fn render(&self, quick: bool) -> String {
        let mut s = String::from("[Interface]\n");
        s += &format!("PrivateKey = {}\n", self.private_key);
        if let Some(p) = self.listen_port {
            s += &format!("ListenPort = {p}\n");
        }
        if quick {
            if !self.address.is_empty() {
                s += &format!("Address = {}\n", self.address.join(", "));
            }
            if let Some(m) = self.mtu {
                s += &format!("MTU = {m}\n");
            }
            for line in &self.braid_lines {
                s += &format!("{line}\n");
            }
        }
        for p in &self.peers {
            s += "\n[Peer]\n";
            s += &format!("PublicKey = {}\n", p.public_key);
            if let Some(k) = &p.preshared_key {
                s += &format!("PresharedKey = {k}\n");
            }
            s += &format!("AllowedIPs = {}\n", p.allowed_ips.join(", "));
            if let Some(e) = &p.endpoint {
                s += &format!("Endpoint = {e}\n");
            }
            if let Some(k) = p.keepalive {
                s += &format!("PersistentKeepalive = {k}\n");
            }
            if quick {
                for line in &p.braid_lines {
                    s += &format!("{line}\n");
                }
            }
        }
        s
    }
}

/// The usual two ends of a tunnel over underlay 198.18.x.0/24: A at
/// 198.19.x.1 (port 51820) reaching B at 198.18.x.2:51821, B at 198.19.x.2
/// waiting for A. Callers change the fields they are about.
pub fn tunnel_confs(ka: &Keys, kb: &Keys, x: u8) -> (IfaceConf, IfaceConf) {
    let a = IfaceConf {
        private_key: ka.private.clone(),
        listen_port: Some(51820),
        address: vec![format!("198.19.{x}.1/24")],
        peers: vec![PeerConf {
            public_key: kb.public.clone(),
            allowed_ips: vec![format!("198.19.{x}.2/32")],
            endpoint: Some(format!("198.18.{x}.2:51821")),
            ..Default::default()
        }],
        ..Default::default()
    };
    let b = IfaceConf {
        private_key: kb.private.clone(),
        listen_port: Some(51821),
        address: vec![format!("198.19.{x}.2/24")],
        peers: vec![PeerConf {
            public_key: ka.public.clone(),
            allowed_ips: vec![format!("198.19.{x}.1/32")],
            ..Default::default()
        }],
        ..Default::default()
    };
    (a, b)
}
