//! A ring slot as the tracer reads it (part of the trampoline: the ring paths and the matchers write it).

/// A call the ring path wrote down: slot `seq % RING_SLOTS` of the ring, read by the tracer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Written last: the slot is whole once this is the sequence number the reader expects there.
    pub seq: u64,
    pub nr: u64,
    /// rdi, rsi, rdx, r10, r8, r9 as the kernel took them.
    pub args: [u64; 6],
    /// rax after `syscall`.
    pub ret: u64,
    /// The writing thread's fs base.
    pub thread: u64,
    /// Which patched place (an index into the sites given to [`assemble_sites`]).
    pub site: u64,
    /// The return address at the stack pointer (the caller of the patched function) and that stack pointer.
    pub ra: u64,
    pub sp: u64,
    /// The known stack of a call the known-stack matcher wrote ([`crate::x86::known`]): its number, in word 13,
    /// taken only when word 14 is this slot's sequence number (the ring paths write neither).
    pub known: Option<u32>,
}

impl Slot {
    /// The slot in `bytes` (its `SLOT` bytes).
    pub fn parse(bytes: &[u8]) -> Option<Slot> {
        let word = |i: usize| Some(u64::from_le_bytes(bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?));
        let mut args = [0u64; 6];
        for (i, a) in args.iter_mut().enumerate() {
            *a = word(2 + i)?;
        }
        Some(Slot {
            seq: word(0)?,
            nr: word(1)?,
            args,
            ret: word(8)?,
            thread: word(9)?,
            site: word(10)?,
            ra: word(11)?,
            sp: word(12)?,
            known: (word(14)? == word(0)?).then(|| word(13)).flatten().map(|k| k as u32),
        })
    }
}
