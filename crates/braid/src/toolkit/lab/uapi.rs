//! What every WireGuard userspace implementation shares: the UAPI socket
//! under `/var/run/wireguard` (one directory for all namespaces, which is
//! why interface names must be unique), and the text `wg show` prints.

use super::netns::run_in;
use super::process::{Out, SHORT};
use std::path::{Path, PathBuf};

/// Directory where WireGuard userspace implementations put their UAPI sockets.
pub const WG_RUN_DIR: &str = "/var/run/wireguard";

/// The UAPI socket of interface `ifname`.
pub fn sock_path(ifname: &str) -> PathBuf {
    Path::new(WG_RUN_DIR).join(format!("{ifname}.sock"))
}

/// `wg show NAME` inside a namespace (never `dump`/`showconf`, which print
/// the private key).
pub fn wg_show(ns: impl AsRef<str>, ifname: &str) -> Out {
    run_in(ns.as_ref(), "wg", &["show", ifname], SHORT)
}

/// Parses a human-readable size from `wg show` ("788 B", "1.23 MiB").
pub fn parse_size(s: &str) -> Option<f64> {
    let mut it = s.split_whitespace();
    let num: f64 = it.next()?.parse().ok()?;
    let mult = match it.next().unwrap_or("B") {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0f64.powi(4),
        _ => return None,
    };
    Some(num * mult)
}

/// From `wg show` output: (received, sent) bytes of every peer's `transfer:`.
pub fn parse_transfers(show: &str) -> Vec<(f64, f64)> {
    show.lines()
        .filter_map(|l| l.trim().strip_prefix("transfer:"))
        .filter_map(|rest| {
            let (rx, tx) = rest.split_once(',')?;
            let rx = rx.trim().strip_suffix("received")?.trim();
            let tx = tx.trim().strip_suffix("sent")?.trim();
            Some((parse_size(rx)?, parse_size(tx)?))
        })
        .collect()
}
