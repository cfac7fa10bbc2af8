//! Fuzz target: see `portcullis_fuzz::field_path`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| portcullis_fuzz::field_path(data));
