//! Starting a command under the tracer (`syscatch -- CMD`): fork, stop, seize, exec, then run to the program's
//! entry point, by which time the dynamic linker has mapped every library the program links against.

use super::Tid;
use super::mem::ProcMem;
use super::ptrace::{self, Stop};
use nix::errno::Errno;
use std::ffi::CString;
use std::io;

/// Why a command could not be started under the tracer, or run to its entry point.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Fork(io::Error),
    #[error("the child did not start")]
    NotStarted,
    #[error("cannot trace the child: {}", .0.desc())]
    Seize(Errno),
    #[error("the command exited with status {0} before running")]
    ExitedBeforeRunning(i32),
    #[error("the command exited with status {0}")]
    Exited(i32),
    #[error("the command was killed by signal {0}")]
    Killed(i32),
    /// A ptrace request or a wait on the child failed.
    #[error("{}", .0.desc())]
    Ptrace(Errno),
    #[error("no entry point in the auxiliary vector")]
    NoEntryPoint,
    /// Reading or writing the byte at its entry point.
    #[error("{0}")]
    Memory(io::Error),
    /// A stop request came first; the child was let go.
    #[error("interrupted before the command reached its entry point; process {pid} runs on, untraced")]
    Interrupted { pid: Tid },
}

/// Forks a child that stops itself, seizes it, lets it exec `argv`, and returns once the exec is done.
pub fn fork_stopped(argv: &[CString]) -> Result<Tid, Error> {
    // SAFETY: syscatch is single-threaded here (the analysis thread starts later); the child only calls
    // async-signal-safe functions (raise, execvp, write, _exit) before exec.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::Fork(io::Error::last_os_error()));
    }
    if pid == 0 {
        let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        // SAFETY: `ptrs` is a NULL-terminated array of pointers into `argv`, alive until exec or _exit.
        unsafe {
            libc::raise(libc::SIGSTOP);
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let msg = b"syscatch: cannot execute the command (not found or not executable)\n";
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    let mut status = 0;
    // SAFETY: plain waitpid on our own child with a valid out-pointer. syscatch's timer may interrupt it.
    while unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) } == -1
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    if !libc::WIFSTOPPED(status) {
        return Err(Error::NotStarted);
    }
    ptrace::seize(pid).map_err(Error::Seize)?;
    // SAFETY: sending SIGCONT to our own stopped child.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    loop {
        match ptrace::wait_for(pid, false) {
            Ok(Some((_, Stop::Exec))) => return Ok(pid),
            Ok(Some((_, Stop::Exited(code)))) => {
                return Err(Error::ExitedBeforeRunning(code));
            }
            Ok(Some((_, Stop::Killed(sig)))) => return Err(Error::Killed(sig)),
            Ok(Some((_, Stop::Signal(sig)))) => {
                let _ = ptrace::cont(pid, if sig == libc::SIGSTOP { 0 } else { sig });
            }
            Ok(Some(_)) => {
                let _ = ptrace::cont(pid, 0);
            }
            Ok(None) => {}
            Err(e) => return Err(Error::Ptrace(e)),
        }
    }
}

/// The program's entry point from its auxiliary vector.
fn entry_point(pid: Tid) -> Option<u64> {
    let auxv = super::procfs::read_auxv(pid).ok()?;
    auxv.chunks_exact(16).find_map(|c| {
        let key = u64::from_le_bytes(c[..8].try_into().ok()?);
        let val = u64::from_le_bytes(c[8..].try_into().ok()?);
        (key == libc::AT_ENTRY).then_some(val)
    })
}

/// Runs the freshly exec'd, single-threaded child to its entry point and leaves it stopped there. Before that
/// point the child runs the dynamic linker and its libraries' constructors, which may take any time: a stop
/// request (SIGINT, SIGTERM, SIGHUP to syscatch) ends the wait, and the child is detached at its next stop with
/// the signal it stopped for. On every way out but success the entry point's byte is put back first, so the
/// command runs on unharmed.
pub fn run_to_entry(pid: Tid) -> Result<(), Error> {
    let entry = entry_point(pid).ok_or(Error::NoEntryPoint)?;
    let mem = ProcMem::open(pid).map_err(Error::Memory)?;
    let mut orig = [0u8; 1];
    mem.read_exact(entry, &mut orig).map_err(Error::Memory)?;
    mem.write_all(entry, &[0xcc]).map_err(Error::Memory)?;
    let restore = || mem.write_all(entry, &orig).map_err(Error::Memory);
    ptrace::cont(pid, 0).map_err(Error::Ptrace)?;
    let mut interrupted = false;
    loop {
        let stop = match ptrace::wait_for(pid, false) {
            Ok(Some((_, stop))) => stop,
            Ok(None) => {
                if !interrupted && super::signals::stop_requested() != 0 {
                    interrupted = true;
                    let _ = ptrace::interrupt(pid);
                }
                continue;
            }
            Err(e) => {
                let _ = restore();
                return Err(Error::Ptrace(e));
            }
        };
        // The signal the child stopped for, to pass on; `None` once it is gone.
        let sig = match stop {
            Stop::Exited(code) => return Err(Error::Exited(code)),
            Stop::Killed(sig) => return Err(Error::Killed(sig)),
            Stop::Signal(libc::SIGTRAP) => {
                let mut regs = ptrace::get_regs(pid).map_err(Error::Ptrace)?;
                if regs.ip() == entry + 1 {
                    restore()?;
                    regs.set_ip(entry);
                    ptrace::set_regs(pid, &regs).map_err(Error::Ptrace)?;
                    if !interrupted {
                        return Ok(());
                    }
                    0
                } else {
                    libc::SIGTRAP
                }
            }
            Stop::Signal(sig) => sig,
            _ => 0,
        };
        if interrupted {
            restore()?;
            let _ = ptrace::detach(pid, sig);
            return Err(Error::Interrupted { pid });
        }
        let _ = ptrace::cont(pid, sig);
    }
}

/// Waits for our (no longer traced) child to exit; its exit status, or 128 + the signal that killed it.
pub fn wait_exit(pid: Tid) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: plain waitpid on our own child with a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r == -1 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
    if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Some(128 + libc::WTERMSIG(status))
    } else {
        None
    }
}
