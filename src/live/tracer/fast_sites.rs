//! The places `--fast` is asked to patch, and their plans made into the trampoline's sites and the tracer's patches
//! (see `fast.rs`).

use super::Tracer;
use super::fast::{Patch, Planned};
use crate::x86::alloc::AllocFn;
use crate::x86::breakpoints;
use crate::x86::trampoline::{self, PatchPlan};
use std::sync::Arc;

/// A libc function that `--fast` patches too (`--leaks`: munmap to the ring, mmap with one stop, as for
/// `syscall()`), where it has the shape: its `mov $nr,%eax` just before `syscall`.
#[derive(Debug, Clone)]
pub struct FastFunction {
    pub addr: u64,
    /// Its bytes, from the file: the whole function (its symbol's size).
    pub code: Vec<u8>,
    pub label: Arc<str>,
    /// The system call it makes (its code must say the same).
    pub nr: u64,
    /// Its calls go to the ring (their stacks are not needed).
    pub ring: bool,
    /// An allocation function of `--malloc` (patched at its entry; `nr` and `ring` are not used), and the range of
    /// its allocator's own module when calls from there are the allocator's internal ones (not libc's).
    pub alloc: Option<(crate::x86::alloc::AllocFn, Option<(u64, u64)>)>,
}

/// What `--fast` is asked to install: the wanted `numbers` on the `syscall()` wrapper at `entry` (its file bytes
/// `code`), those also in `ring` to the ring, and libc `functions` patched too.
pub struct FastRequest<'a> {
    pub numbers: &'a [u64],
    pub ring: &'a [u64],
    pub entry: u64,
    pub code: &'a [u8],
    pub functions: &'a [FastFunction],
    /// `--malloc-every`: the mean bytes between sampled allocations (the allocation functions among `functions`).
    pub malloc_every: u64,
}

impl Tracer<'_> {
    /// The patched places, the wrapper's (`wrapper` at `entry`) first, and their patches, in the same order. The
    /// allocation functions of `--malloc` need free among them (a sampled block's free is found there) and
    /// rdfsbase (the threads' counts): without either, they are left out and the summary says so.
    pub(super) fn sites(
        &mut self,
        wrapper: Option<(trampoline::Site, u64)>,
        fixed: &[(FastFunction, PatchPlan, Planned)],
        fsgsbase: bool,
    ) -> (Vec<trampoline::Site>, Vec<Patch>) {
        use trampoline::{Kind, Site};
        let mut patches = Vec::new();
        let mut sites = Vec::new();
        if let Some((wrapper, entry)) = wrapper {
            patches.push(Patch { plan: wrapper.plan.clone(), jump: Vec::new(), entry, frame0: entry, label: None });
            sites.push(wrapper);
        }
        let first = sites.len();
        // glibc's realloc of a null pointer jumps to malloc's entry, whose stub counts it: not counted twice.
        let malloc = fixed
            .iter()
            .find(|(f, _, k)| matches!(k, Err(((AllocFn::Malloc, _), _))) && f.label.ends_with(":malloc"))
            .map(|(f, ..)| f.addr);
        let free_site = fixed.iter().position(|(_, _, k)| matches!(k, Err(((AllocFn::Free, _), _)))).map(|i| i + first);
        let allocs = fixed.iter().any(|(_, _, k)| k.is_err());
        if allocs && (free_site.is_none() || !fsgsbase) {
            self.summary.warnings.push(if fsgsbase {
                "--malloc: free could not be patched, so no allocation is sampled".to_string()
            } else {
                "--malloc needs the rdfsbase instruction (Linux 5.9 and a CPU that has it): no allocation is sampled"
                    .to_string()
            });
        }
        for (f, p, planned) in fixed {
            let mut frame0 = f.addr;
            let kind = match planned {
                // A ring's slot holds the word at rsp as the return address: only where nothing was pushed.
                Ok((nr, 0)) => Kind::Fixed { nr: *nr, ring: f.ring && fsgsbase },
                Ok((nr, _)) => {
                    frame0 = p.syscall_at + 2;
                    Kind::Fixed { nr: *nr, ring: false }
                }
                Err((a, moved)) => match free_site.filter(|_| fsgsbase) {
                    Some(free_site) => {
                        let null_to_malloc = a.0 == AllocFn::Realloc && malloc.is_some_and(|m| jumps_to(f, m));
                        Kind::Alloc { f: a.0, moved: moved.clone(), free_site, internal: a.1, null_to_malloc }
                    }
                    None => continue,
                },
            };
            sites.push(Site { plan: p.clone(), kind });
            let label = Some(f.label.clone());
            patches.push(Patch { plan: p.clone(), jump: Vec::new(), entry: f.addr, frame0, label });
        }
        (sites, patches)
    }
}

/// Whether function `f`'s code jumps (not calls) to `to`: a tail call, which keeps its caller's return address.
fn jumps_to(f: &FastFunction, to: u64) -> bool {
    let Some(cs) = breakpoints::disassembler() else { return false };
    let Ok(insns) = cs.disasm_all(&f.code, f.addr) else { return false };
    insns.iter().any(|i| {
        let jump = i.mnemonic().is_some_and(|m| m.starts_with('j'));
        jump && trampoline::branch_target(i.bytes(), i.address()) == Some(to)
    })
}
