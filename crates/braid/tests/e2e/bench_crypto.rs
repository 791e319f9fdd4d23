//! `braid bench crypto --quick --json`: every cell is a positive number and
//! both ciphers are there. Nothing asserts how fast anything ran.

use serde_json::Value;
use std::process::Command;

const BRAID: &str = env!("CARGO_BIN_EXE_braid");

#[test]
fn bench_crypto_quick_json() {
    let out = Command::new(BRAID)
        .args(["bench", "crypto", "--quick", "--json", "--seconds", "0.05"])
        .output()
        .expect("run braid");
    assert!(
        out.status.success(),
        "braid bench crypto failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let sizes: Vec<u64> = doc["sizes"]
        .as_array()
        .expect("sizes")
        .iter()
        .map(|v| v.as_u64().expect("a size"))
        .collect();
    assert_eq!(sizes, [64, 256, 1024, 1420, 8192, 16384]);
    let results = doc["results"].as_array().expect("results");
    for cipher in ["ChaCha20-Poly1305", "AES-256-GCM"] {
        for op in ["seal", "open"] {
            for cores in ["one", "all"] {
                let row = results
                    .iter()
                    .find(|r| r["cipher"] == cipher && r["op"] == op && r["cores"] == cores)
                    .unwrap_or_else(|| panic!("no row {cipher} {op} {cores}"));
                let cells = row["bytes_per_sec"].as_array().expect("cells");
                assert_eq!(cells.len(), sizes.len(), "{cipher} {op} {cores}");
                for (size, v) in sizes.iter().zip(cells) {
                    let v = v.as_f64().expect("a number");
                    assert!(
                        v.is_finite() && v > 0.0,
                        "{cipher} {op} {cores} {size}: {v}"
                    );
                }
            }
        }
    }
    assert_eq!(results.len(), 8);
    assert!(doc["threads"].as_u64().expect("threads") >= 1);
    assert!(doc["fastest_1420_one_core"].is_string());
    // openssl numbers, when it ran, are positive where present.
    for row in doc["openssl"]["rows"].as_array().expect("openssl rows") {
        for v in row["bytes_per_sec"].as_array().expect("cells") {
            assert!(v.is_null() || v.as_f64().is_some_and(|v| v > 0.0), "{v}");
        }
    }
}
