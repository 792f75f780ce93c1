//! `syscatch report FILE`: a recording analysed offline, as the live trace would have been: the same analysis
//! threads fed from the file instead of the tracer, modules read on this machine by build-id, the same renderers.

use crate::app::analyze::{self as analysis, Queued};
use crate::app::record::{Reader, Replay, Streamed};
use crate::app::trace::{self, Ending, Output};
use crate::cli::ReportArgs;
use anyhow::{Context, Result, anyhow};
use std::sync::Arc;

pub fn run(args: &ReportArgs) -> Result<i32> {
    let leaks = args.leaks || args.folded.is_some() || args.flamegraph.is_some() || args.pprof.is_some();
    if args.rules.is_some() && !leaks {
        return Err(trace::usage("--rules goes with --leaks (the findings of the leak report)"));
    }
    let rec = Reader::open(&args.file)?;
    eprintln!(
        "syscatch: {}: a trace of process {} ({} events), recorded by syscatch {}",
        args.file.display(),
        rec.pid,
        rec.events,
        rec.syscatch
    );
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
        report: leaks,
        rules: if leaks { crate::app::findings::load_rules(args.rules.as_deref())? } else { Vec::new() },
        record: None,
        smaps_every: std::time::Duration::ZERO,
    };
    let (renderer, files) = trace::open_outputs(&out, false)?;
    let replay = Replay::new(&rec);
    let missing = replay.missing.clone();
    let (depths, watched) = rec.plan.clone().unwrap_or_default();
    let acfg = analysis::Config {
        source: Box::new(replay),
        stack_depth: out.stack_depth,
        depths: depths.into_iter().map(|(k, v)| (Arc::from(k.as_str()), v)).collect(),
        leaks,
        sampler: None,
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
            Ok(Streamed::Sample(spans)) => Queued::Sample(spans),
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
    let ending = Ending {
        final_sample: None,
        residency: Box::new(move |s, e, max| residency.get(&(s, e, max)).copied()),
        facts: rec.facts.clone(),
        watched,
    };
    trace::finish(&out, done, &mut summary, ending, files, false)?;
    Ok(0)
}
