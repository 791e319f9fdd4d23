//! Interface configuration through `ip` (iproute2).
//!
//! This runs a handful of times per `braid up`/`down`, never on the data
//! path, so shelling out costs nothing that matters, and it buys behaviour
//! operators already know plus `ip`'s own error messages, which every error
//! here carries together with the exact command that failed.
//!
//! Routes use `replace` so re-applying a configuration is idempotent;
//! addresses likewise use `ip addr replace`.

use std::io;
use std::path::PathBuf;
use std::process::Command;

/// Sets the MTU of `dev`.
pub fn link_set_mtu(dev: &str, mtu: u32) -> io::Result<()> {
    check_dev(dev)?;
    ip(&["link", "set", "dev", dev, "mtu", &mtu.to_string()])
}

/// Brings `dev` up.
pub fn link_set_up(dev: &str) -> io::Result<()> {
    check_dev(dev)?;
    ip(&["link", "set", "dev", dev, "up"])
}

/// Deletes `dev`. A braid TUN goes away by itself when its descriptor is
/// closed; this is for clearing a leftover interface of the same name.
pub fn link_del(dev: &str) -> io::Result<()> {
    check_dev(dev)?;
    ip(&["link", "del", "dev", dev])
}

/// Whether an interface named `dev` exists (in this network namespace).
pub fn link_exists(dev: &str) -> bool {
    check_dev(dev).is_ok() && sys_path(dev).exists()
}

/// The current MTU of `dev`, from `/sys/class/net/DEV/mtu`.
pub fn link_mtu(dev: &str) -> io::Result<u32> {
    check_dev(dev)?;
    let path = sys_path(dev).join("mtu");
    let s = std::fs::read_to_string(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("read {}: {e}", path.display())))?;
    s.trim().parse().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {:?}: {e}", path.display(), s.trim()),
        )
    })
}

/// Adds an address with prefix length, e.g. `"198.19.0.1/24"` or
/// `"2001:db8::1/64"`, to `dev`; adding one that is already there succeeds.
pub fn addr_add(dev: &str, cidr: &str) -> io::Result<()> {
    check_dev(dev)?;
    let family = family(cidr)?;
    ip(&[family, "addr", "replace", cidr, "dev", dev])
}

/// Routes `dest_cidr` (e.g. `"198.18.0.0/16"`, `"2001:db8::/32"`,
/// `"0.0.0.0/0"`) via `dev`, in routing table `table` if given (else
/// `main`). Replaces an existing route to the same destination.
pub fn route_add(dest_cidr: &str, dev: &str, table: Option<u32>) -> io::Result<()> {
    route("replace", dest_cidr, dev, table)
}

/// Removes the route that [`route_add`] installed.
pub fn route_del(dest_cidr: &str, dev: &str, table: Option<u32>) -> io::Result<()> {
    route("del", dest_cidr, dev, table)
}

fn route(verb: &str, dest_cidr: &str, dev: &str, table: Option<u32>) -> io::Result<()> {
    check_dev(dev)?;
    let family = family(dest_cidr)?;
    let table = table.map(|t| t.to_string());
    let mut args = vec![family, "route", verb, dest_cidr, "dev", dev];
    if let Some(t) = &table {
        args.extend(["table", t.as_str()]);
    }
    ip(&args)
}

/// Policy routing for a full tunnel, as wg-quick sets it up: everything
/// not marked with `fwmark` (the tunnel's own UDP packets are) looks up
/// `table`, which routes via the tunnel; the main table still wins for
/// anything more specific than its default route.
///
/// Leftovers of a daemon that was killed (its rules for the same table and
/// mark) are removed first, so the rules are never duplicated; see
/// [`default_route_rules_del`].
pub fn default_route_rules_add(ipv6: bool, table: u32, fwmark: u32) -> io::Result<()> {
    default_route_rules_del(ipv6, table, fwmark)?;
    let fam = if ipv6 { "-6" } else { "-4" };
    let (table, mark) = (table.to_string(), fwmark.to_string());
    ip(&[fam, "rule", "add", "not", "fwmark", &mark, "table", &table])?;
    ip(&[
        fam,
        "rule",
        "add",
        "table",
        "main",
        "suppress_prefixlength",
        "0",
    ])
}

/// Removes the rules of [`default_route_rules_add`]: every `not fwmark
/// FWMARK lookup TABLE` rule (also those a killed daemon left), then
/// `lookup main suppress_prefixlength 0` rules until there are no more of
/// them than full tunnels still routed (each adds one, wg-quick's too).
/// Absent rules are no error.
pub fn default_route_rules_del(ipv6: bool, table: u32, fwmark: u32) -> io::Result<()> {
    let fam = if ipv6 { "-6" } else { "-4" };
    let rules = ip_output(&[fam, "rule", "show"])?;
    let ours = rules
        .lines()
        .filter(|l| is_full_tunnel_rule(l, Some((table, fwmark))))
        .count();
    let others = rules
        .lines()
        .filter(|l| is_full_tunnel_rule(l, None))
        .count()
        - ours;
    let suppress = rules.lines().filter(|l| is_suppress_rule(l)).count();
    let (table, mark) = (table.to_string(), fwmark.to_string());
    for _ in 0..ours {
        ip(&[fam, "rule", "del", "not", "fwmark", &mark, "table", &table])?;
    }
    for _ in others..suppress {
        ip(&[
            fam,
            "rule",
            "del",
            "table",
            "main",
            "suppress_prefixlength",
            "0",
        ])?;
    }
    Ok(())
}

/// Whether a `not fwmark FWMARK lookup TABLE` rule exists.
pub fn has_full_tunnel_rule(ipv6: bool, table: u32, fwmark: u32) -> io::Result<bool> {
    let fam = if ipv6 { "-6" } else { "-4" };
    Ok(ip_output(&[fam, "rule", "show"])?
        .lines()
        .any(|l| is_full_tunnel_rule(l, Some((table, fwmark)))))
}

/// `ip rule show` line of a full tunnel: `not from all fwmark MARK lookup
/// TABLE`, of this (table, mark) or, with `None`, of any.
fn is_full_tunnel_rule(line: &str, which: Option<(u32, u32)>) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .copied()
    };
    if words.get(1) != Some(&"not") {
        return false;
    }
    let (Some(mark), Some(lookup)) = (after("fwmark"), after("lookup")) else {
        return false;
    };
    match which {
        None => true,
        Some((table, fwmark)) => {
            let mark = match mark.strip_prefix("0x") {
                Some(hex) => u32::from_str_radix(hex, 16).ok(),
                None => mark.parse().ok(),
            };
            mark == Some(fwmark) && lookup.parse() == Ok(table)
        }
    }
}

/// `ip rule show` line `from all lookup main suppress_prefixlength 0`.
fn is_suppress_rule(line: &str) -> bool {
    let rest = line.split_once(':').map_or(line, |(_, r)| r);
    rest.split_whitespace().collect::<Vec<_>>()
        == [
            "from",
            "all",
            "lookup",
            "main",
            "suppress_prefixlength",
            "0",
        ]
}

/// The metric of a full tunnel's fail-closed route: the highest, so the
/// TUN's own default route in the same table (metric 0) wins while the TUN
/// exists.
pub const FAIL_CLOSED_METRIC: u32 = u32::MAX;

/// Adds `unreachable default metric FAIL_CLOSED_METRIC` to `table`: a
/// route that, unlike the TUN's, outlives the daemon, so what the full
/// tunnel's rules send to `table` is refused ("Network is unreachable" /
/// "No route to host") instead of falling through to the main table's
/// default route in the clear. Adding it again changes nothing.
pub fn fail_closed_route_add(ipv6: bool, table: u32) -> io::Result<()> {
    fail_closed_route("replace", ipv6, table)
}

/// Removes the route of [`fail_closed_route_add`]; absent is no error.
pub fn fail_closed_route_del(ipv6: bool, table: u32) -> io::Result<()> {
    if !has_fail_closed_route(ipv6, table)? {
        return Ok(());
    }
    fail_closed_route("del", ipv6, table)
}

/// Whether `table` holds the route of [`fail_closed_route_add`].
pub fn has_fail_closed_route(ipv6: bool, table: u32) -> io::Result<bool> {
    let metric = format!("metric {FAIL_CLOSED_METRIC}");
    Ok(table_routes(ipv6, table)?
        .iter()
        .any(|l| l.starts_with("unreachable default") && l.contains(&metric)))
}

fn fail_closed_route(verb: &str, ipv6: bool, table: u32) -> io::Result<()> {
    let fam = if ipv6 { "-6" } else { "-4" };
    let (table, metric) = (table.to_string(), FAIL_CLOSED_METRIC.to_string());
    ip(&[
        fam,
        "route",
        verb,
        "unreachable",
        "default",
        "table",
        &table,
        "metric",
        &metric,
    ])
}

/// The routes of `table`, one `ip route show` line each (none if the
/// table does not exist).
pub fn table_routes(ipv6: bool, table: u32) -> io::Result<Vec<String>> {
    let fam = if ipv6 { "-6" } else { "-4" };
    let table = table.to_string();
    match ip_output(&[fam, "route", "show", "table", &table]) {
        Ok(out) => Ok(out.lines().map(str::to_string).collect()),
        Err(e) if e.to_string().contains("table does not exist") => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The interfaces that routes of `table` lead to. Routes that refuse
/// (`unreachable`, `blackhole`, `prohibit`, `throw`: IPv6 shows them
/// `dev lo`) lead nowhere; a route via an interface that is gone is gone
/// with it, so every interface listed exists.
pub fn table_devices(ipv6: bool, table: u32) -> io::Result<Vec<String>> {
    Ok(route_devices(&table_routes(ipv6, table)?))
}

fn route_devices(lines: &[String]) -> Vec<String> {
    let mut devs: Vec<String> = Vec::new();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        if matches!(
            words.first(),
            Some(&("unreachable" | "blackhole" | "prohibit" | "throw"))
        ) {
            continue;
        }
        if let Some(dev) = words
            .iter()
            .position(|w| *w == "dev")
            .and_then(|i| words.get(i + 1))
        {
            if !devs.iter().any(|d| d == dev) {
                devs.push(dev.to_string());
            }
        }
    }
    devs
}

/// `-4` or `-6` for an address or CIDR; also rejects anything that is not
/// one, so no argument can be mistaken for an `ip` option.
fn family(cidr: &str) -> io::Result<&'static str> {
    let (addr, prefix) = match cidr.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (cidr, None),
    };
    let v6 = match addr.parse::<std::net::IpAddr>() {
        Ok(a) => a.is_ipv6(),
        Err(_) => return Err(invalid(format!("not an IP address or CIDR: {cidr:?}"))),
    };
    if let Some(p) = prefix {
        let max = if v6 { 128 } else { 32 };
        match p.parse::<u8>() {
            Ok(p) if p <= max => {}
            _ => return Err(invalid(format!("bad prefix length in {cidr:?}"))),
        }
    }
    Ok(if v6 { "-6" } else { "-4" })
}

fn check_dev(dev: &str) -> io::Result<()> {
    let ok = !dev.is_empty()
        && dev.len() < libc::IFNAMSIZ
        && dev != "."
        && dev != ".."
        && !dev.starts_with('-')
        && !dev
            .bytes()
            .any(|b| b == b'/' || b == 0 || b.is_ascii_whitespace());
    if ok {
        Ok(())
    } else {
        Err(invalid(format!("invalid interface name {dev:?}")))
    }
}

fn sys_path(dev: &str) -> PathBuf {
    PathBuf::from("/sys/class/net").join(dev)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Runs `ip ARGS...`; on failure the error names the command and carries
/// ip's stderr.
fn ip(args: &[&str]) -> io::Result<()> {
    ip_output(args).map(drop)
}

/// [`ip`], returning what it printed.
fn ip_output(args: &[&str]) -> io::Result<String> {
    let cmd = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("`{cmd}`: cannot run ip: {e}")))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(io::Error::other(format!(
        "`{cmd}` failed ({}): {}",
        out.status,
        stderr.trim()
    )))
}

/// The interface that holds `addr`, if any (for tying a line's socket to
/// the interface of its source address).
pub fn interface_with_address(addr: std::net::IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points at a sockaddr whose family says its type.
        let this = unsafe {
            match (*ifa.ifa_addr).sa_family as libc::c_int {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    Some(std::net::IpAddr::from(
                        u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                    ))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    Some(std::net::IpAddr::from(sin6.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if this == Some(addr) {
            // SAFETY: ifa_name is a NUL-terminated C string in the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: frees the list getifaddrs allocated, once.
    unsafe { libc::freeifaddrs(head) };
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert_eq!(family("198.19.0.1/24").unwrap(), "-4");
        assert_eq!(family("0.0.0.0/0").unwrap(), "-4");
        assert_eq!(family("2001:db8::1/64").unwrap(), "-6");
        assert_eq!(family("2001:db8::1").unwrap(), "-6");
        assert!(family("198.19.0.1/33").is_err());
        assert!(family("-f/24").is_err());
        assert!(family("default").is_err());
    }

    #[test]
    fn dev_names() {
        assert!(check_dev("braid0").is_ok());
        assert!(check_dev("").is_err());
        assert!(check_dev("../x").is_err());
        assert!(check_dev("-x").is_err());
        assert!(check_dev("0123456789abcdef").is_err());
        assert!(!link_exists("no such dev"));
        assert!(link_exists("lo"));
        assert_eq!(link_mtu("lo").unwrap(), 65536);
    }

    #[test]
    fn full_tunnel_rules() {
        let ours = "32765:\tnot from all fwmark 0xca6c lookup 51820";
        assert!(is_full_tunnel_rule(ours, Some((51820, 51820))));
        assert!(is_full_tunnel_rule(ours, None));
        assert!(!is_full_tunnel_rule(ours, Some((51820, 0x77))));
        assert!(!is_full_tunnel_rule(ours, Some((51821, 51820))));
        let other = "32763:\tnot from all fwmark 0x77 lookup 119";
        assert!(is_full_tunnel_rule(other, Some((119, 0x77))));
        assert!(!is_full_tunnel_rule(other, Some((51820, 51820))));
        assert!(!is_full_tunnel_rule("32766:\tfrom all lookup main", None));
        assert!(!is_full_tunnel_rule(
            "32766:\tfrom all fwmark 0xca6c lookup 51820",
            None
        ));
        let suppress = "32764:\tfrom all lookup main suppress_prefixlength 0";
        assert!(is_suppress_rule(suppress));
        assert!(!is_full_tunnel_rule(suppress, None));
        assert!(!is_suppress_rule("32766:\tfrom all lookup main"));
        assert!(!is_suppress_rule(ours));
    }

    #[test]
    fn devices_of_routes() {
        let lines: Vec<String> = [
            "default dev b1a scope link",
            "unreachable default dev lo metric 4294967295 pref medium",
            "unreachable default metric 4294967295",
            "blackhole 198.18.0.0/16",
            "198.19.0.0/16 via 198.18.1.2 dev eth0",
            "198.19.1.0/24 dev b1a scope link",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(route_devices(&lines), ["b1a", "eth0"]);
        assert!(route_devices(&lines[1..4]).is_empty());
    }

    #[test]
    fn error_names_command() {
        let e = link_set_up("braidnonexist0").unwrap_err().to_string();
        assert!(e.contains("ip link set dev braidnonexist0 up"), "{e}");
    }
}
