//! `--malloc`: sampled allocations. Pure: the allocation functions, the plan of a patch at a function's entry (its
//! first instructions moved into the trampoline, relocated), the sampler's tables in the shared pages (shared with
//! `alloc.c`, built into [`CODE`]) and the estimate a sample stands for.
//!
//! Each patched entry jumps to its stub in the trampoline's code pages (see `trampoline_alloc.rs`), which asks the
//! sampler whether this call is sampled: a per-thread count of bytes, drawn again from an exponential
//! distribution of mean R each time it runs out, so each byte allocated is sampled with probability 1/R and a
//! block of S bytes with probability 1 - exp(-S/R). An unsampled call goes on into the function. A sampled one is
//! called from the stub, its block's address remembered in a table of the shared pages, and it stops once, at the
//! stub's int3, with the stack at the function's entry (the tracer unwinds it as any stop's). A free finds a
//! sampled block in that table and writes its address into the ring, without a stop.

/// The sampler's code (`src/x86/alloc.c`, built by build.rs), copied into the trampoline's code pages.
pub const CODE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/alloc.bin"));

/// Offsets from the trampoline's first page of the sampler's data (after the known stacks' table): a control page,
/// the draws, the threads' counts and the table of sampled blocks.
pub const ALLOC: u64 = super::known::OPS_AT + super::known::OPS * super::known::OP;
pub const DRAWS: u64 = ALLOC + 4096;
pub const NDRAWS: u64 = 4096;
pub const THREADS: u64 = DRAWS + NDRAWS * 8;
pub const NTHREADS: u64 = 1024;
pub const TABLE: u64 = THREADS + NTHREADS * 32;
pub const NTABLE: u64 = 65536;
/// The multiplier of the hashes of a thread's slot and a block's bucket (their top bits are taken: a multiplier
/// with all its high bits set, as a sign-extended 32-bit one, would put neighbouring blocks in one bucket), and
/// their shifts: 1024 slots of 32 bytes (fs base >> 12), 16384 buckets of four blocks (address >> 4).
pub const K: u64 = 0x9E37_79B9_7F4A_7C15;
pub const THREAD_SHIFT: u8 = 54;
pub const BUCKET_SHIFT: u8 = 50;
/// Pages of the sampler's data.
pub const PAGES: u64 = (TABLE + NTABLE * 8 - ALLOC) / 4096;
/// Words of the control page: the seed of the threads' generators, blocks the table had no room for, calls counted
/// on the shared count (the threads' table was full), calls sampled.
pub const C_SEED: u64 = 0;
pub const C_TABLE_FULL: u64 = 1;
pub const C_THREADS_FULL: u64 = 2;
pub const C_SAMPLED: u64 = 3;
pub const C_SHARED_LEFT: u64 = 4;
pub const C_SHARED_RNG: u64 = 5;
/// A sampled call's frame in the stub: above the function's return address into the stub, that address xor
/// `COOKIE` twice, then the saved rdi, rsi, rdx and the caller's return address (48 bytes in all).
pub const COOKIE: u64 = 0x5359_5343_4154_4348;
/// Bytes of that frame above the return address into the stub, up to the caller's return address.
pub const STUB_FRAME: u64 = 40;

/// The phases of a call (`op = phase | kind << 4`).
pub const P_ENTER: u64 = 0;
pub const P_AFTER: u64 = 1;
pub const P_FREE: u64 = 2;

/// The allocation functions `--malloc` patches, in `alloc.c`'s order of kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocFn {
    Malloc,
    Calloc,
    Realloc,
    Free,
    PosixMemalign,
    AlignedAlloc,
    Valloc,
    Pvalloc,
    Reallocarray,
}

impl AllocFn {
    pub const ALL: [AllocFn; 10] = [
        AllocFn::Malloc,
        AllocFn::Calloc,
        AllocFn::Realloc,
        AllocFn::Free,
        AllocFn::PosixMemalign,
        AllocFn::AlignedAlloc,
        AllocFn::AlignedAlloc,
        AllocFn::Valloc,
        AllocFn::Pvalloc,
        AllocFn::Reallocarray,
    ];
    /// The exported names, in [`AllocFn::ALL`]'s order (`memalign` takes the arguments of `aligned_alloc`).
    pub const NAMES: [&'static str; 10] = [
        "malloc",
        "calloc",
        "realloc",
        "free",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
        "reallocarray",
    ];
    /// The other entries a dedicated allocator exports with the arguments of one of the standard ones: C++'s
    /// `operator new` and `new[]` (size first; nothrow and aligned too) as malloc, `operator delete` (pointer first;
    /// sized, nothrow and aligned too) as free, and jemalloc's own `mallocx(size, flags)`, `rallocx(ptr, size,
    /// flags)`, `dallocx(ptr, flags)` and `sdallocx(ptr, size, flags)`. (jemalloc's `xallocx` resizes in place and
    /// returns a size: not sampled.)
    pub const MORE: [(&'static str, AllocFn); 26] = [
        ("mallocx", AllocFn::Malloc),
        ("rallocx", AllocFn::Realloc),
        ("dallocx", AllocFn::Free),
        ("sdallocx", AllocFn::Free),
        ("_Znwm", AllocFn::Malloc),
        ("_Znam", AllocFn::Malloc),
        ("_ZnwmRKSt9nothrow_t", AllocFn::Malloc),
        ("_ZnamRKSt9nothrow_t", AllocFn::Malloc),
        ("_ZnwmSt11align_val_t", AllocFn::Malloc),
        ("_ZnamSt11align_val_t", AllocFn::Malloc),
        ("_ZnwmSt11align_val_tRKSt9nothrow_t", AllocFn::Malloc),
        ("_ZnamSt11align_val_tRKSt9nothrow_t", AllocFn::Malloc),
        ("_ZdlPv", AllocFn::Free),
        ("_ZdaPv", AllocFn::Free),
        ("_ZdlPvm", AllocFn::Free),
        ("_ZdaPvm", AllocFn::Free),
        ("_ZdlPvRKSt9nothrow_t", AllocFn::Free),
        ("_ZdaPvRKSt9nothrow_t", AllocFn::Free),
        ("_ZdlPvSt11align_val_t", AllocFn::Free),
        ("_ZdaPvSt11align_val_t", AllocFn::Free),
        ("_ZdlPvmSt11align_val_t", AllocFn::Free),
        ("_ZdaPvmSt11align_val_t", AllocFn::Free),
        ("_ZdlPvSt11align_val_tRKSt9nothrow_t", AllocFn::Free),
        ("_ZdaPvSt11align_val_tRKSt9nothrow_t", AllocFn::Free),
        ("_ZdlPvmSt11align_val_tRKSt9nothrow_t", AllocFn::Free),
        ("_ZdaPvmSt11align_val_tRKSt9nothrow_t", AllocFn::Free),
    ];

    pub fn of(name: &str) -> Option<AllocFn> {
        let more = Self::MORE.iter().find(|(n, _)| *n == name).map(|&(_, f)| f);
        Self::NAMES.iter().position(|n| *n == name).map(|i| Self::ALL[i]).or(more)
    }

    /// Its number in `alloc.c`.
    pub fn kind(self) -> u64 {
        self as u64
    }

    /// The bytes asked for by a call with these arguments (rdi, rsi, rdx).
    pub fn size(self, a: [u64; 3]) -> u64 {
        match self {
            AllocFn::Malloc | AllocFn::Valloc => a[0],
            AllocFn::Calloc => a[0].saturating_mul(a[1]),
            AllocFn::Realloc | AllocFn::AlignedAlloc => a[1],
            AllocFn::PosixMemalign => a[2],
            AllocFn::Pvalloc => a[0].saturating_add(4095) & !4095,
            AllocFn::Reallocarray => a[1].saturating_mul(a[2]),
            AllocFn::Free => 0,
        }
    }
}

/// The bytes a sampled block of `size` bytes stands for, sampled at a mean of `every` bytes: size / P(sampled), so
/// the sum over samples is an unbiased estimate of the bytes allocated.
pub fn weight(size: u64, every: u64) -> f64 {
    let (s, r) = (size as f64, every.max(1) as f64);
    if s <= 0.0 {
        return 0.0;
    }
    s / -(-s / r).exp_m1()
}

/// The draws of the threads' counts: `NDRAWS` quantiles of the exponential distribution of mean `every`, which
/// the sampler picks from at random (so its counts are exponential but for the rounding to one of these).
pub fn draws(every: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(NDRAWS as usize * 8);
    for i in 0..NDRAWS {
        let q = (i as f64 + 0.5) / NDRAWS as f64;
        let v = (-(every as f64) * (-q).ln_1p()).round().max(1.0) as i64;
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// One instruction moved from a patched entry into the trampoline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    /// Position-independent: copied as is.
    Bytes(Vec<u8>),
    /// A rip-relative operand: the bytes, with the rel32 at `at` made to reach `target` again.
    RipRel { bytes: Vec<u8>, at: usize, target: u64 },
    /// A conditional jump (condition `cc`, 0..15) to `target`, made a near one.
    Jcc { cc: u8, target: u64 },
    /// A direct jump to `target` (an entry that is a tail call: mimalloc's `posix_memalign`), made a near one.
    Jmp { target: u64 },
}

impl Moved {
    /// Its bytes at `addr`, or `None` if a target is out of reach.
    pub fn bytes_at(&self, addr: u64) -> Option<Vec<u8>> {
        let rel = |end: u64, to: u64| i32::try_from(to as i128 - end as i128).ok().map(i32::to_le_bytes);
        Some(match self {
            Moved::Bytes(b) => b.clone(),
            Moved::RipRel { bytes, at, target } => {
                let mut b = bytes.clone();
                b.get_mut(*at..*at + 4)?.copy_from_slice(&rel(addr + bytes.len() as u64, *target)?);
                b
            }
            Moved::Jcc { cc, target } => {
                let mut b = vec![0x0f, 0x80 | cc];
                b.extend_from_slice(&rel(addr + 6, *target)?);
                b
            }
            Moved::Jmp { target } => {
                let mut b = vec![0xe9];
                b.extend_from_slice(&rel(addr + 5, *target)?);
                b
            }
        })
    }
}

/// The patch at a function's entry (`code`: the whole function, from `entry`): its first whole instructions
/// covering 5 bytes, each movable (position-independent, rip-relative, or a conditional jump), with no branch of
/// the function into them but to the entry itself.
pub fn plan_entry(
    cs: &capstone::Capstone,
    entry: u64,
    code: &[u8],
) -> Result<(super::trampoline::PatchPlan, Vec<Moved>), super::trampoline::Refusal> {
    use super::trampoline::{PatchPlan, Refusal, branch_target};
    use capstone::arch::x86::X86OperandType;
    let insns = cs.disasm_all(code, entry).map_err(|_| Refusal::OutsideCode)?;
    let mut targets = Vec::new();
    for i in insns.iter() {
        let off = (i.address() - entry) as usize;
        if let Some(t) = code.get(off..).and_then(|b| branch_target(b, i.address())) {
            targets.push(t);
        }
    }
    let mut moved = Vec::new();
    let mut len = 0usize;
    for i in insns.iter() {
        if len >= 5 {
            break;
        }
        let bytes = i.bytes().to_vec();
        let m = i.mnemonic().unwrap_or("");
        let unmovable = || Refusal::Unmovable(format!("{m} {}", i.op_str().unwrap_or("")));
        let ops = super::breakpoints::operands(cs, i);
        let rip = ops.iter().find_map(|o| match o {
            X86OperandType::Mem(mem) if mem.base().0 as u32 == capstone::arch::x86::X86Reg::X86_REG_RIP => {
                Some(mem.disp())
            }
            _ => None,
        });
        let end = i.address() + bytes.len() as u64;
        if let Some(disp) = rip {
            let want = (disp as i32).to_le_bytes();
            let at: Vec<usize> = (1..bytes.len().saturating_sub(3)).filter(|&k| bytes[k..k + 4] == want).collect();
            let [at] = at[..] else { return Err(unmovable()) };
            moved.push(Moved::RipRel { bytes, at, target: end.wrapping_add(disp as u64) });
        } else if m == "jmp" && bytes[0] == 0xe9 && len == 0 {
            // A tail call at the entry (5 bytes: the patch covers it alone; a short one would spill into what
            // follows, maybe another function).
            let target = branch_target(&bytes, i.address()).ok_or_else(unmovable)?;
            moved.push(Moved::Jmp { target });
            len += i.len();
            break;
        } else if m.starts_with('j') && m != "jmp" && !m.starts_with("jr") && !m.starts_with("jcxz") {
            let target = branch_target(&bytes, i.address()).ok_or_else(unmovable)?;
            let cc = match bytes[..] {
                [0x70..=0x7f, _] => bytes[0] & 15,
                [0x0f, 0x80..=0x8f, ..] => bytes[1] & 15,
                _ => return Err(unmovable()),
            };
            moved.push(Moved::Jcc { cc, target });
        } else {
            let flow = matches!(m, "call" | "jmp" | "ret" | "syscall" | "int3" | "ud2" | "hlt" | "loop" | "leave");
            if flow || m.starts_with("ret") || i.op_str().unwrap_or("").contains("rip") {
                return Err(unmovable());
            }
            moved.push(Moved::Bytes(bytes));
        }
        len += i.len();
    }
    if len < 5 {
        return Err(Refusal::NoRoom);
    }
    let patched = entry..entry + len as u64;
    if targets.iter().any(|&t| t > entry && patched.contains(&t)) {
        return Err(Refusal::BranchIntoPatch);
    }
    if moved.iter().any(|m| matches!(m, Moved::Jcc { target, .. } | Moved::Jmp { target } if patched.contains(target)))
    {
        return Err(Refusal::BranchIntoPatch);
    }
    let orig = code[..len].to_vec();
    Ok((PatchPlan { at: entry, orig, syscall_at: entry }, moved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::breakpoints::disassembler;
    use crate::x86::trampoline::Refusal;

    #[test]
    fn the_layout_is_the_samplers() {
        let c = include_str!("alloc.c");
        let def = |name: &str| -> String {
            let line = c.lines().find(|l| l.starts_with(&format!("#define {name} "))).expect(name);
            line.split_whitespace().skip(2).collect::<Vec<_>>().join(" ")
        };
        assert_eq!(def("ALLOC"), format!("{ALLOC}UL"));
        assert_eq!(def("NDRAWS"), format!("{NDRAWS}UL"));
        assert_eq!(def("NTHREADS"), format!("{NTHREADS}UL"));
        assert_eq!(def("NTABLE"), format!("{NTABLE}UL"));
        assert_eq!(def("COUNTER"), format!("{}UL", crate::x86::trampoline::COUNTER));
        assert_eq!(def("RING"), format!("({} * 4096UL)", crate::x86::trampoline::RING / 4096));
        for (i, n) in
            ["K_MALLOC", "K_CALLOC", "K_REALLOC", "K_FREE", "K_POSIX_MEMALIGN", "K_ALIGNED_ALLOC"].iter().enumerate()
        {
            assert_eq!(def(n), i.to_string(), "{n}");
        }
        assert_eq!(def("K_REALLOCARRAY"), AllocFn::Reallocarray.kind().to_string());
        assert_eq!(def("C_SAMPLED"), C_SAMPLED.to_string());
        assert_eq!(def("K"), format!("{:#X}UL", K).replace("0X", "0x"));
        let c_shifts = c.contains(&format!(">> {THREAD_SHIFT};")) && c.contains(&format!(">> {BUCKET_SHIFT})"));
        assert!(c_shifts, "the hashes' shifts");
        assert_eq!(def("BUCKET"), "4UL");
        assert_eq!(ALLOC % 4096, 0);
        assert!(!CODE.is_empty() && CODE.len() < 4096, "{} bytes", CODE.len());
    }

    #[test]
    fn a_sample_stands_for_its_size_over_its_chance() {
        // Large blocks are always sampled: they stand for themselves.
        assert!((weight(100 << 20, 512 << 10) - (100 << 20) as f64).abs() < 1.0);
        // A block of R bytes is sampled with probability 1 - 1/e.
        let r = 512 << 10;
        assert!((weight(r, r) - r as f64 / (1.0 - (-1f64).exp())).abs() < 1e-6);
        // Small ones stand for about R.
        assert!((weight(16, r) - r as f64).abs() < 16.0);
        assert_eq!(weight(0, r), 0.0);
    }

    #[test]
    fn the_draws_are_exponential_quantiles() {
        let d = draws(1000);
        let v: Vec<i64> = d.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(v.len(), NDRAWS as usize);
        let mean = v.iter().sum::<i64>() as f64 / v.len() as f64;
        assert!((mean - 1000.0).abs() < 10.0, "{mean}");
        assert!(v.windows(2).all(|w| w[0] <= w[1]) && v[0] >= 1);
        let median = v[v.len() / 2] as f64;
        assert!((median - 1000.0 * 2f64.ln()).abs() < 2.0, "{median}");
    }

    #[test]
    fn glibc_entries_are_moved_with_their_rip_operands_and_jumps() {
        let cs = disassembler().unwrap();
        // malloc (2.36): push %r12 ; push %rbp ; push %rbx ; mov %rdi,%rbx ; sub $0x10,%rsp
        let malloc = [0x41, 0x54, 0x55, 0x53, 0x48, 0x89, 0xfb, 0x48, 0x83, 0xec, 0x10, 0xc3];
        let (p, m) = plan_entry(&cs, 0x1000, &malloc).unwrap();
        assert_eq!((p.at, p.orig.len(), m.len()), (0x1000, 7, 4));
        // free: test %rdi,%rdi ; je +0xbf (far past the patch) ; push %rbp
        let mut free = vec![0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0, 0x55];
        free.resize(0xd0, 0x90);
        let (p, m) = plan_entry(&cs, 0x2000, &free).unwrap();
        assert_eq!(p.orig.len(), 9);
        assert_eq!(m[1], Moved::Jcc { cc: 4, target: 0x2009 + 0xbf });
        let at = 0x7000_0000;
        assert_eq!(
            m[1].bytes_at(at).unwrap(),
            [0x0f, 0x84].into_iter().chain(((0x20c8i64 - (at as i64 + 6)) as i32).to_le_bytes()).collect::<Vec<_>>()
        );
        // posix_memalign: cmpb $0x0,0x140201(%rip) ; push %r12
        let pm = [0x80, 0x3d, 0x01, 0x02, 0x14, 0x00, 0x00, 0x41, 0x54, 0xc3];
        let (p, m) = plan_entry(&cs, 0x3000, &pm).unwrap();
        assert_eq!(p.orig.len(), 7);
        let Moved::RipRel { at: 2, target, .. } = m[0] else { panic!("{m:?}") };
        assert_eq!(target, 0x3007 + 0x140201);
        let b = m[0].bytes_at(0x3000 + 0x100).unwrap();
        assert_eq!(i32::from_le_bytes(b[2..6].try_into().unwrap()) as i64, 0x140201 - 0x100);
        assert_eq!(b[6], 0, "the immediate is kept");
        // A call or a branch into the patched bytes is refused.
        assert!(matches!(plan_entry(&cs, 0x4000, &[0xe8, 0, 0, 0, 0, 0xc3]), Err(Refusal::Unmovable(_))));
        let into = [0x48, 0x85, 0xff, 0x74, 0x01, 0x55, 0x53, 0x75, 0xfb, 0xc3];
        assert_eq!(plan_entry(&cs, 0x5000, &into), Err(Refusal::BranchIntoPatch));
        assert_eq!(plan_entry(&cs, 0x6000, &[0x55, 0xc3]), Err(Refusal::Unmovable("ret ".into())));
        // mimalloc's posix_memalign is a tail call: the jump moves whole, to the same target.
        let (p, m) = plan_entry(&cs, 0x7000, &[0xe9, 0x00, 0x10, 0x00, 0x00, 0x90]).unwrap();
        assert_eq!((p.orig.len(), &m[..]), (5, &[Moved::Jmp { target: 0x8005 }][..]));
        assert_eq!(
            plan_entry(&cs, 0x7000, &[0xeb, 0x10, 0x90, 0x90, 0x90]),
            Err(Refusal::Unmovable("jmp 0x7012".into()))
        );
    }
}
