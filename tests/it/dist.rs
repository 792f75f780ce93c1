//! What a release ships (scripts/dist.sh): the static binary, run from a root that holds nothing but itself and
//! /proc, traces a target outside it by pid; the wheel installs into a fresh venv and its `syscatch` traces a
//! Python target. dist.sh builds once per test run in a target dir of its own (a no-op when scripts/test.sh
//! already ran it) and checks the binary has no PT_INTERP and no DT_NEEDED itself.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// target/dist, freshly made by scripts/dist.sh (once per test run).
fn dist() -> &'static Path {
    static DIST: OnceLock<PathBuf> = OnceLock::new();
    DIST.get_or_init(|| {
        let o = Command::new(repo().join("scripts/dist.sh")).output().expect("scripts/dist.sh runs");
        assert!(o.status.success(), "scripts/dist.sh failed: {}", String::from_utf8_lossy(&o.stderr));
        repo().join("target/dist")
    })
}

fn start_syscatch(cmd: &mut Command) -> Syscatch {
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("syscatch starts");
    let out = Lines::new(child.stdout.take().unwrap(), "syscatch stdout");
    let err = Lines::new(child.stderr.take().unwrap(), "syscatch stderr");
    Syscatch { child, out, err }
}

/// Stops syscatch with SIGINT; its events, checked against the target's own `mmap ADDR LEN` lines.
fn finish_and_check(sc: Syscatch, truth: &[(u64, u64)]) -> Vec<Value> {
    assert!(!truth.is_empty());
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    let values = json_lines(&out);
    assert_eq!(captured_mmaps(&values), truth, "{out:#?}");
    let events: Vec<Value> = values.into_iter().filter(|v| v["type"] == "event").map(|v| v["data"].clone()).collect();
    for e in &events {
        assert_eq!(e["stack"][0]["function"], "syscall", "{e}");
    }
    events
}

#[test]
fn static_binary_traces_from_a_root_holding_only_itself_and_proc() {
    require_ptrace();
    let bin = dist().join("syscatch");
    let mut t = Target::start(&testprog("target"), &[]);
    // A new mount namespace, so the tmpfs root and its /proc vanish with it; no loader, no libc, no /dev inside.
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("minimal-root");
    std::fs::create_dir_all(&root).unwrap();
    let script = r#"mount -t tmpfs tmpfs "$1" && cp "$2" "$1/syscatch" && mkdir "$1/proc" &&
        mount -t proc proc "$1/proc" && shift 2 && exec chroot "$ROOT" /syscatch "$@""#;
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(&root)
        .arg(&bin)
        .args(["--pid", &t.pid.to_string(), "--json"])
        .env("ROOT", &root);
    let mut sc = start_syscatch(&mut cmd);
    sc.wait_attached();
    let pid = sc.child.id();
    // Seen from here, paths in its namespace are named by where its tmpfs is mounted.
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/root")).unwrap(), root, "syscatch runs chrooted");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(), root.join("syscatch"));
    let mut inside: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/root"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    inside.sort();
    assert_eq!(inside, ["proc", "syscatch"], "the root holds only the binary and /proc");
    t.send("mmap 3");
    let truth = truth_mmaps(&t.out.until(|l| l == "ok"));
    assert_eq!(truth.len(), 3);
    let events = finish_and_check(sc, &truth);
    assert!(events.iter().all(|e| e["stack"].as_array().is_some_and(|s| s.len() > 2)), "{events:#?}");
    t.send("exit 0");
    assert_eq!(t.wait().code(), Some(0));
}

/// Two processes at once: each traced on a thread of its own, whose tick is a timer of that thread (the static build
/// has no working libc gettid: a session that called it crashed before attaching).
#[test]
fn static_binary_traces_two_processes_at_once() {
    require_ptrace();
    let bin = dist().join("syscatch");
    let mut a = Target::start(&testprog("target"), &[]);
    let mut b = Target::start(&testprog("target"), &[]);
    let list = format!("{},{}", a.pid, b.pid);
    let mut sc = start_syscatch(Command::new(&bin).args(["--pid", &list, "--leaks", "--json"]));
    sc.wait_attached();
    sc.wait_attached();
    let mut kept = Vec::new();
    for t in [&mut a, &mut b] {
        t.send("mmap 3");
        kept.push(truth_mmaps(&t.out.until(|l| l == "ok")).iter().map(|m| m.1).sum::<u64>());
    }
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let values = json_lines(&out);
    for (t, bytes) in [(&a, kept[0]), (&b, kept[1])] {
        assert!(values.iter().any(|v| v["type"] == "process" && v["data"]["pid"] == t.pid), "{out:#?}");
        let held: u64 = values
            .iter()
            .filter(|v| v["type"] == "leak" && v["data"]["pid"] == t.pid)
            .map(|v| v["data"]["still_mapped"].as_u64().unwrap())
            .sum();
        assert!(held >= bytes, "process {}: {bytes} bytes mapped, {held} held on its stacks", t.pid);
    }
    assert_eq!(tracer_pid(a.pid), Some(0));
    assert_eq!(tracer_pid(b.pid), Some(0));
}

#[test]
fn wheel_installs_into_a_fresh_venv_and_traces_python() {
    require_ptrace();
    let wheel = std::fs::read_dir(dist())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("dist.sh made a wheel");
    let name = wheel.file_name().unwrap().to_str().unwrap();
    assert!(name.ends_with("manylinux2014_x86_64.musllinux_1_1_x86_64.whl"), "{name}");
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wheel-venv");
    let _ = std::fs::remove_dir_all(&venv);
    let run = |cmd: &mut Command| {
        let o = cmd.output().expect("runs");
        assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    let pip = venv.join("bin/pip");
    run(Command::new(&pip).args(["install", "--quiet", "--no-index", "--no-cache-dir"]).arg(&wheel));
    // pip on a musl system would take it too: its tags are checked as that platform's pip checks them.
    for platform in ["musllinux_1_1_x86_64", "manylinux2014_x86_64"] {
        let dl = venv.join(format!("dl-{platform}"));
        run(Command::new(&pip)
            .args(["download", "--quiet", "--no-index", "--only-binary=:all:", "--platform", platform, "-d"])
            .arg(&dl)
            .arg("--find-links")
            .arg(dist())
            .arg("syscatch"));
        assert!(dl.join(name).exists(), "{platform}: pip did not pick {name}");
    }
    let installed = venv.join("bin/syscatch");
    assert!(venv.join("share/man/man1/syscatch.1").exists());
    let version = run(Command::new(&installed).arg("--version"));
    assert!(version.starts_with(&format!("syscatch {} (commit ", env!("CARGO_PKG_VERSION"))), "{version}");
    assert!(version.contains("static"), "{version}");

    let script = repo().join("testprogs/ctypes_mmap.py");
    let mut t = Target::start(&venv.join("bin/python3"), &[script.to_str().unwrap()]);
    let mut sc = start_syscatch(Command::new(&installed).args(["--pid", &t.pid.to_string(), "--json"]));
    sc.wait_attached();
    t.send("go");
    let truth = truth_mmaps(&t.out.until(|l| l == "done"));
    let events = finish_and_check(sc, &truth);
    let functions: Vec<&str> =
        events[0]["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
    assert!(functions.contains(&"_PyEval_EvalFrameDefault"), "{functions:#?}");
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn version_names_the_commit_and_how_it_was_built() {
    let (code, out, _) = run_syscatch(&["--version"]);
    assert_eq!(code, 0);
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(repo()).output();
    let commit = match head {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap().trim().to_string(),
        _ => std::env::var("SYSCATCH_COMMIT").unwrap_or_else(|_| "unknown".into()),
    };
    let want = format!("syscatch {} (commit {commit}, features: dynamic, ", env!("CARGO_PKG_VERSION"));
    assert!(out.starts_with(&want), "{out} does not start with {want}");
    assert!(out.trim_end().ends_with("x86_64-unknown-linux-gnu)"), "{out}");
}

#[test]
fn completions_and_man_pages_come_from_the_definitions() {
    for (shell, marker) in
        [("bash", "complete -F _syscatch"), ("zsh", "#compdef syscatch"), ("fish", "complete -c syscatch")]
    {
        let (code, out, err) = run_syscatch(&["completions", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(marker), "{shell}: {out}");
        assert!(out.contains("stack") && out.contains("leaks") && out.contains("smaps-every"), "{shell}: {out}");
    }
    let (code, out, err) = run_syscatch(&["completions", "tcsh"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("tcsh"), "{err}");

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("man");
    let _ = std::fs::remove_dir_all(&dir);
    let (code, _, err) = run_syscatch(&["manpage", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let mut pages: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    pages.sort();
    let want = ["check", "completions", "demo", "hooks", "mem", "report", "run", "stack", "watch"];
    let mut expected: Vec<String> = want.iter().map(|s| format!("syscatch-{s}.1")).collect();
    expected.push("syscatch.1".into());
    expected.sort();
    assert_eq!(pages, expected, "one page per visible subcommand, none for the hidden manpage");
    let main = std::fs::read_to_string(dir.join("syscatch.1")).unwrap();
    for needle in
        [".SH EXAMPLES", "syscatch \\-\\-pid 1234 \\-\\-leaks \\-\\-for 1m", "\\-\\-smaps\\-every", "CAP_SYS_PTRACE"]
    {
        assert!(main.contains(needle), "syscatch.1 lacks {needle}:\n{main}");
    }
    let (code, help, _) = run_syscatch(&["--help"]);
    assert_eq!(code, 0);
    assert!(help.contains("Examples:\n") && help.contains("syscatch --pid 1234 --leaks --for 1m"), "{help}");
}
