//! Following the interface wherever it is (docs/netns.md).
//!
//! The interface may be renamed or moved to another network namespace
//! (`ip link set NAME netns OTHER`) while the daemon and its UDP sockets
//! stay where they are. So the daemon never looks its interface up by the
//! name it created it with in its own namespace: it asks its TUN
//! descriptor, which knows the device's current name and namespace
//! ([`braid_io::Tun::link_state`]), and learns of its deletion from the
//! descriptor too (`EBADFD` on every call once the interface is gone).

use braid_io::{is_removed_error, LinkState, Tun};

/// What housekeeping found.
pub enum Seen {
    /// The interface was deleted: the daemon stops.
    Removed,
    /// The interface is there with this MTU; `moved`: it changed
    /// namespace since the last look.
    There { mtu: u32, moved: bool },
    /// It could not be asked this time (logged once per kind of failure).
    Unknown,
}

/// The last state seen, to log what changed.
#[derive(Default)]
pub struct Watch {
    last: Option<LinkState>,
    last_error: Option<String>,
}

impl Watch {
    /// Asks the kernel about `tun`'s interface; logs moves, renames, up and
    /// down and MTU changes under `name` (the name it was created with).
    pub fn check(&mut self, tun: &Tun, name: &str) -> Seen {
        let state = match tun.link_state() {
            Ok(s) => s,
            Err(e) if is_removed_error(&e) => return Seen::Removed,
            Err(e) => {
                let msg = e.to_string();
                if self.last_error.as_deref() != Some(&msg) {
                    crate::warn!(name, "cannot look at the interface: {msg}");
                    self.last_error = Some(msg);
                }
                return Seen::Unknown;
            }
        };
        self.last_error = None;
        let mut moved = false;
        match &self.last {
            Some(last) => {
                moved = last.netns_id != state.netns_id;
                for change in changes(last, &state) {
                    crate::info!(name, "{change}");
                }
            }
            None if state.netns_id.is_some() => {
                crate::info!(
                    name,
                    "interface {} is in another network namespace",
                    state.name
                );
            }
            None => {}
        }
        let mtu = state.mtu;
        self.last = Some(state);
        Seen::There { mtu, moved }
    }
}

/// What differs between two looks at the interface, as log lines.
fn changes(old: &LinkState, new: &LinkState) -> Vec<String> {
    let mut out = Vec::new();
    if old.netns_id != new.netns_id {
        out.push(match new.netns_id {
            None => format!(
                "interface {} is back in the daemon's network namespace",
                new.name
            ),
            Some(id) => format!(
                "interface {} moved to another network namespace (id {id} here); the UDP \
                 sockets stay in the daemon's",
                new.name
            ),
        });
    } else if old.name != new.name {
        out.push(format!("interface renamed {} -> {}", old.name, new.name));
    }
    if old.up != new.up {
        let state = if new.up { "up" } else { "down" };
        out.push(format!("interface {} is {state}", new.name));
    }
    if old.mtu != new.mtu {
        out.push(format!("interface MTU {} -> {}", old.mtu, new.mtu));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(netns_id: Option<i32>, up: bool, mtu: u32) -> LinkState {
        LinkState {
            name: "wg0".into(),
            index: 3,
            mtu,
            up,
            netns_id,
        }
    }

    #[test]
    fn changes_are_named() {
        let a = state(None, true, 1420);
        assert!(changes(&a, &a).is_empty());
        let moved = changes(&a, &state(Some(0), false, 1420));
        assert_eq!(moved.len(), 2, "{moved:?}");
        assert!(moved[0].contains("moved to another network namespace"));
        assert!(moved[1].contains("down"));
        let back = changes(&state(Some(0), true, 1300), &state(None, true, 1300));
        assert!(back[0].contains("back"), "{back:?}");
        let mtu = changes(&a, &state(None, true, 1300));
        assert_eq!(mtu, vec!["interface MTU 1420 -> 1300".to_string()]);
    }
}
