//! Why a live process's hooks cannot be checked. Each variant's text is one complete line, as users see it.

use crate::os::Tid;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no process with pid {pid}")]
    NoProcess { pid: Tid },
    #[error("process {pid} ({name}) is a zombie: it has exited and has no memory left")]
    Zombie { pid: Tid, name: String },
    #[error("process {pid} ({name}) is a kernel thread: it has no user memory")]
    KernelThread { pid: Tid, name: String },
    #[error(transparent)]
    Live(#[from] crate::live::Error),
    #[error("cannot open /proc/{pid}/mem ({error}): run as root or with CAP_SYS_PTRACE")]
    Memory { pid: Tid, error: io::Error },
    #[error("process {pid}: a mapped module cannot be checked: {error}")]
    Module { pid: Tid, error: crate::live::Error },
    #[error("{path}: corrupt ELF file ({error}); cannot check its GOT")]
    CorruptElf { path: String, error: object::Error },
    #[error("cannot read /proc/{pid}/auxv: {error}")]
    Auxv { pid: Tid, error: io::Error },
    #[error("process {pid} ({name}): no AT_PHDR in its auxiliary vector")]
    NoProgramHeaders { pid: Tid, name: String },
    #[error("process {pid} ({name}): its program headers ({phdr:#x}) are in no mapped ELF file")]
    ProgramUnmapped { pid: Tid, name: String, phdr: u64 },
    #[error("process {pid} ({name}) is statically linked: it has no dynamic linker and no GOT to check")]
    Static { pid: Tid, name: String },
    #[error("process {pid} ({name}): the dynamic linker's r_debug is not set (is it still starting?)")]
    NoRDebug { pid: Tid, name: String },
    #[error(
        "process {pid} ({name}): the dynamic linker's list of objects does not contain the program; is it still \
         starting?"
    )]
    ProgramNotListed { pid: Tid, name: String },
}
