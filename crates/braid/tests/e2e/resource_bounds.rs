//! What a local file or a UAPI client hands the daemon is read only up to a
//! named limit: ten times the limit is offered and refused.

use braid::config::{Config, MAX_CONFIG_BYTES};
use braid::uapi::{read_request, Errno, MAX_LINE_LEN, MAX_REQUEST_LEN};
use std::io::{BufReader, Read};

/// "set=1" and then lines just short of the line limit, forever: only the
/// request limit ends it (long lines, so that reading hundreds of
/// megabytes takes a moment, not a minute).
struct EndlessRequest {
    header_sent: bool,
    produced: usize,
}

impl Read for EndlessRequest {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let long_line = {
            let mut l = vec![b'x'; MAX_LINE_LEN - 1];
            l.push(b'\n');
            l
        };
        let line: &[u8] = if self.header_sent {
            &long_line
        } else {
            self.header_sent = true;
            b"set=1\n"
        };
        let n = line.len().min(buf.len());
        buf[..n].copy_from_slice(&line[..n]);
        self.produced += n;
        Ok(n)
    }
}

#[test]
fn a_uapi_request_is_read_only_up_to_its_limit() {
    let mut source = EndlessRequest {
        header_sent: false,
        produced: 0,
    };
    let err = {
        let mut reader = BufReader::with_capacity(MAX_LINE_LEN, &mut source);
        read_request(&mut reader).expect_err("an endless request is refused")
    };
    assert_eq!(err.errno, Errno::EPROTO);
    assert!(err.fatal, "the connection is closed after it");
    assert!(
        source.produced <= MAX_REQUEST_LEN + 2 * MAX_LINE_LEN,
        "read {} bytes of a request limited to {MAX_REQUEST_LEN}",
        source.produced
    );
}

#[test]
fn an_oversized_config_file_is_refused() {
    let dir = std::env::temp_dir().join(format!("braid-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big0.conf");
    let mut text = String::from("[Interface]\nPrivateKey = x\n");
    let comment = format!("# {}\n", "-".repeat(1000));
    while (text.len() as u64) < 10 * MAX_CONFIG_BYTES {
        text.push_str(&comment);
    }
    std::fs::write(&path, &text).unwrap();
    // Private, so the size limit is what refuses it, not the mode check.
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let err = Config::load(&path).expect_err("a 10× oversized file is refused");
    let _ = std::fs::remove_dir_all(&dir);
    let message = err.to_string();
    assert!(
        message.contains(&format!("larger than {MAX_CONFIG_BYTES} bytes")),
        "{message}"
    );
}
