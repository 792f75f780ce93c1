//! `syscatch stack`: one-shot dump of every thread's stack, like eu-stack or pstack. Each thread is stopped
//! only for its own register and stack copy; unwinding and symbolizing happen after all threads run again.

use crate::analysis::modules::StackResolver;
use crate::analysis::unwind::End;
use crate::app::trace::check_target;
use crate::cli::StackArgs;
use crate::live::python::PythonReader;
use crate::live::selection::Chosen;
use crate::live::snapshot::{self, Seen, SnapshotError, ThreadSnapshot};
use crate::os::{Tid, procfs};
use crate::report::json::{frame_json, hex, line};
use crate::report::text::frame_line;
use crate::{model::status, report};
use anyhow::{Result, bail};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write;

pub fn run(args: &StackArgs) -> Result<i32> {
    let chosen = crate::app::choose::choose(&args.select)?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let many = chosen.processes.len() > 1;
    let (mut threads, mut errors, mut failed) = (0, 0, Vec::new());
    for (i, p) in chosen.processes.iter().enumerate() {
        if args.json {
            line(&mut out, "process", process_json(p))?;
        } else if many {
            writeln!(out, "{}process {}: {}", if i > 0 { "\n" } else { "" }, p.pids(), p.command)?;
        }
        match dump(p.pid, args, &mut out) {
            Ok((t, e)) => (threads, errors) = (threads + t, errors + e),
            // One process gone or refused: said, and the others are dumped (a single one fails as ever).
            Err(e) if many => {
                eprintln!("syscatch: {e:#}");
                if args.json {
                    line(&mut out, "warning", json!({ "pid": p.pid, "message": format!("{e:#}") }))?;
                }
                failed.push(p.pid);
            }
            Err(e) => return Err(e),
        }
    }
    if failed.len() == chosen.processes.len() {
        bail!("no process could be dumped");
    }
    if args.json {
        line(
            &mut out,
            "summary",
            json!({
                "schema": report::json::SCHEMA_VERSION,
                "processes": chosen.processes.len() - failed.len(),
                "threads": threads,
                "errors": errors + failed.len(),
            }),
        )?;
    }
    out.flush()?;
    Ok(if failed.is_empty() { chosen.status() } else { crate::live::selection::PARTIAL })
}

/// A `process` line: what the process is, and its pid in each namespace.
pub fn process_json(p: &Chosen) -> serde_json::Value {
    json!({ "pid": p.pid, "name": p.name, "command": p.command, "nspid": p.nspid })
}

/// Every thread's stack of one process, written to `out`; returns the threads dumped and the errors said.
fn dump(pid: Tid, args: &StackArgs, out: &mut impl Write) -> Result<(usize, usize)> {
    check_target(pid)?;
    // A Python process's frames are read too; a Python that cannot be read is said once, native frames go on.
    let (mut python, python_error) = match PythonReader::locate(pid) {
        Ok(p) => (p, None),
        Err(e) => (None, Some(format!("Python frames left out: {e}"))),
    };
    let (mut snaps, errors) = capture_all(pid, args.stack_bytes, python.as_mut());
    if snaps.is_empty() {
        let why: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        bail!("could not capture any thread of process {pid}: {}", why.join("; "));
    }
    let mut resolver = StackResolver::new(crate::live::modules::LiveModules::boxed(pid), args.stack_depth);
    // Every thread unwound first and its stack copy dropped: 34 threads' 64 KiB copies are 2 MB that need not
    // stay resident while debug info is loaded to name the frames.
    let unwound: Vec<_> = snaps
        .iter_mut()
        .map(|s| {
            let (u, sps) = resolver.unwind_with_sps(&s.capture);
            s.capture.stack = Default::default();
            s.capture.python = crate::python::place(&s.capture.python, &sps);
            u
        })
        .collect();
    for (s, unwound) in snaps.iter().zip(&unwound) {
        let mut stack = resolver.symbolize(unwound);
        crate::python::merge_python(&mut stack, &s.capture.python);
        let name = procfs::read_task_status(pid, s.tid).map(|t| status::parse_status(&t).name).unwrap_or_default();
        let end = match &unwound.end {
            End::Outermost(why) | End::Truncated(why) => why.clone(),
        };
        // Frames found by a fallback are worth knowing: the inlined frames share their real frame's way.
        let mut how = Vec::with_capacity(stack.frames.len());
        let mut raw = unwound.frames.iter().peekable();
        for f in &stack.frames {
            if f.kind != crate::model::stack::FrameKind::Native {
                how.push("python");
                continue;
            }
            let h = raw.peek().map(|r| r.how.as_str()).unwrap_or("?");
            how.push(h);
            if !f.inlined {
                raw.next();
            }
        }
        if args.json {
            let frames: Vec<_> = stack
                .frames
                .iter()
                .zip(&how)
                .map(|(f, h)| {
                    let mut v = frame_json(f);
                    v["found_by"] = json!(h);
                    v
                })
                .collect();
            line(
                out,
                "thread",
                json!({
                    "pid": pid,
                    "tid": s.tid,
                    "name": name,
                    "stopped_in": seen_text(s.seen),
                    "pc": hex(s.capture.regs.ip()),
                    "sp": hex(s.capture.regs.sp()),
                    "stack": frames,
                    "stack_truncated": stack.truncated,
                    "stack_end": end,
                }),
            )?;
        } else {
            writeln!(out, "thread {} ({name}), {}:", s.tid, seen_text(s.seen))?;
            for (i, (f, h)) in stack.frames.iter().zip(&how).enumerate() {
                let mark = match *h {
                    "frame-pointer" | "plt" | "entry" | "signal" => format!(" [{h}]"),
                    _ => String::new(),
                };
                writeln!(out, "    #{i:<2} {}{mark}", frame_line(f))?;
            }
            match &stack.truncated {
                Some(why) => writeln!(out, "    (stack truncated: {why})")?,
                None => writeln!(out, "    ({end})")?,
            }
        }
    }
    let unreadable: Vec<String> = resolver
        .modules
        .failed
        .iter()
        .map(|((path, _), why)| format!("{path}: frames in it are shown as addresses only: {why}"))
        .collect();
    let py_warnings = python.iter().flat_map(|p| p.warnings.iter().cloned());
    let errors: Vec<String> =
        errors.iter().map(|e| e.to_string()).chain(unreadable).chain(python_error).chain(py_warnings).collect();
    for e in &errors {
        if args.json {
            line(out, "warning", json!({ "pid": pid, "message": e }))?;
        } else {
            eprintln!("syscatch: process {pid}: {e}");
        }
    }
    Ok((snaps.len(), errors.len()))
}

fn seen_text(s: Seen) -> String {
    match s {
        Seen::Interrupted => "interrupted".into(),
        Seen::Signal(sig) => format!("at signal {sig} (delivered at detach)"),
        Seen::GroupStop(sig) => format!("group-stopped by signal {sig} (left stopped)"),
    }
}

/// Captures each thread in turn; threads created meanwhile are caught by rescanning until a pass finds none.
fn capture_all(
    pid: Tid,
    stack_bytes: usize,
    mut python: Option<&mut PythonReader>,
) -> (Vec<ThreadSnapshot>, Vec<SnapshotError>) {
    let restorers = crate::live::sigstack::read_restorers(pid);
    let mut done = BTreeSet::new();
    let mut snaps = Vec::new();
    let mut errors = Vec::new();
    loop {
        let tids: Vec<Tid> =
            procfs::list_tasks(pid).unwrap_or_default().into_iter().filter(|t| !done.contains(t)).collect();
        if tids.is_empty() {
            break;
        }
        for tid in tids {
            done.insert(tid);
            match snapshot::read_thread_with(tid, stack_bytes, python.as_deref_mut(), &restorers) {
                Ok(s) => snaps.push(s),
                Err(SnapshotError::Gone(_)) => {}
                Err(e) => errors.push(e),
            }
        }
    }
    snaps.sort_by_key(|s| s.tid);
    (snaps, errors)
}
