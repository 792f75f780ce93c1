//! Scheduling of syscatch's own threads. Attaching to and detaching from hundreds of busy threads is a
//! long series of short ptrace calls; at normal priority the tracer waits for a CPU behind every spinning thread
//! of the target (measured: 0.5 s to stop 512 busy threads, 4 ms with SCHED_FIFO). Only those phases run at
//! real-time priority, and the kernel's RT throttling still leaves the rest of the machine its share.

/// Runs `f` with the calling thread at SCHED_FIFO priority 1 when permitted (root or CAP_SYS_NICE), then puts its
/// old policy back. Without permission, `f` simply runs at the current priority.
pub fn realtime<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sched_getscheduler/getparam/setscheduler on the calling thread (pid 0) with valid pointers.
    let old = unsafe {
        let policy = libc::sched_getscheduler(0);
        let mut param: libc::sched_param = std::mem::zeroed();
        libc::sched_getparam(0, &mut param);
        (policy, param)
    };
    let fifo = libc::sched_param { sched_priority: 1 };
    // SAFETY: as above.
    let raised = old.0 >= 0 && unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) } == 0;
    let out = f();
    if raised {
        // SAFETY: as above; `old` came from the kernel for this thread.
        unsafe { libc::sched_setscheduler(0, old.0, &old.1) };
    }
    out
}

/// Asks the kernel (EEVDF, Linux 6.12+) for the shortest time slice for the calling thread, keeping its policy
/// (SCHED_OTHER) and nice value. The tracer sleeps in waitpid between stops; when a stop wakes it on a CPU whose
/// current task still has the rest of its slice (the analysis thread loading symbol tables, say), a normal slice
/// lets it wait up to about 3 ms while the target thread waits on it, even with the other CPU idle (seen with
/// tracefs on the first event after attaching, 3.3 ms). A short slice makes its wake-up preempt at once. No
/// real-time priority: the target keeps its share. Older kernels refuse or ignore it; nothing else changes.
pub fn short_slice() {
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }
    // SAFETY: getpriority of the calling thread (0: on Linux, nice is per thread); a nice of -1 is kept as is.
    // (Not libc::gettid: a weak reference that stays null in the static build, which crashed there.)
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: 100_000,
        deadline: 0,
        period: 0,
    };
    // SAFETY: sched_setattr(0: the calling thread, a valid SCHED_ATTR_SIZE_VER0 struct, flags 0).
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
}

/// Puts the calling thread back to the normal policy (SCHED_OTHER), e.g. a process started at real-time priority
/// once its start is done.
pub fn normal() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid pointer.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
}

/// Puts the calling thread in SCHED_BATCH: analysis work does not preempt the target (or the tracer, which the
/// target waits on at every stop) when it wakes up. Its nice value is kept: measured on a loaded 2-vCPU machine,
/// nice 10 starved the analysis until most stack windows of a burst were dropped. Best effort.
pub fn batch() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid pointer.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
}

/// CPU time the calling thread has used: a cost figure that a loaded machine does not inflate, unlike the wall
/// clock of a thread waiting for a CPU.
pub fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into a valid pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// The CPUs the calling thread may run on.
pub fn affinity() -> std::io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it for the calling thread.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        set
    };
    // SAFETY: CPU_ISSET reads the set within its size (CPU_SETSIZE bits).
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Restricts the calling thread to `cpus` (threads it starts later inherit this).
pub fn set_affinity(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET is given indices below CPU_SETSIZE only.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        set
    };
    // SAFETY: sched_setaffinity on the calling thread with a valid set of the size given.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
