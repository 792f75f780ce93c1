//! A planted breakpoint (a probe site, a return site, or both) and its bytes: the int3, and the guard int3 on the
//! byte after it (see [`Site::guard_of`]).

use super::Probe;
use super::kernel::Mem;
use crate::model::event::Event;
use crate::os::Tid;
use crate::x86::breakpoints::{self, Decoded, INT3};

/// How a thread gets past a wrapper's entry to just after its `syscall` instruction.
#[derive(Debug, Clone)]
pub(super) struct Wrapper {
    /// The instructions after the displaced one, if all of them can be emulated.
    pub(super) rest: Option<Vec<Decoded>>,
    pub(super) syscall_at: u64,
}

/// A planted breakpoint: a probe site, a return site, or both.
pub(super) struct Site {
    pub(super) addr: u64,
    /// The original byte, from the file (probe sites) or from memory before planting (return sites).
    pub(super) orig: u8,
    /// The original second byte, where a guard int3 is planted there too (see [`Site::guard_of`]).
    pub(super) guard: Option<u8>,
    /// A one-byte displaced instruction's guard sits on the next instruction, this one: run with the first at
    /// every hit (emulated, or stepped with it), so no thread is ever let go between the two.
    pub(super) then: Option<Decoded>,
    /// The displaced instruction: emulated when possible, else stepped with every other thread stopped.
    pub(super) first: Decoded,
    /// The site holds `48 89 f8` (`mov %rdi,%rax`): the two bytes after our int3 are `mov %edi,%eax`, which gives
    /// the same rax whenever rdi < 2^32, so such a hit resumes from where it stopped with no register write.
    pub(super) cont_past: bool,
    pub(super) wrapper: Option<Wrapper>,
    pub(super) probes: Vec<Probe>,
    /// Calls waiting for their return here: (thread, stack pointer after the return, the event).
    pub(super) waiting: Vec<(Tid, u64, Box<Event>)>,
}

impl Site {
    /// The original byte after the int3 where a guard int3 goes there too: where the rest of the displaced
    /// instruction does not do what the whole one would (`cont_past`), and for a one-byte instruction where the
    /// next one (`then`) is known. A thread held just past the int3 when syscatch dies is let go there by the
    /// kernel, its SIGTRAP dropped: on the guard it traps again, into the trap pad, which rewinds it onto the int3
    /// and waits for the guardian's original bytes. (Sound because syscatch never lets a thread go just past a
    /// guarded site's first instruction: a one-byte one is run together with `then`.)
    pub(super) fn guard_of(first: &Decoded, cont_past: bool, second: Option<u8>, then: Option<&Decoded>) -> Option<u8> {
        let guarded = if first.len == 1 { then.is_some() } else { !cont_past };
        guarded.then_some(second).flatten()
    }

    /// The instruction after a one-byte first one, decoded from the site's code (not for a wrapper, whose
    /// prefix is emulated or stepped on its own).
    pub(super) fn then_of(
        cs: &capstone::Capstone,
        code: &[u8],
        addr: u64,
        first: &Decoded,
        wrapper: bool,
    ) -> Option<Decoded> {
        (first.len == 1 && !wrapper).then(|| breakpoints::decode(cs, code, addr, 2).get(1).copied()).flatten()
    }

    /// Its original bytes and what is planted over them.
    pub(super) fn bytes(&self) -> (Vec<u8>, Vec<u8>) {
        match self.guard {
            Some(g) => (vec![self.orig, g], vec![INT3, INT3]),
            None => (vec![self.orig], vec![INT3]),
        }
    }

    /// Plants its int3 (then its guard: a thread reaching the site meanwhile traps on the first).
    pub(super) fn plant(&self, mem: &dyn Mem) -> std::io::Result<()> {
        mem.write_all(self.addr, &[INT3])?;
        if self.guard.is_some() {
            mem.write_all(self.addr + 1, &[INT3])?;
        }
        Ok(())
    }

    /// Puts its original bytes back in `mem` (the guard's first, so the int3 is the last of ours to go).
    pub(super) fn unplant(&self, mem: &dyn Mem) -> std::io::Result<()> {
        let guard = self.guard.map_or(Ok(()), |g| mem.write_all(self.addr + 1, &[g]));
        mem.write_all(self.addr, &[self.orig]).and(guard)
    }
}
