//! The findings as the reader meets them first: each as what / where / why / fix, then which paths to a mapping
//! were watched and where the rest of the growth may come from; text and JSON Lines.

use crate::analysis::correlate::StackId;
use crate::analysis::findings::{Diagnosis, frame_fact};
use crate::analysis::leaks::LeakReport;
use crate::analysis::rules::{Finding, FrameFact, Growth};
use crate::analysis::trend::Trend;
use crate::model::stack::Frame;
use crate::report::json::{frame_json, line};
use crate::report::text::frame_text;
use serde_json::json;
use std::io::{self, Write};

fn kib(bytes: u64) -> String {
    if bytes >= 10 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

/// The frames that tell a finding's story, innermost first: the allocation site (the first frame outside
/// libc), the frames the rule matched, frames in a hooking module, the innermost Python frame, and the first
/// caller outside those modules.
pub fn condensed<'a>(frames: &'a [Frame], matched: &[FrameFact], hook_modules: &[&str]) -> Vec<&'a Frame> {
    let real: Vec<&Frame> = frames.iter().filter(|f| !f.inlined).collect();
    let is_libc = |f: &Frame| f.module.as_deref().is_some_and(crate::model::modules::is_libc);
    let mut keep: Vec<usize> = Vec::new();
    if let Some(i) = real.iter().position(|f| !is_libc(f)) {
        keep.push(i);
    }
    let mut story_modules: Vec<&str> = Vec::new();
    for (i, f) in real.iter().enumerate() {
        let fact = frame_fact(f);
        let is_match = matched.iter().any(|m| m.function == fact.function && m.module == fact.module);
        let in_hook = f.module.as_deref().is_some_and(|m| hook_modules.contains(&m));
        if is_match || in_hook {
            keep.push(i);
            if let Some(m) = f.module.as_deref() {
                story_modules.push(m);
            }
        }
    }
    // The innermost Python frame, where the stack has them (frames of kind python carry a .py file and no
    // module): the line of the program that asked for the memory.
    let python = real.iter().position(|f| f.module.is_none() && f.file.as_deref().is_some_and(|x| x.ends_with(".py")));
    if let Some(i) = python {
        // The Python line is the caller worth naming; the interpreter frames around it are not.
        keep.push(i);
    } else if let Some(&last) = keep.iter().max()
        && let Some(j) = (last + 1..real.len())
            .find(|&j| !is_libc(real[j]) && !real[j].module.as_deref().is_some_and(|m| story_modules.contains(&m)))
    {
        keep.push(j);
    }
    keep.sort_unstable();
    keep.dedup();
    keep.into_iter().map(|i| real[i]).collect()
}

/// The anonymous regions' lasting growth and their change from the first sample to the last, and the growth
/// of the traced stacks (bytes): the growth scores that weigh and rank (see [`crate::analysis::growth`]).
fn growth_and_traced(report: &LeakReport) -> (Option<u64>, u64, u64) {
    let lasting = report.lasting_kb().map(|kb| kb * 1024);
    let change: u64 = report.growing.iter().map(|g| g.growth_kb).sum::<u64>() * 1024;
    (lasting, change, report.growth())
}

/// Of the regions' change from the first sample to the last, the part on traced stacks (bytes): resident where
/// pagemap was read, else mapped.
fn change_traced(report: &LeakReport) -> u64 {
    if report.weighed {
        report.region_resident.iter().sum()
    } else {
        report.growing.iter().flat_map(|g| g.stacks.iter()).map(|s| s.still_mapped).sum()
    }
}

/// MiB per minute of `bytes` over `secs`.
fn per_min(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 { bytes as f64 / (1u64 << 20) as f64 * 60.0 / secs } else { 0.0 }
}

/// A finding's growth rate in MiB/min: its stacks' over the middle half of the trace, its classes' over all of it;
/// none for a size.
pub(crate) fn finding_rate(f: &Finding, report: &LeakReport, d: &Diagnosis) -> Option<f64> {
    match f.growth? {
        Growth::Stacks(_) => finding_trend(f, report).map(|t| t.mib_per_min().0),
        Growth::Class(b) => Some(per_min(b, d.duration_s)),
    }
}

/// The rate of a finding's stacks together, with its interval.
fn finding_trend(f: &Finding, report: &LeakReport) -> Option<Trend> {
    report.stacks_rate(Some(&f.stacks))
}

/// "grows 12.34 MiB/min (99%: 11.90 to 12.80)", or why there is no rate.
pub(crate) fn grows(rate: Option<Trend>) -> String {
    match rate {
        Some(t) => format!("grows {}", t.text()),
        None => "rate unknown (fewer than four samples: trace longer, or sample more often with --smaps-every)".into(),
    }
}

fn hook_modules(d: &Diagnosis) -> Vec<&str> {
    d.facts.process.hooks.iter().map(|h| h.module.as_str()).collect()
}

/// Growth on no traced stack worth a word: over a tenth of the growth and at least this much.
const UNTRACED_NOTE: u64 = 256 << 10;

fn untraced_worth_saying(growth: u64, traced: u64) -> bool {
    growth > traced && growth - traced > growth / 10 && growth - traced >= UNTRACED_NOTE
}

/// What to try when growth is on no traced stack.
fn next_steps(d: &Diagnosis) -> Vec<String> {
    let mut out = vec![
        "growth in regions mapped before the trace is pages touched now in memory mapped earlier: trace from the \
         start (syscatch --leaks -- CMD) or longer, so the calls that mapped them are seen"
            .to_string(),
    ];
    if !d.watched.skipped.is_empty() {
        out.push(
            "some libc entries were not watched (above): a probe script on the hook's own functions \
                  (syscatch run FILE) catches calls that bypass them"
                .into(),
        );
    }
    if d.facts.process.hooks.is_empty() {
        out.push(
            "no memory hooks found; a library with its own syscall instruction (not libc's) is invisible \
                  to --leaks: syscatch mem --watch 2s shows which class grows"
                .into(),
        );
    }
    out
}

/// A finding's resident bytes (its stacks' still-mapped bytes where residency was not read).
fn weight(f: &Finding, report: &LeakReport) -> u64 {
    if report.weighed && !f.stacks.is_empty() {
        f.stacks.iter().map(|&id| report.resident_of(StackId(id))).sum()
    } else {
        f.bytes
    }
}

/// The findings' first line: what was checked and how much grew.
fn headline(d: &Diagnosis, report: &LeakReport) -> String {
    let (_, change, _) = growth_and_traced(report);
    let on_traced = change_traced(report);
    // `--faults`: the growth no call explains, charged to sampled page faults.
    let faulted = match report.charged() {
        Some(c) => {
            let kb: u64 = c.stacks.iter().map(|s| s.kb).sum();
            format!(", {} on sampled page faults", kib(kb * 1024))
        }
        None => String::new(),
    };
    format!(
        "Findings ({} rules checked; {:.2}s traced; anonymous memory {}, {}{} from start to end, {} of that on \
         traced stacks{faulted}):",
        d.rules_checked,
        report.window.len(),
        grows(report.rate),
        if change > 0 { "+" } else { "" },
        kib(change),
        kib(on_traced.min(change.max(on_traced))),
    )
}

/// A finding's "what": the bytes it explains, and its growth with its share.
fn what_line(f: &Finding, d: &Diagnosis, report: &LeakReport) -> String {
    let (lasting, _, traced) = growth_and_traced(report);
    let growth = lasting.unwrap_or(traced);
    let weight = weight(f, report);
    let what = match (f.stacks.is_empty(), report.weighed) {
        (true, _) => String::new(),
        (false, true) => format!(" still mapped by its stacks, {} of it resident", kib(weight)),
        (false, false) => " still mapped by its stacks".into(),
    };
    let total = growth.max(traced);
    let grew = match f.growth {
        Some(Growth::Stacks(b)) => {
            let share = if total > 0 {
                format!(", {:.0}% of the growth", 100.0 * b as f64 / total as f64)
            } else {
                String::new()
            };
            format!("; {}{share}", grows(finding_trend(f, report)))
        }
        Some(Growth::Class(b)) => format!("; grew {} ({:.2} MiB/min)", kib(b), per_min(b, d.duration_s)),
        None => String::new(),
    };
    format!("{}{what}{grew}", kib(f.bytes))
}

/// The notes after the findings: what was watched, what was counted once, where untraced growth may come from.
fn notes(d: &Diagnosis, report: &LeakReport) -> (Vec<String>, Option<String>) {
    let mut out = Vec::new();
    if !d.watched.paths.is_empty() {
        out.push(format!("Watched: {}", d.watched.paths.join("; ")));
    }
    if !d.watched.skipped.is_empty() {
        out.push(format!("Not watched: {}", d.watched.skipped.join("; ")));
    }
    if d.nested > 0 {
        out.push(format!(
            "{} calls were seen both at a libc function and at the syscall() inside it: counted once",
            d.nested
        ));
    }
    let (_, change, _) = growth_and_traced(report);
    let on_traced = change_traced(report);
    let untraced = untraced_worth_saying(change, on_traced)
        .then(|| format!("{} of the growth is on no traced stack. Next:", kib(change - on_traced)));
    (out, untraced)
}

/// glibc malloc's arenas after the trace, each with its change since before it: the heap section.
fn heap_lines(d: &Diagnosis) -> Vec<String> {
    let Some(h) = &d.facts.process.heap else { return Vec::new() };
    if let (Some(name), Some(why)) = (&h.other, &h.problem) {
        return vec![format!("Heap ({name}): not read: {why}")];
    }
    let before = d.facts.process.heap_before.as_ref();
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / 1048576.0);
    let change = |now: u64, was: Option<u64>| match was {
        Some(w) => format!("{}{:.1}", if now < w { "-" } else { "+" }, now.abs_diff(w) as f64 / 1048576.0),
        None => "new".into(),
    };
    let version = h.glibc.map(|(a, b)| format!(" {a}.{b}")).unwrap_or_default();
    let mut out = vec![format!(
        "Heap (glibc{version} malloc; each arena after the trace, and its change since before it): resident (the \
         kernel's), held by malloc, in use by the program, free"
    )];
    for a in &h.arenas {
        let b = before.and_then(|x| x.arena(a.arena.addr));
        let name = if a.main { "main arena ([heap])".to_string() } else { format!("arena {:#x}", a.arena.addr) };
        let threads = a.arena.threads;
        out.push(format!(
            "  {name}, {threads} thread{}: resident {} ({}), malloc {} ({}), in use {} ({}), free {} ({}; top {}, bins \
             and fastbins {})",
            if threads == 1 { "" } else { "s" },
            mib(a.rss_kb * 1024),
            change(a.rss_kb * 1024, b.map(|b| b.rss_kb * 1024)),
            mib(a.arena.system_mem),
            change(a.arena.system_mem, b.map(|b| b.arena.system_mem)),
            mib(a.arena.in_use()),
            change(a.arena.in_use(), b.map(|b| b.arena.in_use())),
            mib(a.arena.free()),
            change(a.arena.free(), b.map(|b| b.arena.free())),
            mib(a.arena.top),
            mib(a.arena.bins + a.arena.fastbins),
        ));
        if let Some(t) = h.threads_line(a) {
            out.push(format!("      {t}"));
        }
    }
    if let Some(p) = &h.problem {
        out.push(format!("  ({p})"));
    }
    if let Some(n) = &h.threads_note {
        out.push(format!("  (threads: {n})"));
    }
    out
}

/// The findings, first in the text report.
pub fn write_text(d: &Diagnosis, report: &LeakReport, w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, "\n{}", headline(d, report))?;
    if d.findings.is_empty() {
        writeln!(w, "  Nothing known matches. Growth by stack is ranked below (leak candidates).")?;
    }
    let hooks = hook_modules(d);
    for (rank, f) in d.findings.iter().enumerate() {
        writeln!(w, "\n  #{} {}  [{}]", rank + 1, f.title, f.rule)?;
        writeln!(w, "     what:  {}", what_line(f, d, report))?;
        if let Some(&id) = f.stacks.first()
            && let Some(stack) = report.stack(StackId(id))
        {
            let ids: Vec<String> = f.stacks.iter().map(|s| format!("stack {s}")).collect();
            writeln!(w, "     where: ({}; full stacks below and in --json)", ids.join(", "))?;
            for fr in condensed(&stack.frames, &f.frames, &hooks) {
                writeln!(w, "            {}", frame_text(fr))?;
            }
        }
        writeln!(w, "     why:   {}", f.why)?;
        for e in &f.evidence {
            writeln!(w, "            - {e}")?;
        }
        for (i, fix) in f.fix.iter().enumerate() {
            writeln!(w, "     fix {}: {}", i + 1, fix.action)?;
            if let Some(c) = &fix.caveat {
                writeln!(w, "            caveat: {c}")?;
            }
            if let Some(doc) = &fix.doc {
                writeln!(w, "            doc: {doc}")?;
            }
        }
    }
    let (notes, untraced) = notes(d, report);
    for (i, n) in notes.iter().enumerate() {
        writeln!(w, "{}  {n}", if i == 0 && !d.watched.paths.is_empty() { "\n" } else { "" })?;
    }
    if let Some(line) = untraced {
        writeln!(w, "  {line}")?;
        for s in next_steps(d) {
            writeln!(w, "    - {s}")?;
        }
    }
    let mut heap = heap_lines(d);
    if let (Some(line), false) = (sampled_line(d, report), heap.is_empty()) {
        heap.push(line);
    }
    for (i, l) in heap.iter().enumerate() {
        writeln!(w, "{}  {l}", if i == 0 { "\n" } else { "" })?;
    }
    Ok(())
}

/// With `--malloc`: what the program's blocks hold by the samples' estimate, against what malloc says is in use
/// in its arenas (which count blocks from before the trace, but not the large ones it mmaps on their own) and
/// holds from the kernel (the rest: free memory malloc keeps, fragmentation).
fn sampled_line(d: &Diagnosis, report: &LeakReport) -> Option<String> {
    // (Another allocator's arenas are not read: nothing to set the samples beside.)
    let h = d.facts.process.heap.as_ref().filter(|h| h.other.is_none())?;
    let samples = report.samples?;
    let (in_use, err) = samples.in_use();
    let mib = |b: f64| format!("{:.1} MiB", b / 1048576.0);
    let arenas_in_use: u64 = h.arenas.iter().map(|a| a.arena.in_use()).sum();
    let held: u64 = h.arenas.iter().map(|a| a.arena.system_mem).sum();
    Some(format!(
        "  blocks allocated during the trace and still in use, by --malloc's samples: {} ± {}; malloc's arenas: {} in \
         use (with blocks from before the trace, without the large blocks malloc maps on their own), {} held from \
         the kernel",
        mib(in_use),
        mib(err),
        mib(arenas_in_use as f64),
        mib(held as f64)
    ))
}

/// The findings as the HTML page shows them (the text report's lines, as data): the headline, each finding's
/// what, where (the condensed frames), why and fixes, and the notes.
pub fn page(d: &Diagnosis, report: &LeakReport) -> serde_json::Value {
    let hooks = hook_modules(d);
    let findings: Vec<_> = d
        .findings
        .iter()
        .enumerate()
        .map(|(rank, f)| {
            let place: Vec<_> = f
                .stacks
                .first()
                .and_then(|&id| report.stack(StackId(id)))
                .map(|s| condensed(&s.frames, &f.frames, &hooks))
                .unwrap_or_default()
                .into_iter()
                .map(|fr| json!({"text": frame_text(fr), "python": fr.kind != crate::model::stack::FrameKind::Native}))
                .collect();
            json!({
                "rank": rank + 1, "rule": f.rule, "title": f.title, "what": what_line(f, d, report),
                "stack_ids": f.stacks, "where": place, "why": f.why, "evidence": f.evidence, "fix": f.fix,
            })
        })
        .collect();
    let (notes, untraced) = notes(d, report);
    json!({
        "headline": headline(d, report),
        "findings": findings,
        "notes": notes,
        "untraced": untraced,
        "next": if untraced.is_some() { next_steps(d) } else { Vec::new() },
        "heap": heap_lines(d),
    })
}

/// `finding` lines (most bytes first) and one `coverage` line.
pub fn write_json(d: &Diagnosis, report: &LeakReport, w: &mut dyn Write) -> io::Result<()> {
    let (lasting, change, traced) = growth_and_traced(report);
    let growth = lasting.unwrap_or(traced);
    let hooks = hook_modules(d);
    for (rank, f) in d.findings.iter().enumerate() {
        let condensed: Vec<_> = f
            .stacks
            .first()
            .and_then(|&id| report.stack(StackId(id)))
            .map(|s| condensed(&s.frames, &f.frames, &hooks).into_iter().map(frame_json).collect())
            .unwrap_or_default();
        line(
            &mut &mut *w,
            "finding",
            json!({
                "rank": rank + 1,
                "rule": f.rule,
                "title": f.title,
                "bytes": f.bytes,
                "resident": report.weighed.then(|| weight(f, report)),
                "growth": f.growth.map(Growth::bytes),
                "growth_of": f.growth.map(|g| match g { Growth::Stacks(_) => "stacks", Growth::Class(_) => "classes" }),
                "growth_mib_per_min": finding_rate(f, report, d),
                "rate": match f.growth { Some(Growth::Stacks(_)) => finding_trend(f, report).map(|t| t.json()), _ => None },
                "share_of_growth": match f.growth {
                    Some(Growth::Stacks(b)) if growth.max(traced) > 0 => Some(b as f64 / growth.max(traced) as f64),
                    _ => None,
                },
                "stack_ids": f.stacks,
                "where": condensed,
                "why": f.why,
                "evidence": f.evidence,
                "fix": f.fix,
            }),
        )?;
    }
    line(
        &mut &mut *w,
        "coverage",
        json!({
            "rules_checked": d.rules_checked,
            "duration": d.duration_s,
            "from": report.window.from,
            "to": report.window.to,
            "growth_bytes": lasting,
            "growth_mib_per_min": report.rate.map(|t| t.mib_per_min().0),
            "rate": report.rate.map(|t| t.json()),
            "change_bytes": change,
            "traced_bytes": change_traced(report),
            "traced_is_resident": report.weighed,
            "traced_growth_bytes": traced,
            "watched": d.watched.paths,
            "not_watched": d.watched.skipped,
            "nested_calls": d.nested,
            "allocator": d.facts.process.allocator,
            "environment_source": d.facts.process.env_source,
            "hooks": d.facts.process.hooks.iter().map(|h| json!({"function": h.function, "how": h.how, "module": h.module, "text": h.text})).collect::<Vec<_>>(),
            "next": if untraced_worth_saying(change, change_traced(report)) { next_steps(d) } else { Vec::new() },
        }),
    )?;
    if let Some(h) = &d.facts.process.heap {
        let figures = |a: &crate::analysis::mstate::ArenaReading| {
            json!({
                "rss_kb": a.rss_kb, "dirty_kb": a.dirty_kb, "system_mem": a.arena.system_mem,
                "in_use": a.arena.in_use(), "free": a.arena.free(), "top": a.arena.top, "bins": a.arena.bins,
                "fastbins": a.arena.fastbins, "free_chunks": a.arena.chunks,
            })
        };
        let before = d.facts.process.heap_before.as_ref();
        let arenas: Vec<_> = h
            .arenas
            .iter()
            .map(|a| {
                let b = before.and_then(|x| x.arena(a.arena.addr));
                json!({
                    "addr": crate::report::json::hex(a.arena.addr), "main": a.main, "heaps": a.heaps,
                    "threads": a.arena.threads, "after": figures(a), "before": b.map(figures),
                    "tids": a.tids, "tcache": a.tcache,
                })
            })
            .collect();
        let glibc = h.glibc.map(|(a, b)| format!("{a}.{b}"));
        let note = &h.threads_note;
        line(
            &mut &mut *w,
            "heap",
            json!({
                "glibc": glibc, "arenas": arenas, "problem": h.problem, "threads_note": note,
                "allocator": h.other.as_deref().unwrap_or("glibc"),
            }),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fr(addr: u64, module: Option<&str>, function: &str, file: Option<&str>) -> Frame {
        Frame {
            addr,
            module: module.map(str::to_string),
            function: Some(function.into()),
            file: file.map(str::to_string),
            ..Frame::default()
        }
    }

    #[test]
    fn condensed_keeps_the_story_frames() {
        let frames = vec![
            fr(1, Some("libc.so.6"), "syscall", None),
            fr(2, Some("libucm.so.0"), "ucm_orig_mmap", None),
            fr(3, Some("libucs.so.0"), "ucs_mpool_grow", None),
            fr(4, Some("libucs.so.0"), "ucs_mpool_get", None),
            fr(5, Some("libucs.so.0"), "ucs_rcache_invalidate", None),
            fr(6, Some("libucm.so.0"), "ucm_munmap", None),
            fr(7, Some("libpython3.11.so"), "_PyEval_EvalFrameDefault", None),
            fr(8, None, "train.step", Some("train.py")),
            fr(9, Some("python3"), "main", None),
        ];
        let matched = [
            FrameFact { module: "libucs.so.0".into(), function: "ucs_mpool_grow".into() },
            FrameFact { module: "libucs.so.0".into(), function: "ucs_rcache_invalidate".into() },
        ];
        let got: Vec<u64> = condensed(&frames, &matched, &["libucm.so.0"]).iter().map(|f| f.addr).collect();
        // Allocation site, matched frames, hook frames, and the Python line as the caller.
        assert_eq!(got, [2, 3, 5, 6, 8]);
        let native: Vec<Frame> = frames.iter().filter(|f| f.module.is_some()).cloned().collect();
        let got: Vec<u64> = condensed(&native, &matched, &["libucm.so.0"]).iter().map(|f| f.addr).collect();
        // Without Python frames, the first native caller outside the story's modules.
        assert_eq!(got, [2, 3, 5, 6, 7]);
    }
}
