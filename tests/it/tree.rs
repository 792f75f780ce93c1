//! Several processes at once (`--pid 10,11`, `--tree`): `mem`, `stack` and `hooks` over a real process tree
//! (testprogs/family.c: a parent, children that each map and touch a size they print, a zombie), the processes
//! outside the selection never stopped, and the bad input of a list (a missing pid, a thread's id, a pid named
//! twice, a tree above --max-processes).

use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The family and what it printed: its children with the bytes each touched, the zombie, the second thread.
struct Family {
    t: Target,
    children: BTreeMap<i32, u64>,
    zombie: Option<i32>,
    thread: i32,
}

fn family(children: usize, zombie: bool) -> Family {
    let n = children.to_string();
    let mut args = vec![n.as_str()];
    if zombie {
        args.push("zombie");
    }
    let mut t = Target::start(&testprog("family"), &args);
    let (mut kids, mut z, mut thread) = (BTreeMap::new(), None, 0);
    for l in t.out.until(|l| l == "ready") {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["child", pid, bytes] => {
                kids.insert(pid.parse().unwrap(), bytes.parse().unwrap());
            }
            ["zombie", pid] => z = Some(pid.parse().unwrap()),
            ["thread", tid] => thread = tid.parse().unwrap(),
            _ => {}
        }
    }
    assert_eq!(kids.len(), children);
    Family { t, children: kids, zombie: z, thread }
}

#[test]
fn mem_of_a_tree_has_a_row_per_process_and_a_total() {
    let f = family(3, true);
    let sibling = family(1, false);
    let (code, out, err) = run_syscatch(&["mem", "--pid", &f.t.pid.to_string(), "--tree", "--json"]);
    assert_eq!(code, 0, "{err}");
    let zombie = f.zombie.unwrap();
    assert!(
        err.contains(&format!("process {zombie} (family) in the tree is skipped: a zombie")),
        "the zombie is named and skipped: {err}"
    );
    let v = json_text(&out);
    let mems: Vec<&Value> = v.iter().filter(|l| l["type"] == "mem").map(|l| &l["data"]).collect();
    let pids: BTreeSet<i64> = mems.iter().map(|d| d["pid"].as_i64().unwrap()).collect();
    let want: BTreeSet<i64> = f.children.keys().map(|&p| p as i64).chain([f.t.pid as i64]).collect();
    assert_eq!(pids, want, "the parent and its live children, nobody else (not the sibling, not the zombie)");
    for (&pid, &bytes) in &f.children {
        let d = mems.iter().find(|d| d["pid"] == pid).unwrap();
        let anon = d["classes"].as_array().unwrap().iter().find(|c| c["class"] == "anon_large").unwrap();
        assert!(
            anon["rss_kb"].as_u64().unwrap() * 1024 >= bytes,
            "child {pid} touched {bytes} bytes of anonymous memory: {anon}"
        );
        assert!(d["command"].as_str().unwrap().starts_with("family"), "{d}");
    }
    let total = v.iter().find(|l| l["type"] == "total").expect("a total line");
    let sum: u64 = mems.iter().map(|d| d["total"]["rss_swap_kb"].as_u64().unwrap()).sum();
    assert_eq!(total["data"]["rss_swap_kb"], sum);
    assert_eq!(total["data"]["processes"], mems.len());
    drop(sibling);

    // The table: a row per process, the largest child first, and the total.
    let (code, out, err) = run_syscatch(&["mem", "--pid", &f.t.pid.to_string(), "--tree"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = out.lines().skip(1).collect();
    let biggest = f.children.iter().max_by_key(|(_, b)| **b).map(|(p, _)| *p).unwrap();
    assert!(rows[0].trim_start().starts_with(&format!("{biggest} ")), "{out}");
    assert!(rows.iter().any(|r| r.trim_start().starts_with("total") && r.ends_with("4 processes")), "{out}");
}

#[test]
fn stack_of_a_list_dumps_each_process_and_stops_no_other() {
    let f = family(2, false);
    let sibling = family(1, false);
    let outside: Vec<i32> = sibling.children.keys().copied().chain([sibling.t.pid]).collect();
    let watch = StopWatch::start(outside);
    let kid = *f.children.keys().next().unwrap();
    let list = format!("{},{kid}", f.t.pid);
    let (code, out, err) = run_syscatch(&["stack", "--pid", &list, "--pid", &kid.to_string(), "--json"]);
    let stops = watch.stops();
    assert_eq!(code, 0, "{err}");
    assert!(stops.is_empty(), "a process outside the selection was stopped: {stops:?}");
    let v = json_text(&out);
    let procs: Vec<i64> =
        v.iter().filter(|l| l["type"] == "process").map(|l| l["data"]["pid"].as_i64().unwrap()).collect();
    assert_eq!(procs, [f.t.pid as i64, kid as i64], "each process once, in the order named");
    let threads: Vec<&Value> = v.iter().filter(|l| l["type"] == "thread").map(|l| &l["data"]).collect();
    let of = |pid: i32| threads.iter().filter(|t| t["pid"] == pid).count();
    assert_eq!(of(f.t.pid), 2, "the parent's two threads");
    assert_eq!(of(kid), 1, "the child's one thread");
    assert!(threads.iter().any(|t| t["tid"] == f.thread && t["pid"] == f.t.pid));
    // Every thread's stack reaches main (or the thread's start), in its own process.
    for t in &threads {
        let names: Vec<&str> = t["stack"].as_array().unwrap().iter().filter_map(|fr| fr["function"].as_str()).collect();
        assert!(names.iter().any(|n| matches!(*n, "main" | "idle" | "child")), "{t}");
    }
    assert_eq!(summary_data(&v)["processes"], 2);
    assert_eq!(summary_data(&v)["threads"], 3);

    // Text: a header per process.
    let (code, out, err) = run_syscatch(&["stack", "--pid", &list]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("process {}: family", f.t.pid)), "{out}");
    assert!(out.contains(&format!("\nprocess {kid}: family")), "{out}");
}

#[test]
fn hooks_of_a_tree_fold_processes_with_the_same_verdicts() {
    let f = family(3, false);
    let (code, out, err) = run_syscatch(&["hooks", "--pid", &f.t.pid.to_string(), "--tree"]);
    assert_eq!(code, 0, "{err}");
    // The children are forks of one binary that called the same functions: one verdict block for the three.
    let kids: Vec<String> = f.children.keys().map(|p| p.to_string()).collect();
    assert!(
        out.lines().any(|l| l.starts_with("same in ") && kids.iter().all(|k| l.contains(k.as_str()))),
        "the children's identical verdicts are folded: {out}"
    );
    let blocks = out.lines().filter(|l| l.starts_with("mmap: ")).count();
    assert!((1..=2).contains(&blocks), "four processes in at most two blocks: {out}");
    for k in &kids {
        assert!(err.contains(&format!("process {k}: ")), "a line of counts per process: {err}");
    }
    let (code, out, err) = run_syscatch(&["hooks", "--pid", &f.t.pid.to_string(), "--tree", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json_text(&out);
    assert_eq!(v.iter().filter(|l| l["type"] == "process").count(), 4);
    assert!(
        v.iter().filter(|l| l["type"] != "process").all(|l| l["data"]["pid"].is_i64()),
        "every line carries its pid"
    );
    for pid in f.children.keys().chain([&f.t.pid]) {
        assert!(v.iter().any(|l| l["type"] == "verdict" && l["data"]["pid"] == *pid), "verdicts of {pid}");
    }
}

#[test]
fn a_list_with_a_missing_pid_does_the_others_and_says_so() {
    let f = family(1, false);
    let pid = f.t.pid.to_string();
    // Above pid_max: no such process, ever.
    let missing = "2147483647";
    let (code, out, err) = run_syscatch(&["mem", "--pid", &format!("{pid},{missing}"), "--json"]);
    assert_eq!(code, 4, "exit status 4: some named were missing: {err}");
    assert_eq!(err.trim(), format!("syscatch: no process with pid {missing}"));
    let v = json_text(&out);
    assert_eq!(v.iter().filter(|l| l["type"] == "mem").count(), 1);
    assert_eq!(v.iter().find(|l| l["type"] == "mem").unwrap()["data"]["pid"], f.t.pid);

    // A thread's id names its process; a pid named twice is looked at once.
    let (code, _, err) = run_syscatch(&["hooks", "--pid", &format!("{pid},{},{pid}", f.thread)]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains(&format!("{} is a thread of process {pid} (family); use --pid {pid}", f.thread)), "{err}");
    assert_eq!(err.matches(&format!("process {pid}: ")).count(), 1, "checked once: {err}");

    // Every pid missing: an error, as a single missing pid always was.
    let (code, _, err) = run_syscatch(&["stack", "--pid", &format!("{missing},2147483646")]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err.trim(),
        "syscatch: none of the processes named can be looked at: no process with pid 2147483647; no process with \
         pid 2147483646",
        "one line naming each"
    );

    // A tree above the limit is refused before anything is read.
    let (code, out, err) = run_syscatch(&["mem", "--pid", &pid, "--tree", "--max-processes", "1"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains("2 processes selected, above the limit of 1"), "{err}");

    // A session's file that cannot be created is refused before anything is attached.
    let kid = f.children.keys().next().unwrap().to_string();
    let both = format!("{pid},{kid}");
    let (code, _, err) = run_syscatch(&["--pid", &both, "--leaks", "--html", "/nonexistent/x.html", "--for", "1s"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.trim(), "syscatch: cannot create /nonexistent/x.html: No such file or directory (os error 2)");
    assert_eq!(tracer_pid(f.t.pid), Some(0));
}

/// Without --leaks, several processes' events come as they happen (on stdout, or in the file of `-o`), each of
/// them marked with its process, exact.
#[test]
fn events_of_two_processes_each_carry_their_pid() {
    require_ptrace();
    let prog = testprog("target");
    let (mut a, mut b) = (Target::start(&prog, &[]), Target::start(&prog, &[]));
    let list = format!("{},{}", a.pid, b.pid);
    let file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("two_processes.jsonl");
    for (json, to_file) in [(true, false), (false, false), (true, true)] {
        let mut args = vec!["--pid", list.as_str()];
        if json {
            args.push("--json");
        }
        if to_file {
            args.extend(["-o", file.to_str().unwrap()]);
        }
        let mut sc = Syscatch::start(&args);
        sc.wait_attached();
        sc.wait_attached();
        let ta = truth_mmaps(&{
            a.send("mmap 2");
            a.out.until(|l| l == "ok")
        });
        let tb = truth_mmaps(&{
            b.send("mmap 3");
            b.out.until(|l| l == "ok")
        });
        sc.signal(libc::SIGINT);
        let (status, mut out, err) = sc.finish();
        assert!(status.success(), "{err:#?}");
        if to_file {
            assert!(out.is_empty(), "{out:#?}");
            out = std::fs::read_to_string(&file).unwrap().lines().map(str::to_string).collect();
        }
        if json {
            let values = json_lines(&out);
            let of = |pid: i32| {
                let v: Vec<Value> =
                    values.iter().filter(|v| v["type"] != "event" || v["data"]["pid"] == pid).cloned().collect();
                captured_mmaps(&v.into_iter().filter(|v| v["type"] == "event").collect::<Vec<_>>())
            };
            assert_eq!(of(a.pid), ta, "{out:#?}");
            assert_eq!(of(b.pid), tb, "{out:#?}");
            assert!(values.iter().all(|v| v["data"]["pid"].is_i64()), "every line carries its pid");
        } else {
            for (t, n) in [(&a, 2), (&b, 3)] {
                let mark = format!("[pid {}] ", t.pid);
                let calls = out.iter().filter(|l| l.starts_with(&mark) && l.contains(" mmap(")).count();
                assert_eq!(calls, n, "{out:#?}");
            }
            assert!(out.iter().all(|l| l.starts_with("[pid ")), "{out:#?}");
        }
        assert!(err.iter().any(|l| l.starts_with(&format!("syscatch: process {}: ", b.pid))), "{err:#?}");
    }
}
