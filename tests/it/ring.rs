//! `--leaks --fast`'s ring: munmap calls written down without a stop, in order with the stops, across threads,
//! a full ring, the target's exit and exec; and what keeps syscatch's own work off a pinned target's CPUs.

use crate::common::*;
use crate::core::tracer_of;
use std::collections::HashMap;

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
        assert!(!(page..page + 0x52000).contains(&start), "{r}");
    }
    let munmaps = truth.values().flatten().filter(|c| c.0 == "munmap").count() as u64;
    // (The ring's calls also count the mmaps of known stacks, written there without a stop.)
    let ring = sum["from_ring"].as_u64().unwrap() - sum["from_known"].as_u64().unwrap();
    if lazy {
        assert!(ring > 0 && ring + 800 <= munmaps, "{ring} of {munmaps} munmaps through the ring: {sum}");
    } else {
        // Most: the known stacks' mmaps share the ring, and while the analysis is far behind (a debug build, a
        // loaded machine) the ring is left unread, so that calls stop once it is full (`Sink::behind`).
        assert!(ring * 4 >= munmaps * 3, "{ring} of {munmaps} munmaps without a stop: {sum}");
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
/// threads (unwinding, symbolizing, the symbol prefetch) and the sampler of the regions move to the other CPUs, so
/// they take no CPU time from the target.
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
    let me = sc.child.id().to_string();
    let task = format!("/proc/{me}/task");
    let others = if cpus == 2 { "0".to_string() } else { format!("0-{}", cpus - 2) };
    let moved = ["analysis", "syscatch-unwind", "syscatch-sample"];
    let mut seen = HashMap::new();
    // The unwinding thread is started by the analysis thread once it is running, and a new thread has syscatch's
    // name until it sets its own, then moves itself: looked at until every one has moved (30 s at most). The
    // main thread (the tracer) by its tid.
    let started = std::time::Instant::now();
    while !moved.iter().all(|w| seen.get(*w) == Some(&others)) && started.elapsed() < std::time::Duration::from_secs(30)
    {
        seen.clear();
        for e in std::fs::read_dir(&task).unwrap().flatten() {
            let dir = e.path();
            let main = e.file_name().to_str() == Some(me.as_str());
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default().trim().to_string();
            if comm == "syscatch" && !main {
                continue;
            }
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
    for name in moved {
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
/// fs base of the one before (its cached stack): 120 short threads in turn, each unmapping one page, beside two
/// busy ones. (300 took up to 48 s in a debug build beside two CPU burners: too near the harness's 60 s.)
#[test]
fn fast_ring_names_the_thread_of_each_call() {
    require_ptrace();
    let mut t = Target::start(&testprog("ring_threads"), &["120"]);
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
    assert_eq!(truth.len(), 120);
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
    assert_eq!(seen, 120);
    let out = json_lines(&out);
    assert!(summary_data(&out)["from_ring"].as_u64().unwrap() >= 120);
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}
