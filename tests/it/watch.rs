//! `syscatch watch`: a server-like tree (testprogs/slow_leak.c: a parent and three children, one leaking at a
//! rate its own clock keeps, one churning, one idle) watched from /proc alone: the leaking process and its rate,
//! the others' none, a process that exits said and the watch going on, and the bad input.

use crate::common::*;
use serde_json::Value;

/// The tree and its children's pids, with the leaker's true rate in MiB/min.
struct Tree {
    t: Target,
    leaker: i32,
    churner: i32,
    idle: i32,
    mib_per_min: f64,
}

fn tree(bytes: u64, period_ms: u64, churn_mb_s: u64) -> Tree {
    let args = [bytes.to_string(), period_ms.to_string(), churn_mb_s.to_string()];
    let mut t = Target::start(&testprog("slow_leak"), &args.iter().map(String::as_str).collect::<Vec<_>>());
    let (mut leaker, mut churner, mut idle, mut rate) = (0, 0, 0, 0.0);
    for l in t.out.until(|l| l == "ready") {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["leaker", pid, bytes, period] => {
                leaker = pid.parse().unwrap();
                let (b, p): (f64, f64) = (bytes.parse().unwrap(), period.parse().unwrap());
                rate = b / 1048576.0 / (p / 60000.0);
            }
            ["churner", pid] => churner = pid.parse().unwrap(),
            ["idle", pid] => idle = pid.parse().unwrap(),
            _ => {}
        }
    }
    Tree { t, leaker, churner, idle, mib_per_min: rate }
}

fn watch_line(l: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(l).ok()?;
    (v["type"] == "watch" || v["type"] == "exit").then_some(v)
}

/// The leaker (300 MiB/min in half-MiB steps, beside 50 MB/s of churn) is told within 10% with an interval that
/// holds its true rate, from ten samples on; the churner and the idle process grow at no rate; the limit is the
/// host's or a cgroup's, with the projection its headroom over the rate; the idle child killed meanwhile leaves
/// with an `exit` line and the watch goes on. Nobody is traced.
#[test]
fn watch_tells_the_leaking_process_and_its_rate_beside_churn_and_idle() {
    let tr = tree(512 << 10, 100, 50);
    let parent = tr.t.pid.to_string();
    let mut sc = Syscatch::start(&["watch", "--pid", &parent, "--tree", "--every", "250ms", "--for", "8s"]);
    // The first sample names all four; at the third, the idle child is killed.
    let mut seen = Vec::new();
    let mut rounds = 0;
    while rounds < 3 {
        let v = watch_line(&sc.out.next()).expect("JSON Lines on a pipe");
        rounds += usize::from(v["data"]["pid"] == tr.t.pid);
        seen.push(v);
    }
    for pid in [tr.t.pid, tr.leaker, tr.churner, tr.idle] {
        assert!(seen.iter().any(|v| v["data"]["pid"] == pid), "{pid} watched from the first sample: {seen:#?}");
        assert_eq!(tracer_pid(pid), Some(0), "never traced");
    }
    // SAFETY: killing a child of the tree we started.
    unsafe { libc::kill(tr.idle, libc::SIGKILL) };
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    seen.extend(out.iter().filter_map(|l| watch_line(l)));
    let exit = seen.iter().position(|v| v["type"] == "exit" && v["data"]["pid"] == tr.idle);
    let exit = exit.unwrap_or_else(|| panic!("the idle child's exit is said: {err:#?}"));
    assert!(seen[exit + 1..].iter().any(|v| v["data"]["pid"] == tr.leaker), "the watch goes on after an exit");
    assert!(!seen[exit + 1..].iter().any(|v| v["type"] == "watch" && v["data"]["pid"] == tr.idle));

    let last = |pid: i32| {
        seen.iter().rev().find(|v| v["type"] == "watch" && v["data"]["pid"] == pid).map(|v| &v["data"]).unwrap()
    };
    let leak = last(tr.leaker);
    let g = &leak["growth"];
    let (rate, low, high) = (
        g["mib_per_min"].as_f64().unwrap(),
        g["low_mib_per_min"].as_f64().unwrap(),
        g["high_mib_per_min"].as_f64().unwrap(),
    );
    assert!(g["points"].as_u64().unwrap() >= 10, "{leak}");
    let truth = tr.mib_per_min;
    assert!((rate - truth).abs() <= 0.1 * truth, "{rate} MiB/min told, {truth} true: {leak}");
    assert!(low <= truth && truth <= high, "the interval holds the truth {truth}: {leak}");
    assert_eq!(leak["grows"], "anon_large", "{leak}");
    for pid in [tr.t.pid, tr.churner] {
        let d = last(pid);
        let g = &d["growth"];
        assert!(g["mib_per_min"].as_f64().unwrap().abs() < 0.02 * truth, "{pid} does not grow: {d}");
        assert!(d["to_limit_s"].is_null(), "{d}");
    }
    // The projection: the headroom over the rates of everyone under the same limit (the leaker's alone here).
    let headroom = leak["limit"]["headroom_kb"].as_f64().unwrap() * 1024.0;
    let projected = leak["to_limit_s"].as_f64().unwrap();
    let want = headroom / (rate * 1048576.0 / 60.0);
    assert!((projected - want).abs() <= 0.01 * want + 1.0, "{projected} s, want {want}: {leak}");
    assert!(["host", "cgroup"].contains(&leak["limit"]["bound"].as_str().unwrap()), "{leak}");
}

#[test]
fn watch_refuses_bad_input_in_one_line() {
    let (code, out, err) = run_syscatch(&["watch", "--pid", "999999999"]);
    assert_ne!(code, 0);
    assert!(out.is_empty() && err.lines().count() == 1 && err.contains("999999999"), "{err}");
    let (code, _, err) = run_syscatch(&["watch"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.lines().count() == 1 && err.contains("--pid"), "{err}");
    let (code, _, err) = run_syscatch(&["watch", "--pid", "1", "--every", "often"]);
    assert_eq!(code, 2, "{err}");
}

/// The case: the leaker maps 1 MiB every 2 s (30 MiB/min) amid 50 MB/s of churn, beside a churner and an
/// idle process under one parent. `--trigger 10MiB/min` captures the leaker within 2 minutes, and nobody else;
/// the capture's report names the pool's stack (text and JSON), its files are all there, the trigger holding
/// meanwhile is counted, and SIGTERM ends the watch cleanly.
#[test]
fn a_trigger_captures_the_leaking_process_alone_and_its_report_names_the_pool() {
    require_ptrace();
    let tr = tree(1 << 20, 2000, 50);
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("watch-captures");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let parent = tr.t.pid.to_string();
    let args = ["watch", "--pid", &parent, "--tree", "--every", "1s", "--trigger", "10MiB/min", "--capture", "20s"];
    let mut sc = Syscatch::start_cmd(syscatch_cmd().args(args).arg("--out").arg(&dir));
    let mut seen = Vec::new();
    let started = std::time::Instant::now();
    let written = loop {
        let v = serde_json::from_str::<Value>(&sc.out.next()).unwrap();
        assert!(started.elapsed().as_secs() < 150, "no capture within 2 minutes: {seen:#?}");
        if v["type"] == "capture" && v["data"]["state"] == "written" {
            break v;
        }
        seen.push(v);
    };
    sc.signal(libc::SIGTERM);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let captures: Vec<&Value> = seen.iter().filter(|v| v["type"] == "capture").collect();
    assert_eq!(captures.len(), 1, "one capture started: {captures:#?}");
    assert_eq!(captures[0]["data"]["pid"], tr.leaker, "{captures:#?}");
    assert!(out.iter().all(|l| !l.contains("\"capture\"")), "nothing else captured: {out:#?}");
    let d = &written["data"];
    assert_eq!((d["pid"].as_i64(), d["exit_status"].as_i64()), (Some(i64::from(tr.leaker)), Some(0)), "{d}");
    let files: Vec<&str> = d["files"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for ext in ["txt", "html", "rec", "pb.gz", "jsonl"] {
        assert!(files.iter().any(|f| f.ends_with(&format!(".{ext}"))), "{ext} written: {files:?}");
    }
    let mut during = seen.iter().filter(|v| v["type"] == "watch" && v["data"]["pid"] == tr.leaker);
    assert!(during.clone().any(|v| v["data"]["capturing"] == true), "the capture runs while the watch goes on");
    assert!(during.next_back().unwrap()["data"]["triggers_ignored"].as_u64().unwrap() > 0, "counted while it ran");
    // The report names the pool: its first leak candidate's stack goes through pool_grow.
    let txt = files.iter().find(|f| f.ends_with(".txt")).unwrap();
    let report = std::fs::read_to_string(txt).unwrap();
    let first = report.split("#1 grew").nth(1).unwrap_or_else(|| panic!("a leak candidate: {report}"));
    assert!(first.split("\n\n").next().unwrap().contains("pool_grow"), "{report}");
    let json = std::fs::read_to_string(files.iter().find(|f| f.ends_with(".jsonl")).unwrap()).unwrap();
    let leaks: Vec<Value> = json_text(&json).into_iter().filter(|v| v["type"] == "leak").collect();
    assert!(leaks[0]["data"]["stack"].to_string().contains("pool_grow"), "{leaks:#?}");
    for pid in [tr.t.pid, tr.leaker, tr.churner, tr.idle] {
        assert_eq!(tracer_pid(pid), Some(0), "{pid} left untraced");
    }
}

#[test]
fn watch_refuses_an_out_it_cannot_write_before_starting() {
    let tr = tree(0, 1000, 0);
    let parent = tr.t.pid.to_string();
    let (code, out, err) =
        run_syscatch(&["watch", "--pid", &parent, "--trigger", "1MiB/min", "--out", "/nonexistent/captures"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty() && err.lines().count() == 1 && err.contains("/nonexistent/captures"), "{err}");
    let (code, _, err) = run_syscatch(&["watch", "--pid", &parent, "--trigger", "1MiB/min"]);
    assert_eq!(code, 2, "a trigger needs --out: {err}");
}
