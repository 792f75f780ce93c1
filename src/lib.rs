//! syscatch: find who makes a process's memory grow outside the malloc heap.
//!
//! Layers, each a folder; arrows point down this list, never up:
//! - `app`: the pipeline of each subcommand written out top to bottom, sinks, exit codes (uses everything);
//! - `probe`: the probe language, compiled to `live`'s plan; `hooks`: GOT and inline hook forensics (pure
//!   parsing, and its one module of live reads);
//! - `live`: one live target: the tracer and its plan, module resolution, stack snapshots, CPython's frames read
//!   from a stopped thread (uses `os`);
//! - `report`: every renderer, over plain data; `analysis`: unwind, symbolize, correlate, leaks, memory classes;
//!   `python`: CPython frame layouts, line tables and the frame walk over a memory trait;
//! - `x86`: instruction decode and emulation, trampoline assembly;
//! - `os`: the only code with syscalls, `/proc` I/O and `unsafe`;
//! - `model`: plain data and pure parsers of text and bytes.
//!
//! Only `os`, `live` and `hooks::read` touch the target; everything from unwinding on works on
//! captured data, live or recorded (`--record`, `syscatch report`). The picture and the path of one event:
//! docs/architecture.md.

#![deny(unsafe_code)]

pub(crate) mod analysis;
pub(crate) mod app;
pub(crate) mod cli;
pub(crate) mod hooks;
pub(crate) mod live;
pub(crate) mod model;
#[allow(unsafe_code)]
pub(crate) mod os;
pub(crate) mod probe;
pub(crate) mod python;
pub(crate) mod report;
pub(crate) mod x86;

/// The `syscatch` command; `main.rs` only calls this.
pub use app::main;

/// What the integration tests and the fuzz crate reach inside: the pure parsers and the unwinder they drive
/// directly. Not an API.
#[doc(hidden)]
pub mod testing {
    pub mod analysis {
        pub use crate::analysis::{correlate, modules, symbolize, unwind};
    }
    pub mod live {
        pub use crate::live::{modules, pystate, resolve, snapshot};
    }
    pub mod model {
        pub use crate::model::{maps, modules, regs, smaps, status};
    }
    pub mod probe {
        pub use crate::probe::{parse_str, print};
    }
    pub mod python {
        pub use crate::live::python as live;
        pub use crate::python::{Memory, layout, lines, walk};
    }
    pub mod x86 {
        pub use crate::x86::{breakpoints, gate};
    }
}
