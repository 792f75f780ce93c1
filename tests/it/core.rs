//! The core trace: exact capture of syscall(SYS_mmap) return values on real multi-threaded targets, clean
//! detach, no harm done.

use crate::common::*;

/// The breakpoint address syscatch reports in its "attached" line.
pub(crate) fn site_of(err: &[String]) -> u64 {
    attached_site(err).expect("attached line")
}

/// The first bytes of libc's syscall() in the file, found through gdb-free means: the same bytes must be in
/// memory after detach. We compare against a second, untraced process's memory at the same libc offset.
pub(crate) fn libc_bytes_untraced(addr: u64, pid: i32, len: usize) -> Vec<u8> {
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
    let mut sc =
        Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json", "--only-syscall-wrapper", "--no-fast"]);
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
pub(crate) struct Session {
    t: Target,
    sc: Syscatch,
}

impl Session {
    pub(crate) fn start(extra: &[&str]) -> Session {
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
    pub(crate) fn cmd(&mut self, c: &str) -> Vec<String> {
        cmd(&mut self.t, c)
    }

    /// Stops syscatch with `sig`; returns its JSON lines and stderr.
    pub(crate) fn stop(self, sig: i32) -> (Target, Vec<serde_json::Value>, Vec<String>, i32) {
        self.sc.signal(sig);
        let (status, out, err) = self.sc.finish();
        (self.t, json_lines(&out), err, status.code().unwrap_or(-1))
    }
}

pub(crate) fn cmd(t: &mut Target, c: &str) -> Vec<String> {
    t.send(c);
    let mut lines = t.out.until(|l| l == "ok");
    lines.pop();
    lines
}

pub(crate) fn summary(values: &[serde_json::Value]) -> &serde_json::Value {
    let last = values.last().expect("some output");
    assert_eq!(last["type"], "summary");
    &last["data"]
}

pub(crate) fn tracer_of(pid: i32) -> i32 {
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
        // Under nohup, syscatch inherits SIGHUP ignored and keeps it so (the trace outlives the terminal).
        let hup = if signal_ignored(libc::SIGHUP) { libc::SIGINT } else { libc::SIGHUP };
        let sig = [libc::SIGINT, libc::SIGTERM, hup][round % 3];
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
    assert!(line.contains("no libc mapped") && line.contains("no syscall()") && line.contains("static"), "{line}");
    assert_eq!(tracer_of(s.pid), 0);
    s.send("bye");
    assert_eq!(s.wait().code(), Some(0));
}

/// musl, static and dynamic: its syscall() is a C function with varargs (it spills its arguments and checks the
/// stack protector before its `syscall`, the 22nd instruction), so a matching call is single-stepped to it and
/// `--fast` says it cannot take it; musl's libc has no CFI, so the unwind starts from the return address at the
/// entry's stack top. Every mapping is caught exactly with its caller, and `--leaks` names the leaker exactly.
#[test]
fn musl_targets_static_and_dynamic_are_traced_exactly() {
    require_ptrace();
    for extra in [&["CC=musl-gcc", "-static"][..], &["CC=musl-gcc"][..]] {
        let mut t = Target::start(&testprog_with("target", extra), &[]);
        let pid = t.pid.to_string();
        let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
        sc.wait_attached();
        let truth = truth_mmaps(&cmd(&mut t, "mmap 5"));
        assert_eq!(truth.len(), 5, "{extra:?}");
        sc.signal(libc::SIGINT);
        let (status, out, err) = sc.finish();
        assert!(status.success(), "{extra:?}: {err:#?}");
        assert!(err.iter().any(|l| l.contains("--fast is not possible here")), "{extra:?}: {err:#?}");
        let values = json_lines(&out);
        assert_eq!(captured_mmaps(&values), truth, "{extra:?}");
        for v in values.iter().filter(|v| v["type"] == "event") {
            let names: Vec<&str> =
                v["data"]["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
            assert_eq!(names.get(..2), Some(&["syscall", "main"][..]), "{extra:?}: {v}");
        }
        assert_eq!(tracer_of(t.pid), 0, "{extra:?}");
        // `mem` names musl's malloc (the dynamic program maps musl's libc) and says it has no arenas.
        let (code, mem, err) = run_syscatch(&["mem", "--pid", &pid]);
        assert_eq!(code, 0, "{err}");
        let want = if extra.contains(&"-static") { "allocator: unknown" } else { "allocator: musl (" };
        assert!(mem.contains(want), "{extra:?}: {mem}");
        if !extra.contains(&"-static") {
            assert!(mem.contains("malloc arenas: none (musl's malloc has no arenas"), "{mem}");
            assert!(!mem.contains("glibc"), "{mem}");
        }
        t.send("exit 7");
        assert_eq!(t.wait().code(), Some(7), "{extra:?}");
    }
    let mut t = Target::start(&testprog_with("leaker", &["CC=musl-gcc", "-static"]), &[]);
    let (leaked, values, _) = leaker_run(&mut t, &["--leaks", "--json"]);
    let leak = values
        .iter()
        .filter(|v| v["type"] == "leak")
        .map(|v| &v["data"])
        .find(|l| l["stack"].as_array().unwrap().iter().any(|f| f["function"] == "leak_site"))
        .unwrap_or_else(|| panic!("leak_site's stack: {values:#?}"));
    assert_eq!((leak["still_mapped"].as_u64(), leak["mmaps"].as_u64()), (Some(leaked), Some(5)), "{leak}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
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
    let mut s = Session::start(&["--no-fast"]);
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
    assert!(err.contains(&format!("syscall() at {site:#x}: its first byte is 0xcc")), "names the site: {err}");
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
