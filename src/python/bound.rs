//! Where a thread's bound thread state is kept (CPython 3.9, 3.10 and 3.13+, for known stacks: see
//! [`super::known`]): read from the code of `PyGILState_GetThisThreadState`, the public function that returns it,
//! rather than from a table per version and build. 3.9 to 3.14 keep it under a pthread key (the `Py_tss_t`
//! `autoTSSkey` in `_PyRuntime`, in its `gilstate` before 3.11); 3.15 in a thread-local variable
//! (`_Py_tss_gilstate`), reached as the build made it: at a constant offset from the thread pointer (an
//! executable), through a GOT slot holding that offset (initial-exec), or through `__tls_get_addr` (a shared
//! libpython, general-dynamic). Pure: memory comes through a closure.

use capstone::RegId;
use capstone::arch::x86::{X86OpMem, X86OperandType};
use std::collections::HashMap;

/// Where the bound thread state is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// Under the pthread key of a `Py_tss_t` inside `_PyRuntime`: the addresses there the code reads, in order
    /// (one is the key's; 3.9 and 3.10 look at the interpreter state beside it first).
    Key { tss: Vec<u64> },
    /// In static TLS at this offset from the thread pointer.
    Tls { tpoff: i64 },
    /// Through `__tls_get_addr` with the `tls_index` at this address (module id, offset).
    TlsIndex { index: u64 },
}

/// Instructions looked at, at most: the function is a few.
const MAX_INSNS: usize = 16;

/// Reads the code of `PyGILState_GetThisThreadState` (`code`, at `addr`): `runtime` is the address range of
/// `_PyRuntime`, `read_u64` reads a word of the target (a GOT slot). `None` when the code is none of the
/// shapes above.
pub fn decode(code: &[u8], addr: u64, runtime: (u64, u64), read_u64: &dyn Fn(u64) -> Option<u64>) -> Option<Bound> {
    let cs = crate::x86::breakpoints::disassembler()?;
    let insns = cs.disasm_all(code, addr).ok()?;
    let in_runtime = |a: u64| a >= runtime.0 && a < runtime.1;
    let mut regs: HashMap<RegId, u64> = HashMap::new();
    let mut lea_rdi: Option<u64> = None;
    let mut tss: Vec<u64> = Vec::new();
    for i in insns.iter().take(MAX_INSNS) {
        let next = i.address().wrapping_add(i.len() as u64);
        let ops = crate::x86::breakpoints::operands(&cs, i);
        let name = |r: RegId| cs.reg_name(r).unwrap_or_default();
        // The address a memory operand names, where it can be known.
        let ea = |m: &X86OpMem| -> Option<u64> {
            if m.index() != RegId(0) {
                return None;
            }
            match name(m.base()).as_str() {
                "rip" => Some(next.wrapping_add(m.disp() as u64)),
                "" => Some(m.disp() as u64),
                _ => regs.get(&m.base()).map(|v| v.wrapping_add(m.disp() as u64)),
            }
        };
        let fs = |m: &X86OpMem| name(m.segment()) == "fs";
        let mnemonic = i.mnemonic().unwrap_or("");
        // Every address inside `_PyRuntime` the code reads or computes is a candidate.
        let named = match ops.as_slice() {
            [X86OperandType::Reg(_), X86OperandType::Mem(m)] | [X86OperandType::Mem(m), _] if !fs(m) => ea(m),
            [X86OperandType::Reg(_), X86OperandType::Imm(v)] if mnemonic == "mov" => Some(*v as u64),
            _ => None,
        };
        if let Some(a) = named.filter(|&a| in_runtime(a) && !tss.contains(&a)) {
            tss.push(a);
        }
        match (mnemonic, ops.as_slice()) {
            ("endbr64" | "push" | "sub" | "nop" | "test" | "cmp" | "je" | "jne", _) => {}
            ("mov", [X86OperandType::Reg(_), X86OperandType::Mem(m)]) if fs(m) => {
                // %fs:disp (local-exec), or %fs:(reg) with reg read from a GOT slot (initial-exec).
                let tpoff = match name(m.base()).as_str() {
                    "" => m.disp(),
                    _ => (*regs.get(&m.base())? as i64).wrapping_add(m.disp()),
                };
                return Some(Bound::Tls { tpoff });
            }
            ("lea", [X86OperandType::Reg(r), X86OperandType::Mem(m)]) => match ea(m) {
                Some(v) => {
                    if name(*r) == "rdi" && name(m.base()) == "rip" {
                        lea_rdi = Some(v);
                    }
                    regs.insert(*r, v);
                }
                None => {
                    regs.remove(r);
                }
            },
            ("mov", [X86OperandType::Reg(r), X86OperandType::Mem(m)]) => {
                match ea(m).filter(|&a| !in_runtime(a)).and_then(read_u64) {
                    Some(v) => regs.insert(*r, v),
                    None => regs.remove(r),
                };
            }
            ("mov", [X86OperandType::Reg(r), _]) => {
                regs.remove(r);
            }
            // General-dynamic: `data16 lea idx(%rip),%rdi; data16 data16 rex.W call __tls_get_addr`.
            ("call", _) if i.bytes().starts_with(&[0x66, 0x66, 0x48]) => {
                return lea_rdi.map(|index| Bound::TlsIndex { index });
            }
            _ => break,
        }
    }
    (!tss.is_empty()).then_some(Bound::Key { tss })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RT: (u64, u64) = (0xba0000, 0xba2000);

    fn none(_: u64) -> Option<u64> {
        None
    }

    #[test]
    fn a_key_of_an_executable_is_found_by_its_first_use() {
        // Debian sid's python3.14: endbr64; cmpl $0,_PyRuntime+2336(%rip); je; mov $_PyRuntime+2336,%edi; jmp.
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x83, 0x3d, 0x3b, 0x49, 0x77, 0x00, 0x00, 0x74, 0x0a, 0xbf, 0xe0, 0x10, 0xba, 0x00,
        ];
        assert_eq!(decode(&code, 0x42c79a, RT, &none), Some(Bound::Key { tss: vec![0xba10e0] }));
    }

    #[test]
    fn a_key_of_a_shared_libpython_is_found_through_its_got_slot() {
        // pyenv's 3.13.0: mov GOT(%rip),%rax; push %rbx; lea 0x870(%rax),%rbx; mov %rbx,%rdi; call.
        let code = [0x48, 0x8b, 0x05, 0xe9, 0x6b, 0x25, 0x00, 0x53, 0x48, 0x8d, 0x98, 0x70, 0x08, 0x00, 0x00];
        let got = 0x2940c0 + 7 + 0x256be9;
        let read = move |a: u64| (a == got).then_some(RT.0);
        assert_eq!(decode(&code, 0x2940c0, RT, &read), Some(Bound::Key { tss: vec![RT.0 + 0x870] }));
    }

    #[test]
    fn a_key_read_after_the_interpreter_state_is_a_later_candidate() {
        // pyenv's 3.9.18: mov GOT(%rip),%rax; cmpq $0,0x240(%rax); je +0xf; lea 0x248(%rax),%rdi; jmp.
        let code = [
            0x48, 0x8b, 0x05, 0x21, 0x7b, 0x17, 0x00, 0x48, 0x83, 0xb8, 0x40, 0x02, 0x00, 0x00, 0x00, 0x74, 0x0f, 0x48,
            0x8d, 0xb8, 0x48, 0x02, 0x00, 0x00, 0xe9, 0x83, 0x90, 0xe8, 0xff,
        ];
        let got = 0x1dc1e0 + 7 + 0x177b21;
        let read = move |a: u64| (a == got).then_some(RT.0);
        assert_eq!(decode(&code, 0x1dc1e0, RT, &read), Some(Bound::Key { tss: vec![RT.0 + 0x240, RT.0 + 0x248] }));
    }

    #[test]
    fn static_tls_offsets_are_read_from_the_code_or_its_got_slot() {
        // Debian sid's python3.15: endbr64; mov %fs:0xffffffffffffffd8,%rax; ret.
        let le = [0xf3, 0x0f, 0x1e, 0xfa, 0x64, 0x48, 0x8b, 0x04, 0x25, 0xd8, 0xff, 0xff, 0xff, 0xc3];
        assert_eq!(decode(&le, 0x42fa7d, RT, &none), Some(Bound::Tls { tpoff: -40 }));
        // mov 0x100(%rip),%rax; mov %fs:(%rax),%rax; ret.
        let ie = [0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0x64, 0x48, 0x8b, 0x00, 0xc3];
        let read = |a: u64| (a == 0x1000 + 7 + 0x100).then_some((-72i64) as u64);
        assert_eq!(decode(&ie, 0x1000, RT, &read), Some(Bound::Tls { tpoff: -72 }));
    }

    #[test]
    fn a_general_dynamic_access_names_its_tls_index() {
        // pyenv's 3.13.0 PyThreadState_GetUnchecked: sub $8,%rsp; data16 lea idx(%rip),%rdi; call __tls_get_addr.
        let code = [
            0x48, 0x83, 0xec, 0x08, 0x66, 0x48, 0x8d, 0x3d, 0x14, 0x7b, 0x25, 0x00, 0x66, 0x66, 0x48, 0xe8, 0x77, 0x4f,
            0xdf, 0xff,
        ];
        assert_eq!(decode(&code, 0x2933a0, RT, &none), Some(Bound::TlsIndex { index: 0x4eaec0 }));
    }

    #[test]
    fn other_code_is_not_guessed_at() {
        // xor %eax,%eax; ret
        assert_eq!(decode(&[0x31, 0xc0, 0xc3], 0x1000, RT, &none), None);
        assert_eq!(decode(&[], 0x1000, RT, &none), None);
    }
}
