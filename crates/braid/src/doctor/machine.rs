//! Checks of the machine itself: CPU crypto features, the faster cipher
//! (measured), socket buffer limits, TUN offload, UDP GSO/GRO, the kernel.

use std::time::Duration;

use braid_io::{Offload, Tun, UdpSocket};

use braid_core::cipher::{AesGcmInstructions, DataCipher};

use super::check::Check;
use crate::toolkit::bench::crypto::{self, Cipher};

/// The packet size the cipher race uses: a full 1420-byte tunnel MTU.
const RACE_SIZE: usize = 1420;
/// Time each cipher seals for; short, since this is a hint, not a benchmark.
const RACE_TIME: Duration = Duration::from_millis(100);
/// What braid asks for per UDP socket.
const WANTED_SOCKET_BUFFER: u64 = braid_io::udp::SOCKET_BUFFER as u64;
const WANTED_MIB: u64 = WANTED_SOCKET_BUFFER >> 20;
/// A cipher counts as faster only beyond this ratio (the race is short and
/// the machine may be busy).
pub const CLEARLY_FASTER: f64 = 1.15;

/// One core's seal rate at 1420 bytes, bytes per second.
#[derive(Debug, Clone, Copy)]
pub struct CipherRates {
    pub chacha: f64,
    pub aes: f64,
}

impl CipherRates {
    pub fn fastest(&self) -> Cipher {
        if self.aes > self.chacha {
            Cipher::Aes256Gcm
        } else {
            Cipher::ChaCha20Poly1305
        }
    }

    pub fn rate(&self, cipher: Cipher) -> f64 {
        match cipher {
            Cipher::ChaCha20Poly1305 => self.chacha,
            Cipher::Aes256Gcm => self.aes,
        }
    }

    /// How many times faster `a` is than `b`.
    pub fn ratio(&self, a: Cipher, b: Cipher) -> f64 {
        self.rate(a) / self.rate(b).max(1.0)
    }
}

pub fn checks() -> (Vec<Check>, CipherRates) {
    let rates = CipherRates {
        chacha: crypto::seal_rate(Cipher::ChaCha20Poly1305, RACE_SIZE, RACE_TIME),
        aes: crypto::seal_rate(Cipher::Aes256Gcm, RACE_SIZE, RACE_TIME),
    };
    let mut v = vec![cpu(), cipher(&rates)];
    v.extend(socket_buffers());
    v.push(tun_offload());
    v.push(tun_queues());
    v.extend(udp_offload());
    v.push(kernel());
    v.push(realtime());
    (v, rates)
}

/// The crypto-relevant features, each with whether this CPU has it.
fn cpu_features() -> Vec<(&'static str, bool)> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        vec![
            ("aes", has!("aes")),
            ("pclmulqdq", has!("pclmulqdq")),
            ("avx2", has!("avx2")),
            ("vaes", has!("vaes")),
            ("vpclmulqdq", has!("vpclmulqdq")),
            ("avx512f", has!("avx512f")),
        ]
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        vec![
            ("aes", has!("aes")),
            ("pmull", has!("pmull")),
            ("neon", has!("neon")),
        ]
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Vec::new()
    }
}

fn cpu() -> Check {
    let features = cpu_features();
    let list: Vec<String> = features
        .iter()
        .map(|(f, on)| if *on { f.to_string() } else { format!("-{f}") })
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let finding = format!(
        "{} with {cores} core(s); crypto features: {} ('-' = missing)",
        std::env::consts::ARCH,
        if list.is_empty() {
            "none known for this architecture".to_string()
        } else {
            list.join(" ")
        }
    );
    Check::ok(
        "cpu",
        format!(
            "{finding}; {}",
            auto_choice_text(AesGcmInstructions::detect())
        ),
    )
}

/// What `Cipher = auto` chooses on a CPU with `found`, and why.
fn auto_choice_text(found: AesGcmInstructions) -> String {
    let chosen = bench_cipher(found.auto_choice()).name();
    let Some((aes, clmul)) = AesGcmInstructions::NAMES else {
        return format!("Cipher = auto chooses {chosen} (no AES instructions known here)");
    };
    if found.fast_aes_gcm() {
        format!("Cipher = auto chooses {chosen} ({aes} and {clmul} present)")
    } else {
        format!(
            "Cipher = auto chooses {chosen} (AES-256-GCM needs {aes} and {clmul}; missing: {})",
            found.missing().join(", ")
        )
    }
}

fn bench_cipher(cipher: DataCipher) -> Cipher {
    match cipher {
        DataCipher::ChaCha20Poly1305 => Cipher::ChaCha20Poly1305,
        DataCipher::Aes256Gcm => Cipher::Aes256Gcm,
    }
}

fn mbs(bytes_per_sec: f64) -> String {
    format!("{:.0} MB/s", bytes_per_sec / 1e6)
}

fn cipher(rates: &CipherRates) -> Check {
    let aes_hw = AesGcmInstructions::detect().fast_aes_gcm();
    let auto = if aes_hw {
        "Cipher = auto offers AES-256-GCM (AES hardware here) and uses it with peers that offer it too"
    } else {
        "Cipher = auto offers only ChaCha20-Poly1305 (no AES hardware here)"
    };
    let fastest = rates.fastest();
    let other = match fastest {
        Cipher::Aes256Gcm => Cipher::ChaCha20Poly1305,
        Cipher::ChaCha20Poly1305 => Cipher::Aes256Gcm,
    };
    let finding = format!(
        "fastest here {} at {} one core, {} at {} (seal, {RACE_SIZE} bytes, {} ms each); {auto}; {}",
        fastest.name(),
        mbs(rates.rate(fastest)),
        other.name(),
        mbs(rates.rate(other)),
        RACE_TIME.as_millis(),
        crate::aes_choice::text()
    );
    let auto_pick = bench_cipher(AesGcmInstructions::detect().auto_choice());
    if auto_pick != fastest && rates.ratio(fastest, auto_pick) > CLEARLY_FASTER {
        Check::warn(
            "cipher",
            finding,
            format!(
                "set `Cipher = {}` in [Interface]: it seals {:.0} % faster on this CPU than what auto picks",
                fastest.id(),
                (rates.ratio(fastest, auto_pick) - 1.0) * 100.0
            ),
        )
    } else {
        Check::ok("cipher", finding)
    }
}

fn read_sysctl(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn socket_buffers() -> Vec<Check> {
    let root = is_root();
    [("rmem_max", "receive"), ("wmem_max", "send")]
        .into_iter()
        .map(|(key, dir)| {
            let value = read_sysctl(&format!("/proc/sys/net/core/{key}"));
            socket_buffer(key, dir, value, root)
        })
        .collect()
}

/// The check of one `net.core.{r,w}mem_max` value (None: unreadable).
fn socket_buffer(key: &str, dir: &str, value: Option<u64>, root: bool) -> Check {
    let check = format!("socket buffers net.core.{key}");
    let Some(v) = value else {
        return Check::warn(
            check,
            format!("/proc/sys/net/core/{key} is unreadable"),
            format!("cannot tell whether braid gets its {WANTED_MIB} MiB socket buffers"),
        );
    };
    if v >= WANTED_SOCKET_BUFFER {
        Check::ok(
            check,
            format!("{v}: braid's {WANTED_MIB} MiB {dir} buffers fit"),
        )
    } else if root {
        Check::ok(
            check,
            format!(
                "{v}, below braid's {WANTED_MIB} MiB, but braid run as root (CAP_NET_ADMIN) forces its {dir} buffers past it"
            ),
        )
    } else {
        Check::warn(
            check,
            format!(
                "{v}: braid asks for {WANTED_MIB} MiB {dir} buffers and gets less without root (CAP_NET_ADMIN lets it force them)"
            ),
            format!(
                "raise it with `sysctl -w net.core.{key}={WANTED_SOCKET_BUFFER}` to avoid drops at high rates"
            ),
        )
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `RealtimePriority =` could be used by a daemon started like
/// this one: tried in a throwaway thread, which then ends (nothing
/// inherits it). Never a warning: the key is off by default.
fn realtime() -> Check {
    let probe = std::thread::spawn(|| crate::daemon::realtime::enter_at_start(1)).join();
    let throttle = read_sysctl("/proc/sys/kernel/sched_rt_runtime_us")
        .map(|us| {
            format!(
                "; the kernel's real-time throttle leaves normal tasks {} % of each second",
                100 - (us / 10_000).min(100)
            )
        })
        .unwrap_or_default();
    let finding = match probe {
        // The value: whether CAP_SYS_NICE must be kept after the drop.
        Ok(Ok(false)) => format!("RealtimePriority = N can be used (the real-time class is allowed; RLIMIT_RTPRIO can be raised){throttle}"),
        Ok(Ok(true)) => format!("RealtimePriority = N can be used (CAP_SYS_NICE: braid keeps it after the privilege drop for the data plane's threads){throttle}"),
        Ok(Err(e)) => format!("cannot be used as braid runs now (probed at priority 1): {e}"),
        Err(_) => "RealtimePriority: the probe thread panicked".to_string(),
    };
    Check::ok("realtime", finding)
}

fn tun_offload() -> Check {
    let name = format!("bdoc{}", std::process::id());
    match Tun::create_with(&name, Offload::Auto) {
        Ok(tun) if tun.offload_enabled() => Check::ok(
            "tun offload",
            "the kernel accepts TUN offload (virtio-net header, TSO, checksum): many packets cross the TUN per read and write",
        ),
        Ok(_) => Check::warn(
            "tun offload",
            "the kernel refused TUN offload (TUNSETOFFLOAD): braid reads and writes the TUN one packet at a time",
            "use a kernel with TUN TSO/checksum offload (any recent Linux) for several times the TCP throughput",
        ),
        Err(e) => Check::warn(
            "tun offload",
            format!("cannot probe with a throwaway TUN: {e}"),
            "run `braid doctor` as root with /dev/net/tun present to check TUN offload",
        ),
    }
}

/// Whether `Queues = N` can be used: a throwaway TUN with two queues.
fn tun_queues() -> Check {
    let name = format!("bdoq{}", std::process::id());
    let queues = Tun::create_queues(&name, Offload::Auto, 2);
    // Queues = N also opens N sockets on ListenPort.
    let sockets = UdpSocket::bind_group(0, 2);
    match queues.and(sockets) {
        Ok(_) => Check::ok(
            "tun queues",
            "the kernel opens multi-queue TUNs and SO_REUSEPORT socket groups: Queues = N can be used (a thread per queue that sends its flows and receives from its own socket; worth it with more than 2 cores and many flows or peers)",
        ),
        Err(e) => Check::warn(
            "tun queues",
            format!("a TUN with 2 queues, or 2 UDP sockets on one port, could not be opened: {e}"),
            "leave Queues at 1 here (a kernel with IFF_MULTI_QUEUE and SO_REUSEPORT, any since 3.9, and root are needed)",
        ),
    }
}

fn udp_offload() -> Vec<Check> {
    let socket = match UdpSocket::bind(0) {
        Ok(s) => s,
        Err(e) => {
            return vec![Check::warn(
                "udp gso/gro",
                format!("cannot open a UDP socket to probe: {e}"),
                "check that UDP sockets can be created here",
            )]
        }
    };
    let gso = if socket.gso_enabled() {
        Check::ok(
            "udp gso",
            "UDP segmentation offload works: one sendmmsg entry carries many datagrams",
        )
    } else {
        Check::warn(
            "udp gso",
            "the kernel has no UDP GSO (UDP_SEGMENT): every datagram is its own send",
            "a kernel of 4.18 or later sends bursts with far fewer syscalls and stack traversals",
        )
    };
    let gro = if socket.gro_enabled() {
        Check::ok(
            "udp gro",
            "UDP receive offload works: the kernel hands over coalesced datagrams",
        )
    } else {
        Check::warn(
            "udp gro",
            "the kernel has no UDP GRO: every datagram is received on its own",
            "a kernel of 5.0 or later receives bursts with far fewer syscalls",
        )
    };
    vec![gso, gro]
}

/// `6.1.0-18-amd64` → (6, 1).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn kernel() -> Check {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    match kernel_version(&release) {
        Some(v) if v >= (5, 0) => Check::ok("kernel", format!("Linux {release}")),
        Some(_) => Check::warn(
            "kernel",
            format!("Linux {release}, older than 5.0"),
            "upgrade: UDP GRO arrived in 5.0 and TUN/UDP offload fixes since; braid is fastest on a current kernel",
        ),
        None => Check::warn(
            "kernel",
            format!("cannot read the kernel version ({release:?})"),
            "check /proc/sys/kernel/osrelease",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::check::Level;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("6.18.0"), Some((6, 18)));
        assert_eq!(kernel_version("4.19"), Some((4, 19)));
        assert_eq!(kernel_version("x"), None);
    }

    #[test]
    fn small_socket_buffer_warns_without_root() {
        let c = socket_buffer("rmem_max", "receive", Some(212992), false);
        assert_eq!(c.level, Level::Warn);
        assert!(c.finding.starts_with("212992: braid asks for 8 MiB"));
        assert!(c
            .advice
            .unwrap()
            .contains("sysctl -w net.core.rmem_max=8388608"));
        let c = socket_buffer("rmem_max", "receive", Some(212992), true);
        assert_eq!(c.level, Level::Ok);
        let c = socket_buffer("wmem_max", "send", Some(8 << 20), false);
        assert_eq!(c.level, Level::Ok);
    }

    #[test]
    fn the_cpu_line_names_the_choice_and_what_is_missing() {
        let cpu = |aes, carryless_multiply| AesGcmInstructions {
            aes,
            carryless_multiply,
        };
        let Some((aes, clmul)) = AesGcmInstructions::NAMES else {
            return;
        };
        assert_eq!(
            auto_choice_text(cpu(true, true)),
            format!("Cipher = auto chooses AES-256-GCM ({aes} and {clmul} present)")
        );
        assert_eq!(
            auto_choice_text(cpu(true, false)),
            format!(
                "Cipher = auto chooses ChaCha20-Poly1305 (AES-256-GCM needs {aes} and {clmul}; missing: {clmul})"
            )
        );
        assert!(auto_choice_text(cpu(false, false)).ends_with(&format!("missing: {aes}, {clmul})")));
    }

    #[test]
    fn fastest_cipher_and_ratio() {
        let r = CipherRates {
            chacha: 1e9,
            aes: 3e9,
        };
        assert_eq!(r.fastest(), Cipher::Aes256Gcm);
        assert!((r.ratio(Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305) - 3.0).abs() < 1e-9);
    }
}
