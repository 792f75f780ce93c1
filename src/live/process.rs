//! Whether a pid names a process with user memory to look into, checked before anything touches it: the one
//! place the zombie and kernel-thread refusals are written, for every command that takes `--pid`.

use super::Error;
use crate::model::status::{self, Status};
use crate::os::{Tid, procfs};

/// Which ids a command takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ids {
    /// Only a thread-group leader: a thread's id is refused, naming its process.
    Process,
    /// Any task: a thread's `/proc/TID` shows its whole process's memory.
    Task,
}

/// The status of `pid`, or why it cannot be looked into: no such task, a thread where a process is wanted, a
/// zombie (it has exited and has no memory left), a kernel thread (it has none).
pub fn check_process(pid: Tid, ids: Ids) -> Result<Status, Error> {
    let text = procfs::read_status(pid).map_err(|_| Error::NoProcess { pid })?;
    let st = status::parse_status(&text);
    if ids == Ids::Process && st.tgid != pid {
        return Err(Error::Thread { pid, tgid: st.tgid, name: st.name });
    }
    if st.state == 'Z' || st.state == 'X' {
        return Err(Error::Zombie { pid, name: st.name });
    }
    if !st.has_vm {
        return Err(Error::KernelThread { pid, name: st.name });
    }
    Ok(st)
}
