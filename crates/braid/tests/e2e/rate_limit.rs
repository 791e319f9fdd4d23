//! `RateLimit = 50mbit` on one side holds the rate in both directions:
//! iperf3 TCP through the tunnel, upload and download, each must stay at or
//! below the limit, and the drops that enforced it show in `braid show`.
//!
//! ```text
//!  netns a: braid, [Peer] b has RateLimit ── veth 198.18.x.1/.2 ── netns b: braid (no limit)
//!           198.19.x.1                                              198.19.x.2
//! ```
//!
//! The upper bound is the property (the shaper cannot let more through than
//! its rate plus one burst, and a slow machine only carries less). How
//! much passed is printed; the only other verdict is that some did: a
//! CPU-starved tunnel may carry far less than the limit, which is no
//! failure of the limiter.

use crate::harness::*;

const TOOLS: &[&str] = &["ip", "ping", "iperf3"];
const LIMIT_MBIT: f64 = 50.0;
/// iperf3 counts TCP payload over its whole run; the limiter counts inner
/// IP bytes, so goodput sits below the limit. 10 % above it would mean the
/// limit does not hold.
const UPPER_MBIT: f64 = LIMIT_MBIT * 1.10;
const SECS: u32 = 6;

/// Runs `load` while pinging `dst` from `ns` every 200 ms; returns what
/// `load` returned and ping's summary (loss and the rtt line), for the log.
fn ping_during<T>(env: &TestEnv, ns: &Netns, dst: &str, load: impl FnOnce() -> T) -> (T, String) {
    let count = (SECS * 5 - 5).to_string();
    let log = env.path(&format!("ping-{dst}.log"));
    let mut c = ns.cmd("ping");
    c.args(["-n", "-q", "-i", "0.2", "-W", "2", "-c", &count, dst]);
    let mut pinger = ChildGuard::spawn(c, "ping under load", &log).or_panic();
    let result = load();
    pinger.wait_exit(LONG);
    let text = pinger.log_text();
    let summary = text
        .lines()
        .filter(|l| l.contains("transmitted") || l.starts_with("rtt"))
        .collect::<Vec<_>>()
        .join("; ");
    (result, summary)
}

fn peer_extra(show_json: &str, name: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(show_json).ok()?;
    v.pointer("/peers/0/extra")?
        .as_array()?
        .iter()
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair[1].as_u64())
}

#[test]
fn rate_limit_holds_in_both_directions() {
    let test = "rate_limit_holds_in_both_directions";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (x, (nsa, ifa, ka), (nsb, ifb, kb), _veth) = env.two_sides();
    let tb = format!("198.19.{x}.2");
    let (mut conf_a, conf_b) = tunnel_confs(&ka, &kb, x);
    conf_a.peers[0].braid_lines = vec![format!("RateLimit = {LIMIT_MBIT}mbit")];
    let mut b = BraidUp::start(&env, &nsb, &ifb, &conf_b, BraidMode::Daemon);
    b.assert_up();
    let mut a = BraidUp::start(&env, &nsa, &ifa, &conf_a, BraidMode::Daemon);
    a.assert_up();
    assert!(
        ping_until_reply(&nsa, &tb, LONG),
        "no reply through the tunnel"
    );

    let idle = ping(&nsa, &tb, 10);
    let idle_rtt = idle
        .output
        .lines()
        .find(|l| l.starts_with("rtt"))
        .unwrap_or("");
    eprintln!("[{test}] idle ping: {idle_rtt}");

    let _serial = iperf_lock();
    let (upload, ping_up) = ping_during(&env, &nsa, &tb, || {
        iperf3(&env, &nsa, &nsb, &tb, SECS, false)
    });
    let upload = upload.unwrap_or_else(|e| panic!("iperf3 a -> b: {e}")) / 1e6;
    eprintln!("[{test}] ping during upload: {ping_up}");
    let (download, ping_down) = ping_during(&env, &nsa, &tb, || {
        iperf3(&env, &nsa, &nsb, &tb, SECS, true)
    });
    let download = download.unwrap_or_else(|e| panic!("iperf3 b -> a (-R): {e}")) / 1e6;
    eprintln!("[{test}] ping during download: {ping_down}");
    let show = nsa.run(BRAID, &["show", &ifa, "--json"], SHORT);
    assert!(show.ok(), "braid show: {}", show.describe());
    let dropped_tx = peer_extra(&show.stdout, "rate_dropped_tx");
    let dropped_rx = peer_extra(&show.stdout, "rate_dropped_rx");
    eprintln!(
        "[{test}] RateLimit = {LIMIT_MBIT}mbit: upload {upload:.1} Mbit/s, download \
         {download:.1} Mbit/s (iperf3 TCP {SECS} s); drops: out {dropped_tx:?}, in {dropped_rx:?}"
    );
    assert_eq!(
        peer_extra(&show.stdout, "rate_limit_bits"),
        Some((LIMIT_MBIT * 1e6) as u64),
        "braid show does not report the limit:\n{}",
        show.stdout
    );
    for (direction, rate) in [("upload", upload), ("download", download)] {
        assert!(
            rate <= UPPER_MBIT,
            "{direction} {rate:.1} Mbit/s is above the {LIMIT_MBIT} Mbit/s limit"
        );
        assert!(rate > 0.0, "{direction}: nothing passed");
    }
    assert!(a.down().ok());
    assert!(b.down().ok());
}
