//! Routes for AllowedIPs, wg-quick style. A default route (`/0`) through
//! the tunnel would also capture the tunnel's own UDP packets, so it goes
//! into a table of its own, selected by policy rules for every packet that
//! does not carry the tunnel socket's fwmark.

use crate::config::{Config, Table};
use braid_io::netcfg;
use std::io;

/// wg-quick's default table and mark for a full tunnel.
pub const DEFAULT_FULL_TUNNEL_TABLE: u32 = 51820;

/// The fwmark the tunnel socket needs, if the config routes a default
/// route through the tunnel with `Table = auto`.
pub fn full_tunnel_mark(cfg: &Config) -> Option<u32> {
    let full = cfg
        .peers
        .iter()
        .flat_map(|p| &p.allowed_ips)
        .any(|c| c.prefix == 0);
    (full && cfg.interface.table == Table::Auto)
        .then(|| cfg.interface.fwmark.unwrap_or(DEFAULT_FULL_TUNNEL_TABLE))
}

/// What was installed beyond the TUN's own routes (which vanish with it).
#[derive(Default)]
pub struct Installed {
    /// (IPv6?, table, fwmark) of policy rules to remove on the way down.
    rules: Vec<(bool, u32, u32)>,
}

/// Adds a route per AllowedIPs entry; `mark` is [`full_tunnel_mark`].
/// On error, whatever was already installed is removed again.
pub fn install(name: &str, cfg: &Config, mark: Option<u32>) -> io::Result<Installed> {
    let mut installed = Installed::default();
    if let Err(e) = install_into(&mut installed, name, cfg, mark) {
        let _ = installed.remove();
        return Err(e);
    }
    Ok(installed)
}

fn install_into(
    installed: &mut Installed,
    name: &str,
    cfg: &Config,
    mark: Option<u32>,
) -> io::Result<()> {
    let table = match cfg.interface.table {
        Table::Off => return Ok(()),
        Table::Auto => None,
        Table::Id(id) => Some(id),
    };
    for cidr in cfg.peers.iter().flat_map(|p| &p.allowed_ips) {
        let dest = cidr.network().to_string();
        match (cidr.prefix, table, mark) {
            (0, None, Some(mark)) => {
                let v6 = cidr.addr.is_ipv6();
                netcfg::route_add(&dest, name, Some(mark))?;
                if !installed.rules.iter().any(|r| r.0 == v6) {
                    netcfg::default_route_rules_add(v6, mark, mark)?;
                    installed.rules.push((v6, mark, mark));
                }
                if !v6 {
                    // Replies must pass reverse-path checks on the marked socket.
                    let _ = std::fs::write("/proc/sys/net/ipv4/conf/all/src_valid_mark", "1");
                }
            }
            _ => netcfg::route_add(&dest, name, table)?,
        }
    }
    Ok(())
}

impl Installed {
    pub fn remove(&mut self) -> io::Result<()> {
        let mut result = Ok(());
        for (v6, table, mark) in self.rules.drain(..) {
            if let Err(e) = netcfg::default_route_rules_del(v6, table, mark) {
                result = Err(e);
            }
        }
        result
    }
}
