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

mod children;
mod races;
mod signals;
mod storm;

/// A syscatch command that attaches to a live process: `args` come before `--pid N`. `events`: it prints the
/// trace's JSON Lines (events with `ret`, a `summary` with `end`), so exactness is checked too; otherwise only
/// the harm checks apply. It must print a stderr line containing "attached to" once attached. `every_call_stops`:
/// every call of the site stops (a breakpoint), so the summary's hits count them all; with `--fast` (the default)
/// only matching calls do.
struct Tool {
    name: &'static str,
    args: &'static [&'static str],
    events: bool,
    every_call_stops: bool,
}

const TOOLS: &[Tool] = &[
    Tool {
        name: "trace",
        args: &["--syscall", "mmap", "--only-syscall-wrapper", "--json", "--no-fast"],
        events: true,
        every_call_stops: true,
    },
    Tool {
        name: "fast",
        args: &["--syscall", "mmap", "--only-syscall-wrapper", "--json"],
        events: true,
        every_call_stops: false,
    },
    // One line each once they land, e.g.:
    // Tool { name: "stack", args: &["stack", "--json"], events: false },
    // Tool { name: "mem", args: &["mem", "--json"], events: false },
    // Tool { name: "hooks", args: &["hooks", "--json"], events: false },
    // Tool { name: "probe", args: &["run", "testprogs/probe.sc", "--json"], events: false },
];

/// The leak report with sampled allocations: libc's mapping functions and its allocation functions patched, munmap
/// and the frees of sampled blocks to the ring, sampled allocations stopping or known (storm rounds only, where the
/// target's workers allocate: "heap").
const MALLOC: Tool = Tool {
    name: "malloc",
    args: &["--malloc", "--malloc-every", "64KiB", "--json"],
    events: false,
    every_call_stops: false,
};

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
    assert_unharmed_but_gate(pid, err, ctx, false);
}

/// [`assert_unharmed`]; `killed`: syscatch was SIGKILLed, and the call gate may stay (see
/// `assert_text_pristine_but_gate`). Returns whether it did.
fn assert_unharmed_but_gate(pid: i32, err: &[String], ctx: &str, killed: bool) -> bool {
    assert_eq!(tracer_pid(pid), Some(0), "{ctx}: still traced after syscatch exited");
    if let Some(site) = attached_site(err) {
        assert_eq!(
            read_mem(pid, site, 16),
            file_bytes_at(pid, site, 16),
            "{ctx}: syscall() at {site:#x} holds the file's bytes"
        );
    }
    let gate = killed && assert_text_pristine_but_gate(pid, ctx);
    if !killed {
        assert_text_pristine(pid, ctx);
    }
    // A thread left in a tracing stop ('t') would never run again.
    assert!(poll(|| !thread_states_of(pid).contains(&'t')), "{ctx}: threads left stopped: {:?}", thread_states_of(pid));
    gate
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
    // A SIGINT inherited ignored (a background job of a script) is lost when it comes before syscatch's handlers.
    let int = if moment == Moment::AtStart && signal_ignored(libc::SIGINT) { libc::SIGTERM } else { libc::SIGINT };
    let sigs = [int, libc::SIGTERM];
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

fn t_alive(pid: i32) -> bool {
    thread_states_of(pid).iter().any(|&c| c != 'Z' && c != 'X')
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

fn procfs_tasks(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}
