//! Every path to a call named by `--syscall`: libc's `syscall()` wrapper and libc's own entries (mmap, munmap),
//! as a strace user expects `--syscall mmap` to catch the process's mmaps whichever libc path they take; and
//! `--only-syscall-wrapper` for the wrapper alone. Exact addresses and lengths against the target's own ground
//! truth, the function's entry against gdb's address of `mmap`, the callers against eu-stack's.

use crate::common::*;
use crate::stack::{eu_stack_frames, wait_blocked_in_read};
use serde_json::Value;

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string").trim_start_matches("0x"), 16).expect("hex")
}

/// (ret, len) of the events at libc's own `func` entry.
fn at_libc(values: &[Value], func: &str) -> Vec<(u64, u64, u64)> {
    let label = format!("libc.so.6:{func}");
    values
        .iter()
        .filter(|v| v["type"] == "event" && v["data"]["location"] == label.as_str())
        .map(|v| (hex(&v["data"]["ret"]), hex(&v["data"]["args"][0]), hex(&v["data"]["args"][1])))
        .collect()
}

/// gdb's address of a function in process `pid`.
fn gdb_address_of(pid: i32, func: &str) -> u64 {
    let out = std::process::Command::new("gdb")
        .args(["-batch", "-nx", "-iex", "set debuginfod enabled off", "-p", &pid.to_string()])
        .args(["-ex", &format!("p/x (unsigned long)&{func}")])
        .output()
        .expect("gdb runs (CI installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.lines().find_map(|l| l.strip_prefix("$1 = 0x")).unwrap_or_else(|| panic!("gdb: {text}"));
    u64::from_str_radix(v.trim(), 16).unwrap()
}

/// Runs syscatch with `extra` on a fresh `libc_mmap` target until "done"; returns the target (waiting in read in
/// `via_libc`), its ground truth lines, syscatch's JSON values and its stderr.
fn run(extra: &[&str]) -> (Target, Vec<String>, Vec<Value>, Vec<String>) {
    run_on(Target::start(&testprog("libc_mmap"), &[]), extra)
}

fn run_on(mut t: Target, extra: &[&str]) -> (Target, Vec<String>, Vec<Value>, Vec<String>) {
    let pid = t.pid.to_string();
    let mut args = vec!["--pid", pid.as_str(), "--syscall", "mmap,munmap", "--json"];
    args.extend_from_slice(extra);
    let mut sc = Syscatch::start(&args);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch {extra:?} failed: {err:#?}");
    (t, lines, json_lines(&out), err)
}

#[test]
fn syscall_mmap_catches_libc_mmap_calls_with_exact_addresses() {
    require_ptrace();
    for extra in [&[][..], &["--fast"][..]] {
        let (mut t, lines, values, err) = run(extra);
        let truth = truth_mmaps(&lines);
        let unmapped: Vec<(u64, u64)> = lines
            .iter()
            .filter_map(|l| {
                let mut w = l.strip_prefix("munmap ")?.split(' ');
                Some((u64::from_str_radix(w.next()?.trim_start_matches("0x"), 16).ok()?, w.next()?.parse().ok()?))
            })
            .collect();
        assert_eq!((truth.len(), unmapped.len()), (3, 1));
        // The two libc mmap() calls at libc's entry, the raw one at syscall(): each exactly once, with its result.
        let libc_maps: Vec<(u64, u64)> = at_libc(&values, "mmap").iter().map(|&(r, _, n)| (r, n)).collect();
        assert_eq!(libc_maps, truth[..2], "{extra:?}");
        assert_eq!(captured_mmaps(&values), truth[2..], "{extra:?}");
        assert_eq!(at_libc(&values, "munmap"), [(0, unmapped[0].0, unmapped[0].1)], "{extra:?}");
        let attached = err.iter().find(|l| l.contains("attached to")).unwrap();
        assert!(attached.contains("function probes on libc.so.6:mmap, libc.so.6:munmap"), "{attached}");
        let summary = summary_data(&values);
        let watched: Vec<&str> = summary["watched"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(watched[0].starts_with("syscall() at 0x") && watched[0].ends_with("(mmap, munmap)"), "{watched:?}");
        assert!(watched[1..].iter().any(|w| w.starts_with("libc.so.6:mmap at 0x")), "{watched:?}");
        assert_eq!(summary["nested_calls"], 0);

        // Frame 0 of a libc mmap() event is libc's mmap entry (gdb's &mmap); its callers are eu-stack's, from main
        // on (the target now waits in read() in the same frame of via_libc).
        wait_blocked_in_read(t.pid, t.pid, 0);
        let ev =
            &values.iter().find(|v| v["type"] == "event" && v["data"]["location"] == "libc.so.6:mmap").unwrap()["data"];
        let frames: Vec<(u64, String)> = ev["stack"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["inlined"] != true)
            .map(|f| (hex(&f["addr"]), f["function"].as_str().unwrap_or("?").to_string()))
            .collect();
        assert_eq!(frames[0].0, gdb_address_of(t.pid, "mmap"), "{frames:#?}");
        assert_eq!(frames[1].1, "via_libc", "{frames:#?}");
        let eu = eu_stack_frames(t.pid, t.pid);
        let eu_main = eu.iter().position(|(_, n)| n == "main").unwrap_or_else(|| panic!("{eu:#?}"));
        assert_eq!(frames[2..], eu[eu_main..], "ours {frames:#?}\neu-stack {eu:#?}");
        // eu-stack names libc's entry as syscatch does: its global name (`__mmap`, not the weak `mmap`).
        assert!(ev["stack_truncated"].is_null());
        t.send("bye");
        assert_eq!(t.out.next(), "bye");
        assert_eq!(t.wait().code(), Some(0));
    }
}

#[test]
fn only_syscall_wrapper_watches_syscall_alone() {
    require_ptrace();
    let (mut t, lines, values, err) = run(&["--only-syscall-wrapper"]);
    let truth = truth_mmaps(&lines);
    assert_eq!(captured_mmaps(&values), truth[2..]);
    assert!(values.iter().all(|v| v["type"] != "event" || v["data"]["location"].is_null()), "{values:#?}");
    let attached = err.iter().find(|l| l.contains("attached to")).unwrap();
    assert!(attached.contains("only (--only-syscall-wrapper)") && !attached.contains("function probes"), "{attached}");
    let watched = &summary_data(&values)["watched"];
    assert_eq!(watched.as_array().map(Vec::len), Some(1), "{watched}");
    t.send("bye");
    assert_eq!(t.out.next(), "bye");
    assert_eq!(t.wait().code(), Some(0));
    let (code, _, err) = run_syscatch(&["--pid", "1", "--leaks", "--only-syscall-wrapper"]);
    assert_eq!(code, 2, "{err}");
}

/// glibc 2.43's mmap pushes two registers before its `syscall` and has a second path to the kernel (a retry below
/// 4 GiB, taken for an executable mapping under `glibc.cpu.prefer_map_32bit_exec`): `--fast` patches both, so
/// every libc mmap goes through the trampoline (no breakpoint stop), with its exact result and its caller.
#[test]
fn glibc_2_43_mmap_is_caught_on_both_paths_by_the_trampoline() {
    require_ptrace();
    let root = crate::roots::sid();
    let inside = crate::roots::copy_in(&root, &testprog("libc_mmap"));
    let mut cmd = std::process::Command::new("chroot");
    cmd.arg(&root).arg(inside).arg("exec").env("GLIBC_TUNABLES", "glibc.cpu.prefer_map_32bit_exec=1");
    let (mut t, lines, values, err) = run_on(Target::start_cmd(&mut cmd), &[]);
    let truth = truth_mmaps(&lines);
    assert_eq!(truth.len(), 3);
    assert!(truth[1].0 < 1 << 32, "the executable mapping took the retry below 4 GiB: {truth:x?}");
    let libc_maps: Vec<(u64, u64)> = at_libc(&values, "mmap").iter().map(|&(r, _, n)| (r, n)).collect();
    assert_eq!(libc_maps, truth[..2]);
    assert_eq!(captured_mmaps(&values), truth[2..]);
    assert!(!err.iter().any(|l| l.contains("to a breakpoint")), "{err:#?}");
    // Every call stopped at the trampoline or came from its ring: none at a breakpoint.
    let s = summary_data(&values);
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
    assert_eq!(n("hits"), n("fast_stops") + n("from_ring") + n("ring_full_stops"), "{s}");
    assert!(n("fast_stops") >= 3, "{s}");
    // Frame 0 is libc's mmap (just past the `syscall` of its path: its CFI unwinds the two pushes), then via_libc.
    for ev in values.iter().filter(|v| v["type"] == "event" && v["data"]["location"] == "libc.so.6:mmap") {
        let names: Vec<&str> = ev["data"]["stack"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["inlined"] != true)
            .map(|f| f["function"].as_str().unwrap_or("?"))
            .collect();
        assert!(names[0].contains("mmap"), "{names:?}");
        assert_eq!(names[1], "via_libc", "{names:?}");
        assert!(names.contains(&"main"), "{names:?}");
    }
    t.send("bye");
    assert_eq!(t.out.next(), "bye");
    assert_eq!(t.wait().code(), Some(0));
}
