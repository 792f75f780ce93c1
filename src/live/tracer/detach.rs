//! Detaching: every thread stopped, the SIGTRAPs our int3s and steps may still have queued drained, the original
//! bytes back, and each thread let go the way it was going; threads that could not stop are waited for (bounded)
//! and detached as they stop.

use super::error::Stuck;
use super::fast::FastStop;
use super::hold::HOLD_LIMIT;
use super::{State, Thread, Tracer};
use crate::live::guardian::Msg;
use crate::model::event::End;
use crate::model::status;
use crate::os::Tid;
use crate::os::ptrace::Stop;
use crate::x86::breakpoints::INT3;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long detach waits for threads that could not stop to stop once the others are let go.
const LATE_LIMIT: Duration = Duration::from_millis(500);

impl Tracer<'_> {
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
        self.deferred = Some(Vec::new());
        let started = Instant::now();
        self.k.stop_timer();
        self.stop_faults();
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
        // While the pad is still there: a thread between taking a ring number and writing its slot is stepped to
        // the end of the write; the ring is read a last time once every thread is past it.
        for tid in self.finish_ring_writes() {
            stuck.push((tid, super::error::Stuck::NoStop { ms: HOLD_LIMIT.as_millis() }));
        }
        tids.retain(|t| !stuck.iter().any(|(s, _)| s == t));
        // Every thread is held: their thread pointers, for what is read of their TLS after the trace.
        self.summary.thread_bases = tids
            .iter()
            .filter(|&&t| self.threads.get(&t).is_some_and(|t| !t.shared_child))
            .filter_map(|&t| Some((t, self.k.get_regs(t).ok()?.0.fs_base)))
            .collect();
        self.drain_ring(true);
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
        self.send_deferred();
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
                    if let Err(e) = site.unplant(&*self.mem) {
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
        self.retired.extend(self.sites.values().map(|s| (s.addr, (s.orig, s.guard))));
        self.armed = false;
    }

    pub(super) fn sigtrap_pending(&self, tid: Tid) -> bool {
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
            if !self.sigtrap_pending(tid) {
                return Ok(());
            }
            if self.k.sigmask(tid).is_ok_and(|m| m & super::pad::SIGTRAP_BIT != 0) {
                // Blocked (a page-fault sample's signal sent while the thread blocked SIGTRAP, or the target's own):
                // it cannot be taken now. The pad stays to take it (ours is dropped; another does what it would).
                self.trap_left_pending = true;
                return Ok(());
            }
            if self.k.cont(tid, 0).is_err() {
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
                // A page-fault sample of ours, sent before the samplers were closed: dropped.
                Stop::Signal(libc::SIGTRAP) if self.our_fault_sample(tid).is_some() => continue,
                Stop::Signal(libc::SIGTRAP) => {
                    let Ok(mut r) = self.k.get_regs(tid) else { return Ok(()) };
                    if self.fast_int3(r.ip().wrapping_sub(1)) {
                        let pass_on = match self.fast_event(tid, &r, None) {
                            Some(FastStop::Event(ev, seq)) => {
                                self.emit_fast(seq, *ev);
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
                        State::Stepping { after, entry, .. } if r.ip() < *after && r.ip() >= entry.ip() => {}
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
