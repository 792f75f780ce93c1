//! `syscatch check`: every shipped probe script checks, and with `--pid` resolves to the addresses the
//! target's own files say (nm + /proc/PID/maps), in a target linked against our own shared libraries; wrong
//! locations fail with one line naming the probe and what was searched. `check` never attaches.

use crate::common::*;
use std::path::{Path, PathBuf};

fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("scripts/probes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "probe"))
        .collect();
    v.sort();
    assert!(v.len() >= 3);
    v
}

fn write_script(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("probe-scripts");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The run-time address of `symbol` in the module of `pid` whose file name starts with `module`, from nm and
/// the module's mapping at file offset 0 (our libraries and libc link their first segment at address 0).
fn truth_addr(pid: i32, module: &str, symbol: &str) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let (base, path) = maps
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = *f.get(5)?;
            let name = Path::new(path).file_name()?.to_str()?;
            (name.starts_with(module) && f[2] == "00000000").then(|| {
                let start = u64::from_str_radix(f[0].split('-').next().unwrap(), 16).unwrap();
                (start, path.to_string())
            })
        })
        .unwrap_or_else(|| panic!("{module} not mapped by {pid}"));
    let nm = std::process::Command::new("nm").args(["-D", "--defined-only"]).arg(&path).output().unwrap();
    let value = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2].split('@').next() == Some(symbol)).then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("nm: no {symbol} in {path}"));
    base + value
}

/// `name -> addr` from check's lines (`NAME: LOCATION -> 0xADDR (MODULE:SYMBOL); ...`).
fn resolved(stdout: &str) -> Vec<(String, u64)> {
    stdout
        .lines()
        .map(|l| {
            let name = l.split(": ").next().unwrap().to_string();
            let addr = l.split(" -> 0x").nth(1).unwrap_or_else(|| panic!("no address in {l:?}"));
            let hex: String = addr.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            (name, u64::from_str_radix(&hex, 16).unwrap())
        })
        .collect()
}

const FOO1: &str = "int shared_fn(int x) { return x + 1; }\nint foo1_fn(int x) { return x * 3; }\n";
const FOO2: &str = "int shared_fn(int x) { return x + 2; }\nint foo2_fn(int x) { return x * 5; }\n";
const BAR: &str = "volatile int bar_data;\nint bar_fn(int x) { bar_data += x; return bar_data * 7 + x; }\n";

fn libs() -> Vec<PathBuf> {
    vec![
        shared_lib_src("libfoo1.so", None, FOO1),
        shared_lib_src("libfoo2.so", None, FOO2),
        shared_lib_src("libbar-1a2b.so.0", Some("libbar.so.0"), BAR),
    ]
}

#[test]
fn every_example_checks_without_a_pid() {
    for ex in examples() {
        let (code, out, err) = run_syscatch(&["check", ex.to_str().unwrap()]);
        assert_eq!(code, 0, "{}: {err}", ex.display());
        let probes = std::fs::read_to_string(&ex).unwrap().lines().filter(|l| l.starts_with("probe ")).count();
        assert_eq!(out.lines().count(), probes, "one line per probe: {out}");
        assert!(err.is_empty(), "{err}");
    }
}

#[test]
fn every_example_resolves_in_a_real_target() {
    require_ptrace();
    let mut t = Target::start(&testprog("target"), &[]);
    for ex in examples() {
        let (code, out, err) = run_syscatch(&["check", ex.to_str().unwrap(), "--pid", &t.pid.to_string()]);
        assert_eq!(code, 0, "{}: {err}", ex.display());
        let script = std::fs::read_to_string(&ex).unwrap();
        for (line, (name, addr)) in out.lines().zip(resolved(&out)) {
            // Each example names libc functions or syscall(): compare with libc's own symbol table.
            let symbol = line.split("(libc.so.6:").nth(1).and_then(|s| s.split(')').next());
            let symbol = symbol.unwrap_or_else(|| panic!("not in libc: {line}"));
            assert_eq!(addr, truth_addr(t.pid, "libc.so", symbol), "{}: {line}", ex.display());
            assert!(script.contains(&format!("probe {name} ")), "{name} is declared in {}", ex.display());
        }
    }
    // check never attaches: the target is not traced and still works.
    let status = std::fs::read_to_string(format!("/proc/{}/status", t.pid)).unwrap();
    assert!(status.lines().any(|l| l == "TracerPid:\t0"), "{status}");
    t.send("mmap 1");
    assert_eq!(t.out.until(|l| l == "ok").len(), 2);
}

#[test]
fn locations_in_our_own_libraries() {
    require_ptrace();
    let t = Target::start(&testprog_with_libs("target", &libs()), &[]);
    let script = write_script(
        "ours.probe",
        "probe by_prefix at libfoo1:foo1_fn { collect args, ret }\n\
         probe by_file at libfoo2.so:foo2_fn {}\n\
         probe by_soname at libbar.so.0:bar_fn+4 {}\n\
         probe by_dash_prefix at libbar:bar_fn if arg0 > 3 { collect ret }\n\
         probe anywhere at foo2_fn {}\n\
         probe raw at syscall(mmap) if arg1 >= 1M {}\n",
    );
    let (code, out, err) = run_syscatch(&["check", script.to_str().unwrap(), "--pid", &t.pid.to_string()]);
    assert_eq!(code, 0, "{err}");
    let got = resolved(&out);
    let want = [
        ("by_prefix", truth_addr(t.pid, "libfoo1.so", "foo1_fn")),
        ("by_file", truth_addr(t.pid, "libfoo2.so", "foo2_fn")),
        ("by_soname", truth_addr(t.pid, "libbar-1a2b", "bar_fn") + 4),
        ("by_dash_prefix", truth_addr(t.pid, "libbar-1a2b", "bar_fn")),
        ("anywhere", truth_addr(t.pid, "libfoo2.so", "foo2_fn")),
        ("raw", truth_addr(t.pid, "libc.so", "syscall")),
    ];
    let want: Vec<(String, u64)> = want.iter().map(|(n, a)| (n.to_string(), *a)).collect();
    assert_eq!(got, want, "{out}");
    assert!(out.contains("(libbar-1a2b.so.0:bar_fn+0x4)"), "{out}");

    // An address: the one foo1_fn is at.
    let a = truth_addr(t.pid, "libfoo1.so", "foo1_fn");
    let script = write_script("addr.probe", &format!("probe at {a:#x} {{ collect regs(rdi) }}\n"));
    let (code, out, err) = run_syscatch(&["check", script.to_str().unwrap(), "--pid", &t.pid.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{a:#x}: {a:#x} -> {a:#x} (in libfoo1.so); collect regs(rdi)\n"));
}

/// `check FILE --pid` of a script with one probe `text`: exit code and stderr.
fn check_one(pid: i32, file: &str, text: &str) -> (i32, String, PathBuf) {
    let script = write_script(file, text);
    let (code, out, err) = run_syscatch(&["check", script.to_str().unwrap(), "--pid", &pid.to_string()]);
    assert!(out.is_empty(), "nothing on stdout on error: {out}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    (code, err, script)
}

#[test]
fn locations_that_do_not_resolve_are_one_line_errors() {
    require_ptrace();
    let libs = libs();
    let dir = libs[0].parent().unwrap().display().to_string();
    let t = Target::start(&testprog_with_libs("target", &libs), &[]);

    let (code, err, f) = check_one(t.pid, "missing.probe", "\n  probe at libfoo1:nosuch_fn {}\n");
    assert_eq!(code, 1);
    assert_eq!(
        err.trim_end(),
        format!("syscatch: {}:2:3: probe `nosuch_fn`: no symbol `nosuch_fn`; searched: libfoo1.so", f.display())
    );

    let (code, err, f) = check_one(t.pid, "ambiguous.probe", "probe p at libfoo:foo1_fn {}\n");
    assert_eq!(code, 1);
    assert_eq!(
        err.trim_end(),
        format!(
            "syscatch: {}:1:1: probe `p`: module name `libfoo` is ambiguous: it matches {dir}/libfoo1.so, \
             {dir}/libfoo2.so",
            f.display()
        )
    );

    let (code, err, _) = check_one(t.pid, "twice.probe", "probe p at shared_fn {}\n");
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "symbol `shared_fn` is defined in several modules: libfoo1.so, libfoo2.so; name one as MODULE:shared_fn"
        ),
        "{err}"
    );

    let (code, err, _) = check_one(t.pid, "nomodule.probe", "probe p at libnosuch:f {}\n");
    assert_eq!(code, 1);
    assert!(err.contains("no module named `libnosuch`; searched: target-"), "{err}");
    for m in ["libfoo1.so", "libfoo2.so", "libbar-1a2b.so.0", "libc.so.6"] {
        assert!(err.contains(m), "{m} searched: {err}");
    }

    let (code, err, _) = check_one(t.pid, "data.probe", "probe p at libbar:bar_data {}\n");
    assert_eq!(code, 1);
    assert!(err.contains("not in executable memory"), "{err}");

    let (code, err, _) = check_one(t.pid, "past.probe", "probe p at libfoo1:foo1_fn+0x100000 {}\n");
    assert_eq!(code, 1);
    assert!(err.contains("past the end of `foo1_fn`"), "{err}");

    let (code, err, _) = check_one(t.pid, "noexec.probe", "probe p at 0x10 {}\n");
    assert_eq!(code, 1);
    assert!(err.contains("address 0x10 is not in executable memory"), "{err}");
}

#[test]
fn script_errors_exit_2_and_show_the_line() {
    let script = write_script("bad.probe", "probe p at syscall(mmap)\n    if arg1 >= 1M &&\n{ collect args }\n");
    for extra in [&[][..], &["--pid", "1"][..]] {
        let mut args = vec!["check", script.to_str().unwrap()];
        args.extend(extra);
        let (code, out, err) = run_syscatch(&args);
        assert_eq!(code, 2, "{err}");
        assert!(out.is_empty());
        assert_eq!(
            err,
            format!(
                "syscatch: {}:3:1: expected a number, a name or `(`, found `{{`\n 3 | {{ collect args }}\n   | ^\n",
                script.display()
            )
        );
    }
    let (code, _, err) = run_syscatch(&["check", "/nonexistent/x.probe"]);
    assert_eq!(code, 2);
    assert!(err.starts_with("syscatch: cannot read probe script /nonexistent/x.probe:"), "{err}");
    let bin = write_script("binary.probe", "probe p at f {}\n# \u{1}\n");
    let mut bytes = std::fs::read(&bin).unwrap();
    bytes.extend([b'\n', b'#', b' ', b'x', 0xff]);
    std::fs::write(&bin, bytes).unwrap();
    let (code, _, err) = run_syscatch(&["check", bin.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.starts_with(&format!("syscatch: {}:4:4: not UTF-8 text", bin.display())), "{err}");
}

#[test]
fn a_missing_process_is_a_runtime_error() {
    let ex = &examples()[0];
    // pid_max is at most 2^22: this pid cannot exist.
    let (code, out, err) = run_syscatch(&["check", ex.to_str().unwrap(), "--pid", "99999999"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(err, "syscatch: no process with pid 99999999\n");
}
