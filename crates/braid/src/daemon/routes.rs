//! Routes for AllowedIPs, wg-quick style. A default route (`/0`) through
//! the tunnel would also capture the tunnel's own UDP packets, so it goes
//! into a table of its own, selected by policy rules for every packet that
//! does not carry the tunnel socket's fwmark.
//!
//! Unlike wg-quick, a full tunnel fails closed (`FailClosed = true`, the
//! default): its table also gets `unreachable default` with the highest
//! metric. The TUN's default route (metric 0) wins while the daemon lives;
//! when the daemon dies without being asked to stop (SIGKILL, a panic, an
//! I/O failure) the TUN and its route vanish with it, the rules stay, and
//! the unreachable route refuses what they send to the table instead of
//! letting it fall through to the main table's default route in the clear.
//! Only a requested stop (`braid down`, SIGTERM/SIGINT/SIGHUP) removes the
//! rules and the unreachable routes; the next `braid up` of the same table
//! replaces what a killed daemon left, and so does `braid down NAME.conf`
//! when no daemon serves NAME any more ([`remove_leftovers`]).

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

/// The families (IPv4, IPv6) a config routes a default route through the
/// tunnel for.
fn full_tunnel_families(cfg: &Config) -> Vec<bool> {
    let mut families = Vec::new();
    for c in cfg.peers.iter().flat_map(|p| &p.allowed_ips) {
        if c.prefix == 0 && !families.contains(&c.addr.is_ipv6()) {
            families.push(c.addr.is_ipv6());
        }
    }
    families
}

/// Refuses a full tunnel whose table already routes via an interface (a
/// live one: a route goes with its interface): another tunnel uses it, and
/// repairing leftovers in it would break that tunnel. Called before the
/// TUN exists, so nothing has changed when it fails.
pub fn check_table_free(cfg: &Config, mark: Option<u32>) -> io::Result<()> {
    let Some(table) = mark else {
        return Ok(());
    };
    for v6 in full_tunnel_families(cfg) {
        let devs = netcfg::table_devices(v6, table)?;
        if !devs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "routing table {table} of the full tunnel already routes via {} \
                     (another full tunnel?); give this one another FwMark (its table follows it)",
                    devs.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// What a daemon of `cfg` that was killed left (the full tunnel's rules and
/// unreachable routes), removed; for `braid down NAME.conf` when no daemon
/// serves NAME. Returns whether there was anything; refuses (and changes
/// nothing) if a live interface routes through the table.
pub fn remove_leftovers(cfg: &Config) -> io::Result<bool> {
    let mark = full_tunnel_mark(cfg);
    check_table_free(cfg, mark)?;
    let Some(table) = mark else {
        return Ok(false);
    };
    let mut found = false;
    for v6 in full_tunnel_families(cfg) {
        let fam = if v6 { "-6" } else { "-4" };
        found |= netcfg::has_fail_closed_route(v6, table)?;
        found |= netcfg::has_full_tunnel_rule(v6, table, table)?;
        netcfg::default_route_rules_del(v6, table, table)
            .map_err(|e| io::Error::new(e.kind(), format!("{fam} rules: {e}")))?;
        netcfg::fail_closed_route_del(v6, table)?;
    }
    Ok(found)
}

/// What was installed beyond the TUN's own routes (which vanish with it).
#[derive(Default)]
pub struct Installed {
    /// (IPv6?, table, fwmark) of policy rules to remove on the way down.
    rules: Vec<(bool, u32, u32)>,
    /// (IPv6?, table) of fail-closed routes.
    fail_closed: Vec<(bool, u32)>,
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
                if cfg.interface.fail_closed {
                    if !installed.fail_closed.contains(&(v6, mark)) {
                        netcfg::fail_closed_route_add(v6, mark)?;
                        installed.fail_closed.push((v6, mark));
                    }
                } else {
                    // One a killed daemon left while the key was on.
                    netcfg::fail_closed_route_del(v6, mark)?;
                }
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
    /// Whether a full tunnel fails closed here: what a stop that nobody
    /// asked for leaves in place.
    pub fn fails_closed(&self) -> bool {
        !self.fail_closed.is_empty()
    }

    /// Removes the rules, then the fail-closed routes (so no rule ever
    /// points at a table without them).
    pub fn remove(&mut self) -> io::Result<()> {
        let mut result = Ok(());
        for (v6, table, mark) in self.rules.drain(..) {
            if let Err(e) = netcfg::default_route_rules_del(v6, table, mark) {
                result = Err(e);
            }
        }
        for (v6, table) in self.fail_closed.drain(..) {
            if let Err(e) = netcfg::fail_closed_route_del(v6, table) {
                result = Err(e);
            }
        }
        result
    }
}
