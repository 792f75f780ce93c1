//! Torture: forks, vforks, posix_spawn storms and exec in the target while it is traced, attached or detached.

use super::*;

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
