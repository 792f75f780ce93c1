//! The live target: the checks before touching a pid, the tracer's event loop and its plan, resolving probe
//! sites in the mapped modules, reading a live process's modules for its stacks, its CPython's frames, and
//! one-shot stack snapshots. Talks to the kernel only through `os`; uses `model`, `x86`, `python` and
//! `analysis`.

pub mod error;
pub mod facts;
pub mod guardian;
pub mod heap;
pub mod limits;
pub mod mappaths;
pub mod memory;
pub mod modules;
pub mod plan;
pub mod process;
pub mod pystate;
pub mod python;
pub mod resolve;
pub mod sampling;
pub mod selection;
pub mod sigstack;
pub mod snapshot;
pub mod tracer;

pub use error::Error;
