//! Adversarial review: each test reproduces a way the tracer could harm a target or report something untrue.

use crate::common::*;
use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string").trim_start_matches("0x"), 16).unwrap()
}

fn events(out: &[String]) -> Vec<Value> {
    json_lines(out).into_iter().filter(|v| v["type"] == "event").map(|v| v["data"].clone()).collect()
}

/// Waits until thread `tid` of `pid` sits in system call `nr` (per /proc/PID/task/TID/syscall).
fn wait_in_syscall(pid: i32, tid: i32, nr: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
        if s.split_whitespace().next() == Some(&nr.to_string()) {
            return;
        }
        assert!(Instant::now() < deadline, "thread {tid} never blocked in syscall {nr}: {s:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn reader_tid(t: &mut Target) -> i32 {
    let l = t.out.until(|l| l.starts_with("reader "));
    l.last().unwrap().strip_prefix("reader ").unwrap().parse().unwrap()
}

const ERESTART: std::ops::RangeInclusive<i64> = -516..=-512;

/// A matching call blocked in the kernel when the trace ends: the detach interrupts it (-ERESTARTSYS in rax, the
/// kernel restarts it after the detach). The event must not claim the call returned -512.
#[test]
fn blocked_call_at_detach_is_not_reported_as_returning_erestartsys() {
    require_ptrace();
    let mut t = Target::start(&testprog("review"), &[]);
    let pid = t.pid.to_string();
    // A breakpoint stops the call on its way in; --fast stops it once the kernel returns, so a call still blocked
    // at detach has no event there.
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "read", "--json", "--no-fast"]);
    sc.wait_attached();
    t.send("blockread");
    let tid = reader_tid(&mut t);
    wait_in_syscall(t.pid, tid, 0);
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.send("feed");
    t.out.until(|l| l == "ok");
    // The reader thread prints "read 1" when its call returns, in any order with the main thread's "ok".
    if !t.out.seen.iter().any(|l| l == "read 1") {
        t.out.until(|l| l == "read 1");
    }
    let evs = events(&out);
    let reads: Vec<&Value> = evs.iter().filter(|e| e["syscall"] == "read" && e["tid"] == tid).collect();
    assert_eq!(reads.len(), 1, "{evs:#?}");
    if !reads[0]["ret"].is_null() {
        let ret = hex(&reads[0]["ret"]) as i64;
        assert!(!ERESTART.contains(&ret), "reported a return value the target never saw: {}", reads[0]);
    }
}

/// A signal with an SA_RESTART handler interrupts a matching blocked call: the kernel restarts it after the
/// handler, and the call eventually returns 1. The event must not report -ERESTARTSYS as its result.
#[test]
fn call_interrupted_by_a_restarting_handler_is_not_reported_as_returning_erestartsys() {
    require_ptrace();
    let mut t = Target::start(&testprog("review"), &[]);
    let pid = t.pid.to_string();
    t.send("handler");
    t.out.until(|l| l == "ok");
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "read", "--json"]);
    sc.wait_attached();
    t.send("blockread");
    let tid = reader_tid(&mut t);
    wait_in_syscall(t.pid, tid, 0);
    // SAFETY: tgkill to a thread of our own child.
    unsafe { libc::syscall(libc::SYS_tgkill, t.pid, tid, libc::SIGUSR1) };
    t.out.until(|l| l == "handled");
    wait_in_syscall(t.pid, tid, 0);
    t.send("feed");
    t.out.until(|l| l == "ok");
    if !t.out.seen.iter().any(|l| l == "read 1") {
        t.out.until(|l| l == "read 1");
    }
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let evs = events(&out);
    let reads: Vec<&Value> = evs.iter().filter(|e| e["syscall"] == "read" && e["tid"] == tid).collect();
    assert!(!reads.is_empty(), "{evs:#?}");
    for e in reads {
        if !e["ret"].is_null() {
            let ret = hex(&e["ret"]) as i64;
            assert!(!ERESTART.contains(&ret), "reported a return value the target never saw: {e}");
        }
    }
}

/// `--fast` with a matching fork made through syscall(): the child returns from the kernel inside the trampoline
/// page, whose int3 it inherited. It must exit normally, not die of SIGTRAP.
#[test]
fn fast_fork_through_syscall_does_not_kill_the_child() {
    require_ptrace();
    let mut t = Target::start(&testprog("review"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "fork", "--fast", "--json"]);
    sc.wait_attached();
    t.send("forkraw");
    let lines = t.out.until(|l| l == "ok");
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert!(!err.iter().any(|l| l.contains("--fast is not possible")), "{err:#?}");
    assert!(lines.iter().any(|l| l == "child exited 7"), "the fork child was harmed: {lines:?}");
}

/// Events are rendered by a thread fed through a bounded channel. When nobody reads syscatch's stdout (a pager
/// that is not scrolled, a stopped consumer), the target must keep running and Ctrl-C must still detach.
#[test]
fn unread_output_does_not_freeze_the_target() {
    require_ptrace();
    let mut t = Target::start(&testprog("review"), &[]);
    let pid = t.pid.to_string();
    let mut child = syscatch_cmd()
        .args(["--pid", &pid, "--syscall", "mmap"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut err = Lines::new(child.stderr.take().unwrap(), "syscatch stderr");
    err.until(|l| l.contains("attached to"));
    t.send("mmaps 20000");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut finished = false;
    while Instant::now() < deadline {
        if t.out.try_next().is_some_and(|l| l.starts_with("mapped")) {
            finished = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: SIGINT to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let stalled_at = Instant::now();
    let mut detached = false;
    while stalled_at.elapsed() < Duration::from_secs(5) {
        if tracer_pid(t.pid) == Some(0) {
            detached = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Unblock it whatever happened, so the test cleans up.
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = stdout.read_to_end(&mut sink);
    });
    let _ = child.wait();
    assert!(finished, "the target froze while syscatch's stdout was not read");
    assert!(detached, "Ctrl-C did not detach while syscatch's stdout was not read");
}

fn script(name: &str, text: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A thread steps a matching syscall() while another thread hits a breakpoint whose first instruction is
/// stepped with every other thread held: the stepping thread's trap may be seen while holding. It must not be
/// resumed single-stepping (its next trap would be passed to it as a real SIGTRAP, killing the target).
#[test]
fn stepping_thread_held_by_a_slow_step_over_survives() {
    require_ptrace();
    let f =
        script("review-mix.probe", "probe s at syscall(getppid) {\n collect ret\n}\nprobe f at review:slowfn {\n}\n");
    let mut t = Target::start(&testprog("review"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["run", f.to_str().unwrap(), "--pid", &pid, "--json"]);
    sc.wait_attached();
    t.send("mix 20000");
    let got = t.out.next_or_end();
    sc.signal(libc::SIGINT);
    let (_, out, err) = sc.finish();
    let status = t.wait();
    assert_eq!(got.as_deref(), Some("mixed"), "target died: {status:?}; syscatch: {err:#?}");
    let evs = events(&out);
    let bad: Vec<&Value> = evs.iter().filter(|e| e["probe"] == "s" && !e["ret_missing"].is_null()).collect();
    assert!(bad.is_empty(), "{} getppid events without their result, e.g. {}", bad.len(), bad[0]);
}

/// A fork copies a return breakpoint's int3; if the breakpoint is retired (its call returned on another thread)
/// before the fork event is handled, the child must still get the original byte back.
#[test]
fn fork_child_never_inherits_a_retired_return_breakpoint() {
    require_ptrace();
    let f = script("review-ret.probe", "probe r at review:retfn {\n collect ret\n}\n");
    let mut t = Target::start(&testprog("review"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["run", f.to_str().unwrap(), "--pid", &pid, "--json"]);
    sc.wait_attached();
    t.send("forkret 3000");
    let lines = t.out.until(|l| l == "ok");
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert!(lines.iter().any(|l| l == "forks 3000 killed 0"), "fork children harmed: {lines:?}");
}

/// The target sends itself SIGTRAP through a matching syscall(SYS_tgkill): the step trap of that `syscall`
/// instruction is merged into the already-pending SIGTRAP (one legacy signal), so the one stop at the step's end
/// is also the target's own signal, which must still be delivered.
#[test]
fn own_sigtrap_sent_by_a_stepped_call_is_delivered() {
    require_ptrace();
    let mut t = Target::start(&testprog("review"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "tgkill", "--json"]);
    sc.wait_attached();
    t.send("selftrap");
    let lines = t.out.until(|l| l == "ok");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert_eq!(events(&out).len(), 1, "{out:#?}");
    assert!(lines.iter().any(|l| l == "trapped"), "the target's own SIGTRAP was lost: {lines:?}");
}
