//! The kernel's x86_64 signal frame (`struct rt_sigframe`) as it lies on a handler's stack, and where in a stack
//! copy the frames of interrupted code are: a handler on an alternate signal stack (`sigaltstack`) runs on
//! another stack than the code it interrupted, so a copy of the handler's stack alone ends the unwind at the
//! signal frame. The tracer finds the frames here in the copy it took, and copies the interrupted stack too.
//!
//! Layout (arch/x86/include/asm/sigframe.h, uapi/asm/sigcontext.h): `pretcode` (the handler's return address:
//! the restorer, glibc's `__restore_rt`), then the `ucontext`: `uc_flags`, `uc_link`, `uc_stack` (24 bytes),
//! then `uc_mcontext`, whose registers are r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip.

/// glibc's `__restore_rt`: `mov $15, %rax; syscall` (rt_sigreturn). libgcc's x86_64 fallback matches these bytes.
pub const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
/// Offset of `uc_mcontext` in the `ucontext`.
pub const MCONTEXT: u64 = 40;
/// Offset of the saved rsp in `uc_mcontext`.
pub const MC_RSP: u64 = 15 * 8;
/// How many stacks one capture copies at most, its own included.
pub const MAX_STACKS: usize = 4;

/// Where `restorer` addresses occur in `bytes` (a stack copy starting at `base`, 8-byte aligned): each is a
/// signal frame's `pretcode`. Returns the interrupted code's stack pointer of each frame, in order, for those
/// whose stack pointer lies outside every range in `copied` (start, length): the stacks still to copy. Values
/// read are unchecked data: a stale word that looks like a frame only costs a copy, never a wrong frame (the
/// unwinder reads the copies as memory, and follows only what its rules reach).
pub fn interrupted_stacks(base: u64, bytes: &[u8], restorers: &[u64], copied: &[(u64, usize)]) -> Vec<u64> {
    let mut out = Vec::new();
    if restorers.is_empty() || !base.is_multiple_of(8) {
        return out;
    }
    let word = |off: usize| -> Option<u64> {
        let b = bytes.get(off..off.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    };
    let rsp_at = (8 + MCONTEXT + MC_RSP) as usize;
    for (i, w) in bytes.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        if !restorers.contains(&w) {
            continue;
        }
        let Some(sp) = i.checked_mul(8).and_then(|o| o.checked_add(rsp_at)).and_then(word) else { continue };
        let inside = |&(s, len): &(u64, usize)| sp >= s && sp - s < len as u64;
        if sp == 0 || copied.iter().any(inside) || out.contains(&sp) {
            continue;
        }
        out.push(sp);
        if out.len() >= MAX_STACKS {
            break;
        }
    }
    out
}

/// Where the `RESTORE_RT` bytes occur in `code` (an executable segment loaded at `addr`): the restorers.
pub fn find_restorers(addr: u64, code: &[u8]) -> Vec<u64> {
    code.windows(RESTORE_RT.len())
        .enumerate()
        .filter(|(_, w)| *w == RESTORE_RT)
        .filter_map(|(i, _)| addr.checked_add(i as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_interrupted_stack_of_each_signal_frame_not_yet_copied() {
        let base = 0x5000u64;
        let mut st = vec![0u8; 0x400];
        let put = |st: &mut Vec<u8>, off: usize, v: u64| st[off..off + 8].copy_from_slice(&v.to_le_bytes());
        let rsp_at = 8 + (MCONTEXT + MC_RSP) as usize;
        // A frame that interrupted another stack, one that interrupted this one, one cut off by the copy's end.
        put(&mut st, 0x40, 0x7777_0000);
        put(&mut st, 0x40 + rsp_at, 0x7ffc_1230);
        put(&mut st, 0x100, 0x7777_0000);
        put(&mut st, 0x100 + rsp_at, base + 0x300);
        put(&mut st, 0x3f8, 0x7777_0000);
        assert_eq!(interrupted_stacks(base, &st, &[0x7777_0000], &[(base, st.len())]), [0x7ffc_1230]);
        assert!(interrupted_stacks(base, &st, &[0x7777_0000], &[(base, st.len()), (0x7ffc_1000, 0x1000)]).is_empty());
        assert!(interrupted_stacks(base, &st, &[], &[]).is_empty());
        assert!(interrupted_stacks(base + 1, &st, &[0x7777_0000], &[]).is_empty());
        // Short or odd-sized copies never panic.
        assert!(interrupted_stacks(base, &st[..0x45], &[0x7777_0000], &[]).is_empty());
    }

    #[test]
    fn restorers_by_their_bytes() {
        let mut code = vec![0x90u8; 64];
        code[10..19].copy_from_slice(&RESTORE_RT);
        assert_eq!(find_restorers(0x1000, &code), [0x100a]);
        assert!(find_restorers(0, &code[..8]).is_empty());
    }
}
