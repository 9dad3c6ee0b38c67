#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockstep_fuzz::column_group(data));
