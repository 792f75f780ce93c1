//! From a checked script and a live process to the tracer's plan: one site per resolved address (probes at the
//! same address share it), each probe with its condition, limits and what it collects.

use super::ast::{Collect, Expr, Location, Script, Var, eval};
use super::check::ResolvedProbe;
use super::error::Error;
use crate::live::plan::{Plan, Wrapper};
use crate::live::resolve;
use crate::live::tracer::{Condition, FastFunction, Probe, SiteSpec};
use crate::model::modules::{self, ModuleMap};
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

    fn on_call(&self, nr: u64, args: &[u64; 6]) -> Option<bool> {
        if self.numbers.as_ref().is_some_and(|n| !n.contains(&nr)) {
            return Some(false);
        }
        let Some(e) = &self.expr else { return Some(true) };
        if uses_registers(e) {
            return None;
        }
        let get = |v: Var| match v {
            Var::Reg(_) => 0,
            Var::Arg(i) => args.get(i as usize).copied().unwrap_or(0),
            Var::Nr => nr,
        };
        Some(eval(e, &get) != 0)
    }
}

/// Whether `e` reads a register by name (which `--fast`'s record of a call does not keep).
fn uses_registers(e: &Expr) -> bool {
    match e {
        Expr::Int(_) => false,
        Expr::Var(v) => matches!(v, Var::Reg(_)),
        Expr::Unary(_, x) => uses_registers(x),
        Expr::Binary(_, a, b) => uses_registers(a) || uses_registers(b),
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

/// The libc functions `--fast` can patch for a probe at their entry, with the system call each makes.
const FAST_FUNCTIONS: [(&str, u64); 5] = [
    ("mmap", crate::model::consts::SYS_MMAP),
    ("mmap64", crate::model::consts::SYS_MMAP),
    ("munmap", crate::model::consts::SYS_MUNMAP),
    ("mprotect", crate::model::consts::SYS_MPROTECT),
    ("madvise", crate::model::consts::SYS_MADVISE),
];

/// What `--fast` can take of a site: every probe there decides from the call alone (its number and arguments,
/// no register by name) and collects no registers.
#[derive(Default)]
struct FastSite {
    eligible: bool,
    /// No probe there wants the stack: the calls can go to the ring without a stop.
    no_stack: bool,
    /// A libc function's entry: its name, its system call and libc's mapping.
    function: Option<(String, u64, ModuleMap)>,
    numbers: Vec<u64>,
}

/// Builds the plan. `wrapper` is libc's `syscall()` (needed by `syscall(...)` locations, and by `fast`: the
/// trampoline is placed at it). With `fast`, the sites whose probes decide from the call alone go through
/// `--fast`'s trampoline (non-matching calls never stop; a matching call of a known stack is written down without
/// a stop); the others keep their breakpoints.
pub fn plan(
    pid: Tid,
    script: &Script,
    resolved: &[ResolvedProbe],
    wrapper: Option<&Wrapper>,
    mem: &ProcMem,
    fast: bool,
) -> Result<Plan, Error> {
    let mut specs: BTreeMap<u64, SiteSpec> = BTreeMap::new();
    let mut fast_sites: BTreeMap<u64, FastSite> = BTreeMap::new();
    let mut depths = HashMap::new();
    let mut what = Vec::new();
    for (decl, r) in script.probes.iter().zip(resolved) {
        let from_call = decl.collect.regs.is_empty() && decl.condition.as_ref().is_none_or(|e| !uses_registers(e));
        let f = fast_sites.entry(r.addr).or_insert(FastSite { eligible: true, no_stack: true, ..FastSite::default() });
        f.eligible &= from_call;
        f.no_stack &= decl.collect.stack.is_none();
        match &decl.location {
            Location::Syscall { numbers } => f.numbers.extend(numbers),
            Location::Function { offset: 0, .. } => {
                let libc = r.module.as_ref().filter(|m| modules::file_name(&m.path).starts_with("libc.so"));
                let name = r.symbol.as_ref().map(|(s, _)| s.as_str()).unwrap_or("");
                match (FAST_FUNCTIONS.iter().find(|(n, _)| *n == name), libc) {
                    (Some(&(n, nr)), Some(m)) => f.function = Some((n.to_string(), nr, m.clone())),
                    _ => f.eligible = false,
                }
            }
            _ => f.eligible = false,
        }
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
    let mut plan = Plan {
        specs: Vec::new(),
        fast: None,
        ring: Vec::new(),
        fast_functions: Vec::new(),
        what: format!("{n} probe site(s): {}", what.join(", ")),
        depths,
        watched: Default::default(),
        malloc_every: 0,
    };
    if let (true, Some(w)) = (fast, wrapper) {
        plan_fast(pid, &mut plan, &specs, &fast_sites, w, mem)?;
    }
    plan.specs = specs.into_values().collect();
    Ok(plan)
}

/// `--fast` for the sites that can take it: the wrapper's numbers, and libc's functions with their whole code.
fn plan_fast(
    pid: Tid,
    plan: &mut Plan,
    specs: &BTreeMap<u64, SiteSpec>,
    sites: &BTreeMap<u64, FastSite>,
    wrapper: &Wrapper,
    mem: &ProcMem,
) -> Result<(), Error> {
    let mut numbers = Vec::new();
    for (addr, f) in sites.iter().filter(|(_, f)| f.eligible) {
        if *addr == wrapper.addr {
            numbers.extend(&f.numbers);
            if f.no_stack {
                plan.ring.extend(&f.numbers);
            }
            continue;
        }
        let (Some((name, nr, map)), Some(spec)) = (&f.function, specs.get(addr)) else { continue };
        let Some(label) = spec.probes.first().and_then(|p| p.label.clone()) else { continue };
        let module = resolve::read_module(pid, map, Some(mem))?;
        // The whole function: the trampoline's plan needs its one `syscall` and every branch inside it.
        let Some(size) = module.find_symbol(name).map(|(_, size)| size.clamp(16, 1024)) else { continue };
        let Some(code) = module.file_bytes(*addr, size).map(<[u8]>::to_vec) else { continue };
        plan.fast_functions.push(FastFunction { addr: *addr, code, label, nr: *nr, ring: f.no_stack, alloc: None });
    }
    // The trampoline takes the wrapper's place: a wrapper whose probes need registers it does not keep leaves
    // every site to its breakpoint.
    if sites.get(&wrapper.addr).is_some_and(|f| !f.eligible) || (numbers.is_empty() && plan.fast_functions.is_empty()) {
        plan.ring.clear();
        plan.fast_functions.clear();
        return Ok(());
    }
    numbers.sort_unstable();
    numbers.dedup();
    plan.ring.sort_unstable();
    plan.ring.dedup();
    plan.fast = Some((numbers, wrapper.clone()));
    Ok(())
}
