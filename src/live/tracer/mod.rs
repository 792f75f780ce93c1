//! The non-stop event loop: only the thread that hits a breakpoint stops, and a probe's int3 is never lifted
//! while other threads run. Matches on [`Stop`] values. Every kernel call goes through the [`kernel::Kernel`]
//! trait (`Live`: `os`), so the unit tests (`tests.rs`) drive this state machine over scripted stops
//! (`script.rs`). Handed in rather than called through it: the guardian (`live::guardian`, a pipe to our own
//! child) and the CPython reader's frame walk (`live::python`); both are absent in those tests.
//!
//! A hit whose probes' conditions are all false is resumed after emulating the displaced instruction (one
//! GETREGS, one SETREGS, one CONT); an instruction the emulator cannot run is single-stepped with every other
//! thread stopped (correct, slow, counted). A matching hit on a `syscall()`-style wrapper has its arguments and
//! stack copied, the wrapper's register moves emulated up to its `syscall` instruction, and exactly that
//! instruction single-stepped, so rax is read on the same thread right after the kernel returned. A matching
//! function entry that wants its return value plants a return breakpoint that only the same thread at the same
//! stack depth completes.

mod attach;
mod children;
mod detach;
mod error;
mod fast;
mod fast_sites;
mod faults;
mod hit;
mod hold;
mod inject;
mod kernel;
mod known;
mod pad;
mod ring;
mod sampler;
#[cfg(test)]
mod script;
mod site;
mod spec;
#[cfg(test)]
mod tests;

use crate::live::guardian::{Guard, Msg};
use crate::model::event::{End, Event, Sink, StackCapture, Summary};
use crate::model::regs::Regs;
use crate::model::status;
use crate::model::window::{Window, Windows};
use crate::os::Tid;
use crate::os::ptrace::Stop;
use crate::x86::breakpoints::{self, INT3, Insn, Memory};
use crate::x86::trampoline;
pub use error::{AttachError, Error};
pub use fast_sites::{FastFunction, FastRequest};
use kernel::{Kernel, Live, Mem};
use nix::errno::Errno;
pub use spec::{Condition, Config, Numbers, Probe, SiteSpec};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use site::{Site, Wrapper};

enum State {
    Running,
    /// A matching wrapper call is being stepped until rip reaches `after` (just past `syscall`); `entry`: the
    /// registers at the wrapper's entry, to undo the step if a signal comes first; `matched`: the site's probes
    /// that counted this call (their counters are given back if the step is undone).
    Stepping {
        ev: Box<Event>,
        after: u64,
        entry: Box<Regs>,
        matched: Vec<usize>,
    },
    /// Stopped by us (to detach, or while another thread steps alone). `sig` is delivered when it is let go (a
    /// signal seen while holding is delivered at once, `Tracer::deliver_now`; kept are only the target's own
    /// SIGTRAP and one that came during a system call we injected); `group`: it is in a group-stop and must stay
    /// stopped.
    Held {
        sig: i32,
        group: bool,
        prev: Box<State>,
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
    /// For a vfork child: the thread that created it, asleep in the kernel until this child execs or exits.
    vfork_parent: Option<Tid>,
    /// Its passes through `--fast`'s trampoline.
    passes: fast::Passes,
}

pub struct Tracer<'a> {
    cfg: Config,
    /// Every kernel operation goes through this (the real one, or a test's script).
    k: Rc<dyn Kernel>,
    /// The target's memory.
    mem: Box<dyn Mem>,
    sites: HashMap<u64, Site>,
    /// The named probes (a probe script's) of the sites `--fast` patched, by the patch's label (`None`: the
    /// `syscall()` wrapper): each call from the trampoline is matched against them (see `select`).
    fast_probes: HashMap<Option<std::sync::Arc<str>>, Vec<Probe>>,
    /// Return sites whose bytes were put back while a thread may already have executed their int3 (or a fork
    /// child may still hold it), with those bytes (the first, and its guard's).
    retired: HashMap<u64, (u8, Option<u8>)>,
    threads: HashMap<Tid, Thread>,
    /// Stops of tids not known yet (a new thread's or child's first stop can come before its parent's event).
    early: HashMap<Tid, Stop>,
    sink: &'a mut dyn Sink,
    /// While detaching, events wait here and go to the sink once every thread is let go: a sink that waits on a
    /// busy analysis must not keep the target stopped.
    deferred: Option<Vec<Event>>,
    start: Instant,
    pub summary: Summary,
    armed: bool,
    detached: bool,
    leader_status: Option<End>,
    cs: Option<capstone::Capstone>,
    /// The `--fast` patch, when installed.
    fast: Option<fast::Fast>,
    /// The guardian process that restores the bytes if we die without detaching, or why there is none.
    guard: Option<Guard>,
    no_guard: Option<crate::live::guardian::StartError>,
    /// The SIGTRAP handler placed in the target for the same case.
    pad: Option<pad::Pad>,
    /// `--faults`: the page-fault samplers of the threads, once started.
    faults: Option<faults::Faults>,
    /// A thread kept a SIGTRAP pending with the signal blocked at detach: the pad stays to take it.
    trap_left_pending: bool,
    /// Where injected system calls run.
    gate: inject::Gate,
    /// The thread whose stop is being handled.
    current: Option<Tid>,
    /// Threads a bounded wait gave up on, and what their next stop must settle.
    late: HashMap<Tid, Late>,
    /// While no CPython is known: the modules already looked at for one.
    python_seen: Option<HashSet<(String, u64)>>,
    /// Buffers for the stack windows of matching hits, recycled (see [`Windows`]).
    windows: Windows,
}

/// What a wait that ran out left behind on a thread (it runs on; its next stop is settled by
/// [`Tracer::settle_late`] before anything else looks at it).
enum Late {
    /// A fork child whose first stop had not come when its creator's event was handled: its bytes are already
    /// back (it cannot run before that stop), it is detached at that stop.
    ForkChild,
    /// Our single step, or the system call we injected, has not trapped yet: that trap is ours.
    Trap,
    /// A system call we injected is still running: these registers and this signal mask go back at its next
    /// stop.
    Injected(Box<(Regs, u64)>),
    /// A system call run through the call gate has not reached its exit stop: these registers and this signal
    /// mask go back there; `true`: its entry stop was seen.
    Gate(Box<(Regs, u64, bool)>),
}

/// Reads through the captured stack first, then the target's memory (for the emulator's loads).
struct CapturedMem<'m> {
    sp: u64,
    stack: &'m [u8],
    mem: &'m dyn Mem,
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

/// rax just after a stepped `syscall` instruction. -ERESTART* means the call was interrupted (by a signal, or by
/// our PTRACE_INTERRUPT) and the kernel restarts it or fails it with EINTR: the target never sees that value. The
/// single-step trap is dequeued before the interrupting signal (SIGTRAP is synchronous), so this is seen here.
fn set_syscall_result(ev: &mut Event, rax: u64) {
    if (-516..=-512).contains(&(rax as i64)) {
        ev.ret_missing = Some("interrupted in the kernel; restarted, or failed with EINTR".into());
    } else {
        ev.ret = Some(rax);
    }
}

/// At a step's trap: SIGTRAP if the stop is really the target's own SIGTRAP (sent by a process, si_code <= 0),
/// pending when the step ended, which swallowed our trap (a legacy signal is queued once); else 0.
fn own_sigtrap(k: &dyn Kernel, tid: Tid) -> i32 {
    if k.sig_code(tid).is_ok_and(|c| c <= 0) { libc::SIGTRAP } else { 0 }
}

/// Whether `tid`'s SIGTRAP stop is an int3's: the kernel sends those with SI_KERNEL (other traps have their own
/// codes, a signal sent by a process has SI_USER, SI_TKILL, ...). An unreadable siginfo counts as the int3's.
fn from_int3(k: &dyn Kernel, tid: Tid) -> bool {
    k.sig_code(tid).ok().is_none_or(|c| c == libc::SI_KERNEL)
}

/// What a site serves, for messages: `probe m (libc.so.6:munmap)`, `syscall()`, `libc.so.6:mmap`.
fn site_names(site: &Site) -> String {
    let names: Vec<String> = site
        .probes
        .iter()
        .map(|p| match (&p.name, &p.label) {
            (Some(n), Some(l)) => format!("probe {n} ({l})"),
            (Some(n), None) => format!("probe {n} (syscall())"),
            (None, Some(l)) => l.to_string(),
            (None, None) => "syscall()".to_string(),
        })
        .collect();
    names.join(", ")
}

impl<'a> Tracer<'a> {
    /// On the real kernel, with the guardian started before anything is planted.
    fn new(cfg: Config, specs: Vec<SiteSpec>, sink: &'a mut dyn Sink) -> Result<Tracer<'a>, AttachError> {
        let (mem, guard) = kernel::open_live(cfg.pid, specs.first().map_or(0, |s| s.addr))?;
        Tracer::with_kernel(cfg, specs, sink, Rc::new(Live), mem, guard)
    }

    /// Over any [`Kernel`]; `guard`: the guardian, or why there is none.
    fn with_kernel(
        cfg: Config,
        specs: Vec<SiteSpec>,
        sink: &'a mut dyn Sink,
        k: Rc<dyn Kernel>,
        mem: Box<dyn Mem>,
        guard: kernel::GuardOrWhy,
    ) -> Result<Tracer<'a>, AttachError> {
        let cfg_python_search = cfg.python_search && cfg.python.is_none();
        let stack_bytes = cfg.stack_bytes;
        let epoch = cfg.epoch;
        let (guard, no_guard) = match guard {
            Ok(g) => (Some(g), None),
            Err(why) => (None, why),
        };
        let cs = breakpoints::disassembler();
        let mut sites = HashMap::new();
        for spec in specs {
            let Some(cs) = cs.as_ref() else {
                return Err(AttachError::Disassembler);
            };
            let Some(&first) = breakpoints::decode(cs, &spec.code, spec.addr, 1).first() else {
                return Err(AttachError::Undecodable { addr: spec.addr });
            };
            let wrapper = spec.wrapper.then(|| {
                let syscall_at = breakpoints::decode(cs, &spec.code, spec.addr, breakpoints::WRAPPER_INSNS)
                    .iter()
                    .find(|d| d.insn == Some(Insn::Syscall))
                    .map(|d| d.addr)?;
                let rest = breakpoints::plan_wrapper(cs, &spec.code, spec.addr).map(|p| p.prefix[1..].to_vec());
                Some(Wrapper { rest, syscall_at })
            });
            let wrapper = match wrapper {
                Some(None) => return Err(AttachError::NotAWrapper { addr: spec.addr }),
                Some(Some(w)) => Some(w),
                None => None,
            };
            let cont_past = spec.code.starts_with(&[0x48, 0x89, 0xf8]);
            let then = Site::then_of(cs, &spec.code, spec.addr, &first, spec.wrapper);
            let site = sites.entry(spec.addr).or_insert(Site {
                addr: spec.addr,
                orig: spec.code[0],
                guard: Site::guard_of(&first, cont_past, spec.code.get(1).copied(), then.as_ref()),
                then,
                first,
                cont_past,
                wrapper: None,
                probes: Vec::new(),
                waiting: Vec::new(),
            });
            site.wrapper = site.wrapper.take().or(wrapper);
            site.probes.extend(spec.probes);
        }
        Ok(Tracer {
            cfg,
            k,
            mem,
            sites,
            fast_probes: HashMap::new(),
            retired: HashMap::new(),
            threads: HashMap::new(),
            early: HashMap::new(),
            sink,
            deferred: None,
            start: epoch,
            summary: Summary::default(),
            armed: false,
            detached: false,
            leader_status: None,
            cs,
            fast: None,
            guard,
            no_guard,
            pad: None,
            faults: None,
            trap_left_pending: false,
            gate: inject::Gate::Untried,
            current: None,
            late: HashMap::new(),
            python_seen: cfg_python_search.then(HashSet::new),
            // Four buffers touched now: a burst's first captures find them ready.
            // Room for the record `--fast` reads below the stack in the same copy.
            windows: Windows::new(stack_bytes + trampoline::BLOCK, if stack_bytes > 0 { 4 } else { 0 }),
        })
    }

    /// Plants every probe's int3. The bytes in memory must equal the file's: anything else (another tool's
    /// breakpoint or uprobe, a patched function) is refused rather than overwritten.
    pub fn arm(&mut self) -> Result<(), Error> {
        for site in self.sites.values() {
            let mut b = [0u8; 2];
            let n = site.bytes().0.len();
            self.mem.read_exact(site.addr, &mut b[..n]).map_err(Error::ReadMemory)?;
            if b[..n] != site.bytes().0[..] {
                let (addr, file) = (site.addr, site.orig);
                let changed = b.iter().zip(&site.bytes().0).position(|(a, b)| a != b).unwrap_or(0);
                let now = b[changed];
                let addr = addr + changed as u64;
                let file = if changed == 0 { file } else { site.guard.unwrap_or(file) };
                return Err(Error::ByteChanged { what: site_names(site), addr, now, file });
            }
        }
        self.install_pad(None);
        let listed: Vec<(u64, bool)> = self.sites.values().map(|s| (s.addr, s.guard.is_some())).collect();
        for (addr, guarded) in listed {
            self.pad_list(crate::x86::trappad::entry(addr, false));
            if guarded {
                self.pad_list(crate::x86::trappad::guard_entry(addr + 1));
            }
        }
        for site in self.sites.values() {
            let (orig, planted) = site.bytes();
            if let Some(g) = self.guard.as_mut() {
                g.send(&Msg::Plant { addr: site.addr, orig, planted: planted.clone() });
            }
            if let Err(e) = site.plant(&*self.mem) {
                self.armed = true;
                self.restore_all();
                return Err(Error::WriteBreakpoint(e));
            }
        }
        self.armed = true;
        self.start = Instant::now();
        Ok(())
    }

    /// Time zero of the events (and the summary's duration): when the last site was armed.
    pub fn armed_at(&self) -> Instant {
        self.start
    }

    /// Runs until the deadline, a stop signal, or the end of the target; then detaches everything.
    /// The CPython reader, when the target runs one (its warnings and costs, for the summary).
    pub fn python(&self) -> Option<&crate::live::python::PythonReader> {
        self.cfg.python.as_ref()
    }

    pub fn run(&mut self) -> End {
        // Attaching left every thread held; the breakpoints are armed now.
        self.start_faults();
        self.release_all();
        let mut last_status = Instant::now();
        let end = loop {
            if let Some(end) = self.ended() {
                break end;
            }
            let sig = self.k.stop_requested();
            if sig != 0 {
                break End::Signal(sig);
            }
            if self.k.faulted() {
                break End::Fault;
            }
            if self.cfg.deadline.is_some_and(|d| Instant::now() >= d) {
                break End::Duration;
            }
            if last_status.elapsed() >= Duration::from_millis(1000) {
                last_status = Instant::now();
                self.verify_sites();
                self.look_for_python();
                if self.cfg.live_status {
                    self.print_status();
                }
            }
            self.take_known();
            self.pace_faults();
            self.drain_ring(false);
            match self.k.wait_any(false) {
                Ok(None) => continue,
                Ok(Some((tid, stop))) => {
                    // Known while the stop is handled: a panic in between leaves this thread in a stop whose
                    // wait status is consumed, and detach must know that (`adopt_interrupted`).
                    self.current = Some(tid);
                    self.handle(tid, stop, Instant::now());
                    self.current = None;
                }
                Err(_) => self.threads.clear(),
            }
        };
        if self.cfg.live_status {
            eprint!("\r\x1b[K");
        }
        self.cfg.ended.store(true, std::sync::atomic::Ordering::SeqCst);
        self.detach_all();
        self.summary.duration = self.start.elapsed();
        self.summary.end = Some(end.clone());
        end
    }

    /// A CPython mapped since the last look (libpython loaded with dlopen): its frames join the stacks captured
    /// from now on. Only modules not looked at before are read; one that refuses (an unsupported version) is
    /// said once, and the search ends.
    fn look_for_python(&mut self) {
        let Some(seen) = self.python_seen.as_mut() else { return };
        match self.k.locate_python(self.cfg.pid, seen) {
            Ok(None) => {}
            Ok(Some(p)) => {
                self.cfg.python = Some(p);
                self.python_seen = None;
                self.withdraw_all_known();
            }
            Err(e) => {
                self.summary.warnings.push(format!("Python frames left out: {e}"));
                self.python_seen = None;
            }
        }
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

    /// Another tool (a debugger, a uprobe removed with its own saved byte) may overwrite our int3: say so at
    /// once, stop counting the site as ours, and never put a byte back there.
    fn verify_sites(&mut self) {
        if !self.armed {
            return;
        }
        let lost: Vec<u64> =
            self.sites.keys().copied().filter(|&a| self.read_byte(a).is_some_and(|b| b != INT3)).collect();
        for addr in lost {
            let now = self.read_byte(addr).unwrap_or(0);
            let w = format!(
                "the breakpoint at {addr:#x} was overwritten by someone else (now {now:#04x}); calls there are no \
                 longer seen, and the byte will be left as it is"
            );
            eprintln!("syscatch: WARNING: {w}");
            self.summary.warnings.push(w);
            if let Some(site) = self.sites.remove(&addr) {
                for (_, _, mut ev) in site.waiting {
                    ev.ret_missing = Some("the return breakpoint was overwritten".into());
                    self.emit(*ev);
                }
            }
        }
    }

    fn print_status(&self) {
        let left = self
            .cfg
            .deadline
            .map(|d| format!(", {:.0}s left", d.saturating_duration_since(Instant::now()).as_secs_f64()))
            .unwrap_or_default();
        eprint!(
            "\r\x1b[K{} hits, {} matching, {} threads{}",
            self.summary.hits,
            self.summary.matching,
            self.threads.len(),
            left
        );
    }

    /// Resumes a thread the way its state asks: stepping, or running.
    fn resume(&mut self, tid: Tid, sig: i32) {
        let stepping = matches!(self.threads.get(&tid).map(|t| &t.state), Some(State::Stepping { .. }));
        // An error is ESRCH: killed (SIGKILL) while stopped; waitpid reports its exit.
        let _ = if stepping { self.k.step(tid, sig) } else { self.k.cont(tid, sig) };
        if sig != 0 {
            self.summary.signals_forwarded += 1;
        }
    }

    /// One stop while tracing.
    fn handle(&mut self, tid: Tid, stop: Stop, seen: Instant) {
        // Any stop ends the guess: only the stop right after a trampoline event may be the same site's next one.
        let guess = self.threads.get_mut(&tid).and_then(|t| t.passes.guess.take());
        let Some(stop) = self.settle_late(tid, stop) else { return };
        if !self.threads.contains_key(&tid) && !self.adopt_unknown(tid, stop) {
            return;
        }
        match stop {
            Stop::Exited(code) => self.gone(tid, End::Exited(code)),
            Stop::Killed(sig) => self.gone(tid, End::Killed(sig)),
            Stop::Signal(libc::SIGTRAP) => self.on_trap(tid, seen, guess),
            Stop::Signal(sig) => self.on_signal(tid, sig),
            Stop::GroupStop(_) => {
                let _ = self.k.listen(tid);
            }
            Stop::Interrupted => {
                // A new thread's first stop: the ring names threads by their fs base.
                self.learn_new_thread(tid);
                self.resume(tid, 0)
            }
            // A syscall stop here is one the call gate asked for, settled already (see `Late::Gate`).
            Stop::VforkDone | Stop::Syscall => self.resume(tid, 0),
            Stop::Clone(new) | Stop::Fork(new) | Stop::Vfork(new) => {
                self.on_child(tid, new);
                self.resume(tid, 0);
            }
            Stop::Exec => self.on_exec(tid),
        }
    }

    /// A stop from a tid we have not seen: a new thread whose first stop beat its parent's clone event, or a
    /// child process whose parent's event is still to come. Returns whether to handle the stop now.
    fn adopt_unknown(&mut self, tid: Tid, stop: Stop) -> bool {
        let status = self.k.read_status(tid).map(|s| status::parse_status(&s)).unwrap_or_default();
        if status.tgid == self.cfg.pid {
            self.add_thread(tid, false);
            return true;
        }
        if !matches!(stop, Stop::Exited(_) | Stop::Killed(_)) {
            self.early.insert(tid, stop);
        }
        false
    }

    fn gone(&mut self, tid: Tid, how: End) {
        self.forget_faults_of(tid);
        // Its tid may be reused by a new thread: what was remembered about its Python frames goes.
        if let Some(p) = self.cfg.python.as_mut() {
            p.forget_thread(tid);
        }
        if let Some(t) = self.threads.remove(&tid) {
            let state = match t.state {
                State::Held { prev, .. } => *prev,
                s => s,
            };
            if let State::Stepping { mut ev, .. } = state {
                ev.ret_missing = Some("the thread exited during the call".into());
                self.emit(*ev);
            }
        }
        for site in self.sites.values_mut() {
            for (_, _, ev) in site.waiting.iter_mut().filter(|(t, _, _)| *t == tid) {
                ev.ret_missing = Some("the thread exited before the call returned".into());
            }
        }
        let orphans: Vec<Box<Event>> = self
            .sites
            .values_mut()
            .flat_map(|s| {
                let (gone, keep): (Vec<_>, Vec<_>) = s.waiting.drain(..).partition(|(t, _, _)| *t == tid);
                s.waiting = keep;
                gone.into_iter().map(|(_, _, ev)| ev)
            })
            .collect();
        for ev in orphans {
            self.emit(*ev);
        }
        if tid == self.cfg.pid {
            self.leader_status = Some(how);
        }
    }

    /// Sends an event on. With `--fast`'s ring, an event of a breakpoint (libc's `mremap`, or a function the
    /// trampoline could not take) waits for the calls numbered before it completed (see `emit_after_ring`).
    fn emit(&mut self, ev: Event) {
        match self.emit_after_ring(ev) {
            Some(ev) => self.emit_now(ev),
            None => self.drain_ring(false),
        }
    }

    /// Sends an event on at once.
    pub(super) fn emit_now(&mut self, mut ev: Event) {
        if ev.probe.is_none() && !self.fast_probes.is_empty() && !self.select(&mut ev) {
            return;
        }
        let also = std::mem::take(&mut ev.also);
        for name in also {
            let copy = Event { probe: Some(name), ..ev.clone() };
            self.deliver(copy);
        }
        self.deliver(ev);
    }

    fn deliver(&mut self, ev: Event) {
        *self.summary.events_by_tid.entry(ev.tid).or_default() += 1;
        match self.deferred.as_mut() {
            Some(later) => later.push(ev),
            None => self.sink.event(ev),
        }
    }

    /// Sends the events held back while detaching.
    fn send_deferred(&mut self) {
        for ev in self.deferred.take().unwrap_or_default() {
            self.sink.event(ev);
        }
    }

    /// Whether `addr` holds one of our int3s now.
    fn planted(&self, addr: u64) -> bool {
        self.armed && self.sites.contains_key(&addr)
    }

    /// A signal-delivery-stop: delivered exactly once, by passing it back when resuming. A signal that arrives
    /// while a matching call is being stepped, before the kernel ran the `syscall` instruction, undoes the step:
    /// the thread goes back to the wrapper's entry, takes the signal, and re-enters the wrapper afterwards (after
    /// its handler, or after SIGCONT), where it is caught again, so the call is reported once, with its result.
    fn on_signal(&mut self, tid: Tid, sig: i32) {
        self.settle_step(tid, sig);
        self.resume(tid, sig);
    }

    /// A stepping thread stopped by signal `sig` somewhere other than its step's trap: ends the step (the
    /// thread is then resumed with CONT, never with a step that would make the handler's entry trap).
    fn settle_step(&mut self, tid: Tid, sig: i32) {
        if let Some(t) = self.threads.get_mut(&tid)
            && let State::Stepping { after, ref entry, .. } = t.state
            && let entry = *entry.clone()
            && let State::Stepping { mut ev, matched, .. } = std::mem::replace(&mut t.state, State::Running)
        {
            match self.k.get_regs(tid) {
                Ok(r) if r.ip() == after => {
                    set_syscall_result(&mut ev, r.0.rax);
                    self.emit(*ev);
                }
                Ok(r) if r.ip() < after && self.k.set_regs(tid, &entry).is_ok() => {
                    let _ = r;
                    // The call is caught again when the thread re-enters the wrapper: it must count then, once.
                    self.summary.matching = self.summary.matching.saturating_sub(1);
                    if let Some(site) = self.sites.get_mut(&entry.ip()) {
                        for &i in &matched {
                            if let Some(p) = site.probes.get_mut(i) {
                                p.emitted = p.emitted.saturating_sub(1);
                                p.matched = p.matched.saturating_sub(1);
                            }
                        }
                    }
                }
                _ => {
                    ev.ret_missing = Some(format!("signal {sig} arrived before the call returned"));
                    self.emit(*ev);
                }
            }
        }
    }
}

impl Drop for Tracer<'_> {
    fn drop(&mut self) {
        self.detach_all();
    }
}
