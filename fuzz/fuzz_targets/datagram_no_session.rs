#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| braid_fuzz::datagram_no_session::run(data));
