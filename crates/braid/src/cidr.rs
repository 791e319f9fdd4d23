//! IP prefixes as written in `Address =` and `AllowedIPs =`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An address with a prefix length. `addr` keeps its host bits, because an
/// interface `Address = 10.0.0.1/24` means "this host, on that network";
/// use [`IpCidr::network`] for the masked form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpCidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrParseError {
    input: String,
    reason: &'static str,
}

impl fmt::Display for CidrParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid IP prefix {:?} ({})", self.input, self.reason)
    }
}

impl std::error::Error for CidrParseError {}

fn max_prefix(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

impl IpCidr {
    /// `None` if `prefix` is too long for the address family.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        (prefix <= max_prefix(addr)).then_some(IpCidr { addr, prefix })
    }

    /// A single host: /32 or /128.
    pub fn host(addr: IpAddr) -> Self {
        IpCidr {
            addr,
            prefix: max_prefix(addr),
        }
    }

    pub fn network(&self) -> IpCidr {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        IpCidr {
            addr,
            prefix: self.prefix,
        }
    }

    /// Never true across address families (an IPv4-mapped IPv6 address is
    /// not inside an IPv4 prefix), matching WireGuard's allowed-IPs tables.
    pub fn contains(&self, ip: IpAddr) -> bool {
        if self.addr.is_ipv4() != ip.is_ipv4() {
            return false;
        }
        IpCidr {
            addr: ip,
            prefix: self.prefix,
        }
        .network()
            == self.network()
    }
}

impl FromStr for IpCidr {
    type Err = CidrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| CidrParseError {
            input: s.to_string(),
            reason,
        };
        let (addr_part, prefix_part) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr_part.parse().map_err(|_| err("not an IP address"))?;
        let Some(p) = prefix_part else {
            return Ok(IpCidr::host(addr));
        };
        // Digits only: u8::from_str would also take "+24".
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err("prefix length is not a number"));
        }
        let prefix: u8 = p.parse().map_err(|_| err("prefix length too long"))?;
        IpCidr::new(addr, prefix).ok_or_else(|| {
            err(if addr.is_ipv4() {
                "prefix length must be 0-32"
            } else {
                "prefix length must be 0-128"
            })
        })
    }
}

impl fmt::Display for IpCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl fmt::Debug for IpCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for IpCidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for IpCidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> IpCidr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_display() {
        for (input, shown) in [
            ("198.19.0.0/24", "198.19.0.0/24"),
            ("2001:db8::/64", "2001:db8::/64"),
            ("10.0.0.1", "10.0.0.1/32"),
            ("::1", "::1/128"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("::/0", "::/0"),
            ("10.1.2.3/24", "10.1.2.3/24"),
            ("2001:DB8::1/128", "2001:db8::1/128"),
        ] {
            assert_eq!(c(input).to_string(), shown);
        }
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "/24",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "10.0.0.0/ 8",
            "10.0.0.0/0008",
            "10.0.0/8",
            "host.example/8",
            "10.0.0.0/8/8",
            "10.0.0.0/256",
        ] {
            assert!(bad.parse::<IpCidr>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn network_and_contains() {
        assert_eq!(c("10.1.2.3/24").network(), c("10.1.2.0/24"));
        assert_eq!(c("10.1.2.3/0").network(), c("0.0.0.0/0"));
        assert_eq!(c("10.1.2.3/32").network(), c("10.1.2.3/32"));
        assert_eq!(c("2001:db8::ffff/64").network(), c("2001:db8::/64"));
        assert_eq!(c("2001:db8::1/0").network(), c("::/0"));
        let n = c("198.19.0.0/24");
        assert!(n.contains("198.19.0.200".parse().unwrap()));
        assert!(!n.contains("198.19.1.0".parse().unwrap()));
        assert!(!n.contains("::ffff:198.19.0.1".parse().unwrap()));
        assert!(c("0.0.0.0/0").contains("1.2.3.4".parse().unwrap()));
        assert!(!c("0.0.0.0/0").contains("::1".parse().unwrap()));
        assert!(c("2001:db8::/32").contains("2001:db8:ffff::1".parse().unwrap()));
    }
}
