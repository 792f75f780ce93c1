//! One-shot capture of a thread's registers and stack for `syscatch stack`: seize, interrupt, wait for its stop,
//! GETREGS, one stack copy, detach. Each thread is stopped only for its own copy.
//!
//! Whatever stop the thread reports first is honoured: a signal-delivery-stop is captured and the signal handed
//! back at detach (so it is delivered, not lost); a group-stop is captured and left a group-stop (the kernel puts
//! a detached tracee of a stopped group back into the group-stop; the pending interrupt is dropped at detach).

use crate::live::python::PythonReader;
use crate::model::event::StackCapture;
use crate::os::ptrace::{self, Stop};
use crate::os::{Tid, mem, task};
use std::time::{Duration, Instant};

/// How long to wait for a thread to stop (one in uninterruptible sleep stops only when it leaves it).
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The stop in which a thread was captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Our PTRACE_INTERRUPT.
    Interrupted,
    /// A signal was being delivered; it was passed back at detach.
    Signal(i32),
    /// The process was stopped (SIGSTOP and friends) and stays stopped.
    GroupStop(i32),
}

pub struct ThreadSnapshot {
    pub tid: Tid,
    pub capture: StackCapture,
    pub seen: Seen,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("thread {0} is gone")]
    Gone(Tid),
    #[error("thread {0}: {1}")]
    Ptrace(Tid, nix::errno::Errno),
    #[error("thread {0} did not stop within {1:?} (uninterruptible sleep?); it detaches when syscatch exits")]
    Timeout(Tid, Duration),
}

/// Captures thread `tid` and lets it go. `stack_bytes` of stack are copied from its stack pointer.
pub fn read_thread(tid: Tid, stack_bytes: usize) -> Result<ThreadSnapshot, SnapshotError> {
    read_thread_with(tid, stack_bytes, None, &[])
}

/// [`read_thread`], also reading the thread's Python frames while it is stopped when `python` is given, and the
/// stacks interrupted by a handler on an alternate signal stack (see [`crate::live::sigstack`]) with the
/// process's signal `restorers`.
pub fn read_thread_with(
    tid: Tid,
    stack_bytes: usize,
    python: Option<&mut PythonReader>,
    restorers: &[u64],
) -> Result<ThreadSnapshot, SnapshotError> {
    use nix::errno::Errno;
    let gone = |e: Errno| match e {
        Errno::ESRCH => SnapshotError::Gone(tid),
        e => SnapshotError::Ptrace(tid, e),
    };
    task::seize_plain(tid).map_err(gone)?;
    if let Err(e) = ptrace::interrupt(tid) {
        let _ = ptrace::detach(tid, 0);
        return Err(gone(e));
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    let spin_until = Instant::now() + Duration::from_millis(2);
    let seen = loop {
        match ptrace::wait_for(tid, true) {
            Ok(Some((_, stop))) => match stop {
                Stop::Exited(_) | Stop::Killed(_) => return Err(SnapshotError::Gone(tid)),
                Stop::Signal(sig) => break Seen::Signal(sig),
                Stop::GroupStop(sig) => break Seen::GroupStop(sig),
                _ => break Seen::Interrupted,
            },
            // The stop usually comes within microseconds: spin briefly (the thread is stopped meanwhile, so
            // latency here is the target's), then back off.
            Ok(None) if Instant::now() < spin_until => std::thread::yield_now(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(100)),
            Ok(None) => return Err(SnapshotError::Timeout(tid, STOP_TIMEOUT)),
            Err(e) => return Err(gone(e)),
        }
    };
    let regs = ptrace::get_regs(tid);
    let stack = match &regs {
        Ok(r) if stack_bytes > 0 => mem::read_upto(tid, r.sp(), stack_bytes),
        _ => Vec::new(),
    };
    let more = match &regs {
        Ok(r) => crate::live::sigstack::read_interrupted(
            |at, len, buf| buf.extend(mem::read_upto(tid, at, len)),
            restorers,
            r.sp(),
            &stack,
            stack_bytes,
        ),
        Err(_) => Vec::new(),
    };
    let py = match (&regs, python) {
        (Ok(r), Some(p)) => p.read_frames(tid, r, &stack),
        _ => Default::default(),
    };
    let sig = match seen {
        Seen::Signal(s) => s,
        _ => 0,
    };
    let detached = ptrace::detach(tid, sig);
    let regs = regs.map_err(gone)?;
    detached.map_err(gone)?;
    Ok(ThreadSnapshot {
        tid,
        capture: StackCapture {
            regs,
            stack: stack.into(),
            asked: stack_bytes,
            python: py,
            more,
            known: None,
            known_id: None,
        },
        seen,
    })
}
