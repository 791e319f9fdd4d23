#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| braid_fuzz::datagram_with_session::run(data));
