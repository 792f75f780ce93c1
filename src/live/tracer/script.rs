//! A scripted [`Kernel`] for unit tests of the tracer's state machine: threads with registers, a small memory
//! image per address space, and a queue of stops written by the test. It behaves as the kernel does where the
//! tracer relies on it: a thread reports a stop only while it runs (a queued stop waits for the tracer to resume
//! its thread), PTRACE_INTERRUPT stops a running thread (unless the test says it cannot stop) or stays pending
//! on a stopped one, a stop's `si_code` says what made it, and `/proc` shows `t` for a thread in a ptrace stop.
//! Everything the tracer asks for is recorded ([`Call`]) for the test to check. The clock is virtual: a bounded
//! wait that runs out costs no real time.
//!
//! When the queue has nothing a blocking wait could return, the script is over: the next `stop_requested` says
//! SIGINT, as if the user pressed Ctrl-C, and the tracer detaches.

use super::kernel::{Kernel, Mem};
use crate::live::python::{LocateError, PythonReader};
use crate::model::regs::Regs;
use crate::os::Tid;
use crate::os::ptrace::Stop;
use nix::errno::Errno;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// What the tracer asked for, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Call {
    Seize(Tid),
    Interrupt(Tid),
    Cont(Tid, i32),
    Step(Tid, i32),
    Listen(Tid),
    Detach(Tid, i32),
    /// The registers set: (rip, rax).
    SetRegs(Tid, u64, u64),
    /// The blocked-signal mask set.
    SetMask(Tid, u64),
    /// A memory write: (address space, address, bytes).
    Write(Tid, u64, Vec<u8>),
    /// Not a request: the stop a wait reported, logged in its place among the requests.
    Stopped(Tid, Stop),
}

type Edit = Box<dyn Fn(&mut libc::user_regs_struct)>;

/// One stop the test wants reported, with what it does to the thread's registers first.
struct Entry {
    tid: Tid,
    stop: Stop,
    code: Option<i32>,
    edit: Option<Edit>,
    /// Not reported before the virtual clock reads this (a step that blocks in the kernel for a while).
    at: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Running,
    /// In a ptrace stop, with the stop's si_code.
    Stopped(i32),
    Detached,
    Gone,
}

pub(super) struct FakeThread {
    pub regs: Regs,
    run: Run,
    pub tgid: Tid,
    /// The address space (a thread shares its process's; a fork child has its own).
    pub vm: Tid,
    /// `/proc` state while not in a ptrace stop: `R`, `S`, `D`, `Z`.
    pub state: char,
    pub wchan: String,
    /// Whether an interrupt can stop it (false: asleep in the kernel for good, as far as the test goes).
    pub can_stop: bool,
    pub sig_pnd: u64,
    /// The blocked-signal mask.
    pub mask: u64,
    interrupt: bool,
}

impl FakeThread {
    fn new(tgid: Tid) -> FakeThread {
        FakeThread {
            regs: Regs::zeroed(),
            run: Run::Running,
            tgid,
            vm: tgid,
            state: 'R',
            wchan: "0".into(),
            can_stop: true,
            sig_pnd: 0,
            mask: 0,
            interrupt: false,
        }
    }
}

#[derive(Default)]
struct World {
    threads: BTreeMap<Tid, FakeThread>,
    queue: VecDeque<Entry>,
    mem: HashMap<Tid, BTreeMap<u64, u8>>,
    calls: Vec<Call>,
    clock: Duration,
    over: bool,
}

/// The fake kernel; cloning shares it (the test keeps one, the tracer another).
#[derive(Clone)]
pub(super) struct Script {
    w: Rc<RefCell<World>>,
    base: Instant,
}

/// si_code of a breakpoint's SIGTRAP (SI_KERNEL) and of a single step's (TRAP_TRACE).
pub(super) const SI_KERNEL: i32 = 0x80;
pub(super) const TRAP_TRACE: i32 = 2;

fn event_code(stop: Stop) -> i32 {
    let ev = |e: i32| libc::SIGTRAP | (e << 8);
    match stop {
        Stop::Signal(libc::SIGTRAP) => SI_KERNEL,
        Stop::Signal(_) => 0,
        Stop::GroupStop(s) => s | (libc::PTRACE_EVENT_STOP << 8),
        Stop::Interrupted => ev(libc::PTRACE_EVENT_STOP),
        Stop::Clone(_) => ev(libc::PTRACE_EVENT_CLONE),
        Stop::Fork(_) => ev(libc::PTRACE_EVENT_FORK),
        Stop::Vfork(_) => ev(libc::PTRACE_EVENT_VFORK),
        Stop::VforkDone => ev(libc::PTRACE_EVENT_VFORK_DONE),
        Stop::Exec => ev(libc::PTRACE_EVENT_EXEC),
        Stop::Syscall => libc::SIGTRAP | 0x80,
        Stop::Exited(_) | Stop::Killed(_) => 0,
    }
}

impl Script {
    pub fn new() -> Script {
        Script { w: Rc::new(RefCell::new(World::default())), base: Instant::now() }
    }

    /// A thread of process `tgid`, running, with zeroed registers.
    pub fn thread(&self, tid: Tid, tgid: Tid) {
        self.w.borrow_mut().threads.insert(tid, FakeThread::new(tgid));
    }

    /// Changes a thread's fake state.
    pub fn with_thread(&self, tid: Tid, f: impl FnOnce(&mut FakeThread)) {
        if let Some(t) = self.w.borrow_mut().threads.get_mut(&tid) {
            f(t);
        }
    }

    pub fn poke(&self, vm: Tid, addr: u64, bytes: &[u8]) {
        let mut w = self.w.borrow_mut();
        let m = w.mem.entry(vm).or_default();
        for (i, &b) in bytes.iter().enumerate() {
            m.insert(addr + i as u64, b);
        }
    }

    pub fn byte(&self, vm: Tid, addr: u64) -> Option<u8> {
        self.w.borrow().mem.get(&vm)?.get(&addr).copied()
    }

    /// Queues a stop of `tid`, reported once `tid` runs.
    pub fn stop(&self, tid: Tid, stop: Stop) {
        self.w.borrow_mut().queue.push_back(Entry { tid, stop, code: None, edit: None, at: Duration::ZERO });
    }

    /// Queues a stop that first changes the thread's registers; `code`: its si_code, if not the usual one.
    pub fn stop_with(
        &self,
        tid: Tid,
        stop: Stop,
        code: Option<i32>,
        edit: impl Fn(&mut libc::user_regs_struct) + 'static,
    ) {
        self.w.borrow_mut().queue.push_back(Entry { tid, stop, code, edit: Some(Box::new(edit)), at: Duration::ZERO });
    }

    /// As [`Script::stop_with`], reported only once `at` of virtual time has passed.
    pub fn stop_later(&self, at: Duration, tid: Tid, stop: Stop, edit: impl Fn(&mut libc::user_regs_struct) + 'static) {
        self.w.borrow_mut().queue.push_back(Entry { tid, stop, code: None, edit: Some(Box::new(edit)), at });
    }

    /// Ends the script now: the tracer sees a stop signal at its next turn.
    pub fn end(&self) {
        self.w.borrow_mut().over = true;
    }

    pub fn calls(&self) -> Vec<Call> {
        self.w.borrow().calls.clone()
    }

    /// How much virtual time the waits took.
    pub fn elapsed(&self) -> Duration {
        self.w.borrow().clock
    }

    /// Stops not reported yet.
    pub fn left(&self) -> usize {
        self.w.borrow().queue.len()
    }

    fn log(&self, c: Call) {
        self.w.borrow_mut().calls.push(c);
    }

    /// Resumes a stopped thread (cont, step, listen, detach all need one).
    fn resume(&self, tid: Tid, to: Run, call: Call) -> Result<(), Errno> {
        self.log(call);
        let mut w = self.w.borrow_mut();
        let t = w.threads.get_mut(&tid).ok_or(Errno::ESRCH)?;
        if !matches!(t.run, Run::Stopped(_)) {
            return Err(Errno::ESRCH);
        }
        t.run = to;
        Ok(())
    }

    /// The next stop `only` (or any thread) can report now.
    fn next(&self, only: Option<Tid>) -> Option<(Tid, Stop)> {
        let mut w = self.w.borrow_mut();
        let w = &mut *w;
        let ready = |tid: Tid, stop: Stop, threads: &BTreeMap<Tid, FakeThread>| {
            only.is_none_or(|o| o == tid)
                && match threads.get(&tid).map(|t| t.run) {
                    // Not seized yet: a new thread or child, auto-attached.
                    None => true,
                    Some(Run::Running) => true,
                    Some(Run::Stopped(_)) => matches!(stop, Stop::Killed(_)),
                    Some(Run::Detached | Run::Gone) => false,
                }
        };
        if let Some(i) = w.queue.iter().position(|e| e.at <= w.clock && ready(e.tid, e.stop, &w.threads)) {
            let e = w.queue.remove(i)?;
            let t = w.threads.entry(e.tid).or_insert_with(|| FakeThread::new(e.tid));
            if let Some(edit) = &e.edit {
                edit(&mut t.regs.0);
            }
            if let Stop::Signal(sig) = e.stop {
                // Dequeued: no longer pending.
                t.sig_pnd &= !(1u64 << (sig - 1));
            }
            t.run = match e.stop {
                Stop::Exited(_) | Stop::Killed(_) => Run::Gone,
                s => Run::Stopped(e.code.unwrap_or_else(|| event_code(s))),
            };
            w.calls.push(Call::Stopped(e.tid, e.stop));
            return Some((e.tid, e.stop));
        }
        let (&tid, t) = w
            .threads
            .iter_mut()
            .find(|(tid, t)| only.is_none_or(|o| o == **tid) && t.run == Run::Running && t.interrupt && t.can_stop)?;
        t.interrupt = false;
        t.run = Run::Stopped(event_code(Stop::Interrupted));
        w.calls.push(Call::Stopped(tid, Stop::Interrupted));
        Some((tid, Stop::Interrupted))
    }

    fn wait(&self, only: Option<Tid>, nohang: bool) -> Result<Option<(Tid, Stop)>, Errno> {
        if let Some(s) = self.next(only) {
            return Ok(Some(s));
        }
        let mut w = self.w.borrow_mut();
        let alive = w.threads.values().any(|t| matches!(t.run, Run::Running | Run::Stopped(_)));
        if !alive {
            return Err(Errno::ECHILD);
        }
        if nohang {
            return Ok(None);
        }
        // A blocking wait sleeps until the next stop due later, or for ever: then the script is over.
        let due = w.queue.iter().filter(|e| only.is_none_or(|o| o == e.tid) && e.at > w.clock).map(|e| e.at).min();
        match due {
            Some(at) => {
                w.clock = at;
                drop(w);
                self.wait(only, true)
            }
            None => {
                w.over = true;
                Ok(None)
            }
        }
    }
}

struct FakeMem {
    w: Rc<RefCell<World>>,
    vm: Tid,
}

impl Mem for FakeMem {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let w = self.w.borrow();
        let m = w.mem.get(&self.vm);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = *m.and_then(|m| m.get(&(addr + i as u64))).ok_or(io::Error::from_raw_os_error(libc::EIO))?;
        }
        Ok(())
    }
    fn write_all(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        let mut w = self.w.borrow_mut();
        w.calls.push(Call::Write(self.vm, addr, data.to_vec()));
        let m = w.mem.get_mut(&self.vm).ok_or(io::Error::from_raw_os_error(libc::EIO))?;
        if (0..data.len()).any(|i| !m.contains_key(&(addr + i as u64))) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        for (i, &b) in data.iter().enumerate() {
            m.insert(addr + i as u64, b);
        }
        Ok(())
    }
}

impl Kernel for Script {
    fn seize(&self, tid: Tid) -> Result<(), Errno> {
        self.log(Call::Seize(tid));
        self.w.borrow().threads.contains_key(&tid).then_some(()).ok_or(Errno::ESRCH)
    }
    fn interrupt(&self, tid: Tid) -> Result<(), Errno> {
        self.log(Call::Interrupt(tid));
        let mut w = self.w.borrow_mut();
        let t = w.threads.get_mut(&tid).ok_or(Errno::ESRCH)?;
        match t.run {
            Run::Detached | Run::Gone => Err(Errno::ESRCH),
            _ => {
                t.interrupt = true;
                Ok(())
            }
        }
    }
    fn cont(&self, tid: Tid, sig: i32) -> Result<(), Errno> {
        self.resume(tid, Run::Running, Call::Cont(tid, sig))
    }
    fn step(&self, tid: Tid, sig: i32) -> Result<(), Errno> {
        self.resume(tid, Run::Running, Call::Step(tid, sig))
    }
    /// Never asked: the script has no call gate (`exec_slack` is None), so injected calls are stepped.
    fn syscall(&self, _: Tid) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }
    fn listen(&self, tid: Tid) -> Result<(), Errno> {
        self.resume(tid, Run::Running, Call::Listen(tid))
    }
    fn detach(&self, tid: Tid, sig: i32) -> Result<(), Errno> {
        self.resume(tid, Run::Detached, Call::Detach(tid, sig))
    }
    fn get_regs(&self, tid: Tid) -> Result<Regs, Errno> {
        let w = self.w.borrow();
        match w.threads.get(&tid) {
            Some(t) if matches!(t.run, Run::Stopped(_)) => Ok(t.regs),
            _ => Err(Errno::ESRCH),
        }
    }
    fn set_regs(&self, tid: Tid, regs: &Regs) -> Result<(), Errno> {
        self.log(Call::SetRegs(tid, regs.0.rip, regs.0.rax));
        let mut w = self.w.borrow_mut();
        match w.threads.get_mut(&tid) {
            Some(t) if matches!(t.run, Run::Stopped(_)) => {
                t.regs = *regs;
                Ok(())
            }
            _ => Err(Errno::ESRCH),
        }
    }
    fn sigmask(&self, tid: Tid) -> Result<u64, Errno> {
        match self.w.borrow().threads.get(&tid) {
            Some(t) if matches!(t.run, Run::Stopped(_)) => Ok(t.mask),
            _ => Err(Errno::ESRCH),
        }
    }
    fn set_sigmask(&self, tid: Tid, mask: u64) -> Result<(), Errno> {
        self.log(Call::SetMask(tid, mask));
        let mut w = self.w.borrow_mut();
        match w.threads.get_mut(&tid) {
            Some(t) if matches!(t.run, Run::Stopped(_)) => {
                t.mask = mask;
                Ok(())
            }
            _ => Err(Errno::ESRCH),
        }
    }
    fn sig_code(&self, tid: Tid) -> Result<i32, Errno> {
        match self.w.borrow().threads.get(&tid).map(|t| t.run) {
            Some(Run::Stopped(code)) => Ok(code),
            _ => Err(Errno::ESRCH),
        }
    }
    fn in_syscall_event(&self, tid: Tid) -> bool {
        match self.sig_code(tid) {
            Ok(code) => {
                let event = (code >> 8) & 0xff;
                code & 0x7f == libc::SIGTRAP && event != 0 && event != libc::PTRACE_EVENT_STOP
            }
            Err(_) => true,
        }
    }
    fn wait_any(&self, nohang: bool) -> Result<Option<(Tid, Stop)>, Errno> {
        self.wait(None, nohang)
    }
    fn wait_for(&self, tid: Tid, nohang: bool) -> Result<Option<(Tid, Stop)>, Errno> {
        self.wait(Some(tid), nohang)
    }
    fn same_vm(&self, a: Tid, b: Tid) -> bool {
        let w = self.w.borrow();
        let vm = |t: Tid| w.threads.get(&t).map(|t| t.vm);
        vm(a).is_some() && vm(a) == vm(b)
    }
    fn open_mem(&self, pid: Tid) -> io::Result<Box<dyn Mem>> {
        let vm = self.w.borrow().threads.get(&pid).map(|t| t.vm).ok_or(io::Error::from_raw_os_error(libc::ENOENT))?;
        Ok(Box::new(FakeMem { w: Rc::clone(&self.w), vm }))
    }
    fn read_into(&self, tid: Tid, addr: u64, len: usize, buf: &mut Vec<u8>) {
        buf.clear();
        let w = self.w.borrow();
        let Some(m) = w.threads.get(&tid).and_then(|t| w.mem.get(&t.vm)) else { return };
        buf.extend((0..len as u64).map_while(|i| m.get(&(addr + i)).copied()));
    }
    fn read_status(&self, tid: Tid) -> io::Result<String> {
        let w = self.w.borrow();
        let t = w.threads.get(&tid).filter(|t| t.run != Run::Gone).ok_or(io::Error::from_raw_os_error(libc::ENOENT))?;
        let state = if matches!(t.run, Run::Stopped(_)) { 't' } else { t.state };
        Ok(format!(
            "State:\t{state}\nTgid:\t{}\nPid:\t{tid}\nSigPnd:\t{:016x}\nSigCgt:\t0000000000000000\n\
             SigIgn:\t0000000000000000\n",
            t.tgid, t.sig_pnd
        ))
    }
    fn read_task_status(&self, _pid: Tid, tid: Tid) -> io::Result<String> {
        self.read_status(tid)
    }
    fn read_wchan(&self, tid: Tid) -> io::Result<String> {
        let w = self.w.borrow();
        w.threads.get(&tid).map(|t| t.wchan.clone()).ok_or(io::Error::from_raw_os_error(libc::ENOENT))
    }
    fn list_tasks(&self, pid: Tid) -> io::Result<Vec<Tid>> {
        let w = self.w.borrow();
        Ok(w.threads.iter().filter(|(_, t)| t.tgid == pid && t.run != Run::Gone).map(|(&tid, _)| tid).collect())
    }
    fn read_maps(&self, _pid: Tid) -> io::Result<String> {
        Ok(String::new())
    }
    fn locate_python(&self, _: Tid, _: &mut HashSet<(String, u64)>) -> Result<Option<PythonReader>, LocateError> {
        Ok(None)
    }
    fn exec_slack(&self, _: Tid, _: u64) -> Option<(u64, u64)> {
        None
    }
    fn stop_requested(&self) -> i32 {
        if self.w.borrow().over { libc::SIGINT } else { 0 }
    }
    fn faulted(&self) -> bool {
        false
    }
    fn stop_timer(&self) {}
    fn realtime(&self, f: &mut dyn FnMut()) {
        f()
    }
    fn now(&self) -> Instant {
        self.base + self.w.borrow().clock
    }
    fn sleep(&self, d: Duration) {
        self.w.borrow_mut().clock += d;
    }
    fn yield_now(&self) {
        self.w.borrow_mut().clock += Duration::from_micros(1);
    }
}
