//! `syscatch report FILE`: a recording analysed offline, as the live trace would have been: the same analysis
//! threads fed from the file instead of the tracer, modules read on this machine by build-id, the same renderers.
//! `--from`/`--to` report a part of it; `--diff BASE` compares the growth of each stack with another recording's.

use crate::app::analyze::{self as analysis, Queued};
use crate::app::outputs::{self, Ending};
use crate::app::record::{Reader, Replay, Streamed};
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
    let rec = Reader::open(&args.file)?;
    say_recording(&args.file, &rec);
    if let Some(end) = rec.summary.as_ref().map(|s| s.duration.as_secs_f64())
        && window.0 >= end
    {
        return Err(trace::usage(format!("--from {:.3}s is past the end of the recording ({end:.3}s)", window.0)));
    }
    let out = Output {
        json: args.json,
        path: args.output.clone(),
        stack_bytes: 0,
        stack_depth: args.stack_depth,
        duration: None,
        leaks: leaks.then_some(std::time::Duration::ZERO),
        folded: args.folded.clone(),
        flamegraph: args.flamegraph.clone(),
        pprof: args.pprof.clone(),
        html: args.html.clone(),
        label: format!("recording {}", args.file.display()),
        weight: args.weight,
        fail_over: args.fail_over,
        window,
        report: leaks,
        rules: if leaks { crate::app::findings::load_rules(args.rules.as_deref())? } else { Vec::new() },
        record: None,
        smaps_every: std::time::Duration::ZERO,
        stop_every_call: false,
        member: None,
    };
    let (renderer, files) = outputs::open_outputs(&out, false)?;
    let (done, mut summary, ending) = replay(&rec, &out, renderer)?;
    if let (Some(from), Some(to)) = (args.from, args.to.or(Some(summary.duration))) {
        summary.warnings.push(format!(
            "the report covers {:.2}s to {:.2}s of the recording (its calls before are not counted, their memory \
             not held by any stack)",
            from.as_secs_f64(),
            to.as_secs_f64().min(summary.duration.as_secs_f64())
        ));
    }
    outputs::finish(&out, done, &mut summary, ending, files, false)?;
    Ok(0)
}

fn say_recording(path: &std::path::Path, rec: &Reader) {
    eprintln!(
        "syscatch: {}: a trace of process {} ({} events), recorded by syscatch {}",
        path.display(),
        rec.pid,
        rec.events,
        rec.syscatch
    );
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
    };
    let (tx, rx) = crossbeam_channel::bounded(analysis::QUEUED_RECORDS);
    let worker = std::thread::Builder::new()
        .name("analysis".into())
        .spawn(move || analysis::run(rx, renderer, acfg))
        .context("cannot start the analysis thread")?;
    let mut failed = None;
    for item in rec.stream()? {
        let q = match item {
            Ok(Streamed::Event(ev, stack_dropped)) => Queued::Call { ev, stack_dropped },
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

/// `report --diff BASE NEW`: each recording's growth by stack, matched by symbolized frames.
fn diff(args: &ReportArgs, base: &std::path::Path, window: (f64, Option<f64>)) -> Result<i32> {
    let mut reports = Vec::new();
    for path in [base, args.file.as_path()] {
        let rec = Reader::open(path)?;
        say_recording(path, &rec);
        let out = Output {
            json: false,
            path: None,
            stack_bytes: 0,
            stack_depth: args.stack_depth,
            duration: None,
            leaks: Some(std::time::Duration::ZERO),
            folded: None,
            flamegraph: None,
            pprof: None,
            html: None,
            label: String::new(),
            weight: args.weight,
            fail_over: None,
            window,
            report: true,
            rules: Vec::new(),
            record: None,
            smaps_every: std::time::Duration::ZERO,
            stop_every_call: false,
            member: None,
        };
        let sink: Box<dyn Renderer + Send> = Box::new(crate::report::json::Json::new(std::io::sink()));
        let (done, summary, mut ending) = replay(&rec, &out, sink)?;
        let mut tracker = done.leaks.ok_or_else(|| anyhow!("internal error: no leak model"))?;
        tracker.weigh_residency(&mut *ending.residency);
        reports.push((tracker, summary));
    }
    let (new_tracker, _) = reports.pop().expect("two reports");
    let (base_tracker, _) = reports.pop().expect("two reports");
    let (b, n) = (base_tracker.report(), new_tracker.report());
    let rows = crate::report::diff::compare(&b, &n);
    let mut w: Box<dyn std::io::Write> = Box::new(std::io::BufWriter::new(std::io::stdout()));
    if args.json {
        crate::report::diff::write_json(&rows, &b, &n, &mut w)?;
    } else {
        crate::report::diff::write_text(&rows, &b, &n, base, &args.file, &mut w)?;
    }
    w.flush()?;
    if let Some(limit) = args.fail_over
        && let Some(line) = crate::report::leaks::gate(&n, limit)
    {
        return Err(trace::GateFailed(line).into());
    }
    Ok(0)
}
