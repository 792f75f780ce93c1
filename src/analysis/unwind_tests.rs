//! Tests of the unwinder over hand-built CFI and stacks (unwind.rs).

//! Synthetic modules: CFI written with gimli's writer, code bytes and stack words laid out by hand.
use super::*;
use gimli::write::{
    Address, CallFrameInstruction as I, CommonInformationEntry, EhFrame as WEh, EndianVec, Expression,
    FrameDescriptionEntry, FrameTable,
};

const BIAS: u64 = 0x7000_0000_0000;
const SP: u64 = 0x7fff_0000_0000;
const CODE: usize = 0x5000;
const EH_SVMA: u64 = 0x5000;

fn a(svma: u64) -> u64 {
    BIAS + svma
}

/// CFI of the synthetic module, in stated addresses:
/// 0x1000 leaf (CFA rsp+8), 0x2000 pushes rbx (CFA rsp+16 after 1 byte), 0x3000 outermost (rip undefined),
/// 0x4000 CFA that does not move, 0x4400 PLT-style CFA expression, 0x4800 a signal frame that loops.
fn eh_frame() -> Vec<u8> {
    let enc = gimli::Encoding { format: gimli::Format::Dwarf32, version: 1, address_size: 8 };
    let mut table = FrameTable::default();
    let mut cie = CommonInformationEntry::new(enc, 1, -8, Register(16));
    cie.add_instruction(I::Cfa(Register(7), 8));
    cie.add_instruction(I::Offset(Register(16), -8));
    let cie_id = table.add_cie(cie.clone());
    let fde = |start: u64, ins: Vec<(u32, I)>| {
        let mut f = FrameDescriptionEntry::new(Address::Constant(start), 0x100);
        for (off, i) in ins {
            f.add_instruction(off, i);
        }
        f
    };
    table.add_fde(cie_id, fde(0x1000, vec![]));
    table.add_fde(cie_id, fde(0x2000, vec![(1, I::CfaOffset(16)), (1, I::Offset(Register(RBX as u16), -16))]));
    table.add_fde(cie_id, fde(0x3000, vec![(0, I::Undefined(Register(16)))]));
    table.add_fde(cie_id, fde(0x4000, vec![(0, I::Cfa(Register(7), 0)), (0, I::Offset(Register(16), 0))]));
    let mut plt = Expression::new();
    plt.op_breg(Register(7), 8);
    plt.op_breg(Register(16), 0);
    plt.op(gimli::constants::DW_OP_lit15);
    plt.op(gimli::constants::DW_OP_and);
    plt.op(gimli::constants::DW_OP_lit11);
    plt.op(gimli::constants::DW_OP_ge);
    plt.op(gimli::constants::DW_OP_lit3);
    plt.op(gimli::constants::DW_OP_shl);
    plt.op(gimli::constants::DW_OP_plus);
    table.add_fde(cie_id, fde(0x4400, vec![(0, I::CfaExpression(plt))]));
    let mut sig = cie;
    sig.signal_trampoline = true;
    let sig_id = table.add_cie(sig);
    table.add_fde(sig_id, fde(0x4800, vec![(0, I::Cfa(Register(7), 0)), (0, I::Register(Register(16), Register(16)))]));
    let mut out = WEh(EndianVec::new(LittleEndian));
    table.write_eh_frame(&mut out).unwrap();
    out.0.into_vec()
}

fn module_with(eh: &[u8]) -> MappedCfi {
    let mut data = vec![0u8; CODE];
    data[0x4e00..0x4e00 + RESTORE_RT.len()].copy_from_slice(&RESTORE_RT);
    data.extend_from_slice(eh);
    let eh = Sect { range: CODE..data.len(), svma: EH_SVMA };
    let cfi = ModuleCfi::from_sections(
        data,
        Some(eh),
        None,
        vec![(0..CODE as u64, 0)],
        std::iter::once(0x4c80..0x4d00).collect(),
    );
    MappedCfi { bias: BIAS, cfi: Arc::new(cfi) }
}

struct One(MappedCfi);
impl ModuleLookup for One {
    fn find(&mut self, addr: u64) -> Option<MappedCfi> {
        (a(0)..a(CODE as u64)).contains(&addr).then(|| self.0.clone())
    }
}

fn regs(pc: u64, sp: u64, rbp: u64) -> UnwindRegs {
    let mut r = UnwindRegs::default();
    r.0[RA] = Some(pc);
    r.0[RSP] = Some(sp);
    r.0[RBP] = Some(rbp);
    r.0[RBX] = Some(0xbb);
    r
}

fn bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn run(m: &MappedCfi, r: UnwindRegs, stack: &[u8], asked: usize, depth: usize) -> Unwound {
    let w = StackWindow::new(r.get(RSP).unwrap(), stack, asked);
    unwind(r, &w, &mut One(m.clone()), depth)
}

fn pcs(u: &Unwound) -> Vec<u64> {
    u.frames.iter().map(|f| f.pc).collect()
}

#[test]
fn cfi_frames_to_the_outermost() {
    let m = module_with(&eh_frame());
    let stack = bytes(&[a(0x2050), 0x1111, a(0x3020), 0]);
    let u = run(&m, regs(a(0x1010), SP, 0), &stack, 4096, 128);
    assert_eq!(pcs(&u), [a(0x1010), a(0x2050), a(0x3020)]);
    assert_eq!(u.frames[0].lookup, a(0x1010), "the first frame is looked up at its pc");
    assert_eq!(u.frames[1].lookup, a(0x204f), "a return address is looked up at pc-1");
    assert!(u.frames.iter().skip(1).all(|f| f.how == How::Cfi));
    assert!(matches!(&u.end, End::Outermost(w) if w.contains("undefined")), "{:?}", u.end);
    // The second walk hits the row cache: same result.
    assert_eq!(run(&m, regs(a(0x1010), SP, 0), &stack, 4096, 128), u);
    assert!(m.cfi.rows.lock().unwrap().len() >= 3);
}

#[test]
fn depth_limit() {
    let m = module_with(&eh_frame());
    let stack = bytes(&[a(0x2050), 0x1111, a(0x3020), 0]);
    let u = run(&m, regs(a(0x1010), SP, 0), &stack, 4096, 2);
    assert_eq!(u.frames.len(), 2);
    assert_eq!(u.end, End::Truncated("--stack-depth 2 reached".into()));
}

#[test]
fn cfa_that_does_not_move_stops() {
    let m = module_with(&eh_frame());
    let u = run(&m, regs(a(0x4010), SP, 0), &bytes(&[a(0x4010)]), 4096, 128);
    assert_eq!(u.frames.len(), 1);
    assert!(matches!(&u.end, End::Truncated(w) if w.contains("did not move up")), "{:?}", u.end);
}

#[test]
fn looping_signal_frames_stop() {
    let m = module_with(&eh_frame());
    let u = run(&m, regs(a(0x4810), SP, 0), &bytes(&[0; 4]), 4096, 128);
    assert!(matches!(&u.end, End::Truncated(w) if w.starts_with("loop")), "{:?}", u.end);
    assert!(u.frames.len() <= 2);
}

#[test]
fn stack_pointer_into_unmapped_memory() {
    let m = module_with(&eh_frame());
    // The tracer's copy from an unmapped rsp is empty.
    let u = run(&m, regs(a(0x1010), 0xdead_0000, 0), &[], 65536, 128);
    assert_eq!(u.frames.len(), 1);
    assert!(matches!(&u.end, End::Truncated(w) if w.contains("outside the copied stack")), "{:?}", u.end);
}

#[test]
fn copy_ending_before_the_stack_is_marked_truncated() {
    let m = module_with(&eh_frame());
    // Only 16 bytes were asked for: the return address of the second frame is beyond the copy.
    let stack = bytes(&[a(0x2050), 0x1111]);
    let u = run(&m, regs(a(0x1010), SP, 0), &stack, 16, 128);
    assert_eq!(pcs(&u), [a(0x1010), a(0x2050)]);
    assert!(matches!(&u.end, End::Truncated(w) if w.contains("raise --stack-bytes")), "{:?}", u.end);
}

#[test]
fn frame_pointer_only_where_no_cfi() {
    let m = module_with(&eh_frame());
    // 0x4c00 has no CFI: rbp = SP+16 -> [saved rbp, return address into the outermost function].
    let stack = bytes(&[0, 0, SP + 0x100, a(0x3020)]);
    let u = run(&m, regs(a(0x4c00), SP, SP + 16), &stack, 4096, 128);
    assert_eq!(pcs(&u), [a(0x4c00), a(0x3020)]);
    assert_eq!(u.frames[1].how, How::FramePointer);
    assert!(matches!(u.end, End::Outermost(_)));
    // With no usable rbp either, the walk stops and says why.
    let u = run(&m, regs(a(0x4c00), SP, 0), &stack, 4096, 128);
    assert!(matches!(&u.end, End::Truncated(w) if w.contains("no CFI covers")), "{:?}", u.end);
}

#[test]
fn plt_stub_without_cfi() {
    let m = module_with(&eh_frame());
    let u = run(&m, regs(a(0x4c90), SP, 0), &bytes(&[a(0x3020)]), 4096, 128);
    assert_eq!(pcs(&u), [a(0x4c90), a(0x3020)]);
    assert_eq!(u.frames[1].how, How::Plt);
}

#[test]
fn plt_cfa_expression() {
    let m = module_with(&eh_frame());
    // pc & 15 == 11: after the PLT entry's push, so the CFA is rsp+16 and the return address at rsp+8.
    let u = run(&m, regs(a(0x440b), SP, 0), &bytes(&[0x55, a(0x3020)]), 4096, 128);
    assert_eq!(pcs(&u), [a(0x440b), a(0x3020)]);
    let u = run(&m, regs(a(0x4406), SP, 0), &bytes(&[a(0x3020)]), 4096, 128);
    assert_eq!(pcs(&u), [a(0x4406), a(0x3020)]);
}

#[test]
fn restore_rt_by_its_bytes() {
    let m = module_with(&eh_frame());
    // ucontext at sp: mcontext at +40, rsp in slot 15, rip in slot 16.
    let mut words = vec![0u64; 64];
    words[(40 + 15 * 8) / 8] = SP + 0x100;
    words[(40 + 16 * 8) / 8] = a(0x1000);
    words[0x100 / 8] = a(0x3020);
    let u = run(&m, regs(a(0x4e00), SP, 0), &bytes(&words), 4096, 128);
    assert_eq!(pcs(&u), [a(0x4e00), a(0x1000), a(0x3020)]);
    assert_eq!(u.frames[1].how, How::Signal);
    assert_eq!(u.frames[1].lookup, a(0x1000), "the interrupted frame is looked up at its pc");
    assert!(matches!(u.end, End::Outermost(_)));
}

/// A handler on an alternate stack: the ucontext points at the interrupted stack, elsewhere; the walk reads it in
/// the second copy taken at the same stop, and ends at the signal frame without it.
#[test]
fn restore_rt_onto_another_stack_reads_its_copy() {
    let m = module_with(&eh_frame());
    let other = SP - 0x10_0000;
    let mut words = vec![0u64; 64];
    words[(40 + 15 * 8) / 8] = other + 0x20;
    words[(40 + 16 * 8) / 8] = a(0x2050);
    let alt = bytes(&words);
    // At the interrupted pc 0x2050, rbx is pushed: CFA = rsp+16, return address at CFA-8.
    let interrupted = bytes(&[0, 0, 0, 0, 0x1111, a(0x3020)]);
    let r = regs(a(0x4e00), SP, 0);
    let w = StackWindow::new(SP, &alt, 4096).with_more([(other, &interrupted[..])]);
    let u = unwind(r, &w, &mut One(m.clone()), 128);
    assert_eq!(pcs(&u), [a(0x4e00), a(0x2050), a(0x3020)]);
    assert!(matches!(u.end, End::Outermost(_)), "{:?}", u.end);
    assert_eq!(w.seen_all(), [40 + 17 * 8, 0x30]);
    // Without the second copy the walk stops at the interrupted frame, saying where it read.
    let u = run(&m, r, &alt, 4096, 128);
    assert_eq!(pcs(&u), [a(0x4e00), a(0x2050)]);
    assert!(matches!(&u.end, End::Truncated(w) if w.contains("below the captured stack pointer")), "{:?}", u.end);
}

#[test]
fn corrupt_or_truncated_cfi_never_panics() {
    let eh = eh_frame();
    let stack = bytes(&[a(0x2050), 0x1111, a(0x3020), 0, 0, 0]);
    let mut corrupt_reported = false;
    let mut variants: Vec<Vec<u8>> = (0..eh.len()).map(|n| eh[..n].to_vec()).collect();
    for i in 0..eh.len() {
        for v in [0x00, 0xff, 0x80, 0x7f] {
            let mut e = eh.clone();
            e[i] = v;
            variants.push(e);
        }
    }
    for e in variants {
        let m = module_with(&e);
        for pc in [0x1010, 0x2050, 0x3020, 0x4010, 0x440b, 0x4810] {
            let u = run(&m, regs(a(pc), SP, SP + 8), &stack, 4096, 64);
            assert!(!u.frames.is_empty() && u.frames.len() <= 64);
            if let End::Truncated(w) = &u.end {
                corrupt_reported |= w.contains("corrupt");
            }
        }
    }
    assert!(corrupt_reported, "no corruption was ever detected as such");
}
