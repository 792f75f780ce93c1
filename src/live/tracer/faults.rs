//! `--faults`: page faults sampled per thread (see `os::perf`), so that memory that grows with no call (pages first
//! touched in an arena committed before the trace, a `[heap]` grown earlier) still has stacks. Every `period`-th
//! fault a thread takes in user mode stops it with a SIGTRAP that carries the faulting address; the thread is read
//! as at a matching breakpoint (registers, a stack window, its Python frames), the event goes to the sink as
//! `page fault`, and the signal is suppressed. Only with the trap pad in place: a sample's signal that our death
//! leaves pending is dropped by the pad (it knows our cookie), never delivered to the target.
//!
//! Each sample stands for the faults its thread took since its previous one (the sampler's count, read at the
//! stop: `args[1]` of the event), so the period may change: when a process takes samples faster than [`MAX_RATE`]
//! a second (a worker that faults 80,000 times a second in memory it maps and unmaps), every sampler's period is
//! raised at once to what brings them to half of that, and it halves again (down to `--fault-every`) when they fall
//! below a quarter of it. Looked at four times a second.

use super::Tracer;
use crate::model::event::{Event, StackCapture};
use crate::model::regs::Regs;
use crate::model::window::Window;
use crate::os::Tid;
use crate::os::perf::TRAP_PERF;
use crate::x86::trappad::PERF_COOKIE;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use crate::model::watch::PAGE_FAULT as LABEL;

/// Most samples a second a process is stopped for (each costs its thread a stop and a stack copy).
pub const MAX_RATE: u64 = 100;

/// The samplers of the traced threads.
pub(super) struct Faults {
    /// `--fault-every`, and the period now.
    base: u64,
    period: u64,
    /// Each thread's sampler and its count at its last sample.
    fds: HashMap<Tid, (OwnedFd, u64)>,
    label: Arc<str>,
    /// Samples since the last look at the rate, and when that was.
    recent: u64,
    looked: Instant,
}

impl Tracer<'_> {
    /// Starts sampling on every thread (all held, the pad installed), if asked; says in one line why not when
    /// the kernel or the set-up refuses.
    pub(super) fn start_faults(&mut self) {
        let Some(period) = self.cfg.fault_every else { return };
        if self.pad.is_none() {
            self.summary
                .warnings
                .push("page faults were not sampled: --faults needs the trap pad in the target (see above)".into());
            return;
        }
        let looked = Instant::now();
        self.faults =
            Some(Faults { base: period, period, fds: HashMap::new(), label: Arc::from(LABEL), recent: 0, looked });
        let tids: Vec<Tid> = self.threads.keys().copied().collect();
        for tid in tids {
            self.sample_faults_of(tid);
        }
    }

    /// Samples a (new) thread's faults; on the kernel's refusal, sampling ends for all with one warning.
    pub(super) fn sample_faults_of(&mut self, tid: Tid) {
        let Some(f) = self.faults.as_mut() else { return };
        if self.threads.get(&tid).is_some_and(|t| t.shared_child) {
            return;
        }
        match self.k.fault_sampler(tid, f.period, PERF_COOKIE) {
            Ok(fd) => {
                f.fds.insert(tid, (fd, 0));
            }
            // The thread is gone already.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => {
                self.faults = None;
                self.summary.warnings.push(format!(
                    "page faults were not sampled: the kernel refused a perf event ({e}; perf_event_paranoid, or no \
                     CAP_PERFMON in a container?)"
                ));
            }
        }
    }

    /// A thread's sampler ends with it.
    pub(super) fn forget_faults_of(&mut self, tid: Tid) {
        if let Some(f) = self.faults.as_mut() {
            f.fds.remove(&tid);
        }
    }

    /// Ends sampling (closing the descriptors); a sample's signal already sent is taken at detach.
    pub(super) fn stop_faults(&mut self) {
        if let Some(f) = self.faults.as_mut() {
            f.fds.clear();
        }
    }

    /// Keeps the samples under [`MAX_RATE`] a second (looked at every 250 ms): above it the period is raised to
    /// what brings them to half of it, below a quarter of it the period halves (never under `--fault-every`). The
    /// highest period is in the summary.
    pub(super) fn pace_faults(&mut self) {
        let Some(f) = self.faults.as_mut() else { return };
        let secs = f.looked.elapsed().as_secs_f64();
        if secs < 0.25 {
            return;
        }
        let rate = f.recent as f64 / secs;
        let period = if rate > MAX_RATE as f64 {
            let times = (2.0 * rate / MAX_RATE as f64).ceil() as u64;
            f.period.saturating_mul(times).min(1 << 24)
        } else if rate < MAX_RATE as f64 / 4.0 {
            (f.period / 2).max(f.base)
        } else {
            f.period
        };
        (f.recent, f.looked) = (0, Instant::now());
        if period == f.period {
            return;
        }
        f.period = period;
        for (fd, _) in f.fds.values() {
            let _ = self.k.fault_period(fd, period);
        }
        self.summary.fault_period_max = self.summary.fault_period_max.max(period);
    }

    /// Whether `tid`'s SIGTRAP stop is one of our page-fault samples: its faulting address.
    pub(super) fn our_fault_sample(&self, tid: Tid) -> Option<u64> {
        self.cfg.fault_every?;
        match self.k.sample_info(tid) {
            Ok((TRAP_PERF, addr, PERF_COOKIE)) => Some(addr),
            _ => None,
        }
    }

    /// At a SIGTRAP stop: if it is a page-fault sample of ours, reads the thread, sends the event and resumes it
    /// with the signal suppressed. Returns whether it was.
    pub(super) fn on_fault_sample(&mut self, tid: Tid, seen: Instant) -> bool {
        let Some(addr) = self.our_fault_sample(tid) else { return false };
        let Ok(regs) = self.k.get_regs(tid) else { return true };
        self.summary.fault_samples += 1;
        // The faults this sample stands for: its thread's since its previous sample.
        let mut weight = 0;
        if let Some(f) = self.faults.as_mut() {
            f.recent += 1;
            if let Some((fd, last)) = f.fds.get_mut(&tid) {
                let now = self.k.fault_count(fd).unwrap_or(*last + f.period);
                weight = now.saturating_sub(*last);
                *last = now;
            }
        }
        let label = self.faults.as_ref().map_or_else(|| Arc::from(LABEL), |f| f.label.clone());
        let capture = self.fault_capture(tid, &regs);
        let ev = Event {
            time: self.start.elapsed().as_secs_f64(),
            tid,
            probe: None,
            func: Some(label),
            nr: 0,
            args: [addr, weight, 0, 0, 0, 0],
            regs: Vec::new(),
            ret: None,
            ret_missing: None,
            capture,
            also: Vec::new(),
        };
        self.summary.stopped += seen.elapsed();
        self.resume(tid, 0);
        self.emit(ev);
        true
    }

    /// Registers, a stack window and the Python frames of a thread stopped after a fault: frame 0 is the
    /// faulting instruction (it runs again when resumed).
    fn fault_capture(&mut self, tid: Tid, regs: &Regs) -> Option<StackCapture> {
        let (len, sp) = (self.cfg.stack_bytes, regs.sp());
        if len == 0 {
            return None;
        }
        let stack = Window::filled_from(&self.windows, |b| self.k.read_into(tid, sp, len, b));
        if stack.is_empty() {
            return None;
        }
        let k = &*self.k;
        let more = crate::live::sigstack::read_interrupted(
            |a, n, b| k.read_into(tid, a, n, b),
            &self.cfg.restorers,
            sp,
            &stack,
            len,
        );
        let python = self.cfg.python.as_mut().map(|p| p.read_frames(tid, regs, &stack)).unwrap_or_default();
        Some(StackCapture { regs: *regs, stack, asked: len, python, more, known: None, known_id: None })
    }
}
