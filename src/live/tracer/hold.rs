//! Stopping threads: all of them (to patch `--fast` in, to detach: `detach.rs`), or all but one while that one
//! single-steps an instruction the emulator cannot run with the original byte briefly back in place.

use super::error::Stuck;
use super::fast::FastStop;
use super::{Late, State, Tracer};
use crate::model::event::End;
use crate::model::regs::Regs;
use crate::model::status;
use crate::os::Tid;
use crate::os::ptrace::Stop;
use std::collections::HashMap;
use std::time::Duration;

/// The longest [`Tracer::hold_all`] (or any wait for one thread) waits for threads that might still stop.
pub(super) const HOLD_LIMIT: Duration = Duration::from_millis(500);
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
            // A page-fault sample of ours while holding: dropped (a step it interrupted goes on when let go).
            Stop::Signal(libc::SIGTRAP) if self.our_fault_sample(tid).is_some() => {}
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
                            Some(FastStop::Event(ev, seq)) => {
                                sig = self.sent_sigtrap(tid);
                                self.emit_fast(seq, *ev);
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
            // A new thread's first stop may come while the others are held: the ring names threads by fs base.
            Stop::Interrupted => self.learn_new_thread(tid),
            Stop::VforkDone | Stop::Syscall => {}
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
    pub(super) fn deliver_now(&mut self, tid: Tid, sig: i32) -> bool {
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
        let bytes = self.sites.get(&addr).map(|s| s.bytes());
        // A one-byte instruction with a guard on the next one: both are stepped (see `Site::then`).
        let then = self.sites.get(&addr).and_then(|s| s.then).map(|t| t.addr);
        let mut sig = 0;
        let mut running = false;
        if let Some((orig, planted)) = bytes
            && self.mem.write_all(addr, &orig).is_ok()
        {
            // No signal between the two instructions (one would be delivered just past the first, where only the
            // guard is): every one but SIGTRAP (blocked, a forced one would reset its action) waits until both ran.
            let mask = then.and_then(|_| self.k.sigmask(tid).ok());
            if mask.is_some() {
                let _ = self.k.set_sigmask(tid, !super::pad::SIGTRAP_BIT);
            }
            if self.k.set_regs(tid, &regs).is_ok() && self.k.step(tid, 0).is_ok() {
                let give_up = self.k.now() + HOLD_LIMIT;
                let mut second = false;
                loop {
                    match self.wait_bounded(tid, give_up.saturating_duration_since(self.k.now())) {
                        Ok(Stop::Signal(libc::SIGTRAP)) => {
                            // The first ran and the thread is at the next one, under the guard: that one too.
                            let at_then =
                                !second && then.is_some() && self.k.get_regs(tid).is_ok_and(|r| Some(r.ip()) == then);
                            if at_then && self.k.step(tid, 0).is_ok() {
                                second = true;
                                continue;
                            }
                            break;
                        }
                        Ok(Stop::Signal(s)) if second => {
                            // Between the two: the signal waits until the second has run (delivered then).
                            sig = s;
                            if self.k.step(tid, 0).is_err() {
                                break;
                            }
                        }
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
            if let Some(m) = mask {
                let _ = self.k.set_sigmask(tid, m);
            }
            // (The int3 first: a thread let go meanwhile traps there before it reaches the guard.)
            let _ = self.mem.write_all(addr, &planted[..1]);
            let _ = self.mem.write_all(addr + 1, &planted[1..]);
        }
        // The stepping thread first, the int3 being back: a signal it stopped with is out of the kernel until this
        // resume passes it on (a SIGKILL of syscatch in between would lose it), so not after every other resume.
        if self.threads.contains_key(&tid) && !running {
            self.resume(tid, sig);
        }
        self.release_all();
    }
}
