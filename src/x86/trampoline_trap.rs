//! The trap helper of the trampoline's int3s (part of the trampoline's assembly).

/// Bytes of a call of the trap helper just before an int3: `lea -0x80(%rsp),%rsp ; call helper ;
/// lea 0x80(%rsp),%rsp` (below the red zone, where the record is).
pub(super) const TRAP_CALL: usize = 5 + 5 + 8;

/// The trap helper, once in the page: SIGTRAP unblocked in the calling thread (`rt_sigprocmask(SIG_UNBLOCK)`),
/// every register and the flags kept. An int3 taken with SIGTRAP blocked would have the kernel reset SIGTRAP's
/// action to the default for the whole process (`force_sig_info`): the trap pad's handler gone, so that a SIGKILL
/// of syscatch while a thread sits in a trap would kill the target. (The tracer blocks it again at the stop for a
/// thread that blocked every signal.)
pub(super) const TRAP_HELPER: [u8; 48] = [
    0x9c, 0x50, 0x51, 0x52, 0x56, 0x57, 0x41, 0x52, 0x41, 0x53, // pushfq ; push rax, rcx, rdx, rsi, rdi, r10, r11
    0x6a, 0x10, // push $0x10 (the set: SIGTRAP)
    0xb8, 0x0e, 0x00, 0x00, 0x00, // mov $14 (rt_sigprocmask),%eax
    0xbf, 0x01, 0x00, 0x00, 0x00, // mov $1 (SIG_UNBLOCK),%edi
    0x48, 0x89, 0xe6, 0x31, 0xd2, // mov %rsp,%rsi ; xor %edx,%edx
    0x41, 0xba, 0x08, 0x00, 0x00, 0x00, // mov $8,%r10d
    0x0f, 0x05, // syscall
    0x48, 0x83, 0xc4, 0x08, // add $8,%rsp
    0x41, 0x5b, 0x41, 0x5a, 0x5f, 0x5e, 0x5a, 0x59, 0x58, // pop r11, r10, rdi, rsi, rdx, rcx, rax
];

/// A call of the trap helper (its rel32 filled once the helper's place is known: `traps`).
pub(super) fn trap_call(code: &mut Vec<u8>, traps: &mut Vec<usize>) {
    code.extend_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0x80, 0xe8]);
    traps.push(code.len());
    code.extend_from_slice(&[0, 0, 0, 0, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00]);
}
