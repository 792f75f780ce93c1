//! What the tracer is asked to trace: probe sites with their probes and conditions, and its configuration.
//! Plain data handed over by `app` and `probe`; the tracer's state lives in `mod.rs`.

use crate::model::regs::{Reg, Regs};
use crate::os::Tid;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// Decides, per hit, whether a probe's event counts. `arg` reads the call's argument `i` (0..6) the way the
/// probe's location defines it (a syscall's own arguments for the wrapper, C ABI registers for a function).
pub trait Condition: Send {
    fn matches(&self, regs: &Regs, arg: &dyn Fn(usize) -> u64) -> bool;

    /// The same decision from the call alone, its number and its six arguments, as `--fast`'s trampoline records
    /// them (after the kernel returned: no other register is kept); `None` when it needs more.
    fn on_call(&self, _nr: u64, _args: &[u64; 6]) -> Option<bool> {
        None
    }
}

/// `--syscall`: the syscall number (rdi at the wrapper's entry) is one of these.
pub struct Numbers(pub HashSet<u64>);

impl Condition for Numbers {
    fn matches(&self, regs: &Regs, _: &dyn Fn(usize) -> u64) -> bool {
        self.0.contains(&regs.0.rdi)
    }

    fn on_call(&self, nr: u64, _: &[u64; 6]) -> Option<bool> {
        Some(self.0.contains(&nr))
    }
}

/// One probe at a site, with its own limits.
pub struct Probe {
    /// `None` for the `--syscall` probe (events then carry no probe name).
    pub name: Option<Arc<str>>,
    /// Label for function locations (`libc.so.6:munmap`); `None` at a `syscall()` wrapper.
    pub label: Option<Arc<str>>,
    pub cond: Box<dyn Condition>,
    pub want_ret: bool,
    pub want_stack: bool,
    pub regs: Vec<Reg>,
    pub max_events: Option<u64>,
    pub sample_one_in: Option<u64>,
    pub(super) matched: u64,
    pub(super) emitted: u64,
}

impl Probe {
    pub fn new(name: Option<Arc<str>>, label: Option<Arc<str>>, cond: Box<dyn Condition>) -> Probe {
        Probe {
            name,
            label,
            cond,
            want_ret: true,
            want_stack: true,
            regs: Vec::new(),
            max_events: None,
            sample_one_in: None,
            matched: 0,
            emitted: 0,
        }
    }

    pub(super) fn exhausted(&self) -> bool {
        self.max_events.is_some_and(|m| self.emitted >= m)
    }

    /// Counts a match; whether it is kept after `sample 1 in N`.
    pub(super) fn sample(&mut self) -> bool {
        self.matched += 1;
        self.sample_one_in.is_none_or(|n| n <= 1 || (self.matched - 1).is_multiple_of(n))
    }
}

/// Where to plant a breakpoint and what it serves.
pub struct SiteSpec {
    pub addr: u64,
    /// The file's bytes at `addr` (at least the first instruction; 64 bytes for a wrapper).
    pub code: Vec<u8>,
    /// A `syscall()`-style wrapper: matching hits are stepped through its `syscall` instruction.
    pub wrapper: bool,
    pub probes: Vec<Probe>,
}

/// What the tracer is asked to do, besides its sites.
pub struct Config {
    pub pid: Tid,
    pub stack_bytes: usize,
    /// The target's CPython, when it runs one: each captured stack gets the thread's Python frames.
    pub python: Option<crate::live::python::PythonReader>,
    /// No CPython was found at the start, and none refused: look again every second (a host may dlopen
    /// libpython later).
    pub python_search: bool,
    pub deadline: Option<Instant>,
    /// Time zero of the trace until every site is armed; from then on, event times count from the arming
    /// (`Tracer::armed_at`), and so do the samples of the leak report.
    pub epoch: Instant,
    /// Print a one-line live status to stderr (only when stderr is a terminal).
    pub live_status: bool,
    /// The target's signal restorers ([`crate::live::sigstack::read_restorers`]): a capture inside a handler on
    /// an alternate signal stack copies the interrupted stack too.
    pub restorers: Vec<u64>,
    /// Known stacks proposed by the unwinding (see `crate::x86::known`); `None`: every matching call of `--fast`
    /// stops.
    pub known: Option<crossbeam_channel::Receiver<crate::model::known::Proposal>>,
    /// Set once the trace ends, before detaching: the periodic samples of the regions stop there.
    pub ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// `--faults`: sample every this many page faults of each thread (see `os::perf`).
    pub fault_every: Option<u64>,
}
