#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| braid_fuzz::replay_window::run(data));
