//! Fuzz target: see `portcullis_fuzz::decision`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| portcullis_fuzz::decision(data));
