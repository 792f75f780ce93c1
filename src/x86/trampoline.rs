//! The in-process filter of `--fast`: a trampoline page that compares the syscall number with the wanted ones, so
//! a non-matching call never stops. Pure: plans the patch from the wrapper's decoded instructions and assembles
//! the page's bytes; the tracer maps the page, writes it and patches with every thread stopped.
//!
//! Layout, for wanted numbers n1..nk (rax holds the number at the patched instruction), with a second page
//! holding one counter:
//! ```text
//! page:     cmp $n1,%rax ; je match1 ; ... ; cmp $nk,%rax ; je matchk
//!           <displaced instruction> ; jmp patch+len          (no match: back into the wrapper)
//! match_i:  <displaced instruction> ; syscall
//!           <the registers, this int3's address and the thread's fs base stored in the red zone below rsp>
//!           mov $1,%r11d ; lock xadd %r11,counter(%rip) ; lea 1(%r11),%r11 ; mov %r11,seq(%rsp)
//!           int3 ; jmp syscall+2                               (one stop, rax already the result)
//! ```
//!
//! Numbers whose calls need no stack (`ring`: munmap for the leak model) take a ring path instead: before
//! `syscall` it takes a sequence number from the same counter (so a munmap is numbered before any call that gets
//! its range back from the kernel, which is numbered after its own `syscall`), and if the ring has room for it
//! (`seq - tail < RING_SLOTS`, `tail` written by the tracer) it makes the call and writes it into slot
//! `seq % RING_SLOTS` of the ring pages ([`Slot`]: its number, arguments, result, site and the thread's fs base,
//! the sequence number last) and jumps back with no stop. A full ring (the tracer is behind, or gone) makes the
//! call and takes the match path's record and int3 instead, with the number already taken, so no call is lost and
//! the tracer puts every event in sequence order:
//! ```text
//! ring_i:   <displaced instruction> ; mov $1,%r11d ; lock xadd %r11,counter(%rip) ; lea 1(%r11),%r11
//!           mov %r11,-16(%rsp) ; mov %r11,%rcx ; sub tail(%rip),%rcx ; cmp $RING_SLOTS,%rcx ; jae full_i
//!           syscall ; mov %rax,-8(%rsp) ; mov -16(%rsp),%rax                  (rax: seq)
//!           r11 = ring + (seq % RING_SLOTS) * SLOT ; the slot's words, its seq last
//!           mov -8(%rsp),%rax ; jmp syscall+2
//! full_i:   syscall ; the record (seq as taken), r11 = seq and the flags as the counter's xadd left them, rcx as
//!           a record implies ; int3 ; jmp syscall+2
//! ```
//! The same page serves libc functions that make one system call ([`Kind::Fixed`]: `munmap` to the ring, `mmap`
//! with a stop), patched at each `mov $nr,%eax` before a `syscall` (see [`super::fixed`]).
//!
//! The red-zone record ([`Block`]) lets the tracer read a stopped thread's registers and its stack in one
//! `process_vm_readv` at the stack pointer of the thread's last event, instead of `PTRACE_GETREGS` and then the
//! copy: the wrapper is a leaf that pushes nothing and never uses its red zone, and a signal handler's frame
//! goes below the red zone. Its sequence number, from a counter every thread increments, is stored last, so a
//! record is whole once its number is newer than any the tracer has seen from that thread, and the thread's fs
//! base in it tells one thread's record from another's (a coroutine's stack moves between threads). Only `rcx`,
//! `r11` and the flags change besides; `syscall` has just clobbered the first two, and [`plan`] requires the
//! wrapper's next instruction to set the flags without reading them.

use crate::model::regs::Reg;
use crate::x86::breakpoints::{Decoded, Insn};
use std::collections::HashMap;

/// Where the wrapper is patched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchPlan {
    /// The instruction replaced whole by a 5-byte jump.
    pub at: u64,
    /// Its original bytes (at least 5), relocated verbatim: it has no rip-relative operand.
    pub orig: Vec<u8>,
    /// The wrapper's `syscall` instruction.
    pub syscall_at: u64,
}

/// Why a wrapper's entry cannot take the trampoline's jump (the tracer then arms an int3 instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the wrapper has no instructions before `syscall`")]
    NoPrefix,
    #[error("the wrapper does not start with `mov %rdi,%rax`")]
    NoNumberMove,
    #[error("an instruction before `syscall` changes rax")]
    RaxChanged,
    #[error("instruction outside the code read")]
    OutsideCode,
    #[error("a branch targets the middle of the patched instruction")]
    BranchIntoPatch,
    #[error("no instruction of 5 bytes or more can be replaced before `syscall`")]
    NoRoom,
    #[error("the wrapper reads the flags after `syscall`")]
    FlagsRead,
    #[error("no `mov $nr,%eax` just before `syscall`, with the stack untouched before it")]
    NoFixedNumber,
    #[error("its entry's instruction `{0}` cannot be moved")]
    Unmovable(String),
    #[error("{0} `syscall` instructions, not all reached from its entry: a path not patched would go unseen")]
    SeveralSyscalls(usize),
    #[error("a branch targets the middle of an instruction")]
    MidInstruction,
    #[error("a path to its `syscall` uses the stack otherwise than by push and pop, or branches out of it")]
    StackUsed,
}

/// Bytes of the record below the stack pointer: the x86-64 red zone, which signal frames never touch.
pub const BLOCK: usize = 128;
/// Slots of the ring (a power of two) and bytes per slot.
pub const RING_SLOTS: u64 = 512;
pub const SLOT: u64 = 128;
/// Bytes of the trampoline's code (eight pages: `--malloc`'s entries, up to about 40 of a dedicated allocator's
/// with C++'s `operator new` and `delete`, and their sampler go with the others).
pub const CODE_BYTES: u64 = 8 * 4096;
/// Pages mapped for the trampoline: its code, the counter's page (the counter, then the ring's tail), and the
/// ring's when it has one.
pub const PAGES: u64 = CODE_BYTES / 4096 + 1;
pub const RING_PAGES: u64 = RING_SLOTS * SLOT / 4096;

/// Pages mapped for a trampoline with or without a ring (and with it, the known stacks' table,
/// [`crate::x86::known`]: touched only as far as it is filled).
pub fn pages(ring: bool) -> u64 {
    PAGES + if ring { RING_PAGES + crate::x86::known::PAGES } else { 0 }
}
/// Offsets from the trampoline page of the counter, the ring's tail (the oldest sequence number whose slot the
/// tracer has not read yet) and the ring.
pub const COUNTER: u64 = CODE_BYTES;
pub const TAIL: u64 = CODE_BYTES + 8;
pub const RING: u64 = CODE_BYTES + 4096;
/// Where each register goes in the record, as an offset from rsp: (register, REX.R bit, ModRM reg field).
const SAVED: [(Reg, u8, u8, i8); 13] = [
    (Reg::Rax, 0, 0, -104),
    (Reg::Rdi, 0, 7, -96),
    (Reg::Rsi, 0, 6, -88),
    (Reg::Rdx, 0, 2, -80),
    (Reg::R10, 1, 2, -72),
    (Reg::R8, 1, 0, -64),
    (Reg::R9, 1, 1, -56),
    (Reg::Rbx, 0, 3, -48),
    (Reg::Rbp, 0, 5, -40),
    (Reg::R12, 1, 4, -32),
    (Reg::R13, 1, 5, -24),
    (Reg::R14, 1, 6, -16),
    (Reg::R15, 1, 7, -8),
];
const AT_THREAD: i8 = -128;
const AT_SEQ: i8 = -120;
const AT_INT3: i8 = -112;
/// Bytes of a match path between its `syscall` and its int3: 13 stores, the int3's address (movabs + store), the
/// thread (rdfsbase + store), the counter (mov, lock xadd, lea, store).
const RECORD_CODE: u64 = 13 * 5 + 15 + 10 + 24 + TRAP_CALL as u64;

/// A matching call's record, read from the `BLOCK` bytes below its stack pointer. Nothing marks a record as one:
/// the reader checks that `int3` is one of the trampoline's and `thread` the stopped thread's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The writing thread's fs base (its thread pointer), or 0 where `rdfsbase` is not available.
    pub thread: u64,
    /// From the shared counter, unique per pass through the trampoline and increasing; also r11 at the int3.
    pub seq: u64,
    /// The int3 the pass stops at.
    pub int3: u64,
    /// The registers after `syscall` (rax is the result), in [`Reg`] order of `SAVED`.
    pub regs: Vec<(Reg, u64)>,
}

impl Block {
    /// The record in `bytes` (the `BLOCK` bytes below rsp).
    pub fn parse(bytes: &[u8]) -> Option<Block> {
        let word = |off: i8| {
            let at = usize::try_from(BLOCK as isize + off as isize).ok()?;
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let regs = SAVED.iter().map(|&(r, _, _, off)| Some((r, word(off)?))).collect::<Option<Vec<_>>>()?;
        Some(Block { thread: word(AT_THREAD)?, seq: word(AT_SEQ)?, int3: word(AT_INT3)?, regs })
    }

    /// rcx at the int3: the return address `syscall` left, just past the match path's own `syscall`.
    pub fn rcx(&self) -> u64 {
        self.int3.wrapping_sub(RECORD_CODE)
    }

    /// The flags at the int3 (those of the counter's `lock xadd`, which added 1 to `seq - 1`), the others as in
    /// `eflags`.
    pub fn eflags(&self, eflags: u64) -> u64 {
        const CF: u64 = 1;
        const PF: u64 = 1 << 2;
        const AF: u64 = 1 << 4;
        const ZF: u64 = 1 << 6;
        const SF: u64 = 1 << 7;
        const OF: u64 = 1 << 11;
        let (old, new) = (self.seq.wrapping_sub(1), self.seq);
        let mut f = eflags & !(CF | PF | AF | ZF | SF | OF);
        f |= if new < old { CF } else { 0 };
        f |= if (new as u8).count_ones().is_multiple_of(2) { PF } else { 0 };
        f |= (old ^ 1 ^ new) & 0x10;
        f |= if new == 0 { ZF } else { 0 };
        f |= if new >> 63 == 1 { SF } else { 0 };
        f |= if old == i64::MAX as u64 { OF } else { 0 };
        f
    }
}

/// `mov %reg,off(%rsp)` for a 64-bit register (REX.R `r`, ModRM reg field `reg`).
fn store(code: &mut Vec<u8>, r: u8, reg: u8, off: i8) {
    code.extend_from_slice(&[0x48 | (r << 2), 0x89, 0x44 | (reg << 3), 0x24, off as u8]);
}

/// Whether the code at the start of `after` (the wrapper's, just past `syscall`) writes the flags without reading
/// them: `cmp` or `test` on rax, as every wrapper this is used on does, maybe after a copy of rax into another
/// register (glibc 2.43's mmap).
pub fn sets_flags_first(after: &[u8]) -> bool {
    match after {
        [0x48 | 0x49, 0x89, 0xc0..=0xc7, rest @ ..] => sets_flags_first(rest),
        _ => matches!(
            after,
            [0x48, 0x3d, ..] | [0x48, 0x83, 0xf8, ..] | [0x48, 0x85, 0xc0, ..] | [0x3d, ..] | [0x85, 0xc0, ..]
        ),
    }
}

/// Chooses the instruction to replace: one of at least 5 bytes, after rax got the number (`mov %rdi,%rax` first)
/// and before `syscall`, position-independent, with nothing writing rax in between. `code` starts at the
/// wrapper's entry `entry`; `prefix` is its decoded straight-line prefix (all emulatable) and `branch_targets`
/// every branch target inside the function: a target inside the replaced bytes refuses the plan.
pub fn plan(
    entry: u64,
    code: &[u8],
    prefix: &[Decoded],
    syscall_at: u64,
    branch_targets: &[u64],
) -> Result<PatchPlan, Refusal> {
    let first = prefix.first().ok_or(Refusal::NoPrefix)?;
    let after = usize::try_from(syscall_at.wrapping_sub(entry) + 2).ok().and_then(|a| code.get(a..));
    if !after.is_some_and(sets_flags_first) {
        return Err(Refusal::FlagsRead);
    }
    if first.insn != Some(Insn::MovRegReg { dst: Reg::Rax, src: Reg::Rdi }) {
        return Err(Refusal::NoNumberMove);
    }
    let writes_rax = |d: &Decoded| match d.insn {
        Some(Insn::MovRegReg { dst, .. }) | Some(Insn::Load { dst, .. }) | Some(Insn::LeaAbs { dst, .. }) => {
            dst == Reg::Rax
        }
        Some(Insn::Nop) => false,
        _ => true,
    };
    for d in &prefix[1..] {
        if writes_rax(d) {
            return Err(Refusal::RaxChanged);
        }
        let position_independent = matches!(d.insn, Some(Insn::Load { .. }) | Some(Insn::MovRegReg { .. }));
        if d.len >= 5 && position_independent {
            let start = (d.addr - entry) as usize;
            let orig = code.get(start..start + d.len as usize).ok_or(Refusal::OutsideCode)?;
            if branch_targets.iter().any(|&t| t > d.addr && t < d.addr + d.len as u64) {
                return Err(Refusal::BranchIntoPatch);
            }
            return Ok(PatchPlan { at: d.addr, orig: orig.to_vec(), syscall_at });
        }
    }
    Err(Refusal::NoRoom)
}

/// `rel32` from the end of an instruction at `from` of `len` bytes to `to`, if reachable.
fn rel32(from: u64, len: u64, to: u64) -> Option<[u8; 4]> {
    let d = (to as i128) - (from as i128 + len as i128);
    i32::try_from(d).ok().map(|v| v.to_le_bytes())
}

/// The 5-byte `jmp` to `to` written over the patched instruction (padded with `nop`s to its length).
pub fn patch_bytes(plan: &PatchPlan, to: u64) -> Option<Vec<u8>> {
    let mut b = vec![0xe9];
    b.extend_from_slice(&rel32(plan.at, 5, to)?);
    b.resize(plan.orig.len(), 0x90);
    Some(b)
}

/// Bytes of one match path: the displaced instruction, `syscall`, the record's code (with the known-stack call,
/// `KNOWN_CODE` in place of the counter's), int3, jmp.
fn match_len(reloc: &[u8], known: bool) -> usize {
    let record = if known { RECORD_HEAD + KNOWN_CODE } else { RECORD_CODE as usize };
    reloc.len() + 2 + record + 1 + 5
}

/// Bytes of a record's first part ([`record_head`]).
const RECORD_HEAD: usize = 13 * 5 + 15 + 10;
/// Bytes of a match path's known-stack call, from the end of the record's first part to its int3: the call
/// and its return (93), the full ring's branch (10), the counter (19), the common end (55) ([`known_call`]), and
/// the trap helper's call.
const KNOWN_CALL: usize = 93 + 10 + 19 + 55;
const KNOWN_CODE: usize = KNOWN_CALL + TRAP_CALL;

/// Bytes of one ring path up to its full path, and of the full path (see the module's text).
const RING_CODE: usize =
    6 + 9 + 4 + 5 + 3 + 7 + 7 + 6 + 2 + 5 + 5 + 2 + 6 + 3 + 7 + 3 + 8 + 8 + 6 * 4 + 5 + 4 + 5 + 4 + 12 + 3 + 5 + 5;
const FULL_CODE: usize = 2 + 5 + 13 * 5 + 15 + 10 + 4 + 4 + 5 + 7 + TRAP_CALL + 1 + 5;

fn ring_len(reloc: &[u8]) -> usize {
    reloc.len() + RING_CODE + FULL_CODE
}

/// Whether the trampoline for `count` wanted numbers, `ring` of them on the ring, fits its page (known before the
/// page is mapped).
#[cfg(test)]
pub fn fits(plan: &PatchPlan, count: usize, ring: usize) -> bool {
    let stops = count.saturating_sub(ring);
    // The trap helper after the paths, 16-byte aligned.
    let helper = 16 + TRAP_HELPER.len() + 2;
    12 * count + plan.orig.len() + 5 + stops * match_len(&plan.orig, false) + ring * ring_len(&plan.orig) + helper
        <= CODE_BYTES as usize
}

/// The trampoline page's code, assembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembled {
    pub code: Vec<u8>,
    /// Each `int3` in it and the syscall number it reports.
    pub int3s: HashMap<u64, u64>,
    /// Each int3's site (an index into the sites given to [`assemble_sites`]).
    pub int3_sites: HashMap<u64, usize>,
    /// Each ring path's stretch from just past the counter's `lock xadd` to just past the store that completes its
    /// slot, and each full path's up to and through its int3: a thread stopped in there has a number, and its call
    /// is not written down yet.
    pub ring_writes: Vec<(u64, u64)>,
    /// Where each site's code starts: its patched jump goes there.
    pub starts: Vec<u64>,
    /// The int3s of full rings: their calls need no stack.
    pub full_int3s: Vec<u64>,
    /// The int3s of match paths that call the known-stack matcher: a thread stepped through one at detach (it had
    /// a number) is read there.
    pub known_int3s: Vec<u64>,
    /// Where the known-stack matcher's code is, when it is.
    pub known_code: Option<(u64, u64)>,
    /// The bytes that turn `--malloc`'s sampling off when made nops (at detach, at our death, in a fork child).
    pub flags: Vec<u64>,
    /// Offsets of the rel32s of the trap helper's calls (filled at the end of assembly).
    traps: Vec<usize>,
}

/// What the trampoline does for one patched place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `syscall()`: rax holds the number; `numbers` are the wanted ones, those also in `ring` go to the ring.
    Wrapper { numbers: Vec<u64>, ring: Vec<u64> },
    /// A function that makes one system call (libc's `munmap`, `mmap`): the patched instruction is its
    /// `mov $nr,%eax`, just before `syscall`. `ring`: its calls go to the ring, else each stops.
    Fixed { nr: u64, ring: bool },
    /// An allocation function of `--malloc`, patched at its entry (`moved`: its first instructions); `free_site`
    /// names the ring's records of frees (see `trampoline_alloc.rs`).
    /// `internal`: the allocator's own module (not libc), whose calls of its own entries are skipped.
    /// `null_to_malloc`: a realloc whose null pointer goes (by a jump) to malloc's entry: left to malloc's stub.
    Alloc {
        f: crate::x86::alloc::AllocFn,
        moved: Vec<crate::x86::alloc::Moved>,
        free_site: usize,
        internal: Option<(u64, u64)>,
        null_to_malloc: bool,
    },
}

/// One patched place and what its code does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub plan: PatchPlan,
    pub kind: Kind,
}

/// The trampoline page's code for `numbers` on the wrapper `plan` (a stop each, or, for those also in `ring`, the
/// ring). `fsgsbase`: whether user code may run `rdfsbase` (the kernel says so in AT_HWCAP2); without it the
/// record's thread word is 0, and `ring` must be empty (a slot names its thread by its fs base).
#[cfg(test)]
pub fn assemble(plan: &PatchPlan, page: u64, numbers: &[u64], ring: &[u64], fsgsbase: bool) -> Option<Assembled> {
    let site = Site { plan: plan.clone(), kind: Kind::Wrapper { numbers: numbers.to_vec(), ring: ring.to_vec() } };
    assemble_sites(&[site], page, fsgsbase, false)
}

/// The trampoline page's code for every site, one after the other; `None` if it does not fit the page, a jump
/// is out of reach, or a ring is asked for without `rdfsbase`. `known`: every match path asks the known-stack
/// matcher first (its code goes after the paths; its table after the ring, so a ring must be mapped).
pub fn assemble_sites(sites: &[Site], page: u64, fsgsbase: bool, known: bool) -> Option<Assembled> {
    if known && !fsgsbase {
        return None;
    }
    let mut a = Assembled {
        code: Vec::new(),
        int3s: HashMap::new(),
        int3_sites: HashMap::new(),
        ring_writes: Vec::new(),
        starts: Vec::new(),
        full_int3s: Vec::new(),
        known_int3s: Vec::new(),
        known_code: None,
        flags: Vec::new(),
        traps: Vec::new(),
    };
    // The rel32 of each call of the matcher, patched once its place is known; the same for the sampler.
    let mut calls = Vec::new();
    let mut hooks = Vec::new();
    for (si, site) in sites.iter().enumerate() {
        let reloc = &site.plan.orig;
        let back = site.plan.syscall_at + 2;
        a.starts.push(page + a.code.len() as u64);
        match &site.kind {
            Kind::Fixed { nr, ring } => {
                if *ring && !fsgsbase {
                    return None;
                }
                path(&mut a, &mut calls, si, page, reloc, back, *nr, (*ring, fsgsbase, known))?;
            }
            Kind::Alloc { f, moved, free_site, internal, null_to_malloc } => {
                // The sampler names threads by their fs base.
                if !fsgsbase {
                    return None;
                }
                let flag = match a.flags.first() {
                    Some(&f) => (f - page) as usize,
                    None => {
                        // Before the first stub (never run: what precedes it ends in a jump).
                        a.flags.push(page + a.code.len() as u64);
                        a.code.push(0xcc);
                        a.starts[si] += 1;
                        a.code.len() - 1
                    }
                };
                let ctx = (&mut hooks, &mut calls);
                alloc_stub(
                    &mut a,
                    ctx,
                    flag,
                    si,
                    page,
                    &site.plan,
                    (*f, moved, *free_site, *internal, *null_to_malloc),
                    (fsgsbase, known),
                )?;
            }
            Kind::Wrapper { numbers, ring } => {
                if !fsgsbase && !ring.is_empty() {
                    return None;
                }
                let compare_len = 12 * numbers.len();
                let miss_len = reloc.len() + 5;
                let base = a.code.len();
                let path_len = |nr: &u64| if ring.contains(nr) { ring_len(reloc) } else { match_len(reloc, known) };
                let path_at = |i: usize| {
                    page + (base + compare_len + miss_len + numbers[..i].iter().map(path_len).sum::<usize>()) as u64
                };
                for (i, &nr) in numbers.iter().enumerate() {
                    let imm = i32::try_from(nr).ok()?;
                    a.code.extend_from_slice(&[0x48, 0x3d]);
                    a.code.extend_from_slice(&imm.to_le_bytes());
                    let here = page + a.code.len() as u64;
                    a.code.extend_from_slice(&[0x0f, 0x84]);
                    a.code.extend_from_slice(&rel32(here, 6, path_at(i))?);
                }
                a.code.extend_from_slice(reloc);
                let here = page + a.code.len() as u64;
                a.code.push(0xe9);
                a.code.extend_from_slice(&rel32(here, 5, site.plan.at + reloc.len() as u64)?);
                for (i, &nr) in numbers.iter().enumerate() {
                    debug_assert_eq!(page + a.code.len() as u64, path_at(i));
                    path(&mut a, &mut calls, si, page, reloc, back, nr, (ring.contains(&nr), fsgsbase, known))?;
                }
            }
        }
    }
    if known && !calls.is_empty() {
        a.code.resize(a.code.len().next_multiple_of(16), 0xcc);
        let at = page + a.code.len() as u64;
        a.code.extend_from_slice(crate::x86::known::CODE);
        a.known_code = Some((at, page + a.code.len() as u64));
        a.ring_writes.push((at, page + a.code.len() as u64));
        for c in calls {
            let end = page + c as u64 + 4;
            a.code[c..c + 4].copy_from_slice(&i32::try_from(at as i128 - end as i128).ok()?.to_le_bytes());
        }
    }
    if !a.traps.is_empty() {
        a.code.resize(a.code.len().next_multiple_of(16), 0xcc);
        let at = page + a.code.len() as u64;
        a.code.extend_from_slice(&TRAP_HELPER);
        // popfq ; ret
        a.code.extend_from_slice(&[0x9d, 0xc3]);
        for c in std::mem::take(&mut a.traps) {
            let end = page + c as u64 + 4;
            a.code[c..c + 4].copy_from_slice(&i32::try_from(at as i128 - end as i128).ok()?.to_le_bytes());
        }
    }
    if !hooks.is_empty() {
        a.code.resize(a.code.len().next_multiple_of(16), 0xcc);
        let at = page + a.code.len() as u64;
        a.code.extend_from_slice(crate::x86::alloc::CODE);
        // A thread in the sampler may have taken a number for a free it has not written yet.
        a.ring_writes.push((at, page + a.code.len() as u64));
        for c in hooks {
            let end = page + c as u64 + 4;
            a.code[c..c + 4].copy_from_slice(&i32::try_from(at as i128 - end as i128).ok()?.to_le_bytes());
        }
    }
    (a.code.len() as u64 <= CODE_BYTES).then_some(a)
}

/// `op` with a rip-relative operand at `to` whose rel32 ends the instruction.
fn riprel(code: &mut Vec<u8>, page: u64, op: &[u8], to: u64) -> Option<()> {
    code.extend_from_slice(op);
    let end = page + (code.len() + 4) as u64;
    code.extend_from_slice(&i32::try_from(to as i128 - end as i128).ok()?.to_le_bytes());
    Some(())
}

/// One path: the displaced instruction, `syscall`, then either the ring's write (and its full path) or the
/// record and int3; both jump `back` (just past the original `syscall`).
#[allow(clippy::too_many_arguments)]
fn path(
    a: &mut Assembled,
    calls: &mut Vec<usize>,
    si: usize,
    page: u64,
    reloc: &[u8],
    back: u64,
    nr: u64,
    (ring, fsgsbase, known): (bool, bool, bool),
) -> Option<()> {
    let code = &mut a.code;
    let start = code.len();
    let path_at = page + start as u64;
    let counter = page + COUNTER;
    code.extend_from_slice(reloc);
    if ring {
        // The number is taken before `syscall`: a munmap is numbered before any call that gets its range back
        // from the kernel (numbered after its own `syscall`), whichever thread finishes writing first.
        // mov $1,%r11d ; lock xadd %r11,counter(%rip) ; lea 1(%r11),%r11 ; mov %r11,-16(%rsp)
        code.extend_from_slice(&[0x41, 0xbb, 1, 0, 0, 0]);
        riprel(code, page, &[0xf0, 0x4c, 0x0f, 0xc1, 0x1d], counter)?;
        let numbered = page + code.len() as u64;
        code.extend_from_slice(&[0x4d, 0x8d, 0x5b, 0x01, 0x4c, 0x89, 0x5c, 0x24, 0xf0]);
        // mov %r11,%rcx ; sub tail(%rip),%rcx ; cmp $RING_SLOTS,%rcx ; jae full
        let full_at = path_at + (reloc.len() + RING_CODE) as u64;
        code.extend_from_slice(&[0x4c, 0x89, 0xd9]);
        riprel(code, page, &[0x48, 0x2b, 0x0d], page + TAIL)?;
        code.extend_from_slice(&[0x48, 0x81, 0xf9]);
        code.extend_from_slice(&(RING_SLOTS as u32).to_le_bytes());
        riprel(code, page, &[0x0f, 0x83], full_at)?;
        // syscall ; mov %rax,-8(%rsp) ; mov -16(%rsp),%rax (the seq)
        code.extend_from_slice(&[0x0f, 0x05, 0x48, 0x89, 0x44, 0x24, 0xf8, 0x48, 0x8b, 0x44, 0x24, 0xf0]);
        // mov %eax,%ecx ; and $(RING_SLOTS-1),%ecx ; shl $7,%ecx ; lea ring(%rip),%r11 ; add %rcx,%r11
        code.extend_from_slice(&[0x89, 0xc1, 0x81, 0xe1]);
        code.extend_from_slice(&((RING_SLOTS - 1) as u32).to_le_bytes());
        debug_assert_eq!(SLOT, 1 << 7);
        code.extend_from_slice(&[0xc1, 0xe1, 0x07]);
        riprel(code, page, &[0x4c, 0x8d, 0x1d], page + RING)?;
        code.extend_from_slice(&[0x49, 0x01, 0xcb]);
        // movq $nr,8(%r11) ; movq $site,80(%r11) ; the arguments ; the result (from the red zone) ; rdfsbase ;
        // then the seq
        code.extend_from_slice(&[0x49, 0xc7, 0x43, 0x08]);
        code.extend_from_slice(&imm32(nr)?);
        code.extend_from_slice(&[0x49, 0xc7, 0x43, 0x50]);
        code.extend_from_slice(&imm32(si as u64)?);
        for m in [[0x49, 0x89, 0x7b, 0x10], [0x49, 0x89, 0x73, 0x18], [0x49, 0x89, 0x53, 0x20]] {
            code.extend_from_slice(&m);
        }
        for m in [[0x4d, 0x89, 0x53, 0x28], [0x4d, 0x89, 0x43, 0x30], [0x4d, 0x89, 0x4b, 0x38]] {
            code.extend_from_slice(&m);
        }
        code.extend_from_slice(&[0x48, 0x8b, 0x4c, 0x24, 0xf8, 0x49, 0x89, 0x4b, 0x40]);
        code.extend_from_slice(&[0xf3, 0x48, 0x0f, 0xae, 0xc1, 0x49, 0x89, 0x4b, 0x48]);
        // mov (%rsp),%rcx ; mov %rcx,88(%r11) ; mov %rsp,96(%r11): the return address and where it is (the stack
        // here is the one at the entry), so the call's caller is known without a stack copy.
        code.extend_from_slice(&[0x48, 0x8b, 0x0c, 0x24, 0x49, 0x89, 0x4b, 0x58, 0x49, 0x89, 0x63, 0x60]);
        code.extend_from_slice(&[0x49, 0x89, 0x03]);
        a.ring_writes.push((numbered, page + code.len() as u64));
        // mov -8(%rsp),%rax ; jmp back
        code.extend_from_slice(&[0x48, 0x8b, 0x44, 0x24, 0xf8]);
        riprel(code, page, &[0xe9], back)?;
        debug_assert_eq!(page + code.len() as u64, full_at);
        // The full ring: syscall ; mov -16(%rsp),%rcx (the seq) ; the record as a match path writes it.
        code.extend_from_slice(&[0x0f, 0x05, 0x48, 0x8b, 0x4c, 0x24, 0xf0]);
        let int3 = full_at + (FULL_CODE - 6) as u64;
        record_head(code, int3, fsgsbase);
        // lea -1(%rcx),%r11 ; add $1,%r11 (r11 = seq, the flags of the counter's xadd) ; mov %r11,seq(%rsp)
        code.extend_from_slice(&[0x4c, 0x8d, 0x59, 0xff, 0x49, 0x83, 0xc3, 0x01]);
        store(code, 1, 3, AT_SEQ);
        // lea (int3 - RECORD_CODE)(%rip),%rcx: rcx as `Block::rcx` gives it for a match path.
        riprel(code, page, &[0x48, 0x8d, 0x0d], int3.wrapping_sub(RECORD_CODE))?;
        trap_call(code, &mut a.traps);
        debug_assert_eq!(page + code.len() as u64, int3);
        a.int3s.insert(int3, nr);
        a.int3_sites.insert(int3, si);
        a.full_int3s.push(int3);
        // A thread on the full path has made its call too: stepped at detach up to and through its int3.
        a.ring_writes.push((full_at, int3 + 1));
        code.push(0xcc);
        riprel(code, page, &[0xe9], back)?;
        debug_assert_eq!(code.len() - start, ring_len(reloc));
        return Some(());
    }
    code.extend_from_slice(&[0x0f, 0x05]);
    let int3 = path_at + (match_len(reloc, known) - 6) as u64;
    record_head(code, int3, fsgsbase);
    if known {
        known_call(code, calls, page, (nr, si as u64), back, int3)?;
        trap_call(code, &mut a.traps);
        debug_assert_eq!(page + code.len() as u64, int3);
        a.int3s.insert(int3, nr);
        a.int3_sites.insert(int3, si);
        a.known_int3s.push(int3);
        // From the matcher's return: a number may be taken and the int3 not reached yet.
        a.ring_writes.push((int3 - (KNOWN_CODE - 38) as u64, int3 + 1));
        code.push(0xcc);
        riprel(code, page, &[0xe9], back)?;
        debug_assert_eq!(code.len() - start, match_len(reloc, true));
        return Some(());
    }
    // mov $1,%r11d ; lock xadd %r11,counter(%rip) ; lea 1(%r11),%r11 ; mov %r11,seq(%rsp)
    code.extend_from_slice(&[0x41, 0xbb, 1, 0, 0, 0]);
    riprel(code, page, &[0xf0, 0x4c, 0x0f, 0xc1, 0x1d], counter)?;
    code.extend_from_slice(&[0x4d, 0x8d, 0x5b, 0x01]);
    store(code, 1, 3, AT_SEQ);
    trap_call(code, &mut a.traps);
    debug_assert_eq!(page + code.len() as u64, int3);
    a.int3s.insert(int3, nr);
    a.int3_sites.insert(int3, si);
    code.push(0xcc);
    riprel(code, page, &[0xe9], back)?;
    debug_assert_eq!(code.len() - start, match_len(reloc, false));
    Some(())
}

fn imm32(v: u64) -> Option<[u8; 4]> {
    i32::try_from(v).ok().map(|v| v.to_le_bytes())
}

/// A record's first part: the registers, the int3's address and the thread (rdfsbase, or 0).
fn record_head(code: &mut Vec<u8>, int3: u64, fsgsbase: bool) {
    for &(_, r, reg, off) in &SAVED {
        store(code, r, reg, off);
    }
    // movabs $int3,%r11 ; mov %r11,int3(%rsp)
    code.extend_from_slice(&[0x49, 0xbb]);
    code.extend_from_slice(&int3.to_le_bytes());
    store(code, 1, 3, AT_INT3);
    // rdfsbase %r11, or xor %r11d,%r11d and a 2-byte nop ; mov %r11,thread(%rsp)
    code.extend_from_slice(if fsgsbase { &[0xf3, 0x49, 0x0f, 0xae, 0xc3] } else { &[0x45, 0x31, 0xdb, 0x66, 0x90] });
    store(code, 1, 3, AT_THREAD);
}

/// Whether the instruction at `addr` of the wrapper is a branch, and its target (for the refusal check).
pub fn branch_target(insn_bytes: &[u8], addr: u64) -> Option<u64> {
    // Short and near jumps and calls: enough for the straight-line wrappers this is used on.
    match insn_bytes {
        [0x70..=0x7f | 0xeb, d, ..] => Some(addr.wrapping_add(2).wrapping_add(*d as i8 as u64)),
        [0x0f, 0x80..=0x8f, a, b, c, d, ..] => {
            Some(addr.wrapping_add(6).wrapping_add(i32::from_le_bytes([*a, *b, *c, *d]) as u64))
        }
        [0xe8 | 0xe9, a, b, c, d, ..] => {
            Some(addr.wrapping_add(5).wrapping_add(i32::from_le_bytes([*a, *b, *c, *d]) as u64))
        }
        _ => None,
    }
}

#[path = "trampoline_alloc.rs"]
mod alloc_path;
#[path = "trampoline_slot.rs"]
mod slot;
#[path = "trampoline_trap.rs"]
mod trap;
pub use slot::Slot;
use trap::{TRAP_CALL, TRAP_HELPER, trap_call};
#[path = "trampoline_known.rs"]
mod known_path;
use alloc_path::alloc_stub;
#[path = "trampoline_page.rs"]
mod page;
use known_path::known_call;
pub use page::page_candidates;

#[cfg(test)]
#[path = "trampoline_tests.rs"]
mod tests;
