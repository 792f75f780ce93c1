//! Stacks without frame pointers: every captured event's stack unwound by CFI and symbolized, checked against
//! the functions the target really called, and `syscatch stack` checked frame by frame against gdb.

use crate::common::*;
use serde_json::Value;

/// Function names of a JSON stack, innermost first (inlined frames included).
fn functions(stack: &Value) -> Vec<String> {
    stack.as_array().expect("a stack").iter().map(|f| f["function"].as_str().unwrap_or("?").to_string()).collect()
}

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string").trim_start_matches("0x"), 16).expect("hex")
}

/// Asserts that `want` appear in `got` in this order, each directly after the previous one.
fn assert_consecutive(got: &[String], want: &[&str]) {
    let start = got.iter().position(|f| f == want[0]).unwrap_or_else(|| panic!("{} not in stack {got:#?}", want[0]));
    let window: Vec<&str> = got[start..].iter().take(want.len()).map(String::as_str).collect();
    assert_eq!(window, want, "stack {got:#?}");
}

#[test]
fn event_stacks_reach_main_without_frame_pointers() {
    require_ptrace();
    let prog = testprog("deep_stack");
    let mut t = Target::start(&prog, &["4"]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    assert_eq!(truth_mmaps(&lines).len(), 4);
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    let events: Vec<Value> = json_lines(&out).into_iter().filter(|v| v["type"] == "event").collect();
    assert_eq!(events.len(), 4);
    for ev in &events {
        let d = &ev["data"];
        let f = functions(&d["stack"]);
        assert_eq!(f[0], "syscall", "first frame is the wrapper: {f:#?}");
        assert_consecutive(
            &f,
            &[
                "syscall",
                "level7",
                "level6",
                "level5",
                "level4",
                "level3",
                "level2",
                "level1",
                "main",
                "__libc_start_call_main",
            ],
        );
        assert_eq!(f.last().map(String::as_str), Some("_start"), "{f:#?}");
        assert!(d["stack_truncated"].is_null(), "{}", d["stack_truncated"]);
        // file:line from the program's own DWARF, and from libc's separate debug file (libc6-dbg).
        let frames = d["stack"].as_array().unwrap();
        let lvl = frames.iter().find(|f| f["function"] == "level4").unwrap();
        assert!(lvl["file"].as_str().unwrap().ends_with("deep_stack.c"), "{lvl}");
        let start = frames.iter().find(|f| f["function"] == "__libc_start_call_main").unwrap();
        assert!(
            start["file"].as_str().unwrap_or("").contains("libc_start_call_main"),
            "libc frame without file:line (is libc6-dbg installed at libc6's version?): {start}"
        );
        assert!(start["line"].as_u64().is_some());
        assert!(frames.iter().all(|f| f["addr"].as_str().is_some_and(|a| hex(&Value::from(a)) != 0)));
    }
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

/// Waits until thread `tid` of `pid` is blocked in read(fd): the kernel's own view, no sleep-and-hope.
/// Returns the user pc the kernel reports for it (the last field of /proc/PID/task/TID/syscall).
pub(crate) fn wait_blocked_in_read(pid: i32, tid: i32, fd: u32) -> u64 {
    let want = format!("0 {fd:#x} ");
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
        if s.starts_with(&want) {
            let pc = s.split_whitespace().last().unwrap();
            return u64::from_str_radix(pc.trim_start_matches("0x"), 16).unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "thread {tid} never blocked in read({fd}): {s}");
        std::thread::yield_now();
    }
}

/// gdb's `bt` of each thread: tid -> frames as (address if printed, text).
fn gdb_backtraces(pid: i32) -> std::collections::HashMap<i32, Vec<(Option<u64>, String)>> {
    let out = std::process::Command::new("gdb")
        .args(["-batch", "-nx", "-iex", "set debuginfod enabled off", "-p", &pid.to_string()])
        .args(["-ex", "thread apply all bt"])
        .output()
        .expect("gdb runs (CI installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut map = std::collections::HashMap::new();
    let mut cur: Option<i32> = None;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("Thread ") {
            cur = rest.split("(LWP ").nth(1).and_then(|r| r.split(')').next()).and_then(|t| t.parse().ok());
            continue;
        }
        let (Some(tid), Some(rest)) = (cur, l.strip_prefix('#')) else {
            continue;
        };
        let body = rest.trim_start_matches(|c: char| c.is_ascii_digit()).trim_start();
        let addr = body
            .strip_prefix("0x")
            .and_then(|b| b.split_whitespace().next())
            .and_then(|a| u64::from_str_radix(a, 16).ok());
        map.entry(tid).or_insert_with(Vec::new).push((addr, body.to_string()));
    }
    map
}

#[test]
fn stack_command_agrees_with_gdb_frame_by_frame() {
    require_ptrace();
    let prog = testprog("parked");
    let mut t = Target::start(&prog, &[]);
    // The two threads print in either order.
    let lines = [t.out.next(), t.out.next()];
    let field = |prefix: &str| -> u64 {
        let l = lines.iter().find_map(|l| l.strip_prefix(prefix)).expect("target's handshake");
        l.trim().parse().unwrap()
    };
    let (tid2, fd) = (field("thread ") as i32, field("parked ") as u32);
    let pc_main = wait_blocked_in_read(t.pid, t.pid, 0);
    let pc_thread = wait_blocked_in_read(t.pid, tid2, fd);
    let (code, out, err) = run_syscatch(&["stack", "--pid", &t.pid.to_string(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let values = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
    let thread = |tid: i32| {
        values
            .iter()
            .find(|v| v["type"] == "thread" && v["data"]["tid"] == tid)
            .unwrap_or_else(|| panic!("no stack for thread {tid}: {out}"))["data"]
            .clone()
    };
    let (main, second) = (thread(t.pid), thread(tid2));
    // The state is unchanged by the capture: still in the same read, nothing traced.
    assert_eq!(wait_blocked_in_read(t.pid, t.pid, 0), pc_main);
    assert_eq!(wait_blocked_in_read(t.pid, tid2, fd), pc_thread);
    let status = std::fs::read_to_string(format!("/proc/{}/status", t.pid)).unwrap();
    assert!(status.contains("TracerPid:\t0"), "still traced after `stack`");
    assert_eq!(hex(&main["pc"]), pc_main);
    assert_eq!(hex(&second["pc"]), pc_thread);
    assert_consecutive(&functions(&main["stack"]), &["m_inner", "m_middle", "m_outer", "main"]);
    assert_consecutive(
        &functions(&second["stack"]),
        &["t_inner", "t_middle", "t_outer", "thread_main", "start_thread"],
    );
    assert!(main["stack_truncated"].is_null() && second["stack_truncated"].is_null());

    let gdb = gdb_backtraces(t.pid);
    for (tid, ours) in [(t.pid, &main), (tid2, &second)] {
        let ours = ours["stack"].as_array().unwrap();
        let theirs = gdb.get(&tid).unwrap_or_else(|| panic!("gdb shows no thread {tid}: {gdb:#?}"));
        // gdb stops at main (backtrace past-main is off); a thread's stack ends at clone3 in both.
        if tid == tid2 {
            assert_eq!(ours.len(), theirs.len(), "frame count, ours {ours:#?} gdb {theirs:#?}");
        }
        assert!(theirs.len() >= 6 && ours.len() >= theirs.len(), "ours {ours:#?} gdb {theirs:#?}");
        let mut compared = 0;
        for (i, (addr, text)) in theirs.iter().enumerate() {
            // gdb prints an address only when the pc is not at the start of a line (frame 0 and inlined
            // frames at a line start show none): compare those it prints.
            if let Some(a) = addr {
                assert_eq!(hex(&ours[i]["addr"]), *a, "thread {tid} frame #{i}: gdb says `{text}`");
                compared += 1;
            } else {
                assert_eq!(hex(&ours[i]["addr"]), hex(&ours[0]["addr"]), "frame #{i} is at the first pc");
            }
        }
        assert!(compared >= 4, "too few frames compared: {theirs:#?}");
    }
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

/// Traces `mmap` in a started target (args), sends "go", waits for "done", and returns the events' data.
fn trace_events(t: &mut Target) -> Vec<Value> {
    let pid = t.pid.to_string();
    // The raw calls only (the targets' threads and interpreters also map through libc's mmap()).
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json", "--only-syscall-wrapper"]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    assert!(!truth_mmaps(&lines).is_empty());
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    let events: Vec<Value> =
        json_lines(&out).into_iter().filter(|v| v["type"] == "event").map(|v| v["data"].clone()).collect();
    assert_eq!(events.len(), truth_mmaps(&lines).len(), "{out:#?}");
    events
}

#[test]
fn signal_handler_stack_goes_through_restore_rt() {
    require_ptrace();
    let mut t = Target::start(&testprog("sig_stack"), &[]);
    let events = trace_events(&mut t);
    let f = functions(&events[0]["stack"]);
    assert_consecutive(
        &f,
        &[
            "syscall",
            "handler_inner",
            "on_usr1",
            "__restore_rt",
            "spinner",
            "interrupted_caller",
            "main",
            "__libc_start_call_main",
        ],
    );
    assert!(events[0]["stack_truncated"].is_null());
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn debug_frame_only_module_unwinds() {
    require_ptrace();
    let prog = testprog_with("deep_stack", &["-fno-asynchronous-unwind-tables"]);
    // The premise: the functions' CFI is in .debug_frame, and .eh_frame does not cover them.
    let data = std::fs::read(&prog).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    use object::{Object, ObjectSection, ObjectSymbol};
    assert!(elf.section_by_name(".debug_frame").is_some(), "gcc wrote no .debug_frame");
    let level4 = elf.symbols().find(|s| s.name() == Ok("level4")).unwrap().address();
    let eh = elf.section_by_name(".eh_frame").map(|s| s.data().unwrap().to_vec()).unwrap_or_default();
    let eh_addr = elf.section_by_name(".eh_frame").map(|s| s.address()).unwrap_or(0);
    let mut cfi = gimli::EhFrame::new(&eh, gimli::LittleEndian);
    cfi.set_address_size(8);
    let bases = gimli::BaseAddresses::default().set_eh_frame(eh_addr);
    let mut ctx = gimli::UnwindContext::new();
    use gimli::UnwindSection;
    assert!(
        cfi.unwind_info_for_address(&bases, &mut ctx, level4, gimli::EhFrame::cie_from_offset).is_err(),
        ".eh_frame covers level4: the test would not test .debug_frame"
    );
    let mut t = Target::start(&prog, &["2"]);
    for ev in trace_events(&mut t) {
        let f = functions(&ev["stack"]);
        assert_consecutive(
            &f,
            &["syscall", "level7", "level6", "level5", "level4", "level3", "level2", "level1", "main"],
        );
        assert!(f.iter().any(|n| n == "__libc_start_call_main"), "{f:#?}");
    }
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

#[test]
fn python_ctypes_stack_reaches_the_eval_loop() {
    require_ptrace();
    let script = repo().join("testprogs/ctypes_mmap.py");
    let mut t = Target::start(std::path::Path::new("python3"), &[script.to_str().unwrap()]);
    let events = trace_events(&mut t);
    let stack = events[0]["stack"].as_array().unwrap();
    let f = functions(&events[0]["stack"]);
    assert_eq!(f[0], "syscall");
    let ffi = stack
        .iter()
        .position(|fr| fr["module"].as_str().is_some_and(|m| m.starts_with("libffi")))
        .unwrap_or_else(|| panic!("no libffi frame: {f:#?}"));
    let eval = f.iter().position(|n| n == "_PyEval_EvalFrameDefault").unwrap_or_else(|| panic!("no eval loop: {f:#?}"));
    let start = f
        .iter()
        .position(|n| n == "__libc_start_call_main")
        .unwrap_or_else(|| panic!("does not reach __libc_start_call_main: {f:#?}"));
    assert!(ffi == 1 && ffi < eval && eval < start, "{f:#?}");
    // main, unless the executable's main is a bare `jmp Py_BytesMain` (a tail call: main has no frame, gdb shows
    // none either) or the executable is stripped (then the frame is named by module+offset).
    let before = &stack[start - 1];
    let exe = std::fs::read_link(format!("/proc/{}/exe", t.pid)).unwrap();
    let exe_name = exe.file_name().unwrap().to_str().unwrap();
    assert!(
        before["function"] == "main"
            || before["function"] == "Py_BytesMain"
            || (before["function"].is_null() && before["module"] == exe_name),
        "frame before __libc_start_call_main: {before}"
    );
    assert!(events[0]["stack_truncated"].is_null());
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

/// Rough costs, printed, not asserted (`cargo test --release --test it bench_stack -- --ignored --nocapture`):
/// capture of one thread, unwind per frame (cold, then cached), symbolization per address (cold, then with the
/// tables loaded).
#[test]
#[ignore]
fn bench_stack() {
    use std::time::Instant;
    use syscatch::testing::analysis::modules::StackResolver;
    require_ptrace();
    let mut t = Target::start(&testprog("parked"), &[]);
    let _ = [t.out.next(), t.out.next()];
    wait_blocked_in_read(t.pid, t.pid, 0);
    let n = 200;
    let t0 = Instant::now();
    let mut snap = None;
    for _ in 0..n {
        snap = Some(syscatch::testing::live::snapshot::read_thread(t.pid, 65536).unwrap());
    }
    let capture = t0.elapsed() / n;
    let c = snap.unwrap().capture;
    let t0 = Instant::now();
    let mut r = StackResolver::new(syscatch::testing::live::modules::LiveModules::boxed(t.pid), 128);
    let load = t0.elapsed();
    let t0 = Instant::now();
    let u = r.unwind(&c);
    let cold = t0.elapsed();
    let frames = u.frames.len() as u32;
    let t0 = Instant::now();
    for _ in 0..n {
        std::hint::black_box(r.unwind(&c));
    }
    let cached = t0.elapsed() / n / frames;
    let t0 = Instant::now();
    let s = r.symbolize(&u);
    let sym_cold = t0.elapsed();
    r.symbolizer = Default::default();
    let t0 = Instant::now();
    std::hint::black_box(r.symbolize(&u));
    let sym_new = t0.elapsed() / frames;
    let t0 = Instant::now();
    for _ in 0..n {
        std::hint::black_box(r.symbolize(&u));
    }
    let sym_hit = t0.elapsed() / n / frames;
    eprintln!(
        "{frames} frames ({} with inlined): capture {capture:?}/thread (seize..detach, 64 KiB copy); module list \
         {load:?}; unwind cold {cold:?} (CFI lookups), cached {cached:?}/frame; symbolize cold {sym_cold:?} \
         (tables + DWARF), new address {sym_new:?}/address, cached {sym_hit:?}/address",
        s.frames.len()
    );
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

/// Where the recorded snapshot lives. Re-record (after changing deep_stack.c) with
/// `cargo test --test it record_spin_fixture -- --ignored`: it runs `deep_stack spin`, captures its main thread
/// with the same code as `syscatch stack` (snapshot::read_thread), and writes the executable, the registers, the
/// load address and the first 4 KiB of stack.
fn fixture_dir() -> std::path::PathBuf {
    repo().join("tests/fixtures/stack")
}

#[test]
#[ignore]
fn record_spin_fixture() {
    use syscatch::testing::analysis::unwind::UnwindRegs;
    require_ptrace();
    let prog = testprog("deep_stack");
    let mut t = Target::start(&prog, &["spin"]);
    assert_eq!(t.out.next(), "spinning");
    let snap = syscatch::testing::live::snapshot::read_thread(t.pid, 4096).unwrap();
    let mut modules =
        syscatch::testing::analysis::modules::Modules::new(syscatch::testing::live::modules::LiveModules::boxed(t.pid));
    let m = modules.module_at(snap.capture.regs.ip()).expect("spinning in the executable").clone();
    let regs = UnwindRegs::from_regs(&snap.capture.regs);
    let dir = fixture_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&prog, dir.join("deep_stack")).unwrap();
    std::fs::write(dir.join("spin.stack"), &snap.capture.stack).unwrap();
    let meta = serde_json::json!({
        "how": "cargo test --test it record_spin_fixture -- --ignored (deep_stack spin, syscatch::testing::live::snapshot)",
        "regs_dwarf_order": regs.0.iter().map(|r| format!("{:#x}", r.unwrap())).collect::<Vec<_>>(),
        "module_start": format!("{:#x}", m.start),
        "module_end": format!("{:#x}", m.end),
        "bias": format!("{:#x}", m.bias),
        "asked": 4096,
    });
    std::fs::write(dir.join("spin.json"), serde_json::to_string_pretty(&meta).unwrap() + "\n").unwrap();
}

/// Replays the recorded snapshot offline: only the executable is in the fixture, so the walk goes level7 ..
/// main by the executable's CFI and stops, with its reason, at the first libc frame.
#[test]
fn recorded_snapshot_unwinds_offline() {
    use std::sync::Arc;
    use syscatch::testing::analysis::unwind::{
        End, MappedCfi, ModuleCfi, ModuleLookup, StackWindow, UnwindRegs, unwind,
    };
    let dir = fixture_dir();
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("spin.json")).unwrap()).unwrap();
    let data: Arc<[u8]> = std::fs::read(dir.join("deep_stack")).unwrap().into();
    let stack = std::fs::read(dir.join("spin.stack")).unwrap();
    let mut regs = UnwindRegs::default();
    for (i, v) in meta["regs_dwarf_order"].as_array().unwrap().iter().enumerate() {
        regs.0[i] = Some(hex(v));
    }
    let (start, end, bias) = (hex(&meta["module_start"]), hex(&meta["module_end"]), hex(&meta["bias"]));
    struct Exe(u64, u64, MappedCfi);
    impl ModuleLookup for Exe {
        fn find(&mut self, addr: u64) -> Option<MappedCfi> {
            (self.0..self.1).contains(&addr).then(|| self.2.clone())
        }
    }
    let cfi = Arc::new(ModuleCfi::parse(data.clone(), None).unwrap());
    let mut exe = Exe(start, end, MappedCfi { bias, cfi });
    let window = StackWindow::new(regs.0[7].unwrap(), &stack, meta["asked"].as_u64().unwrap() as usize);
    let u = unwind(regs, &window, &mut exe, 128);
    let syms = syscatch::testing::analysis::symbolize::SymModule::parse(&data, None);
    let names: Vec<String> = u
        .frames
        .iter()
        .flat_map(|f| syms.resolve("deep_stack", bias, f))
        .map(|f| f.function.unwrap_or_default())
        .collect();
    assert_eq!(names[..8], ["level7", "level6", "level5", "level4", "level3", "level2", "level1", "main"], "{names:?}");
    assert_eq!(u.frames.len(), 9, "main's return address into libc is the last frame: {names:?}");
    assert!(
        matches!(&u.end, End::Truncated(w) if w.contains("in no module")),
        "the walk stops at libc, absent from the fixture: {:?}",
        u.end
    );
}

/// The state letter of every thread of `pid` (from /proc/PID/task/TID/stat).
fn thread_states(pid: i32) -> Vec<char> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(e.unwrap().path().join("stat")).unwrap_or_default();
        if let Some(c) = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next()) {
            v.push(c);
        }
    }
    v
}

#[test]
fn stack_of_a_stopped_process_leaves_it_stopped() {
    require_ptrace();
    let mut t = Target::start(&testprog("parked"), &[]);
    let _ = [t.out.next(), t.out.next()];
    // SAFETY: signalling our own child.
    unsafe { libc::kill(t.pid, libc::SIGSTOP) };
    let deadline = std::time::Instant::now() + TIMEOUT;
    while thread_states(t.pid).iter().any(|&c| c != 'T') {
        assert!(std::time::Instant::now() < deadline, "target never stopped");
        std::thread::yield_now();
    }
    let (code, out, err) = run_syscatch(&["stack", "--pid", &t.pid.to_string(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let threads: Vec<Value> = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>())
        .into_iter()
        .filter(|v| v["type"] == "thread")
        .collect();
    assert_eq!(threads.len(), 2, "{out}");
    for th in &threads {
        assert!(th["data"]["stopped_in"].as_str().unwrap().starts_with("group-stopped"), "{th}");
        assert!(functions(&th["data"]["stack"]).len() >= 5, "{th}");
    }
    // Job control is not cancelled: the process is still stopped, untraced, and runs on SIGCONT.
    assert!(thread_states(t.pid).iter().all(|&c| c == 'T'), "{:?}", thread_states(t.pid));
    let status = std::fs::read_to_string(format!("/proc/{}/status", t.pid)).unwrap();
    assert!(status.contains("TracerPid:\t0"));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(t.pid, libc::SIGCONT) };
    t.send("exit");
    assert_eq!(t.wait().code(), Some(0));
}

/// eu-stack's frames of thread `tid`: (address, function name without a symbol version).
pub(crate) fn eu_stack_frames(pid: i32, tid: i32) -> Vec<(u64, String)> {
    let out = std::process::Command::new("eu-stack")
        .args(["-p", &pid.to_string()])
        .output()
        .expect("eu-stack runs (CI installs elfutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut frames = Vec::new();
    let mut cur = None;
    for l in text.lines() {
        if let Some(t) = l.strip_prefix("TID ") {
            cur = t.trim_end_matches(':').trim().parse::<i32>().ok();
            continue;
        }
        let (Some(t), Some(rest)) = (cur, l.strip_prefix('#')) else { continue };
        if t != tid {
            continue;
        }
        let mut w = rest.split_whitespace().skip(1);
        let addr = w.next().and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
        let name = w.next().unwrap_or("?").split('@').next().unwrap_or("?").to_string();
        frames.push((addr.unwrap_or_else(|| panic!("eu-stack line without address: {l}")), name));
    }
    assert!(!frames.is_empty(), "eu-stack shows no thread {tid}: {text}");
    frames
}

/// (address, function) of the real (not inlined) frames of a JSON stack.
fn real_frames(stack: &Value) -> Vec<(u64, String)> {
    stack
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["inlined"] != true)
        .map(|f| (hex(&f["addr"]), f["function"].as_str().unwrap_or("?").to_string()))
        .collect()
}

/// `syscatch --syscall mmap --json` over alt_stack's "go" ... "done": every mmap captured exactly; the JSON lines.
fn alt_stack_trace(t: &mut Target) -> Vec<Value> {
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
    sc.wait_attached();
    t.send("go");
    let truth = truth_mmaps(&t.out.until(|l| l == "done"));
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "syscatch failed: {err:#?}");
    let values = json_lines(&out);
    assert_eq!(captured_mmaps(&values), truth);
    values
}

/// An alt_stack event's function names, its real frames, and where `on_usr2` is among them (after `syscall` and
/// `handler_maps`); the stack is whole.
fn alt_stack_frames(ev: &Value) -> (Vec<String>, Vec<(u64, String)>, usize) {
    assert!(ev["stack_truncated"].is_null(), "{}", ev["stack_truncated"]);
    let f = functions(&ev["stack"]);
    let ours = real_frames(&ev["stack"]);
    let on_usr2 = ours.iter().position(|(_, n)| n == "on_usr2").unwrap_or_else(|| panic!("{f:#?}"));
    let before: Vec<&str> = ours[..on_usr2].iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(before, ["syscall", "handler_maps"], "{f:#?}");
    (f, ours, on_usr2)
}

/// The stack of a call made inside nested handlers on an alternate signal stack crosses back to the normal stack
/// at the outer signal frame (the copy of the interrupted stack taken at the same stop), and names libc's `raise`
/// and the program's `handler_maps` by their global names, not their weak aliases (gsignal,
/// handler_maps_alias). Compared with eu-stack's and gdb's view of the same frames: the target then blocks in
/// read() inside the same handler frame, so from `on_usr2` outwards every return address is the same.
#[test]
fn alternate_signal_stack_unwinds_back_to_main_as_gdb_and_eu_stack_do() {
    require_ptrace();
    let mut t = Target::start(&testprog("alt_stack"), &[]);
    let pid = t.pid.to_string();
    let values = alt_stack_trace(&mut t);
    let ev = &values.iter().find(|v| v["type"] == "event").unwrap()["data"];
    let (f, ours, on_usr2) = alt_stack_frames(ev);
    let names: Vec<&str> = ours.iter().map(|(_, n)| n.as_str()).collect();
    let restore = names.iter().filter(|n| **n == "__restore_rt").count();
    let raises = names.iter().filter(|n| **n == "raise").count();
    assert_eq!((restore, raises), (2, 2), "two signal frames, each under libc's raise (not gsignal): {f:#?}");
    assert!(!names.contains(&"gsignal") && !names.contains(&"handler_maps_alias"), "{f:#?}");
    assert_consecutive(&f, &["on_usr1", "__restore_rt"]);
    assert_consecutive(&f, &["thrower", "outer", "main", "__libc_start_call_main"]);
    let thrower = names.iter().position(|n| *n == "thrower").unwrap();
    assert_eq!(names[thrower - 1], "raise", "{f:#?}");
    assert_eq!(f.last().map(String::as_str), Some("_start"), "{f:#?}");

    // The same frames, seen by eu-stack and gdb while the target waits in read() in handler_maps.
    wait_blocked_in_read(t.pid, t.pid, 0);
    let eu = eu_stack_frames(t.pid, t.pid);
    let eu_usr2 = eu.iter().position(|(_, n)| n == "on_usr2").unwrap_or_else(|| panic!("eu-stack: {eu:#?}"));
    assert_eq!(ours[on_usr2..], eu[eu_usr2..], "ours {ours:#?}\neu-stack {eu:#?}");
    let gdb = gdb_backtraces(t.pid).remove(&t.pid).expect("gdb shows the main thread");
    let g_usr2 = gdb.iter().position(|(_, s)| s.contains(" on_usr2 ")).unwrap_or_else(|| panic!("gdb: {gdb:#?}"));
    // gdb also shows frames it infers from DWARF call-site records for libc's tail calls
    // (__pthread_kill_internal, which no return address on the stack stands for; eu-stack and syscatch show
    // none): every frame of ours, up to main, is gdb's next one with its address, or its next
    // `<signal handler called>` for __restore_rt; gdb's others are only such inferred libc frames.
    let all: Vec<&Value> = ev["stack"].as_array().unwrap().iter().collect();
    let o_usr2 = all.iter().position(|fr| fr["function"] == "on_usr2").unwrap();
    let o_main = all.iter().position(|fr| fr["function"] == "main").unwrap();
    let mut g = gdb[g_usr2..].iter();
    let mut inferred = Vec::new();
    for o in &all[o_usr2..=o_main] {
        let sig = o["function"] == "__restore_rt";
        loop {
            let (addr, text) = g.next().unwrap_or_else(|| panic!("gdb has no frame for ours {o}: {gdb:#?}"));
            // gdb prints no address for a pc at the start of a line (the interrupted frame here): its name then.
            let named = addr.is_none() && o["function"].as_str().is_some_and(|f| text.starts_with(&format!("{f} (")));
            if (sig && text.contains("<signal handler called>")) || (!sig && (*addr == Some(hex(&o["addr"])) || named))
            {
                break;
            }
            inferred.push(text.clone());
        }
    }
    assert!(
        inferred.len() <= 2 && inferred.iter().all(|t| t.contains("pthread_kill")),
        "gdb frames syscatch lacks: {inferred:#?}\ngdb {gdb:#?}"
    );
    // syscatch's own one-shot view agrees with it, across both signal frames.
    let (code, out, err) = run_syscatch(&["stack", "--pid", &pid, "--json"]);
    assert_eq!(code, 0, "{err}");
    let snap = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
    let main = &snap.iter().find(|v| v["type"] == "thread" && v["data"]["tid"] == t.pid).unwrap()["data"];
    let theirs = real_frames(&main["stack"]);
    let s_usr2 = theirs.iter().position(|(_, n)| n == "on_usr2").unwrap_or_else(|| panic!("{theirs:#?}"));
    assert_eq!(theirs[s_usr2..], eu[eu_usr2..], "syscatch stack {theirs:#?}\neu-stack {eu:#?}");
    t.send("bye");
    // No tool cut the target's read short (gdb, eu-stack and syscatch stack all restart it).
    assert_eq!(t.out.next(), "bye 0");
    assert_eq!(t.wait().code(), Some(0));
}

/// On glibc 2.41 and 2.43 (Debian trixie's and sid's roots, traced from the host): the same call inside nested
/// handlers on an alternate signal stack, unwound through that libc's CFI and signal frames and named from its own
/// debug file (the root's libc6-dbg, not the host's), and the same return addresses as eu-stack's from the handler
/// outwards.
#[test]
fn alternate_signal_stack_on_glibc_2_41_and_2_43_unwinds_as_eu_stack_does() {
    require_ptrace();
    alt_stack_in(&crate::roots::trixie());
    alt_stack_in(&crate::roots::sid());
}

fn alt_stack_in(root: &std::path::Path) {
    let mut t = crate::roots::start_in(root, &testprog("alt_stack"), &[]);
    let pid = t.pid.to_string();
    let values = alt_stack_trace(&mut t);
    let ev = &values.iter().find(|v| v["type"] == "event").unwrap()["data"];
    let (f, ours, on_usr2) = alt_stack_frames(ev);
    let names: Vec<&str> = ours.iter().map(|(_, n)| n.as_str()).collect();
    let restore = names.iter().filter(|n| **n == "__restore_rt").count();
    assert_eq!(restore, 2, "two signal frames: {f:#?}");
    assert_consecutive(&f, &["thrower", "outer", "main"]);
    assert_eq!(f.last().map(String::as_str), Some("_start"), "{f:#?}");
    // Lines in libc come from the root's debug file.
    let syscall = &ev["stack"][0];
    assert!(syscall["file"].as_str().is_some_and(|p| p.contains("syscall")), "{syscall}");
    wait_blocked_in_read(t.pid, t.pid, 0);
    let eu: Vec<u64> = eu_stack_frames(t.pid, t.pid).iter().map(|(a, _)| *a).collect();
    let (code, out, err) = run_syscatch(&["stack", "--pid", &pid, "--json"]);
    assert_eq!(code, 0, "{err}");
    let snap = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
    let main = &snap.iter().find(|v| v["type"] == "thread" && v["data"]["tid"] == t.pid).unwrap()["data"];
    let theirs: Vec<u64> = real_frames(&main["stack"]).iter().map(|(a, _)| *a).collect();
    let usr2 = ours[on_usr2].0;
    let (s, e) = (theirs.iter().position(|a| *a == usr2), eu.iter().position(|a| *a == usr2));
    let (Some(s), Some(e)) = (s, e) else { panic!("on_usr2 at {usr2:#x}: ours {theirs:x?} eu-stack {eu:x?}") };
    assert_eq!(theirs[s..], eu[e..], "syscatch stack {theirs:x?}\neu-stack {eu:x?}");
    t.send("bye");
    assert_eq!(t.out.next(), "bye 0");
    assert_eq!(t.wait().code(), Some(0));
}
