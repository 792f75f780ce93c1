//! A match path's call of the known-stack matcher (`crate::x86::known`), part of the trampoline's assembly.

use super::*;

/// A match path's call of the known-stack matcher, after the record's first part: with rsp below the record (and
/// 16-byte aligned, as it is 8 past at the entry), `known_match(entry rsp, nr, site, page)` (see `known.c`). It
/// returns 1 when it wrote the call into the ring: rax back from the record, and back into the function. 0: not
/// known, the match path goes on as without it (the counter, the int3). Bit 63 set: known but the ring is full,
/// its number taken: the int3 with that number. Before the int3 the registers the call may have changed are put
/// back from the record, rcx as [`Block::rcx`] gives it, and the flags as [`Block::eflags`] has them.
pub(super) fn known_call(
    code: &mut Vec<u8>,
    calls: &mut Vec<usize>,
    page: u64,
    (nr, si): (u64, u64),
    back: u64,
    int3: u64,
) -> Option<()> {
    let start = code.len();
    // lea -0x88(%rsp),%rsp ; lea 0x88(%rsp),%rdi ; mov $nr,%esi ; mov $si,%edx ; lea page(%rip),%rcx ; call
    code.extend_from_slice(&[0x48, 0x8d, 0xa4, 0x24, 0x78, 0xff, 0xff, 0xff]);
    code.extend_from_slice(&[0x48, 0x8d, 0xbc, 0x24, 0x88, 0x00, 0x00, 0x00]);
    code.push(0xbe);
    code.extend_from_slice(&u32::try_from(nr).ok()?.to_le_bytes());
    code.push(0xba);
    code.extend_from_slice(&u32::try_from(si).ok()?.to_le_bytes());
    riprel(code, page, &[0x48, 0x8d, 0x0d], page)?;
    code.push(0xe8);
    calls.push(code.len());
    code.extend_from_slice(&[0, 0, 0, 0]);
    // lea 0x88(%rsp),%rsp ; test %rax,%rax ; je miss ; js full ; the registers back ; jmp back
    code.extend_from_slice(&[0x48, 0x8d, 0xa4, 0x24, 0x88, 0x00, 0x00, 0x00, 0x48, 0x85, 0xc0]);
    code.extend_from_slice(&[0x74, 2 + 35 + 5 + 10, 0x78, 35 + 5]);
    debug_assert_eq!((SAVED[0].2, SAVED[0].3), (0, -104));
    // rax (the result) and what `syscall` keeps (rdi, rsi, rdx, r10, r8, r9), as a wrapper may expect them.
    restore(code);
    riprel(code, page, &[0xe9], back)?;
    debug_assert_eq!(code.len() - start, 93);
    // full: mov %rax,%r11 ; btr $63,%r11 ; jmp common
    code.extend_from_slice(&[0x49, 0x89, 0xc3, 0x49, 0x0f, 0xba, 0xf3, 0x3f, 0xeb, 19]);
    // miss: mov $1,%r11d ; lock xadd %r11,counter(%rip) ; lea 1(%r11),%r11
    code.extend_from_slice(&[0x41, 0xbb, 1, 0, 0, 0]);
    riprel(code, page, &[0xf0, 0x4c, 0x0f, 0xc1, 0x1d], page + COUNTER)?;
    code.extend_from_slice(&[0x4d, 0x8d, 0x5b, 0x01]);
    debug_assert_eq!(code.len() - start, 93 + 10 + 19);
    // common: lea -1(%r11),%r11 ; add $1,%r11 (r11 = seq, the flags of adding 1 to seq - 1) ; mov %r11,seq(%rsp)
    code.extend_from_slice(&[0x4d, 0x8d, 0x5b, 0xff, 0x49, 0x83, 0xc3, 0x01]);
    store(code, 1, 3, AT_SEQ);
    // The registers the matcher may have changed, from the record: rax, rdi, rsi, rdx, r10, r8, r9.
    restore(code);
    riprel(code, page, &[0x48, 0x8d, 0x0d], int3.wrapping_sub(RECORD_CODE))?;
    debug_assert_eq!(code.len() - start, KNOWN_CALL);
    Some(())
}

/// `mov off(%rsp),%reg` from the record for rax, rdi, rsi, rdx, r10, r8, r9 (35 bytes).
fn restore(code: &mut Vec<u8>) {
    for &(_, r, reg, off) in &SAVED[..7] {
        code.extend_from_slice(&[0x48 | (r << 2), 0x8b, 0x44 | (reg << 3), 0x24, off as u8]);
    }
}
