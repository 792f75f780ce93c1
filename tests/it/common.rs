//! Test harness: compiles testprogs once, starts targets that print their pid and ground truth and wait on
//! stdin, and runs syscatch. Every read has a timeout, so a hang fails with context instead of blocking CI.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Whether this process ignores `sig`, and so the syscatch it starts until it installs its handlers: SIGHUP
/// under nohup (which syscatch keeps, by design), SIGINT in a background job of a script (a signal that comes
/// before the handlers is then lost, as for any program).
pub fn signal_ignored(sig: i32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ign = status.lines().find_map(|l| l.strip_prefix("SigIgn:")).map(str::trim).unwrap_or("0");
    u64::from_str_radix(ign, 16).is_ok_and(|mask| mask & 1 << (sig - 1) != 0)
}

/// Fails loudly when tracing is impossible here (CI runs as root).
pub fn require_ptrace() {
    // SAFETY-free check: euid 0 or CAP_SYS_PTRACE in the effective set.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let is_root = status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    assert!(
        is_root || cap_eff & (1 << 19) != 0,
        "these tests trace real processes: run them as root or with CAP_SYS_PTRACE"
    );
}

/// An external tool the tests compare against, from the PATH (scripts/test.sh puts target/test-venv/bin, where
/// it installs tests/requirements.txt, first) or that venv. Missing: a failure when CI or SYSCATCH_REQUIRE_ALL is
/// set, else `None` after saying why the caller skips.
pub fn optional_tool(name: &str, what: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let venv = repo().join("target/test-venv/bin");
    let found = std::env::split_paths(&path).chain([venv]).map(|d| d.join(name)).find(|p| p.is_file());
    if found.is_none() {
        let set = |v: &str| std::env::var(v).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(
            !set("CI") && !set("SYSCATCH_REQUIRE_ALL"),
            "{name} is not installed ({what}): scripts/test.sh installs tests/requirements.txt into target/test-venv"
        );
        eprintln!("SKIPPED: {name} is not installed ({what}); CI=1 or SYSCATCH_REQUIRE_ALL=1 make this a failure");
    }
    found
}

fn tmpdir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles `testprogs/NAME.c` (once per test run) with `-O2 -fomit-frame-pointer -g` plus `extra` flags (a first
/// `CC=musl-gcc` names another compiler).
pub fn testprog(name: &str) -> PathBuf {
    testprog_with(name, &[])
}

pub fn testprog_with(name: &str, extra: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let key = format!("{name} {}", extra.join(" "));
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(&key) {
        return p.clone();
    }
    let tag: String = extra.join("").chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let out = tmpdir().join(format!("{name}{}{tag}", if tag.is_empty() { "" } else { "-" }));
    let src = repo().join("testprogs").join(format!("{name}.c"));
    let (cc, extra) = match extra.first().and_then(|e| e.strip_prefix("CC=")) {
        Some(cc) => (cc, &extra[1..]),
        None => ("gcc", extra),
    };
    let status = Command::new(cc)
        .args(["-O2", "-fomit-frame-pointer", "-g", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .status()
        .unwrap_or_else(|e| panic!("{cc} runs: {e} (scripts/test.sh installs it)"));
    assert!(status.success(), "{cc} failed on {}", src.display());
    built.insert(key, out.clone());
    out
}

/// Lines of a pipe, read by a thread, received with a timeout.
pub struct Lines {
    rx: Receiver<String>,
    what: String,
    pub seen: Vec<String>,
}

impl Lines {
    pub fn new(r: impl std::io::Read + Send + 'static, what: &str) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { rx, what: what.to_string(), seen: Vec::new() }
    }

    /// The next line; panics after the timeout or at end of stream.
    pub fn next(&mut self) -> String {
        match self.rx.recv_timeout(TIMEOUT) {
            Ok(l) => {
                self.seen.push(l.clone());
                l
            }
            Err(e) => panic!("{}: no line ({e:?}); so far: {:#?}", self.what, self.seen),
        }
    }

    /// Lines up to and including the first that satisfies `pred`.
    pub fn until(&mut self, pred: impl Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let l = self.next();
            let done = pred(&l);
            out.push(l);
            if done {
                return out;
            }
        }
    }

    /// Everything until the stream closes.
    pub fn rest(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let deadline = Instant::now() + TIMEOUT;
        while let Ok(l) = self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            self.seen.push(l.clone());
            out.push(l);
        }
        out
    }
}

/// A target program under test: it prints `pid N` first, then talks over stdin/stdout.
pub struct Target {
    pub child: Child,
    stdin: Option<ChildStdin>,
    pub out: Lines,
    pub pid: i32,
}

impl Target {
    pub fn start(prog: &Path, args: &[&str]) -> Target {
        Self::start_cmd(Command::new(prog).args(args))
    }

    pub fn start_cmd(cmd: &mut Command) -> Target {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("target starts");
        let stdin = child.stdin.take();
        let mut out = Lines::new(child.stdout.take().unwrap(), "target stdout");
        let first = out.next();
        let pid = first.strip_prefix("pid ").and_then(|p| p.trim().parse().ok()).expect("target prints its pid first");
        Target { child, stdin, out, pid }
    }

    pub fn send(&mut self, line: &str) {
        let w = self.stdin.as_mut().expect("stdin open");
        writeln!(w, "{line}").expect("target reads stdin");
        w.flush().unwrap();
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the target's exit (bounded).
    pub fn wait(mut self) -> ExitStatus {
        self.stdin = None;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "target {} did not exit", self.pid);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running syscatch.
pub struct Syscatch {
    pub child: Child,
    pub out: Lines,
    pub err: Lines,
}

pub fn syscatch_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_syscatch"))
}

impl Syscatch {
    pub fn start(args: &[&str]) -> Syscatch {
        Self::start_cmd(syscatch_cmd().args(args))
    }

    /// As [`Syscatch::start`], for a command set up by the caller (environment, arguments).
    pub fn start_cmd(cmd: &mut Command) -> Syscatch {
        let mut child =
            cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("syscatch starts");
        let out = Lines::new(child.stdout.take().unwrap(), "syscatch stdout");
        let err = Lines::new(child.stderr.take().unwrap(), "syscatch stderr");
        Syscatch { child, out, err }
    }

    /// Blocks until syscatch says it is attached and armed.
    pub fn wait_attached(&mut self) {
        self.err.until(|l| l.contains("attached to"));
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits at most `limit` for syscatch to exit, then as [`Syscatch::finish`]. A syscatch still running then
    /// is hung: it is killed and the test fails, naming the state of every thread of `target`.
    pub fn finish_within(mut self, limit: Duration, target: i32) -> (ExitStatus, Vec<String>, Vec<String>) {
        let deadline = Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() >= deadline {
                let states = thread_states_of(target);
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("syscatch hung: no exit within {limit:?}; target threads {states:?}: {:#?}", self.err.seen);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.finish()
    }

    /// Waits for exit; returns (status, stdout lines, stderr lines).
    pub fn finish(mut self) -> (ExitStatus, Vec<String>, Vec<String>) {
        let out = self.out.rest();
        let mut err = std::mem::take(&mut self.err.seen);
        err.extend(self.err.rest());
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "syscatch did not exit");
            std::thread::sleep(Duration::from_millis(5));
        };
        (status, out, err)
    }
}

/// Runs syscatch to completion with `args` (for bad-input cases).
pub fn run_syscatch(args: &[&str]) -> (i32, String, String) {
    let o = syscatch_cmd().args(args).stdin(Stdio::null()).output().expect("syscatch runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Parses `mmap ADDR LEN` ground-truth lines of a target.
pub fn truth_mmaps(lines: &[String]) -> Vec<(u64, u64)> {
    lines
        .iter()
        .filter_map(|l| {
            let mut it = l.strip_prefix("mmap ")?.split_whitespace();
            let a = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
            let n = it.next()?.parse().ok()?;
            Some((a, n))
        })
        .collect()
}

/// Parses syscatch's JSON Lines output into values.
/// The JSON lines of a whole output.
pub fn json_text(out: &str) -> Vec<serde_json::Value> {
    json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>())
}

pub fn json_lines(lines: &[String]) -> Vec<serde_json::Value> {
    lines.iter().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("valid JSON line")).collect()
}

/// The `(ret, len)` of each mmap event in JSON output.
pub fn captured_mmaps(values: &[serde_json::Value]) -> Vec<(u64, u64)> {
    values
        .iter()
        .filter(|v| v["type"] == "event" && v["data"]["syscall"] == "mmap")
        .map(|v| {
            let d = &v["data"];
            let hex =
                |s: &serde_json::Value| u64::from_str_radix(s.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
            (hex(&d["ret"]), hex(&d["args"][1]))
        })
        .collect()
}

/// The bytes of `len` at `addr` in process `pid`.
pub fn read_mem(pid: i32, addr: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, addr).unwrap();
    b
}

/// Compiles `testprogs/NAME.c` into the shared library `libNAME.so` (also its soname) with `-shared -fPIC`,
/// once per test run.
pub fn shared_lib(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let file = format!("lib{name}.so");
    let out = tmpdir().join(&file);
    let src = repo().join("testprogs").join(format!("{name}.c"));
    let status = Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-g", "-pthread", "-shared", "-fPIC"])
        .arg(format!("-Wl,-soname,{file}"))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(status.success(), "gcc failed on {}", src.display());
    built.insert(name.to_string(), out.clone());
    out
}

/// Compiles `testprogs/NAME.c` linked against shared libraries (from [`shared_lib`]), found at run time
/// through an rpath, with `extra` gcc flags.
pub fn testprog_linked(name: &str, libs: &[&Path], extra: &[&str]) -> PathBuf {
    let mut flags: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    for lib in libs {
        flags.push(lib.display().to_string());
        let dir = lib.parent().expect("library in a directory");
        flags.push(format!("-Wl,-rpath,{}", dir.display()));
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    testprog_with(name, &flags)
}

/// Compiles C `source` into a shared library `file` (e.g. `libfoo1.so`) in Cargo's tmp dir, once per test run,
/// with `soname` as its DT_SONAME when given; returns its path.
pub fn shared_lib_src(file: &str, soname: Option<&str>, source: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(file) {
        return p.clone();
    }
    let dir = tmpdir().join("libs");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{file}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(file);
    let mut cmd = Command::new("gcc");
    cmd.args(["-shared", "-fPIC", "-O2", "-g", "-o"]).arg(&out).arg(&src);
    if let Some(s) = soname {
        cmd.arg(format!("-Wl,-soname,{s}"));
    }
    assert!(cmd.status().expect("gcc runs").success(), "gcc failed on {}", src.display());
    // The loader finds a library by its soname (the link records it), as the usual symlink does.
    if let Some(s) = soname.filter(|s| *s != file) {
        let link = dir.join(s);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(file, &link).unwrap();
    }
    built.insert(file.to_string(), out.clone());
    out
}

/// `testprogs/NAME.c` linked against the shared libraries `libs` (loaded at start even if unused).
pub fn testprog_with_libs(name: &str, libs: &[PathBuf]) -> PathBuf {
    let mut flags: Vec<String> = vec!["-Wl,--no-as-needed".into()];
    flags.extend(libs.iter().map(|l| l.display().to_string()));
    for l in libs {
        flags.push(format!("-Wl,-rpath,{}", l.parent().unwrap().display()));
    }
    let flags: Vec<&str> = flags.iter().map(|s| s.as_str()).collect();
    testprog_with(name, &flags)
}

// ---- Added for the torture, container and fuzz-replay tests. ----

impl Lines {
    /// The next line if one has already arrived; never waits.
    pub fn try_next(&mut self) -> Option<String> {
        let l = self.rx.try_recv().ok()?;
        self.seen.push(l.clone());
        Some(l)
    }

    /// The next line, or None at the end of the stream; panics after the timeout.
    pub fn next_or_end(&mut self) -> Option<String> {
        match self.rx.recv_timeout(TIMEOUT) {
            Ok(l) => {
                self.seen.push(l.clone());
                Some(l)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(e) => panic!("{}: no line ({e:?}); so far: {:#?}", self.what, self.seen),
        }
    }
}

/// The `syscall()` address syscatch printed in its "attached to ...; syscall() at 0x..." line.
pub fn attached_site(err: &[String]) -> Option<u64> {
    let l = err.iter().find(|l| l.contains("attached to") && l.contains("syscall() at"))?;
    let hex = l.split("syscall() at 0x").nth(1)?;
    let end = hex.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(hex.len());
    u64::from_str_radix(&hex[..end], 16).ok()
}

/// TracerPid of `pid` (None once it is gone).
pub fn tracer_pid(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("TracerPid:"))?.trim().parse().ok()
}

/// The state letter of every thread of `pid` (`t`: stopped by a tracer, `T`: job-control stop).
pub fn thread_states_of(pid: i32) -> Vec<char> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    dir.filter_map(|e| {
        let s = std::fs::read_to_string(e.ok()?.path().join("status")).ok()?;
        s.lines().find_map(|l| l.strip_prefix("State:"))?.trim().chars().next()
    })
    .collect()
}

/// One line of /proc/PID/maps, as the harness needs it (independent of syscatch's parser).
pub struct MapLine {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub path: String,
}

pub fn maps_of(pid: i32) -> Vec<MapLine> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(6, ' ');
            let (s, e) = f.next()?.split_once('-')?;
            let perms = f.next()?.to_string();
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let path = f.nth(2).unwrap_or("").trim_start().to_string();
            Some(MapLine {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                perms,
                offset,
                path,
            })
        })
        .collect()
}

/// The mapped file of `m` as the kernel has it mapped: /proc/PID/map_files (the very inode), else the path.
pub fn open_mapped(pid: i32, m: &MapLine) -> std::fs::File {
    let by_map = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
    std::fs::File::open(&by_map)
        .or_else(|_| std::fs::File::open(&m.path))
        .unwrap_or_else(|e| panic!("cannot open {by_map} nor {}: {e}", m.path))
}

/// `len` bytes of the file mapped at run-time address `addr` of `pid`, at the file offset that address maps.
pub fn file_bytes_at(pid: i32, addr: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let maps = maps_of(pid);
    let m = maps
        .iter()
        .find(|m| m.start <= addr && addr < m.end && m.path.starts_with('/'))
        .unwrap_or_else(|| panic!("{addr:#x} is in no file mapping of {pid}"));
    let mut b = vec![0u8; len];
    open_mapped(pid, m).read_exact_at(&mut b, addr - m.start + m.offset).expect("file bytes");
    b
}

/// Every executable file-backed mapping of `pid` holds exactly its file's bytes: no int3 (or any other byte of
/// ours) left behind anywhere in the text. Returns how many bytes were compared.
pub fn assert_text_pristine(pid: i32, ctx: &str) -> usize {
    let (compared, diffs) = text_diffs(pid);
    if let Some((path, addr, got, want)) = diffs.first() {
        panic!("{ctx}: {path} at {addr:#x} holds {got:#04x} in memory but {want:#04x} in the file");
    }
    assert!(compared > 0, "{ctx}: no executable mapping compared");
    compared
}

/// As [`assert_text_pristine`], except for what a SIGKILL of syscatch leaves by design: the call gate (dead code
/// in the unused end of libc's code page, left when a thread ran a system call through it: the guardian must not
/// take it from under that thread), and `--fast`'s jumps into its trampoline page (an anonymous executable mapping;
/// rewriting a multi-byte instruction under running threads could tear it). Returns whether any was there.
pub fn assert_text_pristine_but_gate(pid: i32, ctx: &str) -> bool {
    let (compared, diffs) = text_diffs(pid);
    assert!(compared > 0, "{ctx}: no executable mapping compared");
    let Some(&(_, at, _, _)) = diffs.iter().find(|d| !fast_jump_at(pid, d.1)) else { return false };
    let code = syscatch::testing::x86::gate::CODE;
    let gate = |a: u64, got: u8| a >= at && a < at + code.len() as u64 && got == code[(a - at) as usize];
    let ours = |a: u64, got: u8| gate(a, got) || fast_jump_at(pid, a);
    if let Some((path, addr, got, want)) = diffs.iter().find(|&&(_, a, got, _)| !ours(a, got)) {
        panic!("{ctx}: {path} at {addr:#x} holds {got:#04x} in memory but {want:#04x} in the file (not the call gate)");
    }
    true
}

/// Whether the byte at `addr` is part of a `jmp rel32` (0xe9) into an anonymous executable mapping (where `--fast`
/// puts its trampoline), or one of the nops that pad such a jump to the end of the instructions it replaced (an
/// entry of `--malloc`: `push %r12 ; push %rbp ; push %rbx ; mov %rdi,%rbx`, 7 bytes, gives a jump and two nops).
fn fast_jump_at(pid: i32, addr: u64) -> bool {
    let maps = maps_of(pid);
    let anon_exec = |dest: u64| {
        maps.iter()
            .any(|m| m.start <= dest && dest < m.end && m.path.is_empty() && m.perms.as_bytes().get(2) == Some(&b'x'))
    };
    let jump_at = |p: u64| {
        let b = read_mem(pid, p, 5);
        let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]) as i64;
        b[0] == 0xe9 && anon_exec((p as i64 + 5 + rel) as u64)
    };
    if (addr.saturating_sub(4)..=addr).any(jump_at) {
        return true;
    }
    // addr one of `pad` nops just after a jump.
    (1..=10u64).any(|pad| {
        let first = addr.saturating_sub(pad - 1);
        read_mem(pid, first, pad as usize).iter().all(|&b| b == 0x90) && jump_at(first.saturating_sub(5))
    })
}

/// Every byte of the target's file-backed executable mappings that differs from the file: (path, address, in
/// memory, in the file); and how many bytes were compared.
pub fn text_diffs(pid: i32) -> (usize, Vec<(String, u64, u8, u8)>) {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open target memory");
    let mut compared = 0;
    let mut diffs = Vec::new();
    for m in maps_of(pid).iter().filter(|m| m.perms.as_bytes().get(2) == Some(&b'x') && m.path.starts_with('/')) {
        let file = open_mapped(pid, m);
        let size = file.metadata().map(|md| md.len()).unwrap_or(0);
        let len = (m.end - m.start).min(size.saturating_sub(m.offset)) as usize;
        let mut want = vec![0u8; len];
        file.read_exact_at(&mut want, m.offset).expect("file bytes");
        let mut got = vec![0u8; len];
        mem.read_exact_at(&mut got, m.start).expect("target text");
        diffs.extend(
            (0..len).filter(|&i| got[i] != want[i]).map(|i| (m.path.clone(), m.start + i as u64, got[i], want[i])),
        );
        compared += len;
    }
    (compared, diffs)
}

/// The `summary` record, which must be the last JSON line.
pub fn summary_data(values: &[serde_json::Value]) -> &serde_json::Value {
    let last = values.last().expect("some JSON output");
    assert_eq!(last["type"], "summary", "the summary is the last line");
    &last["data"]
}

impl Target {
    /// As [`Target::send`], but false instead of a panic when the target is gone.
    pub fn try_send(&mut self, line: &str) -> bool {
        let Some(w) = self.stdin.as_mut() else { return false };
        writeln!(w, "{line}").and_then(|_| w.flush()).is_ok()
    }
}

/// Queues real-time signal `sig` with rt_sigqueueinfo: unlike kill(2), which silently coalesces a real-time signal
/// when root's queue (RLIMIT_SIGPENDING, shared with every test running) is full, this fails with EAGAIN.
pub fn sigqueue(pid: i32, sig: i32) -> bool {
    // SAFETY: a zeroed siginfo_t is valid; the kernel copies it in and keeps no reference.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        info.si_signo = sig;
        info.si_code = libc::SI_QUEUE;
        libc::syscall(libc::SYS_rt_sigqueueinfo, pid, sig, &info as *const libc::siginfo_t) == 0
    }
}

/// Polls (bounded, no sleep) until `pred` holds; false on timeout.
pub fn poll(mut pred: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while std::time::Instant::now() < deadline {
        if pred() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

/// Watches the state of every thread of `pids`, every millisecond, until [`StopWatch::stops`] says which were
/// ever seen in a ptrace or job-control stop (attaching holds a process's threads for milliseconds at least).
pub struct StopWatch {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::thread::JoinHandle<Vec<(i32, char)>>,
}

impl StopWatch {
    pub fn start(pids: Vec<i32>) -> StopWatch {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        let seen = std::thread::spawn(move || {
            let mut stops = Vec::new();
            while !d.load(std::sync::atomic::Ordering::Relaxed) {
                for &p in &pids {
                    stops.extend(thread_states_of(p).into_iter().filter(|s| matches!(s, 't' | 'T')).map(|s| (p, s)));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            stops
        });
        StopWatch { done, seen }
    }

    pub fn stops(self) -> Vec<(i32, char)> {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        self.seen.join().unwrap()
    }
}

/// testprogs/leaker.c traced by `syscatch --pid P ARGS`: sends "go", waits for its "done", stops syscatch with
/// SIGINT. Returns the bytes the leaker says it leaked, syscatch's JSON lines and its stderr.
pub fn leaker_run(t: &mut Target, args: &[&str]) -> (u64, Vec<serde_json::Value>, Vec<String>) {
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&[&["--pid", pid.as_str()], args].concat());
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    let leaked: u64 = lines.iter().find_map(|l| l.strip_prefix("leaked ")).unwrap().parse().unwrap();
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    (leaked, json_lines(&out), err)
}
