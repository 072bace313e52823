#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slidegate::fuzz_targets::request_body(data));
