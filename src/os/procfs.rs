//! Raw reads of `/proc`. Parsing lives in pure modules (`procmaps`, `procinfo`) that take this text.

use super::Tid;
use std::io;
use std::path::PathBuf;

pub fn read_maps(pid: Tid) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
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

/// Reads a file the target has mapped, as the target sees it. `/proc/PID/map_files/START-END` opens the very
/// inode that is mapped (needs root), so a container's file or one replaced on disk is read correctly; the
/// path under `/proc/PID/root` is the fallback.
pub fn read_mapped_file(pid: Tid, start: u64, end: u64, path: &str) -> io::Result<Vec<u8>> {
    let by_map = PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"));
    match std::fs::read(&by_map) {
        Ok(b) => Ok(b),
        Err(_) => std::fs::read(root_path(pid, path)),
    }
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
