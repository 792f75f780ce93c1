//! `syscatch mem`: the memory breakdown of real processes from /proc alone, checked against the ground truth the
//! targets print (glibc's own chunk headers and heap_info), the allocator and environment they run with, and
//! `--watch` seeing memory the target maps while it is watched.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

const JEMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string").trim_start_matches("0x"), 16).expect("hex")
}

/// Starts `arenas` with extra environment and returns it with its report lines (up to "ready").
fn start_arenas(args: &[&str], env: &[(&str, &str)]) -> (Target, Vec<String>) {
    let prog = testprog("arenas");
    let mut cmd = Command::new(&prog);
    cmd.args(args).env_remove("MALLOC_ARENA_MAX").env_remove("LD_PRELOAD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut t = Target::start_cmd(&mut cmd);
    let lines = t.out.until(|l| l == "ready");
    (t, lines)
}

/// The thread arenas and heaps the target's threads saw, and how many threads were in the main arena.
fn truth(lines: &[String]) -> (BTreeSet<u64>, BTreeSet<u64>, usize) {
    let (mut arenas, mut heaps, mut main) = (BTreeSet::new(), BTreeSet::new(), 0);
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["arena", _, "main"] => main += 1,
            ["arena", _, a] => {
                arenas.insert(u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap());
            }
            ["heap", _, h] => {
                heaps.insert(u64::from_str_radix(h.trim_start_matches("0x"), 16).unwrap());
            }
            _ => {}
        }
    }
    (arenas, heaps, main)
}

/// Runs `syscatch mem --pid PID --json` and returns the one `mem` record's data.
fn mem_json(pid: i32) -> Value {
    let (code, out, err) = run_syscatch(&["mem", "--pid", &pid.to_string(), "--json"]);
    assert_eq!(code, 0, "syscatch mem failed: {err}");
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    let v = json_lines(&lines);
    assert_eq!(v.len(), 1, "one JSON line: {out}");
    assert_eq!(v[0]["type"], "mem");
    v[0]["data"].clone()
}

fn class<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["class"] == name)
        .unwrap_or_else(|| panic!("class {name} in {d}"))
}

#[test]
fn counts_the_thread_arenas_the_threads_report() {
    let (t, lines) = start_arenas(&["12"], &[]);
    let (arenas, heaps, _) = truth(&lines);
    assert!(arenas.len() > 1, "the target made several thread arenas: {lines:#?}");
    assert!(heaps.len() > arenas.len(), "thread 0's arena grew past one heap: {lines:#?}");

    let d = mem_json(t.pid);
    let got: BTreeSet<u64> = d["arenas"]["addrs"].as_array().unwrap().iter().map(hex).collect();
    assert_eq!(got, arenas, "the owning arenas read from the heaps are those the threads report");
    assert_eq!(d["arenas"]["count"], arenas.len());
    assert_eq!(d["arenas"]["unread_heaps"], 0);
    let heap_count = d["arenas"]["heaps"].as_u64().unwrap() as usize;
    assert!(heap_count >= heaps.len(), "every heap holding a block is counted: {heap_count} < {}", heaps.len());
    assert!(d["arenas"]["rss_swap_kb"].as_u64().unwrap() > 0);
    assert_eq!(class(&d, "malloc_arenas")["rss_swap_kb"], d["arenas"]["rss_swap_kb"]);
    // 12 workers asleep in pthread_cond_wait (the target waits for that) and the main thread, on its way to
    // reading stdin: at least the workers' stack pointers are located.
    assert_eq!(d["threads"]["count"], 13);
    assert!(d["threads"]["located"].as_u64().unwrap() >= 12, "{d}");
    assert_eq!(d["threads"]["stack_regions"], 13);
    assert_eq!(d["allocator"]["name"], "glibc");
    assert_eq!(d["pid"], t.pid);
    let sum: u64 = d["classes"].as_array().unwrap().iter().map(|c| c["rss_kb"].as_u64().unwrap()).sum();
    assert_eq!(sum, d["total"]["rss_kb"].as_u64().unwrap(), "classes partition the regions");

    // The text view says the same.
    let (code, out, _) = run_syscatch(&["mem", "--pid", &t.pid.to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("{heap_count} heaps in {} arenas", arenas.len())), "{out}");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn arena_advice_comes_from_the_findings_rules() {
    let (mut t, _) = start_arenas(&["12"], &[]);
    t.send("spill");
    t.out.until(|l| l == "spilled");
    let d = mem_json(t.pid);
    let advice: Vec<&str> = d["advice"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
    let arenas = advice.iter().find(|a| a.ends_with("[rule glibc-arenas]")).unwrap_or_else(|| panic!("{d}"));
    assert!(arenas.contains("MALLOC_ARENA_MAX=2") && arenas.contains("MALLOC_ARENA_MAX unset"), "{arenas}");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn malloc_arena_max_two_leaves_at_most_one_thread_arena() {
    let (t, lines) = start_arenas(&["12"], &[("MALLOC_ARENA_MAX", "2")]);
    let (arenas, _, main) = truth(&lines);
    // The first thread to malloc makes the one thread arena allowed; the others share it or the main arena.
    assert_eq!(arenas.len(), 1, "{lines:#?}");
    assert_eq!(main + lines.iter().filter(|l| l.starts_with("arena ") && !l.ends_with("main")).count(), 12);
    let d = mem_json(t.pid);
    let got: BTreeSet<u64> = d["arenas"]["addrs"].as_array().unwrap().iter().map(hex).collect();
    assert_eq!(got, arenas);
    assert!(d["arenas"]["count"].as_u64().unwrap() <= 1);
    assert_eq!(d["env"]["MALLOC_ARENA_MAX"], "2");
    assert!(
        d["advice"].as_array().unwrap().iter().all(|a| !a.as_str().unwrap().contains("MALLOC_ARENA_MAX")),
        "no arena advice when the arenas are already capped: {d}"
    );
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn jemalloc_preloaded_is_named_with_its_malloc_conf() {
    assert!(std::path::Path::new(JEMALLOC).exists(), "{JEMALLOC} is missing: apt-get install libjemalloc2");
    let conf = "narenas:2,dirty_decay_ms:1000";
    let (t, _) = start_arenas(&["4", "0"], &[("LD_PRELOAD", JEMALLOC), ("MALLOC_CONF", conf)]);
    let d = mem_json(t.pid);
    assert_eq!(d["allocator"]["name"], "jemalloc", "{d}");
    assert_eq!(d["allocator"]["library"], JEMALLOC);
    assert_eq!(d["env"]["MALLOC_CONF"], conf);
    assert_eq!(d["env"]["LD_PRELOAD"], JEMALLOC);
    assert!(
        d["advice"].as_array().unwrap().iter().all(|a| !a.as_str().unwrap().contains("MALLOC_CONF")),
        "MALLOC_CONF is in effect under jemalloc: {d}"
    );
    let (code, out, _) = run_syscatch(&["mem", "--pid", &t.pid.to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("allocator: jemalloc ({JEMALLOC})")), "{out}");
    assert!(out.contains(&format!("MALLOC_CONF={conf}")), "{out}");
    // What is not read of it is said: its figures need a call inside the process.
    assert!(out.contains("heap (jemalloc): not read: ") && out.contains("mallctl"), "{out}");
    assert_eq!(d["heap"]["allocator"], "jemalloc", "{d}");
    assert_eq!(t.wait().code(), Some(0));
}

/// jemalloc, tcmalloc and mimalloc (Debian's packages) each preloaded into a C program and into Python: named
/// with their library, their own variables from the environment (`MALLOC_CONF`, `TCMALLOC_*`, `MIMALLOC_*`) and,
/// for jemalloc, the options the program compiled in (`malloc_conf`); the other allocators' variables are said to
/// have no effect there.
#[test]
fn each_preloaded_allocator_is_named_with_its_settings() {
    require_ptrace();
    let dir = "/usr/lib/x86_64-linux-gnu";
    let env =
        [("MALLOC_CONF", "background_thread:true"), ("TCMALLOC_RELEASE_RATE", "5"), ("MIMALLOC_PURGE_DELAY", "0")];
    let python = "import os, sys; print('pid', os.getpid(), flush=True); x = [bytes(1000) for _ in range(1000)]; \
                  sys.stdin.readline()";
    for (name, lib, own) in [
        ("jemalloc", "libjemalloc.so.2", "MALLOC_CONF"),
        ("tcmalloc", "libtcmalloc_minimal.so.4", "TCMALLOC_RELEASE_RATE"),
        ("mimalloc", "libmimalloc.so.2", "MIMALLOC_PURGE_DELAY"),
    ] {
        let path = format!("{dir}/{lib}");
        assert!(std::path::Path::new(&path).exists(), "{path} is missing (scripts/test.sh installs it)");
        for target in ["c", "python"] {
            let mut cmd = match target {
                "c" => Command::new(testprog("alloc_conf")),
                _ => {
                    let mut c = Command::new("python3");
                    c.args(["-c", python]);
                    c
                }
            };
            cmd.env_remove("MALLOC_ARENA_MAX").env("LD_PRELOAD", &path).envs(env);
            let mut t = Target::start_cmd(&mut cmd);
            let d = mem_json(t.pid);
            let ctx = format!("{name} in {target}");
            assert_eq!(d["allocator"]["name"], name, "{ctx}: {d}");
            assert!(d["allocator"]["library"].as_str().unwrap().contains(lib.trim_end_matches(".so.2")), "{ctx}: {d}");
            for (k, v) in env {
                assert_eq!(d["env"][k], v, "{ctx}: {d}");
            }
            let advice: Vec<&str> = d["advice"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
            for (k, _) in env {
                let said = advice.iter().any(|a| a.contains(k) && a.contains("no effect here"));
                assert_eq!(said, k != own, "{ctx}: {k}: {advice:#?}");
            }
            let config = &d["allocator"]["config"];
            if name == "jemalloc" && target == "c" {
                assert_eq!(config[0]["value"], "dirty_decay_ms:5000,narenas:3", "{ctx}: {d}");
                assert!(config[0]["from"].as_str().unwrap().starts_with("malloc_conf (alloc_conf"), "{ctx}: {d}");
            } else {
                assert_eq!(config, &serde_json::json!([]), "{ctx}: {d}");
            }
            t.send("bye");
            assert_eq!(t.wait().code(), Some(0), "{ctx}");
        }
    }
}

#[test]
fn watch_sees_new_memory_and_plots_it() {
    let (mut t, _) = start_arenas(&["2"], &[]);
    let plot = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("mem-plot-{}.svg", t.pid));
    let _ = std::fs::remove_file(&plot);
    let pid = t.pid.to_string();
    let mut sc =
        Syscatch::start(&["mem", "--pid", &pid, "--json", "--watch", "100ms", "--plot", plot.to_str().unwrap()]);
    // The first sample is the baseline; memory mapped after it must show as growth in a later one.
    let first: Value = serde_json::from_str(&sc.out.next()).unwrap();
    assert_eq!(first["data"]["sample"], 1);
    assert!(first["data"]["growth"].as_array().unwrap().is_empty(), "nothing grew against itself");
    t.send("grow");
    let grown = t.out.until(|l| l.starts_with("grown "));
    let addr = u64::from_str_radix(grown.last().unwrap()[6..].trim_start_matches("0x"), 16).unwrap();
    let found = loop {
        let v: Value = serde_json::from_str(&sc.out.next()).unwrap();
        assert_eq!(v["type"], "mem");
        let hit = v["data"]["growth"].as_array().unwrap().iter().find(|g| {
            hex(&g["start"]) <= addr && addr < hex(&g["end"]) && g["growth_kb"].as_u64().unwrap() >= 32 * 1024
        });
        if let Some(g) = hit {
            break g.clone();
        }
    };
    assert_eq!(found["class"], "anon_large");
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("anonymous, regions &gt;= 1 MiB"), "{svg}");
    assert!(svg.matches("<polyline").count() >= 2);
    t.send("done");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn bad_input_is_one_clear_line() {
    let (code, out, err) = run_syscatch(&["mem", "--pid", "999999999"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert_eq!(err.trim(), "syscatch: no process with pid 999999999");
    let (code, _, err) = run_syscatch(&["mem", "--pid", "1", "--plot", "x.svg"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
