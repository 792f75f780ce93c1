//! The analysis thread: unwinds each captured event off the tracer's thread as soon as it arrives (its stack
//! window is dropped there), interns the return-address list, and symbolizes and renders each distinct stack
//! once; it feeds the leak tracker with the events and the samples of the regions (which come in the queue at
//! their place among the events: taken live by `crate::live::sampling::Periodic`, or read back from a
//! recording), and writes the recording (`--record`). Its memory grows with
//! distinct stacks, not with events. It never reads the target itself: modules come from a [`ModuleSource`].

use crate::analysis::correlate::Changes;
use crate::analysis::leaks::{LeakTracker, SeenTwice};
use crate::analysis::modules::{ModuleSource, SharedModules, SharedSymbolizer};
use crate::analysis::unwind::{End, Unwound};
use crate::app::record::{RecEvent, Record, Recorder};
use crate::model::event::Event;
use crate::model::smaps::Span;
use crate::model::stack::Stack;
use crate::report::Renderer;
use crossbeam_channel::{Receiver, Sender};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Config {
    pub source: Box<dyn ModuleSource>,
    pub stack_depth: usize,
    /// A probe's own `stack(N)` limit, by probe name.
    pub depths: HashMap<Arc<str>, usize>,
    /// Track leaks (from the events and the smaps samples).
    pub leaks: bool,
    /// The part of the trace reported on (seconds since attach: from, and to, or to the end).
    pub window: (f64, Option<f64>),
    /// Where the ranges the leak model holds for traced calls are published after each sample, for the live
    /// sampler (which reads their residency afresh).
    pub traced: Option<crate::live::sampling::Traced>,
    /// The first sample (of the whole smaps), taken before the breakpoints were armed.
    pub baseline: Option<Vec<Span>>,
    /// Render each event (report mode without `-o FILE` renders none: only the report is wanted).
    pub render_events: bool,
    pub recorder: Option<Arc<Recorder>>,
    /// Where stacks that can be made known go (the tracer, see `crate::x86::known`).
    pub known: Option<Sender<crate::model::known::Proposal>>,
    /// Stack windows queued by the tracer's sink: counted down as the unwinding takes them.
    pub windows: Arc<std::sync::atomic::AtomicUsize>,
    /// With `leaks`, given the leak model after each live sample, with the sample's time (seconds since attach):
    /// the report of the trace so far, when one is due (`--every`, `--metrics`).
    pub interim: Option<Box<Interim>>,
    /// With `leaks` and a recorder: for how long (seconds since attach) the recording keeps each mapping call,
    /// and then the leak model's changes at each sample (`None`: each call, always).
    pub calls_for: Option<f64>,
    /// `--malloc-every` (0: no `--malloc`): the sampled allocations' estimates need it.
    pub malloc_every: u64,
    /// `--fault-every` (0: no `--faults`).
    pub fault_every: u64,
}

pub type Interim = dyn FnMut(&LeakTracker, f64) + Send;

/// Time spent unwinding and symbolizing, for the summary.
#[derive(Default)]
pub struct Costs {
    unwound_frames: u64,
    unwind: Duration,
    new_frames: u64,
    new_time: Duration,
    cached_frames: u64,
    cached_time: Duration,
    /// Events handled, and each stage's CPU time on them: unwinding, then interning, symbolizing and rendering
    /// (module loading, at the start or for the first stack that meets a module, the symbol prefetch and smaps
    /// samples not counted).
    events: u64,
    unwinding: Duration,
    handling: Duration,
}

impl Costs {
    fn per(d: Duration, n: u64) -> Option<f64> {
        (n > 0).then(|| d.as_nanos() as f64 / n as f64)
    }
    pub fn unwind_ns_per_frame(&self) -> Option<f64> {
        Self::per(self.unwind, self.unwound_frames)
    }
    pub fn symbolize_first_ns_per_frame(&self) -> Option<f64> {
        Self::per(self.new_time, self.new_frames)
    }
    pub fn symbolize_cached_ns_per_frame(&self) -> Option<f64> {
        Self::per(self.cached_time, self.cached_frames)
    }
    /// What the two-stage pipeline sustains on two CPUs: events over the busier stage's CPU time (loading a
    /// module's symbol tables, once, is not counted: see `handling`).
    pub fn events_per_s(&self) -> Option<f64> {
        let busiest = self.unwinding.max(self.handling).as_secs_f64();
        (self.events > 0 && busiest > 0.0).then(|| self.events as f64 / busiest)
    }
}

/// One captured call on its way from the tracer. When the analysis is behind, the tracer sends the record
/// without its stack window rather than wait (`stack_dropped`): the call is still reported, its stack is not.
/// Read back from a recording, smaps samples come in the same queue, at their place among the events.
// Nearly every item is a call: boxing it would cost an allocation per event to save space on rare samples.
#[allow(clippy::large_enum_variant)]
pub enum Queued {
    Call {
        ev: Event,
        stack_dropped: bool,
        numbered: Numbered,
    },
    /// Read back from a recording: how the leak model changed (see `Record::Changes`).
    Changes(f64, Box<Changes>, u64),
    /// A sample taken at a time (seconds since attach; `None` in older recordings); `true`: the baseline taken
    /// right after arming (see `LeakTracker::rebaseline`).
    Sample(Option<f64>, Vec<Span>, bool),
    /// A live sample taken at a time: its regions come on the receiver once read (the analysis waits for them).
    Coming(f64, Receiver<Vec<Span>>),
}

/// What a recording says of a call's stack: the number its leak model gave it (to match its later changes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Numbered {
    /// A live call, or one recorded before there were numbers.
    No,
    /// A call the model counted.
    Call(u32),
    /// Only the stack counts: the call is in the model's changes that come next (see `Record::Stack`).
    Stack(u32),
}

/// How many events may wait between the tracer and the output (records only: stack windows are bounded by the
/// tracer's sink). Everything queued is still rendered after Ctrl-C, so this also bounds how long the end takes
/// (a debug build renders about a thousand JSON events a second under load).
pub const QUEUED_RECORDS: usize = 4096;

/// What a stack is known by before it is symbolized: its unwound frames, its Python frames, and a probe's own
/// depth limit.
type StackKey = (Unwound, std::sync::Arc<[crate::model::stack::PyFrame]>, Option<usize>);

/// Distinct stacks, each symbolized once, by id.
#[derive(Default)]
struct Interned {
    ids: crate::model::addrmap::AddrMap<StackKey, usize>,
    stacks: Vec<Stack>,
}

/// Why an event has no frames when the tracer dropped its stack window.
pub const STACK_DROPPED: &str = "stack window dropped: the analysis was behind (counted in the summary)";

pub struct Done {
    pub renderer: Box<dyn Renderer + Send>,
    /// The first error writing an event (a closed pipe, a full disk): the trace was asked to stop then.
    pub output_error: Option<std::io::Error>,
    pub leaks: Option<LeakTracker>,
    pub costs: Costs,
    /// Calls seen at a watched libc function and at the `syscall()` inside it: rendered once (as the latter).
    pub nested: u64,
}

/// A call whose stack window has been unwound to return addresses (`None`: no stack was captured).
struct Unwinding {
    ev: Event,
    unwound: Option<Unwound>,
    /// The thread's Python frames, read at the stop.
    python: std::sync::Arc<[crate::model::stack::PyFrame]>,
    /// Time spent unwinding it.
    took: Duration,
    /// The call as recorded (`--record`), with the part of its window the walk read.
    recorded: Option<Box<RecEvent>>,
    numbered: Numbered,
}

/// A receiver that naps instead of parking while events flow. A parked receiver turns every send into a futex
/// wake-up, made by the tracer while a thread of the target waits for its next resume, and costs a pair of context
/// switches per event on each stage (measured: 1.3 per event per stage, and about 16 us of CPU per event in each
/// analysis thread, most of it waking up). Napping [`Self::NAP`] lets a burst's events collect and be handled
/// together; the receiver parks once [`Self::NAPS`] naps in a row found nothing, so an idle trace costs no
/// wake-ups and a trickle of events (one every few ms) costs one wake-up each, as before. The nap is long enough
/// for a steady worker's events (one every ms or so) to collect several to a wake-up: a 0.5 ms nap woke about once
/// per event, and with four processes traced perf found a third of syscatch's samples in those wake-ups. It is
/// short enough that a burst's stack windows (a few hundred in a nap at most) stay within the 256 the tracer
/// queues before it sends events without their stacks.
#[derive(Default)]
struct Lingering {
    empty_naps: u32,
}

impl Lingering {
    const NAP: Duration = Duration::from_millis(2);
    const NAPS: u32 = 3;

    /// The next message, or `None` once every sender is gone. `idle` runs when a nap has found nothing (once per
    /// wait).
    fn recv<T>(&mut self, rx: &Receiver<T>, idle: &mut dyn FnMut()) -> Option<T> {
        let mut idled = false;
        loop {
            match rx.try_recv() {
                Ok(v) => {
                    self.empty_naps = 0;
                    return Some(v);
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
                Err(crossbeam_channel::TryRecvError::Empty) => {}
            }
            if self.empty_naps > 0 && !idled {
                idled = true;
                idle();
            }
            if self.empty_naps >= Self::NAPS {
                let got = rx.recv().ok();
                if got.is_some() {
                    self.empty_naps = 0;
                }
                return got;
            }
            std::thread::sleep(Self::NAP);
            self.empty_naps += 1;
        }
    }
}

/// Writes out what was rendered since the last time (`unflushed`); a failure ends the trace, as a failed render.
fn flush_rendered(renderer: &mut dyn Renderer, unflushed: &mut bool, output_error: &mut Option<std::io::Error>) {
    // After a failure nothing more is written: the first error is the one reported.
    if std::mem::take(unflushed)
        && output_error.is_none()
        && let Err(e) = renderer.flush()
    {
        *output_error = Some(e);
        crate::os::signals::fault();
    }
}

#[allow(clippy::large_enum_variant)]
enum Staged {
    Call(Unwinding),
    Changes(f64, Box<Changes>, u64),
    Sample(Option<f64>, Vec<Span>, bool),
    Coming(f64, Receiver<Vec<Span>>),
}

/// The unwinding stage: each capture's window is walked to return addresses as soon as it arrives and then
/// dropped, so the tracer's queue of windows drains even while the next stage loads a module's DWARF.
fn unwinder(
    rx: Receiver<Queued>,
    tx: Sender<Staged>,
    modules: SharedModules,
    max_depth: usize,
    recording: bool,
    known: Option<Sender<crate::model::known::Proposal>>,
    windows: Arc<std::sync::atomic::AtomicUsize>,
) -> Duration {
    crate::os::sched::batch();
    // Proposed already (thread, stack pointer, int3 and the frames), with the thread id it was proposed for: a stop
    // of a known stack that came before its entry was installed proposes it again. A new thread that takes a gone
    // one's fs base (and finds its stacks withdrawn) proposes the same stack again at its second stop there: a
    // thread per request (one call a stack) would make the unwinding propose at every call.
    let mut proposed: HashMap<(u64, u64, u64, Vec<u64>), crate::model::Tid> = HashMap::new();
    let mut again: HashSet<(crate::model::Tid, u64, u64, u64)> = HashSet::new();
    // The unwind of each known stack proposed, by its number: its calls come with that stack's capture.
    let mut unwinds: Vec<(Unwound, Vec<u64>)> = Vec::new();
    let cpu0 = crate::os::sched::thread_cpu();
    let mut lingering = Lingering::default();
    while let Some(q) = lingering.recv(&rx, &mut || {}) {
        let (mut ev, stack_dropped, numbered) = match q {
            Queued::Call { ev, stack_dropped, numbered } => {
                if ev.capture.as_ref().is_some_and(|c| c.known_id.is_none()) {
                    windows.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                }
                (ev, stack_dropped, numbered)
            }
            Queued::Changes(t, c, n) => {
                if tx.send(Staged::Changes(t, c, n)).is_err() {
                    break;
                }
                continue;
            }
            Queued::Sample(t, s, b) => {
                if tx.send(Staged::Sample(t, s, b)).is_err() {
                    break;
                }
                continue;
            }
            Queued::Coming(t, r) => {
                if tx.send(Staged::Coming(t, r)).is_err() {
                    break;
                }
                continue;
            }
        };
        let t0 = Instant::now();
        let mut python = Default::default();
        let mut recorded = None;
        let unwound = match ev.capture.take() {
            Some(c) => {
                let (u, seen, sps) = match c.known_id.and_then(|k| unwinds.get(k as usize)) {
                    // The same thread at the same stack pointer: its frames' stack pointers are the same too.
                    Some((u, sps)) => (u.clone(), vec![c.stack.len()], sps.clone()),
                    None => modules.unwind(&c, max_depth),
                };
                if let (Some(tx), Some(h)) = (&known, c.known.as_deref()) {
                    let seen = u.frames.iter().map(|f| f.pc).chain(h.python.iter().map(|o| o.expect)).collect();
                    let key = (h.thread, c.regs.sp(), h.int3, seen);
                    let fresh = match proposed.get(&key) {
                        None => proposed.len() < 4096,
                        Some(&tid) if tid != h.tid => {
                            let seen_before = !again.insert((h.tid, h.thread, c.regs.sp(), h.int3));
                            if again.len() > 4096 {
                                again.clear();
                            }
                            seen_before
                        }
                        Some(_) => false,
                    };
                    if fresh && let Some(p) = modules.propose(&c, &u, max_depth, unwinds.len() as u32) {
                        proposed.insert(key, h.tid);
                        if tx.try_send(p).is_ok() {
                            unwinds.push((u.clone(), sps.clone()));
                        }
                    }
                }
                if recording {
                    recorded = Some(Box::new(RecEvent::new(&ev, Some(&c), &seen, stack_dropped)));
                }
                python = crate::python::place(&c.python, &sps);
                Some(u)
            }
            None if stack_dropped => Some(Unwound { frames: Vec::new(), end: End::Truncated(STACK_DROPPED.into()) }),
            None => None,
        };
        if recording && recorded.is_none() {
            recorded = Some(Box::new(RecEvent::new(&ev, None, &[], stack_dropped)));
        }
        if tx.send(Staged::Call(Unwinding { ev, unwound, python, took: t0.elapsed(), recorded, numbered })).is_err() {
            break;
        }
    }
    crate::os::sched::thread_cpu().saturating_sub(cpu0)
}

pub fn run(rx: Receiver<Queued>, mut renderer: Box<dyn Renderer + Send>, cfg: Config) -> Done {
    // Reads the module list first, while the target surely still runs.
    let modules = SharedModules::new(cfg.source);
    let mut resolver = SharedSymbolizer::new(modules.clone());
    // Bounded like the tracer's queue: if the output is stuck, the tracer's queue fills and it stops waiting.
    let (utx, urx) = crossbeam_channel::bounded(QUEUED_RECORDS);
    let depth = cfg.stack_depth;
    let recording = cfg.recorder.is_some();
    let (known, windows) = (cfg.known, cfg.windows);
    let unwinding = std::thread::Builder::new()
        .name("syscatch-unwind".into())
        .spawn(move || unwinder(rx, utx, modules, depth, recording, known, windows))
        .expect("cannot start the unwinding thread");
    crate::os::sched::batch();
    let mut tracker = cfg.leaks.then(|| {
        let mut t = LeakTracker::window(cfg.window.0, cfg.window.1);
        t.samples = crate::analysis::samples::HeapSamples::new(cfg.malloc_every);
        t.faults = crate::analysis::faults::FaultSamples::new(cfg.fault_every);
        t
    });
    let mut seen_twice = SeenTwice::default();
    let mut nested = 0u64;
    let (rec, traced) = (cfg.recorder, cfg.traced);
    let mut interim = cfg.interim;
    // Past this time the recording keeps the leak model's changes instead of each mapping call; the stacks of
    // the model numbered below `written_stacks` are in the recording.
    let calls_until = cfg.calls_for.filter(|_| rec.is_some() && tracker.is_some());
    let (mut changing, mut written_stacks) = (false, 0u32);
    // Each sample goes to the recording at its place among the events (after the model's changes), and to the
    // leak tracker.
    let take_sample = |tracker: &mut Option<LeakTracker>, time: Option<f64>, spans: Vec<Span>, baseline: bool| {
        if let Some(r) = &rec {
            if let Some(t) = tracker.as_mut()
                && let Some((changes, nested)) = t.changes()
            {
                let time = time.unwrap_or(t.span().to);
                r.write(&Record::Changes { time, changes: Box::new(changes), nested });
            }
            r.write(&Record::Sample { spans: spans.clone(), time, baseline });
        }
        match (tracker.as_mut(), time) {
            (Some(t), Some(time)) if baseline => t.rebaseline(time, spans),
            (Some(t), _) => t.sample(time, spans),
            (None, _) => {}
        }
        if let (Some(t), Some(shared)) = (tracker.as_ref(), &traced)
            && let Ok(mut ranges) = shared.lock()
        {
            *ranges = t.traced_ranges();
        }
    };
    if let Some(b) = cfg.baseline {
        take_sample(&mut tracker, Some(0.0), b, false);
    }
    let mut costs = Costs::default();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut output_error = None;
    let mut interned = Interned::default();
    // (A test can leave the prefetch out, to see how events go out when it is over.)
    let mut prefetching = !crate::os::faults::injected("no-prefetch");
    let mut lingering = Lingering::default();
    // Events rendered since the output was last flushed.
    let mut unflushed = false;
    // This thread's CPU time not spent on events: loading the modules above, the prefetch.
    let mut aside = crate::os::sched::thread_cpu();
    loop {
        // Idle time goes to parsing the symbol tables of the modules mapped at the start, one at a time; not
        // once the trace has ended (nothing more will need them, and the end must not wait on them). Not at
        // SCHED_IDLE (tried): preempted inside its allocator's mprotect, it held syscatch's mmap_lock, and the
        // tracer's next page fault waited for it with a target thread stopped (56-138 ms on a loaded machine).
        let q = match urx.try_recv() {
            Ok(q) => q,
            Err(crossbeam_channel::TryRecvError::Empty) if prefetching => {
                // Between two modules: what was rendered goes out first (see below).
                flush_rendered(&mut *renderer, &mut unflushed, &mut output_error);
                let c0 = crate::os::sched::thread_cpu();
                prefetching = resolver.prefetch_one();
                aside += crate::os::sched::thread_cpu().saturating_sub(c0);
                continue;
            }
            // Once a nap finds nothing more, what was rendered goes out: events that come one at a time show as
            // they come (on a terminal or a pipe), and a burst is still written in large pieces.
            Err(_) => {
                match lingering.recv(&urx, &mut || flush_rendered(&mut *renderer, &mut unflushed, &mut output_error)) {
                    Some(q) => q,
                    None => break,
                }
            }
        };
        let Unwinding { ev, unwound, python, took, recorded, numbered } = match q {
            Staged::Call(u) => u,
            Staged::Changes(time, changes, nested) => {
                if let Some(t) = tracker.as_mut() {
                    t.recorded_changes(time, &changes, nested);
                }
                continue;
            }
            Staged::Sample(time, spans, baseline) => {
                take_sample(&mut tracker, time, spans, baseline);
                continue;
            }
            // (None read: the target is gone, which the leak model ignores.)
            Staged::Coming(time, regions) => {
                take_sample(&mut tracker, Some(time), regions.recv().unwrap_or_default(), false);
                if let (Some(interim), Some(t)) = (interim.as_mut(), tracker.as_ref()) {
                    interim(t, time);
                }
                continue;
            }
        };
        if crate::os::faults::injected("analysis-panic") {
            panic!("injected fault: analysis-panic");
        }
        if crate::os::faults::injected("analysis-slow") {
            std::thread::sleep(Duration::from_micros(300));
        }
        costs.events += 1;
        let depth = ev.probe.as_ref().and_then(|p| cfg.depths.get(p)).copied();
        if let Some(u) = &unwound {
            costs.unwound_frames += u.frames.len() as u64;
            costs.unwind += took;
        }
        let id = unwound.map(|u| {
            let t1 = Instant::now();
            let key = (u, python, depth);
            if let Some(&id) = interned.ids.get(&key) {
                costs.cached_frames += key.0.frames.len() as u64;
                costs.cached_time += t1.elapsed();
                return id;
            }
            let (parsed, c0) = (resolver.parsed(), crate::os::sched::thread_cpu());
            let mut s: Stack = resolver.symbolize(&key.0);
            if resolver.parsed() > parsed {
                // A module's symbol tables were loaded for this stack: a one-time cost, set aside as the prefetch.
                aside += crate::os::sched::thread_cpu().saturating_sub(c0);
            }
            crate::python::merge_python(&mut s, &key.1);
            let new = s.frames.iter().filter(|f| seen.insert(f.addr)).count() as u64;
            if new > 0 {
                costs.new_frames += new;
                costs.new_time += t1.elapsed();
            } else {
                costs.cached_frames += s.frames.len() as u64;
                costs.cached_time += t1.elapsed();
            }
            if let Some(d) = depth
                && s.frames.len() > d
            {
                s.frames.truncate(d);
                s.truncated.get_or_insert_with(|| format!("the probe's stack({d}) limit"));
            }
            let id = interned.stacks.len();
            interned.stacks.push(s);
            interned.ids.insert(key, id);
            id
        });
        let stack = id.map(|id| (id, &interned.stacks[id]));
        let leak_stack = stack.map(|(_, s)| s);
        if let (Some(t), Some(until)) = (tracker.as_mut(), calls_until)
            && ev.time >= until
        {
            t.write_changes();
            changing = true;
        }
        let leak = match (tracker.as_mut(), numbered) {
            (t, Numbered::Stack(n)) => {
                // Only its stack counts: the call is in the changes that come next.
                if let Some(t) = t {
                    t.recorded_stack(leak_stack, n);
                }
                continue;
            }
            (None, _) => None,
            (Some(t), Numbered::No) => t.event(&ev, leak_stack),
            (Some(t), Numbered::Call(n)) => {
                t.recorded_event(&ev, leak_stack, Some(n));
                None
            }
        };
        if let (Some(r), Some(mut e)) = (&rec, recorded) {
            e.leak = leak.map(|id| id.0);
            let new_stack = leak.filter(|id| id.0 >= written_stacks);
            if let Some(id) = new_stack {
                written_stacks = id.0 + 1;
            }
            if !changing || !crate::analysis::leaks::maps(&ev) {
                r.write(&Record::Event(e));
            } else if new_stack.is_some() {
                r.write(&Record::Stack(e));
            }
        }
        let repeat = seen_twice.is_repeat(&ev);
        nested += u64::from(repeat);
        let render = cfg.render_events && !repeat;
        if render && output_error.is_none() {
            unflushed = true;
        }
        if render
            && output_error.is_none()
            && let Err(e) = renderer.event_interned(&ev, stack)
        {
            // The output is gone (a closed pipe, a full disk): the trace ends, and events queued meanwhile are
            // drained so the tracer never blocks on the queue.
            output_error = Some(e);
            crate::os::signals::fault();
        }
    }
    // The changes since the last sample.
    if let (Some(r), Some(t)) = (&rec, tracker.as_mut())
        && let Some((changes, nested)) = t.changes()
    {
        r.write(&Record::Changes { time: t.span().to, changes: Box::new(changes), nested });
    }
    costs.handling = crate::os::sched::thread_cpu().saturating_sub(aside);
    costs.unwinding = unwinding.join().unwrap_or_default();
    Done { renderer, output_error, leaks: tracker, costs, nested }
}
