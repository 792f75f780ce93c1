//! Faults the tests inject, named by `SYSCATCH_TEST_FAULT`: `tracer-panic` (the tracer, at the first matching
//! hit, with that thread stopped just past the int3 or in `--fast`'s trampoline), `analysis-panic` (`app::analyze`, at the first event the
//! analysis thread receives), `held-signal` (syscatch stops itself, SIGSTOP, right after the tracer handled a
//! signal-delivery-stop while holding the threads: the test SIGKILLs it there), `held-at-breakpoint` (syscatch
//! stops itself as soon as it has the registers of a thread stopped at one of its breakpoints, and has put it
//! back on the int3 where the site has no guard),
//! `reported-trap` (syscatch stops itself as soon as the wait has reported a thread's SIGTRAP stop, before it
//! looks at the thread) and
//! `injected-call` (syscatch stops
//! itself right after starting each system call it injects; the test acts at the first, the trap pad's mmap: the
//! thread is on its way
//! through the call gate, or single-stepping libc's `syscall` without one), `no-prefetch` (the analysis thread
//! does not prefetch symbol tables: events go out as once it is over), `ring-slow` (the tracer reads `--fast`'s ring only
//! every 200 ms: it fills in a burst, and its writers take the stop instead), `analysis-slow` (the analysis thread
//! takes 300 us more on each event, so it falls seconds behind the tracer). Here, below their callers, so no
//! layer under `app` asks `app`. Only debug builds read the variable: a release build has no way to make itself
//! fail.

/// Whether the test running syscatch asked for fault `name`.
pub fn injected(name: &str) -> bool {
    cfg!(debug_assertions) && std::env::var("SYSCATCH_TEST_FAULT").is_ok_and(|v| v == name)
}

/// [`injected`], the first time only: a fault that must fire once (a panic whose unwinding detaches, and the
/// detach handles more stops of the same kind: a second panic there would abort).
pub fn injected_once(name: &str) -> bool {
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    injected(name) && !FIRED.swap(true, std::sync::atomic::Ordering::Relaxed)
}

/// Stops syscatch here (SIGSTOP to itself) if the test asked for fault `name`: the test then acts at that exact
/// moment (a SIGKILL, a SIGCONT).
pub fn stop_here(name: &str) {
    if injected(name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
}
