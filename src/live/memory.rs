//! A process's memory by class as it is now (`syscatch mem`, and the memory facts of the findings): its smaps,
//! the first word of each candidate malloc heap (through /proc/PID/mem) and each thread's stack pointer, read
//! without stopping it, then classified by `analysis::memclass`.

use crate::analysis::memclass::{self, ArenaSummary, Class, ClassTotal, Threads};
use crate::live::Error;
use crate::model::smaps::{SmapsRegion, SmapsStream};
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

/// The memory facts the findings rules take: Rss+Swap in KiB by class name, the number of glibc thread arenas,
/// the allocator's name, and glibc malloc's arenas as read.
pub type ClassFacts = (BTreeMap<String, i64>, usize, String, Option<crate::analysis::mstate::HeapReading>);

/// [`ClassFacts`] as the process is now; `None` when it cannot be read.
pub fn read_class_facts(pid: Tid) -> Option<ClassFacts> {
    read_class_facts_of(pid, read_regions(pid).ok()?, None)
}

/// [`ClassFacts`] of regions read just before (by [`read_regions`]), reading only the heaps' first words, the
/// threads' stack pointers and glibc malloc's arenas (with `threads`: which thread uses which, see
/// `crate::live::heap::read`).
pub fn read_class_facts_of(pid: Tid, regions: Vec<SmapsRegion>, threads: Option<&[(Tid, u64)]>) -> Option<ClassFacts> {
    let mem = ProcMem::open(pid).ok();
    let s = sample_of(pid, regions, mem.as_ref(), 0.0).ok()?;
    let alloc = memclass::detect_allocator(&s.regions);
    let kb = s.by_class.iter().map(|(c, t)| (c.name().to_string(), t.rss_swap() as i64)).collect();
    let heap = crate::live::heap::read(pid, mem.as_ref(), &s, &alloc, threads);
    Some((kb, s.arenas.arenas.len().max(usize::from(s.arenas.unread > 0)), alloc.name.to_string(), heap))
}

/// Every region of `/proc/PID/smaps`, parsed as it is read, without the `VmFlags` and the counters that have no
/// field (nothing that reads these samples uses them; for 30,000 regions they would cost over 10 MB).
pub fn read_regions(pid: Tid) -> Result<Vec<SmapsRegion>, Error> {
    let mut stream = SmapsStream::lean();
    let mut regions = Vec::new();
    procfs::for_each_smaps_line(pid, |l| regions.extend(stream.line(l))).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => Error::NoProcess { pid },
        std::io::ErrorKind::PermissionDenied => Error::SmapsDenied { pid },
        _ => Error::Smaps { pid, error },
    })?;
    regions.extend(stream.finish());
    Ok(regions)
}

pub fn read_sample(pid: Tid, mem: Option<&ProcMem>, time: f64) -> Result<Sample, Error> {
    sample_of(pid, read_regions(pid)?, mem, time)
}

/// Classifies regions just read.
fn sample_of(pid: Tid, regions: Vec<SmapsRegion>, mem: Option<&ProcMem>, time: f64) -> Result<Sample, Error> {
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
