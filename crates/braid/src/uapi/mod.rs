//! WireGuard's cross-platform userspace configuration protocol
//! (<https://www.wireguard.com/xplatform/>), spoken by the stock `wg` tool
//! over `/var/run/wireguard/NAME.sock`, plus one braid-only request.
//!
//! Requests are `get=1`, `set=1` or braid's `get=braid`, each followed by
//! `key=value` lines and a blank line. Replies are `key=value` lines ending in
//! `errno=N` and a blank line. The parser is transport-agnostic (any
//! [`BufRead`]); [`serve_connection`] and [`query`] wrap a Unix socket.
//!
//! braid's own counters never appear in `get=1`, so third-party clients that
//! reject unknown keys keep working; `get=braid` answers with one
//! `json=...` line instead (see [`format_braid`]).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zeroize::Zeroizing;

use serde::{Deserialize, Serialize};

use crate::cidr::IpCidr;
use crate::keys::{PresharedKey, PrivateKey, PublicKey};

mod get;
pub mod sync;
pub use get::{format_get, GetCursor, GetPeer, GetText};

/// Longest accepted line, newline excluded. `wg` never sends more than a
/// key plus a 4096-byte host name.
pub const MAX_LINE_LEN: usize = 4096;
/// Largest accepted request: room for the most peers a device holds
/// (`MAX_PEERS`, 2^20, at about 130 bytes each as `wg setconf` sends
/// them) with an AllowedIP each, or millions of AllowedIPs. It is read
/// line by line; what is held is the parsed request.
pub const MAX_REQUEST_LEN: usize = 256 << 20;
/// Largest reply [`query`] will read.
const MAX_RESPONSE_LEN: u64 = 64 << 20;
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the UAPI sockets are, one per interface (wg's convention: `wg`
/// finds an interface by looking here).
pub const SOCKET_DIR: &str = "/var/run/wireguard";

/// The UAPI socket of interface `name`.
pub fn socket_path(name: &str) -> PathBuf {
    Path::new(SOCKET_DIR).join(format!("{name}.sock"))
}

/// The credentials of the process on the other end of a connected unix
/// socket (SO_PEERCRED): who is talking to a control socket.
pub fn peer_credentials(stream: &std::os::unix::net::UnixStream) -> Option<libc::ucred> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt SO_PEERCRED fills a ucred of the given length.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred)
}

/// A positive `errno.h` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    pub const EADDRINUSE: Errno = Errno(libc::EADDRINUSE);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Get,
    GetBraid,
    Set,
    /// braid's `set=braid`: a whole config file to apply ([`sync`]).
    SetBraid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Get,
    /// The next part of a `get=1` answer that came in parts
    /// ([`Response::GetPart`]); never read from the wire.
    GetMore(GetCursor),
    GetBraid,
    Set(SetRequest),
    SetBraid(sync::ConfigText),
}

impl Request {
    pub fn operation(&self) -> Operation {
        match self {
            Request::Get | Request::GetMore(_) => Operation::Get,
            Request::GetBraid => Operation::GetBraid,
            Request::Set(_) => Operation::Set,
            Request::SetBraid(_) => Operation::SetBraid,
        }
    }
}

/// A `set=1` request, typed. Apply it in this order, as wireguard-go does:
/// device fields, then `replace_peers`, then each peer update in sequence.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SetRequest {
    /// `Some(None)`: remove the private key (empty or all-zero value).
    pub private_key: Option<Option<PrivateKey>>,
    pub listen_port: Option<u16>,
    /// `Some(0)` removes the mark.
    pub fwmark: Option<u32>,
    pub replace_peers: bool,
    pub peers: Vec<PeerUpdate>,
}

/// Changes to one peer. When `remove` is set, the other fields are
/// meaningless: the peer is removed (or, if absent, nothing happens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerUpdate {
    pub public_key: PublicKey,
    pub remove: bool,
    /// Do not create the peer if it does not exist.
    pub update_only: bool,
    /// `Some(None)`: remove the preshared key (all-zero or empty value).
    pub preshared_key: Option<Option<PresharedKey>>,
    pub endpoint: Option<SocketAddr>,
    /// `Some(0)` disables keepalives.
    pub persistent_keepalive_interval: Option<u16>,
    /// Drop the peer's existing allowed IPs before adding `allowed_ips`.
    /// An `allowed_ip` line before `replace_allowed_ips=true` is discarded,
    /// so the sequential semantics of the wire format survive.
    pub replace_allowed_ips: bool,
    pub allowed_ips: Vec<IpCidr>,
    pub protocol_version: Option<u32>,
}

impl PeerUpdate {
    pub fn new(public_key: PublicKey) -> Self {
        PeerUpdate {
            public_key,
            remove: false,
            update_only: false,
            preshared_key: None,
            endpoint: None,
            persistent_keepalive_interval: None,
            replace_allowed_ips: false,
            allowed_ips: Vec::new(),
            protocol_version: None,
        }
    }
}

/// What the handler answers.
#[derive(Debug)]
pub enum Response {
    /// Success without data (the answer to `set=1`).
    Ok,
    /// Answer to `get=1`.
    Get(DeviceSnapshot),
    /// Part of an answer to `get=1`, as text: with `more`, [`serve`] asks
    /// for the next part ([`Request::GetMore`]) and writes it after this
    /// one, so the answer streams out without being held whole.
    GetPart {
        text: Zeroizing<String>,
        more: Option<GetCursor>,
    },
    /// Answer to `get=braid`.
    Braid(DeviceSnapshot),
    /// Answer to `set=braid`: what changed and what waits for a restart,
    /// or why nothing changed.
    Synced(Result<Vec<String>, String>),
    Error(Errno),
}

/// The device state a `get` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceSnapshot {
    pub private_key: Option<PrivateKey>,
    /// Derived from `private_key`; kept separately because snapshots that
    /// crossed the braid socket carry no private key but still show this.
    pub public_key: Option<PublicKey>,
    pub listen_port: u16,
    pub fwmark: u32,
    pub peers: Vec<PeerSnapshot>,
    /// braid's device-wide counters, in display order.
    pub extra: Vec<(String, u64)>,
    /// braid: the daemon's last events at info and above (`braid top`).
    pub events: Vec<crate::log::RecentEvent>,
}

impl DeviceSnapshot {
    /// A snapshot with `public_key` filled in from `private_key`.
    pub fn new(private_key: Option<PrivateKey>, listen_port: u16, fwmark: u32) -> Self {
        DeviceSnapshot {
            public_key: private_key.as_ref().map(PrivateKey::public_key),
            private_key,
            listen_port,
            fwmark,
            peers: Vec::new(),
            extra: Vec::new(),
            events: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSnapshot {
    pub public_key: PublicKey,
    pub preshared_key: Option<PresharedKey>,
    pub endpoint: Option<SocketAddr>,
    pub last_handshake: Option<SystemTime>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub persistent_keepalive_interval: u16,
    pub allowed_ips: Vec<IpCidr>,
    /// braid's per-peer counters, in display order.
    pub extra: Vec<(String, u64)>,
    /// braid: `redundant`, `failover` or `aggregate` (empty: not reported).
    pub mode: String,
    /// braid: the lines to this peer and what each measured.
    pub paths: Vec<PathSnapshot>,
    /// braid: the data cipher of the current session (empty: none/unknown).
    pub cipher: String,
}

/// One line to a peer, as `braid show` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathSnapshot {
    pub name: String,
    pub remote: SocketAddr,
    /// `up`, `down` or `unknown` (not probed: the peer is stock WireGuard).
    pub state: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub first_arrivals: u64,
    /// Data messages re-sent on this line because another lost them.
    #[serde(default)]
    pub resent: u64,
    pub rtt_us: Option<u64>,
    pub jitter_us: Option<u64>,
    /// Probe loss, 0..=1: round trip, towards the peer, from the peer.
    pub loss: f64,
    pub loss_out: f64,
    pub loss_in: f64,
    /// Path MTU discovery on this line (`None`: not running, e.g. a stock
    /// WireGuard peer).
    #[serde(default)]
    pub pmtu: Option<PmtuSnapshot>,
    /// What the line towards the peer carries (`None`: not measured, e.g.
    /// a stock WireGuard peer).
    #[serde(default)]
    pub estimate: Option<EstimateSnapshot>,
}

/// The aggregate scheduler's view of one line towards the peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimateSnapshot {
    /// Estimated capacity and what the latest report interval delivered,
    /// bits per second.
    pub rate_bps: u64,
    pub delivered_bps: u64,
    /// What this side sends on the line now, bits per second, and its
    /// share of what it sends on all lines to the peer (0..=1).
    pub send_bps: u64,
    pub share: f64,
    /// Queue on the line (one-way delay above its minimum), microseconds.
    pub queue_us: Option<u64>,
    /// Data lost on the line while it was not full (0..=1).
    pub data_loss: f64,
}

impl Eq for PathSnapshot {}

/// What path MTU discovery found on one line (sizes are tunnel MTUs: the
/// inner packet the line carries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmtuSnapshot {
    /// `base`, `search`, `complete`, `error` (even the base did not fit).
    pub state: String,
    /// What data may use now.
    pub mtu: usize,
    /// The search's ceiling, from the local line's MTU.
    pub max: usize,
    /// Largest size confirmed, smallest size that failed.
    pub fits: usize,
    pub too_big: Option<usize>,
    /// The size a probe is out for now.
    pub probing: Option<usize>,
    pub probes_sent: u64,
    pub probes_lost: u64,
    pub black_holes: u64,
}

impl PeerSnapshot {
    pub fn new(public_key: PublicKey) -> Self {
        PeerSnapshot {
            public_key,
            preshared_key: None,
            endpoint: None,
            last_handshake: None,
            rx_bytes: 0,
            tx_bytes: 0,
            persistent_keepalive_interval: 0,
            allowed_ips: Vec::new(),
            extra: Vec::new(),
            mode: String::new(),
            cipher: String::new(),
            paths: Vec::new(),
        }
    }
}

/// A request that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UapiError {
    pub errno: Errno,
    /// For logs. Never contains key material.
    pub message: String,
    /// The stream can no longer be framed (oversize line, truncated input,
    /// unknown operation): answer, then close the connection.
    pub fatal: bool,
    /// The operation, if the first line was understood.
    pub operation: Option<Operation>,
}

impl std::fmt::Display for UapiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UAPI error {}: {}", self.errno.0, self.message)
    }
}

impl std::error::Error for UapiError {}

fn invalid(message: impl Into<String>) -> UapiError {
    UapiError {
        errno: Errno::EINVAL,
        message: message.into(),
        fatal: false,
        operation: None,
    }
}

fn fatal(errno: Errno, message: impl Into<String>) -> UapiError {
    UapiError {
        errno,
        message: message.into(),
        fatal: true,
        operation: None,
    }
}

// ---------------------------------------------------------------------------
// Reading requests

struct LineReader<'a, R> {
    r: &'a mut R,
    buf: Vec<u8>,
    total: usize,
}

impl<R: BufRead> LineReader<'_, R> {
    /// `Ok(None)` at a clean end of input; the line is in `self.buf`
    /// without its newline.
    fn next(&mut self) -> Result<Option<()>, UapiError> {
        self.buf.clear();
        let n = self
            .r
            .by_ref()
            .take(MAX_LINE_LEN as u64 + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| fatal(Errno::EIO, format!("read failed: {e}")))?;
        if n == 0 {
            return Ok(None);
        }
        if self.buf.last() != Some(&b'\n') {
            return Err(if n > MAX_LINE_LEN {
                fatal(Errno::EPROTO, "line too long")
            } else {
                fatal(Errno::EPROTO, "unexpected end of input inside a request")
            });
        }
        // n <= MAX_LINE_LEN + 1 and total <= MAX_REQUEST_LEN before this
        // line (checked each time): the sum cannot overflow.
        self.total += n;
        if self.total > MAX_REQUEST_LEN {
            return Err(fatal(Errno::EPROTO, "request too large"));
        }
        self.buf.pop();
        Ok(Some(()))
    }

    /// Next line of a request body; `None` at the terminating blank line.
    fn body_line(&mut self) -> Result<Option<&str>, UapiError> {
        match self.next()? {
            None => Err(fatal(
                Errno::EPROTO,
                "unexpected end of input (missing blank line)",
            )),
            Some(()) if self.buf.is_empty() => Ok(None),
            Some(()) => std::str::from_utf8(&self.buf)
                .map(Some)
                .map_err(|_| invalid("line is not valid UTF-8")),
        }
    }
}

/// Reads one request. `Ok(None)` means the peer closed the stream cleanly
/// between requests. After a non-fatal error the whole request has been
/// consumed, so the next call starts at the next request.
pub fn read_request<R: BufRead>(r: &mut R) -> Result<Option<Request>, UapiError> {
    let mut lines = LineReader {
        r,
        buf: Vec::with_capacity(128),
        total: 0,
    };
    if lines.next()?.is_none() {
        return Ok(None);
    }
    let op = match lines.buf.as_slice() {
        b"get=1" => Operation::Get,
        b"get=braid" => Operation::GetBraid,
        b"set=1" => Operation::Set,
        b"set=braid" => Operation::SetBraid,
        _ => return Err(fatal(Errno::EPROTO, "unknown operation")),
    };
    let mut set = SetParser::default();
    let mut sync = sync::SyncParser::default();
    let mut first_error: Option<UapiError> = None;
    loop {
        let line = match lines.body_line() {
            Ok(None) => break,
            Ok(Some(line)) => line,
            Err(mut e) if e.fatal => {
                e.operation = Some(op);
                return Err(e);
            }
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        if first_error.is_some() {
            continue; // keep consuming up to the blank line to stay in sync
        }
        let result = match op {
            Operation::Get | Operation::GetBraid => Err(invalid("get takes no arguments")),
            Operation::Set => set.line(line),
            Operation::SetBraid => sync.line(line),
        };
        if let Err(e) = result {
            first_error = Some(e);
        }
    }
    if let Some(mut e) = first_error {
        e.operation = Some(op);
        return Err(e);
    }
    Ok(Some(match op {
        Operation::Get => Request::Get,
        Operation::GetBraid => Request::GetBraid,
        Operation::Set => Request::Set(set.req),
        Operation::SetBraid => Request::SetBraid(sync.finish().map_err(|mut e| {
            e.operation = Some(op);
            e
        })?),
    }))
}

/// Parses a complete request held in memory (tests, tools).
pub fn parse_request(text: &str) -> Result<Request, UapiError> {
    let mut cursor = io::Cursor::new(text.as_bytes());
    let req = read_request(&mut cursor)?.ok_or_else(|| fatal(Errno::EPROTO, "empty request"))?;
    if (cursor.position() as usize) < text.len() {
        return Err(invalid("trailing data after request"));
    }
    Ok(req)
}

#[derive(Default)]
struct SetParser {
    req: SetRequest,
    /// The public keys so far: a key repeated within one request is
    /// found in O(1), not by a walk of the peers before it.
    keys: std::collections::HashSet<PublicKey>,
}

/// The unsigned field types of a `set=1` request, with their largest value
/// for the error message.
trait Field: TryFrom<u64> {
    const MAX: u64;
}

impl Field for u16 {
    const MAX: u64 = u16::MAX as u64;
}

impl Field for u32 {
    const MAX: u64 = u32::MAX as u64;
}

/// Decimal without sign or spaces; `str::parse` alone would take "+1".
/// Nothing wraps: a value above u64 fails to parse, one above the field's
/// type fails `try_from`, and both are an error that names the key (the
/// whole request is then refused, so nothing of it is applied).
fn number<T: Field>(key: &str, value: &str) -> Result<T, UapiError> {
    if !value.is_empty() && value.len() <= 20 && value.bytes().all(|b| b.is_ascii_digit()) {
        if let Some(v) = value.parse::<u64>().ok().and_then(|v| T::try_from(v).ok()) {
            return Ok(v);
        }
    }
    Err(invalid(format!(
        "invalid {key}: {value:?} is not a number from 0 to {}",
        T::MAX
    )))
}

fn flag(key: &str, value: &str) -> Result<bool, UapiError> {
    if value == "true" {
        Ok(true)
    } else {
        Err(invalid(format!("invalid {key}: only \"true\" is accepted")))
    }
}

impl SetParser {
    fn line(&mut self, line: &str) -> Result<(), UapiError> {
        let (key, value) = line.split_once('=').ok_or_else(|| UapiError {
            errno: Errno::EPROTO,
            ..invalid("line is not key=value")
        })?;
        if key == "public_key" {
            let pk = PublicKey::from_hex(value)
                .and_then(PublicKey::usable_for_peer)
                .map_err(|e| invalid(format!("invalid public_key: {e}")))?;
            if !self.keys.insert(pk) {
                return Err(invalid("public_key repeated within one request"));
            }
            self.req.peers.push(PeerUpdate::new(pk));
            return Ok(());
        }
        let Some(peer) = self.req.peers.last_mut() else {
            return self.device_line(key, value);
        };
        match key {
            "remove" => peer.remove = flag(key, value)?,
            "update_only" => peer.update_only = flag(key, value)?,
            "preshared_key" => {
                peer.preshared_key = Some(if value.is_empty() {
                    None
                } else {
                    let k = PresharedKey::from_hex(value)
                        .map_err(|e| invalid(format!("invalid preshared_key: {e}")))?;
                    (!k.is_zero()).then_some(k)
                })
            }
            "endpoint" => {
                peer.endpoint = Some(
                    value
                        .parse()
                        .map_err(|_| invalid(format!("invalid endpoint: {value:?}")))?,
                )
            }
            "persistent_keepalive_interval" => {
                peer.persistent_keepalive_interval = Some(number(key, value)?)
            }
            "replace_allowed_ips" => {
                peer.replace_allowed_ips = flag(key, value)?;
                peer.allowed_ips.clear();
            }
            "allowed_ip" => {
                // Unlike config files, the UAPI always carries the length.
                if !value.contains('/') {
                    return Err(invalid(format!("invalid allowed_ip: {value:?}")));
                }
                peer.allowed_ips.push(
                    value
                        .parse()
                        .map_err(|_| invalid(format!("invalid allowed_ip: {value:?}")))?,
                )
            }
            "protocol_version" => {
                let v: u32 = number(key, value)?;
                if v != 1 {
                    return Err(invalid(format!("unsupported protocol_version {v}")));
                }
                peer.protocol_version = Some(v);
            }
            _ => return Err(invalid(format!("invalid peer key {key:?}"))),
        }
        Ok(())
    }

    fn device_line(&mut self, key: &str, value: &str) -> Result<(), UapiError> {
        let req = &mut self.req;
        match key {
            "private_key" => {
                req.private_key = Some(if value.is_empty() {
                    None
                } else {
                    let k = PrivateKey::from_hex(value)
                        .map_err(|e| invalid(format!("invalid private_key: {e}")))?;
                    (!k.is_zero()).then_some(k)
                })
            }
            "listen_port" => req.listen_port = Some(number(key, value)?),
            "fwmark" => req.fwmark = Some(number(key, value)?),
            "replace_peers" => req.replace_peers = flag(key, value)?,
            _ => return Err(invalid(format!("invalid device key {key:?}"))),
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Writing responses

/// The `errno=` line's sign differs by operation because `wg` reads the two
/// replies differently: after a set it takes the number as a negative errno
/// (wireguard-go sends `errno=-22`), after a get its parser only accepts
/// digits and negates them itself.
pub fn format_errno(op: Option<Operation>, errno: Errno) -> String {
    // unsigned_abs: i32::MIN.abs() would overflow (and print "--").
    let n = errno.0.unsigned_abs();
    if op == Some(Operation::Get) || n == 0 {
        format!("errno={n}\n\n")
    } else {
        format!("errno=-{n}\n\n")
    }
}

pub(crate) fn secs_nsecs(t: Option<SystemTime>) -> (u64, u32) {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or((0, 0), |d| (d.as_secs(), d.subsec_nanos()))
}

// The JSON shape of `get=braid`. Secrets are absent by construction: these
// structs have no field that could hold one.
#[derive(Serialize, Deserialize)]
pub(crate) struct DeviceJson {
    public_key: Option<PublicKey>,
    listen_port: u16,
    fwmark: u32,
    peers: Vec<PeerJson>,
    extra: Vec<(String, u64)>,
    #[serde(default)]
    events: Vec<crate::log::RecentEvent>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct PeerJson {
    public_key: PublicKey,
    has_preshared_key: bool,
    endpoint: Option<SocketAddr>,
    last_handshake_time_sec: u64,
    last_handshake_time_nsec: u32,
    rx_bytes: u64,
    tx_bytes: u64,
    persistent_keepalive_interval: u16,
    allowed_ips: Vec<IpCidr>,
    extra: Vec<(String, u64)>,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    paths: Vec<PathSnapshot>,
    #[serde(default)]
    cipher: String,
}

/// Single-line JSON of a snapshot, without the private or preshared keys.
pub fn snapshot_to_json(snap: &DeviceSnapshot) -> String {
    serde_json::to_string(&json_view(snap)).expect("plain data always serializes")
}

pub(crate) fn json_view(snap: &DeviceSnapshot) -> DeviceJson {
    DeviceJson {
        public_key: snap
            .public_key
            .or_else(|| snap.private_key.as_ref().map(PrivateKey::public_key)),
        listen_port: snap.listen_port,
        fwmark: snap.fwmark,
        peers: snap
            .peers
            .iter()
            .map(|p| {
                let (sec, nsec) = secs_nsecs(p.last_handshake);
                PeerJson {
                    public_key: p.public_key,
                    has_preshared_key: p.preshared_key.is_some(),
                    endpoint: p.endpoint,
                    last_handshake_time_sec: sec,
                    last_handshake_time_nsec: nsec,
                    rx_bytes: p.rx_bytes,
                    tx_bytes: p.tx_bytes,
                    persistent_keepalive_interval: p.persistent_keepalive_interval,
                    allowed_ips: p.allowed_ips.clone(),
                    extra: p.extra.clone(),
                    mode: p.mode.clone(),
                    paths: p.paths.clone(),
                    cipher: p.cipher.clone(),
                }
            })
            .collect(),
        extra: snap.extra.clone(),
        events: snap.events.clone(),
    }
}

/// Inverse of [`snapshot_to_json`]. The secrets were never sent: the
/// private key is `None`, and a peer that has a preshared key gets an
/// all-zero placeholder, which is enough for display but must not be used
/// to configure anything.
pub fn snapshot_from_json(json: &str) -> Result<DeviceSnapshot, serde_json::Error> {
    let dev: DeviceJson = serde_json::from_str(json)?;
    Ok(DeviceSnapshot {
        private_key: None,
        public_key: dev.public_key,
        listen_port: dev.listen_port,
        fwmark: dev.fwmark,
        peers: dev
            .peers
            .into_iter()
            .map(|p| {
                Ok(PeerSnapshot {
                    public_key: p.public_key,
                    preshared_key: p
                        .has_preshared_key
                        .then(|| PresharedKey::from_bytes([0; 32])),
                    endpoint: p.endpoint,
                    last_handshake: handshake_time(
                        p.last_handshake_time_sec,
                        p.last_handshake_time_nsec,
                    )?,
                    rx_bytes: p.rx_bytes,
                    tx_bytes: p.tx_bytes,
                    persistent_keepalive_interval: p.persistent_keepalive_interval,
                    allowed_ips: p.allowed_ips,
                    extra: p.extra,
                    mode: p.mode,
                    paths: p.paths,
                    cipher: p.cipher,
                })
            })
            .collect::<Result<_, serde_json::Error>>()?,
        extra: dev.extra,
        events: dev.events,
    })
}

/// A handshake time as the JSON carries it (0/0: none). The reply comes
/// from another process: a time `SystemTime` cannot hold, or nanoseconds
/// past a second, is an error rather than a panic in `Duration::new` or
/// `UNIX_EPOCH + …`.
fn handshake_time(sec: u64, nsec: u32) -> Result<Option<SystemTime>, serde_json::Error> {
    if sec == 0 && nsec == 0 {
        return Ok(None);
    }
    let out_of_range = || {
        <serde_json::Error as serde::de::Error>::custom(format!(
            "last_handshake_time {sec}.{nsec:09} is out of range"
        ))
    };
    if nsec >= 1_000_000_000 {
        return Err(out_of_range());
    }
    UNIX_EPOCH
        .checked_add(Duration::new(sec, nsec))
        .map(Some)
        .ok_or_else(out_of_range)
}

/// The `get=braid` reply.
pub fn format_braid(snap: &DeviceSnapshot) -> String {
    format!("json={}\nerrno=0\n\n", snapshot_to_json(snap))
}

impl Response {
    /// Wire form, given the operation it answers (see [`format_errno`]);
    /// zeroized when dropped, since a `get` reply holds the keys.
    pub fn to_wire(&self, op: Option<Operation>) -> Zeroizing<String> {
        match self {
            Response::Ok => Zeroizing::new("errno=0\n\n".to_string()),
            Response::Get(snap) => format_get(snap),
            Response::GetPart { text, .. } => text.clone(),
            Response::Braid(snap) => Zeroizing::new(format_braid(snap)),
            Response::Synced(outcome) => Zeroizing::new(sync::format_reply(outcome)),
            Response::Error(errno) => Zeroizing::new(format_errno(op, *errno)),
        }
    }
}

// ---------------------------------------------------------------------------
// Transport

/// Serves requests from `r` until end of input or a framing error, writing
/// each reply to `w` as soon as it is ready.
pub fn serve<R: BufRead, W: Write>(
    r: &mut R,
    w: &mut W,
    handler: &mut impl FnMut(Request) -> Response,
) -> io::Result<()> {
    loop {
        match read_request(r) {
            Ok(None) => return Ok(()),
            Ok(Some(req)) => {
                let op = req.operation();
                let mut resp = handler(req);
                loop {
                    match &resp {
                        // Written as it is: no copy of a part that holds keys.
                        Response::GetPart { text, .. } => w.write_all(text.as_bytes())?,
                        _ => w.write_all(resp.to_wire(Some(op)).as_bytes())?,
                    }
                    match resp {
                        Response::GetPart {
                            more: Some(next), ..
                        } => resp = handler(Request::GetMore(next)),
                        _ => break,
                    }
                }
                w.flush()?;
            }
            Err(e) => {
                // The peer may already be gone; nothing more to do then.
                let _ = w
                    .write_all(format_errno(e.operation, e.errno).as_bytes())
                    .and_then(|()| w.flush());
                if e.fatal {
                    return Ok(());
                }
            }
        }
    }
}

/// Serves one accepted connection of the control socket.
pub fn serve_connection(
    stream: UnixStream,
    handler: &mut impl FnMut(Request) -> Response,
) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    serve(&mut reader, &mut writer, handler)
}

/// Sends `request_text` (a complete request, blank line included) and
/// returns the raw reply.
pub fn query(path: impl AsRef<Path>, request_text: &str) -> io::Result<String> {
    let mut stream = UnixStream::connect(path)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    stream.write_all(request_text.as_bytes())?;
    // Half-close so the server sees end of input after our one request and
    // closes its side once it has answered.
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    stream.take(MAX_RESPONSE_LEN).read_to_string(&mut reply)?;
    Ok(reply)
}

/// The errno of a reply (0 on success), if it has an `errno=` line.
pub fn reply_errno(reply: &str) -> Option<i64> {
    reply
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("errno="))
        .and_then(|v| v.parse().ok())
}

/// Runs `get=braid` against a socket and decodes the answer.
pub fn query_braid(path: impl AsRef<Path>) -> io::Result<DeviceSnapshot> {
    parse_braid_reply(&query(path, "get=braid\n\n")?)
}

/// Decodes a `get=braid` reply.
fn parse_braid_reply(reply: &str) -> io::Result<DeviceSnapshot> {
    let proto = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    match reply_errno(reply) {
        Some(0) => {}
        // An errno beyond i32 is no errno: truncated, it could read as
        // any error (4294967297 as 1, EPERM).
        Some(n) => {
            return Err(match i32::try_from(n.unsigned_abs()) {
                Ok(errno) => io::Error::from_raw_os_error(errno),
                Err(_) => proto(format!("reply has errno={n}, out of range")),
            })
        }
        None => return Err(proto("reply has no errno line".into())),
    }
    let json = reply
        .lines()
        .find_map(|l| l.strip_prefix("json="))
        .ok_or_else(|| proto("reply has no json line".into()))?;
    snapshot_from_json(json).map_err(|e| proto(format!("bad json in reply: {e}")))
}

#[cfg(test)]
mod tests;
