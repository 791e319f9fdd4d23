//! `braid syncconf` in the daemon (`systemctl reload braid@NAME`): a
//! `set=braid` request carries a whole config file; the daemon applies what
//! differs from the file it runs, the way `wg syncconf` does for
//! WireGuard's keys, and also for braid's (paths, modes, the reorder
//! window, rate limits, ciphers, compression) and for the AllowedIPs
//! routes. Peers that stay keep their sessions.
//!
//! Nothing changes when anything in the file is wrong: it is parsed, its
//! host names resolved, a new listen port bound and the sockets of new
//! lines opened before the device is touched. What only a restart can
//! change (the keys the table marks [`Reload::Restart`]) is reported in
//! the answer's notes, not applied.

use super::{config_to_set, requests, set_fwmark, Daemon};
use crate::cidr::IpCidr;
use crate::config::{Config, PathConfig, PeerConfig, Table, Transport};
use crate::keys::{PrivateKey, PublicKey};
use crate::uapi::sync::ConfigText;
use crate::uapi::{PeerUpdate, Response, SetRequest};
use braid_io::{netcfg, UdpSocket};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Instant;

/// The config the interface runs (from `braid up` or the last reload),
/// without its secrets: the device holds the keys, and compares them
/// itself. What the next reload is compared with.
pub struct Running(Config);

impl Running {
    pub fn new(config: &Config) -> Running {
        let mut c = config.clone();
        c.interface.private_key = PrivateKey::from_bytes([0; 32]);
        for p in &mut c.peers {
            p.preshared_key = None;
        }
        Running(c)
    }
}

/// What a reload did, for its notes.
#[derive(Default)]
struct Summary {
    peers_added: usize,
    peers_removed: usize,
    peers_kept: usize,
    paths_added: Vec<String>,
    paths_removed: Vec<String>,
    options_changed: usize,
    routes_added: Vec<String>,
    routes_removed: Vec<String>,
}

impl Daemon {
    /// Answers a `set=braid` request: the reload, told to the service
    /// manager (RELOADING=1, then READY=1); also the line for the log.
    pub(super) fn serve_sync(&mut self, config: &ConfigText) -> (Response, String) {
        if let Some(n) = &self.notifier {
            let _ = n.reloading(crate::sd_notify::monotonic_usec());
        }
        let outcome = self.sync_config(config);
        let line = match &outcome {
            Ok(notes) => format!("reloaded {}: {}", config.source, notes.join("; ")),
            Err(e) => format!("reload refused, nothing changed: {e}"),
        };
        if let Some(n) = &self.notifier {
            let _ = n.ready(&self.status());
        }
        (Response::Synced(outcome), line)
    }

    /// One line for the service manager's status.
    fn status(&self) -> String {
        format!(
            "interface {} is up (listening on UDP port {})",
            self.name, self.state.listen_port
        )
    }

    /// Applies `config` (a whole file) to the running interface; the notes
    /// say what changed and what waits for a restart.
    pub(super) fn sync_config(&mut self, config: &ConfigText) -> Result<Vec<String>, String> {
        let Some(running) = self.running.take() else {
            return Err(format!(
                "{} was not brought up from a config file (`braid up`): use `wg syncconf`",
                self.name
            ));
        };
        let result = self.apply_config(&running.0, config);
        self.running = Some(match &result {
            Ok((_, new)) => Running::new(new),
            Err(_) => running,
        });
        result.map(|(notes, _)| notes)
    }

    /// [`sync_config`](Self::sync_config) against the running config
    /// `old`; returns the notes and the config now running.
    fn apply_config(
        &mut self,
        old: &Config,
        config: &ConfigText,
    ) -> Result<(Vec<String>, Config), String> {
        let new = Config::parse(&config.text, &config.source).map_err(|e| e.to_string())?;
        let mut wg = config_to_set(&new).map_err(|e| format!("{}: {e}", config.source))?;
        let remotes = resolve_paths(&new).map_err(|e| format!("{}: {e}", config.source))?;
        let mut notes = restart_notes(old, &new);
        let full_tunnel = super::routes::full_tunnel_mark(old).is_some();
        let new_socket = match new.interface.listen_port {
            Some(port) if port != self.state.listen_port => Some(
                UdpSocket::bind_group(port, self.shared.lines().main_group_len())
                    .map_err(|e| format!("cannot listen on UDP port {port}: {e}"))?,
            ),
            _ => None,
        };
        let lines = self.open_lines(&new)?;

        // From here on nothing fails before the device has changed.
        let now = Instant::now();
        let mut summary = Summary::default();
        let old_peers: HashMap<PublicKey, &PeerConfig> =
            old.peers.iter().map(|p| (p.public_key, p)).collect();
        let wanted: HashSet<PublicKey> = new.peers.iter().map(|p| p.public_key).collect();
        {
            let mut device = self.shared.device();
            // WireGuard's part, as `wg syncconf` does it: peers not in the
            // file go (also ones `wg set` added), the others are updated.
            let mut removals = Vec::new();
            for pid in device.peer_ids() {
                let key = device.peer(pid).map(|p| p.public_key());
                if let Some(key) = key.map(PublicKey::from_bytes) {
                    if !wanted.contains(&key) {
                        removals.push(PeerUpdate {
                            remove: true,
                            ..PeerUpdate::new(key)
                        });
                    }
                }
            }
            summary.peers_removed = removals.len();
            for update in &mut wg.peers {
                let before = old_peers.get(&update.public_key);
                let exists = device.find_peer(update.public_key.as_bytes()).is_some();
                if exists {
                    summary.peers_kept += 1;
                } else {
                    summary.peers_added += 1;
                }
                // An unchanged Endpoint is not set again: the peer may
                // have roamed since, as WireGuard lets it.
                if exists && before.is_some_and(|b| b.endpoint_is(update.endpoint)) {
                    update.endpoint = None;
                }
                // A PersistentKeepalive taken out of the file turns it off.
                update.persistent_keepalive_interval =
                    Some(update.persistent_keepalive_interval.unwrap_or(0));
            }
            removals.append(&mut wg.peers);
            let set = SetRequest {
                private_key: wg.private_key.take(),
                listen_port: None,
                fwmark: None,
                replace_peers: false,
                peers: removals,
            };
            requests::apply_set(&mut device, &set, now)
                .map_err(|e| format!("the device refused the change (errno {})", e.0))?;
            // braid's part.
            device.set_cipher(new.interface.cipher);
            device.set_compression(new.interface.compression);
            for peer in &new.peers {
                let Some(pid) = device.find_peer(peer.public_key.as_bytes()) else {
                    continue;
                };
                let before = old_peers.get(&peer.public_key).copied();
                if before.map(PeerConfig::options) != Some(peer.options()) {
                    summary.options_changed += usize::from(before.is_some());
                    device.set_peer_options(pid, &peer.options());
                    let (b_hold, b_cap) =
                        before.map_or((None, None), |b| (b.reorder_hold, b.reorder_capacity));
                    if (b_hold, b_cap) != (peer.reorder_hold, peer.reorder_capacity)
                        && peer.reorder_hold.is_none()
                        && peer.reorder_capacity.is_none()
                    {
                        // Back to the defaults (set_peer_options only
                        // rebuilds the window for a setting that is given).
                        device.set_reorder(pid, None, None);
                    }
                }
                let (gone, added) = path_changes(before, peer);
                for name in gone {
                    device.remove_path(pid, &name);
                    summary.paths_removed.push(name);
                }
                for path in added {
                    let (line, remote) = (lines[&path.name_of(peer)], remotes[&path.name_of(peer)]);
                    if device.add_path(pid, &path.name, line, remote) {
                        summary.paths_added.push(path.name.clone());
                    } else {
                        notes.push(format!(
                            "path {} of peer {}: the peer has no room for another path",
                            path.name, peer.public_key
                        ));
                    }
                }
            }
        }
        if let Some(group) = new_socket {
            self.state.listen_port = group[0].local_port();
            if self.state.fwmark != 0 {
                let _ = set_fwmark(&group, self.state.fwmark);
            }
            self.shared.replace_main_line(group);
        }
        let mark = new.interface.fwmark.unwrap_or(0);
        if mark != old.interface.fwmark.unwrap_or(0) && !full_tunnel {
            match set_fwmark(self.shared.lines().main_group(), mark) {
                Ok(()) => self.state.fwmark = mark,
                Err(e) => notes.push(format!("FwMark {mark}: {e}")),
            }
        }
        if new.interface.log_level != old.interface.log_level {
            // The -v of `braid up` still counts.
            let level = new
                .interface
                .log_level
                .unwrap_or(crate::log::Level::Info)
                .raised_by(self.log_raise);
            crate::log::set_level(level);
            notes.push(format!("log level {level}"));
        }
        self.close_unused_lines(&new);
        self.sync_routes(old, &new, &mut summary, &mut notes);
        if let Err(e) =
            super::dataplane::transmit_pending(&self.shared, now, &mut self.control_batch)
        {
            notes.push(format!("sending after the reload: {e}"));
        }
        let mut out = summary.notes();
        out.append(&mut notes);
        Ok((out, new))
    }

    /// The line of every UDP path of `config`, opened where it is new, by
    /// (peer, path name). A line that cannot be opened fails the reload,
    /// and the lines opened for it are closed again.
    fn open_lines(&self, config: &Config) -> Result<HashMap<String, u16>, String> {
        let mut lines = self.shared.lines_mut();
        let before: HashSet<u16> = lines.bound_udp_lines().collect();
        let mut out = HashMap::new();
        for peer in &config.peers {
            for path in &peer.paths {
                if peer.path_transport(path) != Transport::Udp {
                    continue;
                }
                match lines.line_for(path.bind.as_ref()) {
                    Ok(line) => {
                        out.insert(path.name_of(peer), line);
                    }
                    Err(e) => {
                        let opened: Vec<u16> = lines
                            .bound_udp_lines()
                            .filter(|l| !before.contains(l))
                            .collect();
                        for l in opened {
                            lines.close(l);
                        }
                        return Err(format!("path {}: {e}", path.name));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Closes the UDP lines no path of `config` uses any more, so the
    /// peer's traffic to them stops arriving (it would bring the removed
    /// paths back as learned ones).
    fn close_unused_lines(&self, config: &Config) {
        let mut lines = self.shared.lines_mut();
        let used: HashSet<u16> = lines
            .bound_udp_lines()
            .collect::<Vec<_>>()
            .into_iter()
            .filter(|&l| {
                config.peers.iter().any(|peer| {
                    peer.paths.iter().any(|p| {
                        peer.path_transport(p) == Transport::Udp && p.bind.as_ref() == lines.bind(l)
                    })
                })
            })
            .collect();
        let unused: Vec<u16> = lines
            .bound_udp_lines()
            .filter(|l| !used.contains(l))
            .collect();
        for l in unused {
            lines.close(l);
        }
    }

    /// Adds the routes of new AllowedIPs and removes those of AllowedIPs
    /// taken out, in the table the interface was brought up with.
    fn sync_routes(
        &self,
        old: &Config,
        new: &Config,
        summary: &mut Summary,
        notes: &mut Vec<String>,
    ) {
        let table = match old.interface.table {
            Table::Off => return,
            Table::Auto => None,
            Table::Id(id) => Some(id),
        };
        let (added, removed) = route_changes(old, new);
        for cidr in added {
            match netcfg::route_add(&cidr.to_string(), &self.name, table) {
                Ok(()) => summary.routes_added.push(cidr.to_string()),
                Err(e) => notes.push(format!("route {cidr}: {e}")),
            }
        }
        for cidr in removed {
            match netcfg::route_del(&cidr.to_string(), &self.name, table) {
                Ok(()) => summary.routes_removed.push(cidr.to_string()),
                Err(e) => notes.push(format!("removing route {cidr}: {e}")),
            }
        }
    }
}

impl PeerConfig {
    /// Whether this peer's configured `Endpoint` resolves to `endpoint`.
    fn endpoint_is(&self, endpoint: Option<SocketAddr>) -> bool {
        match (&self.endpoint, endpoint) {
            (Some(ep), Some(addr)) => {
                self.transport == Transport::Udp && ep.resolve().ok() == Some(addr)
            }
            (None, None) => true,
            _ => false,
        }
    }
}

impl PathConfig {
    /// A key for this path unique in a config: peer and path name.
    fn name_of(&self, peer: &PeerConfig) -> String {
        format!("{} {}", peer.public_key, self.name)
    }
}

impl Summary {
    fn notes(&self) -> Vec<String> {
        let mut notes = vec![format!(
            "peers: {} added, {} removed, {} kept with their sessions",
            self.peers_added, self.peers_removed, self.peers_kept
        )];
        if self.options_changed > 0 {
            notes.push(format!(
                "peers with changed braid settings: {}",
                self.options_changed
            ));
        }
        for (what, list) in [
            ("paths added", &self.paths_added),
            ("paths removed", &self.paths_removed),
            ("routes added", &self.routes_added),
            ("routes removed", &self.routes_removed),
        ] {
            if !list.is_empty() {
                notes.push(format!("{what}: {}", list.join(", ")));
            }
        }
        notes
    }
}

/// The endpoint of every UDP path of `config`, resolved, by (peer, path).
fn resolve_paths(config: &Config) -> std::io::Result<HashMap<String, SocketAddr>> {
    let mut out = HashMap::new();
    for peer in &config.peers {
        for path in &peer.paths {
            let remote = path.endpoint.resolve().map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("path {}: cannot resolve {}: {e}", path.name, path.endpoint),
                )
            })?;
            out.insert(path.name_of(peer), remote);
        }
    }
    Ok(out)
}

/// The configured UDP paths of `new` that `old` (the same peer as it ran)
/// did not have, and the names of those to remove: gone, or changed (a
/// changed path is removed and added again).
fn path_changes<'a>(
    old: Option<&PeerConfig>,
    new: &'a PeerConfig,
) -> (Vec<String>, Vec<&'a PathConfig>) {
    let udp = |peer: &PeerConfig, p: &PathConfig| peer.path_transport(p) == Transport::Udp;
    let old_paths: Vec<&PathConfig> = old
        .map(|o| o.paths.iter().filter(|p| udp(o, p)).collect())
        .unwrap_or_default();
    let new_paths: Vec<&PathConfig> = new.paths.iter().filter(|p| udp(new, p)).collect();
    let gone = old_paths
        .iter()
        .filter(|o| !new_paths.contains(o))
        .map(|o| o.name.clone())
        .collect();
    let added = new_paths
        .into_iter()
        .filter(|n| !old_paths.contains(n))
        .collect();
    (gone, added)
}

/// AllowedIPs routes to add and to remove (networks; a default route is
/// the full tunnel's, which only a restart changes).
fn route_changes(old: &Config, new: &Config) -> (Vec<IpCidr>, Vec<IpCidr>) {
    let nets = |c: &Config| -> Vec<IpCidr> {
        let mut v: Vec<IpCidr> = c
            .peers
            .iter()
            .flat_map(|p| &p.allowed_ips)
            .filter(|c| c.prefix > 0)
            .map(IpCidr::network)
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let (o, n) = (nets(old), nets(new));
    let added = n.iter().filter(|c| !o.contains(c)).copied().collect();
    let removed = o.iter().filter(|c| !n.contains(c)).copied().collect();
    (added, removed)
}

/// The changes a reload does not apply, one note each, named by the key
/// (the keys the table marks `Reload::Restart`, see
/// [`crate::config::keys`]).
pub fn restart_notes(old: &Config, new: &Config) -> Vec<String> {
    let (o, n) = (&old.interface, &new.interface);
    let changed = [
        ("Address", o.addresses != n.addresses),
        ("MTU", o.mtu != n.mtu),
        ("Table", o.table != n.table),
        ("DNS", o.dns != n.dns),
        ("PreUp", o.pre_up != n.pre_up),
        ("PostUp", o.post_up != n.post_up),
        ("PreDown", o.pre_down != n.pre_down),
        ("PostDown", o.post_down != n.post_down),
        ("SaveConfig", o.save_config != n.save_config),
        ("FailClosed", o.fail_closed != n.fail_closed),
        ("MssFix", o.mss_fix != n.mss_fix),
        (
            "RealtimePriority",
            o.realtime_priority != n.realtime_priority,
        ),
        ("MetricsListen", o.metrics_listen != n.metrics_listen),
        ("Queues", o.queues != n.queues),
    ];
    let mut notes: Vec<String> = changed
        .iter()
        .filter(|(_, c)| *c)
        .map(|(key, _)| later(key, "[Interface]"))
        .collect();
    let old_full = super::routes::full_tunnel_mark(old);
    if old_full != super::routes::full_tunnel_mark(new) {
        notes.push(later(
            "AllowedIPs (a default route: the full tunnel's rules) or FwMark",
            "[Peer]",
        ));
    } else if old_full.is_some() && o.fwmark != n.fwmark {
        notes.push(later("FwMark", "[Interface] of a full tunnel"));
    }
    for peer in &new.peers {
        let Some(before) = old.peers.iter().find(|p| p.public_key == peer.public_key) else {
            if peer.transport == Transport::Tcp
                || peer
                    .paths
                    .iter()
                    .any(|p| peer.path_transport(p) == Transport::Tcp)
            {
                notes.push(later(
                    "Transport",
                    &format!("[Peer] {} (new, over TCP)", peer.public_key),
                ));
            }
            continue;
        };
        let tcp_paths = |p: &PeerConfig| -> Vec<PathConfig> {
            p.paths
                .iter()
                .filter(|x| p.path_transport(x) == Transport::Tcp)
                .cloned()
                .collect()
        };
        if before.transport != peer.transport || tcp_paths(before) != tcp_paths(peer) {
            notes.push(later("Transport", &format!("[Peer] {}", peer.public_key)));
        } else if peer.transport == Transport::Tcp && before.endpoint != peer.endpoint {
            notes.push(later(
                "Endpoint",
                &format!("[Peer] {} (over TCP)", peer.public_key),
            ));
        }
    }
    notes
}

fn later(key: &str, section: &str) -> String {
    format!("{key} in {section} changed: not applied; it takes effect when the interface restarts")
}

#[cfg(test)]
mod tests;
