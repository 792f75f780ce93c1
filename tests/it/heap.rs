//! The malloc heap's own growth paths under `--leaks`: glibc's thread heaps, which grow by `mprotect` inside a
//! PROT_NONE reservation (no mmap, no PLT, no `syscall()`), charged to the stacks that committed them, to the byte
//! of what glibc says it committed. (`[heap]` through sbrk: `findings::glibc_keeps_freed_memory_resident...`.)

use crate::common::*;
use serde_json::Value;

fn of_type<'a>(values: &'a [Value], kind: &str) -> Vec<&'a Value> {
    values.iter().filter(|v| v["type"] == kind).map(|v| &v["data"]).collect()
}

fn functions(v: &Value) -> Vec<String> {
    v["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str().map(str::to_string)).collect()
}

/// A thread that leaks small blocks grows its arena one page at a time: every page glibc committed in its heap is
/// on its stacks (the heap's creation and each growth), and so is the churning thread's smaller arena. Each
/// growth is an `mprotect` through `--fast`'s trampoline: once a stack is known its calls are written to the ring
/// without a stop. Then the list is freed but its newest node and malloc_trim(0) gives the free pages back
/// (madvise, to the ring): the leaker's stacks hold what is still resident of its heap, to the byte. The thread that
/// frees fifteen blocks of every sixteen is named as a fragmented arena, its free bytes within 10% of what it
/// freed.
#[test]
fn thread_arenas_grow_on_the_stacks_that_committed_them() {
    require_ptrace();
    let mut t = Target::start(&testprog("heap_threads"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--json", "--smaps-every", "100ms"]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    t.send("trim");
    let trimmed = t.out.until(|l| l.starts_with("trimmed ")).pop().unwrap();
    let resident: u64 = trimmed["trimmed ".len()..].parse().unwrap();
    t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
    // Each arena's heap: its address and the bytes glibc committed in it.
    let arena = |name: &str| -> (u64, u64) {
        let line = lines.iter().find(|l| l.starts_with(&format!("arena {name} "))).expect("its arena line");
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields.len(), 4, "{name} used the main arena: {line}");
        (u64::from_str_radix(fields[2].trim_start_matches("0x"), 16).unwrap(), fields[3].parse().unwrap())
    };
    let values = json_lines(&out);
    let leaks = of_type(&values, "leak");
    // What the model holds in the heap's read-write region, by stack (its ---p rest is reserved, no one's).
    let hex = |v: &Value| u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let held_in = |heap: u64| -> (u64, Vec<u64>) {
        let regions = of_type(&values, "region");
        let r = regions.iter().find(|r| hex(&r["start"]) == heap).unwrap_or_else(|| panic!("{heap:#x}: {regions:#?}"));
        let stacks = r["stacks"].as_array().unwrap();
        (
            stacks.iter().map(|s| s["still_mapped"].as_u64().unwrap()).sum(),
            stacks.iter().map(|s| s["stack_id"].as_u64().unwrap()).collect(),
        )
    };
    let ((leaker, leaked), (churner, churned)) = (arena("leaker"), arena("churner"));
    assert!(leaked >= 24 << 20 && resident < leaked / 4, "{lines:?} {trimmed}");
    let (held, ids) = held_in(leaker);
    assert_eq!(held, resident, "the leaker's heap: {ids:?} {leaks:#?}");
    assert_eq!(held_in(churner).0, churned, "{leaks:#?}");
    // Its stacks are the leaker's (a burst of commits before a stack is known can outrun the analysis: those
    // calls come without their stack, said in a warning, and are counted all the same).
    let of_leaker = leaks.iter().filter(|v| ids.contains(&v["stack_id"].as_u64().unwrap()));
    assert!(of_leaker.clone().any(|v| functions(v).iter().any(|f| f == "leaker")), "{ids:?} {leaks:#?}");
    let unknown = of_leaker.clone().any(|v| v["stack"].as_array().unwrap().is_empty());
    let summary = of_type(&values, "summary")[0].clone();
    let warned =
        summary["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("without their stack"));
    assert!(!unknown || warned, "{summary:#?}");
    let (fragmenter, _) = arena("fragmenter");
    let freed: f64 = lines.iter().find_map(|l| l.strip_prefix("freed ")).unwrap().parse().unwrap();
    let findings = of_type(&values, "finding");
    let frag = findings.iter().find(|f| f["rule"] == "glibc-arena-fragmentation").expect("the fragmentation finding");
    let line = frag["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|e| e.starts_with(&format!("arena {:#x}:", fragmenter + 48)))
        .unwrap_or_else(|| panic!("{frag:#}"));
    let grew: f64 =
        line.split("in bins and fastbins (+").nth(1).unwrap().split(" MiB").next().unwrap().parse().unwrap();
    assert!((grew * 1048576.0 - freed).abs() <= freed / 10.0, "{line}: freed {freed}");
    assert!(!frag["evidence"].to_string().contains(&format!("{:#x}", churner + 48)), "{frag:#}");
    // The heap section: the fragmenter's arena was born during the trace, and holds what it freed as free.
    let heap = of_type(&values, "heap")[0];
    let a = heap["arenas"].as_array().unwrap().iter().find(|a| a["addr"] == format!("{:#x}", fragmenter + 48));
    let a = a.unwrap_or_else(|| panic!("{heap:#}"));
    assert!(a["before"].is_null() && a["after"]["free"].as_f64().unwrap() >= freed, "{a:#}");
    let calls: u64 = leaks.iter().map(|v| v["commits"].as_u64().unwrap()).sum();
    assert!(calls > 1000, "{calls} commits");
    let hits = summary["hits"].as_u64().unwrap();
    let from_ring = summary["from_ring"].as_u64().unwrap();
    assert!(hits >= calls && from_ring > 0, "{summary:#?}");
}

/// `mem`'s heap section reads every arena without stopping the process, and its sums are what the target's own
/// `mallinfo2()` says, to the byte: what malloc holds in its arenas and how much of it is free; the leaker's
/// arena holds its list in use (and no thread once the leaker exited), and after a trim that memory is free and no
/// longer resident.
#[test]
fn mem_reads_each_arena_as_mallinfo2_counts_it() {
    require_ptrace();
    arenas_as_mallinfo2_counts_them(Target::start(&testprog("heap_threads"), &[]), "2.36");
}

/// The same on glibc 2.41 (Debian trixie's root) and 2.43 (sid's, whose arenas have no fastbins).
#[test]
fn mem_reads_glibc_2_41_and_2_43_arenas_as_mallinfo2_counts_them() {
    require_ptrace();
    for (root, glibc) in [(crate::roots::trixie(), "2.41"), (crate::roots::sid(), "2.43")] {
        arenas_as_mallinfo2_counts_them(crate::roots::start_in(&root, &testprog("heap_threads"), &[]), glibc);
    }
}

fn arenas_as_mallinfo2_counts_them(mut t: Target, glibc: &str) {
    let pid = t.pid.to_string();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    let leaker = lines.iter().find(|l| l.starts_with("arena leaker ")).unwrap().split(' ').nth(2).unwrap().to_string();
    let heap_of = |t: &mut Target| -> (Vec<Value>, (u64, u64)) {
        let info = t.out.seen.iter().rev().find(|l| l.starts_with("mallinfo ")).unwrap().clone();
        let f: Vec<u64> = info.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
        let (code, out, err) = run_syscatch(&["mem", "--pid", &pid, "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        let heap = &v["data"]["heap"];
        assert!(heap["problem"].is_null(), "{heap:#}");
        assert_eq!(heap["glibc"], glibc, "{heap:#}");
        (heap["arenas"].as_array().unwrap().clone(), (f[0], f[1]))
    };
    let sum = |arenas: &[Value], k: &str| -> u64 { arenas.iter().map(|a| a[k].as_u64().unwrap()).sum() };
    let (arenas, (held, free)) = heap_of(&mut t);
    assert_eq!((sum(&arenas, "system_mem"), sum(&arenas, "free")), (held, free), "{arenas:#?}");
    assert_eq!(arenas.iter().filter(|a| a["main"] == true).count(), 1, "{arenas:#?}");
    let of_leaker = |arenas: &[Value]| -> Value {
        let want = u64::from_str_radix(leaker.trim_start_matches("0x"), 16).unwrap() + 48;
        arenas.iter().find(|a| a["addr"] == format!("{want:#x}")).cloned().unwrap_or_else(|| panic!("{arenas:#?}"))
    };
    let a = of_leaker(&arenas);
    assert!(a["in_use"].as_u64().unwrap() >= 24 << 20 && a["rss_kb"].as_u64().unwrap() >= 24 << 10, "{a:#}");
    // The workers have exited: their arenas wait for the next thread; the main thread is the main arena's.
    let main = arenas.iter().find(|a| a["main"] == true).unwrap();
    assert_eq!((main["threads"].as_u64(), a["threads"].as_u64()), (Some(1), Some(0)), "{arenas:#?}");
    t.send("trim");
    t.out.until(|l| l == "done");
    let (arenas, (held, free)) = heap_of(&mut t);
    assert_eq!((sum(&arenas, "system_mem"), sum(&arenas, "free")), (held, free), "{arenas:#?}");
    let a = of_leaker(&arenas);
    assert!(a["free"].as_u64().unwrap() >= 24 << 20 && a["rss_kb"].as_u64().unwrap() < 1024, "{a:#}");
    // Text: one line per arena.
    let (_, text, _) = run_syscatch(&["mem", "--pid", &pid]);
    assert!(text.contains(&format!("heap (glibc {glibc} ")) && text.contains("main arena ([heap])"), "{text}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}

/// Pages that come back where madvise gave them back made no call: malloc_trim gives a freed run of the `[heap]`
/// back, and the next mallocs reuse it. The region's growth there is said to be regrown (not "mapped before the
/// trace"), within 10% of what the program wrote again.
#[test]
fn memory_regrown_where_madvise_gave_it_back_is_named() {
    require_ptrace();
    let mut t = Target::start(&testprog("malloc_growth"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--json", "--smaps-every", "100ms"]);
    sc.wait_attached();
    t.send("regrow 256");
    let lines = t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
    let wrote: f64 = lines.iter().find_map(|l| l.strip_prefix("regrown ")).unwrap().parse().unwrap();
    let heap = lines.iter().find_map(|l| l.strip_prefix("heap ")).unwrap();
    let start = u64::from_str_radix(heap.split(' ').next().unwrap().trim_start_matches("0x"), 16).unwrap();
    let values = json_lines(&out);
    let hex = |v: &Value| u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let regions = of_type(&values, "region");
    let r = regions.iter().find(|r| hex(&r["start"]) <= start && start < hex(&r["end"]));
    let r = r.unwrap_or_else(|| panic!("no region holds the heap at {start:#x}: {regions:#?}"));
    let regrown = r["regrown_kb"].as_u64().unwrap() as f64 * 1024.0;
    assert!((regrown - wrote).abs() <= wrote / 10.0, "{regrown} regrown of {wrote} written again: {r:#}");
}

/// `--faults`: memory mapped before the trace and first touched during it makes no call at all; the page faults
/// sampled there carry the stacks that touched it. testprogs/touch.c touches the first 48 MiB of its region from its
/// main thread (touch_a) and the last 16 MiB from a thread started during the trace (its sampler opened when the
/// thread appears): the region's growth that no call explains is charged to the two stacks by their samples, 3 to 1
/// within 2% (every 32nd fault of each thread, whatever the order the two threads run in).
#[test]
fn growth_with_no_call_is_charged_to_the_page_faults_sampled_there() {
    require_ptrace();
    let mut t = Target::start(&testprog("touch"), &[]);
    let pid = t.pid.to_string();
    let rec = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("faults.rec");
    let folded = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("faults.folded");
    let mut sc = Syscatch::start(&[
        "--pid",
        &pid,
        "--faults",
        "--fault-every",
        "32",
        "--json",
        "--record",
        rec.to_str().unwrap(),
        "--folded",
        folded.to_str().unwrap(),
        "--weight",
        "faults",
    ]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
    let touched: Vec<u64> =
        lines.iter().find_map(|l| l.strip_prefix("touched ")).unwrap().split(' ').map(|v| v.parse().unwrap()).collect();
    let values = json_lines(&out);
    let faults = of_type(&values, "fault_stack");
    let charged = |f: &str| -> u64 {
        let of = faults.iter().filter(|v| functions(v).first().is_some_and(|g| g.starts_with(f)));
        of.map(|v| v["charged_kb"].as_u64().unwrap() * 1024).sum()
    };
    let (a, b) = (charged("touch_a"), charged("touch_b"));
    let summary = &of_type(&values, "summary")[0];
    // Within 2%, or within the faults a thread takes after its last sample (none stands for them): two periods of
    // pages, where the rate bound raised the period on a slow machine.
    let period = summary["fault_period_max"].as_u64().unwrap().max(32);
    let within =
        |got: u64, want: u64| (got as f64 - want as f64).abs() <= (want as f64 * 0.02).max((period * 8192) as f64);
    assert!(within(a, touched[0]) && within(b, touched[1]), "{a} {b} for {touched:?}: {faults:#?} {summary:#?}");
    // The rest of the stacks (a fault in libc's data, the new thread's start) hold next to nothing.
    let all: u64 = faults.iter().map(|v| v["charged_kb"].as_u64().unwrap() * 1024).sum();
    assert!(all - a - b < (1 << 20), "{faults:#?}");
    // `--weight faults`: the same charges as collapsed stacks (a memory growth flame graph), the leaf the toucher.
    let folded = std::fs::read_to_string(&folded).unwrap();
    let leaf = |f: &str| -> u64 {
        let of = folded.lines().filter(|l| l.rsplit_once(' ').unwrap().0.rsplit(';').next().unwrap().starts_with(f));
        of.map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum()
    };
    assert_eq!((leaf("touch_a"), leaf("touch_b")), (a, b), "{folded}");
    // At one in 32, or fewer where the rate bound raised the period (the charges above stand for the faults).
    let samples = summary["fault_samples"].as_u64().unwrap();
    assert!(samples >= (touched[0] + touched[1]) / 4096 / period, "{summary:#?}");
    assert!(faults.iter().all(|v| v["every"] == 32 && v["samples"].as_u64().unwrap() > 0), "{faults:#?}");
    // The recording keeps the samples (and the heap section's threads): the report of it is the live one's.
    let (code, replay, err) = run_syscatch(&["report", rec.to_str().unwrap(), "--leaks", "--json"]);
    assert_eq!(code, 0, "{err}");
    let replay = json_lines(&replay.lines().map(str::to_string).collect::<Vec<_>>());
    for kind in ["fault_stack", "heap"] {
        assert_eq!(of_type(&replay, kind), of_type(&values, kind), "{kind}");
    }
}

/// Seed case 001's shape with `--faults`: a pool of four Python worker threads, each with its own glibc arena,
/// warmed before the trace (each arena committed 24 MB with mprotect and trimmed it with madvise, keeping the
/// commitment), so during the trace every arena grows back with no call at all. The arenas' growth is charged to
/// the sampled page faults, and at least 90% of what the workers kept is charged to stacks whose Python frames
/// hold the endpoint's line (a fault is taken in glibc's malloc or in the copy of a list's resize, under it).
#[test]
fn a_thread_pools_arenas_that_regrow_with_no_call_are_charged_to_the_endpoints_line() {
    require_ptrace();
    let script = repo().join("testprogs/py_pool.py");
    let mut t = Target::start(std::path::Path::new("python3"), &[script.to_str().unwrap()]);
    let main_tid = t.pid as u64;
    t.send("warm");
    t.out.until(|l| l == "warm");
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--faults", "--json"]);
    sc.wait_attached();
    t.send("keep");
    let lines = t.out.until(|l| l.starts_with("line "));
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    // `mem` reads the same without a trace (glibc's own lists of its threads give their thread pointers).
    let (code, mem_out, mem_err) = run_syscatch(&["mem", "--pid", &pid, "--json"]);
    assert_eq!(code, 0, "{mem_err}");
    t.send("quit");
    assert_eq!(t.wait().code(), Some(0));
    let kept: u64 = lines.iter().find_map(|l| l.strip_prefix("kept ")).unwrap().parse().unwrap();
    let line: u64 = lines.iter().find_map(|l| l.strip_prefix("line ")).unwrap().parse().unwrap();
    let values = json_lines(&out);
    let faults = of_type(&values, "fault_stack");
    let at_line = |v: &Value| {
        v["stack"].as_array().unwrap().iter().any(|f| {
            f["kind"] == "python" && f["line"] == line && f["file"].as_str().is_some_and(|p| p.ends_with("py_pool.py"))
        })
    };
    let charged = |v: &&&Value| v["charged_kb"].as_u64().unwrap() * 1024;
    let on_line: u64 = faults.iter().filter(|v| at_line(v)).map(|v| charged(&v)).sum();
    assert!(on_line as f64 >= 0.9 * kept as f64, "{on_line} of {kept} on line {line}: {faults:#?}");
    // The arenas' regions grew with no call: what they grew is explained by the samples there.
    let regions = of_type(&values, "region");
    let sampled: Vec<&&Value> = regions.iter().filter(|r| r["fault_samples"].as_u64().unwrap() > 0).collect();
    assert!(sampled.len() >= 4, "an arena per worker: {regions:#?}");
    assert!(sampled.iter().all(|r| r["stacks"].as_array().unwrap().is_empty()), "{sampled:#?}");
    // The heap section names each arena's threads (their thread_arena, read with the thread pointers the trace
    // saw): each worker in a thread arena of its own, the main thread in the main arena; their tcaches are read.
    let workers: Vec<u64> =
        lines.iter().find_map(|l| l.strip_prefix("tids ")).unwrap().split(' ').map(|t| t.parse().unwrap()).collect();
    let heap = of_type(&values, "heap")[0];
    let arenas = heap["arenas"].as_array().unwrap();
    let tids = |a: &Value| -> Vec<u64> { a["tids"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect() };
    let main = arenas.iter().find(|a| a["main"] == true).unwrap_or_else(|| panic!("{heap:#}"));
    assert!(tids(main).contains(&main_tid), "{heap:#}");
    let mut theirs: Vec<String> = Vec::new();
    for w in &workers {
        let a = arenas.iter().find(|a| tids(a).contains(w)).unwrap_or_else(|| panic!("worker {w}: {heap:#}"));
        assert_eq!(a["main"], false, "{heap:#}");
        theirs.push(a["addr"].as_str().unwrap().to_string());
        let tcache = a["tcache"].as_u64().unwrap_or_else(|| panic!("{heap:#}"));
        assert!(tcache < 1 << 20, "{heap:#}");
    }
    theirs.sort();
    theirs.dedup();
    assert_eq!(theirs.len(), workers.len(), "an arena each: {heap:#}");
    let mem = json_lines(&mem_out.lines().map(str::to_string).collect::<Vec<_>>());
    let mem_heap = &mem[0]["data"]["heap"];
    let by_arena = |arenas: &[Value]| -> Vec<(String, Vec<u64>)> {
        arenas.iter().map(|a| (a["addr"].as_str().unwrap().to_string(), tids(a))).collect()
    };
    assert_eq!(by_arena(mem_heap["arenas"].as_array().unwrap()), by_arena(arenas), "{mem_heap:#}");
}

/// The same pool once each worker's objects are mostly dropped (15 of every 16): four arenas mostly free, their
/// pages resident between the objects left, seed case 001's picture. `--leaks` tells to cap the arenas
/// (`glibc-arenas`, MALLOC_ARENA_MAX=2), with each mostly free arena in its evidence; with MALLOC_ARENA_MAX=2 the
/// workers share two arenas and the advice is not given.
#[test]
fn a_thread_pools_spilled_arenas_are_told_to_cap_the_arenas() {
    require_ptrace();
    let script = repo().join("testprogs/py_pool.py");
    for cap in [None, Some("2")] {
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(&script).env_remove("MALLOC_ARENA_MAX").env_remove("GLIBC_TUNABLES");
        if let Some(n) = cap {
            cmd.env("MALLOC_ARENA_MAX", n);
        }
        let mut t = Target::start_cmd(&mut cmd);
        t.send("keep");
        t.out.until(|l| l.starts_with("line "));
        t.send("spill");
        t.out.until(|l| l == "spilled");
        let (code, out, err) = run_syscatch(&["--pid", &t.pid.to_string(), "--leaks", "--for", "300ms", "--json"]);
        assert_eq!(code, 0, "{err}");
        t.send("quit");
        assert_eq!(t.wait().code(), Some(0));
        let lines: Vec<String> = out.lines().map(str::to_string).collect();
        let values = json_lines(&lines);
        let findings = of_type(&values, "finding");
        let arenas = findings.iter().find(|f| f["rule"] == "glibc-arenas");
        match cap {
            None => {
                let f = arenas.unwrap_or_else(|| panic!("{findings:#?}"));
                let ev: Vec<&str> = f["evidence"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
                assert!(ev.iter().filter(|e| e.starts_with("arena 0x")).count() >= 4, "an arena per worker: {ev:#?}");
                assert!(f.to_string().contains("MALLOC_ARENA_MAX=2"), "{f:#}");
            }
            Some(_) => assert!(arenas.is_none(), "capped: {findings:#?}"),
        }
    }
}
