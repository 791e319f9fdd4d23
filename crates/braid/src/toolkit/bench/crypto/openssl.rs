//! The anchor: `openssl speed -mr -evp` for the same cipher and size, bounded
//! in time, and its machine-readable output.

use super::aead::Cipher;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on one `openssl speed` run (it is asked for 1 s).
const OPENSSL_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs `openssl speed -mr -evp` for one cipher and size, bounded in time;
/// bytes per second, or why not.
pub(super) fn openssl_speed(cipher: Cipher, size: usize) -> Result<f64, String> {
    let mut child = Command::new("openssl")
        .args([
            "speed",
            "-mr",
            "-evp",
            cipher.openssl_name(),
            "-seconds",
            "1",
            "-bytes",
        ])
        .arg(size.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("openssl: {e}"))?;
    let deadline = Instant::now() + OPENSSL_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "openssl speed took over {} s",
                    OPENSSL_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("openssl: {e}")),
        }
    }
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    parse_openssl(&out, size).ok_or_else(|| "no result in openssl's output".to_string())
}

/// Bytes per second from `openssl speed -mr` output for one size: the last
/// field of the `+F` line, else `+R:count:name:seconds` × size.
fn parse_openssl(out: &str, size: usize) -> Option<f64> {
    let positive = |v: f64| (v.is_finite() && v > 0.0).then_some(v);
    if let Some(v) = out
        .lines()
        .find(|l| l.starts_with("+F:"))
        .and_then(|l| l.rsplit(':').next()?.trim().parse::<f64>().ok())
    {
        return positive(v);
    }
    let r = out.lines().find(|l| l.starts_with("+R:"))?;
    let f: Vec<&str> = r.split(':').collect();
    let count: f64 = f.get(1)?.parse().ok()?;
    let secs: f64 = f.last()?.parse().ok()?;
    positive(count * size as f64 / secs)
}

pub(super) fn openssl_version() -> Option<String> {
    let out = Command::new("openssl")
        .arg("version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_openssl_machine_readable() {
        let out = "+DT:AES-256-GCM:1:1420\n+R:935933:AES-256-GCM:0.990000\n+H:1420\n+F:25:AES-256-GCM:1342449353.54\n";
        assert_eq!(parse_openssl(out, 1420), Some(1342449353.54));
        let only_r = "+R:1000:ChaCha20-Poly1305:0.5\n";
        assert_eq!(parse_openssl(only_r, 64), Some(128000.0));
        assert_eq!(parse_openssl("garbage", 64), None);
    }
}
