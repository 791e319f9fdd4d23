//! The table (`openssl speed` style) and the whole record (`--json`).

use super::aead::{Cipher, Op, SIZES};
use serde_json::{json, Value};
use std::fmt::Write as _;

pub(super) struct Row {
    pub(super) cipher: Cipher,
    pub(super) op: Op,
    pub(super) threads: usize,
    pub(super) all_cores: bool,
    pub(super) rates: Vec<f64>,
}

pub(super) struct OpensslRow {
    pub(super) cipher: Cipher,
    pub(super) rates: Vec<Option<f64>>,
}

pub(super) struct Cpu {
    arch: &'static str,
    model: Option<String>,
    features: Vec<(&'static str, bool)>,
}

pub(super) fn cpu_info() -> Cpu {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |names: &[&str]| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            names.contains(&k.trim()).then(|| v.trim().to_string())
        })
    };
    let flags: Vec<String> = field(&["flags", "Features"])
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let has = |f: &str| flags.iter().any(|x| x == f);
    let arch = std::env::consts::ARCH;
    let features = match arch {
        "x86_64" | "x86" => ["aes", "pclmulqdq", "avx2", "vaes", "avx512f"]
            .into_iter()
            .map(|f| (f, has(f)))
            .collect(),
        "aarch64" => vec![
            ("aes", has("aes")),
            ("pmull", has("pmull")),
            ("neon", has("asimd")),
        ],
        _ => Vec::new(),
    };
    let model = field(&["model name", "Model", "CPU part"]);
    Cpu {
        arch,
        model,
        features,
    }
}

/// Everything one run measured.
pub(super) struct Results {
    pub(super) seconds: f64,
    pub(super) quick: bool,
    /// False with `--no-openssl`.
    pub(super) openssl_asked: bool,
    pub(super) threads: usize,
    pub(super) cpu: Cpu,
    pub(super) rows: Vec<Row>,
    pub(super) openssl_version: Option<String>,
    pub(super) openssl_rows: Vec<OpensslRow>,
    pub(super) openssl_errors: Vec<String>,
}

impl Results {
    /// Bytes per second of one cell.
    fn rate(&self, c: Cipher, op: Op, all: bool, size: usize) -> f64 {
        let i = SIZES.iter().position(|&s| s == size).expect("a size");
        self.rows
            .iter()
            .find(|r| r.cipher == c && r.op == op && r.all_cores == all)
            .map_or(0.0, |r| r.rates[i])
    }

    /// Fastest at 1420 bytes on one core: the mean of seal and open.
    fn score(&self, c: Cipher) -> f64 {
        (self.rate(c, Op::Seal, false, 1420) + self.rate(c, Op::Open, false, 1420)) / 2.0
    }

    fn fastest(&self) -> Cipher {
        Cipher::ALL
            .into_iter()
            .max_by(|a, b| self.score(*a).total_cmp(&self.score(*b)))
            .expect("a cipher")
    }

    fn slowest(&self) -> Cipher {
        Cipher::ALL
            .into_iter()
            .min_by(|a, b| self.score(*a).total_cmp(&self.score(*b)))
            .expect("a cipher")
    }

    /// braid's seal rate over openssl's at size index `i`.
    fn ratio(&self, c: Cipher, i: usize) -> Option<f64> {
        let o = self.openssl_rows.iter().find(|r| r.cipher == c)?.rates[i]?;
        Some(self.rate(c, Op::Seal, false, SIZES[i]) / o)
    }

    pub(super) fn json(&self) -> Result<String, String> {
        let fastest = self.fastest();
        let doc = json!({
            "unit": "bytes/s of plaintext",
            "library": libraries_used(),
            "aes_library": aes_choice_json(),
            "seconds_per_cell": self.seconds,
            "threads": self.threads,
            "sizes": SIZES,
            "cpu": {
                "arch": self.cpu.arch,
                "model": self.cpu.model,
                "features": self.cpu.features.iter().map(|(k, v)| (k.to_string(), json!(v)))
                    .collect::<serde_json::Map<String, Value>>(),
            },
            "results": self.rows.iter().map(|r| json!({
                "cipher": r.cipher.name(),
                "id": r.cipher.id(),
                "op": r.op.name(),
                "library": r.cipher.library(),
                "cores": if r.all_cores { "all" } else { "one" },
                "threads": r.threads,
                "bytes_per_sec": r.rates,
            })).collect::<Vec<_>>(),
            "fastest_1420_one_core": fastest.name(),
            "openssl": {
                "ran": self.openssl_version.is_some(),
                "version": self.openssl_version,
                "errors": self.openssl_errors,
                "rows": self.openssl_rows.iter().map(|r| json!({
                    "cipher": r.cipher.name(),
                    "id": r.cipher.id(),
                    "op": "seal",
                    "cores": "one",
                    "bytes_per_sec": r.rates,
                    "braid_over_openssl": (0..SIZES.len()).map(|i| self.ratio(r.cipher, i)).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            },
        });
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())
    }

    pub(super) fn text(&self) -> String {
        let (fastest, slowest) = (self.fastest(), self.slowest());
        let mut s = String::new();
        let _ = writeln!(
        s,
        "braid bench crypto: {}, in place, 16-byte tag, WireGuard nonce; {} s per cell; {} cores",
        libraries_used(),
        self.seconds,
        self.threads
    );
        let _ = writeln!(s, "{}", crate::aes_choice::text());
        let _ = writeln!(
            s,
            "CPU: {} ({}); {}",
            self.cpu.model.as_deref().unwrap_or("unknown"),
            self.cpu.arch,
            if self.cpu.features.is_empty() {
                "no features checked on this architecture".to_string()
            } else {
                self.cpu
                    .features
                    .iter()
                    .map(|(k, v)| format!("{k} {}", if *v { "yes" } else { "no" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        let _ = writeln!(
            s,
            "The numbers are in MB/s (10^6 bytes of plaintext per second)."
        );
        let label_w = 36;
        let _ = write!(s, "{:<label_w$}", "type");
        for size in SIZES {
            let _ = write!(s, "{:>12}", format!("{size} bytes"));
        }
        s.push('\n');
        for cipher in Cipher::ALL {
            for r in self.rows.iter().filter(|r| r.cipher == cipher) {
                let label = format!(
                    "{} {} {}",
                    cipher.name(),
                    r.op.name(),
                    if r.all_cores {
                        format!("all cores ({})", r.threads)
                    } else {
                        "one core".to_string()
                    }
                );
                let _ = write!(s, "{label:<label_w$}");
                for v in &r.rates {
                    let _ = write!(s, "{:>12.2}", v / 1e6);
                }
                s.push('\n');
            }
            if let Some(r) = self.openssl_rows.iter().find(|r| r.cipher == cipher) {
                let _ = write!(s, "{:<label_w$}", format!("{} openssl seal", cipher.name()));
                for v in &r.rates {
                    match v {
                        Some(v) => {
                            let _ = write!(s, "{:>12.2}", v / 1e6);
                        }
                        None => {
                            let _ = write!(s, "{:>12}", "-");
                        }
                    }
                }
                s.push('\n');
                let _ = write!(
                    s,
                    "{:<label_w$}",
                    format!("{} braid/openssl seal", cipher.name())
                );
                for i in 0..SIZES.len() {
                    match self.ratio(cipher, i) {
                        Some(x) => {
                            let _ = write!(s, "{:>12}", format!("{x:.2}x"));
                        }
                        None => {
                            let _ = write!(s, "{:>12}", "-");
                        }
                    }
                }
                s.push('\n');
            }
        }
        match &self.openssl_version {
            Some(v) => {
                let _ = writeln!(
                    s,
                    "openssl: {v}; `openssl speed -evp` encrypts on one core{}",
                    if self.quick {
                        " (quick: 1420 bytes only)"
                    } else {
                        ""
                    }
                );
            }
            None if self.openssl_asked => {
                let _ = writeln!(s, "openssl: not installed, no comparison");
            }
            None => {
                let _ = writeln!(s, "openssl: not run (--no-openssl)");
            }
        }
        for e in &self.openssl_errors {
            let _ = writeln!(s, "openssl: {e}");
        }
        let _ = writeln!(
            s,
            "Fastest at 1420 bytes on one core: {} (seal {:.0} MB/s, open {:.0} MB/s), {:.2}x {}",
            fastest.name(),
            self.rate(fastest, Op::Seal, false, 1420) / 1e6,
            self.rate(fastest, Op::Open, false, 1420) / 1e6,
            self.score(fastest) / self.score(slowest).max(f64::MIN_POSITIVE),
            slowest.name(),
        );
        s
    }
}

/// The libraries the data path seals with, ring first.
fn libraries_used() -> String {
    let mut names: Vec<&str> = Vec::new();
    for c in Cipher::ALL {
        if !names.contains(&c.library()) {
            names.push(c.library());
        }
    }
    names.join(", ")
}

fn aes_choice_json() -> Value {
    let choice = crate::aes_choice::choice();
    json!({
        "chosen": choice.library.name(),
        "measured_mb_per_sec": choice.measured.iter()
            .map(|(lib, mbs)| (lib.name().to_string(), json!(mbs)))
            .collect::<serde_json::Map<String, Value>>(),
    })
}
