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

/// Longest accepted line, newline excluded. `wg` never sends more than a
/// key plus a 4096-byte host name.
pub const MAX_LINE_LEN: usize = 4096;
/// Largest accepted request; room for tens of thousands of allowed IPs.
pub const MAX_REQUEST_LEN: usize = 8 << 20;
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Get,
    GetBraid,
    Set(SetRequest),
}

impl Request {
    pub fn operation(&self) -> Operation {
        match self {
            Request::Get => Operation::Get,
            Request::GetBraid => Operation::GetBraid,
            Request::Set(_) => Operation::Set,
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
    /// Answer to `get=braid`.
    Braid(DeviceSnapshot),
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
        _ => return Err(fatal(Errno::EPROTO, "unknown operation")),
    };
    let mut set = SetParser::default();
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
            if self.req.peers.iter().any(|p| p.public_key == pk) {
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

fn secs_nsecs(t: Option<SystemTime>) -> (u64, u32) {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or((0, 0), |d| (d.as_secs(), d.subsec_nanos()))
}

/// Text that holds keys (the `get=1` reply): a buffer it outgrows is
/// zeroized before it is freed, and so is the last one when the text is
/// dropped, so no copy of a key stays behind in freed memory.
struct SecretText(Zeroizing<String>);

impl std::fmt::Write for SecretText {
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

/// The `get=1` reply, in wireguard-go's key order; zeroized when dropped.
pub fn format_get(snap: &DeviceSnapshot) -> Zeroizing<String> {
    use std::fmt::Write as _;
    let mut out = SecretText(Zeroizing::new(String::with_capacity(
        256 + snap.peers.len() * 400,
    )));
    if let Some(sk) = &snap.private_key {
        let _ = writeln!(out, "private_key={}", &*sk.to_hex());
    }
    let _ = writeln!(out, "listen_port={}", snap.listen_port);
    if snap.fwmark != 0 {
        let _ = writeln!(out, "fwmark={}", snap.fwmark);
    }
    for p in &snap.peers {
        let _ = writeln!(out, "public_key={}", p.public_key.to_hex());
        match &p.preshared_key {
            Some(psk) => {
                let _ = writeln!(out, "preshared_key={}", &*psk.to_hex());
            }
            None => {
                let _ = writeln!(out, "preshared_key={}", "0".repeat(64));
            }
        }
        let _ = out.write_str("protocol_version=1\n");
        if let Some(ep) = p.endpoint {
            let _ = writeln!(out, "endpoint={ep}");
        }
        let (sec, nsec) = secs_nsecs(p.last_handshake);
        let _ = writeln!(out, "last_handshake_time_sec={sec}");
        let _ = writeln!(out, "last_handshake_time_nsec={nsec}");
        let _ = writeln!(out, "tx_bytes={}", p.tx_bytes);
        let _ = writeln!(out, "rx_bytes={}", p.rx_bytes);
        let _ = writeln!(
            out,
            "persistent_keepalive_interval={}",
            p.persistent_keepalive_interval
        );
        for ip in &p.allowed_ips {
            let _ = writeln!(out, "allowed_ip={ip}");
        }
    }
    let _ = out.write_str("errno=0\n\n");
    out.0
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
            Response::Braid(snap) => Zeroizing::new(format_braid(snap)),
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
                let resp = handler(req);
                w.write_all(resp.to_wire(Some(op)).as_bytes())?;
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SPEC_SET: &str = "set=1
private_key=e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a
fwmark=0
listen_port=12912
replace_peers=true
public_key=b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33
preshared_key=188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52
replace_allowed_ips=true
allowed_ip=192.168.4.4/32
endpoint=[abcd:23::33%2]:51820
public_key=58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376
replace_allowed_ips=true
allowed_ip=192.168.4.6/32
persistent_keepalive_interval=111
endpoint=182.122.22.19:3233
public_key=662e14fd594556f522604703340351258903b64f35553763f19426ab2a515c58
endpoint=5.152.198.39:51820
replace_allowed_ips=true
allowed_ip=192.168.4.10/32
allowed_ip=192.168.4.11/32
public_key=e818b58db5274087fcc1be5dc728cf53d3b5726b4cef6b9bab8f8f8c2452c25c
remove=true

";

    fn pk(hex: &str) -> PublicKey {
        PublicKey::from_hex(hex).unwrap()
    }

    #[test]
    fn spec_set_example() {
        let Request::Set(s) = parse_request(SPEC_SET).unwrap() else {
            panic!("not a set")
        };
        let sk = s.private_key.clone().unwrap().unwrap();
        assert_eq!(
            *sk.to_hex(),
            "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a"
        );
        assert_eq!(s.fwmark, Some(0));
        assert_eq!(s.listen_port, Some(12912));
        assert!(s.replace_peers);
        assert_eq!(s.peers.len(), 4);

        let p = &s.peers[0];
        assert_eq!(
            p.public_key,
            pk("b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33")
        );
        assert_eq!(
            *p.preshared_key.clone().unwrap().unwrap().to_hex(),
            "188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52"
        );
        assert!(p.replace_allowed_ips);
        assert_eq!(p.allowed_ips, ["192.168.4.4/32".parse().unwrap()]);
        let ep = p.endpoint.unwrap();
        assert_eq!(ep.to_string(), "[abcd:23::33%2]:51820");
        let SocketAddr::V6(v6) = ep else { panic!() };
        assert_eq!(v6.scope_id(), 2);

        let p = &s.peers[1];
        assert_eq!(p.persistent_keepalive_interval, Some(111));
        assert_eq!(p.endpoint, Some("182.122.22.19:3233".parse().unwrap()));

        let p = &s.peers[2];
        assert_eq!(p.allowed_ips.len(), 2);
        assert!(!p.remove && p.preshared_key.is_none());

        let p = &s.peers[3];
        assert!(p.remove);
        assert_eq!(
            p.public_key,
            pk("e818b58db5274087fcc1be5dc728cf53d3b5726b4cef6b9bab8f8f8c2452c25c")
        );
    }

    #[test]
    fn get_requests() {
        assert_eq!(parse_request("get=1\n\n").unwrap(), Request::Get);
        assert_eq!(parse_request("get=braid\n\n").unwrap(), Request::GetBraid);
        let e = parse_request("get=1\nfoo=bar\n\n").unwrap_err();
        assert_eq!((e.errno, e.fatal), (Errno::EINVAL, false));
    }

    #[test]
    fn removal_values() {
        let zero = "0".repeat(64);
        let text = format!(
            "set=1\nprivate_key=\npublic_key={}\npreshared_key={zero}\n\n",
            "11".repeat(32)
        );
        let Request::Set(s) = parse_request(&text).unwrap() else {
            panic!()
        };
        assert_eq!(s.private_key, Some(None));
        assert_eq!(s.peers[0].preshared_key, Some(None));
        let text = format!("set=1\nprivate_key={zero}\n\n");
        let Request::Set(s) = parse_request(&text).unwrap() else {
            panic!()
        };
        assert_eq!(s.private_key, Some(None));
    }

    #[test]
    fn allowed_ips_before_replace_are_dropped() {
        let text = format!(
            "set=1\npublic_key={}\nallowed_ip=10.0.0.1/32\nreplace_allowed_ips=true\nallowed_ip=10.0.0.2/32\n\n",
            "11".repeat(32)
        );
        let Request::Set(s) = parse_request(&text).unwrap() else {
            panic!()
        };
        assert_eq!(s.peers[0].allowed_ips, ["10.0.0.2/32".parse().unwrap()]);
    }

    #[test]
    fn malformed_requests() {
        let key = "11".repeat(32);
        let cases: Vec<(String, Errno, bool)> = vec![
            ("set=1\nlisten_port=1\n".into(), Errno::EPROTO, true), // no blank line
            ("set=1\nlisten_port=1".into(), Errno::EPROTO, true),
            ("set=2\n\n".into(), Errno::EPROTO, true),
            ("hello\n\n".into(), Errno::EPROTO, true),
            (
                format!("set=1\nx={}\n\n", "a".repeat(MAX_LINE_LEN)),
                Errno::EPROTO,
                true,
            ),
            ("set=1\nbogus=1\n\n".into(), Errno::EINVAL, false),
            ("set=1\nnoequals\n\n".into(), Errno::EPROTO, false),
            ("set=1\nlisten_port=65536\n\n".into(), Errno::EINVAL, false),
            ("set=1\nlisten_port=+1\n\n".into(), Errno::EINVAL, false),
            ("set=1\nfwmark=-1\n\n".into(), Errno::EINVAL, false),
            (
                "set=1\nreplace_peers=false\n\n".into(),
                Errno::EINVAL,
                false,
            ),
            ("set=1\nprivate_key=zz\n\n".into(), Errno::EINVAL, false),
            (
                format!("set=1\nprivate_key={}\n\n", "g".repeat(64)),
                Errno::EINVAL,
                false,
            ),
            ("set=1\npublic_key=abcd\n\n".into(), Errno::EINVAL, false),
            (
                format!("set=1\npublic_key={key}\nlisten_port=1\n\n"),
                Errno::EINVAL,
                false,
            ),
            (
                format!("set=1\npublic_key={key}\npublic_key={key}\n\n"),
                Errno::EINVAL,
                false,
            ),
            (
                format!("set=1\npublic_key={key}\nendpoint=host:1\n\n"),
                Errno::EINVAL,
                false,
            ),
            (
                format!("set=1\npublic_key={key}\nallowed_ip=10.0.0.1\n\n"),
                Errno::EINVAL,
                false,
            ),
            (
                format!("set=1\npublic_key={key}\nallowed_ip=10.0.0.1/33\n\n"),
                Errno::EINVAL,
                false,
            ),
            (
                format!("set=1\npublic_key={key}\nprotocol_version=2\n\n"),
                Errno::EINVAL,
                false,
            ),
            (
                format!("set=1\npublic_key={key}\ntx_bytes=1\n\n"),
                Errno::EINVAL,
                false,
            ),
            (
                format!("set=1\npublic_key={key}\nremove=1\n\n"),
                Errno::EINVAL,
                false,
            ),
            ("set=1\n\u{ff}=1\n\n".into(), Errno::EINVAL, false),
        ];
        for (text, errno, is_fatal) in cases {
            let e = parse_request(&text).expect_err(&text);
            assert_eq!((e.errno, e.fatal), (errno, is_fatal), "{text:?}: {e}");
        }
        // Raw invalid UTF-8 goes through the reader, not parse_request.
        let mut c = io::Cursor::new(b"set=1\n\xff\xfe=1\n\n".to_vec());
        assert_eq!(read_request(&mut c).unwrap_err().errno, Errno::EINVAL);
    }

    #[test]
    fn secret_text_keeps_every_byte_when_it_grows() {
        use std::fmt::Write as _;
        let mut t = SecretText(Zeroizing::new(String::with_capacity(4)));
        let mut plain = String::new();
        for i in 0..1000 {
            let _ = writeln!(t, "line {i} {}", "k".repeat(i % 70));
            let _ = writeln!(plain, "line {i} {}", "k".repeat(i % 70));
        }
        assert_eq!(*t.0, plain);
    }

    #[test]
    fn low_order_peer_keys_are_refused() {
        for key in ["00".repeat(32), format!("01{}", "00".repeat(31))] {
            let e = parse_request(&format!("set=1\npublic_key={key}\n\n")).unwrap_err();
            assert_eq!(e.errno, Errno::EINVAL);
            assert!(
                e.message
                    .starts_with("invalid public_key: a low-order point"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn secrets_not_in_error_messages() {
        let secret = "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba5202";
        for text in [
            format!("set=1\nprivate_key={secret}\n\n"),
            format!(
                "set=1\npublic_key={}\npreshared_key={secret}\n\n",
                "11".repeat(32)
            ),
        ] {
            let e = parse_request(&text).unwrap_err();
            assert!(!e.message.contains(&secret[..16]), "{}", e.message);
        }
    }

    #[test]
    fn errors_leave_the_stream_in_sync() {
        let input = "set=1\nbogus=1\nlisten_port=2\n\nget=1\n\nset=1\nlisten_port=3\n\n";
        let mut out = Vec::new();
        let mut seen = Vec::new();
        serve(&mut io::Cursor::new(input), &mut out, &mut |req| {
            seen.push(req);
            Response::Ok
        })
        .unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0], Request::Get);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "errno=-22\n\nerrno=0\n\nerrno=0\n\n"
        );
    }

    #[test]
    fn fatal_errors_end_the_connection() {
        let input = format!("get=1\n\nset=1\n{}\n\nget=1\n\n", "x".repeat(5000));
        let mut out = Vec::new();
        let mut n = 0;
        serve(&mut io::Cursor::new(input), &mut out, &mut |_| {
            n += 1;
            Response::Error(Errno::EIO)
        })
        .unwrap();
        assert_eq!(n, 1);
        // get errors are positive (wg's get parser rejects a sign).
        assert_eq!(String::from_utf8(out).unwrap(), "errno=5\n\nerrno=-71\n\n");
    }

    fn sample_snapshot() -> DeviceSnapshot {
        let sk = PrivateKey::from_hex(
            "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a",
        )
        .unwrap();
        let mut snap = DeviceSnapshot::new(Some(sk), 12912, 0);
        let mut p1 = PeerSnapshot::new(pk(
            "b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33",
        ));
        p1.preshared_key = Some(
            PresharedKey::from_hex(
                "188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52",
            )
            .unwrap(),
        );
        p1.endpoint = Some("[abcd:23::33%2]:51820".parse().unwrap());
        p1.allowed_ips = vec!["192.168.4.4/32".parse().unwrap()];
        p1.last_handshake = Some(UNIX_EPOCH + Duration::new(1_700_000_000, 5));
        p1.rx_bytes = 2224;
        p1.tx_bytes = 38333;
        p1.extra = vec![("paths_up".into(), 2), ("reordered".into(), 17)];
        let mut p2 = PeerSnapshot::new(pk(
            "58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376",
        ));
        p2.endpoint = Some("182.122.22.19:3233".parse().unwrap());
        p2.persistent_keepalive_interval = 111;
        p2.allowed_ips = vec![
            "192.168.4.6/32".parse().unwrap(),
            "fd00::/64".parse().unwrap(),
        ];
        snap.peers = vec![p1, p2];
        snap.extra = vec![("batches".into(), 99)];
        snap
    }

    #[test]
    fn get_reply_exact() {
        let expected = "\
private_key=e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a
listen_port=12912
public_key=b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33
preshared_key=188515093e952f5f22e865cef3012e72f8b5f0b598ac0309d5dacce3b70fcf52
protocol_version=1
endpoint=[abcd:23::33%2]:51820
last_handshake_time_sec=1700000000
last_handshake_time_nsec=5
tx_bytes=38333
rx_bytes=2224
persistent_keepalive_interval=0
allowed_ip=192.168.4.4/32
public_key=58402e695ba1772b1cc9309755f043251ea77fdcf10fbe63989ceb7e19321376
preshared_key=0000000000000000000000000000000000000000000000000000000000000000
protocol_version=1
endpoint=182.122.22.19:3233
last_handshake_time_sec=0
last_handshake_time_nsec=0
tx_bytes=0
rx_bytes=0
persistent_keepalive_interval=111
allowed_ip=192.168.4.6/32
allowed_ip=fd00::/64
errno=0

";
        let mut snap = sample_snapshot();
        assert_eq!(*format_get(&snap), expected);
        snap.fwmark = 7;
        assert!(format_get(&snap).contains("listen_port=12912\nfwmark=7\npublic_key="));
        // braid counters stay out of the stock reply.
        assert!(!format_get(&snap).contains("reordered"));
    }

    #[test]
    fn get_reply_round_trips_through_set_parser() {
        // The device part of a get reply is valid set syntax; feeding the
        // keys a set accepts back in must reproduce the snapshot.
        let snap = sample_snapshot();
        let settable: String = format_get(&snap)
            .lines()
            .filter(|l| {
                !l.starts_with("last_handshake")
                    && !l.starts_with("tx_bytes")
                    && !l.starts_with("rx_bytes")
                    && !l.starts_with("errno")
                    && !l.is_empty()
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let Request::Set(s) = parse_request(&format!("set=1\n{settable}\n")).unwrap() else {
            panic!()
        };
        assert_eq!(s.private_key.unwrap(), snap.private_key);
        assert_eq!(s.listen_port, Some(snap.listen_port));
        for (u, p) in s.peers.iter().zip(&snap.peers) {
            assert_eq!(u.public_key, p.public_key);
            assert_eq!(u.preshared_key.clone().unwrap(), p.preshared_key);
            assert_eq!(u.endpoint, p.endpoint);
            assert_eq!(u.allowed_ips, p.allowed_ips);
            assert_eq!(
                u.persistent_keepalive_interval,
                Some(p.persistent_keepalive_interval)
            );
            assert_eq!(u.protocol_version, Some(1));
        }
    }

    #[test]
    fn braid_reply_has_no_secrets_and_round_trips() {
        let snap = sample_snapshot();
        let reply = format_braid(&snap);
        assert!(reply.starts_with("json={"));
        assert!(reply.ends_with("}\nerrno=0\n\n"));
        assert_eq!(reply.lines().count(), 3);
        let sk = snap.private_key.as_ref().unwrap();
        let psk = snap.peers[0].preshared_key.as_ref().unwrap();
        for secret in [sk.to_hex(), sk.to_base64(), psk.to_hex(), psk.to_base64()] {
            assert!(!reply.contains(&secret[..20]));
        }
        let json = reply.lines().next().unwrap().strip_prefix("json=").unwrap();
        let back = snapshot_from_json(json).unwrap();
        assert_eq!(back.private_key, None);
        assert_eq!(back.public_key, snap.public_key);
        assert_eq!(back.extra, snap.extra);
        assert_eq!(back.peers.len(), 2);
        assert_eq!(back.peers[0].extra, snap.peers[0].extra);
        assert_eq!(back.peers[0].last_handshake, snap.peers[0].last_handshake);
        assert_eq!(back.peers[0].endpoint, snap.peers[0].endpoint);
        assert!(back.peers[0].preshared_key.is_some());
        assert!(back.peers[1].preshared_key.is_none());
        assert_eq!(back.peers[1].last_handshake, None);
        assert_eq!(back.peers[1].allowed_ips, snap.peers[1].allowed_ips);
    }

    #[test]
    fn numbers_out_of_range_name_their_key_and_apply_nothing() {
        let key = "11".repeat(32);
        for (line, name, max) in [
            ("listen_port=99999", "listen_port", "65535"),
            ("listen_port=65536", "listen_port", "65535"),
            ("fwmark=4294967296", "fwmark", "4294967295"),
            ("fwmark=18446744073709551616", "fwmark", "4294967295"),
            ("fwmark=99999999999999999999999", "fwmark", "4294967295"),
            (
                "persistent_keepalive_interval=4294967296",
                "persistent_keepalive_interval",
                "65535",
            ),
            (
                "persistent_keepalive_interval=65536",
                "persistent_keepalive_interval",
                "65535",
            ),
            (
                "protocol_version=4294967297",
                "protocol_version",
                "4294967295",
            ),
        ] {
            let peer = !line.starts_with("listen_port") && !line.starts_with("fwmark");
            let text = if peer {
                format!("set=1\npublic_key={key}\n{line}\n\n")
            } else {
                format!("set=1\n{line}\n\n")
            };
            let e = parse_request(&text).unwrap_err();
            assert_eq!((e.errno, e.fatal), (Errno::EINVAL, false), "{line}");
            assert!(
                e.message.contains(&format!("invalid {name}:")) && e.message.contains(max),
                "{line}: {}",
                e.message
            );
        }
        // The largest values that fit are taken as they are.
        let text = format!(
            "set=1\nlisten_port=65535\nfwmark=4294967295\npublic_key={key}\npersistent_keepalive_interval=65535\n\n"
        );
        let Request::Set(s) = parse_request(&text).unwrap() else {
            panic!("not a set")
        };
        assert_eq!(s.listen_port, Some(u16::MAX));
        assert_eq!(s.fwmark, Some(u32::MAX));
        assert_eq!(s.peers[0].persistent_keepalive_interval, Some(u16::MAX));

        // Served: the handler never sees the bad set (nothing is applied,
        // not even the valid line before the bad one), and the next
        // request is answered as usual.
        let input = "set=1\nlisten_port=1\nlisten_port=99999\n\nget=1\n\n";
        let mut out = Vec::new();
        let mut seen = Vec::new();
        serve(&mut io::Cursor::new(input), &mut out, &mut |req| {
            seen.push(req.operation());
            Response::Get(DeviceSnapshot::default())
        })
        .unwrap();
        assert_eq!(seen, [Operation::Get]);
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("errno=-22\n\nlisten_port=0\n"), "{out:?}");
    }

    #[test]
    fn errno_extremes_neither_overflow_nor_truncate() {
        assert_eq!(
            format_errno(Some(Operation::Set), Errno(i32::MIN)),
            "errno=-2147483648\n\n"
        );
        assert_eq!(
            format_errno(Some(Operation::Get), Errno(i32::MIN)),
            "errno=2147483648\n\n"
        );
        assert_eq!(
            format_errno(Some(Operation::Set), Errno(-22)),
            "errno=-22\n\n"
        );
        // 4294967297 truncated to i32 would be 1 (EPERM).
        for reply in ["errno=-4294967297\n\n", "errno=4294967297\n\n"] {
            let e = parse_braid_reply(reply).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{reply}");
            assert_eq!(e.raw_os_error(), None);
        }
        let e = parse_braid_reply("errno=-98\n\n").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
        let e = parse_braid_reply(&format!("errno={}\n\n", i64::MIN)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn handshake_times_out_of_range_are_an_error_not_a_panic() {
        let json_with = |sec: serde_json::Value, nsec: serde_json::Value| {
            let mut v: serde_json::Value =
                serde_json::from_str(&snapshot_to_json(&sample_snapshot())).unwrap();
            v["peers"][0]["last_handshake_time_sec"] = sec;
            v["peers"][0]["last_handshake_time_nsec"] = nsec;
            v.to_string()
        };
        let back = snapshot_from_json(&json_with(5.into(), 7.into())).unwrap();
        assert_eq!(
            back.peers[0].last_handshake,
            Some(UNIX_EPOCH + Duration::new(5, 7))
        );
        let back = snapshot_from_json(&json_with(0.into(), 0.into())).unwrap();
        assert_eq!(back.peers[0].last_handshake, None);
        for (sec, nsec) in [
            (5u64, 1_000_000_000u32),
            (u64::MAX, 999_999_999),
            (u64::MAX, u32::MAX),
            (i64::MAX as u64 + 1, 0),
        ] {
            let e = snapshot_from_json(&json_with(sec.into(), nsec.into()))
                .expect_err(&format!("{sec}.{nsec}"));
            assert!(e.to_string().contains("out of range"), "{e}");
            let reply = format!("json={}\nerrno=0\n\n", json_with(sec.into(), nsec.into()));
            assert_eq!(
                parse_braid_reply(&reply).unwrap_err().kind(),
                io::ErrorKind::InvalidData
            );
        }
    }

    #[test]
    fn unix_socket_round_trip() {
        let dir = std::env::temp_dir().join(format!("braid-uapi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            for _ in 0..3 {
                let (stream, _) = listener.accept().unwrap();
                serve_connection(stream, &mut |req| match req {
                    Request::Get => Response::Get(sample_snapshot()),
                    Request::GetBraid => Response::Braid(sample_snapshot()),
                    Request::Set(_) => Response::Error(Errno::EADDRINUSE),
                })
                .unwrap();
            }
        });
        let reply = query(&path, "get=1\n\n").unwrap();
        assert_eq!(reply, *format_get(&sample_snapshot()));
        assert_eq!(reply_errno(&reply), Some(0));
        let reply = query(&path, "set=1\nlisten_port=1\n\n").unwrap();
        assert_eq!(reply, "errno=-98\n\n");
        assert_eq!(reply_errno(&reply), Some(-98));
        let snap = query_braid(&path).unwrap();
        assert_eq!(snap.peers.len(), 2);
        server.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn drive(bytes: &[u8]) {
        let mut c = io::Cursor::new(bytes);
        loop {
            match read_request(&mut c) {
                Ok(None) => break,
                Ok(Some(_)) => {}
                Err(e) if e.fatal => break,
                Err(_) => {}
            }
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            drive(&bytes);
        }

        #[test]
        fn random_lines_never_panic(
            lines in proptest::collection::vec(
                prop_oneof![
                    Just("set=1".to_string()),
                    Just("get=1".to_string()),
                    Just(String::new()),
                    Just(format!("public_key={}", "ab".repeat(32))),
                    "[a-z_]{1,12}=[ -~]{0,70}",
                    "(listen_port|fwmark|persistent_keepalive_interval|endpoint|allowed_ip|preshared_key|private_key)=[0-9a-f:./\\[\\]%]{0,66}",
                ],
                0..24,
            )
        ) {
            let mut text = lines.join("\n");
            text.push('\n');
            drive(text.as_bytes());
        }
    }
}
