//! The only part of syscatch that talks to the kernel: ptrace, remote memory, `/proc` reads, signals.
//! Everything outside this module works on the plain data these functions return.

pub mod faults;
pub mod filemap;
pub mod guard;
pub mod mem;
pub mod pagemap;
pub mod perf;
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

/// Gives large blocks of syscatch's own memory back to the kernel when they are freed. glibc serves a block above
/// its mmap threshold (128 KiB at first) with a mapping of its own; but each time it frees one, it raises the
/// threshold to that block's size (up to 32 MiB) and its trim threshold to twice that. Once syscatch has freed
/// one reading of a process's 30,000 mappings (5 MB of regions), every block of a few MB after it (each reading of
/// maps while arming, the smaps at the end, DWARF sections) is carved from the heaps, which keep the memory when
/// it is freed. A fixed threshold turns the raising off (measured there: `--leaks --for 1s` peaked at 58.7 MiB,
/// 45.5 MiB with it, for about twice the page faults, 17,900 against 33,500, within the noise of its wall time).
/// At 1 MiB, not 128 KiB: what is smaller (a stack window, most of a sample's vectors) stays in the heaps, without
/// a mapping and an unmapping of syscatch's own each time (both take its mmap_lock, which the tracer's page faults
/// wait for).
pub fn return_large_blocks() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a parameter of glibc's allocator (under the allocator's own lock).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
