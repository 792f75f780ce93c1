//! The diagnosis at the top of the `--leaks` report, as data: the traced stacks as facts, joined with the facts
//! of the process (read after detach or recorded), run through the rules. Pure; rendered by `report::findings`.

use crate::analysis::leaks::LeakReport;
use crate::analysis::rules::{self, Facts, Finding, FrameFact, ProcessFacts, Rule, StackFact};
use crate::model::stack::Frame;
use crate::model::watch::Watched;

/// The findings with what the report needs around them.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    pub findings: Vec<Finding>,
    pub rules_checked: usize,
    pub watched: Watched,
    /// Calls seen both at a libc function and at the `syscall()` inside it, counted once.
    pub nested: u64,
    pub duration_s: f64,
    pub facts: Facts,
}

/// A frame as the rules see it.
pub fn frame_fact(f: &Frame) -> FrameFact {
    FrameFact { module: f.module.clone().unwrap_or_default(), function: f.function.clone().unwrap_or_default() }
}

/// The traced stacks as facts.
pub fn stack_facts(report: &LeakReport) -> Vec<StackFact> {
    report
        .leaks
        .iter()
        .chain(&report.quiet)
        .map(|c| StackFact {
            id: c.id.0,
            frames: report.stack(c.id).map(|st| st.frames.iter().map(frame_fact).collect()).unwrap_or_default(),
            still_mapped: c.stats.still_mapped,
            growth: c.growth,
        })
        .collect()
}

/// Runs the rules over what the trace found and the facts of the process (read after detach, or recorded).
pub fn diagnose(process: &ProcessFacts, report: &LeakReport, rules: &[Rule], duration_s: f64) -> Diagnosis {
    let facts = Facts::of(process.clone(), stack_facts(report));
    let findings = rules::evaluate(rules, &facts);
    Diagnosis { findings, rules_checked: rules.len(), duration_s, facts, ..Diagnosis::default() }
}
