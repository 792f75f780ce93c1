//! The trap pad: a SIGTRAP handler syscatch places in the target, so that the threads caught in one of our traps
//! when syscatch dies (SIGKILL: the kernel detaches them with the SIGTRAP of their int3 or single step still
//! to deliver, which by default kills the whole process) carry on instead. Only a dead tracer's traps reach it:
//! while syscatch lives, it takes every SIGTRAP of its own first.
//!
//! The handler (source: `docs/trappad.S`, assembled with `gcc -c` and copied here byte for byte) sits in a code
//! page followed by a data page holding the list of our int3 sites. On a single-step trap it clears the trap flag
//! and returns; on an int3 at a listed site it rewinds rip onto the site, yielding until the guardian has put the
//! original byte back (bounded: after a million tries it behaves as below); at a breakpoint's guard int3 (its
//! second byte, [`GUARD`]) it rewinds onto the breakpoint; at a `--fast` trampoline int3 it goes on after it; a page-fault sample's signal of ours (TRAP_PERF with [`PERF_COOKIE`]) is dropped. Any other SIGTRAP is the target's own: the handler puts the default action back and raises
//! it again, so the target does exactly what it would have done without us. Pure: the layout and bytes only.

/// The handler's machine code (at the start of the code page), then `rt_sigreturn` at [`RESTORER`].
pub const CODE: &[u8] = &[
    0x4c, 0x8d, 0x0d, 0xf9, 0x0f, 0x00, 0x00, 0x8b, 0x4e, 0x08, 0x8d, 0x41, 0xff, 0x83, 0xf8, 0x01, 0x77, 0x0c, 0x48,
    0x81, 0xa2, 0xb0, 0x00, 0x00, 0x00, 0xff, 0xfe, 0xff, 0xff, 0xc3, 0x83, 0xf9, 0x06, 0x75, 0x11, 0x48, 0xb8, 0x48,
    0x43, 0x54, 0x41, 0x43, 0x53, 0x59, 0x53, 0x48, 0x39, 0x46, 0x18, 0x75, 0x78, 0xc3, 0x81, 0xf9, 0x80, 0x00, 0x00,
    0x00, 0x75, 0x6f, 0x4c, 0x8b, 0x82, 0xa8, 0x00, 0x00, 0x00, 0x49, 0xff, 0xc8, 0x4d, 0x8b, 0x11, 0x4d, 0x8d, 0x99,
    0x80, 0x00, 0x00, 0x00, 0x4d, 0x85, 0xd2, 0x74, 0x4f, 0x49, 0x8b, 0x03, 0x48, 0x0f, 0xba, 0xf0, 0x3f, 0x48, 0x0f,
    0xba, 0xf0, 0x3e, 0x49, 0x39, 0xc0, 0x74, 0x09, 0x49, 0x83, 0xc3, 0x08, 0x49, 0xff, 0xca, 0xeb, 0xe0, 0x49, 0x83,
    0x3b, 0x00, 0x78, 0x2d, 0x49, 0x0f, 0xba, 0x23, 0x3e, 0x73, 0x03, 0x49, 0xff, 0xc8, 0x4c, 0x89, 0x82, 0xa8, 0x00,
    0x00, 0x00, 0x41, 0x80, 0x38, 0xcc, 0x75, 0x16, 0xf0, 0x49, 0xff, 0x41, 0x08, 0x49, 0x81, 0x79, 0x08, 0x40, 0x42,
    0x0f, 0x00, 0x77, 0x0f, 0xb8, 0x18, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xc3, 0x41, 0x80, 0x38, 0xcc, 0x74, 0x01, 0xc3,
    0xb8, 0x0d, 0x00, 0x00, 0x00, 0xbf, 0x05, 0x00, 0x00, 0x00, 0x49, 0x8d, 0x71, 0x10, 0x31, 0xd2, 0x41, 0xba, 0x08,
    0x00, 0x00, 0x00, 0x0f, 0x05, 0xb8, 0x27, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x89, 0xc7, 0xb8, 0xba, 0x00, 0x00, 0x00,
    0x0f, 0x05, 0x89, 0xc6, 0xba, 0x05, 0x00, 0x00, 0x00, 0xb8, 0xea, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xc3, 0xb8, 0x0f,
    0x00, 0x00, 0x00, 0x0f, 0x05,
];

/// Offset of the signal-return trampoline in the code page.
pub const RESTORER: u64 = 0xe2;
/// The data page follows the code page; the handler finds it rip-relatively.
pub const DATA: u64 = 4096;
pub const PAGES_LEN: u64 = 8192;
/// In the data page: the number of listed sites, the yield counter, a SIG_DFL action, then the sites.
pub const COUNT: u64 = DATA;
#[allow(dead_code)] // written by the set-up code and read by the handler (docs/trappad.S), named for the reader
pub const DEFAULT_ACTION: u64 = DATA + 16;
pub const TABLE: u64 = DATA + 128;
pub const CAPACITY: usize = ((4096 - 128) / 8) as usize;
/// `si_perf_data` of the page-fault samples' signals (`--faults`): "SYSCATCH". A TRAP_PERF signal with it is
/// ignored by the pad (its tracer died before taking it); one without it is the target's own.
pub const PERF_COOKIE: u64 = 0x5359_5343_4154_4348;
/// Marks a listed site as a `--fast` trampoline int3: go on after it instead of rewinding.
pub const CONTINUE: u64 = 1 << 63;
/// Marks a listed site as a guard int3, a breakpoint's second byte: rewind onto the breakpoint, the byte before.
/// A thread held just past a breakpoint's int3 when syscatch dies is let go there by the kernel (its SIGTRAP
/// dropped): the guard traps it again instead of letting it run the rest of the displaced instruction.
pub const GUARD: u64 = 1 << 62;

const SA_SIGINFO: u64 = 4;
const SA_RESTART: u64 = 0x1000_0000;
const SA_RESTORER: u64 = 0x0400_0000;

/// The kernel's `struct sigaction` for x86_64 `rt_sigaction`: handler, flags, restorer, mask (8 bytes each).
pub fn action_bytes(page: u64) -> [u8; 32] {
    let mut a = [0u8; 32];
    a[0..8].copy_from_slice(&page.to_le_bytes());
    a[8..16].copy_from_slice(&(SA_SIGINFO | SA_RESTART | SA_RESTORER).to_le_bytes());
    a[16..24].copy_from_slice(&(page + RESTORER).to_le_bytes());
    a
}

/// The table entry for a site.
pub fn entry(addr: u64, trampoline: bool) -> u64 {
    if trampoline { addr | CONTINUE } else { addr }
}

/// The table entry for a breakpoint's guard int3 at `addr` (the breakpoint is at `addr - 1`).
pub fn guard_entry(addr: u64) -> u64 {
    addr | GUARD
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::breakpoints;

    #[test]
    fn the_code_is_what_the_source_says() {
        let (text, decoded) = breakpoints::listing(CODE);
        // Every byte decodes, the data page is 4096 bytes on, and the restorer is rt_sigreturn.
        assert_eq!(decoded, CODE.len(), "{text:#?}");
        assert_eq!(text[0], "0 lea r9, [rip + 0xff9]");
        assert!(text.contains(&format!("{RESTORER:x} mov eax, 0xf")), "{text:#?}");
        assert_eq!(text.last().unwrap(), &format!("{:x} syscall ", RESTORER + 5));
        assert_eq!(CODE.len() as u64, RESTORER + 7);
        // The cookie the handler compares si_perf_data with is PERF_COOKIE.
        assert!(text.contains(&format!("23 movabs rax, {PERF_COOKIE:#x}")), "{text:#?}");
        const { assert!(CAPACITY * 8 + 128 <= 4096) };
    }

    #[test]
    fn action_and_entries() {
        let a = action_bytes(0x7000_0000);
        assert_eq!(u64::from_le_bytes(a[0..8].try_into().unwrap()), 0x7000_0000);
        assert_eq!(u64::from_le_bytes(a[16..24].try_into().unwrap()), 0x7000_0000 + RESTORER);
        assert_eq!(entry(0x1234, true) & !CONTINUE, 0x1234);
        assert_eq!(entry(0x1234, false), 0x1234);
        assert_eq!(guard_entry(0x1235) & !GUARD, 0x1235);
    }
}
