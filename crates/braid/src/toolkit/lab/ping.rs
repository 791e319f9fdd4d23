//! `ping` inside a namespace, and reading what it printed. Every function
//! takes the namespace by name (`&str`, or a [`super::netns::Netns`]).

use super::netns::run_in;
use super::process::{wait_until, LONG, SHORT};
use std::collections::BTreeSet;
use std::time::Duration;

/// What a ping run says about its echo requests.
#[derive(Debug, Clone)]
pub struct PingResult {
    pub transmitted: u32,
    pub received: u32,
    pub loss_percent: f64,
    pub output: String,
}

/// Parses ping's summary: "5 packets transmitted, 5 received, 0% packet loss".
pub fn parse_ping(out: &str) -> Option<PingResult> {
    let line = out.lines().find(|l| l.contains("packets transmitted"))?;
    let mut transmitted = None;
    let mut received = None;
    let mut loss = None;
    for part in line.split(',') {
        let part = part.trim();
        let first = part.split_whitespace().next().unwrap_or("");
        if part.ends_with("packets transmitted") {
            transmitted = first.parse().ok();
        } else if part.ends_with("received") {
            received = first.parse().ok();
        } else if part.ends_with("packet loss") {
            loss = first.trim_end_matches('%').parse().ok();
        }
    }
    Some(PingResult {
        transmitted: transmitted?,
        received: received?,
        loss_percent: loss?,
        output: out.to_string(),
    })
}

/// The icmp_seq of every echo reply ping printed (`… bytes from …`).
pub fn answered_seqs(out: &str) -> BTreeSet<u32> {
    out.lines()
        .filter(|l| l.contains(" bytes from "))
        .filter_map(|l| {
            let rest = &l[l.find("icmp_seq=")? + "icmp_seq=".len()..];
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// `ping -c COUNT -i 0.2 DST` inside a namespace, see [`ping_counted`].
pub fn ping(ns: impl AsRef<str>, dst: &str, count: u32) -> PingResult {
    ping_counted(ns, &["-i", "0.2"], dst, count)
}

/// `ping -c COUNT` with `extra` options (interval, family, size, …) to
/// `dst` inside a namespace: `transmitted` is COUNT and `received` how many
/// of those COUNT requests (icmp_seq 1..=COUNT) were answered.
///
/// With `-c` alone, ping waits for the last reply only twice the slowest
/// round trip so far (or one interval) and calls it lost after that, so a
/// reply held up for a moment on a busy machine would count as a loss. With
/// `-w` it waits until COUNT replies are in (bounded by the deadline),
/// sending further requests meanwhile; those are not counted here. A reply
/// is lost only if it never comes while ping still listens.
pub fn ping_counted(ns: impl AsRef<str>, extra: &[&str], dst: &str, count: u32) -> PingResult {
    let (c, w) = (count.to_string(), LONG.as_secs().to_string());
    let args: Vec<&str> = ["-n", "-c", &c, "-w", &w]
        .into_iter()
        .chain(extra.iter().copied())
        .chain([dst])
        .collect();
    let out = run_in(ns.as_ref(), "ping", &args, LONG + SHORT);
    let answered = answered_seqs(&out.stdout);
    let received = (1..=count).filter(|s| answered.contains(s)).count() as u32;
    PingResult {
        transmitted: count,
        received,
        loss_percent: 100.0 * (count - received) as f64 / count.max(1) as f64,
        output: out.describe(),
    }
}

/// Pings once a second until one reply arrives (the first packet triggers
/// the WireGuard handshake) or `timeout` passes; true when one did.
pub fn ping_until_reply(ns: impl AsRef<str>, dst: &str, timeout: Duration) -> bool {
    let ns = ns.as_ref();
    wait_until(timeout, || {
        run_in(ns, "ping", &["-n", "-c", "1", "-W", "1", dst], SHORT).ok()
    })
}
