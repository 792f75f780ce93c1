//! Samples of the target's regions for the leak model, cheap enough to take every second from a process with tens
//! of thousands of mappings. The whole smaps (the Rss and Swap of every region) is read only before the trace and
//! after it: reading it takes the target's mmap lock, a page of text at a time, so the target's own mmap calls
//! wait (measured with 30,000 mappings: 21 MB of text, up to 19 ms for one call). In between, a sample reads
//! /proc/PID/maps (a fourteenth of the text, and no wait on recent kernels) and weighs with pagemap only the
//! anonymous regions that are new or changed since the last sample, or that hold ranges of traced calls; every
//! other region keeps the Rss+Swap it had.
//!
//! During a live trace the samples are taken by a thread of their own ([`Periodic`]), each announced in the
//! tracer's queue just before it is read: the analysis weighs it against the events queued before it began, all of
//! which it shows, rather than against a model of seconds ago (the analysis may be that far behind). (Announced
//! after the read, a call queued during the read came before a sample that did not show it, and the leak model
//! dropped its bytes.) The thread ends with the trace, so no sample is of the process after detach.

use crate::analysis::leaks::parse_resident;
use crate::model::smaps::{Span, carry_over, parse_maps_span};
use crate::os::{Tid, pagemap::Pagemap, procfs};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most pages whose pagemap entries one sample reads (1 GiB of address space, 2 MB of entries); a region past
/// that keeps the Rss+Swap of its start in the last sample.
const PAGES_PER_SAMPLE: u64 = 1 << 18;

pub struct Sampler {
    pid: Tid,
    last: Vec<Span>,
    pagemap: Option<Pagemap>,
}

impl Sampler {
    /// `baseline`: the sample read from the whole smaps before the trace.
    pub fn new(pid: Tid, baseline: &[Span]) -> Sampler {
        Sampler { pid, last: baseline.to_vec(), pagemap: Pagemap::open(pid).ok() }
    }

    /// The regions now; `traced`: the ranges the leak model holds for traced calls, sorted. Empty when maps
    /// cannot be read (the target is gone), which the leak model ignores.
    pub fn sample(&mut self, traced: &[(u64, u64)]) -> Vec<Span> {
        let mut now = Vec::with_capacity(self.last.len() + 16);
        let read = procfs::for_each_maps_line(self.pid, |l| now.extend(parse_maps_span(l)));
        if read.is_err() {
            return Vec::new();
        }
        let mut budget = PAGES_PER_SAMPLE;
        let last = std::mem::take(&mut self.last);
        for i in carry_over(&last, &mut now, traced) {
            let Some(s) = now.get_mut(i) else { continue };
            let pages = (s.end - s.start) / 4096;
            let weighed = self.pagemap.as_ref().filter(|_| pages <= budget).and_then(|pm| {
                let entries = pm.read_entries(s.start, s.end, pages).ok()?;
                Some((entries.len() as u64, parse_resident(&entries) / 1024))
            });
            match weighed {
                Some((read, kb)) => {
                    budget -= read.min(budget);
                    s.rss_swap = kb;
                }
                None => {
                    let p = last.partition_point(|p| p.start < s.start);
                    s.rss_swap = last.get(p).filter(|p| p.start == s.start).map_or(0, |p| p.rss_swap);
                }
            }
        }
        self.last = now.clone();
        now
    }
}

/// The ranges the leak model holds for traced calls, as the analysis last published them (after each sample).
pub type Traced = Arc<Mutex<Vec<(u64, u64)>>>;

/// A [`Sampler`] on a timer in a thread of its own; dropping it ends the thread (within one sample and a send).
pub struct Periodic {
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Periodic {
    /// Samples every `every` from now on until `ended` is set: `announce` is given the sample's time since `epoch`
    /// and where its regions will come, before they are read; it says whether the sample was queued (else it is
    /// not read), or `Break` once nobody takes samples any more. `cpus`: where the thread may run.
    pub fn start(
        mut sampler: Sampler,
        every: Duration,
        epoch: Instant,
        traced: Traced,
        ended: Arc<AtomicBool>,
        cpus: Option<Vec<usize>>,
        mut announce: impl FnMut(f64, crossbeam_channel::Receiver<Vec<Span>>) -> ControlFlow<(), bool> + Send + 'static,
    ) -> std::io::Result<Periodic> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new().name("syscatch-sample".into()).spawn(move || {
            if let Some(cpus) = cpus {
                let _ = crate::os::sched::set_affinity(&cpus);
            }
            crate::os::sched::batch();
            let mut next = Instant::now() + every;
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(next.saturating_duration_since(Instant::now()))
            {
                let (regions, coming) = crossbeam_channel::bounded(1);
                // The time first: a sample taken before the trace ended is of a time before its end.
                let time = epoch.elapsed().as_secs_f64();
                if ended.load(Ordering::SeqCst) {
                    break;
                }
                match announce(time, coming) {
                    ControlFlow::Break(()) => break,
                    ControlFlow::Continue(false) => {}
                    ControlFlow::Continue(true) => {
                        let ranges = traced.lock().map(|t| t.clone()).unwrap_or_default();
                        let _ = regions.send(sampler.sample(&ranges));
                    }
                }
                next = Instant::now() + every;
            }
        })?;
        Ok(Periodic { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our own process: a new mapping is weighed with pagemap, and so is a traced one whose pages were touched
    /// since (other tests may map memory meanwhile: only our mapping is looked at).
    #[test]
    fn new_and_traced_regions_are_weighed_afresh() {
        let pid = std::process::id() as Tid;
        let baseline: Vec<Span> = crate::live::memory::read_regions(pid).unwrap().iter().map(Span::of).collect();
        assert!(!baseline.is_empty());
        let mut sampler = Sampler::new(pid, &baseline);
        // Far above glibc's mmap threshold: a mapping of its own, zero-filled by the kernel, so untouched.
        let len = 16 << 20;
        let mut v = vec![0u8; len];
        let (start, end) = (v.as_ptr() as u64, v.as_ptr() as u64 + len as u64);
        let of = |spans: &[Span]| *spans.iter().find(|s| s.start <= start && end <= s.end).expect("the mapping");
        let first = of(&sampler.sample(&[]));
        // Our mapping is untouched; the region around it may have merged with a neighbour other tests touched.
        let others_kb = (first.end - first.start - len as u64) >> 10;
        assert!(first.anon && first.rss_swap < others_kb + 1024, "{first:?}");
        for i in (0..len).step_by(4096) {
            v[i] = 1;
        }
        let traced = [(start & !4095, end)];
        let touched = of(&sampler.sample(&traced));
        assert!(touched.rss_swap >= (len as u64 >> 10) - 4, "{touched:?}");
        assert!(sampler.sample(&[]).iter().any(|s| s.start <= start && end <= s.end), "still there");
        drop(v);
    }
}
