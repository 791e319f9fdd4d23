//! `braid syncconf NAME FILE`: a changed config file for a running
//! interface, applied without dropping its sessions (what `wg syncconf`
//! does for WireGuard, with braid's own keys too). `braid@.service` runs it
//! for `systemctl reload braid@NAME`.
//!
//! The file is checked here as `braid up` checks it (mode, syntax, host
//! names) before the daemon is asked, so a mistake is reported with its
//! file, line and key and nothing changes; the daemon then parses the same
//! text, applies what differs and answers with notes ([`uapi::sync`]).

use crate::config::Config;
use crate::daemon;
use crate::uapi::{self, sync::ConfigText};
use std::path::Path;

/// Applies `file` to interface `name`; returns the daemon's notes (what
/// changed, what waits for a restart).
pub fn run(name: &str, file: &Path) -> Result<Vec<String>, String> {
    let (config, file_text) = Config::load_with_text(file).map_err(|e| e.to_string())?;
    daemon::config_to_set(&config).map_err(|e| format!("{}: {e}", file.display()))?;
    let socket = uapi::socket_path(name);
    let request = ConfigText {
        source: file_text.name,
        text: file_text.text,
    };
    uapi::sync::sync_config(&socket, &request)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => format!(
                "no braid interface {name} ({}: {e}); `braid up {}` brings it up",
                socket.display(),
                file.display()
            ),
            std::io::ErrorKind::PermissionDenied => format!(
                "{}: {e} (only root may change an interface)",
                socket.display()
            ),
            _ => format!("{name}: {e}"),
        })?
        .map_err(|e| format!("{name}: nothing changed: {e}"))
}
