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
/// on its stacks (the heap's creation and each growth), and so is the churning thread's smaller arena; the leaker
/// ranks first. Each growth is an `mprotect` through `--fast`'s trampoline: once a stack is known its calls are
/// written to the ring without a stop.
#[test]
fn thread_arenas_grow_on_the_stacks_that_committed_them() {
    require_ptrace();
    let mut t = Target::start(&testprog("heap_threads"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--json", "--smaps-every", "100ms"]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
    let committed = |name: &str| -> u64 {
        let line = lines.iter().find(|l| l.starts_with(&format!("arena {name} "))).expect("its arena line");
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields.len(), 4, "{name} used the main arena: {line}");
        fields[3].parse().unwrap()
    };
    let values = json_lines(&out);
    let leaks = of_type(&values, "leak");
    let held_by = |name: &str| -> u64 {
        let on = leaks.iter().filter(|v| v["commits"].as_u64().unwrap() > 0 && functions(v).iter().any(|f| f == name));
        on.map(|v| v["still_mapped"].as_u64().unwrap()).sum()
    };
    // A burst of commits before the stack is known can outrun the analysis: those calls come without their
    // stack (said in a warning), and are counted all the same.
    let unknown: u64 = leaks
        .iter()
        .filter(|v| v["commits"].as_u64().unwrap() > 0 && v["stack"].as_array().unwrap().is_empty())
        .map(|v| v["still_mapped"].as_u64().unwrap())
        .sum();
    let (leaked, churned) = (committed("leaker"), committed("churner"));
    assert!(leaked >= 24 << 20, "{lines:?}");
    assert_eq!(held_by("leaker") + held_by("churner") + unknown, leaked + churned, "{leaks:#?}");
    assert!(held_by("leaker") >= leaked / 2, "{leaks:#?}");
    let summary = of_type(&values, "summary")[0].clone();
    let warned =
        summary["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("without their stack"));
    assert!(unknown == 0 || warned, "{summary:#?}");
    let top = functions(leaks.iter().find(|v| !v["stack"].as_array().unwrap().is_empty()).unwrap());
    assert!(top.iter().any(|f| f == "leaker") && top.iter().any(|f| f.contains("mprotect")), "{top:?}");
    let calls: u64 = leaks.iter().map(|v| v["commits"].as_u64().unwrap()).sum();
    assert!(calls > 1000, "{calls} commits");
    let hits = summary["hits"].as_u64().unwrap();
    let from_ring = summary["from_ring"].as_u64().unwrap();
    assert!(hits >= calls && from_ring > 0, "{summary:#?}");
}
