//! Threads and processes that come and go while traced: fork and clone children (a fork child inherits our
//! bytes and is cleaned before it runs), and exec (the traced program is gone).

use super::*;

impl Tracer<'_> {
    /// A new thread or child process `new`, reported by its parent's (`parent`) clone/fork/vfork event.
    pub(super) fn on_child(&mut self, parent: Tid, new: Tid) {
        if new <= 0 || self.threads.contains_key(&new) {
            return;
        }
        let status = self.k.read_status(new).map(|s| status::parse_status(&s)).unwrap_or_default();
        if status.tgid == self.cfg.pid {
            self.add_thread(new, false);
            if let Some(stop) = self.early.remove(&new) {
                self.handle(new, stop, Instant::now());
            }
            return;
        }
        // A child process. Its first stop comes before it runs any code; if it does not come in time (a loaded
        // machine, a child stuck in the kernel) the child is dealt with all the same (it cannot run before that
        // stop) and detached when the stop comes; the creator runs on meanwhile.
        let first = match self.early.remove(&new) {
            Some(s) => Ok(s),
            None => self.wait_bounded(new, hold::HOLD_LIMIT),
        };
        let stopped = match first {
            Ok(Stop::Exited(_) | Stop::Killed(_)) => return,
            Ok(_) => true,
            Err(_) if self.k.read_status(new).is_err() => return,
            Err(_) => false,
        };
        if self.k.same_vm(new, self.cfg.pid) {
            // vfork/CLONE_VM: it shares our memory and our int3s; restoring the bytes would blind the parent.
            // Keep it traced and handle its hits until it execs or exits.
            self.add_thread(new, true);
            if let Some(t) = self.threads.get_mut(&new) {
                t.vfork_parent = Some(parent);
            }
            // Not stopped yet: its first stop is handled as any thread's (an interrupt stop, resumed).
            if stopped {
                self.resume(new, 0);
            }
            return;
        }
        // fork: the child has its own copy of every int3; put the original bytes back before it runs.
        if self.armed
            && let Ok(child_mem) = self.k.open_mem(new)
        {
            self.clean_child(&*child_mem);
        }
        self.summary.forks_cleaned += 1;
        if stopped {
            let _ = self.k.detach(new, 0);
        } else {
            self.late.insert(new, Late::ForkChild);
        }
    }

    /// Puts the original bytes back in a fork child's copy of the memory: every planted site, and every return
    /// site retired since the fork copied its int3 (its call returned before the fork event was handled).
    pub(super) fn clean_child(&self, child: &dyn Mem) {
        for site in self.sites.values() {
            let _ = site.unplant(child);
        }
        for (&addr, &(orig, guard)) in &self.retired {
            let mut b = [0u8; 1];
            if let Some(g) = guard
                && child.read_exact(addr + 1, &mut b).is_ok()
                && b[0] == INT3
            {
                let _ = child.write_all(addr + 1, &[g]);
            }
            if child.read_exact(addr, &mut b).is_ok() && b[0] == INT3 {
                let _ = child.write_all(addr, &[orig]);
            }
        }
        self.fast_restore_in(child);
    }

    pub(super) fn on_exec(&mut self, tid: Tid) {
        if self.threads.get(&tid).is_some_and(|t| t.shared_child) {
            // A vfork child exec'd: it has a fresh address space without our int3s.
            self.threads.remove(&tid);
            let _ = self.k.detach(tid, 0);
            return;
        }
        // The target replaced its program: our breakpoints are gone with the old address space. The exec'ing
        // thread now has the leader's id; other threads report their exit.
        self.armed = false;
        let waiting: Vec<_> = self.sites.drain().flat_map(|(_, s)| s.waiting).collect();
        self.retired.clear();
        // The old program's last calls written to `--fast`'s ring (read from syscatch's own mapping of it).
        self.drain_ring(true);
        self.fast = None;
        self.pad = None;
        self.gate = super::inject::Gate::Untried;
        self.tell(Msg::Exec);
        // Calls still open end here. An execve being stepped on the thread the event names (the leader's id, which
        // the exec'ing thread has taken) is the call that succeeded (a failed one returns without the event): its
        // result is 0. Any other call vanishes with the old program.
        let replaced = "the program was replaced (execve) before the call returned";
        let mut ended = Vec::new();
        for (&t, th) in self.threads.iter_mut().filter(|(t, th)| **t == tid || !th.shared_child) {
            if let Some(mut ev) = take_call(&mut th.state) {
                if t == tid && [libc::SYS_execve, libc::SYS_execveat].contains(&(ev.nr as i64)) {
                    set_syscall_result(&mut ev, 0);
                } else {
                    ev.ret_missing = Some(replaced.into());
                }
                ended.push(*ev);
            }
        }
        for (_, _, mut ev) in waiting {
            ev.ret_missing = Some(replaced.into());
            ended.push(*ev);
        }
        for ev in ended {
            self.emit(ev);
        }
        self.threads.retain(|&t, th| t == tid || th.shared_child);
        if tid != self.cfg.pid
            && let Some(th) = self.threads.remove(&tid)
        {
            self.threads.insert(self.cfg.pid, th);
        }
        self.leader_status = Some(End::Exec);
        if let Some(th) = self.threads.get_mut(&self.cfg.pid) {
            th.state = State::Held { sig: 0, group: false, prev: Box::new(State::Running) };
        }
    }
}

/// The call a thread is stepping (held or not), taken out of its state.
fn take_call(state: &mut State) -> Option<Box<Event>> {
    let s = match state {
        State::Held { prev, .. } => prev.as_mut(),
        s => s,
    };
    match std::mem::replace(s, State::Running) {
        State::Stepping { ev, .. } => Some(ev),
        other => {
            *s = other;
            None
        }
    }
}
