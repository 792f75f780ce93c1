//! glibc malloc's arenas in a live process, read through /proc/PID/mem without stopping it (see
//! `crate::analysis::mstate`, which also says how a torn read is told): what `syscatch mem` shows as its heap, and
//! what the findings compare before and after a trace.

use crate::analysis::memclass::{self, Allocator};
use crate::analysis::mstate::{self, ArenaReading, HeapReading};
use crate::live::memory::Sample;
use crate::model::smaps::SmapsRegion;
use crate::os::{Tid, mem::ProcMem};

/// Reads every arena of glibc malloc in process `pid`; `None` when its allocator is not glibc's. `threads`: each
/// thread's thread pointer (fs base), known to a trace, or empty to find them in glibc's own lists: which thread
/// uses which arena, and their tcaches, are read too (see [`name_threads`]); `None`: not read (a reading nobody
/// shows them of, such as the one before a trace).
pub fn read(
    pid: Tid,
    mem: Option<&ProcMem>,
    s: &Sample,
    alloc: &Allocator,
    threads: Option<&[(Tid, u64)]>,
) -> Option<HeapReading> {
    if alloc.name != "glibc" {
        return other_allocator(alloc.name);
    }
    let mut heap = HeapReading::default();
    let Some(mem) = mem else {
        heap.problem = Some("its memory could not be opened (root or CAP_SYS_PTRACE reads /proc/PID/mem)".into());
        return Some(heap);
    };
    let maps = crate::live::resolve::read_maps(pid).unwrap_or_default();
    let libc = crate::live::resolve::find_libc(&maps)
        .and_then(|map| crate::live::resolve::read_module(pid, &map, Some(mem)).ok());
    let Some(libc) = libc else {
        heap.problem = Some("its libc could not be read".into());
        return Some(heap);
    };
    heap.glibc = mstate::glibc_version(&libc.data);
    let layout = match heap.glibc {
        Some((major, minor)) => match mstate::layout(major, minor) {
            Some(l) => l,
            None => {
                heap.problem = Some(format!(
                    "glibc {major}.{minor}: its malloc_state layout is not one this syscatch knows ({})",
                    mstate::KNOWN
                ));
                return Some(heap);
            }
        },
        None => {
            heap.problem = Some(format!("{}: no glibc version found in it", libc.map.path));
            return Some(heap);
        }
    };
    // Any arena leads to all: a thread arena's from its heap's first word, else the main arena's symbol.
    let cands = memclass::find_heap_candidates(&s.regions);
    let owners: Vec<Option<u64>> = cands.iter().map(|c| mem.read_u64(c.start).ok()).collect();
    let start = s.arenas.arenas.iter().next().copied().or_else(|| main_arena(&libc));
    let Some(start) = start else {
        heap.problem = Some(
            "no thread arena, and the main arena's symbol is in no symbol table here (install libc's debug \
             symbols: libc6-dbg)"
                .into(),
        );
        return Some(heap);
    };
    let mut read = |addr: u64, buf: &mut [u8]| mem.read_exact(addr, buf).is_ok();
    // A list changed under the reader is read again, twice at most.
    let (mut arenas, mut problem) = mstate::read_arenas(&mut read, &layout, start);
    for _ in 0..2 {
        if problem.is_none() {
            break;
        }
        (arenas, problem) = mstate::read_arenas(&mut read, &layout, start);
    }
    heap.problem = problem.map(|p| format!("read while it changed, or corrupt: {p}"));
    let inside_a_heap =
        |addr: u64| cands.iter().any(|c| s.regions[c.rw].map.start <= addr && addr < s.regions[c.rw].map.end);
    for a in arenas {
        let main = !inside_a_heap(a.addr);
        let mine: Vec<&SmapsRegion> = if main {
            s.regions.iter().filter(|r| r.map.path == "[heap]").collect()
        } else {
            let idx = cands.iter().zip(&owners).filter(|(_, o)| **o == Some(a.addr));
            idx.flat_map(|(c, _)| std::iter::once(c.rw).chain(c.reserve)).filter_map(|i| s.regions.get(i)).collect()
        };
        let heaps = if main { mine.len() } else { mine.iter().filter(|r| r.map.perms.starts_with("rw")).count() };
        let rss_kb = mine.iter().map(|r| r.rss).sum();
        let dirty_kb = mine.iter().map(|r| r.private_dirty).sum();
        heap.arenas.push(ArenaReading { arena: a, main, heaps, rss_kb, dirty_kb, tids: Vec::new(), tcache: None });
    }
    // The main arena first, then the thread arenas by address.
    heap.arenas.sort_by_key(|v| (!v.main, v.arena.addr));
    if let Some(threads) = threads {
        heap.threads_note = read_threads(pid, &maps, &libc, mem, threads, &mut heap).err();
    }
    Some(heap)
}

/// The arenas' threads and tcaches: with the thread pointers a trace saw, else glibc's own lists of its threads (no
/// stop). Both need libc's debug symbols, parsed once here. Err: why they were not read.
fn read_threads(
    pid: Tid,
    maps: &[crate::model::maps::Mapping],
    libc: &crate::model::modules::Module,
    mem: &ProcMem,
    threads: &[(Tid, u64)],
    heap: &mut HeapReading,
) -> Result<(), String> {
    let read = |p: &str| crate::os::filemap::read_file(p).ok();
    let (_, debug) = crate::analysis::symbolize::find_debug_file("", &libc.map.path, &libc.data, read)
        .ok_or("libc's debug symbols are not installed (libc6-dbg): its thread_arena and tcache cannot be found")?;
    let dfile = object::File::parse(&*debug).map_err(|e| format!("libc's debug file: {e}"))?;
    let listed;
    let threads = match threads.is_empty() {
        true => {
            listed = glibc_threads(pid, maps, libc, &dfile, mem)?;
            &listed[..]
        }
        false => threads,
    };
    name_threads(libc, &dfile, mem, threads, heap)
}

/// What is not read of another allocator, said rather than left out (`None`: nothing to say: musl's is said by the
/// arenas' line, an unknown one has nothing known).
fn other_allocator(name: &str) -> Option<HeapReading> {
    let why = match name {
        "jemalloc" => {
            "what its arenas hold and how much is in use are its `stats.*`, read through mallctl(), a call inside the \
             process (syscatch does not call into it); its extents are among the anonymous regions above, and \
             --malloc samples what its malloc hands out"
        }
        "tcmalloc" => {
            "its figures are MallocExtension's, a call inside the process (syscatch does not call into it); its spans \
             are among the anonymous regions above, and --malloc samples what its malloc hands out"
        }
        "mimalloc" => {
            "its figures are mi_stats', a call inside the process (syscatch does not call into it); its segments are \
             among the anonymous regions above, and --malloc samples what its malloc hands out"
        }
        _ => return None,
    };
    Some(HeapReading { other: Some(name.to_string()), problem: Some(why.to_string()), ..HeapReading::default() })
}

/// Every live thread of the process with its thread pointer, from glibc's lists of its threads (see
/// [`mstate::thread_pointers`]): the lists' heads in ld.so's `_rtld_global` and the offsets glibc publishes for
/// libthread_db (`_thread_db_*` descriptors: three 32-bit words, the field's offset the third), read from libc's
/// debug symbols and the target's memory. Only tids that are threads of the process now are kept.
fn glibc_threads(
    pid: Tid,
    maps: &[crate::model::maps::Mapping],
    libc: &crate::model::modules::Module,
    dfile: &object::File<'_>,
    mem: &ProcMem,
) -> Result<Vec<(Tid, u64)>, String> {
    use object::{Object, ObjectSymbol};
    let ld = crate::model::modules::group_modules(maps)
        .into_iter()
        .find(|m| m.path.rsplit('/').next().is_some_and(|n| n.starts_with("ld-linux")))
        .ok_or("no ld-linux mapped (a static program: its threads cannot be listed)")?;
    let ld = crate::live::resolve::read_module(pid, &ld, Some(mem)).map_err(|e| e.to_string())?;
    let (rtld, _) = ld.find_symbol("_rtld_global").ok_or("ld.so has no _rtld_global")?;
    let field = |name: &str| -> Option<u64> {
        let sym = dfile.symbols().find(|s| s.name() == Ok(name))?;
        let mut d = [0u8; 12];
        mem.read_exact(libc.bias.wrapping_add(sym.address()), &mut d).ok()?;
        Some(u32::from_le_bytes([d[8], d[9], d[10], d[11]]) as u64)
    };
    let names = [
        "_thread_db_rtld_global__dl_stack_used",
        "_thread_db_rtld_global__dl_stack_user",
        "_thread_db_pthread_list",
        "_thread_db_pthread_tid",
    ];
    let got: Vec<Option<u64>> = names.iter().map(|n| field(n)).collect();
    let [Some(used), Some(user), Some(list), Some(tid)] = got[..] else {
        return Err("libc's debug symbols lack glibc's thread descriptors (_thread_db_*)".into());
    };
    let mut read = |addr: u64, buf: &mut [u8]| mem.read_exact(addr, buf).is_ok();
    let heads = [rtld.wrapping_add(used), rtld.wrapping_add(user)];
    let all = mstate::thread_pointers(&mut read, &heads, list, tid).ok_or("glibc's thread lists could not be read")?;
    let live: std::collections::HashSet<Tid> =
        crate::os::procfs::list_tasks(pid).map_err(|e| e.to_string())?.into_iter().collect();
    Ok(all.into_iter().filter(|(t, _)| live.contains(t)).collect())
}

/// Which thread uses which arena, and the bytes in each thread's tcache: libc's TLS variables `thread_arena` and
/// `tcache` of each thread, at `fs_base - block + v` (`v`: the variable's offset in libc's TLS block, from libc's
/// debug symbols; `block`: where that block lies, from libc's TPOFF64 GOT slots, see [`mstate::tls_block`]). A
/// thread whose arena pointer is not an arena read here (none yet: it never called malloc) is left out; tcaches
/// are read on glibc 2.30-2.41 only (2.42 changed their layout). Err: why nothing could be read.
fn name_threads(
    libc: &crate::model::modules::Module,
    dfile: &object::File<'_>,
    mem: &ProcMem,
    threads: &[(Tid, u64)],
    heap: &mut HeapReading,
) -> Result<(), String> {
    use object::{Object, ObjectSymbol, ObjectSymbolTable};
    let file = object::File::parse(&*libc.data).map_err(|e| format!("libc: {e}"))?;
    let mut slots = Vec::new();
    for (at, r) in file.dynamic_relocations().into_iter().flatten() {
        // R_X86_64_TPOFF64
        if r.flags() != (object::RelocationFlags::Elf { r_type: object::elf::R_X86_64_TPOFF64 }) {
            continue;
        }
        let v: u64 = match r.target() {
            // A dynamic relocation's symbol is of the dynamic symbol table.
            object::RelocationTarget::Symbol(i) => {
                let dynsym = file.dynamic_symbol_table();
                dynsym.and_then(|t| t.symbol_by_index(i).ok()).map_or(0, |s| s.address())
            }
            _ => 0,
        };
        slots.push((at, v.wrapping_add(r.addend() as u64)));
    }
    let block = mstate::tls_block(&slots, &mut |at| mem.read_u64(libc.bias.wrapping_add(at)).ok())
        .ok_or("libc's TLS block was not found (no TPOFF64 slot, or slots that disagree)")?;
    let tls = |name: &str| {
        dfile.symbols().find(|s| s.name() == Ok(name) && s.kind() == object::SymbolKind::Tls).map(|s| s.address())
    };
    let arena_at = tls("thread_arena").ok_or("libc's debug symbols have no thread_arena")?;
    let tcache_at = tls("tcache").filter(|_| heap.glibc.is_some_and(|v| ((2, 30)..=(2, 41)).contains(&v)));
    for a in &mut heap.arenas {
        a.tids.clear();
        a.tcache = tcache_at.map(|_| 0);
    }
    for &(tid, fs) in threads {
        let var = |v: u64| fs.wrapping_sub(block).wrapping_add(v);
        let Ok(arena) = mem.read_u64(var(arena_at)) else { continue };
        let Some(a) = heap.arenas.iter_mut().find(|a| a.arena.addr == arena && arena != 0) else { continue };
        a.tids.push(tid);
        let cache = tcache_at.and_then(|v| mem.read_u64(var(v)).ok()).filter(|&p| p != 0 && p & 0xf == 0);
        let mut counts = [0u8; 128];
        let bytes = cache.and_then(|p| mem.read_exact(p, &mut counts).ok()).and_then(|_| mstate::tcache_bytes(&counts));
        if let (Some(t), Some(b)) = (a.tcache.as_mut(), bytes) {
            *t += b;
        }
    }
    for a in &mut heap.arenas {
        a.tids.sort_unstable();
        for &t in &a.tids {
            let comm = std::fs::read_to_string(format!("/proc/{t}/comm")).unwrap_or_default();
            heap.thread_names.push((t, comm.trim().to_string()));
        }
    }
    Ok(())
}

/// The main arena's address from libc's symbols, or its debug file's.
fn main_arena(libc: &crate::model::modules::Module) -> Option<u64> {
    if let Some((addr, _)) = libc.find_symbol("main_arena") {
        return Some(addr);
    }
    let read = |p: &str| crate::os::filemap::read_file(p).ok();
    let (_, debug) = crate::analysis::symbolize::find_debug_file("", &libc.map.path, &libc.data, read)?;
    let file = object::File::parse(&*debug).ok()?;
    use object::{Object, ObjectSymbol};
    let sym = file.symbols().find(|s| s.name() == Ok("main_arena") && s.address() != 0)?;
    Some(libc.bias.wrapping_add(sym.address()))
}
