//! The answer the user came for: which stack made the memory that keeps growing, and how much of it is still
//! mapped. Fed by the analysis thread (events with their unwound stacks) and by smaps samples; renders the leak
//! report as text, JSON Lines, collapsed stacks and a flame graph. Pure: smaps samples come in as values.

use crate::analysis::correlate::{AddressSpace, Growing, StackId, StackStats};
use crate::model::event::Event;
use crate::model::smaps::Span;
use crate::model::stack::{Frame, Stack};
use std::collections::HashMap;

/// The mapping family traced together with `--leaks`.
pub const LEAK_SYSCALLS: [&str; 3] = ["mmap", "munmap", "mremap"];

/// Stacks seen so far, interned by their frame addresses.
#[derive(Default)]
struct Stacks {
    ids: HashMap<Vec<u64>, StackId>,
    stacks: Vec<Stack>,
}

impl Stacks {
    fn intern(&mut self, stack: Option<&Stack>) -> StackId {
        let key: Vec<u64> = stack.map(|s| s.frames.iter().map(frame_key).collect()).unwrap_or_default();
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = StackId(self.stacks.len() as u32);
        self.stacks.push(stack.cloned().unwrap_or_default());
        self.ids.insert(key, id);
        id
    }

    fn get(&self, id: StackId) -> Option<&Stack> {
        self.stacks.get(id.0 as usize)
    }
}

/// A call seen at `syscall()`: when it started, and what it was.
#[derive(Clone, Copy, PartialEq)]
struct RawCall {
    time: f64,
    nr: u64,
    addr: u64,
    len: u64,
    ret: Option<u64>,
}

/// The syscall an event's call makes: its number through `syscall()`, or the one a watched libc function
/// (`libc.so.6:mmap`) makes; `None` for another function.
fn call_syscall(ev: &Event) -> Option<u64> {
    match ev.func.as_deref() {
        None => Some(ev.nr),
        Some(label) => crate::model::watch::parse_label_syscall(label),
    }
}

/// Recognises one call seen twice: at a watched libc function (reported at its return) whose `syscall()` was
/// seen on the same thread just before, with the same result (a hook reached from the function, making the real
/// call through `syscall()`).
#[derive(Default)]
pub struct SeenTwice {
    /// Per thread, the last call seen through `syscall()`.
    last_raw: HashMap<crate::model::Tid, RawCall>,
}

impl SeenTwice {
    /// Whether `ev` is a function's call already seen as the `syscall()` inside it (to be counted once). Every
    /// event of the mapping family goes through here, in order.
    pub fn is_repeat(&mut self, ev: &Event) -> bool {
        let Some(nr) = call_syscall(ev) else { return false };
        let call = RawCall { time: ev.time, nr, addr: ev.args[0], len: ev.args[1], ret: ev.ret };
        if ev.func.is_none() {
            self.last_raw.insert(ev.tid, call);
            return false;
        }
        let Some(raw) = self.last_raw.remove(&ev.tid) else { return false };
        // Events carry the time of entry: the raw call started inside the function's call. (The address argument
        // of mmap is a hint a hook may change; the length and the result are the call's.)
        let same_args = if nr == crate::model::consts::SYS_MMAP {
            raw.len == call.len
        } else {
            (raw.addr, raw.len) == (call.addr, call.len)
        };
        raw.time >= call.time && raw.nr == nr && raw.ret == call.ret && same_args
    }
}

/// Everything needed for the leak report, built while tracing.
#[derive(Default)]
pub struct LeakTracker {
    model: AddressSpace,
    stacks: Stacks,
    first: Option<Vec<Span>>,
    last: Vec<Span>,
    /// Calls seen twice (at a libc function and at the `syscall()` inside it), counted once.
    seen_twice: SeenTwice,
    /// How many calls [`Self::seen_twice`] counted once.
    pub nested: u64,
    /// Resident bytes of each still-mapped anonymous range (start, end, stack, bytes), from pagemap at the end.
    resident: Vec<(u64, u64, StackId, u64)>,
}

/// Pagemap bits (Documentation/admin-guide/mm/pagemap.rst).
const PM_PRESENT: u64 = 1 << 63;
const PM_SWAPPED: u64 = 1 << 62;
const PM_EXCLUSIVE: u64 = 1 << 56;

/// Most pages whose pagemap entries are read at the end (16 GiB of still-mapped memory).
const RESIDENCY_PAGES: u64 = 4 << 20;

/// Bytes that count as the range's own memory: pages in swap, or present and mapped by this process alone (the
/// shared zero page that a read fault maps is present but not exclusive: it costs nothing).
pub fn parse_resident(entries: &[u64]) -> u64 {
    let pages = entries.iter().filter(|&&e| e & PM_SWAPPED != 0 || (e & PM_PRESENT != 0 && e & PM_EXCLUSIVE != 0));
    pages.count() as u64 * 4096
}

impl LeakTracker {
    pub fn new() -> LeakTracker {
        LeakTracker::default()
    }

    /// Records one event of the mapping family; others are ignored.
    /// A call through a watched libc function (`libc.so.6:mmap`) counts as the syscall it makes; one whose
    /// `syscall()` was already seen on the same thread, just before, with the same result, is that same call (a hook
    /// reached from the function that made the real call through `syscall()`): counted once.
    pub fn event(&mut self, ev: &Event, stack: Option<&Stack>) {
        let Some(nr) = call_syscall(ev) else { return };
        if !crate::model::consts::MAPPING_SYSCALLS.contains(&nr) {
            return;
        }
        if self.seen_twice.is_repeat(ev) {
            self.nested += 1;
            return;
        }
        let id = self.stacks.intern(stack);
        self.model.apply_call(nr, &ev.args, ev.ret, id);
    }

    /// One sample of the regions: the first is the baseline; each reconciles the model (bytes no longer mapped are
    /// dropped).
    pub fn sample(&mut self, regions: Vec<Span>) {
        if regions.is_empty() {
            return;
        }
        self.model.reconcile(&regions);
        if self.first.is_none() {
            self.first = Some(regions.clone());
        }
        self.last = regions;
    }

    /// The still-mapped anonymous ranges the model attributes to traced calls, in address order: where a sample
    /// needs fresh residency even when the region around them looks unchanged.
    pub fn traced_ranges(&self) -> Vec<(u64, u64)> {
        self.model.anon_pieces().map(|(s, e, _)| (s, e)).collect()
    }

    /// Weighs every still-mapped anonymous range by its resident bytes, with `read(start, end, max_pages)`
    /// giving how many pagemap entries it read of a range and the resident bytes they show ([`parse_resident`]),
    /// bounded overall by [`RESIDENCY_PAGES`].
    pub fn weigh_residency(&mut self, read: &mut dyn FnMut(u64, u64, u64) -> Option<(u64, u64)>) {
        let mut budget = RESIDENCY_PAGES;
        self.resident.clear();
        for (start, end, stack) in self.model.anon_pieces() {
            if budget == 0 {
                break;
            }
            let Some((pages, resident)) = read(start, end, budget) else { continue };
            budget = budget.saturating_sub(pages);
            self.resident.push((start, end, stack, resident));
        }
    }

    pub fn report(&self) -> LeakReport<'_> {
        let growing = match &self.first {
            Some(first) => self.model.growing(first, &self.last),
            None => Vec::new(),
        };
        let mut leaks: Vec<(StackId, StackStats)> = self.model.stacks();
        leaks.retain(|(_, s)| s.mapped > 0 || s.released > 0);
        let mut resident: HashMap<StackId, u64> = HashMap::new();
        for &(_, _, id, bytes) in &self.resident {
            *resident.entry(id).or_default() += bytes;
        }
        let region_resident = growing
            .iter()
            .map(|g| {
                let inside = self.resident.iter().filter(|r| g.start <= r.0 && r.1 <= g.end);
                inside.map(|r| r.3).sum::<u64>()
            })
            .collect();
        let weighed = !self.resident.is_empty();
        LeakReport { growing, leaks, stacks: &self.stacks, diagnosis: None, resident, region_resident, weighed }
    }
}

pub struct LeakReport<'a> {
    /// Growing anonymous regions, largest growth first.
    pub growing: Vec<Growing>,
    /// Stacks ranked by bytes still mapped, then bytes mapped.
    pub leaks: Vec<(StackId, StackStats)>,
    stacks: &'a Stacks,
    /// The findings (report mode), shown first.
    pub diagnosis: Option<crate::analysis::findings::Diagnosis>,
    /// Resident bytes (present or swapped, exclusively mapped) still mapped by each stack.
    pub resident: HashMap<StackId, u64>,
    /// For each growing region (same order), the resident bytes of its traced ranges.
    pub region_resident: Vec<u64>,
    /// Residency was read (pagemap readable, something still mapped).
    pub weighed: bool,
}

impl LeakReport<'_> {
    pub fn stack(&self, id: StackId) -> Option<&Stack> {
        self.stacks.get(id)
    }

    /// Resident bytes still mapped by a stack (0 when not weighed).
    pub fn resident_of(&self, id: StackId) -> u64 {
        self.resident.get(&id).copied().unwrap_or(0)
    }

    /// A growing region's growth (KiB) as the part resident on traced stacks and the remainder.
    pub fn region_split(&self, i: usize) -> (u64, u64) {
        let growth = self.growing.get(i).map_or(0, |g| g.growth_kb);
        let traced = self.region_resident.get(i).copied().unwrap_or(0) / 1024;
        (traced, growth.saturating_sub(traced))
    }
}

/// What tells frames apart: a native frame's address; a Python frame (address 0) by its name and line.
pub fn frame_key(f: &Frame) -> u64 {
    use std::hash::{Hash, Hasher};
    if f.kind == crate::model::stack::FrameKind::Native {
        return f.addr;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (f.kind, &f.function, &f.file, f.line).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(addr: u64, name: &str) -> Frame {
        Frame { addr, function: Some(name.into()), module: Some("prog".into()), ..Frame::default() }
    }

    fn ev(nr: u64, args: [u64; 6], ret: u64) -> Event {
        Event {
            time: 0.0,
            tid: 1,
            probe: None,
            func: None,
            nr,
            args,
            regs: Vec::new(),
            ret: Some(ret),
            ret_missing: None,
            capture: None,
            also: Vec::new(),
        }
    }

    fn region(start: u64, end: u64, rss_kb: u64) -> Span {
        Span { start, end, anon: true, rss_swap: rss_kb }
    }

    #[test]
    fn a_call_seen_at_libc_mmap_and_at_the_syscall_inside_it_counts_once() {
        let s = Stack { frames: vec![frame(0x10, "pool_grow")], truncated: None };
        let mut t = LeakTracker::new();
        let args = [0, 0x2000, 3, 0x22, u64::MAX, 0];
        // A hook reached from libc's mmap makes the real call through syscall(): the raw event comes first (it
        // completes first) but started after the function's entry.
        let mut raw = ev(9, args, 0x1000_0000);
        raw.time = 1.5;
        let mut func = ev(0, args, 0x1000_0000);
        func.func = Some("libc.so.6:mmap".into());
        func.time = 1.0;
        t.event(&raw, Some(&s));
        t.event(&func, Some(&s));
        assert_eq!(t.nested, 1);
        // A later, separate call at libc's mmap that happens to get the same address back counts.
        let mut again = func.clone();
        again.time = 2.0;
        t.event(&raw, Some(&s));
        t.event(&again, Some(&s));
        assert_eq!(t.nested, 1);
        // libc's munmap returns 0 like the raw munmap before it: different ranges are different calls.
        let mut un = ev(11, [0x3000_0000, 0x1000, 0, 0, 0, 0], 0);
        un.time = 3.0;
        let mut fun = ev(0, [0x4000_0000, 0x1000, 0, 0, 0, 0], 0);
        fun.func = Some("libc.so.6:munmap".into());
        fun.time = 2.9;
        t.event(&un, Some(&s));
        t.event(&fun, Some(&s));
        assert_eq!(t.nested, 1);
        let stats = t.report().leaks[0].1.clone();
        assert_eq!((stats.mmaps, stats.munmaps), (3, 2));
    }

    /// What the event stream of `--syscall` drops: a libc function's call whose `syscall()` inside it was just
    /// seen on the same thread; the same call on another thread, or with another result, is another call.
    #[test]
    fn a_call_seen_at_a_function_and_at_its_syscall_is_one_call() {
        let mut seen = SeenTwice::default();
        let args = [0, 0x2000, 3, 0x22, u64::MAX, 0];
        let mut raw = ev(9, args, 0x1000_0000);
        raw.time = 1.5;
        let mut func = ev(0, args, 0x1000_0000);
        func.func = Some("libc.so.6:mmap".into());
        func.time = 1.0;
        assert!(!seen.is_repeat(&raw));
        assert!(seen.is_repeat(&func));
        // Only once: the function's next call is a call of its own.
        assert!(!seen.is_repeat(&func));
        let mut other_thread = raw.clone();
        other_thread.tid = 2;
        assert!(!seen.is_repeat(&other_thread) && !seen.is_repeat(&func));
        let mut other_ret = func.clone();
        other_ret.ret = Some(0x2000_0000);
        assert!(!seen.is_repeat(&raw) && !seen.is_repeat(&other_ret));
        // A probe on another function never counts as a repeat.
        let mut malloc = func.clone();
        malloc.func = Some("libc.so.6:malloc".into());
        assert!(!seen.is_repeat(&raw) && !seen.is_repeat(&malloc));
    }

    #[test]
    fn residency_counts_own_pages_and_swap_not_the_zero_page() {
        let present_own = PM_PRESENT | PM_EXCLUSIVE | 0x1234;
        let zero_page = PM_PRESENT;
        let swapped = PM_SWAPPED | 0x55;
        assert_eq!(parse_resident(&[present_own, zero_page, swapped, 0]), 2 * 4096);
        let mut t = LeakTracker::new();
        let s = Stack { frames: vec![frame(0x10, "grow")], truncated: None };
        t.sample(vec![region(0x7000_0000, 0x7000_1000, 4)]);
        t.event(&ev(9, [0, 0x3000, 3, 0x22, u64::MAX, 0], 0x1000_0000), Some(&s));
        t.sample(vec![region(0x1000_0000, 0x1000_3000, 12), region(0x7000_0000, 0x7000_1000, 4)]);
        assert_eq!(t.traced_ranges(), [(0x1000_0000, 0x1000_3000)]);
        t.weigh_residency(&mut |start, end, _| {
            assert_eq!((start, end), (0x1000_0000, 0x1000_3000));
            let entries = [present_own, zero_page, present_own];
            Some((entries.len() as u64, parse_resident(&entries)))
        });
        let r = t.report();
        assert_eq!(r.resident_of(r.leaks[0].0), 2 * 4096);
        assert_eq!(r.region_split(0), (8, 4));
    }

    #[test]
    fn ranks_the_leaking_stack_and_folds_it() {
        let leak = Stack {
            frames: vec![frame(0x10, "syscall"), frame(0x20, "pool_grow"), frame(0x30, "main")],
            truncated: None,
        };
        let fine = Stack {
            frames: vec![frame(0x10, "syscall"), frame(0x40, "scratch"), frame(0x30, "main")],
            truncated: None,
        };
        let mut t = LeakTracker::new();
        t.sample(vec![region(0x7000_0000, 0x7000_1000, 4)]);
        t.event(&ev(9, [0, 0x2000, 3, 0x22, u64::MAX, 0], 0x1000_0000), Some(&leak));
        t.event(&ev(9, [0, 0x4000, 3, 0x22, u64::MAX, 0], 0x2000_0000), Some(&fine));
        t.event(&ev(11, [0x2000_0000, 0x4000, 0, 0, 0, 0], 0), Some(&fine));
        t.sample(vec![region(0x1000_0000, 0x1000_2000, 8), region(0x7000_0000, 0x7000_1000, 4)]);
        let r = t.report();
        assert_eq!(r.leaks[0].1.still_mapped, 0x2000);
        assert_eq!(r.stack(r.leaks[0].0).unwrap().frames[1].function.as_deref(), Some("pool_grow"));
        assert_eq!(r.leaks[1].1.still_mapped, 0);
        assert_eq!(r.folded(), ["main;pool_grow;syscall 8192"]);
        assert_eq!(r.growing.len(), 1);
        assert!(r.growing[0].new);
        let mut text = Vec::new();
        r.write_text(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("pool_grow"), "{text}");
        let mut svg = Vec::new();
        r.flamegraph(&mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml") && svg.contains("pool_grow") && svg.trim_end().ends_with("</svg>"));
    }
}
