//! Inline patches: a function's first bytes in memory compared with the file's, and, where they differ, what
//! the new code does (decoded with capstone) and where it jumps. Pure: memory is reached through a closure.

use capstone::Capstone;
use capstone::arch::x86::X86OperandType;

/// How many bytes of each function entry are compared.
pub const ENTRY_BYTES: usize = 16;

/// What the changed entry does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Patch {
    /// An `int3` where the file has something else: a debugger's (or syscatch's own) breakpoint.
    Breakpoint,
    /// A jump (or call) to `target`; `insn` is the decoded redirect, e.g. `jmp qword ptr [rip]`.
    Jump { insn: String, target: u64 },
    /// Changed bytes that are not a recognised redirect; `insns` is what they decode to.
    Other { insns: String },
}

/// The offset of the first byte that differs, if any.
pub fn first_difference(memory: &[u8], file: &[u8]) -> Option<usize> {
    memory.iter().zip(file).position(|(a, b)| a != b)
}

fn text(i: &capstone::Insn) -> String {
    format!("{} {}", i.mnemonic().unwrap_or("?"), i.op_str().unwrap_or("")).trim().to_string()
}

/// Decodes a patched entry. `memory` starts at run-time address `addr`; `diff` is the first differing offset;
/// `read_ptr` reads 8 bytes of the target (for `jmp [rip+d]`). Recognised redirects: `jmp/call rel`,
/// `jmp/call [rip+d]`, `mov{abs} reg, imm` then `jmp/call reg`, `push imm` then `ret`.
pub fn decode_patch(
    cs: &Capstone,
    memory: &[u8],
    addr: u64,
    diff: usize,
    read_ptr: &dyn Fn(u64) -> Option<u64>,
) -> Patch {
    let Ok(insns) = cs.disasm_all(memory, addr) else {
        return Patch::Other { insns: String::new() };
    };
    let all: Vec<&capstone::Insn> = insns.iter().collect();
    let diff_addr = addr.saturating_add(diff as u64);
    // The instruction that holds the first changed byte: the redirect starts there (or at an instruction
    // before it, when the patch only changed the operand of an existing jump).
    let Some(start) = all.iter().position(|i| i.address() <= diff_addr && diff_addr < i.address() + i.len() as u64)
    else {
        return Patch::Other { insns: String::new() };
    };
    if all[start].bytes() == [0xcc] {
        return Patch::Breakpoint;
    }
    let mut reg_imm: Option<(capstone::RegId, u64)> = None;
    let mut pushed: Option<u64> = None;
    for i in &all[start..] {
        let mnemonic = i.mnemonic().unwrap_or("");
        let ops = crate::x86::breakpoints::operands(cs, i);
        let is_branch = matches!(mnemonic, "jmp" | "call");
        match (mnemonic, ops.as_slice()) {
            (_, [X86OperandType::Imm(t)]) if is_branch => {
                return Patch::Jump { insn: text(i), target: *t as u64 };
            }
            (_, [X86OperandType::Mem(m)]) if is_branch => {
                if cs.reg_name(m.base()).as_deref() == Some("rip") && m.index() == capstone::RegId(0) {
                    let next = i.address().wrapping_add(i.len() as u64);
                    let slot = next.wrapping_add(m.disp() as u64);
                    if let Some(target) = read_ptr(slot) {
                        return Patch::Jump { insn: text(i), target };
                    }
                }
                break;
            }
            (_, [X86OperandType::Reg(r)]) if is_branch => {
                if let Some((reg, v)) = reg_imm
                    && reg == *r
                {
                    return Patch::Jump { insn: text(i), target: v };
                }
                break;
            }
            ("mov" | "movabs", [X86OperandType::Reg(r), X86OperandType::Imm(v)]) => reg_imm = Some((*r, *v as u64)),
            ("push", [X86OperandType::Imm(v)]) => pushed = Some(*v as u64),
            ("ret", []) => {
                if let Some(target) = pushed {
                    return Patch::Jump { insn: "push; ret".into(), target };
                }
                break;
            }
            _ => break,
        }
    }
    let insns = all[start..].iter().take(4).map(|i| text(i)).collect::<Vec<_>>().join("; ");
    Patch::Other { insns }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::breakpoints::disassembler;

    const ADDR: u64 = 0x7f00_0000_1000;

    fn decode(mem: &[u8], diff: usize) -> Patch {
        let cs = disassembler().unwrap();
        let ptr = |a: u64| (a == ADDR + 6).then_some(0x7f00_dead_beef);
        decode_patch(&cs, mem, ADDR, diff, &ptr)
    }

    #[test]
    fn redirects() {
        // jmp rel32 to ADDR + 5 + 0x100.
        let p = decode(&[0xe9, 0x00, 0x01, 0x00, 0x00, 0x90], 0);
        assert!(matches!(p, Patch::Jump { target, .. } if target == ADDR + 0x105), "{p:?}");
        // jmp qword ptr [rip+0]; the pointer follows.
        let p = decode(&[0xff, 0x25, 0, 0, 0, 0, 0xef, 0xbe, 0xad, 0xde, 0, 0x7f, 0, 0], 0);
        assert_eq!(p, Patch::Jump { insn: "jmp qword ptr [rip]".into(), target: 0x7f00_dead_beef });
        // movabs rax, imm64; jmp rax.
        let mut b = vec![0x48, 0xb8];
        b.extend_from_slice(&0x1122_3344_5566u64.to_le_bytes());
        b.extend_from_slice(&[0xff, 0xe0]);
        let p = decode(&b, 1);
        assert!(matches!(p, Patch::Jump { target: 0x1122_3344_5566, .. }), "{p:?}");
        // push imm32; ret.
        let p = decode(&[0x68, 0x78, 0x56, 0x34, 0x12, 0xc3], 0);
        assert!(matches!(p, Patch::Jump { target: 0x1234_5678, .. }), "{p:?}");
        // A breakpoint after an endbr64.
        let p = decode(&[0xf3, 0x0f, 0x1e, 0xfa, 0xcc, 0x89, 0xf8], 4);
        assert_eq!(p, Patch::Breakpoint);
        // Something else: a changed immediate.
        let p = decode(&[0xb8, 0x09, 0x00, 0x00, 0x00, 0x0f, 0x05], 1);
        assert!(matches!(&p, Patch::Other { insns } if insns.starts_with("mov eax, 9")), "{p:?}");
        // Garbage and an offset past the end never panic.
        let _ = decode(&[0xff, 0xff, 0xff], 0);
        let _ = decode(&[0x90], 5);
        let _ = decode(&[], 0);
    }

    #[test]
    fn differences() {
        assert_eq!(first_difference(b"abcd", b"abcd"), None);
        assert_eq!(first_difference(b"abXd", b"abcd"), Some(2));
        assert_eq!(first_difference(b"ab", b"abcd"), None);
    }
}
