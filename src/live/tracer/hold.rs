//! Stopping threads: all of them to detach, or all but one while that one single-steps an instruction the
//! emulator cannot run with the original byte briefly back in place.

use super::error::Stuck;
use super::fast::FastStop;
use super::{Late, State, Thread, Tracer};
use crate::live::guardian::Msg;
use crate::model::event::End;
use crate::model::regs::Regs;
use crate::model::status;
use crate::os::Tid;
use crate::os::ptrace::Stop;
use crate::x86::breakpoints::INT3;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The longest [`Tracer::hold_all`] (or any wait for one thread) waits for threads that might still stop.
pub(super) const HOLD_LIMIT: Duration = Duration::from_millis(500);
/// How long detach waits for threads that could not stop to stop once the others are let go.
const LATE_LIMIT: Duration = Duration::from_millis(500);
/// How long a thread in uninterruptible sleep (a page fault on slow storage, a killable kernel wait) is waited
/// for before it is taken as unable to stop.
const D_GRACE: Duration = Duration::from_millis(100);

impl Tracer<'_> {
    /// Interrupts every running thread except `except` and waits until each is held (handling whatever they
    /// report on the way), but never for a thread that cannot stop: a vfork parent sleeps in the kernel until its
    /// child (traced, maybe held by us) execs or exits, a zombie never stops again, and a thread in uninterruptible
    /// sleep may stay there. Those are left out and returned with the reason; their interrupt stays pending, so
    /// they stop (and are handled as usual) once they can. Bounded by [`HOLD_LIMIT`] in all cases.
    pub(super) fn hold_all(&mut self, except: Option<Tid>) -> Vec<(Tid, Stuck)> {
        for (&tid, t) in &self.threads {
            if Some(tid) != except && !matches!(t.state, State::Held { .. }) {
                let _ = self.k.interrupt(tid);
            }
        }
        let started = self.k.now();
        let mut stuck: HashMap<Tid, Stuck> = HashMap::new();
        let mut nap = Duration::from_micros(20);
        loop {
            let pending: Vec<Tid> = self
                .threads
                .iter()
                .filter(|&(&t, th)| Some(t) != except && !matches!(th.state, State::Held { .. }))
                .map(|(&t, _)| t)
                .filter(|t| !stuck.contains_key(t))
                .collect();
            if pending.is_empty() {
                break;
            }
            // Polled, not blocking: a blocking wait would never return if every pending thread is stuck (and the
            // SIGALRM tick that breaks waits is off during detach).
            match self.k.wait_any(true) {
                Ok(Some((tid, stop))) => {
                    if Some(tid) == except {
                        // The stepping thread is stopped at its trap: only its death can be reported.
                        match stop {
                            Stop::Exited(c) => self.gone(tid, End::Exited(c)),
                            Stop::Killed(s) => self.gone(tid, End::Killed(s)),
                            _ => {}
                        }
                    } else {
                        self.hold(tid, stop);
                    }
                    nap = Duration::from_micros(20);
                    // A steady stream of stops must not postpone the limit forever.
                    if self.k.now().saturating_duration_since(started) < HOLD_LIMIT {
                        continue;
                    }
                }
                Ok(None) => {}
                Err(_) => {
                    self.threads.retain(|&t, _| Some(t) == except);
                    break;
                }
            }
            let waited = self.k.now().saturating_duration_since(started);
            for tid in pending {
                if let Some(why) = self.cannot_stop(tid, waited) {
                    stuck.insert(tid, why);
                }
            }
            if waited >= HOLD_LIMIT {
                for (&tid, th) in &self.threads {
                    if Some(tid) != except && !matches!(th.state, State::Held { .. }) {
                        stuck.entry(tid).or_insert(Stuck::NoStop { ms: HOLD_LIMIT.as_millis() });
                    }
                }
                break;
            }
            self.k.sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
        let mut left: Vec<(Tid, Stuck)> = stuck
            .into_iter()
            .filter(|(t, _)| self.threads.get(t).is_some_and(|th| !matches!(th.state, State::Held { .. })))
            .collect();
        left.sort_unstable_by_key(|&(tid, _)| tid);
        left
    }

    /// Waits for `tid`'s next stop, never for ever: by the rules of [`Tracer::hold_all`] (a vfork parent, a
    /// zombie, a thread in uninterruptible sleep past its grace cannot stop now) and at most `limit`. Err: why not;
    /// the thread runs on, and the caller records in `late` what its stop must settle when it comes.
    pub(super) fn wait_bounded(&self, tid: Tid, limit: Duration) -> Result<Stop, Stuck> {
        let started = self.k.now();
        let mut nap = Duration::from_micros(10);
        loop {
            match self.k.wait_for(tid, true) {
                Ok(Some((_, stop))) => return Ok(stop),
                Ok(None) => {}
                Err(e) => return Err(Stuck::Wait(e)),
            }
            let waited = self.k.now().saturating_duration_since(started);
            // /proc is read only once the wait is no longer short (a step or a clone ends in microseconds).
            if waited >= Duration::from_millis(1)
                && let Some(why) = self.cannot_stop(tid, waited)
            {
                return Err(why);
            }
            if waited >= limit {
                return Err(Stuck::NoStop { ms: limit.as_millis() });
            }
            if nap < Duration::from_micros(80) {
                self.k.yield_now();
            } else {
                self.k.sleep(nap);
            }
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    /// The stop of a thread a bounded wait gave up on: settles what that wait left (see [`Late`]) before the
    /// stop is handled. None: the stop is used up here.
    pub(super) fn settle_late(&mut self, tid: Tid, stop: Stop) -> Option<Stop> {
        let Some(late) = self.late.remove(&tid) else { return Some(stop) };
        let late = match late {
            // Gone, or its program replaced (exec: registers saved from the old program mean nothing now).
            _ if matches!(stop, Stop::Exited(_) | Stop::Killed(_) | Stop::Exec) => return Some(stop),
            Late::ForkChild => {
                let _ = self.k.detach(tid, 0);
                return None;
            }
            Late::Injected(saved) => {
                let (regs, mask) = *saved;
                let _ = self.k.set_regs(tid, &regs);
                let _ = self.k.set_sigmask(tid, mask);
                Late::Trap
            }
            Late::Trap => Late::Trap,
            Late::Gate(saved) => {
                let (regs, mask, entered) = *saved;
                let at_gate = stop == Stop::Syscall && self.in_gate_after_syscall(tid);
                if stop == Stop::Syscall && !(entered && at_gate) {
                    // The entry stop (or another call's): on to the exit.
                    let entered = entered || at_gate;
                    self.late.insert(tid, Late::Gate(Box::new((regs, mask, entered))));
                    let _ = self.k.syscall(tid);
                    return None;
                }
                // The exit stop (or, before the call, a signal or our pending interrupt): back where it was.
                let _ = self.k.set_sigmask(tid, mask);
                let _ = self.k.set_regs(tid, &regs);
                // Out of the gate: the guardian may put its bytes back again.
                self.gate_told(true);
                return Some(if stop == Stop::Syscall { Stop::Interrupted } else { stop });
            }
        };
        // Our trap (a kernel-made SIGTRAP: si_code > 0) is swallowed; if another stop came first while it is
        // still pending, the next stop settles it.
        if stop == Stop::Signal(libc::SIGTRAP) && self.k.sig_code(tid).is_ok_and(|c| c > 0) {
            return Some(Stop::Interrupted);
        }
        if self.sigtrap_pending(tid) {
            self.late.insert(tid, late);
        }
        Some(stop)
    }

    /// Why thread `tid`, interrupted `waited` ago and not stopped yet, cannot stop now (None: it may still).
    fn cannot_stop(&self, tid: Tid, waited: Duration) -> Option<Stuck> {
        if let Some((&child, _)) = self.threads.iter().find(|(_, t)| t.vfork_parent == Some(tid)) {
            return Some(Stuck::VforkParent { child });
        }
        let status = self.k.read_status(tid).ok().map(|s| status::parse_status(&s))?;
        match status.state {
            'Z' | 'X' => Some(Stuck::Zombie),
            'D' if waited >= D_GRACE => {
                let wchan = self.k.read_wchan(tid).unwrap_or_default();
                let wchan = wchan.trim();
                Some(if wchan.is_empty() || wchan == "0" {
                    Stuck::Uninterruptible
                } else {
                    Stuck::UninterruptibleIn { wchan: wchan.to_string() }
                })
            }
            _ => None,
        }
    }

    /// One stop while holding: record it, keep the thread stopped. A signal is delivered at once (see
    /// [`Tracer::deliver_now`]), never kept here for later.
    pub(super) fn hold(&mut self, tid: Tid, stop: Stop) {
        self.hold_stop(tid, stop, true);
    }

    /// [`Tracer::hold`]; `deliver`: false for the stop that follows a delivery (a second signal stop there, which
    /// the kernel does not make, would be kept rather than delivered in turn).
    fn hold_stop(&mut self, tid: Tid, stop: Stop, deliver: bool) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.passes.guess = None;
        }
        let Some(stop) = self.settle_late(tid, stop) else { return };
        if !self.threads.contains_key(&tid) {
            let status = self.k.read_status(tid).map(|s| status::parse_status(&s)).unwrap_or_default();
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
                match self.k.get_regs(tid) {
                    Ok(r) if Some(r.ip()) == after => {
                        sig = super::own_sigtrap(&*self.k, tid);
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
                        match self.fast_event(tid, &r, None) {
                            Some(FastStop::Event(ev)) => {
                                sig = self.sent_sigtrap(tid);
                                self.emit(*ev);
                            }
                            Some(FastStop::Reported) => sig = self.repeated_sigtrap(tid),
                            None => {}
                        }
                    }
                    Ok(mut r)
                        if self.planted(r.ip().wrapping_sub(1))
                            || self.retired.contains_key(&r.ip().wrapping_sub(1)) =>
                    {
                        // A hit seen while holding: rewound, it hits again (or runs the original) when let go.
                        r.set_ip(r.ip() - 1);
                        let _ = self.k.set_regs(tid, &r);
                    }
                    _ => {
                        self.settle_step(tid, libc::SIGTRAP);
                        sig = libc::SIGTRAP;
                    }
                }
            }
            Stop::Signal(s) => {
                self.settle_step(tid, s);
                let delivered = deliver && self.deliver_now(tid, s);
                // Where a SIGKILL of syscatch used to lose the signal (a test stops syscatch here).
                crate::os::faults::stop_here("held-signal");
                if delivered {
                    return;
                }
                sig = s;
            }
            Stop::GroupStop(_) => group = true,
            Stop::Clone(new) | Stop::Fork(new) | Stop::Vfork(new) => {
                self.on_child(tid, new);
                if let Some(t) = self.threads.get(&new)
                    && t.shared_child
                {
                    let _ = self.k.interrupt(new);
                }
            }
            Stop::Exec => {
                self.on_exec(tid);
                return;
            }
            Stop::Interrupted | Stop::VforkDone | Stop::Syscall => {}
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

    /// A signal-delivery-stop while holding: the signal goes to the target now, and the thread stops again right
    /// after. Kept here to pass on when the thread is let go, it was lost if syscatch died first (SIGKILL, the OOM
    /// killer): the wait that reported the stop took the signal out of the kernel (it clears the stop's code), and
    /// the kernel resumes the tracee of a dead tracer with no signal. Seen with the kernel's signal tracepoints: a
    /// queued signal generated, never delivered, syscatch killed while it held the threads to attach.
    ///
    /// An interrupt asked while the thread sits in the stop stays pending; resumed with the signal, the thread
    /// takes it (its handler's frame is set up, or the default action taken: nothing, a group-stop, the end of the
    /// process) and stops at that interrupt before it runs an instruction of its own, so holding still holds. The
    /// stop that follows is held in turn. Nothing is requeued: a queued signal keeps its place among others of
    /// its number. False: the signal could not be passed on (the thread is gone), the caller keeps it.
    fn deliver_now(&mut self, tid: Tid, sig: i32) -> bool {
        if self.k.interrupt(tid).is_err() || self.k.cont(tid, sig).is_err() {
            return false;
        }
        self.summary.signals_forwarded += 1;
        match self.wait_bounded(tid, HOLD_LIMIT) {
            Ok(stop) => self.hold_stop(tid, stop, false),
            // Not stopped in time (it runs on, its interrupt pending): no longer held, so whoever holds waits
            // for that stop like any other thread's.
            Err(_) => {
                if let Some(t) = self.threads.get_mut(&tid)
                    && let State::Held { prev, .. } = std::mem::replace(&mut t.state, State::Running)
                {
                    t.state = *prev;
                }
            }
        }
        true
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
                let _ = self.k.listen(tid);
            } else {
                self.resume(tid, sig);
            }
        }
    }

    /// Single-steps the instruction at `regs.ip()` (a breakpoint site) with every other thread stopped, so no
    /// thread can pass the site while its original byte is back. Correct, slow, counted.
    pub(super) fn step_alone(&mut self, tid: Tid, regs: Regs) {
        self.realtime(|t| t.step_alone_now(tid, regs))
    }

    fn step_alone_now(&mut self, tid: Tid, regs: Regs) {
        self.summary.slow_path += 1;
        let addr = regs.ip();
        self.hold_all(Some(tid));
        let orig = self.sites.get(&addr).map(|s| s.orig);
        let mut sig = 0;
        let mut running = false;
        if let Some(orig) = orig
            && self.mem.write_all(addr, &[orig]).is_ok()
        {
            if self.k.set_regs(tid, &regs).is_ok() && self.k.step(tid, 0).is_ok() {
                let give_up = self.k.now() + HOLD_LIMIT;
                loop {
                    match self.wait_bounded(tid, give_up.saturating_duration_since(self.k.now())) {
                        Ok(Stop::Signal(libc::SIGTRAP)) => break,
                        Ok(Stop::Signal(s)) => {
                            // A signal came first: the instruction did not run. Deliver the signal now; the
                            // handler returns to the site, which is armed again and hit again.
                            sig = s;
                            break;
                        }
                        Ok(Stop::Exited(c)) => {
                            self.gone(tid, End::Exited(c));
                            break;
                        }
                        Ok(Stop::Killed(s)) => {
                            self.gone(tid, End::Killed(s));
                            break;
                        }
                        // An interrupt of ours still pending, or an event of the stepped instruction (a system
                        // call): the step goes on.
                        Ok(_) => {
                            if self.k.step(tid, 0).is_err() {
                                break;
                            }
                        }
                        Err(_) => {
                            // Still in the instruction (a fault on slow storage, a blocking call): the others are
                            // not held for ever. The int3 goes back under it, and its trap is ours when it comes.
                            self.late.insert(tid, Late::Trap);
                            running = true;
                            break;
                        }
                    }
                }
            }
            let _ = self.mem.write_all(addr, &[INT3]);
        }
        // The stepping thread first, the int3 being back: a signal it stopped with is out of the kernel until this
        // resume passes it on (a SIGKILL of syscatch in between would lose it), so not after every other resume.
        if self.threads.contains_key(&tid) && !running {
            self.resume(tid, sig);
        }
        self.release_all();
    }

    /// Stops every thread, drains the SIGTRAPs our int3s and single steps may still have queued, restores the
    /// original bytes, rewinds any thread sitting just past an int3, and detaches everything.
    pub fn detach_all(&mut self) {
        if self.detached {
            return;
        }
        self.realtime(|t| t.detach_all_now());
    }

    fn detach_all_now(&mut self) {
        self.detached = true;
        let started = Instant::now();
        self.k.stop_timer();
        self.adopt_interrupted();
        let mut stuck = self.hold_all(None);
        let mut tids: Vec<Tid> = self.threads.keys().copied().filter(|t| !stuck.iter().any(|(s, _)| s == t)).collect();
        for &tid in &tids {
            if let Err(why) = self.drain_traps(tid) {
                // Let go to take its trap and not stopped again (a vfork parent asleep until its child, which we
                // hold, is released): detached once it stops, after the bytes are back and the child released.
                stuck.push((tid, why));
            }
        }
        tids.retain(|t| !stuck.iter().any(|(s, _)| s == t));
        // Before the loop below marks threads that were stepping a call as running: the pad's system call must
        // run on a thread that was really running when it was held.
        self.remove_pad();
        self.remove_gate();
        for &tid in &tids {
            self.end_held_call(tid);
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
            let _ = self.k.detach(tid, sig);
        }
        // The bytes are back and the vfork children released: their parents wake and stop at their pending
        // interrupt, and are detached like the others. A thread that still cannot stop is detached by the kernel
        // when syscatch exits; it never ran our code and finds the original bytes.
        self.detach_late(stuck);
        self.threads.clear();
        self.tell(Msg::Done);
        self.summary.detach = started.elapsed();
    }

    /// After a panic in the middle of handling a stop of a thread, that thread may still sit in the stop we took
    /// from it (its wait status consumed, never resumed): no interrupt would ever be reported for it. Such a
    /// thread is held as it is, rewound if it stopped just past one of our int3s (it runs the original
    /// instruction once the bytes are back). A stop it reported since is handled as any stop while holding.
    fn adopt_interrupted(&mut self) {
        let Some(tid) = self.current.take() else { return };
        if self.threads.get(&tid).is_none_or(|t| matches!(t.state, State::Held { .. })) {
            return;
        }
        let stopped = self.k.read_status(tid).is_ok_and(|s| status::parse_status(&s).state == 't');
        if let Ok(Some((_, stop))) = self.k.wait_for(tid, true) {
            self.hold(tid, stop);
            return;
        }
        if !stopped {
            return;
        }
        if let Ok(mut r) = self.k.get_regs(tid) {
            let at = r.ip().wrapping_sub(1);
            if self.planted(at) || self.retired.contains_key(&at) {
                r.set_ip(at);
                let _ = self.k.set_regs(tid, &r);
            }
        }
        if let Some(t) = self.threads.get_mut(&tid) {
            let prev = std::mem::replace(&mut t.state, State::Running);
            t.state = State::Held { sig: 0, group: false, prev: Box::new(prev) };
        }
    }

    /// Waits (bounded) for the threads `hold_all` could not stop, detaching each as it stops; names those left.
    fn detach_late(&mut self, stuck: Vec<(Tid, Stuck)>) {
        let mut stuck: HashMap<Tid, Stuck> = stuck.into_iter().collect();
        let give_up = self.k.now() + LATE_LIMIT;
        let mut nap = Duration::from_micros(50);
        while !stuck.is_empty() && self.k.now() < give_up {
            match self.k.wait_any(true) {
                Ok(Some((tid, stop))) if stuck.contains_key(&tid) => {
                    self.hold(tid, stop);
                    if let Some(Thread { state: State::Held { .. }, .. }) = self.threads.get(&tid) {
                        if self.drain_traps(tid).is_err() {
                            // Running again: its next stop is awaited like this one.
                            continue;
                        }
                        self.end_held_call(tid);
                        let sig = match self.threads.get(&tid).map(|t| &t.state) {
                            Some(State::Held { sig, .. }) => *sig,
                            _ => 0,
                        };
                        let _ = self.k.detach(tid, sig);
                    }
                    self.threads.remove(&tid);
                    stuck.remove(&tid);
                }
                Ok(Some((tid, stop))) => {
                    // A stop of something we no longer track (a child whose parent's event is gone with it).
                    if !matches!(stop, Stop::Exited(_) | Stop::Killed(_)) {
                        self.early.insert(tid, stop);
                    }
                }
                Ok(None) => {
                    let k = &self.k;
                    stuck.retain(|&t, _| k.read_status(t).is_ok());
                    self.k.sleep(nap);
                    nap = (nap * 2).min(Duration::from_millis(2));
                }
                Err(_) => stuck.clear(),
            }
        }
        self.release_early_children();
        let mut left: Vec<_> = stuck.into_iter().collect();
        left.sort_unstable_by_key(|&(tid, _)| tid);
        // A zombie (a leader that called pthread_exit) runs no code again: nothing to say about it.
        for (tid, why) in left.into_iter().filter(|(_, why)| *why != Stuck::Zombie) {
            self.summary.warnings.push(format!(
                "thread {tid} could not be stopped to detach ({why}); the original bytes are back, and the kernel \
                 detaches it when syscatch exits"
            ));
        }
    }

    /// A held thread that was stepping a matching call: the event goes out now, without a result if the call
    /// had not returned (the thread enters, or restarts, the syscall by itself after detach).
    fn end_held_call(&mut self, tid: Tid) {
        let Some(Thread { state: State::Held { prev, .. }, .. }) = self.threads.get_mut(&tid) else {
            return;
        };
        if let State::Stepping { ev, .. } = std::mem::replace(prev.as_mut(), State::Running) {
            let mut ev = *ev;
            if ev.ret.is_none() {
                ev.ret_missing = Some("the trace ended before the call returned".into());
            }
            self.emit(ev);
        }
    }

    /// Children whose first stop came but whose parent's fork event was never handled (the trace ended in
    /// between): like any fork child, they get the original bytes back, unless they share our memory.
    fn release_early_children(&mut self) {
        for (child, stop) in std::mem::take(&mut self.early) {
            if matches!(stop, Stop::Exited(_) | Stop::Killed(_)) {
                continue;
            }
            if self.armed
                && !self.k.same_vm(child, self.cfg.pid)
                && let Ok(child_mem) = self.k.open_mem(child)
            {
                self.clean_child(&*child_mem);
                self.summary.forks_cleaned += 1;
            }
            let _ = self.k.detach(child, 0);
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
        self.k
            .read_task_status(self.cfg.pid, tid)
            .or_else(|_| self.k.read_status(tid))
            .map(|s| status::parse_status(&s).sig_pnd & (1 << (libc::SIGTRAP - 1)) != 0)
            .unwrap_or(false)
    }

    /// A stopped thread may still have a SIGTRAP queued by our int3 or by the single step of a matching call:
    /// the interrupt trap is reported before pending signals, and once detached that SIGTRAP would kill the
    /// thread. Let each such signal stop happen (SIGTRAP is synchronous, so it is dequeued first), and suppress
    /// it when it is ours: an int3 hit is rewound onto the restored instruction, a finished step gives rax.
    ///
    /// Err: the thread, let go to take its signal, did not stop again in time (see [`Tracer::wait_bounded`]); it is
    /// no longer held, and its next stop is handled as any stop while holding.
    fn drain_traps(&mut self, tid: Tid) -> Result<(), Stuck> {
        for _ in 0..4 {
            if !self.sigtrap_pending(tid) || self.k.cont(tid, 0).is_err() {
                return Ok(());
            }
            let stop = match self.wait_bounded(tid, HOLD_LIMIT) {
                Ok(stop) => stop,
                Err(why) => {
                    if let Some(t) = self.threads.get_mut(&tid)
                        && let State::Held { prev, .. } = std::mem::replace(&mut t.state, State::Running)
                    {
                        t.state = *prev;
                    }
                    return Err(why);
                }
            };
            let Some(stop) = self.settle_late(tid, stop) else { return Ok(()) };
            match stop {
                Stop::Exited(code) => {
                    self.gone(tid, End::Exited(code));
                    return Ok(());
                }
                Stop::Killed(sig) => {
                    self.gone(tid, End::Killed(sig));
                    return Ok(());
                }
                Stop::Signal(libc::SIGTRAP) => {
                    let Ok(mut r) = self.k.get_regs(tid) else { return Ok(()) };
                    if self.fast_int3(r.ip().wrapping_sub(1)) {
                        let pass_on = match self.fast_event(tid, &r, None) {
                            Some(FastStop::Event(ev)) => {
                                self.emit(*ev);
                                self.sent_sigtrap(tid)
                            }
                            Some(FastStop::Reported) => self.repeated_sigtrap(tid),
                            None => 0,
                        };
                        if pass_on != 0 {
                            // A SIGTRAP sent to the thread: it gets it at detach.
                            if let Some(Thread { state: State::Held { sig, .. }, .. }) = self.threads.get_mut(&tid) {
                                *sig = pass_on;
                            }
                            return Ok(());
                        }
                        continue;
                    }
                    let ours =
                        self.planted(r.ip().wrapping_sub(1)) || self.retired.contains_key(&r.ip().wrapping_sub(1));
                    let Some(Thread { state: State::Held { sig, prev, .. }, .. }) = self.threads.get_mut(&tid) else {
                        return Ok(());
                    };
                    match prev.as_mut() {
                        State::Stepping { ev, after, .. } if r.ip() == *after => super::set_syscall_result(ev, r.0.rax),
                        State::Stepping { after, .. } if r.ip() < *after && r.ip() >= after.saturating_sub(64) => {}
                        _ if ours => {
                            r.set_ip(r.ip() - 1);
                            let _ = self.k.set_regs(tid, &r);
                        }
                        _ => {
                            // The target's own SIGTRAP: it gets it at detach.
                            *sig = libc::SIGTRAP;
                            return Ok(());
                        }
                    }
                }
                Stop::Signal(s) => {
                    if self.deliver_now(tid, s) {
                        match self.threads.get(&tid).map(|t| &t.state) {
                            Some(State::Held { .. }) => continue,
                            Some(_) => return Err(Stuck::NoStop { ms: HOLD_LIMIT.as_millis() }),
                            None => return Ok(()),
                        }
                    }
                    if let Some(Thread { state: State::Held { sig, .. }, .. }) = self.threads.get_mut(&tid) {
                        *sig = s;
                    }
                    return Ok(());
                }
                _ => {}
            }
        }
        Ok(())
    }
}
