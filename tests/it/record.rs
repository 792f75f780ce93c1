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

/// A `--leaks` trace of the UCX-shaped worker (64 steps) with a recording, under `fault`: the recording, the
/// live run's JSON lines, and the files of its events and folded stacks.
fn record_ucx(name: &str, fault: Option<&str>) -> (PathBuf, Vec<serde_json::Value>, PathBuf, PathBuf) {
    require_ptrace();
    let (rec, live_events, live_folded) =
        (tmp(&format!("{name}.rec")), tmp(&format!("{name}-live.jsonl")), tmp(&format!("{name}-live.folded")));
    let lib = shared_lib("ucx_like_lib");
    let prog = testprog_linked("ucx_like", &[&lib], &[]);
    let mut cmd = Command::new(prog);
    cmd.env("UCXLIKE_HOOK", "got").env_remove("UCX_RCACHE_MAX_UNRELEASED").env_remove("UCX_MEM_MMAP_HOOK_MODE");
    let mut t = Target::start_cmd(&mut cmd);
    assert_eq!(t.out.next(), "hook got");
    let pid = t.pid.to_string();
    let mut sc_cmd = syscatch_cmd();
    if let Some(f) = fault {
        sc_cmd.env("SYSCATCH_TEST_FAULT", f);
    }
    let mut sc = Syscatch::start_cmd(sc_cmd.args([
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
    ]));
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
    (rec, live, live_events, live_folded)
}

/// Records a `--leaks` trace of the UCX-shaped worker (GOT hooks, so libc's mmap probes fire too), then reports
/// the recording after the target is gone: the report, the events and the folded stacks are the live run's.
#[test]
fn report_of_a_recording_equals_the_live_run() {
    let (rec, live, live_events, live_folded) = record_ucx("ucx", None);
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

    // Cut short (syscatch killed while recording), what it holds is reported, and said to be truncated.
    let bytes = std::fs::read(&rec).unwrap();
    let cut = tmp("ucx-cut.rec");
    std::fs::write(&cut, &bytes[..bytes.len() * 9 / 10]).unwrap();
    let (code, out, err) = run_syscatch(&["report", cut.to_str().unwrap(), "--leaks", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.lines().next().unwrap().contains("TRUNCATED"), "{err}");
    // The calls of its first part (the modules, maps and vDSO at its start take much of the file).
    let mapped = |values: &[serde_json::Value]| -> u64 {
        let stacks = values.iter().filter(|v| v["type"] == "leak" || v["type"] == "working_set");
        stacks.map(|v| v["data"]["mapped"].as_u64().unwrap()).sum()
    };
    let part = mapped(&json_text(&out));
    assert!(part > 0 && part <= mapped(&report), "{part} of {} bytes mapped", mapped(&report));
}

/// Past its first minute a `--leaks` recording keeps the leak model's changes at each sample instead of each call
/// (the test asks for it from the start): the report of it is still the live run's, and it holds each stack once,
/// the changes once a sample, and no call.
#[test]
fn a_recording_of_changes_reports_as_the_live_run() {
    let (rec, live, _, live_folded) = record_ucx("ucx-changes", Some("record-changes"));
    let rep_folded = tmp("ucx-changes-rep.folded");
    let (code, out, err) =
        run_syscatch(&["report", rec.to_str().unwrap(), "--leaks", "--json", "--folded", rep_folded.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let report = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
    assert_eq!(report, live, "report differs from the live run");
    assert_eq!(read_lines(&rep_folded), read_lines(&live_folded));

    let text = Command::new("zcat").arg(&rec).output().unwrap();
    let kinds: Vec<String> = String::from_utf8(text.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["t"].as_str().unwrap().to_string())
        .collect();
    let count = |k: &str| kinds.iter().filter(|t| *t == k).count();
    let stacks = live.iter().filter(|v| v["type"] == "leak" || v["type"] == "working_set").count();
    assert_eq!(count("event"), 0, "{kinds:?}");
    assert!(count("stack") >= stacks && count("stack") < 64, "{} stack records for {stacks} stacks", count("stack"));
    assert!(count("changes") <= count("sample") + 1, "{kinds:?}");

    // Without --leaks there are no calls to show, and it says so.
    let (code, text, err) = run_syscatch(&["report", rec.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(!text.contains(":mmap("), "{text}");
    assert!(format!("{text}{err}").contains("report it with --leaks"), "{text}{err}");
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

/// syscatch SIGKILLed while it records (as the OOM killer or a pod's end would): the recording it leaves is read up
/// to where it stopped, says so, and names the leaking pool; the target goes on untraced. The recording is polled
/// with `report` until it holds the pool (it is flushed every second), then syscatch is killed.
#[test]
fn a_recording_cut_by_sigkill_is_reported_up_to_the_cut() {
    use std::os::unix::process::ExitStatusExt;
    require_ptrace();
    let mut tree = crate::watch::tree(1 << 20, 100, 0);
    let rec = tmp("killed.rec");
    let _ = std::fs::remove_file(&rec);
    let pid = tree.leaker.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--for", "120s", "--record", rec.to_str().unwrap()]);
    sc.wait_attached();
    let report = || run_syscatch(&["report", rec.to_str().unwrap(), "--leaks", "--json"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let held = |out: &str| -> u64 {
        let values = json_text(out);
        let pool = values.iter().find(|v| v["type"] == "leak" && v["data"]["stack"].to_string().contains("pool_grow"));
        pool.and_then(|p| p["data"]["still_mapped"].as_u64()).unwrap_or(0)
    };
    // Enough that the report has a rate: a few MiB (a MiB every 100 ms, sampled every second).
    while held(&report().1) < 5 << 20 {
        assert!(std::time::Instant::now() < deadline, "the recording never held the pool: {:?}", report());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    sc.signal(libc::SIGKILL);
    let (status, _, _) = sc.finish();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let (code, out, err) = report();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("TRUNCATED"), "{err}");
    assert!(held(&out) >= 5 << 20, "{out}");
    let summary = json_text(&out).into_iter().find(|v| v["type"] == "summary").unwrap();
    assert!(summary["data"]["warnings"].to_string().contains("truncated"), "{summary}");
    // The guardian restored the target: untraced, and still leaking on its own clock.
    let untraced = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tracer_pid(tree.leaker) != Some(0) {
        assert!(std::time::Instant::now() < untraced, "still traced");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    tree.t.close_stdin();
    assert!(tree.t.wait().success());
}

/// `--every`: a long trace writes its report's files as it goes, each time the trace so far, so they hold the
/// evidence before the trace ends (or if syscatch is killed); at the end, the final report replaces them.
#[test]
fn every_writes_the_files_of_the_trace_so_far() {
    require_ptrace();
    let mut tree = crate::watch::tree(256 << 10, 100, 0);
    let (html, pprof) = (tmp("every.html"), tmp("every.pb.gz"));
    let pid = tree.leaker.to_string();
    let (h, p) = (html.to_str().unwrap(), pprof.to_str().unwrap());
    let args = ["--pid", &pid, "--leaks", "--smaps-every", "250ms", "--every", "1s", "--html", h, "--pprof", p];
    let mut sc = Syscatch::start(&[&args[..], &["--for", "60s"]].concat());
    sc.wait_attached();
    // Two interim reports: the second's files are whole, and name the pool.
    for _ in 0..2 {
        let l = sc.err.until(|l| l.contains("syscatch: the report of the first")).pop().unwrap();
        assert!(l.contains(h) && l.contains(p) && l.contains(" written"), "{l}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.trim_end().ends_with("</html>") && page.contains("pool_grow"), "{} bytes", page.len());
    let mut profile = Vec::new();
    let gz = std::fs::read(&pprof).unwrap();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut profile).unwrap();
    assert!(profile.windows(9).any(|w| w == b"pool_grow"));
    // Ctrl-C: the final report replaces them.
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:?}");
    let last = std::fs::read_to_string(&html).unwrap();
    assert!(last.trim_end().ends_with("</html>") && last.contains("Findings"), "{} bytes", last.len());
    tree.t.close_stdin();
    assert!(tree.t.wait().success());
    // Without a file to write, or for several processes, it is refused in one line.
    for bad in
        [&["--pid", &pid, "--leaks", "--every", "1s"][..], &["--pid", &pid, "--tree", "--every", "1s", "--html", h]]
    {
        let (code, _, err) = run_syscatch(bad);
        assert!(code != 0 && err.lines().count() == 1 && err.contains("--every"), "{err}");
    }
}
