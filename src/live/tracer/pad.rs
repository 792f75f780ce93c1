//! Placing and removing the trap pad (`crate::x86::trappad`) in the target: a page pair mapped and a SIGTRAP handler
//! installed by system calls injected on a held thread, at arming; the previous action put back, and the pages
//! unmapped when no thread is inside them, at detach. Best effort: without it, only idle targets survive our
//! SIGKILL (the guardian still restores the bytes), and syscatch says so.

use super::error::Error;
use super::{State, Tracer};
use crate::model::status;
use crate::os::Tid;
use crate::x86::trappad;
use std::time::Duration;

/// The installed pad.
pub(super) struct Pad {
    page: u64,
    /// A `syscall` instruction of libc, where injected calls run.
    syscall_at: u64,
    listed: usize,
    /// The entries listed (a return site planted again is listed once: the table has room for 496).
    entries: std::collections::HashSet<u64>,
    /// Said once: the table is full.
    full: bool,
    /// The action SIGTRAP had before (what detach puts back).
    old: [u8; 32],
}

pub(super) const SIGTRAP_BIT: u64 = 1 << (libc::SIGTRAP - 1);
/// How long a thread stopped inside a system call is given to finish it (clone and fork return at once).
const LEAVE_LIMIT: Duration = Duration::from_millis(100);

impl Tracer<'_> {
    /// A held thread that can run an injected system call now; for a command we started (`-- CMD`), its only
    /// thread, still stopped at the program's entry point until the caller lets it go (`arming` only).
    ///
    /// Never a thread held at a clone/fork/vfork event: it is still inside that call, so stepping it finishes the
    /// call (the step traps at once, with the child's id in rax and our call never run) and putting its registers
    /// back then turns the call's result into -ENOSYS: glibc's pthread_create takes that for "no clone3" and
    /// creates the thread a second time, on the same stack (seen under thread churn, the target died).
    /// A thread held at such an event is brought out of its call first if no other will do (a single-threaded
    /// target that forks all the time).
    ///
    /// A thread holding a signal will do (a signal seen while holding is delivered at once, but the target's own
    /// SIGTRAP, or one that came during an injected call, is kept): the step suppresses nothing of its own, and
    /// the signal it holds is delivered when it is let go. Threads without one come first.
    pub(super) fn injectable(&mut self, arming: bool) -> Option<Tid> {
        let plain = |t: &State| matches!(t, State::Held { group: false, prev, .. } if matches!(**prev, State::Running));
        let quiet = |t: &State| matches!(t, State::Held { sig: 0, .. });
        let mut held: Vec<(bool, Tid)> =
            self.threads.iter().filter(|(_, t)| plain(&t.state)).map(|(&tid, t)| (!quiet(&t.state), tid)).collect();
        held.sort_unstable();
        let (outside, inside): (Vec<Tid>, Vec<Tid>) =
            held.into_iter().map(|(_, tid)| tid).partition(|&tid| !self.k.in_syscall_event(tid));
        if let Some(&tid) = outside.first() {
            return Some(tid);
        }
        for tid in inside {
            let left = self.leave_syscall(tid);
            match self.threads.get(&tid).map(|t| &t.state) {
                Some(s) if left && plain(s) => return Some(tid),
                Some(State::Held { .. }) | None => {}
                // Running again (it did not stop in time): not every thread is held any more, which `--fast`'s
                // patching needs; give up rather than go on.
                Some(_) => return None,
            }
        }
        (arming && self.adopted_at_entry()).then_some(self.cfg.pid)
    }

    /// Whether the target is a program syscatch started, still stopped at its entry point (its one thread's stop
    /// taken while it ran there, so no interrupt would ever be reported for it): nothing in it can run.
    pub(super) fn adopted_at_entry(&self) -> bool {
        let pid = self.cfg.pid;
        let only = self.threads.len() == 1 && matches!(self.threads.get(&pid).map(|t| &t.state), Some(State::Running));
        only && self.k.read_status(pid).is_ok_and(|s| status::parse_status(&s).state == 't')
    }

    /// Lets held thread `tid`, stopped at an event inside a system call, finish that call and stop again at an
    /// interrupt (outside any call). Never a vfork parent: it would sleep until its child, which we hold, execs.
    /// Bounded by [`LEAVE_LIMIT`]; false if it did not get there (a thread still running is marked so, and its
    /// pending interrupt stops it later like any other).
    fn leave_syscall(&mut self, tid: Tid) -> bool {
        if self.threads.values().any(|t| t.vfork_parent == Some(tid)) || self.k.interrupt(tid).is_err() {
            return false;
        }
        let give_up = self.k.now() + LEAVE_LIMIT;
        // A call reports at most its own event and a vfork-done before it returns.
        for _ in 0..3 {
            if self.k.cont(tid, 0).is_err() {
                return false;
            }
            let stop = loop {
                match self.k.wait_for(tid, true) {
                    Ok(Some((_, stop))) => break stop,
                    Ok(None) if self.k.now() < give_up => self.k.sleep(Duration::from_micros(50)),
                    _ => {
                        if let Some(t) = self.threads.get_mut(&tid)
                            && let State::Held { prev, .. } = std::mem::replace(&mut t.state, State::Running)
                        {
                            t.state = *prev;
                        }
                        return false;
                    }
                }
            };
            self.hold(tid, stop);
            if !matches!(self.threads.get(&tid).map(|t| &t.state), Some(State::Held { .. })) {
                return false;
            }
            if !self.k.in_syscall_event(tid) {
                return true;
            }
        }
        false
    }

    fn syscall_insn(&self) -> Option<u64> {
        self.sites.values().find_map(|s| s.wrapper.as_ref().map(|w| w.syscall_at))
    }

    /// Installs the pad before anything is planted, while every thread is held (a SIGKILL between planting and
    /// the pad would release threads that can reach an int3 before the guardian has restored it); the caller
    /// lists its sites next. `syscall_at`: a libc `syscall` instruction, if the sites have none. On refusal,
    /// one line.
    pub(super) fn install_pad(&mut self, syscall_at: Option<u64>) {
        if let Some(why) = self.no_guard.take() {
            eprintln!(
                "syscatch: warning: {why}; if syscatch is killed (SIGKILL, OOM) its breakpoints stay and the target \
                 dies at its next hit"
            );
        }
        // SYSCATCH_TRAP_PAD=0 turns it off (a bisecting knob, and the baseline of scripts/torture-kill.sh).
        let wanted = self.pad.is_none()
            && self.guard.is_some()
            && std::env::var_os("SYSCATCH_TRAP_PAD").is_none_or(|v| v != "0");
        let installed = if wanted { self.try_install_pad(syscall_at) } else { Ok(()) };
        // The set-up's calls (and `--fast`'s before them) are over: the call gate goes until detach needs it.
        self.remove_gate();
        if let Err(why) = installed {
            eprintln!(
                "syscatch: note: no trap pad in the target ({why}): if syscatch is killed, a thread caught in a \
                 breakpoint at that moment dies"
            );
        }
    }

    fn try_install_pad(&mut self, syscall_at: Option<u64>) -> Result<(), Error> {
        let status = self.k.read_status(self.cfg.pid).map(|s| status::parse_status(&s)).map_err(Error::Status)?;
        if (status.sig_cgt | status.sig_ign) & SIGTRAP_BIT != 0 {
            return Err(Error::HandlesSigtrap);
        }
        let syscall_at = syscall_at.or_else(|| self.syscall_insn()).ok_or(Error::NoSyscallInsn)?;
        let tid = self.injectable(true).ok_or(Error::NoThreadForPad)?;
        let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let page = self.inject_syscall(
            tid,
            syscall_at,
            libc::SYS_mmap as u64,
            [0, trappad::PAGES_LEN, rw, flags, u64::MAX, 0],
        )?;
        if (page as i64) < 0 || page & 0xfff != 0 {
            return Err(Error::Mmap(page as i64));
        }
        // syscatch's own memory in the target: not the target's growth.
        self.summary.own_ranges.push((page, page + trappad::PAGES_LEN));
        let undo = |t: &mut Self, why: Error| {
            let _ = t.inject_syscall(tid, syscall_at, libc::SYS_munmap as u64, [page, trappad::PAGES_LEN, 0, 0, 0, 0]);
            Err(why)
        };
        if let Err(e) = self.mem.write_all(page, trappad::CODE) {
            return undo(self, Error::WritePad(e));
        }
        let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let r = self.inject_syscall(tid, syscall_at, libc::SYS_mprotect as u64, [page, 4096, rx, 0, 0, 0])?;
        if r != 0 {
            return undo(self, Error::Mprotect(r as i64));
        }
        // The new action, and room for the old one, in the data page (zeroed by mmap: the SIG_DFL action too).
        let act = page + trappad::DATA + 48;
        let old = page + trappad::DATA + 80;
        if let Err(e) = self.mem.write_all(act, &trappad::action_bytes(page)) {
            return undo(self, Error::WritePad(e));
        }
        self.pad = Some(Pad { page, syscall_at, listed: 0, entries: Default::default(), full: false, old: [0; 32] });
        let r = self.inject_syscall(
            tid,
            syscall_at,
            libc::SYS_rt_sigaction as u64,
            [libc::SIGTRAP as u64, act, old, 8, 0, 0],
        )?;
        let mut prev = [0u8; 32];
        if r != 0 || self.mem.read_exact(old, &mut prev).is_err() {
            self.pad = None;
            return undo(self, Error::Sigaction(r as i64));
        }
        if let Some(p) = self.pad.as_mut() {
            p.old = prev;
        }
        Ok(())
    }

    /// A trap taken with SIGTRAP blocked (glibc blocks every signal while a thread exits, around fork and
    /// posix_spawn; servers block them in their workers) makes the kernel reset SIGTRAP's action to the default for
    /// the whole process and unblock it in that thread (`force_sig_info`): the pad's handler would be gone, and a
    /// SIGKILL of syscatch while any thread sits in one of our traps would then kill the target. The trampoline's
    /// int3s are preceded by its trap helper, which unblocks SIGTRAP first (no reset); a breakpoint's cannot be. At
    /// each trap of a thread that blocks signals (`PTRACE_GETSIGMASK`: one call), SIGTRAP is blocked again in a
    /// thread whose mask blocks every other signal (it was blocked with them: `sigfillset`), and at a trap not of
    /// the trampoline the pad's action is checked (`/proc/PID/status`) and put back if it was reset (an injected
    /// `rt_sigaction`: [`Tracer::restore_pad`]). Returns whether the thread blocks signals.
    pub(super) fn reblock_sigtrap(&mut self, tid: Tid) -> bool {
        let Ok(mask) = self.k.sigmask(tid) else { return false };
        if mask == 0 {
            return false;
        }
        // Every signal but SIGKILL and SIGSTOP (which the kernel never blocks): a full mask (but for glibc's two
        // internal signals, 32 and 33, which its pthread_sigmask never blocks).
        const FULL: u64 = !((1 << (libc::SIGKILL - 1)) | (1 << (libc::SIGSTOP - 1)));
        const GLIBC_INTERNAL: u64 = (1 << 31) | (1 << 32);
        if mask & SIGTRAP_BIT == 0 && mask | SIGTRAP_BIT | GLIBC_INTERNAL == FULL {
            let _ = self.k.set_sigmask(tid, mask | SIGTRAP_BIT);
        }
        true
    }

    /// The pad's SIGTRAP action put back if a trap reset it (see [`Tracer::reblock_sigtrap`]).
    pub(super) fn restore_pad(&mut self, tid: Tid) {
        let Some(pad) = self.pad.as_ref() else { return };
        let (syscall_at, act) = (pad.syscall_at, pad.page + trappad::DATA + 48);
        let Ok(status) = self.k.read_status(self.cfg.pid).map(|s| status::parse_status(&s)) else { return };
        if status.sig_cgt & SIGTRAP_BIT != 0 {
            return;
        }
        self.summary.pad_restored += 1;
        let args = [libc::SIGTRAP as u64, act, 0, 8, 0, 0];
        let r = self.inject_syscall(tid, syscall_at, libc::SYS_rt_sigaction as u64, args);
        if !matches!(r, Ok(0)) {
            self.summary.warnings.push(format!(
                "the trap pad's SIGTRAP handler was reset by a trap in a thread that blocked SIGTRAP and could not be \
                 put back ({r:?}): if syscatch is killed, a thread caught in a breakpoint at that moment dies"
            ));
            self.pad = None;
        }
    }

    /// Lists a site in the pad (before its int3 is planted; nothing without a pad). Sites are never unlisted: a retired site can still
    /// have a trap of ours on its way.
    pub(super) fn pad_list(&mut self, entry: u64) {
        let Some(p) = self.pad.as_mut() else { return };
        if p.entries.contains(&entry) {
            return;
        }
        if p.listed >= trappad::CAPACITY {
            if !std::mem::replace(&mut p.full, true) {
                self.summary.warnings.push(format!(
                    "the trap pad lists {} sites, all it has room for: a thread caught at a site planted since, when \
                     syscatch is killed, is not rewound by it",
                    trappad::CAPACITY
                ));
            }
            return;
        }
        let slot = p.page + trappad::TABLE + 8 * p.listed as u64;
        if self.mem.write_all(slot, &entry.to_le_bytes()).is_ok() {
            p.listed += 1;
            p.entries.insert(entry);
            let _ = self.mem.write_all(p.page + trappad::COUNT, &(p.listed as u64).to_le_bytes());
        }
    }

    /// At detach, every thread held: the previous SIGTRAP action back, and the pages unmapped unless a thread is
    /// inside them (only possible in a foreign SIGTRAP's handler run: then they stay, said in the summary).
    pub(super) fn remove_pad(&mut self) {
        let Some(p) = self.pad.take() else { return };
        if self.threads.is_empty() {
            // The target has exited (or exec'd): nothing left to restore.
            return;
        }
        if self.trap_left_pending {
            self.summary.warnings.push(format!(
                "the trap pad stays at {:#x}: a thread blocks SIGTRAP with one pending (the pad drops a page-fault \
                 sample's, and does what the default would with any other)",
                p.page
            ));
            return;
        }
        let Some(tid) = self.injectable(false) else {
            self.summary
                .warnings
                .push("the trap pad's SIGTRAP handler stays installed (no thread to remove it)".into());
            return;
        };
        let old = p.page + trappad::DATA + 80;
        let back = self.mem.write_all(old, &p.old).is_ok()
            && self
                .inject_syscall(
                    tid,
                    p.syscall_at,
                    libc::SYS_rt_sigaction as u64,
                    [libc::SIGTRAP as u64, old, 0, 8, 0, 0],
                )
                .is_ok_and(|r| r == 0);
        if !back {
            self.summary.warnings.push("could not put back the target's SIGTRAP action".into());
            return;
        }
        let inside = self
            .threads
            .keys()
            .any(|&t| self.k.get_regs(t).is_ok_and(|r| r.ip() >= p.page && r.ip() < p.page + trappad::PAGES_LEN));
        if inside {
            self.summary.warnings.push(format!("the trap pad stays mapped at {:#x} (a thread is inside it)", p.page));
            return;
        }
        let _ =
            self.inject_syscall(tid, p.syscall_at, libc::SYS_munmap as u64, [p.page, trappad::PAGES_LEN, 0, 0, 0, 0]);
    }
}
