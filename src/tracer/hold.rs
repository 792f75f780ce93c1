//! Stopping threads: all of them to detach, or all but one while that one single-steps an instruction the
//! emulator cannot run with the original byte briefly back in place.

use super::{State, Thread, Tracer};
use crate::breakpoints::INT3;
use crate::event::End;
use crate::guardian::Msg;
use crate::os::ptrace::{self, Stop};
use crate::os::regs::Regs;
use crate::os::{Tid, procfs, signals};
use crate::procinfo;
use std::time::{Duration, Instant};

impl Tracer<'_> {
    /// Interrupts every running thread except `except` and waits until each is held (handling whatever they
    /// report on the way). Bounded: a thread that never stops (it cannot, short of a kernel bug) is given up on.
    pub(super) fn hold_all(&mut self, except: Option<Tid>) {
        for (&tid, t) in &self.threads {
            if Some(tid) != except && !matches!(t.state, State::Held { .. }) {
                let _ = ptrace::interrupt(tid);
            }
        }
        let give_up = Instant::now() + Duration::from_secs(10);
        while self.threads.iter().any(|(&t, th)| Some(t) != except && !matches!(th.state, State::Held { .. }))
            && Instant::now() < give_up
        {
            match ptrace::wait_any(false) {
                Ok(Some((tid, stop))) if Some(tid) == except => {
                    // The stepping thread is stopped at its trap: only its death can be reported.
                    match stop {
                        Stop::Exited(c) => self.gone(tid, End::Exited(c)),
                        Stop::Killed(s) => self.gone(tid, End::Killed(s)),
                        _ => {}
                    }
                }
                Ok(Some((tid, stop))) => self.hold(tid, stop),
                Ok(None) => {}
                Err(_) => self.threads.retain(|&t, _| Some(t) == except),
            }
        }
    }

    /// One stop while holding: record it, keep the thread stopped.
    fn hold(&mut self, tid: Tid, stop: Stop) {
        if !self.threads.contains_key(&tid) {
            let status = procfs::read_status(tid).map(|s| procinfo::parse_status(&s)).unwrap_or_default();
            if status.tgid != self.cfg.pid {
                self.early.insert(tid, stop);
                return;
            }
            self.add_thread(tid, false);
        }
        let (mut sig, mut group) = (0, false);
        match stop {
            Stop::Exited(code) => return self.gone(tid, End::Exited(code)),
            Stop::Killed(s) => return self.gone(tid, End::Killed(s)),
            Stop::Signal(libc::SIGTRAP) => {
                let after = match self.threads.get(&tid).map(|t| &t.state) {
                    Some(State::Stepping { after, .. }) => Some(*after),
                    _ => None,
                };
                match ptrace::get_regs(tid) {
                    Ok(r) if Some(r.ip()) == after => {
                        sig = super::own_sigtrap(tid);
                        // The step is done: the event is complete, and the thread runs on (CONT, not another
                        // step whose trap would be taken for the target's own SIGTRAP) when let go.
                        if let Some(t) = self.threads.get_mut(&tid)
                            && let State::Stepping { mut ev, .. } = std::mem::replace(&mut t.state, State::Running)
                        {
                            super::set_syscall_result(&mut ev, r.0.rax);
                            self.emit(*ev);
                        }
                    }
                    // A slow-path step through the wrapper's prefix: ours; it steps on when let go.
                    Ok(r) if after.is_some_and(|a| r.ip() < a && r.ip() >= a.saturating_sub(64)) => {}
                    Ok(r) if self.fast_int3(r.ip().wrapping_sub(1)) => {
                        // Stopped at the trampoline's int3: the call is complete; the thread runs on from here.
                        if let Some(ev) = self.fast_event(tid, &r) {
                            self.emit(ev);
                        }
                    }
                    Ok(mut r)
                        if self.planted(r.ip().wrapping_sub(1))
                            || self.retired.contains_key(&r.ip().wrapping_sub(1)) =>
                    {
                        // A hit seen while holding: rewound, it hits again (or runs the original) when let go.
                        r.set_ip(r.ip() - 1);
                        let _ = ptrace::set_regs(tid, &r);
                    }
                    _ => {
                        self.settle_step(tid, libc::SIGTRAP);
                        sig = libc::SIGTRAP;
                    }
                }
            }
            Stop::Signal(s) => {
                self.settle_step(tid, s);
                sig = s;
            }
            Stop::GroupStop(_) => group = true,
            Stop::Clone(new) | Stop::Fork(new) | Stop::Vfork(new) => {
                self.on_child(new);
                if let Some(t) = self.threads.get(&new)
                    && t.shared_child
                {
                    let _ = ptrace::interrupt(new);
                }
            }
            Stop::Exec => {
                self.on_exec(tid);
                return;
            }
            Stop::Interrupted | Stop::VforkDone => {}
        }
        if let Some(t) = self.threads.get_mut(&tid) {
            let prev = match std::mem::replace(&mut t.state, State::Running) {
                State::Held { prev, sig: s, group: g } => {
                    sig = if sig == 0 { s } else { sig };
                    group |= g;
                    prev
                }
                other => Box::new(other),
            };
            t.state = State::Held { sig, group, prev };
        }
    }

    /// Lets every held thread go, each the way it was going.
    pub(super) fn release_all(&mut self) {
        let tids: Vec<Tid> = self.threads.keys().copied().collect();
        for tid in tids {
            let Some(t) = self.threads.get_mut(&tid) else { continue };
            let State::Held { sig, group, prev } = std::mem::replace(&mut t.state, State::Running) else {
                continue;
            };
            t.state = *prev;
            if group {
                let _ = ptrace::listen(tid);
            } else {
                self.resume(tid, sig);
            }
        }
    }

    /// Single-steps the instruction at `regs.ip()` (a breakpoint site) with every other thread stopped, so no
    /// thread can pass the site while its original byte is back. Correct, slow, counted.
    pub(super) fn step_alone(&mut self, tid: Tid, regs: Regs) {
        crate::os::sched::realtime(|| self.step_alone_now(tid, regs))
    }

    fn step_alone_now(&mut self, tid: Tid, regs: Regs) {
        self.summary.slow_path += 1;
        let addr = regs.ip();
        self.hold_all(Some(tid));
        let orig = self.sites.get(&addr).map(|s| s.orig);
        let mut sig = 0;
        if let Some(orig) = orig
            && self.mem.write_all(addr, &[orig]).is_ok()
        {
            if ptrace::set_regs(tid, &regs).is_ok() && ptrace::step(tid, 0).is_ok() {
                loop {
                    match ptrace::wait_for(tid, false) {
                        Ok(Some((_, Stop::Signal(libc::SIGTRAP)))) => break,
                        Ok(Some((_, Stop::Signal(s)))) => {
                            // A signal came first: the instruction did not run. Deliver the signal now; the
                            // handler returns to the site, which is armed again and hit again.
                            sig = s;
                            break;
                        }
                        Ok(Some((_, Stop::Exited(c)))) => {
                            self.gone(tid, End::Exited(c));
                            break;
                        }
                        Ok(Some((_, Stop::Killed(s)))) => {
                            self.gone(tid, End::Killed(s));
                            break;
                        }
                        Ok(Some(_)) | Ok(None) => {}
                        Err(_) => break,
                    }
                }
            }
            let _ = self.mem.write_all(addr, &[INT3]);
        }
        self.release_all();
        if self.threads.contains_key(&tid) {
            self.resume(tid, sig);
        }
    }

    /// Stops every thread, drains the SIGTRAPs our int3s and single steps may still have queued, restores the
    /// original bytes, rewinds any thread sitting just past an int3, and detaches everything.
    pub fn detach_all(&mut self) {
        if self.detached {
            return;
        }
        crate::os::sched::realtime(|| self.detach_all_now());
    }

    fn detach_all_now(&mut self) {
        self.detached = true;
        let started = Instant::now();
        signals::stop_timer();
        self.hold_all(None);
        let tids: Vec<Tid> = self.threads.keys().copied().collect();
        for &tid in &tids {
            self.drain_traps(tid);
        }
        // Before the loop below marks threads that were stepping a call as running: the pad's system call must
        // run on a thread that was really running when it was held.
        self.remove_pad();
        for &tid in &tids {
            let Some(Thread { state: State::Held { prev, .. }, .. }) = self.threads.get_mut(&tid) else {
                continue;
            };
            if let State::Stepping { ev, .. } = std::mem::replace(prev.as_mut(), State::Running) {
                let mut ev = *ev;
                if ev.ret.is_none() {
                    // The thread enters (or restarts) the syscall by itself after detach.
                    ev.ret_missing = Some("the trace ended before the call returned".into());
                }
                self.emit(ev);
            }
        }
        let waiting: Vec<_> = self.sites.values_mut().flat_map(|s| s.waiting.drain(..)).collect();
        for (_, _, mut ev) in waiting {
            ev.ret_missing = Some("the trace ended before the call returned".into());
            self.emit(*ev);
        }
        self.release_early_children();
        self.restore_all();
        self.unpatch();
        for tid in tids {
            let sig = match self.threads.get(&tid).map(|t| &t.state) {
                Some(State::Held { sig, .. }) => *sig,
                _ => 0,
            };
            let _ = ptrace::detach(tid, sig);
        }
        self.threads.clear();
        self.tell(Msg::Done);
        self.summary.detach = started.elapsed();
    }

    /// Children whose first stop came but whose parent's fork event was never handled (the trace ended in
    /// between): like any fork child, they get the original bytes back, unless they share our memory.
    fn release_early_children(&mut self) {
        for (child, stop) in std::mem::take(&mut self.early) {
            if matches!(stop, Stop::Exited(_) | Stop::Killed(_)) {
                continue;
            }
            if self.armed
                && !ptrace::same_vm(child, self.cfg.pid)
                && let Ok(child_mem) = crate::os::mem::ProcMem::open(child)
            {
                self.clean_child(&child_mem);
                self.summary.forks_cleaned += 1;
            }
            let _ = ptrace::detach(child, 0);
        }
    }

    /// Puts every original byte back, but only where the byte is still our int3.
    pub(super) fn restore_all(&mut self) {
        if !self.armed {
            return;
        }
        let mut warnings = Vec::new();
        for site in self.sites.values() {
            let mut b = [0u8; 1];
            match self.mem.read_exact(site.addr, &mut b) {
                Ok(()) if b[0] == INT3 => {
                    if let Err(e) = self.mem.write_all(site.addr, &[site.orig]) {
                        warnings.push(format!("could not restore the byte at {:#x}: {e}", site.addr));
                    }
                }
                Ok(()) => warnings.push(format!(
                    "the breakpoint byte at {:#x} was changed by someone else (now {:#04x}); left as it is",
                    site.addr, b[0]
                )),
                Err(_) => {}
            }
        }
        self.summary.warnings.extend(warnings);
        self.retired.extend(self.sites.values().map(|s| (s.addr, s.orig)));
        self.armed = false;
    }

    fn sigtrap_pending(&self, tid: Tid) -> bool {
        procfs::read_task_status(self.cfg.pid, tid)
            .or_else(|_| procfs::read_status(tid))
            .map(|s| procinfo::parse_status(&s).sig_pnd & (1 << (libc::SIGTRAP - 1)) != 0)
            .unwrap_or(false)
    }

    /// A stopped thread may still have a SIGTRAP queued by our int3 or by the single step of a matching call:
    /// the interrupt trap is reported before pending signals, and once detached that SIGTRAP would kill the
    /// thread. Let each such signal stop happen (SIGTRAP is synchronous, so it is dequeued first), and suppress
    /// it when it is ours: an int3 hit is rewound onto the restored instruction, a finished step gives rax.
    fn drain_traps(&mut self, tid: Tid) {
        for _ in 0..4 {
            if !self.sigtrap_pending(tid) || ptrace::cont(tid, 0).is_err() {
                return;
            }
            let Ok(stop) = ptrace::wait_stop(tid) else { return };
            match stop {
                Stop::Exited(code) => return self.gone(tid, End::Exited(code)),
                Stop::Killed(sig) => return self.gone(tid, End::Killed(sig)),
                Stop::Signal(libc::SIGTRAP) => {
                    let Ok(mut r) = ptrace::get_regs(tid) else { return };
                    if self.fast_int3(r.ip().wrapping_sub(1)) {
                        if let Some(ev) = self.fast_event(tid, &r) {
                            self.emit(ev);
                        }
                        continue;
                    }
                    let ours =
                        self.planted(r.ip().wrapping_sub(1)) || self.retired.contains_key(&r.ip().wrapping_sub(1));
                    let Some(Thread { state: State::Held { sig, prev, .. }, .. }) = self.threads.get_mut(&tid) else {
                        return;
                    };
                    match prev.as_mut() {
                        State::Stepping { ev, after, .. } if r.ip() == *after => super::set_syscall_result(ev, r.0.rax),
                        State::Stepping { after, .. } if r.ip() < *after && r.ip() >= after.saturating_sub(64) => {}
                        _ if ours => {
                            r.set_ip(r.ip() - 1);
                            let _ = ptrace::set_regs(tid, &r);
                        }
                        _ => {
                            // The target's own SIGTRAP: it gets it at detach.
                            *sig = libc::SIGTRAP;
                            return;
                        }
                    }
                }
                Stop::Signal(s) => {
                    if let Some(Thread { state: State::Held { sig, .. }, .. }) = self.threads.get_mut(&tid) {
                        *sig = s;
                    }
                    return;
                }
                _ => {}
            }
        }
    }
}
