//! A trace of a whole server (`--pid P --tree --leaks`): testprogs/server.py starts its workers as vLLM does
//! (multiprocessing's spawn), one leaking through the UCX-shaped hook, one churning, one idle, and one more started
//! during the trace. One report: the leaking workers ranked first with the bytes their pool grew by (the workers
//! print it), the churning one a working set, the idle one flat; a process outside the tree is never stopped.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn of_pid<'a>(values: &'a [Value], kind: &str, pid: i32) -> Vec<&'a Value> {
    values.iter().filter(|v| v["type"] == kind && v["data"]["pid"] == pid).map(|v| &v["data"]).collect()
}

fn names(leak: &Value) -> Vec<String> {
    leak["stack"]
        .as_array()
        .map(|fs| fs.iter().filter_map(|f| f["function"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// "mark": the pool's bytes of each worker, by pid (the workers are paused, or have not started).
fn mark(server: &mut Target) -> BTreeMap<i32, u64> {
    server.send("mark");
    let mut pools = BTreeMap::new();
    for l in server.out.until(|l| l == "marked") {
        if let ["mark", _, pid, pool, _] = l.split_whitespace().collect::<Vec<_>>().as_slice() {
            pools.insert(pid.parse().unwrap(), pool.parse().unwrap());
        }
    }
    pools
}

/// Waits on syscatch's stderr until every pid of `pids` is attached and armed.
fn wait_attached(sc: &mut Syscatch, pids: &[i32]) {
    let mut left: Vec<i32> = pids.to_vec();
    while !left.is_empty() {
        let l = sc.err.next();
        left.retain(|p| !(l.contains("attached to") && l.contains(&format!(" of process {p};"))));
    }
}

#[test]
fn a_server_tree_is_one_report_that_ranks_the_leaking_workers_first() {
    require_ptrace();
    let lib = shared_lib("ucx_like_lib");
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("testprogs/server.py")).arg(&lib).env_remove("PYTHONMALLOC");
    let mut server = Target::start_cmd(&mut cmd);
    let mut workers: BTreeMap<String, i32> = BTreeMap::new();
    for l in server.out.until(|l| l == "ready") {
        if let ["worker", role, pid] = l.split_whitespace().collect::<Vec<_>>().as_slice() {
            workers.insert(role.to_string(), pid.parse().unwrap());
        }
    }
    let (leak, churn, idle) = (workers["leak"], workers["churn"], workers["idle"]);
    // A process outside the tree (the server's sibling, and its child).
    let mut sibling = Target::start(&testprog("family"), &["1"]);
    let mut outside = vec![sibling.pid];
    for l in sibling.out.until(|l| l == "ready") {
        if let Some(rest) = l.strip_prefix("child ") {
            outside.push(rest.split_whitespace().next().unwrap().parse().unwrap());
        }
    }
    let watch = StopWatch::start(outside);

    // Python's own unmaps feed the pool too (an arena freed while a worker waits): it may grow a chunk between
    // attaching and the mark after it, traced. So the pool is marked before the trace as well.
    let unseen = mark(&mut server);
    let server_pid = server.pid.to_string();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (folded, profile, flame) = (dir.join("server.folded"), dir.join("server.pb.gz"), dir.join("server.svg"));
    let rec = dir.join("server.rec");
    let mut sc = Syscatch::start(&[
        "--pid",
        &server_pid,
        "--tree",
        "--leaks",
        "--json",
        "--smaps-every",
        "250ms",
        "--folded",
        folded.to_str().unwrap(),
        "--pprof",
        profile.to_str().unwrap(),
        "--flamegraph",
        flame.to_str().unwrap(),
        "--record",
        rec.to_str().unwrap(),
        "--fail-over",
        "1KiB/min",
    ]);
    wait_attached(&mut sc, &[server.pid, leak, churn, idle]);
    server.send("spawn late");
    let late_line = server.out.next();
    let late: i32 = late_line.strip_prefix("worker late ").and_then(|p| p.parse().ok()).expect(&late_line);
    // It is traced before it does anything: the workers all start on "go".
    wait_attached(&mut sc, &[late]);
    let before = mark(&mut server);
    server.send("go");
    server.send("wait 2400");
    assert_eq!(server.out.next(), "waited");
    // Paused before the trace ends: what the pools hold at the end is what they held then.
    server.send("pause");
    assert_eq!(server.out.next(), "paused");
    let after = mark(&mut server);
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    let stops = watch.stops();
    // The leaking workers grew faster than --fail-over: the gate fails, naming them, after the whole report.
    assert_eq!(status.code(), Some(3), "{err:#?}");
    let gate = err.last().unwrap();
    assert!(gate.contains(&format!("process {leak}: the traced stacks grew ")), "{gate}");
    assert!(gate.contains(&format!("process {late}: ")) && !gate.contains(&format!("process {idle}:")), "{gate}");
    assert!(stops.is_empty(), "a process outside the tree was stopped: {stops:?}");
    for pid in [server.pid, leak, churn, idle, late] {
        assert_eq!(tracer_pid(pid), Some(0), "process {pid} detached");
    }
    // Every worker runs on after the trace (the server asks each of them).
    server.send("go");
    assert_eq!(mark(&mut server).len(), 4, "the workers answer after the trace");

    let values = json_lines(&out);
    assert!(
        values
            .iter()
            .filter(|v| v["type"] != "shared_finding" && v["type"] != "shared_stack")
            .all(|v| v["data"]["pid"].is_i64()),
        "every line of a process carries its pid"
    );
    let processes: Vec<&Value> = values.iter().filter(|v| v["type"] == "process").map(|v| &v["data"]).collect();
    let ranked: Vec<i64> = processes.iter().map(|p| p["pid"].as_i64().unwrap()).collect();
    let mut first_two = ranked[..2].to_vec();
    first_two.sort();
    let mut leakers = vec![i64::from(leak), i64::from(late)];
    leakers.sort();
    assert_eq!(first_two, leakers, "the leaking workers come first: {processes:#?}");
    for pid in [server.pid, churn, idle] {
        assert!(ranked.contains(&i64::from(pid)), "process {pid} is in the report: {processes:#?}");
    }
    let late_row = processes.iter().find(|p| p["pid"] == late).unwrap();
    assert!(late_row["joined"].as_f64().unwrap() > 0.0, "{late_row}");

    // Each leaking worker's pool: every chunk it mapped during the trace, on its stack (or on none where the
    // analysis dropped a stack, which the summary says).
    for pid in [leak, late] {
        // At least what it grew by between the marks; at most what it grew by since before the trace.
        let grown = after[&pid] - before[&pid];
        let most = after[&pid] - unseen.get(&pid).copied().unwrap_or(0);
        assert!(grown > 0, "worker {pid}'s pool grew: {before:?} {after:?}");
        let leaks = of_pid(&values, "leak", pid);
        let pool: u64 = leaks
            .iter()
            .filter(|l| names(l).iter().any(|n| n == "ucs_mpool_grow"))
            .map(|l| l["still_mapped"].as_u64().unwrap())
            .sum();
        let no_stack: u64 = leaks
            .iter()
            .filter(|l| l["stack"].as_array().is_none_or(|s| s.is_empty()))
            .map(|l| l["still_mapped"].as_u64().unwrap())
            .sum();
        assert!(pool <= most && pool + no_stack >= grown, "worker {pid}: {grown} to {most} grown, {pool} + {no_stack}");
        assert!(no_stack == 0 || err.iter().any(|l| l.contains("without their stack")), "{err:#?}");
        let first = leaks.first().unwrap_or_else(|| panic!("worker {pid} has leak candidates: {out:#?}"));
        assert!(names(first).iter().any(|n| n == "ucs_mpool_grow"), "worker {pid}: {first}");
    }
    // The finding that holds in both leaking workers is said once, with both.
    let shared: Vec<&Value> = values.iter().filter(|v| v["type"] == "shared_finding").map(|v| &v["data"]).collect();
    let ucx = shared.iter().find(|f| f["rule"] == "ucx-rcache-invalidation").expect("the UCX finding");
    let mut holds: Vec<i64> = ucx["processes"].as_array().unwrap().iter().map(|p| p["pid"].as_i64().unwrap()).collect();
    holds.sort();
    assert_eq!(holds, leakers, "{ucx}");
    // And the pool's stack, the same code in both (any addresses), is one line with each worker's figures.
    let stacks: Vec<&Value> = values.iter().filter(|v| v["type"] == "shared_stack").map(|v| &v["data"]).collect();
    let pool = stacks
        .iter()
        .find(|s| s["frames"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().starts_with("ucs_mpool_grow ")))
        .unwrap_or_else(|| panic!("the pool's stack across processes: {stacks:#?}"));
    let mut holds: Vec<i64> =
        pool["processes"].as_array().unwrap().iter().map(|p| p["pid"].as_i64().unwrap()).collect();
    holds.sort();
    assert_eq!(holds, leakers, "{pool}");
    let leak_row = processes.iter().find(|p| p["pid"] == leak).unwrap();
    assert!(leak_row["lasting_mib_per_min"].as_f64().unwrap() > 0.0, "{leak_row}");
    // In a word each: the leakers grow, the churning worker churns, the idle one and the server are flat.
    let verdict = |pid: i32| processes.iter().find(|p| p["pid"] == pid).map(|p| p["verdict"].clone());
    for (pid, want) in [(leak, "growing"), (late, "growing"), (churn, "churning"), (idle, "flat")] {
        assert_eq!(verdict(pid), Some(Value::from(want)), "process {pid}: {processes:#?}");
    }
    // The churning worker's temporaries are a working set, not growth; the idle one holds nothing traced.
    let temps = |l: &&Value| names(l).iter().any(|n| n == "new_mmap_object");
    assert!(of_pid(&values, "working_set", churn).iter().any(temps), "{out:#?}");
    assert!(!of_pid(&values, "leak", churn).iter().any(|l| temps(l) && l["verdict"] == "growth"), "{out:#?}");
    assert!(!of_pid(&values, "leak", idle).iter().any(|l| l["verdict"] == "growth"), "{out:#?}");
    // One folded file and one profile for the tree: each process's stacks under a root frame naming it (as
    // py-spy's), each sample labelled with its process.
    let folded = std::fs::read_to_string(&folded).unwrap();
    assert!(folded.lines().all(|l| l.starts_with("process ")), "{folded}");
    for pid in [leak, late] {
        let root = format!("process {pid}:\"");
        assert!(folded.lines().any(|l| l.starts_with(&root) && l.contains(";ucs_mpool_grow;")), "{folded}");
    }
    let svg = std::fs::read_to_string(&flame).unwrap();
    assert!(svg.contains(&format!("process {leak}:&quot;")) && svg.contains("ucs_mpool_grow"), "{svg}");
    let go = |args: &[&str]| {
        let o = Command::new("go").args(["tool", "pprof"]).args(args).arg(&profile).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let tags = go(&["-tags"]);
    assert!(tags.contains(" pid:") && tags.contains(" process:"), "{tags}");
    // (A regular expression: pprof takes a bare number for a range of numeric labels.)
    let focus = format!("-tagfocus=pid=^{late}$");
    let traces = go(&["-traces", &focus]);
    let pids: Vec<&str> = traces.lines().filter_map(|l| l.trim().strip_prefix("pid:")).map(str::trim).collect();
    assert!(traces.contains("ucs_mpool_grow") && pids.iter().all(|p| *p == late.to_string()), "{traces}");
    assert!(!pids.is_empty(), "{traces}");
    recorded_session_reports_as_live(&rec, &processes, leak);
    // syscatch's own cost, in all and by process.
    assert!(
        err.iter().any(|l| l.starts_with("syscatch: ")
            && l.contains(" processes traced for ")
            && l.contains("MiB a process")),
        "{err:#?}"
    );
    // Each process's summary is said on stderr as its own.
    for pid in [server.pid, leak, churn, idle, late] {
        assert!(err.iter().any(|l| l.starts_with(&format!("syscatch: process {pid}: "))), "{err:#?}");
    }
}

/// The session's recording reports as the live session did: the same processes and verdicts; one of them alone
/// with --pid; compared with itself, each process with its own (matched by command line, in pid order), no change.
fn recorded_session_reports_as_live(rec: &std::path::Path, live: &[&Value], leak: i32) {
    let rec = rec.to_str().unwrap();
    let parts: Vec<_> = std::fs::read_dir(std::path::Path::new(rec).parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
        .collect();
    assert!(parts.is_empty(), "the parts are joined and removed: {parts:?}");
    let (code, out, err) = run_syscatch(&["report", rec, "--leaks", "--json"]);
    assert_eq!(code, 0, "{err}");
    let values = json_text(&out);
    let verdicts = |ps: &[&Value]| -> BTreeMap<i64, Value> {
        ps.iter().map(|p| (p["pid"].as_i64().unwrap(), p["verdict"].clone())).collect()
    };
    let replayed: Vec<&Value> = values.iter().filter(|v| v["type"] == "process").map(|v| &v["data"]).collect();
    assert_eq!(verdicts(&replayed), verdicts(live), "{replayed:#?}");
    let first = of_pid(&values, "leak", leak);
    assert!(first.first().is_some_and(|l| names(l).iter().any(|n| n == "ucs_mpool_grow")), "{out}");

    let (code, out, err) = run_syscatch(&["report", rec, "--pid", &leak.to_string(), "--leaks", "--json"]);
    assert_eq!(code, 0, "{err}");
    let values = json_text(&out);
    assert!(!values.iter().any(|v| v["type"] == "process"), "one process's report: {out}");
    let leaks: Vec<&Value> = values.iter().filter(|v| v["type"] == "leak").map(|v| &v["data"]).collect();
    assert!(leaks.first().is_some_and(|l| names(l).iter().any(|n| n == "ucs_mpool_grow")), "{out}");
    let (code, _, err) = run_syscatch(&["report", rec, "--pid", "1", "--leaks"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no recording of process 1"), "{err}");

    let (code, out, err) = run_syscatch(&["report", "--diff", rec, rec, "--json"]);
    assert_eq!(code, 0, "{err}");
    let values = json_text(&out);
    let pairs: Vec<(i64, i64)> = values
        .iter()
        .filter(|v| v["type"] == "process")
        .map(|v| (v["data"]["pid"].as_i64().unwrap(), v["data"]["base_pid"].as_i64().unwrap()))
        .collect();
    assert_eq!(pairs.len(), live.len(), "{out}");
    assert!(pairs.iter().all(|(a, b)| a == b), "{pairs:?}");
}

/// A process that exits during the trace leaves it, said in its row, and the others go on; then a session whose
/// syscatch is SIGKILLed leaves every process running, restored by its own guardian.
#[test]
fn a_process_leaves_the_session_and_a_killed_session_harms_none() {
    require_ptrace();
    let prog = testprog("target");
    let (mut a, mut b, mut c) = (Target::start(&prog, &[]), Target::start(&prog, &[]), Target::start(&prog, &[]));
    let list = format!("{},{},{}", a.pid, b.pid, c.pid);
    let mut sc = Syscatch::start(&["--pid", &list, "--leaks", "--json", "--smaps-every", "100ms"]);
    wait_attached(&mut sc, &[a.pid, b.pid, c.pid]);
    let a_pid = a.pid;
    a.send("exit 7");
    assert_eq!(a.wait().code(), Some(7), "it exits as it would untraced");
    b.send("mmap 3");
    let kept: u64 = truth_mmaps(&b.out.until(|l| l == "ok")).iter().map(|m| m.1).sum();
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let values = json_lines(&out);
    let row =
        |pid: i32| values.iter().find(|v| v["type"] == "process" && v["data"]["pid"] == pid).map(|v| v["data"].clone());
    assert_eq!(row(a_pid).map(|r| r["end"].clone()), Some(Value::from("exited (7)")), "{out:#?}");
    assert_eq!(row(b.pid).map(|r| r["end"].clone()), Some(Value::from("stopped")), "{out:#?}");
    let held: u64 = of_pid(&values, "leak", b.pid).iter().map(|l| l["still_mapped"].as_u64().unwrap()).sum();
    assert!(held >= kept, "{kept} bytes mapped by process {}, {held} held: {out:#?}", b.pid);

    // SIGKILLed with both armed: each guardian puts its process's bytes back; both run on and map as before.
    let list = format!("{},{}", b.pid, c.pid);
    let mut sc = Syscatch::start(&["--pid", &list, "--leaks"]);
    wait_attached(&mut sc, &[b.pid, c.pid]);
    sc.signal(libc::SIGKILL);
    let (status, _, err) = sc.finish();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{err:#?}");
    for t in [&mut b, &mut c] {
        assert!(poll(|| tracer_pid(t.pid) == Some(0)), "process {} let go", t.pid);
        t.send("mmap 2");
        assert_eq!(truth_mmaps(&t.out.until(|l| l == "ok")).len(), 2, "process {} maps after the kill", t.pid);
        assert_text_pristine_but_gate(t.pid, &format!("process {} after syscatch's SIGKILL", t.pid));
    }
}
