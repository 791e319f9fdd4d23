//! What `braid bench tunnel` was asked to measure, over which addresses,
//! and the metrics every round yields.

use super::vpn::{Cipher, VpnKind};

/// Underlay (veth) and tunnel addresses.
pub(super) const UNDERLAY_A: &str = "198.18.90.1";
pub(super) const UNDERLAY_B: &str = "198.18.90.2";
pub(super) const TUNNEL_A: &str = "198.19.90.1";
pub(super) const TUNNEL_B: &str = "198.19.90.2";
/// The second line of `--paths 2`.
pub(super) const UNDERLAY2_A: &str = "198.18.91.1";
pub(super) const UNDERLAY2_B: &str = "198.18.91.2";

pub(super) struct Opts {
    pub(super) vpn: VpnKind,
    pub(super) cipher: Cipher,
    pub(super) seconds: u32,
    pub(super) rounds: usize,
    pub(super) netem: Option<String>,
    pub(super) paths: u32,
    pub(super) transport_tcp: bool,
    pub(super) loss: Option<f64>,
    pub(super) quick: bool,
    pub(super) json: bool,
    pub(super) label: Option<String>,
}

impl Opts {
    pub(super) fn idle_pings(&self) -> usize {
        if self.quick {
            50
        } else {
            200
        }
    }

    pub(super) fn label(&self) -> String {
        self.label.clone().unwrap_or_else(|| {
            let mut l = self.vpn.name().to_string();
            if self.cipher != Cipher::Auto {
                l = format!("{l} {}", self.cipher.name());
            }
            if self.paths > 1 {
                l = format!("{l} {} paths redundant", self.paths);
            }
            if self.transport_tcp {
                l = format!("{l} over TCP");
            }
            if let Some(p) = self.loss {
                l = format!("{l}, {p}% loss");
            }
            l
        })
    }
}

/// The numbers each round yields, in the order of the table. Keys are the
/// JSON names.
pub(super) const METRICS: [(&str, &str, &str); 9] = [
    ("single_gbps", "one TCP stream A→B", "Gbit/s"),
    ("parallel4_gbps", "4 TCP streams A→B", "Gbit/s"),
    ("reverse_gbps", "one TCP stream B→A", "Gbit/s"),
    ("cpu_s_per_gb", "VPN CPU (both sides)", "CPU-s/GB"),
    ("system_cpu_s_per_gb", "whole machine CPU", "CPU-s/GB"),
    ("ping_idle_p50_ms", "ping idle p50", "ms"),
    ("ping_idle_p99_ms", "ping idle p99", "ms"),
    ("ping_loaded_p50_ms", "ping under load p50", "ms"),
    ("ping_loaded_p99_ms", "ping under load p99", "ms"),
];
