//! Events worth a log line, found by looking at the device a few times a
//! second: a line (path) going down or up, a peer's first handshake and
//! every later one (rekeys, at debug), the session ending, a roamed
//! endpoint, the data cipher changing. braid-core keeps state and counts
//! but reports no changes (it stays free of I/O, logging included), so
//! this compares what it sees with what it saw last time.
//!
//! A look compares only the peers the device worked on since the last one
//! (`Device::take_changed_peers`), under the device lock the main thread
//! takes anyway: 100,000 idle peers cost it nothing. It allocates only
//! when something changed.

use crate::keys::PublicKey;
use braid_core::cipher::DataCipher;
use braid_core::device::Device;
use braid_core::path::PathState;
use braid_core::peer::{Peer, PeerId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::SystemTime;

/// What was seen of one peer at the last look.
struct Seen {
    /// The peer's key: a slot another peer took since is a new peer.
    key: [u8; 32],
    last_handshake: Option<SystemTime>,
    session: bool,
    endpoint: Option<SocketAddr>,
    cipher: Option<DataCipher>,
    /// Per path, in the device's order: its name and state.
    paths: Vec<(String, PathState)>,
}

/// The state of every peer at the last look it changed in.
#[derive(Default)]
pub struct EventWatch {
    peers: HashMap<PeerId, Seen>,
    changed: Vec<PeerId>,
}

impl EventWatch {
    /// Logs what changed since the last look, under interface `name`.
    pub fn look(&mut self, device: &mut Device, name: &str) {
        device.take_changed_peers(&mut self.changed);
        for pid in self.changed.drain(..) {
            let Some(peer) = device.peer(pid) else {
                self.peers.remove(&pid);
                continue;
            };
            let key = peer.public_key();
            match self.peers.get_mut(&pid) {
                Some(seen) if seen.key == key => compare(seen, peer, name),
                // A peer appears with its state as it is: nothing has
                // changed about it yet.
                _ => {
                    self.peers.insert(pid, seen_now(peer, key));
                }
            }
        }
    }
}

fn seen_now(peer: &Peer, key: [u8; 32]) -> Seen {
    Seen {
        key,
        last_handshake: peer.last_handshake,
        session: peer.keypairs.current.is_some(),
        endpoint: peer.endpoint(),
        cipher: current_cipher(peer),
        paths: peer
            .paths
            .iter()
            .map(|p| (p.name.clone(), p.state))
            .collect(),
    }
}

fn current_cipher(peer: &Peer) -> Option<DataCipher> {
    peer.keypairs.current.as_ref().map(|k| k.send_cipher())
}

fn state_name(state: PathState) -> &'static str {
    match state {
        PathState::Up => "up",
        PathState::Down => "down",
        PathState::Unknown => "unknown",
    }
}

fn compare(seen: &mut Seen, peer: &Peer, name: &str) {
    let who = || PublicKey::from_bytes(peer.public_key()).to_base64();
    let cipher = current_cipher(peer);
    if peer.last_handshake != seen.last_handshake && peer.last_handshake.is_some() {
        if seen.session {
            crate::debug!(name, "peer {}: handshake completed (new keys)", who());
        } else if let Some(c) = cipher {
            // One line per session start, cipher included: a server with
            // 30,000 peers logs 30,000 lines, not 60,000.
            crate::info!(
                name,
                "peer {}: handshake completed, session up, data cipher {}",
                who(),
                c.name()
            );
            seen.cipher = cipher;
        } else {
            crate::info!(name, "peer {}: handshake completed, session up", who());
        }
        seen.last_handshake = peer.last_handshake;
    }
    let session = peer.keypairs.current.is_some();
    if seen.session && !session {
        crate::info!(name, "peer {}: session ended (keys expired)", who());
    }
    seen.session = session;
    if cipher != seen.cipher {
        if let Some(c) = cipher {
            crate::info!(name, "peer {}: data cipher now {}", who(), c.name());
        }
        seen.cipher = cipher;
    }
    let endpoint = peer.endpoint();
    if endpoint != seen.endpoint {
        if let Some(ep) = endpoint {
            crate::debug!(name, "peer {}: endpoint now {ep}", who());
        }
        seen.endpoint = endpoint;
    }
    paths(seen, peer, name, &who);
}

fn paths(seen: &mut Seen, peer: &Peer, name: &str, who: &dyn Fn() -> String) {
    let same_list = seen.paths.len() == peer.paths.len()
        && seen
            .paths
            .iter()
            .zip(&peer.paths)
            .all(|((n, _), p)| *n == p.name);
    if !same_list {
        for p in &peer.paths {
            let before = seen
                .paths
                .iter()
                .find(|(n, _)| *n == p.name)
                .map(|(_, s)| *s);
            match before {
                None => crate::debug!(
                    name,
                    "peer {}: path {} to {} added ({})",
                    who(),
                    p.name,
                    p.remote,
                    state_name(p.state)
                ),
                Some(s) if s != p.state => state_change(name, who, p, s),
                Some(_) => {}
            }
        }
        seen.paths = peer
            .paths
            .iter()
            .map(|p| (p.name.clone(), p.state))
            .collect();
        return;
    }
    for ((_, state), p) in seen.paths.iter_mut().zip(&peer.paths) {
        if *state != p.state {
            state_change(name, who, p, *state);
            *state = p.state;
        }
    }
}

fn state_change(
    name: &str,
    who: &dyn Fn() -> String,
    path: &braid_core::path::Path,
    before: PathState,
) {
    match path.state {
        PathState::Down => crate::warn!(
            name,
            "peer {}: path {} to {} down (was {})",
            who(),
            path.name,
            path.remote,
            state_name(before)
        ),
        // A stock peer's only path is the learned one, and it comes up with
        // the session, which has its own info line.
        PathState::Up if path.name == braid_core::peer::LEARNED_PATH => crate::debug!(
            name,
            "peer {}: path {} to {} up",
            who(),
            path.name,
            path.remote
        ),
        PathState::Up => crate::info!(
            name,
            "peer {}: path {} to {} up",
            who(),
            path.name,
            path.remote
        ),
        PathState::Unknown => crate::debug!(
            name,
            "peer {}: path {} to {} no longer probed",
            who(),
            path.name,
            path.remote
        ),
    }
}
