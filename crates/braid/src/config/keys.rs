//! Every key a config file may hold, in one table: the parser refuses a key
//! that is not here ([`lookup`]), `braid.conf(5)` is written from it
//! (`crate::manual`), and `braid syncconf` asks it which changes wait for a
//! restart ([`KeySpec::reload`]). A key added to the parser without a row
//! here is refused as unknown, so the manual cannot fall behind the parser.

/// The section a key belongs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Interface,
    Peer,
}

impl Section {
    pub fn header(self) -> &'static str {
        match self {
            Section::Interface => "[Interface]",
            Section::Peer => "[Peer]",
        }
    }
}

/// Who defined a key: the stock tools read their own and refuse braid's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A key of `wg setconf` (wg(8)), so also of wg-quick.
    Wg,
    /// A key only wg-quick(8) reads (it strips them before `wg setconf`).
    WgQuick,
    /// braid's own.
    Braid,
}

/// What `braid syncconf` (and `systemctl reload braid@NAME`) does with a
/// changed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// Applied to the running interface; sessions stay up.
    Live,
    /// Applied to the running interface, used from the next handshake on.
    NextSession,
    /// Reported, not applied: it takes effect when the interface restarts.
    Restart,
}

/// One key: its canonical spelling and what the manual says about it.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    pub name: &'static str,
    pub section: Section,
    pub origin: Origin,
    /// The value's syntax, for the manual.
    pub syntax: &'static str,
    /// What the manual says; plain text, one paragraph.
    pub doc: &'static str,
    /// A valid value other than the default (the tests feed every one to
    /// the parser, and check a reload notices it). Keys take a key from
    /// `braid genkey`/`braid pubkey`/`braid genpsk` instead.
    pub example: &'static str,
    /// May appear more than once in its section (values accumulate).
    pub repeatable: bool,
    pub reload: Reload,
}

/// The table. Order is the manual's order within each section.
pub const KEYS: &[KeySpec] = &[
    // ----- [Interface] -----
    KeySpec {
        name: "PrivateKey",
        section: Section::Interface,
        origin: Origin::Wg,
        syntax: "BASE64",
        doc: "The interface's private key, as `braid genkey` or `wg genkey` prints it. Required. \
              It never appears in output, errors or logs.",
        example: "",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "ListenPort",
        section: Section::Interface,
        origin: Origin::Wg,
        syntax: "0-65535",
        doc: "The UDP port to listen on; unset or 0 picks a free one.",
        example: "51820",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "FwMark",
        section: Section::Interface,
        origin: Origin::Wg,
        syntax: "off | NUMBER | 0xHEX",
        doc: "The firewall mark of the tunnel's own packets. A full tunnel with `Table = auto` \
              uses 51820 when unset, and its routing table follows the mark.",
        example: "0x1234",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "Address",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "ADDRESS/PREFIX[, ...]",
        doc: "Addresses of the interface, IPv4 or IPv6.",
        example: "198.19.0.2/24, 2001:db8::2/64",
        repeatable: true,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "MTU",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "68-65535",
        doc: "The interface MTU. Unset: 1420 at first, then what the paths are measured to carry.",
        example: "1420",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "Table",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "auto | off | main | local | NUMBER",
        doc: "Where the routes for AllowedIPs go: `auto` (the main table, or for a full \
              tunnel a table of its own selected by policy rules, as wg-quick does), `off` \
              (no routes) or a table.",
        example: "off",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "DNS",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "ADDRESS-OR-DOMAIN[, ...]",
        doc: "Accepted so a wg-quick file loads as it is; braid does not set DNS servers.",
        example: "198.19.0.1",
        repeatable: true,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "PreUp",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "COMMAND",
        doc: "A shell command run before the interface is created, as root; `%i` stands for \
              the interface name.",
        example: "logger braid %i coming up",
        repeatable: true,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "PostUp",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "COMMAND",
        doc: "A shell command run once the interface is up, as root.",
        example: "logger braid %i up",
        repeatable: true,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "PreDown",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "COMMAND",
        doc: "A shell command run before the interface is removed, as root.",
        example: "logger braid %i going down",
        repeatable: true,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "PostDown",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "COMMAND",
        doc: "A shell command run after the interface is removed, as root (also after a crash \
              of a daemon that gave up root).",
        example: "logger braid %i down",
        repeatable: true,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "SaveConfig",
        section: Section::Interface,
        origin: Origin::WgQuick,
        syntax: "true | false",
        doc: "Accepted so a wg-quick file loads as it is; braid never rewrites the file.",
        example: "true",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "FailClosed",
        section: Section::Interface,
        origin: Origin::Braid,
        syntax: "true | false",
        doc: "Default true. A full tunnel with `Table = auto` keeps an unreachable default \
              route in its table that outlives the daemon: if the daemon dies without being \
              asked to stop, traffic meant for the tunnel is refused instead of leaving in \
              the clear. `false` behaves as wg-quick does.",
        example: "false",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "Cipher",
        section: Section::Interface,
        origin: Origin::Braid,
        syntax: "auto | chacha20poly1305 | aes256gcm",
        doc: "The data cipher offered to braid peers (a peer's own `Cipher` overrides it). \
              `auto` (the default) offers AES-256-GCM when this CPU has AES instructions; \
              AES-256-GCM is used only when both ends offer it, and never with stock \
              WireGuard.",
        example: "aes256gcm",
        repeatable: false,
        reload: Reload::NextSession,
    },
    KeySpec {
        name: "MssFix",
        section: Section::Interface,
        origin: Origin::Braid,
        syntax: "auto | off | 536-65495",
        doc: "Rewrites the MSS option of TCP SYN and SYN-ACK packets through the tunnel so \
              segments fit its MTU. `auto` (the default) follows the MTU (MTU - 40 for IPv4, \
              - 60 for IPv6); a number fixes it; `off` leaves SYNs alone.",
        example: "1360",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "RealtimePriority",
        section: Section::Interface,
        origin: Origin::Braid,
        syntax: "off | 1-99",
        doc: "Runs the data plane's threads in the kernel's real-time class (`SCHED_RR`) at \
              this priority, so a batch that arrives is handled at once instead of waiting \
              for a busy core's current task: lower and steadier latency under load, and \
              more throughput when the tunnel shares its cores with the applications. Off \
              by default (the normal class). A flood of traffic can then keep other normal \
              tasks off a core, up to the kernel's real-time throttle (95 % of each second \
              by default). Needs root or CAP_SYS_NICE (or an RLIMIT_RTPRIO of at least the \
              priority); commands braid starts run at normal priority.",
        example: "20",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "Queues",
        section: Section::Interface,
        origin: Origin::Braid,
        syntax: "1-64",
        doc: "Opens the TUN with this many queues (`IFF_MULTI_QUEUE`), each read, sealed \
              and sent by a thread of its own, so many flows are encrypted on many cores at \
              once. The kernel keeps each flow on one queue, so each flow stays in order. \
              One flow gains nothing; worth it on a server or router with more cores than \
              2 and many flows. 1 (the default) is a single-queue TUN.",
        example: "4",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "Compression",
        section: Section::Interface,
        origin: Origin::Braid,
        syntax: "lz4 | off",
        doc: "LZ4 compression towards braid peers that agree (a peer's own `Compression` \
              overrides it). Off by default: compressing secret and attacker-controlled data \
              together can leak the secret through packet sizes.",
        example: "lz4",
        repeatable: false,
        reload: Reload::NextSession,
    },
    KeySpec {
        name: "MetricsListen",
        section: Section::Interface,
        origin: Origin::Braid,
        syntax: "IP:PORT | [IPv6]:PORT | off",
        doc: "Serves /metrics in the Prometheus text format on this address (off when absent). \
              An IP literal, never a host name; bind it to loopback or a management address: \
              it has no authentication, and shows public keys and traffic figures, never a \
              secret. A port in use stops `braid up` before anything changes.",
        example: "127.0.0.1:9586",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "LogLevel",
        section: Section::Interface,
        origin: Origin::Braid,
        syntax: "error | warn | info | debug",
        doc: "How much the daemon logs, one line per event (default info; `braid up -v` adds \
              a level). Under systemd's journal a line carries its syslog priority and no \
              timestamp of braid's own. A reload applies a changed level at once.",
        example: "debug",
        repeatable: false,
        reload: Reload::Live,
    },
    // ----- [Peer] -----
    KeySpec {
        name: "PublicKey",
        section: Section::Peer,
        origin: Origin::Wg,
        syntax: "BASE64",
        doc: "The peer's public key. Required; one [Peer] section per key.",
        example: "",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "PresharedKey",
        section: Section::Peer,
        origin: Origin::Wg,
        syntax: "BASE64",
        doc: "An extra symmetric key mixed into the handshake, from `braid genpsk`.",
        example: "",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "AllowedIPs",
        section: Section::Peer,
        origin: Origin::Wg,
        syntax: "ADDRESS/PREFIX[, ...]",
        doc: "What the peer may send from and what is sent to it (cryptokey routing). Each \
              entry also gets a route through the interface (see `Table`).",
        example: "198.19.0.0/24, 2001:db8::/64",
        repeatable: true,
        reload: Reload::Live,
    },
    KeySpec {
        name: "Endpoint",
        section: Section::Peer,
        origin: Origin::Wg,
        syntax: "HOST:PORT | [IPv6]:PORT",
        doc: "Where to reach the peer. A host name is resolved when the interface comes up.",
        example: "198.18.1.1:51820",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "PersistentKeepalive",
        section: Section::Peer,
        origin: Origin::Wg,
        syntax: "off | 0-65535",
        doc: "Seconds between keepalives when nothing else is sent (for NAT); off by default.",
        example: "25",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "Path",
        section: Section::Peer,
        origin: Origin::Braid,
        syntax: "NAME [bind=INTERFACE|ADDRESS] endpoint=HOST:PORT [transport=udp|tcp]",
        doc: "One more line to the peer: datagrams leave through INTERFACE (or from ADDRESS) \
              to the peer's HOST:PORT. One `Path` per internet line, at most 7 per peer; \
              NAME is 1-15 letters, digits, - or _. The responder needs none: it learns the \
              initiator's lines from authenticated traffic.",
        example: "fibre bind=198.18.2.2 endpoint=198.18.1.1:51820",
        repeatable: true,
        reload: Reload::Live,
    },
    KeySpec {
        name: "Mode",
        section: Section::Peer,
        origin: Origin::Braid,
        syntax: "redundant | failover | aggregate",
        doc: "How packets use the paths: `redundant` (the default) sends every packet on \
              every live path, `failover` uses one and moves to the next when it fails, \
              `aggregate` spreads packets by what each path is measured to carry.",
        example: "aggregate",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "ReorderHold",
        section: Section::Peer,
        origin: Origin::Braid,
        syntax: "DURATION (e.g. 333ms, 1s, 0)",
        doc: "The ceiling of the receiver's adaptive reorder hold: how long a gap may hold \
              later packets back. Default 333ms, at most 10s; 0 turns the reorder window off.",
        example: "100ms",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "ReorderCapacity",
        section: Section::Peer,
        origin: Origin::Braid,
        syntax: "1-65536",
        doc: "Packets the reorder window holds at most, and 2 KiB each of bytes (at least 4 MiB). Default 2048. It should cover what the fastest line delivers during the hold (its rate times the delay difference); braid show counts the gaps given up because it was full (gaps_by_bounds).",
        example: "4096",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "Cipher",
        section: Section::Peer,
        origin: Origin::Braid,
        syntax: "auto | chacha20poly1305 | aes256gcm",
        doc: "This peer's data cipher policy; unset follows the interface's `Cipher`.",
        example: "chacha20poly1305",
        repeatable: false,
        reload: Reload::NextSession,
    },
    KeySpec {
        name: "Transport",
        section: Section::Peer,
        origin: Origin::Braid,
        syntax: "udp | tcp",
        doc: "What carries the datagrams to the `Endpoint` and to paths without their own \
              `transport=`: `udp` (the default) or `tcp`, for networks that block UDP (both \
              ends must be braid).",
        example: "tcp",
        repeatable: false,
        reload: Reload::Restart,
    },
    KeySpec {
        name: "RateLimit",
        section: Section::Peer,
        origin: Origin::Braid,
        syntax: "RATE (kbit, mbit, gbit; e.g. 50mbit)",
        doc: "Caps what this peer sends us and what we send it, each direction on its own, \
              counting inner IP packets in bits per second (tc's units, k = 1000).",
        example: "50mbit",
        repeatable: false,
        reload: Reload::Live,
    },
    KeySpec {
        name: "Compression",
        section: Section::Peer,
        origin: Origin::Braid,
        syntax: "lz4 | off",
        doc: "This peer's compression; unset follows the interface's `Compression`.",
        example: "lz4",
        repeatable: false,
        reload: Reload::NextSession,
    },
];

/// The row of `key` (any case) in `section`, if the file format has it.
pub fn lookup(section: Section, key: &str) -> Option<&'static KeySpec> {
    KEYS.iter()
        .find(|k| k.section == section && k.name.eq_ignore_ascii_case(key))
}

/// The keys of one section, in the manual's order.
pub fn in_section(section: Section) -> impl Iterator<Item = &'static KeySpec> {
    KEYS.iter().filter(move |k| k.section == section)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, MAX_REORDER_CAPACITY, MAX_REORDER_HOLD};
    use crate::keys::{PresharedKey, PrivateKey};
    use braid_core::path::MAX_PATHS;

    // RFC 7748's Alice and Bob.
    const SK: &str = "dwdtCnMYpX08FsFyUbJmRd9ML4frwJkqsXf7pR25LCo=";
    const PEER_SK: &str = "XasIfmJKikt54X+Lg4AO5m87sSkmGLb9HC+LJ/+I4Os=";

    fn value_of(spec: &KeySpec) -> String {
        match spec.name {
            "PrivateKey" => SK.to_string(),
            "PublicKey" => PrivateKey::from_base64(PEER_SK)
                .unwrap()
                .public_key()
                .to_string(),
            "PresharedKey" => PresharedKey::generate().to_base64().to_string(),
            _ => spec.example.to_string(),
        }
    }

    /// A minimal valid file with `lines` added to the section of `spec`.
    fn file_with(spec: &KeySpec, lines: &[String]) -> String {
        let peer = PrivateKey::from_base64(PEER_SK).unwrap().public_key();
        let mut text = String::from("[Interface]\n");
        if spec.name != "PrivateKey" {
            text.push_str(&format!("PrivateKey = {SK}\n"));
        }
        let add = |text: &mut String| {
            for l in lines {
                text.push_str(l);
                text.push('\n');
            }
        };
        match spec.section {
            Section::Interface => {
                add(&mut text);
                text.push_str(&format!("[Peer]\nPublicKey = {peer}\n"));
            }
            Section::Peer => {
                text.push_str("[Peer]\n");
                if spec.name != "PublicKey" {
                    text.push_str(&format!("PublicKey = {peer}\n"));
                }
                add(&mut text);
            }
        }
        text
    }

    #[test]
    fn every_key_in_the_table_is_parsed_in_any_case() {
        for spec in KEYS {
            let value = value_of(spec);
            for name in [
                spec.name.to_string(),
                spec.name.to_ascii_lowercase(),
                spec.name.to_ascii_uppercase(),
            ] {
                let text = file_with(spec, &[format!("{name} = {value}")]);
                if let Err(e) = Config::parse(&text, "wg0.conf") {
                    panic!("{} {name}: {e}\n{text}", spec.section.header());
                }
            }
        }
    }

    #[test]
    fn repeatable_in_the_table_is_what_the_parser_does() {
        for spec in KEYS {
            let first = format!("{} = {}", spec.name, value_of(spec));
            // A second path needs a name of its own.
            let second = if spec.name == "Path" {
                first.replace("fibre", "lte")
            } else {
                first.clone()
            };
            let result = Config::parse(&file_with(spec, &[first, second]), "wg0.conf");
            match (spec.repeatable, result) {
                (true, Ok(_)) => {}
                (false, Err(e)) => assert!(
                    e.to_string().contains("duplicate key")
                        || e.to_string().contains("duplicate peer"),
                    "{}: {e}",
                    spec.name
                ),
                (true, Err(e)) => panic!("{} is repeatable in the table: {e}", spec.name),
                (false, Ok(_)) => panic!("{} is not repeatable in the table", spec.name),
            }
        }
    }

    #[test]
    fn a_key_missing_from_the_table_is_unknown() {
        let text = format!("[Interface]\nPrivateKey = {SK}\nListenPrt = 1\n");
        let e = Config::parse(&text, "wg0.conf").unwrap_err().to_string();
        assert_eq!(
            e,
            "wg0.conf:3: key 'ListenPrt': unknown key in [Interface] section"
        );
        assert!(lookup(Section::Peer, "Address").is_none());
        assert!(lookup(Section::Interface, "PublicKey").is_none());
        assert_eq!(
            lookup(Section::Peer, "allowedips").unwrap().name,
            "AllowedIPs"
        );
    }

    #[test]
    fn no_key_is_listed_twice_in_a_section() {
        for (i, a) in KEYS.iter().enumerate() {
            for b in &KEYS[i + 1..] {
                assert!(
                    !(a.section == b.section && a.name.eq_ignore_ascii_case(b.name)),
                    "{} twice in {}",
                    a.name,
                    a.section.header()
                );
            }
        }
    }

    #[test]
    fn the_limits_the_manual_states_are_the_parsers() {
        let doc = |section, name| lookup(section, name).unwrap();
        assert!(doc(Section::Peer, "Path")
            .doc
            .contains(&format!("at most {} per peer", MAX_PATHS - 1)));
        assert!(doc(Section::Peer, "ReorderCapacity")
            .syntax
            .ends_with(&MAX_REORDER_CAPACITY.to_string()));
        assert!(doc(Section::Peer, "ReorderHold")
            .doc
            .contains(&format!("at most {}s", MAX_REORDER_HOLD.as_secs())));
        let defaults = braid_core::reorder::ReorderConfig::default();
        assert!(doc(Section::Peer, "ReorderHold")
            .doc
            .contains(&format!("Default {}ms", defaults.hold_ceiling.as_millis())));
        assert!(doc(Section::Peer, "ReorderCapacity")
            .doc
            .contains(&format!("Default {}", defaults.capacity)));
    }
}
