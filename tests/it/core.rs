//! The core trace: exact capture of syscall(SYS_mmap) return values on real multi-threaded targets, clean
//! detach, no harm done.

use crate::common::*;
use std::collections::HashMap;

/// The breakpoint address syscatch reports in its "attached" line.
fn site_of(err: &[String]) -> u64 {
    attached_site(err).expect("attached line")
}

/// The first bytes of libc's syscall() in the file, found through gdb-free means: the same bytes must be in
/// memory after detach. We compare against a second, untraced process's memory at the same libc offset.
fn libc_bytes_untraced(addr: u64, pid: i32, len: usize) -> Vec<u8> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let base = maps
        .lines()
        .find(|l| l.contains("libc.so") && l.split_whitespace().nth(2) == Some("00000000"))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .unwrap();
    let off = addr - base;
    let me = std::fs::read_to_string("/proc/self/maps").unwrap();
    let my_base = me
        .lines()
        .find(|l| l.contains("libc.so") && l.split_whitespace().nth(2) == Some("00000000"))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .unwrap();
    read_mem(std::process::id() as i32, my_base + off, len)
}

#[test]
fn captures_every_mmap_of_every_thread_exactly() {
    require_ptrace();
    let prog = testprog("mmap_threads");
    let mut t = Target::start(&prog, &["8", "5"]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json", "--only-syscall-wrapper"]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    let truth = truth_mmaps(&lines);
    assert_eq!(truth.len(), 40);
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    let values = json_lines(&out);
    let mut got = captured_mmaps(&values);
    let mut want = truth.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every matching call captured exactly once with its address and length");
    // Nothing else was reported: getpid and futex went through syscall() too, glibc mmap() did not.
    assert!(values.iter().filter(|v| v["type"] == "event").all(|v| v["data"]["syscall"] == "mmap"));
    let summary = values.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["data"]["end"], "signal");
    assert_eq!(summary["data"]["matching"], 40);
    assert_eq!(summary["data"]["hits"], 40 * 3);
    // Every non-matching hit (getpid, futex) resumed without a slow step: glibc's entry is resumed past the int3.
    assert_eq!(summary["data"]["emulated"], 40 * 2);
    assert_eq!(summary["data"]["slow_path"], 0);
    // The delay the target saw, beside the tracer's: the main thread was there at both ends; the 8 workers came
    // and went during the trace (counted only if still listed at detach).
    let d = &summary["data"];
    assert!(d["target_run_delay_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{d}");
    assert!(d["tracer_run_delay_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{d}");
    let counted = d["target_run_delay_threads"].as_u64().unwrap();
    assert!(counted >= 1, "{d}");
    assert_eq!(counted + d["target_run_delay_uncounted"].as_u64().unwrap(), d["threads_seen"].as_u64().unwrap());
    // After detach: no tracer, the probed bytes are libc's own, and the target finishes normally.
    let site = site_of(&err);
    let status_text = std::fs::read_to_string(format!("/proc/{}/status", t.pid)).unwrap();
    assert!(status_text.contains("TracerPid:\t0"), "still traced after detach");
    assert_eq!(read_mem(t.pid, site, 16), libc_bytes_untraced(site, t.pid, 16));
    t.send("exit");
    assert_eq!(t.wait().code(), Some(7));
}

/// A target of testprogs/target.c under `syscatch --json`, attached and armed.
struct Session {
    t: Target,
    sc: Syscatch,
}

impl Session {
    fn start(extra: &[&str]) -> Session {
        require_ptrace();
        let t = Target::start(&testprog("target"), &[]);
        let pid = t.pid.to_string();
        // The wrapper's own mechanics (libc's mmap() entry, which thread creation also calls, is tests/it/paths.rs').
        let mut args = vec!["--pid", pid.as_str(), "--json", "--only-syscall-wrapper"];
        args.extend_from_slice(extra);
        let mut sc = Syscatch::start(&args);
        sc.wait_attached();
        Session { t, sc }
    }

    /// Sends a command and returns the target's answer lines (without the final "ok").
    fn cmd(&mut self, c: &str) -> Vec<String> {
        cmd(&mut self.t, c)
    }

    /// Stops syscatch with `sig`; returns its JSON lines and stderr.
    fn stop(self, sig: i32) -> (Target, Vec<serde_json::Value>, Vec<String>, i32) {
        self.sc.signal(sig);
        let (status, out, err) = self.sc.finish();
        (self.t, json_lines(&out), err, status.code().unwrap_or(-1))
    }
}

fn cmd(t: &mut Target, c: &str) -> Vec<String> {
    t.send(c);
    let mut lines = t.out.until(|l| l == "ok");
    lines.pop();
    lines
}

fn summary(values: &[serde_json::Value]) -> &serde_json::Value {
    let last = values.last().expect("some output");
    assert_eq!(last["type"], "summary");
    &last["data"]
}

fn tracer_of(pid: i32) -> i32 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix("TracerPid:")).unwrap().trim().parse().unwrap()
}

#[test]
fn fork_children_never_inherit_the_breakpoint() {
    let mut s = Session::start(&[]);
    let before = truth_mmaps(&s.cmd("mmap 2"));
    let kids = s.cmd("fork 8");
    let want: Vec<String> = (0..8).map(|i| format!("child {i} status {}", 40 + i)).collect();
    assert_eq!(kids, want, "every fork child ran its syscall() calls and exited normally");
    let after = truth_mmaps(&s.cmd("mmap 2"));
    let (mut t, values, err, code) = s.stop(libc::SIGINT);
    assert_eq!(code, 0, "{err:#?}");
    let got = captured_mmaps(&values);
    assert_eq!(got, [before, after].concat(), "the parent's calls, and only those");
    assert_eq!(summary(&values)["forks_cleaned"], 8);
    assert_eq!(cmd(&mut t, "mmap 1").len(), 1);
    t.send("exit 0");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn vfork_and_posix_spawn_children_run_and_the_parent_keeps_its_breakpoint() {
    let mut s = Session::start(&[]);
    assert_eq!(s.cmd("vfork"), ["vfork status 0"]);
    assert_eq!(s.cmd("spawn 5"), (0..5).map(|i| format!("spawn {i} status 0")).collect::<Vec<_>>());
    let truth = truth_mmaps(&s.cmd("mmap 3"));
    let (t, values, _, code) = s.stop(libc::SIGTERM);
    assert_eq!(code, 0);
    assert_eq!(captured_mmaps(&values), truth);
    assert_eq!(tracer_of(t.pid), 0);
}

#[test]
fn signals_are_delivered_exactly_once() {
    let mut s = Session::start(&[]);
    s.cmd("spin 3");
    let pid = s.t.pid;
    for _ in 0..400 {
        // Plain kill(2) of our own child.
        unsafe { libc::kill(pid, libc::SIGRTMIN()) };
        unsafe { libc::kill(pid, libc::SIGUSR1) };
    }
    let spun = s.cmd("stop");
    assert!(spun[0].starts_with("spun "), "{spun:?}");
    let counts = s.cmd("signals");
    assert!(counts[0].starts_with("signals 400 "), "every queued real-time signal handled once: {counts:?}");
    let usr1: u64 = counts[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(usr1 >= 1, "standard signals coalesce, but at least one SIGUSR1 was handled");
    for i in usr1 + 1..=usr1 + 20 {
        unsafe { libc::kill(pid, libc::SIGUSR1) };
        // The handler has run once the target answers: a handshake per signal.
        let want = format!("signals 400 {i}");
        let mut got = s.cmd("signals");
        for _ in 0..1000 {
            if got[0] == want {
                break;
            }
            got = s.cmd("signals");
        }
        assert_eq!(got, [want]);
    }
    let (t, values, _, code) = s.stop(libc::SIGINT);
    assert_eq!(code, 0);
    assert!(summary(&values)["signals_forwarded"].as_u64().unwrap() >= 420);
    assert_eq!(tracer_of(t.pid), 0);
    // Every mmap the spinners made during the storm was captured once, with its result: a signal that lands
    // while a matching call is being stepped must neither lose nor duplicate it.
    let spun_mmaps: usize = spun[0].split_whitespace().nth(2).unwrap().parse().unwrap();
    let events: Vec<&serde_json::Value> = values.iter().filter(|v| v["type"] == "event").collect();
    assert_eq!(events.len(), spun_mmaps, "one event per mmap call");
    assert!(events.iter().all(|v| v["data"]["ret"].is_string()), "every event has its return value");
}

fn thread_states(pid: i32) -> Vec<char> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    dir.filter_map(|e| {
        let s = std::fs::read_to_string(e.ok()?.path().join("status")).ok()?;
        s.lines().find_map(|l| l.strip_prefix("State:")).and_then(|v| v.trim().chars().next())
    })
    .collect()
}

/// Polls /proc (bounded) until every thread of `pid` is in one of `states`.
fn wait_states(pid: i32, states: &[char]) -> bool {
    for _ in 0..20_000 {
        let st = thread_states(pid);
        if !st.is_empty() && st.iter().all(|c| states.contains(c)) {
            return true;
        }
        std::thread::yield_now();
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    false
}

#[test]
fn job_control_still_works_while_traced() {
    let mut s = Session::start(&[]);
    s.cmd("spin 2");
    let pid = s.t.pid;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert!(wait_states(pid, &['T', 't']), "SIGSTOP stopped every thread: {:?}", thread_states(pid));
    // Ask for work while stopped: it must not happen until SIGCONT.
    s.t.send("mmap 2");
    assert!(wait_states(pid, &['T', 't']), "still stopped");
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let mut lines = s.t.out.until(|l| l == "ok");
    lines.pop();
    let truth = truth_mmaps(&lines);
    assert_eq!(truth.len(), 2);
    s.cmd("stop");
    // Stopped again, then detached while stopped: it stays stopped until SIGCONT.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert!(wait_states(pid, &['T', 't']));
    let (mut t, values, _, code) = s.stop(libc::SIGINT);
    assert_eq!(code, 0);
    let got = captured_mmaps(&values);
    assert!(truth.iter().all(|m| got.contains(m)), "{truth:?} captured in {got:?}");
    assert!(wait_states(pid, &['T']), "a stopped target stays stopped after detach: {:?}", thread_states(pid));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(cmd(&mut t, "mmap 1").len(), 1);
    assert_eq!(tracer_of(pid), 0);
}

#[test]
fn sibling_processes_are_never_touched() {
    require_ptrace();
    let prog = testprog("target");
    let mut workers: Vec<Target> = (0..3).map(|_| Target::start(&prog, &[])).collect();
    for w in &mut workers {
        cmd(w, "spin 1");
    }
    let traced = workers[1].pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &traced, "--json"]);
    sc.wait_attached();
    for (i, w) in workers.iter().enumerate() {
        let expect_traced = i == 1;
        assert_eq!(tracer_of(w.pid) != 0, expect_traced, "worker {i}");
    }
    // The siblings keep making progress during the trace.
    let progress: Vec<String> = [0, 2].iter().map(|&i| cmd(&mut workers[i], "signals")[0].clone()).collect();
    assert_eq!(progress.len(), 2);
    sc.signal(libc::SIGINT);
    let (status, _, _) = sc.finish();
    assert!(status.success());
    for w in &mut workers {
        let spun = cmd(w, "stop");
        let calls: u64 = spun[0].split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(calls > 0, "{spun:?}");
        assert_eq!(tracer_of(w.pid), 0);
    }
}

#[test]
fn interrupted_at_random_moments_the_target_stays_healthy() {
    interrupt_rounds(&[], 6);
}

#[test]
fn fast_mode_interrupted_at_random_moments_the_target_stays_healthy() {
    interrupt_rounds(&["--fast"], 6);
}

/// Attach, let a random number of matching calls go by while 4 threads hammer syscall(), interrupt, check.
fn interrupt_rounds(extra: &[&str], rounds: usize) {
    require_ptrace();
    let mut t = Target::start(&testprog("target"), &[]);
    let pid = t.pid.to_string();
    let seed = std::process::id() as u64;
    let mut rng = seed;
    for round in 0..rounds {
        cmd(&mut t, "spin 4");
        // The wrapper's own mechanics (libc's mmap() entry, which thread creation also calls, is tests/it/paths.rs').
        let mut args = vec!["--pid", pid.as_str(), "--json", "--only-syscall-wrapper"];
        args.extend_from_slice(extra);
        let mut sc = Syscatch::start(&args);
        sc.wait_attached();
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let wait_events = (rng >> 33) % 50;
        for _ in 0..wait_events {
            sc.out.next();
        }
        let sig = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP][round % 3];
        sc.signal(sig);
        let (status, _, err) = sc.finish();
        assert!(status.success(), "seed {seed} round {round}: {err:#?}");
        let site = site_of(&err);
        assert_eq!(tracer_of(t.pid), 0, "seed {seed} round {round}");
        assert_eq!(read_mem(t.pid, site, 32), libc_bytes_untraced(site, t.pid, 32), "seed {seed} round {round}");
        let spun = cmd(&mut t, "stop");
        assert!(spun[0].starts_with("spun "), "seed {seed} round {round}: {spun:?}");
    }
    t.send("exit 4");
    assert_eq!(t.wait().code(), Some(4));
}

#[test]
fn fast_mode_captures_exactly_without_stopping_other_calls() {
    require_ptrace();
    let prog = testprog("mmap_threads");
    let mut t = Target::start(&prog, &["8", "5"]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json", "--fast", "--only-syscall-wrapper"]);
    sc.wait_attached();
    t.send("go");
    let truth = truth_mmaps(&t.out.until(|l| l == "done"));
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert!(!err.iter().any(|l| l.contains("not possible")), "--fast was installed: {err:#?}");
    let values = json_lines(&out);
    let mut got = captured_mmaps(&values);
    let mut want = truth.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let sum = summary(&values);
    assert_eq!(sum["matching"], 40);
    assert_eq!(sum["hits"], 40, "getpid and futex through syscall() never stopped");
    let site = site_of(&err);
    assert_eq!(read_mem(t.pid, site, 32), libc_bytes_untraced(site, t.pid, 32), "the wrapper is restored");
    assert_eq!(tracer_of(t.pid), 0);
    t.send("exit");
    assert_eq!(t.wait().code(), Some(7));
}

/// `--fast` reads a thread's registers from the trampoline's record at the stack pointer of its last event. Calls
/// from two sites at different depths, from a signal handler that interrupts them, and SIGTRAPs sent to the same
/// thread: every call is reported once with its own result, arguments and stack, and every signal arrives.
#[test]
fn fast_mode_reads_each_call_right_among_sites_handlers_and_sigtraps() {
    fast_signals_round(&[]);
}

/// As above, in a target that leaves SIGTRAP alone: each stop's siginfo is not read there.
#[test]
fn fast_mode_reads_each_call_right_among_sites_and_handlers() {
    fast_signals_round(&["notrap"]);
}

/// `prog args` traced by `syscatch --pid P --json --fast` and `sc_args`: sends `go`, and returns the target (still
/// running, past its "done" line), its lines up to "done", and syscatch's JSON values once it ended on SIGINT,
/// having installed `--fast` and detached.
fn fast_run(prog: &str, args: &[&str], sc_args: &[&str], go: &str) -> (Target, Vec<String>, Vec<serde_json::Value>) {
    require_ptrace();
    let mut t = Target::start(&testprog(prog), args);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&[&["--pid", pid.as_str(), "--json", "--fast"], sc_args].concat());
    sc.wait_attached();
    t.send(go);
    let lines = t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert!(!err.iter().any(|l| l.contains("not possible")), "--fast was installed: {err:#?}");
    assert_eq!(tracer_of(t.pid), 0);
    (t, lines, json_lines(&out))
}

/// Ends a target of [`fast_run`]: it exits 0 on its next line.
fn fast_run_end(mut t: Target) {
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

fn fast_signals_round(args: &[&str]) {
    let (t, lines, values) = fast_run("fast_signals", args, &["--syscall", "mmap", "--only-syscall-wrapper"], "go 400");
    let truth = truth_mmaps(&lines);
    let signals: Vec<u64> = lines
        .iter()
        .find_map(|l| l.strip_prefix("signals "))
        .expect("signals line")
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(signals[0], signals[1], "every SIGUSR1 handled: {signals:?}");
    // A SIGTRAP sent in the microsecond between a thread's int3 and its stop finds the int3's SIGTRAP pending
    // and is merged with it by the kernel (as for any debugger's breakpoint): measured, 1 in 30-100 of these sends.
    // Before the record's sequence numbers, one sent while the thread was stopped at the int3 was taken for a
    // second hit of it (30-50 % of them lost, and the call reported twice).
    assert!(signals[3] <= signals[2] && (signals[2] - signals[3]) * 10 <= signals[2], "SIGTRAPs: {signals:?}");
    assert!(signals[0] > 0 && (signals[2] > 0) == args.is_empty(), "{signals:?}");
    let mut got = captured_mmaps(&values);
    let mut want = truth.clone();
    got.sort();
    want.sort();
    if got != want {
        let extra: Vec<_> =
            got.iter().filter(|c| got.iter().filter(|d| d == c).count() > 1 || !want.contains(c)).collect();
        let missing: Vec<_> = want.iter().filter(|c| !got.contains(c)).collect();
        panic!("each call once, with its result and length: extra {extra:x?}, missing {missing:x?}");
    }
    // The stack of each event is its caller's: the length it asked for names the function. (Under pressure the
    // tracer drops stack windows, never the calls: those are left out here.)
    let events: Vec<&serde_json::Value> = values.iter().filter(|v| v["type"] == "event").collect();
    let with_stacks: Vec<&&serde_json::Value> =
        events.iter().filter(|v| !v["data"]["stack"].as_array().unwrap().is_empty()).collect();
    assert!(with_stacks.len() * 2 > events.len(), "{} of {} with stacks", with_stacks.len(), events.len());
    for v in &events {
        assert_eq!(v["data"]["tid"].as_i64(), Some(t.pid as i64), "every call is the main thread's");
    }
    for v in with_stacks {
        let len = u64::from_str_radix(v["data"]["args"][1].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        let caller = match len {
            4096 => "site_a",
            8192 => "site_b_inner",
            _ => "handler_inner",
        };
        let funcs: Vec<&str> =
            v["data"]["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
        // Past the wrapper and `map`, inlined into each caller.
        assert_eq!(funcs.iter().find(|&&f| f != "syscall" && f != "map"), Some(&caller), "{funcs:?}");
        let outer = if len == 3 * 4096 { "on_usr1" } else { "main" };
        assert!(funcs.contains(&outer), "{funcs:?}");
    }
    let sum = summary(&values);
    assert_eq!(sum["matching"].as_u64(), Some(truth.len() as u64));
    let from_record = sum["from_record"].as_u64().unwrap();
    // Of every four calls, the two site_a calls after a site_a call are read at the guessed stack pointer (fewer
    // where a signal's stop came between: 33-50 % measured).
    assert!(from_record * 5 > truth.len() as u64, "events from the record: {from_record} of {}", truth.len());
    fast_run_end(t);
}

/// A coroutine's stack moves between two threads: at one thread's next stop, the record at its last event's
/// stack pointer is the other thread's. Each call is reported once, under the thread that made it.
#[test]
fn fast_mode_tells_a_moving_coroutines_calls_apart() {
    let (t, lines, values) = fast_run("fast_coro", &[], &["--syscall", "getppid", "--stack-bytes", "0"], "go");
    let mut want: Vec<(i64, u64)> = lines
        .iter()
        .filter_map(|l| {
            let mut it = l.strip_prefix("call ")?.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    let mut got: Vec<(i64, u64)> = values
        .iter()
        .filter(|v| v["type"] == "event")
        .map(|v| {
            let d = &v["data"];
            (
                d["tid"].as_i64().unwrap(),
                u64::from_str_radix(d["args"][0].as_str().unwrap().trim_start_matches("0x"), 16).unwrap(),
            )
        })
        .collect();
    assert_eq!(want.len(), 600);
    want.sort();
    got.sort();
    assert_eq!(got, want, "each call once, under its own thread");
    fast_run_end(t);
}

/// Under PR_SET_MDWE (kernel 6.3+: the target prints "no mdwe" instead of its pid before that), a mapping cannot
/// gain exec: the trampoline's pages are mapped executable and the counter's page made writable, not the reverse.
#[test]
fn fast_mode_engages_in_a_target_that_denies_write_then_execute() {
    let (t, lines, values) = fast_run("mdwe", &[], &["--syscall", "mmap"], "go");
    let truth = truth_mmaps(&lines);
    assert_eq!(captured_mmaps(&values), truth);
    assert_eq!(truth.len(), 3);
    fast_run_end(t);
}

/// A process whose address space is crowded around libc (as one with hundreds of modules): the only free page
/// within jump range is in a 64 KiB hole far below libc. `--fast` finds it from the maps' gaps and engages.
#[test]
fn fast_mode_finds_the_one_free_gap_in_a_crowded_address_space() {
    require_ptrace();
    let mut t = Target::start(&testprog("crowded"), &["6"]);
    let hole_line = t.out.next();
    let mut it = hole_line.strip_prefix("hole ").expect("hole line").split_whitespace();
    let hole = u64::from_str_radix(it.next().unwrap().trim_start_matches("0x"), 16).unwrap();
    let hole_len: u64 = it.next().unwrap().parse().unwrap();
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json", "--fast", "--only-syscall-wrapper"]);
    sc.wait_attached();
    t.send("go");
    let truth = truth_mmaps(&t.out.until(|l| l == "done"));
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert!(!err.iter().any(|l| l.contains("not possible")), "--fast was installed: {err:#?}");
    let values = json_lines(&out);
    assert_eq!(captured_mmaps(&values), truth);
    let sum = summary(&values);
    assert_eq!(sum["matching"], 6);
    assert_eq!(sum["hits"], 6, "getpid through syscall() never stopped");
    let left = sum["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|w| w.as_str()?.split("trampoline page mapped at 0x").nth(1)?.split(' ').next())
        .expect("the page is named in the summary");
    let page = u64::from_str_radix(left, 16).unwrap();
    assert!(page > hole && page + 8192 < hole + hole_len, "pages {page:#x} in the hole {hole:#x}+{hole_len:#x}");
    let site = site_of(&err);
    assert_eq!(read_mem(t.pid, site, 32), libc_bytes_untraced(site, t.pid, 32), "the wrapper is restored");
    assert_eq!(tracer_of(t.pid), 0);
    t.send("exit");
    assert_eq!(t.wait().code(), Some(7));
}

#[test]
fn fast_mode_fork_vfork_and_spawn_children_run_normally() {
    let mut s = Session::start(&["--fast", "--syscall", "mmap,getpid"]);
    let before = truth_mmaps(&s.cmd("mmap 2"));
    assert_eq!(s.cmd("fork 4"), (0..4).map(|i| format!("child {i} status {}", 40 + i)).collect::<Vec<_>>());
    assert_eq!(s.cmd("vfork"), ["vfork status 0"]);
    assert_eq!(s.cmd("spawn 3"), (0..3).map(|i| format!("spawn {i} status 0")).collect::<Vec<_>>());
    let after = truth_mmaps(&s.cmd("mmap 2"));
    let (t, values, _, code) = s.stop(libc::SIGINT);
    assert_eq!(code, 0);
    assert_eq!(captured_mmaps(&values), [before, after].concat());
    assert_eq!(summary(&values)["forks_cleaned"], 4);
    assert_eq!(tracer_of(t.pid), 0);
}

#[test]
fn target_exit_and_exec_end_the_trace_cleanly() {
    let mut s = Session::start(&[]);
    s.cmd("mmap 1");
    s.t.send("exit 3");
    let (status, out, err) = s.sc.finish();
    assert!(status.success(), "{err:#?}");
    let values = json_lines(&out);
    assert_eq!(summary(&values)["end"], "target_exited");
    assert_eq!(summary(&values)["end_value"], 3);
    assert_eq!(s.t.wait().code(), Some(3));

    let mut s = Session::start(&[]);
    s.t.send("exec");
    s.t.out.until(|l| l == "execed");
    let (status, out, _) = s.sc.finish();
    assert!(status.success());
    assert_eq!(summary(&json_lines(&out))["end"], "target_exec");
    assert_eq!(tracer_of(s.t.pid), 0);
    assert_eq!(truth_mmaps(&cmd(&mut s.t, "mmap 2")).len(), 2, "the new program runs untraced");
}

/// Runs syscatch expecting one clear error line and the given exit code; returns that line.
fn refused(args: &[&str], code: i32) -> String {
    let (got, out, err) = run_syscatch(args);
    assert_eq!(got, code, "{args:?}: stderr {err}");
    assert!(out.is_empty(), "{args:?}: no events on stdout: {out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line: {err}");
    assert!(lines[0].starts_with("syscatch: "), "{err}");
    lines[0].to_string()
}

#[test]
fn bad_input_is_refused_with_one_line_and_the_target_untouched() {
    require_ptrace();
    assert!(refused(&["--pid", "999999999"], 1).contains("no process with pid 999999999"));
    assert!(refused(&["--pid", "2"], 1).contains("kernel thread"));
    assert!(refused(&["--pid", "1", "--syscall", "mmap,nosuch"], 2).contains("unknown syscall `nosuch`"));
    assert!(refused(&["--pid", "1", "--for", "10x"], 2).contains("bad duration"));
    assert!(refused(&[], 2).contains("nothing to trace"));
    assert!(refused(&["--pid", "1", "--", "true"], 2).contains("not both"));

    let mut t = Target::start(&testprog("target"), &[]);
    cmd(&mut t, "spin 1");
    let pid = t.pid;
    let thread = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|&tid| tid != pid)
        .unwrap();
    let line = refused(&["--pid", &thread.to_string()], 1);
    assert!(line.contains(&format!("is a thread of process {pid}")), "{line}");

    // A report file that cannot be created is refused before attaching, not after the trace.
    let line = refused(&["--pid", &pid.to_string(), "--leaks", "--folded", "/nonexistent-dir/x.folded"], 1);
    assert!(line.contains("cannot create /nonexistent-dir/x.folded"), "{line}");
    assert_eq!(tracer_of(pid), 0);
    let line = refused(&["--pid", &pid.to_string(), "--leaks", "--stack-bytes", "0"], 2);
    assert!(line.contains("--stack-bytes"), "{line}");
    let line = refused(&["run", "/nonexistent.probe", "--pid", &pid.to_string()], 2);
    assert!(line.contains("cannot read probe script"), "{line}");

    // Permission: an unprivileged user may not trace root's process.
    let o = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_syscatch"))
        .args(["--pid", &pid.to_string()])
        .output()
        .expect("setpriv runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("permission denied") && err.contains("CAP_SYS_PTRACE"), "{err}");

    // Already traced: the error names the tracer; the first trace goes on unaffected.
    let mut first = Syscatch::start(&["--pid", &pid.to_string(), "--json"]);
    first.wait_attached();
    let line = refused(&["--pid", &pid.to_string()], 1);
    assert!(line.contains("already traced by process") && line.contains("syscatch"), "{line}");
    cmd(&mut t, "stop");
    let truth = truth_mmaps(&cmd(&mut t, "mmap 2"));
    first.signal(libc::SIGINT);
    let (status, out, _) = first.finish();
    assert!(status.success());
    let got = captured_mmaps(&json_lines(&out));
    assert!(got.ends_with(&truth), "the first trace still captures: {got:?}");
    assert_eq!(tracer_of(pid), 0);
    assert_eq!(cmd(&mut t, "mmap 1").len(), 1);

    let mut z = Target::start(&testprog("zombie_parent"), &[]);
    let zombie: i32 = z.out.next().strip_prefix("zombie ").unwrap().parse().unwrap();
    let line = (0..10_000)
        .map(|_| run_syscatch(&["--pid", &zombie.to_string()]).2)
        .find(|e| e.contains("zombie"))
        .expect("reported as a zombie once it has exited");
    assert!(line.contains(&format!("process {zombie}")), "{line}");
    z.send("bye");

    let mut s = Target::start(&testprog_with("static_wait", &["-static"]), &[]);
    let line = refused(&["--pid", &s.pid.to_string()], 1);
    assert!(line.contains("no libc mapped") && line.contains("static"), "{line}");
    assert_eq!(tracer_of(s.pid), 0);
    s.send("bye");
    assert_eq!(s.wait().code(), Some(0));
}

#[test]
fn starts_a_command_under_the_tracer_and_returns_its_status() {
    require_ptrace();
    let events = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cmd-events.jsonl");
    let prog = testprog("target");
    let mut cmd_line = syscatch_cmd();
    cmd_line.args(["--json", "-o"]).arg(&events).arg("--").arg(&prog);
    // The command inherits syscatch's stdin and stdout: the harness talks to it through syscatch.
    let mut t = Target::start_cmd(cmd_line.stderr(std::process::Stdio::null()));
    let truth = truth_mmaps(&cmd(&mut t, "mmap 4"));
    assert_eq!(cmd(&mut t, "fork 2"), ["child 0 status 40", "child 1 status 41"]);
    t.send("exit 5");
    assert_eq!(t.wait().code(), Some(5), "syscatch exits with the command's status");
    let text = std::fs::read_to_string(&events).unwrap();
    let values = json_lines(&text.lines().map(str::to_string).collect::<Vec<_>>());
    assert_eq!(captured_mmaps(&values), truth);
    assert_eq!(summary(&values)["end"], "target_exited");
}

/// `--for` on a command syscatch starts: at the end of the duration syscatch detaches and returns (as `timeout`
/// ends the wait), and the command runs on untraced, still answering on the same stdin and stdout.
#[test]
fn for_duration_returns_and_leaves_a_started_command_running() {
    require_ptrace();
    let events = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cmd-for-events.jsonl");
    let prog = testprog("target");
    let mut cmd_line = syscatch_cmd();
    cmd_line.args(["--json", "--for", "300ms", "-o"]).arg(&events).arg("--").arg(&prog);
    let mut t = Target::start_cmd(cmd_line.stderr(std::process::Stdio::piped()));
    let target = t.pid;
    // The command holds syscatch's stderr too: read lines, not to the end.
    let mut err = Lines::new(t.child.stderr.take().unwrap(), "syscatch stderr");
    let said = err.until(|l| l.contains("runs on"));
    assert!(said.last().unwrap().contains(&format!("(pid {target}) was detached and runs on")), "{said:#?}");
    assert!(poll(|| t.child.try_wait().unwrap().is_some()), "syscatch still waits for the command after --for");
    assert_eq!(t.child.try_wait().unwrap().unwrap().code(), Some(0), "{said:#?}");
    assert_eq!(tracer_pid(target), Some(0), "the command is left traced");
    // It runs on, untraced and unharmed: its mmaps work, with no event written for them.
    assert_eq!(truth_mmaps(&cmd(&mut t, "mmap 2")).len(), 2);
    let text = std::fs::read_to_string(&events).unwrap();
    let values = json_lines(&text.lines().map(str::to_string).collect::<Vec<_>>());
    assert_eq!(summary(&values)["end"], "duration");
    assert!(captured_mmaps(&values).is_empty());
    t.send("exit 0");
    assert!(poll(|| tracer_pid(target).is_none() || thread_states_of(target).iter().all(|&c| c == 'Z')));
}

/// `--fast` on a command syscatch starts: its one thread is stopped at the entry point already (it used to wait
/// for an interrupt that never came, then fall back to a breakpoint).
#[test]
fn starts_a_command_with_fast() {
    require_ptrace();
    let events = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cmd-fast-events.jsonl");
    let prog = testprog("target");
    let mut cmd_line = syscatch_cmd();
    cmd_line.args(["--json", "--fast", "-o"]).arg(&events).arg("--").arg(&prog);
    let mut t = Target::start_cmd(cmd_line.stderr(std::process::Stdio::piped()));
    let truth = truth_mmaps(&cmd(&mut t, "mmap 4"));
    t.send("exit 5");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut t.child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(t.wait().code(), Some(5), "syscatch exits with the command's status");
    assert!(!err.contains("not possible"), "--fast was installed: {err}");
    let text = std::fs::read_to_string(&events).unwrap();
    let values = json_lines(&text.lines().map(str::to_string).collect::<Vec<_>>());
    assert_eq!(captured_mmaps(&values), truth);
    assert_eq!(truth.len(), 4);
}

#[test]
fn demo_runs_and_catches_the_leak() {
    require_ptrace();
    let (code, out, err) = run_syscatch(&["demo", "--for", "1s", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("demo: pid"), "the demo owns stdout: {out}");
    // The leak report of a started command goes to stderr (events would need -o FILE).
    let lines: Vec<String> = err.lines().map(str::to_string).collect();
    let values = json_lines(&lines);
    assert!(captured_mmaps(&values).is_empty(), "report mode: no events");
    let top = values.iter().find(|v| v["type"] == "leak").expect("a leak line");
    let held = top["data"]["still_mapped"].as_u64().unwrap();
    assert!(held >= 1 << 20 && held % (1 << 20) == 0, "the 1 MiB pool growth is caught: {top:#?}");
    let funcs: Vec<&str> =
        top["data"]["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
    assert!(funcs.iter().any(|f| f.starts_with("pool_grow")), "{funcs:?}");
    assert_eq!(values.last().unwrap()["type"], "summary");
}

fn write_mem(pid: i32, addr: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(format!("/proc/{pid}/mem")).unwrap();
    f.write_all_at(bytes, addr).unwrap();
}

#[test]
fn a_breakpoint_byte_changed_by_someone_else_is_never_restored_wrongly() {
    let mut s = Session::start(&[]);
    let err = std::mem::take(&mut s.sc.err.seen);
    let site = site_of(&err);
    let pid = s.t.pid;
    let orig = libc_bytes_untraced(site, pid, 1);
    assert_eq!(read_mem(pid, site, 1), [0xcc], "armed");
    // Another tool puts "its" saved byte back (as a removed uprobe or debugger would).
    write_mem(pid, site, &orig);
    s.sc.err.until(|l| l.contains("overwritten by someone else"));
    // Calls go on untraced and unharmed; at detach syscatch leaves the byte alone.
    assert_eq!(truth_mmaps(&s.cmd("mmap 2")).len(), 2);
    let (mut t, values, _, code) = s.stop(libc::SIGINT);
    assert_eq!(code, 0);
    let warnings = summary(&values)["warnings"].as_array().unwrap().len();
    assert!(warnings >= 1);
    assert_eq!(read_mem(t.pid, site, 1), orig);
    assert_eq!(cmd(&mut t, "mmap 1").len(), 1);

    // A byte that is not the file's when syscatch arrives (another tool's int3): refused, nothing written.
    // The target is idle on stdin, so it does not run syscall() while the foreign int3 is there.
    write_mem(pid, site, &[0xcc]);
    let (code, _, err) = run_syscatch(&["--pid", &pid.to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("another debugger, uprobe or hook"), "{err}");
    assert_eq!(tracer_of(pid), 0);
    write_mem(pid, site, &orig);
    assert_eq!(cmd(&mut t, "mmap 1").len(), 1);
}

#[test]
fn interrupting_a_command_that_is_still_starting_leaves_it_unharmed() {
    require_ptrace();
    let prog = testprog_with_libs("slow_start", &[shared_lib("slow_start_lib")]);
    let mut cmd_line = syscatch_cmd();
    cmd_line.arg("--").arg(&prog).stderr(std::process::Stdio::piped());
    // The command's library constructor prints its pid and blocks before the entry point, where syscatch waits.
    let mut t = Target::start_cmd(&mut cmd_line);
    let mut err = Lines::new(t.child.stderr.take().unwrap(), "syscatch stderr");
    let syscatch = t.child.id() as i32;
    // SAFETY: a signal to our own child, syscatch alone (not the command).
    assert_eq!(unsafe { libc::kill(syscatch, libc::SIGINT) }, 0);
    let line = err.until(|l| l.contains("interrupted"));
    assert!(line.last().unwrap().contains("before the command reached its entry point"), "{line:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(s) = t.child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "syscatch did not exit after SIGINT");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(status.code(), Some(1), "{:?}", err.seen);
    assert_eq!(tracer_of(t.pid), 0, "the command is no longer traced");
    // The command goes on past its entry point: no int3 of ours is left there.
    t.send("go");
    assert_eq!(t.out.next(), "main reached");
}

/// A `Name : value` field of /proc/.../sched.
fn sched_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim().parse().ok())?
    })
}

/// The tracer thread asks EEVDF for its shortest slice (0.1 ms, `os::sched::short_slice`) before it says it is
/// attached; syscatch's other threads keep the default. Read from the kernel: `se.slice` in
/// /proc/PID/task/TID/sched, the tracer being the thread the target's TracerPid names.
#[test]
fn the_tracer_thread_runs_with_the_shortest_slice() {
    require_ptrace();
    let mut t = Target::start(&testprog("mmap_threads"), &["1", "1"]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json", "--only-syscall-wrapper"]);
    sc.wait_attached();
    let sc_pid = sc.child.id() as i32;
    let tracer = tracer_of(t.pid);
    let read = |tid: i32| std::fs::read_to_string(format!("/proc/{sc_pid}/task/{tid}/sched")).unwrap();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let version: Vec<u32> = release.split(['.', '-']).take(2).filter_map(|v| v.parse().ok()).collect();
    let slice = sched_field(&read(tracer), "se.slice");
    match slice {
        None => eprintln!("SKIPPED: this kernel ({}) does not show se.slice: the slice is not checked", release.trim()),
        Some(_) if version < vec![6, 12] => {
            eprintln!("SKIPPED: kernel {} predates custom EEVDF slices (6.12): not checked", release.trim())
        }
        Some(slice) => {
            assert_eq!(slice, 100_000, "the tracer thread {tracer} of syscatch {sc_pid}");
            assert_eq!(sched_field(&read(tracer), "policy"), Some(0), "still SCHED_OTHER");
            // Only the tracer: the analysis threads were started before it asked, and keep the default.
            let others: Vec<i32> = std::fs::read_dir(format!("/proc/{sc_pid}/task"))
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|&tid| tid != tracer)
                .collect();
            assert!(!others.is_empty());
            for tid in others {
                assert_ne!(sched_field(&read(tid), "se.slice"), Some(100_000), "thread {tid} of syscatch");
            }
        }
    }
    t.send("go");
    t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
}

/// Each event is written as it comes, not held back until the end or until the output buffer fills: one call,
/// then the target waits, and its line must already be on syscatch's stdout (a pipe, as for `| grep`).
#[test]
fn shows_each_event_while_the_trace_runs() {
    require_ptrace();
    let mut t = Target::start(&testprog("target"), &[]);
    let pid = t.pid.to_string();
    // Without the symbol prefetch, which flushes between two modules: an event must go out without it.
    let mut sc = Syscatch::start_cmd(
        syscatch_cmd()
            .args(["--pid", &pid, "--syscall", "mmap", "--stack-bytes", "0"])
            .env("SYSCATCH_TEST_FAULT", "no-prefetch"),
    );
    sc.wait_attached();
    t.send("mmap 1");
    let truth = truth_mmaps(&t.out.until(|l| l == "ok"));
    assert_eq!(truth.len(), 1);
    // The target now waits on stdin and syscatch runs on; before the fix this line came only at the end.
    let shown = sc.out.until(|l| l.contains(" mmap("));
    let line = shown.last().unwrap();
    assert!(line.ends_with(&format!("= {:#x}", truth[0].0)), "the call's line with its result: {line}");
    t.send("exit 0");
    let (status, _, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
}

/// `--leaks --fast` writes munmap calls to the trampoline's ring without a stop. Four threads map and unmap
/// (reusing addresses, so order matters), and one unmaps 3,000 pages in a burst: every call is reported once,
/// each thread's in its own order with its exact arguments and result, the mmaps with their stacks, and in an
/// order in which every munmap finds its mapping. `lazy`: the ring is read only every 200 ms, so the burst fills
/// it and most of its munmaps take the stop instead (the full ring's path). `libc`: the calls are libc's own mmap()
/// and munmap() (patched by `--fast` too: munmap to the ring). glibc's own mappings (thread stacks, malloc arenas,
/// through libc's mmap) are in the trace as well and are left out of the comparison.
/// `syscatch --pid T --leaks --fast --json -o EVENTS` (with test fault `fault`) while target `t` runs from "go" to
/// "done"; ended with SIGINT. Returns the target's lines, syscatch's stdout and stderr; it must have succeeded.
fn leaks_fast_run(
    t: &mut Target,
    events: &std::path::Path,
    fault: Option<&str>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut cmd = syscatch_cmd();
    if let Some(f) = fault {
        cmd.env("SYSCATCH_TEST_FAULT", f);
    }
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start_cmd(cmd.args(["--pid", &pid, "--leaks", "--fast", "--json", "-o"]).arg(events));
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    (lines, out, err)
}

fn ring_round(lazy: bool, libc: bool) {
    require_ptrace();
    // With the ring read every 200 ms, the events of 200 ms go to the analysis at once: a smaller run keeps them
    // within its queue (4,096 records; past it a loaded machine's analysis drops events, and says so).
    let args: &[&str] = match (lazy, libc) {
        (true, _) => &["4", "100", "1800"],
        (false, true) => &["4", "200", "3000", "libc"],
        (false, false) => &["4", "200", "3000"],
    };
    let mut t = Target::start(&testprog("ring_churn"), args);
    let events = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ring-{lazy}-{libc}.jsonl"));
    let (lines, out, err) = leaks_fast_run(&mut t, &events, lazy.then_some("ring-slow"));
    assert!(!err.iter().any(|l| l.contains("not possible")), "--fast was installed: {err:#?}");
    assert!(!err.iter().any(|l| l.contains("events were dropped:")), "no event dropped: {err:#?}");
    assert_eq!(tracer_of(t.pid), 0);
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let mut truth: HashMap<i64, Vec<(String, u64, u64, u64)>> = HashMap::new();
    for l in &lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.first() == Some(&"call") {
            truth.entry(w[1].parse().unwrap()).or_default().push((
                w[2].to_string(),
                hex(w[3]),
                w[4].parse().unwrap(),
                hex(w[5]),
            ));
        }
    }
    let text = std::fs::read_to_string(&events).unwrap();
    let values = json_lines(&text.lines().map(str::to_string).collect::<Vec<_>>());
    let mut got: HashMap<i64, Vec<(String, u64, u64, u64)>> = HashMap::new();
    let mut live: HashMap<u64, u64> = HashMap::new();
    let (mut with_stack, mut mmaps, mut munmap_stacks) = (0, 0, 0);
    let ours: std::collections::HashSet<(i64, u64, u64)> =
        truth.iter().flat_map(|(&tid, calls)| calls.iter().map(move |c| (tid, c.1, c.2))).collect();
    for v in values.iter().filter(|v| v["type"] == "event") {
        let d = &v["data"];
        let name = match d["location"].as_str() {
            Some(l) => l.rsplit(':').next().unwrap().to_string(),
            None => d["syscall"].as_str().unwrap().to_string(),
        };
        let (a, len, ret) =
            (hex(d["args"][0].as_str().unwrap()), hex(d["args"][1].as_str().unwrap()), hex(d["ret"].as_str().unwrap()));
        let addr = if name == "mmap" { ret } else { a };
        if !ours.contains(&(d["tid"].as_i64().unwrap(), addr, len)) {
            continue;
        }
        assert_eq!(d["location"].is_string(), libc, "{d}");
        if name == "mmap" {
            mmaps += 1;
            with_stack += d["stack"].as_array().is_some_and(|s| !s.is_empty()) as u32;
            assert!(live.insert(addr, len).is_none(), "mmap of a mapped range reported: {d}");
        } else {
            // From the ring: the function and its caller (the slot's return address), no further; from a full
            // ring's stop: none.
            if let Some(frames) = d["stack"].as_array().filter(|f| !f.is_empty()) {
                let names: Vec<&str> = frames.iter().filter_map(|f| f["function"].as_str()).collect();
                assert!(names.iter().any(|n| ["unmap", "run"].contains(n)) && frames.len() <= 4, "{names:?}");
                munmap_stacks += 1;
            }
            assert_eq!(live.remove(&addr), Some(len), "a munmap reported before its mmap: {d}");
        }
        got.entry(d["tid"].as_i64().unwrap()).or_default().push((name, addr, len, ret));
    }
    assert_eq!(truth.len(), 4);
    for (tid, calls) in &truth {
        let mine = got.get(tid).map(Vec::as_slice).unwrap_or_default();
        let first_diff = calls.iter().zip(mine).position(|(a, b)| a != b);
        assert!(
            first_diff.is_none() && mine.len() == calls.len(),
            "thread {tid}: {} calls reported of {}, first difference at {first_diff:?}: {:?} against {:?}",
            mine.len(),
            calls.len(),
            first_diff.and_then(|i| mine.get(i)),
            first_diff.and_then(|i| calls.get(i)),
        );
    }
    assert_eq!(got.len(), 4, "no call under another thread: {:?}", got.keys());
    // The mmaps stop for their stacks (but those the analysis was behind on, which go without their window: many
    // on a loaded machine, and with the ring read every 200 ms the stop events reach the analysis hundreds at a
    // time); the munmaps read from the ring name their caller.
    assert!(with_stack > 0, "{with_stack} of {mmaps} mmaps with a stack");
    assert!(munmap_stacks > 0);
    let out = json_lines(&out);
    let sum = summary_data(&out);
    // syscatch's own pages (the trampoline's and its ring, which the munmaps filled) are not growth of the target.
    let page = err
        .iter()
        .find_map(|l| l.split("trampoline page mapped at 0x").nth(1))
        .and_then(|r| u64::from_str_radix(r.split_whitespace().next()?, 16).ok())
        .expect("the trampoline's page is named");
    for r in out.iter().filter(|v| v["type"] == "region") {
        let start = hex(r["data"]["start"].as_str().unwrap());
        assert!(!(page..page + 0x12000).contains(&start), "{r}");
    }
    let munmaps = truth.values().flatten().filter(|c| c.0 == "munmap").count() as u64;
    let ring = sum["from_ring"].as_u64().unwrap();
    if lazy {
        assert!(ring > 0 && ring + 800 <= munmaps, "{ring} of {munmaps} munmaps through the ring: {sum}");
    } else {
        assert!(ring * 10 >= munmaps * 9, "{ring} of {munmaps} munmaps without a stop: {sum}");
    }
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn fast_leaks_ring_reports_every_call_in_order() {
    ring_round(false, false);
}

#[test]
fn fast_leaks_full_ring_falls_back_to_stops() {
    ring_round(true, false);
}

#[test]
fn fast_leaks_patches_libc_mmap_and_munmap_too() {
    ring_round(false, true);
}

/// A uprobe on `syscall()` (bpftrace, perf probe) puts an int3 there that is not ours; the kernel also installs it
/// in syscatch's own read-only mapping of the file, where it once passed for the file's byte: syscatch planted its
/// int3 over the uprobe's and reported nothing at all. The uprobe is set on a copy of libc that only this target
/// maps (through LD_LIBRARY_PATH), so no other process on the machine meets it.
#[test]
fn refuses_a_uprobed_syscall_wrapper_and_leaves_the_target_alone() {
    require_ptrace();
    let events = std::path::Path::new("/sys/kernel/tracing/uprobe_events");
    if !events.exists() {
        // A fresh machine may not have it mounted (root may mount it).
        let _ = std::process::Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]).status();
    }
    assert!(events.exists(), "tracefs is not mounted at /sys/kernel/tracing: this test sets a uprobe through it");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("uprobed-libc");
    std::fs::create_dir_all(&dir).unwrap();
    let libc = dir.join("libc.so.6");
    let _ = std::fs::remove_file(&libc);
    std::fs::copy("/lib/x86_64-linux-gnu/libc.so.6", &libc).unwrap();
    let nm = std::process::Command::new("nm").args(["-D", "--defined-only"]).arg(&libc).output().unwrap();
    let off = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3 && w[2].split('@').next() == Some("syscall")).then(|| u64::from_str_radix(w[0], 16).unwrap())
        })
        .expect("syscall in libc's dynamic symbols");
    let name = format!("syscatch_it_{}", std::process::id());
    let append = |line: String| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(events).unwrap();
        f.write_all(line.as_bytes())
    };
    append(format!("p:{name}/wrapper {}:{off:#x}\n", libc.display())).expect("uprobe registered");
    let enable = std::path::PathBuf::from(format!("/sys/kernel/tracing/events/{name}/wrapper/enable"));
    std::fs::write(&enable, "1").unwrap();
    let prog = testprog("target");
    let mut t = Target::start_cmd(std::process::Command::new(&prog).env("LD_LIBRARY_PATH", &dir));
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(maps.contains(&libc.display().to_string()), "the target maps the copy");
        for fast in [false, true] {
            let pid = t.pid.to_string();
            let mut args = vec!["--pid", pid.as_str(), "--syscall", "mmap", "--for", "1s"];
            if fast {
                args.push("--fast");
            }
            let (status, _, err) = Syscatch::start(&args).finish();
            assert_eq!(status.code(), Some(1), "fast {fast}: {err:#?}");
            let line = err.iter().find(|l| l.contains("uprobe")).unwrap_or_else(|| panic!("fast {fast}: {err:#?}"));
            assert!(line.contains("0xcc in memory"), "{line}");
            assert_eq!(tracer_of(t.pid), 0);
        }
    }));
    let _ = std::fs::write(&enable, "0");
    let _ = append(format!("-:{name}/wrapper\n"));
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    // Still running as before: it maps and unmaps on request.
    t.send("mmap 1");
    assert!(t.out.next().starts_with("mmap "));
    t.send("exit");
    let _ = t.wait();
}

/// A target pinned to one CPU: the tracer moves there (stops wake it where the target runs), and the analysis
/// threads (unwinding, symbolizing, the symbol prefetch, smaps samples) move to the other CPUs, so they take no
/// CPU time from the target.
#[test]
fn analysis_stays_off_a_pinned_targets_cpus() {
    require_ptrace();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    assert!(cpus >= 2, "this test needs two CPUs (one for the target, one for the analysis)");
    let last = (cpus - 1).to_string();
    let prog = testprog("target");
    let mut t = Target::start_cmd(std::process::Command::new("taskset").args(["-c", &last]).arg(&prog));
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--for", "60s"]);
    sc.wait_attached();
    let task = format!("/proc/{}/task", sc.child.id());
    let mut seen = HashMap::new();
    // The unwinding thread is started by the analysis thread once it is running: looked for until it is there.
    let started = std::time::Instant::now();
    while !seen.contains_key("syscatch-unwind") && started.elapsed() < std::time::Duration::from_secs(30) {
        seen.clear();
        for e in std::fs::read_dir(&task).unwrap().flatten() {
            let dir = e.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default().trim().to_string();
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let list =
                status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim().to_string();
            seen.insert(comm, list);
        }
        std::thread::yield_now();
    }
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert!(err.iter().any(|l| l.contains("the tracer runs there too; the analysis on CPUs")), "{err:#?}");
    assert_eq!(seen.get("syscatch").map(String::as_str), Some(last.as_str()), "the tracer: {seen:?}");
    let others = if cpus == 2 { "0".to_string() } else { format!("0-{}", cpus - 2) };
    for name in ["analysis", "syscatch-unwind"] {
        assert_eq!(seen.get(name), Some(&others), "{name}: {seen:?}");
    }
    t.send("exit 0");
    let _ = t.wait();
}

/// The ring's last calls when the target exits or execs right after them: read from syscatch's own mapping of the
/// ring's pages, every munmap is reported (through `/proc/PID/mem` the last tick's were lost with the address
/// space), and the report shows nothing still mapped.
#[test]
fn fast_leaks_reads_the_ring_after_the_target_exits_or_execs() {
    require_ptrace();
    for how in ["exit", "exec"] {
        let mut t = Target::start(&testprog("ring_exit"), &[how]);
        let pid = t.pid.to_string();
        let events = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ring-exit-{how}.jsonl"));
        let mut sc = Syscatch::start_cmd(
            syscatch_cmd().args(["--pid", &pid, "--leaks", "--fast", "--json", "--for", "60s", "-o"]).arg(&events),
        );
        sc.wait_attached();
        t.send("go");
        assert_eq!(t.out.next(), "calls 2050");
        let (status, out, err) = sc.finish();
        assert!(status.success(), "{how}: {err:#?}");
        assert!(!err.iter().any(|l| l.contains("read through the target's memory")), "{how}: {err:#?}");
        let text = std::fs::read_to_string(&events).unwrap();
        let munmaps = text.lines().filter(|l| l.contains("\"syscall\":\"munmap\"")).count();
        assert_eq!(munmaps, 2050, "{how}: every munmap, the last ones too");
        let out = json_lines(&out);
        let leaked: u64 = out
            .iter()
            .filter(|v| v["type"] == "leak")
            .filter(|v| v["data"]["stack"].to_string().contains("ring_exit"))
            .map(|v| v["data"]["still_mapped"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(leaked, 0, "{how}: nothing of the program's is still mapped");
        let _ = t.wait();
    }
}

/// Each call read from the ring is reported under the thread that made it, also when glibc gives a new thread the
/// fs base of the one before (its cached stack): 300 short threads in turn, each unmapping one page, beside two
/// busy ones.
#[test]
fn fast_ring_names_the_thread_of_each_call() {
    require_ptrace();
    let mut t = Target::start(&testprog("ring_threads"), &["300"]);
    let events = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ring-threads.jsonl");
    let (lines, out, _) = leaks_fast_run(&mut t, &events, None);
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let truth: HashMap<u64, i64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("unmap "))
        .map(|l| {
            let (a, t) = l.split_once(' ').unwrap();
            (hex(a), t.parse().unwrap())
        })
        .collect();
    assert_eq!(truth.len(), 300);
    let text = std::fs::read_to_string(&events).unwrap();
    let mut seen = 0;
    for v in json_lines(&text.lines().map(str::to_string).collect::<Vec<_>>()) {
        let d = &v["data"];
        if v["type"] != "event" || d["syscall"] != "munmap" {
            continue;
        }
        let Some(&tid) = truth.get(&hex(d["args"][0].as_str().unwrap())) else { continue };
        if d["args"][1] != "0x1000" {
            continue;
        }
        assert_eq!(d["tid"].as_i64(), Some(tid), "{d}");
        seen += 1;
    }
    assert_eq!(seen, 300);
    let out = json_lines(&out);
    assert!(summary_data(&out)["from_ring"].as_u64().unwrap() >= 300);
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}
