//! ptrace for a one-shot look at one thread: seized without options, so nothing it does while seized (clone,
//! fork, exec) makes the kernel attach us to another task.

use super::Tid;
use nix::errno::Errno;

/// PTRACE_SEIZE with no options (contrast `ptrace::seize`, which follows clones for a whole trace).
pub fn seize_plain(tid: Tid) -> Result<(), Errno> {
    // SAFETY: PTRACE_SEIZE takes integer addr and data (0: no options) and reads nothing from our memory.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r == -1 { Err(Errno::last()) } else { Ok(()) }
}
