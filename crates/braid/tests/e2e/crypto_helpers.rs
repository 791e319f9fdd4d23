//! Crypto helper threads (`BRAID_CRYPTO_HELPERS`), end to end: with helpers
//! forced on at both ends (this machine has too few cores for them to be on
//! by default), SHA-256-checked TCP streams in both directions at once
//! arrive whole and in order, and `braid show` counts the batch parts the
//! helpers did. A bad value is refused before anything is set up. No test
//! asserts how fast anything happened.
//!
//! ```text
//!  a: va 198.18.x.1/24 ── vb 198.18.x.2/24 :b      tunnel 198.19.x.1 ⇄ 198.19.x.2
//! ```

use crate::harness::*;
use braid::toolkit::lab::traffic::TcpTransfer;
use std::net::SocketAddr;
use std::time::Duration;

const TOOLS: &[&str] = &["ip", "ping", "wg"];

/// Unpaced for the purpose: the batches must be large for helpers to
/// take part.
const AS_FAST_AS_IT_GOES: u64 = 1 << 40;

#[test]
fn helpers_keep_every_byte_in_order_both_ways() {
    let test = "helpers_keep_every_byte_in_order_both_ways";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let (ca, cb) = tunnel_confs(&ka, &kb, x);
    let knob = [("BRAID_CRYPTO_HELPERS", "2")];
    let _b = up_with_env(&env, &nsb, &ifb, &cb, &knob);
    let _a = up_with_env(&env, &nsa, &ifa, &ca, &knob);
    assert!(ping_until_reply(&nsa, &format!("198.19.{x}.2"), LONG));
    for (ns, ifname) in [(&nsa, &ifa), (&nsb, &ifb)] {
        assert_eq!(interface_counter(ns, ifname, "crypto_helpers"), 2);
    }

    let to_b: SocketAddr = format!("198.19.{x}.2:7002").parse().unwrap();
    let to_a: SocketAddr = format!("198.19.{x}.1:7003").parse().unwrap();
    let secs = Duration::from_secs(4);
    let forward = TcpTransfer::start(&nsa.name, &nsb.name, to_b, AS_FAST_AS_IT_GOES, secs);
    let backward = TcpTransfer::start(&nsb.name, &nsa.name, to_a, AS_FAST_AS_IT_GOES, secs);
    let (forward, backward) = (forward.finish(), backward.finish());
    eprintln!("[{test}] a→b {forward}");
    eprintln!("[{test}] b→a {backward}");
    assert!(forward.intact(), "a→b: {forward}");
    assert!(backward.intact(), "b→a: {backward}");

    for (ns, ifname) in [(&nsa, &ifa), (&nsb, &ifb)] {
        let parts = interface_counter(ns, ifname, "crypto_helper_parts");
        eprintln!("[{test}] {ifname}: {parts} batch parts sealed or opened by helpers");
        assert!(parts > 0, "{ifname}: the helpers never took part");
    }
}

#[test]
fn a_bad_helper_count_is_refused_by_name() {
    let test = "a_bad_helper_count_is_refused_by_name";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let ns = env.netns("a");
    let (ka, kb) = (wg_keys(), wg_keys());
    let ifname = env.ifname("a");
    let (conf, _) = tunnel_confs(&ka, &kb, env.octet());
    let path = env.write(&format!("{ifname}.conf"), &conf.wg_quick());
    for bad in ["lots", "99", "-1"] {
        let mut cmd = ns.cmd(BRAID);
        cmd.args(["up", "--foreground", &path.to_string_lossy()])
            .env("BRAID_CRYPTO_HELPERS", bad);
        let out = run_bounded(cmd, LONG);
        assert!(!out.ok(), "BRAID_CRYPTO_HELPERS={bad} was accepted");
        let text = format!("{}{}", out.stdout, out.stderr);
        assert!(
            text.contains("BRAID_CRYPTO_HELPERS") && text.contains(bad),
            "BRAID_CRYPTO_HELPERS={bad}: the error does not name it: {text}"
        );
        assert!(
            !ns.has_link(&ifname),
            "BRAID_CRYPTO_HELPERS={bad}: {ifname} was left behind"
        );
        assert!(
            !text.contains(&ka.private),
            "the private key appeared in an error"
        );
    }
}
