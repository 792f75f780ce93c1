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
/// One address is mapped again and again (unmapped in between): its mappings and its events pair up in order (the
/// events of the callers' calls: those whose stack names one, or has none where the summary says stacks were
/// dropped because the analysis was behind; others, such as a new thread's stack, are not the target's to tell).
fn assert_callers(
    truth: &[(u64, String, Option<i64>)],
    events: &Mapped,
    names: &[(&str, &str)],
    sum: &Value,
    ctx: &str,
) {
    assert!(!truth.is_empty(), "{ctx}: the target mapped nothing");
    let dropped: usize = sum["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().filter(|w| w.contains("without their stack")))
        .filter_map(|w| w.split_whitespace().next()?.parse::<usize>().ok())
        .sum();
    let callers = |s: &Vec<String>| s.is_empty() || s.iter().any(|f| names.iter().any(|(_, n)| f == n));
    let mut by_addr: std::collections::HashMap<u64, Vec<(&Vec<String>, i64)>> = Default::default();
    for (a, s, tid) in events.iter().filter(|(_, s, _)| callers(s)) {
        by_addr.entry(*a).or_default().push((s, *tid));
    }
    let mut nth: std::collections::HashMap<u64, usize> = Default::default();
    let mut empty = 0;
    for (addr, tag, tid) in truth {
        let k = nth.entry(*addr).or_default();
        let &(stack, got_tid) =
            by_addr.get(addr).and_then(|v| v.get(*k)).unwrap_or_else(|| panic!("{ctx}: no event {k} of {addr:#x}"));
        *k += 1;
        if let Some(tid) = tid {
            assert_eq!(got_tid, *tid, "{ctx}: {addr:#x} was mapped by thread {tid}");
        }
        if stack.is_empty() {
            empty += 1;
            assert!(empty <= dropped, "{ctx}: {addr:#x}'s event has no stack: {sum:#}");
            continue;
        }
        let (mine, other) = match names.iter().position(|(t, _)| t == tag) {
            Some(i) => (names[i].1, names[1 - i].1),
            None => panic!("{ctx}: tag {tag}"),
        };
        assert!(stack.iter().any(|f| f == mine), "{ctx}: {addr:#x} was mapped by {mine}: {stack:#?} {sum:#}");
        assert!(!stack.iter().any(|f| f == other), "{ctx}: {addr:#x} not by {other}: {stack:#?} {sum:#}");
        assert!(stack.iter().any(|f| f == "_start" || f.contains("clone")), "{ctx}: the whole stack: {stack:#?}");
    }
    let counted: usize = nth.values().sum();
    let at_truth: usize = truth
        .iter()
        .map(|t| t.0)
        .collect::<std::collections::HashSet<_>>()
        .iter()
        .map(|a| by_addr.get(a).map_or(0, |v| v.len()))
        .sum();
    assert_eq!(counted, at_truth, "{ctx}: as many mmap events as mappings at their addresses");
}

#[test]
fn known_native_stacks_that_differ_two_frames_up_are_told_apart() {
    let (truth, events, sum) = known_run(&testprog("known_stacks"), &[], &[], 2000);
    assert_eq!(truth.len(), 4000);
    assert_callers(&truth, &events, &[("a", "via_a"), ("b", "via_b")], &sum, "native");
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
    let (truth, events, sum) = known_run(&testprog("known_stacks"), &["threads"], &[], 20);
    assert_eq!(truth.len(), 640);
    assert!(truth.iter().all(|t| t.2.is_some()));
    assert_callers(&truth, &events, &[("a", "via_a"), ("b", "via_b")], &sum, "threads");
    let tids: std::collections::HashSet<i64> = truth.iter().filter_map(|t| t.2).collect();
    assert_eq!(tids.len(), 20, "a thread for sixteen rounds");
    // (How many calls went without a stop depends on how soon each thread's first stops were made known.)
    assert!(sum["matching"].as_u64().unwrap() >= 640, "{sum:#}");
}

#[test]
fn known_stacks_off_stop_at_every_call() {
    let (truth, events, sum) = known_run(&testprog("known_stacks"), &[], &["--no-known-stacks"], 50);
    assert_callers(&truth, &events, &[("a", "via_a"), ("b", "via_b")], &sum, "off");
    assert_eq!(sum["from_known"], 0, "{sum:#}");
}

/// The Python frames are the only difference between the two callers' stacks: checked from the C stack's
/// `_PyCFrame` along the frame chain (CPython 3.11 and 3.12), or from the thread's bound thread state (3.9, 3.10,
/// 3.13+).
/// `threads`: the rounds run in eight threads one after the other (each thread's state, and the stacks known of
/// a thread gone).
fn python_round(t: Target, threads: bool, ctx: &str) {
    // Enough calls that most come after the first stops were made known (a tick of the tracer, 10 ms, at most).
    let rounds = if threads { 250 } else { 2000 };
    let (truth, events, sum) = known_run_target(t, &[], rounds);
    assert_eq!(truth.len(), 4000, "{ctx}");
    assert_eq!(truth.iter().all(|t| t.2.is_some()), threads, "{ctx}");
    assert_callers(&truth, &events, &[("f", "f"), ("g", "g")], &sum, ctx);
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

/// 3.9 and 3.10: frame objects, from the bound thread state (under a pthread key).
#[test]
fn known_python_stacks_3_9_and_3_10_are_told_apart_by_their_frames() {
    python_round(py_known(&crate::python::pyenv(9), &[]), false, "3.9");
    python_round(py_known(&crate::python::pyenv(10), &[]), false, "3.10");
    python_round(py_known(&crate::python::pyenv(10), &["threads"]), true, "3.10 threads");
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
        let (truth, events, sum) = known_run_target(t, &[], 2000);
        let ctx = format!("3.{minor} native");
        assert_eq!(truth.len(), 4000, "{ctx}");
        assert_callers(&truth, &events, &[("a", "via_a"), ("b", "via_b")], &sum, &ctx);
        let mut native = events.iter().filter(|(_, s, _)| s.iter().any(|f| f == "via_a" || f == "via_b"));
        assert!(native.clone().count() > 0 && native.all(|(_, s, _)| !s.iter().any(|f| f == "<module>")), "{ctx}");
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

/// The general-dynamic path of where a bound thread state is (a shared libpython's thread-local variable: CPython
/// 3.15 built with `--enable-shared`), on a library of the tests' own: its variable, found from its functions'
/// code and each thread's DTV, is at the address each thread says it has.
#[test]
fn a_shared_librarys_thread_local_variable_is_found_in_static_tls() {
    use syscatch::testing::live::{pystate, resolve};
    use syscatch::testing::model::modules;
    require_ptrace();
    let lib = shared_lib("tls_gd_lib");
    let mut t = Target::start(&testprog_linked("tls_gd", &[&lib], &[]), &[]);
    let lines = [t.out.next(), t.out.next()];
    let maps = resolve::read_maps(t.pid).unwrap();
    let g = modules::group_modules(&maps).into_iter().find(|m| m.path.ends_with("libtls_gd_lib.so")).unwrap();
    let m = resolve::read_module(t.pid, &g, None).unwrap();
    let mem = std::fs::File::open(format!("/proc/{}/mem", t.pid)).unwrap();
    let read = |a: u64| {
        let mut b = [0u8; 8];
        std::os::unix::fs::FileExt::read_exact_at(&mem, &mut b, a).ok().map(|_| u64::from_le_bytes(b))
    };
    let mut seen = Vec::new();
    for l in &lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (tp, addr) = (hex(w[1]), hex(w[2]));
        for f in ["tls_gd_get", "tls_gd_addr"] {
            let slot = pystate::tls_slot_of(&m, f, tp, &read).unwrap_or_else(|e| panic!("{l}: {f}: {e}"));
            assert_eq!(tp.wrapping_add_signed(slot as i64), addr, "{l}: {f}");
        }
        seen.push(w[0].to_string());
    }
    seen.sort();
    assert_eq!(seen, ["main", "thread"]);
    t.close_stdin();
    assert_eq!(t.wait().code(), Some(0));
}
