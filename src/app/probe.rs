//! `syscatch run FILE` and `syscatch check FILE`: load a probe script, report its errors with the offending line
//! (exit 2), and with a pid resolve every location without attaching (exit 1 when the process does not fit).

use crate::app::trace::{self, usage};
use crate::cli::{CheckArgs, RunArgs};
use crate::probe::{self, ParseError, Script, Span, print};
use anyhow::anyhow;
use std::path::Path;

/// `syscatch run FILE --pid N`: resolves every probe, then traces as `--syscall` does. The command line's
/// `--for` and `--json` override the script's settings; `set smaps_every` turns on leak tracking.
pub fn run(args: &RunArgs) -> anyhow::Result<i32> {
    // As for a trace: a stop request while getting ready is kept (see `trace::trace`).
    crate::os::signals::install_stop_handlers();
    let (file, script) = load(&args.file)?;
    let pid = args.pid;
    trace::check_target(pid)?;
    let resolved = probe::resolve_locations(pid, &script).map_err(|e| at_probe(&file, e))?;
    let mem = trace::open_mem(pid)?;
    let needs_wrapper = script.probes.iter().any(|p| matches!(p.location, probe::Location::Syscall { .. }));
    // --fast places its trampoline at the wrapper, also for probes on libc's functions alone.
    let wrapper = match (needs_wrapper, args.no_fast) {
        (true, _) => Some(trace::syscall_site(pid, &mem)?),
        (false, false) => trace::syscall_site(pid, &mem).ok(),
        (false, true) => None,
    };
    let plan = probe::run::plan(pid, &script, &resolved, wrapper.as_ref(), &mem, !args.no_fast)?;
    drop(mem);
    let out = trace::Output {
        json: args.json || script.settings.json == Some(true),
        path: args.output.clone(),
        stack_bytes: args.stack_bytes,
        stack_depth: crate::probe::DEFAULT_STACK_DEPTH,
        duration: args.duration.or(script.settings.duration),
        leaks: script.settings.smaps_every,
        folded: None,
        flamegraph: None,
        pprof: None,
        heap_pprof: None,
        html: None,
        label: format!("pid {pid}"),
        weight: Default::default(),
        fail_over: None,
        window: (0.0, None),
        report: false,
        rules: Vec::new(),
        record: args.record.clone(),
        smaps_every: script.settings.smaps_every.unwrap_or(std::time::Duration::from_secs(1)),
        stop_every_call: args.no_known_stacks,
        faults: None,
        every: None,
        metrics: None,
        member: None,
    };
    trace::run_trace(&out, plan, trace::Start::Attach(pid))?;
    Ok(0)
}

/// A location error names its place in the script (`FILE:LINE:COL: probe `p`: ...`); the others stand alone.
fn at_probe(file: &str, e: probe::Error) -> anyhow::Error {
    match &e {
        probe::Error::Location { span, .. } => anyhow!("{file}:{}:{}: {e}", span.line, span.col),
        _ => e.into(),
    }
}

pub fn check(args: &CheckArgs) -> anyhow::Result<i32> {
    let (file, script) = load(&args.file)?;
    let resolved = match args.pid {
        Some(pid) => Some(probe::resolve_locations(pid, &script).map_err(|e| at_probe(&file, e))?),
        None => None,
    };
    for (i, p) in script.probes.iter().enumerate() {
        let mut line = format!("{}: {}", p.name, print::location(&p.location));
        if let Some(c) = &p.condition {
            line += &format!(" if {}", print::expr(c));
        }
        if let Some(r) = resolved.as_ref().and_then(|r| r.get(i)) {
            let offset = match &p.location {
                probe::Location::Function { offset, .. } => *offset,
                _ => 0,
            };
            line += &format!(" -> {}", r.describe(offset));
        }
        for stmt in print::body(p) {
            line += "; ";
            line += &stmt;
        }
        println!("{line}");
    }
    Ok(0)
}

/// Reads, parses and checks a script; every problem with the script itself is a usage error (exit 2) showing
/// the offending line. Returns the name used for the file in messages, and the script.
pub fn load(path: &Path) -> anyhow::Result<(String, Script)> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| usage(format!("cannot read probe script {file}: {e}")))?;
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let good = String::from_utf8_lossy(good);
            let line = good.matches('\n').count() + 1;
            let col = good.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let span = Span { line, col };
            let text = String::from_utf8_lossy(e.as_bytes());
            return Err(usage(ParseError::at(&file, &text, span, "not UTF-8 text").to_string()));
        }
    };
    let script = probe::parse(&file, &text).map_err(|e| usage(e.to_string()))?;
    probe::check_script(&script).map_err(|e| usage(ParseError::at(&file, &text, e.span, e.message).to_string()))?;
    Ok((file, script))
}
