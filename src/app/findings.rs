//! The diagnosis at the top of the `--leaks` report: gathers the facts the rules look at (the traced stacks and
//! what they hold, memory by class before and after, hook verdicts, the allocator, the live environment read
//! from libc's `__environ` in the target's memory, kernel settings), runs the rules, and renders each finding as
//! what / where / why / fix, then says which paths to a mapping were watched and where the rest of the growth
//! may come from. The `read_*` functions touch the target (after detach: memory reads only); the rest is pure.

use crate::analysis::correlate::StackId;
use crate::analysis::leaks::LeakReport;
use crate::analysis::rules::{self, Facts, Finding, FrameFact, HookFact, Rule, StackFact};
use crate::live::mappaths::Watched;
use crate::model::stack::Frame;
use crate::os::{Tid, procfs};
use crate::report::json::{frame_json, line};
use crate::report::text::frame_text;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// The findings with what the report needs around them.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    pub findings: Vec<Finding>,
    pub rules_checked: usize,
    pub watched: Watched,
    /// Calls seen both at a libc function and at the `syscall()` inside it, counted once.
    pub nested: u64,
    pub duration_s: f64,
    pub facts: Facts,
}

/// The rules in force: the shipped ones, with `extra` (from `--rules FILE`) merged in.
pub fn load_rules(extra: Option<&std::path::Path>) -> anyhow::Result<Vec<Rule>> {
    let base = rules::parse_rules(rules::DEFAULT_RULES).map_err(|e| anyhow::anyhow!("shipped rules: {e}"))?;
    let Some(path) = extra else { return Ok(base) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| crate::app::trace::usage(format!("cannot read rules file {}: {e}", path.display())))?;
    let extra = rules::parse_rules(&text).map_err(|e| {
        crate::app::trace::usage(format!("rules file {}: {e} (format: README.md, \"Rules files\")", path.display()))
    })?;
    Ok(rules::merge_rules(base, extra))
}

/// Advice lines for `syscatch mem` from the same rules: the process-wide ones (no stacks without a trace) over
/// its memory by class (`growth_kb` with `--watch`), arenas, allocator and the live environment.
pub fn rule_advice(
    pid: Tid,
    class_kb: BTreeMap<String, i64>,
    growth_kb: BTreeMap<String, i64>,
    arenas: usize,
    allocator: &str,
) -> Vec<String> {
    let Ok(rules) = load_rules(None) else { return Vec::new() };
    let (env, env_source) = read_environment(pid);
    let facts = Facts {
        class_size_kb: class_kb,
        class_growth_kb: growth_kb,
        arenas,
        allocator: allocator.to_string(),
        env,
        env_source,
        kernel: read_kernel(),
        ..Facts::default()
    };
    rules::evaluate(&rules, &facts)
        .iter()
        .map(|f| {
            let because: Vec<&str> = f.evidence.iter().map(String::as_str).collect();
            let fix = f.fix.first().map(|x| x.action.as_str()).unwrap_or("");
            format!("{} ({}): {fix} [rule {}]", f.title, because.join("; "), f.rule)
        })
        .collect()
}

/// Memory by class now (Rss+Swap KiB by class name), for the growth by class.
pub fn read_class_kb(pid: Tid) -> Option<BTreeMap<String, i64>> {
    crate::app::mem::read_class_facts(pid).map(|(kb, _, _)| kb)
}

/// The environment as it is now: the strings libc's `__environ` points at, in the target's memory (a server
/// that calls setenv after start, or Python's `os.environ[...] = ...`, changes only this). `None` when libc or
/// its `__environ` cannot be read.
pub fn read_live_environ(pid: Tid) -> Option<BTreeMap<String, String>> {
    let mem = crate::os::mem::ProcMem::open(pid).ok()?;
    let maps = crate::live::resolve::read_maps(pid).ok()?;
    let libc = crate::live::resolve::find_libc(&maps)?;
    let module = crate::live::resolve::read_module(pid, &libc, Some(&mem)).ok()?;
    let (var, _) = module.find_symbol("__environ").or_else(|| module.find_symbol("environ"))?;
    let array = mem.read_u64(var).ok()?;
    let mut env = BTreeMap::new();
    // Bounded: a corrupt array must not keep us reading.
    for i in 0..8192u64 {
        let Some(at) = i.checked_mul(8).and_then(|o| array.checked_add(o)) else { break };
        let Ok(p) = mem.read_u64(at) else { break };
        if p == 0 {
            break;
        }
        let bytes = read_c_string(pid, p, 32 << 10);
        let kv = String::from_utf8_lossy(&bytes);
        if let Some((k, v)) = kv.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
    }
    Some(env)
}

/// A NUL-terminated string of at most `max` bytes.
fn read_c_string(pid: Tid, addr: u64, max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        // Up to the end of the page, so a string near an unmapped page is still read.
        let chunk = (4096 - (at % 4096)) as usize;
        let got = crate::os::mem::read_upto(pid, at, chunk);
        if got.is_empty() {
            break;
        }
        if let Some(end) = got.iter().position(|&b| b == 0) {
            out.extend_from_slice(&got[..end]);
            return out;
        }
        out.extend_from_slice(&got);
        at += got.len() as u64;
    }
    out
}

/// The environment for the rules: live if readable, else the start-up one from /proc/PID/environ; the entries
/// of `GLIBC_TUNABLES` also as their own keys (`glibc.malloc.arena_max`).
pub fn read_environment(pid: Tid) -> (BTreeMap<String, String>, String) {
    let (mut env, source) = match read_live_environ(pid) {
        Some(env) => (env, "live, from __environ".to_string()),
        None => {
            let raw = procfs::read_environ(pid).unwrap_or_default();
            let env = raw
                .split(|&b| b == 0)
                .filter_map(|kv| {
                    let kv = String::from_utf8_lossy(kv);
                    kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect();
            (env, format!("/proc/{pid}/environ, the start-up environment"))
        }
    };
    if let Some(t) = env.get("GLIBC_TUNABLES").cloned() {
        env.extend(rules::parse_tunables(&t));
    }
    // jemalloc's other option sources, in its own order of precedence after the compiled-in one.
    if let Some(c) = read_jemalloc_conf_symbol(pid) {
        env.insert("jemalloc.malloc_conf".into(), c);
    }
    if let Ok(c) = procfs::read_malloc_conf_link(pid) {
        env.insert("/etc/malloc.conf".into(), c);
    }
    (env, source)
}

/// The string a program or jemalloc build sets in its `malloc_conf` (or `je_malloc_conf`) global: searched in
/// the main program and in mapped jemalloc libraries only (reading every module would be slow).
fn read_jemalloc_conf_symbol(pid: Tid) -> Option<String> {
    let mem = crate::os::mem::ProcMem::open(pid).ok()?;
    let maps = crate::live::resolve::read_maps(pid).ok()?;
    let modules = crate::model::modules::group_modules(&maps);
    let wanted = modules
        .iter()
        .enumerate()
        .filter(|(i, m)| *i == 0 || crate::model::modules::file_name(&m.path).contains("jemalloc"));
    for (_, m) in wanted {
        let Ok(module) = crate::live::resolve::read_module(pid, m, Some(&mem)) else { continue };
        for sym in ["malloc_conf", "je_malloc_conf"] {
            if let Some((addr, _)) = module.find_symbol(sym)
                && let Ok(p) = mem.read_u64(addr)
                && p != 0
            {
                let s = read_c_string(pid, p, 4096);
                return Some(String::from_utf8_lossy(&s).into_owned());
            }
        }
    }
    None
}

/// Memory functions intercepted in the process (GOT slots patched or interposed, entries patched).
pub fn read_hooks(pid: Tid) -> Vec<HookFact> {
    use crate::hooks::{EntryStatus, MEMORY_FUNCTIONS, Status, read, render};
    let Ok((process, mem)) = read::read_process(pid) else { return Vec::new() };
    let Some(cs) = crate::x86::breakpoints::disassembler() else { return Vec::new() };
    let functions: Vec<String> = MEMORY_FUNCTIONS.iter().map(|s| s.to_string()).collect();
    let report = crate::hooks::analyze(&process, &functions, &[], &mem, &cs);
    let mut out = Vec::new();
    for v in render::verdicts(&report, &functions) {
        if !matches!(v.status, Status::PatchedAtRunTime | Status::InterposedAtLoad) {
            continue;
        }
        let inline =
            report.inline.iter().find(|r| r.function == v.function && matches!(r.status, EntryStatus::Patched(_)));
        let got = report.got.iter().find(|r| r.function == v.function && r.status == v.status);
        let (how, place) = match (inline, got) {
            (Some(r), _) => ("inline", r.target.as_ref()),
            (None, Some(r)) => ("got", r.at.as_ref()),
            (None, None) => continue,
        };
        let module = place.and_then(|p| p.module.as_deref()).map(crate::model::modules::file_name).unwrap_or("?");
        out.push(HookFact { function: v.function, how: how.into(), module: module.to_string(), text: v.text });
    }
    out
}

/// Kernel settings the rules may name.
pub fn read_kernel() -> BTreeMap<String, String> {
    let mut k = BTreeMap::new();
    for key in ["vm.overcommit_memory", "vm.max_map_count"] {
        if let Ok(v) = procfs::read_sysctl(key) {
            k.insert(key.to_string(), v);
        }
    }
    if let Ok(t) = procfs::read_thp() {
        // The selected mode is the bracketed word.
        if let Some(mode) = t.split_whitespace().find(|w| w.starts_with('[')) {
            k.insert("thp".into(), mode.trim_matches(['[', ']']).to_string());
        }
    }
    k
}

/// A frame as the rules see it.
fn frame_fact(f: &Frame) -> FrameFact {
    FrameFact { module: f.module.clone().unwrap_or_default(), function: f.function.clone().unwrap_or_default() }
}

/// The traced stacks as facts.
pub fn stack_facts(report: &LeakReport) -> Vec<StackFact> {
    report
        .leaks
        .iter()
        .map(|(id, s)| StackFact {
            id: id.0,
            frames: report.stack(*id).map(|st| st.frames.iter().map(frame_fact).collect()).unwrap_or_default(),
            still_mapped: s.still_mapped,
            calls: s.calls(),
        })
        .collect()
}

/// Reads every fact of a live process (after detach) and runs the rules.
pub fn read_diagnosis(
    pid: Tid,
    report: &LeakReport,
    rules: &[Rule],
    class_before: Option<&BTreeMap<String, i64>>,
    duration_s: f64,
) -> Diagnosis {
    let mut facts = Facts { stacks: stack_facts(report), ..Facts::default() };
    if let Some((kb, arenas, alloc)) = crate::app::mem::read_class_facts(pid) {
        if let Some(before) = class_before {
            facts.class_growth_kb =
                kb.iter().map(|(c, &now)| (c.clone(), now - before.get(c).copied().unwrap_or(0))).collect();
        }
        facts.class_size_kb = kb;
        facts.arenas = arenas;
        facts.allocator = alloc;
    }
    facts.hooks = read_hooks(pid);
    (facts.env, facts.env_source) = read_environment(pid);
    facts.kernel = read_kernel();
    let findings = rules::evaluate(rules, &facts);
    Diagnosis { findings, rules_checked: rules.len(), duration_s, facts, ..Diagnosis::default() }
}

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
    let is_libc = |f: &Frame| f.module.as_deref().is_some_and(crate::live::resolve::is_libc);
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

/// Growth of the anonymous regions that grew (KiB), and the part of it on traced stacks (bytes).
fn growth_and_traced(report: &LeakReport) -> (u64, u64) {
    let growth: u64 = report.growing.iter().map(|g| g.growth_kb).sum();
    // Growth is Rss+Swap: compared with resident bytes where pagemap was read, else with mapped bytes.
    let traced: u64 = if report.weighed {
        report.region_resident.iter().sum()
    } else {
        report.growing.iter().flat_map(|g| g.stacks.iter()).map(|s| s.still_mapped).sum()
    };
    (growth, traced)
}

fn per_min(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 { bytes as f64 / (1u64 << 20) as f64 * 60.0 / secs } else { 0.0 }
}

fn hook_modules(d: &Diagnosis) -> Vec<&str> {
    d.facts.hooks.iter().map(|h| h.module.as_str()).collect()
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
    if d.facts.hooks.is_empty() {
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

/// The findings, first in the text report.
pub fn write_text(d: &Diagnosis, report: &LeakReport, w: &mut dyn Write) -> io::Result<()> {
    let (growth_kb, traced) = growth_and_traced(report);
    let growth = growth_kb * 1024;
    writeln!(
        w,
        "\nFindings ({} rules checked; anonymous growth {} in {:.2}s, {:.1} MiB/min; {} of it on traced stacks):",
        d.rules_checked,
        kib(growth),
        d.duration_s,
        per_min(growth, d.duration_s),
        kib(traced.min(growth.max(traced))),
    )?;
    if d.findings.is_empty() {
        writeln!(w, "  Nothing known matches. Growth by stack is ranked below (leak candidates).")?;
    }
    let hooks = hook_modules(d);
    for (rank, f) in d.findings.iter().enumerate() {
        writeln!(w, "\n  #{} {}  [{}]", rank + 1, f.title, f.rule)?;
        let weight = weight(f, report);
        let share = if growth > 0 && !f.stacks.is_empty() {
            format!(", {:.0}% of the growth", 100.0 * weight as f64 / growth as f64)
        } else {
            String::new()
        };
        let what = match (f.stacks.is_empty(), report.weighed) {
            (true, _) => String::new(),
            (false, true) => format!(" still mapped by its stacks, {} of it resident", kib(weight)),
            (false, false) => " still mapped by its stacks".into(),
        };
        writeln!(w, "     what:  {}{what} ({:.2} MiB/min{share})", kib(f.bytes), per_min(f.bytes, d.duration_s))?;
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
    writeln!(w, "\n  Watched: {}", d.watched.paths.join("; "))?;
    if !d.watched.skipped.is_empty() {
        writeln!(w, "  Not watched: {}", d.watched.skipped.join("; "))?;
    }
    if d.nested > 0 {
        writeln!(
            w,
            "  {} calls were seen both at a libc function and at the syscall() inside it: counted once",
            d.nested
        )?;
    }
    if untraced_worth_saying(growth, traced) {
        writeln!(w, "  {} of the growth is on no traced stack. Next:", kib(growth - traced))?;
        for s in next_steps(d) {
            writeln!(w, "    - {s}")?;
        }
    }
    Ok(())
}

/// `finding` lines (most bytes first) and one `coverage` line.
pub fn write_json(d: &Diagnosis, report: &LeakReport, w: &mut dyn Write) -> io::Result<()> {
    let (growth_kb, traced) = growth_and_traced(report);
    let growth = growth_kb * 1024;
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
                "mib_per_min": per_min(f.bytes, d.duration_s),
                "share_of_growth": (growth > 0 && !f.stacks.is_empty()).then(|| weight(f, report) as f64 / growth as f64),
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
            "growth_bytes": growth,
            "traced_bytes": traced,
            "traced_is_resident": report.weighed,
            "watched": d.watched.paths,
            "not_watched": d.watched.skipped,
            "nested_calls": d.nested,
            "allocator": d.facts.allocator,
            "environment_source": d.facts.env_source,
            "hooks": d.facts.hooks.iter().map(|h| json!({"function": h.function, "how": h.how, "module": h.module, "text": h.text})).collect::<Vec<_>>(),
            "next": if untraced_worth_saying(growth, traced) { next_steps(d) } else { Vec::new() },
        }),
    )
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
