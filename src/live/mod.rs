//! The live target: the tracer's event loop and its plan, resolving probe sites in the mapped modules, reading
//! a live process's modules for its stacks, and one-shot stack snapshots. Talks to the kernel only through
//! `os`; uses `model`, `x86` and `analysis`.

pub mod error;
pub mod facts;
pub mod guardian;
pub mod mappaths;
pub mod memory;
pub mod modules;
pub mod plan;
pub mod process;
pub mod resolve;
pub mod snapshot;
pub mod tracer;

pub use error::Error;
