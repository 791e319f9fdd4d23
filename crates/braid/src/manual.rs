//! The man pages and shell completions, generated so they never drift from
//! what they describe: `braid(8)` and a page per subcommand from the clap
//! definition of the command line (the same one `--help` prints), the
//! usage text of subcommands that parse their own arguments from those
//! subcommands, and `braid.conf(5)` from the table of config keys the
//! parser consults ([`crate::config::keys`]). `braid generate-doc-files
//! DIR` (hidden) writes them; `scripts/package` ships them.

use crate::config::keys::{self, KeySpec, Origin, Reload, Section};
use clap_complete::Shell;
use roff::{bold, italic, roman, Inline, Roff};
use std::path::{Path, PathBuf};

/// The example configs, shipped under /usr/share/doc/braid/examples/ and
/// printed in braid.conf(5).
pub const EXAMPLES: [(&str, &str); 3] = [
    (
        "dual-line-router.conf",
        include_str!("../../../packaging/examples/dual-line-router.conf"),
    ),
    (
        "server-many-peers.conf",
        include_str!("../../../packaging/examples/server-many-peers.conf"),
    ),
    (
        "road-warrior.conf",
        include_str!("../../../packaging/examples/road-warrior.conf"),
    ),
];

/// One generated file, by its path under the output directory.
pub struct DocFile {
    pub path: PathBuf,
    pub contents: Vec<u8>,
}

/// Every man page and completion script for the command line `cli`.
pub fn doc_files(cli: clap::Command) -> Result<Vec<DocFile>, String> {
    let mut cli = cli.disable_help_subcommand(true);
    cli.build();
    let version = cli.get_version().unwrap_or_default().to_string();
    let mut files = Vec::new();
    command_pages(&cli, &[], &version, &mut files)?;
    files.push(DocFile {
        path: PathBuf::from("man/man5/braid.conf.5"),
        contents: ascii_roff(config_page(&version).as_bytes()),
    });
    let visible = without_hidden(&cli);
    for (shell, name) in [
        (Shell::Bash, "braid.bash"),
        (Shell::Zsh, "_braid"),
        (Shell::Fish, "braid.fish"),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut visible.clone(), "braid", &mut script);
        files.push(DocFile {
            path: Path::new("completions").join(name),
            contents: script,
        });
    }
    Ok(files)
}

/// Writes [`doc_files`] under `dir`; returns the paths written.
pub fn write_doc_files(cli: clap::Command, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    for file in doc_files(cli)? {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, &file.contents)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The command line as a user sees it: hidden subcommands left out (the
/// completion generators list every subcommand they are given).
fn without_hidden(cli: &clap::Command) -> clap::Command {
    // The same crate's version as the command line's own `version`.
    let mut visible = clap::Command::new("braid")
        .bin_name("braid")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(cli.is_subcommand_required_set());
    if let Some(about) = cli.get_about() {
        visible = visible.about(about.clone());
    }
    visible.subcommands(cli.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}

/// `braid(8)` for the root, `braid-WORDS(8)` for each visible subcommand.
fn command_pages(
    cmd: &clap::Command,
    words: &[&str],
    version: &str,
    files: &mut Vec<DocFile>,
) -> Result<(), String> {
    let page_name = std::iter::once("braid")
        .chain(words.iter().copied())
        .collect::<Vec<_>>()
        .join("-");
    let man = clap_mangen::Man::new(cmd.clone())
        .title(page_name.to_ascii_uppercase())
        .section("8")
        .source(format!("braid {version}"))
        .manual("braid manual");
    let mut page = Vec::new();
    let io = |e: std::io::Error| format!("rendering {page_name}(8): {e}");
    man.render_title(&mut page).map_err(io)?;
    man.render_name_section(&mut page).map_err(io)?;
    man.render_synopsis_section(&mut page).map_err(io)?;
    if words.is_empty() {
        page.extend(root_description().render().into_bytes());
    } else {
        man.render_description_section(&mut page).map_err(io)?;
    }
    if cmd.is_disable_help_flag_set() {
        // Parses its own arguments: its own --help is the reference.
        let usage = crate::toolkit::own_usage(words).ok_or_else(|| {
            format!("`braid {}` parses its own arguments but has no usage text for its man page (toolkit::own_usage)", words.join(" "))
        })?;
        page.extend(preformatted("USAGE", usage).render().into_bytes());
    } else if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page).map_err(io)?;
    }
    let subcommands: Vec<&clap::Command> =
        cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    if !subcommands.is_empty() {
        man.render_subcommands_section(&mut page).map_err(io)?;
    }
    if words.is_empty() {
        page.extend(root_sections().render().into_bytes());
    }
    let mut see_also = vec!["braid(8)".to_string(), "braid.conf(5)".to_string()];
    see_also.retain(|p| *p != format!("{page_name}(8)"));
    see_also.extend(["wg(8)", "wg-quick(8)"].map(String::from));
    let mut roff = Roff::new();
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(see_also.join(", "))]);
    page.extend(roff.render().into_bytes());
    files.push(DocFile {
        path: PathBuf::from(format!("man/man8/{page_name}.8")),
        contents: ascii_roff(&page),
    });
    for sub in subcommands {
        let mut sub_words = words.to_vec();
        sub_words.push(sub.get_name());
        command_pages(sub, &sub_words, version, files)?;
    }
    Ok(())
}

/// `braid(8)`'s DESCRIPTION: what braid is, beyond the one-line about.
fn root_description() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["DESCRIPTION"]);
    for paragraph in [
        "braid is a userspace VPN daemon for Linux that speaks WireGuard on the wire, so \
         stock WireGuard peers (the kernel module, wireguard-go, phone apps) accept it \
         unchanged. Between braid peers it joins two or more internet lines into one tunnel: \
         every packet on every line, one line with the next taking over, or packets spread \
         by what each line carries, with a receiver that restores their order.",
        "An interface is configured with a wg-quick file (braid.conf(5)) and brought up with \
         `braid up`; `wg` and `wg-quick` work with braid as with wireguard-go. Beside the \
         daemon braid carries the tools to measure a tunnel: `braid bench`, `braid netem`, \
         `braid mtu` and `braid doctor`.",
        "Started as root, the daemon gives root up once the interface exists and keeps only \
         CAP_NET_ADMIN and CAP_NET_BIND_SERVICE, as the system user `braid` if it exists.",
    ] {
        r.control("PP", []);
        r.text(markup(paragraph));
    }
    r
}

/// Every character outside ASCII as a groff `\[uXXXX]` escape, so the page
/// reads the same with or without a preprocessor that converts encodings.
fn ascii_roff(page: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(page);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    out.into_bytes()
}

/// What `braid(8)` says beyond the command list.
fn root_sections() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["INTERFACES WITHOUT A CONFIG FILE"]);
    r.text(markup(
        "`braid NAME` creates an interface that is configured later over the userspace \
         API, as `wireguard-go NAME` does, so wg-quick can drive braid: \
         `WG_QUICK_USERSPACE_IMPLEMENTATION=braid wg-quick up wg0`. `-f` keeps it in the \
         foreground.",
    ));
    r.control("SH", ["SYSTEMD"]);
    r.text(markup(
        "`systemctl enable --now braid@NAME` brings up /etc/wireguard/NAME.conf at boot, as \
         wg-quick@NAME does for wg-quick. The unit runs `braid up --foreground` and tells \
         systemd when the interface is up (Type=notify). `systemctl reload braid@NAME` runs \
         `braid syncconf NAME /etc/wireguard/NAME.conf`: a changed file is applied without \
         dropping live sessions, and a file with a mistake changes nothing. \
         `systemctl stop braid@NAME` takes the interface down.",
    ));
    r.control("SH", ["FILES"]);
    for (file, what) in [
        (
            "/etc/wireguard/NAME.conf",
            "the config of interface NAME (braid.conf(5)), mode 0600",
        ),
        (
            "/var/run/wireguard/NAME.sock",
            "its userspace API socket, as wireguard-go's; `wg` and `braid show` use it",
        ),
        (
            "/var/log/braid/NAME.log",
            "the log of a daemon started without --foreground (under systemd: the journal)",
        ),
        (
            "/usr/share/doc/braid/examples/",
            "example configs: a dual-line router, a server with many peers, a road warrior",
        ),
    ] {
        r.control("TP", []);
        r.text([bold(file)]);
        r.text(markup(what));
    }
    r.control("SH", ["EXIT STATUS"]);
    r.text([roman(
        "0 on success, 1 on an error (printed on standard error, naming the file, line and key \
         for a config mistake).",
    )]);
    r
}

/// A section of preformatted text (a subcommand's own usage).
fn preformatted(title: &str, text: &str) -> Roff {
    let mut r = Roff::new();
    r.control("SH", [title]);
    r.control("nf", []);
    for line in text.lines() {
        r.text([roman(line)]);
    }
    r.control("fi", []);
    r
}

/// Plain text with `code` spans set in bold.
fn markup(text: &str) -> Vec<Inline> {
    text.split('`')
        .enumerate()
        .filter(|(_, part)| !part.is_empty())
        .map(|(i, part)| if i % 2 == 1 { bold(part) } else { roman(part) })
        .collect()
}

/// `braid.conf(5)`, from the table of keys.
pub fn config_page(version: &str) -> String {
    let mut r = Roff::new();
    r.control(
        "TH",
        [
            "BRAID.CONF",
            "5",
            "",
            &format!("braid {version}"),
            "braid manual",
        ],
    );
    r.control("SH", ["NAME"]);
    r.text([roman(
        "braid.conf - configuration file of a braid interface",
    )]);
    r.control("SH", ["SYNOPSIS"]);
    r.text([roman("/etc/wireguard/"), italic("NAME"), roman(".conf")]);
    r.control("SH", ["DESCRIPTION"]);
    for paragraph in [
        "A braid interface is configured with a wg-quick(8) file, so an existing WireGuard \
         config works as it is. `braid up /etc/wireguard/NAME.conf` brings up interface NAME \
         (the file's stem, at most 15 characters).",
        "The file has one [Interface] section and one [Peer] section per peer. Lines are \
         `Key = Value`; section and key names are case-insensitive; `#` starts a comment \
         anywhere on a line; keys marked repeatable take comma-separated lists and \
         accumulate over several lines. An unknown key is an error, so a typo never turns a \
         setting off silently.",
        "braid adds keys of its own (marked braid below). wg(8) and wg-quick(8) refuse keys \
         they do not know, so a file with braid keys is for braid; braid reads every key of \
         theirs.",
        "A mistake stops `braid up` (and `braid syncconf`) before anything changes, with an \
         error naming the file, the line and the key, for example \
         `wg0.conf:7: key 'ListenPort': invalid port \"70000\" (expected 0-65535)`. Private \
         and preshared keys are never echoed. braid refuses a file that group or others may \
         read or write, as it holds a private key: `chmod 600` it.",
    ] {
        r.control("PP", []);
        r.text(markup(paragraph));
    }
    for section in [Section::Interface, Section::Peer] {
        r.control("SH", [&format!("{} SECTION", section.header())[..]]);
        for key in keys::in_section(section) {
            key_entry(&mut r, key);
        }
    }
    r.control("SH", ["RELOADING"]);
    r.text(markup(
        "`braid syncconf NAME FILE` (what `systemctl reload braid@NAME` runs) applies a changed \
         file to the running interface the way `wg syncconf` does for WireGuard: peers are \
         added, changed and removed, and the sessions of peers that stay are kept. Keys marked \
         \"applied on reload\" take effect at once, those marked \"applied from the next \
         handshake\" when the peer's session is next renewed, and a change to a key marked \
         \"needs a restart\" is reported and left for `systemctl restart braid@NAME`. A file \
         with a mistake changes nothing.",
    ));
    r.control("SH", ["EXAMPLES"]);
    for (name, text) in EXAMPLES {
        r.control("SS", [name]);
        r.control("nf", []);
        for line in text.lines() {
            r.text([roman(line)]);
        }
        r.control("fi", []);
    }
    r.control("SH", ["FILES"]);
    r.text(markup(
        "The examples above are installed under /usr/share/doc/braid/examples/.",
    ));
    r.control("SH", ["SEE ALSO"]);
    r.text([roman("braid(8), braid-syncconf(8), wg-quick(8), wg(8)")]);
    r.render()
}

fn key_entry(r: &mut Roff, key: &KeySpec) {
    r.control("TP", []);
    r.text([bold(key.name), roman(" = "), italic(key.syntax)]);
    let mut text = markup(key.doc);
    let origin = match key.origin {
        Origin::Wg => "WireGuard key (wg(8))",
        Origin::WgQuick => "wg-quick key (wg-quick(8))",
        Origin::Braid => "braid",
    };
    let reload = match key.reload {
        Reload::Live => "applied on reload",
        Reload::NextSession => "applied from the next handshake",
        Reload::Restart => "needs a restart",
    };
    let mut notes = vec![origin, reload];
    if key.repeatable {
        notes.push("repeatable");
    }
    text.push(roman(format!(" [{}]", notes.join("; "))));
    r.text(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_page_has_every_key_of_the_table() {
        let page = config_page("0.0.0");
        for key in keys::KEYS {
            // roff escapes '-' in text; names have none.
            assert!(
                page.contains(&format!("\\fB{}\\fR = ", key.name)),
                "{} is missing from braid.conf(5)",
                key.name
            );
        }
        assert!(page.starts_with(".ie \\n(.g .ds Aq"), "roff preamble");
        assert!(page.contains(".TH BRAID.CONF 5"));
    }

    /// The example with each `<...>` placeholder replaced by a fresh key of
    /// the kind it asks for.
    fn filled_in(example: &str) -> String {
        use crate::keys::{PresharedKey, PrivateKey};
        let mut text = example.to_string();
        while let Some(start) = text.find('<') {
            let end = start + text[start..].find('>').expect("a closed placeholder");
            let key = if text[start..end].contains("genpsk") {
                PresharedKey::generate().to_base64().to_string()
            } else if text[start..end].contains("genkey") {
                PrivateKey::generate().to_base64().to_string()
            } else {
                PrivateKey::generate().public_key().to_string()
            };
            text.replace_range(start..=end, &key);
        }
        text
    }

    #[test]
    fn the_examples_parse_once_their_keys_are_filled_in() {
        for (name, text) in EXAMPLES {
            // As shipped they are refused: nobody runs a placeholder key.
            let e = crate::config::Config::parse(text, name).unwrap_err();
            assert!(e.to_string().contains("PrivateKey"), "{name}: {e}");
            let config = crate::config::Config::parse(&filled_in(text), name)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!config.peers.is_empty(), "{name}");
            assert!(
                text.contains("install -m 600"),
                "{name} says how to install it"
            );
        }
        let router = crate::config::Config::parse(&filled_in(EXAMPLES[0].1), "r").unwrap();
        assert_eq!(
            router.peers[0].paths.len(),
            2,
            "the dual-line router has two lines"
        );
        let server = crate::config::Config::parse(&filled_in(EXAMPLES[1].1), "s").unwrap();
        assert!(server.peers.len() >= 3, "the server has many peers");
        let laptop = crate::config::Config::parse(&filled_in(EXAMPLES[2].1), "l").unwrap();
        assert!(laptop.peers[0].allowed_ips.iter().any(|c| c.prefix == 0));
    }

    #[test]
    fn non_ascii_becomes_a_groff_escape() {
        assert_eq!(
            ascii_roff("cuts\u{2026} ok".as_bytes()),
            b"cuts\\[u2026] ok"
        );
        assert_eq!(ascii_roff(b"plain"), b"plain");
    }

    #[test]
    fn markup_sets_code_in_bold() {
        assert_eq!(
            markup("run `braid up` now"),
            vec![roman("run "), bold("braid up"), roman(" now")]
        );
        assert_eq!(markup("`x`"), vec![bold("x")]);
    }
}
