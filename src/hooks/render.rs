//! Hook reports for people (one verdict line per function) and for programs (JSON Lines: one `hook` line per
//! GOT slot and per function entry, then one `verdict` line per function). Pure over a [`Report`].

use super::inline::Patch;
use super::{EntryStatus, GotRow, InlineRow, Interposer, Place, Report, Status};
use crate::analysis::rules::HookFact;
use crate::model::modules::file_name;
use crate::report::json::{hex, line};
use serde_json::{Value, json};
use std::io::Write;

/// The clause for a function entry.
fn describe(r: &InlineRow) -> String {
    let m = file_name(&r.module);
    let target = r.target.as_ref().map(|t| t.to_string()).unwrap_or_default();
    match &r.status {
        EntryStatus::Intact => format!("entry in {m} intact"),
        EntryStatus::Unreadable => format!("entry in {m} at {:#x} unreadable", r.addr),
        EntryStatus::Patched(Patch::Jump { insn, .. }) => {
            format!("entry in {m} patched at run time: `{insn}` to {target}")
        }
        EntryStatus::Patched(Patch::Breakpoint) => {
            format!("entry in {m} has a breakpoint (int3): a debugger is attached")
        }
        EntryStatus::Patched(Patch::Other { insns }) => {
            format!("entry in {m} changed at run time (not a recognised jump): `{insns}`")
        }
    }
}

fn place_json(p: &Option<Place>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => json!({
            "addr": hex(p.addr),
            "module": p.module,
            "symbol": p.symbol,
            "offset": hex(p.offset),
            "plt": p.plt,
            "unmapped": p.unmapped,
        }),
    }
}

fn interposer_name(i: Option<Interposer>) -> Option<&'static str> {
    i.map(|i| match i {
        Interposer::Preload => "preload",
        Interposer::LinkOrder => "link_order",
    })
}

pub fn got_json(r: &GotRow) -> Value {
    json!({
        "kind": "got",
        "function": r.function,
        "status": r.status.name(),
        "module": r.module,
        "reloc": r.kind.name(),
        "slot": hex(r.slot),
        "value": r.value.map(hex),
        "target": place_json(&r.at),
        "expected": r.expected.map(hex),
        "expected_target": place_json(&r.expected_at),
        "ifunc": r.ifunc,
        "interposer": interposer_name(r.interposer),
    })
}

pub fn inline_json(r: &InlineRow) -> Value {
    let (status, patch, insn) = match &r.status {
        EntryStatus::Intact => ("intact", None, None),
        EntryStatus::Unreadable => ("unreadable", None, None),
        EntryStatus::Patched(Patch::Jump { insn, .. }) => ("patched_at_run_time", Some("jump"), Some(insn.clone())),
        EntryStatus::Patched(Patch::Breakpoint) => ("patched_at_run_time", Some("breakpoint"), None),
        EntryStatus::Patched(Patch::Other { insns }) => ("patched_at_run_time", Some("other"), Some(insns.clone())),
    };
    json!({
        "kind": "inline",
        "function": r.function,
        "status": status,
        "patch": patch,
        "insn": insn,
        "module": r.module,
        "addr": hex(r.addr),
        "file_bytes": crate::model::modules::hex(&r.file_bytes),
        "memory_bytes": crate::model::modules::hex(&r.memory_bytes),
        "first_diff": r.first_diff,
        "target": place_json(&r.target),
    })
}

/// One function's verdict: its worst status and the sentence.
pub struct Verdict {
    pub function: String,
    pub status: Status,
    pub text: String,
}

fn or_unknown(p: &Option<Place>) -> String {
    p.as_ref().map(|p| p.to_string()).unwrap_or_else(|| "nothing (0)".into())
}

/// Slots of one function with the same outcome.
struct Group {
    status: Status,
    to: String,
    by: Option<Interposer>,
    expected: String,
    /// File names of the modules whose slots these are.
    from: Vec<String>,
}

impl Group {
    fn same_outcome(&self, o: &Group) -> bool {
        (self.status, &self.to, self.by, &self.expected) == (o.status, &o.to, o.by, &o.expected)
    }

    fn clause(&self) -> String {
        let (from, to, exp) = (self.from.join(", "), &self.to, &self.expected);
        match self.status {
            Status::PatchedAtRunTime => {
                format!("calls from {from} go to {to}, patched at run time (the dynamic linker gave {exp})")
            }
            Status::InterposedAtLoad => {
                let how = if self.by == Some(Interposer::Preload) { "LD_PRELOAD" } else { "link order" };
                format!("calls from {from} go to {to}, interposed at load ({how})")
            }
            Status::Ok => format!("calls from {from} go to {to}, as linked"),
            Status::Unresolved => {
                format!("calls from {from} are unresolved (lazy binding, not called yet; will go to {exp})")
            }
            Status::Undefined => format!("{from}: weak reference, defined nowhere"),
            Status::Unreadable => format!("the GOT slot of {from} is unreadable"),
        }
    }
}

/// Verdicts for `functions`, in that order; a function nobody imports and no checked module defines is left
/// out.
pub fn verdicts(report: &Report, functions: &[String]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for f in functions {
        let rows: Vec<&GotRow> = report.got.iter().filter(|r| &r.function == f).collect();
        let entries: Vec<&InlineRow> = report.inline.iter().filter(|r| &r.function == f).collect();
        if rows.is_empty() && entries.is_empty() {
            continue;
        }
        // Group slots with the same outcome, listing who calls.
        let mut groups: Vec<Group> = Vec::new();
        for r in &rows {
            let key = Group {
                status: r.status,
                to: or_unknown(&r.at),
                by: r.interposer,
                expected: or_unknown(&r.expected_at),
                from: Vec::new(),
            };
            let m = file_name(&r.module).to_string();
            let g = match groups.iter().position(|g| g.same_outcome(&key)) {
                Some(i) => &mut groups[i],
                None => {
                    groups.push(key);
                    groups.last_mut().expect("just pushed")
                }
            };
            if !g.from.contains(&m) {
                g.from.push(m);
            }
        }
        groups.sort_by_key(|g| std::cmp::Reverse(g.status));
        let mut status = groups.iter().map(|g| g.status).max().unwrap_or(Status::Ok);
        let mut clauses: Vec<String> = groups.iter().map(Group::clause).collect();
        if rows.is_empty() {
            clauses.push("not imported through any GOT".into());
        }
        for e in &entries {
            if matches!(e.status, EntryStatus::Patched(_)) {
                status = Status::PatchedAtRunTime;
            }
            clauses.push(describe(e));
        }
        out.push(Verdict { function: f.clone(), status, text: format!("{f}: {}", clauses.join("; ")) });
    }
    out
}

pub fn text(w: &mut impl Write, report: &Report, functions: &[String]) -> std::io::Result<()> {
    for v in verdicts(report, functions) {
        writeln!(w, "{}", v.text)?;
    }
    w.flush()
}

pub fn json(w: &mut impl Write, report: &Report, functions: &[String]) -> std::io::Result<()> {
    for r in &report.got {
        line(w, "hook", got_json(r))?;
    }
    for r in &report.inline {
        line(w, "hook", inline_json(r))?;
    }
    for v in verdicts(report, functions) {
        line(w, "verdict", json!({"function": v.function, "status": v.status.name(), "text": v.text}))?;
    }
    w.flush()
}

/// The intercepted functions as the findings rules see them: how, who holds the slot or entry, where calls go.
pub fn hook_facts(report: &Report, functions: &[String]) -> Vec<HookFact> {
    let mut out = Vec::new();
    for v in verdicts(report, functions) {
        if !matches!(v.status, Status::PatchedAtRunTime | Status::InterposedAtLoad) {
            continue;
        }
        let inline =
            report.inline.iter().find(|r| r.function == v.function && matches!(r.status, EntryStatus::Patched(_)));
        let got = report.got.iter().find(|r| r.function == v.function && r.status == v.status);
        let (how, place) = match (inline, got) {
            (Some(r), _) => ("inline", r.target.as_ref()),
            (None, Some(r)) => ("got", r.at.as_ref()),
            (None, None) => continue,
        };
        let module = place.and_then(|p| p.module.as_deref()).map(crate::model::modules::file_name).unwrap_or("?");
        let target = place.and_then(|p| p.symbol.clone()).unwrap_or_default();
        out.push(HookFact { function: v.function, how: how.into(), module: module.to_string(), target, text: v.text });
    }
    out
}
