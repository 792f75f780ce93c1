//! The leak report rendered: growing regions with the share on traced stacks, leak candidates by bytes still
//! mapped, as text and JSON Lines (after the findings), and as folded stacks, a flame graph and a pprof profile.

use crate::analysis::correlate::StackId;
use crate::analysis::leaks::{LeakReport, Weight};
use crate::model::stack::{Frame, Stack};
use crate::report::json::{frame_json, hex, line};
use crate::report::text::{frame_line, frame_text};
use serde_json::json;
use std::io::{self, Write};

/// Leak candidates and growing regions shown in the text report (a screenful or two; all in --json).
const TEXT_LEAKS: usize = 5;
const TEXT_REGIONS: usize = 8;
const TEXT_CHURN: usize = 3;

/// The innermost frame worth naming: the first real (not inlined) frame outside libc (its `syscall()` wrapper,
/// its `mmap`).
pub(crate) fn caller(stack: Option<&Stack>) -> String {
    let Some(stack) = stack else { return "(no stack)".into() };
    let f = stack.frames.iter().find(|f| !f.in_libc() && !f.inlined).or(stack.frames.first());
    f.map(frame_text).unwrap_or_else(|| "(no stack)".into())
}

const MIB: f64 = (1u64 << 20) as f64;

fn kib(bytes: u64) -> String {
    format!("{} KiB", bytes / 1024)
}

/// Bytes for a reader: KiB, or MiB from 10 MiB on.
pub fn size(bytes: u64) -> String {
    if bytes >= 10 << 20 { format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64) } else { kib(bytes) }
}

/// What a candidate's memory did, in one phrase.
pub(crate) fn verdict_text(c: &crate::analysis::leaks::Candidate) -> String {
    use crate::analysis::growth::Verdict;
    let s = &c.stats;
    let grows = crate::report::findings::grows(c.rate);
    match c.verdict {
        Verdict::Growth => format!("{grows}; holds {}", size(s.still_mapped)),
        Verdict::WorkingSet if c.growth > 0 => format!(
            "working set: mapped {}, unmapped {}, holds {}; {grows}",
            size(s.mapped),
            size(s.unmapped),
            size(s.still_mapped),
        ),
        Verdict::WorkingSet => format!(
            "working set, not growth: mapped {}, unmapped {}, holds {}",
            size(s.mapped),
            size(s.unmapped),
            size(s.still_mapped)
        ),
        Verdict::Held => "held, not growth in this window (mapped in its first or last quarter)".into(),
    }
}

impl LeakReport<'_> {
    pub fn write_text(&self, w: &mut dyn Write) -> io::Result<()> {
        if let Some(d) = &self.diagnosis {
            crate::report::findings::write_text(d, self, w)?;
        }
        writeln!(w, "\nGrowing regions (anonymous memory whose Rss+Swap grew during the trace, largest first):")?;
        if self.growing.is_empty() {
            writeln!(w, "  none")?;
        }
        let shown_regions = if self.diagnosis.is_some() { TEXT_REGIONS } else { usize::MAX };
        if self.growing.len() > shown_regions {
            let rest: u64 = self.growing.iter().skip(shown_regions).map(|g| g.growth_kb).sum();
            writeln!(
                w,
                "  (the {shown_regions} that grew most of {}; the other {} KiB are in --json)",
                self.growing.len(),
                rest
            )?;
        }
        let charged = self.charged();
        for (i, g) in self.growing.iter().enumerate().take(shown_regions) {
            let how = if g.new { "new" } else { "grew" };
            writeln!(
                w,
                "  {:#x}-{:#x}  {how} +{} KiB (Rss+Swap now {} KiB); {}",
                g.start,
                g.end,
                g.growth_kb,
                g.rss_swap_kb,
                crate::report::findings::grows(g.rate)
            )?;
            if self.weighed {
                let (traced, rest) = self.region_split(i);
                let why = if g.new {
                    "the region was born during the trace, so a call the trace did not attribute made it: a path not \
                     watched (see Watched; ld.so maps libraries with its own mmap), an event lost (see the summary), \
                     or pages the target mapped or unmapped after the trace, while it was read"
                } else {
                    "pages of memory mapped before the trace or by untraced calls; the target ran on while it was read"
                };
                // Where nothing is elsewhere, there is nothing to explain; pages back where madvise had given them
                // back made no call, and are said so.
                let regrown = self.region_regrown_kb(i);
                let others = rest - regrown;
                let regrown_text = format!(
                    "{regrown} KiB regrown where madvise had given pages back (no call brings them back: an allocator \
                     reusing memory it trimmed)"
                );
                match (others, regrown) {
                    (0, 0) => writeln!(w, "      {traced} KiB resident on traced stacks")?,
                    (0, _) => writeln!(w, "      {traced} KiB resident on traced stacks; {regrown_text}")?,
                    (_, 0) => {
                        writeln!(w, "      {traced} KiB resident on traced stacks; {rest} KiB elsewhere ({why})")?
                    }
                    _ => writeln!(
                        w,
                        "      {traced} KiB resident on traced stacks; {regrown_text}; {others} KiB elsewhere ({why})"
                    )?,
                }
            }
            if g.created_before_trace() {
                writeln!(w, "      mapped before the trace started (or by a call that was not traced)")?;
            }
            if let Some(a) = self.region_allocator(g) {
                writeln!(w, "      the allocator's ({a}): every traced mapping of it was made inside its code")?;
            }
            if let Some(n) = charged.as_ref().and_then(|c| c.region_samples.get(i)).filter(|&&n| n > 0) {
                writeln!(w, "      {n} page faults sampled there, outside traced ranges (see Page faults below)")?;
            }
            for s in &g.stacks {
                writeln!(
                    w,
                    "      {} calls, {} still mapped, from {}",
                    s.calls,
                    kib(s.still_mapped),
                    caller(self.stack(s.stack))
                )?;
            }
        }
        writeln!(
            w,
            "\nLeak candidates (stacks that still hold memory, by growth: what they mapped and kept in each middle \
             quarter of the trace; then by what they hold):"
        )?;
        if self.leaks.is_empty() {
            writeln!(w, "  none")?;
        }
        // A report is read from the top: a screenful of the largest; every stack is in --json and -o FILE.
        let shown = if self.diagnosis.is_some() { TEXT_LEAKS } else { usize::MAX };
        if self.leaks.len() > shown {
            writeln!(w, "  (the {shown} largest of {}; all of them with --json)", self.leaks.len())?;
        }
        for (rank, c) in self.leaks.iter().take(shown).enumerate() {
            let (id, s) = (&c.id, &c.stats);
            writeln!(w, "  #{} {}", rank + 1, verdict_text(c))?;
            writeln!(
                w,
                "      still mapped {}{} of {} mapped ({} unmapped, {} gone unseen); {} mmap, {} munmap, {} mremap, \
                 {}{} failed",
                kib(s.still_mapped),
                if self.weighed { format!(" ({} resident)", kib(self.resident_of(*id))) } else { String::new() },
                kib(s.mapped),
                kib(s.unmapped),
                kib(s.vanished),
                s.mmaps,
                s.munmaps,
                s.mremaps,
                [(s.brks, "sbrk"), (s.commits, "mprotect commit"), (s.returns, "madvise return")]
                    .iter()
                    .filter(|(n, _)| *n > 0)
                    .map(|(n, what)| format!("{n} {what}, "))
                    .collect::<String>(),
                s.failed
            )?;
            self.write_frames(*id, w)?;
        }
        let churn = self.churned();
        if !churn.is_empty() {
            writeln!(w, "\nWorking sets (stacks that mapped and unmapped again, and hold nothing now: not growth):")?;
            for c in churn.iter().take(TEXT_CHURN) {
                writeln!(
                    w,
                    "  mapped {} and unmapped {} in {} calls, from {}",
                    size(c.stats.mapped),
                    size(c.stats.unmapped),
                    c.stats.calls(),
                    caller(self.stack(c.id))
                )?;
            }
            if churn.len() > TEXT_CHURN {
                writeln!(w, "  ... and {} more in --json", churn.len() - TEXT_CHURN)?;
            }
        }
        if let Some(c) = &charged {
            self.write_faults_text(c, w)?;
        }
        if let Some(h) = self.samples {
            self.write_samples_text(h, w)?;
        }
        Ok(())
    }

    /// `--faults`' section: the stacks the growth no call explains is charged to.
    fn write_faults_text(&self, c: &crate::analysis::faults::Charged, w: &mut dyn Write) -> io::Result<()> {
        let every = self.faults.as_ref().map_or(0, |f| f.0.every);
        writeln!(
            w,
            "\nPage faults (one in {every} or more of each thread's, sampled with its stack; the growth of a region that \
             no traced call explains is shared among the stacks of the samples that fell in it, by the faults they \
             stand for): {} samples, {} of them in growing regions outside traced ranges",
            c.samples, c.charging
        )?;
        if c.stacks.is_empty() {
            writeln!(w, "  none charged (no sample fell in growth that no call explains)")?;
        }
        let shown = if self.diagnosis.is_some() { TEXT_LEAKS } else { usize::MAX };
        for (rank, s) in c.stacks.iter().take(shown).enumerate() {
            writeln!(w, "  #{} about {} KiB of growth, from {} samples", rank + 1, s.kb, s.samples)?;
            self.write_frames(s.id, w)?;
        }
        if c.stacks.len() > shown {
            writeln!(w, "  ... and {} more stacks in --json", c.stacks.len() - shown)?;
        }
        Ok(())
    }

    /// A stack's first 12 frames, a line each, and how many more.
    fn write_frames(&self, id: StackId, w: &mut dyn Write) -> io::Result<()> {
        let Some(stack) = self.stack(id) else { return Ok(()) };
        for f in stack.frames.iter().take(12) {
            writeln!(w, "      {}", frame_line(f))?;
        }
        if stack.frames.len() > 12 {
            writeln!(w, "      ... {} more frames", stack.frames.len() - 12)?;
        }
        Ok(())
    }

    /// `--malloc`'s section: the stacks that hold the most heap, by estimate, then those that allocated and freed.
    fn write_samples_text(&self, h: &crate::analysis::samples::HeapSamples, w: &mut dyn Write) -> io::Result<()> {
        let est = |v: f64, err: f64| format!("{} ± {}", size(v.round() as u64), size(err.round() as u64));
        let all = h.by_stack();
        let (in_use, err) = h.in_use();
        writeln!(
            w,
            "\nSampled allocations (malloc and the others, one sample per {} allocated on average; estimates ± one \
             standard error): {} samples, {} of them freed; in use {} in all",
            size(h.every),
            h.samples(),
            h.frees,
            est(in_use, err)
        )?;
        let holding: Vec<_> = all.iter().filter(|(_, t)| t.live_samples > 0).collect();
        if holding.is_empty() {
            writeln!(w, "  no sampled block is still in use")?;
        }
        let shown = if self.diagnosis.is_some() { TEXT_LEAKS } else { usize::MAX };
        for (rank, (id, t)) in holding.iter().take(shown).enumerate() {
            writeln!(
                w,
                "  #{} in use {}, from {} sampled blocks still in use; allocated {}, from {} samples",
                rank + 1,
                est(t.in_use, t.in_use_err()),
                t.live_samples,
                est(t.allocated, t.allocated_err()),
                t.samples
            )?;
            self.write_frames(*id, w)?;
        }
        if holding.len() > shown {
            writeln!(w, "  ... and {} more stacks in --json", holding.len() - shown)?;
        }
        let freed: Vec<_> = all.iter().filter(|(_, t)| t.live_samples == 0).collect();
        if !freed.is_empty() {
            writeln!(w, "  Allocated and freed again (nothing sampled still in use):")?;
            let mut freed = freed;
            freed.sort_by(|a, b| b.1.allocated.total_cmp(&a.1.allocated).then(a.0.cmp(&b.0)));
            for (id, t) in freed.iter().take(TEXT_CHURN) {
                writeln!(
                    w,
                    "    allocated {} ({} samples), from {}",
                    est(t.allocated, t.allocated_err()),
                    t.samples,
                    caller(self.stack(*id))
                )?;
            }
            if freed.len() > TEXT_CHURN {
                writeln!(w, "    ... and {} more in --json", freed.len() - TEXT_CHURN)?;
            }
        }
        Ok(())
    }

    /// Stacks that hold nothing but mapped memory during the trace, most bytes mapped first.
    pub(crate) fn churned(&self) -> Vec<&crate::analysis::leaks::Candidate> {
        let mut out: Vec<_> = self.quiet.iter().filter(|c| c.stats.mapped > 0).collect();
        out.sort_by(|a, b| b.stats.mapped.cmp(&a.stats.mapped).then(a.id.cmp(&b.id)));
        out
    }

    /// The allocator whose code made every traced mapping of growing region `g`, when one did (of those whose stack
    /// is known: a stack dropped while the analysis was behind tells nothing).
    fn region_allocator(&self, g: &crate::analysis::correlate::Growing) -> Option<&'static str> {
        let known = g.stacks.iter().filter_map(|s| self.stack(s.stack).filter(|st| !st.frames.is_empty()));
        let mut of = known.map(|st| st.allocator());
        let first = of.next()??;
        of.all(|a| a == Some(first)).then_some(first)
    }

    /// `region` and `leak` lines, in the same JSON Lines envelope as events.
    pub fn write_json(&self, w: &mut dyn Write) -> io::Result<()> {
        let frames = |id: StackId| self.stack(id).map(|s| s.frames.iter().map(frame_json).collect::<Vec<_>>());
        let charged = self.charged();
        for (i, g) in self.growing.iter().enumerate() {
            let (traced, rest) = self.region_split(i);
            let stacks: Vec<_> = g
                .stacks
                .iter()
                .map(|s| json!({"stack_id": s.stack.0, "calls": s.calls, "still_mapped": s.still_mapped}))
                .collect();
            line(
                &mut &mut *w,
                "region",
                json!({
                    "start": hex(g.start), "end": hex(g.end), "growth_kb": g.growth_kb, "lasting_kb": g.lasting_kb,
                    "lasting_mib_per_min": g.rate.map(|t| t.mib_per_min().0), "rate": g.rate.map(|t| t.json()),
                    "rss_swap_kb": g.rss_swap_kb,
                    "new": g.new, "before_trace": g.created_before_trace(), "stacks": stacks,
                    "traced_resident_kb": self.weighed.then_some(traced),
                    "remainder_kb": self.weighed.then_some(rest),
                    "regrown_kb": self.weighed.then(|| self.region_regrown_kb(i)),
                    "fault_samples": charged.as_ref().map(|c| c.region_samples.get(i).copied().unwrap_or(0)),
                    "allocator": self.region_allocator(g),
                }),
            )?;
        }
        for c in &self.leaks {
            let (id, s) = (&c.id, &c.stats);
            line(
                &mut &mut *w,
                "leak",
                json!({
                    "stack_id": id.0, "growth": c.growth, "growth_mib_per_min": c.rate.map(|t| t.mib_per_min().0),
                    "rate": c.rate.map(|t| t.json()),
                    "verdict": c.verdict.name(),
                    "still_mapped": s.still_mapped, "mapped": s.mapped, "unmapped": s.unmapped,
                    "resident": self.weighed.then(|| self.resident_of(*id)),
                    "vanished": s.vanished, "released": s.released, "mmaps": s.mmaps, "munmaps": s.munmaps,
                    "mremaps": s.mremaps, "brks": s.brks, "commits": s.commits, "returns": s.returns,
                    "failed": s.failed, "stack": frames(*id),
                }),
            )?;
        }
        for c in self.churned() {
            let s = &c.stats;
            line(
                &mut &mut *w,
                "working_set",
                json!({
                    "stack_id": c.id.0, "mapped": s.mapped, "unmapped": s.unmapped, "vanished": s.vanished,
                    "mmaps": s.mmaps, "munmaps": s.munmaps, "mremaps": s.mremaps, "brks": s.brks, "commits": s.commits,
                    "returns": s.returns, "failed": s.failed, "stack": frames(c.id),
                }),
            )?;
        }
        if let Some(h) = self.samples {
            for (id, t) in h.by_stack() {
                line(
                    &mut &mut *w,
                    "heap_sample",
                    json!({
                        "stack_id": id.0, "every": h.every, "in_use": t.in_use.round() as u64,
                        "in_use_err": t.in_use_err().round() as u64, "allocated": t.allocated.round() as u64,
                        "allocated_err": t.allocated_err().round() as u64, "samples": t.samples,
                        "live_samples": t.live_samples, "sampled_bytes": t.sampled_bytes, "live_bytes": t.live_bytes,
                        "stack": frames(id),
                    }),
                )?;
            }
        }
        if let Some(c) = charged {
            let every = self.faults.as_ref().map_or(0, |f| f.0.every);
            for s in &c.stacks {
                line(
                    &mut &mut *w,
                    "fault_stack",
                    json!({
                        "stack_id": s.id.0, "every": every, "samples": s.samples, "charged_kb": s.kb,
                        "stack": frames(s.id),
                    }),
                )?;
            }
        }
        let stacks: Vec<_> =
            self.series.stacks.iter().map(|(id, v)| json!({"stack_id": id.0, "still_mapped": v})).collect();
        let regions: Vec<_> = self
            .growing
            .iter()
            .zip(&self.series.regions)
            .map(|(g, v)| json!({"start": hex(g.start), "end": hex(g.end), "rss_swap_kb": v}))
            .collect();
        line(
            &mut &mut *w,
            "series",
            json!({
                "from": self.window.from, "to": self.window.to, "middle": self.window.middle(),
                "times": self.series.times, "anon_kb": self.series.total, "stacks": stacks, "regions": regions,
            }),
        )?;
        if let Some(d) = &self.diagnosis {
            crate::report::findings::write_json(d, self, w)?;
        }
        Ok(())
    }

    /// A candidate's weight.
    fn weigh(&self, c: &crate::analysis::leaks::Candidate, weight: Weight) -> u64 {
        match weight {
            Weight::Growth => c.growth,
            Weight::StillMapped => c.stats.still_mapped,
            Weight::Resident => self.resident_of(c.id),
            Weight::Mapped => c.stats.mapped,
            Weight::Calls => c.stats.calls(),
            Weight::Faults => 0,
        }
    }

    /// Collapsed stacks (`outer;...;inner weight`), for any flame graph tool: the leak candidates by `weight`, or
    /// with [`Weight::Faults`] the stacks of `--faults`' page faults by the growth charged to them.
    pub fn folded(&self, weight: Weight) -> Vec<String> {
        let line = |id: StackId, w: u64| {
            let names: Vec<String> = match self.stack(id) {
                Some(st) if !st.frames.is_empty() => st.frames.iter().rev().map(folded_name).collect(),
                _ => vec!["(no stack)".into()],
            };
            format!("{} {w}", names.join(";"))
        };
        let mut lines: Vec<String> = match weight {
            Weight::Faults => {
                let charged = self.charged().unwrap_or_default();
                charged.stacks.iter().filter(|s| s.kb > 0).map(|s| line(s.id, s.kb * 1024)).collect()
            }
            _ => self
                .leaks
                .iter()
                .filter(|c| self.weigh(c, weight) > 0)
                .map(|c| line(c.id, self.weigh(c, weight)))
                .collect(),
        };
        lines.sort();
        lines
    }

    /// A gzipped pprof profile: one sample per stack (values in [`crate::report::pprof::SAMPLE_TYPES`] order).
    pub fn pprof(&self, w: &mut dyn Write, duration_ns: u64) -> io::Result<()> {
        let samples: Vec<crate::report::pprof::Sample> = self
            .samples()
            .into_iter()
            .map(|(frames, values)| crate::report::pprof::Sample { frames, values, labels: &[] })
            .collect();
        crate::report::pprof::write(w, &samples, duration_ns)
    }

    /// `--heap-pprof`: the sampled allocations as a gzipped heap profile (values in
    /// [`crate::report::pprof::HEAP_TYPES`] order; a stack without frames, samples that lost their stack, as
    /// `(no stack)`).
    pub fn heap_pprof(&self, w: &mut dyn Write, duration_ns: u64) -> io::Result<()> {
        let Some(samples) = self.heap_samples() else {
            return crate::report::pprof::write_types(w, &[], &[], duration_ns);
        };
        let samples: Vec<crate::report::pprof::Sample> = samples
            .iter()
            .map(|(frames, values)| crate::report::pprof::Sample { frames, values: *values, labels: &[] })
            .collect();
        crate::report::pprof::write_types(w, &samples, &crate::report::pprof::HEAP_TYPES, duration_ns)
    }

    /// Each sampled stack's frames and its estimates in [`crate::report::pprof::HEAP_TYPES`] order (a stack
    /// without frames, samples that lost their stack, as `(no stack)`); `None` when nothing was sampled.
    pub fn heap_samples(&self) -> Option<Vec<(Vec<Frame>, [i64; 6])>> {
        let none = [Frame { function: Some("(no stack)".into()), ..Frame::default() }];
        let by = self.samples?.by_stack();
        let samples = by
            .iter()
            .map(|(id, t)| {
                let frames = self.stack(*id).map(|s| &s.frames[..]).filter(|f| !f.is_empty()).unwrap_or(&none);
                let v = |x: f64| x.round() as i64;
                (frames.to_vec(), [v(t.in_use), v(t.live_objects), v(t.allocated), v(t.objects), 0, 0])
            })
            .collect();
        Some(samples)
    }

    /// Each stack's frames and its values in [`crate::report::pprof::SAMPLE_TYPES`] order.
    pub fn samples(&self) -> Vec<(&[Frame], [i64; 6])> {
        const NONE: &[Frame] = &[];
        self.leaks
            .iter()
            .map(|c| {
                let frames = self.stack(c.id).map(|s| &s.frames[..]).unwrap_or(NONE);
                let values = [
                    c.growth as i64,
                    c.stats.still_mapped as i64,
                    self.resident_of(c.id) as i64,
                    c.stats.mmaps as i64,
                    c.stats.mapped as i64,
                    c.stats.calls() as i64,
                ];
                (frames, values)
            })
            .collect()
    }

    /// A flame graph of the stacks by `weight` (SVG).
    pub fn flamegraph(&self, w: &mut dyn Write, weight: Weight) -> io::Result<()> {
        flamegraph(&self.folded(weight), w, weight)
    }
}

/// A flame graph of collapsed stacks (see [`LeakReport::folded`]) weighed by `weight` (SVG).
pub fn flamegraph(lines: &[String], w: &mut dyn Write, weight: Weight) -> io::Result<()> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = match weight {
        Weight::Growth => "Growth: bytes mapped and kept in the middle of the trace, steadily, by stack",
        Weight::StillMapped => "Bytes still mapped, by the stack that mapped them",
        Weight::Resident => "Resident bytes still mapped, by the stack that mapped them",
        Weight::Mapped => "Bytes mapped during the trace, by stack",
        Weight::Calls => "Calls, by stack",
        Weight::Faults => "Growth no call explains, by the stacks of the sampled page faults (--faults)",
    }
    .into();
    opts.count_name = if weight == Weight::Calls { "calls" } else { "bytes" }.into();
    if lines.is_empty() {
        opts.title = format!("No {} on a traced stack (see --weight)", weight.name());
    }
    let placeholder = ["(nothing) 1".to_string()];
    let lines = if lines.is_empty() { &placeholder[..] } else { lines };
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
        .map_err(|e| io::Error::other(e.to_string()))
}

/// A frame's name in collapsed stacks: no `;` or spaces, which the format uses as separators.
fn folded_name(f: &Frame) -> String {
    let name = match (&f.function, &f.module) {
        (Some(func), _) if f.kind != crate::model::stack::FrameKind::Native => {
            let file = f.file.as_deref().map(crate::model::modules::file_name).unwrap_or("?");
            format!("{func} ({file}:{})", f.line.unwrap_or(0))
        }
        (Some(func), _) => func.clone(),
        (None, Some(m)) => format!("{m}+{:#x}", f.offset.unwrap_or(0)),
        (None, None) => format!("{:#x}", f.addr),
    };
    name.replace([';', ' '], "_")
}

/// `--fail-over RATE` (bytes per minute): the line to end with when the traced stacks grew faster.
pub fn gate(report: &LeakReport, limit: f64) -> Option<String> {
    let rate = report.traced_per_min();
    if rate <= limit {
        return None;
    }
    let top = report.leaks.first().map(|c| caller(report.stack(c.id))).unwrap_or_default();
    Some(format!(
        "the traced stacks grew {:.2} MiB/min, over --fail-over {:.2} MiB/min (first: {top}; the report above)",
        rate / MIB,
        limit / MIB
    ))
}
