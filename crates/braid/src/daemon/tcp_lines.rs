//! TCP transport in the daemon: which TCP lines a config needs, and which
//! line each path of a config takes.
//!
//! A peer with `Transport = tcp` reaches its `Endpoint` (and its paths
//! without a `transport=` of their own) over TCP; a `Path = … transport=tcp`
//! line does so for one path. Each such (bind, endpoint) gets a connecting
//! [`TcpLine`] that keeps its connection up by itself. An interface with a
//! TCP peer and a configured `ListenPort` also accepts TCP connections on
//! that port: one listening line for all peers, whose datagrams the core
//! attributes to a peer by authenticating them, exactly as for UDP.

use super::line::{Line, TcpRole};
use super::lines::Lines;
use crate::config::{Bind, Config, PathConfig, PeerConfig, Transport};
use braid_core::device::Device;
use braid_core::peer::{PeerId, ENDPOINT_PATH};
use braid_io::TcpLine;
use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;

fn uses_tcp(peer: &PeerConfig) -> bool {
    peer.transport == Transport::Tcp
        || peer
            .paths
            .iter()
            .any(|p| peer.path_transport(p) == Transport::Tcp)
}

/// Opens the TCP lines `cfg` needs: a listener on `listen_port` when a peer
/// uses TCP and the config sets a port, and a connecting line per TCP
/// endpoint. `fwmark` (0: none) marks their sockets.
pub fn open(lines: &mut Lines, cfg: &Config, listen_port: u16, fwmark: u32) -> io::Result<()> {
    if !cfg.peers.iter().any(uses_tcp) {
        return Ok(());
    }
    if cfg.interface.listen_port.is_some_and(|p| p != 0) {
        let listener = TcpLine::listen(listen_port, fwmark)?;
        lines.push(Line::Tcp(TcpRole::Listen, listener))?;
    }
    for peer in &cfg.peers {
        if peer.transport == Transport::Tcp {
            if let Some(ep) = &peer.endpoint {
                let remote = ep.resolve().map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot resolve endpoint {ep}: {e}"))
                })?;
                connect_line(lines, None, remote, fwmark)?;
            }
        }
        for path in &peer.paths {
            if peer.path_transport(path) == Transport::Tcp {
                connect_line(lines, path.bind.as_ref(), resolve(path)?, fwmark)?;
            }
        }
    }
    Ok(())
}

fn resolve(path: &PathConfig) -> io::Result<SocketAddr> {
    path.endpoint.resolve().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("path {}: cannot resolve {}: {e}", path.name, path.endpoint),
        )
    })
}

/// The connecting line to `remote` through `bind`, opened on first use.
fn connect_line(
    lines: &mut Lines,
    bind: Option<&Bind>,
    remote: SocketAddr,
    fwmark: u32,
) -> io::Result<u16> {
    let role = TcpRole::Connect(bind.cloned(), remote);
    if let Some(i) = find(lines, &role) {
        return Ok(i);
    }
    let (device, local) = match bind {
        None => (None, None),
        Some(Bind::Interface(dev)) => (Some(dev.clone()), None),
        Some(Bind::Address(addr)) => (braid_io::netcfg::interface_with_address(*addr), Some(*addr)),
    };
    let line = TcpLine::connect(remote, device.as_deref(), local, fwmark)
        .map_err(|e| io::Error::new(e.kind(), format!("TCP line to {remote}: {e}")))?;
    lines.push(Line::Tcp(role, line))
}

fn find(lines: &Lines, role: &TcpRole) -> Option<u16> {
    lines
        .all()
        .iter()
        .position(|l| matches!(l, Line::Tcp(r, _) if r == role))
        // Exact: Lines hands out no index above u16::MAX.
        .map(|i| i as u16)
}

/// Opens the lines a config's `Path =` entries need; returns, per peer and
/// path, the line index to use.
pub fn open_for(lines: &mut Lines, cfg: &Config) -> io::Result<Vec<Vec<u16>>> {
    cfg.peers
        .iter()
        .map(|peer| {
            peer.paths
                .iter()
                .map(|p| path_line(lines, peer, p))
                .collect()
        })
        .collect()
}

/// The line of `path`: its TCP line (opened by [`open`]) when the path
/// uses TCP, else the UDP line of its `bind=`.
pub fn path_line(lines: &mut Lines, peer: &PeerConfig, path: &PathConfig) -> io::Result<u16> {
    if peer.path_transport(path) == Transport::Udp {
        return lines.line_for(path.bind.as_ref());
    }
    let role = TcpRole::Connect(path.bind.clone(), resolve(path)?);
    find(lines, &role).ok_or_else(|| io::Error::other(format!("path {}: no TCP line", path.name)))
}

/// For a `Transport = tcp` peer, the `Endpoint` becomes the primary path on
/// its TCP line (the UAPI `set` left it out: it would put it on UDP).
pub fn add_endpoint_path(
    device: &mut Device,
    lines: &Lines,
    pid: PeerId,
    peer: &PeerConfig,
) -> io::Result<()> {
    let Some(ep) = peer
        .endpoint
        .as_ref()
        .filter(|_| peer.transport == Transport::Tcp)
    else {
        return Ok(());
    };
    let remote = ep.resolve()?;
    if let Some(line) = find(lines, &TcpRole::Connect(None, remote)) {
        device.add_path(pid, ENDPOINT_PATH, line, remote);
    }
    Ok(())
}

/// The remote addresses the core knows as paths on `line` of peers that
/// have a session (an authenticated peer's connections), gathered once per
/// sort from those peers only: idle peers are never walked, and each
/// connection is then a set lookup, not a walk of the peers.
fn peer_addresses_on(device: &Device, line: u16) -> HashSet<SocketAddr> {
    device
        .peers_with_session()
        .iter()
        .filter_map(|&pid| device.peer(pid))
        .flat_map(|p| p.paths.iter())
        .filter(|path| path.line == line)
        .map(|path| path.remote)
        .collect()
}

/// Asks `is_peer` for connections' addresses, gathering the addresses
/// only if a connection is asked about.
fn lazy_is_peer(device: &Device, line: u16) -> impl Fn(SocketAddr) -> bool + '_ {
    let known = std::cell::OnceCell::new();
    move |addr| {
        known
            .get_or_init(|| peer_addresses_on(device, line))
            .contains(&addr)
    }
}

/// Whether listening TCP line `line` should learn which of its connections
/// are peers' now: a connection not yet known spoke in the batch just
/// received (checked without the device lock; see [`mark_peer_connections`]).
pub fn strangers_spoke(lines: &Lines, line: usize, now: std::time::Instant) -> bool {
    lines
        .tcp_listener(line)
        .is_some_and(|tcp| tcp.strangers_spoke(now))
}

/// Marks the connections of listening TCP line `line` whose address the
/// core now knows as peers', at their first authenticated message, so a
/// connect flood cannot evict them before the once-a-second sort.
pub fn mark_peer_connections(lines: &Lines, device: &Device, line: usize) {
    if let Some(tcp) = lines.tcp_listener(line) {
        // `line as u16` is exact: Lines hands out no index above u16::MAX.
        tcp.mark_peers(lazy_is_peer(device, line as u16));
    }
}

/// Tells each listening TCP line which of its connections carry an
/// authenticated peer: those whose address the core knows as a path on
/// that line. The others are closed after a grace period and are the first
/// to go when a line has too many connections.
pub fn sort_out_connections(lines: &Lines, device: &Device) {
    for (i, line) in lines.all().iter().enumerate() {
        // `i as u16` below is exact: Lines hands out no index above u16::MAX.
        if let Line::Tcp(TcpRole::Listen, tcp) = line {
            tcp.sort_out(lazy_is_peer(device, i as u16));
        }
    }
}
