//! What `braid bench tunnel` was asked to measure, over which addresses,
//! and the metrics every round yields.

use super::vpn::{Cipher, VpnKind};
use crate::toolkit::bench::crypto;

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
    /// `--cc NAME`: iperf3's TCP congestion control (`-C`) in every
    /// transfer; None: the namespace's default (cubic).
    pub(super) cc: Option<String>,
    /// `--vpn-realtime N`: the VPN's threads at SCHED_RR N.
    pub(super) vpn_realtime: Option<u8>,
    /// `--vpn-queues N`: braid's `Queues = N` (None: not written, 1).
    pub(super) vpn_queues: Option<usize>,
    pub(super) quick: bool,
    pub(super) json: bool,
    pub(super) label: Option<String>,
    /// `--plot FILE.svg`.
    pub(super) plot: Option<std::path::PathBuf>,
}

impl Opts {
    /// The AEAD the tunnel's data goes through, where it is known: braid's
    /// `Cipher =` (auto: AES-256-GCM where this CPU has AES instructions,
    /// as braid chooses), ChaCha20-Poly1305 for WireGuard's other
    /// implementations; none for no tunnel or OpenVPN.
    pub(super) fn data_cipher(&self) -> Option<crypto::Cipher> {
        match (&self.vpn, self.cipher) {
            (VpnKind::Braid, Cipher::Aes256Gcm) => Some(crypto::Cipher::Aes256Gcm),
            (VpnKind::Braid, Cipher::Auto) if braid_core::cipher::aes_hardware() => {
                Some(crypto::Cipher::Aes256Gcm)
            }
            (VpnKind::Braid, _) | (VpnKind::WireguardGo(_) | VpnKind::Boringtun(_), _) => {
                Some(crypto::Cipher::ChaCha20Poly1305)
            }
            (VpnKind::None | VpnKind::OpenVpn { .. }, _) => None,
        }
    }

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
            if let Some(cc) = &self.cc {
                l = format!("{l}, {cc}");
            }
            l
        })
    }
}

/// The numbers each round yields, in the order of the table. Keys are the
/// JSON names.
pub(super) const METRICS: [(&str, &str, &str); 10] = [
    ("single_gbps", "one TCP stream A→B", "Gbit/s"),
    ("parallel4_gbps", "4 TCP streams A→B", "Gbit/s"),
    ("reverse_gbps", "one TCP stream B→A", "Gbit/s"),
    ("cpu_s_per_gb", "VPN CPU (both sides)", "CPU-s/GB"),
    // The VPN's CPU less what sealing on one side and opening on the
    // other cost by `braid bench crypto`'s loops (measured in the same run):
    // system calls, copies, wake-ups and the kernel's share of the work.
    (
        "beyond_aead_cpu_s_per_gb",
        "VPN CPU beyond the AEAD",
        "CPU-s/GB",
    ),
    ("system_cpu_s_per_gb", "whole machine CPU", "CPU-s/GB"),
    ("ping_idle_p50_ms", "ping idle p50", "ms"),
    ("ping_idle_p99_ms", "ping idle p99", "ms"),
    ("ping_loaded_p50_ms", "ping under load p50", "ms"),
    ("ping_loaded_p99_ms", "ping under load p99", "ms"),
];
