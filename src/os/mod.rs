//! The only part of syscatch that talks to the kernel: ptrace, remote memory, `/proc` reads, signals.
//! Everything outside this module works on the plain data these functions return.

pub mod faults;
pub mod filemap;
pub mod guard;
pub mod mem;
pub mod pagemap;
pub mod procfs;
pub mod ptrace;
pub mod sched;
pub mod signals;
pub mod spawn;
pub mod task;

pub use crate::model::Tid;
