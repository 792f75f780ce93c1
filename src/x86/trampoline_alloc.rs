//! The stubs of `--malloc`'s allocation functions, part of the trampoline's assembly (see `crate::x86::alloc`).
//!
//! An allocation function's stub, for kind `k` (the sampler is `alloc.c`'s `alloc_hook`):
//! ```text
//! stub:     [jemalloc and the others: a call from the allocator's own code: jmp miss]
//!           [free, realloc: the block's bucket in the table of sampled blocks; empty: count (free: miss)]
//! count:    rdfsbase ; the thread's home slot: if it is this thread's and its count minus the size stays above 0,
//!           store it and jmp miss                              (the unsampled call: no other work)
//! slow:     cmpb $0xcc,flag(%rip) ; jne miss                 (flag: made a nop at detach or our death: off)
//!           push rax, rcx, r8, r9, rdx, rsi, rdi ; hook(ENTER|k, args at rsp, 0, free site, page)
//!           mov %rax,%r11 ; pop them ; test %r11,%r11 ; je miss ; js freefull
//!           push rdx, rsi, rdi, cookie, cookie ; call miss ; add $16,%rsp   (the function, returning here)
//!           push rax ; sub $8,%rsp ; hook(AFTER|k, args, rax, free site, page) ; add $8,%rsp
//!           pop %r10 (its result) ; pop rdi, rsi, rdx ; test %rax,%rax ; je done   (rax: the block, or 0)
//!           <the record, as a match path's> ; [the known-stack matcher: done if it wrote the call into the ring]
//!           the counter's number in r11 ; int3
//! done:     mov %r10,%rax ; ret
//! freefull: btr $63,%r11 ; int3 ; jmp miss                     (realloc's free of a sampled block, ring full)
//! miss:     <the entry's instructions, moved> ; jmp entry+len
//! ```
//! `free`'s stub skips a null pointer, asks `hook(FREE, ...)`, and stops at `freefull` when the ring is full. At
//! the sampled call's int3 the stack is the one at the function's entry, rax the block, rdi, rsi, rdx the
//! arguments: the tracer reports it as a stop at the entry, whose result is the block.

use super::known_path::known_call;
use super::*;
use crate::x86::alloc::{AllocFn, COOKIE, Moved, P_AFTER, P_ENTER, P_FREE};

/// A rel32 to fill once its target's place is known: (offset of the rel32 in the code, target label).
#[derive(Clone, Copy)]
enum Label {
    Miss,
    FreeFull,
    Done,
    Flag,
    Slow,
    Count,
}

/// A rel32 to fill: its offset in the code and its target.
type Fix = Vec<(usize, Label)>;

/// `op` followed by a rel32 to `label`, filled at the end.
fn rel(code: &mut Vec<u8>, op: &[u8], label: Label, fix: &mut Fix) {
    code.extend_from_slice(op);
    fix.push((code.len(), label));
    code.extend_from_slice(&[0, 0, 0, 0]);
}

/// What a stub is for: the function, its moved entry instructions, the site of the frees' records, the allocator's
/// own range (calls from there are skipped) and whether a null pointer's realloc is left to malloc's stub.
type StubOf<'a> = (AllocFn, &'a [Moved], usize, Option<(u64, u64)>, bool);

/// Emits the stub of one allocation function at the end of `a.code`. `hooks`, `calls`: offsets of the rel32s that
/// call the sampler and the known-stack matcher (filled once their places are known); `flag`: the offset of the
/// byte that turns sampling off. `known`: a sampled call asks the matcher before it stops, as a match path does.
#[allow(clippy::too_many_arguments)]
pub(super) fn alloc_stub(
    a: &mut Assembled,
    (hooks, calls): (&mut Vec<usize>, &mut Vec<usize>),
    flag: usize,
    si: usize,
    page: u64,
    plan: &PatchPlan,
    (f, moved, free_site, internal, null_to_malloc): StubOf<'_>,
    (fsgsbase, known): (bool, bool),
) -> Option<()> {
    let mut fix = Fix::new();
    let free = f == AllocFn::Free;
    let code = &mut a.code;
    if let Some(range) = internal {
        skip_internal(code, &mut fix, range)?;
    }
    if matches!(f, AllocFn::Free | AllocFn::Realloc | AllocFn::Reallocarray) {
        bucket_check(code, &mut fix, page, free || null_to_malloc)?;
    }
    let count = code.len();
    if free {
        rel(code, &[0xe9], Label::Miss, &mut fix);
    } else if f != AllocFn::Pvalloc {
        count_down(code, &mut fix, page, f)?;
    }
    let slow = code.len();
    // cmpb $0xcc,flag(%rip) (the immediate after the rel32) ; jne miss: sampling off (at our death the counts may
    // still run down, but nothing more is sampled or written)
    rel(code, &[0x80, 0x3d], Label::Flag, &mut fix);
    code.push(0xcc);
    rel(code, &[0x0f, 0x85], Label::Miss, &mut fix);
    let phase = if free { P_FREE } else { P_ENTER };
    hook_call(code, hooks, page, phase | f.kind() << 4, free_site, false)?;
    // mov %rax,%r11 ; pop rdi, rsi, rdx, r9, r8, rcx, rax ; test %r11,%r11
    code.extend_from_slice(&[0x49, 0x89, 0xc3, 0x5f, 0x5e, 0x5a, 0x41, 0x59, 0x41, 0x58, 0x59, 0x58, 0x4d, 0x85, 0xdb]);
    if !free {
        rel(code, &[0x0f, 0x84], Label::Miss, &mut fix);
    }
    rel(code, &[0x0f, 0x88], Label::FreeFull, &mut fix);
    if free {
        rel(&mut a.code, &[0xe9], Label::Miss, &mut fix);
    } else {
        sampled_call(a, (hooks, calls), &mut fix, page, (f, si, free_site), (fsgsbase, known))?;
    }
    let code = &mut a.code;
    let done = code.len();
    if !free {
        // mov %r10,%rax ; ret
        code.extend_from_slice(&[0x4c, 0x89, 0xd0, 0xc3]);
    }
    // freefull: btr $63,%r11 ; the trap helper ; int3 ; jmp miss
    let freefull = code.len();
    code.extend_from_slice(&[0x49, 0x0f, 0xba, 0xf3, 0x3f]);
    trap_call(code, &mut a.traps);
    let int3 = page + code.len() as u64;
    code.push(0xcc);
    a.int3s.insert(int3, 0);
    a.int3_sites.insert(int3, free_site);
    a.full_int3s.push(int3);
    a.ring_writes.push((int3 - 5 - TRAP_CALL as u64, int3 + 1));
    rel(code, &[0xe9], Label::Miss, &mut fix);
    let miss = code.len();
    for m in moved {
        let b = m.bytes_at(page + code.len() as u64)?;
        code.extend_from_slice(&b);
    }
    riprel(code, page, &[0xe9], plan.at + plan.orig.len() as u64)?;
    for (pos, label) in fix {
        let to = match label {
            Label::Miss => miss,
            Label::FreeFull => freefull,
            Label::Done => done,
            Label::Flag => flag,
            Label::Slow => slow,
            Label::Count => count,
        };
        // The flag's rel32 is followed by its immediate byte: the instruction ends one byte later.
        let end = pos + 4 + usize::from(matches!(label, Label::Flag));
        code[pos..pos + 4].copy_from_slice(&i32::try_from(to as i64 - end as i64).ok()?.to_le_bytes());
    }
    Some(())
}

/// A call from the allocator's own code (its posix_memalign calling its memalign) goes on unsampled: counted once,
/// by the outer call. mov (%rsp),%r11 ; movabs $lo,%r10 ; sub %r10,%r11 ; cmp $len,%r11 ; jb miss
fn skip_internal(code: &mut Vec<u8>, fix: &mut Fix, (lo, hi): (u64, u64)) -> Option<()> {
    code.extend_from_slice(&[0x4c, 0x8b, 0x1c, 0x24, 0x49, 0xba]);
    code.extend_from_slice(&lo.to_le_bytes());
    code.extend_from_slice(&[0x4d, 0x29, 0xd3, 0x49, 0x81, 0xfb]);
    code.extend_from_slice(&u32::try_from(hi.checked_sub(lo)?).ok().filter(|&l| l < 1 << 31)?.to_le_bytes());
    rel(code, &[0x0f, 0x82], Label::Miss, fix);
    Some(())
}

/// The freed block's bucket (rdi): empty, it is no sampled block. test %rdi,%rdi ; je count (free, and a realloc
/// whose null pointer goes to malloc: miss) ;
/// mov %rdi,%r10 ; shr $4,%r10 ; movabs $K,%r11 ; imul %r11,%r10 ; shr $50,%r10 ; shl $5,%r10 ;
/// lea table(%rip),%rax ; mov (%rax,%r10),%r11 ; or 8/16/24(%rax,%r10),%r11 ; jne slow
fn bucket_check(code: &mut Vec<u8>, fix: &mut Fix, page: u64, null_misses: bool) -> Option<()> {
    code.extend_from_slice(&[0x48, 0x85, 0xff]);
    rel(code, &[0x0f, 0x84], if null_misses { Label::Miss } else { Label::Count }, fix);
    code.extend_from_slice(&[0x49, 0x89, 0xfa, 0x49, 0xc1, 0xea, 0x04, 0x49, 0xbb]);
    code.extend_from_slice(&crate::x86::alloc::K.to_le_bytes());
    code.extend_from_slice(&[0x4d, 0x0f, 0xaf, 0xd3]);
    code.extend_from_slice(&[0x49, 0xc1, 0xea, crate::x86::alloc::BUCKET_SHIFT, 0x49, 0xc1, 0xe2, 0x05]);
    riprel(code, page, &[0x48, 0x8d, 0x05], page + crate::x86::alloc::TABLE)?;
    code.extend_from_slice(&[0x4e, 0x8b, 0x1c, 0x10]);
    for off in [8, 16, 24] {
        code.extend_from_slice(&[0x4e, 0x0b, 0x5c, 0x10, off]);
    }
    rel(code, &[0x0f, 0x85], Label::Slow, fix);
    Some(())
}

/// The thread's count in its home slot, if it is there and does not run out: rdfsbase %r11 ; mov %r11,%r10 ;
/// shr $12,%r10 ; movabs $K,%rax ; imul %rax,%r10 ; shr $54,%r10 ; shl $5,%r10 ; lea threads(%rip),%rax ;
/// cmp %r11,(%rax,%r10) ; jne slow ; r11 = count - size ; jle slow ; mov %r11,8(%rax,%r10) ; jmp miss
fn count_down(code: &mut Vec<u8>, fix: &mut Fix, page: u64, f: AllocFn) -> Option<()> {
    code.extend_from_slice(&[0xf3, 0x49, 0x0f, 0xae, 0xc3, 0x4d, 0x89, 0xda, 0x49, 0xc1, 0xea, 0x0c]);
    code.extend_from_slice(&[0x48, 0xb8]);
    code.extend_from_slice(&crate::x86::alloc::K.to_le_bytes());
    code.extend_from_slice(&[0x4c, 0x0f, 0xaf, 0xd0]);
    code.extend_from_slice(&[0x49, 0xc1, 0xea, crate::x86::alloc::THREAD_SHIFT, 0x49, 0xc1, 0xe2, 0x05]);
    riprel(code, page, &[0x48, 0x8d, 0x05], page + crate::x86::alloc::THREADS)?;
    code.extend_from_slice(&[0x4e, 0x39, 0x1c, 0x10]);
    rel(code, &[0x0f, 0x85], Label::Slow, fix);
    let mut product = |mov: [u8; 3], imul: [u8; 4]| {
        // r11 = a * b (overflow: slow) ; neg %r11 ; add 8(%rax,%r10),%r11
        code.extend_from_slice(&mov);
        code.extend_from_slice(&imul);
        rel(code, &[0x0f, 0x80], Label::Slow, fix);
        code.extend_from_slice(&[0x49, 0xf7, 0xdb, 0x4e, 0x03, 0x5c, 0x10, 0x08]);
    };
    match f {
        AllocFn::Calloc => product([0x49, 0x89, 0xfb], [0x4c, 0x0f, 0xaf, 0xde]),
        AllocFn::Reallocarray => product([0x49, 0x89, 0xf3], [0x4c, 0x0f, 0xaf, 0xda]),
        _ => {
            // mov 8(%rax,%r10),%r11 ; sub %SIZE,%r11 (rdi, rsi or rdx)
            code.extend_from_slice(&[0x4e, 0x8b, 0x5c, 0x10, 0x08, 0x49, 0x29]);
            code.push(match f {
                AllocFn::Realloc | AllocFn::AlignedAlloc => 0xf3,
                AllocFn::PosixMemalign => 0xd3,
                _ => 0xfb,
            });
        }
    }
    rel(code, &[0x0f, 0x8e], Label::Slow, fix);
    code.extend_from_slice(&[0x4e, 0x89, 0x5c, 0x10, 0x08]);
    rel(code, &[0xe9], Label::Miss, fix);
    Some(())
}

/// A sampled call: the function called from here, its block remembered (`hook(AFTER)`), then the record as a match
/// path writes it, the known-stack matcher (`known`) or the counter, and the int3 (preceded by the trap helper).
fn sampled_call(
    a: &mut Assembled,
    (hooks, calls): (&mut Vec<usize>, &mut Vec<usize>),
    fix: &mut Fix,
    page: u64,
    (f, si, free_site): (AllocFn, usize, usize),
    (fsgsbase, known): (bool, bool),
) -> Option<()> {
    let code = &mut a.code;
    let at = |code: &Vec<u8>| page + code.len() as u64;
    // push rdx, rsi, rdi ; movabs $cookie,%r11 ; push %r11 ; push %r11 ; call miss ; add $16,%rsp (the cookie, the
    // return address xor COOKIE, twice: how an unwinder of a stack inside the function steps over this frame, see
    // `crate::analysis::unwind`)
    code.extend_from_slice(&[0x52, 0x56, 0x57, 0x49, 0xbb]);
    let ret = at(code) + 8 + 4 + 5;
    code.extend_from_slice(&(COOKIE ^ ret).to_le_bytes());
    code.extend_from_slice(&[0x41, 0x53, 0x41, 0x53]);
    rel(code, &[0xe8], Label::Miss, fix);
    debug_assert_eq!(at(code), ret);
    code.extend_from_slice(&[0x48, 0x83, 0xc4, 0x10]);
    // push %rax ; sub $8,%rsp
    code.extend_from_slice(&[0x50, 0x48, 0x83, 0xec, 0x08]);
    hook_call(code, hooks, page, P_AFTER | f.kind() << 4, free_site, true)?;
    // add $8,%rsp ; pop %r10 ; pop rdi, rsi, rdx ; test %rax,%rax ; je done
    code.extend_from_slice(&[0x48, 0x83, 0xc4, 0x08, 0x41, 0x5a, 0x5f, 0x5e, 0x5a, 0x48, 0x85, 0xc0]);
    rel(code, &[0x0f, 0x84], Label::Done, fix);
    let int3 = at(code) + if known { (RECORD_HEAD + KNOWN_CODE) as u64 } else { RECORD_CODE };
    record_head(code, int3, fsgsbase);
    if known {
        // A stack unwound before: written into the ring by the matcher, and back to `done` (just past the int3)
        // without a stop.
        known_call(code, calls, page, (0, si as u64), int3 + 1, int3)?;
        trap_call(code, &mut a.traps);
        a.known_int3s.push(int3);
        a.ring_writes.push((int3 - (KNOWN_CODE - 38) as u64, int3 + 1));
    } else {
        // mov $1,%r11d ; lock xadd %r11,counter(%rip) ; lea 1(%r11),%r11 ; mov %r11,seq(%rsp)
        code.extend_from_slice(&[0x41, 0xbb, 1, 0, 0, 0]);
        riprel(code, page, &[0xf0, 0x4c, 0x0f, 0xc1, 0x1d], page + COUNTER)?;
        code.extend_from_slice(&[0x4d, 0x8d, 0x5b, 0x01]);
        store(code, 1, 3, AT_SEQ);
        trap_call(code, &mut a.traps);
        // From its number (just past the counter's `lock xadd`) to its int3.
        a.ring_writes.push((int3 - 9 - TRAP_CALL as u64, int3 + 1));
    }
    debug_assert_eq!(page + a.code.len() as u64, int3);
    a.code.push(0xcc);
    a.int3s.insert(int3, 0);
    a.int3_sites.insert(int3, si);
    Some(())
}

/// Saves what the function may need (all but `after`), then `alloc_hook(op, args, rax, free_site, page)`. With
/// `after` the caller has pushed rdx, rsi, rdi, rax and 8 bytes: the arguments are 16 bytes up.
fn hook_call(
    code: &mut Vec<u8>,
    hooks: &mut Vec<usize>,
    page: u64,
    op: u64,
    free_site: usize,
    after: bool,
) -> Option<()> {
    if after {
        // lea 16(%rsp),%rsi ; mov %rax,%rdx
        code.extend_from_slice(&[0x48, 0x8d, 0x74, 0x24, 0x10, 0x48, 0x89, 0xc2]);
    } else {
        // push rax, rcx, r8, r9, rdx, rsi, rdi ; mov %rsp,%rsi ; xor %edx,%edx
        code.extend_from_slice(&[0x50, 0x51, 0x41, 0x50, 0x41, 0x51, 0x52, 0x56, 0x57, 0x48, 0x89, 0xe6, 0x31, 0xd2]);
    }
    // mov $op,%edi ; mov $free_site,%ecx ; lea page(%rip),%r8 ; call hook
    code.push(0xbf);
    code.extend_from_slice(&u32::try_from(op).ok()?.to_le_bytes());
    code.push(0xb9);
    code.extend_from_slice(&u32::try_from(free_site).ok()?.to_le_bytes());
    riprel(code, page, &[0x4c, 0x8d, 0x05], page)?;
    code.push(0xe8);
    hooks.push(code.len());
    code.extend_from_slice(&[0, 0, 0, 0]);
    Some(())
}
