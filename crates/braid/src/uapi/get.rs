//! The `get=1` reply, as text in wireguard-go's key order. A daemon with
//! many peers writes it in parts ([`GetCursor`], `Response::GetPart`)
//! straight from its device, a few thousand peers at a time, so the
//! answer streams to the client without a snapshot of every peer or the
//! whole text held at once, and the device is never held for long.

use super::{secs_nsecs, DeviceSnapshot};
use crate::cidr::IpCidr;
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::SystemTime;
use zeroize::Zeroizing;

/// Where a `get=1` answer in parts goes on: the first peer id not listed
/// yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetCursor(pub usize);

/// What `get=1` says of one peer (its AllowedIPs come separately).
#[derive(Debug, Clone, Copy)]
pub struct GetPeer<'a> {
    pub public_key: &'a [u8; 32],
    /// All zero: none.
    pub preshared_key: &'a [u8; 32],
    pub endpoint: Option<SocketAddr>,
    pub last_handshake: Option<SystemTime>,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub persistent_keepalive_interval: u16,
}

/// Text that holds keys (the `get=1` reply): a buffer it outgrows is
/// zeroized before it is freed, and so is the last one when the text is
/// dropped, so no copy of a key stays behind in freed memory.
pub struct GetText(Zeroizing<String>);

impl std::fmt::Write for GetText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let need = self.0.len() + s.len();
        if need > self.0.capacity() {
            let mut bigger = String::with_capacity(need.max(2 * self.0.capacity()));
            bigger.push_str(&self.0);
            // The old buffer is zeroized as it is dropped here.
            self.0 = Zeroizing::new(bigger);
        }
        self.0.push_str(s);
        Ok(())
    }
}

impl GetText {
    pub fn with_capacity(bytes: usize) -> GetText {
        GetText(Zeroizing::new(String::with_capacity(bytes)))
    }

    /// The interface's lines, first in the reply.
    pub fn header(&mut self, private_key: Option<&PrivateKey>, listen_port: u16, fwmark: u32) {
        if let Some(sk) = private_key {
            let _ = writeln!(self, "private_key={}", &*sk.to_hex());
        }
        let _ = writeln!(self, "listen_port={listen_port}");
        if fwmark != 0 {
            let _ = writeln!(self, "fwmark={fwmark}");
        }
    }

    /// One peer's lines, its AllowedIPs last.
    pub fn peer(&mut self, p: &GetPeer<'_>, allowed_ips: impl IntoIterator<Item = IpCidr>) {
        let _ = writeln!(
            self,
            "public_key={}",
            PublicKey::from_bytes(*p.public_key).to_hex()
        );
        let psk = PresharedKey::from_bytes(*p.preshared_key);
        let _ = writeln!(self, "preshared_key={}", &*psk.to_hex());
        let _ = self.write_str("protocol_version=1\n");
        if let Some(ep) = p.endpoint {
            let _ = writeln!(self, "endpoint={ep}");
        }
        let (sec, nsec) = secs_nsecs(p.last_handshake);
        let _ = writeln!(self, "last_handshake_time_sec={sec}");
        let _ = writeln!(self, "last_handshake_time_nsec={nsec}");
        let _ = writeln!(self, "tx_bytes={}", p.tx_bytes);
        let _ = writeln!(self, "rx_bytes={}", p.rx_bytes);
        let _ = writeln!(
            self,
            "persistent_keepalive_interval={}",
            p.persistent_keepalive_interval
        );
        for ip in allowed_ips {
            let _ = writeln!(self, "allowed_ip={ip}");
        }
    }

    /// The end of the reply: success.
    pub fn end(&mut self) {
        let _ = self.write_str("errno=0\n\n");
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_text(self) -> Zeroizing<String> {
        self.0
    }
}

/// The whole `get=1` reply of a snapshot; zeroized when dropped.
pub fn format_get(snap: &DeviceSnapshot) -> Zeroizing<String> {
    let mut out = GetText::with_capacity(256 + snap.peers.len() * 400);
    out.header(snap.private_key.as_ref(), snap.listen_port, snap.fwmark);
    for p in &snap.peers {
        let psk = Zeroizing::new(p.preshared_key.as_ref().map_or([0; 32], |k| *k.as_bytes()));
        let peer = GetPeer {
            public_key: p.public_key.as_bytes(),
            preshared_key: &psk,
            endpoint: p.endpoint,
            last_handshake: p.last_handshake,
            tx_bytes: p.tx_bytes,
            rx_bytes: p.rx_bytes,
            persistent_keepalive_interval: p.persistent_keepalive_interval,
        };
        out.peer(&peer, p.allowed_ips.iter().copied());
    }
    out.end();
    out.into_text()
}
