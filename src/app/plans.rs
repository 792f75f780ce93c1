//! The tracer's plans for a trace: `--syscall` (the `syscall()` wrapper) and `--leaks` (it, and libc's own mapping
//! functions; with `--fast` what goes through the trampoline and its ring).

use crate::app::trace::open_mem;
use crate::live::plan::{Plan, Wrapper};
use crate::live::resolve;
use crate::live::tracer::{FastFunction, Numbers, Probe, SiteSpec};
use crate::model::consts::SYS_MUNMAP;
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
        what: format!("breakpoint on syscall() at {:#x}", site.addr),
        fast: fast.then_some((wanted, site)),
        ring: Vec::new(),
        fast_functions: Vec::new(),
        depths: HashMap::new(),
        watched: crate::live::mappaths::Watched::default(),
    }
}

/// `--leaks`: the plan of `--syscall` plus probes on libc's own mapping functions, so that mappings made through
/// `mmap()` (also by a hook library that redirected GOT slots and calls the real one) are caught too. With
/// `--fast`, munmap calls go to the trampoline's ring, without a stop: the leak model needs only their range and
/// result (unless `--syscall` named munmap: its events then keep their stacks).
pub fn leak_plan(pid: Tid, numbers: HashSet<u64>, asked: &HashSet<u64>, site: Wrapper, fast: bool) -> Result<Plan> {
    let at = site.addr;
    let mut plan = syscall_plan(numbers, site, fast);
    if fast && !asked.contains(&SYS_MUNMAP) {
        plan.ring.push(SYS_MUNMAP);
    }
    plan.watched.paths.push(format!("syscall() at {at:#x} (mmap, munmap, mremap)"));
    let mem = open_mem(pid)?;
    let maps = resolve::read_maps(pid)?;
    let libc = resolve::find_libc(&maps).ok_or_else(|| anyhow!("process {pid} has no libc mapped"))?;
    let module = resolve::read_module(pid, &libc, Some(&mem))?;
    let specs = crate::live::mappaths::function_specs(&module, &mem, &mut plan.watched);
    if fast {
        // libc's munmap and mmap get the trampoline too (munmap to the ring); mremap, and any that lacks the shape,
        // keeps its int3.
        for s in &specs {
            let Some(label) = s.probes.first().and_then(|p| p.label.clone()) else { continue };
            let name = label.rsplit(':').next().unwrap_or("");
            let nr = match name {
                "munmap" => SYS_MUNMAP,
                "mmap" | "mmap64" => crate::model::consts::SYS_MMAP,
                _ => continue,
            };
            let ring = nr == SYS_MUNMAP && !asked.contains(&SYS_MUNMAP);
            // The whole function: `plan_fixed` requires its one `syscall` and every branch inside it.
            let Some(size) = module.find_symbol(name).map(|(_, size)| size.clamp(16, 1024)) else { continue };
            let Some(code) = module.file_bytes(s.addr, size).map(<[u8]>::to_vec) else { continue };
            plan.fast_functions.push(FastFunction { addr: s.addr, code, label, nr, ring });
        }
    }
    if !specs.is_empty() {
        let names: Vec<String> =
            specs.iter().filter_map(|s| s.probes[0].label.as_deref().map(str::to_string)).collect();
        plan.what = format!("{}; function probes on {}", plan.what, names.join(", "));
    }
    plan.specs.extend(specs);
    Ok(plan)
}
