//! `--fast`: the in-process filter. With every thread stopped, the target is made to map one executable page in
//! the nearest free gap of its address space within jump range of libc's wrapper (found from its maps; an mmap
//! with `MAP_FIXED_NOREPLACE` run by a stopped thread on libc's own `syscall` instruction), the trampoline is
//! written there, and one whole instruction of the wrapper is replaced by a jump to it. Non-matching calls then
//! never stop; a matching call stops once, at the trampoline's int3, with rax already the result.

use super::Tracer;
use super::error::Error;
use super::kernel::Mem;
use crate::live::guardian::Msg;
use crate::model::consts::MAP_FIXED_NOREPLACE;
use crate::model::event::{Event, StackCapture};
use crate::model::regs::Regs;
use crate::model::window::Window;
use crate::os::Tid;
use crate::x86::breakpoints;
use crate::x86::trampoline::{self, PatchPlan};
use std::collections::HashMap;
use std::time::Instant;

/// The live patch.
pub(super) struct Fast {
    plan: PatchPlan,
    /// The jump written over `plan.at`.
    jump: Vec<u8>,
    /// The wrapper's entry: frame 0 of a captured stack.
    entry: u64,
    /// Each int3 in the page and the syscall number it reports.
    int3s: HashMap<u64, u64>,
    page: u64,
}

impl Tracer<'_> {
    /// `--fast` where it can be installed; otherwise (said on stderr) the int3 sites given at construction.
    pub fn arm_preferring_fast(&mut self, numbers: &[u64], entry: u64, code: &[u8]) -> Result<(), Error> {
        let sites = std::mem::take(&mut self.sites);
        match self.arm_fast(numbers, entry, code) {
            Ok(()) => Ok(()),
            Err(why) => {
                eprintln!("syscatch: --fast is not possible here ({why}); using a breakpoint instead");
                self.sites = sites;
                self.arm()
            }
        }
    }

    /// Installs the in-process filter for `numbers` on the wrapper at `entry` (file bytes `code`), mapping the page
    /// in the nearest free gap of the address space within jump range. On any refusal nothing is left changed and
    /// the caller arms int3s.
    pub fn arm_fast(&mut self, numbers: &[u64], entry: u64, code: &[u8]) -> Result<(), Error> {
        let cs = breakpoints::disassembler().ok_or(Error::Disassembler)?;
        let w = breakpoints::plan_wrapper(&cs, code, entry).ok_or(Error::PrefixNotEmulated)?;
        let targets: Vec<u64> = breakpoints::decode(&cs, code, entry, 32)
            .iter()
            .filter_map(|d| trampoline::branch_target(code.get((d.addr - entry) as usize..)?, d.addr))
            .collect();
        let plan = trampoline::plan(entry, code, &w.prefix, w.syscall_at, &targets)?;
        let mut in_mem = vec![0u8; code.len()];
        self.mem.read_exact(entry, &mut in_mem).map_err(Error::ReadWrapper)?;
        if in_mem != code {
            return Err(Error::WrapperChanged);
        }
        self.realtime(|t| {
            let stuck = t.hold_all(None);
            // Rewriting the wrapper needs every thread stopped: one that cannot stop might return into it.
            let result = match stuck.first() {
                Some((tid, why)) => Err(Error::CannotStop { tid: *tid, why: why.clone() }),
                None => t.install(numbers, entry, plan),
            };
            t.release_all();
            result
        })
    }

    fn install(&mut self, numbers: &[u64], entry: u64, plan: PatchPlan) -> Result<(), Error> {
        let tid = self.injectable(true).ok_or(Error::NoThreadForPage)?;
        for (&t, _) in self.threads.iter() {
            let r = self.k.get_regs(t).map_err(|error| Error::Registers { tid: t, error })?;
            if r.ip() > plan.at && r.ip() < plan.at + plan.orig.len() as u64 {
                return Err(Error::InsidePatch { tid: t });
            }
        }
        // All threads are held: the maps cannot change under us but for other processes writing ours (none do).
        let pid = self.cfg.pid;
        let maps = self.k.read_maps(pid).map_err(|error| Error::Maps { pid, error })?;
        let maps = crate::model::maps::parse_maps(&maps);
        let mut page = None;
        let mut tried = 0;
        for hint in trampoline::page_candidates(&maps, &plan).into_iter().take(16) {
            tried += 1;
            let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64 | MAP_FIXED_NOREPLACE;
            let prot = (libc::PROT_READ | libc::PROT_EXEC) as u64;
            let got = self.inject_syscall(
                tid,
                plan.syscall_at,
                libc::SYS_mmap as u64,
                [hint, 4096, prot, flags, u64::MAX, 0],
            )?;
            if got == hint {
                page = Some(got);
                break;
            }
            if (got as i64) >= 0 {
                // A kernel before 4.17 ignores MAP_FIXED_NOREPLACE: not where we asked; give it back.
                self.inject_syscall(tid, plan.syscall_at, libc::SYS_munmap as u64, [got, 4096, 0, 0, 0, 0])?;
            }
            // EEXIST (taken since the maps were read) or any other refusal: the next gap.
        }
        let page = page.ok_or(match tried {
            0 => Error::NoGap,
            tried => Error::PageRefused { tried },
        })?;
        let (code, int3s) = trampoline::assemble(&plan, page, numbers).ok_or(Error::TrampolineTooBig)?;
        let jump = trampoline::patch_bytes(&plan, page).ok_or(Error::OutOfRange)?;
        self.install_pad(Some(plan.syscall_at));
        for &a in int3s.keys() {
            self.pad_list(crate::x86::trappad::entry(a, true));
            self.tell(Msg::Nop(a));
        }
        self.mem.write_all(page, &code).map_err(Error::WriteTrampoline)?;
        self.mem.write_all(plan.at, &jump).map_err(Error::WritePatch)?;
        self.fast = Some(Fast { plan, jump, entry, int3s, page });
        self.armed = true;
        self.start = Instant::now();
        Ok(())
    }

    /// A matching call stopped at the trampoline's int3: its event (rax is the result; the arguments are where
    /// the wrapper put them for the kernel: rdi, rsi, rdx, r10, r8, r9 survive `syscall`). `None`: not ours.
    pub(super) fn fast_event(&mut self, tid: Tid, regs: &Regs) -> Option<Event> {
        let fast = self.fast.as_ref()?;
        let &nr = fast.int3s.get(&regs.ip().wrapping_sub(1))?;
        let entry = fast.entry;
        self.summary.hits += 1;
        self.summary.matching += 1;
        let g = &regs.0;
        // The wrapper pushes nothing before `syscall`: the stack is as at its entry, so frame 0 is the wrapper.
        let mut at_entry = *regs;
        at_entry.0.rip = entry;
        let stack = if self.cfg.stack_bytes > 0 { self.read_stack(tid, regs.sp()) } else { Window::default() };
        let asked = self.cfg.stack_bytes;
        Some(Event {
            time: self.start.elapsed().as_secs_f64(),
            tid,
            probe: None,
            func: None,
            nr,
            args: [g.rdi, g.rsi, g.rdx, g.r10, g.r8, g.r9],
            regs: Vec::new(),
            ret: Some(g.rax),
            ret_missing: None,
            capture: if stack.is_empty() {
                None
            } else {
                let python = self.cfg.python.as_mut().map(|p| p.read_frames(tid, regs, &stack)).unwrap_or_default();
                Some(StackCapture { regs: at_entry, stack, asked, python })
            },
            also: Vec::new(),
        })
    }

    /// Whether `addr` is one of the trampoline's int3s (never rewound: the page stays valid after detach).
    pub(super) fn fast_int3(&self, addr: u64) -> bool {
        self.fast.as_ref().is_some_and(|f| f.int3s.contains_key(&addr))
    }

    /// Puts the wrapper's bytes back (only if our jump is still there) and turns the page's int3s into nops, so a
    /// thread still inside the page, or returning into it from a signal handler, runs on and jumps back.
    pub(super) fn unpatch(&mut self) {
        let Some(fast) = self.fast.take() else { return };
        let mut now = vec![0u8; fast.jump.len()];
        match self.mem.read_exact(fast.plan.at, &mut now) {
            Ok(()) if now == fast.jump => {
                if let Err(e) = self.mem.write_all(fast.plan.at, &fast.plan.orig) {
                    self.summary.warnings.push(format!("could not restore the wrapper at {:#x}: {e}", fast.plan.at));
                }
            }
            Ok(()) => self.summary.warnings.push(format!(
                "the patched bytes at {:#x} were changed by someone else; left as they are",
                fast.plan.at
            )),
            Err(_) => {}
        }
        for &a in fast.int3s.keys() {
            let _ = self.mem.write_all(a, &[0x90]);
        }
        self.summary.warnings.push(format!(
            "--fast left its trampoline page mapped at {:#x} (4 KiB, harmless: a thread may still return into it)",
            fast.page
        ));
    }

    /// The original bytes a fork child must get back, and nops for the page's int3s: a child forked by a
    /// matching `syscall(SYS_fork)` returns from the kernel inside the page, just before one of them.
    pub(super) fn fast_restore_in(&self, child: &dyn Mem) {
        if let Some(f) = &self.fast {
            let _ = child.write_all(f.plan.at, &f.plan.orig);
            for &a in f.int3s.keys() {
                let _ = child.write_all(a, &[0x90]);
            }
        }
    }
}
