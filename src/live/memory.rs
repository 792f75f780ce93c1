//! A process's memory by class as it is now (`syscatch mem`, and the memory facts of the findings): its smaps,
//! the first word of each candidate malloc heap (through /proc/PID/mem) and each thread's stack pointer, read
//! without stopping it, then classified by `analysis::memclass`.

use crate::analysis::memclass::{self, ArenaSummary, Class, ClassTotal, Threads};
use crate::live::Error;
use crate::model::smaps::{SmapsRegion, parse_smaps};
use crate::os::{Tid, mem::ProcMem, procfs};
use std::collections::BTreeMap;

/// One reading of the process's memory, classified.
pub struct Sample {
    pub time: f64,
    pub regions: Vec<SmapsRegion>,
    pub classes: Vec<Class>,
    pub by_class: BTreeMap<Class, ClassTotal>,
    pub total: ClassTotal,
    pub arenas: ArenaSummary,
    pub threads: Threads,
}

/// Rss+Swap in KiB by class name, the number of glibc thread arenas, and the allocator's name: the memory facts
/// the findings rules take. `None` when the process cannot be read.
pub fn read_class_facts(pid: Tid) -> Option<(BTreeMap<String, i64>, usize, String)> {
    let mem = ProcMem::open(pid).ok();
    let s = read_sample(pid, mem.as_ref(), 0.0).ok()?;
    let alloc = memclass::detect_allocator(&s.regions);
    let kb = s.by_class.iter().map(|(c, t)| (c.name().to_string(), t.rss_swap() as i64)).collect();
    Some((kb, s.arenas.arenas.len().max(usize::from(s.arenas.unread > 0)), alloc.name.to_string()))
}

pub fn read_sample(pid: Tid, mem: Option<&ProcMem>, time: f64) -> Result<Sample, Error> {
    let text = procfs::read_smaps(pid).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => Error::NoProcess { pid },
        std::io::ErrorKind::PermissionDenied => Error::SmapsDenied { pid },
        _ => Error::Smaps { pid, error },
    })?;
    let regions = parse_smaps(&text);
    if regions.is_empty() {
        return Err(Error::NothingMapped { pid });
    }
    let cands = memclass::find_heap_candidates(&regions);
    let ptrs: Vec<Option<u64>> = cands.iter().map(|c| mem.and_then(|m| m.read_u64(c.start).ok())).collect();
    let (arenas, members) = memclass::resolve_arenas(&regions, &cands, &ptrs);
    let threads = read_threads(pid);
    let classes = memclass::classify(&regions, &members, &threads);
    let (by_class, total) = memclass::totals(&regions, &classes);
    Ok(Sample { time, regions, classes, by_class, total, arenas, threads })
}

fn read_threads(pid: Tid) -> Threads {
    let tids = procfs::list_tasks(pid).unwrap_or_default();
    let sps = tids
        .iter()
        .filter_map(|&t| procfs::read_task_syscall(pid, t).ok())
        .filter_map(|s| memclass::parse_task_syscall(&s))
        .collect();
    Threads { count: tids.len(), sps }
}
