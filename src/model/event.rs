//! What the tracer reports: one [`Event`] per captured call, plus the end-of-trace [`Summary`]. Plain data;
//! renderers and tests consume it through a [`Sink`].

use crate::model::Tid;
use crate::model::regs::Regs;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Registers and a copy of the stack taken while the thread was stopped at the call, for unwinding later.
#[derive(Clone)]
pub struct StackCapture {
    pub regs: Regs,
    /// Bytes from `regs.sp()` upwards; shorter than asked when the stack mapping ends first.
    pub stack: crate::model::window::Window,
    /// How many bytes were asked for.
    pub asked: usize,
    /// Copies of other stacks taken at the same stop, (address, bytes): the stacks a handler on an alternate
    /// signal stack interrupted (found by [`crate::model::sigframe::interrupted_stacks`]). Usually empty.
    pub more: Vec<(u64, crate::model::window::Window)>,
    /// The thread's Python frames, innermost first, read at the same stop (empty for a thread not running
    /// CPython). Shared: a thread caught again in the same frames gets the same list (one reference count
    /// instead of two per frame while the thread is stopped).
    pub python: std::sync::Arc<[crate::model::stack::PyFrame]>,
    /// For a stop at a match path of `--fast` that asks the known-stack matcher: what its unwinding needs to make
    /// the stack known (see `crate::x86::known`).
    pub known: Option<Box<crate::model::known::Hint>>,
    /// For a call reported with a known stack: its number (the unwinding kept that stack's unwind).
    pub known_id: Option<u32>,
}

/// One captured call.
#[derive(Clone)]
pub struct Event {
    /// Seconds since the trace started.
    pub time: f64,
    pub tid: Tid,
    /// The probe that caught it (probe scripts); `None` for `--syscall`.
    pub probe: Option<Arc<str>>,
    /// For a function probe, where it stopped (`libc.so.6:munmap`); `None` for a call through `syscall()`.
    pub func: Option<Arc<str>>,
    /// The syscall number (calls through `syscall()` only).
    pub nr: u64,
    /// The call's arguments: for `syscall()`, the syscall's own (rsi, rdx, rcx, r8, r9 and the stack argument);
    /// for a function, the C ABI registers rdi, rsi, rdx, rcx, r8, r9.
    pub args: [u64; 6],
    /// Registers a probe asked for, at the call.
    pub regs: Vec<(crate::model::regs::Reg, u64)>,
    /// rax after the call returned: an address, a value, or -errno.
    pub ret: Option<u64>,
    /// Why `ret` is missing.
    pub ret_missing: Option<String>,
    pub capture: Option<StackCapture>,
    /// Other probes at the same address whose conditions also matched this call: each gets a copy of the event,
    /// sent with it once the call is complete.
    pub also: Vec<Arc<str>>,
}

/// How a trace ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum End {
    Duration,
    Signal(i32),
    /// The target exited with this status, or was killed by this signal.
    Exited(i32),
    Killed(i32),
    /// The target called execve: the traced program is gone.
    Exec,
    /// syscatch itself failed (a panic, an output error): the trace was stopped early.
    Fault,
}

/// Counters for the summary line, kept by the tracer.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub duration: Duration,
    pub hits: u64,
    pub matching: u64,
    #[serde(with = "tid_pairs")]
    pub events_by_tid: BTreeMap<Tid, u64>,
    /// Time between seeing a stop and resuming the thread, summed over all hits (the tracer's share of the
    /// time threads spent stopped).
    pub stopped: Duration,
    /// Step-overs done by emulating the displaced instruction (or resuming past it, when that is equivalent).
    pub emulated: u64,
    /// Hits that needed a slow step-over (single steps instead of emulation).
    pub slow_path: u64,
    /// `--fast` events whose registers came from the trampoline's record, read with the stack in one copy
    /// (no `PTRACE_GETREGS`).
    pub from_record: u64,
    /// `--fast` calls read from the trampoline's ring: made without a stop (their stack was not needed).
    #[serde(default)]
    pub from_ring: u64,
    /// Of those, matching calls of a known stack (one unwound at an earlier stop, see `crate::x86::known`),
    /// reported with that stack.
    #[serde(default)]
    pub from_known: u64,
    /// `--fast` stops: matching calls stopped at the trampoline to be unwound (their stack not known yet, or
    /// `--no-known-stacks`).
    #[serde(default)]
    pub fast_stops: u64,
    /// `--fast` stops of calls bound for the ring that found it full (their writers take a stop instead).
    #[serde(default)]
    pub ring_full_stops: u64,
    /// Traps taken with SIGTRAP blocked, after which the trap pad's handler was put back (see `Tracer::keep_pad`).
    #[serde(default)]
    pub pad_restored: u64,
    /// `--faults`: page faults sampled (each stopped its thread once).
    #[serde(default)]
    pub fault_samples: u64,
    /// `--faults`: the highest sampling period the rate bound raised it to (0: never raised).
    #[serde(default)]
    pub fault_period_max: u64,
    /// Each thread's thread pointer (fs base) as read at detach: where the facts read after the trace find the
    /// threads' TLS (glibc's `thread_arena`, `tcache`). Not recorded.
    #[serde(skip)]
    pub thread_bases: Vec<(Tid, u64)>,
    /// `--malloc`: allocations the sampler chose (each stopped once), as it counted them.
    #[serde(default)]
    pub malloc_sampled: u64,
    /// syscatch's own pages in the target (the trap pad's, `--fast`'s trampoline and ring): left out of the
    /// growing regions of the leak report.
    #[serde(default)]
    pub own_ranges: Vec<(u64, u64)>,
    /// The paths the trace watched (`syscall() at ADDR (mmap)`, `libc.so.6:mmap at ADDR`).
    #[serde(default)]
    pub watched: Vec<String>,
    /// Calls seen at a watched libc function and at the `syscall()` inside it, reported once.
    #[serde(default)]
    pub nested: u64,
    /// What the trace left by design and the user may want to know (not a problem: a warning is one).
    #[serde(default)]
    pub notes: Vec<String>,
    pub threads_seen: u64,
    pub forks_cleaned: u64,
    pub signals_forwarded: u64,
    pub end: Option<End>,
    /// Time to seize every thread, to plant the breakpoints (or install `--fast`), and to stop, restore and
    /// detach everything at the end.
    pub attach: Duration,
    pub arm: Duration,
    pub detach: Duration,
    /// Analysis costs, measured off the tracer's thread: unwinding (per frame), symbolizing a frame whose address
    /// was new, and one seen before.
    pub unwind_ns_per_frame: Option<f64>,
    pub symbolize_first_ns_per_frame: Option<f64>,
    pub symbolize_cached_ns_per_frame: Option<f64>,
    /// Events per second the two analysis threads sustain, from their busy time per event (the slower stage
    /// bounds the pipeline; waiting for events, the prefetch and loading a module's symbol tables are not counted).
    pub analysis_events_per_s: Option<f64>,
    /// Time to read a captured thread's Python frames, per event, while it was stopped (CPython targets).
    pub python_us_per_event: Option<f64>,
    /// What the target's threads waited for a CPU over the trace, attach and detach included (their schedstat
    /// run delays, read before attaching and after detaching): the scheduling delay the target saw, which
    /// `stopped` (the tracer's clock) does not show. `None` where the kernel has no schedstat.
    pub target_run_delay: Option<crate::model::schedstat::RunDelay>,
    /// The same for the tracer thread itself: each stop waits for it to get a CPU before `stopped` starts.
    pub tracer_run_delay_ns: Option<u64>,
    /// Problems that must be shown loudly (a breakpoint byte that was not ours at detach, ...).
    pub warnings: Vec<String>,
}

impl Summary {
    /// Threads the tracer saw whose run delay is not in `target_run_delay`: those that exited before detach.
    pub fn run_delay_uncounted(&self) -> u64 {
        self.target_run_delay.as_ref().map_or(0, |d| self.threads_seen.saturating_sub(d.threads))
    }
}

/// Receives events as they are captured.
pub trait Sink {
    fn event(&mut self, ev: Event);
    /// Whether what was sent is far behind (half the queue): the ring of `--fast` is then left unread for a turn,
    /// so that, once it is full, calls stop (the target waits on syscatch) instead of syscatch's queue blocking
    /// the tracer with threads stopped and numbers taken.
    fn behind(&self) -> bool {
        false
    }
}

impl Sink for Vec<Event> {
    fn event(&mut self, ev: Event) {
        self.push(ev)
    }
}

/// `events_by_tid` as a list of pairs in a recording (JSON map keys are strings, and a tagged record cannot read
/// them back as numbers).
mod tid_pairs {
    use super::Tid;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer>(m: &BTreeMap<Tid, u64>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<Tid, u64>, D::Error> {
        Ok(Vec::<(Tid, u64)>::deserialize(d)?.into_iter().collect())
    }
}
