//! Known stacks: a matching call of `--fast` whose stack was unwound before is written into the ring without a
//! stop. Pure: the table's layout (shared with the matcher, `known.c`, built into [`CODE`]), its entries and
//! checks as bytes, and where an entry goes.
//!
//! After the tracer unwinds a stop's stack to its outermost frame, it knows every input the unwind and the
//! Python frame walk used: the thread, its stack pointer, the patched place, the stack words read (at offsets
//! from rsp) and the registers the unwind needed, and, for CPython 3.11/3.12, the frame chain from the `_PyCFrame`
//! on the C stack (each frame's code object, instruction, owner and link, each code object's identity). Those
//! become an entry with its checks ([`Op`]). A later call of the same thread at the same stack pointer through
//! the same patch whose checks all hold has, by construction, the same unwound stack and the same Python frames:
//! the matcher writes it into the ring with the entry's number, and the tracer reports it with that stack.
//!
//! What the matcher may read, so it can never fault: the record below rsp; stack words at offsets below the
//! entry's depth (the stack of the same live thread at the same stack pointer was mapped that far, and a thread's
//! stack never shrinks; the entries of a thread gone are withdrawn at the first stop of a new thread with its fs
//! base, before that one runs: an assumption a fiber library or an alternate signal stack, whose stacks are
//! mapped and freed under one fs base, would not meet); and memory a pointer leads to only once that pointer was read and found equal to the one of the
//! entry (a live frame's link, a live frame's code object: the frames of a running thread's chain are live, and
//! the chain starts at the current frame of the innermost eval loop, whose `_PyCFrame` is on the matched stack).
//! An entry is written whole before its state says valid and is never changed after, but to say it is no longer
//! valid: a reader never sees half of one.

/// The matcher's code (`src/x86/known.c`, built by build.rs), copied into the trampoline page.
pub const CODE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/known.bin"));

/// Offsets from the trampoline page: the table's entries, then its checks (as in `known.c`).
pub const KNOWN: u64 = super::trampoline::RING + super::trampoline::RING_SLOTS * super::trampoline::SLOT;
pub const ENTRIES: u64 = 512;
pub const ENTRY: u64 = 64;
pub const PROBES: u64 = 16;
pub const OPS_AT: u64 = KNOWN + ENTRIES * ENTRY;
pub const OPS: u64 = 14336;
pub const OP: u64 = 16;
/// Pages of the table.
pub const PAGES: u64 = (ENTRIES * ENTRY + OPS * OP) / 4096;
/// The pointers a check may read from: 0 the stack pointer, 1 the record, 2.. pointers read by checks.
pub const BASES: u8 = 8;
pub const BASE_RSP: u8 = 0;
pub const BASE_RECORD: u8 = 1;
/// The thread pointer (the fs base the record names the thread by): its descriptor and static TLS are at fixed
/// offsets from it, mapped while the thread lives.
pub const BASE_TP: u8 = 7;
/// A check of this width reads nothing: its `dest` is set to `expect`, an address the tracer vouches for.
pub const CONSTANT: u8 = 0;
/// The record's bytes below rsp (as `trampoline::BLOCK`).
pub const RECORD: i32 = 128;

/// Entry states.
pub const NEVER: u64 = 0;
pub const VALID: u64 = 1;
pub const WITHDRAWN: u64 = 2;

pub use crate::model::known::Op;

impl Op {
    /// A stack word at `off` from rsp.
    pub fn stack(off: i32, expect: u64) -> Op {
        Op { untag: 0, base: BASE_RSP, dest: 0, width: 8, off, expect }
    }

    pub fn bytes(&self) -> [u8; OP as usize] {
        let mut b = [0u8; OP as usize];
        b[0] = self.base;
        b[1] = self.dest;
        b[2] = self.width;
        b[3] = self.untag;
        b[4..8].copy_from_slice(&self.off.to_le_bytes());
        b[8..16].copy_from_slice(&self.expect.to_le_bytes());
        b
    }

    /// Whether the matcher accepts it as written (it refuses the others, so the entry would never match).
    pub fn well_formed(&self, depth: u32) -> bool {
        if self.width == CONSTANT {
            return (2..BASE_TP).contains(&self.dest) && self.expect != 0;
        }
        let w = matches!(self.width, 1 | 4 | 8);
        let bases = self.base < BASES && self.dest < BASE_TP && self.dest != 1;
        let bounded = match self.base {
            BASE_RSP => self.off >= 0 && (self.off as u64) + 8 <= depth as u64,
            BASE_RECORD => self.off >= 0 && self.off + 8 <= RECORD,
            _ => true,
        };
        w && bases && bounded
    }
}

/// What an entry says, but for its checks' place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub thread: u64,
    pub rsp: u64,
    pub int3: u64,
    pub first: u32,
    pub count: u32,
    pub depth: u32,
    pub id: u32,
}

impl Entry {
    /// Its bytes with state `state` (written last, on its own, to publish it).
    pub fn bytes(&self, state: u64) -> [u8; ENTRY as usize] {
        let mut b = [0u8; ENTRY as usize];
        b[0..8].copy_from_slice(&state.to_le_bytes());
        b[8..16].copy_from_slice(&self.thread.to_le_bytes());
        b[16..24].copy_from_slice(&self.rsp.to_le_bytes());
        b[24..32].copy_from_slice(&self.int3.to_le_bytes());
        b[32..36].copy_from_slice(&self.first.to_le_bytes());
        b[36..40].copy_from_slice(&self.count.to_le_bytes());
        b[40..44].copy_from_slice(&self.depth.to_le_bytes());
        b[44..48].copy_from_slice(&self.id.to_le_bytes());
        b
    }
}

/// The first entry index the matcher probes for a call (as `known.c` computes it); it probes [`PROBES`] from
/// there and stops at a never-used one.
pub fn home(thread: u64, rsp: u64, int3: u64) -> u64 {
    ((rsp >> 3) ^ (rsp >> 15) ^ (thread >> 12) ^ (int3 << 5)) & (ENTRIES - 1)
}

/// The entry offset of index `i` from the page.
pub fn entry_at(i: u64) -> u64 {
    KNOWN + (i & (ENTRIES - 1)) * ENTRY
}

/// The check offset of check `i` from the page.
pub fn op_at(i: u64) -> u64 {
    OPS_AT + i * OP
}

/// Where a new entry for (thread, rsp, int3) goes among the entry states `states` (indexed as the table): the
/// first never-used one on its probe sequence, or `None` if the sequence is full (the call keeps stopping).
pub fn place(states: &[u64], thread: u64, rsp: u64, int3: u64) -> Option<u64> {
    let h = home(thread, rsp, int3);
    (0..PROBES).map(|p| (h + p) & (ENTRIES - 1)).find(|&i| states.get(i as usize) == Some(&NEVER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_matchers() {
        let c = include_str!("known.c");
        let def = |name: &str| -> u64 {
            let line = c.lines().find(|l| l.starts_with(&format!("#define {name} "))).expect(name);
            let v = line.split_whitespace().nth(2).unwrap().trim_end_matches("UL");
            v.parse().unwrap_or_else(|_| panic!("{line}"))
        };
        assert_eq!(def("ENTRIES"), ENTRIES);
        assert_eq!(def("ENTRY"), ENTRY);
        assert_eq!(def("PROBES"), PROBES);
        assert_eq!(def("OPS"), OPS);
        assert_eq!(def("BASES"), BASES as u64);
        assert_eq!(def("RECORD"), RECORD as u64);
        assert_eq!(def("RING_SLOTS"), super::super::trampoline::RING_SLOTS);
        assert_eq!(def("SLOT"), super::super::trampoline::SLOT);
        assert_eq!(KNOWN, 9 * 4096 + 512 * 128, "RING + RING_SLOTS * SLOT as known.c has it");
        assert_eq!((ENTRIES * ENTRY + OPS * OP) % 4096, 0);
        assert!(!CODE.is_empty() && CODE.len() < 2048, "{} bytes", CODE.len());
    }

    #[test]
    fn an_entry_goes_to_the_first_free_place_of_its_probes() {
        let mut states = vec![NEVER; ENTRIES as usize];
        let (t, sp, i) = (0x7f00_0000_1000, 0x7ffd_0000_0008, 0x1234);
        let h = home(t, sp, i);
        assert_eq!(place(&states, t, sp, i), Some(h));
        states[h as usize] = VALID;
        states[((h + 1) % ENTRIES) as usize] = WITHDRAWN;
        assert_eq!(place(&states, t, sp, i), Some((h + 2) % ENTRIES));
        for p in 0..PROBES {
            states[((h + p) % ENTRIES) as usize] = VALID;
        }
        assert_eq!(place(&states, t, sp, i), None, "a full probe sequence takes no more");
    }

    #[test]
    fn checks_are_bounded_as_the_matcher_bounds_them() {
        assert!(Op::stack(0, 1).well_formed(8));
        assert!(!Op::stack(8, 1).well_formed(8), "a word past the depth");
        assert!(!Op::stack(-8, 1).well_formed(64), "below rsp");
        assert!(Op { untag: 0, base: BASE_RECORD, dest: 0, width: 8, off: 120, expect: 0 }.well_formed(0));
        assert!(!Op { untag: 0, base: BASE_RECORD, dest: 0, width: 8, off: 128, expect: 0 }.well_formed(0));
        assert!(!Op { untag: 0, base: 2, dest: 0, width: 2, off: 0, expect: 0 }.well_formed(0), "width 2");
        assert!(!Op { untag: 0, base: BASES, dest: 0, width: 8, off: 0, expect: 0 }.well_formed(0));
        assert!(Op { untag: 0, base: BASE_TP, dest: 2, width: 8, off: -24, expect: 0 }.well_formed(0));
        assert!(!Op { untag: 0, base: 2, dest: BASE_TP, width: 8, off: 0, expect: 0 }.well_formed(0), "TP is kept");
        assert!(Op { untag: 0, base: 0, dest: 5, width: CONSTANT, off: 0, expect: 0x1000 }.well_formed(0));
        assert!(!Op { untag: 0, base: 0, dest: 5, width: CONSTANT, off: 0, expect: 0 }.well_formed(0), "null");
        assert!(!Op { untag: 0, base: 0, dest: 0, width: CONSTANT, off: 0, expect: 0x1000 }.well_formed(0));
        let b = Op { untag: 3, base: 2, dest: 3, width: 1, off: -4, expect: 0x1122 }.bytes();
        assert_eq!(&b[..8], &[2, 3, 1, 3, 0xfc, 0xff, 0xff, 0xff]);
        assert_eq!(u64::from_le_bytes(b[8..].try_into().unwrap()), 0x1122);
    }
}
