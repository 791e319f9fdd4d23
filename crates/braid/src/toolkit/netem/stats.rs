//! The relay's counters as JSON. The counters themselves and their text
//! forms are the engine's ([`braid_netem::relay::Stats`]); braid-netem
//! stays free of serde, so the JSON shape is written down here.

pub use braid_netem::relay::{DirStats, Dropped, Stats};
use serde::Serialize;

/// The counters on one line of JSON, with the field names of the structs.
pub fn to_json(s: &Stats) -> String {
    let mut out = Vec::new();
    StatsJson::serialize(s, &mut serde_json::Serializer::new(&mut out))
        .expect("plain numbers serialize");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

// The shapes below name every field; these patterns (no `..`) stop the
// build when the engine's structs gain one that the JSON would miss.
const _: fn(&Stats) = |s| {
    let Stats {
        uptime_s: _,
        cut: _,
        clients: _,
        clients_evicted: _,
        up: _,
        down: _,
    } = s;
};
const _: fn(&DirStats) = |d| {
    let DirStats {
        offered: _,
        forwarded_packets: _,
        forwarded_bytes: _,
        dropped: _,
        duplicated: _,
        corrupted: _,
        reordered: _,
        send_failed: _,
        queue_bytes: _,
        in_flight_packets: _,
        in_flight_bytes: _,
        rate_bps: _,
    } = d;
    let Dropped {
        mtu: _,
        cut: _,
        loss: _,
        queue: _,
    } = &d.dropped;
};

#[derive(Serialize)]
#[serde(remote = "Dropped")]
struct DroppedJson {
    mtu: u64,
    cut: u64,
    loss: u64,
    queue: u64,
}

#[derive(Serialize)]
#[serde(remote = "DirStats")]
struct DirStatsJson {
    offered: u64,
    forwarded_packets: u64,
    forwarded_bytes: u64,
    #[serde(with = "DroppedJson")]
    dropped: Dropped,
    duplicated: u64,
    corrupted: u64,
    reordered: u64,
    send_failed: u64,
    queue_bytes: u64,
    in_flight_packets: u64,
    in_flight_bytes: u64,
    rate_bps: Option<u64>,
}

#[derive(Serialize)]
#[serde(remote = "Stats")]
struct StatsJson {
    uptime_s: f64,
    cut: bool,
    clients: u64,
    clients_evicted: u64,
    #[serde(with = "DirStatsJson")]
    up: DirStats,
    #[serde(with = "DirStatsJson")]
    down: DirStats,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_every_counter_in_order() {
        let mut s = Stats {
            uptime_s: 1.5,
            cut: true,
            clients: 2,
            clients_evicted: 3,
            ..Stats::default()
        };
        s.up.dropped.queue = 4;
        s.down.in_flight_bytes = 5;
        let dir = |queue: u64, in_flight_bytes: u64| {
            format!(
                "{{\"offered\":0,\"forwarded_packets\":0,\"forwarded_bytes\":0,\
                 \"dropped\":{{\"mtu\":0,\"cut\":0,\"loss\":0,\"queue\":{queue}}},\
                 \"duplicated\":0,\"corrupted\":0,\"reordered\":0,\"send_failed\":0,\
                 \"queue_bytes\":0,\"in_flight_packets\":0,\"in_flight_bytes\":{in_flight_bytes},\
                 \"rate_bps\":null}}"
            )
        };
        assert_eq!(
            to_json(&s),
            format!(
                "{{\"uptime_s\":1.5,\"cut\":true,\"clients\":2,\"clients_evicted\":3,\
                 \"up\":{},\"down\":{}}}",
                dir(4, 0),
                dir(0, 5)
            )
        );
    }
}
