//! `syscatch watch`: a server-like tree (testprogs/slow_leak.c: a parent and three children, one leaking at a
//! rate its own clock keeps, one churning, one idle) watched from /proc alone: the leaking process and its rate,
//! the others' none, a process that exits said and the watch going on, and the bad input.

use crate::common::*;
use serde_json::Value;

/// The tree and its children's pids, with the leaker's true rate in MiB/min.
pub struct Tree {
    pub t: Target,
    pub leaker: i32,
    churner: i32,
    idle: i32,
    pub mib_per_min: f64,
}

pub fn tree(bytes: u64, period_ms: u64, churn_mb_s: u64) -> Tree {
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
    // A host name would need the resolver (which the static build leaves out): an IP:PORT is asked for.
    let (code, _, err) = run_syscatch(&["watch", "--pid", "1", "--metrics", "localhost:9464"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.lines().count() == 1 && err.contains("IP:PORT"), "{err}");
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
    let first = report.split("#1 grows").nth(1).unwrap_or_else(|| panic!("a leak candidate: {report}"));
    assert!(first.split("\n\n").next().unwrap().contains("pool_grow"), "{report}");
    let json = std::fs::read_to_string(files.iter().find(|f| f.ends_with(".jsonl")).unwrap()).unwrap();
    let leaks: Vec<Value> = json_text(&json).into_iter().filter(|v| v["type"] == "leak").collect();
    assert!(leaks[0]["data"]["stack"].to_string().contains("pool_grow"), "{leaks:#?}");
    // Its rate is the leaker's, within 10%, with an interval that holds it.
    let rate = &leaks[0]["data"]["rate"];
    let (got, truth) = (rate["mib_per_min"].as_f64().unwrap(), tr.mib_per_min);
    assert!((got - truth).abs() <= 0.1 * truth, "{truth} MiB/min: {rate}");
    assert!(
        rate["low_mib_per_min"].as_f64() <= Some(truth) && Some(truth) <= rate["high_mib_per_min"].as_f64(),
        "{rate}"
    );
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

/// A GET over plain HTTP/1.0: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP answer");
    let head = String::from_utf8_lossy(&all[..split]).lines().next().unwrap_or("").to_string();
    (head, all[split + 4..].to_vec())
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b == b'_' { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// `--metrics`: syscatch's `/metrics` is the Prometheus text format, and a real Prometheus (started here on a
/// loopback port, scraping every second) stores the leaker's growth rate within 10% of the truth under its
/// process name, the churner's as none, with no pid label; `up` is 1. With no capture yet,
/// `/debug/pprof/allocs` says so (404).
#[test]
fn prometheus_scrapes_the_watch_figures() {
    let Some(prometheus) = optional_tool("prometheus", "the metrics test scrapes syscatch with a real Prometheus")
    else {
        return;
    };
    let tr = tree(512 << 10, 100, 50);
    let parent = tr.t.pid.to_string();
    let mut sc = Syscatch::start(&[
        "watch",
        "--pid",
        &parent,
        "--tree",
        "--every",
        "500ms",
        "--metrics",
        "127.0.0.1:0",
        "--json",
    ]);
    let said = sc.err.until(|l| l.contains("/metrics"));
    let addr = said.last().unwrap().split("http://").nth(1).unwrap().split('/').next().unwrap().to_string();
    let (status, body) = http_get(&addr, "/metrics");
    let text = String::from_utf8(body).unwrap();
    assert!(status.contains("200"), "{status}");
    assert!(text.contains("# TYPE syscatch_growth_bytes_per_second gauge\n"), "{text}");
    assert!(text.contains("syscatch_build_info{version=\""), "{text}");
    assert!(text.contains("syscatch_rss_swap_bytes{process=\"leaker\",rank=\"\"} "), "{text}");
    assert!(!text.contains("pid="), "{text}");
    assert!(http_get(&addr, "/debug/pprof/allocs").0.contains("404"), "no capture yet");

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("prometheus");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: syscatch\n    static_configs:\n      \
             - targets: ['{addr}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    let mut prom = std::process::Command::new(prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("prometheus starts");
    let web = format!("127.0.0.1:{port}");
    let query = |q: &str| -> Vec<Value> {
        let Ok(s) = std::net::TcpStream::connect(&web) else { return Vec::new() };
        drop(s);
        let (_, body) = http_get(&web, &format!("/api/v1/query?query={}", url_encode(q)));
        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    };
    let value = |r: &Value| r["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()).unwrap();
    let truth = tr.mib_per_min * 1048576.0 / 60.0;
    let started = std::time::Instant::now();
    let mut last;
    let found = loop {
        last = query("syscatch_growth_bytes_per_second{process=\"leaker\"}");
        if last.first().is_some_and(|r| (value(r) - truth).abs() <= 0.1 * truth) {
            break true;
        }
        if started.elapsed().as_secs() > 60 {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let up = query("up{job=\"syscatch\"}");
    let churner = query("syscatch_growth_bytes_per_second{process=\"churner\"}");
    let _ = prom.kill();
    let _ = prom.wait();
    sc.signal(libc::SIGTERM);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    assert!(found, "the leaker's rate ({truth} B/s) in Prometheus: {last:#?}\n{log}");
    let labels = last[0]["metric"].as_object().unwrap();
    assert!(labels.contains_key("process") && !labels.contains_key("pid"), "{labels:?}");
    assert_eq!(up.first().map(value), Some(1.0), "{up:#?}");
    assert!(churner.first().is_some_and(|r| value(r).abs() < 0.02 * truth), "{churner:#?}");
}

/// A memory cgroup of the test's own, under the cgroup it runs in (v2 with the memory controller, else v1's memory
/// hierarchy), with a limit; removed on drop once empty.
struct Cgroup {
    dir: std::path::PathBuf,
}

impl Cgroup {
    fn new(name: &str, limit: u64) -> Option<Cgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let v2_root = std::path::Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(v2_root.join("cgroup.controllers")).is_ok_and(|c| c.contains("memory"));
        let (base, limit_file) = if v2 {
            let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
            (v2_root.join(path.trim_start_matches('/')), "memory.max")
        } else {
            let path = own.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))?;
            (std::path::Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')), "memory.limit_in_bytes")
        };
        let dir = base.join(name);
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).ok()?;
        std::fs::write(dir.join(limit_file), limit.to_string()).ok()?;
        // No swap to flee to: the limit is met, not swapped past.
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
        Some(Cgroup { dir })
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// A leaker of 10 MiB/s in a cgroup limited to 160 MiB: the limit is the cgroup's, the projected time to it is within
/// 20% of when the OOM killer actually ended the leaker (its `exit` line), and `--trigger-oom` fired before that.
#[test]
fn the_time_to_a_cgroup_limit_is_told_and_the_oom_trigger_fires_first() {
    require_ptrace();
    let Some(cg) = Cgroup::new(&format!("syscatch-test-{}", std::process::id()), 160 << 20) else {
        panic!("cannot make a memory cgroup with a limit (the test runs as root on a machine with cgroups)");
    };
    let procs = cg.dir.join("cgroup.procs");
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg(format!(
        "echo $$ > {} && exec {} 1048576 100 0",
        procs.display(),
        testprog("slow_leak").display()
    ));
    let mut t = Target::start_cmd(&mut cmd);
    let lines = t.out.until(|l| l == "ready");
    let leaker: i32 = lines.iter().find_map(|l| l.strip_prefix("leaker ")?.split(' ').next()?.parse().ok()).unwrap();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("oom-captures");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let parent = t.pid.to_string();
    let args = ["watch", "--pid", &parent, "--tree", "--every", "250ms", "--trigger-oom", "6s", "--capture", "2s"];
    let mut sc = Syscatch::start_cmd(syscatch_cmd().args(args).arg("--out").arg(&dir));
    let mut seen: Vec<Value> = Vec::new();
    let exit = loop {
        let v: Value = serde_json::from_str(&sc.out.next()).unwrap();
        if v["type"] == "exit" && v["data"]["pid"] == leaker {
            break v["data"]["time"].as_f64().unwrap();
        }
        seen.push(v);
    };
    sc.signal(libc::SIGTERM);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    t.close_stdin();
    let rows: Vec<&Value> =
        seen.iter().filter(|v| v["type"] == "watch" && v["data"]["pid"] == leaker).map(|v| &v["data"]).collect();
    let bound = &rows.last().unwrap()["limit"];
    assert_eq!(bound["bound"], "cgroup", "{bound}");
    assert!(bound["file"].as_str().unwrap().starts_with(cg.dir.to_str().unwrap()), "{bound} {}", cg.dir.display());
    // Half-way to the kill (and with ten samples at least), the projection is within 20% of what came to pass.
    let half = rows
        .iter()
        .filter(|r| r["growth"]["points"].as_u64().unwrap_or(0) >= 10 && r["to_limit_s"].is_number())
        .find(|r| r["time"].as_f64().unwrap() >= exit / 2.0)
        .unwrap_or_else(|| panic!("a projection half-way to {exit}s: {rows:#?}"));
    let (at, projected) = (half["time"].as_f64().unwrap(), half["to_limit_s"].as_f64().unwrap());
    let truth = exit - at;
    assert!((projected - truth).abs() <= 0.2 * truth, "at {at}s: {projected}s projected, {truth}s true: {half}");
    let started = seen.iter().find(|v| v["type"] == "capture" && v["data"]["state"] == "started");
    let started = started.unwrap_or_else(|| panic!("--trigger-oom fired: {seen:#?}"));
    assert_eq!(started["data"]["pid"], leaker);
    assert!(started["data"]["time"].as_f64().unwrap() < exit, "before the kill: {started}");
}

/// `--leaks --metrics`: a trace serves its figures as `watch` does, with the top stacks by a short stable id and
/// their caller; the leaker's pool (600 MiB/min) is there at its rate, within 10%, and `/debug/pprof/allocs` is the
/// trace so far's profile. Polled until the rate is there (published every 5 s).
#[test]
fn a_trace_serves_its_top_stacks_to_prometheus() {
    require_ptrace();
    let mut tr = tree(1 << 20, 100, 0);
    let pid = tr.leaker.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--leaks", "--metrics", "127.0.0.1:0", "--for", "120s"]);
    let line = sc.err.until(|l| l.contains("/metrics")).pop().unwrap();
    let addr = line.split("http://").nth(1).and_then(|r| r.split('/').next()).unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let pool = loop {
        let (head, body) = http_get(&addr, "/metrics");
        assert!(head.contains("200"), "{head}");
        let text = String::from_utf8(body).unwrap();
        let found =
            text.lines().find(|l| l.starts_with("syscatch_stack_growth_bytes_per_second{") && l.contains("pool_grow"));
        if let Some(l) = found.filter(|l| !l.ends_with(" 0")) {
            assert!(
                text.contains("syscatch_anon_bytes{process=\"leaker\"") && text.contains("syscatch_build_info"),
                "{text}"
            );
            break l.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "no rate for the pool: {text}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let rate: f64 = pool.rsplit(' ').next().unwrap().parse().unwrap();
    let truth = tr.mib_per_min * 1048576.0 / 60.0;
    assert!((rate - truth).abs() <= 0.1 * truth, "{truth} B/s: {pool}");
    let id = pool.split("stack=\"").nth(1).unwrap().split('"').next().unwrap();
    assert!(id.len() == 8 && id.chars().all(|c| c.is_ascii_hexdigit()), "{pool}");
    let (head, gz) = http_get(&addr, "/debug/pprof/allocs");
    assert!(head.contains("200"), "{head}");
    let mut profile = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut profile).unwrap();
    assert!(profile.windows(9).any(|w| w == b"pool_grow"));
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:?}");
    tr.t.close_stdin();
    // Not with several processes, nor without --leaks.
    for bad in [
        &["--pid", &pid, "--tree", "--leaks", "--metrics", "127.0.0.1:0"][..],
        &["--pid", &pid, "--metrics", "127.0.0.1:0"],
    ] {
        let (code, _, err) = run_syscatch(bad);
        assert!(code == 2 && err.lines().count() == 1 && err.contains("--metrics"), "{err}");
    }
}
