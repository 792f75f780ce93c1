//! The core trace: exact capture of syscall(SYS_mmap) return values on real multi-threaded targets, clean
//! detach, no harm done.

use crate::common::*;

/// The breakpoint address syscatch reports in its "attached" line.
fn site_of(err: &[String]) -> u64 {
    let l = err
        .iter()
        .find(|l| l.contains("breakpoint on syscall() at"))
        .expect("attached line");
    u64::from_str_radix(l.rsplit("0x").next().unwrap().trim(), 16).unwrap()
}

/// The first bytes of libc's syscall() in the file, found through gdb-free means: the same bytes must be in
/// memory after detach. We compare against a second, untraced process's memory at the same libc offset.
fn libc_bytes_untraced(addr: u64, pid: i32) -> Vec<u8> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let base = maps
        .lines()
        .find(|l| l.contains("libc.so") && l.split_whitespace().nth(2) == Some("00000000"))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .unwrap();
    let off = addr - base;
    let me = std::fs::read_to_string("/proc/self/maps").unwrap();
    let my_base = me
        .lines()
        .find(|l| l.contains("libc.so") && l.split_whitespace().nth(2) == Some("00000000"))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .unwrap();
    read_mem(std::process::id() as i32, my_base + off, 16)
}

#[test]
fn captures_every_mmap_of_every_thread_exactly() {
    require_ptrace();
    let prog = testprog("mmap_threads");
    let mut t = Target::start(&prog, &["8", "5"]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    let truth = truth_mmaps(&lines);
    assert_eq!(truth.len(), 40);
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    let values = json_lines(&out);
    let mut got = captured_mmaps(&values);
    let mut want = truth.clone();
    got.sort();
    want.sort();
    assert_eq!(
        got, want,
        "every matching call captured exactly once with its address and length"
    );
    // Nothing else was reported: getpid and futex went through syscall() too, glibc mmap() did not.
    assert!(
        values
            .iter()
            .filter(|v| v["type"] == "event")
            .all(|v| v["data"]["syscall"] == "mmap")
    );
    let summary = values.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["data"]["end"], "signal");
    assert_eq!(summary["data"]["matching"], 40);
    assert_eq!(summary["data"]["hits"], 40 * 3);
    // After detach: no tracer, the probed bytes are libc's own, and the target finishes normally.
    let site = site_of(&err);
    let status_text = std::fs::read_to_string(format!("/proc/{}/status", t.pid)).unwrap();
    assert!(status_text.contains("TracerPid:\t0"), "still traced after detach");
    assert_eq!(read_mem(t.pid, site, 16), libc_bytes_untraced(site, t.pid));
    t.send("exit");
    assert_eq!(t.wait().code(), Some(7));
}
