//! What can go wrong checking a live process, reading its maps, smaps and module files, and finding a
//! `syscall()`-style wrapper in them. Each variant's text is one complete line (the cause included), as users see it.

use crate::os::Tid;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no process with pid {pid}")]
    NoProcess { pid: Tid },
    #[error("{pid} is a thread of process {tgid} ({name}); use --pid {tgid}")]
    Thread { pid: Tid, tgid: Tid, name: String },
    #[error("process {pid} ({name}) is a zombie: it has exited and waits for its parent to reap it")]
    Zombie { pid: Tid, name: String },
    #[error("process {pid} ({name}) is a kernel thread: it has no user memory to trace")]
    KernelThread { pid: Tid, name: String },
    #[error("cannot read /proc/{pid}/maps: {error}")]
    Maps { pid: Tid, error: io::Error },
    #[error("permission denied reading /proc/{pid}/smaps: run as the process's user or as root")]
    SmapsDenied { pid: Tid },
    #[error("cannot read /proc/{pid}/smaps: {error}")]
    Smaps { pid: Tid, error: io::Error },
    #[error("process {pid} has no memory mapped (it is exiting)")]
    NothingMapped { pid: Tid },
    /// Every place the file may be read holds another file (or none parses as the mapped ELF).
    #[error(
        "{path}: the file on disk is not the one mapped by process {pid} (build-id differs); was it replaced after \
         the process started? (/proc/{pid}/map_files, which reads the mapped file itself, needs CAP_SYS_ADMIN)"
    )]
    Replaced { pid: Tid, path: String },
    #[error("cannot read {path} (mapped by process {pid}): {error}")]
    Unreadable { pid: Tid, path: String, error: io::Error },
    #[error("cannot read {path} (mapped by process {pid}): no path to try")]
    NoPath { pid: Tid, path: String },
    #[error("vdso too large")]
    VdsoTooLarge,
    #[error("cannot read the vDSO image from the target's memory")]
    VdsoUnreadable,
    #[error("{path}: no symbol `{symbol}` in its symbol tables; is this glibc?")]
    NoSymbol { path: String, symbol: String },
    #[error("{path}: `{symbol}` at {addr:#x} is outside the file's segments")]
    OutsideFile { path: String, symbol: String, addr: u64 },
    #[error("capstone failed to initialise")]
    Disassembler,
    #[error(
        "{path}: `{symbol}` does not look like a syscall() wrapper (no `syscall` instruction among its first 32 \
         instructions); the target was not touched"
    )]
    NotAWrapper { path: String, symbol: String },
}
