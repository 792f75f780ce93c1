//! Attaching: every thread of the process seized and held (rescanning `/proc/PID/task` until a pass finds no new
//! thread), or a spawned child adopted; new threads are added as they are seen.

use super::*;

impl<'a> Tracer<'a> {
    /// Seizes every thread of `cfg.pid`, rescanning `/proc/PID/task` until a pass finds no new thread, and leaves
    /// them all held (stopped) so the breakpoints are armed before any thread runs on; `run` lets them go.
    pub fn attach(cfg: Config, specs: Vec<SiteSpec>, sink: &'a mut dyn Sink) -> Result<Tracer<'a>, AttachError> {
        let started = Instant::now();
        let pid = cfg.pid;
        // Real-time from the start: a target whose threads keep every CPU busy would otherwise delay each step
        // of getting ready (the guardian's start, decoding the sites) by a round of all of them (measured with
        // 512 spinning threads on 2 CPUs: attach took 0.07 or 0.7 s depending on one preemption).
        let mut t = crate::os::sched::realtime(|| Tracer::new(cfg, specs, sink))?;
        t.realtime(|t| t.seize_all(pid, started))?;
        Ok(t)
    }

    /// Seizes every thread, rescanning until a pass finds none new.
    pub(super) fn seize_all(&mut self, pid: Tid, started: Instant) -> Result<(), Errno> {
        let t = self;
        loop {
            let tids = t.k.list_tasks(pid).map_err(|_| Errno::ESRCH)?;
            let mut new = 0;
            for tid in tids {
                if t.threads.contains_key(&tid) {
                    continue;
                }
                match t.seize_first(tid) {
                    Ok(()) => {
                        t.add_thread(tid, false);
                        new += 1;
                    }
                    // Gone, exiting, or already ours through an auto-attach: all normal while attaching.
                    Err(Errno::ESRCH) => {}
                    Err(_) if !t.threads.is_empty() => {}
                    Err(e) => return Err(e),
                }
            }
            if t.threads.is_empty() {
                return Err(Errno::ESRCH);
            }
            // Stop everything seized so far. Whether a new thread is traced is decided when its creator enters
            // clone(), but it is listed in /proc/PID/task only once clone() returns: a creator seized in between
            // makes an untraced thread the scan can miss, which would die of SIGTRAP at its first hit. A thread
            // stops only after its clone() returned, so after this the next scan sees every such thread.
            t.hold_all(None);
            if new == 0 {
                t.summary.attach = started.elapsed();
                return Ok(());
            }
        }
    }

    /// Seizes `tid`; while no thread is seized yet, a refusal (EPERM) is tried again for up to
    /// [`Self::REFUSED_FOR`] before it counts: a refusal that lasts is a real one (no permission, another tracer),
    /// one that passes is not (seen once in CI under load, attaching to a target just detached by the syscatch
    /// before it: the first seize was refused, cause not found).
    fn seize_first(&mut self, tid: Tid) -> Result<(), Errno> {
        let started = Instant::now();
        loop {
            match self.k.seize(tid) {
                Err(Errno::EPERM) if self.threads.is_empty() && started.elapsed() < Self::REFUSED_FOR => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                r => return r,
            }
        }
    }

    const REFUSED_FOR: std::time::Duration = std::time::Duration::from_millis(200);

    /// Runs `f` at real-time priority when permitted (attaching, detaching, a step with the others held).
    pub(super) fn realtime<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let k = Rc::clone(&self.k);
        let mut f = Some(f);
        let mut out = None;
        k.realtime(&mut || {
            if let Some(f) = f.take() {
                out = Some(f(self));
            }
        });
        // A kernel that never called `f`: run it at the current priority.
        match (out, f) {
            (Some(out), _) => out,
            (None, Some(f)) => f(self),
            (None, None) => unreachable!("f ran but gave nothing"),
        }
    }

    /// Adopts a process that was seized and stopped by the caller (the `-- CMD` path).
    pub fn adopt(cfg: Config, specs: Vec<SiteSpec>, sink: &'a mut dyn Sink) -> Result<Tracer<'a>, AttachError> {
        let pid = cfg.pid;
        let mut t = Tracer::new(cfg, specs, sink)?;
        t.add_thread(pid, false);
        Ok(t)
    }

    pub(super) fn add_thread(&mut self, tid: Tid, shared_child: bool) {
        self.threads.insert(
            tid,
            Thread { state: State::Running, shared_child, vfork_parent: None, passes: Default::default() },
        );
        if !shared_child {
            self.summary.threads_seen += 1;
            self.sample_faults_of(tid);
        }
    }
}
