//! Known stacks (`--fast`): a matching call whose stack was unwound at an earlier stop is written into the ring
//! without a stop and reported with that stack. Each test's target maps from two callers whose calls share the
//! thread, the stack pointer and most of the stack, alternately: every event must carry its own caller (the
//! target says which made each address), and most must have come without a stop.

use crate::common::*;
use serde_json::Value;

/// What the target said it mapped (address, tag, and the thread's tid where it says it), in order.
type Truth = Vec<(u64, String, Option<i64>)>;
/// Each mmap event's result, its stack's function names and its tid, in order.
type Mapped = Vec<(u64, Vec<String>, i64)>;

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

/// `prog args` traced by `syscatch --pid P --json --fast --syscall mmap EXTRA`, sent "go ROUNDS": each address
/// the target reported with its tag, and the events by address (their stacks' function names), with the
/// summary.
fn known_run(prog: &std::path::Path, args: &[&str], extra: &[&str], rounds: u32) -> (Truth, Mapped, Value) {
    require_ptrace();
    known_run_target(Target::start(prog, args), extra, rounds)
}

/// [`known_run`] on a target already started.
fn known_run_target(mut t: Target, extra: &[&str], rounds: u32) -> (Truth, Mapped, Value) {
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&[&["--pid", pid.as_str(), "--json", "--fast", "--syscall", "mmap"], extra].concat());
    sc.wait_attached();
    t.send(&format!("go {rounds}"));
    let truth: Truth = t
        .out
        .until(|l| l == "done")
        .iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 4 && w[0] == "mmap")
                .then(|| (hex(w[1]), w[3].to_string(), w.get(4).map(|t| t.parse().unwrap())))
        })
        .collect();
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert!(!err.iter().any(|l| l.contains("not possible")), "--fast was installed: {err:#?}");
    assert_eq!(tracer_of_pid(t.pid), 0, "detached");
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
    let values = json_lines(&out);
    // Python frames are placed above the eval loop that runs them, from a known stack as from a stop.
    for v in values.iter().filter(|v| v["type"] == "event") {
        let frames = v["data"]["stack"].as_array().into_iter().flatten();
        assert!(frames.filter(|f| f["kind"] == "python").all(|f| f["placed"] == true), "{v:#}");
    }
    let events = values
        .iter()
        .filter(|v| {
            v["type"] == "event" && (v["data"]["syscall"] == "mmap" || v["data"]["location"] == "libc.so.6:mmap")
        })
        .map(|v| {
            let names = v["data"]["stack"]
                .as_array()
                .map(|s| s.iter().map(|f| f["function"].as_str().unwrap_or("?").to_string()).collect())
                .unwrap_or_default();
            (hex(v["data"]["ret"].as_str().unwrap()), names, v["data"]["tid"].as_i64().unwrap())
        })
        .collect();
    (truth, events, summary_data(&values).clone())
}

fn tracer_of_pid(pid: i32) -> i32 {
    tracer_pid(pid).unwrap_or(0)
}

/// Each mapping the target tagged has its event, whose stack names its caller (`names[tag]`) and not the other.
/// One address is mapped again and again (unmapped in between): its mappings and its events pair up in order.
fn assert_callers(truth: &[(u64, String, Option<i64>)], events: &Mapped, names: &[(&str, &str)], ctx: &str) {
    assert!(!truth.is_empty(), "{ctx}: the target mapped nothing");
    let mut by_addr: std::collections::HashMap<u64, Vec<(&Vec<String>, i64)>> = Default::default();
    for (a, s, tid) in events {
        by_addr.entry(*a).or_default().push((s, *tid));
    }
    let mut nth: std::collections::HashMap<u64, usize> = Default::default();
    for (addr, tag, tid) in truth {
        let k = nth.entry(*addr).or_default();
        let &(stack, got_tid) =
            by_addr.get(addr).and_then(|v| v.get(*k)).unwrap_or_else(|| panic!("{ctx}: no event {k} of {addr:#x}"));
        *k += 1;
        if let Some(tid) = tid {
            assert_eq!(got_tid, *tid, "{ctx}: {addr:#x} was mapped by thread {tid}");
        }
        let (mine, other) = match names.iter().position(|(t, _)| t == tag) {
            Some(i) => (names[i].1, names[1 - i].1),
            None => panic!("{ctx}: tag {tag}"),
        };
        assert!(stack.iter().any(|f| f == mine), "{ctx}: {addr:#x} was mapped by {mine}: {stack:#?}");
        assert!(!stack.iter().any(|f| f == other), "{ctx}: {addr:#x} not by {other}: {stack:#?}");
        assert!(stack.iter().any(|f| f == "_start" || f.contains("clone")), "{ctx}: the whole stack: {stack:#?}");
    }
    let counted: usize = nth.values().sum();
    assert_eq!(counted, events.len(), "{ctx}: as many mmap events as mappings");
}

#[test]
fn known_native_stacks_that_differ_two_frames_up_are_told_apart() {
    let (truth, events, sum) = known_run(&testprog("known_stacks"), &[], &[], 2000);
    assert_eq!(truth.len(), 4000);
    assert_callers(&truth, &events, &[("a", "via_a"), ("b", "via_b")], "native");
    // Four stacks (two callers, libc's mmap and syscall()), each stops until it is known (a tick, 10 ms, at most).
    let known = sum["from_known"].as_u64().unwrap();
    assert!(known * 2 >= 4000, "calls reported with a known stack: {sum:#}");
    assert_eq!(sum["matching"], 4000, "{sum:#}");
}

/// Sixteen rounds in each new thread, joined before the next: glibc gives it the fs base and the cached stack of the
/// one before, so its calls meet the stacks known of a thread gone (withdrawn at its first stop) and then its own.
/// Every call is reported under the thread that made it, with its own caller.
#[test]
fn known_stacks_of_a_thread_gone_are_not_another_threads() {
    let (truth, mut events, sum) = known_run(&testprog("known_stacks"), &["threads"], &[], 20);
    // Less the first thread's stack, which pthread_create maps (the others reuse it).
    events.retain(|(_, s, _)| s.iter().any(|f| f == "via_a" || f == "via_b"));
    assert_eq!(truth.len(), 640);
    assert!(truth.iter().all(|t| t.2.is_some()));
    assert_callers(&truth, &events, &[("a", "via_a"), ("b", "via_b")], "threads");
    let tids: std::collections::HashSet<i64> = truth.iter().filter_map(|t| t.2).collect();
    assert_eq!(tids.len(), 20, "a thread for sixteen rounds");
    // (How many calls went without a stop depends on how soon each thread's first stops were made known.)
    assert!(sum["matching"].as_u64().unwrap() >= 640, "{sum:#}");
}

#[test]
fn known_stacks_off_stop_at_every_call() {
    let (truth, events, sum) = known_run(&testprog("known_stacks"), &[], &["--no-known-stacks"], 50);
    assert_callers(&truth, &events, &[("a", "via_a"), ("b", "via_b")], "off");
    assert_eq!(sum["from_known"], 0, "{sum:#}");
}

/// The Python frames are the only difference between the two callers' stacks: checked from the C stack's
/// `_PyCFrame` along the frame chain (CPython 3.11 and 3.12), or from the thread's bound thread state (3.13+).
/// `threads`: the rounds run in eight threads one after the other (each thread's state, and the stacks known of
/// a thread gone).
fn python_round(t: Target, threads: bool, ctx: &str) {
    // Enough calls that most come after the first stops were made known (a tick of the tracer, 10 ms, at most).
    let rounds = if threads { 250 } else { 2000 };
    let (truth, mut events, sum) = known_run_target(t, &[], rounds);
    // Less the first thread's stack, which pthread_create maps (the others reuse it).
    events.retain(|(_, s, _)| s.iter().any(|f| f == "f" || f == "g"));
    assert_eq!(truth.len(), 4000, "{ctx}");
    assert_eq!(truth.iter().all(|t| t.2.is_some()), threads, "{ctx}");
    assert_callers(&truth, &events, &[("f", "f"), ("g", "g")], ctx);
    let known = sum["from_known"].as_u64().unwrap();
    assert!(known * 2 >= 4000, "{ctx}: calls reported with a known stack: {sum:#}");
    assert_eq!(
        sum["warnings"].as_array().map(|w| w.iter().filter(|w| w.as_str().unwrap().contains("Python")).count()),
        Some(0),
        "{sum:#}"
    );
}

fn py_known(python: &std::path::Path, args: &[&str]) -> Target {
    let script = repo().join("testprogs/py_known.py");
    Target::start(python, &[&[script.to_str().unwrap()], args].concat())
}

/// `python` (a command in `root`) running py_known.py there.
fn py_known_in(root: &std::path::Path, python: &str, args: &[&str]) -> Target {
    let script = crate::roots::copy_in(root, &repo().join("testprogs/py_known.py"));
    Target::start_cmd(std::process::Command::new("chroot").arg(root).arg(python).arg(script).args(args))
}

#[test]
fn known_python_stacks_3_11_are_told_apart_by_their_frames() {
    python_round(py_known(&crate::python::pyenv(11), &[]), false, "3.11");
}

#[test]
fn known_python_stacks_3_12_are_told_apart_by_their_frames() {
    python_round(py_known(&crate::python::pyenv(12), &[]), false, "3.12");
}

/// 3.13 keeps the bound thread state under a pthread key (a shared libpython here, Debian's an executable).
#[test]
fn known_python_stacks_3_13_are_told_apart_by_their_frames() {
    python_round(py_known(&crate::python::pyenv(13), &[]), false, "3.13");
    python_round(py_known(&crate::python::pyenv(13), &["threads"]), true, "3.13 threads");
    python_round(py_known_in(&crate::roots::trixie(), "python3.13", &[]), false, "3.13 (trixie)");
}

/// A native thread of a CPython process (one a C extension or a communication library starts) has no Python
/// frames: its stacks are known when no frame of the interpreter is on them (3.12: from the C stack's cframe
/// otherwise, 3.13: from the bound thread state).
#[test]
fn known_native_stacks_in_a_python_process() {
    let lib = shared_lib("known_stacks");
    for minor in [12, 13] {
        let t = py_known(&crate::python::pyenv(minor), &["native", lib.to_str().unwrap()]);
        let (truth, mut events, sum) = known_run_target(t, &[], 2000);
        let ctx = format!("3.{minor} native");
        events.retain(|(_, s, _)| s.iter().any(|f| f == "via_a" || f == "via_b"));
        assert_eq!(truth.len(), 4000, "{ctx}");
        assert_callers(&truth, &events, &[("a", "via_a"), ("b", "via_b")], &ctx);
        assert!(events.iter().all(|(_, s, _)| !s.iter().any(|f| f.ends_with(".py") || f == "<module>")), "{ctx}");
        let known = sum["from_known"].as_u64().unwrap();
        assert!(known * 2 >= 4000, "{ctx}: calls reported with a known stack: {sum:#}");
    }
}

/// Debian sid's: 3.14 under a pthread key, 3.15 in a thread-local variable of the executable.
#[test]
fn known_python_stacks_3_14_and_3_15_are_told_apart_by_their_frames() {
    let sid = crate::roots::sid();
    python_round(py_known_in(&sid, "python3.14", &[]), false, "3.14");
    python_round(py_known_in(&sid, "python3.14", &["threads"]), true, "3.14 threads");
    python_round(py_known_in(&sid, "python3.15", &[]), false, "3.15");
    python_round(py_known_in(&sid, "python3.15", &["threads"]), true, "3.15 threads");
}
