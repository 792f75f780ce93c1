//! The rules a probe script must follow beyond its syntax (names, argument range, where `nr` and `ret` mean
//! something, limits), and, for a live process, where every location is at run time. The rules are small
//! functions shared by the parser (which reports them at the offending token) and [`check_script`] (which
//! checks a script built by other means, at the probe's position).

use super::ast::*;
use super::error::{Error, LocationError};
use super::parse::syscall_label;
use crate::live::resolve;
use crate::model::modules::{self, Module, ModuleMap};
use crate::os::Tid;
use crate::os::mem::ProcMem;
use std::collections::HashSet;

/// A rule broken by a probe, at its position (shown as a [`super::ParseError`] with the offending line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{}: {message}", span.line, span.col)]
pub struct CheckError {
    pub span: Span,
    pub message: String,
}

pub fn name_problem(name: &str) -> Option<String> {
    name.is_empty().then(|| "a probe name cannot be empty".to_string())
}

pub fn syscall_number_problem(nr: u64) -> Option<String> {
    // Room for syscalls newer than our table; x32 numbers (bit 30) are not x86_64 syscalls.
    (nr >= 1024).then(|| format!("syscall number {nr} is out of range: x86_64 syscall numbers are below 1024"))
}

pub fn limit_problem(n: u64) -> Option<String> {
    (n == 0).then(|| "expected a count of at least 1".to_string())
}

pub fn stack_problem(depth: u64) -> Option<String> {
    (depth == 0 || depth > MAX_STACK_DEPTH as u64)
        .then(|| format!("a stack depth is 1 to {MAX_STACK_DEPTH} frames, not {depth}"))
}

pub fn var_problem(v: Var, loc: &Location) -> Option<String> {
    match v {
        Var::Arg(n) if n > 5 => Some(format!("`arg{n}` is out of range: the arguments are arg0..arg5")),
        Var::Nr if !matches!(loc, Location::Syscall { .. }) => Some(
            "`nr` is only defined at `syscall(...)` locations; at a function, the first argument is arg0 (rdi)"
                .to_string(),
        ),
        _ => None,
    }
}

/// Return capture runs to the return address at the stack pointer, which is only there at a function's entry.
pub fn ret_problem(loc: &Location) -> Option<String> {
    match loc {
        Location::Syscall { .. } | Location::Function { offset: 0, .. } => None,
        Location::Function { .. } => Some(
            "`ret` needs a function entry: past the entry (`+OFFSET`) the return address is no longer at the \
             stack pointer"
                .to_string(),
        ),
        Location::Address(_) => Some(
            "`ret` needs a function entry or `syscall(...)`: at an address the return address is not known; \
             name the function instead"
                .to_string(),
        ),
    }
}

/// A literal zero divisor is surely a mistake; a computed one evaluates to 0 (see [`eval`]).
pub fn divisor_problem(op: BinOp, rhs: &Expr) -> Option<String> {
    (matches!(op, BinOp::Div | BinOp::Rem) && *rhs == Expr::Int(0)).then(|| "division by zero".to_string())
}

fn expr_problem(e: &Expr, loc: &Location, depth: usize) -> Option<String> {
    if depth > super::parse::MAX_EXPR_DEPTH {
        return Some("expression too deep".into());
    }
    match e {
        Expr::Int(_) => None,
        Expr::Var(v) => var_problem(*v, loc),
        Expr::Unary(_, x) => expr_problem(x, loc, depth + 1),
        Expr::Binary(op, a, b) => divisor_problem(*op, b)
            .or_else(|| expr_problem(a, loc, depth + 1))
            .or_else(|| expr_problem(b, loc, depth + 1)),
    }
}

fn probe_problem(p: &ProbeDecl) -> Option<String> {
    if let Some(m) = name_problem(&p.name) {
        return Some(m);
    }
    if let Location::Syscall { numbers } = &p.location {
        if numbers.is_empty() {
            return Some("`syscall()` needs at least one syscall".into());
        }
        let mut seen = HashSet::new();
        for &n in numbers {
            if let Some(m) = syscall_number_problem(n) {
                return Some(m);
            }
            if !seen.insert(n) {
                return Some(format!("{} is listed twice", syscall_label(n)));
            }
        }
    }
    if let Location::Function { module, symbol, .. } = &p.location {
        if symbol.is_empty() {
            return Some("a symbol name cannot be empty".into());
        }
        if module.as_deref() == Some("") {
            return Some("a module name cannot be empty".into());
        }
    }
    if let Some(m) = p.condition.as_ref().and_then(|c| expr_problem(c, &p.location, 1)) {
        return Some(m);
    }
    let c = &p.collect;
    if c.ret
        && let Some(m) = ret_problem(&p.location)
    {
        return Some(m);
    }
    if let Some(m) = c.stack.and_then(|d| stack_problem(d as u64)) {
        return Some(m);
    }
    if let Some(r) = c.regs.iter().enumerate().find(|(i, r)| c.regs[..*i].contains(r)) {
        return Some(format!("`{}` is collected twice", reg_name(*r.1)));
    }
    p.max_events
        .or(p.sample_one_in)
        .and_then(|_| p.max_events.and_then(limit_problem).or_else(|| p.sample_one_in.and_then(limit_problem)))
}

/// Checks every rule on a script however it was built; the parser has already applied them to a parsed one.
pub fn check_script(s: &Script) -> Result<(), CheckError> {
    if s.probes.is_empty() {
        return Err(CheckError { span: Span { line: 1, col: 1 }, message: "a script needs at least one probe".into() });
    }
    let zero = |d: Option<std::time::Duration>| d.is_some_and(|d| d.is_zero());
    if zero(s.settings.duration) || zero(s.settings.smaps_every) {
        return Err(CheckError { span: Span { line: 1, col: 1 }, message: "a duration must be more than zero".into() });
    }
    let mut names = HashSet::new();
    for p in &s.probes {
        let mut problem = probe_problem(p);
        if problem.is_none() && !names.insert(p.name.as_str()) {
            problem = Some(format!("a probe named `{}` is already declared: names must be unique", p.name));
        }
        if let Some(message) = problem {
            return Err(CheckError { span: p.span, message: format!("probe `{}`: {message}", p.name) });
        }
    }
    Ok(())
}

/// Where a probe's location is in a live process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedProbe {
    /// The run-time address of the breakpoint.
    pub addr: u64,
    /// The module the address is in (for an address: the module mapping it, if any).
    pub module: Option<ModuleMap>,
    /// The symbol the location named (`syscall` for `syscall(...)`), and its size in the symbol table (0: unknown).
    pub symbol: Option<(String, u64)>,
}

impl ResolvedProbe {
    /// `0x7f12345 (libc.so.6:munmap+0x4)`
    pub fn describe(&self, offset: u64) -> String {
        let module = self.module.as_ref().map(|m| modules::file_name(&m.path));
        match (&self.symbol, module) {
            (Some((s, _)), Some(m)) if offset != 0 => format!("{:#x} ({m}:{s}+{offset:#x})", self.addr),
            (Some((s, _)), Some(m)) => format!("{:#x} ({m}:{s})", self.addr),
            (None, Some(m)) => format!("{:#x} (in {m})", self.addr),
            _ => format!("{:#x}", self.addr),
        }
    }
}

/// Resolves every location of `script` in process `pid`, in probe order, reading its maps and the files it
/// mapped (through /proc/PID/root, build-id checked) without attaching.
pub fn resolve_locations(pid: Tid, script: &Script) -> Result<Vec<ResolvedProbe>, Error> {
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(Error::NoProcess(pid));
    }
    let maps = resolve::read_maps(pid)?;
    let r = Resolver {
        pid,
        // Reading memory needs no attach; without it (no permission) the build-id check is skipped.
        mem: ProcMem::open(pid).ok(),
        mods: modules::group_modules(&maps),
        maps,
    };
    script
        .probes
        .iter()
        .map(|p| {
            r.locate(&p.location).map_err(|problem| Error::Location { probe: p.name.clone(), span: p.span, problem })
        })
        .collect()
}

struct Resolver {
    pid: Tid,
    mem: Option<ProcMem>,
    maps: Vec<crate::model::maps::Mapping>,
    mods: Vec<ModuleMap>,
}

impl Resolver {
    /// The module `mods[i]`, its file read once per command by [`resolve::read_module`]'s cache.
    fn module(&self, i: usize) -> Result<Module, crate::live::Error> {
        resolve::read_module(self.pid, &self.mods[i], self.mem.as_ref())
    }

    fn names(&self, idx: &[usize]) -> String {
        let mut v: Vec<&str> = idx.iter().map(|&i| modules::file_name(&self.mods[i].path)).collect();
        v.dedup();
        if v.is_empty() { "no file-backed modules".into() } else { v.join(", ") }
    }

    fn locate(&self, loc: &Location) -> Result<ResolvedProbe, LocationError> {
        match loc {
            Location::Syscall { .. } => {
                let Some(i) = self.mods.iter().position(|m| resolve::is_libc(&m.path)) else {
                    let all: Vec<usize> = (0..self.mods.len()).collect();
                    return Err(LocationError::NoLibc { searched: self.names(&all) });
                };
                self.function_in(&[i], "syscall", 0)
            }
            Location::Function { module, symbol, offset } => {
                let candidates = match module {
                    Some(name) => vec![self.match_module(name)?],
                    None => (0..self.mods.len()).collect(),
                };
                self.function_in(&candidates, symbol, *offset)
            }
            Location::Address(a) => {
                let exec = self.maps.iter().any(|m| m.contains(*a) && m.is_exec());
                if !exec {
                    return Err(LocationError::NotExecutable { addr: *a, pid: self.pid });
                }
                let module = self.mods.iter().find(|m| m.start <= *a && *a < m.end).cloned();
                Ok(ResolvedProbe { addr: *a, module, symbol: None })
            }
        }
    }

    /// The one module named `name`: by path, file name or soname; else by a file-name prefix at a `.` or `-`
    /// boundary (`libc` is `libc.so.6`, not `libcap.so.2`); else by any file-name prefix.
    fn match_module(&self, name: &str) -> Result<usize, LocationError> {
        let file = |i: usize, mods: &[ModuleMap]| modules::file_name(&mods[i].path).to_string();
        let all: Vec<usize> = (0..self.mods.len()).collect();
        let tiers: [&dyn Fn(&str) -> bool; 3] = [
            &|f: &str| f == name,
            &|f: &str| f.strip_prefix(name).is_some_and(|rest| rest.starts_with(['.', '-'])),
            &|f: &str| f.starts_with(name),
        ];
        let pick = |found: Vec<usize>, mods: &[ModuleMap]| -> Option<Result<usize, LocationError>> {
            let mut paths: Vec<String> = found.iter().map(|&i| mods[i].path.clone()).collect();
            paths.sort_unstable();
            paths.dedup();
            match paths.len() {
                0 => None,
                1 => Some(Ok(found[0])),
                _ => Some(Err(LocationError::AmbiguousModule { name: name.to_string(), paths })),
            }
        };
        if name.contains('/') {
            let found = all.iter().copied().filter(|&i| self.mods[i].path == name).collect();
            if let Some(r) = pick(found, &self.mods) {
                return r;
            }
        }
        let exact: Vec<usize> = all.iter().copied().filter(|&i| tiers[0](&file(i, &self.mods))).collect();
        if let Some(r) = pick(exact, &self.mods) {
            return r;
        }
        // The soname needs the file: read only when the file names did not match exactly.
        let by_soname: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| self.module(i).ok().and_then(|m| soname(&m.data)).as_deref() == Some(name))
            .collect();
        if let Some(r) = pick(by_soname, &self.mods) {
            return r;
        }
        for tier in &tiers[1..] {
            let found = all.iter().copied().filter(|&i| tier(&file(i, &self.mods))).collect();
            if let Some(r) = pick(found, &self.mods) {
                return r;
            }
        }
        Err(LocationError::NoModule { name: name.to_string(), searched: self.names(&all) })
    }

    fn function_in(&self, candidates: &[usize], symbol: &str, offset: u64) -> Result<ResolvedProbe, LocationError> {
        let mut found: Vec<(usize, u64, u64)> = Vec::new();
        let mut unreadable = Vec::new();
        for &i in candidates {
            match self.module(i) {
                Ok(m) => {
                    if let Some((addr, size)) = m.find_symbol(symbol) {
                        found.push((i, addr, size));
                    }
                }
                Err(e) => unreadable.push(e),
            }
        }
        // A file mapped only to be read (a debug file, a library read as data) runs no code: a symbol of its is not a
        // place a probe can fire, unless no module that runs code defines it (said then as a data symbol).
        let runs = |&(_, addr, _): &(usize, u64, u64)| self.maps.iter().any(|m| m.contains(addr) && m.is_exec());
        if found.iter().any(runs) {
            found.retain(runs);
        }
        let mut paths: Vec<&str> = found.iter().map(|&(i, ..)| self.mods[i].path.as_str()).collect();
        paths.sort_unstable();
        paths.dedup();
        let sym = || symbol.to_string();
        if paths.len() > 1 {
            let files = paths.iter().map(|p| modules::file_name(p).to_string()).collect();
            return Err(LocationError::SeveralModules { symbol: sym(), files });
        }
        let Some(&(i, addr, size)) = found.first() else {
            return Err(LocationError::NoSymbol { symbol: sym(), searched: self.names(candidates), unreadable });
        };
        if size != 0 && offset >= size {
            return Err(LocationError::PastEnd { symbol: sym(), offset, size });
        }
        let at = addr.checked_add(offset).ok_or_else(|| LocationError::Overflow { symbol: sym(), offset })?;
        if !self.maps.iter().any(|m| m.contains(at) && m.is_exec()) {
            return Err(LocationError::DataSymbol { symbol: sym(), addr: at });
        }
        Ok(ResolvedProbe { addr: at, module: Some(self.mods[i].clone()), symbol: Some((symbol.to_string(), size)) })
    }
}

/// DT_SONAME of an ELF file, if it has one.
pub fn soname(data: &[u8]) -> Option<String> {
    use object::read::elf::{Dyn, FileHeader, SectionHeader};
    let elf = object::elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = elf.endian().ok()?;
    let sections = elf.sections(endian, data).ok()?;
    for s in sections.iter() {
        let Ok(Some((entries, link))) = s.dynamic(endian, data) else {
            continue;
        };
        let strings = sections.strings(endian, data, link).ok()?;
        for d in entries {
            if d.d_tag(endian) == object::elf::DT_SONAME {
                let off = u32::try_from(d.d_val(endian)).ok()?;
                return strings.get(off).ok().map(|b| String::from_utf8_lossy(b).into_owned());
            }
        }
    }
    None
}
