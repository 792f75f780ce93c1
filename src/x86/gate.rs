//! The call gate: a few instructions syscatch writes into the unused tail of libc's code page, through which a
//! held thread runs a system call syscatch asks of it (the trap pad's mmap, mprotect, rt_sigaction; `--fast`'s
//! page), with no single step and no trap. The tracer sees the call at its syscall-entry and -exit stops
//! (PTRACE_SYSCALL) and, at the exit stop, puts the thread's registers and signal mask back itself. If syscatch
//! dies at any moment of that (SIGKILL), the kernel lets the thread go on through the gate, which finishes the
//! call, puts back the signal mask and every register it used, and returns to where the thread was: a single
//! step's trap, by contrast, kills a thread whose tracer is gone, and leaves it holding the injected registers.
//!
//! Set-up (the tracer, thread stopped with stack pointer `S`): a block at `S - BELOW` below the red zone holds
//! the call's number and six arguments, the thread's signal mask and the rip it goes back to; rip = the gate,
//! rsp = the block, every other register the thread's own. The gate pushes rflags and the nine registers the
//! call and its own code touch, loads the call from the block, `syscall`; then (reached only without syscatch)
//! rt_sigprocmask(SIG_SETMASK, block's mask), pops them back, and `ret 128` from the rip slot at `S - 136`
//! leaves rsp at `S`. Source: `docs/gate.S`. Pure: the layout and bytes only.

/// The gate's machine code.
pub const CODE: &[u8] = &[
    0x9c, 0x50, 0x57, 0x56, 0x52, 0x41, 0x52, 0x41, 0x50, 0x41, 0x51, 0x51, 0x41, 0x53, 0x48, 0x8b, 0x44, 0x24, 0x50,
    0x48, 0x8b, 0x7c, 0x24, 0x58, 0x48, 0x8b, 0x74, 0x24, 0x60, 0x48, 0x8b, 0x54, 0x24, 0x68, 0x4c, 0x8b, 0x54, 0x24,
    0x70, 0x4c, 0x8b, 0x44, 0x24, 0x78, 0x4c, 0x8b, 0x8c, 0x24, 0x80, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xb8, 0x0e, 0x00,
    0x00, 0x00, 0xbf, 0x02, 0x00, 0x00, 0x00, 0x48, 0x8d, 0xb4, 0x24, 0x88, 0x00, 0x00, 0x00, 0x31, 0xd2, 0x41, 0xba,
    0x08, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x41, 0x5b, 0x59, 0x41, 0x59, 0x41, 0x58, 0x41, 0x5a, 0x5a, 0x5e, 0x5f, 0x58,
    0x9d, 0x48, 0x8d, 0x64, 0x24, 0x40, 0xc2, 0x80, 0x00,
];

/// Offset of the instruction after the gate's `syscall` (where the exit stop leaves rip).
pub const AFTER_SYSCALL: u64 = 0x36;
/// The block is this far below the thread's stack pointer: the 128-byte red zone, the rip slot, 64 bytes.
pub const BELOW: u64 = 200;
/// Bytes the gate pushes below its block (rflags and nine registers).
pub const PUSHED: u64 = 80;
/// How far before a place the gate wants free bytes after the code it follows, and its alignment.
pub const MARGIN: u64 = 16;

/// The block written at `S - BELOW`: the call's number and arguments, the thread's signal mask, the rip it
/// returns to (at `S - 136`).
pub fn block(nr: u64, args: [u64; 6], mask: u64, rip: u64) -> [u8; 72] {
    let mut b = [0u8; 72];
    let words = [nr, args[0], args[1], args[2], args[3], args[4], args[5], mask, rip];
    for (chunk, w) in b.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    b
}

/// Where in a free tail `[start, start + len)` of a code page the gate goes: past a margin, aligned; None if it
/// does not fit.
pub fn place(start: u64, len: u64) -> Option<u64> {
    let at = start.checked_add(2 * MARGIN - 1)? & !(MARGIN - 1);
    let end = start.checked_add(len)?;
    (at.checked_add(CODE.len() as u64)? <= end).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::breakpoints;

    #[test]
    fn the_code_is_what_the_source_says() {
        let (text, decoded) = breakpoints::listing(CODE);
        assert_eq!(decoded, CODE.len(), "{text:#?}");
        assert_eq!(text[0], "0 pushfq ", "{text:#?}");
        assert!(text.contains(&format!("{:x} syscall ", AFTER_SYSCALL - 2)), "{text:#?}");
        // The block's words as the gate reads them: rax = nr at rsp+80 (= the block, after ten pushes), the mask
        // at +136, and the return through the rip slot leaves rsp where it was before the block.
        assert!(text.contains(&"e mov rax, qword ptr [rsp + 0x50]".to_string()), "{text:#?}");
        assert!(text.contains(&"40 lea rsi, [rsp + 0x88]".to_string()), "{text:#?}");
        assert_eq!(text[text.len() - 2], "60 lea rsp, [rsp + 0x40]");
        assert_eq!(text[text.len() - 1], "65 ret 0x80");
        assert_eq!(BELOW, 64 + 8 + 128);
        assert_eq!(PUSHED, 8 * 10);
    }

    #[test]
    fn block_and_place() {
        let b = block(9, [1, 2, 3, 4, 5, 6], 0xff, 0x7000);
        assert_eq!(u64::from_le_bytes(b[0..8].try_into().unwrap()), 9);
        assert_eq!(u64::from_le_bytes(b[56..64].try_into().unwrap()), 0xff);
        assert_eq!(u64::from_le_bytes(b[64..72].try_into().unwrap()), 0x7000);
        assert_eq!(place(0x1000_00fc, 3844), Some(0x1000_0110));
        assert_eq!(place(0x1000_0f9c, 100), None);
        assert_eq!(place(u64::MAX - 10, 5), None);
    }
}
