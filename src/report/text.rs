//! Text output: one line per event (and its stack, indented), a summary for people.

use super::{Renderer, decode, errno_name, errno_of, syscall_name};
use crate::model::event::{End, Event, Summary};
use crate::model::stack::{Frame, FrameKind, Stack};
use std::io::Write;

pub struct Text<W: Write, E: Write> {
    pub out: W,
    /// Where the summary goes (stderr).
    pub err: E,
    /// The frame lines of each interned stack, rendered once, by stack id.
    pub cache: Vec<Option<String>>,
}

impl<W: Write, E: Write> Text<W, E> {
    pub fn new(out: W, err: E) -> Self {
        Text { out, err, cache: Vec::new() }
    }

    /// The event's own line: time, tid, call, result.
    fn event_line(&mut self, ev: &Event) -> std::io::Result<()> {
        let probe = ev.probe.as_deref().map(|p| format!("[{p}] ")).unwrap_or_default();
        let call = match &ev.func {
            // libc's own mmap, munmap, mremap take the syscall's arguments in its order: decoded as it is.
            Some(label) if crate::model::watch::is_sbrk(label) => format!("{label}(increment={})", ev.args[0] as i64),
            Some(label) => match crate::model::watch::parse_label_syscall(label) {
                Some(nr) => format!("{label}({})", decode::args(nr, &ev.args)),
                None => {
                    let args: Vec<String> = ev.args.iter().map(|a| format!("{a:#x}")).collect();
                    format!("{label}({})", args.join(", "))
                }
            },
            None => format!("{}({})", syscall_name(ev.nr), decode::args(ev.nr, &ev.args)),
        };
        let regs: String =
            ev.regs.iter().map(|(r, v)| format!(" {}={v:#x}", format!("{r:?}").to_lowercase())).collect();
        writeln!(self.out, "{:>10.6} {:>7} {probe}{call} = {}{regs}", ev.time, ev.tid, ret_text(ev))
    }
}

/// The indented lines under an event: one per frame, then why the unwind stopped early.
pub fn stack_text(stack: &Stack) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for (i, f) in stack.frames.iter().enumerate() {
        let _ = writeln!(s, "    #{i:<2} {}", frame_line(f));
    }
    if let Some(why) = &stack.truncated {
        let _ = writeln!(s, "    (stack truncated: {why})");
    }
    s
}

pub fn ret_text(ev: &Event) -> String {
    match (ev.ret, &ev.ret_missing) {
        (Some(r), _) => match errno_of(r) {
            Some(e) => format!("-1 {}", errno_name(e)),
            None => format!("{r:#x}"),
        },
        (None, Some(why)) => format!("? ({why})"),
        (None, None) => "?".into(),
    }
}

/// A frame as a stack line shows it after its number: the address (none for a Python frame), then
/// [`frame_text`].
pub fn frame_line(f: &Frame) -> String {
    match f.kind {
        FrameKind::Native => format!("{:#018x} {}", f.addr, frame_text(f)),
        _ => frame_text(f),
    }
}

/// `function+0x12 (module) at file:line`, or `module+0x1234` when nothing else is known; a Python frame is
/// `Pool.grow at /srv/app/pool.py:42 [python]`.
pub fn frame_text(f: &Frame) -> String {
    if f.kind != FrameKind::Native {
        let mut s = f.function.clone().unwrap_or_else(|| "??".into());
        if let Some(file) = &f.file {
            s.push_str(&format!(" at {file}"));
            if let Some(line) = f.line {
                s.push_str(&format!(":{line}"));
            }
        }
        s.push_str(if f.kind == FrameKind::Python { " [python]" } else { " [python, not placed]" });
        return s;
    }
    let mut s = match (&f.function, &f.module) {
        (Some(func), Some(m)) => format!("{func}+{:#x} ({m})", f.offset.unwrap_or(0)),
        (Some(func), None) => format!("{func}+{:#x}", f.offset.unwrap_or(0)),
        (None, Some(m)) => format!("{m}+{:#x}", f.offset.unwrap_or(0)),
        (None, None) => "??".into(),
    };
    if let (Some(file), Some(line)) = (&f.file, f.line) {
        s.push_str(&format!(" at {file}:{line}"));
    }
    if f.inlined {
        s.push_str(" [inlined]");
    }
    s
}

/// The delay the target saw, next to the tracer-side figure: what its threads and the tracer waited for a CPU.
fn waited(s: &Summary) -> String {
    let Some(d) = &s.target_run_delay else { return String::new() };
    let uncounted = match s.run_delay_uncounted() {
        0 => String::new(),
        n => format!("; {n} that exited meanwhile not counted"),
    };
    let tracer = s.tracer_run_delay_ns.map(|ns| format!(", the tracer {:.3} ms", ns as f64 / 1e6)).unwrap_or_default();
    format!(
        "; waiting for a CPU (schedstat run delay): the target {:.3} ms ({} thread(s){uncounted}){tracer}",
        d.wait_ns as f64 / 1e6,
        d.threads,
    )
}

impl<W: Write, E: Write> Renderer for Text<W, E> {
    fn leaks(&mut self, report: &crate::analysis::leaks::LeakReport) -> std::io::Result<()> {
        report.write_text(&mut self.out)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn event(&mut self, ev: &Event, stack: Option<&Stack>) -> std::io::Result<()> {
        self.event_line(ev)?;
        if let Some(stack) = stack {
            self.out.write_all(stack_text(stack).as_bytes())?;
        }
        Ok(())
    }

    fn event_interned(&mut self, ev: &Event, stack: Option<(usize, &Stack)>) -> std::io::Result<()> {
        self.event_line(ev)?;
        if let Some((id, stack)) = stack {
            if self.cache.len() <= id {
                self.cache.resize(id + 1, None);
            }
            let text = self.cache[id].get_or_insert_with(|| stack_text(stack));
            self.out.write_all(text.as_bytes())?;
        }
        Ok(())
    }

    fn summary(&mut self, s: &Summary) -> std::io::Result<()> {
        self.out.flush()?;
        let end = match &s.end {
            Some(End::Duration) | None => "duration reached".to_string(),
            Some(End::Signal(sig)) => format!("stopped by signal {sig}"),
            Some(End::Exited(code)) => format!("target exited with status {code}"),
            Some(End::Killed(sig)) => format!("target was killed by signal {sig}"),
            Some(End::Exec) => "target called execve; the traced program is gone".into(),
            Some(End::Fault) => "stopped by an internal error".into(),
        };
        let per_thread: Vec<String> = s.events_by_tid.iter().map(|(t, n)| format!("{t}:{n}")).collect();
        writeln!(
            self.err,
            "syscatch: {end} after {:.3}s; {} hits, {} matching, {} events ({}); {} threads seen; \
             threads stopped {:.3} ms in all (tracer side){}; {} emulated and {} slow step-overs; {} fork children cleaned; \
             {} signals forwarded{}",
            s.duration.as_secs_f64(),
            s.hits,
            s.matching,
            s.events_by_tid.values().sum::<u64>(),
            if per_thread.is_empty() { "none".to_string() } else { format!("by tid {}", per_thread.join(" ")) },
            s.threads_seen,
            s.stopped.as_secs_f64() * 1e3,
            waited(s),
            s.emulated,
            s.slow_path,
            s.forks_cleaned,
            s.signals_forwarded,
            fast_stops(s),
        )?;
        if !s.watched.is_empty() {
            writeln!(self.err, "syscatch: watched {}", s.watched.join("; "))?;
        }
        if s.fault_samples > 0 {
            let raised = match s.fault_period_max {
                0 => String::new(),
                p => format!("; faults were many: the period rose up to one in {p}, to stop for at most 100 a second"),
            };
            writeln!(
                self.err,
                "syscatch: {} page faults sampled (--faults: each stopped its thread once, like a matching call{raised})",
                s.fault_samples
            )?;
        }
        if s.nested > 0 {
            writeln!(
                self.err,
                "syscatch: {} calls were seen both at a libc function and at the syscall() inside it: reported once",
                s.nested
            )?;
        }
        for n in &s.notes {
            writeln!(self.err, "syscatch: note: {n}")?;
        }
        for w in &s.warnings {
            writeln!(self.err, "syscatch: WARNING: {w}")?;
        }
        Ok(())
    }
}

/// With `--fast`: the calls written down without a stop, and which calls stopped and why.
fn fast_stops(s: &Summary) -> String {
    if s.from_ring + s.fast_stops + s.ring_full_stops == 0 {
        return String::new();
    }
    let known = match s.from_known {
        0 => String::new(),
        n => format!("; {n} of them matching calls of a stack unwound before"),
    };
    let breakpoints = s.hits.saturating_sub(s.from_ring + s.fast_stops + s.ring_full_stops);
    let mut why = Vec::new();
    if s.fast_stops > 0 {
        let sampled = match s.malloc_sampled {
            0 => String::new(),
            n => format!("; --malloc sampled {n} allocations"),
        };
        why.push(format!("{} at --fast's trampoline to be unwound (a stack not known yet{sampled})", s.fast_stops));
    }
    if s.ring_full_stops > 0 {
        why.push(format!("{} that found the ring full", s.ring_full_stops));
    }
    if breakpoints > 0 {
        why.push(format!(
            "{breakpoints} at breakpoints (sites without the trampoline: mremap, a function --fast could not patch)"
        ));
    }
    let stops = if why.is_empty() { "none".to_string() } else { why.join(", ") };
    format!("; {} calls written down without a stop (--fast's ring{known}); stops: {stops}", s.from_ring)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_which_calls_stopped_and_why() {
        let mut s = Summary { hits: 400, matching: 400, ..Summary::default() };
        assert_eq!(fast_stops(&s), "", "no --fast: every hit is a stop, said by the hits");
        s.from_ring = 400;
        assert!(fast_stops(&s).ends_with("; stops: none"), "{}", fast_stops(&s));
        (s.from_ring, s.from_known, s.fast_stops) = (364, 364, 36);
        assert_eq!(
            fast_stops(&s),
            "; 364 calls written down without a stop (--fast's ring; 364 of them matching calls of a stack unwound \
             before); stops: 36 at --fast's trampoline to be unwound (a stack not known yet)"
        );
        (s.hits, s.ring_full_stops) = (410, 2);
        let said = fast_stops(&s);
        assert!(said.ends_with(", 2 that found the ring full, 8 at breakpoints (sites without the trampoline: mremap, a function --fast could not patch)"), "{said}");
    }
}
