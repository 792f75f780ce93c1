//! The only part of syscatch that talks to the kernel: ptrace, remote memory, `/proc` reads, signals.
//! Everything outside this module works on the plain data these functions return.

pub mod guard;
pub mod mem;
pub mod pagemap;
pub mod procfs;
pub mod ptrace;
pub mod regs;
pub mod sched;
pub mod signals;
pub mod spawn;
pub mod task;

/// A thread id (or process id: the id of a thread group's leader).
pub type Tid = i32;
