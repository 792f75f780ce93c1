//! The findings rules as the commands load them: the shipped rules merged with `--rules FILE`, and the advice of
//! `syscatch mem` (the process-wide rules over memory classes and the live environment).

use crate::analysis::rules::{self, Facts, ProcessFacts, Rule};
use crate::live::facts::{read_environment, read_kernel};
use crate::os::Tid;
use std::collections::BTreeMap;

pub use crate::analysis::findings::diagnose;

/// The rules in force: the shipped ones, with `extra` (from `--rules FILE`) merged in.
pub fn load_rules(extra: Option<&std::path::Path>) -> anyhow::Result<Vec<Rule>> {
    let base = rules::parse_rules(rules::DEFAULT_RULES).map_err(|e| anyhow::anyhow!("shipped rules: {e}"))?;
    let Some(path) = extra else { return Ok(base) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| crate::app::trace::usage(format!("cannot read rules file {}: {e}", path.display())))?;
    let extra = rules::parse_rules(&text).map_err(|e| {
        crate::app::trace::usage(format!("rules file {}: {e} (format: docs/guide.md, \"Rules files\")", path.display()))
    })?;
    Ok(rules::merge_rules(base, extra))
}

/// Advice lines for `syscatch mem` from the same rules: the process-wide ones (no stacks without a trace) over
/// its memory by class (`growth_kb` with `--watch`), arenas, allocator and the live environment.
pub fn rule_advice(
    pid: Tid,
    class_kb: BTreeMap<String, i64>,
    growth_kb: BTreeMap<String, i64>,
    arenas: usize,
    allocator: &str,
) -> Vec<String> {
    let Ok(rules) = load_rules(None) else { return Vec::new() };
    let (env, env_source) = read_environment(pid);
    let process = ProcessFacts {
        class_kb: Some(class_kb),
        arenas,
        allocator: allocator.to_string(),
        env,
        env_source,
        kernel: read_kernel(),
        ..ProcessFacts::default()
    };
    let facts = Facts { class_growth_kb: growth_kb, ..Facts::of(process, Vec::new()) };
    rules::evaluate(&rules, &facts)
        .iter()
        .map(|f| {
            let because: Vec<&str> = f.evidence.iter().map(String::as_str).collect();
            let fix = f.fix.first().map(|x| x.action.as_str()).unwrap_or("");
            format!("{} ({}): {fix} [rule {}]", f.title, because.join("; "), f.rule)
        })
        .collect()
}
