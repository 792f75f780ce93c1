//! The leak report rendered: growing regions with the share on traced stacks, leak candidates by bytes still
//! mapped, as text and JSON Lines (after the findings), and as folded stacks, a flame graph and a pprof profile.

use crate::analysis::correlate::StackId;
use crate::analysis::leaks::LeakReport;
use crate::model::stack::{Frame, Stack};
use crate::report::json::{frame_json, hex, line};
use crate::report::text::{frame_line, frame_text};
use serde_json::json;
use std::io::{self, Write};

/// Leak candidates and growing regions shown in the text report (a screenful or two; all in --json).
const TEXT_LEAKS: usize = 5;
const TEXT_REGIONS: usize = 8;

/// The innermost frame worth naming: the first real (not inlined) frame outside libc's `syscall()` wrapper.
fn caller(stack: Option<&Stack>) -> String {
    let Some(stack) = stack else { return "(no stack)".into() };
    let f =
        stack.frames.iter().find(|f| f.function.as_deref() != Some("syscall") && !f.inlined).or(stack.frames.first());
    f.map(frame_text).unwrap_or_else(|| "(no stack)".into())
}

fn kib(bytes: u64) -> String {
    format!("{} KiB", bytes / 1024)
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
        for (i, g) in self.growing.iter().enumerate().take(shown_regions) {
            let how = if g.new { "new" } else { "grew" };
            writeln!(
                w,
                "  {:#x}-{:#x}  {how} +{} KiB (Rss+Swap now {} KiB)",
                g.start, g.end, g.growth_kb, g.rss_swap_kb
            )?;
            if self.weighed {
                let (traced, rest) = self.region_split(i);
                writeln!(
                    w,
                    "      {traced} KiB resident on traced stacks; {rest} KiB elsewhere (pages of memory mapped before \
                     the trace or by untraced calls; the target ran on while it was read)"
                )?;
            }
            if g.created_before_trace() {
                writeln!(w, "      mapped before the trace started (or by a call that was not traced)")?;
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
        writeln!(w, "\nLeak candidates (stacks by bytes mapped and still mapped at the end):")?;
        if self.leaks.is_empty() {
            writeln!(w, "  none")?;
        }
        // A report is read from the top: a screenful of the largest; every stack is in --json and -o FILE.
        let shown = if self.diagnosis.is_some() { TEXT_LEAKS } else { usize::MAX };
        if self.leaks.len() > shown {
            writeln!(w, "  (the {shown} largest of {}; all of them with --json)", self.leaks.len())?;
        }
        for (rank, (id, s)) in self.leaks.iter().take(shown).enumerate() {
            writeln!(
                w,
                "  #{} still mapped {}{} of {} mapped ({} unmapped, {} gone unseen); {} mmap, {} munmap, {} mremap, \
                 {} failed",
                rank + 1,
                kib(s.still_mapped),
                if self.weighed { format!(" ({} resident)", kib(self.resident_of(*id))) } else { String::new() },
                kib(s.mapped),
                kib(s.unmapped),
                kib(s.vanished),
                s.mmaps,
                s.munmaps,
                s.mremaps,
                s.failed
            )?;
            if let Some(stack) = self.stack(*id) {
                for f in stack.frames.iter().take(12) {
                    writeln!(w, "      {}", frame_line(f))?;
                }
                if stack.frames.len() > 12 {
                    writeln!(w, "      ... {} more frames", stack.frames.len() - 12)?;
                }
            }
        }
        Ok(())
    }

    /// `region` and `leak` lines, in the same JSON Lines envelope as events.
    pub fn write_json(&self, w: &mut dyn Write) -> io::Result<()> {
        let frames = |id: StackId| self.stack(id).map(|s| s.frames.iter().map(frame_json).collect::<Vec<_>>());
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
                    "start": hex(g.start), "end": hex(g.end), "growth_kb": g.growth_kb, "rss_swap_kb": g.rss_swap_kb,
                    "new": g.new, "before_trace": g.created_before_trace(), "stacks": stacks,
                    "traced_resident_kb": self.weighed.then_some(traced),
                    "remainder_kb": self.weighed.then_some(rest),
                }),
            )?;
        }
        for (id, s) in &self.leaks {
            line(
                &mut &mut *w,
                "leak",
                json!({
                    "stack_id": id.0, "still_mapped": s.still_mapped, "mapped": s.mapped, "unmapped": s.unmapped,
                    "resident": self.weighed.then(|| self.resident_of(*id)),
                    "vanished": s.vanished, "released": s.released, "mmaps": s.mmaps, "munmaps": s.munmaps,
                    "mremaps": s.mremaps, "failed": s.failed, "stack": frames(*id),
                }),
            )?;
        }
        if let Some(d) = &self.diagnosis {
            crate::report::findings::write_json(d, self, w)?;
        }
        Ok(())
    }

    /// Collapsed stacks (`outer;...;inner bytes`), weighted by still-mapped bytes, for any flame graph tool.
    pub fn folded(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .leaks
            .iter()
            .filter(|(_, s)| s.still_mapped > 0)
            .map(|(id, s)| {
                let names: Vec<String> = match self.stack(*id) {
                    Some(st) if !st.frames.is_empty() => st.frames.iter().rev().map(folded_name).collect(),
                    _ => vec!["(no stack)".into()],
                };
                format!("{} {}", names.join(";"), s.still_mapped)
            })
            .collect();
        lines.sort();
        lines
    }

    /// A gzipped pprof profile: one sample per stack (still-mapped bytes, resident bytes, calls).
    pub fn pprof(&self, w: &mut dyn Write, duration_ns: u64) -> io::Result<()> {
        let empty = Stack::default();
        let samples: Vec<crate::report::pprof::Sample> = self
            .leaks
            .iter()
            .map(|(id, s)| crate::report::pprof::Sample {
                frames: &self.stack(*id).unwrap_or(&empty).frames,
                values: [s.still_mapped as i64, self.resident_of(*id) as i64, s.calls() as i64],
            })
            .collect();
        crate::report::pprof::write(w, &samples, duration_ns)
    }

    /// A flame graph of still-mapped bytes by stack (SVG).
    pub fn flamegraph(&self, w: &mut dyn Write) -> io::Result<()> {
        let lines = self.folded();
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = "Bytes still mapped, by the stack that mapped them".into();
        opts.count_name = "bytes".into();
        if lines.is_empty() {
            opts.title = "No bytes still mapped by a traced call".into();
        }
        let placeholder = ["(nothing) 1".to_string()];
        let lines = if lines.is_empty() { &placeholder[..] } else { &lines[..] };
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
            .map_err(|e| io::Error::other(e.to_string()))
    }
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
