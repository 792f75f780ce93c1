//! Thin, typed wrappers over ptrace(2) and waitpid(2). `wait_any` turns raw wait statuses into [`Stop`] values
//! at this boundary, so the tracer matches on a domain enum and never on bit fields.

use super::Tid;
use crate::model::regs::Regs;
use nix::errno::Errno;

/// Options set on every seized thread. Never PTRACE_O_EXITKILL: the target must outlive the tracer.
/// TRACESYSGOOD marks the syscall stops the call gate asks for (`crate::x86::gate`), the only ones syscatch asks for.
pub const OPTIONS: libc::c_int = libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_TRACEFORK
    | libc::PTRACE_O_TRACEVFORK
    | libc::PTRACE_O_TRACEEXEC
    | libc::PTRACE_O_TRACESYSGOOD;

/// Why a traced thread stopped, or that it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // GroupStop is the kernel's name for it
pub enum Stop {
    /// The thread exited with this status (reported for the leader only once the whole group is gone).
    Exited(i32),
    /// The thread was killed by this signal.
    Killed(i32),
    /// Signal-delivery-stop: the signal is delivered only if passed back when resuming.
    Signal(i32),
    /// Group-stop (SIGSTOP and friends) under PTRACE_SEIZE; resume with PTRACE_LISTEN, not CONT.
    GroupStop(i32),
    /// PTRACE_EVENT_STOP with SIGTRAP: our PTRACE_INTERRUPT, or the first stop of an auto-attached thread.
    Interrupted,
    /// The thread created a thread (or a non-thread clone) with this id.
    Clone(Tid),
    Fork(Tid),
    Vfork(Tid),
    VforkDone,
    /// The thread called execve successfully; it now has the thread group's id.
    Exec,
    /// A syscall-entry or syscall-exit stop (asked for with [`syscall`]).
    Syscall,
}

fn check(ret: libc::c_long) -> Result<libc::c_long, Errno> {
    if ret == -1 { Err(Errno::last()) } else { Ok(ret) }
}

fn raw(req: libc::c_uint, tid: Tid, addr: usize, data: usize) -> Result<libc::c_long, Errno> {
    Errno::clear();
    // SAFETY: every request passed here takes integer addr/data or a pointer to a live, correctly sized buffer
    // owned by the caller for the duration of the call.
    check(unsafe { libc::ptrace(req, tid, addr as *mut libc::c_void, data as *mut libc::c_void) })
}

pub fn seize(tid: Tid) -> Result<(), Errno> {
    raw(libc::PTRACE_SEIZE, tid, 0, OPTIONS as usize).map(drop)
}

pub fn interrupt(tid: Tid) -> Result<(), Errno> {
    raw(libc::PTRACE_INTERRUPT, tid, 0, 0).map(drop)
}

/// Resumes the thread, delivering `sig` if this is a signal-delivery-stop (0: none).
pub fn cont(tid: Tid, sig: i32) -> Result<(), Errno> {
    raw(libc::PTRACE_CONT, tid, 0, sig as usize).map(drop)
}

/// Resumes `tid` to its next system call's entry or exit (PTRACE_SYSCALL).
pub fn syscall(tid: Tid) -> Result<(), Errno> {
    raw(libc::PTRACE_SYSCALL, tid, 0, 0).map(drop)
}

pub fn step(tid: Tid, sig: i32) -> Result<(), Errno> {
    raw(libc::PTRACE_SINGLESTEP, tid, 0, sig as usize).map(drop)
}

/// Leaves a group-stopped thread stopped but lets the tracer see the end of the group-stop.
pub fn listen(tid: Tid) -> Result<(), Errno> {
    raw(libc::PTRACE_LISTEN, tid, 0, 0).map(drop)
}

pub fn detach(tid: Tid, sig: i32) -> Result<(), Errno> {
    raw(libc::PTRACE_DETACH, tid, 0, sig as usize).map(drop)
}

pub fn get_regs(tid: Tid) -> Result<Regs, Errno> {
    let mut regs = Regs::zeroed();
    raw(libc::PTRACE_GETREGS, tid, 0, &mut regs.0 as *mut _ as usize)?;
    Ok(regs)
}

pub fn set_regs(tid: Tid, regs: &Regs) -> Result<(), Errno> {
    raw(libc::PTRACE_SETREGS, tid, 0, &regs.0 as *const _ as usize).map(drop)
}

/// The blocked-signal mask of stopped thread `tid` (bit `n - 1` for signal `n`).
pub fn sigmask(tid: Tid) -> Result<u64, Errno> {
    let mut mask = 0u64;
    raw(libc::PTRACE_GETSIGMASK, tid, 8, &mut mask as *mut u64 as usize)?;
    Ok(mask)
}

/// Sets the blocked-signal mask of stopped thread `tid` (the kernel never blocks SIGKILL and SIGSTOP).
pub fn set_sigmask(tid: Tid, mask: u64) -> Result<(), Errno> {
    raw(libc::PTRACE_SETSIGMASK, tid, 8, &mask as *const u64 as usize).map(drop)
}

/// The `si_code` of the signal behind a signal-delivery-stop.
pub fn sig_code(tid: Tid) -> Result<i32, Errno> {
    Ok(siginfo(tid)?.si_code)
}

/// The siginfo of the signal behind a signal-delivery-stop.
pub fn siginfo(tid: Tid) -> Result<libc::siginfo_t, Errno> {
    // SAFETY: siginfo_t is plain data; all-zero is valid, and GETSIGINFO fills at most its size.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    raw(libc::PTRACE_GETSIGINFO, tid, 0, &mut info as *mut _ as usize)?;
    Ok(info)
}

/// Whether `tid` is stopped at a ptrace event reported from inside a system call (clone, fork, vfork, vfork done,
/// exec, exit): resuming it finishes that call first, which then writes its result into rax and returns to
/// whatever rip says. Only a thread outside any call (an interrupt stop, a signal-delivery-stop) can be given
/// other registers and have them mean what they say. Asked of the kernel (the stop's siginfo carries the event in
/// bits 8-15 of `si_code`), so a stop the tracer recorded for another reason cannot mislead it. An error (the
/// thread is gone or not stopped) answers true: nothing can be run on it.
pub fn in_syscall_event(tid: Tid) -> bool {
    match sig_code(tid) {
        Ok(code) => {
            let event = (code >> 8) & 0xff;
            code & 0x7f == libc::SIGTRAP && event != 0 && event != libc::PTRACE_EVENT_STOP
        }
        Err(_) => true,
    }
}

fn event_msg(tid: Tid) -> Result<u64, Errno> {
    let mut msg: libc::c_ulong = 0;
    raw(libc::PTRACE_GETEVENTMSG, tid, 0, &mut msg as *mut _ as usize)?;
    Ok(msg)
}

/// Waits for any thread traced by the calling thread (`__WALL`, or clone()d threads are missed; `__WNOTHREAD`,
/// or a wait would take the stops of tracees that another tracer thread of syscatch attached, which only that
/// thread may resume). `Ok(None)`: interrupted by a signal (the caller checks its flags), or nothing pending with
/// `nohang`. `Err(ECHILD)`: no tracee left.
pub fn wait_any(nohang: bool) -> Result<Option<(Tid, Stop)>, Errno> {
    wait_for(-1, nohang)
}

/// As [`wait_any`], for one thread.
pub fn wait_for(tid: Tid, nohang: bool) -> Result<Option<(Tid, Stop)>, Errno> {
    let mut status = 0;
    let flags = libc::__WALL | libc::__WNOTHREAD | if nohang { libc::WNOHANG } else { 0 };
    // SAFETY: status is a valid out-pointer for the duration of the call.
    let ret = unsafe { libc::waitpid(tid, &mut status, flags) };
    match ret {
        -1 if Errno::last() == Errno::EINTR => Ok(None),
        -1 => Err(Errno::last()),
        0 => Ok(None),
        tid => Ok(Some((tid, decode(tid, status)))),
    }
}

fn decode(tid: Tid, status: i32) -> Stop {
    if libc::WIFEXITED(status) {
        return Stop::Exited(libc::WEXITSTATUS(status));
    }
    if libc::WIFSIGNALED(status) {
        return Stop::Killed(libc::WTERMSIG(status));
    }
    let sig = libc::WSTOPSIG(status);
    let new_tid = || event_msg(tid).map(|m| m as Tid).unwrap_or(0);
    match status >> 16 {
        0 if sig == libc::SIGTRAP | 0x80 => Stop::Syscall,
        0 => Stop::Signal(sig),
        libc::PTRACE_EVENT_STOP => match sig {
            libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => Stop::GroupStop(sig),
            _ => Stop::Interrupted,
        },
        libc::PTRACE_EVENT_CLONE => Stop::Clone(new_tid()),
        libc::PTRACE_EVENT_FORK => Stop::Fork(new_tid()),
        libc::PTRACE_EVENT_VFORK => Stop::Vfork(new_tid()),
        libc::PTRACE_EVENT_VFORK_DONE => Stop::VforkDone,
        libc::PTRACE_EVENT_EXEC => Stop::Exec,
        // Not requested; treat like an interrupt so the thread is resumed without a signal.
        _ => Stop::Interrupted,
    }
}

/// Whether two processes share one address space (kcmp KCMP_VM): a vfork or CLONE_VM child does.
/// `kcmp(KCMP_VM)` of two processes: `Some(true)` when they share one address space, `None` when the kernel
/// cannot tell (no kcmp, a seccomp filter, a process gone or without memory).
pub fn compare_vm(a: Tid, b: Tid) -> Option<bool> {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes only integers and reads nothing from our memory.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a as libc::c_long, b as libc::c_long, KCMP_VM, 0, 0) };
    match r {
        0 => Some(true),
        1..=3 => Some(false),
        _ => None,
    }
}

pub fn same_vm(a: Tid, b: Tid) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes only integers and reads nothing from our memory.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a as libc::c_long, b as libc::c_long, KCMP_VM, 0, 0) };
    r == 0
}
