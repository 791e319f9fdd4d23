//! `Mode = aggregate` over two unequal `braid netem` lines (see
//! `two_lines`), one TCP stream with cubic inside the tunnel (the inner
//! congestion control of most users' machines; bbr shrugs off loss and
//! reordering and would hide what the scheduler costs):
//!
//! * a line far slower than the other (200 ms more delay) carries nothing
//!   and the stream gets the fast line's rate;
//! * a line that loses 3 % is still used, and what it loses is re-sent on
//!   the other line or rebuilt from parity sent there, before the inner
//!   TCP sees a loss.
//!
//! The rates are low (tens of Mbit/s) so that a busy machine still
//! reaches them; the thresholds leave room for one slow start.

use crate::harness::*;
use crate::two_lines::TwoLines;

const TOOLS: &[&str] = &["ip", "ping", "iperf3"];
const SECONDS: u32 = 5;

/// One cubic TCP stream a → b; bits per second received.
fn cubic_stream(lab: &TwoLines) -> f64 {
    let _cpu = iperf_lock();
    let t = SECONDS.to_string();
    let report = iperf::run(
        &lab.nsa.name,
        &lab.nsb.name,
        &lab.tb,
        &["-t", &t, "-C", "cubic", "--connect-timeout", "20000"],
        &lab.env.path("iperf3-server.log"),
        std::time::Duration::from_secs(u64::from(SECONDS) + 30),
    )
    .or_panic();
    report.received_bps.unwrap_or(0.0)
}

/// A path of side a's peer, by name.
fn path<'p>(paths: &'p [serde_json::Value], name: &str) -> &'p serde_json::Value {
    paths
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no path {name}: {paths:?}"))
}

#[test]
fn a_far_slow_line_carries_nothing_and_costs_nothing() {
    let test = "aggregate_far_slow_line";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let fast: &[&str] = &["--rate", "40mbit", "--delay", "5ms", "--queue", "100ms"];
    let slow: &[&str] = &["--rate", "2mbit", "--delay", "205ms", "--queue", "100ms"];
    let lab = TwoLines::start_impaired(
        &env,
        [&nsa, &nsb],
        [Some(fast), Some(slow)],
        &["Mode = aggregate"],
    );
    let bps = cubic_stream(&lab);
    let paths = lab.paths();
    let (fast_tx, slow_tx) = (
        path(&paths, "clean")["tx_packets"].as_u64().unwrap_or(0),
        path(&paths, "bad")["tx_packets"].as_u64().unwrap_or(0),
    );
    eprintln!("[{test}] {:.1} Mbit/s; a sent {fast_tx} packets on the fast line, {slow_tx} on the slow one", bps / 1e6);
    // Before the scheduler measured its lines: 1 to 4 % of the fast line.
    assert!(
        bps > 0.6 * 40e6,
        "{test}: {:.1} Mbit/s over a 40 Mbit/s line",
        bps / 1e6
    );
    assert!(
        slow_tx * 100 < fast_tx,
        "{test}: the slow line carried {slow_tx} of {}",
        fast_tx + slow_tx
    );
    lab.stop();
}

#[test]
fn losses_on_one_line_are_repaired_on_the_other() {
    let test = "aggregate_repairs";
    if !preflight(test, TOOLS) {
        return;
    }
    let env = TestEnv::new(test);
    let (nsa, nsb) = (env.netns("a"), env.netns("b"));
    let fast: &[&str] = &["--rate", "30mbit", "--delay", "5ms", "--queue", "100ms"];
    let lossy: &[&str] = &[
        "--rate", "10mbit", "--delay", "15ms", "--queue", "100ms", "--loss", "3%",
    ];
    let lab = TwoLines::start_impaired(
        &env,
        [&nsa, &nsb],
        [Some(fast), Some(lossy)],
        &["Mode = aggregate"],
    );
    let bps = cubic_stream(&lab);
    let paths = lab.paths();
    let lossy_tx = path(&paths, "bad")["tx_packets"].as_u64().unwrap_or(0);
    let (show_a, _) = braid_show_json(lab.nsa, &lab.ifa);
    let (show_b, _) = braid_show_json(lab.nsb, &lab.ifb);
    let resent = extra_counter(&show_a["peers"][0]["extra"], "resent").unwrap_or(0);
    let lost = extra_counter(&show_b["peers"][0]["extra"], "lost").unwrap_or(0);
    let asked = extra_counter(&show_b["peers"][0]["extra"], "repairs_asked").unwrap_or(0);
    let congestion = extra_counter(&show_a["peers"][0]["extra"], "resend_congestion").unwrap_or(0);
    let parity_sent = extra_counter(&show_a["peers"][0]["extra"], "parity_sent").unwrap_or(0);
    let parity_received =
        extra_counter(&show_b["peers"][0]["extra"], "parity_received").unwrap_or(0);
    let rebuilt = extra_counter(&show_b["peers"][0]["extra"], "rebuilt").unwrap_or(0);
    eprintln!(
        "[{test}] {:.1} Mbit/s; {lossy_tx} packets on the lossy line, b asked {asked} times, a re-sent {resent}, \
         left {congestion} to the inner TCP as congestion (the fast line's full queue), b gave up {lost}; \
         a sent {parity_sent} parity messages, b received {parity_received} and rebuilt {rebuilt} packets",
        bps / 1e6
    );
    assert!(lossy_tx > 500, "{test}: the lossy line is used: {lossy_tx}");
    assert!(resent > 0 && asked > 0, "{test}: nothing was repaired");
    assert!(
        parity_sent > 0 && parity_received > 0 && parity_received <= parity_sent,
        "{test}: a sent {parity_sent} parity messages, b received {parity_received}"
    );
    // The lossy line loses about 3 % of what it carries; most of that is
    // re-sent or rebuilt (a rebuilt packet may also have been only late).
    // What the fast line drops from its full queue is neither: that is the
    // inner TCP's congestion signal, so `lost` is not judged.
    let own_losses = lossy_tx as f64 * 0.03;
    assert!(
        (resent + rebuilt) as f64 > 0.5 * own_losses,
        "{test}: re-sent {resent} and rebuilt {rebuilt} of about {own_losses:.0} lost on the lossy line"
    );
    assert!(
        bps > 0.6 * 30e6,
        "{test}: {:.1} Mbit/s over 30 + 10 Mbit/s",
        bps / 1e6
    );
    lab.stop();
}
