//! Where `--fast` patches a libc function that makes a fixed system call (`munmap`, `mmap`, `mprotect`,
//! `madvise`): at each `mov $nr,%eax` that leads to one of its `syscall` instructions. Pure.
//!
//! The function's paths are walked from its entry, following every branch, with the stack depth kept at each
//! instruction: the plan is refused unless every path leaves rsp alone but for `push` and `pop` (so the depth at
//! each `syscall` is known and the red zone below it is unused), every `syscall` is reached and patched (a path
//! not patched would go unseen once the entry's int3 is gone), and each has the shape the trampoline relocates:
//! `mov $nr,%eax`, then at most a few register instructions that leave rax and the stack alone, then `syscall`.
//! glibc up to 2.42 has one such place per function, at depth 0; glibc 2.43's `mmap` pushes two registers and
//! has a second path (a retry below 4 GiB under a tunable), both patched.

use super::trampoline::{PatchPlan, Refusal, branch_target, sets_flags_first};
use std::collections::HashMap;

/// One patched place of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedSite {
    pub plan: PatchPlan,
    /// Bytes the function pushed before this `syscall` (its return address is at rsp + depth).
    pub depth: u64,
}

/// Instructions between `mov $nr,%eax` and `syscall` that are moved with it.
const BETWEEN: usize = 3;

/// Plans the patch of the function at `entry` (its whole code `code`, from its symbol's size) whose system call
/// must be `want`: one site per `syscall` instruction.
pub fn plan(cs: &capstone::Capstone, entry: u64, code: &[u8], want: u64) -> Result<Vec<FixedSite>, Refusal> {
    let insns = cs.disasm_all(code, entry).map_err(|_| Refusal::OutsideCode)?;
    let list: Vec<_> = insns.iter().collect();
    let index: HashMap<u64, usize> = list.iter().enumerate().map(|(k, i)| (i.address(), k)).collect();
    let bytes_of = |k: usize| code.get((list[k].address() - entry) as usize..).unwrap_or(&[]);
    let syscalls: Vec<usize> = (0..list.len()).filter(|&k| list[k].bytes() == [0x0f, 0x05]).collect();
    if syscalls.is_empty() {
        return Err(Refusal::NoFixedNumber);
    }
    let end = entry + code.len() as u64;
    let inside = |t: u64| t >= entry && t < end;
    let targets: Vec<u64> = (0..list.len()).filter_map(|k| branch_target(bytes_of(k), list[k].address())).collect();

    // Every path from the entry, with the bytes pushed at each instruction.
    let mut depth_at: HashMap<usize, u64> = HashMap::new();
    let mut todo = vec![(0usize, 0u64)];
    while let Some((k, depth)) = todo.pop() {
        match depth_at.insert(k, depth) {
            Some(d) if d == depth => continue,
            Some(_) => return Err(Refusal::StackUsed),
            None => {}
        }
        let i = list[k];
        // The mnemonic's last word (`notrack jmp`, `bnd ret`).
        let m = i.mnemonic().unwrap_or("").rsplit(' ').next().unwrap_or("");
        let ops = i.op_str().unwrap_or("");
        let next = index.get(&(i.address() + i.bytes().len() as u64)).copied();
        let target = branch_target(bytes_of(k), i.address());
        let at = |t: u64| index.get(&t).copied().ok_or(Refusal::MidInstruction);
        if m == "jmp" {
            match target {
                Some(t) if inside(t) => todo.push((at(t)?, depth)),
                // A tail call leaves with the stack as at the entry.
                Some(_) if depth == 0 => {}
                _ => return Err(Refusal::StackUsed),
            }
            continue;
        }
        if m == "ret" {
            if depth != 0 {
                return Err(Refusal::StackUsed);
            }
            continue;
        }
        if matches!(m, "int3" | "ud2" | "hlt") {
            continue;
        }
        let after = if m.starts_with('j') {
            match target {
                Some(t) if inside(t) => todo.push((at(t)?, depth)),
                Some(_) if depth == 0 => {}
                _ => return Err(Refusal::StackUsed),
            }
            depth
        } else if m == "push" {
            depth + 8
        } else if m == "pop" {
            depth.checked_sub(8).ok_or(Refusal::StackUsed)?
        } else if stack_neutral(m) && !ops.contains("sp") {
            depth
        } else {
            return Err(Refusal::StackUsed);
        };
        todo.push((next.ok_or(Refusal::OutsideCode)?, after));
    }

    let mut sites = Vec::new();
    for &k in &syscalls {
        let depth = *depth_at.get(&k).ok_or(Refusal::SeveralSyscalls(syscalls.len()))?;
        let syscall_at = list[k].address();
        // Back from `syscall` to its `mov $nr,%eax`, over register instructions that leave rax alone.
        let mut first = None;
        for j in (k.saturating_sub(BETWEEN + 1)..k).rev() {
            let b = list[j].bytes();
            if b.len() == 5 && b[0] == 0xb8 {
                first = Some(j);
                break;
            }
            if !movable(list[j].mnemonic().unwrap_or(""), list[j].op_str().unwrap_or("")) {
                break;
            }
        }
        let j = first.ok_or(Refusal::NoFixedNumber)?;
        let b = list[j].bytes();
        if u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as u64 != want {
            return Err(Refusal::NoFixedNumber);
        }
        let at = list[j].address();
        let after = code.get((syscall_at + 2 - entry) as usize..).ok_or(Refusal::OutsideCode)?;
        if !sets_flags_first(after) {
            return Err(Refusal::FlagsRead);
        }
        // A branch into the moved instructions, or straight to `syscall`, would pass the patch by.
        if targets.iter().any(|&t| t > at && t <= syscall_at) {
            return Err(Refusal::BranchIntoPatch);
        }
        let orig = code[(at - entry) as usize..(syscall_at - entry) as usize].to_vec();
        sites.push(FixedSite { plan: PatchPlan { at, orig, syscall_at }, depth });
    }
    Ok(sites)
}

/// Whether an instruction leaves rsp and the stack alone when its operands do not name rsp.
fn stack_neutral(m: &str) -> bool {
    matches!(
        m,
        "mov"
            | "movzx"
            | "movsx"
            | "movsxd"
            | "test"
            | "cmp"
            | "xor"
            | "and"
            | "or"
            | "not"
            | "neg"
            | "add"
            | "sub"
            | "lea"
            | "shl"
            | "shr"
            | "sar"
            | "nop"
            | "endbr64"
            | "syscall"
    ) || m.starts_with("cmov")
        || m.starts_with("set")
}

/// Whether an instruction between `mov $nr,%eax` and `syscall` can be moved into the trampoline as it is: a
/// register operation that reads nothing position-dependent, touches neither rax nor the stack, and does not
/// branch (Intel syntax: the destination first).
fn movable(m: &str, ops: &str) -> bool {
    let plain = matches!(m, "or" | "and" | "xor" | "mov" | "add" | "sub" | "shl" | "shr" | "test" | "cmp");
    let dest = ops.split(',').next().unwrap_or("").trim();
    plain && !ops.contains("rip") && !ops.contains("sp") && !matches!(dest, "rax" | "eax" | "ax" | "al" | "ah")
}
