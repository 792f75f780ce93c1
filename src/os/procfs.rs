//! Raw reads of `/proc`. Parsing lives in pure modules (`model::maps`, `model::status`) that take this text.

use super::Tid;
use std::io;
use std::path::PathBuf;

pub fn read_maps(pid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
}

/// Reads and parses `/proc/PID/smaps` (no ptrace: the target is not stopped). Empty if it cannot be read.
pub fn read_smaps_regions(pid: Tid) -> Vec<crate::model::smaps::SmapsRegion> {
    read_smaps(pid).map(|t| crate::model::smaps::parse_smaps(&t)).unwrap_or_default()
}

pub fn read_smaps(pid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/smaps"))
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
