//! How much more memory a process can take before something kills it: the tightest of the memory limits of its
//! cgroup and the cgroup's ancestors (v2 `memory.max`, else v1 `memory.limit_in_bytes`), and the host's
//! `MemAvailable`. A cgroup's use is its working set as `docker stats` counts it: `memory.current` (v1:
//! `memory.usage_in_bytes`) less the inactive file cache of its `memory.stat`, which the kernel reclaims before it
//! kills anyone.

use crate::model::cgroup::{self, Mounts};
use crate::os::Tid;

/// What bounds the process's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// A cgroup's limit: the file that says it (`/sys/fs/cgroup/app/memory.max`).
    Cgroup { file: String, limit: u64 },
    /// No cgroup limit is tighter than the memory the host has available.
    Host,
}

/// The bound, and the bytes left under it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headroom {
    pub bound: Bound,
    pub bytes: u64,
}

impl Headroom {
    /// `memory.max of /sys/fs/cgroup/app (512.0 MiB)` or `the host's MemAvailable`.
    pub fn describe(&self) -> String {
        match &self.bound {
            Bound::Cgroup { file, limit } => {
                let (dir, name) = file.rsplit_once('/').unwrap_or(("", file));
                format!("{name} of {dir} ({:.1} MiB)", *limit as f64 / 1048576.0)
            }
            Bound::Host => "the host's MemAvailable".into(),
        }
    }

    /// The same key for every process under one bound (processes share what is left under it).
    pub fn key(&self) -> String {
        match &self.bound {
            Bound::Cgroup { file, .. } => file.clone(),
            Bound::Host => "host".into(),
        }
    }
}

/// The cgroup mounts of this machine, read once.
pub fn read_mounts() -> Mounts {
    std::fs::read_to_string("/proc/self/mountinfo").map(|t| cgroup::parse_mounts(&t)).unwrap_or_default()
}

/// What bounds process `pid` now; `None` when even /proc/meminfo cannot be read.
pub fn read_headroom(pid: Tid, mounts: &Mounts) -> Option<Headroom> {
    let host = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| cgroup::parse_mem_available(&t));
    let mut best = host.map(|bytes| Headroom { bound: Bound::Host, bytes });
    let member = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map(|t| cgroup::parse_membership(&t));
    let member = member.unwrap_or_default();
    let hierarchies = [
        (&mounts.v2, &member.v2, ["memory.max", "memory.current", "inactive_file"]),
        (
            &mounts.v1_memory,
            &member.v1_memory,
            ["memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"],
        ),
    ];
    for (mount, path, [limit_file, usage_file, inactive]) in hierarchies {
        let (Some((root, point)), Some(path)) = (mount, path) else { continue };
        let mut dir = cgroup::cgroup_dir(point, root, path);
        // Up from the process's cgroup to the mount's root: the tightest limit binds.
        while dir.starts_with(point.as_str()) {
            if let Some(room) = cgroup_headroom(&dir, limit_file, usage_file, inactive)
                && best.as_ref().is_none_or(|b| room.bytes < b.bytes)
            {
                best = Some(room);
            }
            match dir.rsplit_once('/') {
                Some((up, _)) if dir != *point => dir = up.to_string(),
                _ => break,
            }
        }
    }
    best
}

fn cgroup_headroom(dir: &str, limit_file: &str, usage_file: &str, inactive: &str) -> Option<Headroom> {
    let file = format!("{dir}/{limit_file}");
    let limit = cgroup::parse_limit(&std::fs::read_to_string(&file).ok()?)?;
    let usage: u64 = std::fs::read_to_string(format!("{dir}/{usage_file}")).ok()?.trim().parse().ok()?;
    let stat = std::fs::read_to_string(format!("{dir}/memory.stat")).unwrap_or_default();
    let reclaimable =
        stat.lines().find_map(|l| l.strip_prefix(inactive)?.strip_prefix(' ')?.trim().parse::<u64>().ok()).unwrap_or(0);
    let used = usage.saturating_sub(reclaimable);
    Some(Headroom { bound: Bound::Cgroup { file, limit }, bytes: limit.saturating_sub(used) })
}
