//! The analysis thread: unwinds and symbolizes each captured event off the tracer's thread, renders it, feeds the
//! leak tracker, and samples /proc/PID/smaps on a timer (no ptrace: the target is not stopped for it).

use crate::event::Event;
use crate::leaks::LeakTracker;
use crate::os::Tid;
use crate::report::Renderer;
use crate::stack::Stack;
use crate::unwind_modules::StackResolver;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Config {
    pub pid: Tid,
    pub stack_depth: usize,
    /// A probe's own `stack(N)` limit, by probe name.
    pub depths: HashMap<Arc<str>, usize>,
    /// Leak tracking, sampling smaps this often.
    pub leaks: Option<Duration>,
    /// The first smaps sample, taken before the breakpoints were armed.
    pub baseline: Vec<crate::smaps::SmapsRegion>,
    /// Render each event (report mode without `-o FILE` renders none: only the report is wanted).
    pub render_events: bool,
}

/// Time spent unwinding and symbolizing, for the summary.
#[derive(Default)]
pub struct Costs {
    unwound_frames: u64,
    unwind: Duration,
    new_frames: u64,
    new_time: Duration,
    cached_frames: u64,
    cached_time: Duration,
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
}

pub struct Done {
    pub renderer: Box<dyn Renderer + Send>,
    /// The first error writing an event (a closed pipe, a full disk): the trace was asked to stop then.
    pub output_error: Option<std::io::Error>,
    pub leaks: Option<LeakTracker>,
    pub costs: Costs,
}

pub fn run(rx: Receiver<Event>, mut renderer: Box<dyn Renderer + Send>, cfg: Config) -> Done {
    // Reads the module list first, while the target surely still runs.
    let mut resolver = StackResolver::new(cfg.pid, cfg.stack_depth);
    let mut tracker = cfg.leaks.map(|_| LeakTracker::new());
    let every = cfg.leaks.unwrap_or(Duration::from_secs(3600));
    if let Some(t) = tracker.as_mut() {
        t.sample(cfg.baseline);
    }
    let mut next_sample = Instant::now() + every;
    let mut costs = Costs::default();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut output_error = None;
    loop {
        let ev = match rx.recv_timeout(next_sample.saturating_duration_since(Instant::now())) {
            Ok(ev) => Some(ev),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if let Some(t) = tracker.as_mut()
            && Instant::now() >= next_sample
        {
            t.sample(crate::os::procfs::read_smaps_regions(cfg.pid));
            next_sample = Instant::now() + every;
        }
        let Some(ev) = ev else { continue };
        if crate::crash::injected("analysis-panic") {
            panic!("injected fault: analysis-panic");
        }
        let stack = ev.capture.as_ref().map(|c| {
            let t0 = Instant::now();
            let u = resolver.unwind(c);
            let t1 = Instant::now();
            let mut s: Stack = resolver.symbolize(&u);
            crate::python::merge_python(&mut s, &c.python);
            let t2 = Instant::now();
            let frames = s.frames.len() as u64;
            let new = s.frames.iter().filter(|f| seen.insert(f.addr)).count() as u64;
            costs.unwound_frames += frames;
            costs.unwind += t1 - t0;
            if new > 0 {
                costs.new_frames += new;
                costs.new_time += t2 - t1;
            } else {
                costs.cached_frames += frames;
                costs.cached_time += t2 - t1;
            }
            if let Some(&d) = ev.probe.as_ref().and_then(|p| cfg.depths.get(p))
                && s.frames.len() > d
            {
                s.frames.truncate(d);
                s.truncated.get_or_insert_with(|| format!("the probe's stack({d}) limit"));
            }
            s
        });
        if let Some(t) = tracker.as_mut() {
            t.event(&ev, stack.as_ref());
        }
        if cfg.render_events
            && output_error.is_none()
            && let Err(e) = renderer.event(&ev, stack.as_ref())
        {
            // The output is gone (a closed pipe, a full disk): the trace ends, and events queued meanwhile are
            // drained so the tracer never blocks on the queue.
            output_error = Some(e);
            crate::os::signals::fault();
        }
    }
    Done { renderer, output_error, leaks: tracker, costs }
}
