//! glibc malloc's arenas in a live process, read through /proc/PID/mem without stopping it (see
//! `crate::analysis::mstate`, which also says how a torn read is told): what `syscatch mem` shows as its heap, and
//! what the findings compare before and after a trace.

use crate::analysis::memclass::{self, Allocator};
use crate::analysis::mstate::{self, ArenaReading, HeapReading};
use crate::live::memory::Sample;
use crate::model::smaps::SmapsRegion;
use crate::os::{Tid, mem::ProcMem};

/// Reads every arena of glibc malloc in process `pid`; `None` when its allocator is not glibc's.
pub fn read(pid: Tid, mem: Option<&ProcMem>, s: &Sample, alloc: &Allocator) -> Option<HeapReading> {
    if alloc.name != "glibc" {
        return None;
    }
    let mut heap = HeapReading::default();
    let Some(mem) = mem else {
        heap.problem = Some("its memory could not be opened (root or CAP_SYS_PTRACE reads /proc/PID/mem)".into());
        return Some(heap);
    };
    let libc = crate::live::resolve::read_maps(pid)
        .ok()
        .and_then(|maps| crate::live::resolve::find_libc(&maps))
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
        heap.arenas.push(ArenaReading { arena: a, main, heaps, rss_kb, dirty_kb });
    }
    // The main arena first, then the thread arenas by address.
    heap.arenas.sort_by_key(|v| (!v.main, v.arena.addr));
    Some(heap)
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
