//! `AllowedIPs = 0.0.0.0/0` with `Table = auto`: braid routes everything
//! through the tunnel with wg-quick's fwmark policy routing, its own UDP
//! packets still reach the peer, its table fails closed, and `braid down`
//! removes the rules and the table's routes.
//!
//! ```text
//!  netns a: braid (AllowedIPs 0.0.0.0/0) ── veth 198.18.x.1/.2 ── netns b: braid
//!                                                                  + 198.18.250.1 on lo
//! ```
//! 198.18.250.1 has no route in a's main table, so only the tunnel reaches it.

use crate::harness::*;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping"];

#[test]
fn full_tunnel_default_route_uses_policy_rules() {
    let test = "full_tunnel_default_route_uses_policy_rules";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    nsb.ip(&["addr", "add", "198.18.250.1/32", "dev", "lo"])
        .expect_ok("address behind b");
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.peers[0].allowed_ips = vec!["0.0.0.0/0".into()];
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    a.assert_up();

    let rules = nsa.ip(&["-4", "rule"]).expect_ok("ip rule").stdout;
    assert!(
        rules.contains("not from all fwmark 0xca6c lookup 51820"),
        "policy rule missing:\n{rules}"
    );
    assert!(
        rules.contains("suppress_prefixlength 0"),
        "suppress rule missing:\n{rules}"
    );
    // Fail closed (the default): a route that outlives the TUN.
    let table = nsa.ip(&["-4", "route", "show", "table", "51820"]).stdout;
    assert!(
        table.contains("unreachable default metric 4294967295"),
        "fail-closed route missing:\n{table}"
    );

    // Only the tunnel leads to 198.18.250.1, and the tunnel's own UDP
    // packets must not loop into it.
    assert!(
        ping_until_reply(&nsa, "198.18.250.1", Duration::from_secs(20)),
        "no reply from behind b through the full tunnel"
    );
    let p = ping(&nsa, "198.18.250.1", 3);
    assert_eq!(p.received, 3, "{}", p.output);
    // The directly connected underlay still takes the main table.
    let p = ping(&nsa, &format!("198.18.{x}.2"), 2);
    assert_eq!(p.received, 2, "{}", p.output);

    assert!(a.down().ok());
    let rules = nsa.ip(&["-4", "rule"]).expect_ok("ip rule").stdout;
    assert!(
        !rules.contains("51820") && !rules.contains("suppress_prefixlength"),
        "rules left after down:\n{rules}"
    );
    let table = nsa.ip(&["-4", "route", "show", "table", "51820"]).stdout;
    assert!(table.trim().is_empty(), "routes left after down:\n{table}");
    assert!(b.down().ok());
}
