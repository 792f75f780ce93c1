//! `syscatch report FILE`: a recording analysed offline, as the live trace would have been: the same analysis
//! threads fed from the file instead of the tracer, modules read on this machine by build-id, the same renderers.
//! `--from`/`--to` report a part of it; `--diff BASE` compares the growth of each stack with another recording's.

use crate::app::analyze::{self as analysis, Numbered, Queued};
use crate::app::outputs::{self, Ending};
use crate::app::record::{Opened, Reader, Replay, Streamed};
use crate::app::trace::{self, Output};
use crate::cli::ReportArgs;
use crate::model::event::Summary;
use crate::report::Renderer;
use anyhow::{Context, Result, anyhow};
use std::io::Write;
use std::sync::Arc;

pub fn run(args: &ReportArgs) -> Result<i32> {
    let leaks = args.leaks
        || args.folded.is_some()
        || args.flamegraph.is_some()
        || args.pprof.is_some()
        || args.html.is_some()
        || args.fail_over.is_some()
        || args.from.is_some()
        || args.to.is_some();
    if args.rules.is_some() && !leaks {
        return Err(trace::usage("--rules goes with --leaks (the findings of the leak report)"));
    }
    let window = (args.from.unwrap_or_default().as_secs_f64(), args.to.map(|t| t.as_secs_f64()));
    if window.1.is_some_and(|to| to <= window.0) {
        return Err(trace::usage("--to must be later than --from"));
    }
    if let Some(base) = &args.diff {
        if args.html.is_some() {
            return Err(trace::usage("--html writes one recording's report: leave out --diff"));
        }
        return diff(args, base, window);
    }
    let out = output(args, leaks, window, format!("recording {}", args.file.display()))?;
    let rec = match one_of(Reader::open_all(&args.file)?, args.pid, &args.file)? {
        Ok(rec) => rec,
        Err(opened) => return session(&out, opened),
    };
    say_recording(&args.file, &rec);
    if let Some(end) = rec.summary.as_ref().map(|s| s.duration.as_secs_f64())
        && window.0 >= end
    {
        return Err(trace::usage(format!("--from {:.3}s is past the end of the recording ({end:.3}s)", window.0)));
    }
    report_one(&out, &rec)?;
    Ok(0)
}

/// The report's output options.
fn output(args: &ReportArgs, leaks: bool, window: (f64, Option<f64>), label: String) -> Result<Output> {
    Ok(Output {
        json: args.json,
        path: args.output.clone(),
        stack_bytes: 0,
        stack_depth: args.stack_depth,
        duration: None,
        leaks: leaks.then_some(std::time::Duration::ZERO),
        folded: args.folded.clone(),
        flamegraph: args.flamegraph.clone(),
        pprof: args.pprof.clone(),
        heap_pprof: None,
        html: args.html.clone(),
        label,
        weight: args.weight,
        fail_over: args.fail_over,
        window,
        report: leaks,
        rules: if leaks { crate::app::findings::load_rules(args.rules.as_deref())? } else { Vec::new() },
        record: None,
        smaps_every: std::time::Duration::ZERO,
        stop_every_call: false,
        faults: None,
        every: None,
        metrics: None,
        member: None,
    })
}

/// The recording to report of a file: its only one, or process `pid`'s of a session's; a session's whole
/// without `pid`.
fn one_of(mut opened: Opened, pid: Option<i32>, path: &std::path::Path) -> Result<Result<Reader, Opened>> {
    let whole = opened.processes.is_empty();
    match pid {
        None if whole => Ok(Ok(opened.parts.remove(0))),
        None => Ok(Err(opened)),
        Some(pid) => match opened.parts.iter().position(|r| r.pid == pid) {
            Some(i) => Ok(Ok(opened.parts.swap_remove(i))),
            None => {
                let pids: Vec<String> = opened.parts.iter().map(|r| r.pid.to_string()).collect();
                Err(trace::usage(format!(
                    "{} has no recording of process {pid} (it has {})",
                    path.display(),
                    pids.join(", ")
                )))
            }
        },
    }
}

/// One process's recording analysed, its report written (to a session member's buffers when `out` has one).
fn report_one(out: &Output, rec: &Reader) -> Result<()> {
    let (renderer, mut files) = outputs::open_outputs(out, false)?;
    let (done, mut summary, ending) = replay(rec, out, renderer)?;
    let window = out.window;
    if window.0 > 0.0 {
        let to = window.1.unwrap_or(f64::INFINITY).min(summary.duration.as_secs_f64());
        summary.warnings.push(format!(
            "the report covers {:.2}s to {to:.2}s of the recording (its calls before are not counted, their memory \
             not held by any stack)",
            window.0
        ));
    }
    outputs::finish(out, done, &mut summary, ending, &mut files, false)
}

/// A session's recording reported as the live session was: the table of processes, what holds in several,
/// each process's report, and the files for all of them.
fn session(out: &Output, opened: Opened) -> Result<i32> {
    use crate::app::session::Member;
    let files = crate::app::session_files::Files::create(out)?;
    let events: crate::app::session::Out =
        Arc::new(std::sync::Mutex::new(outputs::event_writer(out.path.as_deref(), false)?));
    // Each process's recording is analysed on a thread of its own, as it was traced.
    let done: Vec<_> = std::thread::scope(|scope| {
        let threads: Vec<_> = opened
            .processes
            .iter()
            .map(|p| {
                let member = Member {
                    events: outputs::render_events(out).then(|| (p.pid, events.clone())),
                    ..Member::default()
                };
                let rec = opened.parts.iter().find(|r| r.pid == p.pid);
                let o = Output { member: Some(member.clone()), label: format!("pid {}", p.pid), ..out.clone() };
                let thread = scope.spawn(move || match (&p.end, rec) {
                    (Ok(end), Some(rec)) => {
                        say_recording(&rec.path, rec);
                        report_one(&o, rec).map(|_| end.clone())
                    }
                    (Ok(_), None) => Err(anyhow!("its recording is not in the file")),
                    (Err(why), _) => Err(anyhow!("{why}")),
                });
                (p, member, thread)
            })
            .collect();
        threads
            .into_iter()
            .map(|(p, member, thread)| {
                let who = crate::live::selection::Chosen {
                    pid: p.pid,
                    name: p.name.clone(),
                    command: p.command.clone(),
                    nspid: p.nspid.clone(),
                };
                let end = thread.join().unwrap_or_else(|_| Err(anyhow!("internal error: the analysis panicked")));
                (who, member, end, p.joined)
            })
            .collect()
    });
    let mut done = done;
    let duration = opened.parts.iter().filter_map(|r| r.summary.as_ref().map(|s| s.duration)).max().unwrap_or_default();
    crate::app::session_report::write_session(out, &mut done, &events)?;
    files.write(out, &done, u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX))?;
    Ok(0)
}

fn say_recording(path: &std::path::Path, rec: &Reader) {
    let (path, pid, by) = (path.display(), rec.pid, &rec.syscatch);
    match &rec.truncated {
        None => {
            eprintln!("syscatch: {path}: a trace of process {pid} ({} events), recorded by syscatch {by}", rec.events)
        }
        Some(why) => eprintln!(
            "syscatch: {path}: a trace of process {pid}, recorded by syscatch {by}, TRUNCATED ({why}: syscatch was \
             stopped while recording): the report is of what it wrote to the file before it stopped"
        ),
    }
}

/// Runs the analysis over a recording's events and samples. Returns what the analysis made, the recorded
/// summary (with a warning for modules not found here) and the recorded end of the trace.
fn replay(rec: &Reader, out: &Output, renderer: Box<dyn Renderer + Send>) -> Result<(analysis::Done, Summary, Ending)> {
    let replay = Replay::new(rec);
    let missing = replay.missing.clone();
    let (depths, watched) = rec.plan.clone().unwrap_or_default();
    let acfg = analysis::Config {
        known: None,
        windows: Default::default(),
        source: Box::new(replay),
        stack_depth: out.stack_depth,
        depths: depths.into_iter().map(|(k, v)| (Arc::from(k.as_str()), v)).collect(),
        leaks: out.report,
        window: out.window,
        traced: None,
        baseline: None,
        render_events: !out.report || out.path.is_some(),
        recorder: None,
        interim: None,
        calls_for: None,
        malloc_every: rec.malloc_every,
        fault_every: rec.fault_every,
    };
    let (tx, rx) = crossbeam_channel::bounded(analysis::QUEUED_RECORDS);
    let worker = std::thread::Builder::new()
        .name("analysis".into())
        .spawn(move || analysis::run(rx, renderer, acfg))
        .context("cannot start the analysis thread")?;
    let (mut failed, mut changes) = (None, false);
    for item in rec.stream()? {
        changes |= matches!(item, Ok(Streamed::Changes(..)));
        let q = match item {
            Ok(Streamed::Event(ev, stack_dropped, leak)) => {
                Queued::Call { ev, stack_dropped, numbered: leak.map_or(Numbered::No, Numbered::Call) }
            }
            Ok(Streamed::Stack(ev, n)) => Queued::Call { ev, stack_dropped: false, numbered: Numbered::Stack(n) },
            Ok(Streamed::Changes(time, changes, nested)) => Queued::Changes(time, changes, nested),
            Ok(Streamed::Sample(time, spans, baseline)) => Queued::Sample(time, spans, baseline),
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        if tx.send(q).is_err() {
            break;
        }
    }
    drop(tx);
    let done = worker.join().map_err(|_| anyhow!("internal error in the analysis thread"))?;
    if let Some(e) = failed {
        return Err(e);
    }
    let mut summary = rec.summary.clone().unwrap_or_default();
    if changes && !out.report {
        summary.warnings.push(format!(
            "the recording holds each mapping call of the trace's first {:.0} seconds only, then the leak model's \
             changes: report it with --leaks",
            crate::app::record::CALLS_FOR
        ));
    }
    if let Some(why) = &rec.truncated {
        summary.warnings.push(format!("the recording is truncated ({why}): the report is of what it holds"));
    }
    let mut missing = missing.lock().unwrap_or_else(|e| e.into_inner()).clone();
    missing.sort();
    missing.dedup();
    if !missing.is_empty() {
        summary.warnings.push(format!(
            "{} module(s) of the recording are not on this machine as recorded; their frames show addresses only: {}",
            missing.len(),
            missing.join("; ")
        ));
    }
    let residency = rec.residency.clone();
    // Residency was read at the end of the trace: a window that ends earlier is not weighed with it.
    let at_end = out.window.1.is_none_or(|to| to >= summary.duration.as_secs_f64());
    let ending = Ending {
        final_sample: None,
        residency: Box::new(move |s, e, max| residency.get(&(s, e, max)).copied().filter(|_| at_end)),
        facts: rec.facts.clone(),
        watched,
    };
    Ok((done, summary, ending))
}

/// `report --diff BASE NEW`: each recording's growth by stack, matched by symbolized frames. Recordings of
/// several processes are compared process by process, matched by command line (in pid order among the same).
fn diff(args: &ReportArgs, base: &std::path::Path, window: (f64, Option<f64>)) -> Result<i32> {
    let pairs = pair(Reader::open_all(base)?, Reader::open_all(&args.file)?, args.pid, &args.file)?;
    let mut w: Box<dyn std::io::Write> = Box::new(std::io::BufWriter::new(std::io::stdout()));
    let mut over = Vec::new();
    // Every recording's model is made on a thread of its own.
    let models: Vec<Result<_>> = std::thread::scope(|scope| {
        let threads: Vec<_> = pairs
            .iter()
            .map(|p| {
                let model = |r| move || diff_model(args, r, window);
                (scope.spawn(model(&p.base)), scope.spawn(model(&p.new)))
            })
            .collect();
        let join = |t: std::thread::ScopedJoinHandle<'_, Result<_>>| {
            t.join().unwrap_or_else(|_| Err(anyhow!("internal error: the analysis panicked")))
        };
        threads.into_iter().map(|(b, n)| Ok((join(b)?, join(n)?))).collect()
    });
    for (p, models) in pairs.iter().zip(models) {
        let (b, n) = models?;
        let (b, n) = (b.report(), n.report());
        let rows = crate::report::diff::compare(&b, &n);
        let (bpid, npid) = (p.base.pid, p.new.pid);
        match (&p.command, args.json) {
            (Some(command), true) => {
                let v = serde_json::json!({"pid": npid, "base_pid": bpid, "command": command});
                crate::report::json::line(&mut w, "process", v)?;
                let mut buf = Vec::new();
                crate::report::diff::write_json(&rows, &b, &n, &mut buf)?;
                crate::report::json::with_pid(&buf, npid, &mut w)?;
            }
            (Some(command), false) => {
                writeln!(w, "=== process {npid} (process {bpid} in {}): {command} ===", base.display())?;
                crate::report::diff::write_text(&rows, &b, &n, base, &args.file, &mut w)?;
            }
            (None, true) => crate::report::diff::write_json(&rows, &b, &n, &mut w)?,
            (None, false) => crate::report::diff::write_text(&rows, &b, &n, base, &args.file, &mut w)?,
        }
        if let Some(line) = args.fail_over.and_then(|limit| crate::report::leaks::gate(&n, limit)) {
            over.push(match p.command {
                Some(_) => format!("process {npid}: {line}"),
                None => line,
            });
        }
    }
    w.flush()?;
    match over.is_empty() {
        true => Ok(0),
        false => Err(trace::GateFailed(over.join("; ")).into()),
    }
}

/// The leak model of one recording, for `--diff`.
fn diff_model(
    args: &ReportArgs,
    rec: &Reader,
    window: (f64, Option<f64>),
) -> Result<crate::analysis::leaks::LeakTracker> {
    say_recording(&rec.path, rec);
    let mut out = output(args, true, window, String::new())?;
    (out.json, out.path, out.folded, out.flamegraph, out.pprof, out.html, out.fail_over) =
        (false, None, None, None, None, None, None);
    out.rules = Vec::new();
    let sink: Box<dyn Renderer + Send> = Box::new(crate::report::json::Json::new(std::io::sink()));
    let (done, _, mut ending) = replay(rec, &out, sink)?;
    let mut tracker = done.leaks.ok_or_else(|| anyhow!("internal error: no leak model"))?;
    tracker.weigh_residency(&mut *ending.residency);
    Ok(tracker)
}

/// The same process in two recordings; its command line when either holds several processes.
struct Pair {
    command: Option<String>,
    base: Reader,
    new: Reader,
}

/// Matches the processes of two recordings (of `pid` only, in NEW, when given): a process's recording with the
/// same process's, else one of the same command line, in pid order; two recordings of one process each are
/// compared whatever they are.
fn pair(base: Opened, new: Opened, pid: Option<i32>, path: &std::path::Path) -> Result<Vec<Pair>> {
    let several = !base.processes.is_empty() || !new.processes.is_empty();
    let commands = |o: Opened| -> Vec<(Option<String>, Reader)> {
        let mut v: Vec<_> = o
            .parts
            .into_iter()
            .map(|r| (o.processes.iter().find(|p| p.pid == r.pid).map(|p| p.command.clone()), r))
            .collect();
        v.sort_by_key(|(_, r)| r.pid);
        v
    };
    let (mut bases, mut news) = (commands(base), commands(new));
    if let Some(pid) = pid {
        news.retain(|(_, r)| r.pid == pid);
        if news.is_empty() {
            return Err(trace::usage(format!("{} has no recording of process {pid}", path.display())));
        }
    }
    if bases.len() == 1 && news.len() == 1 {
        let ((bc, base), (nc, new)) = (bases.remove(0), news.remove(0));
        let command = several.then(|| nc.or(bc).unwrap_or_default());
        return Ok(vec![Pair { command, base, new }]);
    }
    let mut pairs = Vec::new();
    for (command, new) in news {
        // The same process recorded twice first (a server recorded again later), then one of the same command.
        let same = |(c, r): &(Option<String>, Reader)| *c == command && r.pid == new.pid;
        match bases.iter().position(same).or_else(|| bases.iter().position(|(c, _)| *c == command)) {
            Some(i) => {
                let (_, base) = bases.remove(i);
                pairs.push(Pair { command: Some(command.unwrap_or_default()), base, new });
            }
            None => eprintln!(
                "syscatch: process {} ({}) has no process of the same command line in the base: not compared",
                new.pid,
                command.as_deref().unwrap_or("?")
            ),
        }
    }
    if pairs.is_empty() {
        return Err(anyhow!("no process of {} has the command line of one in the base recording", path.display()));
    }
    Ok(pairs)
}
