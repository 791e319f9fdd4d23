//! braid's `set=braid` request: a whole config file for a running
//! interface to become (`braid syncconf`, `systemctl reload braid@NAME`).
//! The daemon parses it with the same parser as `braid up` and applies
//! what changed; `set=1` cannot carry braid's keys.
//!
//! ```text
//! set=braid
//! source=wg0.conf            the file's name, for messages
//! config=<base64>            the file, in chunks of at most 3072 characters
//! config=<base64>
//!                            (blank line)
//! ```
//!
//! The reply is `note=` lines (what changed, what waits for a restart), or
//! one `error=` line, then `errno=N` and a blank line. The file holds the
//! private key: the socket is root's alone, and the text is zeroized when
//! dropped and never shown by `Debug`.

use super::{invalid, Errno, UapiError};
use base64::Engine as _;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
use zeroize::Zeroizing;

/// Characters of base64 per `config=` line (a multiple of 4, so each line
/// decodes on its own, and well within `MAX_LINE_LEN`).
const CHUNK: usize = 3072;

/// How long `braid syncconf` waits for the daemon (it resolves host names
/// and may change many peers).
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// A config file's text as a request carries it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ConfigText {
    /// The file's name, for messages (`wg0.conf:7: key ...`).
    pub source: String,
    pub text: Zeroizing<String>,
}

impl std::fmt::Debug for ConfigText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfigText({}, {} bytes)", self.source, self.text.len())
    }
}

/// Collects the body of a `set=braid` request.
#[derive(Default)]
pub(super) struct SyncParser {
    source: Option<String>,
    bytes: Zeroizing<Vec<u8>>,
}

impl SyncParser {
    pub(super) fn line(&mut self, line: &str) -> Result<(), UapiError> {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| invalid("line is not key=value"))?;
        match key {
            "source" if self.source.is_none() => self.source = Some(value.to_string()),
            "config" => {
                if value.len() > CHUNK {
                    return Err(invalid("config= chunk longer than 3072 characters"));
                }
                let chunk = Zeroizing::new(
                    base64::engine::general_purpose::STANDARD
                        .decode(value)
                        .map_err(|_| invalid("config= chunk is not base64"))?,
                );
                self.bytes.extend_from_slice(&chunk);
            }
            _ => return Err(invalid(format!("invalid set=braid key {key:?}"))),
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<ConfigText, UapiError> {
        let source = self.source.take().unwrap_or_else(|| "config".to_string());
        let bytes = std::mem::take(&mut *self.bytes);
        let text = String::from_utf8(bytes).map_err(|e| {
            // The failed conversion hands the bytes back: wipe them too.
            drop(Zeroizing::new(e.into_bytes()));
            invalid("the config is not valid UTF-8")
        })?;
        Ok(ConfigText {
            source,
            text: Zeroizing::new(text),
        })
    }
}

/// The request text for `config`; zeroized when dropped.
pub fn format_request(config: &ConfigText) -> Zeroizing<String> {
    let encoded =
        Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(config.text.as_bytes()));
    let mut out = Zeroizing::new(String::with_capacity(
        encoded.len() + encoded.len() / CHUNK * 8 + 64,
    ));
    out.push_str("set=braid\n");
    out.push_str(&format!("source={}\n", one_line(&config.source)));
    for chunk in encoded.as_bytes().chunks(CHUNK) {
        out.push_str("config=");
        // Base64 is ASCII: every chunk boundary is a char boundary.
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push('\n');
    out
}

/// A message as one reply line (a newline would end it early).
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// The reply: notes or an error.
pub fn format_reply(outcome: &Result<Vec<String>, String>) -> String {
    let mut out = String::new();
    match outcome {
        Ok(notes) => {
            for n in notes {
                out.push_str(&format!("note={}\n", one_line(n)));
            }
            out.push_str("errno=0\n\n");
        }
        Err(e) => out.push_str(&format!(
            "error={}\nerrno=-{}\n\n",
            one_line(e),
            Errno::EINVAL.0
        )),
    }
    out
}

/// Decodes a reply: the notes, or the daemon's error.
pub fn parse_reply(reply: &str) -> io::Result<Result<Vec<String>, String>> {
    let errno = super::reply_errno(reply).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the daemon's reply has no errno",
        )
    })?;
    if errno == 0 {
        return Ok(Ok(reply
            .lines()
            .filter_map(|l| l.strip_prefix("note="))
            .map(str::to_string)
            .collect()));
    }
    let error = reply
        .lines()
        .find_map(|l| l.strip_prefix("error="))
        .map(str::to_string)
        // An older daemon answers only with an errno.
        .unwrap_or_else(|| {
            format!(
                "the daemon refused the request ({})",
                io::Error::from_raw_os_error(
                    i32::try_from(errno.unsigned_abs()).unwrap_or(libc::EINVAL)
                )
            )
        });
    Ok(Err(error))
}

/// Sends `config` to the daemon behind `socket` and returns its answer.
pub fn sync_config(
    socket: impl AsRef<Path>,
    config: &ConfigText,
) -> io::Result<Result<Vec<String>, String>> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(SYNC_TIMEOUT))?;
    stream.set_write_timeout(Some(SYNC_TIMEOUT))?;
    stream.write_all(format_request(config).as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    stream.take(1 << 20).read_to_string(&mut reply)?;
    parse_reply(&reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uapi::{parse_request, Request};

    fn config(text: &str) -> ConfigText {
        ConfigText {
            source: "wg0.conf".into(),
            text: Zeroizing::new(text.to_string()),
        }
    }

    #[test]
    fn a_config_round_trips_in_chunks() {
        // Long enough for several chunks, with every byte that could upset
        // a line protocol.
        let mut text = String::from("[Interface]\n# = \r\n\u{e9}\n");
        while text.len() < 3 * CHUNK {
            text.push_str("AllowedIPs = 198.19.0.0/24, 2001:db8::/64\n");
        }
        let wire = format_request(&config(&text));
        assert!(wire.lines().all(|l| l.len() <= crate::uapi::MAX_LINE_LEN));
        assert!(wire.lines().filter(|l| l.starts_with("config=")).count() >= 4);
        match parse_request(&wire).unwrap() {
            Request::SetBraid(got) => assert_eq!(got, config(&text)),
            other => panic!("{other:?}"),
        }
        // An empty file is a request too (the daemon's parser refuses it).
        match parse_request("set=braid\nsource=x.conf\n\n").unwrap() {
            Request::SetBraid(got) => {
                assert_eq!((got.source.as_str(), got.text.len()), ("x.conf", 0))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_requests_are_refused_whole() {
        for (request, why) in [
            ("set=braid\nconfig=!!!!\n\n", "not base64"),
            ("set=braid\nconfig=/w==\n\n", "not valid UTF-8"),
            ("set=braid\nsource=a\nsource=b\n\n", "invalid set=braid key"),
            ("set=braid\nprivate_key=00\n\n", "invalid set=braid key"),
        ] {
            let e = parse_request(request).unwrap_err();
            assert!(e.message.contains(why), "{request:?}: {e}");
            assert_eq!(e.operation, Some(crate::uapi::Operation::SetBraid));
        }
    }

    #[test]
    fn debug_shows_no_text() {
        let c = config("PrivateKey = c2VjcmV0");
        assert_eq!(format!("{c:?}"), "ConfigText(wg0.conf, 21 bytes)");
    }

    #[test]
    fn replies_carry_notes_or_the_error() {
        let notes = vec!["peers: 1 added".to_string(), "two\nlines".to_string()];
        let reply = format_reply(&Ok(notes));
        assert_eq!(
            parse_reply(&reply).unwrap(),
            Ok(vec!["peers: 1 added".to_string(), "two lines".to_string()])
        );
        let reply = format_reply(&Err("wg0.conf:3: key 'Mode': unknown mode".into()));
        assert_eq!(reply_line_errno(&reply), -22);
        assert_eq!(
            parse_reply(&reply).unwrap(),
            Err("wg0.conf:3: key 'Mode': unknown mode".to_string())
        );
        // A daemon that does not know set=braid answers with an errno only.
        let old = parse_reply("errno=-71\n\n").unwrap().unwrap_err();
        assert!(old.contains("refused"), "{old}");
        assert!(parse_reply("").is_err());
    }

    fn reply_line_errno(reply: &str) -> i64 {
        crate::uapi::reply_errno(reply).unwrap()
    }
}
