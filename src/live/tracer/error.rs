//! What goes wrong arming the tracer (int3s, `--fast`, the trap pad) and running a system call in the target,
//! and why a thread cannot stop when asked. Each variant's text is one line, the cause included; `app::trace`
//! adds the context (`--fast` refusals are said and the int3 armed instead; a pad refusal is a note).

use crate::os::Tid;
use crate::x86::trampoline::Refusal;
use nix::errno::Errno;
use std::io;

/// Why a thread did not stop when asked (bounded waits give up on it; it runs on, and its interrupt stays
/// pending, so it stops once it can).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stuck {
    /// It sleeps in the kernel until its child, traced and maybe held by us, execs or exits.
    #[error("a vfork parent waiting in the kernel for its child {child}")]
    VforkParent { child: Tid },
    /// It never stops again.
    #[error("a zombie")]
    Zombie,
    #[error("in uninterruptible sleep")]
    Uninterruptible,
    #[error("in uninterruptible sleep in {wchan}")]
    UninterruptibleIn { wchan: String },
    #[error("no stop within {ms} ms")]
    NoStop { ms: u128 },
    /// waitpid failed (ECHILD: it is no longer ours).
    #[error("{}", .0.desc())]
    Wait(Errno),
}

/// Why the tracer could not start: a ptrace or /proc failure, or a probe site it cannot place a breakpoint on.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// PTRACE_SEIZE and friends (EPERM, ESRCH: the caller words these with the pid).
    #[error("{}", .0.desc())]
    Ptrace(Errno),
    #[error("cannot open the target's memory: {0}")]
    Memory(io::Error),
    #[error("capstone failed to initialise")]
    Disassembler,
    #[error("the instruction at {addr:#x} cannot be decoded, so no breakpoint can be placed there")]
    Undecodable { addr: u64 },
    #[error("no `syscall` instruction among the first 16 instructions of the wrapper at {addr:#x}")]
    NotAWrapper { addr: u64 },
}

impl From<Errno> for AttachError {
    fn from(e: Errno) -> AttachError {
        AttachError::Ptrace(e)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    // Planting int3s.
    #[error("cannot read the target's memory: {0}")]
    ReadMemory(io::Error),
    #[error(
        "{what} at {addr:#x}: its first byte is {now:#04x} in memory but {file:#04x} in the file: another \
         debugger, uprobe or hook has changed it; refusing to plant a breakpoint there (`syscatch hooks --pid N` \
         shows a hook; leave that probe out to trace the rest)"
    )]
    ByteChanged { what: String, addr: u64, now: u8, file: u8 },
    #[error("cannot write the breakpoint: {0}")]
    WriteBreakpoint(io::Error),

    // `--fast`.
    #[error("capstone failed to initialise")]
    Disassembler,
    #[error("the wrapper's prefix cannot be emulated")]
    PrefixNotEmulated,
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("cannot read the wrapper: {0}")]
    ReadWrapper(io::Error),
    #[error("the wrapper in memory differs from the file (another tool has patched it)")]
    WrapperChanged,
    /// Rewriting the wrapper needs every thread stopped.
    #[error("thread {tid} cannot be stopped ({why})")]
    CannotStop { tid: Tid, why: Stuck },
    #[error("no thread is in a state where it can map the trampoline page")]
    NoThreadForPage,
    #[error("cannot read thread {tid}'s registers: {error}")]
    Registers { tid: Tid, error: Errno },
    #[error("thread {tid} is inside the instruction to patch")]
    InsidePatch { tid: Tid },
    #[error("cannot read /proc/{pid}/maps: {error}")]
    Maps { pid: Tid, error: io::Error },
    #[error("no gap in the address space within 2 GiB of libc's `syscall()` for the trampoline page")]
    NoGap,
    #[error("the target refused to map the trampoline page in each of the {tried} nearest gaps")]
    PageRefused { tried: usize },
    #[error("the trampoline does not fit or reach")]
    TrampolineTooBig,
    #[error("the trampoline page is out of jump range")]
    OutOfRange,
    #[error("cannot write the trampoline: {0}")]
    WriteTrampoline(io::Error),
    #[error("cannot patch the wrapper: {0}")]
    WritePatch(io::Error),

    // A system call run by a held thread.
    /// A ptrace request on that thread failed.
    #[error("{}", .0.desc())]
    Ptrace(Errno),
    /// A signal that cannot be blocked (a foreign SIGTRAP) came before the call; kept for the thread.
    #[error("signal {0} arrived during the injected system call")]
    SignalDuringCall(i32),
    #[error("the thread exited")]
    ThreadExited,
    #[error("the thread stopped for another reason")]
    OtherStop,
    /// The call gate's block could not be written below the thread's stack pointer.
    #[error("cannot write below the thread's stack pointer: {0}")]
    WriteStack(io::Error),
    /// Still in the call (mmap waiting for a lock held by a thread that cannot stop).
    #[error("the injected call did not return: {0}")]
    NoReturn(Stuck),

    // The trap pad.
    #[error("{0}")]
    Status(io::Error),
    #[error("the target handles SIGTRAP itself")]
    HandlesSigtrap,
    #[error("no libc syscall instruction to run the set-up on")]
    NoSyscallInsn,
    #[error("no thread is held where it can run the set-up")]
    NoThreadForPad,
    #[error("mmap in the target failed ({0})")]
    Mmap(i64),
    #[error("cannot write the pad: {0}")]
    WritePad(io::Error),
    #[error("mprotect in the target failed ({0})")]
    Mprotect(i64),
    #[error("rt_sigaction in the target failed ({0})")]
    Sigaction(i64),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts tests and users grep for, kept as they were when these were strings.
    #[test]
    fn texts() {
        assert_eq!(
            Stuck::UninterruptibleIn { wchan: "folio_wait".into() }.to_string(),
            "in uninterruptible sleep in folio_wait"
        );
        assert_eq!(
            Error::CannotStop { tid: 7, why: Stuck::VforkParent { child: 8 } }.to_string(),
            "thread 7 cannot be stopped (a vfork parent waiting in the kernel for its child 8)"
        );
        assert_eq!(
            Error::NoReturn(Stuck::NoStop { ms: 500 }).to_string(),
            "the injected call did not return: no stop within 500 ms"
        );
        assert_eq!(Error::Ptrace(Errno::ESRCH).to_string(), "No such process");
        assert_eq!(
            Error::ByteChanged { what: "probe m (libc.so.6:munmap)".into(), addr: 0x1000, now: 0xcc, file: 0x48 }
                .to_string(),
            "probe m (libc.so.6:munmap) at 0x1000: its first byte is 0xcc in memory but 0x48 in the file: another \
             debugger, uprobe or hook has changed it; refusing to plant a breakpoint there (`syscatch hooks --pid \
             N` shows a hook; leave that probe out to trace the rest)"
        );
        assert_eq!(Error::Refused(Refusal::NoRoom).to_string(), Refusal::NoRoom.to_string());
        assert_eq!(Error::Mmap(-12).to_string(), "mmap in the target failed (-12)");
    }
}
