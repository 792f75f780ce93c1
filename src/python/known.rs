//! The Python part of a known stack (see `crate::x86::known`): checks that a later call's frame chain is the one
//! a walk found, word for word, so that the walk would find the same frames again.
//!
//! Only CPython 3.11 and 3.12, whose chain starts at the `_PyCFrame` of the innermost eval loop, a local of
//! `_PyEval_EvalFrameDefault` on the C stack: the stack the native checks match. Its `current_frame` is read
//! there (a stack word), and from it each frame's code object, instruction, owner, entry flag and link, and
//! each code object's identity (the fields the walk fingerprints it by). Each pointer is followed only once it
//! equals the one the walk followed: a live frame's link leads to a live frame, a live frame's code object is
//! alive. 3.9, 3.10 and 3.13+ start at the thread state, which is not on the stack (a thread state can be freed
//! while its thread runs on): their calls keep stopping.

use super::layout::{FRAME_OWNED_BY_CSTACK, FrameKind, Layout};
use crate::model::known::Op;

/// One frame of a walked chain: its address and the fields the walk read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub addr: u64,
    pub code: u64,
    pub instr: u64,
    pub back: u64,
    pub owner: u8,
    pub entry: u8,
}

/// Frames kept per walk for the checks; a deeper chain gets none (its calls keep stopping).
pub const MAX_LINKS: usize = 64;
/// Checks of one stack at most (the matcher runs them all at every call).
pub const MAX_OPS: usize = 512;

/// The checks of the chain a walk found from `cframe` (`chain`, innermost first), for a call whose stack copy
/// from `rsp` is `stack_len` bytes; `fingerprint` gives the fields the walk identified each code object by (type,
/// file name, name, qualified name, line table, first line). `None` when they cannot be made (not 3.11/3.12, the
/// cframe is not in the copy, the chain was cut, a code object not named, too many checks).
pub fn chain_ops(
    l: &Layout,
    (cframe, chain): (u64, &[Link]),
    rsp: u64,
    stack_len: usize,
    fingerprint: impl Fn(u64) -> Option<[u64; 6]>,
) -> Option<Vec<Op>> {
    l.ts_cframe?;
    let at = cframe.checked_sub(rsp)?.checked_add(l.cframe_current_frame)?;
    if chain.is_empty() || chain.len() >= MAX_LINKS || at + 8 > stack_len as u64 {
        return None;
    }
    if chain.last()?.back != 0 || chain.windows(2).any(|w| w[0].back != w[1].addr) {
        return None;
    }
    let off = |v: u64| i32::try_from(v).ok();
    let mut ops = vec![Op { base: 0, dest: 2, width: 8, off: off(at)?, expect: chain[0].addr }];
    let mut checked: Vec<u64> = Vec::new();
    for (i, link) in chain.iter().enumerate() {
        let (here, next) = (2 + (i % 2) as u8, 2 + ((i + 1) % 2) as u8);
        if let Some(o) = l.frame_owner {
            ops.push(Op { base: here, dest: 0, width: 1, off: off(o)?, expect: link.owner as u64 });
        }
        // A 3.12 shim (the C stack's entry frame): the walk reads only its owner and link.
        let shim = l.frames == FrameKind::Shim312 && link.owner >= FRAME_OWNED_BY_CSTACK;
        if !shim {
            ops.push(Op { base: here, dest: 4, width: 8, off: off(l.frame_code)?, expect: link.code });
            if link.code == 0 {
                return None;
            }
            if !checked.contains(&link.code) {
                checked.push(link.code);
                let [ty, file, name, qualname, table, first] = fingerprint(link.code)?;
                let mut word = |o: u64, width: u8, expect: u64| -> Option<()> {
                    ops.push(Op { base: 4, dest: 0, width, off: off(o)?, expect });
                    Some(())
                };
                // The fields the walk fingerprints a code object by (`Walker::codes_of`).
                word(8, 8, ty)?;
                word(l.code_filename, 8, file)?;
                word(l.code_name, 8, name)?;
                if let Some(q) = l.code_qualname {
                    word(q, 8, qualname)?;
                }
                word(l.code_linetable, 8, table)?;
                word(l.code_firstlineno, 4, first)?;
            }
            ops.push(Op { base: here, dest: 0, width: 8, off: off(l.frame_instr)?, expect: link.instr });
        }
        if let Some(o) = l.frame_is_entry.filter(|_| !shim) {
            ops.push(Op { base: here, dest: 0, width: 1, off: off(o)?, expect: link.entry as u64 });
        }
        let dest = if link.back != 0 { next } else { 0 };
        ops.push(Op { base: here, dest, width: 8, off: off(l.frame_back)?, expect: link.back });
    }
    (ops.len() <= MAX_OPS).then_some(ops)
}
