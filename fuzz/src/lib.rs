//! The bodies of the fuzz targets, shared with the corpus replay test of the main crate
//! (`tests/it/fuzz_replay.rs` includes `targets.rs` by path, so `cargo test` replays the corpus without a fuzzer).

pub mod targets;
