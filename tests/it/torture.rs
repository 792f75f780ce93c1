//! Torture: syscatch attached to a busy, self-checking target (testprogs/torture.c) is stopped at random moments,
//! races thread churn, forks, vforks, exec, signal storms, SIGKILL, a second tracer and the target's own exit.
//! Whatever happens, the target must finish with the right counts and exit status, and its text must hold its
//! files' bytes. Random choices are seeded; a failing test prints `TORTURE_SEED=N` to replay it
//! (`TORTURE_ROUNDS=N` runs longer loops).
//!
//! Every case runs for each entry of [`TOOLS`]: adding a command that attaches to a live process (stack, mem,
//! hooks, probe scripts) to the whole suite is one line there.

use crate::common::*;
use std::os::unix::process::ExitStatusExt;
use std::time::Instant;

/// A syscatch command that attaches to a live process: `args` come before `--pid N`. `events`: it prints the
/// trace's JSON Lines (events with `ret`, a `summary` with `end`), so exactness is checked too; otherwise only
/// the harm checks apply. It must print a stderr line containing "attached to" once attached.
struct Tool {
    name: &'static str,
    args: &'static [&'static str],
    events: bool,
}

const TOOLS: &[Tool] = &[
    Tool { name: "trace", args: &["--syscall", "mmap", "--json"], events: true },
    // One line each once they land, e.g.:
    // Tool { name: "stack", args: &["stack", "--json"], events: false },
    // Tool { name: "mem", args: &["mem", "--json"], events: false },
    // Tool { name: "hooks", args: &["hooks", "--json"], events: false },
    // Tool { name: "probe", args: &["run", "testprogs/probe.sc", "--json"], events: false },
];

impl Tool {
    fn start(&self, pid: i32) -> Syscatch {
        let pid = pid.to_string();
        let mut args = self.args.to_vec();
        args.extend(["--pid", pid.as_str()]);
        Syscatch::start(&args)
    }
}

/// splitmix64, seeded from `TORTURE_SEED` or the clock; prints the seed if the test panics.
struct Rng {
    name: &'static str,
    seed: u64,
    state: u64,
}

impl Rng {
    fn new(name: &'static str) -> Rng {
        let seed = std::env::var("TORTURE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
        });
        Rng { name, seed, state: seed }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

impl Drop for Rng {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{} failed: replay with TORTURE_SEED={}", self.name, self.seed);
        }
    }
}

fn rounds(default: u64) -> u64 {
    std::env::var("TORTURE_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Random timing, not synchronisation: burns a few microseconds.
fn spin(n: u64) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// Polls (bounded, no sleep) until `pred` holds; false on timeout.
fn poll(mut pred: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        if pred() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

/// Sends a command; returns the answer lines without the final "ok".
fn cmd(t: &mut Target, c: &str) -> Vec<String> {
    t.send(c);
    let mut lines = t.out.until(|l| l == "ok");
    lines.pop();
    lines
}

/// The target's own counts: iterations, mmap, munmap, getpid, gettid, futex, churn threads created and joined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts([u64; 8]);

impl Counts {
    fn parse(line: &str) -> Counts {
        let v: Vec<u64> = line
            .strip_prefix("counts ")
            .unwrap_or_else(|| panic!("a counts line: {line}"))
            .split_whitespace()
            .map(|n| n.parse().expect("a count"))
            .collect();
        Counts(v.try_into().expect("eight counts"))
    }

    /// Each iteration made one call of each kind, each verified by the target itself.
    fn assert_consistent(&self, ctx: &str) {
        let c = self.0;
        assert!(c[0] > 0, "{ctx}: the workers made progress: {c:?}");
        assert!(c[1..6].iter().all(|&n| n == c[0]), "{ctx}: one call of each kind per iteration: {c:?}");
        assert_eq!(c[6], c[7], "{ctx}: every churn thread created was joined: {c:?}");
    }

    fn minus(&self, o: &Counts) -> Counts {
        Counts(std::array::from_fn(|i| self.0[i] - o.0[i]))
    }
}

fn stop_workers(t: &mut Target) -> Counts {
    let l = cmd(t, "stop");
    Counts::parse(&l[0])
}

/// Stops everything, checks the counts and that the target exits with its known status 23.
fn finish(mut t: Target, ctx: &str) -> Counts {
    t.send("finish");
    let line = t.out.next();
    let c = Counts::parse(&line);
    c.assert_consistent(ctx);
    let pid = t.pid;
    let st = t.wait();
    assert_eq!(st.code(), Some(23), "{ctx}: target {pid} exit status {st:?}");
    c
}

fn torture_target(args: &[&str]) -> Target {
    require_ptrace();
    Target::start(&testprog("torture"), args)
}

/// After syscatch is gone: not traced, no thread left in a tracing stop, the text is the files'.
fn assert_unharmed(pid: i32, err: &[String], ctx: &str) {
    assert_eq!(tracer_pid(pid), Some(0), "{ctx}: still traced after syscatch exited");
    if let Some(site) = attached_site(err) {
        assert_eq!(
            read_mem(pid, site, 16),
            file_bytes_at(pid, site, 16),
            "{ctx}: syscall() at {site:#x} holds the file's bytes"
        );
    }
    assert_text_pristine(pid, ctx);
    // A thread left in a tracing stop ('t') would never run again.
    assert!(poll(|| !thread_states_of(pid).contains(&'t')), "{ctx}: threads left stopped: {:?}", thread_states_of(pid));
}

fn assert_no_panic(err: &[String], ctx: &str) {
    assert!(
        !err.iter().any(|l| l.contains("panicked") || l.contains("RUST_BACKTRACE")),
        "{ctx}: syscatch panicked: {err:#?}"
    );
}

fn hex(v: &serde_json::Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap_or("").trim_start_matches("0x"), 16).expect("a hex string")
}

/// Checks the trace's events: each mmap has its address (page-aligned) or says why not.
fn check_events(values: &[serde_json::Value], ctx: &str) -> usize {
    let mut n = 0;
    for v in values.iter().filter(|v| v["type"] == "event") {
        let d = &v["data"];
        assert_eq!(d["syscall"], "mmap", "{ctx}: only mmap matches: {v}");
        match d["ret"].as_str() {
            Some(r) => {
                let a = u64::from_str_radix(r.trim_start_matches("0x"), 16).expect("hex ret");
                assert!(a % 4096 == 0 && a != 0, "{ctx}: a real mapping address: {v}");
            }
            None => assert!(d["ret_missing"].is_string(), "{ctx}: a missing ret says why: {v}"),
        }
        n += 1;
    }
    n
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    /// Right after starting syscatch: before or during its checks, seize, or arm.
    AtStart,
    /// Once the target shows a tracer, before syscatch says it is attached.
    WhileSeizing,
    /// Right after the "attached" line.
    Attached,
    /// After some events went by.
    MidTrace,
}

/// Starts `tool` on `pid`, signals it at a random moment (sometimes twice, the second during detach), and checks
/// how it ended. Returns (moment, events captured).
fn interrupt_at_random(tool: &Tool, pid: i32, rng: &mut Rng, ctx: &str) -> (Moment, usize) {
    let moment = [Moment::AtStart, Moment::WhileSeizing, Moment::Attached, Moment::MidTrace][rng.below(4) as usize];
    let sigs = [libc::SIGINT, libc::SIGTERM];
    let first = sigs[rng.below(2) as usize];
    let second = (rng.below(2) == 0).then(|| sigs[rng.below(2) as usize]);
    let ctx = format!("{ctx} {} {moment:?} {first}/{second:?}", tool.name);
    let mut sc = tool.start(pid);
    match moment {
        Moment::AtStart => spin(rng.below(200_000)),
        Moment::WhileSeizing => {
            let me = sc.child.id() as i32;
            assert!(
                poll(|| tracer_pid(pid) == Some(me) || sc.err.try_next().is_some()),
                "{ctx}: syscatch never seized the target"
            );
        }
        Moment::Attached => sc.wait_attached(),
        Moment::MidTrace => {
            sc.wait_attached();
            if tool.events {
                for _ in 0..rng.below(60) {
                    sc.out.next();
                }
            }
        }
    }
    sc.signal(first);
    if let Some(s) = second {
        spin(rng.below(20_000));
        sc.signal(s);
    }
    let (status, out, err) = sc.finish();
    assert_no_panic(&err, &ctx);
    let attached = err.iter().any(|l| l.contains("attached to"));
    let mut events = 0;
    if status.success() {
        if tool.events && attached {
            let values = json_lines(&out);
            let s = summary_data(&values);
            assert_eq!(s["end"], "signal", "{ctx}: {s}");
            let v = s["end_value"].as_i64().unwrap_or(0) as i32;
            assert!(v == first || Some(v) == second, "{ctx}: ended by the signal sent: {s}");
            events = check_events(&values, &ctx);
        }
    } else {
        // Before syscatch installs its handlers (it has read /proc, touched nothing) the default action of
        // SIGINT/SIGTERM ends it: harmless, and the checks below prove it.
        let sig = status.signal();
        assert!(!attached && (sig == Some(first) || sig == second), "{ctx}: syscatch ended with {status:?}: {err:#?}");
    }
    assert_unharmed(pid, &err, &ctx);
    (moment, events)
}

#[test]
fn signals_at_random_moments_leave_the_target_healthy() {
    let mut rng = Rng::new("signals_at_random_moments_leave_the_target_healthy");
    let started = Instant::now();
    let mut seen = Vec::new();
    for tool in TOOLS {
        for round in 0..rounds(12) {
            let mut t = torture_target(&[]);
            cmd(&mut t, &format!("start {}", 2 + rng.below(3)));
            let ctx = format!("round {round}");
            let (moment, events) = interrupt_at_random(tool, t.pid, &mut rng, &ctx);
            seen.push((moment, events));
            finish(t, &ctx);
        }
    }
    eprintln!("{} rounds in {:.1}s (moment, events): {seen:?}", seen.len(), started.elapsed().as_secs_f64());
}

/// Threads born and dying continuously during the trace and the detach (the churn starts once attached).
#[test]
fn thread_churn_during_trace_and_detach() {
    let mut rng = Rng::new("thread_churn_during_trace_and_detach");
    for tool in TOOLS {
        for round in 0..rounds(4) {
            let ctx = format!("churn {} round {round}", tool.name);
            let mut t = torture_target(&[]);
            cmd(&mut t, "start 1");
            let mut sc = attached(tool, &t);
            cmd(&mut t, "churn 4");
            if tool.events {
                for _ in 0..rng.below(80) {
                    sc.out.next();
                }
            }
            sc.signal(libc::SIGINT);
            if rng.below(2) == 0 {
                spin(rng.below(20_000));
                sc.signal(libc::SIGTERM);
            }
            let (status, out, err) = sc.finish();
            assert_no_panic(&err, &ctx);
            assert!(status.success(), "{ctx}: {status:?} {err:#?}");
            if tool.events {
                let values = json_lines(&out);
                assert_eq!(summary_data(&values)["end"], "signal", "{ctx}");
                check_events(&values, &ctx);
            }
            assert_unharmed(t.pid, &err, &ctx);
            let c = finish(t, &ctx);
            assert!(c.0[6] > 4, "{ctx}: threads were born and died during the trace: {c:?}");
        }
    }
}

/// Regression: a thread created while syscatch attached could be left untraced, and its first syscall() then hit
/// the int3 with no tracer to catch it: the whole target died of SIGTRAP (seen once under load: `target_killed`,
/// 0.5 ms after arming). Whether a new thread is traced is decided when its creator enters clone(), but it shows in
/// /proc/PID/task only when clone() returns. Attach now holds every seized thread (a thread stops only once its
/// clone() returned) and rescans until nothing new appears, and arms before any thread runs on.
#[test]
fn thread_churn_during_attach() {
    let mut rng = Rng::new("thread_churn_during_attach");
    for tool in TOOLS {
        let mut t = torture_target(&[]);
        cmd(&mut t, "start 1");
        cmd(&mut t, "churn 8");
        for round in 0..rounds(20) {
            interrupt_at_random(tool, t.pid, &mut rng, &format!("churn-attach round {round}"));
        }
        let c = finish(t, "churn-attach");
        assert!(c.0[6] > 8, "threads were born and died during the attaches: {c:?}");
    }
}

/// A single-threaded target that only forks is nearly always caught inside fork(), at its fork event: the trap
/// pad's system calls must not run on a thread stopped there (finishing the fork under our registers made fork()
/// fail with ENOSYS, and under thread churn made pthread_create start a thread twice). Every attach and detach
/// must leave each fork() its child's pid, and the pad set up (and removed) nonetheless.
#[test]
fn attach_and_detach_while_the_only_thread_forks() {
    require_ptrace();
    let mut t = Target::start(&testprog("forker"), &[]);
    for round in 0..rounds(6) {
        let ctx = format!("forker round {round}");
        let mut sc = Syscatch::start_cmd(syscatch_cmd().env("SYSCATCH_TRAP_PAD", "1").args([
            "--syscall",
            "mmap",
            "--json",
            "--pid",
            &t.pid.to_string(),
        ]));
        sc.wait_attached();
        let (values, err) = stop_with(sc, libc::SIGINT, &ctx);
        assert!(!err.iter().any(|l| l.contains("no trap pad")), "{ctx}: the pad was set up: {err:#?}");
        assert!(summary_data(&values)["warnings"].as_array().is_none_or(|w| w.is_empty()), "{ctx}: {values:?}");
        assert_unharmed(t.pid, &err, &ctx);
    }
    t.send("done");
    let line = t.out.next();
    assert!(line.ends_with("failed 0"), "every fork() returned a pid: {line}");
    assert!(t.wait().success());
}

/// A probe on a function whose first instruction is a blocking system call: no emulator can run it, so the
/// tracer single-steps it with the other threads held, and the step lasts as long as the call. The tracer used to
/// wait for that step for ever (the other threads held all along, syscatch deaf to Ctrl-C); now the others run on
/// after a bounded wait, and the step's trap, when the call returns, is taken as ours (not delivered).
#[test]
fn a_step_that_blocks_does_not_hold_the_other_threads() {
    require_ptrace();
    let mut t = Target::start(&testprog("blocking_step"), &[]);
    let probe = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("blocking_step.probe");
    std::fs::write(&probe, "probe r at blocking_step:raw_read {\n    collect args\n}\n").unwrap();
    let mut sc = Syscatch::start(&["run", probe.to_str().unwrap(), "--pid", &t.pid.to_string(), "--json"]);
    sc.wait_attached();
    t.send("read");
    // The main thread sits in raw_read's read() (system call 0, 64 bytes: stdio's own reads ask for more) under
    // our single step.
    let pid = t.pid;
    let in_read = || {
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall")).unwrap_or_default();
        let f: Vec<&str> = s.split_whitespace().collect();
        f.first() == Some(&"0") && f.get(3) == Some(&"0x40")
    };
    assert!(poll(in_read), "the probed read() was entered");
    assert!(
        poll(|| !thread_states_of(t.pid).contains(&'t')),
        "the other thread is not held while read() blocks: {:?}",
        thread_states_of(t.pid)
    );
    t.send("data");
    assert_eq!(t.out.next(), "got data", "read() returned the line");
    assert_eq!(t.out.next(), "ok");
    let (values, err) = stop_with(sc, libc::SIGINT, "blocking step");
    let events: Vec<_> = values.iter().filter(|v| v["type"] == "event").collect();
    assert_eq!(events.len(), 1, "one call, one event: {values:?}");
    assert_eq!(events[0]["data"]["probe"], "r");
    assert_unharmed(t.pid, &err, "blocking step");
    t.send("read");
    assert!(poll(in_read), "read() entered again, untraced");
    t.send("again");
    assert_eq!(t.out.next(), "got agai", "the probe's site holds the original instruction again");
    assert_eq!(t.out.next(), "ok");
    assert!(t.wait().success());
}

/// Starts `tool` on a target and waits until it is attached.
fn attached(tool: &Tool, t: &Target) -> Syscatch {
    let mut sc = tool.start(t.pid);
    sc.wait_attached();
    sc
}

fn stop_with(sc: Syscatch, sig: i32, ctx: &str) -> (Vec<serde_json::Value>, Vec<String>) {
    sc.signal(sig);
    let (status, out, err) = sc.finish();
    assert_no_panic(&err, ctx);
    assert!(status.success(), "{ctx}: syscatch {status:?}: {err:#?}");
    (json_lines(&out), err)
}

/// Runs `storm` commands (command, expected answer per child) on a busy target under `tool`; then the parent's
/// own calls must still be captured (its breakpoint survived) and `forks_cleaned` must equal `forks`.
fn storm_during_trace(tool: &Tool, storm: &[(&str, Vec<String>)], forks: u64) {
    let ctx = format!("storm {}", tool.name);
    let mut t = torture_target(&[]);
    cmd(&mut t, "start 2");
    let sc = attached(tool, &t);
    for (c, want) in storm {
        assert_eq!(&cmd(&mut t, c), want, "{ctx}: `{c}`: every child ran to its normal exit");
    }
    stop_workers(&mut t);
    let truth = truth_mmaps(&cmd(&mut t, "mmap 3"));
    let (values, err) = stop_with(sc, libc::SIGINT, &ctx);
    if tool.events {
        // SIGCHLD may arrive while a matching call is stepped: the tracer then reports that event without its
        // return value (`ret_missing`), so only events with a value are compared here.
        let got: Vec<(u64, u64)> = values
            .iter()
            .filter(|v| v["type"] == "event" && v["data"]["ret"].is_string())
            .map(|v| (hex(&v["data"]["ret"]), hex(&v["data"]["args"][1])))
            .collect();
        assert!(got.ends_with(&truth), "{ctx}: the parent's calls after the storm: {truth:?}");
        assert_eq!(summary_data(&values)["forks_cleaned"], forks, "{ctx}");
        let n = check_events(&values, &ctx);
        eprintln!("{ctx}: {n} events, {} without a return value", n - got.len());
    }
    assert_unharmed(t.pid, &err, &ctx);
    finish(t, &ctx);
}

fn answers(prefix: &str, n: usize, status: impl Fn(usize) -> usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix} {i} status {}", status(i))).collect()
}

/// Regression: a fork child was sometimes left in a tracing stop forever (and, once syscatch detached, died of
/// the inherited int3: "child 15 status 1005"): `on_child` waited for the child's first stop with a wait that
/// returned "nothing" when the 50 ms SIGALRM tick interrupted waitpid. That wait now goes on after EINTR (for at
/// most 0.5 s: a child whose first stop comes later gets the original bytes back at once and is detached when it
/// stops), and children whose first stop is still parked at detach get the original bytes back and are detached.
#[test]
fn fork_storm_during_the_trace() {
    for tool in TOOLS {
        storm_during_trace(tool, &[("fork 40", answers("child", 40, |i| 40 + i % 50))], 40);
    }
}

/// Regression, the same EINTR bug as [`fork_storm_during_the_trace`]: a vfork or posix_spawn child whose first
/// stop came after the SIGALRM tick interrupted the wait in `on_child` was never resumed, and the parent blocked in
/// vfork forever.
#[test]
fn vfork_and_posix_spawn_during_the_trace() {
    for tool in TOOLS {
        let storm = [("spawn 8", answers("spawn", 8, |_| 0)), ("vfork 8", answers("vfork", 8, |_| 0))];
        storm_during_trace(tool, &storm, 0);
    }
}

#[test]
fn exec_mid_trace_ends_the_trace_cleanly() {
    for tool in TOOLS {
        let ctx = format!("exec {}", tool.name);
        let mut t = torture_target(&[]);
        cmd(&mut t, "start 3");
        let mut sc = attached(tool, &t);
        if tool.events {
            sc.out.next();
        }
        t.send("exec");
        t.out.until(|l| l == "execed");
        let (status, out, err) = sc.finish();
        assert_no_panic(&err, &ctx);
        assert!(status.success(), "{ctx}: {status:?} {err:#?}");
        if tool.events {
            let values = json_lines(&out);
            assert_eq!(summary_data(&values)["end"], "target_exec", "{ctx}");
            check_events(&values, &ctx);
        }
        // The new program is untraced and its text is pristine (the old site address means nothing now).
        assert_unharmed(t.pid, &[], &ctx);
        cmd(&mut t, "start 2");
        finish(t, &ctx);
    }
}

/// Queues real-time signal `sig` with rt_sigqueueinfo: unlike kill(2), which silently coalesces a real-time signal
/// when root's queue (RLIMIT_SIGPENDING, shared with every test running) is full, this fails with EAGAIN.
fn sigqueue(pid: i32, sig: i32) -> bool {
    // SAFETY: a zeroed siginfo_t is valid; the kernel copies it in and keeps no reference.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        info.si_signo = sig;
        info.si_code = libc::SI_QUEUE;
        libc::syscall(libc::SYS_rt_sigqueueinfo, pid, sig, &info as *const libc::siginfo_t) == 0
    }
}

fn all_stopped(pid: i32) -> bool {
    let st = thread_states_of(pid);
    !st.is_empty() && st.iter().all(|&c| c == 'T' || c == 't')
}

/// User-mode CPU ticks of each thread of `pid` (utime, field 14 of /proc/PID/task/TID/stat).
fn user_ticks(pid: i32) -> Vec<(String, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    let mut v: Vec<(String, u64)> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // Fields after the parenthesised name: state is field 3, utime field 14.
            let rest = stat.rsplit_once(')')?.1;
            let utime = rest.split_whitespace().nth(11)?.parse().ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), utime))
        })
        .collect();
    v.sort();
    v
}

/// SIGSTOP from outside: every thread stops, and stays stopped until SIGCONT: no thread gains user CPU time and
/// a command sent meanwhile is not answered. (The state letter alone is no proof: a traced thread in group-stop
/// that the tracer must be told about, e.g. of a new signal, shows 'R' for a moment inside the kernel without
/// running any user code.) "Stays" is checked over a bounded number of polls: absence cannot be proven in finite
/// time.
fn stop_and_continue(t: &mut Target, ctx: &str) {
    let pid = t.pid;
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert!(poll(|| all_stopped(pid)), "{ctx}: SIGSTOP stopped every thread: {:?}", thread_states_of(pid));
    let ticks = user_ticks(pid);
    t.send("signals");
    for _ in 0..2000 {
        assert_eq!(user_ticks(pid), ticks, "{ctx}: a stopped target runs no user code");
        assert_eq!(t.out.try_next(), None, "{ctx}: a stopped target answered");
        std::thread::yield_now();
    }
    unsafe { libc::kill(pid, libc::SIGCONT) };
    t.out.until(|l| l == "ok");
}

/// Polls the target's count of handled real-time signals until it reaches `sent` (bounded).
fn wait_handled(t: &mut Target, sent: u64, ctx: &str) {
    let mut last = String::new();
    for _ in 0..5000 {
        last = cmd(t, "signals").remove(0);
        let n: u64 = last.strip_prefix("signals ").and_then(|n| n.parse().ok()).expect("signals N");
        assert!(n <= sent, "{ctx}: {n} signals handled, only {sent} sent");
        if n == sent {
            return;
        }
    }
    panic!("{ctx}: {sent} signals sent, target says {last}");
}

#[test]
fn signal_storm_and_job_control_while_traced() {
    let mut rng = Rng::new("signal_storm_and_job_control_while_traced");
    for tool in TOOLS {
        let ctx = format!("signals {}", tool.name);
        let mut t = torture_target(&[]);
        cmd(&mut t, "start 3");
        let sc = attached(tool, &t);
        let mut sent = 0u64;
        let total = 1500 + rng.below(500);
        let stop_at = rng.below(total);
        for i in 0..total {
            if i == stop_at {
                stop_and_continue(&mut t, &ctx);
            }
            if sigqueue(t.pid, libc::SIGRTMIN()) {
                sent += 1;
            }
        }
        assert!(sent > total / 2, "{ctx}: the signal queue was full: {sent} of {total} queued");
        wait_handled(&mut t, sent, &ctx);
        stop_and_continue(&mut t, &ctx);
        // Stopped when syscatch detaches: it stays stopped after, until SIGCONT.
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(t.pid, libc::SIGSTOP) };
        assert!(poll(|| all_stopped(t.pid)), "{ctx}");
        let (values, err) = stop_with(sc, libc::SIGINT, &ctx);
        if tool.events {
            let fwd = summary_data(&values)["signals_forwarded"].as_u64().unwrap_or(0);
            assert!(fwd >= sent, "{ctx}: {fwd} signals forwarded, {sent} sent");
        }
        t.send("signals");
        for _ in 0..2000 {
            assert!(
                thread_states_of(t.pid).iter().all(|&c| c == 'T'),
                "{ctx}: stopped after detach: {:?}",
                thread_states_of(t.pid)
            );
            assert_eq!(t.out.try_next(), None, "{ctx}: a stopped target answered");
        }
        unsafe { libc::kill(t.pid, libc::SIGCONT) };
        t.out.until(|l| l == "ok");
        assert_unharmed(t.pid, &err, &ctx);
        wait_handled(&mut t, sent, &ctx);
        finish(t, &ctx);
    }
}

#[test]
fn target_killed_mid_trace_is_reported() {
    let mut rng = Rng::new("target_killed_mid_trace_is_reported");
    for tool in TOOLS {
        for round in 0..rounds(3) {
            let ctx = format!("SIGKILL {} round {round}", tool.name);
            let mut t = torture_target(&[]);
            cmd(&mut t, "start 3");
            let mut sc = attached(tool, &t);
            // Churn only once attached: churn during attach hits the bug of thread_churn_during_attach.
            cmd(&mut t, "churn 2");
            if tool.events {
                for _ in 0..rng.below(40) {
                    sc.out.next();
                }
            }
            t.child.kill().expect("SIGKILL the target");
            let (status, out, err) = sc.finish();
            assert_no_panic(&err, &ctx);
            assert!(status.success(), "{ctx}: syscatch exits 0: {status:?} {err:#?}");
            if tool.events {
                let values = json_lines(&out);
                let s = summary_data(&values);
                assert_eq!((&s["end"], &s["end_value"]), (&"target_killed".into(), &9.into()), "{ctx}: {s}");
                check_events(&values, &ctx);
                assert!(err.iter().any(|l| l.contains("killed by signal 9")), "{ctx}: said on stderr: {err:#?}");
            }
            assert_eq!(t.wait().signal(), Some(libc::SIGKILL), "{ctx}");
        }
    }
}

#[test]
fn a_second_syscatch_is_refused_and_the_first_still_captures_exactly() {
    for tool in TOOLS {
        let ctx = format!("second {}", tool.name);
        let mut t = torture_target(&[]);
        cmd(&mut t, "start 2");
        let before = stop_workers(&mut t);
        let first = attached(tool, &t);
        // Workers run only while traced: their own counts are the exact truth of the trace.
        cmd(&mut t, "start 3");
        let mut args = tool.args.to_vec();
        let pid = t.pid.to_string();
        args.extend(["--pid", pid.as_str()]);
        let (code, out, err) = run_syscatch(&args);
        assert_eq!(code, 1, "{ctx}: {err}");
        assert!(out.is_empty(), "{ctx}: {out}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{ctx}: one line: {err}");
        assert!(
            lines[0].contains(&format!("already traced by process {}", first.child.id())),
            "{ctx}: names the first tracer: {err}"
        );
        let during = stop_workers(&mut t).minus(&before);
        let truth = truth_mmaps(&cmd(&mut t, "mmap 4"));
        let (values, err) = stop_with(first, libc::SIGINT, &ctx);
        if tool.events {
            let got = captured_mmaps(&values);
            assert!(got.ends_with(&truth), "{ctx}: {truth:?}");
            let s = summary_data(&values);
            let want = during.0[1] + 4;
            assert_eq!(got.len() as u64, want, "{ctx}: every worker mmap captured once: {during:?}");
            assert_eq!(s["matching"], want, "{ctx}");
            let calls: u64 = during.0[1..6].iter().sum::<u64>() + 4;
            assert_eq!(s["hits"], calls, "{ctx}: every syscall() call was a hit, none lost: {during:?}");
            check_events(&values, &ctx);
        }
        assert_unharmed(t.pid, &err, &ctx);
        finish(t, &ctx);
    }
}

/// Two syscatch started at the same moment on one target: one traces it, the other says it cannot, and the target
/// is unharmed whichever wins, whatever the interleaving of their per-thread seizes.
#[test]
fn two_syscatch_racing_to_attach() {
    let mut rng = Rng::new("two_syscatch_racing_to_attach");
    for tool in TOOLS {
        for round in 0..rounds(4) {
            let ctx = format!("race {} round {round}", tool.name);
            let mut t = torture_target(&[]);
            cmd(&mut t, "start 4");
            let mut a = tool.start(t.pid);
            spin(rng.below(50_000));
            let mut b = tool.start(t.pid);
            // Each either attaches or exits with an error; wait for both to settle.
            let settle = |sc: &mut Syscatch| loop {
                let l = sc.err.next_or_end();
                match l {
                    Some(l) if l.contains("attached to") => return true,
                    Some(_) => {}
                    None => return false,
                }
            };
            let (a_on, b_on) = (settle(&mut a), settle(&mut b));
            assert!(a_on || b_on, "{ctx}: one of them traces the target");
            let mut errs = Vec::new();
            for sc in [a, b] {
                sc.signal(libc::SIGINT);
                let (status, _, err) = sc.finish();
                assert_no_panic(&err, &ctx);
                errs.push((status, err));
            }
            for (on, (status, err)) in [a_on, b_on].iter().zip(&errs) {
                if *on {
                    assert!(status.success(), "{ctx}: {status:?} {err:#?}");
                } else {
                    assert_eq!(status.code(), Some(1), "{ctx}: {err:#?}");
                    assert_eq!(err.len(), 1, "{ctx}: one clear line: {err:#?}");
                }
            }
            let all_err: Vec<String> = errs.iter().flat_map(|(_, e)| e.clone()).collect();
            assert_unharmed(t.pid, &all_err, &ctx);
            finish(t, &ctx);
        }
    }
}

#[test]
fn target_exiting_while_syscatch_attaches() {
    let mut rng = Rng::new("target_exiting_while_syscatch_attaches");
    let mut outcomes = Vec::new();
    for tool in TOOLS {
        for round in 0..rounds(8) {
            let ctx = format!("exit-while-attaching {} round {round}", tool.name);
            let mut t = torture_target(&[]);
            // No churn here: threads created during attach hit the bug of thread_churn_during_attach.
            cmd(&mut t, "start 3");
            let sc = tool.start(t.pid);
            spin(rng.below(400_000));
            t.send("quit");
            let st = t.wait();
            assert_eq!(st.code(), Some(23), "{ctx}: the target exits as it meant to: {st:?}");
            let (status, out, err) = sc.finish();
            assert_no_panic(&err, &ctx);
            if status.success() {
                if tool.events && err.iter().any(|l| l.contains("attached to")) {
                    let values = json_lines(&out);
                    let s = summary_data(&values);
                    assert_eq!(s["end"], "target_exited", "{ctx}: {s}");
                    assert_eq!(s["end_value"], 23, "{ctx}: {s}");
                }
                outcomes.push("traced");
            } else {
                assert_eq!(status.code(), Some(1), "{ctx}: {status:?} {err:#?}");
                assert_eq!(err.len(), 1, "{ctx}: one clear line: {err:#?}");
                assert!(err[0].starts_with("syscatch: "), "{ctx}: {err:#?}");
                outcomes.push("refused");
            }
        }
    }
    eprintln!("outcomes: {outcomes:?}");
}

/// Regression (#11): detaching while a posix_spawn child was held hung forever. The spawning thread sleeps in the
/// kernel (vfork) until its child execs, so it can never reach the stop detach waited for, while the child sat in
/// the stop syscatch holds it in: `hold_all` waited in `wait4` for good (6 of 200 interrupted runs). A storm thread
/// spawning and forking all the time keeps a vfork parent asleep most of the time; every detach must end, quickly,
/// with the target unharmed and every child's status right (the target checks them itself).
#[test]
fn detach_during_a_spawn_storm_ends_in_bounded_time() {
    let mut rng = Rng::new("detach_during_a_spawn_storm_ends_in_bounded_time");
    for tool in TOOLS {
        let mut t = torture_target(&[]);
        cmd(&mut t, "start 2");
        cmd(&mut t, "storm");
        let mut detach_ms = Vec::new();
        for round in 0..rounds(12) {
            let ctx = format!("spawn storm {} round {round}", tool.name);
            let mut sc = attached(tool, &t);
            if tool.events {
                for _ in 0..rng.below(40) {
                    sc.out.next();
                }
            }
            spin(rng.below(200_000));
            sc.signal(libc::SIGINT);
            // Seconds, not the test's minute: a hang is what this looks for.
            let (status, out, err) = sc.finish_within(std::time::Duration::from_secs(15), t.pid);
            assert_no_panic(&err, &ctx);
            assert!(status.success(), "{ctx}: {status:?} {err:#?}");
            if tool.events {
                let values = json_lines(&out);
                let s = summary_data(&values);
                assert_eq!(s["end"], "signal", "{ctx}: {s}");
                detach_ms.push(s["detach_ms"].as_f64().unwrap_or(-1.0));
                check_events(&values, &ctx);
            }
            assert_unharmed(t.pid, &err, &ctx);
        }
        let spawned = cmd(&mut t, "spawned").remove(0);
        eprintln!("{}: {spawned}; detach ms {detach_ms:?}", tool.name);
        finish(t, &format!("spawn storm {}", tool.name));
    }
}

/// #11: a panic in the tracer's thread (injected at the first matching hit, that thread stopped just past the
/// int3 and others running through the site) or in the analysis thread ends the trace with a clean detach: exit
/// status 1, one line naming the fault, the target untraced with its text intact, and its workers, which never
/// stopped calling syscall(), pass their own checks afterwards.
#[test]
fn a_panic_in_syscatch_ends_the_trace_with_a_clean_detach() {
    for (fault, whose) in [("tracer-panic", "the tracer"), ("analysis-panic", "the analysis thread")] {
        let ctx = format!("fault {fault}");
        let mut t = torture_target(&[]);
        cmd(&mut t, "start 3");
        let pid = t.pid.to_string();
        let mut sc = Syscatch::start_cmd(syscatch_cmd().env("SYSCATCH_TEST_FAULT", fault).args([
            "--syscall",
            "mmap",
            "--json",
            "--pid",
            &pid,
        ]));
        sc.wait_attached();
        let (status, _, err) = sc.finish_within(std::time::Duration::from_secs(15), t.pid);
        assert_eq!(status.code(), Some(1), "{ctx}: {status:?} {err:#?}");
        let after: Vec<&String> = err.iter().filter(|l| !l.contains("attached to")).collect();
        assert_eq!(after.len(), 1, "{ctx}: one line: {err:#?}");
        assert!(
            after[0].starts_with(&format!("syscatch: internal error in {whose}: injected fault: {fault}"))
                && after[0].contains("detached"),
            "{ctx}: {err:#?}"
        );
        assert_unharmed(t.pid, &err, &ctx);
        let truth = truth_mmaps(&cmd(&mut t, "mmap 3"));
        assert_eq!(truth.len(), 3, "{ctx}");
        finish(t, &ctx);
    }
}

/// #11: the reader of syscatch's output goes away (`syscatch ... | head -1`): the write error ends the trace
/// with a clean detach, exit status 1 and one line, instead of tracing on with nowhere to write.
#[test]
fn output_closed_early_ends_the_trace_with_a_clean_detach() {
    use std::io::Read;
    let ctx = "stdout closed";
    let mut t = torture_target(&[]);
    cmd(&mut t, "start 3");
    let pid = t.pid.to_string();
    let mut child = syscatch_cmd()
        .args(["--syscall", "mmap", "--json", "--pid", &pid])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("syscatch starts");
    let mut err = Lines::new(child.stderr.take().expect("stderr"), "syscatch stderr");
    err.until(|l| l.contains("attached to"));
    let mut out = child.stdout.take().expect("stdout");
    let mut first = [0u8; 64];
    out.read_exact(&mut first).expect("some events");
    drop(out);
    let sc = Syscatch { child, out: Lines::new(std::io::empty(), "none"), err };
    let (status, _, err) = sc.finish_within(std::time::Duration::from_secs(15), t.pid);
    assert_eq!(status.code(), Some(1), "{ctx}: {status:?} {err:#?}");
    let after: Vec<&String> = err.iter().filter(|l| !l.contains("attached to")).collect();
    assert_eq!(after.len(), 1, "{ctx}: one line: {err:#?}");
    assert!(after[0].starts_with("syscatch: cannot write the events (Broken pipe"), "{ctx}: {err:#?}");
    assert_unharmed(t.pid, &err, ctx);
    finish(t, ctx);
}

/// How syscatch is stopped in a storm round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// SIGINT or SIGTERM, sometimes a second one during detach: must be harmless, always.
    Interrupt,
    /// SIGKILL: syscatch cannot clean up itself; reported apart (the guardian of #11 item 3 is what saves these).
    Sigkill,
}

/// What became of the target in one storm round.
#[derive(Debug, Default)]
struct RoundOutcome {
    hang: bool,
    target_died: Option<String>,
    lost_signals: u64,
    /// Any other broken promise (still traced, bytes left, threads left stopped, a panic, a wrong exit).
    harm: Option<String>,
    signals: u64,
    events: usize,
}

impl RoundOutcome {
    fn clean(&self) -> bool {
        !self.hang && self.target_died.is_none() && self.lost_signals == 0 && self.harm.is_none()
    }
}

/// Sends SIGRTMIN to `pid` about every 5 ms (~200/s) until told to stop; returns how many were queued.
fn signal_storm(pid: i32, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut sent = 0;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            if sigqueue(pid, libc::SIGRTMIN()) {
                sent += 1;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        sent
    })
}

/// The target's handled count, polled until it reaches `sent` (bounded); the shortfall.
fn signals_lost(t: &mut Target, sent: u64) -> u64 {
    let mut got = 0;
    for _ in 0..2000 {
        got = cmd(t, "signals")[0].strip_prefix("signals ").and_then(|n| n.parse().ok()).expect("signals N");
        if got >= sent {
            return 0;
        }
        std::thread::yield_now();
    }
    sent - got
}

/// One round of the storm of #11: three threads calling syscall() in a loop, thread churn, a fork + posix_spawn
/// storm, ~200 queued real-time signals per second; syscatch is stopped at a random moment (while starting,
/// seizing, just attached, mid-trace among steps and forks, a second signal during detach). Panics of the checks
/// are caught and classified, so a long run counts instead of stopping at the first failure.
fn storm_round(rng: &mut Rng, kill: Kill, ctx: &str) -> RoundOutcome {
    let mut o = RoundOutcome::default();
    let mut t = torture_target(&[]);
    cmd(&mut t, "start 3");
    cmd(&mut t, "churn 4");
    cmd(&mut t, "storm");
    let pid = t.pid;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = signal_storm(pid, stop.clone());
    let moment = [Moment::AtStart, Moment::WhileSeizing, Moment::Attached, Moment::MidTrace][rng.below(4) as usize];
    let sigs = [libc::SIGINT, libc::SIGTERM];
    let first = if kill == Kill::Sigkill { libc::SIGKILL } else { sigs[rng.below(2) as usize] };
    let second = (kill == Kill::Interrupt && rng.below(3) == 0).then(|| sigs[rng.below(2) as usize]);
    let wait_events = rng.below(80);
    let pause = rng.below(200_000);
    let ctx = format!("{ctx} {moment:?} {first}/{second:?}");
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sc = TOOLS[0].start(pid);
        match moment {
            Moment::AtStart => spin(pause),
            Moment::WhileSeizing => {
                let me = sc.child.id() as i32;
                poll(|| tracer_pid(pid) == Some(me) || sc.err.try_next().is_some());
            }
            Moment::Attached => sc.wait_attached(),
            Moment::MidTrace => {
                sc.wait_attached();
                for _ in 0..wait_events {
                    sc.out.next();
                }
                spin(pause);
            }
        }
        sc.signal(first);
        if let Some(s) = second {
            spin(pause / 10);
            sc.signal(s);
        }
        sc.finish_within(std::time::Duration::from_secs(15), pid)
    }));
    match run {
        Err(e) => {
            let msg = panic_text(&e);
            if msg.contains("syscatch hung") {
                o.hang = true;
            } else {
                o.harm = Some(msg);
            }
        }
        Ok((status, out, err)) => {
            let checks = std::panic::catch_unwind(|| {
                assert_no_panic(&err, &ctx);
                if kill == Kill::Interrupt {
                    let by_signal = status.signal().is_some_and(|s| s == first || Some(s) == second);
                    let attached = err.iter().any(|l| l.contains("attached to"));
                    assert!(status.success() || (by_signal && !attached), "{ctx}: syscatch ended {status:?}: {err:#?}");
                }
                if t_alive(pid) {
                    assert_unharmed(pid, &err, &ctx);
                }
                // A SIGKILLed syscatch may have cut its last line short.
                if kill == Kill::Interrupt { check_events(&json_lines(&out), &ctx) } else { 0 }
            });
            match checks {
                Ok(n) => o.events = n,
                Err(e) => o.harm = Some(panic_text(&e)),
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    o.signals = sender.join().unwrap_or(0);
    if !t_alive(pid) {
        let st = t.wait();
        o.target_died = Some(format!("{ctx}: target ended {st:?}"));
        return o;
    }
    let rest = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let lost = signals_lost(&mut t, o.signals);
        finish(t, &ctx);
        lost
    }));
    match rest {
        Ok(lost) => o.lost_signals = lost,
        Err(e) => o.target_died = Some(panic_text(&e)),
    }
    o
}

fn t_alive(pid: i32) -> bool {
    thread_states_of(pid).iter().any(|&c| c != 'Z' && c != 'X')
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// Runs `rounds` storm rounds; prints one summary line (read by scripts/torture.sh) and the failures.
fn storm_rounds(name: &'static str, rounds: u64, kill: Kill) -> Vec<RoundOutcome> {
    // A command started in the background by a non-interactive shell (scripts/torture.sh under `&` or nohup)
    // inherits SIGINT ignored, and so would syscatch: a SIGINT before it installs its handler would be lost and
    // the round counted as a hang. Default disposition, as in a terminal.
    // SAFETY: resetting a signal disposition to SIG_DFL; no handler runs.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    let mut rng = Rng::new(name);
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for round in 0..rounds {
        let o = storm_round(&mut rng, kill, &format!("round {round}"));
        if !o.clean() {
            eprintln!("round {round}: {o:?}");
        }
        outcomes.push(o);
    }
    let count = |f: &dyn Fn(&RoundOutcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    eprintln!(
        "TORTURE mode={kill:?} seed={} rounds={} clean={} target_deaths={} hangs={} lost_signal_rounds={} \
         signals_lost={} signals_sent={} other_harm={} events={} secs={:.0}",
        rng.seed,
        outcomes.len(),
        count(&|o| o.clean()),
        count(&|o| o.target_died.is_some()),
        count(&|o| o.hang),
        count(&|o| o.lost_signals > 0),
        outcomes.iter().map(|o| o.lost_signals).sum::<u64>(),
        outcomes.iter().map(|o| o.signals).sum::<u64>(),
        count(&|o| o.harm.is_some()),
        outcomes.iter().map(|o| o.events).sum::<usize>(),
        started.elapsed().as_secs_f64()
    );
    outcomes
}

/// The fast version of scripts/torture.sh in CI: a few storm rounds, each interrupted at a random moment.
#[test]
fn storm_rounds_interrupted_at_random_moments() {
    let outcomes = storm_rounds("storm_rounds_interrupted_at_random_moments", rounds(3), Kill::Interrupt);
    assert!(outcomes.iter().all(|o| o.clean()), "{outcomes:#?}");
}

/// scripts/torture.sh: `TORTURE_ROUNDS` rounds (seed `TORTURE_SEED`), `TORTURE_KILL=sigkill` for SIGKILL rounds.
/// Interrupt rounds must all be clean; SIGKILL rounds are only counted (until the guardian of #11 lands).
#[test]
#[ignore]
fn torture_script() {
    let kill = match std::env::var("TORTURE_KILL").as_deref() {
        Ok("sigkill") => Kill::Sigkill,
        _ => Kill::Interrupt,
    };
    let outcomes = storm_rounds("torture_script", rounds(200), kill);
    if kill == Kill::Interrupt {
        assert!(outcomes.iter().all(|o| o.clean()), "some interrupt rounds harmed the target (listed above)");
    }
}

/// #11: a leader that called pthread_exit stays a zombie while its threads run, and never stops again: detach
/// waited for it forever. Now it is left out (the kernel reports nothing for it), the others are detached, and
/// the process runs on unharmed.
#[test]
fn detach_with_a_zombie_leader_ends() {
    for tool in TOOLS {
        let ctx = format!("zombie leader {}", tool.name);
        let mut t = torture_target(&[]);
        cmd(&mut t, "start 3");
        let mut sc = attached(tool, &t);
        cmd(&mut t, "leader-exit");
        let leader_state = || {
            let s = std::fs::read_to_string(format!("/proc/{0}/task/{0}/status", t.pid)).unwrap_or_default();
            s.lines().find_map(|l| l.strip_prefix("State:")).and_then(|v| v.trim().chars().next())
        };
        assert!(poll(|| leader_state() == Some('Z')), "{ctx}: the leader is a zombie: {:?}", leader_state());
        // A zombie leader has no memory map of its own: look at the process through a live thread.
        let live = procfs_tasks(t.pid).into_iter().find(|&tid| tid != t.pid).expect("a live thread");
        if tool.events {
            for _ in 0..20 {
                sc.out.next();
            }
        }
        sc.signal(libc::SIGINT);
        let (status, out, err) = sc.finish_within(std::time::Duration::from_secs(15), t.pid);
        assert_no_panic(&err, &ctx);
        assert!(status.success(), "{ctx}: {status:?} {err:#?}");
        if tool.events {
            let values = json_lines(&out);
            assert_eq!(summary_data(&values)["end"], "signal", "{ctx}");
            check_events(&values, &ctx);
        }
        assert_eq!(tracer_pid(t.pid), Some(0), "{ctx}: still traced after syscatch exited");
        assert!(assert_text_pristine(live, &ctx) > 0, "{ctx}: text compared");
        assert!(
            poll(|| !thread_states_of(t.pid).contains(&'t')),
            "{ctx}: threads left stopped: {:?}",
            thread_states_of(t.pid)
        );
        finish(t, &ctx);
    }
}

fn procfs_tasks(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}
