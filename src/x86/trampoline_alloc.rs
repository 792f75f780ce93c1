//! The stubs of `--malloc`'s allocation functions, part of the trampoline's assembly (see `crate::x86::alloc`).
//!
//! An allocation function's stub, for kind `k` (the sampler is `alloc.c`'s `alloc_hook`):
//! ```text
//! stub:     cmpb $0xcc,flag(%rip) ; jne miss                 (flag: made a nop at detach or our death: off)
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
}

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
    (f, moved, free_site): (AllocFn, &[Moved], usize),
    (fsgsbase, known): (bool, bool),
) -> Option<()> {
    let start = a.code.len();
    let mut fix: Vec<(usize, Label)> = Vec::new();
    let code = &mut a.code;
    let at = |code: &Vec<u8>| page + code.len() as u64;
    let rel = |code: &mut Vec<u8>, op: &[u8], label: Label, fix: &mut Vec<(usize, Label)>| {
        code.extend_from_slice(op);
        fix.push((code.len(), label));
        code.extend_from_slice(&[0, 0, 0, 0]);
    };
    // cmpb $0xcc,flag(%rip) (the immediate after the rel32) ; jne miss
    rel(code, &[0x80, 0x3d], Label::Flag, &mut fix);
    code.push(0xcc);
    rel(code, &[0x0f, 0x85], Label::Miss, &mut fix);
    let free = f == AllocFn::Free;
    if free {
        // test %rdi,%rdi ; je miss
        code.extend_from_slice(&[0x48, 0x85, 0xff]);
        rel(code, &[0x0f, 0x84], Label::Miss, &mut fix);
    }
    let phase = if free { P_FREE } else { P_ENTER };
    hook_call(code, hooks, page, phase | f.kind() << 4, free_site, false)?;
    // mov %rax,%r11 ; pop rdi, rsi, rdx, r9, r8, rcx, rax ; test %r11,%r11
    code.extend_from_slice(&[0x49, 0x89, 0xc3, 0x5f, 0x5e, 0x5a, 0x41, 0x59, 0x41, 0x58, 0x59, 0x58, 0x4d, 0x85, 0xdb]);
    if !free {
        rel(code, &[0x0f, 0x84], Label::Miss, &mut fix);
    }
    rel(code, &[0x0f, 0x88], Label::FreeFull, &mut fix);
    if free {
        rel(code, &[0xe9], Label::Miss, &mut fix);
    } else {
        // push rdx, rsi, rdi ; movabs $cookie,%r11 ; push %r11 ; push %r11 ; call miss ; add $16,%rsp
        // (the cookie, the return address xor COOKIE, twice: how an unwinder of a stack inside the function
        // steps over this frame, see `crate::analysis::unwind`)
        code.extend_from_slice(&[0x52, 0x56, 0x57, 0x49, 0xbb]);
        let ret = at(code) + 8 + 4 + 5;
        code.extend_from_slice(&(COOKIE ^ ret).to_le_bytes());
        code.extend_from_slice(&[0x41, 0x53, 0x41, 0x53]);
        rel(code, &[0xe8], Label::Miss, &mut fix);
        debug_assert_eq!(at(code), ret);
        code.extend_from_slice(&[0x48, 0x83, 0xc4, 0x10]);
        // push %rax ; sub $8,%rsp
        code.extend_from_slice(&[0x50, 0x48, 0x83, 0xec, 0x08]);
        hook_call(code, hooks, page, P_AFTER | f.kind() << 4, free_site, true)?;
        // add $8,%rsp ; pop %r10 ; pop rdi, rsi, rdx ; test %rax,%rax ; je done
        code.extend_from_slice(&[0x48, 0x83, 0xc4, 0x08, 0x41, 0x5a, 0x5f, 0x5e, 0x5a, 0x48, 0x85, 0xc0]);
        rel(code, &[0x0f, 0x84], Label::Done, &mut fix);
        let int3 = at(code) + if known { (RECORD_HEAD + KNOWN_CODE) as u64 } else { RECORD_CODE };
        record_head(code, int3, fsgsbase);
        if known {
            // A stack unwound before: written into the ring by the matcher, and back to `done` (just past the
            // int3) without a stop.
            known_call(code, calls, page, (0, si as u64), int3 + 1, int3)?;
            a.known_int3s.push(int3);
            a.ring_writes.push((int3 - (KNOWN_CODE - 38) as u64, int3 + 1));
        } else {
            // mov $1,%r11d ; lock xadd %r11,counter(%rip) ; lea 1(%r11),%r11 ; mov %r11,seq(%rsp)
            code.extend_from_slice(&[0x41, 0xbb, 1, 0, 0, 0]);
            riprel(code, page, &[0xf0, 0x4c, 0x0f, 0xc1, 0x1d], page + COUNTER)?;
            code.extend_from_slice(&[0x4d, 0x8d, 0x5b, 0x01]);
            store(code, 1, 3, AT_SEQ);
            // From its number (just past the counter's `lock xadd`) to its int3.
            a.ring_writes.push((int3 - 9, int3 + 1));
        }
        debug_assert_eq!(at(code), int3);
        code.push(0xcc);
        a.int3s.insert(int3, 0);
        a.int3_sites.insert(int3, si);
    }
    let code = &mut a.code;
    let done = code.len();
    if !free {
        // mov %r10,%rax ; ret
        code.extend_from_slice(&[0x4c, 0x89, 0xd0, 0xc3]);
    }
    // freefull: btr $63,%r11 ; int3 ; jmp miss
    let freefull = code.len();
    code.extend_from_slice(&[0x49, 0x0f, 0xba, 0xf3, 0x3f]);
    let int3 = page + code.len() as u64;
    code.push(0xcc);
    a.int3s.insert(int3, 0);
    a.int3_sites.insert(int3, free_site);
    a.full_int3s.push(int3);
    a.ring_writes.push((int3 - 5, int3 + 1));
    rel(code, &[0xe9], Label::Miss, &mut fix);
    let miss = code.len();
    for m in moved {
        let b = m.bytes_at(page + code.len() as u64)?;
        code.extend_from_slice(&b);
    }
    riprel(code, page, &[0xe9], plan.at + plan.orig.len() as u64)?;
    for (pos, label) in fix {
        let to = match label {
            Label::Miss => page + miss as u64,
            Label::FreeFull => page + freefull as u64,
            Label::Done => page + done as u64,
            Label::Flag => page + flag as u64,
        };
        // The flag's rel32 is followed by its immediate byte: the instruction ends one byte later.
        let end = page + pos as u64 + 4 + u64::from(matches!(label, Label::Flag));
        code[pos..pos + 4].copy_from_slice(&i32::try_from(to as i128 - end as i128).ok()?.to_le_bytes());
    }
    debug_assert!(code.len() > start);
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
