//! The tracer's plans for a trace: `--syscall` (the `syscall()` wrapper and libc's own entries of the named calls,
//! or the wrapper alone) and `--leaks` (it, and libc's own mapping functions); with `--fast` what goes through the
//! trampoline and its ring.

use crate::app::trace::open_mem;
use crate::live::plan::{Plan, Wrapper};
use crate::live::resolve;
use crate::live::tracer::{FastFunction, Numbers, Probe, SiteSpec};
use crate::model::consts::{SYS_MADVISE, SYS_MUNMAP};
use crate::os::Tid;
use anyhow::{Result, anyhow};
use std::collections::{HashMap, HashSet};

/// The plan of `--syscall`: one breakpoint (or the `--fast` filter) on libc's `syscall()`.
pub fn syscall_plan(numbers: HashSet<u64>, site: Wrapper, fast: bool) -> Plan {
    let mut wanted: Vec<u64> = numbers.iter().copied().collect();
    wanted.sort_unstable();
    Plan {
        specs: vec![SiteSpec {
            addr: site.addr,
            code: site.code.clone(),
            wrapper: true,
            probes: vec![Probe::new(None, None, Box::new(Numbers(numbers)))],
        }],
        what: format!("syscall() at {:#x}", site.addr),
        fast: fast.then_some((wanted, site)),
        ring: Vec::new(),
        fast_functions: Vec::new(),
        depths: HashMap::new(),
        watched: crate::live::mappaths::Watched::default(),
        malloc_every: 0,
    }
}

/// `--leaks`: the plan of `--syscall` plus probes on libc's own mapping functions, so that mappings made through
/// `mmap()` (also by a hook library that redirected GOT slots and calls the real one) are caught too. With
/// `--fast`, munmap and madvise calls go to the trampoline's ring, without a stop: the leak model needs only their
/// range and result (unless `--syscall` named them: their events then keep their stacks).
pub fn leak_plan(pid: Tid, numbers: HashSet<u64>, asked: &HashSet<u64>, site: Wrapper, fast: bool) -> Result<Plan> {
    let at = site.addr;
    let mut plan = syscall_plan(numbers, site, fast);
    let ring: Vec<u64> = [SYS_MUNMAP, SYS_MADVISE].into_iter().filter(|nr| fast && !asked.contains(nr)).collect();
    plan.ring.extend(&ring);
    plan.watched.paths.push(format!("syscall() at {at:#x} (mmap, munmap, mremap, brk, mprotect, madvise)"));
    let all = |nr: u64| crate::model::consts::MAPPING_SYSCALLS.contains(&nr);
    add_functions(pid, &mut plan, &all, fast, &ring)?;
    Ok(plan)
}

/// `--malloc`: the allocation functions (malloc, calloc, realloc, free and the aligned ones) of the allocator the
/// process's calls reach, patched at their entries by `--fast`'s trampoline with the sampler (one sample per
/// `every` bytes on average): a preloaded or linked jemalloc, tcmalloc or mimalloc (a module whose name says
/// malloc and that defines `malloc` and `free`), else libc's. A function whose entry was patched in memory by
/// someone else is left out (said in the report), and without free none is sampled.
pub fn add_allocators(pid: Tid, plan: &mut Plan, every: u64) -> Result<()> {
    use crate::x86::alloc::AllocFn;
    let mem = open_mem(pid)?;
    let maps = resolve::read_maps(pid)?;
    let libc = resolve::find_syscall_module(pid, &maps, Some(&mem))
        .ok_or_else(|| anyhow!("process {pid} has no libc mapped and no syscall() of its own"))?;
    let allocator = crate::model::modules::group_modules(&maps).into_iter().find_map(|m| {
        let name = crate::model::modules::file_name(&m.path);
        if crate::model::modules::is_libc(&m.path) || !name.contains("malloc") {
            return None;
        }
        let module = resolve::read_module(pid, &m, Some(&mem)).ok()?;
        (module.find_symbol("malloc").is_some() && module.find_symbol("free").is_some()).then_some(module)
    });
    // Calls from a dedicated allocator's own code to its entries are its internal ones (tcmalloc's posix_memalign
    // calls its memalign): skipped. libc's own calls are the program's (strdup, fopen), and glibc's entries do not
    // call each other, but for reallocarray, which calls realloc: it is left to realloc.
    let dedicated = allocator.is_some();
    let (module, internal) = match allocator {
        Some(m) => {
            let range = (m.map.start, m.map.end);
            (m, Some(range))
        }
        None => {
            let m = resolve::read_module(pid, &libc, Some(&mem))?;
            let span = entries_without_cfi(&m);
            (m, span)
        }
    };
    let lib = crate::model::modules::file_name(&module.map.path).to_string();
    let mut names = Vec::new();
    // A dedicated allocator's C++ and own entries too (libc has none of them: libstdc++'s `operator new` calls
    // malloc, which is sampled).
    let more = AllocFn::MORE.iter().filter(|_| dedicated).map(|&(n, f)| (n, f));
    let elf = crate::hooks::elf::ElfInfo::parse(&module.data).ok();
    for (name, f) in AllocFn::NAMES.iter().copied().zip(AllocFn::ALL).chain(more) {
        if internal.is_none() && f == AllocFn::Reallocarray {
            continue;
        }
        let Some((addr, size)) = module.find_symbol(name) else { continue };
        // memalign and aligned_alloc are one function in glibc, free and `operator delete` in tcmalloc and
        // mimalloc: patched once.
        if plan.fast_functions.iter().any(|f| f.addr == addr) {
            continue;
        }
        // The whole function: no branch of it may land in the moved instructions.
        let Some(code) = module.file_bytes(addr, size.clamp(16, 8192)).map(<[u8]>::to_vec) else { continue };
        // An entry that only jumps to another that is patched is caught there: patched too, each call would count
        // twice. (Calls between entries are skipped by the stubs: the caller is in `internal`.)
        if elf.as_ref().is_some_and(|e| jumps_to_entry((&module, e), addr, &code)) {
            continue;
        }
        let mut now = vec![0u8; code.len()];
        if mem.read_exact(addr, &mut now).is_err() || now[..16] != code[..16] {
            plan.watched.skipped.push(format!("{lib}:{name} (its entry was patched in memory: not sampled)"));
            continue;
        }
        let label: std::sync::Arc<str> = format!("{lib}:{name}").into();
        plan.fast_functions.push(FastFunction { addr, code, label, nr: 0, ring: false, alloc: Some((f, internal)) });
        names.push(name);
    }
    plan.malloc_every = every;
    // C++'s entries by what they are, not their mangled names.
    let cxx = names.iter().filter(|n| n.starts_with("_Z")).count();
    let mut shown: Vec<String> = names.iter().filter(|n| !n.starts_with("_Z")).map(|n| n.to_string()).collect();
    if cxx > 0 {
        shown.push(format!("operator new and delete ({cxx} entries)"));
    }
    let shown = shown.join(", ");
    plan.watched.paths.push(format!("{lib}: {shown} (sampled, one per {every} bytes)"));
    plan.what =
        format!("{}; sampling {shown} in {lib} every {} on average", plan.what, crate::report::leaks::size(every));
    Ok(())
}

/// Whether the allocation entry at `addr` (its code `code`) starts with a jump to another allocation entry of
/// `module`: to the entry itself (a tail call of an alias) or to one of its PLT stubs whose GOT slot imports an
/// allocation entry's name (jemalloc's `delete` jumps to `free@plt`, musl's `memalign` to `aligned_alloc@plt`).
fn jumps_to_entry(
    (module, elf): (&crate::model::modules::Module, &crate::hooks::elf::ElfInfo),
    addr: u64,
    code: &[u8],
) -> bool {
    let allocation = |name: &str| crate::x86::alloc::AllocFn::of(name).is_some();
    let Some(target) = crate::x86::trampoline::branch_target(code, addr).filter(|_| code.first() == Some(&0xe9)) else {
        return false;
    };
    let stated = target.wrapping_sub(module.bias);
    if let Some((name, 0)) = elf.name_of(stated, "") {
        return allocation(name);
    }
    let slot = || {
        // The stub's `jmp *slot(%rip)` (after an endbr64 or a bnd prefix where the stub has one).
        let stub = module.file_bytes(target, 16)?;
        let at = stub.windows(2).position(|w| w == [0xff, 0x25])?;
        let disp = i32::from_le_bytes(stub.get(at + 2..at + 6)?.try_into().ok()?);
        Some(stated.wrapping_add(at as u64 + 6).wrapping_add(disp as i64 as u64))
    };
    elf.is_plt(stated) && slot().is_some_and(|slot| elf.slots.iter().any(|s| s.addr == slot && allocation(&s.symbol)))
}

/// Where libc's allocation entries have no CFI (musl's, in its libc or linked into a static program), the span of
/// their code: a sample must be taken at the entry the program called (frame 0 at an entry unwinds from the top
/// of the stack; from inside musl's `calloc` nothing unwinds), so calls between them (musl's `calloc` calls
/// `malloc`, its `posix_memalign` `aligned_alloc`) are skipped as a dedicated allocator's are. `None` where CFI
/// covers them (glibc: its entries do not call each other, and libc's other calls, strdup's malloc, are the
/// program's).
fn entries_without_cfi(module: &crate::model::modules::Module) -> Option<(u64, u64)> {
    let (malloc, _) = module.find_symbol("malloc")?;
    let cfi = crate::analysis::unwind::ModuleCfi::parse(module.data.clone(), None).ok()?;
    if cfi.covers(malloc.wrapping_sub(module.bias)) {
        return None;
    }
    let found = crate::x86::alloc::AllocFn::NAMES.iter().filter_map(|n| module.find_symbol(n));
    let (lo, hi) = found.fold((u64::MAX, 0), |(lo, hi), (a, size)| (lo.min(a), hi.max(a + size.max(1))));
    (lo < hi).then_some((lo, hi))
}

/// The plan of `--syscall LIST` as a user of strace means it: the calls however they are made, through
/// `syscall()` and through libc's own entry of each that has one (mmap, mmap64, munmap, mremap). A call the
/// function makes through `syscall()` would be seen twice: the analysis reports it once. `wrapper_only`
/// (`--only-syscall-wrapper`): `syscall()` alone.
pub fn trace_plan(pid: Tid, numbers: HashSet<u64>, site: Wrapper, fast: bool, wrapper_only: bool) -> Result<Plan> {
    let at = site.addr;
    let names: Vec<&str> = {
        let mut n: Vec<u64> = numbers.iter().copied().collect();
        n.sort_unstable();
        n.iter().map(|&nr| crate::model::syscalls::name(nr).unwrap_or("?")).collect()
    };
    let asked = numbers.clone();
    let mut plan = syscall_plan(numbers, site, fast);
    plan.watched.paths.push(format!("syscall() at {at:#x} ({})", names.join(", ")));
    if wrapper_only {
        plan.what = format!("{} only (--only-syscall-wrapper)", plan.what);
        return Ok(plan);
    }
    add_functions(pid, &mut plan, &|nr| asked.contains(&nr), fast, &[])?;
    Ok(plan)
}

/// Adds probes on libc's own functions making the syscalls `wanted` to `plan` (and with `fast`, the trampoline on
/// those with its shape; `ring`: the syscalls whose functions' calls go to the ring, without a stop).
fn add_functions(pid: Tid, plan: &mut Plan, wanted: &dyn Fn(u64) -> bool, fast: bool, ring: &[u64]) -> Result<()> {
    let mem = open_mem(pid)?;
    let maps = resolve::read_maps(pid)?;
    let libc = resolve::find_syscall_module(pid, &maps, Some(&mem))
        .ok_or_else(|| anyhow!("process {pid} has no libc mapped and no syscall() of its own"))?;
    let module = resolve::read_module(pid, &libc, Some(&mem))?;
    let specs = crate::live::mappaths::function_specs(&module, &mem, wanted, &mut plan.watched);
    if fast {
        // libc's functions get the trampoline too (munmap and madvise to the ring); mremap, and any that lacks the shape,
        // keeps its int3.
        for s in &specs {
            let Some(label) = s.probes.first().and_then(|p| p.label.clone()) else { continue };
            let name = label.rsplit(':').next().unwrap_or("");
            let nr = match name {
                "munmap" => SYS_MUNMAP,
                "mmap" | "mmap64" => crate::model::consts::SYS_MMAP,
                "mprotect" => crate::model::consts::SYS_MPROTECT,
                "madvise" => SYS_MADVISE,
                _ => continue,
            };
            let ring = ring.contains(&nr);
            // The whole function: `plan_fixed` requires its one `syscall` and every branch inside it.
            let Some(size) = module.find_symbol(name).map(|(_, size)| size.clamp(16, 1024)) else { continue };
            let Some(code) = module.file_bytes(s.addr, size).map(<[u8]>::to_vec) else { continue };
            plan.fast_functions.push(FastFunction { addr: s.addr, code, label, nr, ring, alloc: None });
        }
    }
    if !specs.is_empty() {
        let names: Vec<String> =
            specs.iter().filter_map(|s| s.probes[0].label.as_deref().map(str::to_string)).collect();
        plan.what = format!("{}; function probes on {}", plan.what, names.join(", "));
    }
    plan.specs.extend(specs);
    Ok(())
}
