//! `--malloc`: the heap by stack, estimated from sampled allocations. Each byte allocated was sampled with
//! probability 1/R (R: `--malloc-every`), so a sampled block of S bytes, sampled with probability
//! p = 1 - exp(-S/R), stands for S/p bytes ([`crate::x86::alloc::weight`]); the sum over a stack's samples is an
//! unbiased estimate of what it allocated, and over those not freed yet, of what it holds. The variance of such a
//! sum is estimated from the same samples as the sum of (S/p)^2 (1 - p): its square root is the standard error
//! shown with each figure (about sqrt(R x bytes) for small blocks; nothing for blocks much larger than R, always
//! sampled).

use crate::analysis::correlate::StackId;
use crate::model::event::Event;
use crate::x86::alloc::{AllocFn, weight};
use std::collections::HashMap;

/// What one stack's samples say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Sampled allocations, and those whose block was not freed by the end.
    pub samples: u64,
    pub live_samples: u64,
    /// Estimated bytes allocated, and still in use, with their variances.
    pub allocated: f64,
    pub allocated_var: f64,
    pub in_use: f64,
    pub in_use_var: f64,
    /// Bytes of the sampled blocks themselves (not scaled), allocated and still in use.
    pub sampled_bytes: u64,
    pub live_bytes: u64,
    /// Estimated blocks allocated and still in use (each sample stands for 1/p blocks of its size).
    pub objects: f64,
    pub live_objects: f64,
}

impl Tally {
    /// Standard errors of the two estimates.
    pub fn allocated_err(&self) -> f64 {
        self.allocated_var.sqrt()
    }
    pub fn in_use_err(&self) -> f64 {
        self.in_use_var.sqrt()
    }
}

/// A sampled block not freed yet.
#[derive(Debug, Clone, Copy)]
struct Live {
    stack: StackId,
    size: u64,
    weight: f64,
    var: f64,
    objects: f64,
}

/// The samples of a trace.
#[derive(Debug, Default)]
pub struct HeapSamples {
    /// R, the mean bytes between samples (0: `--malloc` was not asked).
    pub every: u64,
    live: HashMap<u64, Live>,
    tallies: HashMap<StackId, Tally>,
    /// Frees of sampled blocks, and sampled blocks whose address came back before its free was seen (counted freed).
    pub frees: u64,
    pub reused: u64,
}

/// The allocation function of a `--malloc` event (`libc.so.6:malloc`).
pub fn alloc_fn(ev: &Event) -> Option<AllocFn> {
    let label = ev.func.as_deref()?;
    AllocFn::of(label.rsplit(':').next()?)
}

impl HeapSamples {
    pub fn new(every: u64) -> HeapSamples {
        HeapSamples { every, ..HeapSamples::default() }
    }

    /// One event of an allocation function `f`: a sampled allocation (its block in `ret`) made at `stack`, or the
    /// free of a sampled block (`free`'s first argument).
    pub fn event(&mut self, ev: &Event, f: AllocFn, stack: StackId) {
        if f == AllocFn::Free {
            self.free(ev.args[0]);
            return;
        }
        let Some(block) = ev.ret.filter(|&b| b != 0) else { return };
        let size = f.size([ev.args[0], ev.args[1], ev.args[2]]);
        let w = weight(size, self.every);
        let p = if w > 0.0 { size as f64 / w } else { 1.0 };
        let var = w * w * (1.0 - p).max(0.0);
        if self.free(block) {
            self.reused += 1;
            self.frees -= 1;
        }
        let t = self.tallies.entry(stack).or_default();
        t.samples += 1;
        t.live_samples += 1;
        t.allocated += w;
        t.allocated_var += var;
        t.in_use += w;
        t.in_use_var += var;
        t.sampled_bytes += size;
        t.live_bytes += size;
        let objects = if p > 0.0 { 1.0 / p } else { 0.0 };
        t.objects += objects;
        t.live_objects += objects;
        self.live.insert(block, Live { stack, size, weight: w, var, objects });
    }

    /// The free of `block`: whether it was a sampled one.
    fn free(&mut self, block: u64) -> bool {
        let Some(l) = self.live.remove(&block) else { return false };
        self.frees += 1;
        if let Some(t) = self.tallies.get_mut(&l.stack) {
            t.live_samples -= 1;
            t.in_use = (t.in_use - l.weight).max(0.0);
            t.in_use_var = (t.in_use_var - l.var).max(0.0);
            t.live_bytes -= l.size;
            t.live_objects = (t.live_objects - l.objects).max(0.0);
        }
        true
    }

    /// Every stack's tally, most in use first (then most allocated).
    pub fn by_stack(&self) -> Vec<(StackId, Tally)> {
        let mut v: Vec<(StackId, Tally)> = self.tallies.iter().map(|(&id, t)| (id, t.clone())).collect();
        v.sort_by(|a, b| {
            b.1.in_use.total_cmp(&a.1.in_use).then(b.1.allocated.total_cmp(&a.1.allocated)).then(a.0.cmp(&b.0))
        });
        v
    }

    /// All samples taken (allocations).
    pub fn samples(&self) -> u64 {
        self.tallies.values().map(|t| t.samples).sum()
    }

    /// The estimated bytes in use in all, with its standard error.
    pub fn in_use(&self) -> (f64, f64) {
        let (v, var) = self.tallies.values().fold((0.0, 0.0), |(a, b), t| (a + t.in_use, b + t.in_use_var));
        (v, var.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ev(func: &str, args: [u64; 3], ret: u64) -> Event {
        Event {
            time: 0.0,
            tid: 1,
            probe: None,
            func: Some(Arc::from(format!("libc.so.6:{func}"))),
            nr: 0,
            args: [args[0], args[1], args[2], 0, 0, 0],
            regs: Vec::new(),
            ret: Some(ret),
            ret_missing: None,
            capture: None,
            also: Vec::new(),
        }
    }

    #[test]
    fn samples_stand_for_their_share_and_frees_take_them_back() {
        let r = 512 << 10;
        let mut h = HeapSamples::new(r);
        let (a, b) = (StackId(1), StackId(2));
        for (i, e) in [ev("malloc", [64, 0, 0], 0x1000), ev("calloc", [4, 16, 0], 0x2000)].iter().enumerate() {
            h.event(e, alloc_fn(e).unwrap(), if i == 0 { a } else { b });
        }
        let big = ev("posix_memalign", [0x7ff0, 4096, 100 << 20], 0);
        // posix_memalign's block is what the stub read through its pointer: rax at the stop.
        let big = Event { ret: Some(0x9000), ..big };
        h.event(&big, AllocFn::PosixMemalign, b);
        let t = h.by_stack();
        assert_eq!(t[0].0, b, "the 100 MiB block first");
        assert!((t[0].1.in_use - (100u64 << 20) as f64 - weight(64, r)).abs() < 1.0);
        assert!((t[1].1.in_use - weight(64, r)).abs() < 1e-6);
        // A small sample's error is about its own weight; a block far larger than R has none.
        assert!((t[1].1.in_use_err() - (r as f64)).abs() < 1e3, "{}", t[1].1.in_use_err());
        let free = ev("free", [0x1000, 0, 0], 0);
        h.event(&free, AllocFn::Free, StackId(9));
        let gone = ev("free", [0x5555, 0, 0], 0);
        h.event(&gone, AllocFn::Free, StackId(9));
        let t: HashMap<StackId, Tally> = h.by_stack().into_iter().collect();
        assert_eq!((t[&a].in_use, t[&a].live_samples, t[&a].samples), (0.0, 0, 1));
        assert!(t[&a].allocated > 0.0);
        assert_eq!(h.frees, 1, "an unsampled block's free is no sample's");
        // A block whose address comes back before its free was seen counts as freed.
        h.event(&ev("malloc", [64, 0, 0], 0x2000), AllocFn::Malloc, a);
        let t: HashMap<StackId, Tally> = h.by_stack().into_iter().collect();
        assert_eq!((t[&a].live_samples, t[&b].live_samples, h.reused), (1, 1, 1));
        assert_eq!(h.samples(), 4);
    }
}
