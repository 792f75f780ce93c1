//! What a trace plants and watches, built by `app` (from `--syscall`, `--leaks`) or by `probe::run` (from a
//! script) and handed to the tracer.

use crate::live::tracer::SiteSpec;
use crate::model::watch::Watched;
use std::collections::HashMap;
use std::sync::Arc;

/// The `syscall()` wrapper of the libc mapped by a process.
#[derive(Clone)]
pub struct Wrapper {
    pub addr: u64,
    /// The file's code bytes at `addr`.
    pub code: Vec<u8>,
}

/// Where to stop and what for.
pub struct Plan {
    pub specs: Vec<SiteSpec>,
    /// `--fast`: the wanted syscall numbers on this wrapper.
    pub fast: Option<(Vec<u64>, Wrapper)>,
    /// With `fast`: the numbers whose calls need no stack, written to the trampoline's ring without a stop.
    pub ring: Vec<u64>,
    /// With `fast`: libc functions patched too where they have the shape (their int3 sites in `specs` stay for
    /// those that cannot be).
    pub fast_functions: Vec<crate::live::tracer::FastFunction>,
    /// Says what was planted, in the "attached" line.
    pub what: String,
    /// A probe's own `stack(N)` limit, by probe name.
    pub depths: HashMap<Arc<str>, usize>,
    /// The paths to a mapping that are watched (`--leaks`), for the report.
    pub watched: Watched,
    /// `--malloc-every` when the allocation functions are among `fast_functions` (0: `--malloc` not asked).
    pub malloc_every: u64,
}
