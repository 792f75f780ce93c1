#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| syscatch_fuzz::targets::python(data));
