//! The session's report (see `session`): the table of processes ranked by growth rate, the findings and the
//! stacks that hold in several processes, then each process's own report; without `--leaks`, a line for each
//! process. Each process's figures are worked out from its report as its trace finishes ([`Row::of`]).

use super::session::{Done, Member};
use crate::app::trace::Output;
use crate::model::event::End;
use crate::os::Tid;
use anyhow::Result;
use serde_json::json;
use std::io::Write;

/// One process's figures for the table, worked out from its report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// Rss+Swap in KiB before the trace and after it.
    pub before_kb: Option<i64>,
    pub after_kb: Option<i64>,
    /// Lasting growth of its regions (KiB) and its rate; `None` with too few samples.
    pub lasting_kb: Option<u64>,
    pub mib_per_min: Option<f64>,
    /// The memory class that grew most, and by how much (KiB).
    pub class: Option<(String, i64)>,
    /// The share of its regions' growth resident on traced stacks (0 to 1), when anything grew.
    pub traced: Option<f64>,
    /// Its findings: rule, title, and the growth each explains (MiB/min), in the report's order.
    pub findings: Vec<(String, String, Option<f64>)>,
    /// Bytes its traced stacks mapped and unmapped again during the trace (working sets).
    pub churn: u64,
    /// Its leak candidates, largest first (at most [`STACKS_KEPT`]), by what their frames are.
    pub stacks: Vec<StackRow>,
}

/// How many leak candidates of each process are matched across processes.
const STACKS_KEPT: usize = 10;

/// One leak candidate of a process, named so that the same code in another process has the same key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StackRow {
    /// Each frame as `function (module)` (a Python frame: `function (file)`), innermost first: addresses differ
    /// between processes, functions and modules do not.
    pub key: Vec<String>,
    pub growth: u64,
    pub still_mapped: u64,
    pub mib_per_min: f64,
}

impl Row {
    /// In a word: `growing` (its rate is over 0), `churning` (mapping and unmapping, nothing lasting), `flat`; `?`
    /// with too few samples.
    pub fn verdict(&self) -> &'static str {
        match self.mib_per_min {
            None => "?",
            Some(rate) if rate > 0.0 => "growing",
            Some(_) if self.churn > 0 => "churning",
            Some(_) => "flat",
        }
    }
}

impl Row {
    /// The figures of a finished report: the regions' lasting growth, the classes before and after.
    pub fn of(
        report: &crate::analysis::leaks::LeakReport,
        facts: Option<&crate::analysis::rules::ProcessFacts>,
    ) -> Row {
        let lasting_kb = report.lasting_kb();
        let total = |m: &std::collections::BTreeMap<String, i64>| m.values().sum::<i64>();
        let before = facts.and_then(|f| f.class_before.as_ref());
        let after = facts.and_then(|f| f.class_kb.as_ref());
        let class = before.zip(after).and_then(|(b, a)| {
            a.iter().map(|(c, &kb)| (c.clone(), kb - b.get(c).copied().unwrap_or(0))).max_by_key(|(_, g)| *g)
        });
        let growth: u64 = report.growing.iter().map(|g| g.growth_kb).sum();
        let traced: u64 = (0..report.growing.len()).map(|i| report.region_split(i).0).sum();
        Row {
            before_kb: before.map(total),
            after_kb: after.map(total),
            lasting_kb,
            mib_per_min: report.rate.map(|t| t.mib_per_min().0),
            class: class.filter(|(_, g)| *g > 0),
            traced: (growth > 0).then(|| traced.min(growth) as f64 / growth as f64),
            findings: report
                .diagnosis
                .iter()
                .flat_map(|d| {
                    d.findings.iter().map(move |f| {
                        (f.rule.clone(), f.title.clone(), crate::report::findings::finding_rate(f, report, d))
                    })
                })
                .collect(),
            churn: report.leaks.iter().chain(&report.quiet).map(|c| c.stats.unmapped).fold(0, u64::saturating_add),
            stacks: report
                .leaks
                .iter()
                .take(STACKS_KEPT)
                .map(|c| StackRow {
                    key: report.stack(c.id).map(|st| st.frames.iter().map(frame_key).collect()).unwrap_or_default(),
                    growth: c.growth,
                    still_mapped: c.stats.still_mapped,
                    mib_per_min: c.per_min(report.window) / (1u64 << 20) as f64,
                })
                .filter(|s| !s.key.is_empty())
                .collect(),
        }
    }
}

/// A frame as the same code in any process names it.
fn frame_key(f: &crate::model::stack::Frame) -> String {
    let module = f.module.as_deref().map(crate::model::modules::file_name);
    let place = module.or(f.file.as_deref()).unwrap_or("?");
    match &f.function {
        Some(func) => format!("{func} ({place})"),
        None => format!("? ({place})"),
    }
}

/// The table of processes ranked by growth rate, then each process's report under its header.
pub(crate) fn write_session(out: &Output, done: &mut [Done], events: &super::session::Out) -> Result<()> {
    let rate = |d: &Done| row(&d.1).and_then(|r| r.mib_per_min).unwrap_or(f64::NEG_INFINITY);
    done.sort_by(|a, b| rate(b).total_cmp(&rate(a)).then(a.0.pid.cmp(&b.0.pid)));
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    match (out.report, out.json) {
        // The events went out as they came, each process's marked; what is left is a line for each process.
        (false, true) => match events.lock() {
            Ok(mut e) => process_lines(&mut *e, done).and_then(|_| Ok(e.flush()?))?,
            Err(_) => process_lines(&mut w, done)?,
        },
        (false, false) => {}
        (true, true) => report_json(&mut w, done)?,
        (true, false) => report_text(&mut w, done)?,
    }
    w.flush()?;
    drop(w);
    let stderr = std::io::stderr();
    let mut e = stderr.lock();
    for (who, member, end, _) in done.iter() {
        if let (Err(why), false) = (end, out.report) {
            writeln!(e, "syscatch: process {}: not traced: {why:#}", who.pid)?;
        }
        // Each line of its summary says whose it is.
        for line in String::from_utf8_lossy(&member.err.take()).lines() {
            let line = line.strip_prefix("syscatch: ").unwrap_or(line);
            writeln!(e, "syscatch: process {}: {line}", who.pid)?;
        }
    }
    Ok(())
}

/// A process's figures, once its trace has finished.
fn row(m: &Member) -> Option<Row> {
    m.row.lock().ok().and_then(|r| r.clone())
}

/// Without `--leaks`, in JSON: a `process` line each.
fn process_lines(w: &mut impl Write, done: &[Done]) -> Result<()> {
    for (who, _, end, joined) in done.iter() {
        let v = json!({
            "pid": who.pid, "name": who.name, "command": who.command, "nspid": who.nspid, "joined": joined,
            "end": end_text(end), "error": end.as_ref().err().map(|e| format!("{e:#}")),
        });
        crate::report::json::line(w, "process", v)?;
    }
    Ok(())
}

/// The report in JSON: `process`, `shared_finding` and `shared_stack` lines, then each process's lines with its pid.
fn report_json(w: &mut impl Write, done: &[Done]) -> Result<()> {
    for (who, member, end, joined) in done.iter() {
        let r = row(member).unwrap_or_default();
        let v = json!({
            "pid": who.pid,
            "name": who.name,
            "command": who.command,
            "nspid": who.nspid,
            "joined": joined,
            "rss_swap_before_kb": r.before_kb,
            "rss_swap_after_kb": r.after_kb,
            "lasting_kb": r.lasting_kb,
            "lasting_mib_per_min": r.mib_per_min,
            "growing_class": r.class.as_ref().map(|c| &c.0),
            "growing_class_kb": r.class.as_ref().map(|c| c.1),
            "traced_share": r.traced,
            "verdict": end.is_ok().then(|| r.verdict()),
            "churn_bytes": r.churn,
            "end": end_text(end),
            "error": end.as_ref().err().map(|e| format!("{e:#}")),
        });
        crate::report::json::line(&mut *w, "process", v)?;
    }
    for f in shared_findings(done) {
        let processes: Vec<_> = f.2.iter().map(|(pid, rate)| json!({"pid": pid, "growth_mib_per_min": rate})).collect();
        let v = json!({"rule": f.0, "title": f.1, "processes": processes, "of": done.len()});
        crate::report::json::line(&mut *w, "shared_finding", v)?;
    }
    for (key, holds) in shared_stacks(done) {
        let processes: Vec<_> = holds
            .iter()
            .map(|(pid, s)| {
                json!({"pid": pid, "growth": s.growth, "still_mapped": s.still_mapped, "growth_mib_per_min": s.mib_per_min})
            })
            .collect();
        crate::report::json::line(&mut *w, "shared_stack", json!({"frames": key, "processes": processes}))?;
    }
    for (who, member, _, _) in done.iter() {
        crate::report::json::with_pid(&member.report.take(), who.pid, &mut *w)?;
    }
    Ok(())
}

/// The report in text: the table, the findings and stacks across processes, each process's report.
fn report_text(w: &mut impl Write, done: &[Done]) -> Result<()> {
    writeln!(w, "{} processes, ranked by growth rate:", done.len())?;
    writeln!(
        w,
        "{:>8}  {:<8}  {:>10} {:>10}  {:>14}  {:<24} {:>7}  {:<12} command",
        "pid", "memory", "before", "after", "grows", "grows most", "traced", "trace"
    )?;
    for (who, member, end, _) in done.iter() {
        let r = row(member).unwrap_or_default();
        let kb = |v: Option<i64>| v.map(|kb| format!("{:.1} MiB", kb as f64 / 1024.0)).unwrap_or("?".into());
        let grown = |kb: i64| match kb {
            ..1024 => format!("+{kb} KiB"),
            _ => format!("+{:.1} MiB", kb as f64 / 1024.0),
        };
        let lasting = r.mib_per_min.map(|m| format!("{m:.2} MiB/min")).unwrap_or("?".into());
        let class = r.class.as_ref().map(|(c, g)| format!("{c} {}", grown(*g)));
        let traced = r.traced.map(|t| format!("{:.0}%", t * 100.0)).unwrap_or("-".into());
        writeln!(
            w,
            "{:>8}  {:<8}  {:>10} {:>10}  {:>14}  {:<24} {:>7}  {:<12} {}",
            who.pids(),
            if end.is_ok() { r.verdict() } else { "-" },
            kb(r.before_kb),
            kb(r.after_kb),
            lasting,
            class.unwrap_or_else(|| "-".into()),
            traced,
            end_text(end),
            who.command
        )?;
    }
    let shared = shared_findings(done);
    if !shared.is_empty() {
        writeln!(w, "\nFindings by process (each process's report below):")?;
    }
    for (rule, title, holds) in &shared {
        let each: Vec<String> = holds
            .iter()
            .map(|(pid, rate)| match rate {
                Some(r) => format!("{pid} ({r:.2} MiB/min)"),
                None => pid.to_string(),
            })
            .collect();
        writeln!(w, "  in {} of {} processes: {title}  [{rule}]", holds.len(), done.len())?;
        writeln!(w, "     {}", each.join(", "))?;
    }
    let stacks = shared_stacks(done);
    if !stacks.is_empty() {
        writeln!(w, "\nLeak candidates with the same frames in several processes (any addresses):")?;
    }
    for (key, holds) in &stacks {
        // Named by its first frames past libc's entry points (the wrapper every stack shares).
        let named: Vec<&str> = key.iter().map(String::as_str).filter(|f| !f.ends_with("(libc.so.6)")).take(3).collect();
        writeln!(w, "  in {} processes: {}", holds.len(), named.join(" <- "))?;
        let each: Vec<String> = holds
            .iter()
            .map(|(pid, s)| format!("{pid}: grows {:.2} MiB/min, {} still mapped", s.mib_per_min, mib(s.still_mapped)))
            .collect();
        writeln!(w, "     {}", each.join("; "))?;
    }
    for (who, member, end, _) in done.iter() {
        writeln!(w, "\n=== process {}: {} ===", who.pids(), who.command)?;
        if let Err(e) = end {
            writeln!(w, "not traced: {e:#}")?;
        }
        w.write_all(&member.report.take())?;
    }
    Ok(())
}

/// A stack's frames (see [`StackRow::key`]) and each process it holds memory in, with its figures there.
type SharedStack = (Vec<String>, Vec<(Tid, StackRow)>);

/// The leak candidates whose frames are the same in several processes, each once with the processes it holds
/// memory in (pid and its figures, in the table's order); most processes, then most growth, first.
fn shared_stacks(done: &[Done]) -> Vec<SharedStack> {
    let mut out: Vec<SharedStack> = Vec::new();
    for (who, member, _, _) in done {
        let Some(row) = member.row.lock().ok().and_then(|r| r.clone()) else { continue };
        for st in row.stacks {
            match out.iter_mut().find(|(k, _)| *k == st.key) {
                Some((_, holds)) => holds.push((who.pid, st)),
                None => out.push((st.key.clone(), vec![(who.pid, st)])),
            }
        }
    }
    out.retain(|(_, holds)| holds.len() > 1);
    let growth = |h: &[(Tid, StackRow)]| h.iter().map(|(_, s)| s.growth).sum::<u64>();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(growth(&b.1).cmp(&growth(&a.1))));
    out
}

/// A rule that found something: its id, its title, and each process it holds in with the growth it explains there
/// (MiB/min).
type Shared = (String, String, Vec<(Tid, Option<f64>)>);

/// Each rule that found something, once, with the processes it holds in (in the table's order) and the growth it
/// explains in each; rules holding in more processes first.
fn shared_findings(done: &[Done]) -> Vec<Shared> {
    let mut out: Vec<Shared> = Vec::new();
    for (who, member, _, _) in done {
        let Some(row) = member.row.lock().ok().and_then(|r| r.clone()) else { continue };
        for (rule, title, rate) in row.findings {
            match out.iter_mut().find(|f| f.0 == rule) {
                Some(f) => f.2.push((who.pid, rate)),
                None => out.push((rule, title, vec![(who.pid, rate)])),
            }
        }
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.2.len()));
    out
}

/// Bytes as MiB, or KiB under one.
fn mib(bytes: u64) -> String {
    match bytes {
        ..1048576 => format!("{} KiB", bytes / 1024),
        _ => format!("{:.1} MiB", bytes as f64 / 1048576.0),
    }
}

/// How a member's trace ended, in a word or two.
fn end_text(end: &Result<End>) -> String {
    match end {
        Ok(End::Exited(code)) => format!("exited ({code})"),
        Ok(End::Killed(sig)) => format!("killed ({sig})"),
        Ok(End::Duration) => "done".into(),
        Ok(End::Signal(_)) => "stopped".into(),
        Ok(End::Exec) => "exec'd".into(),
        Ok(End::Fault) => "fault".into(),
        Err(_) => "failed".into(),
    }
}
