//! The relay's counters and how they are printed as text (`braid netem`
//! adds JSON).

/// Drops by cause. `queue` includes datagrams the relay had no buffer for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    pub mtu: u64,
    pub cut: u64,
    pub loss: u64,
    pub queue: u64,
}

/// One direction of the line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DirStats {
    /// Datagrams that entered the line.
    pub offered: u64,
    /// Copies handed to the kernel (duplicates included).
    pub forwarded_packets: u64,
    pub forwarded_bytes: u64,
    pub dropped: Dropped,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    /// Copies the kernel refused to send (full buffer, unreachable), or
    /// whose client was evicted while they were in flight.
    pub send_failed: u64,
    /// Bytes waiting for the rate cap's line to be free.
    pub queue_bytes: u64,
    /// Copies held in the delay line now.
    pub in_flight_packets: u64,
    pub in_flight_bytes: u64,
    /// The rate cap now, bits per second (it can change while the relay
    /// runs); `None`: no cap.
    pub rate_bps: Option<u64>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Stats {
    pub uptime_s: f64,
    pub cut: bool,
    pub clients: u64,
    /// Clients that had to make room for new ones, or idled out.
    pub clients_evicted: u64,
    pub up: DirStats,
    pub down: DirStats,
}

impl Stats {
    /// Everything on one line (control socket, `--stats-interval`).
    pub fn to_line(&self) -> String {
        format!(
            "t={:.1}s {} clients {}; up: {}; down: {}",
            self.uptime_s,
            if self.cut { "CUT" } else { "up" },
            self.clients,
            dir_line(&self.up),
            dir_line(&self.down)
        )
    }

    /// A small table for the end of a run.
    pub fn to_table(&self) -> String {
        let mut s = format!(
            "braid netem: {:.1} s, {} client(s), {} evicted, line {}\n",
            self.uptime_s,
            self.clients,
            self.clients_evicted,
            if self.cut { "cut" } else { "up" }
        );
        s += &format!("{:<22}{:>16}{:>16}\n", "", "up", "down");
        let rows: [Row; 13] = [
            ("offered", |d| d.offered.to_string()),
            ("forwarded packets", |d| d.forwarded_packets.to_string()),
            ("forwarded bytes", |d| d.forwarded_bytes.to_string()),
            ("dropped mtu", |d| d.dropped.mtu.to_string()),
            ("dropped cut", |d| d.dropped.cut.to_string()),
            ("dropped loss", |d| d.dropped.loss.to_string()),
            ("dropped queue", |d| d.dropped.queue.to_string()),
            ("duplicated", |d| d.duplicated.to_string()),
            ("corrupted", |d| d.corrupted.to_string()),
            ("reordered", |d| d.reordered.to_string()),
            ("send failed", |d| d.send_failed.to_string()),
            ("queue bytes", |d| d.queue_bytes.to_string()),
            ("in flight pkts/bytes", |d| {
                format!("{}/{}", d.in_flight_packets, d.in_flight_bytes)
            }),
        ];
        for (name, f) in rows {
            s += &format!("{name:<22}{:>16}{:>16}\n", f(&self.up), f(&self.down));
        }
        s
    }
}

/// A table row: its name and how to get it from a direction.
type Row = (&'static str, fn(&DirStats) -> String);

fn dir_line(d: &DirStats) -> String {
    format!(
        "fwd {} pkts {} B, drop mtu {} cut {} loss {} queue {}, dup {}, corrupt {}, reorder {}, send-failed {}, in flight {} pkts {} B, queue {} B",
        d.forwarded_packets,
        d.forwarded_bytes,
        d.dropped.mtu,
        d.dropped.cut,
        d.dropped.loss,
        d.dropped.queue,
        d.duplicated,
        d.corrupted,
        d.reordered,
        d.send_failed,
        d.in_flight_packets,
        d.in_flight_bytes,
        d.queue_bytes
    )
}
