//! `braid`: the command line, with the habits of `wg` and `wg-quick`.

use braid::background;
use braid::config::Config;
use braid::daemon::privilege::Privileges;
use braid::daemon::{self, UpRequest};
use braid::keys::{PresharedKey, PrivateKey};
use braid::log::Level as LogLevel;
use braid::{show, uapi};
use clap::{Parser, Subcommand};
use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

#[derive(Parser)]
#[command(
    name = "braid",
    version,
    about = "A fast userspace VPN that speaks WireGuard and braids several lines into one tunnel"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Bring up an interface from a wg-quick config file (interface name = file stem).
    Up {
        /// Path to NAME.conf.
        file: PathBuf,
        /// Stay attached to the terminal instead of running in the background.
        #[arg(long, short = 'f')]
        foreground: bool,
        /// Once set up, run as this user (default: braid if that system
        /// user exists, else nobody, with a warning) with only
        /// CAP_NET_ADMIN and CAP_NET_BIND_SERVICE.
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// Keep running as root (for debugging).
        #[arg(long, conflicts_with = "user")]
        keep_root: bool,
        /// Log more: each -v one level more than `LogLevel =` (info by
        /// default), up to debug.
        #[arg(short, long, action = clap::ArgAction::Count)]
        verbose: u8,
    },
    /// Stop an interface's daemon and remove what it created. Given its
    /// config file (a path ending in .conf) instead of a name, it also
    /// removes what a killed daemon left (a full tunnel's rules and
    /// fail-closed routes).
    Down {
        /// NAME, or the path to NAME.conf.
        name: String,
    },
    /// Apply a changed config file to a running interface without dropping
    /// its sessions, as `wg syncconf` does, braid's keys included (what
    /// `systemctl reload braid@NAME` runs). A file with a mistake changes
    /// nothing; what only a restart applies is reported.
    Syncconf {
        /// The running interface.
        name: String,
        /// Its config file (NAME.conf).
        file: PathBuf,
    },
    /// Show interfaces as `wg show` does, plus braid's counters.
    Show {
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// A live view of running interfaces: per peer and path the rate each
    /// way with the last minute, RTT, loss, state, first arrivals, the
    /// reorder window and recent events; q quits.
    Top {
        /// The interface (default: every running one).
        name: Option<String>,
    },
    /// Check this machine (and with NAME a running interface): what to change and why.
    Doctor {
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Path MTU per path of a running interface: what each line carries,
    /// the discovery's state and bounds.
    Mtu {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a new private key (base64).
    Genkey,
    /// Read a private key on stdin, print its public key.
    Pubkey,
    /// Print a new preshared key.
    Genpsk,
    /// Run the built-in demo: two namespaces, a tunnel, iperf3, counters.
    Demo {
        /// Length of the iperf3 run in seconds.
        #[arg(long, default_value_t = 5)]
        seconds: u32,
        /// Also draw the run as an SVG: per second what each line carried
        /// and what arrived, the cut and braid's failover marked.
        #[arg(long, value_name = "FILE.svg", value_parser = plot_target)]
        plot: Option<PathBuf>,
    },
    /// Relay UDP through an impaired line (delay, jitter, loss, rate, cuts…);
    /// see `braid netem --help`.
    #[command(disable_help_flag = true)]
    Netem {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Write the man pages and shell completions, generated from this
    /// command line and the config key table, under DIR (for packaging).
    #[command(hide = true)]
    GenerateDocFiles { dir: PathBuf },
    /// Create an unconfigured interface served over the userspace API, as
    /// `wireguard-go NAME` does (what wg-quick runs in userspace mode).
    #[command(external_subcommand)]
    Interface(Vec<String>),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Forwarding rate and delay precision of `braid netem`.
    #[command(disable_help_flag = true)]
    Netem {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Dual-line benchmark: the seed's table, lossy, cut and capped lines.
    #[command(disable_help_flag = true)]
    Lines {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// AEAD throughput, `openssl speed` style, next to openssl's own numbers.
    #[command(disable_help_flag = true)]
    Crypto {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A bounded handshake flood against a responder: rate offered and
    /// handled, cookie replies, the responder's CPU.
    #[command(disable_help_flag = true)]
    HandshakeFlood {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// ICMP echo round trips at a fixed interval, sleeping between probes
    /// (what `bench tunnel` measures latency with).
    #[command(disable_help_flag = true)]
    Echo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// One VPN between two namespaces: TCP throughput, ping, CPU per GB
    /// (braid, none, wireguard-go, boringtun, openvpn).
    #[command(disable_help_flag = true)]
    Tunnel {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A server with many idle peers, braid and wireguard-go side by side:
    /// wg setconf/show times, idle CPU, RSS, a live peer's ping and TCP,
    /// handshakes per second when thousands initiate at once.
    #[command(disable_help_flag = true)]
    Peers {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    // Before anything can start a thread: what exists now is not braid's.
    braid::threads::note_start();
    // `braid -f NAME` is wireguard-go's own order (`wireguard-go -f NAME`);
    // clap would take the leading flag for one of its own.
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if matches!(raw.first().map(String::as_str), Some("-f" | "--foreground")) {
        return exit_code(interface(&raw));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up {
            file,
            foreground,
            user,
            keep_root,
            verbose,
        } => up(
            &file,
            foreground,
            chosen(Privileges::choose(user.as_deref(), keep_root)),
            verbose,
        ),
        Command::Down { name } => down(&name),
        Command::Syncconf { name, file } => braid::syncconf::run(&name, &file).map(|notes| {
            for note in notes {
                println!("{name}: {note}");
            }
        }),
        Command::Show { name, json } => show_cmd(name.as_deref(), json),
        Command::Mtu { name, json } => mtu_cmd(&name, json),
        Command::Top { name } => braid::top::run(name.as_deref()),
        Command::Doctor { name, json } => {
            return if braid::doctor::run(name.as_deref(), json) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Command::Genkey => {
            println!("{}", &*PrivateKey::generate().to_base64());
            Ok(())
        }
        Command::Genpsk => {
            println!("{}", &*PresharedKey::generate().to_base64());
            Ok(())
        }
        Command::Pubkey => pubkey(),
        Command::Demo { seconds, plot } => {
            require_root().and_then(|()| braid::toolkit::demo::run_demo(seconds, plot.as_deref()))
        }
        Command::Netem { args } => braid::toolkit::netem::run(&args),
        Command::Bench(BenchCommand::Netem { args }) => braid::toolkit::bench::netem::run(&args),
        Command::Bench(BenchCommand::Lines { args }) => braid::toolkit::bench::lines::run(&args),
        Command::Bench(BenchCommand::Crypto { args }) => braid::toolkit::bench::crypto::run(&args),
        Command::Bench(BenchCommand::Tunnel { args }) => braid::toolkit::bench::tunnel::run(&args),
        Command::Bench(BenchCommand::Echo { args }) => braid::toolkit::bench::echo::run(&args),
        Command::Bench(BenchCommand::Peers { args }) => braid::toolkit::bench::peers::run(&args),
        Command::Bench(BenchCommand::HandshakeFlood { args }) => {
            braid::toolkit::bench::flood::run(&args)
        }
        Command::GenerateDocFiles { dir } => {
            braid::manual::write_doc_files(<Cli as clap::CommandFactory>::command(), &dir)
                .map(|_| ())
        }
        Command::Interface(args) => interface(&args),
    };
    exit_code(result)
}

fn exit_code(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("braid: {e}");
            ExitCode::FAILURE
        }
    }
}

fn plot_target(value: &str) -> Result<PathBuf, String> {
    braid::toolkit::plot::parse_target("--plot", value)
}

fn pubkey() -> Result<(), String> {
    let mut input = zeroize::Zeroizing::new(String::new());
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| format!("reading stdin: {e}"))?;
    let key = PrivateKey::from_base64(input.trim()).map_err(|e| format!("stdin: {e}"))?;
    println!("{}", key.public_key().to_base64());
    Ok(())
}

fn require_root() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("this needs root (CAP_NET_ADMIN) to create a TUN interface".into());
    }
    Ok(())
}

/// The privilege policy, after showing its warning (if any) where the
/// operator sees it: the terminal, or a service manager's log.
fn chosen((privileges, warning): (Privileges, Option<String>)) -> Privileges {
    if let Some(w) = warning {
        eprintln!("braid: {w}");
    }
    privileges
}

fn up(
    file: &std::path::Path,
    foreground: bool,
    privileges: Privileges,
    verbose: u8,
) -> Result<(), String> {
    // Everything that can be wrong with the file is found before the system
    // is touched.
    let name = Config::interface_name(file).map_err(|e| e.to_string())?;
    let config = Config::load(file).map_err(|e| e.to_string())?;
    daemon::config_to_set(&config).map_err(|e| format!("{}: {e}", file.display()))?;
    require_root()?;
    start(
        UpRequest {
            name,
            log_level: config
                .interface
                .log_level
                .unwrap_or(LogLevel::Info)
                .raised_by(verbose),
            config: Some(config),
            privileges,
        },
        foreground,
    )
}

fn interface(args: &[String]) -> Result<(), String> {
    const FLAGS: [&str; 5] = ["-f", "--foreground", "--keep-root", "-v", "--verbose"];
    let (flags, names): (Vec<&String>, Vec<&String>) =
        args.iter().partition(|a| FLAGS.contains(&a.as_str()));
    let foreground = flags.iter().any(|a| FLAGS[..2].contains(&a.as_str()));
    let keep_root = flags.iter().any(|a| a.as_str() == "--keep-root");
    let verbose = flags
        .iter()
        .filter(|a| FLAGS[3..].contains(&a.as_str()))
        .count();
    // wg-quick starts `braid NAME` with no way to pass a flag; wireguard-go's
    // LOG_LEVEL is how its users ask for more (or less).
    let log_level = match std::env::var("LOG_LEVEL") {
        Ok(v) if v == "silent" => LogLevel::Error,
        Ok(v) => LogLevel::parse(&v)
            .ok_or_else(|| format!("LOG_LEVEL={v:?}: expected {} (or silent)", LogLevel::NAMES))?,
        Err(_) => LogLevel::Info,
    }
    .raised_by(u8::try_from(verbose).unwrap_or(u8::MAX));
    let [name] = names.as_slice() else {
        return Err(format!(
            "unknown command {:?}; see `braid --help`",
            args.join(" ")
        ));
    };
    if name.starts_with('-') || name.len() > 15 || name.is_empty() {
        return Err(format!(
            "{name:?} is neither a command nor a valid interface name"
        ));
    }
    require_root()?;
    start(
        UpRequest {
            name: name.to_string(),
            log_level,
            config: None,
            privileges: chosen(Privileges::choose(None, keep_root)),
        },
        foreground,
    )
}

fn start(req: UpRequest, foreground: bool) -> Result<(), String> {
    let ready = if foreground {
        background::ReadyPipe::foreground()
    } else {
        background::daemonize(&background::log_path(&req.name))
            .map_err(|e| format!("cannot start the daemon: {e}"))?
    };
    daemon::run(req, ready).map_err(|e| e.to_string())
}

/// Asks the daemon behind NAME's socket to stop, and waits until it has.
/// `arg` is NAME or the path to NAME.conf; with the config, when no daemon
/// serves NAME, what a killed one left is removed instead.
fn down(arg: &str) -> Result<(), String> {
    let file = std::path::Path::new(arg);
    let config = if arg.ends_with(".conf") || arg.contains('/') {
        let name = Config::interface_name(file).map_err(|e| e.to_string())?;
        let config = Config::load(file).map_err(|e| e.to_string())?;
        Some((name, config))
    } else {
        None
    };
    let name = config.as_ref().map_or(arg, |(n, _)| n.as_str());
    require_root()?;
    let path = uapi::socket_path(name);
    let stream = match std::os::unix::net::UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) => {
            let Some((_, config)) = &config else {
                return Err(format!(
                    "no braid interface {name} ({}: {e}); if its daemon was killed, \
                     `braid down /path/to/{name}.conf` removes what it left",
                    path.display()
                ));
            };
            return down_leftovers(name, config, &e);
        }
    };
    let pid = peer_pid(&stream)
        .ok_or_else(|| format!("cannot tell which process serves {}", path.display()))?;
    drop(stream);
    // SAFETY: kill with a pid the kernel reported for the socket's owner.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(format!(
            "cannot stop process {pid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_running(pid) || path.exists() {
        if Instant::now() > deadline {
            return Err(format!(
                "{name}: the daemon (pid {pid}) did not stop within 10 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `braid down NAME.conf` with no daemon serving NAME: removes a killed
/// daemon's fail-closed routes and full-tunnel rules, if there are any.
fn down_leftovers(name: &str, config: &Config, e: &std::io::Error) -> Result<(), String> {
    match daemon::routes::remove_leftovers(config) {
        Ok(true) => {
            eprintln!(
                "braid: {name} was not running; removed the rules and fail-closed routes it left"
            );
            Ok(())
        }
        Ok(false) => Err(format!(
            "no braid interface {name} ({}: {e}), and nothing of it left behind",
            uapi::socket_path(name).display()
        )),
        Err(err) => Err(format!("{name}: {err}")),
    }
}

/// Alive and not a zombie (a foreground daemon's parent may not have reaped
/// it yet, but it has stopped).
fn process_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// The daemon's pid, from the control socket's peer credentials.
fn peer_pid(stream: &std::os::unix::net::UnixStream) -> Option<i32> {
    uapi::peer_credentials(stream)
        .map(|c| c.pid)
        .filter(|&pid| pid > 0)
}

fn mtu_cmd(name: &str, json: bool) -> Result<(), String> {
    let snap = uapi::query_braid(uapi::socket_path(name)).map_err(|e| format!("{name}: {e}"))?;
    if json {
        println!("{}", braid::mtu_show::render_json(name, &snap));
    } else {
        print!("{}", braid::mtu_show::render_text(name, &snap));
    }
    Ok(())
}

fn show_cmd(name: Option<&str>, json: bool) -> Result<(), String> {
    let names: Vec<String> = match name {
        Some(n) => vec![n.to_string()],
        None => {
            let mut v: Vec<String> = std::fs::read_dir(uapi::SOCKET_DIR)
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| {
                            e.file_name()
                                .to_str()?
                                .strip_suffix(".sock")
                                .map(str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        }
    };
    let color = std::io::stdout().is_terminal();
    let mut jsons = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let snap = uapi::query_braid(uapi::socket_path(n)).map_err(|e| format!("{n}: {e}"))?;
        if json {
            jsons.push(show::render_json(n, &snap));
        } else {
            if i > 0 {
                println!();
            }
            print!("{}", show::render_text(n, &snap, SystemTime::now(), color));
        }
    }
    if json {
        if name.is_some() {
            println!("{}", jsons.join(""));
        } else {
            println!("[{}]", jsons.join(","));
        }
    }
    Ok(())
}
