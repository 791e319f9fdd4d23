//! The wg-quick configuration file format (`/etc/wireguard/wg0.conf`).
//!
//! Accepted syntax follows wg-quick and `wg setconf`: case-insensitive
//! section and key names, `#` starts a comment anywhere on a line, values
//! are trimmed, list keys take comma-separated items and accumulate across
//! repeated lines. Unknown keys are errors, so a typo never silently turns a
//! setting off.
//!
//! Error messages name the file, the 1-based line and the key. They quote
//! offending values, except for secret keys, which are never echoed.
//!
//! A config file that group or others may read or write is refused before
//! it is read ([`check_private_file`]): it holds a private key.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cidr::IpCidr;
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use braid_core::cipher::CipherPolicy;
use braid_core::compress::CompressionPolicy;
use braid_core::device::PeerOptions;
use braid_core::path::{Mode, MAX_PATHS};
use braid_netem::units;

pub mod keys;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub interface: InterfaceConfig,
    pub peers: Vec<PeerConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceConfig {
    pub private_key: PrivateKey,
    pub addresses: Vec<IpCidr>,
    pub listen_port: Option<u16>,
    pub mtu: Option<u32>,
    pub table: Table,
    /// `None` when absent or `off`.
    pub fwmark: Option<u32>,
    /// Kept verbatim (addresses or search domains); braid does not apply DNS yet.
    pub dns: Vec<String>,
    pub pre_up: Vec<String>,
    pub post_up: Vec<String>,
    pub pre_down: Vec<String>,
    pub post_down: Vec<String>,
    pub save_config: bool,
    /// braid: the data cipher between braid peers (`Cipher =`, default auto).
    pub cipher: CipherPolicy,
    /// braid: how the MSS of TCP SYNs through the tunnel is clamped
    /// (`MssFix =`, default auto).
    pub mss_fix: MssFix,
    /// braid: `Compression =` towards braid peers (default off).
    pub compression: CompressionPolicy,
    /// braid: `FailClosed =` (default true): a full tunnel's table keeps an
    /// unreachable default route that outlives the daemon, so traffic meant
    /// for the tunnel is refused, not sent in the clear, if it dies.
    pub fail_closed: bool,
    /// braid: `MetricsListen =`, where `/metrics` is served (off when absent).
    pub metrics_listen: Option<SocketAddr>,
    /// braid: `LogLevel =`; `None` is info.
    pub log_level: Option<crate::log::Level>,
    /// braid: `RealtimePriority =`, the `SCHED_RR` priority of the data
    /// plane's threads; `None` (absent or `off`) is the normal class.
    pub realtime_priority: Option<u8>,
    /// braid: `Queues =`, the TUN's queues, each read by a thread of its
    /// own (default 1).
    pub queues: usize,
}

/// braid's `MssFix =`: the largest MSS a TCP SYN or SYN-ACK crossing the
/// tunnel may announce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MssFix {
    /// Follows the interface's current MTU.
    #[default]
    Auto,
    Fixed(u16),
    Off,
}

/// wg-quick's `Table =`: which routing table receives the AllowedIPs routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Table {
    #[default]
    Auto,
    Off,
    Id(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    pub public_key: PublicKey,
    pub preshared_key: Option<PresharedKey>,
    pub allowed_ips: Vec<IpCidr>,
    pub endpoint: Option<Endpoint>,
    /// Seconds; `Some(0)` means explicitly off.
    pub persistent_keepalive: Option<u16>,
    /// braid: further lines to this peer (`Path = NAME bind=… endpoint=…`).
    pub paths: Vec<PathConfig>,
    /// braid: how packets use the paths (`Mode =`, default redundant).
    pub mode: Mode,
    /// braid: reorder window ceiling (`ReorderHold =`; 0 turns it off).
    pub reorder_hold: Option<Duration>,
    /// braid: reorder window size in packets (`ReorderCapacity =`).
    pub reorder_capacity: Option<usize>,
    /// braid: this peer's `Cipher =`; `None` follows the interface's.
    pub cipher: Option<CipherPolicy>,
    /// braid: how the `Endpoint` and the paths without their own
    /// `transport=` reach this peer (`Transport =`, default udp).
    pub transport: Transport,
    /// braid: `RateLimit =` in bits per second, each direction.
    pub rate_limit: Option<u64>,
    /// braid: this peer's `Compression =`; `None` follows the interface's.
    pub compression: Option<CompressionPolicy>,
}

/// braid's `Transport =` / `transport=`: what carries the datagrams to a
/// peer. TCP is for networks that block UDP; both ends must be braid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    #[default]
    Udp,
    Tcp,
}

impl PeerConfig {
    /// braid's settings of this peer that the device takes as one.
    pub fn options(&self) -> PeerOptions {
        PeerOptions {
            mode: self.mode,
            cipher: self.cipher,
            rate_limit: self.rate_limit,
            compression: self.compression,
            reorder_hold: self.reorder_hold,
            reorder_capacity: self.reorder_capacity,
        }
    }

    /// The transport of path `path` of this peer.
    pub fn path_transport(&self, path: &PathConfig) -> Transport {
        path.transport.unwrap_or(self.transport)
    }
}

/// One `Path =` line: a local line (interface or source address, or the
/// main socket when absent) and the peer's endpoint over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathConfig {
    pub name: String,
    pub bind: Option<Bind>,
    pub endpoint: Endpoint,
    /// `transport=`; `None` follows the peer's `Transport =`.
    pub transport: Option<Transport>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bind {
    Interface(String),
    Address(IpAddr),
}

/// `host:port` or `[v6]:port`, unresolved: a host name is looked up when the
/// interface comes up, not when the file is parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Without brackets.
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let bad = || format!("invalid endpoint {s:?} (expected host:port or [IPv6]:port)");
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = after.strip_prefix(':').ok_or_else(bad)?;
            (host, port)
        } else {
            let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
            // An unbracketed IPv6 address is ambiguous about where the port starts.
            if host.contains(':') {
                return Err(bad());
            }
            (host, port)
        };
        if host.is_empty() || host.contains(char::is_whitespace) || host.contains(['[', ']']) {
            return Err(bad());
        }
        let port = parse_decimal(port)
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(bad)?;
        Ok(Endpoint {
            host: host.to_string(),
            port,
        })
    }

    /// First address the resolver returns, as `wg` does.
    pub fn resolve(&self) -> io::Result<SocketAddr> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{}: no addresses found", self),
                )
            })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A config file's name and text, as read by [`Config::load_with_text`].
pub struct ConfigFile {
    /// The file name, which errors name (`wg0.conf:7: ...`).
    pub name: String,
    pub text: zeroize::Zeroizing<String>,
}

/// Everything that can go wrong loading a configuration.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Io {
        /// The path as given to [`Config::load`].
        path: PathBuf,
        source: io::Error,
    },
    /// The text is not a valid configuration.
    Invalid {
        /// File name (or whatever label the caller passed to [`Config::parse`]).
        source_name: String,
        /// 1-based line number; `None` for whole-file problems.
        line: Option<usize>,
        /// Canonical key name (e.g. `ListenPort`) or, for an unknown key, the
        /// key as written. `None` for structural problems.
        key: Option<String>,
        /// What is wrong. Never contains a private or preshared key.
        message: String,
    },
    /// The file name does not make a valid interface name.
    InterfaceName { name: String, reason: &'static str },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Io { path, source } => write!(f, "{}: {}", path.display(), source),
            ConfigError::Invalid {
                source_name,
                line,
                key,
                message,
            } => {
                write!(f, "{source_name}")?;
                if let Some(line) = line {
                    write!(f, ":{line}")?;
                }
                if let Some(key) = key {
                    write!(f, ": key '{key}'")?;
                }
                write!(f, ": {message}")
            }
            ConfigError::InterfaceName { name, reason } => {
                write!(f, "invalid interface name {name:?}: {reason}")
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why a file with these permission bits must not hold a private key, or
/// `None` if it may. Any access by group or others counts: a group-writable
/// config can be made to route traffic anywhere.
pub fn shared_mode_problem(mode: u32, path: &Path) -> Option<String> {
    let mode = mode & 0o7777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "open to group or others (mode {mode:04o}), and it holds a private key; \
             braid refuses it: fix with `chmod 600 {}`",
            path.display()
        )
    })
}

/// Refuses a regular file that group or others may read or write (pipes
/// such as `/dev/stdin` are not checked: they are nobody else's).
pub fn check_private_file(path: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Ok(());
    }
    match shared_mode_problem(meta.permissions().mode(), path) {
        Some(problem) => Err(io::Error::new(io::ErrorKind::PermissionDenied, problem)),
        None => Ok(()),
    }
}

impl Config {
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        Config::load_with_text(path).map(|(config, _)| config)
    }

    /// [`load`](Self::load), also returning the file's text and name (what
    /// `braid syncconf` hands the daemon, which parses it the same way).
    /// The text holds the private key: it is zeroized when dropped.
    pub fn load_with_text(path: impl AsRef<Path>) -> Result<(Config, ConfigFile), ConfigError> {
        let path = path.as_ref();
        let io_err = |source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        };
        check_private_file(path).map_err(io_err)?;
        use std::io::Read as _;
        let mut bytes = zeroize::Zeroizing::new(Vec::new());
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
            .map_err(io_err)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::Invalid {
                source_name: name,
                line: None,
                key: None,
                message: format!("file is larger than {MAX_CONFIG_BYTES} bytes"),
            });
        }
        let text = std::str::from_utf8(&bytes).map_err(|_| ConfigError::Invalid {
            source_name: name.clone(),
            line: None,
            key: None,
            message: "file is not valid UTF-8".into(),
        })?;
        let config = Config::parse(text, &name)?;
        let text = zeroize::Zeroizing::new(text.to_string());
        Ok((config, ConfigFile { name, text }))
    }

    pub fn parse(text: &str, source_name: &str) -> Result<Config, ConfigError> {
        Parser {
            source_name,
            section: Section::None,
            interface: None,
            peers: Vec::new(),
        }
        .run(text)
    }

    /// wg-quick's rule: the file stem, 1-15 bytes of `[a-zA-Z0-9_=+.-]`.
    pub fn interface_name(path: impl AsRef<Path>) -> Result<String, ConfigError> {
        let path = path.as_ref();
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let err = |reason| ConfigError::InterfaceName {
            name: stem.to_string(),
            reason,
        };
        if stem.is_empty() {
            return Err(err("empty"));
        }
        if stem.len() > 15 {
            return Err(err("longer than 15 bytes"));
        }
        if !stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_=+.-".contains(&b))
        {
            return Err(err("only letters, digits and _=+.- are allowed"));
        }
        Ok(stem.into_owned())
    }
}

// ---------------------------------------------------------------------------
// Parser

/// A value and the line it was set on, so duplicates can point at the first.
type Slot<T> = Option<(T, usize)>;

#[derive(Default)]
struct InterfaceBuilder {
    header_line: usize,
    private_key: Slot<PrivateKey>,
    addresses: Vec<IpCidr>,
    listen_port: Slot<u16>,
    mtu: Slot<u32>,
    table: Slot<Table>,
    fwmark: Slot<Option<u32>>,
    dns: Vec<String>,
    pre_up: Vec<String>,
    post_up: Vec<String>,
    pre_down: Vec<String>,
    post_down: Vec<String>,
    save_config: Slot<bool>,
    fail_closed: Slot<bool>,
    cipher: Slot<CipherPolicy>,
    mss_fix: Slot<MssFix>,
    compression: Slot<CompressionPolicy>,
    metrics_listen: Slot<Option<SocketAddr>>,
    log_level: Slot<crate::log::Level>,
    realtime_priority: Slot<Option<u8>>,
    queues: Slot<usize>,
}

#[derive(Default)]
struct PeerBuilder {
    header_line: usize,
    public_key: Slot<PublicKey>,
    preshared_key: Slot<PresharedKey>,
    allowed_ips: Vec<IpCidr>,
    endpoint: Slot<Endpoint>,
    persistent_keepalive: Slot<u16>,
    paths: Vec<PathConfig>,
    mode: Slot<Mode>,
    reorder_hold: Slot<Duration>,
    reorder_capacity: Slot<usize>,
    cipher: Slot<CipherPolicy>,
    transport: Slot<Transport>,
    rate_limit: Slot<u64>,
    compression: Slot<CompressionPolicy>,
}

enum Section {
    None,
    Interface,
    Peer,
}

struct Parser<'a> {
    source_name: &'a str,
    section: Section,
    interface: Option<InterfaceBuilder>,
    peers: Vec<PeerBuilder>,
}

/// A problem with one key; the parser adds file and line.
struct KeyError {
    key: String,
    message: String,
}

type KeyResult = Result<(), KeyError>;

fn key_err(key: &str, message: impl Into<String>) -> KeyError {
    KeyError {
        key: key.to_string(),
        message: message.into(),
    }
}

fn set_once<T>(slot: &mut Slot<T>, key: &str, value: Result<T, String>, line: usize) -> KeyResult {
    let value = value.map_err(|m| key_err(key, m))?;
    if let Some((_, first)) = slot {
        return Err(key_err(
            key,
            format!("duplicate key (already set on line {first})"),
        ));
    }
    *slot = Some((value, line));
    Ok(())
}

fn extend<T>(list: &mut Vec<T>, key: &str, items: Result<Vec<T>, String>) -> KeyResult {
    list.extend(items.map_err(|m| key_err(key, m))?);
    Ok(())
}

impl InterfaceBuilder {
    /// One arm per key. `key` is lowercase; each arm names the canonical
    /// spelling used in messages.
    fn apply(&mut self, key: &str, raw_key: &str, value: &str, line: usize) -> KeyResult {
        match key {
            "privatekey" => set_once(
                &mut self.private_key,
                "PrivateKey",
                PrivateKey::from_base64(value).map_err(|e| e.to_string()),
                line,
            ),
            "address" => extend(
                &mut self.addresses,
                "Address",
                parse_list(value, parse_cidr),
            ),
            "listenport" => set_once(&mut self.listen_port, "ListenPort", parse_port(value), line),
            "mtu" => set_once(&mut self.mtu, "MTU", parse_mtu(value), line),
            "table" => set_once(&mut self.table, "Table", parse_table(value), line),
            "fwmark" => set_once(&mut self.fwmark, "FwMark", parse_fwmark(value), line),
            "dns" => extend(
                &mut self.dns,
                "DNS",
                parse_list(value, |s| Ok(s.to_string())),
            ),
            "preup" => extend(&mut self.pre_up, "PreUp", Ok(vec![value.to_string()])),
            "postup" => extend(&mut self.post_up, "PostUp", Ok(vec![value.to_string()])),
            "predown" => extend(&mut self.pre_down, "PreDown", Ok(vec![value.to_string()])),
            "postdown" => extend(&mut self.post_down, "PostDown", Ok(vec![value.to_string()])),
            "saveconfig" => set_once(&mut self.save_config, "SaveConfig", parse_bool(value), line),
            "failclosed" => set_once(&mut self.fail_closed, "FailClosed", parse_bool(value), line),
            "cipher" => set_once(&mut self.cipher, "Cipher", parse_cipher(value), line),
            "mssfix" => set_once(&mut self.mss_fix, "MssFix", parse_mss_fix(value), line),
            "realtimepriority" => set_once(
                &mut self.realtime_priority,
                "RealtimePriority",
                parse_realtime_priority(value),
                line,
            ),
            "queues" => set_once(&mut self.queues, "Queues", parse_queues(value), line),
            "compression" => set_once(
                &mut self.compression,
                "Compression",
                parse_compression(value),
                line,
            ),
            "metricslisten" => set_once(
                &mut self.metrics_listen,
                "MetricsListen",
                parse_metrics_listen(value),
                line,
            ),
            "loglevel" => set_once(
                &mut self.log_level,
                "LogLevel",
                parse_log_level(value),
                line,
            ),
            _ => Err(key_err(raw_key, "unknown key in [Interface] section")),
        }
    }
}

impl PeerBuilder {
    fn apply(&mut self, key: &str, raw_key: &str, value: &str, line: usize) -> KeyResult {
        match key {
            "publickey" => set_once(
                &mut self.public_key,
                "PublicKey",
                PublicKey::from_base64(value)
                    .and_then(PublicKey::usable_for_peer)
                    .map_err(|e| e.to_string()),
                line,
            ),
            "presharedkey" => set_once(
                &mut self.preshared_key,
                "PresharedKey",
                PresharedKey::from_base64(value).map_err(|e| e.to_string()),
                line,
            ),
            "allowedips" => extend(
                &mut self.allowed_ips,
                "AllowedIPs",
                parse_list(value, parse_cidr),
            ),
            "endpoint" => set_once(&mut self.endpoint, "Endpoint", Endpoint::parse(value), line),
            "persistentkeepalive" => set_once(
                &mut self.persistent_keepalive,
                "PersistentKeepalive",
                parse_keepalive(value),
                line,
            ),
            "path" => {
                let path = parse_path(value).map_err(|m| key_err("Path", m))?;
                if self.paths.iter().any(|p| p.name == path.name) {
                    return Err(key_err("Path", format!("a path named {:?} exists already", path.name)));
                }
                if self.paths.len() + 1 >= MAX_PATHS {
                    return Err(key_err("Path", format!("at most {} paths per peer", MAX_PATHS - 1)));
                }
                self.paths.push(path);
                Ok(())
            }
            "mode" => set_once(&mut self.mode, "Mode", parse_mode(value), line),
            "cipher" => set_once(&mut self.cipher, "Cipher", parse_cipher(value), line),
            "transport" => set_once(&mut self.transport, "Transport", parse_transport(value), line),
            "reorderhold" => set_once(&mut self.reorder_hold, "ReorderHold", parse_hold(value), line),
            "reordercapacity" => set_once(
                &mut self.reorder_capacity,
                "ReorderCapacity",
                parse_decimal(value)
                    .and_then(|v| usize::try_from(v).ok())
                    .filter(|v| (1..=MAX_REORDER_CAPACITY).contains(v))
                    .ok_or_else(|| format!("invalid capacity {value:?} (expected 1-{MAX_REORDER_CAPACITY} packets)")),
                line,
            ),
            "compression" => set_once(&mut self.compression, "Compression", parse_compression(value), line),
            "ratelimit" => set_once(
                &mut self.rate_limit,
                "RateLimit",
                parse_rate_limit(value),
                line,
            ),
            _ => Err(key_err(raw_key, "unknown key in [Peer] section")),
        }
    }
}

impl Parser<'_> {
    fn error(
        &self,
        line: Option<usize>,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            source_name: self.source_name.to_string(),
            line,
            key: key.map(str::to_string),
            message: message.into(),
        }
    }

    fn run(mut self, text: &str) -> Result<Config, ConfigError> {
        for (idx, raw) in text.lines().enumerate() {
            let line_no = idx + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            if line.starts_with('[') {
                self.section_header(line, line_no)?;
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(self.error(
                    Some(line_no),
                    None,
                    "expected 'Key = Value' or a [Section] header",
                ));
            };
            let (raw_key, value) = (key.trim(), value.trim());
            if raw_key.is_empty() {
                return Err(self.error(Some(line_no), None, "missing key before '='"));
            }
            let key = raw_key.to_ascii_lowercase();
            // The table of keys decides what exists (the manual is written
            // from it); the builders below parse the values.
            let known = match self.section {
                Section::None => true,
                Section::Interface => keys::lookup(keys::Section::Interface, &key).is_some(),
                Section::Peer => keys::lookup(keys::Section::Peer, &key).is_some(),
            };
            if !known {
                let section = if matches!(self.section, Section::Peer) {
                    "[Peer]"
                } else {
                    "[Interface]"
                };
                return Err(self.error(
                    Some(line_no),
                    Some(raw_key),
                    format!("unknown key in {section} section"),
                ));
            }
            let result = match self.section {
                Section::None => {
                    return Err(self.error(
                        Some(line_no),
                        Some(raw_key),
                        "key outside of any section (expected [Interface] or [Peer] first)",
                    ))
                }
                Section::Interface => self
                    .interface
                    .as_mut()
                    .expect("set when entering the section")
                    .apply(&key, raw_key, value, line_no),
                Section::Peer => self
                    .peers
                    .last_mut()
                    .expect("pushed when entering the section")
                    .apply(&key, raw_key, value, line_no),
            };
            result.map_err(|e| self.error(Some(line_no), Some(&e.key), e.message))?;
        }
        self.finish()
    }

    fn section_header(&mut self, line: &str, line_no: usize) -> Result<(), ConfigError> {
        let name = line
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .map(str::trim)
            .unwrap_or("");
        if name.eq_ignore_ascii_case("interface") {
            if let Some(existing) = &self.interface {
                return Err(self.error(
                    Some(line_no),
                    None,
                    format!(
                        "duplicate [Interface] section (first on line {})",
                        existing.header_line
                    ),
                ));
            }
            self.interface = Some(InterfaceBuilder {
                header_line: line_no,
                ..Default::default()
            });
            self.section = Section::Interface;
        } else if name.eq_ignore_ascii_case("peer") {
            self.peers.push(PeerBuilder {
                header_line: line_no,
                ..Default::default()
            });
            self.section = Section::Peer;
        } else {
            return Err(self.error(
                Some(line_no),
                None,
                format!("unknown section {line:?} (expected [Interface] or [Peer])"),
            ));
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Config, ConfigError> {
        let Some(iface) = self.interface.take() else {
            return Err(self.error(None, None, "missing [Interface] section"));
        };
        let Some((private_key, _)) = iface.private_key else {
            return Err(self.error(
                Some(iface.header_line),
                Some("PrivateKey"),
                "required key missing from [Interface] section",
            ));
        };
        let own_public = private_key.public_key();
        let mut seen: HashMap<PublicKey, usize> = HashMap::new();
        let mut peers = Vec::with_capacity(self.peers.len());
        for p in std::mem::take(&mut self.peers) {
            let Some((public_key, key_line)) = p.public_key else {
                return Err(self.error(
                    Some(p.header_line),
                    Some("PublicKey"),
                    "required key missing from [Peer] section",
                ));
            };
            if public_key == own_public {
                return Err(self.error(
                    Some(key_line),
                    Some("PublicKey"),
                    "peer has the interface's own public key",
                ));
            }
            if let Some(first) = seen.insert(public_key, key_line) {
                return Err(self.error(
                    Some(key_line),
                    Some("PublicKey"),
                    format!("duplicate peer (same public key as the peer on line {first})"),
                ));
            }
            peers.push(PeerConfig {
                public_key,
                preshared_key: p.preshared_key.map(|v| v.0),
                allowed_ips: p.allowed_ips,
                endpoint: p.endpoint.map(|v| v.0),
                persistent_keepalive: p.persistent_keepalive.map(|v| v.0),
                paths: p.paths,
                mode: p.mode.map_or(Mode::default(), |v| v.0),
                reorder_hold: p.reorder_hold.map(|v| v.0),
                reorder_capacity: p.reorder_capacity.map(|v| v.0),
                cipher: p.cipher.map(|v| v.0),
                transport: p.transport.map(|v| v.0).unwrap_or_default(),
                rate_limit: p.rate_limit.map(|v| v.0),
                compression: p.compression.map(|v| v.0),
            });
        }
        Ok(Config {
            interface: InterfaceConfig {
                private_key,
                addresses: iface.addresses,
                listen_port: iface.listen_port.map(|v| v.0),
                mtu: iface.mtu.map(|v| v.0),
                table: iface.table.map(|v| v.0).unwrap_or_default(),
                fwmark: iface.fwmark.and_then(|v| v.0),
                dns: iface.dns,
                pre_up: iface.pre_up,
                post_up: iface.post_up,
                pre_down: iface.pre_down,
                post_down: iface.post_down,
                save_config: iface.save_config.is_some_and(|v| v.0),
                fail_closed: iface.fail_closed.is_none_or(|v| v.0),
                cipher: iface.cipher.map(|v| v.0).unwrap_or_default(),
                mss_fix: iface.mss_fix.map(|v| v.0).unwrap_or_default(),
                compression: iface.compression.map(|v| v.0).unwrap_or_default(),
                metrics_listen: iface.metrics_listen.and_then(|v| v.0),
                log_level: iface.log_level.map(|v| v.0),
                realtime_priority: iface.realtime_priority.and_then(|v| v.0),
                queues: iface.queues.map_or(1, |v| v.0),
            },
            peers,
        })
    }
}

// ---------------------------------------------------------------------------
// Value parsers. They return a message without file/line/key context.

/// Plain decimal: no sign, no spaces (`u32::from_str` would accept "+5").
fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_list<T>(value: &str, item: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|s| {
            let s = s.trim();
            if s.is_empty() {
                Err(format!("empty item in list {value:?}"))
            } else {
                item(s)
            }
        })
        .collect()
}

fn parse_cidr(s: &str) -> Result<IpCidr, String> {
    s.parse::<IpCidr>().map_err(|e| e.to_string())
}

fn parse_port(s: &str) -> Result<u16, String> {
    parse_decimal(s)
        .and_then(|v| u16::try_from(v).ok())
        .ok_or_else(|| format!("invalid port {s:?} (expected 0-65535)"))
}

/// 68 is the smallest MTU IPv4 allows; Linux rejects anything lower.
fn parse_mtu(s: &str) -> Result<u32, String> {
    parse_decimal(s)
        .filter(|v| (68..=65535).contains(v))
        .map(|v| v as u32)
        .ok_or_else(|| format!("invalid MTU {s:?} (expected 68-65535)"))
}

/// 536 is the MSS every IPv4 host must accept; 65495 fills the largest
/// MTU (65535) less the IPv4 and TCP headers.
fn parse_mss_fix(s: &str) -> Result<MssFix, String> {
    match s.to_ascii_lowercase().as_str() {
        "auto" => Ok(MssFix::Auto),
        "off" => Ok(MssFix::Off),
        _ => parse_decimal(s)
            .filter(|v| (536..=65495).contains(v))
            .map(|v| MssFix::Fixed(v as u16))
            .ok_or_else(|| format!("invalid MSS {s:?} (expected auto, off or 536-65495)")),
    }
}

fn parse_realtime_priority(s: &str) -> Result<Option<u8>, String> {
    let max = braid_io::MAX_REALTIME_PRIORITY;
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    parse_decimal(s)
        .filter(|v| (1..=u64::from(max)).contains(v))
        .map(|v| Some(v as u8))
        .ok_or_else(|| format!("invalid priority {s:?} (expected off or 1-{max})"))
}

fn parse_queues(s: &str) -> Result<usize, String> {
    let max = braid_io::MAX_QUEUES;
    parse_decimal(s)
        .filter(|v| (1..=max as u64).contains(v))
        .map(|v| v as usize)
        .ok_or_else(|| format!("invalid queue count {s:?} (expected 1-{max})"))
}

fn parse_table(s: &str) -> Result<Table, String> {
    match s.to_ascii_lowercase().as_str() {
        "auto" => Ok(Table::Auto),
        "off" => Ok(Table::Off),
        "main" => Ok(Table::Id(254)),
        "local" => Ok(Table::Id(255)),
        _ => parse_decimal(s)
            .and_then(|v| u32::try_from(v).ok())
            .map(Table::Id)
            .ok_or_else(|| {
                format!("invalid table {s:?} (expected auto, off, main, local or a number)")
            }),
    }
}

fn parse_fwmark(s: &str) -> Result<Option<u32>, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex)
            if !hex.is_empty() && hex.len() <= 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            u32::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None => parse_decimal(s).and_then(|v| u32::try_from(v).ok()),
    };
    match parsed {
        Some(0) => Ok(None),
        Some(v) => Ok(Some(v)),
        None => Err(format!(
            "invalid fwmark {s:?} (expected off, a number or 0x-prefixed hex up to 0xffffffff)"
        )),
    }
}

fn parse_bool(s: &str) -> Result<bool, String> {
    if s.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if s.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(format!("invalid value {s:?} (expected true or false)"))
    }
}

/// Largest `ReorderCapacity` accepted (memory is bounded per peer).
pub const MAX_REORDER_CAPACITY: usize = 65536;
/// A configuration file larger than this is refused after reading this
/// much (a real one, even with thousands of peers, is far smaller).
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;
/// Largest `ReorderHold` accepted.
pub const MAX_REORDER_HOLD: Duration = Duration::from_secs(10);

fn parse_cipher(s: &str) -> Result<CipherPolicy, String> {
    CipherPolicy::parse(s)
        .ok_or_else(|| format!("unknown cipher {s:?} (expected {})", CipherPolicy::NAMES))
}

fn parse_compression(s: &str) -> Result<CompressionPolicy, String> {
    CompressionPolicy::parse(s).ok_or_else(|| {
        format!(
            "unknown compression {s:?} (expected {})",
            CompressionPolicy::NAMES
        )
    })
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s.to_ascii_lowercase().as_str() {
        "redundant" => Ok(Mode::Redundant),
        "failover" => Ok(Mode::Failover),
        "aggregate" => Ok(Mode::Aggregate),
        _ => Err(format!(
            "unknown mode {s:?} (expected redundant, failover or aggregate)"
        )),
    }
}

/// `RateLimit`: a rate in bits per second in the strict reading of
/// [`braid_netem::units`] (`50mbit`, `1.5gbit`; tc's byte units such as
/// `mbps` are refused rather than guessed), within what the shaper takes.
fn parse_rate_limit(s: &str) -> Result<u64, String> {
    use braid_core::shaper::{format_rate, MAX_RATE_BITS, MIN_RATE_BITS};
    let bits = units::rate("RateLimit", s, units::Mode::Strict).map_err(|e| e.message)?;
    if !(MIN_RATE_BITS..=MAX_RATE_BITS).contains(&bits) {
        return Err(format!(
            "rate {s:?} is outside {} to {}",
            format_rate(MIN_RATE_BITS),
            format_rate(MAX_RATE_BITS)
        ));
    }
    Ok(bits)
}

/// `ReorderHold`: a duration in [`braid_netem::units`]' grammar (`333ms`,
/// `1s`, `500us`, `0`), at most [`MAX_REORDER_HOLD`].
fn parse_hold(s: &str) -> Result<Duration, String> {
    let d = units::duration("ReorderHold", s).map_err(|e| e.message)?;
    if d > MAX_REORDER_HOLD {
        return Err(format!(
            "{s:?} is above the maximum of {}s",
            MAX_REORDER_HOLD.as_secs()
        ));
    }
    Ok(d)
}

fn parse_transport(s: &str) -> Result<Transport, String> {
    match s.to_ascii_lowercase().as_str() {
        "udp" => Ok(Transport::Udp),
        "tcp" => Ok(Transport::Tcp),
        _ => Err(format!("unknown transport {s:?} (expected udp or tcp)")),
    }
}

/// `NAME bind=IFACE|ADDR endpoint=HOST:PORT transport=udp|tcp` (bind and
/// transport are optional).
fn parse_path(s: &str) -> Result<PathConfig, String> {
    let mut words = s.split_whitespace();
    let name = words
        .next()
        .ok_or("expected NAME bind=IFACE|ADDR endpoint=HOST:PORT")?;
    if name.contains('=')
        || name.len() > 15
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "invalid path name {name:?} (letters, digits, - and _, at most 15)"
        ));
    }
    let (mut bind, mut endpoint, mut transport) = (None, None, None);
    for word in words {
        let (k, v) = word
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, found {word:?}"))?;
        match k {
            "bind" if bind.is_none() => {
                bind = Some(match v.parse::<IpAddr>() {
                    Ok(addr) => Bind::Address(addr),
                    Err(_) if !v.is_empty() && v.len() <= 15 && !v.contains('/') => {
                        Bind::Interface(v.to_string())
                    }
                    Err(_) => {
                        return Err(format!(
                            "bind={v:?} is neither an interface name nor an IP address"
                        ))
                    }
                })
            }
            "endpoint" if endpoint.is_none() => endpoint = Some(Endpoint::parse(v)?),
            "transport" if transport.is_none() => transport = Some(parse_transport(v)?),
            "bind" | "endpoint" | "transport" => return Err(format!("{k}= given twice")),
            _ => {
                return Err(format!(
                    "unknown path option {k:?} (expected bind=, endpoint= or transport=)"
                ))
            }
        }
    }
    let endpoint = endpoint.ok_or_else(|| format!("path {name:?} has no endpoint=HOST:PORT"))?;
    Ok(PathConfig {
        name: name.to_string(),
        bind,
        endpoint,
        transport,
    })
}

/// `MetricsListen`: `IP:PORT` or `[IPv6]:PORT` (a literal address, so
/// what is exposed is never up to a resolver), or `off`.
fn parse_metrics_listen(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let addr: SocketAddr = s.parse().map_err(|_| {
        format!(
            "invalid address {s:?} (expected IP:PORT such as 127.0.0.1:9586, [::1]:9586, or off)"
        )
    })?;
    if addr.port() == 0 {
        return Err(format!(
            "{s:?} has port 0; name the port Prometheus scrapes"
        ));
    }
    Ok(Some(addr))
}

fn parse_log_level(s: &str) -> Result<crate::log::Level, String> {
    crate::log::Level::parse(s).ok_or_else(|| {
        format!(
            "unknown log level {s:?} (expected {})",
            crate::log::Level::NAMES
        )
    })
}

fn parse_keepalive(s: &str) -> Result<u16, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(0);
    }
    parse_decimal(s)
        .and_then(|v| u16::try_from(v).ok())
        .ok_or_else(|| format!("invalid interval {s:?} (expected off or 0-65535 seconds)"))
}

#[cfg(test)]
mod tests;
