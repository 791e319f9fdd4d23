use super::*;
use crate::config::keys::{Reload, Section, KEYS};

// RFC 7748's Alice and Bob.
const SK: &str = "dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo=";
const PEER_SK: &str = "XasIfmJKikt54X+Lg4AO5m87sSkmGLb9HC+LJ/+I4Os=";

fn peer_key() -> String {
    PrivateKey::from_base64(PEER_SK)
        .unwrap()
        .public_key()
        .to_string()
}

/// A small running config with `interface` and `peer` lines added.
fn config(interface: &[&str], peer: &[&str]) -> Config {
    let text = format!(
        "[Interface]\nPrivateKey = {SK}\nAddress = 198.19.0.1/24\n{}\n[Peer]\nPublicKey = {}\nAllowedIPs = 198.19.0.2/32\n{}\n",
        interface.join("\n"),
        peer_key(),
        peer.join("\n")
    );
    Config::parse(&text, "wg0.conf").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn every_key_the_table_leaves_for_a_restart_is_noted_and_no_other() {
    let base = config(&[], &[]);
    for key in KEYS {
        if matches!(key.name, "PrivateKey" | "PublicKey" | "PresharedKey") {
            continue;
        }
        let line = format!("{} = {}", key.name, key.example);
        let changed = match key.section {
            // Address is in the base already: a second one is a change.
            Section::Interface => config(&[&line], &[]),
            Section::Peer if key.name == "AllowedIPs" => {
                config(&[], &["AllowedIPs = 198.19.9.0/24"])
            }
            Section::Peer => config(&[], &[&line]),
        };
        let notes = restart_notes(&base, &changed);
        let noted = notes
            .iter()
            .any(|n| n.starts_with(&format!("{} in", key.name)));
        match key.reload {
            Reload::Restart => assert!(noted, "{}: {notes:?}", key.name),
            Reload::Live | Reload::NextSession => {
                assert!(
                    notes.is_empty(),
                    "{} is applied on reload: {notes:?}",
                    key.name
                )
            }
        }
    }
    assert!(restart_notes(&base, &base).is_empty());
}

#[test]
fn a_full_tunnel_coming_or_going_waits_for_a_restart() {
    let split = config(&[], &[]);
    let full = config(&[], &["AllowedIPs = 0.0.0.0/0"]);
    let notes = restart_notes(&split, &full);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("full tunnel"), "{notes:?}");
    assert_eq!(restart_notes(&full, &split).len(), 1);
    let marked = config(&["FwMark = 0x99"], &["AllowedIPs = 0.0.0.0/0"]);
    assert!(restart_notes(&full, &marked)[0].contains("FwMark"));
}

#[test]
fn routes_follow_allowed_ips_by_network_without_the_default_route() {
    let old = config(&[], &["AllowedIPs = 198.19.5.0/24, 198.19.6.7/24"]);
    let new = config(
        &[],
        &["AllowedIPs = 198.19.6.0/24, 198.19.7.0/24, 0.0.0.0/0"],
    );
    let (added, removed) = route_changes(&old, &new);
    let show = |v: Vec<IpCidr>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(show(added), ["198.19.7.0/24"]);
    assert_eq!(show(removed), ["198.19.5.0/24"]);
    let (added, removed) = route_changes(&old, &old);
    assert!(added.is_empty() && removed.is_empty());
}

#[test]
fn paths_are_added_removed_and_changed_by_name() {
    let old = config(
        &[],
        &[
            "Path = fibre bind=eth1 endpoint=198.18.1.1:51820",
            "Path = lte bind=198.18.2.2 endpoint=198.18.1.1:51820",
            "Path = dsl bind=eth3 endpoint=198.18.1.1:51820",
            "Path = tcp1 endpoint=198.18.1.1:443 transport=tcp",
        ],
    );
    let new = config(
        &[],
        &[
            "Path = fibre bind=eth1 endpoint=198.18.1.1:51820",
            "Path = lte bind=198.18.2.2 endpoint=198.18.1.9:51820",
            "Path = sat bind=eth4 endpoint=198.18.1.1:51820",
            "Path = tcp1 endpoint=198.18.1.1:443 transport=tcp",
        ],
    );
    let (gone, added) = path_changes(Some(&old.peers[0]), &new.peers[0]);
    assert_eq!(gone, ["lte", "dsl"]);
    let names: Vec<&str> = added.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["lte", "sat"]);
    // A new peer's paths are all new; TCP paths are the restart's.
    let (gone, added) = path_changes(None, &new.peers[0]);
    assert!(gone.is_empty());
    assert_eq!(added.len(), 3);
    let tcp_changed = config(&[], &["Path = tcp1 endpoint=198.18.1.2:443 transport=tcp"]);
    assert!(restart_notes(&old, &tcp_changed)
        .iter()
        .any(|n| n.starts_with("Transport in")));
}

#[test]
fn the_running_copy_holds_no_secret() {
    let c = config(
        &[],
        &[&format!(
            "PresharedKey = {}",
            crate::keys::PresharedKey::generate().to_base64().as_str()
        )],
    );
    let running = Running::new(&c);
    assert!(running.0.interface.private_key.is_zero());
    assert!(running.0.peers.iter().all(|p| p.preshared_key.is_none()));
    assert_eq!(running.0.peers[0].allowed_ips, c.peers[0].allowed_ips);
}
