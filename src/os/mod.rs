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

/// Whether user code may run `rdfsbase` and its kin (the kernel enabled FSGSBASE: AT_HWCAP2 bit 1, Linux 5.9+ on
/// a CPU that has it). The same for every process on the machine.
pub fn user_fsgsbase() -> bool {
    const HWCAP2_FSGSBASE: u64 = 1 << 1;
    // SAFETY: getauxval reads the process's auxiliary vector; it has no preconditions and returns 0 if absent.
    let hwcap2 = unsafe { libc::getauxval(libc::AT_HWCAP2) };
    hwcap2 & HWCAP2_FSGSBASE != 0
}
