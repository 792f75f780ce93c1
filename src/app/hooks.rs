//! `syscatch hooks`: who intercepted the memory functions of a process, from memory reads alone (the target
//! never stops). See `hooks` for what is checked and how.

use crate::analysis::rules::{self, Facts, Finding, ProcessFacts};
use crate::app::trace::usage;
use crate::cli::HooksArgs;
use crate::hooks::{self, MEMORY_FUNCTIONS, Status, read, render};
use crate::report::json::line;
use anyhow::{Result, anyhow};
use std::io::Write;

pub fn run(args: &HooksArgs) -> Result<i32> {
    let mut functions: Vec<String> = MEMORY_FUNCTIONS.iter().map(|s| s.to_string()).collect();
    for s in args.symbols.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        if !functions.iter().any(|f| f == s) {
            functions.push(s.to_string());
        }
    }
    let chosen = crate::app::choose::choose(&args.select)?;
    let cs = crate::x86::breakpoints::disassembler().ok_or_else(|| anyhow!("capstone failed to initialise"))?;
    let [one] = chosen.processes.as_slice() else {
        return several(args, &chosen, &functions, &cs);
    };
    let checked = check(one.pid, args, &functions, &cs)?;
    let mut out = std::io::stdout().lock();
    match out.write_all(&checked.output).and_then(|_| out.flush()) {
        // A reader that stops early (`| head`) is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
        r => r?,
    }
    checked.say();
    Ok(chosen.status())
}

/// What `hooks` found in one process: its output (text or JSON Lines), its warnings and the line of counts.
struct Checked {
    output: Vec<u8>,
    warnings: Vec<String>,
    counts: String,
}

impl Checked {
    fn say(&self) {
        for w in &self.warnings {
            eprintln!("syscatch: warning: {w}");
        }
        eprintln!("syscatch: {}", self.counts);
    }
}

/// Several processes: each checked in turn. In text, processes whose verdicts and advice are the same are
/// written once, with the processes they hold in ("same in 8 processes"); in JSON each line carries its `pid`,
/// after a `process` line.
fn several(
    args: &HooksArgs,
    chosen: &crate::live::selection::Selection,
    functions: &[String],
    cs: &capstone::Capstone,
) -> Result<i32> {
    let mut status = chosen.status();
    let mut groups: Vec<(Vec<&crate::live::selection::Chosen>, Vec<u8>)> = Vec::new();
    let mut out = std::io::stdout().lock();
    for p in &chosen.processes {
        let checked = match check(p.pid, args, functions, cs) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("syscatch: {e:#}");
                status = crate::live::selection::PARTIAL;
                continue;
            }
        };
        checked.say();
        if args.json {
            line(&mut out, "process", crate::app::stack::process_json(p))?;
            crate::report::json::with_pid(&checked.output, p.pid, &mut out)?;
            continue;
        }
        match groups.iter_mut().find(|(_, text)| *text == checked.output) {
            Some((ps, _)) => ps.push(p),
            None => groups.push((vec![p], checked.output)),
        }
    }
    for (i, (ps, text)) in groups.iter().enumerate() {
        let sep = if i > 0 { "\n" } else { "" };
        match ps.as_slice() {
            [p] => writeln!(out, "{sep}process {}: {}", p.pids(), p.command)?,
            _ => {
                let list: Vec<String> = ps.iter().map(|p| p.pids()).collect();
                let mut commands: Vec<&str> = Vec::new();
                for p in ps {
                    if !commands.contains(&p.command.as_str()) {
                        commands.push(&p.command);
                    }
                }
                writeln!(out, "{sep}same in {} processes: {} ({})", ps.len(), list.join(", "), commands.join("; "))?;
            }
        }
        out.write_all(text)?;
    }
    match out.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(status),
        r => r.map(|_| status).map_err(Into::into),
    }
}

/// Checks one process's GOT slots and function entries, and renders what was found.
fn check(pid: i32, args: &HooksArgs, functions: &[String], cs: &capstone::Capstone) -> Result<Checked> {
    let (process, mem) = read::read_process(pid)?;
    let mut entry_modules = Vec::new();
    for m in &args.module {
        let found = read::find_modules(&process, m);
        if found.is_empty() {
            let loaded: Vec<&str> = process.images.iter().map(|i| i.short()).collect();
            return Err(usage(format!(
                "--module {m}: process {pid} has no such module; loaded: {}",
                loaded.join(", ")
            )));
        }
        entry_modules.extend(found);
    }
    let report = hooks::analyze(&process, functions, &entry_modules, &mem, cs);
    let advice = hook_advice(pid, &report, functions)?;
    let mut output = Vec::new();
    if args.json {
        render::json(&mut output, &report, functions)?;
        advice_json(&mut output, &advice)?;
    } else {
        render::text(&mut output, &report, functions)?;
        advice_text(&mut output, &advice)?;
    }
    let count = |s: Status| report.got.iter().filter(|r| r.status == s).count();
    let entries = report.inline.iter().filter(|r| matches!(r.status, hooks::EntryStatus::Patched(_))).count();
    let counts = format!(
        "process {pid}: {} GOT slots checked in {} modules: {} patched at run time, {} interposed at load, \
         {} unresolved; {} function entries checked, {} patched",
        report.got.len(),
        process.link_order.len(),
        count(Status::PatchedAtRunTime),
        count(Status::InterposedAtLoad),
        count(Status::Unresolved),
        report.inline.len(),
        entries
    );
    Ok(Checked { output, warnings: report.warnings, counts })
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
