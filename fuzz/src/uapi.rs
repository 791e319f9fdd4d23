//! The userspace API request parser never panics, in both forms: a whole
//! request in memory and a stream of requests read one after another.

use braid::uapi::{parse_request, read_request};
use std::io::Cursor;

pub fn run(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_request(text);
    }
    let mut stream = Cursor::new(data);
    // Bounded: each request consumes at least one line of the input.
    for _ in 0..64 {
        match read_request(&mut stream) {
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => break,
        }
    }
}
