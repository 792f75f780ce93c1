//! The Python part of a known stack (see `crate::x86::known`): checks that a later call's frame chain is the one
//! a walk found, word for word, so that the walk would find the same frames again.
//!
//! The chain's start: in CPython 3.11 and 3.12 the `_PyCFrame` of the innermost eval loop, a local of
//! `_PyEval_EvalFrameDefault` on the C stack (the stack the native checks match), whose `current_frame` is read
//! there (a stack word). From 3.13 on the chain starts at the thread state's `current_frame`, and a thread state
//! is heap memory that can be freed while its thread runs on: it is reached only through the thread's own bound
//! thread state (the one `PyGILState_GetThisThreadState` returns, kept in the thread's descriptor or static TLS
//! at a fixed offset from its thread pointer, see `crate::live::pystate`), found equal to the one the walk
//! read, and only while the runtime is not finalizing (finalization frees the other threads' states without
//! clearing what they bound). From there each frame's code object, instruction, owner, entry flag and link, and
//! each code object's identity (the fields the walk fingerprints it by). Each pointer is followed only once it
//! equals the one the walk followed: a live frame's link leads to a live frame, a live frame's code object is
//! alive. 3.9 and 3.10 start at a thread state found another way: their calls keep stopping.

use super::layout::{FRAME_OWNED_BY_CSTACK, FrameKind, Layout};
use crate::model::known::Op;
use crate::x86::known::{BASE_RSP, BASE_TP, CONSTANT};

/// One frame of a walked chain: its address and the fields the walk read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub addr: u64,
    pub code: u64,
    pub instr: u64,
    pub back: u64,
    pub owner: u8,
    pub entry: u8,
    /// 3.9/3.10: the frame object's type (checked by the walk); 0 for an interpreter frame.
    pub ty: u64,
}

/// Frames kept per walk for the checks; a deeper chain gets none (its calls keep stopping).
pub const MAX_LINKS: usize = 64;
/// Checks of one stack at most (the matcher runs them all at every call).
pub const MAX_OPS: usize = 512;

/// Where a walk's chain started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// 3.11/3.12: the innermost eval loop's `_PyCFrame`, on the C stack.
    CFrame(u64),
    /// 3.13+: thread state `tstate`, the thread's bound one, kept at `slot` from its thread pointer;
    /// `finalizing` is the address of `_PyRuntime._finalizing`.
    Bound { tstate: u64, slot: i32, finalizing: u64 },
}

/// The checks of the chain a walk found from `start` (`chain`, innermost first), for a call whose stack copy
/// from `rsp` is `stack_len` bytes; `fingerprint` gives the fields the walk identified each code object by (type,
/// file name, name, qualified name, line table, first line). `None` when they cannot be made (a start that
/// does not fit the version, the cframe is not in the copy, the chain was cut or is longer than [`MAX_LINKS`], a
/// code object not named, too many checks).
pub fn chain_ops(
    l: &Layout,
    (start, chain): (Start, &[Link]),
    rsp: u64,
    stack_len: usize,
    fingerprint: impl Fn(u64) -> Option<[u64; 6]>,
) -> Option<Vec<Op>> {
    if chain.is_empty() || chain.len() >= MAX_LINKS {
        return None;
    }
    if chain.last()?.back != 0 || chain.windows(2).any(|w| w[0].back != w[1].addr) {
        return None;
    }
    let off = |v: u64| i32::try_from(v).ok();
    let mut ops = match start {
        Start::CFrame(cframe) => {
            l.ts_cframe?;
            let at = cframe.checked_sub(rsp)?.checked_add(l.cframe_current_frame)?;
            if at + 8 > stack_len as u64 {
                return None;
            }
            vec![Op { untag: 0, base: BASE_RSP, dest: 2, width: 8, off: off(at)?, expect: chain[0].addr }]
        }
        Start::Bound { tstate, slot, finalizing } => {
            let current = l.ts_frame.filter(|_| l.ts_cframe.is_none())?;
            vec![
                Op { untag: 0, base: 0, dest: 5, width: CONSTANT, off: 0, expect: finalizing },
                Op { untag: 0, base: 5, dest: 0, width: 8, off: 0, expect: 0 },
                Op { untag: 0, base: BASE_TP, dest: 2, width: 8, off: slot, expect: tstate },
                Op { untag: 0, base: 2, dest: 2, width: 8, off: off(current)?, expect: chain[0].addr },
            ]
        }
    };
    let mut checked: Vec<u64> = Vec::new();
    for (i, link) in chain.iter().enumerate() {
        let (here, next) = (2 + (i % 2) as u8, 2 + ((i + 1) % 2) as u8);
        if let Some(o) = l.frame_owner {
            ops.push(Op { untag: 0, base: here, dest: 0, width: 1, off: off(o)?, expect: link.owner as u64 });
        }
        // A 3.12 shim (the C stack's entry frame): the walk reads only its owner and link.
        let shim = l.frames == FrameKind::Shim312 && link.owner >= FRAME_OWNED_BY_CSTACK;
        if !shim {
            let (untag, code) = (l.frame_code_tags as u8, link.code & !l.frame_code_tags);
            if link.ty != 0 {
                ops.push(Op { untag: 0, base: here, dest: 0, width: 8, off: 8, expect: link.ty });
            }
            ops.push(Op { untag, base: here, dest: 4, width: 8, off: off(l.frame_code)?, expect: link.code });
            if code == 0 {
                return None;
            }
            if !checked.contains(&code) {
                checked.push(code);
                let [ty, file, name, qualname, table, first] = fingerprint(code)?;
                let mut word = |o: u64, width: u8, expect: u64| -> Option<()> {
                    ops.push(Op { untag: 0, base: 4, dest: 0, width, off: off(o)?, expect });
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
            // 3.9/3.10: `f_lasti`, an int.
            let width = if l.frames == FrameKind::Objects { 4 } else { 8 };
            ops.push(Op { untag: 0, base: here, dest: 0, width, off: off(l.frame_instr)?, expect: link.instr });
        }
        if let Some(o) = l.frame_is_entry.filter(|_| !shim) {
            ops.push(Op { untag: 0, base: here, dest: 0, width: 1, off: off(o)?, expect: link.entry as u64 });
        }
        let dest = if link.back != 0 { next } else { 0 };
        ops.push(Op { untag: 0, base: here, dest, width: 8, off: off(l.frame_back)?, expect: link.back });
    }
    (ops.len() <= MAX_OPS).then_some(ops)
}
