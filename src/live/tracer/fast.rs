//! `--fast`: the in-process filter. With every thread stopped, the target is made to map an executable page in
//! the nearest free gap of its address space within jump range of libc's wrapper (found from its maps; an mmap
//! with `MAP_FIXED_NOREPLACE` run by a stopped thread on libc's own `syscall` instruction), the trampoline is
//! written there, and one whole instruction of the wrapper is replaced by a jump to it. Non-matching calls then
//! never stop; a matching call stops once, at the trampoline's int3, with rax already the result. Its registers
//! are also in a record below its stack pointer (`trampoline::Block`): at a thread's next stop after an event,
//! the record and the stack are read in one copy at the same stack pointer, and the event needs no
//! `PTRACE_GETREGS` when the record proves to be this stop's (the stop a call site repeating in a loop makes).
//!
//! Calls whose stack nobody needs (`ring`: munmap under `--leaks`) never stop: the trampoline writes them into a
//! ring in its pages (`trampoline::Slot`), which the tracer reads at each turn of its loop. Every pass through the
//! trampoline, ring or stop, takes its number from one counter, and events go to the sink in that order: a stop
//! event waits until every call numbered before it was read (`ring.rs`).

use super::Tracer;
use super::error::Error;
use super::fast_sites::{FastFunction, FastRequest};
use super::kernel::Mem;
use super::ring::Ring;
use crate::live::guardian::Msg;
use crate::live::sigstack;
use crate::model::consts::MAP_FIXED_NOREPLACE;
use crate::model::event::{Event, StackCapture};
use crate::model::regs::Regs;
use crate::model::window::Window;
use crate::os::Tid;
use crate::x86::alloc::{AllocFn, Moved};
use crate::x86::breakpoints;
use crate::x86::trampoline::{self, PatchPlan};

/// How a libc function is patched: the system call it makes, or (`--malloc`) an allocation function's entry.
/// (A system call's number and the bytes the function pushed before it.)
pub(super) type Planned = Result<(u64, u64), ((AllocFn, Option<(u64, u64)>), Vec<Moved>)>;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// What the tracer knows of one thread's passes through the trampoline (see [`trampoline::Block`]).
#[derive(Default)]
pub(super) struct Passes {
    /// The stack pointer of the thread's last event and how many bytes of stack could be read there, kept only
    /// while nothing else has stopped the thread since (any stop takes it: a signal handler may have run): its
    /// next stop is most likely the same call site's int3, whose record and stack are then read in one copy,
    /// without `PTRACE_GETREGS`, and no further than the last time (a copy asked to go past the end of the stack
    /// costs more than one that ends there).
    pub guess: Option<(u64, usize)>,
    /// The newest sequence number seen from this thread: a record is this stop's only if newer.
    newest: u64,
    /// The sequence numbers of the passes last reported. A pass can be reported at a stop before its int3 (a
    /// SIGTRAP sent to the thread right after the record was written) and meet its int3 after other passes
    /// were reported, from a signal handler that ran in between.
    reported: [u64; 8],
    /// The thread's registers at its last `PTRACE_GETREGS`, for what a record does not hold: fs and gs base,
    /// the segment selectors, the flags other than the arithmetic ones. A program that changes one of those
    /// between two calls (wrfsbase, `std`) gets the old value in the second event's registers.
    regs: Option<Regs>,
}

/// A stop at one of the trampoline's int3s.
pub(super) enum FastStop {
    /// The event and its sequence number.
    Event(Box<Event>, u64),
    /// The pass was reported already, at a stop just before or after this int3's: one of them is a SIGTRAP sent
    /// to the thread (see [`Tracer::repeated_sigtrap`]).
    Reported,
}

impl Passes {
    fn report(&mut self, seq: u64) {
        self.newest = self.newest.max(seq);
        self.reported.rotate_right(1);
        self.reported[0] = seq;
    }
}

/// The live patch.
pub(super) struct Fast {
    /// The patched places: the wrapper first, then libc's functions.
    pub(super) patches: Vec<Patch>,
    /// Each int3 in the page: the syscall number it reports, and its patch.
    pub(super) int3s: HashMap<u64, (u64, usize)>,
    /// The int3s where a full ring's calls stop: only their record is read, no stack.
    pub(super) full_int3s: std::collections::HashSet<u64>,
    /// The int3s of match paths that ask the known-stack matcher first.
    pub(super) known_int3s: std::collections::HashSet<u64>,
    /// The known stacks' table, when the matcher is in the page.
    pub(super) known: Option<super::known::Known>,
    pub(super) page: u64,
    /// The target catches or ignores SIGTRAP (read before the trap pad took it): a SIGTRAP sent to a thread just
    /// as it reaches our int3 merges with the int3's (one pending instance), so each stop's siginfo is read and
    /// a sent one passed on. A target that leaves SIGTRAP at its default action would be killed by one.
    pub(super) sigtrap_handled: bool,
    /// The records hold the writing thread's fs base (`rdfsbase`): without it, no stop is read from a record.
    pub(super) fsgsbase: bool,
    /// The ring, when some wanted numbers go there.
    pub(super) ring: Option<Ring>,
    /// The ring's pages (counter, tail, slots) mapped into syscatch too: read without a system call, and still
    /// after the target exited or exec'd. `None`: read through the target's memory.
    pub(super) shared: Option<Box<dyn Mem>>,
    /// The bytes that turn `--malloc`'s sampling off, made nops as the int3s are.
    pub(super) flags: Vec<u64>,
    /// Bytes mapped from `page` (code, counter, ring, tables).
    pub(super) len: u64,
}

/// One patched place.
pub(super) struct Patch {
    pub(super) plan: PatchPlan,
    /// The jump written over `plan.at`.
    pub(super) jump: Vec<u8>,
    /// The entry of the patched function.
    pub(super) entry: u64,
    /// Frame 0 of a captured stack: the entry where the function pushed nothing before its `syscall` (the stack
    /// is the one at the entry), else the instruction after that `syscall` (its CFI unwinds what was pushed).
    pub(super) frame0: u64,
    /// A libc function's label (`libc.so.6:munmap`); `None` for `syscall()`.
    pub(super) label: Option<Arc<str>>,
}

impl Tracer<'_> {
    /// `--fast` where it can be installed; otherwise (said on stderr) the int3 sites given at construction. The
    /// `functions` patched too are left out of the int3 sites; those that cannot be patched keep theirs.
    pub fn arm_preferring_fast(&mut self, req: &FastRequest) -> Result<(), Error> {
        let sites = std::mem::take(&mut self.sites);
        match self.arm_fast(req) {
            Ok(patched) => {
                let (gone, kept) = sites.into_iter().partition(|(a, _)| patched.contains(a));
                self.sites = kept;
                // A probe script's probes still decide which calls of these sites are events.
                let gone: HashMap<u64, super::Site> = gone;
                for (_, site) in gone {
                    if site.probes.iter().any(|p| p.name.is_some()) {
                        let label = site.probes.iter().find_map(|p| p.label.clone());
                        self.fast_probes.insert(label, site.probes);
                    }
                }
                if self.sites.is_empty() { Ok(()) } else { self.arm() }
            }
            Err(why) => {
                eprintln!("syscatch: --fast is not possible here ({why}); using a breakpoint instead");
                if req.functions.iter().any(|f| f.alloc.is_some()) {
                    self.summary.warnings.push(format!(
                        "--malloc needs --fast's trampoline, which could not be installed ({why}): no allocation \
                         was sampled"
                    ));
                }
                self.sites = sites;
                self.arm()
            }
        }
    }

    /// Installs the in-process filter for `numbers` on the wrapper at `entry` (file bytes `code`), mapping the page
    /// in the nearest free gap of the address space within jump range. On any refusal nothing is left changed and
    /// the caller arms int3s. Those of `numbers` also in `ring` go to the ring (where `rdfsbase` can name the thread).
    /// `functions` are patched where they have the shape (see [`FastFunction`]); returns the entries of those
    /// patched.
    fn arm_fast(&mut self, req: &FastRequest) -> Result<Vec<u64>, Error> {
        let FastRequest { numbers, ring, entry, code, functions, malloc_every } = *req;
        let cs = breakpoints::disassembler().ok_or(Error::Disassembler)?;
        let decoded = breakpoints::decode(&cs, code, entry, breakpoints::WRAPPER_INSNS);
        // The wrapper's `syscall` instruction, where the set-up's calls are made (whatever comes before it).
        let syscall_at = decoded.iter().find(|d| d.insn == Some(breakpoints::Insn::Syscall)).map(|d| d.addr);
        let wrapper = breakpoints::plan_wrapper(&cs, code, entry).ok_or(Error::PrefixNotEmulated).and_then(|w| {
            let targets: Vec<u64> = decoded
                .iter()
                .filter_map(|d| trampoline::branch_target(code.get((d.addr - entry) as usize..)?, d.addr))
                .collect();
            Ok(trampoline::plan(entry, code, &w.prefix, w.syscall_at, &targets)?)
        });
        let mut in_mem = vec![0u8; code.len()];
        self.mem.read_exact(entry, &mut in_mem).map_err(Error::ReadWrapper)?;
        if in_mem != code {
            return Err(Error::WrapperChanged);
        }
        // The functions with the shape, unchanged in memory; the others keep their int3 sites.
        let mut fixed = Vec::new();
        for f in functions {
            let mut now = vec![0u8; f.code.len()];
            let planned: Result<Vec<(PatchPlan, Planned)>, _> = match f.alloc {
                Some(a) => crate::x86::alloc::plan_entry(&cs, f.addr, &f.code).map(|(p, m)| vec![(p, Err((a, m)))]),
                None => crate::x86::fixed::plan(&cs, f.addr, &f.code, f.nr)
                    .map(|v| v.into_iter().map(|s| (s.plan, Ok((f.nr, s.depth)))).collect()),
            };
            match planned {
                Ok(plans) if self.mem.read_exact(f.addr, &mut now).is_ok() && now == f.code => {
                    fixed.extend(plans.into_iter().map(|(p, planned)| (f.clone(), p, planned)))
                }
                Ok(_) => {}
                Err(why) if f.alloc.is_some() => eprintln!("syscatch: --malloc does not sample {} ({why})", f.label),
                Err(why) => eprintln!("syscatch: --fast leaves {} to a breakpoint ({why})", f.label),
            }
        }
        // A wrapper the trampoline cannot take (musl's) keeps its int3; libc's functions are patched still.
        let wrapper = match (wrapper, syscall_at) {
            (Ok(plan), _) => Some(plan),
            (Err(why), Some(_)) if !fixed.is_empty() => {
                eprintln!("syscatch: --fast leaves syscall() to a breakpoint ({why})");
                None
            }
            (Err(why), _) => return Err(why),
        };
        let wrapper = (wrapper, entry, syscall_at.unwrap_or(entry));
        self.realtime(|t| {
            if t.adopted_at_entry() {
                return t.install(numbers, ring, wrapper.clone(), &fixed, malloc_every);
            }
            let stuck = t.hold_all(None);
            // Rewriting the wrapper needs every thread stopped: one that cannot stop might return into it.
            let result = match stuck.first() {
                Some((tid, why)) => Err(Error::CannotStop { tid: *tid, why: why.clone() }),
                None => t.install(numbers, ring, wrapper.clone(), &fixed, malloc_every),
            };
            t.release_all();
            result
        })
    }

    /// `wrapper`: the wrapper's plan (`None`: it keeps its int3), its entry, and its `syscall` instruction (where
    /// the set-up's calls are made). Returns the entries patched (the wrapper's too, when it is).
    fn install(
        &mut self,
        numbers: &[u64],
        ring: &[u64],
        (plan, entry, syscall_at): (Option<PatchPlan>, u64, u64),
        fixed: &[(FastFunction, PatchPlan, Planned)],
        malloc_every: u64,
    ) -> Result<Vec<u64>, Error> {
        use trampoline::{Kind, Site};
        let tid = self.injectable(true).ok_or(Error::NoThreadForPage)?;
        let fsgsbase = crate::os::user_fsgsbase();
        let mut ring: Vec<u64> =
            if fsgsbase { ring.iter().copied().filter(|n| numbers.contains(n)).collect() } else { vec![] };
        let wrapper = plan
            .map(|plan| (Site { plan, kind: Kind::Wrapper { numbers: numbers.to_vec(), ring: ring.clone() } }, entry));
        let (mut sites, mut patches) = self.sites(wrapper, fixed, fsgsbase);
        let near = sites.first().map(|s| s.plan.at).ok_or(Error::TrampolineTooBig)?;
        let mut threads = HashMap::new();
        let mut template = None;
        for (&t, _) in self.threads.iter() {
            let r = self.k.get_regs(t).map_err(|error| Error::Registers { tid: t, error })?;
            for p in &patches {
                if r.ip() > p.plan.at && r.ip() < p.plan.at + p.plan.orig.len() as u64 {
                    return Err(Error::InsidePatch { tid: t });
                }
            }
            if !self.threads.get(&t).is_some_and(|th| th.shared_child) {
                threads.entry(r.0.fs_base).or_insert_with(Vec::new).push((0, t));
            }
            template.get_or_insert(r);
        }
        let rings = |sites: &[Site]| {
            sites.iter().any(|s| match &s.kind {
                Kind::Wrapper { ring, .. } => !ring.is_empty(),
                Kind::Fixed { ring, .. } => *ring,
                Kind::Alloc { .. } => true,
            })
        };
        // Known stacks need the ring's pages (their table follows the ring) and a thread in each record.
        // (Mapped with the ring's pages even when no call goes to the ring: known calls are written there.)
        let mut known = self.cfg.known.is_some() && fsgsbase;
        if known && trampoline::assemble_sites(&sites, near & !0xfff, fsgsbase, true).is_none() {
            known = false;
        }
        // Whether it fits, at a page as near as any (the rel32s are checked again at the real one).
        if trampoline::assemble_sites(&sites, near & !0xfff, fsgsbase, false).is_none() {
            return Err(Error::TrampolineTooBig);
        }
        // All threads are held: the maps cannot change under us but for other processes writing ours (none do).
        let pid = self.cfg.pid;
        let status = self.k.read_status(pid).map(|s| crate::model::status::parse_status(&s)).map_err(Error::Status)?;
        let sigtrap_handled = (status.sig_cgt | status.sig_ign) & super::pad::SIGTRAP_BIT != 0;
        let maps = self.k.read_maps(pid).map_err(|error| Error::Maps { pid, error })?;
        let maps = crate::model::maps::parse_maps(&maps);
        let plans: Vec<PatchPlan> = sites.iter().map(|s| s.plan.clone()).collect();
        let ringed = |sites: &[Site], known: bool| known || rings(sites);
        let mut sampling = sites.iter().any(|s| matches!(s.kind, Kind::Alloc { .. }));
        let pages_for = |sites: &[Site], known: bool, sampling: bool| {
            trampoline::pages(ringed(sites, known)) + if sampling { crate::x86::alloc::PAGES } else { 0 }
        };
        let mut candidates = trampoline::page_candidates(&maps, &plans, pages_for(&sites, known, sampling));
        if candidates.is_empty() && ringed(&sites, known) {
            // No gap in reach is large enough for the ring: its calls stop like the others.
            self.summary
                .warnings
                .push("no free gap near libc is large enough for --fast's ring: munmap calls stop too".into());
            if sampling {
                self.summary.warnings.push("--malloc: no free gap near libc is large enough for its tables".into());
                let keep: Vec<bool> = sites.iter().map(|s| !matches!(s.kind, Kind::Alloc { .. })).collect();
                let mut k = keep.iter();
                sites.retain(|_| *k.next().unwrap_or(&true));
                let mut k = keep.iter();
                patches.retain(|_| *k.next().unwrap_or(&true));
                sampling = false;
            }
            ring.clear();
            known = false;
            for s in sites.iter_mut() {
                match &mut s.kind {
                    Kind::Wrapper { ring, .. } => ring.clear(),
                    Kind::Fixed { ring, .. } => *ring = false,
                    Kind::Alloc { .. } => {}
                }
            }
            candidates = trampoline::page_candidates(&maps, &plans, trampoline::PAGES);
        }
        let len = pages_for(&sites, known, sampling) * 4096;
        let munmap = |t: &mut Self, at: u64| {
            t.inject_syscall(tid, syscall_at, libc::SYS_munmap as u64, [at, len, 0, 0, 0, 0]).map(|_| ())
        };
        let mut page = None;
        let mut tried = 0;
        for hint in candidates.into_iter().take(16) {
            tried += 1;
            let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64 | MAP_FIXED_NOREPLACE;
            // Mapped executable, the counter's page then made writable: dropping exec is allowed where adding it
            // is not (PR_SET_MDWE, systemd's MemoryDenyWriteExecute). The code is written through /proc/PID/mem.
            let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
            if ringed(&sites, known) {
                // The code page private, the data pages shared (syscatch maps them too, see `Fast::shared`).
                let got = self.inject_syscall(
                    tid,
                    syscall_at,
                    libc::SYS_mmap as u64,
                    [hint, trampoline::CODE_BYTES, rx, flags, u64::MAX, 0],
                )?;
                if got == hint {
                    let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
                    let shared = (libc::MAP_SHARED | libc::MAP_ANONYMOUS) as u64 | MAP_FIXED_NOREPLACE;
                    let data = self.inject_syscall(
                        tid,
                        syscall_at,
                        libc::SYS_mmap as u64,
                        [hint + trampoline::CODE_BYTES, len - trampoline::CODE_BYTES, rw, shared, u64::MAX, 0],
                    );
                    match data {
                        Ok(d) if d == hint + trampoline::CODE_BYTES => {
                            page = Some(got);
                            break;
                        }
                        // Not where asked, or refused: both given back (one munmap covers both ranges).
                        Ok(_) => munmap(self, got)?,
                        Err(e) => {
                            let _ = munmap(self, got);
                            return Err(e);
                        }
                    }
                } else if (got as i64) >= 0 {
                    munmap(self, got)?;
                }
                continue;
            }
            let got =
                self.inject_syscall(tid, syscall_at, libc::SYS_mmap as u64, [hint, len, rx, flags, u64::MAX, 0])?;
            if got == hint {
                let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
                let done = self
                    .inject_syscall(
                        tid,
                        syscall_at,
                        libc::SYS_mprotect as u64,
                        [got + trampoline::CODE_BYTES, len - trampoline::CODE_BYTES, rw, 0, 0, 0],
                    )
                    .inspect_err(|_| {
                        let _ = munmap(self, got);
                    })?;
                if done == 0 {
                    page = Some(got);
                    break;
                }
            }
            if (got as i64) >= 0 {
                // A kernel before 4.17 ignores MAP_FIXED_NOREPLACE (not where we asked), or the counter's page
                // cannot be made writable: give it back.
                munmap(self, got)?;
            }
            // EEXIST (taken since the maps were read) or any other refusal: the next gap.
        }
        let page = page.ok_or(match tried {
            0 => Error::NoGap,
            tried => Error::PageRefused { tried },
        })?;
        let assembled =
            trampoline::assemble_sites(&sites, page, fsgsbase, known).ok_or(Error::TrampolineTooBig).and_then(|a| {
                for (p, &start) in patches.iter_mut().zip(&a.starts) {
                    p.jump = trampoline::patch_bytes(&p.plan, start).ok_or(Error::OutOfRange)?;
                }
                Ok(a)
            });
        let trampoline::Assembled { code, int3s, int3_sites, ring_writes, full_int3s, known_int3s, flags, .. } =
            match assembled {
                Ok(a) => a,
                Err(e) => {
                    let _ = munmap(self, page);
                    return Err(e);
                }
            };
        // The code first (nothing jumps there yet), so a refusal can still give the pages back; with it the
        // sampler's draws and seed.
        let written = self.mem.write_all(page, &code).and_then(|()| match sampling {
            true => self.sampler_tables(page, malloc_every),
            false => Ok(()),
        });
        if let Err(e) = written {
            let _ = munmap(self, page);
            return Err(Error::WriteTrampoline(e));
        }
        self.install_pad(Some(syscall_at));
        for &a in int3s.keys() {
            self.pad_list(crate::x86::trappad::entry(a, true));
            self.tell(Msg::Nop(a));
        }
        for &a in &flags {
            self.tell(Msg::Nop(a));
        }
        for (i, p) in patches.iter().enumerate() {
            if let Err(e) = self.mem.write_all(p.plan.at, &p.jump) {
                // Nothing jumps to the pages any more: the jumps written go, then the pages (the pad stays, for the
                // breakpoints used instead).
                for q in &patches[..i] {
                    let _ = self.mem.write_all(q.plan.at, &q.plan.orig);
                }
                let _ = munmap(self, page);
                return Err(Error::WritePatch(e));
            }
        }
        let int3s: HashMap<u64, (u64, usize)> =
            int3s.into_iter().map(|(a, nr)| (a, (nr, int3_sites.get(&a).copied().unwrap_or(0)))).collect();
        let ring = ringed(&sites, known).then(|| Ring { threads, template, ..Ring::new(ring_writes) });
        let patched = patches.iter().map(|p| p.entry).collect();
        let full_int3s = full_int3s.into_iter().collect();
        let shared = match ring
            .is_some()
            .then(|| self.k.open_shared(pid, page + trampoline::CODE_BYTES, len - trampoline::CODE_BYTES))
        {
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => {
                self.summary.warnings.push(format!(
                    "--fast's ring is read through the target's memory ({e} on its map_files entry): calls made in \
                     the target's last tick (10 ms) before it exits or execs may be missed"
                ));
                None
            }
            None => None,
        };
        // The table is written through syscatch's own mapping of it.
        let known_table =
            (known && shared.is_some()).then(|| self.cfg.known.take()).flatten().map(super::known::Known::new);
        let known_int3s = if known_table.is_some() { known_int3s.into_iter().collect() } else { Default::default() };
        self.fast = Some(Fast {
            patches,
            int3s,
            full_int3s,
            known_int3s,
            known: known_table,
            page,
            sigtrap_handled,
            fsgsbase,
            ring,
            shared,
            flags,
            len,
        });
        // syscatch's own memory in the target (the ring's pages fill as it is used): not the target's growth.
        self.summary.own_ranges.push((page, page + len));
        self.armed = true;
        self.start = Instant::now();
        Ok(patched)
    }

    /// A SIGTRAP stop of a thread whose last stop was a trampoline event at stack pointer `sp`: reads the record
    /// below `sp` with the stack in one copy. If the record is this stop's (newer than any seen from the thread),
    /// the event is complete without `PTRACE_GETREGS`: reported, and the thread resumed. Otherwise the copy is
    /// given back for the caller's usual path (it is the right one if the thread did stop at `sp`).
    pub(super) fn fast_guessed(&mut self, tid: Tid, (sp, len): (u64, usize), seen: Instant) -> Result<(), Window> {
        let mut window = self.read_with_record(tid, sp, len);
        let Some(fast) = self.fast.as_ref() else { return Err(window) };
        let Some(t) = self.threads.get_mut(&tid) else { return Err(window) };
        let record = window.get(..trampoline::BLOCK).and_then(trampoline::Block::parse);
        let (Some(b), Some(base)) = (record, t.passes.regs) else { return Err(window) };
        // This thread's (its fs base: the same stack can be another thread's, a coroutine's that moved), and
        // newer than any seen from it. Two threads running with one fs base (a raw clone without CLONE_SETTLS, a
        // coroutine that carries its TLS across threads with wrfsbase) and calling at one stack address are not
        // told apart.
        let ours = fast.fsgsbase && b.thread != 0 && b.thread == base.0.fs_base && b.seq > t.passes.newest;
        let Some(&(nr, site)) = fast.int3s.get(&b.int3).filter(|_| ours) else { return Err(window) };
        // Where the siginfo is read anyway, a stop that is not the int3's (a SIGTRAP sent to the thread, or
        // another trap of the kernel's, though the record is whole) is left to the usual path, which passes it on.
        if fast.sigtrap_handled && !super::from_int3(&*self.k, tid) {
            return Err(window);
        }
        // What PTRACE_GETREGS would give: the record's registers, rcx and r11 as the match path left them (r11
        // holds the sequence number), its flags, and what a call of the wrapper does not change.
        let mut regs = base;
        for &(r, v) in &b.regs {
            regs.set(r, v);
        }
        regs.0.rsp = sp;
        regs.0.rip = b.int3 + 1;
        regs.0.rcx = b.rcx();
        regs.0.r11 = b.seq;
        regs.0.eflags = b.eflags(base.0.eflags);
        regs.0.orig_rax = u64::MAX;
        t.passes.report(b.seq);
        self.summary.from_record += 1;
        window.advance(trampoline::BLOCK);
        if fast.full_int3s.contains(&b.int3) {
            window = Window::default();
        }
        let ev = self.fast_record(tid, &regs, (nr, site), window);
        // The int3's own stop (checked above where it matters): nothing to pass on.
        self.resume_after_event(tid, sp, &ev, seen, 0);
        self.emit_fast(b.seq, ev);
        Ok(())
    }

    /// Resumes a thread after its trampoline event `ev` at stack pointer `sp` with signal `sig` (a SIGTRAP sent to
    /// it, see [`Tracer::sent_sigtrap`]); unless it takes one, its next stop may be read at `sp`.
    pub(super) fn resume_after_event(&mut self, tid: Tid, sp: u64, ev: &Event, seen: Instant, sig: i32) {
        let read = ev.capture.as_ref().map_or(0, |c| c.stack.len());
        self.summary.stopped += seen.elapsed();
        self.resume(tid, sig);
        if let Some(t) = self.threads.get_mut(&tid)
            && sig == 0
        {
            t.passes.guess = Some((sp, read));
        }
    }

    /// SIGTRAP if this stop at a trampoline int3 carries another SIGTRAP (sent to the thread, or another trap of
    /// the kernel's), merged with the int3's.
    pub(super) fn sent_sigtrap(&self, tid: Tid) -> i32 {
        let handled = self.fast.as_ref().is_some_and(|f| f.sigtrap_handled);
        if handled && !super::from_int3(&*self.k, tid) { libc::SIGTRAP } else { 0 }
    }

    /// The signal to pass on at a stop whose pass was reported already ([`FastStop::Reported`]): one of the
    /// two stops was a SIGTRAP sent to the thread. Where the siginfo is read (a target that handles SIGTRAP), the
    /// sent one went on at its own stop, and this stop's says whether it is the sent one; otherwise the first
    /// stop was resumed without a signal, and this one passes SIGTRAP on.
    pub(super) fn repeated_sigtrap(&self, tid: Tid) -> i32 {
        if self.fast.as_ref().is_some_and(|f| f.sigtrap_handled) { self.sent_sigtrap(tid) } else { libc::SIGTRAP }
    }

    /// A thread stopped with `regs` (from `PTRACE_GETREGS`) at one of the trampoline's int3s: its event (rax is
    /// the result; the arguments are where the wrapper put them for the kernel: rdi, rsi, rdx, r10, r8, r9
    /// survive `syscall`). `read`: a copy taken at a guessed stack pointer, used if it is this one. `None`: not
    /// at one of our int3s. The caller resumes the thread and, for an event, sets its guess.
    pub(super) fn fast_event(&mut self, tid: Tid, regs: &Regs, read: Option<(u64, Window)>) -> Option<FastStop> {
        let int3 = regs.ip().wrapping_sub(1);
        let fast = self.fast.as_ref()?;
        let &nr = fast.int3s.get(&int3)?;
        let full = fast.full_int3s.contains(&int3);
        let sp = regs.sp();
        let mut window = match read {
            Some((at, w)) if at == sp => w,
            _ => self.read_with_record(tid, sp, if full { 0 } else { self.cfg.stack_bytes }),
        };
        let record = window.get(..trampoline::BLOCK).and_then(trampoline::Block::parse).filter(|b| b.int3 == int3);
        window.advance(trampoline::BLOCK);
        if full {
            // A call the ring would have taken: its stack is not needed.
            window = Window::default();
            self.summary.ring_full_stops += 1;
        } else {
            self.summary.fast_stops += 1;
        }
        if let Some(t) = self.threads.get_mut(&tid) {
            t.passes.regs = Some(*regs);
            if let Some(b) = record {
                if t.passes.reported.contains(&b.seq) {
                    return Some(FastStop::Reported);
                }
                t.passes.report(b.seq);
            }
        }
        self.learn_thread(tid, regs);
        // r11 holds the sequence number at every int3 of the page.
        let seq = regs.0.r11;
        Some(FastStop::Event(Box::new(self.fast_record(tid, regs, nr, window)), seq))
    }

    /// The record below `sp` and up to `len` bytes of stack from `sp`, in one copy.
    fn read_with_record(&self, tid: Tid, sp: u64, len: usize) -> Window {
        let at = sp.wrapping_sub(trampoline::BLOCK as u64);
        Window::filled_from(&self.windows, |b| self.k.read_into(tid, at, trampoline::BLOCK + len, b))
    }

    /// The event of matching call `nr` of patch `site` stopped at the trampoline with `regs`, its stack copied
    /// from rsp in `stack`.
    fn fast_record(&mut self, tid: Tid, regs: &Regs, (nr, site): (u64, usize), stack: Window) -> Event {
        if crate::os::faults::injected_once("tracer-panic") {
            panic!("injected fault: tracer-panic");
        }
        self.summary.hits += 1;
        self.summary.matching += 1;
        let g = &regs.0;
        // Frame 0 is the patched function: at its entry, or just past its `syscall` where it pushed registers.
        let mut at_entry = *regs;
        let patch = self.fast.as_ref().and_then(|f| f.patches.get(site));
        at_entry.0.rip = patch.map_or(g.rip, |p| p.frame0);
        let label = patch.and_then(|p| p.label.clone());
        let asked = self.cfg.stack_bytes;
        Event {
            time: self.start.elapsed().as_secs_f64(),
            tid,
            probe: None,
            // A libc function's call is reported as its int3 probe reports it: by its label, with no number.
            nr: if label.is_some() { 0 } else { nr },
            func: label,
            args: [g.rdi, g.rsi, g.rdx, g.r10, g.r8, g.r9],
            regs: Vec::new(),
            ret: Some(g.rax),
            ret_missing: None,
            capture: if stack.is_empty() {
                None
            } else {
                let k = &*self.k;
                let (sp, restorers) = (regs.sp(), &self.cfg.restorers);
                let more =
                    sigstack::read_interrupted(|a, n, b| k.read_into(tid, a, n, b), restorers, sp, &stack, asked);
                let python = self.cfg.python.as_mut().map(|p| p.read_frames(tid, regs, &stack)).unwrap_or_default();
                // Not with other stacks copied (nor, see `known_hint`, where a CPython thread's walk failed).
                let known = if more.is_empty() { self.known_hint(tid, regs, &stack).map(Box::new) } else { None };
                Some(StackCapture { regs: at_entry, stack, asked, python, more, known, known_id: None })
            },
            also: Vec::new(),
        }
    }

    /// A call from the trampoline (a stop's or the ring's) against the probes of its site, as a breakpoint's hit is
    /// (see `on_hit`): the matching probes name the event, each counts it against its limits. Returns false when
    /// none matches (the call is no event: not counted as matching). A stack or a result no probe asked for is
    /// dropped.
    pub(super) fn select(&mut self, ev: &mut Event) -> bool {
        let Some(probes) = self.fast_probes.get_mut(&ev.func) else { return true };
        let mut matched = Vec::new();
        for (i, p) in probes.iter_mut().enumerate() {
            if !p.exhausted() && p.cond.on_call(ev.nr, &ev.args).unwrap_or(true) && p.sample() {
                p.emitted += 1;
                matched.push(i);
            }
        }
        let Some(&first) = matched.first() else {
            self.summary.matching = self.summary.matching.saturating_sub(1);
            return false;
        };
        ev.probe = probes[first].name.clone();
        ev.also = matched[1..].iter().filter_map(|&i| probes[i].name.clone()).collect();
        if !matched.iter().any(|&i| probes[i].want_stack) {
            ev.capture = None;
        }
        if !matched.iter().any(|&i| probes[i].want_ret) {
            ev.ret = None;
        }
        true
    }

    /// Whether `--fast`'s trampoline took the `syscall()` wrapper (and the functions it could patch).
    pub fn fast_installed(&self) -> bool {
        self.fast.is_some()
    }

    /// Whether `addr` is one of the trampoline's int3s (never rewound: the page stays valid after detach).
    pub(super) fn fast_int3(&self, addr: u64) -> bool {
        self.fast.as_ref().is_some_and(|f| f.int3s.contains_key(&addr))
    }

    /// The original bytes a fork child must get back, and nops for the page's int3s: a child forked by a
    /// matching `syscall(SYS_fork)` returns from the kernel inside the page, just before one of them.
    pub(super) fn fast_restore_in(&self, child: &dyn Mem) {
        if let Some(f) = &self.fast {
            for p in &f.patches {
                let _ = child.write_all(p.plan.at, &p.plan.orig);
            }
            for &a in f.int3s.keys().chain(&f.flags) {
                let _ = child.write_all(a, &[0x90]);
            }
        }
    }
}
