//! Known growth patterns as data: a rules file (JSON, shipped in the binary as `rules/default.json`, extended or
//! overridden rule by rule with `--rules FILE`) whose conditions range over a fixed list of [`Facts`]: the
//! traced stacks (function and module globs, in order), growth and size by memory class, hook verdicts, the
//! allocator, the environment and kernel settings. A new kind of fact is a code change here, not a language
//! feature. Rules fire on the growth pattern; the environment is shown as the explanation. Pure.

use serde::Deserialize;
use std::collections::BTreeMap;

/// The rules shipped with syscatch.
pub const DEFAULT_RULES: &str = include_str!("../../rules/default.json");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Unique; a rule in `--rules FILE` with the id of a shipped rule replaces it.
    pub id: String,
    /// What the finding is, in a few words.
    pub title: String,
    pub when: When,
    /// Why it grows: the mechanism, in a sentence or two.
    pub why: String,
    /// Environment variables (or `GLIBC_TUNABLES` keys) whose value explains the growth: shown as evidence,
    /// with "unset" when absent.
    #[serde(default)]
    pub explain_env: Vec<String>,
    /// Remedies, most specific first.
    pub fix: Vec<Fix>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    /// A traced stack that still holds bytes has frames matching these patterns in this order, innermost first
    /// (other frames may come between). A pattern is `function-glob` or `module-glob:function-glob`; `a|b`
    /// accepts either. With `frames`, the rule fires per stack and its bytes are those stacks' still-mapped
    /// bytes; without, it fires once for the process, its bytes from `class_growth` or `class_size`.
    #[serde(default)]
    pub frames: Vec<String>,
    /// Some traced call (whatever it still holds) had frames matching these patterns, in order.
    #[serde(default)]
    pub seen_frames: Vec<String>,
    /// Rss+Swap of these memory classes grew by at least `min_kb` during the trace.
    pub class_growth: Option<ClassAmount>,
    /// Rss+Swap of these memory classes is at least `min_kb` at the end.
    pub class_size: Option<ClassAmount>,
    /// At least this many glibc thread arenas.
    pub min_arenas: Option<usize>,
    /// Some glibc malloc arena, as read after the trace against before it (an arena born during the trace starts
    /// from nothing), meets these.
    pub heap: Option<HeapCondition>,
    /// The allocator's name (`glibc`, `jemalloc`, `tcmalloc`, `mimalloc`).
    pub allocator: Option<String>,
    /// Memory functions that some module's calls no longer reach in libc (a GOT slot or an entry patched, or
    /// interposed at load).
    #[serde(default)]
    pub hooked: Vec<String>,
    /// Environment conditions: `"unset"`, `"set"`, or a glob the value must match.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Kernel settings (`/proc/sys` keys such as `vm.overcommit_memory`, or `thp`): a glob the value must match.
    #[serde(default)]
    pub kernel: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassAmount {
    /// Memory class names as `syscatch mem` prints them (`heap`, `malloc_arenas`, `anon_large`, ...).
    pub classes: Vec<String>,
    pub min_kb: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeapCondition {
    /// Free bytes in the arena's bins and fastbins (its top chunk aside) grew by at least this much (KiB)...
    pub free_growth_min_kb: Option<u64>,
    /// ...while its bytes in use grew by at most this share of that growth: the free chunks lie between blocks
    /// still in use.
    pub in_use_growth_max_share: Option<f64>,
    /// Free bytes still resident in the arena (its resident bytes less those in use), at least this (KiB).
    pub free_resident_min_kb: Option<u64>,
    /// Free bytes still resident are at least this share of the arena's resident bytes: mostly free.
    pub free_share_min: Option<f64>,
    /// At least this many arenas meet the rest (default 1).
    pub min_arenas: Option<usize>,
    /// The condition holds when the arenas could not be read (an unknown glibc, no access): a rule that can
    /// fire on other evidence alone, made more precise where the arenas are known.
    #[serde(default)]
    pub unread_passes: bool,
}

/// The arenas that meet `c`: the bytes they show (the free growth, else the free resident bytes) and a line each.
fn heap_matches(c: &HeapCondition, p: &ProcessFacts) -> Option<(u64, Vec<String>)> {
    let read = p.heap.as_ref().filter(|h| !h.arenas.is_empty());
    let Some(heap) = read else {
        return c.unread_passes.then(|| (0, vec!["(the arenas could not be read: this rests on the rest)".into()]));
    };
    let (mut bytes, mut ev) = (0, Vec::new());
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / 1048576.0);
    let signed = |b: i64| format!("{}{:.1} MiB", if b < 0 { "-" } else { "+" }, b.unsigned_abs() as f64 / 1048576.0);
    for a in &heap.arenas {
        let before = p.heap_before.as_ref().and_then(|h| h.arena(a.arena.addr)).map(|b| &b.arena);
        let loose = |x: &crate::analysis::mstate::Arena| x.bins + x.fastbins;
        let free_growth = loose(&a.arena) as i64 - before.map_or(0, |b| loose(b) as i64);
        let use_growth = a.arena.in_use() as i64 - before.map_or(0, |b| b.in_use() as i64);
        let ok = c.free_growth_min_kb.is_none_or(|kb| free_growth >= (kb * 1024) as i64)
            && c.in_use_growth_max_share.is_none_or(|s| (use_growth as f64) <= s * free_growth.max(0) as f64)
            && c.free_resident_min_kb.is_none_or(|kb| a.free_resident() >= kb * 1024)
            && c.free_share_min.is_none_or(|s| a.free_resident() as f64 >= s * (a.rss_kb * 1024) as f64);
        if !ok {
            continue;
        }
        bytes += if c.free_growth_min_kb.is_some() { free_growth.max(0) as u64 } else { a.free_resident() };
        let name = if a.main { "main arena ([heap])".to_string() } else { format!("arena {:#x}", a.arena.addr) };
        ev.push(format!(
            "{name}: in use {} ({}), free {} in bins and fastbins ({}), top {}, resident {}",
            mib(a.arena.in_use()),
            signed(use_growth),
            mib(a.arena.bins + a.arena.fastbins),
            signed(free_growth),
            mib(a.arena.top),
            mib(a.rss_kb * 1024)
        ));
    }
    (ev.len() >= c.min_arenas.unwrap_or(1).max(1)).then_some((bytes, ev))
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fix {
    /// What to do.
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
    /// Where this is documented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
}

/// One frame as the rules see it.
#[derive(Debug, Clone, Default)]
pub struct FrameFact {
    pub module: String,
    pub function: String,
}

/// A traced stack: its frames innermost first and what it holds.
#[derive(Debug, Clone, Default)]
pub struct StackFact {
    pub id: u32,
    pub frames: Vec<FrameFact>,
    pub still_mapped: u64,
    /// Its growth (see `crate::analysis::growth`).
    pub growth: u64,
}

/// How a memory function was intercepted: `got` or `inline`, and where calls now go.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct HookFact {
    pub function: String,
    pub how: String,
    /// Who holds the slot or entry (`module`), and the verdict line.
    pub module: String,
    /// The function calls now go to (`ucm_munmap`), when it has a symbol.
    #[serde(default)]
    pub target: String,
    pub text: String,
}

/// What the rules look at in the process itself (read live after detach, or from a recording): memory by class
/// (Rss+Swap KiB by class name) now and before the trace, arenas, allocator, hooks, environment, kernel.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ProcessFacts {
    pub class_kb: Option<BTreeMap<String, i64>>,
    pub class_before: Option<BTreeMap<String, i64>>,
    pub arenas: usize,
    pub allocator: String,
    pub hooks: Vec<HookFact>,
    /// The live environment (with `GLIBC_TUNABLES` entries also as their own keys).
    pub env: BTreeMap<String, String>,
    /// Where `env` was read from (`live __environ`, or `/proc/PID/environ (start-up)`).
    pub env_source: String,
    pub kernel: BTreeMap<String, String>,
    /// glibc malloc's arenas at the end, and before the trace (`None` with another allocator, or from older
    /// recordings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap: Option<crate::analysis::mstate::HeapReading>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap_before: Option<crate::analysis::mstate::HeapReading>,
}

/// Everything a rule may look at: the traced stacks, the process's facts, and its class figures (Rss+Swap in
/// KiB, by class name) now and grown during the trace.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub stacks: Vec<StackFact>,
    pub class_growth_kb: BTreeMap<String, i64>,
    pub class_size_kb: BTreeMap<String, i64>,
    pub process: ProcessFacts,
}

impl Facts {
    /// The facts of `process` with its class growth worked out, and the traced `stacks`.
    pub fn of(process: ProcessFacts, stacks: Vec<StackFact>) -> Facts {
        let size = process.class_kb.clone().unwrap_or_default();
        let growth = match &process.class_before {
            Some(before) => {
                size.iter().map(|(c, &now)| (c.clone(), now - before.get(c).copied().unwrap_or(0))).collect()
            }
            None => BTreeMap::new(),
        };
        Facts { stacks, class_growth_kb: growth, class_size_kb: size, process }
    }
}

/// A rule that matched, with its evidence.
#[derive(Debug, Clone)]
pub struct Finding {
    pub rule: String,
    pub title: String,
    /// The bytes it explains (still mapped by its stacks, or the class growth/size).
    pub bytes: u64,
    /// Growth it explains, for ranking: of its stacks (over the middle half of the trace), or of its memory
    /// classes (over the whole trace); `None` for a rule about a size.
    pub growth: Option<Growth>,
    pub stacks: Vec<u32>,
    /// The frames that matched, innermost first, for "where".
    pub frames: Vec<FrameFact>,
    pub why: String,
    pub evidence: Vec<String>,
    pub fix: Vec<Fix>,
}

/// Growth a finding explains, and over what time it was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// Of its stacks: bytes mapped in the middle half of the trace and still mapped.
    Stacks(u64),
    /// Of its memory classes: Rss+Swap from the start of the trace to its end.
    Class(u64),
}

impl Growth {
    pub fn bytes(self) -> u64 {
        match self {
            Growth::Stacks(b) | Growth::Class(b) => b,
        }
    }
}

/// Why a rules file is refused: not the JSON shape (serde's message has the line and column), or a rule that
/// cannot work, by its id.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("rule `{0}`: needs an id and at least one fix")]
    NoIdOrFix(String),
    #[error("rule `{0}`: `when` needs frames, class_growth, class_size or heap (a growth pattern)")]
    NoPattern(String),
}

/// Parses a rules file; a problem names the rule and field.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, RulesError> {
    let file: RuleFile = serde_json::from_str(text)?;
    for r in &file.rules {
        if r.id.is_empty() || r.fix.is_empty() {
            return Err(RulesError::NoIdOrFix(r.id.clone()));
        }
        let w = &r.when;
        if w.frames.is_empty() && w.class_growth.is_none() && w.class_size.is_none() && w.heap.is_none() {
            return Err(RulesError::NoPattern(r.id.clone()));
        }
    }
    Ok(file.rules)
}

/// The shipped rules with `extra` merged in: same id replaces, new ids are added at the end.
pub fn merge_rules(mut base: Vec<Rule>, extra: Vec<Rule>) -> Vec<Rule> {
    for r in extra {
        match base.iter_mut().find(|b| b.id == r.id) {
            Some(b) => *b = r,
            None => base.push(r),
        }
    }
    base
}

/// `*` any run, `?` one character; case-sensitive.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn frame_matches(pattern: &str, f: &FrameFact) -> bool {
    pattern.split('|').any(|alt| match alt.split_once(':') {
        Some((m, func)) => glob(m, &f.module) && glob(func, &f.function),
        None => glob(alt, &f.function),
    })
}

/// The frames matching `patterns` in order, innermost first; `None` unless all match.
fn match_frames(patterns: &[String], frames: &[FrameFact]) -> Option<Vec<FrameFact>> {
    let mut out = Vec::new();
    let mut i = 0;
    for p in patterns {
        let at = frames[i..].iter().position(|f| frame_matches(p, f))? + i;
        out.push(frames[at].clone());
        i = at + 1;
    }
    Some(out)
}

fn class_sum(map: &BTreeMap<String, i64>, classes: &[String]) -> i64 {
    classes.iter().filter_map(|c| map.get(c)).sum()
}

fn env_matches(want: &str, have: Option<&String>) -> bool {
    match (want, have) {
        ("unset", v) => v.is_none(),
        ("set", v) => v.is_some(),
        (glob_, Some(v)) => glob(glob_, v),
        (_, None) => false,
    }
}

/// The process-wide conditions of a rule (everything but frames); with the evidence they give.
fn process_conditions(w: &When, facts: &Facts) -> Option<Vec<String>> {
    let mut ev = Vec::new();
    if let Some(a) = &w.allocator {
        if !glob(a, &facts.process.allocator) {
            return None;
        }
        ev.push(format!("allocator: {}", facts.process.allocator));
    }
    if let Some(n) = w.min_arenas {
        if facts.process.arenas < n {
            return None;
        }
        ev.push(format!("{} glibc thread arenas", facts.process.arenas));
    }
    if let Some(c) = &w.heap {
        ev.extend(heap_matches(c, &facts.process)?.1);
    }
    if let Some(c) = &w.class_growth {
        let g = class_sum(&facts.class_growth_kb, &c.classes);
        if g < c.min_kb as i64 {
            return None;
        }
        ev.push(format!("{} grew by {} KiB during the trace", c.classes.join(" + "), g));
    }
    if let Some(c) = &w.class_size {
        let s = class_sum(&facts.class_size_kb, &c.classes);
        if s < c.min_kb as i64 {
            return None;
        }
        ev.push(format!("{} hold {} KiB", c.classes.join(" + "), s));
    }
    if !w.seen_frames.is_empty() {
        let f = facts.stacks.iter().find_map(|s| match_frames(&w.seen_frames, &s.frames))?;
        let names: Vec<&str> = f.iter().map(|f| f.function.as_str()).collect();
        ev.push(format!("traced calls from {}", names.join(" <- ")));
    }
    for func in &w.hooked {
        let h = facts.process.hooks.iter().find(|h| &h.function == func)?;
        ev.push(format!("hook: {}", h.text));
    }
    for (k, want) in &w.env {
        if !env_matches(want, facts.process.env.get(k)) {
            return None;
        }
    }
    for (k, want) in &w.kernel {
        if !facts.process.kernel.get(k).is_some_and(|v| glob(want, v)) {
            return None;
        }
        ev.push(format!("kernel {k} = {}", facts.process.kernel[k]));
    }
    Some(ev)
}

/// Evidence every finding of `rule` shows: the hooks on the matched modules and the environment it names.
fn explanations(rule: &Rule, frames: &[FrameFact], facts: &Facts) -> Vec<String> {
    let mut ev = Vec::new();
    for h in &facts.process.hooks {
        if !rule.when.hooked.contains(&h.function) && frames.iter().any(|f| f.module == h.module) {
            ev.push(format!("hook: {}", h.text));
        }
    }
    for k in &rule.explain_env {
        let v = facts.process.env.get(k).map(|v| format!("{k}={v}")).unwrap_or_else(|| format!("{k} unset"));
        ev.push(format!("{v} (environment: {})", facts.process.env_source));
    }
    ev
}

/// Every finding, most bytes first.
pub fn evaluate(rules: &[Rule], facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    for rule in rules {
        let Some(mut evidence) = process_conditions(&rule.when, facts) else { continue };
        let (bytes, growth, stacks, frames) = if rule.when.frames.is_empty() {
            let grown = rule.when.class_growth.as_ref().map(|c| class_sum(&facts.class_growth_kb, &c.classes));
            let heap =
                rule.when.heap.as_ref().and_then(|c| heap_matches(c, &facts.process)).map(|(b, _)| b as i64 / 1024);
            let kb = grown
                .or_else(|| rule.when.class_size.as_ref().map(|c| class_sum(&facts.class_size_kb, &c.classes)))
                .or(heap)
                .unwrap_or(0);
            let growth = grown.map(|kb| Growth::Class(kb.max(0) as u64 * 1024));
            (kb.max(0) as u64 * 1024, growth, Vec::new(), Vec::new())
        } else {
            let mut bytes = 0;
            let mut growth = 0;
            let mut ids = Vec::new();
            let mut frames = Vec::new();
            for s in facts.stacks.iter().filter(|s| s.still_mapped > 0) {
                if let Some(f) = match_frames(&rule.when.frames, &s.frames) {
                    bytes += s.still_mapped;
                    growth += s.growth;
                    ids.push(s.id);
                    if frames.is_empty() {
                        frames = f;
                    }
                }
            }
            if ids.is_empty() {
                continue;
            }
            let names: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
            evidence.insert(0, format!("stack through {}", names.join(" <- ")));
            (bytes, Some(Growth::Stacks(growth)), ids, frames)
        };
        evidence.extend(explanations(rule, &frames, facts));
        out.push(Finding {
            rule: rule.id.clone(),
            title: rule.title.clone(),
            bytes,
            growth,
            stacks,
            frames,
            why: rule.why.clone(),
            evidence,
            fix: rule.fix.clone(),
        });
    }
    // What grows first, then what is held.
    let grew = |f: &Finding| f.growth.map_or(0, Growth::bytes);
    out.sort_by(|a, b| grew(b).cmp(&grew(a)).then(b.bytes.cmp(&a.bytes)).then_with(|| a.rule.cmp(&b.rule)));
    out
}

/// Without a trace (`syscatch hooks`): the rules a hook may take part in. A rule is named when a hook's target
/// (module and function) matches one of its stack patterns and its process conditions (allocator, environment,
/// kernel; not growth, which needs a trace) hold; the finding has no bytes, and its evidence says which hook and
/// which pattern. Whether memory grows that way is for `--leaks` to show.
pub fn hook_advice(rules: &[Rule], facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    for rule in rules {
        let w = When { class_growth: None, class_size: None, seen_frames: Vec::new(), ..rule.when.clone() };
        let Some(mut evidence) = process_conditions(&w, facts) else { continue };
        let patterns = rule.when.frames.iter().chain(&rule.when.seen_frames);
        let hooked: Vec<(&HookFact, &String)> = facts
            .process
            .hooks
            .iter()
            .filter_map(|h| {
                let f = FrameFact { module: h.module.clone(), function: h.target.clone() };
                patterns.clone().find(|p| !h.target.is_empty() && frame_matches(p, &f)).map(|p| (h, p))
            })
            .collect();
        if hooked.is_empty() {
            continue;
        }
        for (h, p) in &hooked {
            evidence.push(format!("hook: {} (matches the rule's stack pattern `{p}`)", h.text));
        }
        let frames: Vec<FrameFact> =
            hooked.iter().map(|(h, _)| FrameFact { module: h.module.clone(), function: h.target.clone() }).collect();
        let mut expl = explanations(rule, &frames, facts);
        expl.retain(|e| !e.starts_with("hook: "));
        evidence.extend(expl);
        out.push(Finding {
            rule: rule.id.clone(),
            title: rule.title.clone(),
            bytes: 0,
            growth: None,
            stacks: Vec::new(),
            frames,
            why: rule.why.clone(),
            evidence,
            fix: rule.fix.clone(),
        });
    }
    out
}

/// `GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=0` as its own keys.
pub fn parse_tunables(value: &str) -> Vec<(String, String)> {
    value
        .split(':')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(module: &str, function: &str) -> FrameFact {
        FrameFact { module: module.into(), function: function.into() }
    }

    fn ucx_stack(still: u64) -> StackFact {
        StackFact {
            id: 3,
            frames: vec![
                f("libc.so.6", "syscall"),
                f("libucm.so.0", "ucm_orig_mmap"),
                f("libucs.so.0", "ucs_mpool_grow"),
                f("libucs.so.0", "ucs_mpool_get"),
                f("libucs.so.0", "ucs_rcache_invalidate"),
                f("libucm.so.0", "ucm_munmap"),
                f("app", "main"),
            ],
            still_mapped: still,
            growth: still,
        }
    }

    #[test]
    fn globs() {
        assert!(glob("ucs_rcache*", "ucs_rcache_invalidate"));
        assert!(glob("*", ""));
        assert!(glob("lib?cm*", "libucm.so.0"));
        assert!(!glob("ucm_*", "xucm_munmap"));
        assert!(glob("*mpool*grow", "ucs_mpool_grow"));
        assert!(!glob("a*b", "a"));
    }

    #[test]
    fn the_shipped_rules_parse_and_the_ucx_rule_fires_only_on_its_stack() {
        let rules = parse_rules(DEFAULT_RULES).unwrap();
        assert!(rules.len() >= 6);
        let process = ProcessFacts { allocator: "glibc".into(), env_source: "live".into(), ..Default::default() };
        let mut facts = Facts { process, ..Facts::default() };
        facts.stacks.push(ucx_stack(256 << 10));
        facts.stacks.push(StackFact { id: 4, frames: vec![f("app", "leak_site")], still_mapped: 1 << 20, growth: 0 });
        let found = evaluate(&rules, &facts);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, "ucx-rcache-invalidation");
        assert_eq!(found[0].bytes, 256 << 10);
        assert_eq!(found[0].stacks, [3]);
        assert!(found[0].evidence.iter().any(|e| e.contains("UCX_RCACHE_MAX_UNRELEASED unset")), "{found:#?}");
        assert!(found[0].fix[0].action.contains("UCX_RCACHE_MAX_UNRELEASED=1024"));
        assert!(found[0].fix.last().unwrap().action.contains("UCX_MEM_MMAP_HOOK_MODE=none"));
        // A stack that holds nothing is no finding.
        facts.stacks[0].still_mapped = 0;
        assert!(evaluate(&rules, &facts).is_empty());
    }

    #[test]
    fn rules_files_replace_and_extend() {
        let base = parse_rules(DEFAULT_RULES).unwrap();
        let extra = parse_rules(
            r#"{"rules": [{"id": "ucx-rcache-invalidation", "title": "t", "when": {"frames": ["nope"]},
                "why": "w", "fix": [{"action": "a"}]},
               {"id": "mine", "title": "mine", "when": {"frames": ["leak_site"]}, "why": "w",
                "fix": [{"action": "free it"}]}]}"#,
        )
        .unwrap();
        let n = base.len();
        let rules = merge_rules(base, extra);
        assert_eq!(rules.len(), n + 1);
        let facts = Facts {
            stacks: vec![
                ucx_stack(4096),
                StackFact { id: 9, frames: vec![f("a", "leak_site")], still_mapped: 8192, growth: 8192 },
            ],
            ..Facts::default()
        };
        let found = evaluate(&rules, &facts);
        assert_eq!(found.iter().map(|f| f.rule.as_str()).collect::<Vec<_>>(), ["mine"]);
        let no_pattern =
            parse_rules(r#"{"rules": [{"id": "x", "title": "t", "when": {}, "why": "w", "fix": [{"action": "a"}]}]}"#);
        assert!(matches!(&no_pattern, Err(RulesError::NoPattern(id)) if id == "x"), "{no_pattern:?}");
        let no_fix =
            parse_rules(r#"{"rules": [{"id": "x", "title": "t", "when": {"frames": []}, "why": "w", "fix": []}]}"#);
        assert!(matches!(no_fix, Err(RulesError::NoIdOrFix(_))));
        let unknown =
            parse_rules(r#"{"rules": [{"id": "x", "title": "t", "when": {"framez": []}, "why": "w", "fix": []}]}"#);
        assert!(matches!(unknown, Err(RulesError::Json(_))));
    }

    #[test]
    fn process_rules_use_class_figures_and_the_environment() {
        let rules = parse_rules(DEFAULT_RULES).unwrap();
        let process = ProcessFacts { allocator: "glibc".into(), arenas: 12, ..Default::default() };
        let mut facts = Facts { process, ..Facts::default() };
        facts.class_size_kb.insert("malloc_arenas".into(), 90 << 10);
        let found = evaluate(&rules, &facts);
        assert!(found.iter().any(|f| f.rule == "glibc-arenas"), "{found:#?}");
        facts.process.arenas = 2;
        assert!(!evaluate(&rules, &facts).iter().any(|f| f.rule == "glibc-arenas"));
        // Where the arenas are read, at least three must be mostly free (free bytes still resident).
        facts.process.arenas = 12;
        let arena = |addr: u64, in_use_mib: u64| crate::analysis::mstate::ArenaReading {
            arena: crate::analysis::mstate::Arena {
                addr,
                system_mem: 8 << 20,
                top: (8 - in_use_mib) << 20,
                ..Default::default()
            },
            rss_kb: 6 << 10,
            ..Default::default()
        };
        let read = |in_use: &[u64]| crate::analysis::mstate::HeapReading {
            arenas: in_use.iter().enumerate().map(|(i, &u)| arena(0x1000 * i as u64, u)).collect(),
            ..Default::default()
        };
        let fires = |facts: &Facts| evaluate(&rules, facts).iter().any(|f| f.rule == "glibc-arenas");
        facts.process.heap = Some(read(&[1, 1, 1, 7]));
        assert!(fires(&facts), "three of four mostly free");
        facts.process.heap = Some(read(&[1, 1, 7, 7]));
        assert!(!fires(&facts), "two mostly free: in use is what they hold");
        assert_eq!(
            parse_tunables("glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=0"),
            [
                ("glibc.malloc.arena_max".to_string(), "2".to_string()),
                ("glibc.malloc.trim_threshold".into(), "0".into())
            ]
        );
    }
}
