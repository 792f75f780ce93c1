//! Breakpoint sites as data, and how a thread steps over one without the int3 ever being lifted: the displaced
//! instruction is decoded once (capstone) and, where it is simple, emulated on the thread's registers.
//! Pure: memory is reached through the [`Memory`] trait, so all of this is tested without a process.

use crate::model::regs::{Reg, Regs};
use capstone::arch::x86::{ArchMode, X86OperandType};
use capstone::arch::{ArchOperand, BuildsCapstone};
use capstone::{Capstone, RegId};

pub const INT3: u8 = 0xcc;

/// An instruction the tracer can execute on a copy of the registers instead of single-stepping it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insn {
    /// `mov %src,%dst` (64-bit registers).
    MovRegReg { dst: Reg, src: Reg },
    /// `mov disp(%base),%dst` (64-bit load).
    Load { dst: Reg, base: Reg, disp: i64 },
    /// `mov disp(%rip),%dst` (64-bit load from an address computed from the instruction's own address).
    LoadAbs { dst: Reg, addr: u64 },
    /// `mov %src32,%dst32`: the upper half of `dst` is cleared.
    MovRegReg32 { dst: Reg, src: Reg },
    /// `lea disp(%rip),%dst`; `target` is already computed from the instruction's own address.
    LeaAbs { dst: Reg, target: u64 },
    /// `push %reg`.
    Push(Reg),
    /// `sub $imm,%rsp` (negative for `add`).
    SubRsp(i64),
    /// `test %a,%b` on 64-bit (`wide`) or 32-bit registers: only the flags change.
    Test { a: Reg, b: Reg, wide: bool },
    /// `xor %r32,%r32` with the same register: the zeroing idiom (register and flags).
    Zero32(Reg),
    /// `endbr64`, `nop`: nothing but the length.
    Nop,
    /// `syscall`: never emulated; marks where a wrapper enters the kernel.
    Syscall,
}

/// One decoded instruction: what it is (if emulatable) and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub addr: u64,
    pub len: u8,
    pub insn: Option<Insn>,
}

/// Memory of the traced process as the emulator needs it.
pub trait Memory {
    fn read_u64(&self, addr: u64) -> Option<u64>;
    fn write_u64(&self, addr: u64, value: u64) -> Option<()>;
}

pub fn disassembler() -> Option<Capstone> {
    Capstone::new().x86().mode(ArchMode::Mode64).detail(true).build().ok()
}

/// Hand-assembled code as text, one `"OFFSET MNEMONIC OPERANDS"` line per instruction, and how many bytes decoded
/// (the tests of the code syscatch writes into targets: the trap pad, the call gate).
#[cfg(test)]
pub(crate) fn listing(code: &[u8]) -> (Vec<String>, usize) {
    let cs = disassembler().expect("capstone");
    let insns = cs.disasm_all(code, 0).expect("decodes");
    let text = insns
        .iter()
        .map(|i| format!("{:x} {} {}", i.address(), i.mnemonic().unwrap_or(""), i.op_str().unwrap_or("")))
        .collect();
    (text, insns.iter().map(|i| i.len()).sum())
}

fn reg64(cs: &Capstone, id: RegId) -> Option<Reg> {
    Reg::from_name(&cs.reg_name(id)?)
}

/// The 64-bit register whose low half a 32-bit register name (`eax`, `r8d`) is.
fn reg32(cs: &Capstone, id: RegId) -> Option<Reg> {
    let name = cs.reg_name(id)?;
    let full = match name.as_str() {
        "eax" => "rax",
        "ebx" => "rbx",
        "ecx" => "rcx",
        "edx" => "rdx",
        "esi" => "rsi",
        "edi" => "rdi",
        "ebp" => "rbp",
        "esp" => "rsp",
        n => return Reg::from_name(n.strip_suffix('d')?),
    };
    Reg::from_name(full)
}

/// Decodes instructions of `code` (which starts at run-time address `addr`) until `max` are decoded or the
/// bytes run out. An instruction the emulator does not know has `insn: None`.
pub fn decode(cs: &Capstone, code: &[u8], addr: u64, max: usize) -> Vec<Decoded> {
    let Ok(insns) = cs.disasm_count(code, addr, max) else {
        return Vec::new();
    };
    insns.iter().map(|i| Decoded { addr: i.address(), len: i.len() as u8, insn: classify(cs, i) }).collect()
}

/// The x86 operands of a decoded instruction (empty if capstone has no detail for it).
pub fn operands(cs: &Capstone, i: &capstone::Insn) -> Vec<X86OperandType> {
    let Ok(detail) = cs.insn_detail(i) else { return Vec::new() };
    detail
        .arch_detail()
        .operands()
        .into_iter()
        .filter_map(|o| match o {
            ArchOperand::X86Operand(op) => Some(op.op_type),
            _ => None,
        })
        .collect()
}

fn classify(cs: &Capstone, i: &capstone::Insn) -> Option<Insn> {
    let mnemonic = i.mnemonic()?;
    match mnemonic {
        "endbr64" | "nop" => return Some(Insn::Nop),
        "syscall" => return Some(Insn::Syscall),
        _ => {}
    }
    let ops = operands(cs, i);
    let next = i.address().checked_add(i.len() as u64)?;
    match (mnemonic, ops.as_slice()) {
        ("mov", [X86OperandType::Reg(d), X86OperandType::Reg(s)]) => match (reg64(cs, *d), reg64(cs, *s)) {
            (Some(dst), Some(src)) => Some(Insn::MovRegReg { dst, src }),
            _ => Some(Insn::MovRegReg32 { dst: reg32(cs, *d)?, src: reg32(cs, *s)? }),
        },
        ("mov", [X86OperandType::Reg(d), X86OperandType::Mem(m)]) => {
            if m.index() != RegId(0) || m.segment() != RegId(0) {
                return None;
            }
            let dst = reg64(cs, *d)?;
            if cs.reg_name(m.base())? == "rip" {
                return Some(Insn::LoadAbs { dst, addr: next.wrapping_add(m.disp() as u64) });
            }
            Some(Insn::Load { dst, base: reg64(cs, m.base())?, disp: m.disp() })
        }
        ("lea", [X86OperandType::Reg(d), X86OperandType::Mem(m)]) => {
            if m.index() != RegId(0) || cs.reg_name(m.base())? != "rip" {
                return None;
            }
            Some(Insn::LeaAbs { dst: reg64(cs, *d)?, target: next.wrapping_add(m.disp() as u64) })
        }
        ("test", [X86OperandType::Reg(a), X86OperandType::Reg(b)]) => match (reg64(cs, *a), reg64(cs, *b)) {
            (Some(a), Some(b)) => Some(Insn::Test { a, b, wide: true }),
            _ => Some(Insn::Test { a: reg32(cs, *a)?, b: reg32(cs, *b)?, wide: false }),
        },
        ("xor", [X86OperandType::Reg(a), X86OperandType::Reg(b)]) if a == b && reg64(cs, *a).is_none() => {
            Some(Insn::Zero32(reg32(cs, *a)?))
        }
        ("push", [X86OperandType::Reg(r)]) => Some(Insn::Push(reg64(cs, *r)?)),
        ("sub", [X86OperandType::Reg(r), X86OperandType::Imm(v)]) if cs.reg_name(*r)? == "rsp" => {
            Some(Insn::SubRsp(*v))
        }
        ("add", [X86OperandType::Reg(r), X86OperandType::Imm(v)]) if cs.reg_name(*r)? == "rsp" => {
            Some(Insn::SubRsp(v.checked_neg()?))
        }
        _ => None,
    }
}

/// Executes `d` on `regs` (and memory, for push) and moves rip past it. `None`: it cannot be emulated here
/// (nothing was changed in memory; `regs` may be partly changed and must be discarded).
pub fn emulate(d: &Decoded, regs: &mut Regs, mem: &dyn Memory) -> Option<()> {
    // Checked first, so a `None` never follows a write to memory.
    let next = d.addr.checked_add(d.len as u64)?;
    match d.insn? {
        Insn::MovRegReg { dst, src } => regs.set(dst, regs.get(src)),
        Insn::Load { dst, base, disp } => {
            let v = mem.read_u64(regs.get(base).wrapping_add(disp as u64))?;
            regs.set(dst, v);
        }
        Insn::LeaAbs { dst, target } => regs.set(dst, target),
        Insn::LoadAbs { dst, addr } => {
            let v = mem.read_u64(addr)?;
            regs.set(dst, v);
        }
        Insn::MovRegReg32 { dst, src } => regs.set(dst, regs.get(src) & 0xffff_ffff),
        Insn::Push(r) => {
            let sp = regs.sp().wrapping_sub(8);
            let v = regs.get(r);
            mem.write_u64(sp, v)?;
            regs.set(Reg::Rsp, sp);
        }
        Insn::SubRsp(v) => regs.set(Reg::Rsp, regs.sp().wrapping_sub(v as u64)),
        Insn::Test { a, b, wide } => {
            let mask = if wide { u64::MAX } else { 0xffff_ffff };
            let sign = if wide { 1 << 63 } else { 1 << 31 };
            set_logic_flags(regs, regs.get(a) & regs.get(b) & mask, sign);
        }
        Insn::Zero32(r) => {
            regs.set(r, 0);
            set_logic_flags(regs, 0, 1 << 31);
        }
        Insn::Nop => {}
        Insn::Syscall => return None,
    }
    regs.set_ip(next);
    Some(())
}

/// Flags after a logical operation (`test`, `and`, `xor`): CF and OF cleared, ZF, SF and PF from the result
/// (PF: even parity of its low byte); AF is undefined for these and left as it was.
fn set_logic_flags(regs: &mut Regs, result: u64, sign_bit: u64) {
    const CF: u64 = 1 << 0;
    const PF: u64 = 1 << 2;
    const ZF: u64 = 1 << 6;
    const SF: u64 = 1 << 7;
    const OF: u64 = 1 << 11;
    let mut f = regs.0.eflags & !(CF | PF | ZF | SF | OF);
    if result == 0 {
        f |= ZF;
    }
    if result & sign_bit != 0 {
        f |= SF;
    }
    if (result as u8).count_ones().is_multiple_of(2) {
        f |= PF;
    }
    regs.0.eflags = f;
}

/// How `syscall()`-style wrappers are entered: the instructions before the `syscall` instruction (all
/// emulatable, no branch), so a matching hit can be brought to the kernel entry without single-steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrapperPlan {
    /// The first instruction (the one the int3 displaces) and the rest of the straight-line prefix.
    pub prefix: Vec<Decoded>,
    /// Address of the `syscall` instruction.
    pub syscall_at: u64,
}

/// How far a `syscall()` wrapper's `syscall` instruction may be from its entry: glibc's is its 8th instruction
/// (23 bytes in); musl's, a C function with varargs that spills its arguments and checks the stack protector,
/// its 22nd (98 bytes in).
pub const WRAPPER_INSNS: usize = 32;
/// The wrapper's code bytes read from the file (enough for [`WRAPPER_INSNS`] of musl's).
pub const WRAPPER_BYTES: u64 = 160;

/// Plans how to step a thread from the wrapper's entry to just after its `syscall` instruction.
/// `None` when an instruction before it is not emulatable (the caller single-steps instead).
pub fn plan_wrapper(cs: &Capstone, code: &[u8], addr: u64) -> Option<WrapperPlan> {
    let mut prefix = Vec::new();
    for d in decode(cs, code, addr, WRAPPER_INSNS) {
        match d.insn {
            Some(Insn::Syscall) => {
                return Some(WrapperPlan { prefix, syscall_at: d.addr });
            }
            Some(_) => prefix.push(d),
            None => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    struct FakeMem(RefCell<HashMap<u64, u64>>);
    impl Memory for FakeMem {
        fn read_u64(&self, a: u64) -> Option<u64> {
            self.0.borrow().get(&a).copied()
        }
        fn write_u64(&self, a: u64, v: u64) -> Option<()> {
            self.0.borrow_mut().insert(a, v);
            Some(())
        }
    }

    /// glibc 2.36's `syscall()`: six register moves, a stack load, then `syscall`.
    const GLIBC_SYSCALL: &[u8] = &[
        0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca, 0x4d, 0x89, 0xc2, 0x4d, 0x89, 0xc8,
        0x4c, 0x8b, 0x4c, 0x24, 0x08, 0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff,
    ];

    /// musl 1.2's `syscall()` (Debian's musl-tools, static): a C function with varargs that spills its arguments
    /// and reads the stack protector before its `syscall`, the 22nd instruction, 98 bytes in.
    const MUSL_SYSCALL: &[u8] = &[
        0x48, 0x83, 0xec, 0x58, 0x48, 0x89, 0xf8, 0x4d, 0x89, 0xc2, 0x48, 0x89, 0x74, 0x24, 0x28, 0x48, 0x8d, 0x74,
        0x24, 0x60, 0x4c, 0x89, 0x44, 0x24, 0x40, 0x4d, 0x89, 0xc8, 0x4c, 0x89, 0x4c, 0x24, 0x48, 0x4c, 0x8b, 0x4c,
        0x24, 0x60, 0x48, 0x89, 0x54, 0x24, 0x30, 0x48, 0x89, 0x4c, 0x24, 0x38, 0x64, 0x48, 0x8b, 0x14, 0x25, 0x28,
        0x00, 0x00, 0x00, 0x48, 0x89, 0x54, 0x24, 0x18, 0x31, 0xd2, 0x48, 0x8d, 0x54, 0x24, 0x20, 0x48, 0x89, 0x74,
        0x24, 0x08, 0x48, 0x89, 0x54, 0x24, 0x10, 0x48, 0x8b, 0x7a, 0x08, 0xc7, 0x04, 0x24, 0x08, 0x00, 0x00, 0x00,
        0x48, 0x8b, 0x72, 0x10, 0x48, 0x8b, 0x52, 0x18, 0x0f, 0x05,
    ];

    #[test]
    fn finds_musls_syscall_within_the_window() {
        let cs = disassembler().unwrap();
        let decoded = decode(&cs, MUSL_SYSCALL, 0x1000, WRAPPER_INSNS);
        let at = decoded.iter().position(|d| d.insn == Some(Insn::Syscall)).expect("within the window");
        assert_eq!((at, decoded[at].addr), (21, 0x1000 + 98));
        assert!(MUSL_SYSCALL.len() as u64 <= WRAPPER_BYTES);
        // Its first instruction (the int3's) is emulated for a non-matching call; the rest is single-stepped.
        assert!(decoded[0].insn.is_some());
        assert!(plan_wrapper(&cs, MUSL_SYSCALL, 0x1000).is_none(), "reading %fs:0x28 is not emulated");
    }

    #[test]
    fn plans_and_emulates_glibc_wrapper() {
        let cs = disassembler().unwrap();
        let plan = plan_wrapper(&cs, GLIBC_SYSCALL, 0x1000).unwrap();
        assert_eq!(plan.syscall_at, 0x1017);
        assert_eq!(plan.prefix.len(), 7);
        assert_eq!(plan.prefix[0].insn, Some(Insn::MovRegReg { dst: Reg::Rax, src: Reg::Rdi }));
        let mut r = Regs::zeroed();
        for (i, reg) in [Reg::Rdi, Reg::Rsi, Reg::Rdx, Reg::Rcx, Reg::R8, Reg::R9].into_iter().enumerate() {
            r.set(reg, 100 + i as u64);
        }
        r.set(Reg::Rsp, 0x7000);
        let mem = FakeMem(RefCell::new(HashMap::from([(0x7008, 106)])));
        for d in &plan.prefix {
            emulate(d, &mut r, &mem).unwrap();
        }
        assert_eq!(r.ip(), 0x1017);
        let got: Vec<u64> =
            [Reg::Rax, Reg::Rdi, Reg::Rsi, Reg::Rdx, Reg::R10, Reg::R8, Reg::R9].iter().map(|&g| r.get(g)).collect();
        assert_eq!(got, [100, 101, 102, 103, 104, 105, 106]);
        assert_eq!(r.0.orig_rax, u64::MAX);
    }

    #[test]
    fn rip_relative_loads_and_32_bit_moves() {
        let cs = disassembler().unwrap();
        // mov 0x100(%rip),%rax ; mov %edi,%eax ; mov %r9d,%r8d
        let code = [0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0x89, 0xf8, 0x45, 0x89, 0xc8];
        let d = decode(&cs, &code, 0x3000, 3);
        assert_eq!(d[0].insn, Some(Insn::LoadAbs { dst: Reg::Rax, addr: 0x3007 + 0x100 }));
        assert_eq!(d[1].insn, Some(Insn::MovRegReg32 { dst: Reg::Rax, src: Reg::Rdi }));
        assert_eq!(d[2].insn, Some(Insn::MovRegReg32 { dst: Reg::R8, src: Reg::R9 }));
        let mem = FakeMem(RefCell::new(HashMap::from([(0x3107, 42)])));
        let mut r = Regs::zeroed();
        r.set(Reg::Rdi, 0x1_2345_6789);
        emulate(&d[0], &mut r, &mem).unwrap();
        assert_eq!((r.get(Reg::Rax), r.ip()), (42, 0x3007));
        emulate(&d[1], &mut r, &mem).unwrap();
        assert_eq!(r.get(Reg::Rax), 0x2345_6789);
    }

    #[test]
    fn test_and_zeroing_set_flags_as_the_cpu_does() {
        let cs = disassembler().unwrap();
        // test %rdi,%rdi ; test %eax,%eax ; xor %eax,%eax
        let code = [0x48, 0x85, 0xff, 0x85, 0xc0, 0x31, 0xc0];
        let d = decode(&cs, &code, 0x4000, 3);
        assert_eq!(d[0].insn, Some(Insn::Test { a: Reg::Rdi, b: Reg::Rdi, wide: true }));
        assert_eq!(d[1].insn, Some(Insn::Test { a: Reg::Rax, b: Reg::Rax, wide: false }));
        assert_eq!(d[2].insn, Some(Insn::Zero32(Reg::Rax)));
        let mem = FakeMem(RefCell::new(HashMap::new()));
        let flags = |r: &Regs| r.0.eflags & 0x8c5;
        let mut r = Regs::zeroed();
        r.0.eflags = 0x8c5 | 0x202; // every tested flag set, plus IF and the reserved bit
        r.set(Reg::Rdi, 0);
        emulate(&d[0], &mut r, &mem).unwrap();
        assert_eq!(flags(&r), 0x44, "zero: ZF and PF");
        assert_eq!(r.0.eflags & 0x202, 0x202, "other flags kept");
        r.set(Reg::Rdi, 1 << 63 | 0x3);
        r.set_ip(0x4000);
        emulate(&d[0], &mut r, &mem).unwrap();
        assert_eq!(flags(&r), 0x84, "negative, two bits in the low byte: SF and PF");
        r.set(Reg::Rax, 0x1_0000_0001);
        emulate(&d[1], &mut r, &mem).unwrap();
        assert_eq!(flags(&r), 0, "32-bit: the upper half does not count; one bit: odd parity");
        assert_eq!(r.get(Reg::Rax), 0x1_0000_0001, "test writes no register");
        emulate(&d[2], &mut r, &mem).unwrap();
        assert_eq!((r.get(Reg::Rax), flags(&r)), (0, 0x44));
    }

    #[test]
    fn prologue_forms() {
        let cs = disassembler().unwrap();
        // endbr64; push %rbp; sub $0x18,%rsp; lea 0x10(%rip),%rax; add $8,%rsp; call ...
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x83, 0xec, 0x18, 0x48, 0x8d, 0x05, 0x10, 0x00, 0x00, 0x00, 0x48, 0x83,
            0xc4, 0x08, 0xe8, 0, 0, 0, 0,
        ];
        let d = decode(&cs, &code, 0x2000, 6);
        let kinds: Vec<Option<Insn>> = d.iter().map(|d| d.insn).collect();
        assert_eq!(
            kinds,
            [
                Some(Insn::Nop),
                Some(Insn::Push(Reg::Rbp)),
                Some(Insn::SubRsp(0x18)),
                Some(Insn::LeaAbs { dst: Reg::Rax, target: 0x2010 + 0x10 }),
                Some(Insn::SubRsp(-8)),
                None
            ]
        );
        let mut r = Regs::zeroed();
        r.set(Reg::Rsp, 0x8000);
        r.set(Reg::Rbp, 77);
        let mem = FakeMem(RefCell::new(HashMap::new()));
        emulate(&d[1], &mut r, &mem).unwrap();
        assert_eq!((r.sp(), mem.read_u64(0x7ff8)), (0x7ff8, Some(77)));
        assert!(emulate(&d[5], &mut r, &mem).is_none());
        assert!(plan_wrapper(&cs, &code, 0x2000).is_none());
    }
}
