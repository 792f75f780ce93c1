//! Stacks without frame pointers: every captured event's stack unwound by CFI and symbolized, checked against
//! the functions the target really called, and `syscatch stack` checked frame by frame against gdb.

use crate::common::*;
use serde_json::Value;

/// Function names of a JSON stack, innermost first (inlined frames included).
fn functions(stack: &Value) -> Vec<String> {
    stack
        .as_array()
        .expect("a stack")
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string").trim_start_matches("0x"), 16).expect("hex")
}

/// Asserts that `want` appear in `got` in this order, each directly after the previous one.
fn assert_consecutive(got: &[String], want: &[&str]) {
    let start = got
        .iter()
        .position(|f| f == want[0])
        .unwrap_or_else(|| panic!("{} not in stack {got:#?}", want[0]));
    let window: Vec<&str> = got[start..].iter().take(want.len()).map(String::as_str).collect();
    assert_eq!(window, want, "stack {got:#?}");
}

#[test]
fn event_stacks_reach_main_without_frame_pointers() {
    require_ptrace();
    let prog = testprog("deep_stack");
    let mut t = Target::start(&prog, &["4"]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    assert_eq!(truth_mmaps(&lines).len(), 4);
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    let events: Vec<Value> = json_lines(&out).into_iter().filter(|v| v["type"] == "event").collect();
    assert_eq!(events.len(), 4);
    for ev in &events {
        let d = &ev["data"];
        let f = functions(&d["stack"]);
        assert_eq!(f[0], "syscall", "first frame is the wrapper: {f:#?}");
        assert_consecutive(
            &f,
            &[
                "syscall",
                "level7",
                "level6",
                "level5",
                "level4",
                "level3",
                "level2",
                "level1",
                "main",
                "__libc_start_call_main",
            ],
        );
        assert_eq!(f.last().map(String::as_str), Some("_start"), "{f:#?}");
        assert!(d["stack_truncated"].is_null(), "{}", d["stack_truncated"]);
        // file:line from the program's own DWARF, and from libc's separate debug file (libc6-dbg).
        let frames = d["stack"].as_array().unwrap();
        let lvl = frames.iter().find(|f| f["function"] == "level4").unwrap();
        assert!(lvl["file"].as_str().unwrap().ends_with("deep_stack.c"), "{lvl}");
        let start = frames
            .iter()
            .find(|f| f["function"] == "__libc_start_call_main")
            .unwrap();
        assert!(
            start["file"].as_str().unwrap_or("").contains("libc_start_call_main"),
            "libc frame without file:line (is libc6-dbg installed at libc6's version?): {start}"
        );
        assert!(start["line"].as_u64().is_some());
        assert!(
            frames
                .iter()
                .all(|f| f["addr"].as_str().is_some_and(|a| hex(&Value::from(a)) != 0))
        );
    }
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}
