//! Fuzz target: see `portcullis_fuzz::dsl_rule`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| portcullis_fuzz::dsl_rule(data));
