//! Tests of the trampoline's planning and assembly (disassembled back with capstone).
use super::*;
use crate::model::maps::Mapping;
use crate::x86::breakpoints::{decode, disassembler, plan_wrapper};
use crate::x86::fixed;
/// How many wanted numbers, each with its match path, fit the code pages.
const FITS: usize = 208;

const GLIBC_SYSCALL: &[u8] = &[
    0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca, 0x4d, 0x89, 0xc2, 0x4d, 0x89, 0xc8, 0x4c,
    0x8b, 0x4c, 0x24, 0x08, 0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, 0x73, 0x01, 0xc3,
];

#[test]
fn plans_glibc_and_assembles_a_page_that_disassembles_back() {
    let cs = disassembler().unwrap();
    let entry = 0x7f00_0010_1810;
    let w = plan_wrapper(&cs, GLIBC_SYSCALL, entry).unwrap();
    let targets: Vec<u64> = decode(&cs, GLIBC_SYSCALL, entry, 16)
        .iter()
        .filter_map(|d| branch_target(&GLIBC_SYSCALL[(d.addr - entry) as usize..], d.addr))
        .collect();
    assert_eq!(targets, [entry + 0x22]);
    let p = plan(entry, GLIBC_SYSCALL, &w.prefix, w.syscall_at, &targets).unwrap();
    assert_eq!(p.at, entry + 0x12);
    assert_eq!(p.orig, [0x4c, 0x8b, 0x4c, 0x24, 0x08]);
    let page = entry - 0x10_0000;
    let jmp = patch_bytes(&p, page).unwrap();
    assert_eq!(jmp.len(), 5);
    assert_eq!(jmp[0], 0xe9);
    assert!(fits(&p, FITS, 0) && !fits(&p, FITS + 1, 0));
    let numbers: Vec<u64> = (0..FITS as u64 + 1).collect();
    assert!(
        assemble(&p, page, &numbers[..FITS], &[], true).is_some() && assemble(&p, page, &numbers, &[], true).is_none()
    );
    let Assembled { code, int3s, .. } = assemble(&p, page, &[9, 11], &[], true).unwrap();
    let text: Vec<String> = cs
        .disasm_all(&code, page)
        .unwrap()
        .iter()
        .map(|i| format!("{} {}", i.mnemonic().unwrap(), i.op_str().unwrap()).trim().to_string())
        .collect();
    assert_eq!(text[0], "cmp rax, 9");
    assert!(text[1].starts_with("je "));
    assert_eq!(text[4], "mov r9, qword ptr [rsp + 8]");
    assert_eq!(text[5], format!("jmp {:#x}", entry + 0x17));
    assert_eq!(text[7], "syscall");
    assert_eq!(text[8], "mov qword ptr [rsp - 0x68], rax");
    assert_eq!(text[12], "mov qword ptr [rsp - 0x48], r10");
    assert_eq!(text[20], "mov qword ptr [rsp - 8], r15");
    let int3 = int3s.iter().find(|&(_, &nr)| nr == 9).map(|(&a, _)| a).unwrap();
    assert_eq!(text[21], format!("movabs r11, {int3:#x}"));
    assert_eq!(text[22], "mov qword ptr [rsp - 0x70], r11");
    assert_eq!(text[23], "rdfsbase r11");
    assert_eq!(text[24], "mov qword ptr [rsp - 0x80], r11");
    assert_eq!(text[25], "mov r11d, 1");
    let xadd_end = int3 - 9 - TRAP_CALL as u64;
    assert_eq!(text[26], format!("lock xadd qword ptr [rip + {:#x}], r11", page + COUNTER - xadd_end));
    assert_eq!(text[27], "lea r11, [r11 + 1]");
    assert_eq!(text[28], "mov qword ptr [rsp - 0x78], r11");
    // The trap helper (SIGTRAP unblocked), called below the red zone, then the int3.
    assert_eq!(text[29], "lea rsp, [rsp - 0x80]");
    assert!(text[30].starts_with("call "));
    assert_eq!(text[31], "lea rsp, [rsp + 0x80]");
    assert_eq!(text[32], "int3");
    assert_eq!(text[33], format!("jmp {:#x}", entry + 0x19));
    assert_eq!(int3s.len(), 2);
    assert_eq!(int3s.values().copied().max(), Some(11));
    let insns = cs.disasm_all(&code, page).unwrap();
    // The second match path is the same at its own place: each int3 is where its record says, and rcx at the
    // int3 (as a record gives it) is just past the path's `syscall`.
    for &at in int3s.keys() {
        let i = insns.iter().position(|i| i.address() == at).unwrap();
        assert_eq!(text[i], "int3");
        assert_eq!(text[i - 11], format!("movabs r11, {at:#x}"));
        let b = Block { thread: 0, seq: 1, int3: at, regs: Vec::new() };
        assert_eq!(insns.iter().find(|i| i.address() == b.rcx() - 2).map(|i| i.mnemonic().unwrap()), Some("syscall"));
    }
    // Without rdfsbase the thread word is 0, in the same length.
    let Assembled { code: plain, int3s: same, .. } = assemble(&p, page, &[9, 11], &[], false).unwrap();
    assert_eq!((plain.len(), same), (code.len(), int3s));
    let text: Vec<String> =
        cs.disasm_all(&plain, page).unwrap().iter().map(|i| i.mnemonic().unwrap().to_string()).collect();
    assert_eq!(text[23..26], ["xor", "nop", "mov"]);
    // The flags the counter's `lock xadd` leaves: after 0x7f + 1, AF and no PF (0x80 has one bit set); after
    // 0xff + 1, AF and PF (0x00); after 0x80 + 1, PF only; the other bits kept.
    let flags = |seq| Block { thread: 0, seq, int3: 0, regs: Vec::new() }.eflags(0x202 | 0x8c5);
    assert_eq!(flags(0x80), 0x202 | 0x10);
    assert_eq!(flags(0x100), 0x202 | 0x10 | 0x4);
    assert_eq!(flags(0x81), 0x202 | 0x4);
    // A wrapper whose next instruction reads the flags is refused.
    let mut odd = GLIBC_SYSCALL.to_vec();
    odd[0x19..0x1f].copy_from_slice(&[0x73, 0x01, 0x90, 0x90, 0x90, 0x90]);
    assert_eq!(plan(entry, &odd, &w.prefix, w.syscall_at, &targets), Err(Refusal::FlagsRead));
    // A branch into the patched bytes refuses.
    assert_eq!(plan(entry, GLIBC_SYSCALL, &w.prefix, w.syscall_at, &[entry + 0x13]), Err(Refusal::BranchIntoPatch));
    // Too far for rel32.
    assert!(patch_bytes(&p, entry + (3u64 << 31)).is_none());
}

#[test]
fn a_ring_path_writes_its_slot_then_its_number_and_a_full_ring_stops() {
    let cs = disassembler().unwrap();
    let entry = 0x7f00_0010_1810;
    let w = plan_wrapper(&cs, GLIBC_SYSCALL, entry).unwrap();
    let p = plan(entry, GLIBC_SYSCALL, &w.prefix, w.syscall_at, &[entry + 0x22]).unwrap();
    let page = entry - 0x10_0000;
    // Without rdfsbase a slot could not name its thread: no ring.
    assert!(assemble(&p, page, &[9, 11], &[11], false).is_none());
    let a = assemble(&p, page, &[9, 11, 25], &[11], true).unwrap();
    assert!(fits(&p, 3, 1) && a.code.len() <= 4096);
    assert_eq!(a.int3s.len(), 3, "the ring's full path stops at an int3 of its own");
    assert_eq!(a.ring_writes.len(), 2, "the ring's write and its full path");
    let insns = cs.disasm_all(&a.code, page).unwrap();
    let text: Vec<String> =
        insns.iter().map(|i| format!("{} {}", i.mnemonic().unwrap(), i.op_str().unwrap()).trim().to_string()).collect();
    let at = |addr: u64| insns.iter().position(|i| i.address() == addr).unwrap();
    // munmap's compare jumps to the ring path, which starts like a match path.
    let ring_at = u64::from_str_radix(text[3].trim_start_matches("je 0x"), 16).unwrap();
    let r = at(ring_at);
    let (write_from, write_to) = a.ring_writes[0];
    let counter = page + COUNTER;
    // The number is taken before `syscall`, kept in the red zone across it, and the room checked.
    let want = [
        "mov r9, qword ptr [rsp + 8]".to_string(),
        "mov r11d, 1".into(),
        format!("lock xadd qword ptr [rip + {:#x}], r11", counter - insns[r + 3].address()),
        "lea r11, [r11 + 1]".into(),
        "mov qword ptr [rsp - 0x10], r11".into(),
        "mov rcx, r11".into(),
        format!("sub rcx, qword ptr [rip + {:#x}]", page + TAIL - insns[r + 7].address()),
        format!("cmp rcx, {:#x}", RING_SLOTS),
    ];
    assert_eq!(text[r..r + 8], want);
    assert_eq!(insns[r + 3].address(), write_from, "a thread past the counter's xadd is stepped at detach");
    assert!(text[r + 8].starts_with("jae "));
    let slot_code = [
        "syscall".to_string(),
        "mov qword ptr [rsp - 8], rax".into(),
        "mov rax, qword ptr [rsp - 0x10]".into(),
        "mov ecx, eax".into(),
        format!("and ecx, {:#x}", RING_SLOTS - 1),
        "shl ecx, 7".into(),
        format!("lea r11, [rip + {:#x}]", page + RING - insns[r + 16].address()),
        "add r11, rcx".into(),
        "mov qword ptr [r11 + 8], 0xb".into(),
        "mov qword ptr [r11 + 0x50], 0".into(),
        "mov qword ptr [r11 + 0x10], rdi".into(),
        "mov qword ptr [r11 + 0x18], rsi".into(),
        "mov qword ptr [r11 + 0x20], rdx".into(),
        "mov qword ptr [r11 + 0x28], r10".into(),
        "mov qword ptr [r11 + 0x30], r8".into(),
        "mov qword ptr [r11 + 0x38], r9".into(),
        "mov rcx, qword ptr [rsp - 8]".into(),
        "mov qword ptr [r11 + 0x40], rcx".into(),
        "rdfsbase rcx".into(),
        "mov qword ptr [r11 + 0x48], rcx".into(),
        "mov rcx, qword ptr [rsp]".into(),
        "mov qword ptr [r11 + 0x58], rcx".into(),
        "mov qword ptr [r11 + 0x60], rsp".into(),
        "mov qword ptr [r11], rax".into(),
        "mov rax, qword ptr [rsp - 8]".into(),
        format!("jmp {:#x}", entry + 0x19),
    ];
    assert_eq!(text[r + 9..r + 35], slot_code);
    assert_eq!(insns[r + 33].address(), write_to, "the write ends with the sequence number's store");
    // The full path: the call, the record as a match path leaves it, r11 the sequence number, rcx as
    // `Block::rcx` says.
    let full = u64::from_str_radix(text[r + 8].trim_start_matches("jae 0x"), 16).unwrap();
    assert_eq!(full, insns[r + 35].address());
    let f = r + 35;
    assert_eq!(text[f..f + 3], ["syscall", "mov rcx, qword ptr [rsp - 0x10]", "mov qword ptr [rsp - 0x68], rax"]);
    let int3 = insns[f..].iter().find(|i| i.mnemonic() == Some("int3")).unwrap().address();
    assert_eq!(a.int3s[&int3], 11);
    assert_eq!(a.full_int3s, [int3]);
    let i = at(int3);
    assert_eq!(text[i - 7..i - 4], ["lea r11, [rcx - 1]", "add r11, 1", "mov qword ptr [rsp - 0x78], r11"]);
    assert_eq!(text[i - 4], format!("lea rcx, [rip - {:#x}]", insns[i - 3].address() - (int3 - RECORD_CODE)));
    assert_eq!(text[i - 3], "lea rsp, [rsp - 0x80]");
    assert_eq!(text[i + 1], format!("jmp {:#x}", entry + 0x19));
    // The other numbers' paths are match paths as before, each int3 where its record says.
    for (&at_, &nr) in a.int3s.iter().filter(|(_, nr)| **nr != 11) {
        let i = at(at_);
        assert_eq!(text[i - 11], format!("movabs r11, {at_:#x}"), "{nr}");
    }
    // A slot, word by word.
    let mut b = vec![0u8; SLOT as usize];
    for (i, v) in
        [7u64, 11, 1, 2, 3, 4, 5, 6, 0, 0x7f00_0000_0640, 2, 0x5555_0000_1234, 0x7ffd_0000_0008].iter().enumerate()
    {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    let s = Slot::parse(&b).unwrap();
    assert_eq!(
        (s.seq, s.nr, s.args, s.ret, s.thread, s.site, s.ra, s.sp),
        (7, 11, [1, 2, 3, 4, 5, 6], 0, 0x7f00_0000_0640, 2, 0x5555_0000_1234, 0x7ffd_0000_0008)
    );
    assert_eq!(Slot::parse(&b[..103]), None);
}

const GLIBC_MUNMAP: &[u8] = &[0xb8, 0x0b, 0, 0, 0, 0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, 0x73, 0x01, 0xc3];
const GLIBC_MMAP: &[u8] = &[
    0x41, 0x89, 0xca, 0x41, 0xf7, 0xc1, 0xff, 0x0f, 0, 0, 0x75, 0x14, 0xb8, 0x09, 0, 0, 0, 0x0f, 0x05, 0x48, 0x3d,
    0x00, 0xf0, 0xff, 0xff, 0x77, 0x25, 0xc3,
];
/// glibc 2.43's mmap (Debian sid): two registers pushed, then `syscall` on two paths (the second a retry below
/// 4 GiB under a tunable, with `or $0x40,%r10d` between its `mov $9,%eax` and its `syscall`).
const GLIBC_243_MMAP: &[u8] = &[
    0x41, 0xf7, 0xc1, 0xff, 0x0f, 0x00, 0x00, 0x75, 0x27, 0x55, 0x89, 0xcd, 0x53, 0x48, 0x89, 0xfb, 0x48, 0x85, 0xff,
    0x74, 0x3b, 0x41, 0x89, 0xea, 0x48, 0x89, 0xdf, 0xb8, 0x09, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x3d, 0x00, 0xf0,
    0xff, 0xff, 0x77, 0x76, 0x5b, 0x5d, 0xc3, 0x0f, 0x1f, 0x00, 0x48, 0x8b, 0x05, 0x91, 0x79, 0x0d, 0x00, 0x64, 0xc7,
    0x00, 0x16, 0x00, 0x00, 0x00, 0x48, 0xc7, 0xc0, 0xff, 0xff, 0xff, 0xff, 0xc3, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x89, 0xd0, 0x81, 0xe1, 0x00, 0x08, 0x00, 0x00, 0x83, 0xe0, 0x04, 0x09, 0xc8, 0x74, 0xb6,
    0x48, 0x8b, 0x05, 0x32, 0x7a, 0x0d, 0x00, 0xf6, 0x80, 0xc5, 0x01, 0x00, 0x00, 0x04, 0x74, 0xa6, 0x41, 0x89, 0xea,
    0x31, 0xff, 0xb8, 0x09, 0x00, 0x00, 0x00, 0x41, 0x83, 0xca, 0x40, 0x0f, 0x05, 0x48, 0x89, 0xc7, 0x48, 0x3d, 0x00,
    0xf0, 0xff, 0xff, 0x76, 0xa0, 0x48, 0x8b, 0x05, 0x37, 0x79, 0x0d, 0x00, 0xf7, 0xdf, 0x64, 0x89, 0x38, 0xe9, 0x7a,
    0xff, 0xff, 0xff, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x48, 0x8b, 0x15, 0x21, 0x79, 0x0d, 0x00, 0xf7, 0xd8, 0x64, 0x89,
    0x02, 0x48, 0xc7, 0xc0, 0xff, 0xff, 0xff, 0xff, 0xe9, 0x72, 0xff, 0xff, 0xff,
];
const GLIBC_MREMAP: &[u8] = &[
    0x48, 0x83, 0xec, 0x58, 0x4c, 0x89, 0x44, 0x24, 0x40, 0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0, 0x48, 0x89,
    0x44, 0x24, 0x18, 0x31, 0xc0, 0x83, 0xf9, 0x07, 0x77, 0x5a, 0x41, 0x89, 0xca, 0x45, 0x31, 0xc0, 0xf6, 0xc1, 0x06,
    0x75, 0x27, 0xb8, 0x19, 0, 0, 0, 0x0f, 0x05, 0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff,
];

#[test]
fn libc_functions_are_patched_at_their_number_move_and_share_the_page() {
    let cs = disassembler().unwrap();
    let (munmap, mmap, mremap) = (0x7f00_0010_1a00u64, 0x7f00_0010_19a0u64, 0x7f00_0010_99d0u64);
    let one = |at: u64, code: &[u8], nr: u64| {
        let sites = fixed::plan(&cs, at, code, nr)?;
        assert_eq!(sites.len(), 1);
        assert_eq!(sites[0].depth, 0);
        Ok::<_, Refusal>(sites[0].plan.clone())
    };
    let pu = one(munmap, GLIBC_MUNMAP, 11).unwrap();
    assert_eq!((pu.at, pu.orig.as_slice(), pu.syscall_at), (munmap, &GLIBC_MUNMAP[..5], munmap + 5));
    let pm = one(mmap, GLIBC_MMAP, 9).unwrap();
    // The number must be the one the function's name says, and every `syscall` must be reached and patched.
    assert_eq!(one(mmap, GLIBC_MMAP, 11), Err(Refusal::NoFixedNumber));
    // (A second `syscall` after a `ret`, reached by no branch.)
    let twice = [GLIBC_MUNMAP, &[0xc3], &GLIBC_MUNMAP[..7]].concat();
    assert_eq!(one(munmap, &twice, 11), Err(Refusal::SeveralSyscalls(2)));
    assert_eq!((pm.at, pm.syscall_at), (mmap + 12, mmap + 17));
    // mremap moves rsp otherwise than by push and pop, and stores into its frame.
    assert_eq!(one(mremap, GLIBC_MREMAP, 25), Err(Refusal::StackUsed));
    // A branch into the patched bytes, or a flags read after `syscall`, refuses.
    let mut odd = GLIBC_MMAP.to_vec();
    odd[11] = 0x01;
    assert_eq!(one(mmap, &odd, 9), Err(Refusal::MidInstruction));
    odd[11] = 0x05; // to the `syscall` itself, past its number
    assert_eq!(one(mmap, &odd, 9), Err(Refusal::BranchIntoPatch));
    let odd = [&GLIBC_MUNMAP[..7], &[0x73, 0x06], &GLIBC_MUNMAP[7..13], &[0xc3]].concat(); // `jae` first
    assert_eq!(one(munmap, &odd, 11), Err(Refusal::FlagsRead));
    // One page for syscall(), munmap (the ring) and mmap (a stop), each jumping back past its own `syscall`.
    let entry = 0x7f00_0010_1810;
    let w = plan_wrapper(&cs, GLIBC_SYSCALL, entry).unwrap();
    let pw = plan(entry, GLIBC_SYSCALL, &w.prefix, w.syscall_at, &[entry + 0x22]).unwrap();
    let sites = [
        Site { plan: pw, kind: Kind::Wrapper { numbers: vec![9, 11], ring: vec![11] } },
        Site { plan: pu.clone(), kind: Kind::Fixed { nr: 11, ring: true } },
        Site { plan: pm.clone(), kind: Kind::Fixed { nr: 9, ring: false } },
    ];
    let page = entry - 0x10_0000;
    assert!(assemble_sites(&sites, page, false, false).is_none(), "a ring needs rdfsbase");
    let a = assemble_sites(&sites, page, true, false).unwrap();
    assert_eq!(a.starts.len(), 3);
    assert_eq!(a.ring_writes.len(), 4);
    let insns = cs.disasm_all(&a.code, page).unwrap();
    let text = |addr: u64| {
        let i = insns.iter().find(|i| i.address() == addr).unwrap();
        format!("{} {}", i.mnemonic().unwrap(), i.op_str().unwrap())
    };
    assert_eq!(text(a.starts[1]), "mov eax, 0xb");
    assert_eq!(text(a.starts[2]), "mov eax, 9");
    let mut by_site: Vec<(usize, u64)> = a.int3_sites.iter().map(|(&i, &s)| (s, a.int3s[&i])).collect();
    by_site.sort();
    assert_eq!(by_site, [(0, 9), (0, 11), (1, 11), (2, 9)]);
    // Each int3's jump back goes past its own site's `syscall`.
    for (&int3, &si) in &a.int3_sites {
        let back = sites[si].plan.syscall_at + 2;
        assert_eq!(text(int3 + 1), format!("jmp {back:#x}"));
    }
    // The ring's slot says which site wrote it.
    let site_store = |si: usize| format!("mov qword ptr [r11 + 0x50], {si}");
    assert!(insns.iter().any(|i| format!("{} {}", i.mnemonic().unwrap(), i.op_str().unwrap()) == site_store(1)));
    assert_eq!(patch_bytes(&pu, a.starts[1]).unwrap().len(), 5);
}

#[test]
fn a_record_is_read_word_by_word() {
    let mut b = vec![0u8; BLOCK];
    let put = |b: &mut Vec<u8>, off: i8, v: u64| {
        let at = (BLOCK as isize + off as isize) as usize;
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    };
    for (i, &(_, _, _, off)) in SAVED.iter().enumerate() {
        put(&mut b, off, 100 + i as u64);
    }
    put(&mut b, AT_SEQ, 7);
    put(&mut b, AT_INT3, 0x1234);
    put(&mut b, AT_THREAD, 0x7f00_0000_0640);
    let r = Block::parse(&b).unwrap();
    assert_eq!((r.thread, r.seq, r.int3), (0x7f00_0000_0640, 7, 0x1234));
    assert_eq!(r.regs[0], (Reg::Rax, 100));
    assert_eq!(r.regs[12], (Reg::R15, 112));
    // Every word of the red zone is used once.
    let mut offs: Vec<i8> = SAVED.iter().map(|s| s.3).chain([AT_THREAD, AT_SEQ, AT_INT3]).collect();
    offs.sort();
    assert_eq!(offs, (0..16).map(|i| -128 + 8 * i as i8).collect::<Vec<_>>());
    assert_eq!(Block::parse(&b[..BLOCK - 1]), None);
}

fn map(start: u64, end: u64, perms: &str, path: &str) -> Mapping {
    Mapping { start, end, perms: perms.into(), offset: 0, dev: "00:00".into(), inode: 0, path: path.into() }
}

#[test]
fn pages_come_from_the_gaps_nearest_first_within_reach() {
    let libc = 0x7f00_4000_0000u64;
    let p = PatchPlan { at: libc + 0x1812, orig: vec![0x4c, 0x8b, 0x4c, 0x24, 0x08], syscall_at: libc + 0x1817 };
    let gib = 1u64 << 30;
    let maps = vec![
        // Far below: out of reach.
        map(0x5555_0000_0000, 0x5555_0001_0000, "r-xp", "/bin/prog"),
        // Crowded below libc, with a one-page hole (no room for a free page each side) and a 64 KiB hole.
        map(libc - 2 * gib, libc - gib - 0x10_000, "---p", ""),
        map(libc - gib, libc - 0x3000, "---p", ""),
        map(libc - 0x2000, libc, "---p", ""),
        map(libc, libc + 0x20_0000, "r-xp", "/usr/lib/libc.so.6"),
        // Above libc: one gap of 44 KiB, then the stack's own gap (never used), then the stack.
        map(libc + 0x20_0000, libc + 0x40_0000, "rw-p", ""),
        map(libc + 0x40_b000, libc + 0x50_0000, "rw-p", ""),
        map(libc + 0x1000_0000, libc + 0x1002_1000, "rw-p", "[stack]"),
        map(0xffff_ffff_ff60_0000, 0xffff_ffff_ff60_1000, "--xp", "[vsyscall]"),
    ];
    let c = page_candidates(&maps, std::slice::from_ref(&p), PAGES);
    // The 44 KiB gap above libc (room for the nine pages and a free page each side), the space above the stack,
    // then the 64 KiB hole 1 GiB below (at its top, with a free page above).
    assert_eq!(c, [libc + 0x40_1000, libc + 0x1002_2000, libc - gib - 0xa000]);
    // Never adjacent to a mapping, never below the stack, always within rel32 of every branch.
    for &page in &c {
        assert_eq!(page % 4096, 0);
        assert!(maps.iter().all(|m| page + PAGES * 4096 < m.start || page > m.end), "{page:#x}");
        assert!(!(libc + 0x50_0000..libc + 0x1000_0000).contains(&page));
        assert!(patch_bytes(&p, page).is_some() && assemble(&p, page, &[9], &[], true).is_some(), "{page:#x}");
    }
    // Nothing at all within reach: no candidate.
    let full = vec![map(libc - 3 * gib, libc + 3 * gib, "---p", "")];
    assert!(page_candidates(&full, std::slice::from_ref(&p), PAGES).is_empty());
    // With a ring (25 pages and a free one each side), the 44 KiB gap is too small.
    assert_eq!(page_candidates(&maps, std::slice::from_ref(&p), pages(true))[0], libc + 0x1002_2000);
}

#[test]
fn a_known_stack_path_calls_the_matcher_and_branches_on_its_answer() {
    let cs = disassembler().unwrap();
    let entry = 0x7f00_0010_1810;
    let w = plan_wrapper(&cs, GLIBC_SYSCALL, entry).unwrap();
    let p = plan(entry, GLIBC_SYSCALL, &w.prefix, w.syscall_at, &[entry + 0x22]).unwrap();
    let sites = [Site { plan: p.clone(), kind: Kind::Wrapper { numbers: vec![9, 11], ring: vec![11] } }];
    let page = entry - 0x10_0000;
    assert!(assemble_sites(&sites, page, false, true).is_none(), "known stacks need rdfsbase");
    let a = assemble_sites(&sites, page, true, true).unwrap();
    let (known_at, known_end) = a.known_code.unwrap();
    assert_eq!(known_at % 16, 0);
    assert_eq!(known_end - known_at, crate::x86::known::CODE.len() as u64);
    assert_eq!(&a.code[(known_at - page) as usize..(known_end - page) as usize], crate::x86::known::CODE);
    assert_eq!(a.known_int3s.len(), 1, "mmap's stop asks the matcher; munmap goes to the ring");
    let int3 = a.known_int3s[0];
    assert_eq!(a.int3s[&int3], 9);
    let insns = cs.disasm_all(&a.code[..(known_at - page) as usize], page).unwrap();
    let all: Vec<(u64, String)> = insns
        .iter()
        .map(|i| (i.address(), format!("{} {}", i.mnemonic().unwrap(), i.op_str().unwrap()).trim().to_string()))
        .collect();
    let at = |s: &str| all.iter().position(|(_, t)| t == s).unwrap_or_else(|| panic!("no `{s}` in {all:#?}"));
    let call = at(&format!("call {known_at:#x}"));
    let t = |i: usize| all[i].1.as_str();
    assert_eq!(t(call - 5), "lea rsp, [rsp - 0x88]");
    assert_eq!(t(call - 4), "lea rdi, [rsp + 0x88]");
    assert_eq!(t(call - 3), "mov esi, 9");
    assert_eq!(t(call - 2), "mov edx, 0");
    assert_eq!(t(call - 1), format!("lea rcx, [rip - {:#x}]", all[call].0 - page));
    assert_eq!(t(call + 1), "lea rsp, [rsp + 0x88]");
    assert_eq!(t(call + 2), "test rax, rax");
    let target = |i: usize| u64::from_str_radix(t(i).split("0x").nth(1).unwrap(), 16).unwrap();
    let index_of = |addr: u64| all.iter().position(|(a, _)| *a == addr).unwrap();
    // Not known: the counter, then the common end.
    assert!(t(call + 3).starts_with("je "));
    let miss = index_of(target(call + 3));
    assert_eq!(t(miss), "mov r11d, 1");
    assert!(t(miss + 1).starts_with("lock xadd"));
    // Known but the ring is full: the number it took.
    assert!(t(call + 4).starts_with("js "));
    let full = index_of(target(call + 4));
    assert_eq!(t(full), "mov r11, rax");
    assert_eq!(t(full + 1), "btr r11, 0x3f");
    assert_eq!(index_of(target(full + 2)), miss + 3, "the full branch joins after the counter");
    // Written into the ring: the result and what `syscall` keeps back, and back into the wrapper.
    assert_eq!(t(call + 5), "mov rax, qword ptr [rsp - 0x68]");
    assert_eq!(t(call + 6), "mov rdi, qword ptr [rsp - 0x60]");
    assert_eq!(t(call + 11), "mov r9, qword ptr [rsp - 0x38]");
    assert_eq!(t(call + 12), format!("jmp {:#x}", p.syscall_at + 2));
    let common = miss + 3;
    assert_eq!(t(common), "lea r11, [r11 - 1]");
    assert_eq!(t(common + 1), "add r11, 1");
    assert_eq!(t(common + 2), "mov qword ptr [rsp - 0x78], r11");
    assert_eq!(t(common + 3), "mov rax, qword ptr [rsp - 0x68]");
    assert_eq!(t(common + 9), "mov r9, qword ptr [rsp - 0x38]");
    assert_eq!(t(common + 10), format!("lea rcx, [rip - {:#x}]", all[common + 11].0 - (int3 - RECORD_CODE)));
    assert_eq!(t(common + 11), "lea rsp, [rsp - 0x80]");
    assert_eq!(all[common + 14], (int3, "int3".to_string()));
    // A thread held from the matcher's return to its int3 may have a number: stepped through at detach.
    assert!(a.ring_writes.contains(&(all[call + 1].0, int3 + 1)));
    assert!(a.ring_writes.contains(&(known_at, known_end)));
}

/// `--leaks`'s sites: the wrapper with six numbers (two to the ring) and four libc mapping functions (two to the
/// ring); and the wrapper's entry.
fn leaks_sites(cs: &capstone::Capstone) -> (u64, Vec<Site>) {
    let entry = 0x7f00_0010_1810;
    let w = plan_wrapper(cs, GLIBC_SYSCALL, entry).unwrap();
    let pw = plan(entry, GLIBC_SYSCALL, &w.prefix, w.syscall_at, &[entry + 0x22]).unwrap();
    let pm = fixed::plan(cs, 0x7f00_0010_19a0, GLIBC_MMAP, 9).map(|v| v[0].plan.clone()).unwrap();
    let mut sites =
        vec![Site { plan: pw, kind: Kind::Wrapper { numbers: vec![9, 10, 11, 12, 25, 28], ring: vec![11, 28] } }];
    for i in 0..4u64 {
        let p = PatchPlan { at: pm.at + i * 0x100, ..pm.clone() };
        sites.push(Site { plan: p, kind: Kind::Fixed { nr: 9, ring: i % 2 == 1 } });
    }
    (entry, sites)
}

/// `--leaks --malloc` with known stacks fits the code pages: the wrapper's six numbers, libc's four mapping
/// functions and the nine allocation functions, each stub with its own int3 asking the matcher; the sampler's and
/// the matcher's code after them. A sampled call's stub moves the entry's instructions, jumps back past them, and
/// its frame around the call carries the cookie (the return address xor `COOKIE`).
#[test]
fn leaks_and_malloc_with_known_stacks_fit_the_code_pages() {
    use crate::x86::alloc::{AllocFn, COOKIE, plan_entry};
    let cs = disassembler().unwrap();
    let (entry, mut sites) = leaks_sites(&cs);
    let malloc = [0x41, 0x54, 0x55, 0x53, 0x48, 0x89, 0xfb, 0x48, 0x83, 0xec, 0x10, 0xc3];
    let free_site = 5 + AllocFn::ALL.iter().position(|&f| f == AllocFn::Free).unwrap();
    for (i, &f) in AllocFn::ALL.iter().enumerate() {
        let at = 0x7f00_0020_0000 + i as u64 * 0x1000;
        let (p, moved) = plan_entry(&cs, at, &malloc).unwrap();
        sites.push(Site {
            plan: p,
            kind: Kind::Alloc {
                f,
                moved,
                free_site,
                internal: Some((0x7f00_0020_0000, 0x7f00_0030_0000)),
                null_to_malloc: false,
            },
        });
    }
    let page = entry - 0x10_0000;
    let a = assemble_sites(&sites, page, true, true).expect("fits with known stacks");
    assert!(a.code.len() as u64 <= CODE_BYTES, "{} bytes", a.code.len());
    assert_eq!(a.flags.len(), 1, "one byte turns every stub off");
    assert_eq!(a.code[(a.flags[0] - page) as usize], 0xcc);
    // Every allocation function but free stops at its own int3 (asking the matcher), and each stub has a full
    // ring's stop for the free of a sampled block.
    let alloc_int3s: Vec<_> = a.int3_sites.iter().filter(|&(_, &s)| s >= 5 && s != free_site).collect();
    assert_eq!(alloc_int3s.len(), AllocFn::ALL.len() - 1);
    assert!(alloc_int3s.iter().all(|(i, _)| a.known_int3s.contains(i)));
    assert_eq!(a.full_int3s.iter().filter(|i| a.int3_sites[i] == free_site).count(), AllocFn::ALL.len());
    // malloc's stub: the cookie is the address just past its `call`, xor COOKIE; its moved instructions jump back
    // to the entry's fourth instruction.
    let start = (a.starts[5] - page) as usize;
    let code = &a.code[start..];
    let movabs = code.windows(2).position(|w| w == [0x49, 0xbb]).unwrap();
    let cookie = u64::from_le_bytes(code[movabs + 2..movabs + 10].try_into().unwrap());
    assert_eq!(cookie ^ COOKIE, a.starts[5] + movabs as u64 + 10 + 4 + 5);
    let moved = code.windows(7).position(|w| w == &malloc[..7]).unwrap();
    assert_eq!(code[moved + 7], 0xe9);
    let rel = i32::from_le_bytes(code[moved + 8..moved + 12].try_into().unwrap()) as i64;
    assert_eq!((a.starts[5] + moved as u64 + 12) as i64 + rel, 0x7f00_0020_0000 + 7);
}

/// glibc 2.43's mmap: both paths to the kernel are patched, each at its `mov $9,%eax` (the retry's with the
/// `or` after it), at the depth its two pushes left; both assemble into one page with the others.
#[test]
fn glibc_2_43_mmap_is_patched_on_both_of_its_paths() {
    let cs = disassembler().unwrap();
    let mmap = 0x7f00_0010_f420u64;
    let sites = fixed::plan(&cs, mmap, GLIBC_243_MMAP, 9).unwrap();
    let got: Vec<(u64, usize, u64, u64)> =
        sites.iter().map(|s| (s.plan.at - mmap, s.plan.orig.len(), s.plan.syscall_at - mmap, s.depth)).collect();
    assert_eq!(got, [(27, 5, 32, 16), (116, 9, 125, 16)]);
    assert_eq!(sites[1].plan.orig, [0xb8, 0x09, 0, 0, 0, 0x41, 0x83, 0xca, 0x40]);
    // A pop too many, or a push left on a path that returns, refuses.
    let mut odd = GLIBC_243_MMAP.to_vec();
    odd[44] = 0x5d; // `ret` after the pops becomes a third `pop`
    assert_eq!(fixed::plan(&cs, mmap, &odd, 9), Err(Refusal::StackUsed));
    let mut odd = GLIBC_243_MMAP.to_vec();
    odd[42] = 0x90; // one `pop` fewer
    assert_eq!(fixed::plan(&cs, mmap, &odd, 9), Err(Refusal::StackUsed));
    // A retry path whose `syscall` is reached straight, past its number, refuses.
    let mut odd = GLIBC_243_MMAP.to_vec();
    odd[110] = (125 - 111) as u8; // `je mmap+21` at 109 now jumps to the second `syscall`
    assert_eq!(fixed::plan(&cs, mmap, &odd, 9), Err(Refusal::BranchIntoPatch));
    let page = mmap - 0x10_0000;
    let all: Vec<Site> =
        sites.iter().map(|s| Site { plan: s.plan.clone(), kind: Kind::Fixed { nr: 9, ring: false } }).collect();
    let a = assemble_sites(&all, page, true, true).unwrap();
    assert_eq!(a.starts.len(), 2);
    for (s, &start) in sites.iter().zip(&a.starts) {
        // Each path starts with its moved instructions and jumps back past its own `syscall`.
        let at = (start - page) as usize;
        assert_eq!(a.code[at..at + s.plan.orig.len()], s.plan.orig[..]);
        let jump = patch_bytes(&s.plan, start).unwrap();
        assert_eq!(jump.len(), s.plan.orig.len());
    }
}

/// A dedicated allocator's every entry (the standard ones, C++'s `operator new` and `delete` in all their forms,
/// jemalloc's own) fits the code pages beside `--leaks`'s sites, with known stacks.
#[test]
fn every_entry_of_a_dedicated_allocator_fits_the_code_pages() {
    use crate::x86::alloc::{AllocFn, plan_entry};
    let cs = disassembler().unwrap();
    let (entry, mut sites) = leaks_sites(&cs);
    let malloc = [0x41, 0x54, 0x55, 0x53, 0x48, 0x89, 0xfb, 0x48, 0x83, 0xec, 0x10, 0xc3];
    let kinds: Vec<AllocFn> = AllocFn::ALL.iter().copied().chain(AllocFn::MORE.iter().map(|m| m.1)).collect();
    assert_eq!(kinds.len(), 36);
    let free_site = 5 + 3;
    for (i, &f) in kinds.iter().enumerate() {
        let at = 0x7f00_0020_0000 + i as u64 * 0x1000;
        let (p, moved) = plan_entry(&cs, at, &malloc).unwrap();
        let internal = Some((0x7f00_0020_0000, 0x7f00_0030_0000));
        sites.push(Site { plan: p, kind: Kind::Alloc { f, moved, free_site, internal, null_to_malloc: false } });
    }
    let page = entry - 0x10_0000;
    let a = assemble_sites(&sites, page, true, true).expect("fits with known stacks");
    assert!(a.code.len() as u64 <= CODE_BYTES, "{} bytes", a.code.len());
    assert_eq!(AllocFn::of("_ZdlPvm"), Some(AllocFn::Free));
    assert_eq!(AllocFn::of("mallocx"), Some(AllocFn::Malloc));
    assert_eq!(AllocFn::of("memalign"), Some(AllocFn::AlignedAlloc));
}
