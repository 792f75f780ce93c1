//! Faults the tests inject, named by `SYSCATCH_TEST_FAULT`: `tracer-panic` (the tracer, at the first matching
//! hit, with that thread stopped just past the int3) and `analysis-panic` (`app::analyze`, at the first event the
//! analysis thread receives). Here, below both callers, so no layer under `app` asks `app`. Only debug builds
//! read the variable: a release build has no way to make itself fail.

/// Whether the test running syscatch asked for fault `name`.
pub fn injected(name: &str) -> bool {
    cfg!(debug_assertions) && std::env::var("SYSCATCH_TEST_FAULT").is_ok_and(|v| v == name)
}
