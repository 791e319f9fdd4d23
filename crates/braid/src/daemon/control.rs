//! The userspace API seen from the daemon: a thread accepts connections on
//! `/var/run/wireguard/NAME.sock` and hands each parsed request to the event
//! loop (which owns the device, so no lock guards it), then writes the
//! answer back. Also converts between UAPI/config types and the core.

use crate::cidr::IpCidr;
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use crate::uapi::{
    self, socket_path, DeviceSnapshot, Errno, PeerSnapshot, Request, Response, SOCKET_DIR,
};
use braid_core::device::Device;
use braid_io::Waker;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// A request waiting for the event loop, with the way back to its client.
pub struct Pending {
    pub request: Request,
    pub reply: SyncSender<Response>,
}

/// The bound userspace API socket, not served yet.
pub struct ControlSocket {
    name: String,
    listener: UnixListener,
    owner: libc::uid_t,
}

/// Creates the socket (only root and its owner may connect); clients that
/// connect wait in its backlog until [`ControlSocket::serve`].
pub fn listen(name: &str) -> std::io::Result<(ControlSocket, PathBuf)> {
    std::fs::create_dir_all(SOCKET_DIR)?;
    let path = socket_path(name);
    if path.exists() {
        // A live daemon would answer; a stale file from a crash is replaced.
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} is in use by a running daemon", path.display()),
            ));
        }
        std::fs::remove_file(&path)?;
    }
    let listener = bind_private(&path)?;
    // SAFETY: geteuid has no preconditions.
    let owner = unsafe { libc::geteuid() };
    let socket = ControlSocket {
        name: name.to_string(),
        listener,
        owner,
    };
    Ok((socket, path))
}

impl ControlSocket {
    /// Starts the accept thread. Called after privileges are dropped:
    /// capabilities, the bounding set and no-new-privs are per thread, and
    /// a thread inherits them from the one that starts it.
    pub fn serve(self, requester: Requester) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("braid-uapi".into())
            .spawn(move || accept_loop(&self.name, self.listener, self.owner, requester))?;
        Ok(())
    }
}

/// How a thread other than the event loop asks it something (the UAPI
/// connections, the metrics server): the request goes down a channel, the
/// loop is woken, and the answer comes back on a channel of its own.
#[derive(Clone)]
pub struct Requester {
    tx: Sender<Pending>,
    waker: Arc<Waker>,
}

/// The event loop's end ([`Receiver`]) and the askers' end of the requests.
pub fn request_channel(waker: Arc<Waker>) -> (Requester, Receiver<Pending>) {
    let (tx, rx) = mpsc::channel();
    (Requester { tx, waker }, rx)
}

impl Requester {
    /// Asks and waits for the answer (EIO once the loop has gone).
    pub fn ask(&self, request: Request) -> Response {
        match self.send(request) {
            Some(reply) => reply.recv().unwrap_or(Response::Error(Errno::EIO)),
            None => Response::Error(Errno::EIO),
        }
    }

    /// Asks and waits at most `limit` (`None` past it, or once the loop
    /// has gone).
    pub fn ask_within(&self, request: Request, limit: Duration) -> Option<Response> {
        self.send(request)?.recv_timeout(limit).ok()
    }

    fn send(&self, request: Request) -> Option<Receiver<Response>> {
        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        self.tx
            .send(Pending {
                request,
                reply: reply_tx,
            })
            .ok()?;
        let _ = self.waker.wake();
        Some(reply_rx)
    }
}

/// Binds a unix socket nobody but its owner can connect to at any moment:
/// it is created under umask 077 (as wireguard-go does), so there is no
/// window between `bind` and `chmod` in which a local user could connect
/// and read the private key with `get=1`; then it is set to 0600.
fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    // SAFETY: umask has no preconditions. It is process-wide, so it is
    // restored right after the one bind.
    let old = unsafe { libc::umask(0o077) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Whether the process at the other end may use the API: root, or the user
/// that owns the socket. The file mode already keeps others out; this holds
/// even if someone loosens it. (wireguard-go relies on the mode alone.)
fn authorized(peer: Option<libc::ucred>, owner: libc::uid_t) -> bool {
    peer.is_some_and(|c| c.uid == 0 || c.uid == owner)
}

fn accept_loop(name: &str, listener: UnixListener, owner: libc::uid_t, requester: Requester) {
    let mut refused: u64 = 0;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let peer = uapi::peer_credentials(&stream);
        if !authorized(peer, owner) {
            refused = refused.saturating_add(1);
            // Local users could fill the log: the first few, then every 1000th.
            if refused <= 10 || refused.is_multiple_of(1000) {
                crate::warn!(
                    name,
                    "refused a userspace API connection from uid {} (only root and uid {owner} may connect; {refused} refused so far)",
                    peer.map_or_else(|| "unknown".to_string(), |c| c.uid.to_string())
                );
            }
            continue;
        }
        let requester = requester.clone();
        // One thread per client keeps a slow client from blocking others;
        // clients are root tools that connect rarely.
        let _ = std::thread::Builder::new()
            .name("braid-uapi-conn".into())
            .spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                let mut handler = |request: Request| requester.ask(request);
                let _ = uapi::serve_connection(stream, &mut handler);
                return_freed_memory();
            });
    }
}

/// Gives the memory a request freed back to the system: a `wg setconf`
/// of 100,000 peers parses into tens of megabytes that glibc would keep
/// in its arenas (and in the daemon's RSS) after they are freed.
fn return_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Interface-level settings the device does not own.
pub struct InterfaceState {
    pub listen_port: u16,
    pub fwmark: u32,
}

/// What applying a set request asks of the I/O layer.
#[derive(Default)]
pub struct SetEffects {
    pub new_listen_port: Option<u16>,
    pub new_fwmark: Option<u32>,
}

fn path_snapshot(path: &braid_core::path::Path, total_send: f64) -> crate::uapi::PathSnapshot {
    use braid_core::path::PathState;
    let c = path.counters;
    crate::uapi::PathSnapshot {
        name: path.name.clone(),
        remote: path.remote,
        state: match path.state {
            PathState::Up => "up",
            PathState::Down => "down",
            PathState::Unknown => "unknown",
        }
        .to_string(),
        rx_packets: c.rx_packets,
        rx_bytes: c.rx_bytes,
        tx_packets: c.tx_packets,
        tx_bytes: c.tx_bytes,
        first_arrivals: c.first_arrivals,
        resent: c.resent,
        rtt_us: path.srtt.map(micros),
        jitter_us: path.srtt.map(|_| micros(path.rttvar)),
        loss: path.loss(),
        loss_out: path.forward_loss(),
        loss_in: path.reverse_loss(),
        pmtu: super::pmtu::snapshot(&path.pmtu),
        estimate: estimate_snapshot(&path.outbound, total_send),
    }
}

fn estimate_snapshot(
    o: &braid_core::path::Outbound,
    total_send: f64,
) -> Option<crate::uapi::EstimateSnapshot> {
    let bits = |bytes_per_s: f64| (bytes_per_s * 8.0) as u64;
    o.is_measured().then(|| crate::uapi::EstimateSnapshot {
        rate_bps: bits(o.rate()),
        delivered_bps: bits(o.delivered_rate()),
        send_bps: bits(o.send_rate()),
        share: if total_send > 0.0 {
            o.send_rate() / total_send
        } else {
            0.0
        },
        queue_us: o.queueing_delay().map(micros),
        data_loss: o.loss(),
    })
}

/// The device as the UAPI reports it; `extra` carries braid's counters.
pub fn snapshot(
    device: &Device,
    state: &InterfaceState,
    io_drops: &[(&str, u64)],
) -> DeviceSnapshot {
    let mut snap = DeviceSnapshot::new(
        device.private_key().map(PrivateKey::from_bytes),
        state.listen_port,
        state.fwmark,
    );
    if snap.public_key.is_none() {
        snap.public_key = device.public_key().map(PublicKey::from_bytes);
    }
    let c = device.counters;
    snap.extra = vec![
        ("invalid_datagrams".into(), c.invalid_datagrams),
        ("invalid_mac".into(), c.invalid_mac),
        ("handshake_rejected".into(), c.handshake_rejected),
        ("handshake_flood_dropped".into(), c.handshake_flood_dropped),
        ("cookie_replies_sent".into(), c.cookie_replies_sent),
        ("handshake_rate_limited".into(), c.handshake_rate_limited),
        ("handshake_over_budget".into(), c.handshake_over_budget),
        ("handshake_queue_full".into(), c.handshake_queue_full),
        ("handshake_queue_stale".into(), c.handshake_queue_stale),
        ("control_queue_full".into(), c.control_queue_full),
        ("too_big_queue_full".into(), c.too_big_queue_full),
        ("unknown_index".into(), c.unknown_index),
        ("no_route".into(), c.no_route),
    ];
    snap.extra
        .extend(io_drops.iter().map(|(n, v)| (n.to_string(), *v)));
    for (_, info) in device.peer_infos() {
        let mut p = PeerSnapshot::new(PublicKey::from_bytes(info.public_key));
        p.preshared_key =
            (info.preshared_key != [0; 32]).then(|| PresharedKey::from_bytes(info.preshared_key));
        p.endpoint = info.endpoint;
        p.last_handshake = info.last_handshake;
        p.rx_bytes = info.counters.rx_bytes;
        p.tx_bytes = info.counters.tx_bytes;
        p.persistent_keepalive_interval = info.persistent_keepalive;
        p.allowed_ips = info
            .allowed_ips
            .iter()
            .filter_map(|(addr, prefix)| IpCidr::new(*addr, *prefix))
            .collect();
        let k = info.counters;
        p.extra = vec![
            ("rx_packets".into(), k.rx_packets),
            ("tx_packets".into(), k.tx_packets),
            ("handshakes_initiated".into(), k.handshakes_initiated),
            ("handshakes_completed".into(), k.handshakes_completed),
            (
                "handshake_responses_sent".into(),
                k.handshake_responses_sent,
            ),
            ("keepalives_sent".into(), k.keepalives_sent),
            ("keepalives_received".into(), k.keepalives_received),
            ("cookie_replies_received".into(), k.cookie_replies_received),
            ("replayed".into(), k.replayed),
            ("auth_failed".into(), k.auth_failed),
            ("disallowed_source".into(), k.disallowed_source),
            ("staged_dropped".into(), k.staged_dropped),
            ("ext_rejected".into(), k.ext_rejected),
            ("speaks_braid".into(), u64::from(info.speaks_braid)),
        ];
        // The reorder window's counters, with the seed's names and meanings.
        let r = info.reorder;
        p.extra.extend([
            ("accepted".to_string(), r.accepted),
            ("under_window".to_string(), r.under_window),
            ("buffered".to_string(), r.buffered),
            ("duplicated".to_string(), r.duplicated),
            ("lost".to_string(), r.lost),
            ("reorder_held".to_string(), info.reorder_held as u64),
            ("reorder_hold_us".to_string(), micros(info.reorder_hold)),
            // Why the hold is what it is (skew + 2 × lateness + 1 ms) and
            // why gaps were given up: in every mode, as a single jittery
            // line reorders too.
            ("reorder_skew_us".to_string(), micros(info.reorder_skew)),
            (
                "reorder_lateness_us".to_string(),
                micros(info.reorder_lateness),
            ),
            (
                "reorder_lateness_measured".to_string(),
                u64::from(info.reorder_lateness_measured),
            ),
            ("gaps_by_hold".to_string(), info.reorder_gaps.by_hold),
            ("gaps_by_bounds".to_string(), info.reorder_gaps.by_bounds),
            ("gaps_by_paths".to_string(), info.reorder_gaps.by_paths),
            ("gap_wait_us".to_string(), info.reorder_gaps.wait_us),
        ]);
        if info.mode == braid_core::path::Mode::Aggregate {
            p.extra.extend([
                (
                    "repair_wait_us".to_string(),
                    info.repair_wait.map_or(0, micros),
                ),
                ("repairs_asked".to_string(), r.repairs_asked),
                ("resent".to_string(), info.resent),
                ("resend_unavailable".to_string(), info.resend_unavailable),
                ("resend_congestion".to_string(), info.resend_congestion),
                ("parity_sent".to_string(), info.parity_sent),
                ("parity_received".to_string(), info.parity_received),
                ("rebuilt".to_string(), info.rebuilt),
            ]);
        }
        if let Some(rate) = info.rate_limit_bits {
            p.extra.extend([
                ("rate_limit_bits".to_string(), rate),
                ("rate_dropped_tx".to_string(), k.rate_dropped_tx),
                ("too_big".to_string(), k.too_big),
                ("rate_dropped_rx".to_string(), k.rate_dropped_rx),
            ]);
        }
        // How packets to it are held to what its lines carry (`braid mtu`).
        if let Some(limit) = info.mtu_limit {
            p.extra.push(("mtu_limit".to_string(), limit as u64));
        }
        p.extra.push((
            "joins_fragments".to_string(),
            u64::from(info.joins_fragments),
        ));
        if let Some(payload) = info.fragment_payload {
            p.extra
                .push(("fragment_payload".to_string(), payload as u64));
        }
        if k.fragmented_tx + k.joined_rx + info.fragments_dropped > 0 {
            p.extra.extend([
                ("fragmented_tx".to_string(), k.fragmented_tx),
                ("fragments_tx".to_string(), k.fragments_tx),
                ("joined_rx".to_string(), k.joined_rx),
                ("fragments_dropped".to_string(), info.fragments_dropped),
            ]);
        }
        if k.compressed_tx + k.compressed_rx + k.decompress_failed > 0 {
            p.extra.extend([
                ("compressed_tx".to_string(), k.compressed_tx),
                ("compressed_rx".to_string(), k.compressed_rx),
                ("decompress_failed".to_string(), k.decompress_failed),
            ]);
        }
        p.mode = info.mode.name().to_string();
        p.cipher = info
            .cipher
            .map(|c| c.name().to_string())
            .unwrap_or_default();
        let total_send: f64 = info.paths.iter().map(|p| p.outbound.send_rate()).sum();
        p.paths = info
            .paths
            .iter()
            .map(|path| path_snapshot(path, total_send))
            .collect();
        snap.peers.push(p);
    }
    snap
}

/// Microseconds for `braid show`, saturating: an absurd RTT or hold reads
/// as u64::MAX instead of its low 64 bits.
fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::unix::fs::MetadataExt;
    use std::process::{Command, Stdio};

    #[test]
    fn only_root_and_the_owner_are_authorized() {
        let cred = |uid| {
            Some(libc::ucred {
                pid: 1,
                uid,
                gid: uid,
            })
        };
        assert!(authorized(cred(0), 1000));
        assert!(authorized(cred(1000), 1000));
        assert!(!authorized(cred(65534), 1000));
        assert!(!authorized(cred(65534), 0));
        assert!(!authorized(None, 0));
    }

    /// Removes the test's directory, also when an assertion fails.
    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// What `socat` gets back for `get=1` when run as `nobody`.
    fn get_as_nobody(path: &Path) -> String {
        let mut child = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "socat",
                "-t",
                "2",
                "-",
            ])
            .arg(format!("UNIX-CONNECT:{}", path.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("setpriv and socat");
        let _ = child.stdin.take().unwrap().write_all(b"get=1\n\n");
        let out = child
            .wait_with_output()
            .expect("socat ends when the server closes");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn another_user_cannot_use_the_socket_even_with_a_loose_mode() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || Command::new("socat").arg("-V").output().is_err() {
            eprintln!("skipped: needs root and socat");
            return;
        }
        let dir = Dir(std::env::temp_dir().join(format!("braid-uapi-test-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.0.join("t.sock");
        let socket = ControlSocket {
            name: "test".into(),
            listener: bind_private(&path).unwrap(),
            owner: 0,
        };
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let (requester, rx) = request_channel(Arc::new(Waker::new().unwrap()));
        socket.serve(requester).unwrap();
        std::thread::spawn(move || {
            for p in rx {
                let _ = p.reply.send(Response::Ok);
            }
        });
        // As the mode stands, nobody cannot even connect.
        assert_eq!(get_as_nobody(&path), "");
        // Loosened by hand: the credentials check still refuses.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(get_as_nobody(&path), "");
        // Root is served.
        let reply = uapi::query(&path, "get=1\n\n").unwrap();
        assert!(reply.contains("errno=0"), "{reply:?}");
    }
}
