//! `--faults`: page faults sampled per thread (see `os::perf`), so that memory that grows with no call (pages first
//! touched in an arena committed before the trace, a `[heap]` grown earlier) still has stacks. Every `period`-th
//! fault a thread takes in user mode stops it with a SIGTRAP that carries the faulting address; the thread is read
//! as at a matching breakpoint (registers, a stack window, its Python frames), the event goes to the sink as
//! `page fault`, and the signal is suppressed. Only with the trap pad in place: a sample's signal that our death
//! leaves pending is dropped by the pad (it knows our cookie), never delivered to the target.

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

/// The samplers of the traced threads.
pub(super) struct Faults {
    period: u64,
    fds: HashMap<Tid, OwnedFd>,
    label: Arc<str>,
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
        self.faults = Some(Faults { period, fds: HashMap::new(), label: Arc::from(LABEL) });
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
                f.fds.insert(tid, fd);
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
        let label = self.faults.as_ref().map_or_else(|| Arc::from(LABEL), |f| f.label.clone());
        let capture = self.fault_capture(tid, &regs);
        let ev = Event {
            time: self.start.elapsed().as_secs_f64(),
            tid,
            probe: None,
            func: Some(label),
            nr: 0,
            args: [addr, 0, 0, 0, 0, 0],
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
