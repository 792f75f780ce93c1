//! System calls run by a held thread on syscatch's behalf (the trap pad's set-up and removal, `--fast`'s page):
//! through the call gate (`crate::x86::gate`) written into the unused tail of libc's code page, which leaves a
//! thread whose tracer dies mid-call unharmed; or, where no such tail is found, by single-stepping libc's own
//! `syscall` instruction with the call's registers (a SIGKILL of syscatch during that step kills the thread).

use super::error::Error;
use super::pad::SIGTRAP_BIT;
use super::{Late, State, Tracer};
use crate::live::guardian::Msg;
use crate::model::regs::Regs;
use crate::os::Tid;
use crate::os::ptrace::Stop;
use crate::x86::gate;
use nix::errno::Errno;

/// The call gate in the target.
pub(super) enum Gate {
    /// Not looked for yet (at the first injected call).
    Untried,
    /// No free tail big enough, or it could not be written: calls are stepped.
    Absent,
    /// Written at `at`, over `orig` (put back at detach).
    Written { at: u64, orig: Vec<u8> },
}

impl Tracer<'_> {
    /// Makes held thread `tid` run one system call and puts its registers and signal mask back; returns rax.
    /// `insn`: a `syscall` instruction of libc (the gate goes in the tail of that module's code page; without a
    /// gate, the call is stepped on it).
    pub(super) fn inject_syscall(&mut self, tid: Tid, insn: u64, nr: u64, a: [u64; 6]) -> Result<u64, Error> {
        match self.gate_at(insn) {
            Some(at) if self.gate_fits(tid) => self.inject_gated(tid, at, nr, a),
            _ => self.inject_stepped(tid, insn, nr, a),
        }
    }

    /// Whether thread `tid` can run the gate: the 280 bytes below its stack pointer (red zone, block, the gate's
    /// pushes) lie in the writable mapping its stack pointer is in (not so on a stack nearly used up: a fault there,
    /// with its signals blocked, would kill it), and no shadow stack (CET) is on for it (the gate's `ret` has no
    /// matching `call`).
    fn gate_fits(&self, tid: Tid) -> bool {
        let pid = self.cfg.pid;
        let Ok(sp) = self.k.get_regs(tid).map(|r| r.sp()) else { return false };
        let low = sp.wrapping_sub(gate::BELOW + gate::PUSHED);
        let maps = self.k.read_maps(pid).map(|m| crate::model::maps::parse_maps(&m)).unwrap_or_default();
        let room = maps.iter().any(|m| m.contains(low) && m.contains(sp.wrapping_sub(1)) && m.perms.contains('w'));
        let shstk = self.k.read_task_status(pid, tid).is_ok_and(|s| {
            s.lines().any(|l| l.strip_prefix("x86_Thread_features:").is_some_and(|f| f.contains("shstk")))
        });
        room && !shstk
    }

    /// Whether stopped thread `tid` is just past the gate's `syscall` (at that call's entry or exit stop).
    pub(super) fn in_gate_after_syscall(&self, tid: Tid) -> bool {
        let Gate::Written { at, .. } = self.gate else { return false };
        self.k.get_regs(tid).is_ok_and(|r| r.ip() == at + gate::AFTER_SYSCALL)
    }

    /// The gate's address, written on first use. `SYSCATCH_CALL_GATE=0` turns it off (the baseline of
    /// scripts/torture-kill.sh, and a bisecting knob).
    fn gate_at(&mut self, near: u64) -> Option<u64> {
        if let Gate::Untried = self.gate {
            self.gate = Gate::Absent;
            if std::env::var_os("SYSCATCH_CALL_GATE").is_some_and(|v| v == "0") {
                return None;
            }
            let at = self.k.exec_slack(self.cfg.pid, near).and_then(|(start, len)| gate::place(start, len))?;
            let mut orig = vec![0u8; gate::CODE.len()];
            self.mem.read_exact(at, &mut orig).ok()?;
            self.gate = Gate::Written { at, orig };
            // Told first, as for an int3: a death from here on has the guardian put the bytes back.
            self.gate_told(true);
            let mut now = vec![0u8; gate::CODE.len()];
            let written = self.mem.write_all(at, gate::CODE).is_ok()
                && self.mem.read_exact(at, &mut now).is_ok()
                && now == gate::CODE;
            if !written {
                if let Gate::Written { ref orig, .. } = self.gate {
                    let _ = self.mem.write_all(at, orig);
                }
                self.gate_told(false);
                self.gate = Gate::Absent;
                return None;
            }
        }
        match self.gate {
            Gate::Written { at, .. } => Some(at),
            _ => None,
        }
    }

    /// Tells the guardian the gate's bytes are ours to put back if syscatch dies (`true`, as for a planted int3,
    /// in pieces of at most 32 bytes), or no longer: while a call runs through the gate (the thread must find it
    /// there to get back), and once the bytes are back.
    pub(super) fn gate_told(&mut self, ours: bool) {
        let Gate::Written { at, ref orig } = self.gate else { return };
        // Never while a call whose wait gave up may still be inside it.
        if ours && self.late.values().any(|l| matches!(l, Late::Gate(..))) {
            return;
        }
        let pieces: Vec<(u64, Vec<u8>, Vec<u8>)> = gate::CODE
            .chunks(32)
            .zip(orig.chunks(32))
            .enumerate()
            .map(|(i, (code, orig))| (at + 32 * i as u64, orig.to_vec(), code.to_vec()))
            .collect();
        for (addr, orig, planted) in pieces {
            self.tell(if ours { Msg::Plant { addr, orig, planted } } else { Msg::Retire(addr) });
        }
    }

    /// With every thread held (after arming; at detach): the gate's bytes back, unless a thread is still inside it
    /// (one whose call did not return in time: it needs the gate to get back).
    pub(super) fn remove_gate(&mut self) {
        let Gate::Written { at, ref orig } = self.gate else { return };
        let end = at + gate::CODE.len() as u64;
        let late = self.late.values().any(|l| matches!(l, Late::Gate(..)));
        let inside = self.threads.keys().any(|&t| self.k.get_regs(t).is_ok_and(|r| r.ip() >= at && r.ip() < end));
        if late || inside {
            self.summary.warnings.push(format!(
                "the call gate stays at {at:#x} ({} bytes in the unused end of libc's code page: a thread is inside it)",
                gate::CODE.len()
            ));
            return;
        }
        let mut now = vec![0u8; gate::CODE.len()];
        if self.mem.read_exact(at, &mut now).is_ok() && now == gate::CODE {
            let _ = self.mem.write_all(at, orig);
        }
        self.gate_told(false);
        // Written again if another call is needed (detach's).
        self.gate = Gate::Untried;
    }

    /// The call through the gate at `at`: the block below the red zone, rip on the gate and rsp on the block
    /// (then the signal mask: a SIGKILL between the two leaves the gate to put back a mask never changed), to the
    /// syscall-entry stop and on to the exit stop, where rax is the result; then the mask and the registers back
    /// (in that order, for the same reason). The thread stays held at that exit stop.
    fn inject_gated(&mut self, tid: Tid, at: u64, nr: u64, a: [u64; 6]) -> Result<u64, Error> {
        let saved = self.k.get_regs(tid).map_err(Error::Ptrace)?;
        let mask = self.k.sigmask(tid).map_err(Error::Ptrace)?;
        // Where the thread goes on from: the same place, with a call it was stopped in set to run again, as the
        // kernel would have done (the gate returns with plain registers, never through the kernel's restart).
        let back = saved.restarted();
        let block = saved.sp().wrapping_sub(gate::BELOW);
        self.mem.write_all(block, &gate::block(nr, a, mask, back.ip())).map_err(Error::WriteStack)?;
        let mut r = back;
        (r.0.rip, r.0.rsp) = (at, block);
        // From here until its registers are back the thread may be inside the gate: the guardian must leave it.
        self.gate_told(false);
        let undo = |t: &mut Self, e: Errno| {
            let _ = t.k.set_sigmask(tid, mask);
            let _ = t.k.set_regs(tid, &back);
            Err(Error::Ptrace(e))
        };
        if let Err(e) = self.k.set_regs(tid, &r) {
            let r = undo(self, e);
            self.gate_told(true);
            return r;
        }
        // Every signal but SIGTRAP blocked while the call runs, as for a stepped call (see `inject_stepped`).
        if let Err(e) = self.k.set_sigmask(tid, !SIGTRAP_BIT).and_then(|_| self.k.syscall(tid)) {
            let r = undo(self, e);
            self.gate_told(true);
            return r;
        }
        crate::os::faults::stop_here("injected-call");
        let give_up = self.k.now() + super::hold::HOLD_LIMIT;
        let mut entered = false;
        let result = loop {
            match self.wait_bounded(tid, give_up.saturating_duration_since(self.k.now())) {
                Ok(Stop::Syscall) => {
                    let r = match self.k.get_regs(tid) {
                        Ok(r) => r,
                        Err(e) => break Err(Error::Ptrace(e)),
                    };
                    // Ours: just past the gate's `syscall` (at the entry stop too). Another call's stop (none is
                    // expected: the thread was held outside any call, with every signal but SIGTRAP blocked) is
                    // let go on to the gate.
                    let ours = r.ip() == at + gate::AFTER_SYSCALL;
                    if ours && entered {
                        break Ok(r.0.rax);
                    }
                    entered |= ours;
                    if let Err(e) = self.k.syscall(tid) {
                        break Err(Error::Ptrace(e));
                    }
                }
                // A PTRACE_INTERRUPT of ours still pending: it stops before running anything; on to the call.
                Ok(Stop::Interrupted) if !entered => {
                    if let Err(e) = self.k.syscall(tid) {
                        break Err(Error::Ptrace(e));
                    }
                }
                Ok(Stop::Signal(s)) if !entered && self.k.sig_code(tid).is_ok_and(|c| c > 0) && s != libc::SIGTRAP => {
                    // A fault of the gate's own (the kernel's si_code): ours, not the target's; this try given up
                    // (the registers go back below, the signal with them).
                    break Err(Error::SignalDuringCall(s));
                }
                Ok(Stop::Signal(s)) if !entered => {
                    // A signal that cannot be blocked (a foreign SIGTRAP) came before the call: kept for when the
                    // thread is let go, and this try given up.
                    if let Some(t) = self.threads.get_mut(&tid)
                        && let State::Held { sig, .. } = &mut t.state
                        && *sig == 0
                    {
                        *sig = s;
                    }
                    break Err(Error::SignalDuringCall(s));
                }
                Ok(Stop::Exited(_) | Stop::Killed(_)) => break Err(Error::ThreadExited),
                Ok(_) => break Err(Error::OtherStop),
                Err(why) => {
                    // Not at its stop in time (the call waits for a lock held by a thread that cannot stop): it is
                    // no longer held; its next syscall stops settle it (see `Late::Gate`). Were syscatch to die
                    // first, the gate would finish on its own.
                    self.late.insert(tid, Late::Gate(Box::new((back, mask, entered))));
                    if let Some(t) = self.threads.get_mut(&tid)
                        && let State::Held { prev, .. } = std::mem::replace(&mut t.state, State::Running)
                    {
                        t.state = *prev;
                    }
                    return Err(Error::NoReturn(why));
                }
            }
        };
        // A thread that will take a signal when let go gets its registers as they were, a call it was in the
        // middle of included: the kernel then restarts it or fails it with EINTR as that signal's handler says.
        let holds = matches!(self.threads.get(&tid).map(|t| &t.state), Some(State::Held { sig, .. }) if *sig != 0);
        let _ = self.k.set_sigmask(tid, mask);
        let _ = self.k.set_regs(tid, if holds { &saved } else { &back });
        self.gate_told(true);
        result
    }

    /// [`Tracer::inject_syscall`] without a gate: single-steps libc's `syscall` instruction at `insn` with the
    /// call's registers. A SIGKILL of syscatch during that step kills the thread (the step's trap).
    fn inject_stepped(&mut self, tid: Tid, insn: u64, nr: u64, a: [u64; 6]) -> Result<u64, Error> {
        let saved = self.k.get_regs(tid).map_err(Error::Ptrace)?;
        // Every signal but SIGTRAP blocked while the call runs: one that arrives meanwhile stays pending, to be
        // delivered under the thread's own mask when it goes on, instead of stopping the step before the call
        // (under a signal storm most tries failed so). Not SIGTRAP: the step's own trap is forced, and a forced
        // signal that is blocked makes the kernel reset its action to the default for the whole process.
        let mask = self.k.sigmask(tid).map_err(Error::Ptrace)?;
        self.k.set_sigmask(tid, !SIGTRAP_BIT).map_err(Error::Ptrace)?;
        let mut r: Regs = saved;
        r.set_ip(insn);
        let g = &mut r.0;
        (g.rax, g.rdi, g.rsi, g.rdx, g.r10, g.r8, g.r9) = (nr, a[0], a[1], a[2], a[3], a[4], a[5]);
        let started = self.k.set_regs(tid, &r).and_then(|_| self.k.step(tid, 0));
        if let Err(e) = started {
            let _ = self.k.set_regs(tid, &saved);
            let _ = self.k.set_sigmask(tid, mask);
            return Err(Error::Ptrace(e));
        }
        crate::os::faults::stop_here("injected-call");
        let give_up = self.k.now() + super::hold::HOLD_LIMIT;
        let result = loop {
            match self.wait_bounded(tid, give_up.saturating_duration_since(self.k.now())) {
                Ok(Stop::Signal(libc::SIGTRAP)) => {
                    break self.k.get_regs(tid).map(|r| r.0.rax).map_err(Error::Ptrace);
                }
                Ok(Stop::Signal(s)) => {
                    // A signal that cannot be blocked (a foreign SIGTRAP) came first: keep it for when the thread is
                    // let go (unless it holds one already: one of the two is lost then), and give up on this try.
                    if let Some(t) = self.threads.get_mut(&tid)
                        && let State::Held { sig, .. } = &mut t.state
                        && *sig == 0
                    {
                        *sig = s;
                    }
                    break Err(Error::SignalDuringCall(s));
                }
                Ok(Stop::Exited(_) | Stop::Killed(_)) => break Err(Error::ThreadExited),
                // A PTRACE_INTERRUPT of ours still pending (the thread was held while already stopped): it stops
                // again before running anything. Step again; waiting on would wait forever.
                Ok(Stop::Interrupted) => {
                    if let Err(e) = self.k.step(tid, 0) {
                        break Err(Error::Ptrace(e));
                    }
                }
                Ok(_) => break Err(Error::OtherStop),
                Err(why) => {
                    // Still in the call (mmap waiting for a lock held by a thread that cannot stop): its
                    // registers go back, and its trap is swallowed, at its next stop. It is no longer held.
                    self.late.insert(tid, Late::Injected(Box::new((saved, mask))));
                    if let Some(t) = self.threads.get_mut(&tid)
                        && let State::Held { prev, .. } = std::mem::replace(&mut t.state, State::Running)
                    {
                        t.state = *prev;
                    }
                    return Err(Error::NoReturn(why));
                }
            }
        };
        let _ = self.k.set_regs(tid, &saved);
        let _ = self.k.set_sigmask(tid, mask);
        result
    }
}
