//! What the daemon does with the userspace API's `set` and `get=1`: a
//! `set` is checked against the device's limits before anything of it is
//! applied, and applied in wireguard-go's order; `get=1` is answered in
//! parts written straight from the device (see [`get_part`]).

use super::control::{InterfaceState, SetEffects};
use crate::cidr::IpCidr;
use crate::keys::PrivateKey;
use crate::uapi::{Errno, GetCursor, GetPeer, GetText, PeerUpdate, Response, SetRequest};
use braid_core::device::Device;
use std::time::Instant;

/// Applies a `set` request to the device in wireguard-go's order: device
/// fields, `replace_peers`, then each peer in sequence. A request that
/// would take the device beyond its peer limit at any point is refused
/// whole (ENOMEM) before anything of it is applied.
pub fn apply_set(device: &mut Device, set: &SetRequest, now: Instant) -> Result<SetEffects, Errno> {
    check_peer_limit(device, set)?;
    let mut effects = SetEffects::default();
    if let Some(key) = &set.private_key {
        device.set_private_key(key.as_ref().map(|k| *k.as_bytes()));
    }
    effects.new_listen_port = set.listen_port;
    effects.new_fwmark = set.fwmark;
    if set.replace_peers {
        device.remove_all_peers();
    }
    for update in &set.peers {
        apply_peer(device, update, now)?;
    }
    Ok(effects)
}

/// Counts the peers `set` leaves after each of its steps, as
/// [`apply_set`] would take them (each public key appears once in a
/// request, which the parser makes sure of), and refuses it if any step
/// goes beyond the device's limit.
pub fn check_peer_limit(device: &Device, set: &SetRequest) -> Result<(), Errno> {
    let now = PeerCount {
        peers: device.peer_count(),
        limit: device.peer_limit(),
        own: device.public_key(),
    };
    if now.fits(set, |public| device.find_peer(public).is_some()) {
        Ok(())
    } else {
        Err(Errno::ENOMEM)
    }
}

/// The device's peers as [`check_peer_limit`] counts them.
struct PeerCount {
    peers: usize,
    limit: usize,
    /// Our public key now.
    own: Option<[u8; 32]>,
}

impl PeerCount {
    /// Whether every step of `set` stays within the limit; `is_peer` says
    /// which keys are peers now.
    fn fits(&self, set: &SetRequest, is_peer: impl Fn(&[u8; 32]) -> bool) -> bool {
        let own = match &set.private_key {
            Some(key) => key.as_ref().map(|k| *k.public_key().as_bytes()),
            None => self.own,
        };
        let known = |public: &[u8; 32]| !set.replace_peers && is_peer(public);
        let mut count = if set.replace_peers { 0 } else { self.peers };
        // A new key of our own that a peer has: that peer goes.
        if own != self.own && own.is_some_and(|own| known(&own)) {
            count -= 1;
        }
        for update in &set.peers {
            let public = update.public_key.as_bytes();
            let exists = known(public) && Some(*public) != own;
            if update.remove {
                count -= usize::from(exists);
            } else if !exists && !update.update_only && Some(*public) != own {
                count += 1;
                if count > self.limit {
                    return false;
                }
            }
        }
        true
    }
}

/// Peer ids a part of a streamed `get=1` covers: the device is held for
/// a few milliseconds per part.
const GET_PART_PEERS: usize = 4096;

/// One part of the `get=1` answer, written from the device: the
/// interface's lines first (`from` is `None`), then the peers with ids
/// from the cursor on, a part's worth; the last part ends the reply.
pub fn get_part(device: &Device, state: &InterfaceState, from: Option<GetCursor>) -> Response {
    let bound = device.peer_id_bound();
    let start = from.map_or(0, |c| c.0).min(bound);
    let end = start.saturating_add(GET_PART_PEERS).min(bound);
    let mut text = GetText::with_capacity(256 + (end - start) * 300);
    if from.is_none() {
        let private = device.private_key().map(PrivateKey::from_bytes);
        text.header(private.as_ref(), state.listen_port, state.fwmark);
    }
    for pid in start..end {
        let Some(p) = device.peer(pid) else {
            continue;
        };
        let peer = GetPeer {
            public_key: &p.remote.public,
            preshared_key: &p.remote.preshared,
            endpoint: p.endpoint(),
            last_handshake: p.last_handshake,
            tx_bytes: p.counters.tx_bytes,
            rx_bytes: p.counters.rx_bytes,
            persistent_keepalive_interval: p.persistent_keepalive,
        };
        let ips = device.allowed_ips_of(pid);
        text.peer(
            &peer,
            ips.into_iter()
                .filter_map(|(addr, prefix)| IpCidr::new(addr, prefix)),
        );
    }
    let more = (end < bound).then_some(GetCursor(end));
    if more.is_none() {
        text.end();
    }
    Response::GetPart {
        text: text.into_text(),
        more,
    }
}

fn apply_peer(device: &mut Device, update: &PeerUpdate, now: Instant) -> Result<(), Errno> {
    let public = *update.public_key.as_bytes();
    if update.remove {
        device.remove_peer(&public);
        return Ok(());
    }
    let pid = match device.find_peer(&public) {
        Some(pid) => pid,
        None if update.update_only => return Ok(()),
        // Our own public key: WireGuard ignores such a peer.
        None => match device.add_peer(public) {
            Some(pid) => pid,
            None if device.public_key() == Some(public) => return Ok(()),
            None => return Err(Errno::ENOMEM),
        },
    };
    if let Some(psk) = &update.preshared_key {
        device.set_preshared_key(pid, psk.as_ref().map_or([0; 32], |k| *k.as_bytes()));
    }
    if let Some(endpoint) = update.endpoint {
        device.set_endpoint(pid, endpoint);
    }
    if update.replace_allowed_ips {
        device.clear_allowed_ips(pid);
    }
    for cidr in &update.allowed_ips {
        device
            .add_allowed_ip(pid, cidr.addr, cidr.prefix)
            .map_err(|_| Errno::EINVAL)?;
    }
    if let Some(seconds) = update.persistent_keepalive_interval {
        device.set_persistent_keepalive(now, pid, seconds);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::PublicKey;
    use crate::uapi::{parse_request, Request};

    fn key(n: u8) -> PublicKey {
        let mut k = [7u8; 32];
        k[0] = n;
        PublicKey::from_bytes(k)
    }

    fn set(text: &str) -> SetRequest {
        match parse_request(&format!("set=1\n{text}\n")).unwrap() {
            Request::Set(s) => s,
            other => panic!("{other:?}"),
        }
    }

    /// Case table: three peers now (keys 1, 2, 3), a limit of four.
    #[test]
    fn a_set_is_counted_step_by_step_against_the_limit() {
        let now = PeerCount {
            peers: 3,
            limit: 4,
            own: None,
        };
        let is_peer = |k: &[u8; 32]| (1..=3).contains(&k[0]) && k[1..] == [7; 31];
        let line = |n: u8| format!("public_key={}\n", key(n).to_hex());
        let cases = [
            ("one new peer", line(4), true),
            ("two new peers", line(4) + &line(5), false),
            (
                "a remove first makes room",
                line(1) + "remove=true\n" + &line(4) + &line(5),
                true,
            ),
            (
                "a remove after comes too late",
                line(4) + &line(5) + &line(1) + "remove=true\n",
                false,
            ),
            (
                "known peers cost nothing",
                line(1) + &line(2) + &line(3) + &line(4),
                true,
            ),
            (
                "update_only adds nobody",
                line(4) + &line(5) + "update_only=true\n",
                true,
            ),
            (
                "removing a stranger frees nothing",
                line(9) + "remove=true\n" + &line(4) + &line(5),
                false,
            ),
            (
                "replace_peers starts from none",
                "replace_peers=true\n".to_string() + &line(4) + &line(5) + &line(6) + &line(1),
                true,
            ),
            (
                "replace_peers still counts",
                "replace_peers=true\n".to_string()
                    + &line(4)
                    + &line(5)
                    + &line(6)
                    + &line(8)
                    + &line(9),
                false,
            ),
        ];
        for (what, text, fits) in cases {
            assert_eq!(now.fits(&set(&text), is_peer), fits, "{what}");
        }
    }

    /// A part of `get=1` is at most a part's worth of peer ids; the parts
    /// together list every peer once, with its AllowedIPs, and end the
    /// reply once.
    #[test]
    fn get_parts_list_every_peer_once() {
        let mut device = Device::new(Instant::now(), std::time::SystemTime::UNIX_EPOCH, [1; 32]);
        device.set_private_key(Some([9; 32]));
        let peers = 2 * GET_PART_PEERS + 10;
        for n in 0..peers as u32 {
            let mut k = [3u8; 32];
            k[..4].copy_from_slice(&n.to_le_bytes());
            let pid = device.add_peer(k).unwrap();
            let addr = std::net::Ipv4Addr::from(0xc613_0000 + n);
            device.add_allowed_ip(pid, addr.into(), 32).unwrap();
        }
        // A removed peer's slot is skipped.
        let mut gone = [3u8; 32];
        gone[..4].copy_from_slice(&5u32.to_le_bytes());
        device.remove_peer(&gone);
        let state = InterfaceState {
            listen_port: 51820,
            fwmark: 0,
        };
        let mut text = String::new();
        let mut cursor = None;
        let mut parts = 0;
        loop {
            let Response::GetPart { text: part, more } = get_part(&device, &state, cursor) else {
                panic!("not a part");
            };
            parts += 1;
            text.push_str(&part);
            match more {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(parts, 3);
        assert!(text.starts_with("private_key="));
        assert_eq!(text.matches("public_key=").count(), peers - 1);
        assert_eq!(text.matches("allowed_ip=").count(), peers - 1);
        assert_eq!(text.matches("errno=0\n\n").count(), 1);
        assert!(text.ends_with("errno=0\n\n"));
        assert!(text.contains("allowed_ip=198.19.0.4/32\n"));
        assert!(!text.contains("allowed_ip=198.19.0.5/32\n"));
    }
}
