//! Replays fuzz inputs on the stable toolchain, without libFuzzer:
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --no-default-features --bin replay -- TARGET [FILE|DIR]...
//! ```
//!
//! With no FILE, replays the target's seeds and regressions. Exits 1 when
//! any input panics (the panic and its backtrace are printed as usual).

use braid_fuzz::corpus;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(target) = args.next() else {
        eprintln!("usage: replay TARGET [FILE|DIR]...");
        eprintln!("targets: {}", target_names());
        return ExitCode::from(2);
    };
    let Some(body) = corpus::body(&target) else {
        eprintln!(
            "replay: no fuzz target named {target:?}; targets: {}",
            target_names()
        );
        return ExitCode::from(2);
    };
    let mut paths: Vec<PathBuf> = args.map(PathBuf::from).collect();
    if paths.is_empty() {
        paths = corpus::KINDS
            .iter()
            .map(|k| corpus::dir(k, &target))
            .collect();
    }
    let mut inputs = Vec::new();
    for path in paths {
        if path.is_dir() {
            inputs.extend(corpus::files(&path));
        } else if path.is_file() {
            inputs.push(path);
        } else {
            eprintln!("replay: {}: no such file or folder", path.display());
            return ExitCode::from(2);
        }
    }
    let mut failed = 0;
    for input in &inputs {
        let bytes = match std::fs::read(input) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("replay: cannot read {}: {e}", input.display());
                return ExitCode::from(2);
            }
        };
        match corpus::run_caught(body, &bytes) {
            Ok(()) => println!("ok     {}", input.display()),
            Err(msg) => {
                failed += 1;
                println!("PANIC  {}: {msg}", input.display());
            }
        }
    }
    println!("{target}: {} inputs, {failed} panicked", inputs.len());
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn target_names() -> String {
    braid_fuzz::TARGETS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}
