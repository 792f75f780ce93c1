//! The answer the user came for: which stack made the memory that keeps growing, and how much of it is still
//! mapped. Fed by the analysis thread (events with their unwound stacks) and by smaps samples; renders the leak
//! report as text, JSON Lines, collapsed stacks and a flame graph. Pure: smaps samples come in as values.

use crate::analysis::correlate::{AddressSpace, Changes, Growing, StackId, StackStats};
use crate::analysis::growth::{History, Verdict, Window};
use crate::analysis::trend::{Trend, gcd, quantum, trend_of};
use crate::model::event::Event;
use crate::model::smaps::Span;
use crate::model::stack::{Frame, Stack};
use std::collections::HashMap;

/// The mapping family traced together with `--leaks`.
pub const LEAK_SYSCALLS: [&str; 6] = ["mmap", "munmap", "mremap", "brk", "mprotect", "madvise"];

/// What a flame graph or collapsed stacks weigh each stack by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Weight {
    /// Bytes mapped in the middle half of the trace and still mapped (see `analysis::growth`).
    #[default]
    Growth,
    /// Bytes still mapped at the end.
    StillMapped,
    /// Resident bytes still mapped (pagemap at the end).
    Resident,
    /// Bytes mapped over the trace.
    Mapped,
    /// Calls (mmap, munmap, mremap, failed).
    Calls,
}

impl Weight {
    pub fn name(self) -> &'static str {
        match self {
            Weight::Growth => "growth",
            Weight::StillMapped => "still-mapped",
            Weight::Resident => "resident",
            Weight::Mapped => "mapped",
            Weight::Calls => "calls",
        }
    }
}

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

/// Whether the call is one the leak model counts (mmap, munmap, mremap; made or wrapped).
pub fn maps(ev: &Event) -> bool {
    call_syscall(ev).is_some_and(|nr| crate::model::consts::MAPPING_SYSCALLS.contains(&nr))
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
    /// The same for the ranges madvise gave back: pages there now came back with no call.
    regrown: Vec<(u64, u64, StackId, u64)>,
    /// The part of the trace reported on: from (seconds since attach), and to (`None`: to the end).
    from: f64,
    to: Option<f64>,
    /// The window has started (the model was rebased at `from`).
    started: bool,
    /// The latest time seen (of an event or a sample).
    clock: f64,
    /// The samples in the window, the first being the baseline.
    history: History,
    /// The model as a recording last wrote it ([`Self::changes`]): `Some` once the recording keeps its changes
    /// instead of each call.
    written: Option<Box<AddressSpace>>,
    /// Read back from a recording: the stacks of the model that wrote it, by its numbers, as this one numbers
    /// them.
    recorded_ids: HashMap<u32, StackId>,
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
    /// A report of part of the trace only: from `from` to `to` seconds since attach (`syscatch report --from
    /// --to`). Calls before it shape the address space (so their memory is known) but are not in the figures;
    /// calls and samples after it are left out.
    pub fn window(from: f64, to: Option<f64>) -> LeakTracker {
        LeakTracker { from, to, ..LeakTracker::default() }
    }

    /// Whether something at `time` is past the window's end.
    fn after_window(&self, time: f64) -> bool {
        self.to.is_some_and(|to| time > to)
    }

    /// Starts the window once the trace reaches it.
    fn reach(&mut self, time: f64) {
        self.clock = self.clock.max(time);
        if !self.started && time >= self.from {
            self.started = true;
            if self.from > 0.0 {
                self.model.rebase(self.from);
            }
        }
    }

    /// Records one event of the mapping family; others are ignored.
    /// A call through a watched libc function (`libc.so.6:mmap`) counts as the syscall it makes; one whose
    /// `syscall()` was already seen on the same thread, just before, with the same result, is that same call (a hook
    /// reached from the function that made the real call through `syscall()`): counted once.
    /// Returns the number of the call's stack when the call was counted.
    pub fn event(&mut self, ev: &Event, stack: Option<&Stack>) -> Option<StackId> {
        if self.after_window(ev.time) {
            return None;
        }
        let nr = call_syscall(ev).filter(|nr| crate::model::consts::MAPPING_SYSCALLS.contains(nr))?;
        if self.seen_twice.is_repeat(ev) {
            self.nested += 1;
            return None;
        }
        self.reach(ev.time);
        let id = self.stacks.intern(stack);
        self.model.at(ev.time);
        if ev.func.as_deref().is_some_and(crate::model::watch::is_sbrk) {
            self.model.apply_sbrk(ev.args[0], ev.ret, id);
        } else {
            self.model.apply_call(nr, &ev.args, ev.ret, id);
        }
        Some(id)
    }

    /// The same, for a call read back from a recording, which numbered its stack `recorded`.
    pub fn recorded_event(&mut self, ev: &Event, stack: Option<&Stack>, recorded: Option<u32>) {
        let id = self.event(ev, stack);
        if let (Some(id), Some(r)) = (id, recorded) {
            self.recorded_ids.insert(r, id);
        }
    }

    /// A stack a recording numbered `recorded`, which its later changes name.
    pub fn recorded_stack(&mut self, stack: Option<&Stack>, recorded: u32) {
        let id = self.stacks.intern(stack);
        self.recorded_ids.insert(recorded, id);
    }

    /// From now on a recording keeps the model's changes ([`Self::changes`]) instead of each call.
    pub fn write_changes(&mut self) {
        self.written.get_or_insert_with(|| Box::new(self.model.clone()));
    }

    /// How the model changed since the recording last wrote it (`None` unless [`Self::write_changes`]), and
    /// how many calls were counted once ([`Self::nested`]).
    pub fn changes(&mut self) -> Option<(Changes, u64)> {
        let written = self.written.as_mut()?;
        let c = self.model.changes_since(written);
        **written = self.model.clone();
        Some((c, self.nested))
    }

    /// Changes read back from a recording, made by `time` (seconds since attach).
    pub fn recorded_changes(&mut self, time: f64, c: &Changes, nested: u64) {
        if self.after_window(time) {
            return;
        }
        self.reach(time);
        self.nested = nested;
        let (ids, stacks) = (&mut self.recorded_ids, &mut self.stacks);
        self.model.apply_changes(c, &mut |n| *ids.entry(n).or_insert_with(|| stacks.intern(None)));
    }

    /// One sample of the regions taken at `time` (seconds since attach; `None` in older recordings: the time of
    /// the last event): the last one at or before the window's start is the baseline; each reconciles the model
    /// (bytes no longer mapped are dropped), and goes to the time series.
    pub fn sample(&mut self, time: Option<f64>, regions: Vec<Span>) {
        let time = time.unwrap_or(self.clock);
        if regions.is_empty() || self.after_window(time) {
            return;
        }
        self.model.reconcile(&regions);
        // The baseline: the first sample of a whole trace, the last one up to its start for a window.
        if self.first.is_none() || time < self.from || (self.from > 0.0 && time <= self.from) {
            self.first = Some(regions.clone());
            self.history = History::default();
        }
        self.reach(time);
        let held = self.model.still_mapped().into_iter().map(|(id, b)| (id.0, b)).collect();
        let anon = regions.iter().filter(|r| r.anon).map(|r| (r.start, r.end, r.rss_swap));
        self.history.push(time.max(self.from), anon, &held);
        self.last = regions;
    }

    /// The sample taken right after arming (a live trace of a whole process): the baseline of growth from then
    /// on, in place of the one read before attaching. A region born between the two was made by a call the trace
    /// could not see (attaching and arming take a while): it was there when the trace began.
    pub fn rebaseline(&mut self, time: f64, regions: Vec<Span>) {
        if regions.is_empty() || self.from > 0.0 {
            return self.sample(Some(time), regions);
        }
        self.first = None;
        self.sample(Some(time), regions);
    }

    /// The window the report covers: its end is the window's, or the last time seen.
    pub fn span(&self) -> Window {
        let end = self.history.times.last().copied().unwrap_or(self.from).max(self.clock);
        Window { from: self.from, to: self.to.map_or(end, |to| to.min(end)) }
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
        self.regrown.clear();
        let returned: Vec<(u64, u64, StackId)> = self.model.returned_pieces().collect();
        let held = self.model.anon_pieces().map(|p| (p, false));
        for ((start, end, stack), given_back) in held.chain(returned.into_iter().map(|p| (p, true))) {
            if budget == 0 {
                break;
            }
            let Some((pages, resident)) = read(start, end, budget) else { continue };
            budget = budget.saturating_sub(pages);
            let to = if given_back { &mut self.regrown } else { &mut self.resident };
            to.push((start, end, stack, resident));
        }
    }

    pub fn report(&self) -> LeakReport<'_> {
        let window = self.span();
        let mut growing = match &self.first {
            Some(first) => self.model.growing(first, &self.last),
            None => Vec::new(),
        };
        let ranges: Vec<(u64, u64)> = growing.iter().map(|g| (g.start, g.end)).collect();
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| ranges[i]);
        let sorted: Vec<(u64, u64)> = order.iter().map(|&i| ranges[i]).collect();
        let mut region_series = vec![Vec::new(); ranges.len()];
        for (&i, series) in order.iter().zip(self.history.region_series(&sorted)) {
            region_series[i] = series;
        }
        let times = &self.history.times;
        for (g, series) in growing.iter_mut().zip(&region_series) {
            let points: Vec<(f64, u64)> = times.iter().copied().zip(series.iter().copied()).collect();
            g.lasting_kb = crate::analysis::growth::lasting_growth(&points, window);
            let quantum = g.stacks.iter().map(|s| quantum(s.still_mapped, s.calls)).fold(0, gcd);
            g.rate = trend_of(times, series, 1024.0, quantum);
        }
        // Lasting growth first, then the change from the first sample to the last.
        let mut both: Vec<(Growing, Vec<u64>)> = growing.into_iter().zip(region_series).collect();
        both.sort_by(|(a, _), (b, _)| {
            b.lasting_kb.cmp(&a.lasting_kb).then(b.growth_kb.cmp(&a.growth_kb)).then(a.start.cmp(&b.start))
        });
        let (growing, region_series): (Vec<Growing>, Vec<Vec<u64>>) = both.into_iter().unzip();
        let (q1, q3) = window.middle();
        let (second, third) = (self.model.held_since(q1, window.half()), self.model.held_since(window.half(), q3));
        let (mut leaks, quiet): (Vec<Candidate>, Vec<Candidate>) = self
            .model
            .stacks()
            .into_iter()
            .map(|(id, stats)| {
                let kept = |m: &std::collections::BTreeMap<StackId, u64>| m.get(&id).copied().unwrap_or(0);
                let growth = crate::analysis::growth::steady(kept(&second), kept(&third));
                let verdict = Verdict::of(growth, stats.mapped, stats.unmapped);
                Candidate { id, stats, growth, verdict, rate: None }
            })
            .partition(|c| c.stats.still_mapped > 0);
        leaks.sort_by(|a, b| {
            b.growth
                .cmp(&a.growth)
                .then(b.stats.still_mapped.cmp(&a.stats.still_mapped))
                .then(b.stats.mapped.cmp(&a.stats.mapped))
                .then(a.id.cmp(&b.id))
        });
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
        let region_regrown = growing
            .iter()
            .map(|g| self.regrown.iter().filter(|r| g.start <= r.0 && r.1 <= g.end).map(|r| r.3).sum::<u64>())
            .collect();
        let weighed = !self.resident.is_empty();
        let stacks: Vec<(StackId, Vec<u64>)> =
            leaks.iter().map(|c| (c.id, self.history.stack_series(c.id.0))).collect();
        for (c, (_, series)) in leaks.iter_mut().zip(&stacks) {
            c.rate = trend_of(times, series, 1.0, c.quantum());
        }
        let total = self.history.totals();
        let rate = trend_of(times, &total, 1024.0, leaks.iter().map(Candidate::quantum).fold(0, gcd));
        let series = Series { times: times.clone(), total, stacks, regions: region_series };
        LeakReport {
            growing,
            leaks,
            quiet,
            stacks: &self.stacks,
            diagnosis: None,
            resident,
            region_resident,
            region_regrown,
            weighed,
            window,
            rate,
            series,
        }
    }
}

/// A leak candidate: a stack that still holds memory, with its growth (see [`crate::analysis::growth`]).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub id: StackId,
    pub stats: StackStats,
    /// Its growth (see [`crate::analysis::growth`]): about the bytes mapped in the window's middle half and still
    /// mapped, when it grows steadily.
    pub growth: u64,
    pub verdict: Verdict,
    /// Its rate: the trend of the floor of its bytes still mapped at each sample (see
    /// [`crate::analysis::trend`]); `None` with fewer than four samples.
    pub rate: Option<Trend>,
}

impl Candidate {
    /// The step its memory grows by: the mean size of its mapping calls, in pages.
    pub fn quantum(&self) -> u64 {
        quantum(self.stats.mapped, self.stats.mmaps)
    }

    /// Bytes per minute: its rate, or with fewer than four samples its growth over the window's middle half.
    pub fn per_min(&self, window: Window) -> f64 {
        self.rate.map_or(window.per_min(self.growth), |t| t.per_sec * 60.0)
    }
}

/// The samples of the window: for each leak candidate (same order) its bytes still mapped, and for each growing
/// region (same order) its Rss+Swap (kB), at each sample's time.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub times: Vec<f64>,
    /// The Rss+Swap (kB) of all the anonymous memory at each sample.
    pub total: Vec<u64>,
    pub stacks: Vec<(StackId, Vec<u64>)>,
    pub regions: Vec<Vec<u64>>,
}

pub struct LeakReport<'a> {
    /// Growing anonymous regions, largest growth first.
    pub growing: Vec<Growing>,
    /// Stacks that still hold memory, by growth, then bytes still mapped, then bytes mapped.
    pub leaks: Vec<Candidate>,
    /// The other traced stacks (they hold nothing: not leak candidates; the rules still see their calls).
    pub quiet: Vec<Candidate>,
    stacks: &'a Stacks,
    /// The findings (report mode), shown first.
    pub diagnosis: Option<crate::analysis::findings::Diagnosis>,
    /// Resident bytes (present or swapped, exclusively mapped) still mapped by each stack.
    pub resident: HashMap<StackId, u64>,
    /// For each growing region (same order), the resident bytes of its traced ranges.
    pub region_resident: Vec<u64>,
    /// For each growing region, the resident bytes in ranges madvise had given back: pages that came back with no
    /// call.
    pub region_regrown: Vec<u64>,
    /// Residency was read (pagemap readable, something still mapped).
    pub weighed: bool,
    /// The part of the trace reported on.
    pub window: Window,
    /// The rate of all the anonymous memory: the trend of the floor of its Rss+Swap (the headline's figure).
    pub rate: Option<Trend>,
    pub series: Series,
}

impl LeakReport<'_> {
    pub fn stack(&self, id: StackId) -> Option<&Stack> {
        self.stacks.get(id)
    }

    /// Resident bytes still mapped by a stack (0 when not weighed).
    pub fn resident_of(&self, id: StackId) -> u64 {
        self.resident.get(&id).copied().unwrap_or(0)
    }

    /// Leaves out the growing regions inside any of `ranges` (syscatch's own pages in the target), with their
    /// residency and series.
    pub fn leave_out(&mut self, ranges: &[(u64, u64)]) {
        let keep: Vec<bool> =
            self.growing.iter().map(|g| !ranges.iter().any(|&(a, b)| a <= g.start && g.end <= b)).collect();
        let mut k = keep.iter();
        self.growing.retain(|_| *k.next().unwrap_or(&true));
        let mut k = keep.iter();
        self.region_resident.retain(|_| *k.next().unwrap_or(&true));
        let mut k = keep.iter();
        self.region_regrown.retain(|_| *k.next().unwrap_or(&true));
        let mut k = keep.iter();
        self.series.regions.retain(|_| *k.next().unwrap_or(&true));
    }

    /// The regions' lasting growth (kB), `None` when the samples were too few to tell.
    pub fn lasting_kb(&self) -> Option<u64> {
        self.growing.iter().map(|g| g.lasting_kb).sum()
    }

    /// The traced stacks' rate together: the trend of the floor of the bytes they all still map at each sample.
    pub fn stacks_rate(&self, ids: Option<&[u32]>) -> Option<Trend> {
        let chosen =
            self.leaks.iter().zip(&self.series.stacks).filter(|(c, _)| ids.is_none_or(|ids| ids.contains(&c.id.0)));
        let (mut sum, mut step) = (vec![0u64; self.series.times.len()], 0);
        for (c, (_, v)) in chosen {
            step = gcd(step, c.quantum());
            for (s, b) in sum.iter_mut().zip(v) {
                *s = s.saturating_add(*b);
            }
        }
        trend_of(&self.series.times, &sum, 1.0, step)
    }

    /// The traced stacks' bytes per minute: their rate together, or with fewer than four samples their growth over
    /// the window's middle half.
    pub fn traced_per_min(&self) -> f64 {
        self.stacks_rate(None).map_or(self.window.per_min(self.growth()), |t| t.per_sec * 60.0)
    }

    /// Bytes of growth on traced stacks.
    pub fn growth(&self) -> u64 {
        self.leaks.iter().map(|c| c.growth).sum()
    }

    /// A growing region's growth (KiB) as the part resident on traced stacks and the remainder (of which
    /// [`Self::region_regrown_kb`] came back where madvise had given pages back).
    pub fn region_split(&self, i: usize) -> (u64, u64) {
        let growth = self.growing.get(i).map_or(0, |g| g.growth_kb);
        let traced = self.region_resident.get(i).copied().unwrap_or(0) / 1024;
        (traced, growth.saturating_sub(traced))
    }

    /// Of a growing region's remainder (KiB), the pages resident in ranges madvise had given back: they came
    /// back with no call (glibc reusing a trimmed part of an arena, a purged extent of jemalloc's reused).
    pub fn region_regrown_kb(&self, i: usize) -> u64 {
        let (_, rest) = self.region_split(i);
        (self.region_regrown.get(i).copied().unwrap_or(0) / 1024).min(rest)
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
        Span { start, end, anon: true, rss_swap: rss_kb, reserved: false }
    }

    #[test]
    fn a_call_seen_at_libc_mmap_and_at_the_syscall_inside_it_counts_once() {
        let s = Stack { frames: vec![frame(0x10, "pool_grow")], truncated: None };
        let mut t = LeakTracker::default();
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
        let stats = t.report().leaks[0].stats.clone();
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
        let mut t = LeakTracker::default();
        let s = Stack { frames: vec![frame(0x10, "grow")], truncated: None };
        t.sample(None, vec![region(0x7000_0000, 0x7000_1000, 4)]);
        t.event(&ev(9, [0, 0x3000, 3, 0x22, u64::MAX, 0], 0x1000_0000), Some(&s));
        // syscatch's own pages (0x2000_0000: grew more, so listed first) are left out of the report.
        let own = region(0x2000_0000, 0x2001_0000, 64);
        t.sample(None, vec![region(0x1000_0000, 0x1000_3000, 12), own, region(0x7000_0000, 0x7000_1000, 4)]);
        assert_eq!(t.traced_ranges(), [(0x1000_0000, 0x1000_3000)]);
        t.weigh_residency(&mut |start, end, _| {
            assert_eq!((start, end), (0x1000_0000, 0x1000_3000));
            let entries = [present_own, zero_page, present_own];
            Some((entries.len() as u64, parse_resident(&entries)))
        });
        let mut r = t.report();
        assert_eq!(r.growing[0].start, 0x2000_0000);
        r.leave_out(&[(0x2000_0000, 0x2001_0000)]);
        assert_eq!(r.resident_of(r.leaks[0].id), 2 * 4096);
        assert_eq!((r.growing.len(), r.series.regions.len()), (1, 1));
        assert_eq!(r.region_split(0), (8, 4));
    }

    #[test]
    fn ranks_growth_above_churn_and_folds_it() {
        let stack = |name: &str, addr: u64| Stack {
            frames: vec![frame(0x10, "syscall"), frame(addr, name), frame(0x30, "main")],
            truncated: None,
        };
        let (leak, churn, burst) = (stack("pool_grow", 0x20), stack("arena_new", 0x40), stack("burst", 0x50));
        let mut t = LeakTracker::default();
        t.sample(Some(0.0), vec![region(0x7000_0000, 0x7000_1000, 4)]);
        let at = |nr, args, ret, time: f64| Event { time, ..ev(nr, args, ret) };
        // Over 20 s: the pool maps 8 KiB a second and keeps it; the arenas map and free 64 KiB twice a second,
        // and hold one at the end; a burst of 1 MiB mapped at 18 s is still held at the end.
        let mut regions = vec![region(0x7000_0000, 0x7000_1000, 4)];
        for s in 0..20u64 {
            let time = s as f64 + 0.5;
            t.event(&at(9, [0, 0x2000, 3, 0x22, u64::MAX, 0], 0x1000_0000 + s * 0x2000, time), Some(&leak));
            for k in 0..2 {
                let a = 0x2000_0000 + (2 * s + k) * 0x10000;
                t.event(&at(9, [0, 0x10000, 3, 0x22, u64::MAX, 0], a, time), Some(&churn));
                if s < 19 || k == 0 {
                    t.event(&at(11, [a, 0x10000, 0, 0, 0, 0], 0, time + 0.1), Some(&churn));
                }
            }
            if s == 18 {
                t.event(&at(9, [0, 0x10_0000, 3, 0x22, u64::MAX, 0], 0x3000_0000, time), Some(&burst));
                regions.push(region(0x3000_0000, 0x3010_0000, 1024));
            }
            let mut now = vec![region(0x1000_0000, 0x1000_0000 + (s + 1) * 0x2000, (s + 1) * 8)];
            now.extend(regions.iter().copied());
            if s == 19 {
                now.push(region(0x2000_0000 + 39 * 0x10000, 0x2000_0000 + 40 * 0x10000, 64));
            }
            now.sort_by_key(|r| r.start);
            t.sample(Some(s as f64 + 1.0), now);
        }
        let r = t.report();
        assert_eq!((r.window.from, r.window.to), (0.0, 20.0));
        let name = |c: &Candidate| r.stack(c.id).unwrap().frames[1].function.clone().unwrap();
        let got: Vec<(String, u64, Verdict)> = r.leaks.iter().map(|c| (name(c), c.growth, c.verdict)).collect();
        // The pool mapped 10 times 8 KiB in the middle half (5 s to 15 s); the arenas hold only what they mapped
        // last; the burst is held, not grown.
        assert_eq!(
            got,
            [
                ("pool_grow".into(), 10 * 0x2000, Verdict::Growth),
                ("burst".into(), 0, Verdict::Held),
                ("arena_new".into(), 0, Verdict::WorkingSet),
            ]
        );
        assert!((r.window.per_min(r.leaks[0].growth) - 10.0 * 8192.0 * 6.0).abs() < 1e-6);
        assert_eq!(r.folded(Weight::Growth), [format!("main;pool_grow;syscall {}", 10 * 0x2000)]);
        // Still mapped: the pool's 20 pages, the burst's MiB, the arenas' last 64 KiB.
        let mut held = r.folded(Weight::StillMapped);
        held.sort();
        assert_eq!(
            held,
            ["main;arena_new;syscall 65536", "main;burst;syscall 1048576", "main;pool_grow;syscall 163840"]
        );
        // The pool's region grew 8 kB a second: 80 kB lasting in the middle half; the burst's none.
        let lasting: Vec<(u64, Option<u64>)> = r.growing.iter().map(|g| (g.start, g.lasting_kb)).collect();
        assert_eq!(lasting[0], (0x1000_0000, Some(80)));
        assert!(lasting.contains(&(0x3000_0000, Some(0))), "{lasting:?}");
        // The series: one point per sample, the pool's bytes rising by 8 KiB each.
        assert_eq!(r.series.times.len(), 21);
        let pool = &r.series.stacks.iter().find(|(id, _)| *id == r.leaks[0].id).unwrap().1;
        assert_eq!(pool[..3], [0, 0x2000, 0x4000]);
        assert_eq!(r.series.regions[0][..3], [0, 8, 16]);
        let mut text = Vec::new();
        r.write_text(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        // (The interval: one 8 KiB step over the 19 s between the first floor and the last.)
        assert!(text.contains("#1 grows 0.47 MiB/min (99%: 0.44 to 0.49); holds 160 KiB"), "{text}");
        assert!(text.contains("working set, not growth"), "{text}");
        // The rates: the pool's 8 KiB a second exactly; the burst held at the end is no rate; all the anonymous
        // memory grows as the pool does, the arenas' churn and the burst aside.
        let rate = |c: &Candidate| c.rate.unwrap().per_sec;
        assert_eq!((rate(&r.leaks[0]), rate(&r.leaks[1])), (8192.0, 0.0));
        assert_eq!(r.rate.unwrap().per_sec, 8192.0, "{:?}", r.rate);
        let mut svg = Vec::new();
        r.flamegraph(&mut svg, Weight::StillMapped).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml") && svg.contains("pool_grow") && svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn a_window_reports_only_its_part() {
        let s = Stack { frames: vec![frame(0x20, "grow")], truncated: None };
        // A stack that maps 4 KiB a second, only from 10 s on; the window 10-20 s sees all its growth, the window
        // 0-10 s none; what was mapped before a window is not the window's.
        let run = |from: f64, to: Option<f64>| {
            let mut t = LeakTracker::window(from, to);
            t.sample(Some(0.0), vec![region(0x7000_0000, 0x7000_1000, 4)]);
            for k in 0..20u64 {
                if k >= 10 {
                    let e = Event {
                        time: k as f64 + 0.5,
                        ..ev(9, [0, 0x1000, 3, 0x22, u64::MAX, 0], 0x1000_0000 + k * 0x1000)
                    };
                    t.event(&e, Some(&s));
                }
                let n = k.saturating_sub(9);
                let mut now = vec![region(0x7000_0000, 0x7000_1000, 4)];
                if n > 0 {
                    now.insert(0, region(0x1000_a000, 0x1000_a000 + n * 0x1000, n * 4));
                }
                t.sample(Some(k as f64 + 1.0), now);
            }
            let r = t.report();
            let got = r.leaks.first().map(|c| (c.growth, c.stats.mmaps, c.stats.still_mapped));
            (r.window, got)
        };
        let (w, late) = run(10.0, Some(20.0));
        assert_eq!((w.from, w.to), (10.0, 20.0));
        // Mapped in the second quarter (12.5-15 s): 12.5, 13.5, 14.5; in the third: 15.5, 16.5.
        assert_eq!(late, Some((4 * 0x1000, 10, 10 * 0x1000)));
        let (_, early) = run(0.0, Some(10.0));
        assert_eq!(early, None);
        // From 15 s: the calls before are not counted, nor their memory.
        let (_, tail) = run(15.0, None);
        assert_eq!(tail.map(|t| (t.1, t.2)), Some((5, 5 * 0x1000)));
    }
}
