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

/// Installs the handlers and starts a `tick_ms` interval timer.
pub fn install_handlers(tick_ms: u64) {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        install(sig, on_stop);
    }
    install(libc::SIGALRM, on_alarm);
    let tv = libc::timeval { tv_sec: (tick_ms / 1000) as _, tv_usec: ((tick_ms % 1000) * 1000) as _ };
    let it = libc::itimerval { it_interval: tv, it_value: tv };
    // SAFETY: `it` is a valid itimerval; the old value is not wanted.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut()) };
}

/// Stops the interval timer (before spawning, or once tracing is over).
pub fn stop_timer() {
    // SAFETY: a zeroed itimerval disarms the timer.
    unsafe {
        let it: libc::itimerval = std::mem::zeroed();
        libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut());
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
