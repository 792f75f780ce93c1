//! glibc malloc's arenas read from the target's memory: for each arena, what the allocator holds (`system_mem`)
//! and how much of it is free (the top chunk, the bins, the fastbins), hence how much the program holds, as
//! `mallinfo2()` counts them. Pure: memory comes through a reader, so a test gives it bytes.
//!
//! The layout is glibc's `struct malloc_state` on x86_64 ([`Layout`]), unchanged from 2.27 (which added
//! `have_fastchunks`) to at least 2.41: `mutex` and `flags` (4 bytes each), `have_fastchunks`, `fastbinsY[10]` at
//! 16, `top` at 96, `last_remainder`, `bins[254]` at 112, `binmap[4]`, `next` at 2160, `next_free`,
//! `attached_threads` at 2176, `system_mem` at 2184 (checked against 2.36's debug information with gdb's `ptype
//! /o`). 2.43 has no fastbins (the tcache took their place): `top` at 8, `bins` at 24, `next` at 2072,
//! `attached_threads` at 2088, `system_mem` at 2096 (Debian sid's 2.43 with its libc6-dbg). 2.42 is not known.
//! Since 2.32 a fastbin's and a tcache entry's next pointer is mangled (safe-linking): `(address of the field >>
//! 12) ^ pointer`.
//!
//! The process runs on while it is read: a list can change under the reader. Every pointer must be 16-aligned and
//! every size a multiple of 16 no larger than the arena's `system_mem`, a bin's list must come back to its head,
//! and no arena or list is followed past [`MAX_CHUNKS`] chunks or [`MAX_ARENAS`] arenas: a read that breaks one
//! of these is torn (or the structure corrupt), said so, and never trusted.

/// The glibc versions whose layout this knows, as said in messages.
pub const KNOWN: &str = "2.27 to 2.41, 2.43";

/// Where `struct malloc_state`'s fields are (bytes from its start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `fastbinsY[10]`, if the version has fastbins.
    fastbins: Option<u64>,
    top: u64,
    bins: u64,
    next: u64,
    attached_threads: u64,
    system_mem: u64,
    /// Bytes read (through `max_system_mem`).
    size: usize,
}

const FASTBINS_2_27: Layout =
    Layout { fastbins: Some(16), top: 96, bins: 112, next: 2160, attached_threads: 2176, system_mem: 2184, size: 2200 };
const NO_FASTBINS_2_43: Layout =
    Layout { fastbins: None, top: 8, bins: 24, next: 2072, attached_threads: 2088, system_mem: 2096, size: 2112 };

/// The layout of glibc 2.`minor`'s `malloc_state`, if this syscatch knows it.
pub fn layout(major: u32, minor: u32) -> Option<Layout> {
    match (major, minor) {
        (2, 27..=41) => Some(FASTBINS_2_27),
        (2, 43) => Some(NO_FASTBINS_2_43),
        _ => None,
    }
}

const NFASTBINS: u64 = 10;
const NBINS: u64 = 128;

/// Most chunks followed in one arena's lists.
pub const MAX_CHUNKS: u64 = 1 << 20;
/// Most arenas followed through `next`.
pub const MAX_ARENAS: usize = 1024;

/// One arena as a look at the process found it, with the regions that are its memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArenaReading {
    pub arena: Arena,
    /// The main arena (its memory is `[heap]`, grown by sbrk), or a thread arena (its 64 MiB heaps).
    pub main: bool,
    pub heaps: usize,
    /// Of its regions: Rss and Private_Dirty, kB.
    pub rss_kb: u64,
    pub dirty_kb: u64,
    /// The threads whose `thread_arena` is this arena (read with a trace: their thread pointers; empty when not
    /// read, see [`HeapReading::threads_note`]).
    #[serde(default)]
    pub tids: Vec<i32>,
    /// Bytes in those threads' tcaches (free for them, held for the arena: counted in `in_use`); `None` when not
    /// read.
    #[serde(default)]
    pub tcache: Option<u64>,
}

impl ArenaReading {
    /// Resident bytes it does not hold for the program: free and still in memory (none when the free chunks
    /// were given back).
    pub fn free_resident(&self) -> u64 {
        (self.rss_kb * 1024).saturating_sub(self.arena.in_use()).min(self.arena.free())
    }
}

/// Every arena of glibc malloc in a process, or why they could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeapReading {
    /// The libc's version (major, minor).
    pub glibc: Option<(u32, u32)>,
    /// The main arena first, then the thread arenas by address.
    pub arenas: Vec<ArenaReading>,
    /// Why the list is missing or cut short.
    pub problem: Option<String>,
    /// Why the threads' arenas and tcaches were not read, when they were not.
    #[serde(default)]
    pub threads_note: Option<String>,
    /// Another allocator than glibc's malloc (`jemalloc`, ...): its figures are not read, `problem` says why.
    #[serde(default)]
    pub other: Option<String>,
    /// The names (`comm`) of the threads in the arenas' `tids`, by tid. (A list: a recording's facts are read
    /// through an internally tagged enum, where a map with number keys does not deserialize.)
    #[serde(default)]
    pub thread_names: Vec<(i32, String)>,
}

impl HeapReading {
    /// An arena's threads for a report line: `used by 2 threads: 1234 (python3), 1240 (worker); their tcaches hold
    /// 1.2 KiB`; `None` when they were not read.
    pub fn threads_line(&self, a: &ArenaReading) -> Option<String> {
        if a.tids.is_empty() && a.tcache.is_none() {
            return None;
        }
        const SHOWN: usize = 8;
        let names: Vec<String> = a
            .tids
            .iter()
            .take(SHOWN)
            .map(|t| match self.thread_names.iter().find(|(n, _)| n == t).map(|(_, name)| name) {
                Some(n) => format!("{t} ({n})"),
                None => t.to_string(),
            })
            .collect();
        let more = match a.tids.len().saturating_sub(SHOWN) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let who = match a.tids.len() {
            0 => "used by no thread now".to_string(),
            1 => format!("used by 1 thread: {}", names.join(", ")),
            n => format!("used by {n} threads: {}{more}", names.join(", ")),
        };
        let cache = a.tcache.map(|b| format!("; their tcaches hold {:.1} KiB", b as f64 / 1024.0)).unwrap_or_default();
        Some(format!("{who}{cache}"))
    }
}

/// Where libc's static TLS block lies below the thread pointer (its `l_tls_offset`, x86_64's TLS variant II: a
/// variable of libc's block at offset `v` is at `fs_base - block + v`), from libc's own R_X86_64_TPOFF64 GOT slots as
/// ld.so filled them: each holds `v - block` for its variable `v` (the relocation's symbol value plus addend).
/// `slots`: (file address of the slot, v); `read`: a slot's value in the process. `None` unless every slot read
/// gives the same block (up to 32 looked at).
pub fn tls_block(slots: &[(u64, u64)], read: &mut dyn FnMut(u64) -> Option<u64>) -> Option<u64> {
    let mut block = None;
    for &(at, v) in slots.iter().take(32) {
        let b = v.wrapping_sub(read(at)?);
        if block.is_some_and(|x| x != b) || b == 0 || b > 1 << 30 {
            return None;
        }
        block = Some(b);
    }
    block
}

/// Most threads followed through glibc's thread lists.
pub const MAX_THREADS: usize = 65536;

/// Every thread glibc knows, as (tid, thread pointer), without stopping any: the lists `_dl_stack_used` and
/// `_dl_stack_user` of ld.so's `_rtld_global` (`heads`: their addresses) link each thread's `struct pthread`
/// through its `list` member (at `list_off`); that struct starts at the thread's thread pointer (x86_64: the TCB),
/// and holds its tid at `tid_off`. The offsets are what glibc publishes for libthread_db (`_thread_db_*`). A list
/// that does not come back to its head within [`MAX_THREADS`], or a pointer that cannot be read, ends the walk
/// with what was found, as does an element seen before (`None` when nothing could be read at all).
pub fn thread_pointers(read: &mut Read, heads: &[u64], list_off: u64, tid_off: u64) -> Option<Vec<(i32, u64)>> {
    let mut word = |addr: u64| {
        let mut b = [0u8; 8];
        read(addr, &mut b).then(|| u64::from_le_bytes(b))
    };
    let mut out = Vec::new();
    let mut any = false;
    let mut seen = std::collections::HashSet::new();
    for &head in heads {
        let mut at = word(head)?;
        any = true;
        for _ in 0..MAX_THREADS {
            // A loop that does not pass its head again (torn, or corrupt) ends where it repeats.
            if at == head || at == 0 || !seen.insert(at) {
                break;
            }
            let tcb = at.wrapping_sub(list_off);
            let Some(tid) = word(tcb.wrapping_add(tid_off)) else { break };
            // A thread not started yet, or exited and cached for reuse, has tid 0 or less.
            let tid = tid as u32 as i32;
            if tid > 0 {
                out.push((tid, tcb));
            }
            let Some(next) = word(at) else { break };
            at = next;
        }
    }
    any.then_some(out)
}

/// The bytes a glibc 2.30-2.41 tcache holds (`struct tcache_perthread_struct`: 64 `uint16_t` counts, then 64 entry
/// pointers): each bin `i` holds chunks of `32 + 16 i` bytes. `None` for a count past glibc's limit (65535 is the
/// tunable's maximum; more than 4096 in one bin is taken for a torn or foreign read).
pub fn tcache_bytes(counts: &[u8; 128]) -> Option<u64> {
    let mut bytes = 0;
    for (i, c) in counts.chunks_exact(2).enumerate() {
        let n = u16::from_le_bytes([c[0], c[1]]) as u64;
        if n > 4096 {
            return None;
        }
        bytes += n * (32 + 16 * i as u64);
    }
    Some(bytes)
}

impl HeapReading {
    /// `addr`'s arena.
    pub fn arena(&self, addr: u64) -> Option<&ArenaReading> {
        self.arenas.iter().find(|a| a.arena.addr == addr)
    }
}

/// Reads `buf.len()` bytes at an address of the target; false when it cannot.
pub type Read<'a> = dyn FnMut(u64, &mut [u8]) -> bool + 'a;

/// One arena as read.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Arena {
    /// Its `malloc_state`.
    pub addr: u64,
    /// Bytes the allocator got from the system for it (`system_mem`).
    pub system_mem: u64,
    /// Free bytes: the top chunk, the bins (unsorted, small, large), the fastbins.
    pub top: u64,
    pub bins: u64,
    pub fastbins: u64,
    /// Free chunks counted (the top chunk aside).
    pub chunks: u64,
    /// The next arena in glibc's circular list.
    pub next: u64,
    /// Threads attached to it (`attached_threads`: 0 once they all exited and it waits on the free list).
    #[serde(default)]
    pub threads: u64,
}

impl Arena {
    pub fn free(&self) -> u64 {
        self.top + self.bins + self.fastbins
    }

    /// What the program holds (tcache entries count as held, as in `mallinfo2`).
    pub fn in_use(&self) -> u64 {
        self.system_mem.saturating_sub(self.free())
    }
}

fn word(read: &mut Read, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read(addr, &mut b).then(|| u64::from_le_bytes(b))
}

/// A chunk's size (the flag bits cleared), if it is one a chunk of an arena holding `limit` bytes can have.
fn chunk_size(read: &mut Read, chunk: u64, limit: u64) -> Result<u64, String> {
    let raw = word(read, chunk.wrapping_add(8)).ok_or_else(|| format!("chunk {chunk:#x} could not be read"))?;
    let size = raw & !7;
    if size < 32 || !size.is_multiple_of(16) || size > limit {
        return Err(format!("chunk {chunk:#x} has size {raw:#x}"));
    }
    Ok(size)
}

/// Reads the arena at `addr`, laid out as `l`: a torn or corrupt read is an error saying where it broke.
pub fn read_arena(read: &mut Read, l: &Layout, addr: u64) -> Result<Arena, String> {
    let mut state = vec![0u8; l.size];
    if !addr.is_multiple_of(8) || !read(addr, &mut state) {
        return Err(format!("its malloc_state at {addr:#x} could not be read"));
    }
    let at = |off: u64| u64::from_le_bytes(state[off as usize..off as usize + 8].try_into().expect("8 bytes"));
    let mut a = Arena {
        addr,
        system_mem: at(l.system_mem),
        next: at(l.next),
        threads: at(l.attached_threads),
        ..Arena::default()
    };
    let limit = a.system_mem;
    let top = at(l.top);
    if top != 0 {
        // The top chunk may be as small as MINSIZE or, in a fresh arena, hold everything.
        let raw = word(read, top.wrapping_add(8)).ok_or_else(|| format!("the top chunk {top:#x} could not be read"))?;
        a.top = raw & !7;
        if a.top > limit || !top.is_multiple_of(16) {
            return Err(format!("the top chunk {top:#x} has size {raw:#x}"));
        }
    }
    let mut budget = MAX_CHUNKS;
    let mut spend = |what: &str| -> Result<(), String> {
        budget = budget.checked_sub(1).ok_or_else(|| format!("more than {MAX_CHUNKS} free chunks in {what}"))?;
        Ok(())
    };
    for i in 0..l.fastbins.map_or(0, |_| NFASTBINS) {
        let mut p = at(l.fastbins.unwrap_or(0) + i * 8);
        while p != 0 {
            spend("the fastbins")?;
            if !p.is_multiple_of(16) {
                return Err(format!("fastbin {i} leads to {p:#x}"));
            }
            a.fastbins += chunk_size(read, p, limit)?;
            a.chunks += 1;
            let fd = p + 16;
            p = (fd >> 12) ^ word(read, fd).ok_or_else(|| format!("fastbin chunk {p:#x} could not be read"))?;
        }
    }
    // Bin i's head is a fake chunk whose fd and bk are bins[2(i-1)] and bins[2(i-1)+1].
    for i in 1..NBINS {
        let head = (addr + l.bins + (i - 1) * 16).wrapping_sub(16);
        let mut p = at(l.bins + (i - 1) * 16);
        while p != head {
            spend("the bins")?;
            if !p.is_multiple_of(16) || p == 0 {
                return Err(format!("bin {i} leads to {p:#x}"));
            }
            a.bins += chunk_size(read, p, limit)?;
            a.chunks += 1;
            p = word(read, p + 16).ok_or_else(|| format!("bin chunk {p:#x} could not be read"))?;
        }
    }
    if a.free() > limit {
        return Err(format!("{} bytes free of {limit}", a.free()));
    }
    Ok(a)
}

/// Every arena of the circular list through `start` (any arena), in list order from it. An arena that cannot
/// be read ends the list there, with why.
pub fn read_arenas(read: &mut Read, l: &Layout, start: u64) -> (Vec<Arena>, Option<String>) {
    let mut out: Vec<Arena> = Vec::new();
    let mut at = start;
    loop {
        if out.len() >= MAX_ARENAS {
            return (out, Some(format!("more than {MAX_ARENAS} arenas")));
        }
        match read_arena(read, l, at) {
            Ok(a) => {
                at = a.next;
                out.push(a);
                if at == start {
                    return (out, None);
                }
                if out.iter().any(|a| a.addr == at) {
                    return (out, Some(format!("the list of arenas loops at {at:#x} without coming back")));
                }
            }
            Err(why) => return (out, Some(format!("arena {at:#x}: {why}"))),
        }
    }
}

/// The glibc version a libc's file names (`... release version 2.36.`), as (major, minor).
pub fn glibc_version(libc: &[u8]) -> Option<(u32, u32)> {
    const MARK: &[u8] = b"release version ";
    let at = libc.windows(MARK.len()).position(|w| w == MARK)? + MARK.len();
    let text =
        std::str::from_utf8(libc.get(at..(at + 12).min(libc.len()))?.split(|&b| b == b'\n' || b == 0).next()?).ok()?;
    let mut parts = text.trim_end_matches('.').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibcs_thread_lists_give_each_threads_tid_and_thread_pointer() {
        // Two struct pthreads at 0x1000 and 0x2000 (list member at +0x10, tid at +0x20) on the list at 0x100;
        // an empty list at 0x200; one cached thread (tid 0) skipped.
        let mut words = std::collections::HashMap::new();
        words.insert(0x100u64, 0x1010u64);
        words.insert(0x1010, 0x2010);
        words.insert(0x2010, 0x3010);
        words.insert(0x3010, 0x100);
        words.insert(0x1020, 41);
        words.insert(0x2020, 42);
        words.insert(0x3020, 0);
        words.insert(0x200, 0x200);
        let mut read = |addr: u64, buf: &mut [u8]| match words.get(&addr) {
            Some(w) => {
                buf.copy_from_slice(&w.to_le_bytes());
                true
            }
            None => false,
        };
        let got = thread_pointers(&mut read, &[0x100, 0x200], 0x10, 0x20);
        assert_eq!(got, Some(vec![(41, 0x1000), (42, 0x2000)]));
        // A loop that never comes back to its head ends, bounded.
        words.insert(0x3010, 0x1010);
        let mut read = |addr: u64, buf: &mut [u8]| match words.get(&addr) {
            Some(w) => {
                buf.copy_from_slice(&w.to_le_bytes());
                true
            }
            None => false,
        };
        let got = thread_pointers(&mut read, &[0x100], 0x10, 0x20);
        assert_eq!(got, Some(vec![(41, 0x1000), (42, 0x2000)]));
        assert_eq!(thread_pointers(&mut |_, _| false, &[0x100], 0x10, 0x20), None);
    }

    #[test]
    fn libcs_tls_block_is_where_every_slot_agrees() {
        // Slots for variables at 0x48 and 0x58 of a block 0x90 below the thread pointer hold -0x48 and -0x38.
        let slots = [(0x1000, 0x48), (0x1008, 0x58)];
        let mut mem =
            |at: u64| Some(if at == 0x1000 { 0x48u64.wrapping_sub(0x90) } else { 0x58u64.wrapping_sub(0x90) });
        assert_eq!(tls_block(&slots, &mut mem), Some(0x90));
        // A slot that disagrees (not filled by ld.so as read, or another module's): nothing is trusted.
        let mut torn = |at: u64| Some(if at == 0x1000 { 0x48u64.wrapping_sub(0x90) } else { 0 });
        assert_eq!(tls_block(&slots, &mut torn), None);
        assert_eq!(tls_block(&slots, &mut |_| None), None);
        assert_eq!(tls_block(&[], &mut mem), None);
    }

    #[test]
    fn a_tcache_holds_its_counts_times_its_bins_sizes() {
        let mut counts = [0u8; 128];
        counts[0] = 7; // 7 chunks of 32 bytes
        counts[2 * 3] = 2; // 2 of 80
        assert_eq!(tcache_bytes(&counts), Some(7 * 32 + 2 * 80));
        counts[2 * 63 + 1] = 0x20; // 8192 in the last bin: not a tcache
        assert_eq!(tcache_bytes(&counts), None);
    }
    use std::collections::BTreeMap;

    /// A sparse memory of words.
    #[derive(Default)]
    struct Mem(BTreeMap<u64, u64>);

    impl Mem {
        fn set(&mut self, addr: u64, v: u64) {
            self.0.insert(addr, v);
        }
        fn reader(&self) -> impl FnMut(u64, &mut [u8]) -> bool + '_ {
            move |addr, buf| {
                for (i, chunk) in buf.chunks_mut(8).enumerate() {
                    let v = self.0.get(&(addr + i as u64 * 8)).copied().unwrap_or(0);
                    chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
                }
                true
            }
        }
    }

    /// An arena at `a` holding `system` bytes, with empty bins (each head pointing at itself).
    fn arena(m: &mut Mem, l: &Layout, a: u64, system: u64, next: u64) {
        for i in 1..NBINS {
            let head = a + l.bins + (i - 1) * 16 - 16;
            m.set(a + l.bins + (i - 1) * 16, head);
            m.set(a + l.bins + (i - 1) * 16 + 8, head);
        }
        m.set(a + l.system_mem, system);
        m.set(a + l.next, next);
    }

    #[test]
    fn counts_top_bins_and_mangled_fastbins() {
        for l in [FASTBINS_2_27, NO_FASTBINS_2_43] {
            counts_top_bins_and_mangled_fastbins_of(&l);
        }
    }

    fn counts_top_bins_and_mangled_fastbins_of(l: &Layout) {
        let mut m = Mem::default();
        let a = 0x7000_0000_0000u64;
        arena(&mut m, l, a, 0x100000, a);
        let top = 0x5555_0000_9000u64;
        m.set(a + l.top, top);
        m.set(top + 8, 0x20000 | 1);
        // Unsorted bin (1): two chunks.
        let (c1, c2) = (0x5555_0000_1000u64, 0x5555_0000_3000u64);
        let head = a + l.bins - 16;
        m.set(a + l.bins, c1);
        m.set(c1 + 8, 0x400 | 1);
        m.set(c1 + 16, c2);
        m.set(c2 + 8, 0x1000);
        m.set(c2 + 16, head);
        // Fastbin 1: two chunks, their links mangled (2.43 has none).
        let (f1, f2) = (0x5555_0000_5000u64, 0x5555_0000_5020u64);
        let fast = match l.fastbins {
            Some(f) => {
                m.set(a + f + 8, f1);
                m.set(f1 + 8, 0x20 | 1);
                m.set(f1 + 16, ((f1 + 16) >> 12) ^ f2);
                m.set(f2 + 8, 0x20 | 1);
                m.set(f2 + 16, (f2 + 16) >> 12);
                0x40
            }
            None => 0,
        };
        let got = read_arena(&mut m.reader(), l, a).unwrap();
        assert_eq!((got.top, got.bins, got.fastbins, got.chunks), (0x20000, 0x1400, fast, 2 + fast / 0x20));
        assert_eq!(got.in_use(), 0x100000 - 0x20000 - 0x1400 - fast);
        let (all, why) = read_arenas(&mut m.reader(), l, a);
        assert_eq!((all.len(), why), (1, None));
    }

    /// A bin that loops, a size past the arena, an unaligned link: each a torn read, said where, never followed.
    #[test]
    fn a_torn_or_hostile_arena_is_refused() {
        let mut m = Mem::default();
        let a = 0x7000_0000_0000u64;
        let l = &FASTBINS_2_27;
        arena(&mut m, l, a, 0x10000, a);
        let c = 0x5555_0000_1000u64;
        m.set(a + l.bins, c);
        m.set(c + 8, 0x100);
        m.set(c + 16, c);
        assert!(read_arena(&mut m.reader(), l, a).unwrap_err().contains("more than"));
        m.set(c + 8, 0x20000);
        assert!(read_arena(&mut m.reader(), l, a).unwrap_err().contains("has size"));
        m.set(c + 8, 0x100);
        m.set(c + 16, 0x5555_0000_1008);
        assert!(read_arena(&mut m.reader(), l, a).unwrap_err().contains("leads to"));
        // Two arenas whose list never comes back to the first.
        let b = 0x7100_0000_0000u64;
        arena(&mut m, l, a, 0x10000, b);
        arena(&mut m, l, b, 0x10000, b);
        let (all, why) = read_arenas(&mut m.reader(), l, a);
        assert_eq!(all.len(), 2);
        assert!(why.unwrap().contains("loops"));
    }

    #[test]
    fn reads_the_version_a_libc_names() {
        let text = b"xx GNU C Library (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36.\nCopyright";
        assert_eq!(glibc_version(text), Some((2, 36)));
        assert_eq!(glibc_version(b"release version 2.43.9000\n"), Some((2, 43)));
        assert_eq!(glibc_version(b"nothing here"), None);
        assert_eq!(layout(2, 36), Some(FASTBINS_2_27));
        assert_eq!(layout(2, 43), Some(NO_FASTBINS_2_43));
        assert_eq!((layout(2, 42), layout(2, 26), layout(2, 44)), (None, None, None));
    }
}
