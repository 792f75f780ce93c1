//! The operations of the kernel (and of syscatch's own process) that the tracer's state machine needs, as one
//! trait: [`Live`] runs them on the real kernel through `os`, and the unit tests run the same state machine over
//! a scripted fake (`script.rs`), so stop orders that are hard to provoke on purpose (a signal during a step, a
//! thread's first stop before its creator's event, exec while stepping) are tested exactly.
//!
//! Every method takes `&self`: the tracer calls them while other parts of itself are borrowed, and a fake keeps
//! its record in a `RefCell`. The cost is one indirect call per operation, next to a system call of ~1 us.

use super::AttachError;
use crate::live::guardian::{self, Guard};
use crate::live::python::{LocateError, PythonReader};
use crate::model::regs::Regs;
use crate::os::mem::ProcMem;
use crate::os::ptrace::{self, Stop};
use crate::os::{Tid, mem, procfs, sched, signals};
use nix::errno::Errno;
use std::collections::HashSet;
use std::io;
use std::time::{Duration, Instant};

/// One process's memory, kept open.
pub(crate) trait Mem {
    /// Reads exactly `buf.len()` bytes at `addr`.
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_all(&self, addr: u64, data: &[u8]) -> io::Result<()>;
    fn read_u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read_exact(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

impl Mem for ProcMem {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        ProcMem::read_exact(self, addr, buf)
    }
    fn write_all(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        ProcMem::write_all(self, addr, data)
    }
}

impl Mem for mem::SharedMap {
    fn read_exact(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        mem::SharedMap::read_exact(self, addr, buf)
    }
    fn write_all(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        mem::SharedMap::write_all(self, addr, data)
    }
}

/// What the tracer asks of the kernel. The ptrace requests mean what ptrace(2) says; see `os::ptrace`.
pub(crate) trait Kernel {
    /// PTRACE_SEIZE with the options that follow clones, forks and exec.
    fn seize(&self, tid: Tid) -> Result<(), Errno>;
    fn interrupt(&self, tid: Tid) -> Result<(), Errno>;
    /// Resumes `tid`, delivering `sig` (0: none).
    fn cont(&self, tid: Tid, sig: i32) -> Result<(), Errno>;
    /// Resumes `tid` for one instruction, delivering `sig` (0: none).
    fn step(&self, tid: Tid, sig: i32) -> Result<(), Errno>;
    /// Resumes `tid` to its next syscall-entry or -exit stop (PTRACE_SYSCALL).
    fn syscall(&self, tid: Tid) -> Result<(), Errno>;
    /// Leaves a group-stopped thread stopped (PTRACE_LISTEN).
    fn listen(&self, tid: Tid) -> Result<(), Errno>;
    fn detach(&self, tid: Tid, sig: i32) -> Result<(), Errno>;
    fn get_regs(&self, tid: Tid) -> Result<Regs, Errno>;
    fn set_regs(&self, tid: Tid, regs: &Regs) -> Result<(), Errno>;
    /// The blocked-signal mask of stopped thread `tid`.
    fn sigmask(&self, tid: Tid) -> Result<u64, Errno>;
    fn set_sigmask(&self, tid: Tid, mask: u64) -> Result<(), Errno>;
    /// The `si_code` of the stop `tid` is in.
    fn sig_code(&self, tid: Tid) -> Result<i32, Errno>;
    /// Whether `tid` is stopped at an event reported from inside a system call (see `os::ptrace`).
    fn in_syscall_event(&self, tid: Tid) -> bool;
    /// Of the signal-delivery-stop `tid` is in: `si_code`, `si_addr` and `si_perf_data` (see `os::perf`).
    fn sample_info(&self, tid: Tid) -> Result<(i32, u64, u64), Errno> {
        self.sig_code(tid).map(|c| (c, 0, 0))
    }
    /// A page-fault sampler on thread `tid` (see `os::perf::fault_sampler`).
    fn fault_sampler(&self, _tid: Tid, _period: u64, _cookie: u64) -> io::Result<std::os::fd::OwnedFd> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// The faults a sampler counted (see `os::perf::count`).
    fn fault_count(&self, _fd: &std::os::fd::OwnedFd) -> io::Result<u64> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Sets a sampler's period (see `os::perf::set_period`).
    fn fault_period(&self, _fd: &std::os::fd::OwnedFd, _period: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// The next stop of any traced thread. `Ok(None)`: interrupted, or nothing yet with `nohang`.
    fn wait_any(&self, nohang: bool) -> Result<Option<(Tid, Stop)>, Errno>;
    fn wait_for(&self, tid: Tid, nohang: bool) -> Result<Option<(Tid, Stop)>, Errno>;
    /// Whether two processes share one address space.
    fn same_vm(&self, a: Tid, b: Tid) -> bool;

    fn open_mem(&self, pid: Tid) -> io::Result<Box<dyn Mem>>;
    /// The target's shared mapping `start..start+len`, mapped into syscatch too (see `os::mem::SharedMap`).
    fn open_shared(&self, _pid: Tid, _start: u64, _len: u64) -> io::Result<Box<dyn Mem>> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Up to `len` bytes at `addr` into `buf` (emptied first), fewer if the range runs into an unmapped page.
    fn read_into(&self, tid: Tid, addr: u64, len: usize, buf: &mut Vec<u8>);

    /// `/proc/TID/status`.
    fn read_status(&self, tid: Tid) -> io::Result<String>;
    /// `/proc/PID/task/TID/status`.
    fn read_task_status(&self, pid: Tid, tid: Tid) -> io::Result<String>;
    fn read_wchan(&self, tid: Tid) -> io::Result<String>;
    fn list_tasks(&self, pid: Tid) -> io::Result<Vec<Tid>>;
    fn read_maps(&self, pid: Tid) -> io::Result<String>;
    /// A CPython among the modules of `pid` not in `seen` (which it extends); see `PythonReader::locate_new`.
    fn locate_python(&self, pid: Tid, seen: &mut HashSet<(String, u64)>) -> Result<Option<PythonReader>, LocateError>;
    /// The unused tail of the code page ending the executable segment of the module of `pid` mapped at `near`
    /// (see `Module::exec_slack`), if mapped executable: (address, length).
    fn exec_slack(&self, pid: Tid, near: u64) -> Option<(u64, u64)>;

    /// The stop signal syscatch received (0: none).
    fn stop_requested(&self) -> i32;
    /// Whether another thread of syscatch asked the trace to end.
    fn faulted(&self) -> bool;
    /// Stops syscatch's interval timer (the one that breaks blocking waits).
    fn stop_timer(&self);
    /// Runs `f` with the calling thread at real-time priority when permitted.
    fn realtime(&self, f: &mut dyn FnMut());
    /// The clock the bounded waits measure against.
    fn now(&self) -> Instant;
    fn sleep(&self, d: Duration);
    fn yield_now(&self);
}

/// The real kernel.
pub(crate) struct Live;

/// The guardian, or why there is none (`None`: turned off, nothing to say).
pub(super) type GuardOrWhy = Result<Guard, Option<guardian::StartError>>;

/// The target's memory, and the guardian started on it before anything is planted; without a guardian (refused,
/// or `SYSCATCH_NO_GUARDIAN` set by a test measuring what it saves), the reason, said once arming begins (not
/// for a target that is gone by then).
pub(super) fn open_live(pid: Tid, check: u64) -> Result<(Box<dyn Mem>, GuardOrWhy), AttachError> {
    let mem = ProcMem::open(pid).map_err(|e| match e.raw_os_error() {
        // Worded by the caller, as for PTRACE_SEIZE.
        Some(c @ (libc::EPERM | libc::EACCES | libc::ESRCH)) => AttachError::Ptrace(Errno::from_raw(c)),
        _ => AttachError::Memory(e),
    })?;
    let guard = if std::env::var_os("SYSCATCH_NO_GUARDIAN").is_some() {
        Err(None)
    } else {
        // At real-time priority (inherited by the guardian until it is ready): a target whose threads keep every
        // CPU busy otherwise delays each step of its start by a round of all of them (measured with 512 spinning
        // threads on 2 CPUs: 0.5-1 s of the attach).
        crate::os::sched::realtime(|| Guard::start(pid, &mem, check)).map_err(Some)
    };
    Ok((Box::new(mem), guard))
}

impl Kernel for Live {
    fn seize(&self, tid: Tid) -> Result<(), Errno> {
        ptrace::seize(tid)
    }
    fn interrupt(&self, tid: Tid) -> Result<(), Errno> {
        ptrace::interrupt(tid)
    }
    fn cont(&self, tid: Tid, sig: i32) -> Result<(), Errno> {
        ptrace::cont(tid, sig)
    }
    fn step(&self, tid: Tid, sig: i32) -> Result<(), Errno> {
        ptrace::step(tid, sig)
    }
    fn syscall(&self, tid: Tid) -> Result<(), Errno> {
        ptrace::syscall(tid)
    }
    fn listen(&self, tid: Tid) -> Result<(), Errno> {
        ptrace::listen(tid)
    }
    fn detach(&self, tid: Tid, sig: i32) -> Result<(), Errno> {
        ptrace::detach(tid, sig)
    }
    fn get_regs(&self, tid: Tid) -> Result<Regs, Errno> {
        ptrace::get_regs(tid)
    }
    fn set_regs(&self, tid: Tid, regs: &Regs) -> Result<(), Errno> {
        ptrace::set_regs(tid, regs)
    }
    fn sigmask(&self, tid: Tid) -> Result<u64, Errno> {
        ptrace::sigmask(tid)
    }
    fn set_sigmask(&self, tid: Tid, mask: u64) -> Result<(), Errno> {
        ptrace::set_sigmask(tid, mask)
    }
    fn sig_code(&self, tid: Tid) -> Result<i32, Errno> {
        ptrace::sig_code(tid)
    }
    fn in_syscall_event(&self, tid: Tid) -> bool {
        ptrace::in_syscall_event(tid)
    }
    fn sample_info(&self, tid: Tid) -> Result<(i32, u64, u64), Errno> {
        crate::os::perf::sample_info(tid)
    }
    fn fault_sampler(&self, tid: Tid, period: u64, cookie: u64) -> io::Result<std::os::fd::OwnedFd> {
        crate::os::perf::fault_sampler(tid, period, cookie)
    }
    fn fault_count(&self, fd: &std::os::fd::OwnedFd) -> io::Result<u64> {
        crate::os::perf::count(fd)
    }
    fn fault_period(&self, fd: &std::os::fd::OwnedFd, period: u64) -> io::Result<()> {
        crate::os::perf::set_period(fd, period)
    }
    fn wait_any(&self, nohang: bool) -> Result<Option<(Tid, Stop)>, Errno> {
        ptrace::wait_any(nohang)
    }
    fn wait_for(&self, tid: Tid, nohang: bool) -> Result<Option<(Tid, Stop)>, Errno> {
        ptrace::wait_for(tid, nohang)
    }
    fn same_vm(&self, a: Tid, b: Tid) -> bool {
        ptrace::same_vm(a, b)
    }
    fn open_mem(&self, pid: Tid) -> io::Result<Box<dyn Mem>> {
        Ok(Box::new(ProcMem::open(pid)?))
    }
    fn open_shared(&self, pid: Tid, start: u64, len: u64) -> io::Result<Box<dyn Mem>> {
        Ok(Box::new(mem::SharedMap::open(pid, start, len)?))
    }
    fn read_into(&self, tid: Tid, addr: u64, len: usize, buf: &mut Vec<u8>) {
        mem::read_into(tid, addr, len, buf)
    }
    fn read_status(&self, tid: Tid) -> io::Result<String> {
        procfs::read_status(tid)
    }
    fn read_task_status(&self, pid: Tid, tid: Tid) -> io::Result<String> {
        procfs::read_task_status(pid, tid)
    }
    fn read_wchan(&self, tid: Tid) -> io::Result<String> {
        procfs::read_wchan(tid)
    }
    fn list_tasks(&self, pid: Tid) -> io::Result<Vec<Tid>> {
        procfs::list_tasks(pid)
    }
    fn read_maps(&self, pid: Tid) -> io::Result<String> {
        procfs::read_maps(pid)
    }
    fn locate_python(&self, pid: Tid, seen: &mut HashSet<(String, u64)>) -> Result<Option<PythonReader>, LocateError> {
        PythonReader::locate_new(pid, seen)
    }
    fn exec_slack(&self, pid: Tid, near: u64) -> Option<(u64, u64)> {
        let maps = crate::live::resolve::read_maps(pid).ok()?;
        let map = crate::model::modules::group_modules(&maps).into_iter().find(|m| m.start <= near && near < m.end)?;
        // The file checked against what is mapped (build-id), so its layout is the one in memory.
        let mem = ProcMem::open(pid).ok()?;
        let module = crate::live::resolve::read_module(pid, &map, Some(&mem)).ok()?;
        let (at, len) = module.exec_slack()?;
        // Mapped, executable and private, as the file says (a copy of the module mapped otherwise is not used),
        // and holding the file's own bytes there (padding nobody wrote).
        let m = maps.iter().find(|m| m.contains(at) && m.is_exec() && m.perms.ends_with('p') && m.path == map.path)?;
        let off = usize::try_from(m.offset.checked_add(at - m.start)?).ok()?;
        let file = module.data.get(off..off.checked_add(usize::try_from(len).ok()?)?)?;
        let mut now = vec![0u8; file.len()];
        mem.read_exact(at, &mut now).ok()?;
        (now == file).then_some((at, len))
    }
    fn stop_requested(&self) -> i32 {
        signals::stop_requested()
    }
    fn faulted(&self) -> bool {
        signals::faulted()
    }
    fn stop_timer(&self) {
        signals::stop_timer()
    }
    fn realtime(&self, f: &mut dyn FnMut()) {
        sched::realtime(f)
    }
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
    fn yield_now(&self) {
        std::thread::yield_now()
    }
}
