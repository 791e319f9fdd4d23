//! Which metric each of `braid show`'s named numbers becomes: its name
//! (Prometheus conventions: `braid_…`, `_total` for counters, base
//! units), its kind, the factor to base units and its help text. A number
//! no table names is still exported, untyped, under its own name.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Counter,
    Gauge,
    /// A number `braid show` gained after this table was written: exported
    /// under its own name rather than dropped.
    Untyped,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Untyped => "untyped",
        }
    }
}

/// How one of `braid show`'s named numbers is exported: the metric's name,
/// its kind, the factor to base units, and its help text.
pub struct Export {
    pub show: &'static str,
    pub metric: &'static str,
    pub kind: Kind,
    pub scale: f64,
    pub help: &'static str,
}

const fn counter(show: &'static str, metric: &'static str, help: &'static str) -> Export {
    Export {
        show,
        metric,
        kind: Kind::Counter,
        scale: 1.0,
        help,
    }
}

const fn gauge(show: &'static str, metric: &'static str, scale: f64, help: &'static str) -> Export {
    Export {
        show,
        metric,
        kind: Kind::Gauge,
        scale,
        help,
    }
}

/// Microseconds, as `braid show` counts them, in seconds.
pub const US: f64 = 1e-6;

/// The interface's own counters (`braid show`'s `braid NAME:` lines).
pub const DEVICE: &[Export] = &[
    counter(
        "invalid_datagrams",
        "braid_invalid_datagrams_total",
        "Datagrams that were no WireGuard message of a valid size.",
    ),
    counter(
        "invalid_mac",
        "braid_invalid_mac_total",
        "Handshake messages whose MAC did not check.",
    ),
    counter(
        "handshake_rejected",
        "braid_handshake_rejected_total",
        "Handshake messages that failed to decrypt or were replays.",
    ),
    counter(
        "handshake_flood_dropped",
        "braid_handshake_flood_dropped_total",
        "Handshake messages dropped under load (cookie required, none given).",
    ),
    counter(
        "cookie_replies_sent",
        "braid_cookie_replies_sent_total",
        "Cookie replies sent under load.",
    ),
    counter(
        "handshake_rate_limited",
        "braid_handshake_rate_limited_total",
        "Handshake messages dropped by the per-source rate limit.",
    ),
    counter(
        "handshake_over_budget",
        "braid_handshake_over_budget_total",
        "Handshake responses left over a batch's handshake budget.",
    ),
    counter(
        "handshake_queue_full",
        "braid_handshake_queue_full_total",
        "Admitted handshake initiations dropped because their queue was full.",
    ),
    counter(
        "handshake_queue_stale",
        "braid_handshake_queue_stale_total",
        "Queued handshake initiations dropped after waiting REKEY_TIMEOUT.",
    ),
    counter(
        "control_queue_full",
        "braid_control_queue_full_total",
        "Control messages dropped because their queue was full.",
    ),
    counter(
        "too_big_queue_full",
        "braid_too_big_queue_full_total",
        "Too-big answers dropped because their queue was full.",
    ),
    counter(
        "unknown_index",
        "braid_unknown_index_total",
        "Data messages for a session index nobody has.",
    ),
    counter(
        "no_route",
        "braid_no_route_total",
        "Packets from the tunnel interface that no peer's AllowedIPs take.",
    ),
    counter(
        "tun_dropped",
        "braid_tun_dropped_packets_total",
        "Packets the tunnel interface could not take or give.",
    ),
    counter(
        "udp_dropped",
        "braid_udp_dropped_packets_total",
        "Datagrams the sockets could not send.",
    ),
    gauge(
        "tun_offload",
        "braid_tun_offload_enabled",
        1.0,
        "1 when the tunnel interface has TSO/GRO offloads on.",
    ),
    gauge(
        "udp_gso",
        "braid_udp_gso_enabled",
        1.0,
        "1 when every UDP socket sends with GSO.",
    ),
    gauge(
        "udp_gro",
        "braid_udp_gro_enabled",
        1.0,
        "1 when every UDP socket receives with GRO.",
    ),
    gauge(
        "tunnel_mtu",
        "braid_tunnel_mtu_bytes",
        1.0,
        "The tunnel interface's MTU.",
    ),
    counter(
        "too_big_answered",
        "braid_too_big_answered_total",
        "ICMP too-big answers given for packets a path does not carry.",
    ),
    counter(
        "too_big_suppressed",
        "braid_too_big_suppressed_total",
        "Too-big answers left out by their rate limit.",
    ),
    gauge(
        "crypto_helpers",
        "braid_crypto_helper_threads",
        1.0,
        "Crypto helper threads per direction.",
    ),
    counter(
        "crypto_helper_parts",
        "braid_crypto_helper_parts_total",
        "Batch parts sealed or opened by crypto helpers.",
    ),
    gauge(
        "tun_queues",
        "braid_tun_queues",
        1.0,
        "TUN queues, each read by a thread of its own (Queues).",
    ),
    counter(
        "tun_queue_packets",
        "braid_tun_queue_packets_total",
        "Packets read from TUN queues other than the first and sent.",
    ),
    gauge(
        "udp_sockets",
        "braid_udp_sockets",
        1.0,
        "Sockets on ListenPort, one per TUN queue, each received from by that queue's thread.",
    ),
    counter(
        "udp_socket_datagrams",
        "braid_udp_socket_datagrams_total",
        "Datagrams received on ListenPort sockets other than the first.",
    ),
    gauge(
        "realtime_priority",
        "braid_realtime_priority",
        1.0,
        "The SCHED_RR priority of the data plane's threads (RealtimePriority); 0 when they run in the normal class.",
    ),
];

/// A peer's counters (`braid show`'s per-peer `braid NAME:` lines).
pub const PEER: &[Export] = &[
    counter(
        "rx_packets",
        "braid_peer_received_packets_total",
        "Data packets received from the peer.",
    ),
    counter(
        "tx_packets",
        "braid_peer_sent_packets_total",
        "Data packets sent to the peer.",
    ),
    counter(
        "handshakes_initiated",
        "braid_peer_handshakes_initiated_total",
        "Handshakes this side started.",
    ),
    counter(
        "handshakes_completed",
        "braid_peer_handshakes_completed_total",
        "Handshakes completed (sessions made).",
    ),
    counter(
        "handshake_responses_sent",
        "braid_peer_handshake_responses_sent_total",
        "Handshake responses sent.",
    ),
    counter(
        "keepalives_sent",
        "braid_peer_keepalives_sent_total",
        "Keepalives sent.",
    ),
    counter(
        "keepalives_received",
        "braid_peer_keepalives_received_total",
        "Keepalives received.",
    ),
    counter(
        "cookie_replies_received",
        "braid_peer_cookie_replies_received_total",
        "Cookie replies received (the peer is under load).",
    ),
    counter(
        "replayed",
        "braid_peer_replayed_packets_total",
        "Data packets dropped as replays.",
    ),
    counter(
        "auth_failed",
        "braid_peer_auth_failed_packets_total",
        "Data packets that failed authentication.",
    ),
    counter(
        "disallowed_source",
        "braid_peer_disallowed_source_packets_total",
        "Packets whose inner source the peer's AllowedIPs do not allow.",
    ),
    counter(
        "staged_dropped",
        "braid_peer_staged_dropped_packets_total",
        "Packets dropped while waiting for a handshake.",
    ),
    counter(
        "ext_rejected",
        "braid_peer_extension_rejected_total",
        "braid extension messages refused.",
    ),
    gauge(
        "speaks_braid",
        "braid_peer_speaks_braid",
        1.0,
        "1 when the peer is braid (extensions agreed), 0 for stock WireGuard.",
    ),
    counter(
        "accepted",
        "braid_peer_reorder_accepted_packets_total",
        "Reorder window: packets delivered in order.",
    ),
    counter(
        "under_window",
        "braid_peer_reorder_under_window_packets_total",
        "Reorder window: packets that arrived below the window (late copies, given-up gaps).",
    ),
    counter(
        "buffered",
        "braid_peer_reorder_buffered_packets_total",
        "Reorder window: packets held until their gap filled.",
    ),
    counter(
        "duplicated",
        "braid_peer_reorder_duplicated_packets_total",
        "Reorder window: second copies of held packets.",
    ),
    counter(
        "lost",
        "braid_peer_reorder_lost_packets_total",
        "Reorder window: gaps given up.",
    ),
    gauge(
        "reorder_held",
        "braid_peer_reorder_held_packets",
        1.0,
        "Reorder window: packets held now.",
    ),
    gauge(
        "reorder_hold_us",
        "braid_peer_reorder_hold_seconds",
        US,
        "Reorder window: how long a gap is held now.",
    ),
    gauge(
        "reorder_skew_us",
        "braid_peer_reorder_skew_seconds",
        US,
        "Reorder window: delay difference of the lines in use.",
    ),
    gauge(
        "reorder_lateness_us",
        "braid_peer_reorder_lateness_seconds",
        US,
        "Reorder window: lateness measured.",
    ),
    gauge(
        "reorder_lateness_measured",
        "braid_peer_reorder_lateness_measured",
        1.0,
        "Reorder window: 1 when the lateness is a measurement, 0 while it is the starting estimate.",
    ),
    gauge(
        "repair_wait_us",
        "braid_peer_repair_wait_seconds",
        US,
        "How long a gap asked for waits for its repair.",
    ),
counter(
        "gaps_by_hold",
        "braid_peer_reorder_gaps_by_hold_total",
        "Reorder window: gaps given up when their hold ran out.",
    ),
    counter(
        "gaps_by_bounds",
        "braid_peer_reorder_gaps_by_bounds_total",
        "Reorder window: gaps given up because the window was full.",
    ),
    counter(
        "gaps_by_paths",
        "braid_peer_reorder_gaps_by_paths_total",
        "Reorder window: gaps given up at once because every line that could carry them had passed them.",
    ),
    Export {
        show: "gap_wait_us",
        metric: "braid_peer_reorder_gap_wait_seconds_total",
        kind: Kind::Counter,
        scale: US,
        help: "Reorder window: time the given-up gaps were waited for, summed.",
    },
        counter(
        "repairs_asked",
        "braid_peer_repairs_asked_total",
        "Repairs of lost packets asked from the peer.",
    ),
    counter(
        "resent",
        "braid_peer_resent_packets_total",
        "Packets re-sent because the peer asked.",
    ),
    counter(
        "resend_unavailable",
        "braid_peer_resend_unavailable_total",
        "Repairs asked for that were no longer kept.",
    ),
    counter(
        "resend_congestion",
        "braid_peer_resend_congestion_total",
        "Repairs not made: congestion losses left to the inner TCP.",
    ),
    counter(
        "parity_sent",
        "braid_peer_parity_sent_total",
        "Parity messages sent for lines that lose packets of their own.",
    ),
    counter(
        "parity_received",
        "braid_peer_parity_received_total",
        "Parity messages received from the peer.",
    ),
    counter(
        "rebuilt",
        "braid_peer_rebuilt_packets_total",
        "Packets rebuilt from the peer's parity instead of waiting for a re-send.",
    ),
    gauge(
        "rate_limit_bits",
        "braid_peer_rate_limit_bytes_per_second",
        1.0 / 8.0,
        "RateLimit, each direction.",
    ),
    counter(
        "rate_dropped_tx",
        "braid_peer_rate_dropped_sent_packets_total",
        "Packets to the peer dropped by RateLimit.",
    ),
    counter(
        "rate_dropped_rx",
        "braid_peer_rate_dropped_received_packets_total",
        "Packets from the peer dropped by RateLimit.",
    ),
    counter(
        "too_big",
        "braid_peer_too_big_packets_total",
        "Packets too big for the peer's path.",
    ),
    gauge(
        "joins_fragments",
        "braid_peer_joins_fragments",
        1.0,
        "1 when the peer takes packets in pieces (a braid peer that agreed to it).",
    ),
    gauge(
        "fragment_payload",
        "braid_peer_fragment_payload_bytes",
        1.0,
        "Largest piece of a packet sent to the peer, when its lines need pieces.",
    ),
    counter(
        "fragmented_tx",
        "braid_peer_fragmented_sent_packets_total",
        "Packets sent to the peer in pieces.",
    ),
    counter(
        "fragments_tx",
        "braid_peer_fragments_sent_total",
        "Pieces sent to the peer.",
    ),
    counter(
        "joined_rx",
        "braid_peer_joined_received_packets_total",
        "Packets received from the peer in pieces and joined again.",
    ),
    counter(
        "fragments_dropped",
        "braid_peer_fragments_dropped_total",
        "Pieces from the peer dropped: incomplete in time, or over the memory bound.",
    ),
    counter(
        "compressed_tx",
        "braid_peer_compressed_sent_packets_total",
        "Packets sent compressed.",
    ),
    counter(
        "compressed_rx",
        "braid_peer_compressed_received_packets_total",
        "Packets received compressed.",
    ),
    counter(
        "decompress_failed",
        "braid_peer_decompress_failed_total",
        "Compressed packets that did not decompress.",
    ),
];
