//! Classifies a process's memory from its smaps regions: main heap, glibc malloc thread arenas, thread stacks,
//! anonymous regions, file-backed code and data, shared memory, GPU/driver mappings; names the allocator in use
//! and the environment variables that steer it, with advice where a known pattern shows. Pure: what must be read
//! from the target (each arena heap's first word, each thread's stack pointer, the environment) is passed in.

use crate::model::smaps::SmapsRegion;
use std::collections::{BTreeMap, BTreeSet};

/// glibc's HEAP_MAX_SIZE on 64-bit (2 * DEFAULT_MMAP_THRESHOLD_MAX): a thread arena's heaps are reserved at this
/// size and alignment, so that `heap_for_ptr` can find a chunk's heap by masking its address.
pub const HEAP_MAX: u64 = 64 << 20;

/// Anonymous regions of at least this size (bytes) are "large".
pub const ANON_LARGE: u64 = 1 << 20;

/// The largest PROT_NONE region taken for a thread stack's guard (glibc's default is one page; programs may
/// ask for more).
const MAX_GUARD: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    Heap,
    Arena,
    Stack,
    AnonLarge,
    AnonSmall,
    FileCode,
    FileData,
    Shm,
    Gpu,
    Other,
}

impl Class {
    pub const ALL: [Class; 10] = [
        Class::Heap,
        Class::Arena,
        Class::Stack,
        Class::AnonLarge,
        Class::AnonSmall,
        Class::FileCode,
        Class::FileData,
        Class::Shm,
        Class::Gpu,
        Class::Other,
    ];

    /// Stable name, used in text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Class::Heap => "heap",
            Class::Arena => "malloc_arenas",
            Class::Stack => "thread_stacks",
            Class::AnonLarge => "anon_large",
            Class::AnonSmall => "anon_small",
            Class::FileCode => "file_code",
            Class::FileData => "file_data",
            Class::Shm => "shared_memory",
            Class::Gpu => "gpu_driver",
            Class::Other => "other",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Class::Heap => "main heap [heap] (brk)",
            Class::Arena => "glibc malloc thread arenas",
            Class::Stack => "thread stacks",
            Class::AnonLarge => "anonymous, regions >= 1 MiB",
            Class::AnonSmall => "anonymous, regions < 1 MiB",
            Class::FileCode => "file-backed code",
            Class::FileData => "file-backed data",
            Class::Shm => "shared memory (/dev/shm, SysV, memfd)",
            Class::Gpu => "GPU/driver mappings",
            Class::Other => "other ([vdso], devices, ...)",
        }
    }
}

/// The path without the ` (deleted)` the kernel appends once the file is unlinked.
fn live_path(path: &str) -> &str {
    path.strip_suffix(" (deleted)").unwrap_or(path)
}

fn is_anon(r: &SmapsRegion) -> bool {
    r.map.path.is_empty() && r.map.inode == 0
}

fn is_gpu(path: &str) -> bool {
    path.starts_with("/dev/nvidia") || path.starts_with("/dev/dri/") || path == "/dev/kfd"
}

fn is_shm(r: &SmapsRegion) -> bool {
    let p = live_path(&r.map.path);
    p.starts_with("/dev/shm/")
        || p.starts_with("/SYSV")
        || p.starts_with("/memfd:")
        // MAP_SHARED|MAP_ANONYMOUS memory is backed by an unlinked shmem file the kernel names /dev/zero.
        || (p == "/dev/zero" && r.map.perms.ends_with('s'))
}

/// A region that matches the layout of a glibc thread-arena heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapCandidate {
    /// Index of the rw-p part in the region list.
    pub rw: usize,
    /// Index of the PROT_NONE rest of the 64 MiB reservation (absent once the heap has grown to the full size).
    pub reserve: Option<usize>,
    /// Start of the heap: where its `heap_info` sits, whose first word is the owning arena (`ar_ptr`).
    pub start: u64,
}

/// Finds arena heap candidates: a 64 MiB-aligned anonymous rw-p region immediately followed by an anonymous
/// ---p region, the pair spanning 64 MiB; or a 64 MiB-aligned anonymous rw-p region of exactly 64 MiB (a heap
/// grown to the full size). A ---p part that runs past the 64 MiB end is accepted (the kernel merges it with an
/// adjacent PROT_NONE region); the first word read from the heap confirms or rejects each candidate.
pub fn find_heap_candidates(regions: &[SmapsRegion]) -> Vec<HeapCandidate> {
    let mut out = Vec::new();
    for (i, r) in regions.iter().enumerate() {
        let m = &r.map;
        if !is_anon(r) || m.perms != "rw-p" || !m.start.is_multiple_of(HEAP_MAX) {
            continue;
        }
        let Some(heap_end) = m.start.checked_add(HEAP_MAX) else {
            continue;
        };
        if m.end == heap_end {
            out.push(HeapCandidate { rw: i, reserve: None, start: m.start });
            continue;
        }
        let Some(next) = regions.get(i + 1) else { continue };
        if is_anon(next)
            && next.map.perms == "---p"
            && next.map.start == m.end
            && m.end < heap_end
            && next.map.end >= heap_end
        {
            out.push(HeapCandidate { rw: i, reserve: Some(i + 1), start: m.start });
        }
    }
    out
}

/// What the arena heaps hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArenaSummary {
    /// Heaps counted as glibc arena heaps.
    pub heaps: usize,
    /// Their Rss+Swap, kB.
    pub rss_swap: u64,
    /// Distinct owning arenas (`ar_ptr` values) of the heaps whose first word was read and checked.
    pub arenas: BTreeSet<u64>,
    /// Heaps counted by their layout alone because their first word could not be read.
    pub unread: usize,
    /// Candidates rejected: the first word does not point into an arena heap, so they are not glibc heaps.
    pub rejected: usize,
}

/// Decides which candidates are arena heaps, given the first word read from each (`None`: unreadable).
/// The arena of a thread arena lives just after the `heap_info` of its first heap, so a true `ar_ptr` is
/// 8-aligned and points into the rw-p part of one of the candidates. Returns the summary and the indices of the
/// regions (rw-p and reserve) that belong to accepted heaps.
pub fn resolve_arenas(
    regions: &[SmapsRegion],
    cands: &[HeapCandidate],
    ar_ptrs: &[Option<u64>],
) -> (ArenaSummary, BTreeSet<usize>) {
    let inside_a_heap = |p: u64| {
        cands.iter().any(|c| regions.get(c.rw).is_some_and(|r| r.map.start < p && p < r.map.end && p.is_multiple_of(8)))
    };
    let mut s = ArenaSummary::default();
    let mut members = BTreeSet::new();
    for (c, ptr) in cands.iter().zip(ar_ptrs.iter().copied().chain(std::iter::repeat(None))) {
        match ptr {
            Some(p) if inside_a_heap(p) => {
                s.arenas.insert(p);
            }
            Some(_) => {
                s.rejected += 1;
                continue;
            }
            None => s.unread += 1,
        }
        s.heaps += 1;
        for i in std::iter::once(c.rw).chain(c.reserve) {
            if let Some(r) = regions.get(i) {
                s.rss_swap = s.rss_swap.saturating_add(r.rss_swap());
            }
            members.insert(i);
        }
    }
    (s, members)
}

/// A thread's stack pointer from `/proc/PID/task/TID/syscall`: `nr arg1..arg6 sp pc` while in a system call,
/// `-1 sp pc` when stopped outside one, `running` when on a CPU (no pointer then).
pub fn parse_task_syscall(text: &str) -> Option<u64> {
    let f: Vec<&str> = text.split_ascii_whitespace().collect();
    if f.len() < 3 {
        return None;
    }
    let sp = f.get(f.len() - 2)?;
    u64::from_str_radix(sp.strip_prefix("0x")?, 16).ok()
}

/// What is known of the threads' stack pointers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Threads {
    pub count: usize,
    /// Stack pointers of the threads that were off-CPU when sampled.
    pub sps: Vec<u64>,
}

/// The class of every region, in order. Thread stacks: `[stack]`, and each anonymous region that holds a
/// thread's stack pointer (read from /proc/PID/task/TID/syscall: `kstkesp` in task/TID/stat reads 0 on current
/// kernels). When some thread's pointer is unknown (it was running), anonymous rw-p regions just above a small
/// anonymous PROT_NONE guard (glibc's pthread stack layout) count as stacks too.
pub fn classify(regions: &[SmapsRegion], arena_members: &BTreeSet<usize>, threads: &Threads) -> Vec<Class> {
    let unknown_sp = threads.count > threads.sps.len();
    regions
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let m = &r.map;
            let path = live_path(&m.path);
            if arena_members.contains(&i) {
                Class::Arena
            } else if m.path == "[heap]" {
                Class::Heap
            } else if m.path == "[stack]" {
                Class::Stack
            } else if is_gpu(path) {
                Class::Gpu
            } else if is_shm(r) {
                Class::Shm
            } else if is_anon(r) {
                let holds_sp = threads.sps.iter().any(|&sp| m.contains(sp));
                let guarded = unknown_sp
                    && m.perms == "rw-p"
                    && i.checked_sub(1).and_then(|j| regions.get(j)).is_some_and(|g| {
                        is_anon(g)
                            && g.map.perms == "---p"
                            && g.map.end == m.start
                            && g.map.len() <= MAX_GUARD
                            && !arena_members.contains(&(i - 1))
                    });
                if holds_sp || guarded {
                    Class::Stack
                } else if m.len() >= ANON_LARGE {
                    Class::AnonLarge
                } else {
                    Class::AnonSmall
                }
            } else if m.is_file() {
                if m.is_exec() { Class::FileCode } else { Class::FileData }
            } else {
                Class::Other
            }
        })
        .collect()
}

/// Sums per class, in kB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassTotal {
    pub regions: usize,
    pub size: u64,
    pub rss: u64,
    pub swap: u64,
    pub pss: u64,
}

impl ClassTotal {
    pub fn rss_swap(&self) -> u64 {
        self.rss.saturating_add(self.swap)
    }
    fn add(&mut self, r: &SmapsRegion) {
        self.regions += 1;
        self.size = self.size.saturating_add(r.size);
        self.rss = self.rss.saturating_add(r.rss);
        self.swap = self.swap.saturating_add(r.swap);
        self.pss = self.pss.saturating_add(r.pss);
    }
}

/// Totals by class (every class present, in [`Class::ALL`] order) and overall.
pub fn totals(regions: &[SmapsRegion], classes: &[Class]) -> (BTreeMap<Class, ClassTotal>, ClassTotal) {
    let mut by: BTreeMap<Class, ClassTotal> = Class::ALL.iter().map(|&c| (c, ClassTotal::default())).collect();
    let mut all = ClassTotal::default();
    for (r, c) in regions.iter().zip(classes) {
        by.entry(*c).or_default().add(r);
        all.add(r);
    }
    (by, all)
}

/// The malloc implementation in the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocator {
    /// `jemalloc`, `tcmalloc`, `mimalloc`, `glibc`, `musl` (its libc, which is also its dynamic loader), or
    /// `unknown` (no libc mapped: a static binary).
    pub name: &'static str,
    /// The mapped library it was recognised by.
    pub library: Option<String>,
    /// Settings it reads besides the environment, as found in the process (jemalloc: the `malloc_conf` string
    /// compiled into the program, the name `/etc/malloc.conf` links to): (where, value).
    pub config: Vec<(String, String)>,
}

/// Names the allocator by the libraries mapped. An allocator linked statically into the program is not seen:
/// the answer is then glibc when libc is mapped.
pub fn detect_allocator(regions: &[SmapsRegion]) -> Allocator {
    let mut libc = None;
    for r in regions {
        let path = live_path(&r.map.path);
        let base = path.rsplit('/').next().unwrap_or(path);
        for (prefix, name) in [("libjemalloc", "jemalloc"), ("libtcmalloc", "tcmalloc"), ("libmimalloc", "mimalloc")] {
            if base.starts_with(prefix) && r.map.is_file() {
                return Allocator { name, library: Some(path.to_string()), config: Vec::new() };
            }
        }
        // musl's libc is its loader: /lib/ld-musl-x86_64.so.1 (Alpine), /usr/lib/x86_64-linux-musl/libc.so
        // (Debian's musl-tools).
        let musl = base.starts_with("ld-musl") || base.starts_with("libc.musl") || path.contains("-linux-musl/");
        if musl && r.map.is_file() {
            return Allocator { name: "musl", library: Some(path.to_string()), config: Vec::new() };
        }
        if libc.is_none() && (base.starts_with("libc.so") || base.starts_with("libc-2.")) {
            libc = Some(path.to_string());
        }
    }
    match libc {
        Some(l) => Allocator { name: "glibc", library: Some(l), config: Vec::new() },
        None => Allocator { name: "unknown", library: None, config: Vec::new() },
    }
}

/// The environment variables that steer allocators and UCX's memory hooks: these, and those starting with
/// [`ENV_PREFIXES`].
pub const ENV_VARS: [&str; 8] = [
    "LD_PRELOAD",
    "MALLOC_ARENA_MAX",
    "MALLOC_CONF",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "PYTHONMALLOC",
    "UCX_MEM_MMAP_HOOK_MODE",
    "UCX_RCACHE_MAX_UNRELEASED",
];

/// Every variable of tcmalloc's (gperftools: `TCMALLOC_RELEASE_RATE`, `TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES`, ...)
/// and mimalloc's (`MIMALLOC_ARENA_EAGER_COMMIT`, `MIMALLOC_PURGE_DELAY`, ...).
pub const ENV_PREFIXES: [&str; 2] = ["TCMALLOC_", "MIMALLOC_"];

/// Picks [`ENV_VARS`] out of `/proc/PID/environ` (NUL-separated `NAME=value`; the environment the program
/// started with: later setenv calls are not visible there). Invalid UTF-8 is replaced, not rejected.
pub fn parse_environ(raw: &[u8]) -> BTreeMap<String, String> {
    raw.split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            let wanted = ENV_VARS.contains(&k) || ENV_PREFIXES.iter().any(|p| k.starts_with(p));
            wanted.then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Is UCX's memory-hook library (libucm) mapped?
pub fn ucx_hooks_mapped(regions: &[SmapsRegion]) -> bool {
    regions.iter().any(|r| {
        let p = live_path(&r.map.path);
        p.rsplit('/').next().is_some_and(|b| b.starts_with("libucm.so"))
    })
}

/// One-line advice for the patterns that are not (yet) rules: UCX hooks loaded, MALLOC_CONF without jemalloc.
pub fn advice(
    alloc: &Allocator,
    env: &BTreeMap<String, String>,
    arenas: &ArenaSummary,
    total: &ClassTotal,
    ucx_mapped: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    // Many thread arenas (and the other allocator patterns) are rules now: `findings::rule_advice`.
    let _ = (alloc, arenas, total);
    let hook_mode = env.get("UCX_MEM_MMAP_HOOK_MODE").map(String::as_str);
    if ucx_mapped && hook_mode != Some("none") {
        out.push(format!(
            "UCX memory hooks are active (libucm mapped, UCX_MEM_MMAP_HOOK_MODE={}): memory UCX registered stays \
             mapped after free; bound it with UCX_RCACHE_MAX_UNRELEASED (e.g. 1G) or disable the hooks with \
             UCX_MEM_MMAP_HOOK_MODE=none if the transport allows",
            hook_mode.unwrap_or("default")
        ));
    }
    // Each allocator's own settings, set where another allocator runs.
    for (name, vars) in [("jemalloc", "MALLOC_CONF"), ("tcmalloc", "TCMALLOC_"), ("mimalloc", "MIMALLOC_")] {
        let set: Vec<&str> = env
            .keys()
            .filter(|k| k.as_str() == vars || (vars.ends_with('_') && k.starts_with(vars)))
            .map(String::as_str)
            .collect();
        if !set.is_empty() && alloc.name != name {
            let what = if set.len() == 1 { "it has" } else { "they have" };
            out.push(format!("{} set but no {name} library is mapped: {what} no effect here", set.join(", ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::maps::parse_maps_line;

    fn region(line: &str, rss: u64, swap: u64) -> SmapsRegion {
        SmapsRegion { map: parse_maps_line(line).unwrap(), rss, swap, ..SmapsRegion::default() }
    }

    /// A process with two arenas: arena A at 7f0000000000 grew into a second heap at 7f0004000000; arena B at
    /// 7f0008000000; plus a fully grown heap, a pthread stack with its guard, and some non-heaps that look alike.
    fn sample() -> Vec<SmapsRegion> {
        vec![
            region("55d000000000-55d000021000 rw-p 00000000 00:00 0 [heap]", 100, 4),
            region("7f0000000000-7f0000400000 rw-p 00000000 00:00 0", 4000, 0),
            region("7f0000400000-7f0004000000 ---p 00000000 00:00 0", 0, 0),
            region("7f0004000000-7f0004100000 rw-p 00000000 00:00 0", 1000, 24),
            region("7f0004100000-7f0008000000 ---p 00000000 00:00 0", 0, 0),
            region("7f0008000000-7f0008021000 rw-p 00000000 00:00 0", 132, 0),
            region("7f0008021000-7f000c000000 ---p 00000000 00:00 0", 0, 0),
            // Aligned, but the pair does not reach the 64 MiB end: not a heap.
            region("7f0010000000-7f0010001000 rw-p 00000000 00:00 0", 4, 0),
            region("7f0010001000-7f0010002000 ---p 00000000 00:00 0", 0, 0),
            // A full 64 MiB heap (no reserve left), owned by arena B.
            region("7f0014000000-7f0018000000 rw-p 00000000 00:00 0", 65536, 0),
            // Matches the layout, but its first word is no arena pointer.
            region("7f001c000000-7f001c200000 rw-p 00000000 00:00 0", 8, 0),
            region("7f001c200000-7f0020000000 ---p 00000000 00:00 0", 0, 0),
            // pthread stack: guard page then the stack.
            region("7f1000000000-7f1000001000 ---p 00000000 00:00 0", 0, 0),
            region("7f1000001000-7f1000801000 rw-p 00000000 00:00 0", 16, 0),
            region("7f1100000000-7f1100200000 rw-p 00000000 00:00 0", 2048, 0),
            region("7f1200000000-7f1200001000 rw-s 00000000 00:01 5 /dev/zero (deleted)", 4, 0),
            region("7f1200001000-7f1200002000 rw-s 00000000 00:01 6 /memfd:pool (deleted)", 4, 0),
            region("7f1200002000-7f1200003000 rw-s 00000000 00:05 7 /dev/nvidia0", 0, 0),
            region("7f1200003000-7f1200004000 r-xp 00000000 fe:01 8 /usr/lib/x86_64-linux-gnu/libc.so.6", 4, 0),
            region("7f1200004000-7f1200005000 r--p 00000000 fe:01 9 /opt/my lib/libjemalloc.so.2 (deleted)", 4, 0),
            region("7f1200005000-7f1200006000 r--p 00000000 00:00 0 [vvar]", 0, 0),
            region("7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]", 20, 0),
        ]
    }

    #[test]
    fn arenas_from_layout_and_owner_pointers() {
        let r = sample();
        let cands = find_heap_candidates(&r);
        let starts: Vec<u64> = cands.iter().map(|c| c.start).collect();
        assert_eq!(starts, [0x7f0000000000, 0x7f0004000000, 0x7f0008000000, 0x7f0014000000, 0x7f001c000000]);
        let a = 0x7f0000000030;
        let b = 0x7f0008000030;
        let ptrs = [Some(a), Some(a), Some(b), Some(b), Some(0x4141414141414141)];
        let (s, members) = resolve_arenas(&r, &cands, &ptrs);
        assert_eq!(s.heaps, 4);
        assert_eq!(s.arenas, BTreeSet::from([a, b]));
        assert_eq!((s.unread, s.rejected), (0, 1));
        assert_eq!(s.rss_swap, 4000 + 1000 + 24 + 132 + 65536);
        assert_eq!(members, BTreeSet::from([1, 2, 3, 4, 5, 6, 9]));

        // Unreadable memory: counted by layout, arenas unknown.
        let (s, _) = resolve_arenas(&r, &cands, &[None; 5]);
        assert_eq!((s.heaps, s.unread, s.arenas.len()), (5, 5, 0));
    }

    #[test]
    fn classes() {
        let r = sample();
        let cands = find_heap_candidates(&r);
        let a = 0x7f0000000030;
        let (_, members) = resolve_arenas(&r, &cands, &[Some(a), Some(a), Some(a), Some(a), Some(1)]);
        // Every thread's sp known: only regions holding one are stacks.
        let threads = Threads { count: 2, sps: vec![0x7ffd00020000, 0x7f1000800000] };
        let c = classify(&r, &members, &threads);
        use Class::*;
        assert_eq!(
            c,
            [
                Heap, Arena, Arena, Arena, Arena, Arena, Arena, AnonSmall, AnonSmall, Arena, AnonLarge, AnonLarge,
                AnonSmall, Stack, AnonLarge, Shm, Shm, Gpu, FileCode, FileData, Other, Stack
            ]
        );
        // One thread running (sp unknown): the guard pattern stands in.
        let threads = Threads { count: 3, sps: vec![0x7ffd00020000] };
        let c2 = classify(&r, &members, &threads);
        assert_eq!(c2[13], Stack);
        assert_eq!(c2[8], AnonSmall, "a region above an arena-like ---p is not a stack by itself");
        let (by, all) = totals(&r, &c);
        assert_eq!(by[&Heap].rss_swap(), 104);
        assert_eq!(by[&Stack].regions, 2);
        assert_eq!(all.regions, r.len());
        assert_eq!(by.values().map(|t| t.rss).sum::<u64>(), all.rss);
    }

    #[test]
    fn allocator_and_environment() {
        let r = sample();
        let alloc = detect_allocator(&r);
        assert_eq!(alloc.name, "jemalloc");
        assert_eq!(alloc.library.as_deref(), Some("/opt/my lib/libjemalloc.so.2"));
        let glibc = detect_allocator(&r[..19]);
        assert_eq!(glibc.name, "glibc");
        assert_eq!(detect_allocator(&r[..5]).name, "unknown");
        // musl's libc, which is its loader, however a distribution names it.
        let libc = r[..19].iter().find(|x| x.map.path.contains("libc.so")).expect("a libc in the sample");
        for path in ["/usr/lib/x86_64-linux-musl/libc.so", "/lib/ld-musl-x86_64.so.1"] {
            let mut musl = libc.clone();
            musl.map.path = path.to_string();
            let found = detect_allocator(&[r[0].clone(), musl]);
            assert_eq!((found.name, found.library.as_deref()), ("musl", Some(path)));
        }

        let env = parse_environ(
            b"PATH=/bin\0MALLOC_ARENA_MAX=2\0MALLOC_CONF=narenas:1,dirty_decay_ms:0\0X\0\xff=1\0\
            TCMALLOC_RELEASE_RATE=10\0MIMALLOC_PURGE_DELAY=0\0MIMALLOC\0",
        );
        assert_eq!((env["TCMALLOC_RELEASE_RATE"].as_str(), env["MIMALLOC_PURGE_DELAY"].as_str()), ("10", "0"));
        assert_eq!(env.len(), 4);
        assert_eq!(env["MALLOC_CONF"], "narenas:1,dirty_decay_ms:0");
        assert!(parse_environ(b"").is_empty());
    }

    #[test]
    fn advice_patterns() {
        let alloc = Allocator { name: "glibc", library: None, config: Vec::new() };
        let arenas = ArenaSummary { heaps: 12, rss_swap: 800 * 1024, arenas: (1..=12).collect(), ..Default::default() };
        let total = ClassTotal { rss: 1024 * 1024, ..Default::default() };
        let none = BTreeMap::new();
        // Arenas are the glibc-arenas rule's now (rules::tests, findings tests).
        assert!(advice(&alloc, &none, &arenas, &total, false).is_empty());

        let u = advice(&alloc, &none, &ArenaSummary::default(), &total, true);
        assert_eq!(u.len(), 1);
        assert!(u[0].contains("UCX_RCACHE_MAX_UNRELEASED") && u[0].contains("UCX_MEM_MMAP_HOOK_MODE=none"));
        let off = BTreeMap::from([("UCX_MEM_MMAP_HOOK_MODE".to_string(), "none".to_string())]);
        assert!(advice(&alloc, &off, &ArenaSummary::default(), &total, true).is_empty());
    }

    #[test]
    fn task_syscall_sp() {
        assert_eq!(
            parse_task_syscall("230 0x0 0x0 0x7ffc4c9395b0 0x7ffc4c9395f0 0x0 0x0 0x7ffc4c939598 0x7fb518075503\n"),
            Some(0x7ffc4c939598)
        );
        assert_eq!(parse_task_syscall("-1 0x7ffc4c939598 0x7fb518075503"), Some(0x7ffc4c939598));
        assert_eq!(parse_task_syscall("running\n"), None);
        assert_eq!(parse_task_syscall(""), None);
        assert_eq!(parse_task_syscall("1 zz 0x1"), None);
    }
}
