//! The table (median, min, max per metric) and the whole record (`--json`).

use super::plan::{Opts, METRICS};
use crate::toolkit::bench::stats;
use serde_json::{json, Map, Value};

pub(super) struct Round {
    pub(super) metrics: Vec<Option<f64>>,
    pub(super) details: Value,
}

pub(super) fn fmt(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) if x >= 10.0 => format!("{x:.1}"),
        Some(x) if x >= 0.1 => format!("{x:.2}"),
        Some(x) => format!("{x:.3}"),
    }
}

pub(super) struct Report {
    pub(super) label: String,
    pub(super) version: String,
    pub(super) netem: Option<String>,
    pub(super) namespaces: Vec<String>,
    pub(super) pids: Vec<u32>,
    pub(super) target: String,
    pub(super) rounds: Vec<Round>,
    /// The tunnel's AEAD and what it alone costs, CPU-s per GB (both sides).
    pub(super) aead: Option<(crate::toolkit::bench::crypto::Cipher, f64)>,
    pub(super) wall_s: f64,
}

impl Report {
    pub(super) fn spread(&self, metric: usize) -> Option<(f64, f64, f64)> {
        let v: Vec<Option<f64>> = self.rounds.iter().map(|r| r.metrics[metric]).collect();
        stats::spread(&v)
    }

    pub(super) fn print_text(&self, o: &Opts) {
        let underlay = match &self.netem {
            Some(n) => format!("veth through `braid netem {n}`"),
            None => "veth".into(),
        };
        println!(
            "braid bench tunnel: {} ({}), cipher {}, {underlay}, {} round(s) × {} s per iperf3 run, TCP {}{}",
            self.label,
            self.version,
            o.cipher.name(),
            o.rounds,
            o.seconds,
            o.cc.as_deref().unwrap_or("default congestion control"),
            o.vpn_realtime
                .map(|p| format!(", VPN at SCHED_RR {p}"))
                .unwrap_or_default()
                + &o.vpn_queues
                    .map(|n| format!(", {n} TUN queues"))
                    .unwrap_or_default()
        );
        println!(
            "{:<24}{:>10}{:>10}{:>10}{:>10}",
            "", "unit", "median", "min", "max"
        );
        for (i, (_, name, unit)) in METRICS.iter().enumerate() {
            let (med, min, max) = match self.spread(i) {
                Some((a, b, c)) => (Some(a), Some(b), Some(c)),
                None => (None, None, None),
            };
            println!(
                "{name:<24}{unit:>10}{:>10}{:>10}{:>10}",
                fmt(med),
                fmt(min),
                fmt(max)
            );
        }
        if self.pids.is_empty() {
            println!("(no tunnel: no VPN process to charge CPU to)");
        }
        if let Some((cipher, s)) = self.aead {
            println!(
                "the AEAD alone ({}, seal + open of 1420-byte packets, one core, measured now): {} CPU-s/GB",
                cipher.name(),
                fmt(Some(s))
            );
        }
        println!(
            "whole-machine CPU includes iperf3, the kernel and anything else running; {:.0} s in all",
            self.wall_s
        );
    }

    pub(super) fn json(&self, o: &Opts) -> Value {
        let pick = |f: &dyn Fn((f64, f64, f64)) -> f64| {
            let mut m = Map::new();
            for (i, (key, _, _)) in METRICS.iter().enumerate() {
                m.insert((*key).into(), json!(self.spread(i).map(f)));
            }
            Value::Object(m)
        };
        let per_round: Vec<Value> = self
            .rounds
            .iter()
            .enumerate()
            .map(|(n, r)| {
                let mut m = Map::new();
                m.insert("round".into(), json!(n + 1));
                for (i, (key, _, _)) in METRICS.iter().enumerate() {
                    m.insert((*key).into(), json!(r.metrics[i]));
                }
                m.insert("details".into(), r.details.clone());
                Value::Object(m)
            })
            .collect();
        json!({
            "bench": "tunnel",
            "label": self.label,
            "vpn": o.vpn.name(),
            "vpn_version": self.version,
            "cipher": o.cipher.name(),
            "cc": o.cc,
            "vpn_realtime_priority": o.vpn_realtime,
            "vpn_queues": o.vpn_queues,
            "netem": self.netem,
            "seconds": o.seconds,
            "rounds": o.rounds,
            "quick": o.quick,
            "target": self.target,
            "namespaces": self.namespaces,
            "vpn_pids": self.pids,
            "metrics": METRICS.iter().map(|(k, name, unit)| json!({"key": k, "name": name, "unit": unit})).collect::<Vec<_>>(),
            "per_round": per_round,
            "median": pick(&|s| s.0),
            "min": pick(&|s| s.1),
            "max": pick(&|s| s.2),
            "aead_cipher": self.aead.map(|a| a.0.name()),
            "aead_cpu_s_per_gb": self.aead.map(|a| a.1),
            "wall_s": self.wall_s,
        })
    }
}
