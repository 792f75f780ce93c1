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

    /// The same in MiB per minute, as every output shows it.
    pub fn mib_per_min(&self, bytes: u64) -> f64 {
        self.per_min(bytes) / (1u64 << 20) as f64
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
}

/// A region of one sample: `(start, end, Rss+Swap kB)`.
pub type SampledRegion = (u64, u64, u64);

impl History {
    /// Adds a sample taken at `time`: its anonymous regions and the bytes each stack holds then.
    pub fn push(&mut self, time: f64, regions: impl Iterator<Item = SampledRegion>, stacks: &BTreeMap<u32, u64>) {
        let k = self.times.len() as u32;
        self.times.push(time);
        if k == 0 {
            self.base = regions.collect();
            self.base.sort_unstable();
        } else {
            let mut seen = std::collections::HashSet::new();
            for (start, end, rss_kb) in regions {
                seen.insert(start);
                let now = Some(Kept { end, rss_kb });
                if self.current(start) != now {
                    self.regions.entry(start).or_default().push((k, now));
                }
            }
            let base_starts = self.base.iter().map(|r| r.0);
            let gone: Vec<u64> = base_starts
                .chain(self.regions.keys().copied())
                .filter(|s| !seen.contains(s) && self.current(*s).is_some())
                .collect();
            for start in gone {
                self.regions.entry(start).or_default().push((k, None));
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
    }

    /// The first sample's region at `start`.
    fn in_base(&self, start: u64) -> Option<Kept> {
        let i = self.base.binary_search_by_key(&start, |r| r.0).ok()?;
        self.base.get(i).map(|&(_, end, rss_kb)| Kept { end, rss_kb })
    }

    /// The region at `start` as the last sample left it.
    fn current(&self, start: u64) -> Option<Kept> {
        match self.regions.get(&start).and_then(|h| h.last()) {
            Some(&(_, r)) => r,
            None => self.in_base(start),
        }
    }

    /// The region at `start` in sample `k`.
    fn at(&self, start: u64, k: u32) -> Option<Kept> {
        let h = self.regions.get(&start).map(Vec::as_slice).unwrap_or_default();
        let i = h.partition_point(|x| x.0 <= k);
        match i.checked_sub(1).and_then(|i| h.get(i)) {
            Some(&(_, r)) => r,
            None => self.in_base(start),
        }
    }

    /// The regions of sample `k`, sorted by address.
    fn regions_at(&self, k: u32) -> Vec<SampledRegion> {
        let mut starts: Vec<u64> = self.base.iter().map(|r| r.0).collect();
        starts.extend(self.regions.keys().copied().filter(|s| self.in_base(*s).is_none()));
        starts.sort_unstable();
        starts.into_iter().filter_map(|s| self.at(s, k).map(|r| (s, r.end, r.rss_kb))).collect()
    }

    /// For each of `regions` (sorted by address), its Rss+Swap at every sample: the regions of that sample it
    /// overlaps most count toward it, as between two samples (regions merge and split as they grow).
    pub fn region_series(&self, regions: &[(u64, u64)]) -> Vec<Vec<u64>> {
        let mut out = vec![Vec::with_capacity(self.times.len()); regions.len()];
        for k in 0..self.times.len() as u32 {
            let mut got = vec![0u64; regions.len()];
            for (s, e, kb) in self.regions_at(k) {
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
            for (series, v) in out.iter_mut().zip(got) {
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
        // Only changes are kept (a new region, two gone, one back): the first sample is not copied.
        assert_eq!(h.regions.values().map(Vec::len).sum::<usize>(), 4);
    }
}
