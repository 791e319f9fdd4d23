//! The config file parser never panics, and what it accepts it accepts
//! again when the same text is parsed twice (it is a pure function).

use braid::config::Config;

pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let first = Config::parse(&text, "fuzz.conf");
    let second = Config::parse(&text, "fuzz.conf");
    assert_eq!(
        first.is_ok(),
        second.is_ok(),
        "parsing is not deterministic"
    );
    if let Err(e) = first {
        // The message must render (it names the file and line).
        let _ = e.to_string();
    }
}
