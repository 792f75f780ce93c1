//! `--faults`: growth that no call explains, charged to sampled page faults. A growing region's resident growth
//! outside the ranges traced calls mapped (pages first touched in memory committed before the trace, an arena's
//! reuse of what it trimmed) made no call at all; the thread that first touched each page took a page fault there.
//! Every `every`-th fault of each thread (more apart when faults are many: see the tracer's rate bound) is sampled
//! with its stack, and stands for the faults its thread took since its previous sample; a region's unexplained
//! growth is split among the stacks of the samples that fell in it (outside traced ranges), in proportion to the
//! faults they stand for: a share, not an exact count (a fault can also be a copy-on-write or a swap-in; a huge
//! page is one fault for 2 MiB).

use crate::analysis::correlate::StackId;

/// The samples of the trace's window.
#[derive(Default)]
pub struct FaultSamples {
    /// The sampling period in faults (0: not sampled).
    pub every: u64,
    /// (faulting address, stack, the faults it stands for).
    samples: Vec<(u64, StackId, u64)>,
}

/// What the samples say of the growing regions: the stacks they charge, most first.
#[derive(Debug, Default, Clone)]
pub struct Charged {
    pub stacks: Vec<FaultStack>,
    /// Samples in all.
    pub samples: u64,
    /// Samples in growing regions, outside the ranges traced calls mapped (the ones that charge).
    pub charging: u64,
    /// Per growing region (the report's order): its samples that charge.
    pub region_samples: Vec<u64>,
}

#[derive(Debug, Clone)]
pub struct FaultStack {
    pub id: StackId,
    /// Its samples that charge.
    pub samples: u64,
    /// The growth charged to it, in KiB.
    pub kb: u64,
}

impl FaultSamples {
    pub fn new(every: u64) -> FaultSamples {
        FaultSamples { every, samples: Vec::new() }
    }

    /// A sample at `addr` standing for `weight` faults (0, as from a recording before weights: `every`).
    pub fn event(&mut self, addr: u64, id: StackId, weight: u64) {
        let weight = if weight == 0 { self.every.max(1) } else { weight };
        self.samples.push((addr, id, weight));
    }

    /// Charges each region's unexplained growth (`regions`: start, end, KiB) to the stacks of the samples in it
    /// that are not inside `traced` (sorted, disjoint ranges that traced calls mapped).
    pub fn charge(&self, regions: &[(u64, u64, u64)], traced: &[(u64, u64)]) -> Charged {
        let is_traced = |a: u64| {
            let i = traced.partition_point(|r| r.1 <= a);
            traced.get(i).is_some_and(|r| r.0 <= a)
        };
        let mut per_region: Vec<Vec<(StackId, u64)>> = vec![Vec::new(); regions.len()];
        for &(addr, id, weight) in &self.samples {
            if is_traced(addr) {
                continue;
            }
            if let Some(i) = regions.iter().position(|r| r.0 <= addr && addr < r.1) {
                per_region[i].push((id, weight));
            }
        }
        let mut by: std::collections::BTreeMap<StackId, (u64, f64)> = Default::default();
        for (samples, r) in per_region.iter().zip(regions) {
            let faults: u64 = samples.iter().map(|s| s.1).sum();
            let per_fault = r.2 as f64 / faults.max(1) as f64;
            for &(id, weight) in samples {
                let e = by.entry(id).or_default();
                e.0 += 1;
                e.1 += per_fault * weight as f64;
            }
        }
        let mut stacks: Vec<FaultStack> =
            by.into_iter().map(|(id, (samples, kb))| FaultStack { id, samples, kb: kb.round() as u64 }).collect();
        stacks.sort_by(|a, b| b.kb.cmp(&a.kb).then(b.samples.cmp(&a.samples)).then(a.id.cmp(&b.id)));
        let region_samples: Vec<u64> = per_region.iter().map(|v| v.len() as u64).collect();
        Charged { stacks, samples: self.samples.len() as u64, charging: region_samples.iter().sum(), region_samples }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_split_by_its_samples_outside_traced_ranges() {
        let mut f = FaultSamples::new(16);
        let (a, b, c) = (StackId(1), StackId(2), StackId(3));
        // Region 0x1000..0x9000 grew 300 KiB: two samples of a, one of b there; one of c inside a traced range.
        for (addr, id) in [(0x1000, a), (0x2000, a), (0x3000, b), (0x5000, c), (0x20000, c)] {
            f.event(addr, id, 0);
        }
        let got = f.charge(&[(0x1000, 0x9000, 300), (0x10000, 0x11000, 50)], &[(0x4000, 0x6000)]);
        assert_eq!((got.samples, got.charging, got.region_samples.clone()), (5, 3, vec![3, 0]));
        let by: Vec<(StackId, u64, u64)> = got.stacks.iter().map(|s| (s.id, s.samples, s.kb)).collect();
        assert_eq!(by, vec![(a, 2, 200), (b, 1, 100)]);
        // A sample taken at a longer period stands for more faults.
        let mut f = FaultSamples::new(16);
        f.event(0x1000, a, 16);
        f.event(0x2000, b, 48);
        let got = f.charge(&[(0x1000, 0x9000, 400)], &[]);
        let by: Vec<(StackId, u64)> = got.stacks.iter().map(|s| (s.id, s.kb)).collect();
        assert_eq!(by, vec![(b, 300), (a, 100)]);
    }
}
