//! `syscatch hooks` on real processes: a library that rewrites the program's GOT at load, one that patches
//! function entries with jumps, jemalloc preloaded, lazy binding; and bad input.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

const JEMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";

fn hooks(args: &[&str]) -> (Vec<Value>, Vec<String>, String) {
    let mut all = vec!["hooks"];
    all.extend_from_slice(args);
    all.push("--json");
    let (code, out, err) = run_syscatch(&all);
    assert_eq!(code, 0, "syscatch hooks failed: {err}");
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    let text = run_syscatch(&all[..all.len() - 1]);
    assert_eq!(text.0, 0, "syscatch hooks (text) failed: {}", text.2);
    (json_lines(&lines), text.1.lines().map(str::to_string).collect(), err)
}

/// GOT rows of `function` in the module whose file name is `module`.
fn got_rows<'a>(values: &'a [Value], function: &str, module: &str) -> Vec<&'a Value> {
    values
        .iter()
        .filter(|v| v["type"] == "hook" && v["data"]["kind"] == "got")
        .map(|v| &v["data"])
        .filter(|d| {
            d["function"] == function && d["module"].as_str().is_some_and(|m| m.ends_with(&format!("/{module}")))
        })
        .collect()
}

fn inline_row<'a>(values: &'a [Value], function: &str, module_suffix: &str) -> &'a Value {
    values
        .iter()
        .filter(|v| v["type"] == "hook" && v["data"]["kind"] == "inline")
        .map(|v| &v["data"])
        .find(|d| d["function"] == function && d["module"].as_str().is_some_and(|m| m.ends_with(module_suffix)))
        .unwrap_or_else(|| panic!("no inline row for {function} in {module_suffix}: {values:#?}"))
}

fn verdict<'a>(text: &'a [String], function: &str) -> &'a str {
    text.iter()
        .find(|l| l.starts_with(&format!("{function}: ")))
        .unwrap_or_else(|| panic!("no verdict for {function}: {text:#?}"))
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn got_rewritten_at_load_is_patched_and_trace_still_catches_the_hooked_mmaps() {
    require_ptrace();
    let lib = shared_lib("hooks_got_lib");
    let prog = testprog_linked("hooks_got", &[&lib], &[]);
    let mut t = Target::start(&prog, &["6"]);
    assert_eq!(t.out.next(), "hooks 2", "the library rewrote the mmap and munmap slots");
    let pid = t.pid.to_string();
    let (values, text, _) = hooks(&["--pid", &pid]);
    let prog_name = file_name(&prog);
    let lib_name = file_name(&lib);
    for (function, hook) in [("mmap", "hook_mmap"), ("munmap", "hook_munmap")] {
        let rows = got_rows(&values, function, &prog_name);
        assert_eq!(rows.len(), 1, "one slot for {function} in the program: {rows:#?}");
        let r = rows[0];
        assert_eq!(r["status"], "patched_at_run_time", "{r:#}");
        assert!(r["target"]["module"].as_str().unwrap().ends_with(&format!("/{lib_name}")), "{r:#}");
        assert_eq!(r["target"]["symbol"], hook, "{r:#}");
        assert_eq!(r["target"]["offset"], "0x0");
        assert_eq!(r["expected_target"]["symbol"], function, "{r:#}");
        assert!(r["expected_target"]["module"].as_str().unwrap().contains("libc.so"), "{r:#}");
        // The slot really holds the value reported.
        let slot = u64::from_str_radix(r["slot"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        let value = u64::from_le_bytes(read_mem(t.pid, slot, 8).try_into().unwrap());
        assert_eq!(r["value"].as_str().unwrap(), format!("{value:#x}"));
        let v = verdict(&text, function);
        assert!(v.contains(&format!("calls from {prog_name} go to {lib_name}:{hook}, patched at run time")), "{v}");
    }
    // Nothing else in the process is reported as patched.
    let patched: Vec<&Value> = values
        .iter()
        .filter(|v| v["data"]["status"] == "patched_at_run_time")
        .filter(|v| !(v["data"]["function"] == "mmap" || v["data"]["function"] == "munmap"))
        .collect();
    assert!(patched.is_empty(), "{patched:#?}");

    // The trace sees the mmaps the program makes through the hook, which calls syscall(SYS_mmap).
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    let mut truth = truth_mmaps(&lines);
    assert_eq!(truth.len(), 6);
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    let values = json_lines(&out);
    // Every captured call came through the hook: its stack names it, between syscall() and the program.
    for v in values.iter().filter(|v| v["type"] == "event") {
        let frames: Vec<&str> =
            v["data"]["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
        assert_eq!(frames.first(), Some(&"syscall"), "{frames:?}");
        assert!(frames.contains(&"hook_mmap"), "the hook is in the stack: {frames:?}");
        assert!(frames.contains(&"main"), "{frames:?}");
    }
    let mut got = captured_mmaps(&values);
    got.sort();
    truth.sort();
    assert_eq!(got, truth, "every hooked mmap captured with its address and length");
    t.send("bye");
    assert!(t.wait().success());
}

#[test]
fn function_entries_overwritten_with_jumps_are_named() {
    require_ptrace();
    let lib = shared_lib("hooks_inline_lib");
    let prog = testprog_linked("hooks_inline", &[&lib], &[]);
    let mut t = Target::start(&prog, &[]);
    assert_eq!(t.out.next(), "hooks 2");
    assert_eq!(t.out.next(), "madvise_calls 1", "libc's madvise now runs hook_madvise");
    assert_eq!(t.out.next(), "lib_work 1042", "lib_work now runs lib_work_hooked");
    let pid = t.pid.to_string();
    let lib_name = file_name(&lib);
    let (values, text, _) = hooks(&["--pid", &pid, "--module", &lib_name, "--symbols", "lib_work"]);

    let m = inline_row(&values, "madvise", "libc.so.6");
    assert_eq!(m["status"], "patched_at_run_time", "{m:#}");
    assert_eq!(m["patch"], "jump");
    assert_eq!(m["first_diff"], 0);
    assert!(m["memory_bytes"].as_str().unwrap().starts_with("ff2500000000"), "{m:#}");
    assert_ne!(m["memory_bytes"], m["file_bytes"]);
    assert_eq!(m["target"]["symbol"], "hook_madvise", "{m:#}");
    assert!(m["target"]["module"].as_str().unwrap().ends_with(&lib_name));
    let v = verdict(&text, "madvise");
    assert!(
        v.contains(&format!(
            "entry in libc.so.6 patched at run time: `jmp qword ptr [rip]` to {lib_name}:hook_madvise"
        )),
        "{v}"
    );

    let w = inline_row(&values, "lib_work", &lib_name);
    assert_eq!(w["status"], "patched_at_run_time", "{w:#}");
    assert!(w["insn"].as_str().unwrap().starts_with("jmp 0x"), "{w:#}");
    assert_eq!(w["target"]["symbol"], "lib_work_hooked", "{w:#}");

    // The other memory functions of libc are untouched, and say so.
    for f in ["mmap", "munmap", "malloc", "free"] {
        assert_eq!(inline_row(&values, f, "libc.so.6")["status"], "intact", "{f}");
    }
    // The GOT slots for madvise are as linked: the patch is in the function, not in the GOT.
    let prog_name = file_name(&prog);
    let rows = got_rows(&values, "madvise", &prog_name);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "ok", "{:#}", rows[0]);
}

#[test]
fn jemalloc_preloaded_is_interposed_at_load_not_patched() {
    require_ptrace();
    assert!(std::path::Path::new(JEMALLOC).exists(), "{JEMALLOC} is missing: apt-get install libjemalloc2");
    let prog = testprog_with("hooks_plain", &["-Wl,-z,now"]);
    let mut t = Target::start_cmd(Command::new(&prog).env("LD_PRELOAD", JEMALLOC));
    assert_eq!(t.out.next(), "ready");
    let pid = t.pid.to_string();
    let (values, text, _) = hooks(&["--pid", &pid]);
    let prog_name = file_name(&prog);
    for f in ["malloc", "free"] {
        let rows = got_rows(&values, f, &prog_name);
        assert_eq!(rows.len(), 1, "{f}: {rows:#?}");
        let r = rows[0];
        assert_eq!(r["status"], "interposed_at_load", "{r:#}");
        assert_eq!(r["interposer"], "preload", "{r:#}");
        assert_eq!(r["target"]["module"], JEMALLOC, "{r:#}");
        assert_eq!(r["target"]["symbol"], f, "{r:#}");
        assert_eq!(r["value"], r["expected"]);
        let v = verdict(&text, f);
        assert!(v.contains(&format!("go to libjemalloc.so.2:{f}, interposed at load (LD_PRELOAD)")), "{v}");
        assert!(!v.contains("patched"), "{v}");
    }
    let patched: Vec<&Value> = values.iter().filter(|v| v["data"]["status"] == "patched_at_run_time").collect();
    assert!(patched.is_empty(), "nothing is patched: {patched:#?}");
}

#[test]
fn lazy_slot_not_yet_called_is_unresolved_then_bound() {
    require_ptrace();
    let prog = testprog_with("hooks_plain", &["-Wl,-z,lazy"]);
    let mut t = Target::start(&prog, &[]);
    assert_eq!(t.out.next(), "ready");
    let pid = t.pid.to_string();
    let prog_name = file_name(&prog);
    let (values, text, _) = hooks(&["--pid", &pid]);
    let rows = got_rows(&values, "calloc", &prog_name);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let r = rows[0];
    assert_eq!(r["status"], "unresolved", "{r:#}");
    assert_eq!(r["reloc"], "JUMP_SLOT");
    assert_eq!(r["target"]["plt"], true, "the slot points into the program's PLT: {r:#}");
    assert_eq!(r["expected_target"]["symbol"], "calloc");
    let v = verdict(&text, "calloc");
    assert!(v.contains(&format!("calls from {prog_name} are unresolved")), "{v}");
    assert!(!v.contains("patched"), "{v}");
    // malloc was called already: bound, as linked.
    assert_eq!(got_rows(&values, "malloc", &prog_name)[0]["status"], "ok");

    // After the first call the dynamic linker has bound the slot.
    t.send("go");
    assert_eq!(t.out.next(), "called");
    let (values, _, _) = hooks(&["--pid", &pid]);
    let r = got_rows(&values, "calloc", &prog_name)[0].clone();
    assert_eq!(r["status"], "ok", "{r:#}");
    assert_eq!(r["value"], r["expected"]);
}

#[test]
fn bad_input_is_one_line_and_nonzero() {
    require_ptrace();
    let check = |args: &[&str], want: &str| {
        let mut all = vec!["hooks"];
        all.extend_from_slice(args);
        let (code, out, err) = run_syscatch(&all);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    check(&["--pid", "2147483647"], "no process with pid 2147483647");

    let static_prog = testprog_with("hooks_plain", &["-static", "-DNO_DLOPEN"]);
    let t = Target::start(&static_prog, &[]);
    check(&["--pid", &t.pid.to_string()], "statically linked");
    drop(t);

    // A library corrupted on disk after it was loaded (cut to its ELF header).
    let lib = shared_lib("hooks_dummy_lib");
    let copy = lib.with_file_name(format!("libhooks_corrupt_{}.so", std::process::id()));
    std::fs::copy(&lib, &copy).unwrap();
    let prog = testprog("hooks_plain");
    let mut t = Target::start(&prog, &[copy.to_str().unwrap()]);
    assert_eq!(t.out.next(), "ready");
    std::fs::OpenOptions::new().write(true).open(&copy).unwrap().set_len(64).unwrap();
    check(&["--pid", &t.pid.to_string()], copy.to_str().unwrap());
    drop(t);
    let _ = std::fs::remove_file(&copy);

    let t = Target::start(&prog, &[]);
    let (code, _, err) = run_syscatch(&["hooks", "--pid", &t.pid.to_string(), "--module", "libnosuch"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--module libnosuch"), "{err}");
}
