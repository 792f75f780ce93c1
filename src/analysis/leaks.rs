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
    /// `--faults`: the growth no call explains, charged to the stacks of the sampled page faults.
    Faults,
}

impl Weight {
    pub fn name(self) -> &'static str {
        match self {
            Weight::Growth => "growth",
            Weight::StillMapped => "still-mapped",
            Weight::Resident => "resident",
            Weight::Mapped => "mapped",
            Weight::Calls => "calls",
            Weight::Faults => "faults",
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
    /// `--malloc`'s sampled allocations (empty without it).
    pub samples: crate::analysis::samples::HeapSamples,
    /// `--faults`' sampled page faults (empty without it).
    pub faults: crate::analysis::faults::FaultSamples,
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
        if ev.func.as_deref() == Some(crate::model::watch::PAGE_FAULT) {
            if self.faults.every > 0 && ev.time >= self.from {
                self.reach(ev.time);
                let id = self.stacks.intern(stack);
                self.faults.event(ev.args[0], id, ev.args[1]);
            }
            return None;
        }
        if let Some(f) = crate::analysis::samples::alloc_fn(ev) {
            if self.samples.every > 0 {
                self.reach(ev.time);
                let id =
                    if f == crate::x86::alloc::AllocFn::Free { StackId(u32::MAX) } else { self.stacks.intern(stack) };
                self.samples.event(ev, f, id);
            }
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
            samples: (self.samples.every > 0).then_some(&self.samples),
            faults: (self.faults.every > 0).then(|| (&self.faults, self.traced_ranges())),
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
    /// `--malloc`'s sampled allocations.
    pub samples: Option<&'a crate::analysis::samples::HeapSamples>,
    /// `--faults`' sampled page faults, and the ranges traced calls mapped (see [`LeakReport::charged`]).
    pub faults: Option<(&'a crate::analysis::faults::FaultSamples, Vec<(u64, u64)>)>,
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

    /// `--faults`: each growing region's growth that no traced call explains (all of it when residency was not
    /// read), charged to the stacks of the page faults sampled there.
    pub fn charged(&self) -> Option<crate::analysis::faults::Charged> {
        let (samples, traced) = self.faults.as_ref()?;
        let regions: Vec<(u64, u64, u64)> = (0..self.growing.len())
            .map(|i| {
                let g = &self.growing[i];
                (g.start, g.end, if self.weighed { self.region_split(i).1 } else { g.growth_kb })
            })
            .collect();
        Some(samples.charge(&regions, traced))
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
#[path = "leaks_tests.rs"]
mod tests;
