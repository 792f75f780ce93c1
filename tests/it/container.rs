//! A target in its own mount and pid namespace with a different root (`unshare --mount --pid --fork` + `chroot`
//! into a directory holding the program and the libraries ldd lists), traced from the host by its host pid. The
//! paths in the host's view of /proc/PID/maps are host paths; the target's own pid is 1.
//!
//! The hard case: the chroot's libc is replaced on disk (a new file renamed over the path, as package managers do)
//! after the target started. The path then names a file that is not mapped; syscatch must read the mapped one
//! (/proc/PID/map_files) or refuse with a build-id error, never use the new file's bytes.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Builds `CARGO_TARGET_TMPDIR/container-NAME`: `/prog` plus every library ldd lists, at the same paths.
fn build_root(name: &str, prog: &Path) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("container-{name}"));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(prog, root.join("prog")).unwrap();
    let ldd = Command::new("ldd").arg(prog).output().expect("ldd runs");
    let text = String::from_utf8_lossy(&ldd.stdout);
    let libs: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then_some(path)
        })
        .collect();
    assert!(libs.iter().any(|l| l.contains("libc.so")), "ldd lists libc: {text}");
    for lib in libs {
        let dest = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(lib, &dest).unwrap_or_else(|e| panic!("copy {lib}: {e}"));
    }
    root
}

/// Starts `/prog` in new mount and pid namespaces chrooted to `root`; `t.pid` is its host pid.
fn start_in_container(root: &Path) -> Target {
    require_ptrace();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--pid", "--fork", "--kill-child", "chroot"]).arg(root).arg("/prog");
    let mut t = Target::start_cmd(&mut cmd);
    assert!(t.pid < 10, "inside its pid namespace the target has a small pid: {}", t.pid);
    let ns_pid = t.pid;
    let unshare = t.child.id();
    let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
    let host: i32 = children.split_whitespace().next().expect("unshare's child").parse().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{host}/status")).unwrap();
    let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:")).unwrap();
    let ids: Vec<i32> = nspid.split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(ids, [host, ns_pid], "host pid {host} is pid {ns_pid} in the container");
    let root_link = std::fs::read_link(format!("/proc/{host}/root")).unwrap();
    assert_eq!(root_link, root, "the target's root is the chroot");
    t.pid = host;
    t
}

fn cmd(t: &mut Target, c: &str) -> Vec<String> {
    t.send(c);
    let mut lines = t.out.until(|l| l == "ok");
    lines.pop();
    lines
}

/// Traces `t` from the host: `mmap 5` must be captured exactly. Returns syscatch's stderr.
fn trace_exactly(t: &mut Target, ctx: &str) -> Vec<String> {
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
    sc.wait_attached();
    let truth = truth_mmaps(&cmd(t, "mmap 5"));
    assert_eq!(truth.len(), 5);
    assert_eq!(cmd(t, "fork 2"), ["child 0 status 40", "child 1 status 41"], "{ctx}: fork children in the container");
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{ctx}: {err:#?}");
    let values = json_lines(&out);
    assert_eq!(captured_mmaps(&values), truth, "{ctx}: exactly the target's mmaps");
    let s = summary_data(&values);
    assert_eq!(s["end"], "signal", "{ctx}");
    assert_eq!(s["matching"], 5, "{ctx}");
    assert_eq!(s["forks_cleaned"], 2, "{ctx}");
    assert_eq!(tracer_pid(t.pid), Some(0), "{ctx}");
    if let Some(site) = attached_site(&err) {
        assert_eq!(read_mem(t.pid, site, 16), file_bytes_at(t.pid, site, 16), "{ctx}");
    }
    assert_text_pristine(t.pid, ctx);
    err
}

#[test]
fn container_target_traced_from_the_host_by_host_pid() {
    let root = build_root("plain", &testprog("target"));
    let mut t = start_in_container(&root);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap();
    assert!(maps.contains(root.to_str().unwrap()), "the host sees host paths in maps");
    trace_exactly(&mut t, "container");
    t.send("exit 6");
    assert_eq!(t.wait().code(), Some(6));
}

/// The file offset and length of `syscall()` in the libc file `data`, and of its build-id bytes.
fn libc_layout(data: &[u8]) -> (usize, usize, std::ops::Range<usize>) {
    use syscatch::testing::model::modules::{Module, ModuleMap};
    let first = syscatch::testing::model::maps::parse_maps_line("0-1000 r--p 00000000 00:00 0 /libc.so.6").unwrap();
    let map = ModuleMap { path: first.path.clone(), start: 0, end: 0x1000, first };
    let data: Arc<[u8]> = data.into();
    let m = Module::parse(map, data.clone()).expect("libc parses");
    let (addr, size) = m.find_symbol("syscall").expect("libc has syscall()");
    let code = m.file_bytes(addr, size).expect("syscall() in the file");
    let off = code.as_ptr() as usize - data.as_ptr() as usize;
    let id = m.build_id.clone().expect("libc has a build-id");
    let id_off = data.windows(id.len()).position(|w| w == id.as_slice()).unwrap();
    (off, size as usize, id_off..id_off + id.len())
}

/// Renames a copy of the chroot's libc over its path, with syscall()'s bytes after the first instruction
/// replaced by int3s (they would wreck the target if syscatch emulated or restored them) and, if `new_id`, a
/// different build-id.
fn replace_libc(t: &Target, new_id: bool) -> String {
    let maps = maps_of(t.pid);
    let libc = maps.iter().find(|m| m.path.contains("/libc.so") && m.offset == 0).expect("libc mapped");
    let path = libc.path.clone();
    let mut data = std::fs::read(&path).unwrap();
    let (off, size, id) = libc_layout(&data);
    for b in &mut data[off + 3..off + size] {
        *b = 0xcc;
    }
    if new_id {
        for b in &mut data[id] {
            *b ^= 0x5a;
        }
    }
    let tmp = format!("{path}.new");
    std::fs::write(&tmp, &data).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let after = maps_of(t.pid);
    let now = after.iter().find(|m| m.start == libc.start).unwrap();
    assert!(now.path.ends_with(" (deleted)"), "the mapped libc is no longer at its path: {}", now.path);
    path
}

fn replaced_libc_case(name: &str, new_id: bool) {
    let root = build_root(name, &testprog("target"));
    let mut t = start_in_container(&root);
    replace_libc(&t, new_id);
    trace_exactly(&mut t, name);
    t.send("exit 6");
    assert_eq!(t.wait().code(), Some(6), "{name}");
}

#[test]
fn container_libc_replaced_with_a_new_build_id_is_read_through_map_files() {
    replaced_libc_case("replaced-new-id", true);
}

/// The adversarial case: same build-id, different code. Only reading the mapped inode is right here.
#[test]
fn container_libc_replaced_with_the_same_build_id_is_read_through_map_files() {
    replaced_libc_case("replaced-same-id", false);
}

/// setpriv arguments that run a command as root without CAP_SYS_ADMIN and CAP_CHECKPOINT_RESTORE: it can still
/// trace (CAP_SYS_PTRACE) but not open /proc/PID/map_files, like a debug container given only SYS_PTRACE.
const NO_MAP_FILES: [&str; 3] =
    ["--inh-caps=-sys_admin,-checkpoint_restore", "--bounding-set=-sys_admin,-checkpoint_restore", "--"];

/// Without map_files, syscatch must find the mapped file by its path as the host sees it in maps (not under
/// /proc/PID/root, where that host path does not exist) and check its build-id.
#[test]
fn container_target_traced_without_map_files() {
    let root = build_root("no-map-files", &testprog("target"));
    let mut t = start_in_container(&root);
    let pid = t.pid.to_string();
    let mut sc = {
        let mut c = Command::new("setpriv");
        c.args(NO_MAP_FILES).arg(env!("CARGO_BIN_EXE_syscatch")).args(["--pid", &pid, "--syscall", "mmap", "--json"]);
        spawn_syscatch(c)
    };
    sc.wait_attached();
    let truth = truth_mmaps(&cmd(&mut t, "mmap 3"));
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert_eq!(captured_mmaps(&json_lines(&out)), truth);
    assert_text_pristine(t.pid, "no map_files");

    // Replaced on disk and no map_files: the only honest answer is a clear refusal naming the build-id.
    replace_libc(&t, true);
    let mut c = Command::new("setpriv");
    c.args(NO_MAP_FILES).arg(env!("CARGO_BIN_EXE_syscatch")).args(["--pid", &pid, "--syscall", "mmap", "--json"]);
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("build-id"), "{err}");
    assert_eq!(tracer_pid(t.pid), Some(0));
    assert_text_pristine(t.pid, "refused");
    t.send("exit 6");
    assert_eq!(t.wait().code(), Some(6));
}

fn spawn_syscatch(mut c: Command) -> Syscatch {
    use std::process::Stdio;
    let mut child =
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("syscatch starts");
    let out = Lines::new(child.stdout.take().unwrap(), "syscatch stdout");
    let err = Lines::new(child.stderr.take().unwrap(), "syscatch stderr");
    Syscatch { child, out, err }
}

/// `stack`, `mem` and `hooks` work on the container's target by host pid, and traced events unwind through the
/// chrooted program and libc (files read through map_files or the target's root).
#[test]
fn container_target_stack_mem_and_hooks_by_host_pid() {
    let root = build_root("tools", &testprog("target"));
    let mut t = start_in_container(&root);
    let pid = t.pid.to_string();

    let (code, out, err) = run_syscatch(&["stack", "--pid", &pid, "--json"]);
    assert_eq!(code, 0, "{err}");
    let threads = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
    let main_thread = threads.iter().find(|v| v["type"] == "thread").map(|v| &v["data"]).expect("a thread line");
    let funcs: Vec<&str> =
        main_thread["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
    assert!(funcs.contains(&"main") && funcs.contains(&"__libc_start_call_main"), "{funcs:?}");
    assert_eq!(tracer_pid(t.pid), Some(0));

    let (code, out, err) = run_syscatch(&["mem", "--pid", &pid, "--json"]);
    assert_eq!(code, 0, "{err}");
    let mem = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
    assert!(mem.iter().any(|v| v["type"] == "mem" && v["data"]["allocator"]["name"] == "glibc"), "{out}");

    let (code, out, err) = run_syscatch(&["hooks", "--pid", &pid, "--json"]);
    assert_eq!(code, 0, "{err}");
    let hooks = json_lines(&out.lines().map(str::to_string).collect::<Vec<_>>());
    let mmap = hooks.iter().find(|v| v["type"] == "verdict" && v["data"]["function"] == "mmap").expect("mmap verdict");
    assert_ne!(mmap["data"]["status"], "patched_at_run_time", "{mmap}");
    assert!(!hooks.iter().any(|v| v["data"]["status"] == "patched_at_run_time"), "nothing patched: {out}");

    let mut sc = Syscatch::start(&["--pid", &pid, "--syscall", "mmap", "--json"]);
    sc.wait_attached();
    let truth = truth_mmaps(&cmd(&mut t, "mmap 2"));
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let values = json_lines(&out);
    assert_eq!(captured_mmaps(&values), truth);
    for v in values.iter().filter(|v| v["type"] == "event") {
        let f: Vec<&str> =
            v["data"]["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
        assert_eq!(f.first(), Some(&"syscall"), "{f:?}");
        assert!(f.contains(&"main"), "{f:?}");
    }
    t.send("exit 0");
    assert_eq!(t.wait().code(), Some(0));
}
