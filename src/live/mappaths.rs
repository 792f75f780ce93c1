//! Every path to a mapping: `--leaks` watches libc's `syscall()` wrapper (raw `syscall(SYS_mmap, ...)`) and also
//! libc's own `mmap`, `mmap64`, `munmap` and `mremap` functions (function probes, with their return values). A
//! library that redirected GOT slots to its own hooks still reaches one of these when it does the real work. An
//! entry that a hook library patched in memory is not probed (planting there would trust bytes that are not
//! libc's): its calls are caught where the hook makes the real call. What was watched and what was not is kept
//! for the report, so unexplained growth comes with the paths that were looked at.

use crate::live::tracer::{Condition, Probe, SiteSpec};
use crate::model::modules::{self, Module};
use crate::model::regs::Regs;
use crate::os::mem::ProcMem;
use std::sync::Arc;

pub use crate::model::watch::{FUNCTIONS, Watched};

/// Every call of the function counts.
struct Always;

impl Condition for Always {
    fn matches(&self, _: &Regs, _: &dyn Fn(usize) -> u64) -> bool {
        true
    }

    fn on_call(&self, _: u64, _: &[u64; 6]) -> Option<bool> {
        Some(true)
    }
}

/// Function-probe sites on libc's mapping functions that make one of the syscalls `wanted`, whose entries in memory
/// are still the file's.
pub fn function_specs(
    libc: &Module,
    mem: &ProcMem,
    wanted: &dyn Fn(u64) -> bool,
    watched: &mut Watched,
) -> Vec<SiteSpec> {
    let lib = modules::file_name(&libc.map.path).to_string();
    let mut specs: Vec<SiteSpec> = Vec::new();
    for (func, nr) in FUNCTIONS {
        if !crate::model::syscalls::parse(nr).is_some_and(wanted) {
            continue;
        }
        let Some((addr, _)) = libc.find_symbol(func) else { continue };
        if specs.iter().any(|s| s.addr == addr) {
            // mmap64 is an alias of mmap in 64-bit glibc: one site.
            continue;
        }
        let Some(code) = libc.file_bytes(addr, 16).or_else(|| libc.file_bytes(addr, 1)) else {
            watched.skipped.push(format!("{lib}:{func} (outside the file's segments)"));
            continue;
        };
        let mut now = vec![0u8; code.len()];
        if mem.read_exact(addr, &mut now).is_err() {
            watched.skipped.push(format!("{lib}:{func} (its entry could not be read)"));
            continue;
        }
        if now != code {
            watched.skipped.push(format!(
                "{lib}:{func} (its entry was patched in memory by a hook: calls are caught where the hook makes \
                 the real call, if through syscall() or another watched function)"
            ));
            continue;
        }
        let label: Arc<str> = format!("{lib}:{func}").into();
        let probe = Probe::new(None, Some(label.clone()), Box::new(Always));
        watched.paths.push(format!("{label} at {addr:#x}"));
        specs.push(SiteSpec { addr, code: code.to_vec(), wrapper: false, probes: vec![probe] });
    }
    specs
}
