//! A pure DWARF CFI unwinder for x86_64: captured registers + a captured copy of the stack + each module's
//! unwind sections in, the frames' addresses out, with the reason the walk ended. Nothing here touches a
//! process: the caller supplies modules through [`ModuleLookup`] (live from /proc, or fixtures in tests).
//!
//! Rules, in the order they are tried for each frame: the module's `.eh_frame` (through `.eh_frame_hdr`'s
//! binary-search table), then `.debug_frame` (the module's own, or its separate debug file's), then glibc's
//! `__restore_rt` recognised by its bytes, then a PLT stub's fixed shape, and only where no CFI exists at all, the
//! frame-pointer chain (marked [`How::FramePointer`]). Every value read from the stack or a file goes through
//! checked arithmetic: a corrupt table or stack ends the walk with a reason, it never panics or invents a frame.

use crate::model::addrmap::AddrMap;
use crate::model::bytes::Bytes;
use gimli::{
    BaseAddresses, CfaRule, DebugFrame, EhFrame, EhFrameHdr, EndianSlice, LittleEndian, Register, RegisterRule,
    UnwindContext, UnwindSection, UnwindTableRow,
};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

/// DWARF register numbers on x86_64 (SysV psABI figure 3.36).
pub const RBX: usize = 3;
pub const RBP: usize = 6;
pub const RSP: usize = 7;
pub const RA: usize = 16;
const NREGS: usize = 17;
/// Preserved across calls (psABI): an unwind rule that does not mention them means "same value".
const CALLEE_SAVED: [usize; 6] = [RBX, RBP, 12, 13, 14, 15];

use crate::model::sigframe::MCONTEXT;
pub use crate::model::sigframe::RESTORE_RT;
/// The registers of `struct sigcontext` (at [`MCONTEXT`] in the `ucontext`) in DWARF numbering
/// (`r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip`).
const SIGCONTEXT_SLOTS: [usize; 17] = [8, 9, 10, 11, 12, 13, 14, 15, 5, 4, RBP, RBX, 1, 0, 2, RSP, RA];

/// Register values of one frame in DWARF numbering; `None` where the value is not recoverable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindRegs(pub [Option<u64>; NREGS]);

impl UnwindRegs {
    /// All registers of a stopped thread (PTRACE_GETREGS).
    pub fn from_regs(r: &crate::model::regs::Regs) -> UnwindRegs {
        let g = &r.0;
        let v = [
            g.rax, g.rdx, g.rcx, g.rbx, g.rsi, g.rdi, g.rbp, g.rsp, g.r8, g.r9, g.r10, g.r11, g.r12, g.r13, g.r14,
            g.r15, g.rip,
        ];
        UnwindRegs(v.map(Some))
    }
    pub fn get(&self, reg: usize) -> Option<u64> {
        self.0.get(reg).copied().flatten()
    }
    fn name(reg: usize) -> &'static str {
        const N: [&str; NREGS] = [
            "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
            "r15", "rip",
        ];
        N.get(reg).copied().unwrap_or("a register")
    }
}

/// A section of a file: its bytes' range in the data and its address as stated in the file.
#[derive(Clone, Debug)]
pub struct Sect {
    pub range: Range<usize>,
    pub svma: u64,
}

/// The unwind information of one ELF file, in the file's own (stated) addresses. Parsed once per build-id;
/// looked-up rows are cached by address, so unwinding the same code again costs a hash lookup.
pub struct ModuleCfi {
    data: Bytes,
    eh_frame: Option<Sect>,
    eh_frame_hdr: Option<Sect>,
    /// `.debug_frame`, from the module or its separate debug file.
    debug_frame: Option<(Bytes, Range<usize>)>,
    text: u64,
    got: u64,
    /// Stated address ranges of `.plt`, `.plt.got`, `.plt.sec`.
    plt: Vec<Range<u64>>,
    /// Executable segments: stated address range and file offset, to read code bytes.
    exec: Vec<(Range<u64>, usize)>,
    /// Stated entry addresses of the file's functions (its symbol tables), sorted: a thread stopped at one with
    /// no CFI there has its return address at the top of its stack.
    entries: Vec<u64>,
    eh_index: OnceLock<Vec<(u64, u64, usize)>>,
    debug_index: OnceLock<Vec<(u64, u64, usize)>>,
    rows: Mutex<AddrMap<u64, Lookup>>,
}

/// The result of looking up one address, cached.
#[derive(Clone, Debug)]
enum Lookup {
    Row { row: Arc<UnwindTableRow<usize>>, from_debug: bool, signal: bool },
    NoCfi,
    Bad(String),
}

/// The CFI row at `svma` from the FDE search of one section (`what`: its name, for messages); `None` when the
/// section has no entry for the address, so the next section is tried.
fn row_from<'s, S>(
    fde: gimli::Result<gimli::FrameDescriptionEntry<EndianSlice<'s, LittleEndian>>>,
    section: &S,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize>,
    svma: u64,
    what: &str,
) -> Option<Lookup>
where
    S: UnwindSection<EndianSlice<'s, LittleEndian>>,
{
    let fde = match fde {
        Ok(fde) => fde,
        Err(gimli::Error::NoUnwindInfoForAddress) => return None,
        Err(e) => return Some(Lookup::Bad(format!("corrupt {what} near {svma:#x}: {e}"))),
    };
    Some(match fde.unwind_info_for_address(section, bases, ctx, svma) {
        Ok(row) => Lookup::Row {
            row: Arc::new(row.clone()),
            from_debug: what == ".debug_frame",
            signal: fde.is_signal_trampoline(),
        },
        Err(e) => Lookup::Bad(format!("corrupt {what} entry for {svma:#x}: {e}")),
    })
}

impl ModuleCfi {
    /// Reads the unwind sections of an ELF file (`data`); `debug` is a separate debug file, used for its
    /// `.debug_frame` when the module has none. Only a file that is not ELF at all is refused; a corrupt or
    /// missing section leaves that part of the CFI empty.
    pub fn parse(data: impl Into<Bytes>, debug: Option<Bytes>) -> Result<ModuleCfi, object::Error> {
        let data: Bytes = data.into();
        use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
        let file = object::File::parse(&*data)?;
        let sect = |name: &str| -> Option<Sect> {
            let s = file.section_by_name(name)?;
            let (off, size) = s.file_range()?;
            let start = usize::try_from(off).ok()?;
            let end = start.checked_add(usize::try_from(size).ok()?)?;
            (end <= data.len()).then_some(Sect { range: start..end, svma: s.address() })
        };
        let addr_of = |name: &str| file.section_by_name(name).map(|s| s.address()).unwrap_or(0);
        let plt = [".plt", ".plt.got", ".plt.sec"]
            .iter()
            .filter_map(|n| file.section_by_name(n))
            .filter_map(|s| Some(s.address()..s.address().checked_add(s.size())?))
            .collect();
        let exec = match &file {
            object::File::Elf64(elf) => {
                use object::read::elf::ProgramHeader;
                let e = elf.endian();
                elf.elf_program_headers()
                    .iter()
                    .filter(|p| p.p_type(e) == object::elf::PT_LOAD && p.p_flags(e).0 & object::elf::PF_X.0 != 0)
                    .filter_map(|p| {
                        let start = p.p_vaddr(e);
                        Some((start..start.checked_add(p.p_filesz(e))?, usize::try_from(p.p_offset(e)).ok()?))
                    })
                    .collect()
            }
            _ => file
                .segments()
                .filter_map(|s| {
                    let (off, size) = s.file_range();
                    Some((s.address()..s.address().checked_add(size)?, usize::try_from(off).ok()?))
                })
                .collect(),
        };
        let mut entries: Vec<u64> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
            .map(|s| s.address())
            .collect();
        entries.sort_unstable();
        entries.dedup();
        let own_debug = sect(".debug_frame").map(|s| (data.clone(), s.range));
        let debug_frame = own_debug.or_else(|| {
            let d = debug?;
            let f = object::File::parse(&*d).ok()?;
            let s = f.section_by_name(".debug_frame")?;
            let (off, size) = s.file_range()?;
            let start = usize::try_from(off).ok()?;
            let end = start.checked_add(usize::try_from(size).ok()?)?;
            (end <= d.len()).then_some((d.clone(), start..end))
        });
        Ok(ModuleCfi {
            eh_frame: sect(".eh_frame"),
            eh_frame_hdr: sect(".eh_frame_hdr"),
            debug_frame,
            text: addr_of(".text"),
            got: addr_of(".got"),
            plt,
            exec,
            entries,
            eh_index: OnceLock::new(),
            debug_index: OnceLock::new(),
            rows: Mutex::new(AddrMap::default()),
            data,
        })
    }

    /// A module from raw parts, for fixtures: `data` holds everything, `eh_frame`/`debug_frame` index into it,
    /// `exec` maps stated code addresses to offsets in `data`, `plt` lists PLT ranges.
    pub fn from_sections(
        data: impl Into<Bytes>,
        eh_frame: Option<Sect>,
        debug_frame: Option<Range<usize>>,
        exec: Vec<(Range<u64>, usize)>,
        plt: Vec<Range<u64>>,
    ) -> ModuleCfi {
        let data: Bytes = data.into();
        ModuleCfi {
            eh_frame,
            eh_frame_hdr: None,
            debug_frame: debug_frame.map(|r| (data.clone(), r)),
            text: 0,
            got: 0,
            plt,
            exec,
            entries: Vec::new(),
            eh_index: OnceLock::new(),
            debug_index: OnceLock::new(),
            rows: Mutex::new(AddrMap::default()),
            data,
        }
    }

    /// Whether CFI covers stated address `svma`.
    pub fn covers(&self, svma: u64) -> bool {
        matches!(self.lookup(svma), Lookup::Row { .. })
    }

    /// Whether the file has any CFI at all.
    pub fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    fn bases(&self) -> BaseAddresses {
        let mut b = BaseAddresses::default().set_text(self.text).set_got(self.got);
        if let Some(s) = &self.eh_frame {
            b = b.set_eh_frame(s.svma);
        }
        if let Some(s) = &self.eh_frame_hdr {
            b = b.set_eh_frame_hdr(s.svma);
        }
        b
    }

    fn eh(&self) -> Option<EhFrame<EndianSlice<'_, LittleEndian>>> {
        let s = self.eh_frame.as_ref()?;
        let mut eh = EhFrame::new(self.data.get(s.range.clone())?, LittleEndian);
        eh.set_address_size(8);
        Some(eh)
    }

    fn debug(&self) -> Option<DebugFrame<EndianSlice<'_, LittleEndian>>> {
        let (d, r) = self.debug_frame.as_ref()?;
        let mut df = DebugFrame::new(d.get(r.clone())?, LittleEndian);
        df.set_address_size(8);
        Some(df)
    }

    /// `len` bytes of code at stated address `svma`, from the file.
    pub fn code(&self, svma: u64, len: usize) -> Option<&[u8]> {
        let (r, off) = self.exec.iter().find(|(r, _)| r.contains(&svma))?;
        let start = off.checked_add(usize::try_from(svma - r.start).ok()?)?;
        let end = start.checked_add(len)?;
        let seg_end = off.checked_add(usize::try_from(r.end - r.start).ok()?)?;
        if end > seg_end {
            return None;
        }
        self.data.get(start..end)
    }

    fn in_plt(&self, svma: u64) -> bool {
        self.plt.iter().any(|r| r.contains(&svma))
    }

    /// Whether `svma` is a function's first instruction (its symbol's address).
    fn is_entry(&self, svma: u64) -> bool {
        self.entries.binary_search(&svma).is_ok()
    }

    /// The CFI row for stated address `svma`, cached.
    fn lookup(&self, svma: u64) -> Lookup {
        if let Some(hit) = self.rows.lock().ok().and_then(|m| m.get(&svma).cloned()) {
            return hit;
        }
        let found = self.lookup_uncached(svma);
        if let Ok(mut m) = self.rows.lock() {
            m.insert(svma, found.clone());
        }
        found
    }

    fn lookup_uncached(&self, svma: u64) -> Lookup {
        let bases = self.bases();
        let mut ctx = UnwindContext::new();
        if let Some(eh) = self.eh() {
            let fde = match self.eh_frame_hdr.as_ref().and_then(|h| self.data.get(h.range.clone())) {
                Some(hdr) => EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).and_then(|p| match p.table() {
                    Some(t) => t.fde_for_address(&eh, &bases, svma, EhFrame::cie_from_offset),
                    None => Err(gimli::Error::NoUnwindInfoForAddress),
                }),
                None => self.indexed_fde(&self.eh_index, &eh, &bases, svma),
            };
            if let Some(found) = row_from(fde, &eh, &bases, &mut ctx, svma, ".eh_frame") {
                return found;
            }
        }
        if let Some(df) = self.debug() {
            let fde = self.indexed_fde(&self.debug_index, &df, &bases, svma);
            if let Some(found) = row_from(fde, &df, &bases, &mut ctx, svma, ".debug_frame") {
                return found;
            }
        }
        Lookup::NoCfi
    }

    /// Finds the FDE covering `svma` in a section without a search table, through an index of all its FDEs
    /// built on first use (sorted by start address).
    fn indexed_fde<'s, S>(
        &self,
        index: &OnceLock<Vec<(u64, u64, usize)>>,
        section: &S,
        bases: &BaseAddresses,
        svma: u64,
    ) -> gimli::Result<gimli::FrameDescriptionEntry<EndianSlice<'s, LittleEndian>>>
    where
        S: UnwindSection<EndianSlice<'s, LittleEndian>>,
    {
        let idx = index.get_or_init(|| {
            let mut v = Vec::new();
            let mut entries = section.entries(bases);
            // A corrupt entry ends the index there: what came before is still usable.
            while let Ok(Some(e)) = entries.next() {
                if let gimli::CieOrFde::Fde(partial) = e
                    && let Ok(fde) = partial.parse(S::cie_from_offset)
                    && let Some(end) = fde.initial_address().checked_add(fde.len())
                {
                    v.push((fde.initial_address(), end, fde.offset()));
                }
            }
            v.sort_unstable();
            v
        });
        let i = idx.partition_point(|&(start, _, _)| start <= svma);
        let &(start, end, off) =
            i.checked_sub(1).and_then(|i| idx.get(i)).ok_or(gimli::Error::NoUnwindInfoForAddress)?;
        if !(start..end).contains(&svma) {
            return Err(gimli::Error::NoUnwindInfoForAddress);
        }
        section.fde_from_offset(bases, S::Offset::from(off), S::cie_from_offset)
    }
}

/// One module as mapped in the process: run-time address = `bias` + stated address.
#[derive(Clone)]
pub struct MappedCfi {
    pub bias: u64,
    pub cfi: Arc<ModuleCfi>,
}

/// Finds the module that holds a code address.
pub trait ModuleLookup {
    /// The module mapping `addr`; `None` if no module does (the caller may reload its list before answering).
    fn find(&mut self, addr: u64) -> Option<MappedCfi>;
}

/// How a frame's address was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum How {
    /// The captured rip.
    Regs,
    /// From the callee's CFI.
    Cfi,
    /// Restored from a signal frame's ucontext: the pc of the interrupted instruction, looked up as is.
    Signal,
    /// From the callee's saved frame pointer: no CFI covered the callee.
    FramePointer,
    /// The callee was a PLT stub (no CFI): the return address is at the top of its stack.
    Plt,
    /// The callee was stopped at its first instruction, with no CFI there: the return address is at the top of
    /// its stack.
    Entry,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::Regs => "regs",
            How::Cfi => "cfi",
            How::Signal => "signal",
            How::FramePointer => "frame-pointer",
            How::Plt => "plt",
            How::Entry => "entry",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawFrame {
    /// The frame's pc: rip for the first frame and a signal's interrupted frame, else a return address.
    pub pc: u64,
    /// Where to look the frame up (rules, symbols, lines): `pc`, or `pc - 1` for a return address, so a call
    /// that is the last instruction of a function is not attributed to the next one.
    pub lookup: u64,
    pub how: How,
}

/// Why the walk ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// The outermost frame (`_start`, a thread's `clone3`): its CFI says it has no caller.
    Outermost(String),
    /// The walk stopped before the outermost frame.
    Truncated(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unwound {
    pub frames: Vec<RawFrame>,
    pub end: End,
}

/// Unwinds from `regs` over the captured `stack`, at most `max_depth` frames.
pub fn unwind(regs: UnwindRegs, stack: &StackWindow, modules: &mut dyn ModuleLookup, max_depth: usize) -> Unwound {
    unwind_with_sps(regs, stack, modules, max_depth).0
}

/// [`unwind`], and each frame's stack pointer (its stack is from there up to the next frame's).
pub fn unwind_with_sps(
    regs: UnwindRegs,
    stack: &StackWindow,
    modules: &mut dyn ModuleLookup,
    max_depth: usize,
) -> (Unwound, Vec<u64>) {
    let mut frames = Vec::with_capacity(32);
    let mut sps = Vec::with_capacity(32);
    let end = walk(regs, stack, modules, max_depth, &mut frames, &mut sps);
    (Unwound { frames, end }, sps)
}

fn walk(
    mut regs: UnwindRegs,
    stack: &StackWindow,
    modules: &mut dyn ModuleLookup,
    max_depth: usize,
    frames: &mut Vec<RawFrame>,
    sps: &mut Vec<u64>,
) -> End {
    let Some(pc) = regs.get(RA) else {
        return End::Truncated("no rip".into());
    };
    let mut frame = RawFrame { pc, lookup: pc, how: How::Regs };
    // The stack pointer of each frame so far, and the highest: the walk is in a loop when a (pc, sp) repeats, which
    // needs an sp no higher than one seen (it rises at every step but a signal frame's), so only then are they
    // compared (no hashing per frame).
    let mut highest = None;
    loop {
        if frames.len() >= max_depth {
            return End::Truncated(format!("--stack-depth {max_depth} reached"));
        }
        frames.push(frame);
        let sp = match regs.get(RSP) {
            Some(sp) => sp,
            None => return End::Truncated("stack pointer unknown".into()),
        };
        if highest.is_some_and(|h| sp <= h) && frames.iter().zip(sps.iter()).any(|(f, &s)| f.pc == frame.pc && s == sp)
        {
            return End::Truncated(format!("loop: frame {:#x} with sp {sp:#x} seen before", frame.pc));
        }
        sps.push(sp);
        highest = highest.max(Some(sp));
        let step = match step(&regs, frame, stack, modules) {
            Ok(s) => s,
            Err(end) => return end,
        };
        let Some(next_pc) = step.regs.get(RA) else {
            return End::Truncated("return address unknown".into());
        };
        if next_pc == 0 {
            return End::Outermost("return address is 0".into());
        }
        let Some(next_sp) = step.regs.get(RSP) else {
            return End::Truncated(format!("caller's stack pointer unknown above {:#x}", frame.pc));
        };
        let (mut next_pc, mut step) = (next_pc, step);
        if let Some((pc, sp)) = sampler_frame(next_pc, next_sp, stack) {
            // A `--malloc` stub's frame (a sampled call in progress): stepped over to the function's caller.
            (next_pc, step.regs.0[RA], step.regs.0[RSP]) = (pc, Some(pc), Some(sp));
        }
        let next_sp = step.regs.get(RSP).unwrap_or(next_sp);
        // A caller's frame lies above its callee's; a signal frame may switch stacks (sigaltstack).
        if !step.signal && next_sp <= sp {
            return End::Truncated(format!(
                "stack pointer did not move up ({sp:#x} -> {next_sp:#x}) above {:#x}: corrupt CFI or stack",
                frame.pc
            ));
        }
        let lookup = if step.signal {
            next_pc
        } else {
            match next_pc.checked_sub(1) {
                Some(l) => l,
                None => return End::Truncated("return address underflow".into()),
            }
        };
        frame = RawFrame { pc: next_pc, lookup, how: step.how };
        regs = step.regs;
    }
}

/// The frame of a `--malloc` stub around a sampled call returning to `pc` with its stack at `sp` (see
/// `crate::x86::alloc::COOKIE`): the caller's return address and stack pointer, stepping over the stub.
fn sampler_frame(pc: u64, sp: u64, stack: &StackWindow) -> Option<(u64, u64)> {
    use crate::x86::alloc::{COOKIE, STUB_FRAME};
    let cookie = COOKIE ^ pc;
    if stack.read_u64(sp).ok()? != cookie || stack.read_u64(sp.checked_add(8)?).ok()? != cookie {
        return None;
    }
    let at = sp.checked_add(STUB_FRAME)?;
    Some((stack.read_u64(at).ok()?, at.checked_add(8)?))
}

struct Step {
    regs: UnwindRegs,
    /// The next frame was interrupted by a signal: look it up at its pc.
    signal: bool,
    how: How,
}

fn step(regs: &UnwindRegs, frame: RawFrame, stack: &StackWindow, modules: &mut dyn ModuleLookup) -> Result<Step, End> {
    let trunc = |s: String| End::Truncated(s);
    let Some(m) = modules.find(frame.lookup) else {
        return frame_pointer(regs, stack, modules)
            .map_err(|e| trunc(format!("{:#x} is in no module, and {e}", frame.pc)))
            .map(|regs| Step { regs, signal: false, how: How::FramePointer });
    };
    let svma = frame.lookup.wrapping_sub(m.bias);
    match m.cfi.lookup(svma) {
        Lookup::Row { row, from_debug, signal } => {
            let regs = apply_row(&row, regs, stack, &m.cfi, from_debug)?;
            Ok(Step { regs, signal, how: if signal { How::Signal } else { How::Cfi } })
        }
        Lookup::Bad(why) => Err(trunc(why)),
        Lookup::NoCfi => {
            let pc_svma = frame.pc.wrapping_sub(m.bias);
            if m.cfi.code(pc_svma, RESTORE_RT.len()) == Some(&RESTORE_RT[..]) {
                return signal_frame(regs, stack).map_err(trunc).map(|regs| Step {
                    regs,
                    signal: true,
                    how: How::Signal,
                });
            }
            // A PLT stub, or a function stopped at its first instruction (a probe's breakpoint at the entry of
            // code built without CFI, as musl's libc): nothing pushed yet, the return address is at the top.
            let entry = frame.lookup == frame.pc && m.cfi.is_entry(pc_svma);
            if m.cfi.in_plt(svma) || entry {
                let sp = regs.get(RSP).ok_or_else(|| trunc("stack pointer unknown at a function's entry".into()))?;
                let ra = stack.read_u64(sp).map_err(trunc)?;
                let mut next = callee_saved_only(regs);
                next.0[RA] = Some(ra);
                next.0[RSP] = sp.checked_add(8);
                return Ok(Step { regs: next, signal: false, how: if entry { How::Entry } else { How::Plt } });
            }
            frame_pointer(regs, stack, modules)
                .map_err(|e| trunc(format!("no CFI covers {:#x}, and {e}", frame.pc)))
                .map(|regs| Step { regs, signal: false, how: How::FramePointer })
        }
    }
}

fn callee_saved_only(regs: &UnwindRegs) -> UnwindRegs {
    let mut next = UnwindRegs::default();
    for r in CALLEE_SAVED {
        next.0[r] = regs.get(r);
    }
    next
}

/// The classic frame-pointer step: `[rbp]` is the caller's rbp, `[rbp+8]` the return address. rbp is only a
/// guess in code built without frame pointers, so the return address must land in a known module: a chain that
/// leads nowhere ends the walk instead of inventing frames.
fn frame_pointer(regs: &UnwindRegs, stack: &StackWindow, modules: &mut dyn ModuleLookup) -> Result<UnwindRegs, String> {
    let rbp = regs.get(RBP).ok_or("no frame pointer is known")?;
    let sp = regs.get(RSP).ok_or("the stack pointer is unknown")?;
    if rbp < sp || rbp % 8 != 0 {
        return Err(format!("rbp {rbp:#x} is not a frame pointer"));
    }
    let saved_rbp = stack.read_u64(rbp)?;
    let ra = stack.read_u64(rbp.checked_add(8).ok_or("rbp overflow")?)?;
    if ra.checked_sub(1).and_then(|l| modules.find(l)).is_none() {
        return Err(format!("the frame-pointer guess (rbp {rbp:#x}) gives {ra:#x}, which is in no module"));
    }
    let mut next = callee_saved_only(regs);
    next.0[RBP] = Some(saved_rbp);
    next.0[RA] = Some(ra);
    next.0[RSP] = rbp.checked_add(16);
    Ok(next)
}

/// The interrupted registers saved by the kernel in the ucontext at the trampoline's stack pointer (the handler's
/// `ret` popped `pretcode`, so rsp points at the `ucontext`).
fn signal_frame(regs: &UnwindRegs, stack: &StackWindow) -> Result<UnwindRegs, String> {
    let sp = regs.get(RSP).ok_or("stack pointer unknown at a signal frame")?;
    let mc = sp.checked_add(MCONTEXT).ok_or("ucontext address overflow")?;
    let mut next = UnwindRegs::default();
    for (i, &reg) in SIGCONTEXT_SLOTS.iter().enumerate() {
        let at = mc.checked_add(8 * i as u64).ok_or("ucontext address overflow")?;
        next.0[reg] = Some(stack.read_u64(at)?);
    }
    Ok(next)
}

fn apply_row(
    row: &UnwindTableRow<usize>,
    regs: &UnwindRegs,
    stack: &StackWindow,
    cfi: &ModuleCfi,
    from_debug: bool,
) -> Result<UnwindRegs, End> {
    let trunc = End::Truncated;
    let eval = |e: &gimli::UnwindExpression<usize>, initial: Option<u64>| -> Result<u64, String> {
        let expr = if from_debug { cfi.debug().map(|s| e.get(&s)) } else { cfi.eh().map(|s| e.get(&s)) };
        let expr = expr.ok_or("CFI section vanished")?.map_err(|e| format!("bad CFI expression: {e}"))?;
        evaluate(expr, initial, regs, stack)
    };
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let base = regs.get(register.0 as usize).ok_or_else(|| {
                trunc(format!("CFA needs {} which is not known in this frame", UnwindRegs::name(register.0 as usize)))
            })?;
            base.checked_add_signed(*offset).ok_or_else(|| trunc("CFA overflows".into()))?
        }
        CfaRule::Expression(e) => eval(e, None).map_err(trunc)?,
    };
    let mut next = UnwindRegs::default();
    for r in 0..NREGS {
        let rule = row.register(Register(r as u16));
        let value = match rule {
            None if r == RSP => Some(cfa),
            None if CALLEE_SAVED.contains(&r) => regs.get(r),
            None => None,
            Some(RegisterRule::Undefined) => None,
            Some(RegisterRule::SameValue) => regs.get(r),
            Some(RegisterRule::Offset(n)) => {
                let at = cfa.checked_add_signed(n);
                match at.map(|a| stack.read_u64(a)) {
                    Some(Ok(v)) => Some(v),
                    Some(Err(e)) if r == RA => return Err(trunc(e)),
                    _ => None,
                }
            }
            Some(RegisterRule::ValOffset(n)) => cfa.checked_add_signed(n),
            Some(RegisterRule::Register(from)) => regs.get(from.0 as usize),
            Some(RegisterRule::Expression(e)) => match eval(&e, Some(cfa)).and_then(|a| stack.read_u64(a)) {
                Ok(v) => Some(v),
                Err(e) if r == RA => return Err(trunc(e)),
                Err(_) => None,
            },
            Some(RegisterRule::ValExpression(e)) => match eval(&e, Some(cfa)) {
                Ok(v) => Some(v),
                Err(e) if r == RA => return Err(trunc(e)),
                Err(_) => None,
            },
            Some(RegisterRule::Constant(v)) => Some(v),
            Some(RegisterRule::Architectural) => None,
        };
        next.0[r] = value;
    }
    if next.0[RA].is_none() {
        let why = match row.register(Register(RA as u16)) {
            Some(RegisterRule::Undefined) => "outermost frame: its CFI marks the return address undefined",
            _ => "outermost frame: its CFI gives no return address",
        };
        return Err(End::Outermost(why.into()));
    }
    Ok(next)
}

#[path = "unwind_window.rs"]
mod window;
pub use window::{Piece, StackWindow};

#[path = "unwind_expr.rs"]
mod expr;
use expr::evaluate;

#[cfg(test)]
#[path = "unwind_tests.rs"]
mod tests;
