//! The man pages and shell completions that `braid generate-doc-files`
//! writes (what `scripts/package` ships), checked against what `--help`
//! prints and read by tools nobody here wrote: groff (warnings are
//! failures), bash's completion machinery, zsh's parser and fish's
//! `complete --do-complete`. Needs no root and no network.

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The subcommands `braid --help` (or `braid bench --help`) lists.
fn listed_commands(args: &[&str]) -> Vec<String> {
    let mut all = args.to_vec();
    all.push("--help");
    let help = run_program(BRAID, &all, SHORT).expect_ok("braid --help");
    help.stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The long options `braid WORDS --help` lists.
fn listed_options(words: &[&str]) -> Vec<String> {
    let mut all = words.to_vec();
    all.push("--help");
    let help = run_program(BRAID, &all, SHORT).expect_ok("--help");
    help.stdout
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        // `--verbose...` is how clap shows a flag that may repeat.
        .map(|w| w.trim_end_matches(',').trim_end_matches("...").to_string())
        .collect()
}

fn generate(env: &TestEnv) -> PathBuf {
    let dir = env.dir.join("docs");
    let dir_arg = dir.display().to_string();
    run_program(BRAID, &["generate-doc-files", &dir_arg], SHORT)
        .expect_ok("braid generate-doc-files");
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs a shell script under `shell`, bounded.
fn shell(shell: &str, script: &str) -> Out {
    let mut c = Command::new(shell);
    c.arg("-c").arg(script);
    run_bounded(c, SHORT)
}

#[test]
fn man_pages_list_every_command_and_option_of_the_help() {
    let env = TestEnv::new("man_pages_list_every_command_and_option_of_the_help");
    let dir = generate(&env);
    let man8 = dir.join("man/man8");
    let root = read(&man8.join("braid.8"));
    let commands = listed_commands(&[]);
    assert!(
        commands.len() >= 10,
        "braid --help lists commands: {commands:?}"
    );
    assert!(!commands.contains(&"generate-doc-files".to_string()));
    for cmd in &commands {
        assert!(
            root.contains(&format!("braid\\-{}(8)", cmd.replace('-', "\\-"))),
            "braid(8) does not list {cmd}"
        );
        let page = read(&man8.join(format!("braid-{cmd}.8")));
        for option in listed_options(&[cmd]) {
            if option == "--help" && !page.contains("\\-\\-help") {
                // Subcommands that parse their own flags show their usage.
                continue;
            }
            assert!(
                page.contains(&option.replace('-', "\\-")),
                "braid-{cmd}(8) lacks {option}"
            );
        }
    }
    for cmd in listed_commands(&["bench"]) {
        let page = read(&man8.join(format!("braid-bench-{cmd}.8")));
        assert!(
            page.contains(".SH USAGE"),
            "braid-bench-{cmd}(8) shows its usage"
        );
    }
    let conf = read(&dir.join("man/man5/braid.conf.5"));
    for key in [
        "PrivateKey",
        "AllowedIPs",
        "Path",
        "Mode",
        "ReorderHold",
        "FailClosed",
    ] {
        assert!(
            conf.contains(&format!("\\fB{key}\\fR")),
            "braid.conf(5) lacks {key}"
        );
    }
    let pages: Vec<String> = std::fs::read_dir(&man8)
        .unwrap()
        .chain(std::fs::read_dir(dir.join("man/man5")).unwrap())
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    eprintln!("{} man pages", pages.len());
    if which("groff").is_none() {
        assert!(!in_ci(), "groff is missing (apt-get install groff-base)");
        eprintln!("SKIPPED the groff check: no groff");
        return;
    }
    let mut c = Command::new("groff");
    c.args(["-man", "-Tutf8", "-ww", "-z"]).args(&pages);
    let out = run_bounded(c, SHORT).expect_ok("groff");
    assert!(out.stderr.is_empty(), "groff warns:\n{}", out.stderr);
}

#[test]
fn bash_completes_commands_and_options() {
    let env = TestEnv::new("bash_completes_commands_and_options");
    let dir = generate(&env);
    let script = dir.join("completions/braid.bash").display().to_string();
    let complete = |words: &str, cword: usize| {
        let out = shell(
            "bash",
            &format!(
                "source {script}; COMP_WORDS=({words}); COMP_CWORD={cword}; \
                 _braid braid \"${{COMP_WORDS[$COMP_CWORD]}}\" \"${{COMP_WORDS[$COMP_CWORD-1]}}\"; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\""
            ),
        )
        .expect_ok("bash completion");
        out.stdout.lines().map(str::to_string).collect::<Vec<_>>()
    };
    let offered = complete("braid ''", 1);
    for cmd in listed_commands(&[]) {
        assert!(
            offered.contains(&cmd),
            "bash does not offer {cmd}: {offered:?}"
        );
    }
    assert!(!offered.iter().any(|c| c == "generate-doc-files"));
    let up = complete("braid up --", 2);
    for option in listed_options(&["up"]) {
        assert!(
            up.contains(&option),
            "bash does not offer up {option}: {up:?}"
        );
    }
    assert_eq!(complete("braid sh", 1), ["show"]);
}

#[test]
fn zsh_and_fish_read_their_completions() {
    let env = TestEnv::new("zsh_and_fish_read_their_completions");
    let dir = generate(&env);
    let zsh = dir.join("completions/_braid").display().to_string();
    let fish = dir.join("completions/braid.fish").display().to_string();
    let mut checked = 0;
    if which("zsh").is_some() {
        shell("zsh", &format!("zsh -n {zsh}")).expect_ok("zsh -n");
        assert!(read(Path::new(&zsh)).starts_with("#compdef braid"));
        checked += 1;
    }
    if which("fish").is_some() {
        let out = shell(
            "fish",
            &format!("source {fish}; complete --do-complete 'braid '"),
        )
        .expect_ok("fish completion");
        let offered: Vec<&str> = out
            .stdout
            .lines()
            .filter_map(|l| l.split('\t').next())
            .collect();
        for cmd in listed_commands(&[]) {
            assert!(
                offered.contains(&cmd.as_str()),
                "fish does not offer {cmd}: {offered:?}"
            );
        }
        checked += 1;
    }
    if checked < 2 {
        assert!(
            !in_ci(),
            "zsh or fish is missing (scripts/test installs both)"
        );
        eprintln!("SKIPPED some shells: zsh or fish is not installed");
    }
}
