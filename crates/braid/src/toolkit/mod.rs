//! The measuring toolkit around the VPN: what a user of braid runs to see how
//! fast and how well it works, and what the end-to-end tests build on.
//!
//! - [`lab`]: network namespaces, veth lines, impaired lines, processes that
//!   are cleaned up on drop, iperf3 and ping; shared by the demo, the benches
//!   and the end-to-end tests;
//! - [`demo`]: `braid demo`;
//! - [`bench`]: `braid bench crypto|tunnel|lines|echo|handshake-flood|netem`;
//! - [`netem`]: `braid netem`, the link-impairment emulator;
//! - [`plot`]: `--plot FILE.svg` of the demo and the benches.

pub mod bench;
pub mod demo;
pub mod lab;
pub mod netem;
pub mod plot;

/// The help text of a subcommand that parses its own arguments (what its
/// `--help` prints), by its words after `braid`; its man page shows it.
pub fn own_usage(words: &[&str]) -> Option<&'static str> {
    Some(match words {
        ["netem"] => netem::args::USAGE,
        ["bench", "netem"] => bench::netem::USAGE,
        ["bench", "lines"] => bench::lines::USAGE,
        ["bench", "crypto"] => bench::crypto::USAGE,
        ["bench", "handshake-flood"] => bench::flood::USAGE,
        ["bench", "echo"] => bench::echo::USAGE,
        ["bench", "tunnel"] => bench::tunnel::USAGE,
        ["bench", "peers"] => bench::peers::USAGE,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_own_usage_is_of_its_subcommand() {
        for words in [
            &["netem"][..],
            &["bench", "netem"],
            &["bench", "lines"],
            &["bench", "crypto"],
            &["bench", "handshake-flood"],
            &["bench", "echo"],
            &["bench", "tunnel"],
            &["bench", "peers"],
        ] {
            let usage = super::own_usage(words).unwrap();
            let head = format!("usage: braid {} ", words.join(" "));
            assert!(usage.starts_with(&head), "{head:?}: {usage}");
        }
        assert!(super::own_usage(&["up"]).is_none());
    }
}
