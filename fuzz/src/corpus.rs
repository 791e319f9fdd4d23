//! The inputs the test gate replays for each target, all kept in the
//! repository so two runs on one commit feed the same bytes:
//! - `fuzz/seeds/<target>/`: hand-made seeds that reach each state;
//! - `fuzz/regressions/<target>/`: every input fuzzing has ever found
//!   (scripts/fuzz copies each find there, minimized).

use crate::{Body, TARGETS};
use std::path::{Path, PathBuf};

/// The folders of inputs a target has, by kind.
pub const KINDS: &[&str] = &["seeds", "regressions"];

/// `fuzz/<kind>/<target>/`.
pub fn dir(kind: &str, target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(kind)
        .join(target)
}

/// The files in `dir`, sorted by name (none when it does not exist).
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The body of the target called `name`.
pub fn body(name: &str) -> Option<Body> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|&(_, b)| b)
}

/// The command that replays one input on the stable toolchain.
pub fn replay_command(target: &str, file: &Path) -> String {
    let shown = file
        .strip_prefix(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap_or(Path::new("/")),
        )
        .unwrap_or(file);
    format!(
        "cargo run --manifest-path fuzz/Cargo.toml --no-default-features --bin replay -- {target} {}",
        shown.display()
    )
}

/// Runs `body` over `input`; the panic message when it panicked.
pub fn run_caught(body: Body, input: &[u8]) -> Result<(), String> {
    std::panic::catch_unwind(|| body(input)).map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into())
    })
}
