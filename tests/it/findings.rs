//! `--leaks` as a report: findings first (what, where, why, fix) from the rules, whichever way a hook library
//! intercepts memory calls; no false finding on a clean target; events only in `-o FILE`.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

/// The UCX-shaped worker with its hook installed as `mode` (`inline`, `got`, `none`).
fn start_ucx_like(mode: &str) -> Target {
    let lib = shared_lib("ucx_like_lib");
    let prog = testprog_linked("ucx_like", &[&lib], &[]);
    let mut cmd = Command::new(prog);
    cmd.env("UCXLIKE_HOOK", mode).env_remove("UCX_RCACHE_MAX_UNRELEASED").env_remove("UCX_MEM_MMAP_HOOK_MODE");
    let mut t = Target::start_cmd(&mut cmd);
    assert_eq!(t.out.next(), format!("hook {mode}"));
    t
}

/// Traces `t` with `--leaks` and `extra` while it does `rounds` map/touch/unmap rounds; returns the pool bytes
/// it reports and syscatch's stdout and stderr.
fn trace_rounds(t: &mut Target, rounds: u32, extra: &[&str]) -> (u64, Vec<String>, Vec<String>) {
    let pid = t.pid.to_string();
    let mut args = vec!["--pid", &pid, "--leaks", "--smaps-every", "100ms"];
    args.extend_from_slice(extra);
    let mut sc = Syscatch::start(&args);
    sc.wait_attached();
    t.send(&format!("go {rounds}"));
    let lines = t.out.until(|l| l == "done");
    let pool: u64 = lines.iter().find_map(|l| l.strip_prefix("pool ")).unwrap().parse().unwrap();
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    (pool, out, err)
}

fn of_type<'a>(values: &'a [Value], kind: &str) -> Vec<&'a Value> {
    values.iter().filter(|v| v["type"] == kind).map(|v| &v["data"]).collect()
}

/// The first finding is the UCX pattern, explaining exactly what the pool mapped, with the hook, the live
/// environment value and the remedies in order.
fn assert_ucx_finding(values: &[Value], pool: u64, hook_words: &[&str]) {
    let findings = of_type(values, "finding");
    assert!(!findings.is_empty(), "{values:#?}");
    let f = findings[0];
    assert_eq!(f["rule"], "ucx-rcache-invalidation", "{f:#?}");
    assert_eq!(f["bytes"], pool, "{f:#?}");
    // Every page of the pool was written: all of it is resident (pagemap: present and exclusive).
    assert_eq!(f["resident"], pool, "{f:#?}");
    let region = of_type(values, "region").into_iter().find(|r| r["new"] == true).expect("the pool's new region");
    assert_eq!(region["traced_resident_kb"].as_u64(), Some(pool / 1024), "{region:#?}");
    assert_eq!(region["remainder_kb"], 0, "{region:#?}");
    let where_: Vec<&str> = f["where"].as_array().unwrap().iter().filter_map(|w| w["function"].as_str()).collect();
    assert!(where_.contains(&"ucs_mpool_grow") && where_.contains(&"ucm_munmap"), "{where_:?}");
    let evidence: Vec<&str> = f["evidence"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    // Set with setenv after start: only the live environment (libc's __environ) has it.
    assert!(evidence.iter().any(|e| e.starts_with("UCX_RCACHE_MAX_UNRELEASED=inf")), "{evidence:#?}");
    for w in hook_words {
        assert!(evidence.iter().any(|e| e.starts_with("hook: ") && e.contains(w)), "{w}: {evidence:#?}");
    }
    let fixes: Vec<&str> = f["fix"].as_array().unwrap().iter().filter_map(|x| x["action"].as_str()).collect();
    assert!(fixes[0].contains("UCX_RCACHE_MAX_UNRELEASED=1024"), "{fixes:#?}");
    assert!(fixes.last().unwrap().contains("UCX_MEM_MMAP_HOOK_MODE=none"), "{fixes:#?}");
    assert!(f["fix"].as_array().unwrap().last().unwrap()["caveat"].as_str().unwrap().contains("no longer learns"));
    // No event on stdout: the report only.
    assert!(of_type(values, "event").is_empty());
    assert_eq!(values.last().unwrap()["type"], "summary");
    assert_eq!(values.last().unwrap()["data"]["schema"], 3);
}

#[test]
fn names_the_ucx_pattern_through_an_inline_patched_munmap() {
    require_ptrace();
    let mut t = start_ucx_like("inline");
    let (pool, out, _) = trace_rounds(&mut t, 64, &["--json"]);
    assert_eq!(pool, 256 << 10);
    let values = json_lines(&out);
    assert_ucx_finding(&values, pool, &["munmap", "patched at run time", "ucm_munmap"]);
    let cov = of_type(&values, "coverage");
    let not_watched = cov[0]["not_watched"].as_array().unwrap();
    assert!(not_watched.iter().any(|s| s.as_str().unwrap().contains("munmap")), "{cov:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn names_the_ucx_pattern_through_redirected_got_slots() {
    require_ptrace();
    let mut t = start_ucx_like("got");
    let (pool, out, _) = trace_rounds(&mut t, 64, &["--json"]);
    let values = json_lines(&out);
    // The pool's chunks come from libc's mmap called by the hook: caught by the function probe, not syscall().
    assert_ucx_finding(&values, pool, &["go to libucx_like_lib.so:ucm_munmap, patched at run time"]);
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn text_report_puts_the_finding_first_and_events_go_only_to_the_file() {
    require_ptrace();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let events = dir.join("ucx_like.events.jsonl");
    let mut t = start_ucx_like("inline");
    let (_, out, _) = trace_rounds(&mut t, 32, &["-o", events.to_str().unwrap(), "--json"]);
    let values = json_lines(&out);
    assert!(of_type(&values, "event").is_empty());
    let file: Vec<String> = std::fs::read_to_string(&events).unwrap().lines().map(str::to_string).collect();
    let evs = json_lines(&file);
    // 32 mmaps at libc's mmap and 32 munmaps through syscall() inside the hook, and the pool's 2 chunks.
    let calls = |f: &dyn Fn(&Value) -> bool| of_type(&evs, "event").into_iter().filter(|e| f(e)).count();
    assert_eq!(calls(&|e| e["location"] == "libc.so.6:mmap"), 32);
    assert_eq!(calls(&|e| e["syscall"] == "munmap"), 32);
    assert_eq!(calls(&|e| e["syscall"] == "mmap"), 2);
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));

    let mut t = start_ucx_like("inline");
    let (_, out, _) = trace_rounds(&mut t, 32, &[]);
    let first = out.iter().position(|l| l.starts_with("Findings")).expect("a findings section");
    let regions = out.iter().position(|l| l.starts_with("Growing regions")).expect("growing regions");
    assert!(first < regions, "{out:#?}");
    assert!(out[first..].iter().any(|l| l.contains("#1 UCX memory hooks")), "{out:#?}");
    assert!(out.iter().any(|l| l.trim_start().starts_with("fix 1: ") && l.contains("UCX_RCACHE_MAX_UNRELEASED")));
    assert!(!out.iter().any(|l| l.contains("mmap(addr=")), "no event lines: {out:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn no_ucx_finding_without_the_hook_and_none_on_a_clean_leak() {
    require_ptrace();
    let mut t = start_ucx_like("none");
    let (pool, out, _) = trace_rounds(&mut t, 64, &["--json"]);
    assert_eq!(pool, 0);
    let values = json_lines(&out);
    assert!(of_type(&values, "finding").is_empty(), "{values:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));

    // leaker maps and keeps memory from its own code: ranked by stack, matched by no rule.
    let mut t = Target::start(&testprog("leaker"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--smaps-every", "100ms"]);
    sc.wait_attached();
    t.send("go");
    t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert!(out.iter().any(|l| l.contains("Nothing known matches")), "{out:#?}");
    let cand = out.iter().position(|l| l.starts_with("Leak candidates")).unwrap();
    assert!(out[cand..].iter().take(8).any(|l| l.contains("leak_site")), "{out:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}

/// Starts `arenas` (12 threads; thread 0 keeps 80 MiB in its arena) with `env`; with `spill`, every thread then
/// frees what it kept and leaves 4 MiB free and resident in its arena.
fn start_arenas(env: &[(&str, &str)], spill: bool) -> Target {
    let mut cmd = Command::new(testprog("arenas"));
    cmd.arg("12").env_remove("MALLOC_ARENA_MAX").env_remove("GLIBC_TUNABLES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut t = Target::start_cmd(&mut cmd);
    t.out.until(|l| l == "ready");
    if spill {
        t.send("spill");
        t.out.until(|l| l == "spilled");
    }
    t
}

/// Seed case 001: many arenas, each mostly free memory still resident: capping the arenas is the advice. Not when
/// they are capped, and not when the arenas hold memory in use (read from the arenas: capping them would not give
/// it back).
#[test]
fn glibc_arenas_rule_fires_on_many_arenas_and_not_when_capped() {
    require_ptrace();
    let t = start_arenas(&[], false);
    let (code, out, err) = run_syscatch(&["--pid", &t.pid.to_string(), "--leaks", "--for", "300ms", "--json"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    assert!(of_type(&json_lines(&lines), "finding").iter().all(|f| f["rule"] != "glibc-arenas"), "in use: {out}");
    drop(t);

    let t = start_arenas(&[], true);
    let (code, out, err) = run_syscatch(&["--pid", &t.pid.to_string(), "--leaks", "--for", "300ms", "--json"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    let values = json_lines(&lines);
    let f = of_type(&values, "finding");
    let arenas = f.iter().find(|f| f["rule"] == "glibc-arenas").unwrap_or_else(|| panic!("{values:#?}"));
    assert!(arenas["bytes"].as_u64().unwrap() >= 32 << 20, "{arenas:#?}");
    let ev: Vec<&str> = arenas["evidence"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(ev.iter().any(|e| e.starts_with("MALLOC_ARENA_MAX unset")), "{ev:#?}");
    drop(t);

    let t = start_arenas(&[("MALLOC_ARENA_MAX", "1")], true);
    let (code, out, err) = run_syscatch(&["--pid", &t.pid.to_string(), "--leaks", "--for", "300ms", "--json"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    assert!(of_type(&json_lines(&lines), "finding").iter().all(|f| f["rule"] != "glibc-arenas"), "{out}");
}

#[test]
fn a_rules_file_adds_rules_and_a_bad_one_is_refused_before_attaching() {
    require_ptrace();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mine = dir.join("mine.rules.json");
    std::fs::write(
        &mine,
        r#"{"rules": [{"id": "leaker-site", "title": "leak_site keeps its mappings", "when": {"frames": ["leak_site*"]},
            "why": "it never unmaps", "fix": [{"action": "unmap in leak_site", "doc": "testprogs/leaker.c"}]}]}"#,
    )
    .unwrap();
    let bad = dir.join("bad.rules.json");
    std::fs::write(&bad, r#"{"rules": [{"id": "x", "title": "t", "when": {"framez": []}}]}"#).unwrap();
    let mut t = Target::start(&testprog("leaker"), &[]);
    let pid = t.pid.to_string();
    let (code, _, err) = run_syscatch(&["--pid", &pid, "--leaks", "--rules", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad.rules.json") && err.contains("framez"), "{err}");
    assert_eq!(tracer_pid(t.pid), Some(0));

    let (leaked, values, _) = leaker_run(&mut t, &["--leaks", "--json", "--rules", mine.to_str().unwrap()]);
    let f = of_type(&values, "finding");
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((f[0]["rule"].as_str(), f[0]["bytes"].as_u64()), (Some("leaker-site"), Some(leaked)));
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn pprof_profile_reads_in_go_tool_pprof_with_exact_values() {
    require_ptrace();
    let go = Command::new("go").arg("version").output();
    assert!(go.is_ok_and(|o| o.status.success()), "`go` is needed to read the profile: apt-get install golang-go");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let profile = dir.join("leaker.pb.gz");
    let mut t = Target::start(&testprog("leaker"), &[]);
    let (leaked, _, _) = leaker_run(&mut t, &["--pprof", profile.to_str().unwrap(), "--smaps-every", "100ms"]);
    let raw = Command::new("go").args(["tool", "pprof", "-raw"]).arg(&profile).output().unwrap();
    assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
    let raw = String::from_utf8_lossy(&raw.stdout);
    // Named as heap profiles name them, growth the default.
    let types = "growth/bytes[dflt] inuse_space/bytes resident/bytes alloc_objects/count alloc_space/bytes calls/count";
    assert!(raw.contains(types), "{raw}");
    // leak_site's 5 calls hold `leaked` bytes, every page written: all resident. (Its growth depends on when in
    // the trace the calls came.)
    let sample = format!("{leaked} {leaked} 5 {leaked} 5:");
    let values = |l: &str| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" ");
    assert!(raw.lines().any(|l| values(l).starts_with(&sample)), "{raw}");
    assert!(raw.lines().any(|l| l.contains(" leak_site") && l.contains("leaker.c:")), "{raw}");
    let top = Command::new("go")
        .args(["tool", "pprof", "-top", "-unit=byte", "-sample_index=inuse_space"])
        .arg(&profile)
        .output()
        .unwrap();
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(top.lines().any(|l| l.contains("leak_site") && l.contains(&format!("{leaked}B"))), "{top}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}

/// Runs `malloc_growth` with `env` and one command under `--leaks --json`; returns the rules that fired.
fn malloc_growth_findings(cmd: &str, env: &[(&str, &str)]) -> Vec<String> {
    let (values, _) = malloc_growth_report(&testprog("malloc_growth"), cmd, env);
    of_type(&values, "finding").iter().filter_map(|f| f["rule"].as_str().map(str::to_string)).collect()
}

/// The `--leaks --json` report of `prog` (a build of `malloc_growth`) doing `cmd` with `env`, and the bytes of
/// whole pages its heap grew by (the target's own break before and after).
fn malloc_growth_report(prog: &std::path::Path, cmd: &str, env: &[(&str, &str)]) -> (Vec<Value>, i64) {
    let mut c = Command::new(prog);
    c.env_remove("LD_PRELOAD").env_remove("MALLOC_ARENA_MAX").env_remove("GLIBC_TUNABLES");
    c.env_remove("MALLOC_MMAP_THRESHOLD_").env_remove("MALLOC_TRIM_THRESHOLD_").env_remove("MALLOC_CONF");
    for (k, v) in env {
        c.env(k, v);
    }
    let mut t = Target::start_cmd(&mut c);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--json", "--smaps-every", "100ms"]);
    sc.wait_attached();
    t.send(cmd);
    let heap = t.out.until(|l| l.starts_with("heap ")).pop().unwrap();
    let page_up = |hex: &str| (i64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap() + 4095) & !4095;
    let [_, start, end] = heap.split(' ').collect::<Vec<_>>()[..] else { panic!("{heap}") };
    let grew = page_up(end) - page_up(start);
    t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
    (json_lines(&out), grew)
}

#[test]
fn glibc_keeps_freed_memory_resident_and_not_when_the_heap_is_trimmed() {
    require_ptrace();
    let (values, grew) = malloc_growth_report(&testprog("malloc_growth"), "keep 512", &[]);
    let keep: Vec<String> =
        of_type(&values, "finding").iter().filter_map(|f| f["rule"].as_str().map(str::to_string)).collect();
    assert!(keep.iter().any(|r| r == "glibc-freed-resident"), "{keep:?}");
    // The heap grew through malloc's sbrk, each page of it on the stack that grew it: exactly what the target's
    // break moved by, the leak candidate of most growth naming the function whose mallocs grew it.
    assert!(grew >= 30 << 20, "the heap grew {grew} bytes");
    let leaks = of_type(&values, "leak");
    let by_sbrk: Vec<&&Value> = leaks.iter().filter(|v| v["brks"].as_u64().unwrap() > 0).collect();
    let held: i64 = by_sbrk.iter().map(|v| v["still_mapped"].as_i64().unwrap()).sum();
    assert_eq!(held, grew, "{by_sbrk:#?}");
    let names = |v: &Value| -> Vec<String> {
        v["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str().map(str::to_string)).collect()
    };
    let top = names(leaks[0]);
    assert!(top.iter().any(|f| f == "keep") && top.iter().any(|f| f.contains("sbrk")), "{top:?}");
    let cov = of_type(&values, "coverage")[0];
    assert!(cov["traced_bytes"].as_u64().unwrap() >= grew as u64 * 9 / 10, "{cov:#?}");
    assert!(!keep.iter().any(|r| r == "glibc-mmap-threshold"), "no mmapped chunk was freed: {keep:?}");
    let tidy = malloc_growth_findings("tidy 512", &[]);
    assert!(tidy.is_empty(), "{tidy:?}");
}

#[test]
fn glibc_dynamic_mmap_threshold_and_not_when_fixed() {
    require_ptrace();
    let moved = malloc_growth_findings("threshold 8", &[]);
    assert!(moved.iter().any(|r| r == "glibc-mmap-threshold"), "{moved:?}");
    // A fixed threshold: the 4 MiB blocks stay mmapped (and the rule's explanation is gone).
    let fixed = malloc_growth_findings("threshold 8", &[("MALLOC_MMAP_THRESHOLD_", "131072")]);
    assert!(!fixed.iter().any(|r| r == "glibc-mmap-threshold"), "{fixed:?}");
}

#[test]
fn jemalloc_rule_names_jemalloc_and_not_glibc() {
    require_ptrace();
    let je = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    assert!(std::path::Path::new(je).exists(), "apt-get install libjemalloc2");
    let with = malloc_growth_findings("big 32", &[("LD_PRELOAD", je)]);
    assert!(with.iter().any(|r| r == "jemalloc-decay"), "{with:?}");
    let without = malloc_growth_findings("big 32", &[]);
    assert!(!without.iter().any(|r| r == "jemalloc-decay"), "{without:?}");
    // Options from the environment and from the program's own malloc_conf are both shown as evidence.
    let prog = testprog_with("malloc_growth", &["-DWITH_MALLOC_CONF"]);
    let (values, _) = malloc_growth_report(&prog, "big 32", &[("LD_PRELOAD", je), ("MALLOC_CONF", "narenas:2")]);
    let f = of_type(&values, "finding").into_iter().find(|f| f["rule"] == "jemalloc-decay").expect("the finding");
    let ev: Vec<&str> = f["evidence"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(ev.iter().any(|e| e.starts_with("MALLOC_CONF=narenas:2")), "{ev:#?}");
    assert!(ev.iter().any(|e| e.starts_with("jemalloc.malloc_conf=dirty_decay_ms:5000")), "{ev:#?}");
}

/// Runs `testprogs/obmalloc.py` doing `cmd` under `--leaks --json`; returns the rules that fired.
fn obmalloc_findings(cmd: &str) -> Vec<String> {
    let mut c = Command::new("python3");
    c.arg(repo().join("testprogs/obmalloc.py")).env_remove("PYTHONMALLOC");
    let mut t = Target::start_cmd(&mut c);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--json", "--smaps-every", "100ms"]);
    sc.wait_attached();
    t.send(cmd);
    t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
    let values = json_lines(&out);
    of_type(&values, "finding").iter().filter_map(|f| f["rule"].as_str().map(str::to_string)).collect()
}

#[test]
fn cpython_obmalloc_arenas_by_their_stack_not_by_size() {
    require_ptrace();
    // CPython's arenas are mmapped through libc's mmap function (caught by its function probe). The frames need
    // the interpreter's symbol table (_PyObject_ArenaMmap is static): a python3 built with symbols, as pyenv's.
    let small = obmalloc_findings("small");
    assert!(small.iter().any(|r| r == "cpython-obmalloc"), "{small:?} (does python3 have its symbol table?)");
    let big = obmalloc_findings("big");
    assert!(!big.iter().any(|r| r == "cpython-obmalloc"), "{big:?}");
}

/// `syscatch hooks` alone names the rules a hook takes part in (the same rules as `--leaks`), whichever way it
/// is installed, with the live environment as evidence; a process without hooks gets none.
#[test]
fn hooks_command_names_the_rule_its_hooks_take_part_in() {
    require_ptrace();
    for mode in ["inline", "got"] {
        let mut t = start_ucx_like(mode);
        let pid = t.pid.to_string();
        let (code, out, err) = run_syscatch(&["hooks", "--pid", &pid, "--json"]);
        assert_eq!(code, 0, "{err}");
        let values = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
        let advice = of_type(&values, "advice");
        assert_eq!(advice.len(), 1, "{mode}: {advice:#?}");
        assert_eq!(advice[0]["rule"], "ucx-rcache-invalidation");
        let evidence: Vec<&str> = advice[0]["evidence"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(
            evidence.iter().any(|e| e.contains("ucm_munmap") && e.contains("`ucs_rcache*|ucm_*`")),
            "{evidence:#?}"
        );
        assert!(evidence.iter().any(|e| e.starts_with("UCX_RCACHE_MAX_UNRELEASED unset")), "{evidence:#?}");
        let (code, text, _) = run_syscatch(&["hooks", "--pid", &pid]);
        assert_eq!(code, 0);
        assert!(text.contains("Known patterns these hooks take part in"), "{text}");
        assert!(text.contains("[ucx-rcache-invalidation]"), "{text}");
        t.send("bye");
        assert_eq!(t.wait().code(), Some(0));
    }
    let mut t = start_ucx_like("none");
    let (code, out, err) = run_syscatch(&["hooks", "--pid", &t.pid.to_string(), "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("\"advice\""), "{out}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}
