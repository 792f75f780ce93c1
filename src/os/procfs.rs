//! Raw reads of `/proc`. Parsing lives in pure modules (`model::maps`, `model::status`) that take this text.

use super::Tid;
use std::io;
use std::path::PathBuf;

pub fn read_maps(pid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
}

/// Reads `/proc/PID/smaps` a line at a time, handing each to `line`: the text of a process with many mappings
/// (21 MB for 30,000) is never held whole. The kernel takes the target's mmap lock for each read (a page of
/// text), so the target's own mmap calls wait meanwhile: read it rarely.
pub fn for_each_smaps_line(pid: Tid, line: impl FnMut(&str)) -> io::Result<()> {
    for_each_line(&format!("/proc/{pid}/smaps"), line)
}

/// As [`for_each_smaps_line`], for `/proc/PID/maps`: a fourteenth of the text, and recent kernels read it under
/// per-mapping locks (measured on 6.18: the target's mmap calls do not wait for it at all).
pub fn for_each_maps_line(pid: Tid, line: impl FnMut(&str)) -> io::Result<()> {
    for_each_line(&format!("/proc/{pid}/maps"), line)
}

/// Each line of a file, newline included; a line that is not UTF-8 (a file name) with its bad bytes replaced.
/// Lines are handed over from the read buffer itself: the kernel gives a page of /proc text per read.
fn for_each_line(path: &str, mut line: impl FnMut(&str)) -> io::Result<()> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut emit = |bytes: &[u8]| match std::str::from_utf8(bytes) {
        Ok(s) => line(s),
        Err(_) => line(&String::from_utf8_lossy(bytes)),
    };
    let mut buf = vec![0u8; 64 << 10];
    // `buf[..filled]` holds what was read and not handed over yet: the start of a line.
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            // One line longer than the buffer (a path of many kB).
            buf.resize(buf.len() * 2, 0);
        }
        let n = match file.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            if filled > 0 {
                emit(&buf[..filled]);
            }
            return Ok(());
        }
        let end = filled + n;
        let mut from = 0;
        while let Some(nl) = buf[from..end].iter().position(|&b| b == b'\n') {
            emit(&buf[from..from + nl + 1]);
            from += nl + 1;
        }
        buf.copy_within(from..end, 0);
        filled = end - from;
    }
}

/// `/proc/PID/stat`: one line, parsed by `model::proctree::parse_stat`.
pub fn read_stat(pid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
}

/// Whether process `pid` runs the same executable file as syscatch (syscatch itself, its guardians, another
/// syscatch): compared by device and inode.
pub fn runs_our_binary(pid: Tid) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(ours), Ok(theirs)) = (std::fs::metadata("/proc/self/exe"), std::fs::metadata(format!("/proc/{pid}/exe")))
    else {
        return false;
    };
    (ours.dev(), ours.ino()) == (theirs.dev(), theirs.ino())
}

/// `/proc/PID/cmdline`: the arguments, each ended by a NUL (empty for a kernel thread or a zombie).
pub fn read_cmdline(pid: Tid) -> io::Result<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
}

pub fn read_status(tid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
}

/// Status of one thread of `pid` (its own pending-signal mask, not the process's).
pub fn read_task_status(pid: Tid, tid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
}

/// The kernel function a sleeping thread waits in (`0` while it runs).
pub fn read_wchan(tid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{tid}/wchan"))
}

pub fn read_environ(pid: Tid) -> io::Result<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ"))
}

pub fn read_auxv(pid: Tid) -> io::Result<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/auxv"))
}

/// Ids of the threads of `pid` now.
pub fn list_tasks(pid: Tid) -> io::Result<Vec<Tid>> {
    let mut tids: Vec<Tid> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// The processes forked by any thread of `pid` and still alive (`/proc/PID/task/TID/children`; empty on a kernel
/// without it).
pub fn list_children(pid: Tid) -> Vec<Tid> {
    let mut kids = Vec::new();
    for tid in list_tasks(pid).unwrap_or_default() {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
            kids.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<Tid>().ok()));
        }
    }
    kids
}

/// Where a file the target has mapped may be read, best first. `/proc/PID/map_files/START-END` opens the very
/// inode that is mapped, so a container's file or one replaced on disk is read correctly; it needs
/// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE, which a tracer holding only CAP_SYS_PTRACE lacks. Without it: the
/// path as /proc/PID/maps shows it, which is relative to *our* root (a chrooted target's libc shows as
/// `/chroot/dir/lib/...`), and the path under /proc/PID/root, for a file our root cannot reach (another mount
/// namespace shows paths from its own root). The caller checks the build-id of whichever it reads.
/// A file unlinked or replaced since it was mapped shows as `PATH (deleted)`: whatever is at PATH now is tried
/// too, so a replaced library is refused by its build-id rather than reported as missing.
pub fn mapped_file_candidates(pid: Tid, start: u64, end: u64, path: &str) -> Vec<PathBuf> {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    vec![PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}")), PathBuf::from(path), root_path(pid, path)]
}

/// `path` as seen from the target's root directory.
pub fn root_path(pid: Tid, path: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{path}"))
}

/// `/proc/PID/task/TID/syscall`: the system call a thread is blocked in, with its stack pointer (`running` while
/// it is on a CPU). Reading it never stops the thread.
pub fn read_task_syscall(pid: Tid, tid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
}

/// The run delay (ns waiting on a runqueue, `schedstat`'s second field) of every thread of `pid` now; threads whose
/// file cannot be read or parsed (gone meanwhile) are left out. Empty on a kernel without `schedstat`. Reading it
/// never stops a thread.
pub fn read_run_delays(pid: Tid) -> std::collections::BTreeMap<Tid, u64> {
    let parse = |tid: Tid| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
        Some((tid, crate::model::schedstat::parse_schedstat(&text)?.wait_ns))
    };
    list_tasks(pid).unwrap_or_default().into_iter().filter_map(parse).collect()
}

/// Each thread of `pid` now: its time on a CPU (ns, `schedstat`'s first field) and its state letter (`R`, `S`, ...
/// from its `stat`). Threads gone meanwhile are left out. Reading them never stops a thread.
pub fn read_run_states(pid: Tid) -> std::collections::BTreeMap<Tid, (u64, char)> {
    let read = |tid: Tid| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
        let run = crate::model::schedstat::parse_schedstat(&text)?.run_ns;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
        Some((tid, (run, state)))
    };
    list_tasks(pid).unwrap_or_default().into_iter().filter_map(read).collect()
}

/// The calling thread's own run delay in ns, as [`read_run_delays`].
pub fn read_own_run_delay() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(crate::model::schedstat::parse_schedstat(&text)?.wait_ns)
}

/// A kernel setting: `vm.overcommit_memory` is `/proc/sys/vm/overcommit_memory`.
pub fn read_sysctl(key: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/"))).map(|s| s.trim().to_string())
}

/// Transparent huge pages mode (`always [madvise] never`).
pub fn read_thp() -> io::Result<String> {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
}

/// The target of the `/etc/malloc.conf` symlink as the target sees it (jemalloc reads its options from the name).
pub fn read_malloc_conf_link(pid: Tid) -> io::Result<String> {
    std::fs::read_link(root_path(pid, "/etc/malloc.conf")).map(|p| p.to_string_lossy().into_owned())
}

/// `/proc/PID/smaps_rollup`: the process's smaps summed by the kernel (Linux 4.14), parsed by
/// `model::smaps::parse_rollup`. It walks every mapping as smaps does, but writes one record.
pub fn read_smaps_rollup(pid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn lines_come_whole_across_reads_and_long_or_not_utf8() {
        let dir = std::env::temp_dir().join(format!("syscatch-lines-{}", std::process::id()));
        let long = "x".repeat(150 << 10);
        let mut text = format!("a b\n{long}\n\nbad ").into_bytes();
        text.extend_from_slice(&[0xff, b'\n', b'l', b'a', b's', b't']);
        std::fs::write(&dir, &text).unwrap();
        let mut got = Vec::new();
        super::for_each_line(dir.to_str().unwrap(), |l| got.push(l.to_string())).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(
            got,
            ["a b\n".to_string(), format!("{long}\n"), "\n".into(), "bad \u{fffd}\n".into(), "last".into()]
        );
        assert!(super::for_each_line("/nonexistent/file", |_| {}).is_err());
    }
}
