//! syscatch's own signals: SIGINT, SIGTERM and SIGHUP ask for a clean detach; a periodic SIGALRM makes a
//! blocking waitpid return (EINTR) so a flag set just before it blocked, or a deadline, is never missed.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
static FAULT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
}

extern "C" fn on_alarm(_: libc::c_int) {}

fn install(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: the handlers only store to an atomic (async-signal-safe). No SA_RESTART, so waitpid returns EINTR.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Whether `sig` is ignored now (as inherited from whoever started syscatch).
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// SIGINT and SIGTERM ask for a clean detach, whatever their inherited disposition (a script's background job
/// inherits SIGINT ignored, yet `kill -INT` must stop the trace); SIGHUP too, unless it is ignored: under `nohup`
/// the trace outlives the terminal. Safe to call again.
pub fn install_stop_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        install(sig, on_stop);
    }
    if !ignored(libc::SIGHUP) {
        install(libc::SIGHUP, on_stop);
    }
}

/// Installs the stop handlers and starts a `tick_ms` interval timer.
pub fn install_handlers(tick_ms: u64) {
    install_stop_handlers();
    install(libc::SIGALRM, on_alarm);
    let tv = libc::timeval { tv_sec: (tick_ms / 1000) as _, tv_usec: ((tick_ms % 1000) * 1000) as _ };
    let it = libc::itimerval { it_interval: tv, it_value: tv };
    // SAFETY: `it` is a valid itimerval; the old value is not wanted.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut()) };
}

/// Stops the interval timer (before spawning, or once tracing is over); on a thread with a [`ThreadTick`], that
/// thread's tick.
pub fn stop_timer() {
    if let Some(timer) = THREAD_TIMER.with(|t| t.get()) {
        // SAFETY: `timer` was created by `timer_create` on this thread and is deleted only by its `ThreadTick`,
        // which clears this cell first; a zeroed itimerspec disarms it.
        unsafe {
            let it: libc::itimerspec = std::mem::zeroed();
            libc::timer_settime(timer, 0, &it, std::ptr::null_mut());
        }
        return;
    }
    // SAFETY: a zeroed itimerval disarms the timer.
    unsafe {
        let it: libc::itimerval = std::mem::zeroed();
        libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut());
    }
}

std::thread_local! {
    static THREAD_TIMER: std::cell::Cell<Option<libc::timer_t>> = const { std::cell::Cell::new(None) };
}

/// A SIGALRM tick sent to the calling thread alone, every `tick_ms`, until dropped: what [`install_handlers`]'s
/// process-wide timer is to a tracer on the main thread (which the kernel prefers for a process's signals), for a
/// tracer on a thread of its own (a session of several processes, one tracer thread each).
pub struct ThreadTick(libc::timer_t);

impl ThreadTick {
    pub fn start(tick_ms: u64) -> std::io::Result<ThreadTick> {
        install_stop_handlers();
        install(libc::SIGALRM, on_alarm);
        // SAFETY: a zeroed sigevent is valid; the fields set name this thread (SIGEV_THREAD_ID) and SIGALRM, and
        // `timer` is a valid out-pointer.
        let timer = unsafe {
            let mut sev: libc::sigevent = std::mem::zeroed();
            sev.sigev_notify = libc::SIGEV_THREAD_ID;
            sev.sigev_signo = libc::SIGALRM;
            // The raw call: libc's gettid is a weak reference left null in the static build.
            sev.sigev_notify_thread_id = libc::syscall(libc::SYS_gettid) as libc::c_int;
            let mut timer: libc::timer_t = std::ptr::null_mut();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            timer
        };
        let tick = ThreadTick(timer);
        let ts = libc::timespec { tv_sec: (tick_ms / 1000) as _, tv_nsec: ((tick_ms % 1000) * 1_000_000) as _ };
        let it = libc::itimerspec { it_interval: ts, it_value: ts };
        // SAFETY: `timer` is the timer just created; `it` is a valid itimerspec.
        if unsafe { libc::timer_settime(timer, 0, &it, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        THREAD_TIMER.with(|t| t.set(Some(timer)));
        Ok(tick)
    }
}

impl Drop for ThreadTick {
    fn drop(&mut self) {
        THREAD_TIMER.with(|t| t.set(None));
        // SAFETY: the timer was created by `start` and is deleted once, here.
        unsafe { libc::timer_delete(self.0) };
    }
}

/// The stop signal received so far (0: none).
pub fn stop_requested() -> i32 {
    STOP_SIGNAL.load(Ordering::SeqCst)
}

/// Asks the tracer to end the trace because another thread of syscatch failed (a panic, an output error). Seen at
/// the tracer's next loop turn (at most one SIGALRM tick away).
pub fn fault() {
    FAULT.store(true, Ordering::SeqCst);
}

/// Whether [`fault`] was called.
pub fn faulted() -> bool {
    FAULT.load(Ordering::SeqCst)
}
