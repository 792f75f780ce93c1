//! The non-stop event loop: only the thread that hits the breakpoint stops, and the int3 is never lifted
//! while threads run. Matches on [`Stop`] values; all kernel calls go through `os`.
//!
//! A hit of the `syscall()` wrapper whose number does not match is resumed after emulating the displaced
//! instruction (one GETREGS, one SETREGS, one CONT). A matching hit has its arguments and stack copied, the
//! wrapper's register moves emulated up to the `syscall` instruction, and exactly that instruction single-
//! stepped, so rax is read on the same thread right after the kernel returned.

use crate::breakpoints::{self, Decoded, INT3, Memory};
use crate::event::{End, Event, Sink, StackCapture, Summary};
use crate::os::mem::{self, ProcMem};
use crate::os::ptrace::{self, Stop};
use crate::os::regs::{Reg, Regs};
use crate::os::{Tid, procfs, signals};
use crate::procinfo;
use nix::errno::Errno;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A planted breakpoint on a `syscall()`-style wrapper.
#[derive(Debug, Clone)]
pub struct Site {
    pub addr: u64,
    /// The original byte at `addr`, from the file on disk.
    pub orig: u8,
    /// The instruction the int3 displaces; emulated on every non-matching hit.
    pub first: Decoded,
    /// The rest of the straight-line prefix up to `syscall_at`, if all of it can be emulated.
    pub rest: Option<Vec<Decoded>>,
    pub syscall_at: u64,
}

/// What the tracer is asked to do.
pub struct Config {
    pub pid: Tid,
    pub numbers: HashSet<u64>,
    pub stack_bytes: usize,
    pub deadline: Option<Instant>,
    /// Print a one-line live status to stderr (only when stderr is a terminal).
    pub live_status: bool,
}

#[derive(Debug)]
enum State {
    Running,
    /// A matching call is being stepped to just after its `syscall` instruction.
    Stepping(Box<Event>),
    /// Stopped by us for detaching; `sig` is delivered at detach. `step`: a matching call that was being
    /// stepped when the thread stopped; its return value may still come from a queued step trap.
    Held {
        sig: i32,
        step: Option<Box<Event>>,
    },
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event(tid {} nr {})", self.tid, self.nr)
    }
}

struct Thread {
    state: State,
    /// A process sharing our memory (vfork child): traced like a thread until it execs or exits.
    shared_child: bool,
}

pub struct Tracer<'a> {
    cfg: Config,
    mem: ProcMem,
    site: Site,
    threads: HashMap<Tid, Thread>,
    /// Stops of tids not known yet (a new thread's or child's first stop can come before its parent's event).
    early: HashMap<Tid, Stop>,
    sink: &'a mut dyn Sink,
    start: Instant,
    pub summary: Summary,
    armed: bool,
    detached: bool,
    leader_status: Option<End>,
}

/// Reads through the captured stack first, then the target's memory (for the emulator's loads).
struct CapturedMem<'m> {
    sp: u64,
    stack: &'m [u8],
    mem: &'m ProcMem,
}

impl Memory for CapturedMem<'_> {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let off = addr.checked_sub(self.sp)? as usize;
        match self.stack.get(off..off.checked_add(8)?) {
            Some(b) => Some(u64::from_le_bytes(b.try_into().ok()?)),
            None => self.mem.read_u64(addr).ok(),
        }
    }
    fn write_u64(&self, addr: u64, value: u64) -> Option<()> {
        self.mem.write_all(addr, &value.to_le_bytes()).ok()
    }
}

impl<'a> Tracer<'a> {
    /// Seizes every thread of `cfg.pid` (no stop: a seized thread is traced, and threads it creates are traced
    /// from birth), rescanning `/proc/PID/task` until a pass finds no new thread.
    pub fn attach(cfg: Config, site: Site, sink: &'a mut dyn Sink) -> Result<Tracer<'a>, Errno> {
        let pid = cfg.pid;
        let mem = ProcMem::open(pid).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let mut t = Tracer {
            cfg,
            mem,
            site,
            threads: HashMap::new(),
            early: HashMap::new(),
            sink,
            start: Instant::now(),
            summary: Summary::default(),
            armed: false,
            detached: false,
            leader_status: None,
        };
        loop {
            let tids = procfs::list_tasks(pid).map_err(|_| Errno::ESRCH)?;
            let mut new = 0;
            for tid in tids {
                if t.threads.contains_key(&tid) {
                    continue;
                }
                match ptrace::seize(tid) {
                    Ok(()) => {
                        t.add_thread(tid, false);
                        new += 1;
                    }
                    // Gone, exiting, or already ours through an auto-attach: all normal while attaching.
                    Err(Errno::ESRCH) => {}
                    Err(Errno::EPERM) if !t.threads.is_empty() => {}
                    Err(e) => {
                        if t.threads.is_empty() {
                            return Err(e);
                        }
                    }
                }
            }
            if t.threads.is_empty() {
                return Err(Errno::ESRCH);
            }
            if new == 0 {
                break;
            }
        }
        Ok(t)
    }

    /// Adopts a process that was seized and stopped by the caller (the `-- CMD` path).
    pub fn adopt(cfg: Config, site: Site, sink: &'a mut dyn Sink) -> Result<Tracer<'a>, Errno> {
        let pid = cfg.pid;
        let mem = ProcMem::open(pid).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let mut t = Tracer {
            cfg,
            mem,
            site,
            threads: HashMap::new(),
            early: HashMap::new(),
            sink,
            start: Instant::now(),
            summary: Summary::default(),
            armed: false,
            detached: false,
            leader_status: None,
        };
        t.add_thread(pid, false);
        Ok(t)
    }

    fn add_thread(&mut self, tid: Tid, shared_child: bool) {
        self.threads.insert(
            tid,
            Thread {
                state: State::Running,
                shared_child,
            },
        );
        self.summary.threads_seen += 1;
    }

    /// Plants the int3. The bytes in memory must equal the file's: anything else (another tool's breakpoint
    /// or uprobe, a patched function) is refused rather than overwritten.
    pub fn arm(&mut self) -> Result<(), String> {
        let mut b = [0u8; 1];
        self.mem
            .read_exact(self.site.addr, &mut b)
            .map_err(|e| format!("cannot read the target's memory: {e}"))?;
        if b[0] != self.site.orig {
            return Err(format!(
                "the byte at {:#x} is {:#04x} in memory but {:#04x} in the file: another debugger, uprobe or hook \
                 has changed it; refusing to plant a breakpoint there",
                self.site.addr, b[0], self.site.orig
            ));
        }
        self.mem
            .write_all(self.site.addr, &[INT3])
            .map_err(|e| format!("cannot write the breakpoint: {e}"))?;
        self.armed = true;
        self.start = Instant::now();
        Ok(())
    }

    fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Runs until the deadline, a stop signal, or the end of the target; then detaches everything.
    pub fn run(&mut self) -> End {
        let mut last_status = Instant::now();
        let end = loop {
            if let Some(end) = self.ended() {
                break end;
            }
            let sig = signals::stop_requested();
            if sig != 0 {
                break End::Signal(sig);
            }
            if self.cfg.deadline.is_some_and(|d| Instant::now() >= d) {
                break End::Duration;
            }
            if self.cfg.live_status && last_status.elapsed() >= Duration::from_millis(500) {
                last_status = Instant::now();
                self.print_status();
            }
            match ptrace::wait_any(false) {
                Ok(None) => continue,
                Ok(Some((tid, stop))) => self.handle(tid, stop, Instant::now()),
                Err(_) => {
                    self.threads.clear();
                }
            }
        };
        if self.cfg.live_status {
            eprint!("\r\x1b[K");
        }
        self.detach_all();
        self.summary.duration = self.start.elapsed();
        self.summary.end = Some(end.clone());
        end
    }

    fn ended(&self) -> Option<End> {
        if let Some(e) = &self.leader_status
            && (matches!(e, End::Exec) || self.threads.values().all(|t| t.shared_child))
        {
            return Some(e.clone());
        }
        if self.threads.is_empty() {
            return Some(self.leader_status.clone().unwrap_or(End::Exited(0)));
        }
        None
    }

    fn print_status(&self) {
        let left = self
            .cfg
            .deadline
            .map(|d| {
                format!(
                    ", {:.0}s left",
                    d.saturating_duration_since(Instant::now()).as_secs_f64()
                )
            })
            .unwrap_or_default();
        eprint!(
            "\r\x1b[K{} hits, {} matching, {} threads{}",
            self.summary.hits,
            self.summary.matching,
            self.threads.len(),
            left
        );
    }

    fn resume(&mut self, tid: Tid, sig: i32) {
        let stepping = matches!(self.threads.get(&tid).map(|t| &t.state), Some(State::Stepping(_)));
        let r = if stepping {
            ptrace::step(tid, sig)
        } else {
            ptrace::cont(tid, sig)
        };
        if r.is_err() {
            // ESRCH: killed (SIGKILL) while stopped; its exit is reported by waitpid.
        }
        if sig != 0 {
            self.summary.signals_forwarded += 1;
        }
    }

    /// One stop while tracing.
    fn handle(&mut self, tid: Tid, stop: Stop, seen: Instant) {
        if !self.threads.contains_key(&tid) && !self.adopt_unknown(tid, stop) {
            return;
        }
        match stop {
            Stop::Exited(code) => self.gone(tid, End::Exited(code)),
            Stop::Killed(sig) => self.gone(tid, End::Killed(sig)),
            Stop::Signal(libc::SIGTRAP) => self.on_trap(tid, seen),
            Stop::Signal(sig) => self.on_signal(tid, sig),
            Stop::GroupStop(_) => {
                let _ = ptrace::listen(tid);
            }
            Stop::Interrupted | Stop::VforkDone => self.resume(tid, 0),
            Stop::Clone(new) | Stop::Fork(new) | Stop::Vfork(new) => {
                self.on_child(new);
                self.resume(tid, 0);
            }
            Stop::Exec => self.on_exec(tid),
        }
    }

    /// A stop from a tid we have not seen: a new thread whose first stop beat its parent's clone event, or a
    /// child process whose parent's event is still to come. Returns whether to handle the stop now.
    fn adopt_unknown(&mut self, tid: Tid, stop: Stop) -> bool {
        let status = procfs::read_status(tid)
            .map(|s| procinfo::parse_status(&s))
            .unwrap_or_default();
        if status.tgid == self.cfg.pid {
            self.add_thread(tid, false);
            return true;
        }
        if matches!(stop, Stop::Exited(_) | Stop::Killed(_)) {
            return false;
        }
        self.early.insert(tid, stop);
        false
    }

    fn gone(&mut self, tid: Tid, how: End) {
        if let Some(t) = self.threads.remove(&tid)
            && let State::Stepping(mut ev) = t.state
        {
            ev.ret_missing = Some("the thread exited during the call".into());
            self.emit(*ev);
        }
        if tid == self.cfg.pid {
            self.leader_status = Some(how);
        }
    }

    fn emit(&mut self, ev: Event) {
        *self.summary.events_by_tid.entry(ev.tid).or_default() += 1;
        self.sink.event(ev);
    }

    fn on_trap(&mut self, tid: Tid, seen: Instant) {
        let Ok(mut regs) = ptrace::get_regs(tid) else {
            return;
        };
        let thread = self.threads.get_mut(&tid).expect("known thread");
        if let State::Stepping(_) = thread.state {
            if regs.ip() == self.site.syscall_at + 2 {
                let State::Stepping(mut ev) = std::mem::replace(&mut thread.state, State::Running) else {
                    unreachable!()
                };
                ev.ret = Some(regs.0.rax);
                self.emit(*ev);
                self.summary.stopped += seen.elapsed();
                self.resume(tid, 0);
            } else if self.site.rest.is_none() && regs.ip() <= self.site.syscall_at {
                // Slow path: single-stepping the wrapper's prefix one instruction at a time.
                self.resume(tid, 0);
            } else {
                self.on_signal(tid, libc::SIGTRAP);
            }
            return;
        }
        if regs.ip().wrapping_sub(1) != self.site.addr || !self.armed {
            // Not ours: the target's own SIGTRAP.
            self.resume(tid, libc::SIGTRAP);
            return;
        }
        self.summary.hits += 1;
        let nr = regs.0.rdi;
        regs.set_ip(self.site.addr);
        if !self.cfg.numbers.contains(&nr) {
            let m = CapturedMem {
                sp: regs.sp(),
                stack: &[],
                mem: &self.mem,
            };
            if breakpoints::emulate(&self.site.first, &mut regs, &m).is_some() && ptrace::set_regs(tid, &regs).is_ok() {
                self.summary.stopped += seen.elapsed();
                self.resume(tid, 0);
            }
            return;
        }
        self.summary.matching += 1;
        self.on_match(tid, regs, seen);
    }

    fn on_match(&mut self, tid: Tid, mut regs: Regs, seen: Instant) {
        let entry = regs;
        let stack = if self.cfg.stack_bytes > 0 {
            mem::read_upto(tid, regs.sp(), self.cfg.stack_bytes)
        } else {
            Vec::new()
        };
        let m = CapturedMem {
            sp: regs.sp(),
            stack: &stack,
            mem: &self.mem,
        };
        let arg6 = m.read_u64(regs.sp().wrapping_add(8)).unwrap_or(0);
        let g = &regs.0;
        let ev = Event {
            time: self.elapsed(),
            tid,
            nr: g.rdi,
            args: [g.rsi, g.rdx, g.rcx, g.r8, g.r9, arg6],
            ret: None,
            ret_missing: None,
            capture: None,
        };
        let mut ok = breakpoints::emulate(&self.site.first, &mut regs, &m).is_some();
        if let Some(rest) = &self.site.rest {
            for d in rest {
                ok = ok && breakpoints::emulate(d, &mut regs, &m).is_some();
            }
        } else {
            self.summary.slow_path += 1;
        }
        let capture = (self.cfg.stack_bytes > 0).then_some(StackCapture {
            regs: entry,
            stack,
            asked: self.cfg.stack_bytes,
        });
        let ev = Event { capture, ..ev };
        if !ok || ptrace::set_regs(tid, &regs).is_err() {
            // Memory at the stack argument unreadable: leave the registers as they were at the hit, rewound.
            let mut back = entry;
            back.set_ip(self.site.addr);
            let m = CapturedMem {
                sp: back.sp(),
                stack: &[],
                mem: &self.mem,
            };
            let _ = breakpoints::emulate(&self.site.first, &mut back, &m);
            let _ = ptrace::set_regs(tid, &back);
            let mut ev = ev;
            ev.ret_missing = Some("could not step the wrapper".into());
            self.emit(ev);
            self.resume(tid, 0);
            return;
        }
        self.summary.stopped += seen.elapsed();
        if let Some(t) = self.threads.get_mut(&tid) {
            t.state = State::Stepping(Box::new(ev));
        }
        self.resume(tid, 0);
    }

    /// A signal-delivery-stop: delivered exactly once, by passing it back when resuming. A signal arriving while a
    /// matching call is being stepped ends that step first: the return value is known only if the syscall
    /// instruction already completed.
    fn on_signal(&mut self, tid: Tid, sig: i32) {
        if let Some(t) = self.threads.get_mut(&tid)
            && let State::Stepping(_) = t.state
        {
            let State::Stepping(mut ev) = std::mem::replace(&mut t.state, State::Running) else {
                unreachable!()
            };
            match ptrace::get_regs(tid) {
                Ok(r) if r.ip() == self.site.syscall_at + 2 => ev.ret = Some(r.0.rax),
                _ => ev.ret_missing = Some(format!("signal {sig} arrived before the call returned")),
            }
            self.emit(*ev);
        }
        self.resume(tid, sig);
    }

    /// A new thread or child process `new`, reported by its parent's clone/fork/vfork event.
    fn on_child(&mut self, new: Tid) {
        if new <= 0 || self.threads.contains_key(&new) {
            return;
        }
        let status = procfs::read_status(new)
            .map(|s| procinfo::parse_status(&s))
            .unwrap_or_default();
        if status.tgid == self.cfg.pid {
            self.add_thread(new, false);
            if let Some(stop) = self.early.remove(&new) {
                self.handle(new, stop, Instant::now());
            }
            return;
        }
        // A child process. Its first stop comes before it runs any code.
        let first = match self.early.remove(&new) {
            Some(s) => Some(s),
            None => ptrace::wait_for(new, false).ok().flatten().map(|(_, s)| s),
        };
        if matches!(first, None | Some(Stop::Exited(_)) | Some(Stop::Killed(_))) {
            return;
        }
        if ptrace::same_vm(new, self.cfg.pid) {
            // vfork/CLONE_VM: it shares our memory and our int3; restoring the byte would blind the parent.
            // Keep it traced and handle its hits until it execs or exits.
            self.add_thread(new, true);
            self.resume(new, 0);
            return;
        }
        // fork: the child has its own copy of the int3; put the file's byte back before it runs.
        if self.armed
            && let Ok(child_mem) = ProcMem::open(new)
        {
            let _ = child_mem.write_all(self.site.addr, &[self.site.orig]);
        }
        self.summary.forks_cleaned += 1;
        let _ = ptrace::detach(new, 0);
    }

    fn on_exec(&mut self, tid: Tid) {
        let shared = self.threads.get(&tid).is_some_and(|t| t.shared_child);
        if shared {
            // A vfork child exec'd: it has a fresh address space without our int3.
            self.threads.remove(&tid);
            let _ = ptrace::detach(tid, 0);
            return;
        }
        // The target replaced its program: our breakpoint is gone with the old address space. The exec'ing
        // thread now has the leader's id; other threads report their exit.
        self.armed = false;
        self.threads.retain(|&t, th| t == tid || th.shared_child);
        if tid != self.cfg.pid
            && let Some(th) = self.threads.remove(&tid)
        {
            self.threads.insert(self.cfg.pid, th);
        }
        self.leader_status = Some(End::Exec);
        if let Some(th) = self.threads.get_mut(&self.cfg.pid) {
            th.state = State::Held { sig: 0, step: None };
        }
    }

    /// Stops every thread (handling whatever they report on the way), drains the SIGTRAPs our int3 and single
    /// steps may still have queued, restores the original byte, rewinds any thread sitting just past the int3,
    /// and detaches everything.
    pub fn detach_all(&mut self) {
        if self.detached {
            return;
        }
        self.detached = true;
        signals::stop_timer();
        for (&tid, t) in &self.threads {
            if !matches!(t.state, State::Held { .. }) {
                let _ = ptrace::interrupt(tid);
            }
        }
        let give_up = Instant::now() + Duration::from_secs(10);
        while self.threads.values().any(|t| !matches!(t.state, State::Held { .. })) && Instant::now() < give_up {
            match ptrace::wait_any(false) {
                Ok(Some((tid, stop))) => self.hold(tid, stop),
                Ok(None) => {}
                Err(_) => self.threads.clear(),
            }
        }
        let tids: Vec<Tid> = self.threads.keys().copied().collect();
        for &tid in &tids {
            self.drain_traps(tid);
        }
        for &tid in &tids {
            if let Some(Thread {
                state: State::Held { step, .. },
                ..
            }) = self.threads.get_mut(&tid)
                && let Some(mut ev) = step.take()
            {
                if ev.ret.is_none() {
                    // The thread enters (or restarts) the syscall by itself after detach.
                    ev.ret_missing = Some("the trace ended before the call returned".into());
                }
                self.emit(*ev);
            }
        }
        if self.armed {
            self.restore_site();
        }
        for tid in tids {
            let sig = match self.threads.get(&tid).map(|t| &t.state) {
                Some(State::Held { sig, .. }) => *sig,
                _ => 0,
            };
            let _ = ptrace::detach(tid, sig);
        }
        self.threads.clear();
    }

    fn restore_site(&mut self) {
        let mut b = [0u8; 1];
        match self.mem.read_exact(self.site.addr, &mut b) {
            Ok(()) if b[0] == INT3 => {
                if let Err(e) = self.mem.write_all(self.site.addr, &[self.site.orig]) {
                    self.summary
                        .warnings
                        .push(format!("could not restore the byte at {:#x}: {e}", self.site.addr));
                }
            }
            Ok(()) => self.summary.warnings.push(format!(
                "the breakpoint byte at {:#x} was changed by someone else (now {:#04x}); left as it is",
                self.site.addr, b[0]
            )),
            Err(_) => {}
        }
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
            let stop = match ptrace::wait_for(tid, false) {
                Ok(Some((_, stop))) => stop,
                _ => return,
            };
            match stop {
                Stop::Exited(code) => return self.gone(tid, End::Exited(code)),
                Stop::Killed(sig) => return self.gone(tid, End::Killed(sig)),
                Stop::Signal(libc::SIGTRAP) => {
                    let Ok(mut r) = ptrace::get_regs(tid) else { return };
                    let armed = self.armed;
                    let (site, after) = (self.site.addr, self.site.syscall_at + 2);
                    let Some(Thread {
                        state: State::Held { sig, step },
                        ..
                    }) = self.threads.get_mut(&tid)
                    else {
                        return;
                    };
                    if armed && r.ip().wrapping_sub(1) == site {
                        r.set_ip(site);
                        let _ = ptrace::set_regs(tid, &r);
                    } else if let Some(ev) = step.as_mut().filter(|_| r.ip() == after) {
                        ev.ret = Some(r.0.rax);
                    } else {
                        // The target's own SIGTRAP: it gets it at detach.
                        *sig = libc::SIGTRAP;
                        return;
                    }
                }
                Stop::Signal(s) => {
                    if let Some(Thread {
                        state: State::Held { sig, .. },
                        ..
                    }) = self.threads.get_mut(&tid)
                    {
                        *sig = s;
                    }
                    return;
                }
                _ => {}
            }
        }
    }

    /// One stop while stopping everything for detach: record it, keep the thread stopped.
    fn hold(&mut self, tid: Tid, stop: Stop) {
        if !self.threads.contains_key(&tid) {
            let status = procfs::read_status(tid)
                .map(|s| procinfo::parse_status(&s))
                .unwrap_or_default();
            if status.tgid == self.cfg.pid {
                self.add_thread(tid, false);
            } else {
                self.early.insert(tid, stop);
                return;
            }
        }
        let mut sig = 0;
        match stop {
            Stop::Exited(code) => return self.gone(tid, End::Exited(code)),
            Stop::Killed(s) => return self.gone(tid, End::Killed(s)),
            Stop::Signal(libc::SIGTRAP) => {
                let stepping = matches!(self.threads[&tid].state, State::Stepping(_));
                match ptrace::get_regs(tid) {
                    Ok(r) if stepping && r.ip() == self.site.syscall_at + 2 => {
                        if let Some(t) = self.threads.get_mut(&tid)
                            && let State::Stepping(ev) = &mut t.state
                        {
                            ev.ret = Some(r.0.rax);
                        }
                    }
                    Ok(mut r) if self.armed && r.ip().wrapping_sub(1) == self.site.addr => {
                        // Hit while we were stopping: it will run the original instruction after detach.
                        r.set_ip(self.site.addr);
                        let _ = ptrace::set_regs(tid, &r);
                    }
                    _ => sig = libc::SIGTRAP,
                }
            }
            Stop::Signal(s) => sig = s,
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
            Stop::GroupStop(_) | Stop::Interrupted | Stop::VforkDone => {}
        }
        if let Some(t) = self.threads.get_mut(&tid) {
            let step = match std::mem::replace(&mut t.state, State::Running) {
                State::Stepping(ev) => Some(ev),
                State::Held { step, .. } => step,
                State::Running => None,
            };
            t.state = State::Held { sig, step };
        }
    }
}

impl Drop for Tracer<'_> {
    fn drop(&mut self) {
        self.detach_all();
    }
}

/// The register a condition on `syscall()` reads the number from.
pub const NR_REG: Reg = Reg::Rdi;
