//! `--record FILE` and `syscatch report FILE`: the analysis run offline on a recording gives the live run's
//! output, with the target gone; a file that is not a whole recording is refused with one line.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn read_lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p).unwrap().lines().map(str::to_string).collect()
}

/// Records a `--leaks` trace of the UCX-shaped worker (GOT hooks, so libc's mmap probes fire too), then reports
/// the recording after the target is gone: the report, the events and the folded stacks are the live run's.
#[test]
fn report_of_a_recording_equals_the_live_run() {
    require_ptrace();
    let (rec, live_events, live_folded) = (tmp("ucx.rec"), tmp("ucx-live.jsonl"), tmp("ucx-live.folded"));
    let lib = shared_lib("ucx_like_lib");
    let prog = testprog_linked("ucx_like", &[&lib], &[]);
    let mut cmd = Command::new(prog);
    cmd.env("UCXLIKE_HOOK", "got").env_remove("UCX_RCACHE_MAX_UNRELEASED").env_remove("UCX_MEM_MMAP_HOOK_MODE");
    let mut t = Target::start_cmd(&mut cmd);
    assert_eq!(t.out.next(), "hook got");
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&[
        "--pid",
        &pid,
        "--leaks",
        "--json",
        "--smaps-every",
        "100ms",
        "-o",
        live_events.to_str().unwrap(),
        "--folded",
        live_folded.to_str().unwrap(),
        "--record",
        rec.to_str().unwrap(),
    ]);
    sc.wait_attached();
    t.send("go 64");
    t.out.until(|l| l == "done");
    sc.signal(libc::SIGINT);
    let (status, live_out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
    let live = json_lines(&live_out);
    assert!(live.iter().any(|v| v["type"] == "finding"), "{live_out:#?}");
    let events = read_lines(&live_events);
    assert!(events.len() > 64, "{} events", events.len());

    // The target is gone: everything now comes from the recording and the files on this machine.
    let (rep_events, rep_folded) = (tmp("ucx-rep.jsonl"), tmp("ucx-rep.folded"));
    let (code, out, err) = run_syscatch(&[
        "report",
        rec.to_str().unwrap(),
        "--leaks",
        "--json",
        "-o",
        rep_events.to_str().unwrap(),
        "--folded",
        rep_folded.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let report = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
    assert_eq!(report, live, "report differs from the live run");
    assert_eq!(read_lines(&rep_events), events);
    assert_eq!(read_lines(&rep_folded), read_lines(&live_folded));

    // Without --leaks, the events as the live run rendered them (text this time), and no report.
    let (code, text, err) = run_syscatch(&["report", rec.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(text.lines().filter(|l| l.contains(":mmap(") || l.contains(":munmap(")).count() >= 64, "{text}");
    assert!(!text.contains("finding"), "{text}");

    // A recording is small: stack windows are cut to what the unwinder read, and the file is compressed.
    let size = std::fs::metadata(&rec).unwrap().len();
    assert!(size < 200 * events.len() as u64 + (1 << 20), "{size} bytes for {} events", events.len());

    // Cut short (syscatch killed while recording), it is refused with one line.
    let bytes = std::fs::read(&rec).unwrap();
    let cut = tmp("ucx-cut.rec");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, out, err) = run_syscatch(&["report", cut.to_str().unwrap(), "--leaks"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn report_refuses_what_is_not_a_recording() {
    let (code, _, err) = run_syscatch(&["report", "/nonexistent/x.rec"]);
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
    assert!(err.contains("cannot open /nonexistent/x.rec"), "{err}");
    let junk = tmp("junk.rec");
    std::fs::write(&junk, b"{\"not\": \"a recording\"}\n").unwrap();
    let (code, _, err) = run_syscatch(&["report", junk.to_str().unwrap()]);
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
    assert!(err.contains("is not a syscatch recording"), "{err}");
}
