//! Python frames against the target's own view: testprogs/py_frames.py prints, before each mmap it makes
//! through ctypes -> libc syscall(), the frames sys._getframe() sees (qualified name, file, line); each captured
//! event's Python frames must equal them, in order, on every installed CPython (pyenv 3.9 to 3.13, the system's
//! statically linked python3, and Debian sid's python3.14 and python3.15 on glibc 2.43, run in its root with
//! chroot and traced from outside). Each run of Python frames must sit just above a native
//! `_PyEval_EvalFrameDefault` frame, one run per eval call.

use crate::common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

/// The pyenv interpreter of version 3.MINOR; missing is a failure (CI machines have the same pyenv).
pub fn pyenv(minor: u32) -> PathBuf {
    let root = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".pyenv/versions");
    let dirs =
        std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{}: {e} (pyenv with CPython 3.{minor})", root.display()));
    let prefix = format!("3.{minor}.");
    let dir = dirs
        .flatten()
        .map(|d| d.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)))
        .unwrap_or_else(|| panic!("CPython 3.{minor} is not installed under {}", root.display()));
    dir.join("bin/python3")
}

/// How to start a Python target: the interpreter's command line, and where it sees testprogs/py_frames.py.
pub struct Py {
    pub argv: Vec<String>,
    pub script: String,
}

impl Py {
    pub fn at(python: &std::path::Path) -> Py {
        let script = repo().join("testprogs/py_frames.py");
        Py { argv: vec![python.display().to_string()], script: script.display().to_string() }
    }

    /// `python3.MINOR` of Debian sid, run in its root with chroot (the pid is the host's: no pid namespace); the
    /// script is copied into the root (atomically: tests run in parallel).
    pub fn sid(minor: u32) -> Py {
        Py::in_root(&crate::roots::sid(), &format!("python3.{minor}"))
    }

    /// `python` of the root file system `root`, run in it with chroot (the pid is the host's: no pid namespace);
    /// the script is copied into the root.
    pub fn in_root(root: &std::path::Path, python: &str) -> Py {
        let script = crate::roots::copy_in(root, &repo().join("testprogs/py_frames.py"));
        Py { argv: vec!["chroot".into(), root.display().to_string(), python.into()], script }
    }

    pub fn start(&self, mode: &[&str]) -> Target {
        let mut cmd = std::process::Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]).arg(&self.script).args(mode);
        Target::start_cmd(&mut cmd)
    }
}

type PyFrames = Vec<(String, String, u64)>;

/// Runs the target under `syscatch ARGS --json --pid N` and returns (expected frames by size, events by size).
fn run(python: &std::path::Path, args: &[&str]) -> (HashMap<u64, PyFrames>, HashMap<u64, Value>, Vec<Value>) {
    run_mode(&Py::at(python), &[], &[], args)
}

/// [`run`] with the target's mode arguments and syscatch arguments before `--pid` (a subcommand).
fn run_mode(
    py: &Py,
    mode: &[&str],
    before: &[&str],
    args: &[&str],
) -> (HashMap<u64, PyFrames>, HashMap<u64, Value>, Vec<Value>) {
    require_ptrace();
    let mut t = py.start(mode);
    let pid = t.pid.to_string();
    let mut all = before.to_vec();
    all.extend(["--pid", &pid, "--json"]);
    all.extend_from_slice(args);
    let mut sc = Syscatch::start(&all);
    sc.wait_attached();
    t.send("go");
    let mut want = HashMap::new();
    for l in t.out.until(|l| l == "done") {
        if let Some(rest) = l.strip_prefix("expect ") {
            let (size, js) = rest.split_once(' ').unwrap();
            let frames: Vec<(String, String, u64)> = serde_json::from_str(js).unwrap();
            want.insert(size.parse().unwrap(), frames);
        }
    }
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
    let values = json_lines(&out);
    let mut events = HashMap::new();
    for v in &values {
        if v["type"] == "event" && (v["data"]["syscall"] == "mmap" || v["data"]["probe"] == "big") {
            let len = u64::from_str_radix(v["data"]["args"][1].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
            events.insert(len, v["data"].clone());
        }
    }
    (want, events, values)
}

fn python_frames(stack: &Value) -> PyFrames {
    stack
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "python")
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                f["file"].as_str().unwrap().to_string(),
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Every run of Python frames is followed by `_PyEval_EvalFrameDefault`; every frame is placed.
fn assert_placed(stack: &Value, ctx: &str) {
    let frames = stack.as_array().unwrap();
    for (i, f) in frames.iter().enumerate() {
        assert!(f["kind"] == "native" || f["kind"] == "python", "{ctx}: frame kind {f}");
        if f["kind"] != "python" {
            continue;
        }
        assert_eq!(f["placed"], true, "{ctx}: frame {i} not placed: {stack:#}");
        let next = &frames[i + 1];
        assert!(
            next["kind"] == "python" || next["function"] == "_PyEval_EvalFrameDefault",
            "{ctx}: frame {i} is followed by {next}: {stack:#}"
        );
    }
}

fn check(python: PathBuf, ctx: &str) {
    check_py(&Py::at(&python), ctx)
}

fn check_py(py: &Py, ctx: &str) {
    let (want, events, values) = run_mode(py, &[], &[], &["--syscall", "mmap"]);
    // plain, method, comprehension, generator, C callback, two threads.
    assert_eq!(want.len(), 7, "{ctx}: the target's expectations: {want:#?}");
    for (size, frames) in &want {
        let ev = events.get(size).unwrap_or_else(|| panic!("{ctx}: no event for mmap of {size}"));
        assert_eq!(&python_frames(&ev["stack"]), frames, "{ctx}: mmap of {size}: {:#}", ev["stack"]);
        assert_placed(&ev["stack"], &format!("{ctx}: mmap of {size}"));
    }
    // The two threads are told apart by tid: both have their own frames, each from its own thread state.
    let tids: std::collections::HashSet<_> = [6u64, 7].iter().map(|p| events[&(p * 4096)]["tid"].clone()).collect();
    assert_eq!(tids.len(), 2, "{ctx}: the two threads' events");
    let summary = summary_data(&values);
    assert_eq!(summary["schema"], 3);
    assert_eq!(summary["warnings"], serde_json::json!([]), "{ctx}");
    // The summary says where the layout came from: syscatch's table up to 3.12, the interpreter's own
    // _Py_DebugOffsets from 3.13.
    if let Some(version) = ctx.split(' ').next().filter(|v| v.starts_with("3.")) {
        let minor: u32 = version[2..].parse().unwrap();
        let source = if minor >= 13 { "the interpreter's own _Py_DebugOffsets" } else { "syscatch's table" };
        let want = format!("Python {version} frames read with {source}");
        assert!(
            summary["notes"].as_array().unwrap().iter().any(|n| n.as_str().is_some_and(|n| n.starts_with(&want))),
            "{ctx}: {summary}"
        );
    }
}

#[test]
fn python_frames_3_9() {
    check(pyenv(9), "3.9");
}

#[test]
fn python_frames_3_10() {
    check(pyenv(10), "3.10");
}

#[test]
fn python_frames_3_11() {
    check(pyenv(11), "3.11");
}

#[test]
fn python_frames_3_12() {
    check(pyenv(12), "3.12");
}

#[test]
fn python_frames_3_13() {
    check(pyenv(13), "3.13");
}

/// 3.14 (tagged frame pointers, a new owner value) and 3.15 (a base frame ending every chain) in Debian sid's
/// root: layouts from their `_Py_DebugOffsets`. Debian's binaries have no symbol for the part of the eval loop
/// that calls out (no debug package can be had): the frames are placed by where their shim frame is.
#[test]
fn python_frames_3_14_in_sid() {
    check_py(&Py::sid(14), "3.14 (sid)");
}

#[test]
fn python_frames_3_15_in_sid() {
    check_py(&Py::sid(15), "3.15 (sid)");
}

/// Debian 13's own 3.13 on glibc 2.41 (a static interpreter without a symbol table, built with GCC 14).
#[test]
fn python_frames_3_13_in_trixie() {
    check_py(&Py::in_root(&crate::roots::trixie(), "python3.13"), "3.13 (trixie)");
}

/// Debian's python3 is one static executable (no libpython): `_PyRuntime` is found in it.
#[test]
fn python_frames_system_static_python() {
    let p = PathBuf::from("/usr/bin/python3");
    let maps_libpython = std::process::Command::new("ldd")
        .arg(&p)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libpython"))
        .unwrap_or(true);
    assert!(!maps_libpython, "/usr/bin/python3 is expected to be statically linked here");
    check(p, "system python3");
}

/// With `--fast` the matching call stops once, in the trampoline, after the kernel returned: the frames are the
/// same.
#[test]
fn python_frames_with_fast() {
    let (want, events, _) = run(&pyenv(12), &["--syscall", "mmap", "--fast"]);
    assert_eq!(want.len(), 7);
    for (size, frames) in &want {
        let ev = events.get(size).unwrap_or_else(|| panic!("no event for mmap of {size}"));
        assert_eq!(&python_frames(&ev["stack"]), frames, "mmap of {size}");
        assert_placed(&ev["stack"], &format!("--fast, mmap of {size}"));
    }
}

/// Every interpreter the tests know: pyenv's 3.9 to 3.13, then sid's 3.14 and 3.15.
fn every_python() -> impl Iterator<Item = (u32, Py)> {
    (9..=13).map(|minor| (minor, Py::at(&pyenv(minor)))).chain((14..=15).map(|minor| (minor, Py::sid(minor))))
}

/// `syscatch stack` shows a blocked thread's Python frames above its eval call, as `py-spy dump --native` does,
/// equal to the target's own view, on every version.
#[test]
fn stack_command_shows_python_frames() {
    require_ptrace();
    for (minor, py) in every_python() {
        let mut t = py.start(&["park"]);
        t.send("go");
        let line = t.out.next();
        let js = line.strip_prefix("expect 0 ").unwrap_or_else(|| panic!("3.{minor}: {line}"));
        let want: PyFrames = serde_json::from_str(js).unwrap();
        crate::stack::wait_blocked_in_read(t.pid, t.pid, 0);
        let (code, out, err) = run_syscatch(&["stack", "--pid", &t.pid.to_string(), "--json"]);
        assert_eq!(code, 0, "3.{minor}: {err}");
        let values = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
        let main = values.iter().find(|v| v["type"] == "thread" && v["data"]["tid"] == t.pid).unwrap();
        let stack = &main["data"]["stack"];
        assert_eq!(python_frames(stack), want, "3.{minor}: {stack:#}");
        assert_placed(stack, &format!("3.{minor} stack"));
        let text = run_syscatch(&["stack", "--pid", &t.pid.to_string()]).1;
        assert!(text.contains(&format!("Server.park at {}:", py.script)) || minor < 11, "3.{minor}: {text}");
        t.send("exit");
        assert_eq!(t.wait().code(), Some(0));
    }
}

/// py-spy as a second oracle: `syscatch stack` and `py-spy dump --native` give a parked thread the same Python
/// frames (function, file, line), in order, on every version, under 30 nested calls. They run one after the other
/// on a thread blocked in read() (py-spy stops the process while it reads; syscatch has detached by then).
#[test]
fn stack_command_agrees_with_py_spy() {
    require_ptrace();
    let Some(py_spy) = optional_tool("py-spy", "the py-spy comparison") else { return };
    for (minor, py) in every_python() {
        let mut t = py.start(&["park30"]);
        t.send("go");
        let line = t.out.next();
        let js = line.strip_prefix("expect 0 ").unwrap_or_else(|| panic!("3.{minor}: {line}"));
        let want: PyFrames = serde_json::from_str(js).unwrap();
        assert!(want.len() > 30, "3.{minor}: {want:?}");
        crate::stack::wait_blocked_in_read(t.pid, t.pid, 0);
        let (code, out, err) = run_syscatch(&["stack", "--pid", &t.pid.to_string(), "--json"]);
        assert_eq!(code, 0, "3.{minor}: {err}");
        let values = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
        let main = values.iter().find(|v| v["type"] == "thread" && v["data"]["tid"] == t.pid).unwrap();
        let ours = python_frames(&main["data"]["stack"]);
        assert_eq!(ours, want, "3.{minor}: syscatch against the target's own view");
        // Still parked in the same frame: syscatch let it go and nothing woke it.
        crate::stack::wait_blocked_in_read(t.pid, t.pid, 0);
        let dump = std::process::Command::new(&py_spy)
            .args(["dump", "--native", "--json", "--pid", &t.pid.to_string()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&dump.stdout);
        assert!(dump.status.success(), "3.{minor}: py-spy: {text} {}", String::from_utf8_lossy(&dump.stderr));
        let threads: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("3.{minor}: py-spy: {e}: {text}"));
        let thread = threads.as_array().unwrap().iter().find(|th| th["os_thread_id"] == t.pid).unwrap();
        // Python frames have no module (native ones name their library).
        let theirs: PyFrames = thread["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["module"].is_null())
            .map(|f| {
                (
                    f["name"].as_str().unwrap().into(),
                    f["filename"].as_str().unwrap().into(),
                    f["line"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(ours, theirs, "3.{minor}: syscatch against py-spy");
        t.send("exit");
        assert_eq!(t.wait().code(), Some(0));
    }
}

/// A Python this syscatch cannot read (3.8) costs its frames and says why, once; the trace goes on.
#[test]
fn unsupported_python_gives_native_frames_and_one_warning() {
    let (want, events, values) = run(&pyenv(8), &["--syscall", "mmap"]);
    assert_eq!(want.len(), 7);
    for size in want.keys() {
        let ev = &events[size];
        assert!(python_frames(&ev["stack"]).is_empty());
        assert!(ev["stack"].as_array().unwrap().iter().any(|f| f["function"] == "_PyEval_EvalFrameDefault"));
    }
    let warnings = summary_data(&values)["warnings"].as_array().unwrap().clone();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].as_str().unwrap().contains("Python 3.8 is not supported"), "{warnings:#?}");
}

/// A probe script on glibc's own `mmap()` catches a large allocation (a 96 MiB bytearray; a numpy array is the
/// same malloc) with the Python method that made it.
#[test]
fn libc_mmap_probe_catches_a_large_python_allocation() {
    let probe = std::env::temp_dir().join(format!("syscatch-py-big-{}.probe", std::process::id()));
    std::fs::write(&probe, "probe big at libc:mmap if arg1 >= 64M {\n    collect args, ret, stack(256)\n}\n").unwrap();
    let (want, events, _) = run_mode(&Py::at(&pyenv(12)), &["big"], &["run", probe.to_str().unwrap()], &[]);
    let _ = std::fs::remove_file(&probe);
    let frames = &want[&(96 << 20)];
    assert_eq!(frames[0].0, "Model.load");
    let ev = events
        .iter()
        .find(|(len, _)| (96 << 20..(96 << 20) + (1 << 20)).contains(*len))
        .map(|(_, ev)| ev)
        .unwrap_or_else(|| panic!("no big mmap: {:?}", events.keys()));
    assert_eq!(&python_frames(&ev["stack"]), frames, "{:#}", ev["stack"]);
    assert_placed(&ev["stack"], "libc:mmap probe");
}

/// Rough cost of one Python frame walk, printed, not asserted (`cargo test --release --test it
/// bench_python_walk -- --ignored --nocapture`): the walk of a thread blocked in read() under 30 nested calls
/// (its frames do not change meanwhile), repeated, cold then with the code cache warm.
#[test]
#[ignore]
fn bench_python_walk() {
    require_ptrace();
    let script = repo().join("testprogs/py_frames.py");
    for minor in 9..=13 {
        let mut t = Target::start(&pyenv(minor), &[script.to_str().unwrap(), "park30"]);
        t.send("go");
        t.out.next();
        crate::stack::wait_blocked_in_read(t.pid, t.pid, 0);
        let snap = syscatch::testing::live::snapshot::read_thread(t.pid, 65536).unwrap();
        let mut reader = syscatch::testing::python::live::PythonReader::locate(t.pid).unwrap().unwrap();
        let c = &snap.capture;
        let t0 = std::time::Instant::now();
        let first = reader.read_frames(t.pid, &c.regs, &c.stack);
        let cold = t0.elapsed();
        let n = 2000;
        let t0 = std::time::Instant::now();
        for _ in 0..n {
            assert_eq!(reader.read_frames(t.pid, &c.regs, &c.stack).len(), first.len());
        }
        let warm = t0.elapsed() / n;
        eprintln!("3.{minor}: {} frames, first walk {cold:?}, then {warm:?} per walk", first.len());
        t.send("exit");
        assert_eq!(t.wait().code(), Some(0));
    }
}

/// A host that loads libpython with dlopen after syscatch attached: the tracer looks for a CPython again every
/// second, so the calls made once it is found carry the Python frames (`grow` called from `serve`).
#[test]
fn python_loaded_by_dlopen_after_attach_is_found() {
    require_ptrace();
    let lib = pyenv(12).parent().unwrap().parent().unwrap().join("lib/libpython3.12.so.1.0");
    assert!(lib.exists(), "{} (pyenv's shared CPython 3.12)", lib.display());
    let host = testprog_with("py_dlopen", &["-ldl"]);
    let mut t = Target::start(&host, &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
    sc.wait_attached();
    t.send(&format!("load {}", lib.display()));
    // Events until one carries Python frames (the search runs once a second; 150 rounds of 20 ms give it 3 s).
    let mut found = None;
    while let Some(line) = sc.out.next_or_end() {
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if v["type"] != "event" {
            continue;
        }
        let py: Vec<String> = v["data"]["stack"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter(|f| f["kind"] == "python")
                    .filter_map(|f| f["function"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if !py.is_empty() {
            found = Some((py, v["data"]["ret"].as_str().unwrap_or("").to_string()));
            break;
        }
    }
    let (py, ret) = found.expect("no event with Python frames");
    assert_eq!(py[..2], ["grow".to_string(), "serve".to_string()], "{py:?}");
    let truth: Vec<String> = t.out.until(|l| l == "done" || l == format!("mmap {ret}"));
    assert_eq!(truth.last().map(String::as_str), Some(format!("mmap {ret}").as_str()), "{truth:?}");
    sc.signal(libc::SIGINT);
    let (status, _, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    // The line that stops the Python loop (unless its 150 rounds are over) is also the host's last.
    t.try_send("stop");
    t.out.until(|l| l == "done");
    assert_eq!(t.wait().code(), Some(0));
}
