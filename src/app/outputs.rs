//! What a trace writes once the analysis is done: the event stream's writer, the report files (`--folded`,
//! `--flamegraph`, `--pprof`), and the end of the report (the last sample, residency, findings, the gate), for a
//! live trace and for `syscatch report` alike; and while it runs, the report so far (`--every`, `--metrics`).

use crate::analysis::leaks::LeakReport;
use crate::app::analyze as analysis;
use crate::app::analyze::Interim;
use crate::app::trace::{GateFailed, Output};
use crate::model::event::Summary;
use crate::model::smaps::Span;
use crate::os::Tid;
use crate::report::Renderer;
use crate::report::json::Json;
use crate::report::text::Text;
use anyhow::{Context, Result, anyhow, bail};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Where events are rendered: stdout, or stderr when a spawned command owns stdout, or a file.
pub(crate) fn event_writer(path: Option<&std::path::Path>, spawned: bool) -> Result<Box<dyn Write + Send>> {
    Ok(match path {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None if spawned => Box::new(std::io::stderr()),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    })
}

/// Where the report goes in report mode: stdout, or stderr when a spawned command owns stdout; a session's
/// member keeps it for the session's report.
fn report_writer(out: &Output, spawned: bool) -> Box<dyn Write + Send> {
    match &out.member {
        Some(m) => Box::new(m.report.clone()),
        None if spawned => Box::new(std::io::stderr()),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    }
}

/// Where the summary goes: stderr, or a session member's buffer.
fn summary_writer(out: &Output) -> Box<dyn Write + Send> {
    match &out.member {
        Some(m) => Box::new(m.err.clone()),
        None => Box::new(std::io::stderr()),
    }
}

/// In report mode the event stream is wanted only in a file: without one, events are not rendered at all.
pub(crate) fn render_events(out: &Output) -> bool {
    !out.report || out.path.is_some()
}

/// The files a report writes besides its main output.
pub struct ReportFiles {
    folded: Option<BufWriter<File>>,
    flame: Option<BufWriter<File>>,
    pprof: Option<BufWriter<File>>,
    heap_pprof: Option<BufWriter<File>>,
    html: Option<BufWriter<File>>,
}

impl ReportFiles {
    /// Writes the report into each file, from its start (an interim report's file is rewritten: `--every`).
    pub fn write(&mut self, out: &Output, report: &LeakReport, duration_ns: u64) -> Result<()> {
        type Body<'a> = Box<dyn Fn(&mut dyn Write) -> std::io::Result<()> + 'a>;
        type File<'a> = (&'a mut Option<BufWriter<std::fs::File>>, &'a Option<PathBuf>, Body<'a>);
        let folded = |w: &mut dyn Write| {
            let text: String = report.folded(out.weight).iter().map(|l| format!("{l}\n")).collect();
            w.write_all(text.as_bytes())
        };
        let each: [File; 5] = [
            (&mut self.folded, &out.folded, Box::new(folded)),
            (&mut self.flame, &out.flamegraph, Box::new(|w| report.flamegraph(w, out.weight))),
            (&mut self.pprof, &out.pprof, Box::new(|w| report.pprof(w, duration_ns))),
            (&mut self.heap_pprof, &out.heap_pprof, Box::new(|w| report.heap_pprof(w, duration_ns))),
            (&mut self.html, &out.html, Box::new(|w| report.html(w, &out.label))),
        ];
        for (file, path, body) in each {
            let (Some(f), Some(path)) = (file.as_mut(), path) else { continue };
            rewrite(f, &*body).with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}

/// Writes `body` into `f` from its start, cutting what was there after it (a pipe or a terminal, which cannot
/// seek, is written on).
fn rewrite(f: &mut BufWriter<File>, body: &dyn Fn(&mut dyn Write) -> std::io::Result<()>) -> std::io::Result<()> {
    f.flush()?;
    let file = f.get_mut();
    if file.stream_position().is_ok_and(|p| p > 0) {
        file.seek(SeekFrom::Start(0))?;
        file.set_len(0)?;
    }
    body(f)?;
    f.flush()
}

/// Creates every output of `out` (refusing a bad path before anything else happens): the event renderer and
/// the report files.
pub fn open_outputs(out: &Output, spawned: bool) -> Result<(Box<dyn Renderer + Send>, ReportFiles)> {
    let stream = out.member.as_ref().and_then(|m| m.stream(out.json));
    let w: Box<dyn Write + Send> = match (render_events(out), stream) {
        (true, Some(stream)) => Box::new(stream),
        (true, None) => event_writer(out.path.as_deref(), spawned)?,
        (false, _) => Box::new(std::io::sink()),
    };
    // A session's member writes none: the session writes every process's stacks into one of each.
    let create = |p: &Option<PathBuf>| match (p, &out.member) {
        (Some(p), None) => std::fs::File::create(p)
            .map(|f| Some(std::io::BufWriter::new(f)))
            .with_context(|| format!("cannot create {}", p.display())),
        _ => Ok(None),
    };
    let files = ReportFiles {
        folded: create(&out.folded)?,
        flame: create(&out.flamegraph)?,
        pprof: create(&out.pprof)?,
        heap_pprof: create(&out.heap_pprof)?,
        html: create(&out.html)?,
    };
    let renderer: Box<dyn Renderer + Send> =
        if out.json { Box::new(Json::new(w)) } else { Box::new(Text::new(w, summary_writer(out))) };
    Ok((renderer, files))
}

/// Pagemap entries read and resident bytes of a range `(start, end, max_pages)`.
pub type Residency = dyn FnMut(u64, u64, u64) -> Option<(u64, u64)>;

/// What the end of a report needs from the target (read after detach) or from a recording.
pub struct Ending {
    /// The last sample, of the whole smaps (a recording has it among its events already).
    pub final_sample: Option<Vec<Span>>,
    /// Pagemap entries read and resident bytes of a range (see `LeakTracker::weigh_residency`).
    pub residency: Box<Residency>,
    pub facts: Option<crate::analysis::rules::ProcessFacts>,
    pub watched: crate::model::watch::Watched,
}

/// After the analysis: the leak report with its findings, the report files, and the summary.
pub fn finish(
    out: &Output,
    done: analysis::Done,
    summary: &mut Summary,
    mut ending: Ending,
    files: &mut ReportFiles,
    spawned: bool,
) -> Result<()> {
    if let Some(e) = done.output_error {
        bail!("cannot write the events ({e}); the trace was stopped, and the target detached with its original bytes");
    }
    let mut renderer = done.renderer;
    if out.report {
        // The event file is complete; the report and the summary go to the terminal's stream.
        renderer.flush()?;
        renderer = if out.json {
            Box::new(Json::new(report_writer(out, spawned)))
        } else {
            Box::new(Text::new(report_writer(out, spawned), summary_writer(out)))
        };
    }
    let mut gate = None;
    if let Some(mut tracker) = done.leaks {
        if let Some(last) = ending.final_sample.take() {
            tracker.sample(Some(summary.duration.as_secs_f64()), last);
        }
        tracker.weigh_residency(&mut *ending.residency);
        let nested = tracker.nested;
        let mut report = tracker.report();
        // syscatch's own pages grew in the target, but they are not the target's.
        report.leave_out(&summary.own_ranges);
        if let (true, Some(facts)) = (out.report, &ending.facts) {
            let secs = summary.duration.as_secs_f64();
            let mut d = crate::app::findings::diagnose(facts, &report, &out.rules, secs);
            d.watched = ending.watched;
            d.nested = nested;
            report.diagnosis = Some(d);
        }
        if let Some(m) = &out.member {
            let row = crate::app::session_report::Row::of(&report, ending.facts.as_ref());
            if let Ok(mut r) = m.row.lock() {
                *r = Some(row);
            }
            if let Ok(mut p) = m.profile.lock() {
                *p = Some(crate::app::session_files::Profile::of(&report, out));
            }
        }
        if out.leaks.is_some() {
            renderer.leaks(&report)?;
        }
        let ns = u64::try_from(summary.duration.as_nanos()).unwrap_or(u64::MAX);
        files.write(out, &report, ns)?;
        if let (Some(limit), None) = (out.fail_over, &out.member) {
            gate = crate::report::leaks::gate(&report, limit);
        }
    }
    renderer.summary(summary)?;
    if out.json {
        // People still want the one-line summary on stderr.
        Text::new(std::io::sink(), summary_writer(out)).summary(summary)?;
    }
    renderer.flush()?;
    match gate {
        Some(line) => Err(GateFailed(line).into()),
        None => Ok(()),
    }
}

/// How often `--metrics` publishes the report of the trace so far (each costs a report of the whole trace).
pub(crate) const METRICS_EVERY: f64 = 5.0;

/// The report of the trace so far, when due: `--every`'s files (said on stderr), and `--metrics`' figures and
/// pprof profile.
pub(crate) fn interim(
    out: &Output,
    pid: Tid,
    files: &Arc<Mutex<ReportFiles>>,
    own: &Arc<Mutex<Vec<(u64, u64)>>>,
    server: Option<crate::app::metrics::Server>,
) -> Box<Interim> {
    let (out, files, own) = (out.clone(), files.clone(), own.clone());
    let labels = (crate::live::selection::describe(pid).name, crate::app::watch::rank_of(pid));
    let (mut files_at, mut metrics_at) = (0.0, f64::NEG_INFINITY);
    Box::new(move |tracker: &crate::analysis::leaks::LeakTracker, time: f64| {
        let files_due = out.every.is_some_and(|e| time >= files_at + e.as_secs_f64());
        let metrics_due = server.is_some() && time >= metrics_at + METRICS_EVERY;
        if !files_due && !metrics_due {
            return;
        }
        let mut report = tracker.report();
        report.leave_out(&own.lock().map(|o| o.clone()).unwrap_or_default());
        let ns = (time * 1e9) as u64;
        if let (true, Some(s)) = (metrics_due, &server) {
            metrics_at = time;
            s.publish(crate::app::metrics::leaks_exposition(&report, &labels.0, &labels.1));
            let mut profile = Vec::new();
            if report.pprof(&mut profile, ns).is_ok() {
                s.publish_pprof(profile);
            }
        }
        if files_due {
            files_at = time;
            let written =
                files.lock().map_err(|_| anyhow!("internal error")).and_then(|mut f| f.write(&out, &report, ns));
            let names: Vec<String> = [&out.html, &out.pprof, &out.folded, &out.flamegraph]
                .into_iter()
                .flatten()
                .map(|p| p.display().to_string())
                .collect();
            match written {
                Ok(()) => eprintln!("syscatch: the report of the first {time:.0}s written: {}", names.join(", ")),
                Err(e) => eprintln!("syscatch: the report of the first {time:.0}s: {e:#}"),
            }
        }
    })
}
