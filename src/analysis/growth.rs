//! Growth over time, told from churn: defined once here and used by every output that ranks, weighs or gates.
//!
//! A trace (or a report's window) runs from `from` to `to`, cut in four quarters; the two middle ones are its
//! **middle half**.
//! - A stack's **growth** is twice the smaller of two amounts: the anonymous memory it mapped in the second
//!   quarter and still holds at the end, and the same for the third quarter. A stack that grows steadily maps as
//!   much in each quarter, so its growth is what it mapped in the middle half and kept, and its **rate** is that
//!   over the middle half's length. What a working set or a burst holds now was mapped in the last quarter, or is
//!   gone by the end; what was mapped in the first quarter and kept may be a working set replacing what it held
//!   before the trace; and one allocation kept (a burst, a long-lived arena) falls in one quarter only, so the
//!   smaller amount leaves it out. (bcc's memleak `-o` keeps only allocations older than an age, for the same
//!   reason.)
//! - A region's **lasting growth** is the same over its Rss+Swap: with `L(t)` the least Rss+Swap sampled at `t` or
//!   later (what it kept from `t` on), twice the smaller of `L(half) - L(quarter)` and `L(3 quarters) - L(half)`.
//!   A burst that was freed, or that is still held at the end, lies above `L`.
//!
//! So memory held longer than a quarter of the trace, again and again, counts as growth: to tell a working set
//! whose memory lives for S seconds from growth, trace for more than 4 S.
//!
//! Also here: the time series of the report (each sample's Rss+Swap of each region and bytes still mapped by each
//! stack), kept by change so that a long trace of a process with many mappings stays small.

use std::collections::{BTreeMap, HashMap};

/// The part of the trace a report covers, in seconds since attach.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub from: f64,
    pub to: f64,
}

impl Window {
    pub fn len(&self) -> f64 {
        (self.to - self.from).max(0.0)
    }

    /// The middle half: memory mapped in it and still mapped at the end is growth.
    pub fn middle(&self) -> (f64, f64) {
        let q = self.len() / 4.0;
        (self.from + q, self.to - q)
    }

    /// The middle of the trace (where the second quarter ends and the third begins).
    pub fn half(&self) -> f64 {
        self.from + self.len() / 2.0
    }

    /// Bytes of growth per minute (growth is measured over the middle half).
    pub fn per_min(&self, bytes: u64) -> f64 {
        let half = self.len() / 2.0;
        if half > 0.0 { bytes as f64 * 60.0 / half } else { 0.0 }
    }
}

/// How a stack's memory behaved over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It holds memory mapped in the middle half: growth.
    Growth,
    /// Most of what it mapped it unmapped again, and its growth is small beside it: a working set.
    WorkingSet,
    /// It holds memory, all of it mapped in the first or the last quarter: not growth in this window.
    Held,
}

impl Verdict {
    pub fn of(growth: u64, mapped: u64, unmapped: u64) -> Verdict {
        if mapped > 0 && unmapped.saturating_mul(2) >= mapped && growth.saturating_mul(10) < mapped {
            Verdict::WorkingSet
        } else if growth > 0 {
            Verdict::Growth
        } else {
            Verdict::Held
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Growth => "growth",
            Verdict::WorkingSet => "working set",
            Verdict::Held => "held",
        }
    }
}

/// Growth from what was mapped in the second and in the third quarter and kept (see the module's definition).
pub fn steady(second: u64, third: u64) -> u64 {
    second.min(third).saturating_mul(2)
}

/// Lasting growth of one region from its Rss+Swap at each sample `(time, kB)`, in time order (see the module's
/// definition; absent samples count as 0). `None` without a sample in each middle quarter and one in the last:
/// too few samples to tell (a trace shorter than a few sampling intervals).
pub fn lasting_growth(samples: &[(f64, u64)], w: Window) -> Option<u64> {
    let (q1, q3) = w.middle();
    let q2 = w.half();
    let sampled = |a: f64, b: f64| samples.iter().any(|&(t, _)| t >= a && t < b);
    if !sampled(q1, q2) || !sampled(q2, q3) {
        return None;
    }
    let kept_from = |t: f64| samples.iter().filter(|(s, _)| *s >= t).map(|&(_, v)| v).min();
    let (a, b, c) = (kept_from(q1)?, kept_from(q2)?, kept_from(q3)?);
    Some(steady(b.saturating_sub(a), c.saturating_sub(b)))
}

/// One region of a sample as the history keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    end: u64,
    rss_kb: u64,
}

/// The samples of a trace: their times, each anonymous region's Rss+Swap and each stack's still-mapped bytes,
/// stored only where they change.
#[derive(Debug, Default, Clone)]
pub struct History {
    pub times: Vec<f64>,
    /// The regions of the first sample, sorted by start: a process with 30,000 mappings keeps 24 bytes each.
    base: Vec<SampledRegion>,
    /// By region start, what changed since the first sample: (sample index, the region then, or `None`: no
    /// region starts there any more).
    regions: BTreeMap<u64, Vec<(u32, Option<Kept>)>>,
    /// By stack id: (sample index, bytes still mapped).
    stacks: HashMap<u32, Vec<(u32, u64)>>,
    /// The most samples it keeps (0: [`MAX_SAMPLES`]).
    max: usize,
}

/// The most samples a history keeps: once it has this many, each two neighbouring samples are merged into one (at
/// the earlier one's time, each region and each stack at the smaller of its two values, as a floor would take
/// them), so a trace of hours keeps a bounded history whose older part is coarser. (At `--smaps-every 1s`, the
/// first merge is after 68 minutes.)
pub const MAX_SAMPLES: usize = 4096;

/// A series kept by change (`(sample index, value)`, `first` before its first change) over `n` samples, with each
/// two neighbouring samples merged into one by `merge`: its first value, and its changes from the second sample on.
fn halved<V: Copy + PartialEq>(h: &[(u32, V)], first: V, n: u32, merge: impl Fn(V, V) -> V) -> (V, Vec<(u32, V)>) {
    let at = |k: u32| h.partition_point(|x| x.0 <= k).checked_sub(1).map_or(first, |i| h[i].1);
    let value = |j: u32| merge(at(2 * j), at((2 * j + 1).min(n.saturating_sub(1))));
    // The merged value changes only where a merged pair holds a change.
    let half = n.div_ceil(2);
    let mut at_pairs: Vec<u32> =
        h.iter().flat_map(|&(k, _)| [k / 2, k.div_ceil(2)]).filter(|&j| j > 0 && j < half).collect();
    at_pairs.sort_unstable();
    at_pairs.dedup();
    let start = value(0);
    let (mut out, mut last) = (Vec::new(), start);
    for j in at_pairs {
        let v = value(j);
        if v != last {
            out.push((j, v));
            last = v;
        }
    }
    (start, out)
}

/// A region of one sample: `(start, end, Rss+Swap kB)`.
pub type SampledRegion = (u64, u64, u64);

impl History {
    /// Adds a sample taken at `time`: its anonymous regions, sorted by start as the kernel lists them (others are
    /// taken too, at more cost), and the bytes each stack holds then.
    pub fn push(&mut self, time: f64, regions: impl Iterator<Item = SampledRegion>, stacks: &BTreeMap<u32, u64>) {
        let k = self.times.len() as u32;
        self.times.push(time);
        if k == 0 {
            self.base = regions.collect();
            self.base.sort_unstable();
        } else {
            for (start, now) in self.changes(regions) {
                self.regions.entry(start).or_default().push((k, now));
            }
        }
        for (id, h) in self.stacks.iter_mut() {
            if !stacks.contains_key(id) && h.last().is_some_and(|x| x.1 != 0) {
                h.push((k, 0));
            }
        }
        for (&id, &bytes) in stacks {
            let h = self.stacks.entry(id).or_default();
            if h.last().map(|x| x.1) != Some(bytes) {
                h.push((k, bytes));
            }
        }
        if self.times.len() >= if self.max == 0 { MAX_SAMPLES } else { self.max } {
            self.halve();
        }
    }

    /// A history that keeps at most `max` samples (see [`MAX_SAMPLES`]).
    #[cfg(test)]
    pub fn bounded(max: usize) -> History {
        History { max: max.max(2), ..History::default() }
    }

    /// Merges each two neighbouring samples into one (see [`MAX_SAMPLES`]).
    fn halve(&mut self) {
        let n = self.times.len() as u32;
        let mut base: BTreeMap<u64, Kept> =
            self.base.iter().map(|&(s, end, rss_kb)| (s, Kept { end, rss_kb })).collect();
        let smaller = |a: Option<Kept>, b: Option<Kept>| match (a, b) {
            (Some(a), Some(b)) => Some(if b.rss_kb < a.rss_kb { b } else { a }),
            _ => None,
        };
        for (start, h) in std::mem::take(&mut self.regions) {
            let (first, changes) = halved(&h, base.get(&start).copied(), n, smaller);
            match first {
                Some(r) => base.insert(start, r),
                None => base.remove(&start),
            };
            if !changes.is_empty() {
                self.regions.insert(start, changes);
            }
        }
        self.base = base.into_iter().map(|(s, r)| (s, r.end, r.rss_kb)).collect();
        for h in self.stacks.values_mut() {
            let (first, changes) = halved(h, 0, n, u64::min);
            *h = (first != 0).then_some((0, first)).into_iter().chain(changes).collect();
        }
        self.stacks.retain(|_, h| !h.is_empty());
        self.times = self.times.iter().step_by(2).copied().collect();
    }

    /// What a new sample changes: a region that is new or not as the last sample left it, or `None` where a
    /// region the history knows is gone. One pass of two cursors, over the sample and over the regions as they
    /// are now, both sorted by start, so nothing the size of the sample is built; a region out of order is
    /// applied after the pass (the last of a start's regions counts).
    fn changes(&self, regions: impl Iterator<Item = SampledRegion>) -> Vec<(u64, Option<Kept>)> {
        let mut known = self.regions_at(u32::MAX).peekable();
        let mut out = Vec::new();
        let mut late = Vec::new();
        let mut last = None;
        for (start, end, rss_kb) in regions {
            let now = Some(Kept { end, rss_kb });
            if last.is_some_and(|l| start <= l) {
                late.push((start, now));
                continue;
            }
            last = Some(start);
            while let Some((s, _)) = known.next_if(|&(s, _)| s < start) {
                out.push((s, None));
            }
            let was = known.next_if(|&(s, _)| s == start).map(|(_, r)| r);
            if was != now {
                out.push((start, now));
            }
        }
        out.extend(known.map(|(s, _)| (s, None)));
        if !late.is_empty() {
            // By start, the last of each start's regions first (the sort is stable), and only that one kept.
            late.reverse();
            late.sort_by_key(|r| r.0);
            late.dedup_by_key(|r| r.0);
            out.retain(|&(s, _)| late.binary_search_by_key(&s, |r| r.0).is_err());
            out.extend(late.into_iter().filter(|&(s, now)| self.current(s) != now));
        }
        out
    }

    /// The regions of sample `k` (the last one for `u32::MAX`), by start in address order.
    fn regions_at(&self, k: u32) -> impl Iterator<Item = (u64, Kept)> + '_ {
        let mut base = self.base.iter().peekable();
        let mut changed = self.regions.iter().peekable();
        std::iter::from_fn(move || {
            loop {
                let start = match (base.peek().map(|b| b.0), changed.peek().map(|c| *c.0)) {
                    (None, None) => return None,
                    (Some(b), Some(c)) => b.min(c),
                    (Some(b), None) => b,
                    (None, Some(c)) => c,
                };
                let first = base.next_if(|b| b.0 == start).map(|&(_, end, rss_kb)| Kept { end, rss_kb });
                // (Two regions of the first sample at one start: the kernel never lists them; the first counts.)
                while base.next_if(|b| b.0 == start).is_some() {}
                let at = match changed.next_if(|c| *c.0 == start) {
                    Some((_, h)) => Self::at_in(h, k, first),
                    None => first,
                };
                if let Some(r) = at {
                    return Some((start, r));
                }
            }
        })
    }

    /// The first sample's region at `start`.
    fn in_base(&self, start: u64) -> Option<Kept> {
        let i = self.base.partition_point(|r| r.0 < start);
        self.base.get(i).filter(|r| r.0 == start).map(|&(_, end, rss_kb)| Kept { end, rss_kb })
    }

    /// The region at `start` as the last sample left it.
    fn current(&self, start: u64) -> Option<Kept> {
        let h = self.regions.get(&start).map(Vec::as_slice).unwrap_or_default();
        Self::at_in(h, u32::MAX, self.in_base(start))
    }

    /// A start's region in sample `k`, from its changes `h` and its region in the first sample.
    fn at_in(h: &[(u32, Option<Kept>)], k: u32, first: Option<Kept>) -> Option<Kept> {
        let i = h.partition_point(|x| x.0 <= k);
        match i.checked_sub(1).and_then(|i| h.get(i)) {
            Some(&(_, r)) => r,
            None => first,
        }
    }

    /// The Rss+Swap (kB) of all the anonymous regions at every sample, from the changes alone (a process with
    /// 30,000 mappings sampled for hours is not summed anew at each sample).
    pub fn totals(&self) -> Vec<u64> {
        let mut changes: Vec<(u32, u64, Option<Kept>)> =
            self.regions.iter().flat_map(|(&start, h)| h.iter().map(move |&(k, now)| (k, start, now))).collect();
        changes.sort_by_key(|c| (c.0, c.1));
        let mut now: HashMap<u64, u64> = self.base.iter().map(|&(s, _, kb)| (s, kb)).collect();
        let mut total: u64 = now.values().sum();
        let mut out = Vec::with_capacity(self.times.len());
        let mut next = changes.iter().peekable();
        for k in 0..self.times.len() as u32 {
            while let Some(&(_, start, region)) = next.next_if(|c| c.0 <= k) {
                let kb = region.map_or(0, |r| r.rss_kb);
                let was = now.insert(start, kb).unwrap_or(0);
                total = (total + kb).saturating_sub(was);
            }
            out.push(total);
        }
        out
    }

    /// For each of `regions` (sorted by address), its Rss+Swap at every sample: the regions of that sample it
    /// overlaps most count toward it, as between two samples (regions merge and split as they grow).
    pub fn region_series(&self, regions: &[(u64, u64)]) -> Vec<Vec<u64>> {
        let mut out = vec![Vec::with_capacity(self.times.len()); regions.len()];
        let mut got = vec![0u64; regions.len()];
        for k in 0..self.times.len() as u32 {
            got.fill(0);
            for (s, Kept { end: e, rss_kb: kb }) in self.regions_at(k) {
                let from = regions.partition_point(|r| r.1 <= s);
                let best = regions
                    .get(from..)
                    .unwrap_or(&[])
                    .iter()
                    .take_while(|r| r.0 < e)
                    .enumerate()
                    .max_by_key(|(_, r)| r.1.min(e).saturating_sub(r.0.max(s)))
                    .map(|(i, _)| from + i);
                if let Some(slot) = best.and_then(|i| got.get_mut(i)) {
                    *slot = slot.saturating_add(kb);
                }
            }
            for (series, &v) in out.iter_mut().zip(&got) {
                series.push(v);
            }
        }
        out
    }

    /// A stack's still-mapped bytes at every sample.
    pub fn stack_series(&self, id: u32) -> Vec<u64> {
        let h = self.stacks.get(&id).map(Vec::as_slice).unwrap_or_default();
        (0..self.times.len() as u32)
            .map(|k| {
                let i = h.partition_point(|x| x.0 <= k);
                i.checked_sub(1).and_then(|i| h.get(i)).map_or(0, |x| x.1)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Window = Window { from: 0.0, to: 20.0 };

    #[test]
    fn steady_growth_counts_and_bursts_do_not() {
        let steady: Vec<(f64, u64)> = (0..=20).map(|t| (t as f64, 100 + 10 * t as u64)).collect();
        // 10 kB a second over the middle half (5 s to 15 s): 100 kB, 10 kB/s.
        assert_eq!(lasting_growth(&steady, W), Some(100));
        // Samples only at the ends: too few to tell.
        assert_eq!(lasting_growth(&[(0.0, 0), (20.0, 100)], W), None);
        assert!((W.per_min(100) - 600.0).abs() < 1e-9);
        // A burst of 1000 kB at 8-10 s, freed: nothing lasting.
        let burst: Vec<(f64, u64)> =
            (0..=20).map(|t| (t as f64, if (8..10).contains(&t) { 1100 } else { 100 })).collect();
        assert_eq!(lasting_growth(&burst, W), Some(0));
        // A burst still held when the trace ends (from 17 s): nothing lasting either.
        let end: Vec<(f64, u64)> = (0..=20).map(|t| (t as f64, if t >= 17 { 1100 } else { 100 })).collect();
        assert_eq!(lasting_growth(&end, W), Some(0));
        // A region born at 10 s and kept: one step, not steady growth.
        let born: Vec<(f64, u64)> = (0..=20).map(|t| (t as f64, if t >= 10 { 64 } else { 0 })).collect();
        assert_eq!(lasting_growth(&born, W), Some(0));
        // Growing only from 10 s on, 10 kB a second: half the steady rate of the middle half.
        let late: Vec<(f64, u64)> = (0..=20).map(|t| (t as f64, 10 * (t as u64).saturating_sub(10))).collect();
        assert_eq!(lasting_growth(&late, W), Some(0));
    }

    #[test]
    fn verdicts() {
        assert_eq!(Verdict::of(1 << 20, 1 << 20, 0), Verdict::Growth);
        // 573 MiB mapped, 541 MiB unmapped, nothing grown: a working set.
        assert_eq!(Verdict::of(0, 573 << 20, 541 << 20), Verdict::WorkingSet);
        assert_eq!(Verdict::of(0, 4 << 20, 0), Verdict::Held);
        // A stack that leaks one block in three is growth.
        assert_eq!(Verdict::of(10 << 20, 30 << 20, 20 << 20), Verdict::Growth);
    }

    #[test]
    fn history_keeps_changes_and_answers_per_sample() {
        let mut h = History::default();
        let stacks = |v: &[(u32, u64)]| v.iter().copied().collect::<BTreeMap<u32, u64>>();
        h.push(0.0, [(0x1000, 0x3000, 8), (0x9000, 0xa000, 4)].into_iter(), &stacks(&[(1, 4096)]));
        // The first region grows downwards (merged with a new mapping below it); the second is gone.
        h.push(1.0, [(0x0000, 0x3000, 12)].into_iter(), &stacks(&[(1, 8192), (2, 4096)]));
        h.push(2.0, [(0x0000, 0x3000, 12)].into_iter(), &stacks(&[(2, 4096)]));
        // The second region comes back as it was.
        h.push(3.0, [(0x0000, 0x3000, 12), (0x9000, 0xa000, 4)].into_iter(), &stacks(&[(2, 4096)]));
        assert_eq!(h.region_series(&[(0x0000, 0x3000)]), [vec![8, 12, 12, 12]]);
        assert_eq!(h.region_series(&[(0x9000, 0xa000)]), [vec![4, 0, 0, 4]]);
        assert_eq!(h.stack_series(1), [4096, 8192, 0, 0]);
        assert_eq!(h.stack_series(2), [0, 4096, 4096, 4096]);
        assert_eq!(h.stack_series(7), [0, 0, 0, 0]);
        assert_eq!(h.totals(), [12, 12, 12, 16]);
        // Only changes are kept (a new region, two gone, one back): the first sample is not copied.
        assert_eq!(h.regions.values().map(Vec::len).sum::<usize>(), 4);
    }

    /// A history that keeps 64 samples of 1,000: merged pairs, each region and stack at the smaller of its two
    /// values, at the earlier time; what it answers is what the samples kept whole answer, merged the same way.
    #[test]
    fn a_bounded_history_merges_its_older_samples() {
        let (mut h, mut whole) = (History::bounded(64), Vec::new());
        for k in 0..1000u64 {
            // A region that grows a page a sample, one that comes and goes, a stack that grows and churns.
            let mut sample = vec![(0x1000, 0x2000 + k * 0x1000, 4 + 4 * k)];
            if k % 3 != 1 {
                sample.push((0x90_0000, 0x91_0000, 8 + k % 5));
            }
            let stacks: BTreeMap<u32, u64> = [(1, 4096 * k + (k % 2) * 65536)].into_iter().collect();
            h.push(k as f64, sample.clone().into_iter(), &stacks);
            whole.push((k as f64, sample, 4096 * k + (k % 2) * 65536));
        }
        assert!(h.times.len() < 64 && h.times.len() >= 32, "{}", h.times.len());
        // Each kept sample stands for a run of samples kept whole: its time the run's first, its values the least.
        let mut runs: Vec<&[(f64, Vec<SampledRegion>, u64)]> = Vec::new();
        let mut rest = &whole[..];
        for (i, &t) in h.times.iter().enumerate() {
            let next = h.times.get(i + 1).copied().unwrap_or(f64::INFINITY);
            let len = rest.iter().take_while(|s| s.0 < next).count();
            assert_eq!(rest[0].0, t);
            runs.push(&rest[..len]);
            rest = &rest[len..];
        }
        assert!(rest.is_empty());
        let least = |run: &[(f64, Vec<SampledRegion>, u64)], start: u64| -> u64 {
            run.iter().map(|s| s.1.iter().find(|r| r.0 == start).map_or(0, |r| r.2)).min().unwrap()
        };
        let grows: Vec<u64> = runs.iter().map(|r| least(r, 0x1000)).collect();
        assert_eq!(h.region_series(&[(0x1000, 0x2000)])[0], grows);
        let comes: Vec<u64> = runs.iter().map(|r| least(r, 0x90_0000)).collect();
        assert_eq!(h.region_series(&[(0x90_0000, 0x91_0000)])[0], comes);
        let stack: Vec<u64> = runs.iter().map(|r| r.iter().map(|s| s.2).min().unwrap()).collect();
        assert_eq!(h.stack_series(1), stack);
        let totals: Vec<u64> = grows.iter().zip(&comes).map(|(a, b)| a + b).collect();
        assert_eq!(h.totals(), totals);
        // The latest samples are whole (none merged since the last halving), and the rate is still the truth.
        assert_eq!(h.times.last(), Some(&999.0));
        let t = crate::analysis::trend::trend_of(&h.times, &grows, 1024.0, 4096).unwrap();
        assert!((t.per_sec - 4096.0).abs() < 1.0, "{t:?}");
    }

    /// Regions appearing, going, growing and changing between samples, some samples listed out of order or
    /// with a stale copy of a region before it: each sample reads back as pushed, and the series are those of the
    /// samples kept whole.
    #[test]
    fn history_answers_as_whole_samples_do() {
        // xorshift64: varied and the same every run.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        // Slots 64 KiB apart, each with a second start half way; no region reaches the next start.
        let mut now: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for slot in 0..40u64 {
            if next(2) == 0 {
                now.insert(slot << 16, ((slot << 16) + 0x1000, 4));
            }
        }
        let (mut h, mut whole) = (History::default(), Vec::new());
        for k in 0..30 {
            for _ in 0..if k > 0 { next(12) } else { 0 } {
                let start = (next(40) << 16) + next(2) * 0x8000;
                match next(4) {
                    0 => {
                        now.remove(&start);
                    }
                    1 => {
                        now.insert(start, (start + (1 + next(4)) * 0x1000, next(64)));
                    }
                    2 => now.entry(start).or_insert((start + 0x1000, 4)).1 += 4,
                    _ => {}
                }
            }
            let mut sample: Vec<SampledRegion> = now.iter().map(|(&s, &(e, kb))| (s, e, kb)).collect();
            whole.push(sample.clone());
            if k % 4 == 3 {
                sample.reverse();
                if let Some(&(s, e, kb)) = sample.last() {
                    sample.insert(0, (s, e + 0x1000, kb + 1));
                }
            }
            h.push(k as f64, sample.into_iter(), &BTreeMap::new());
        }
        for (k, sample) in whole.iter().enumerate() {
            let back: Vec<SampledRegion> = h.regions_at(k as u32).map(|(s, r)| (s, r.end, r.rss_kb)).collect();
            assert_eq!(&back, sample, "sample {k}");
        }
        // Ranges over parts of several slots: each region overlaps one range at most.
        let ranges: Vec<(u64, u64)> = (0..10u64).map(|i| ((i << 18) + 0x2000, (i << 18) + 0x30000)).collect();
        let whole_series: Vec<Vec<u64>> = ranges
            .iter()
            .map(|&(a, b)| whole.iter().map(|s| s.iter().filter(|r| r.0 < b && a < r.1).map(|r| r.2).sum()).collect())
            .collect();
        assert_eq!(h.region_series(&ranges), whole_series);
        let totals: Vec<u64> = whole.iter().map(|s| s.iter().map(|r| r.2).sum()).collect();
        assert_eq!(h.totals(), totals);
        assert!(whole_series.iter().flatten().any(|&kb| kb > 0));
        // Kept by change: far fewer entries than the samples after the first hold.
        let kept: usize = h.regions.values().map(Vec::len).sum();
        assert!(kept * 3 < whole.iter().skip(1).map(Vec::len).sum::<usize>(), "{kept}");
    }
}
