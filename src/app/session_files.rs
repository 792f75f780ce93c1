//! A session's files (`--folded`, `--flamegraph`, `--pprof`, `--heap-pprof`, `--record`) and its `--fail-over` gate: every
//! process's stacks in one file, each process's under a root frame naming it (`process 1234:"python3 server.py"`,
//! as py-spy's `--subprocesses` writes), each pprof sample labelled with its `pid` and `process` so that a fleet
//! profiler can filter by process. A session's recording is each process's recording (written beside it as the
//! trace goes, `FILE.PID.N.part`, each a whole recording once its trace ends) joined into one file at the end,
//! followed by who the processes were.

use super::session::Done;
use crate::analysis::leaks::LeakReport;
use crate::app::trace::{GateFailed, Output};
use crate::model::stack::Frame;
use crate::report::pprof::HEAP_TYPES;
use anyhow::{Context, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

/// What a process's report gives the session's files, kept as its trace finishes.
#[derive(Default)]
pub struct Profile {
    /// Its collapsed stacks by `--weight` (see [`LeakReport::folded`]).
    pub folded: Vec<String>,
    /// Each stack's frames and values (see [`LeakReport::samples`]).
    pub samples: Vec<(Vec<Frame>, [i64; 6])>,
    /// Each sampled allocation stack's estimates (see [`LeakReport::heap_samples`]), for `--heap-pprof`.
    pub heap: Vec<(Vec<Frame>, [i64; 6])>,
    /// The `--fail-over` line, when its traced stacks grew faster.
    pub gate: Option<String>,
    /// Its report's page data (`--html`).
    pub page: Option<serde_json::Value>,
}

impl Profile {
    /// What the session's files asked for in `out` need of a finished report.
    pub fn of(report: &LeakReport, out: &Output) -> Profile {
        Profile {
            folded: match out.folded.is_some() || out.flamegraph.is_some() {
                true => report.folded(out.weight),
                false => Vec::new(),
            },
            samples: match out.pprof.is_some() {
                true => report.samples().into_iter().map(|(f, v)| (f.to_vec(), v)).collect(),
                false => Vec::new(),
            },
            heap: match out.heap_pprof.is_some() {
                true => report.heap_samples().unwrap_or_default(),
                false => Vec::new(),
            },
            gate: out.fail_over.and_then(|limit| crate::report::leaks::gate(report, limit)),
            page: out.html.is_some().then(|| crate::report::html::page_data(report, &out.label)),
        }
    }
}

/// The session's files, created before anything is touched (a bad path is refused first).
pub struct Files {
    folded: Option<(PathBuf, BufWriter<File>)>,
    flame: Option<(PathBuf, BufWriter<File>)>,
    pprof: Option<(PathBuf, BufWriter<File>)>,
    heap_pprof: Option<(PathBuf, BufWriter<File>)>,
    record: Option<(PathBuf, BufWriter<File>)>,
    html: Option<(PathBuf, BufWriter<File>)>,
}

/// Where a process's part of the session's recording `file` is written while it is traced.
pub fn part_path(file: &std::path::Path, pid: crate::os::Tid, joined: f64) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(format!(".{pid}.{}.part", (joined * 1000.0) as u64));
    PathBuf::from(name)
}

impl Files {
    pub fn create(out: &Output) -> Result<Files> {
        let create = |p: &Option<PathBuf>| -> Result<Option<(PathBuf, BufWriter<File>)>> {
            let Some(p) = p else { return Ok(None) };
            let f = File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            Ok(Some((p.clone(), BufWriter::new(f))))
        };
        Ok(Files {
            folded: create(&out.folded)?,
            flame: create(&out.flamegraph)?,
            pprof: create(&out.pprof)?,
            heap_pprof: create(&out.heap_pprof)?,
            record: create(&out.record)?,
            html: create(&out.html)?,
        })
    }

    /// Writes every process's stacks into the files, then fails with the first process over `--fail-over`.
    pub fn write(mut self, out: &Output, done: &[Done], duration_ns: u64) -> Result<()> {
        let profiles: Vec<(&Done, Profile)> =
            done.iter().map(|d| (d, d.1.profile.lock().ok().and_then(|mut p| p.take()).unwrap_or_default())).collect();
        let folded: Vec<String> = profiles
            .iter()
            .flat_map(|((who, ..), p)| {
                let root = root_frame(who.pid, &who.command);
                p.folded.iter().map(move |l| format!("{root};{l}"))
            })
            .collect();
        if let Some((path, f)) = self.folded.as_mut() {
            let text: String = folded.iter().map(|l| format!("{l}\n")).collect();
            f.write_all(text.as_bytes())
                .and_then(|_| f.flush())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        if let Some((path, f)) = self.flame.as_mut() {
            crate::report::leaks::flamegraph(&folded, f, out.weight)
                .and_then(|_| f.flush())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let labels: Vec<[(&str, String); 2]> = profiles
            .iter()
            .map(|((who, ..), _)| [("pid", who.pid.to_string()), ("process", who.command.clone())])
            .collect();
        let types = [(&mut self.pprof, &crate::report::pprof::SAMPLE_TYPES[..]), (&mut self.heap_pprof, &HEAP_TYPES)];
        for (i, (file, types)) in types.into_iter().enumerate() {
            let Some((path, f)) = file.as_mut() else { continue };
            let samples: Vec<crate::report::pprof::Sample> = profiles
                .iter()
                .zip(&labels)
                .flat_map(|((_, p), labels)| {
                    let of = if i == 0 { &p.samples } else { &p.heap };
                    of.iter().map(|(frames, values)| crate::report::pprof::Sample { frames, values: *values, labels })
                })
                .collect();
            crate::report::pprof::write_types(f, &samples, types, duration_ns)
                .and_then(|_| f.flush())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        if let Some((path, f)) = self.html.as_mut() {
            f.write_all(page(&profiles).as_bytes())
                .and_then(|_| f.flush())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        if let Some((path, f)) = self.record.as_mut() {
            join_recording(f, done).with_context(|| format!("cannot write {}", path.display()))?;
        }
        let over: Vec<String> = profiles
            .iter()
            .filter_map(|((who, ..), p)| p.gate.as_ref().map(|g| format!("process {}: {g}", who.pid)))
            .collect();
        match over.is_empty() {
            true => Ok(()),
            false => Err(GateFailed(over.join("; ")).into()),
        }
    }
}

/// The session's page: each process's report (those that have one) in the table's order, chosen on the page.
fn page(profiles: &[(&Done, Profile)]) -> String {
    let processes: Vec<serde_json::Value> = profiles
        .iter()
        .filter_map(|((who, member, _, _), p)| {
            let row = member.row.lock().ok().and_then(|r| r.clone()).unwrap_or_default();
            p.page.as_ref().map(|page| {
                serde_json::json!({
                    "pid": who.pid, "command": who.command, "verdict": row.verdict(),
                    "lasting_mib_per_min": row.mib_per_min, "page": page,
                })
            })
        })
        .collect();
    let title = format!("{} processes", profiles.len());
    let data = serde_json::json!({"schema": crate::report::html::PAGE_SCHEMA, "title": title, "processes": processes});
    crate::report::html::page(&data)
}

/// Each process's recording in turn (those whose trace ended well), then who the processes were; the parts are
/// removed.
fn join_recording(f: &mut BufWriter<File>, done: &[Done]) -> std::io::Result<()> {
    use crate::app::record::{RecProcess, Record};
    let mut processes = Vec::new();
    for (who, member, end, joined) in done {
        let part = member.part.as_ref();
        if let (Some(part), Ok(_)) = (part, end) {
            std::io::copy(&mut File::open(part)?, f)?;
        }
        if let Some(part) = part {
            let _ = std::fs::remove_file(part);
        }
        processes.push(RecProcess {
            pid: who.pid,
            name: who.name.clone(),
            command: who.command.clone(),
            nspid: who.nspid.clone(),
            joined: *joined,
            end: match end {
                Ok(end) => Ok(end.clone()),
                Err(e) => Err(format!("{e:#}")),
            },
        });
    }
    let mut gz = flate2::write::GzEncoder::new(&mut *f, flate2::Compression::fast());
    serde_json::to_writer(&mut gz, &Record::Session { processes })?;
    gz.write_all(b"\n")?;
    gz.finish()?;
    f.flush()
}

/// The frame every stack of a process starts from in a session's folded stacks and flame graph.
fn root_frame(pid: crate::os::Tid, command: &str) -> String {
    format!("process {pid}:\"{}\"", command.replace(';', ":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_frame_names_the_process_without_the_separator() {
        assert_eq!(root_frame(12, "sh -c a;b"), "process 12:\"sh -c a:b\"");
    }
}
