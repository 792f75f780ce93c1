//! `syscatch hooks`: who intercepted the memory functions of a process, from memory reads alone (the target
//! never stops). See `hooks` for what is checked and how.

use crate::analysis::rules::{self, Facts, Finding, ProcessFacts};
use crate::app::trace::usage;
use crate::cli::HooksArgs;
use crate::hooks::{self, MEMORY_FUNCTIONS, Status, read, render};
use anyhow::{Result, anyhow};
use std::io::Write;

pub fn run(args: &HooksArgs) -> Result<i32> {
    let mut functions: Vec<String> = MEMORY_FUNCTIONS.iter().map(|s| s.to_string()).collect();
    for s in args.symbols.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        if !functions.iter().any(|f| f == s) {
            functions.push(s.to_string());
        }
    }
    let (process, mem) = read::read_process(args.pid)?;
    let mut entry_modules = Vec::new();
    for m in &args.module {
        let found = read::find_modules(&process, m);
        if found.is_empty() {
            let loaded: Vec<&str> = process.images.iter().map(|i| i.short()).collect();
            return Err(usage(format!(
                "--module {m}: process {} has no such module; loaded: {}",
                args.pid,
                loaded.join(", ")
            )));
        }
        entry_modules.extend(found);
    }
    let cs = crate::x86::breakpoints::disassembler().ok_or_else(|| anyhow!("capstone failed to initialise"))?;
    let report = hooks::analyze(&process, &functions, &entry_modules, &mem, &cs);
    let advice = hook_advice(args.pid, &report, &functions)?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        render::json(&mut out, &report, &functions).and_then(|_| advice_json(&mut out, &advice))
    } else {
        render::text(&mut out, &report, &functions).and_then(|_| advice_text(&mut out, &advice))
    };
    match written {
        // A reader that stops early (`| head`) is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
        r => r?,
    }
    for w in &report.warnings {
        eprintln!("syscatch: warning: {w}");
    }
    let count = |s: Status| report.got.iter().filter(|r| r.status == s).count();
    let entries = report.inline.iter().filter(|r| matches!(r.status, hooks::EntryStatus::Patched(_))).count();
    eprintln!(
        "syscatch: process {}: {} GOT slots checked in {} modules: {} patched at run time, {} interposed at load, \
         {} unresolved; {} function entries checked, {} patched",
        args.pid,
        report.got.len(),
        process.link_order.len(),
        count(Status::PatchedAtRunTime),
        count(Status::InterposedAtLoad),
        count(Status::Unresolved),
        report.inline.len(),
        entries
    );
    Ok(0)
}

/// The findings rules a hook takes part in (the same rules as `--leaks`), with the process's allocator,
/// environment and kernel settings; growth is for `--leaks` to show.
fn hook_advice(pid: i32, report: &hooks::Report, functions: &[String]) -> Result<Vec<Finding>> {
    let hooks = render::hook_facts(report, functions);
    if hooks.is_empty() {
        return Ok(Vec::new());
    }
    let rules = crate::app::findings::load_rules(None)?;
    let process = ProcessFacts { hooks, ..crate::live::facts::read_facts_but_hooks(pid, None) };
    Ok(rules::hook_advice(&rules, &Facts::of(process, Vec::new())))
}

fn advice_text(w: &mut dyn Write, advice: &[Finding]) -> std::io::Result<()> {
    if advice.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "\nKnown patterns these hooks take part in (rules; `syscatch --pid N --leaks` shows whether memory grows):"
    )?;
    for f in advice {
        writeln!(w, "  {}  [{}]", f.title, f.rule)?;
        for e in &f.evidence {
            writeln!(w, "     - {e}")?;
        }
        if let Some(fix) = f.fix.first() {
            writeln!(w, "     fix: {}", fix.action)?;
        }
    }
    Ok(())
}

fn advice_json(w: &mut impl Write, advice: &[Finding]) -> std::io::Result<()> {
    for f in advice {
        let v = serde_json::json!({"rule": f.rule, "title": f.title, "evidence": f.evidence, "fix": f.fix});
        crate::report::json::line(w, "advice", v)?;
    }
    w.flush()
}
