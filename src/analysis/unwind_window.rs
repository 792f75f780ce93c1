//! The copies of stack memory the unwinder reads ([`StackWindow`]): the thread's own stack from its stack pointer,
//! and the other stacks copied at the same stop (those a handler on an alternate signal stack interrupted). A read
//! outside every copy says which copies there were and why it may have missed (too short a copy, another stack).

/// The copy of the stack taken at capture: `bytes` start at `base` (the thread's rsp then); `more` are copies of
/// other stacks taken at the same stop (the stacks interrupted by a handler on an alternate signal stack).
pub struct StackWindow<'a> {
    pub base: u64,
    pub bytes: &'a [u8],
    /// How many bytes were asked for: a copy as long as asked may end before the stack does.
    pub asked: usize,
    /// How far into `bytes` the walk has read: a recording keeps only that much.
    pub seen: std::cell::Cell<usize>,
    pub more: Vec<Piece<'a>>,
    /// Every address read from `bytes`, when asked for ([`StackWindow::logged`]).
    pub log: Option<std::cell::RefCell<Vec<u64>>>,
}

/// A copy of another stack: `bytes` from `base`, and how far into them the walk has read.
pub struct Piece<'a> {
    pub base: u64,
    pub bytes: &'a [u8],
    pub seen: std::cell::Cell<usize>,
}

/// The 8 bytes at `addr` in a copy starting at `base`, marking how far the copy was read.
fn read_in(base: u64, bytes: &[u8], seen: &std::cell::Cell<usize>, addr: u64) -> Option<u64> {
    let off = usize::try_from(addr.checked_sub(base)?).ok()?;
    let b = bytes.get(off..off.checked_add(8)?)?;
    seen.set(seen.get().max(off + 8));
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

impl<'a> StackWindow<'a> {
    pub fn new(base: u64, bytes: &'a [u8], asked: usize) -> StackWindow<'a> {
        StackWindow { base, bytes, asked, seen: Default::default(), more: Vec::new(), log: None }
    }

    /// Keeping every address read from the main copy in `log`.
    pub fn logged(mut self) -> StackWindow<'a> {
        self.log = Some(Default::default());
        self
    }

    /// With copies of other stacks, (base, bytes) each.
    pub fn with_more(mut self, more: impl IntoIterator<Item = (u64, &'a [u8])>) -> StackWindow<'a> {
        self.more.extend(more.into_iter().map(|(base, bytes)| Piece { base, bytes, seen: Default::default() }));
        self
    }

    /// How far each copy was read: the main one, then `more` in order.
    pub fn seen_all(&self) -> Vec<usize> {
        std::iter::once(self.seen.get()).chain(self.more.iter().map(|p| p.seen.get())).collect()
    }

    /// The 8 bytes at `addr`, or why they are not known.
    pub fn read_u64(&self, addr: u64) -> Result<u64, String> {
        if let Some(v) = read_in(self.base, self.bytes, &self.seen, addr) {
            if let Some(log) = &self.log {
                log.borrow_mut().push(addr);
            }
            return Ok(v);
        }
        if let Some(v) = self.more.iter().find_map(|p| read_in(p.base, p.bytes, &p.seen, addr)) {
            return Ok(v);
        }
        let end = self.base.saturating_add(self.bytes.len() as u64);
        let in_other = self.more.iter().any(|p| addr >= p.base);
        if addr < self.base && !in_other {
            return Err(format!("stack read at {addr:#x} is below the captured stack pointer {:#x}", self.base));
        }
        match () {
            // `--fast`'s ring keeps a call's return address only (asked for nothing more).
            _ if self.asked == 0 => Err("the call was written down without a stop: only its caller is known".into()),
            _ if addr >= end && self.bytes.len() >= self.asked && addr < end.saturating_add(1 << 24) => Err(format!(
                "the stack copy ({} bytes from {:#x}) ends before the stack does (read at {addr:#x}); \
                 raise --stack-bytes",
                self.bytes.len(),
                self.base
            )),
            _ => {
                let others: String = self
                    .more
                    .iter()
                    .map(|p| format!(", {:#x}-{:#x}", p.base, p.base.saturating_add(p.bytes.len() as u64)))
                    .collect();
                Err(format!(
                    "stack read at {addr:#x} is outside the copied stack {:#x}-{end:#x}{others} (unmapped, or \
                     another stack)",
                    self.base
                ))
            }
        }
    }
}
