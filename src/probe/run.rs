//! From a checked script and a live process to the tracer's plan: one site per resolved address (probes at the
//! same address share it), each probe with its condition, limits and what it collects.

use super::ast::{Collect, Expr, Location, Script, Var, eval};
use super::check::ResolvedProbe;
use super::error::Error;
use crate::live::plan::{Plan, Wrapper};
use crate::live::resolve;
use crate::live::tracer::{Condition, Probe, SiteSpec};
use crate::model::modules;
use crate::model::regs::Regs;
use crate::os::Tid;
use crate::os::mem::ProcMem;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// A probe's condition, evaluated in the tracer per hit. At a `syscall()` wrapper, `nr` is rdi and the syscall's
/// numbers filter first; `argN` is whatever the tracer's `arg` gives for the location.
struct ScriptCondition {
    numbers: Option<HashSet<u64>>,
    expr: Option<Expr>,
}

impl Condition for ScriptCondition {
    fn matches(&self, regs: &Regs, arg: &dyn Fn(usize) -> u64) -> bool {
        if self.numbers.as_ref().is_some_and(|n| !n.contains(&regs.0.rdi)) {
            return false;
        }
        let Some(e) = &self.expr else { return true };
        let get = |v: Var| match v {
            Var::Reg(r) => regs.get(r),
            Var::Arg(i) => arg(i as usize),
            Var::Nr => regs.0.rdi,
        };
        eval(e, &get) != 0
    }
}

/// The label of a function location in events: `libc.so.6:munmap`, `prog:f+0x4`, or the address.
fn label(r: &ResolvedProbe, offset: u64) -> String {
    match (&r.module, &r.symbol) {
        (Some(m), Some((sym, _))) if offset > 0 => format!("{}:{sym}+{offset:#x}", modules::file_name(&m.path)),
        (Some(m), Some((sym, _))) => format!("{}:{sym}", modules::file_name(&m.path)),
        (Some(m), None) => format!("{}+{:#x}", modules::file_name(&m.path), r.addr.wrapping_sub(m.start)),
        _ => format!("{:#x}", r.addr),
    }
}

/// Builds the plan. `wrapper` is libc's `syscall()` (needed only by `syscall(...)` locations).
pub fn plan(
    pid: Tid,
    script: &Script,
    resolved: &[ResolvedProbe],
    wrapper: Option<&Wrapper>,
    mem: &ProcMem,
) -> Result<Plan, Error> {
    let mut specs: BTreeMap<u64, SiteSpec> = BTreeMap::new();
    let mut depths = HashMap::new();
    let mut what = Vec::new();
    for (decl, r) in script.probes.iter().zip(resolved) {
        let name: Arc<str> = decl.name.as_str().into();
        let Collect { ret, stack, regs, .. } = &decl.collect;
        let (is_wrapper, numbers, func) = match &decl.location {
            Location::Syscall { numbers } => (true, Some(numbers.iter().copied().collect()), None),
            Location::Function { offset, .. } => (false, None, Some(label(r, *offset))),
            Location::Address(_) => (false, None, Some(label(r, 0))),
        };
        let code = if is_wrapper {
            let w = wrapper.ok_or_else(|| Error::NoWrapper { probe: name.to_string() })?;
            w.code.clone()
        } else {
            // The original bytes come from the file (build-id checked), never from memory that someone may
            // already have patched.
            let m = r.module.as_ref().ok_or_else(|| Error::NotFileBacked { probe: name.to_string(), addr: r.addr })?;
            // Read when the location was resolved: the cache has it.
            let module = resolve::read_module(pid, m, Some(mem))?;
            module
                .file_bytes(r.addr, 16)
                .or_else(|| module.file_bytes(r.addr, 1))
                .ok_or_else(|| Error::OutsideFile { probe: name.to_string(), addr: r.addr, path: m.path.clone() })?
                .to_vec()
        };
        let mut probe = Probe::new(
            Some(name.clone()),
            func.as_deref().map(Arc::from),
            Box::new(ScriptCondition { numbers, expr: decl.condition.clone() }),
        );
        probe.want_ret = *ret;
        probe.want_stack = stack.is_some();
        probe.regs = regs.clone();
        probe.max_events = decl.max_events;
        probe.sample_one_in = decl.sample_one_in;
        if let Some(d) = stack {
            depths.insert(name.clone(), *d);
        }
        what.push(format!("{name} at {:#x}", r.addr));
        specs
            .entry(r.addr)
            .or_insert_with(|| SiteSpec { addr: r.addr, code, wrapper: is_wrapper, probes: Vec::new() })
            .probes
            .push(probe);
    }
    let n = specs.len();
    Ok(Plan {
        specs: specs.into_values().collect(),
        fast: None,
        ring: Vec::new(),
        fast_functions: Vec::new(),
        what: format!("{n} breakpoint(s): {}", what.join(", ")),
        depths,
        watched: Default::default(),
    })
}
