//! The native part of a known stack (see `crate::x86::known`): from a capture unwound to its outermost frame,
//! every input the unwind used, so that a later call with the same inputs is known to unwind the same way.
//!
//! The unwind is run again over a copy that logs each stack word read, from the stack pointer and the
//! instruction pointer alone (every other register unknown): if it gives the same frames, the words read are
//! all it used. If not, rbp is given too (code with a frame pointer) and checked from the record; otherwise the
//! stack is not made known. Of the words read, those that make no difference are left out: a saved register
//! that no later rule uses (changed in a copy, twice, the unwind is the same). Only stacks unwound by their CFI
//! alone are made known (no frame-pointer or PLT guess, no signal frame), whose rules compute each frame from
//! the words they read. The capture kept for later calls is cut to the depth the checks reach, and unwound once
//! more to prove that nothing past it was needed.

use crate::analysis::unwind::{self, End, How, ModuleLookup, RA, RBP, RSP, StackWindow, UnwindRegs, Unwound};
use crate::model::event::StackCapture;
use crate::model::known::{Op, Proposal};
use crate::model::window::Window;

/// rbp's place in the record below rsp (`trampoline::SAVED`: at rsp - 40, the record being the 128 bytes below).
const RECORD_RBP: i32 = 128 - 40;

/// The proposal for capture `c` (with its hint), which unwound to `u`, as known stack `id`; `None` when it cannot
/// be made known.
pub fn propose(
    c: &StackCapture,
    u: &Unwound,
    modules: &mut dyn ModuleLookup,
    max_depth: usize,
    id: u32,
) -> Option<Proposal> {
    let hint = c.known.as_deref()?;
    let by_cfi =
        u.frames.first().is_some_and(|f| f.how == How::Regs) && u.frames[1..].iter().all(|f| f.how == How::Cfi);
    if !by_cfi || !matches!(u.end, End::Outermost(_)) || !c.more.is_empty() {
        return None;
    }
    if let Some((lo, hi)) = hint.interp
        && u.frames.iter().any(|f| (lo..hi).contains(&f.pc))
    {
        return None;
    }
    let rsp = c.regs.sp();
    let full = UnwindRegs::from_regs(&c.regs);
    let mut bare = UnwindRegs::default();
    for r in [RSP, RA] {
        bare.0[r] = full.get(r);
    }
    let mut with_rbp = bare;
    with_rbp.0[RBP] = full.get(RBP);
    let (reads, regs, rbp) = [(bare, false), (with_rbp, true)].into_iter().find_map(|(regs, rbp)| {
        let w = StackWindow::new(rsp, &c.stack, c.asked).logged();
        (unwind::unwind(regs, &w, modules, max_depth) == *u).then(|| (w.log.map(|l| l.into_inner()), regs, rbp))
    })?;
    let mut offs: Vec<u64> = reads?.into_iter().map(|a| a.checked_sub(rsp)).collect::<Option<_>>()?;
    offs.sort_unstable();
    offs.dedup();
    // The words whose value changes the unwind.
    let mut copy = c.stack.to_vec();
    offs.retain(|&off| {
        let Some(at) = usize::try_from(off).ok().filter(|&a| a + 8 <= copy.len()) else { return true };
        let orig: [u8; 8] = copy[at..at + 8].try_into().expect("8 bytes");
        let used = [0x0000_7a5a_5a5a_5a58u64, 0x0100_0000_0000_1008].iter().any(|x| {
            copy[at..at + 8].copy_from_slice(&(u64::from_le_bytes(orig) ^ x).to_le_bytes());
            let w = StackWindow::new(rsp, &copy, c.asked);
            unwind::unwind(regs, &w, modules, max_depth) != *u
        });
        copy[at..at + 8].copy_from_slice(&orig);
        used
    });
    let word = |off: u64| -> Option<u64> {
        let at = usize::try_from(off).ok()?;
        Some(u64::from_le_bytes(c.stack.get(at..at.checked_add(8)?)?.try_into().ok()?))
    };
    let mut ops = Vec::with_capacity(offs.len() + 1 + hint.python.len());
    for off in offs {
        ops.push(Op::stack(i32::try_from(off).ok()?, word(off)?));
    }
    if rbp {
        ops.push(Op {
            untag: 0,
            base: crate::x86::known::BASE_RECORD,
            dest: 0,
            width: 8,
            off: RECORD_RBP,
            expect: c.regs.0.rbp,
        });
    }
    ops.extend_from_slice(&hint.python);
    let depth = ops.iter().filter(|o| o.base == crate::x86::known::BASE_RSP).map(|o| o.off as u64 + 8).max()?;
    if depth > c.stack.len() as u64 || ops.len() > crate::python::known::MAX_OPS {
        return None;
    }
    let cut = StackCapture {
        regs: c.regs,
        stack: Window::from(c.stack[..depth as usize].to_vec()),
        asked: c.asked,
        python: c.python.clone(),
        more: Vec::new(),
        known: None,
        known_id: Some(id),
    };
    let w = StackWindow::new(rsp, &cut.stack, cut.asked);
    if unwind::unwind(full, &w, modules, max_depth) != *u {
        return None;
    }
    Some(Proposal {
        id,
        tid: hint.tid,
        thread: hint.thread,
        rsp,
        int3: hint.int3,
        depth: depth as u32,
        python: !hint.python.is_empty() || hint.interp.is_some(),
        ops,
        capture: cut,
    })
}
