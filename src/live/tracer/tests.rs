//! The tracer's state machine driven by scripted stop sequences (`script.rs`): the orders of events that are hard
//! to provoke in a real process on purpose, each checked against what the tracer asked of the kernel.

use super::script::{Call, SI_KERNEL, Script, TRAP_TRACE};
use super::*;

const PID: Tid = 100;
const SITE: u64 = 0x40_1000;
/// A plain function probe's site (`push %rbp; mov %rsp,%rbp`).
const FUNC: u64 = 0x40_2000;
/// A function probe's site whose first instruction (`cmp $1,%edi`) the emulator cannot run.
const FUNC2: u64 = 0x40_3000;
const STACK: u64 = 0x7ff0_0000;
/// glibc's `syscall()`: the arguments moved down one register, the seventh read from the stack, then `syscall`.
const WRAPPER: [u8; 34] = [
    0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca, 0x4d, 0x89, 0xc2, 0x4d, 0x89, 0xc8, 0x4c,
    0x8b, 0x4c, 0x24, 0x08, 0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, 0x73, 0x01, 0xc3,
];
const SYSCALL_AT: u64 = SITE + 23;
const AFTER: u64 = SYSCALL_AT + 2;
const MAPPED: u64 = 0x7f00_dead_0000;

fn code(bytes: &[u8]) -> Vec<u8> {
    let mut c = bytes.to_vec();
    c.resize(64, 0x90);
    c
}

/// Threads `tids` of process [`PID`] with the wrapper, a function and a stack in memory.
fn world(tids: &[Tid]) -> Script {
    let s = Script::new();
    for &t in tids {
        s.thread(t, PID);
    }
    s.poke(PID, SITE, &code(&WRAPPER));
    s.poke(PID, FUNC, &code(&[0x55, 0x48, 0x89, 0xe5]));
    s.poke(PID, FUNC2, &code(&[0x83, 0xff, 0x01]));
    s.poke(PID, STACK - 256, &[0; 512]);
    s
}

/// A tracer attached to every thread of `s` and armed: `syscall()` for mmap (9) and execve (59), and a function
/// probe on `rdi == 1` at [`FUNC`].
fn tracer<'a>(s: &Script, sink: &'a mut Vec<Event>) -> Tracer<'a> {
    let cfg = Config {
        pid: PID,
        stack_bytes: 256,
        python: None,
        python_search: false,
        deadline: None,
        epoch: Instant::now(),
        live_status: false,
        restorers: Vec::new(),
        known: None,
        ended: Default::default(),
        fault_every: None,
    };
    let wrapper = Probe::new(None, None, Box::new(Numbers([9, 59].into())));
    let func = Probe::new(Some("f".into()), Some("libc.so.6:f".into()), Box::new(Numbers([1].into())));
    let func2 = Probe::new(Some("g".into()), Some("libc.so.6:g".into()), Box::new(Numbers([1].into())));
    let specs = vec![
        SiteSpec { addr: SITE, code: code(&WRAPPER), wrapper: true, probes: vec![wrapper] },
        SiteSpec { addr: FUNC, code: code(&[0x55, 0x48, 0x89, 0xe5]), wrapper: false, probes: vec![func] },
        SiteSpec { addr: FUNC2, code: code(&[0x83, 0xff, 0x01]), wrapper: false, probes: vec![func2] },
    ];
    let k: Rc<dyn Kernel> = Rc::new(s.clone());
    let mem = k.open_mem(PID).expect("the fake has the target's memory");
    let mut t = Tracer::with_kernel(cfg, specs, sink, k, mem, Err(None)).expect("sites decode");
    t.realtime(|t| t.seize_all(PID, Instant::now())).expect("attached");
    t.arm().expect("armed");
    assert_eq!((s.byte(PID, SITE), s.byte(PID, FUNC)), (Some(INT3), Some(INT3)));
    t
}

/// `tid` executes the wrapper's int3 for syscall `nr` (mmap's arguments otherwise).
fn hit(s: &Script, tid: Tid, nr: u64) {
    s.stop_with(tid, Stop::Signal(libc::SIGTRAP), Some(SI_KERNEL), move |r| {
        (r.rip, r.rsp, r.rax) = (SITE + 1, STACK, 0);
        (r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9) = (nr, 0, 4096, 3, 0x22, u64::MAX);
    });
}

/// The single step of `tid` over the `syscall` instruction ends, with `rax` the kernel's result.
fn step_trap(s: &Script, tid: Tid, rax: u64) {
    s.stop_with(tid, Stop::Signal(libc::SIGTRAP), Some(TRAP_TRACE), move |r| (r.rip, r.rax) = (AFTER, rax));
}

fn count(calls: &[Call], c: &Call) -> usize {
    calls.iter().filter(|x| *x == c).count()
}

fn pos(calls: &[Call], c: &Call) -> usize {
    after(calls, 0, c)
}

/// The first `c` at or after `from`.
fn after(calls: &[Call], from: usize, c: &Call) -> usize {
    calls.iter().skip(from).position(|x| x == c).map(|i| i + from).unwrap_or_else(|| panic!("{c:?} not in {calls:#?}"))
}

#[test]
fn matching_hit_is_captured_with_its_result_and_resumed_past_the_call() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    hit(&s, PID, 9);
    step_trap(&s, PID, MAPPED);
    let end = t.run();
    let sum = t.summary.clone();
    drop(t);
    assert_eq!(end, End::Signal(libc::SIGINT));
    assert_eq!(s.left(), 0);
    assert_eq!(events.len(), 1);
    let ev = &events[0];
    assert_eq!((ev.tid, ev.nr, ev.ret, ev.args[1]), (PID, 9, Some(MAPPED), 4096));
    let cap = ev.capture.as_ref().expect("stack captured");
    assert_eq!((cap.regs.ip(), cap.stack.len()), (SITE, 256));
    let calls = s.calls();
    // Emulated to the `syscall` instruction (rax = the number), that alone stepped, then let go with no signal.
    let set = pos(&calls, &Call::SetRegs(PID, SYSCALL_AT, 9));
    let step = pos(&calls, &Call::Step(PID, 0));
    assert_eq!(set + 1, step);
    assert_eq!(calls[step + 1], Call::Stopped(PID, Stop::Signal(libc::SIGTRAP)));
    assert_eq!(calls[step + 2], Call::Cont(PID, 0), "{calls:#?}");
    assert_eq!((sum.hits, sum.matching, sum.signals_forwarded), (1, 1, 0));
    assert_eq!(s.byte(PID, SITE), Some(WRAPPER[0]));
    assert_eq!(s.byte(PID, FUNC), Some(0x55));
    assert_eq!(calls.last(), Some(&Call::Detach(PID, 0)));
}

#[test]
fn signal_during_the_step_is_delivered_once_and_the_call_reported_once() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    hit(&s, PID, 9);
    // SIGUSR1 arrives before the kernel ran the `syscall` instruction: rip is still on it.
    s.stop(PID, Stop::Signal(libc::SIGUSR1));
    // After its handler the thread calls the wrapper again.
    hit(&s, PID, 9);
    step_trap(&s, PID, MAPPED);
    t.run();
    let sum = t.summary.clone();
    drop(t);
    let calls = s.calls();
    assert_eq!(count(&calls, &Call::Cont(PID, libc::SIGUSR1)), 1, "{calls:#?}");
    // The step was undone: back to the wrapper's entry before the signal was delivered.
    let usr1 = pos(&calls, &Call::Stopped(PID, Stop::Signal(libc::SIGUSR1)));
    assert_eq!(calls[usr1 + 1..usr1 + 3], [Call::SetRegs(PID, SITE, 0), Call::Cont(PID, libc::SIGUSR1)]);
    assert_eq!(count(&calls, &Call::Step(PID, 0)), 2);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].ret, Some(MAPPED));
    assert_eq!((sum.hits, sum.matching, sum.signals_forwarded), (2, 1, 1));
}

#[test]
fn signal_right_after_the_syscall_ran_keeps_its_result() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    hit(&s, PID, 9);
    s.stop_with(PID, Stop::Signal(libc::SIGUSR2), None, |r| (r.rip, r.rax) = (AFTER, MAPPED));
    t.run();
    drop(t);
    let calls = s.calls();
    let usr2 = pos(&calls, &Call::Stopped(PID, Stop::Signal(libc::SIGUSR2)));
    // Delivered, with CONT: a step would make the handler's first instruction trap.
    assert_eq!(calls[usr2 + 1], Call::Cont(PID, libc::SIGUSR2));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].ret, Some(MAPPED));
}

#[test]
fn new_thread_seen_before_its_parents_clone_event() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    // Created after the attach: auto-attached, and its first stop comes first.
    s.thread(101, PID);
    s.stop(101, Stop::Interrupted);
    s.stop(PID, Stop::Clone(101));
    // The new thread then runs into the probe with a call that does not match.
    hit(&s, 101, 11);
    t.run();
    let sum = t.summary.clone();
    let early = t.early.len();
    drop(t);
    let calls = s.calls();
    assert_eq!(early, 0);
    assert_eq!(sum.threads_seen, 2);
    let first = pos(&calls, &Call::Stopped(101, Stop::Interrupted));
    assert_eq!(calls[first + 1], Call::Cont(101, 0));
    let clone = pos(&calls, &Call::Stopped(PID, Stop::Clone(101)));
    assert_eq!(calls[clone + 1], Call::Cont(PID, 0));
    // The non-matching hit resumes where it stopped (`mov %rdi,%rax` finishes as `mov %edi,%eax`): no SETREGS.
    assert_eq!(count(&calls, &Call::Cont(101, 0)), 2);
    assert!(!calls.iter().any(|c| matches!(c, Call::SetRegs(101, ..))));
    assert_eq!((sum.hits, sum.matching, sum.emulated), (1, 0, 1));
    assert!(events.is_empty());
    assert!(calls.contains(&Call::Detach(101, 0)) && calls.contains(&Call::Detach(PID, 0)));
}

#[test]
fn fork_child_seen_before_its_parents_event_gets_the_original_bytes() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    // The child's copy of the memory, int3s included.
    s.thread(200, 200);
    s.poke(200, SITE, &[INT3]);
    s.poke(200, FUNC, &[INT3]);
    s.stop(200, Stop::Interrupted);
    s.stop(PID, Stop::Fork(200));
    t.run();
    let sum = t.summary.clone();
    drop(t);
    let calls = s.calls();
    assert_eq!((s.byte(200, SITE), s.byte(200, FUNC)), (Some(WRAPPER[0]), Some(0x55)));
    let detach = pos(&calls, &Call::Detach(200, 0));
    assert!(pos(&calls, &Call::Write(200, SITE, vec![WRAPPER[0]])) < detach);
    assert_eq!(count(&calls, &Call::Cont(200, 0)), 0);
    assert_eq!((sum.forks_cleaned, sum.threads_seen), (1, 1));
}

#[test]
fn exec_while_stepping_forgets_the_sites_and_reports_the_call() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    // A matching syscall(SYS_execve): the step over `syscall` ends in the exec event.
    hit(&s, PID, 59);
    s.stop_with(PID, Stop::Exec, None, |r| (r.rip, r.rax) = (0x1000, 0));
    let end = t.run();
    let sites = t.sites.len();
    drop(t);
    let calls = s.calls();
    assert_eq!(end, End::Exec);
    assert_eq!(sites, 0);
    // The old program's bytes are gone with it: nothing is written into the new one.
    let exec = pos(&calls, &Call::Stopped(PID, Stop::Exec));
    assert!(!calls[exec..].iter().any(|c| matches!(c, Call::Write(..) | Call::SetRegs(..))), "{calls:#?}");
    assert_eq!(calls.last(), Some(&Call::Detach(PID, 0)));
    assert_eq!(events.len(), 1, "the execve call is reported");
    assert_eq!((events[0].nr, events[0].ret), (59, Some(0)));
}

#[test]
fn exec_by_another_thread_ends_the_call_a_thread_was_stepping() {
    let s = world(&[PID, 101]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    hit(&s, 101, 9);
    // Thread 101 is stepping mmap when the leader execs: the kernel ends 101 first.
    s.stop(101, Stop::Exited(0));
    s.stop_with(PID, Stop::Exec, None, |r| r.rip = 0x1000);
    let end = t.run();
    let sites = t.sites.len();
    drop(t);
    let calls = s.calls();
    assert_eq!((end, sites), (End::Exec, 0));
    let exec = pos(&calls, &Call::Stopped(PID, Stop::Exec));
    assert!(!calls[exec..].iter().any(|c| matches!(c, Call::Write(..))));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].ret, None);
    assert!(events[0].ret_missing.as_deref().is_some_and(|m| m.contains("exited")));
}

#[test]
fn exec_by_another_thread_while_the_leader_steps_ends_the_leaders_call() {
    let s = world(&[PID, 101]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    hit(&s, PID, 9);
    // Thread 101 execs while the leader steps mmap: the event comes with the leader's id (101 has taken it).
    s.stop_with(PID, Stop::Exec, None, |r| (r.rip, r.rax) = (0x1000, 0));
    let end = t.run();
    drop(t);
    assert_eq!(end, End::Exec);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].nr, events[0].ret), (9, None));
    assert!(events[0].ret_missing.as_deref().is_some_and(|m| m.contains("replaced")));
    let calls = s.calls();
    assert_eq!(calls.last(), Some(&Call::Detach(PID, 0)));
    assert!(!calls.iter().any(|c| matches!(c, Call::Detach(101, _))));
}

#[test]
fn detach_restores_every_byte_and_lets_every_thread_go_even_one_that_cannot_stop() {
    let s = world(&[PID, 101, 102]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    // 102 sleeps in the kernel for good; 101 hits the wrapper just as the tracer stops everything to detach.
    s.with_thread(102, |th| (th.can_stop, th.state, th.wchan) = (false, 'D', "io_schedule".into()));
    hit(&s, 101, 11);
    s.end();
    t.run();
    let sum = t.summary.clone();
    drop(t);
    let calls = s.calls();
    assert_eq!((s.byte(PID, SITE), s.byte(PID, FUNC)), (Some(WRAPPER[0]), Some(0x55)));
    // 101 is rewound onto the restored instruction, then detached with no signal (its SIGTRAP was ours).
    let rewind = pos(&calls, &Call::SetRegs(101, SITE, 0));
    assert!(rewind < pos(&calls, &Call::Detach(101, 0)));
    assert!(pos(&calls, &Call::Write(PID, SITE, vec![WRAPPER[0]])) < pos(&calls, &Call::Detach(PID, 0)));
    assert!(!calls.iter().any(|c| matches!(c, Call::Detach(102, _))));
    assert!(sum.warnings.iter().any(|w| w.contains("thread 102") && w.contains("io_schedule")), "{:?}", sum.warnings);
    // Bounded: the hold gives up after its limit, the late wait after its own.
    assert!(s.elapsed() <= hold::HOLD_LIMIT * 3, "{:?}", s.elapsed());
    assert!(s.elapsed() >= Duration::from_millis(100));
}

#[test]
fn function_probe_waits_for_its_return_on_the_same_thread() {
    let s = world(&[PID]);
    s.poke(PID, STACK, &0x40_5000u64.to_le_bytes());
    s.poke(PID, 0x40_5000, &code(&[0x89, 0xc7]));
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    s.stop_with(PID, Stop::Signal(libc::SIGTRAP), None, |r| (r.rip, r.rsp, r.rdi) = (FUNC + 1, STACK, 1));
    s.stop_with(PID, Stop::Signal(libc::SIGTRAP), None, |r| (r.rip, r.rsp, r.rax) = (0x40_5001, STACK + 8, 42));
    t.run();
    drop(t);
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].probe.as_deref(), events[0].ret), (Some("f"), Some(42)));
    // The return site was planted, then retired once nobody waited there.
    assert_eq!(s.byte(PID, 0x40_5000), Some(0x89));
    let calls = s.calls();
    assert!(calls.contains(&Call::Write(PID, 0x40_5000, vec![INT3])));
}

#[test]
fn exec_reports_calls_waiting_for_their_return() {
    let s = world(&[PID]);
    s.poke(PID, STACK, &0x40_5000u64.to_le_bytes());
    s.poke(PID, 0x40_5000, &code(&[0x89, 0xc7]));
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    s.stop_with(PID, Stop::Signal(libc::SIGTRAP), None, |r| (r.rip, r.rsp, r.rdi) = (FUNC + 1, STACK, 1));
    s.stop_with(PID, Stop::Exec, None, |r| r.rip = 0x1000);
    assert_eq!(t.run(), End::Exec);
    drop(t);
    assert_eq!(events.len(), 1);
    assert!(events[0].ret.is_none() && events[0].ret_missing.as_deref().is_some_and(|m| m.contains("replaced")));
}

#[test]
fn group_stop_is_listened_to_and_a_foreign_sigtrap_delivered() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    s.stop(PID, Stop::GroupStop(libc::SIGSTOP));
    // The target's own SIGTRAP (raise(), an int3 of its own): not at one of our sites.
    s.stop_with(PID, Stop::Signal(libc::SIGTRAP), Some(0), |r| r.rip = 0x40_9001);
    t.run();
    let sum = t.summary.clone();
    drop(t);
    let calls = s.calls();
    let group = pos(&calls, &Call::Stopped(PID, Stop::GroupStop(libc::SIGSTOP)));
    // CONT would end the job-control stop behind the shell's back.
    assert_eq!(calls[group + 1], Call::Listen(PID));
    let trap = pos(&calls, &Call::Stopped(PID, Stop::Signal(libc::SIGTRAP)));
    assert_eq!(calls[trap + 1], Call::Cont(PID, libc::SIGTRAP));
    assert_eq!((sum.hits, sum.signals_forwarded), (0, 1));
}

#[test]
fn vfork_child_keeps_the_shared_bytes_and_is_let_go_at_its_exec() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    s.thread(300, 300);
    s.with_thread(300, |th| th.vm = PID);
    s.stop(PID, Stop::Vfork(300));
    s.stop(300, Stop::Interrupted);
    // The child runs into the probe in the shared memory: traced like a thread of ours.
    hit(&s, 300, 9);
    step_trap(&s, 300, MAPPED);
    s.stop_with(300, Stop::Exec, None, |r| r.rip = 0x1000);
    let end = t.run();
    let sum = t.summary.clone();
    drop(t);
    let calls = s.calls();
    assert_eq!(end, End::Signal(libc::SIGINT));
    assert_eq!(sum.forks_cleaned, 0);
    // Restoring the bytes in the child would have restored them for the parent: nothing is written until detach.
    let exec = pos(&calls, &Call::Stopped(300, Stop::Exec));
    assert!(!calls[..exec].iter().any(|c| matches!(c, Call::Write(PID, SITE, b) if b[..] != [INT3])));
    assert_eq!(calls[exec + 1], Call::Detach(300, 0));
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].tid, events[0].ret), (300, Some(MAPPED)));
    assert_eq!(s.byte(PID, SITE), Some(WRAPPER[0]));
}

/// `tid` enters [`FUNC2`] with a call that does not match.
fn hit_func2(s: &Script, tid: Tid) {
    s.stop_with(tid, Stop::Signal(libc::SIGTRAP), Some(SI_KERNEL), |r| (r.rip, r.rsp, r.rdi) = (FUNC2 + 1, STACK, 0));
}

#[test]
fn an_instruction_that_cannot_be_emulated_is_stepped_with_every_other_thread_held() {
    let s = world(&[PID, 101]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    hit_func2(&s, 101);
    s.stop_with(101, Stop::Signal(libc::SIGTRAP), Some(TRAP_TRACE), |r| r.rip = FUNC2 + 3);
    t.run();
    let sum = t.summary.clone();
    drop(t);
    let calls = s.calls();
    let hit_at = pos(&calls, &Call::Stopped(101, Stop::Signal(libc::SIGTRAP)));
    let held = after(&calls, hit_at, &Call::Stopped(PID, Stop::Interrupted));
    // (Its guard int3 too: the instruction is three bytes long.)
    let back = after(&calls, hit_at, &Call::Write(PID, FUNC2, vec![0x83, 0xff]));
    let step = after(&calls, hit_at, &Call::Step(101, 0));
    let armed = after(&calls, hit_at, &Call::Write(PID, FUNC2, vec![INT3]));
    after(&calls, armed, &Call::Write(PID, FUNC2 + 1, vec![INT3]));
    let released = after(&calls, hit_at, &Call::Cont(PID, 0));
    // The original byte is back only while every other thread is held.
    assert!(held < back && back < step && step < armed && armed < released, "{calls:#?}");
    assert_eq!(calls[step + 1], Call::Stopped(101, Stop::Signal(libc::SIGTRAP)));
    after(&calls, armed, &Call::Cont(101, 0));
    assert_eq!((sum.slow_path, sum.hits), (1, 1));
}

/// A signal that stops the thread stepping alone before its instruction ran is passed on as soon as the int3 is
/// back, before the other threads are let go: until then it is out of the kernel, and a SIGKILL of syscatch would
/// lose it.
#[test]
fn a_signal_that_preempts_a_step_alone_is_passed_on_before_the_others_are_let_go() {
    let s = world(&[PID, 101]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    hit_func2(&s, 101);
    s.stop_with(101, Stop::Signal(libc::SIGUSR1), None, |r| r.rip = FUNC2);
    t.run();
    drop(t);
    let calls = s.calls();
    let usr1 = pos(&calls, &Call::Stopped(101, Stop::Signal(libc::SIGUSR1)));
    let armed = after(&calls, usr1, &Call::Write(PID, FUNC2, vec![INT3]));
    let passed = after(&calls, usr1, &Call::Cont(101, libc::SIGUSR1));
    let released = after(&calls, usr1, &Call::Cont(PID, 0));
    assert!(armed < passed && passed < released, "{calls:#?}");
    assert_eq!(count(&calls, &Call::Cont(101, libc::SIGUSR1)), 1, "{calls:#?}");
}

#[test]
fn a_step_that_blocks_lets_the_others_go_and_its_late_trap_is_swallowed() {
    let s = world(&[PID, 101]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    hit_func2(&s, 101);
    // The instruction blocks in the kernel (a fault on slow storage) for two seconds.
    s.stop_later(Duration::from_secs(2), 101, Stop::Signal(libc::SIGTRAP), |r| r.rip = FUNC2 + 3);
    t.run();
    drop(t);
    let calls = s.calls();
    let step = pos(&calls, &Call::Step(101, 0));
    let armed = after(&calls, step, &Call::Write(PID, FUNC2, vec![INT3]));
    let released = after(&calls, step, &Call::Cont(PID, 0));
    let late = calls.iter().rposition(|c| *c == Call::Stopped(101, Stop::Signal(libc::SIGTRAP))).unwrap_or(0);
    assert!(step < armed && armed < released && released < late, "{calls:#?}");
    // Our trap, not the target's: resumed without a signal.
    assert_eq!(calls[late + 1], Call::Cont(101, 0));
    assert!(!calls.contains(&Call::Cont(101, libc::SIGTRAP)));
}

/// A signal stop seen while holding is not kept for the detach (waitpid took the signal out of the kernel: a
/// SIGKILL of syscatch before the detach would lose it): it is delivered at once with an interrupt pending, and
/// the thread is held at that interrupt, then detached with no signal.
#[test]
fn a_signal_that_comes_while_detaching_is_delivered_at_once_not_kept() {
    let s = world(&[PID, 101]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    s.end();
    s.stop(101, Stop::Signal(libc::SIGUSR1));
    t.run();
    let forwarded = t.summary.signals_forwarded;
    drop(t);
    let calls = s.calls();
    let usr1 = pos(&calls, &Call::Stopped(101, Stop::Signal(libc::SIGUSR1)));
    assert_eq!(
        calls[usr1 + 1..usr1 + 4],
        [Call::Interrupt(101), Call::Cont(101, libc::SIGUSR1), Call::Stopped(101, Stop::Interrupted)],
        "{calls:#?}"
    );
    assert_eq!(count(&calls, &Call::Cont(101, libc::SIGUSR1)), 1, "{calls:#?}");
    assert_eq!(count(&calls, &Call::Detach(101, 0)), 1, "{calls:#?}");
    assert!(!calls.contains(&Call::Detach(101, libc::SIGUSR1)), "{calls:#?}");
    assert_eq!(forwarded, 1);
}

#[test]
fn a_trap_of_ours_still_pending_at_detach_is_drained_not_left_to_kill_the_thread() {
    let s = world(&[PID, 101]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    s.end();
    // 101 executed our int3, but the interrupt stop is reported first; the SIGTRAP is still queued.
    s.with_thread(101, |th| th.sig_pnd = 1 << (libc::SIGTRAP - 1));
    s.stop(101, Stop::Interrupted);
    s.stop_with(101, Stop::Signal(libc::SIGTRAP), Some(SI_KERNEL), |r| r.rip = SITE + 1);
    t.run();
    drop(t);
    let calls = s.calls();
    let held = calls.iter().rposition(|c| *c == Call::Stopped(101, Stop::Interrupted)).unwrap_or(0);
    let drained = after(&calls, held, &Call::Cont(101, 0));
    assert_eq!(calls[drained + 1], Call::Stopped(101, Stop::Signal(libc::SIGTRAP)));
    // Rewound onto the instruction whose byte goes back, and detached without the signal.
    assert_eq!(calls[drained + 2], Call::SetRegs(101, SITE, 0));
    assert!(after(&calls, drained, &Call::Write(PID, SITE, vec![WRAPPER[0]])) < pos(&calls, &Call::Detach(101, 0)));
}

/// A site the tracer cannot place a breakpoint on is named, not reported as a ptrace `EINVAL` ("cannot attach:
/// Invalid argument", as it used to be).
#[test]
fn a_site_that_cannot_be_decoded_or_is_no_wrapper_is_named() {
    let s = world(&[PID]);
    let cfg = || Config {
        pid: PID,
        stack_bytes: 256,
        python: None,
        python_search: false,
        deadline: None,
        epoch: Instant::now(),
        live_status: false,
        restorers: Vec::new(),
        known: None,
        ended: Default::default(),
        fault_every: None,
    };
    let k: Rc<dyn Kernel> = Rc::new(s.clone());
    let cases = [
        // 0x06 (push es) does not exist in 64-bit mode.
        (vec![0x06; 64], false, "the instruction at 0x7f0000001000 cannot be decoded"),
        (code(&[0x55, 0x48, 0x89, 0xe5]), true, "no `syscall` instruction among the first 16 instructions"),
    ];
    for (code, wrapper, want) in cases {
        let probe = Probe::new(None, None, Box::new(Numbers([9].into())));
        let specs = vec![SiteSpec { addr: 0x7f00_0000_1000, code, wrapper, probes: vec![probe] }];
        let mut sink = Vec::new();
        let mem = k.open_mem(PID).unwrap();
        let err = Tracer::with_kernel(cfg(), specs, &mut sink, k.clone(), mem, Err(None)).err().expect("refused");
        assert!(err.to_string().contains(want), "{err}");
    }
}

/// A function whose first instruction is one byte (`push %rbp` at [`FUNC`]) has its guard int3 on the next one
/// (`mov %rsp,%rbp`), and a hit runs both: the thread is let go past the second, never between the two (where
/// the trap pad, after syscatch's death, would rewind it onto the first and run it twice). Detach puts both bytes
/// back.
#[test]
fn a_one_byte_first_instruction_runs_with_the_next_one() {
    let s = world(&[PID]);
    let mut events = Vec::new();
    let mut t = tracer(&s, &mut events);
    assert_eq!((s.byte(PID, FUNC), s.byte(PID, FUNC + 1)), (Some(INT3), Some(INT3)));
    // A call that does not match (rdi 0): the two instructions emulated, the thread let go after them.
    s.stop_with(PID, Stop::Signal(libc::SIGTRAP), None, |r| (r.rip, r.rsp, r.rdi, r.rbp) = (FUNC + 1, STACK, 0, 7));
    t.run();
    drop(t);
    let calls = s.calls();
    let set: Vec<u64> =
        calls.iter().filter_map(|c| if let Call::SetRegs(PID, rip, _) = c { Some(*rip) } else { None }).collect();
    assert_eq!(set, [FUNC + 4], "{calls:#?}");
    assert_eq!(s.byte(PID, STACK - 8), Some(7), "rbp pushed");
    assert_eq!((s.byte(PID, FUNC), s.byte(PID, FUNC + 1)), (Some(0x55), Some(0x48)));
}
