//! A model of the target's address space built from the mapping calls a trace captured (mmap, munmap, mremap),
//! in which every mapped byte remembers the stack that created it, reconciled with smaps samples; and the
//! questions asked of it: which stacks still hold how much, and which growing regions they made. Pure: events and
//! smaps regions in, answers out.
//!
//! Rules (Linux semantics, 4 KiB pages: lengths are rounded up to whole pages, as the kernel does):
//! - mmap: the returned range belongs to the calling stack. Whatever the model held there is replaced (MAP_FIXED
//!   over a range; without it, the kernel only returns a range the model still held when an unmap went unseen).
//! - munmap: the range leaves the model; a mapping keeps its creating stack on the parts that remain.
//! - mremap: the kept part (the smaller of the old and new sizes) keeps its creating stacks and moves with the
//!   mapping when it moves; growth is attributed to the mremap's own stack (it is the call that asked for those
//!   bytes); shrinking unmaps the tail. With MREMAP_DONTUNMAP the old range stays mapped and the new one is the
//!   mremap's.
//! - reconcile: bytes that an smaps sample no longer shows mapped (a plain glibc munmap the trace did not see),
//!   or shows as a different kind of mapping (file-backed over anonymous: MAP_FIXED by an unseen call), are
//!   dropped and counted as vanished, so they are never reported as still mapped.
//!
//! Per stack, `mapped = unmapped + vanished + still_mapped` at every moment.

use crate::model::event::Event;
use crate::model::smaps::{Span, previous_rss_swap};
use std::collections::BTreeMap;

use crate::model::consts::MAP_ANONYMOUS;
pub use crate::model::consts::{
    MAPPING_SYSCALLS, SYS_BRK, SYS_MADVISE, SYS_MMAP, SYS_MPROTECT, SYS_MREMAP, SYS_MUNMAP,
};

const PAGE: u64 = 4096;
const MREMAP_DONTUNMAP: u64 = 4;

/// An opaque id of a captured stack (the caller deduplicates stacks and numbers them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StackId(pub u32);

/// Whose reserved address space is when no traced call reserved it.
const NOBODY: StackId = StackId(u32::MAX);

/// One mapped range of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    end: u64,
    stack: StackId,
    anon: bool,
    /// When the call that mapped it was made (seconds since attach).
    since: f64,
    /// Address space mapped with no access (PROT_NONE): reserved, not memory; nobody's until a call makes it
    /// accessible (glibc's thread heaps reserve 64 MiB and `mprotect` the part the arena uses).
    reserved: bool,
    /// Pages given back by madvise: the stack's range still, not memory until touched again (with no call).
    returned: bool,
}

/// Accounting of one stack, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StackStats {
    /// Successful mmap, munmap and mremap calls made from this stack.
    pub mmaps: u64,
    pub munmaps: u64,
    pub mremaps: u64,
    /// Successful calls that moved the heap's end (libc's `sbrk`, the brk syscall).
    #[serde(default)]
    pub brks: u64,
    /// Successful `mprotect` calls that made reserved address space accessible (a thread heap's commit).
    #[serde(default)]
    pub commits: u64,
    /// Successful `madvise` calls that gave pages back (MADV_DONTNEED, MADV_REMOVE).
    #[serde(default)]
    pub returns: u64,
    /// Calls from this stack that failed or whose return value is unknown.
    pub failed: u64,
    /// Bytes this stack's calls mapped (mmap, and mremap growth).
    pub mapped: u64,
    /// Of those, bytes later unmapped by a traced call (munmap, mremap shrink, replacement by a mapping).
    pub unmapped: u64,
    /// Of those, bytes that an smaps sample showed were gone (unmapped by a call the trace did not see).
    pub vanished: u64,
    /// Of those, bytes still mapped in the model.
    pub still_mapped: u64,
    /// Bytes this stack's munmap calls asked to unmap (whoever had mapped them).
    pub released: u64,
}

impl StackStats {
    pub fn calls(&self) -> u64 {
        self.mmaps + self.munmaps + self.mremaps + self.brks + self.commits + self.returns + self.failed
    }

    /// What these figures add to `base`'s (each counter less base's, none below zero).
    fn since(&self, base: &StackStats) -> StackStats {
        StackStats {
            mmaps: self.mmaps.saturating_sub(base.mmaps),
            munmaps: self.munmaps.saturating_sub(base.munmaps),
            mremaps: self.mremaps.saturating_sub(base.mremaps),
            brks: self.brks.saturating_sub(base.brks),
            commits: self.commits.saturating_sub(base.commits),
            returns: self.returns.saturating_sub(base.returns),
            failed: self.failed.saturating_sub(base.failed),
            mapped: self.mapped.saturating_sub(base.mapped),
            unmapped: self.unmapped.saturating_sub(base.unmapped),
            vanished: self.vanished.saturating_sub(base.vanished),
            still_mapped: 0,
            released: self.released.saturating_sub(base.released),
        }
    }
}

/// How the model changed between two moments ([`AddressSpace::changes_since`]): what a recording keeps of the
/// calls in between once it no longer keeps each call. Stacks are the numbers of the model that changed; the
/// figures are its own since the trace began (whatever window a report later takes of them).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Changes {
    /// Starts of the pieces that are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone: Vec<u64>,
    /// Pieces that are new or changed: start, end, stack, anonymous, since (seconds since attach), reserved,
    /// given back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<(u64, u64, u32, bool, f64, bool, bool)>,
    /// The accounting of each stack whose accounting changed, whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stats: Vec<(u32, StackStats)>,
    /// Each address and stack whose count of calls returning it changed, with the count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub returned: Vec<(u64, u32, u64)>,
}

/// Calls that returned each address, by address and stack.
type Returned = BTreeMap<(u64, StackId), u64>;

#[derive(Debug, Default, Clone)]
pub struct AddressSpace {
    pieces: BTreeMap<u64, Piece>,
    stats: BTreeMap<StackId, StackStats>,
    /// The addresses traced calls returned (mmap, mremap), with the stack and how many calls: what matches
    /// growing regions to stacks. Counted by address, not kept per call: a process that maps and unmaps the same
    /// addresses for hours keeps one entry each.
    returned: Returned,
    /// The time of the calls being applied ([`Self::at`]).
    now: f64,
    /// The heap's end as the last call that moved it left it (`None` until one did).
    brk: Option<u64>,
    /// The start of the window the accounting covers ([`Self::rebase`]): bytes mapped earlier are still known by
    /// their stack, but are neither still mapped nor unmapped in it.
    from: f64,
    /// The accounting and the counts of returned addresses when the window started: what [`Self::apply`]
    /// takes off the figures of a trace's whole that it is given.
    base: Box<(BTreeMap<StackId, StackStats>, Returned)>,
}

fn page_round(len: u64) -> Option<u64> {
    len.checked_add(PAGE - 1).map(|l| l & !(PAGE - 1))
}

/// `[addr, addr + round(len))`, or `None` when it is empty or wraps.
fn range(addr: u64, len: u64) -> Option<(u64, u64)> {
    let len = page_round(len)?;
    let end = addr.checked_add(len)?;
    (len > 0).then_some((addr, end))
}

/// True when `ret` is an error (`-4095..=-1`).
fn is_err(ret: u64) -> bool {
    ret > u64::MAX - 4095
}

impl AddressSpace {
    pub fn new() -> Self {
        Self::default()
    }

    /// The time of the calls applied from now on (seconds since attach).
    pub fn at(&mut self, time: f64) {
        self.now = time;
    }

    /// Starts the accounting afresh at `time` (a report's window): calls before it are forgotten, memory mapped
    /// before it is no stack's any more in the figures (a trace started then would not have seen it).
    pub fn rebase(&mut self, time: f64) {
        self.from = time;
        *self.base = (std::mem::take(&mut self.stats), std::mem::take(&mut self.returned));
    }

    /// What changed from `before` (an earlier copy of this model) to now.
    pub fn changes_since(&self, before: &AddressSpace) -> Changes {
        let mut c = Changes::default();
        let (mut old, mut new) = (before.pieces.iter().peekable(), self.pieces.iter().peekable());
        loop {
            match (old.peek(), new.peek()) {
                (Some(&(a, _)), Some(&(b, _))) if a < b => {
                    c.gone.push(*a);
                    old.next();
                }
                (Some(&(a, p)), Some(&(b, q))) => {
                    if a != b || p != q {
                        c.pieces.push((*b, q.end, q.stack.0, q.anon, q.since, q.reserved, q.returned));
                    }
                    if a == b {
                        old.next();
                    }
                    new.next();
                }
                (Some(&(a, _)), None) => {
                    c.gone.push(*a);
                    old.next();
                }
                (None, Some(&(b, q))) => {
                    c.pieces.push((*b, q.end, q.stack.0, q.anon, q.since, q.reserved, q.returned));
                    new.next();
                }
                (None, None) => break,
            }
        }
        for (id, s) in &self.stats {
            if before.stats.get(id) != Some(s) {
                c.stats.push((id.0, s.clone()));
            }
        }
        for (&(addr, id), &n) in &self.returned {
            if before.returned.get(&(addr, id)) != Some(&n) {
                c.returned.push((addr, id.0, n));
            }
        }
        c
    }

    /// Applies the changes of a model whose stacks `id` numbers in this one. The pieces must be as
    /// [`Self::changes_since`] gives them (sorted, disjoint, not empty): others are left out.
    pub fn apply_changes(&mut self, c: &Changes, id: &mut dyn FnMut(u32) -> StackId) {
        for start in &c.gone {
            self.pieces.remove(start);
        }
        let mut last_end = 0;
        for &(start, end, stack, anon, since, reserved, returned) in &c.pieces {
            if start < last_end || end <= start || !since.is_finite() {
                continue;
            }
            last_end = end;
            self.pieces.insert(start, Piece { end, stack: id(stack), anon, since, reserved, returned });
        }
        for (stack, s) in &c.stats {
            let stack = id(*stack);
            let s = s.since(self.base.0.get(&stack).unwrap_or(&StackStats::default()));
            self.stats.insert(stack, s);
        }
        for &(addr, stack, n) in &c.returned {
            let key = (addr, id(stack));
            let n = n.saturating_sub(self.base.1.get(&key).copied().unwrap_or(0));
            self.returned.insert(key, n);
        }
    }

    /// Whether the piece is memory the figures count: accessible, and mapped in the window.
    fn in_window(&self, p: &Piece) -> bool {
        !p.reserved && !p.returned && p.since >= self.from
    }

    /// Applies one captured call made from `stack`. Calls other than mmap, munmap and mremap are ignored.
    pub fn apply(&mut self, ev: &Event, stack: StackId) {
        self.apply_call(ev.nr, &ev.args, ev.ret, stack)
    }

    /// Applies a call by its number, arguments and return value (`None`: unknown).
    pub fn apply_call(&mut self, nr: u64, args: &[u64; 6], ret: Option<u64>, stack: StackId) {
        if !MAPPING_SYSCALLS.contains(&nr) {
            return;
        }
        let Some(ret) = ret.filter(|&r| !is_err(r)) else {
            self.stats.entry(stack).or_default().failed += 1;
            return;
        };
        match nr {
            SYS_MMAP => self.mmap(ret, args[1], args[3] & MAP_ANONYMOUS != 0, args[2] == 0, stack),
            SYS_MPROTECT => self.mprotect(args[0], args[1], args[2], stack),
            SYS_MADVISE => self.madvise(args[0], args[1], args[2], stack),
            SYS_MUNMAP => self.munmap(args[0], args[1], stack),
            SYS_MREMAP => self.mremap(args[0], args[1], args[2], args[3], ret, stack),
            // The syscall returns the break: the heap moved from the last one known.
            _ => match self.brk {
                Some(old) => self.moved_break(old, ret, stack),
                None => self.brk = Some(ret),
            },
        }
    }

    /// Applies a call of libc's `sbrk(increment)`, which returned the old break (`None`: unknown).
    /// `sbrk(0)` asks where the break is: not a call that moves it.
    pub fn apply_sbrk(&mut self, increment: u64, ret: Option<u64>, stack: StackId) {
        if increment == 0 {
            self.brk = ret.filter(|&r| r != u64::MAX).or(self.brk);
            return;
        }
        match ret.filter(|&r| r != u64::MAX) {
            Some(old) => self.moved_break(old, old.wrapping_add(increment), stack),
            None => self.stats.entry(stack).or_default().failed += 1,
        }
    }

    /// The heap's end (the break) moved from `old` to `new`: the pages it added are the stack's, as if mapped;
    /// those it gave back are unmapped. (The kernel maps `[heap]` to the page above the break.)
    fn moved_break(&mut self, old: u64, new: u64, stack: StackId) {
        self.brk = Some(new);
        self.stats.entry(stack).or_default().brks += 1;
        let (Some(old), Some(new)) = (page_round(old), page_round(new)) else { return };
        if new > old {
            self.unmap(old, new);
            self.insert(old, new, stack, true, false);
            self.stats.entry(stack).or_default().mapped += new - old;
            *self.returned.entry((old, stack)).or_default() += 1;
        } else if new < old {
            let s = self.stats.entry(stack).or_default();
            s.released = s.released.saturating_add(old - new);
            self.unmap(new, old);
        }
    }

    /// `reserved`: mapped with no access (PROT_NONE): address space, not memory.
    fn mmap(&mut self, addr: u64, len: u64, anon: bool, reserved: bool, stack: StackId) {
        self.stats.entry(stack).or_default().mmaps += 1;
        let Some((start, end)) = range(addr, len) else { return };
        self.unmap(start, end);
        self.insert(start, end, stack, anon, reserved);
        if !reserved {
            self.stats.entry(stack).or_default().mapped += end - start;
        }
        *self.returned.entry((start, stack)).or_default() += 1;
    }

    fn munmap(&mut self, addr: u64, len: u64, stack: StackId) {
        let s = self.stats.entry(stack).or_default();
        s.munmaps += 1;
        let Some((start, end)) = range(addr, len) else { return };
        s.released = s.released.saturating_add(end - start);
        self.unmap(start, end);
    }

    fn mremap(&mut self, old: u64, old_len: u64, new_len: u64, flags: u64, new: u64, stack: StackId) {
        self.stats.entry(stack).or_default().mremaps += 1;
        let (Some(old_len), Some(new_len)) = (page_round(old_len), page_round(new_len)) else {
            return;
        };
        let keep = old_len.min(new_len);
        let dontunmap = flags & MREMAP_DONTUNMAP != 0;
        let (Some(old_end), Some(new_end)) = (old.checked_add(old_len), new.checked_add(new_len)) else {
            return;
        };
        // The pieces of the kept part, as offsets from the old start, to be put back at the new address.
        let mut moved = Vec::new();
        if !dontunmap {
            let keep_end = old + keep;
            for (s, e, p) in self.take(old, keep_end) {
                moved.push((s - old, e - old, p));
            }
            // The shrunk tail is unmapped.
            self.unmap(keep_end, old_end);
        }
        let (grow_from, base_len) = if dontunmap { (0, 0) } else { (keep, keep) };
        let moved_anon = moved.iter().all(|(_, _, p)| p.anon);
        // The destination is cleared (MREMAP_FIXED replaces what was there), then the kept part lands.
        self.unmap(new, new_end);
        for (s, e, p) in moved {
            self.pieces.insert(new + s, Piece { end: new + e, ..p });
        }
        if new_len > base_len {
            // Growth has the kind of the mapping it extends (anonymous when the model did not hold it).
            self.insert(new + grow_from, new_end, stack, moved_anon, false);
            self.stats.entry(stack).or_default().mapped += new_len - base_len;
        }
        *self.returned.entry((new, stack)).or_default() += 1;
    }

    fn insert(&mut self, start: u64, end: u64, stack: StackId, anon: bool, reserved: bool) {
        self.pieces.insert(start, Piece { end, stack, anon, since: self.now, reserved, returned: false });
    }

    /// MADV_DONTNEED and MADV_REMOVE give the range's pages back: what it held is unmapped for the stacks that
    /// mapped it (the mapping stays; pages touched there again come back with no call: glibc reusing a trimmed
    /// part of an arena, jemalloc a purged extent). Other advice leaves the model as it is (MADV_FREE and
    /// MADV_PAGEOUT leave the pages counted: freed lazily, or in swap).
    fn madvise(&mut self, addr: u64, len: u64, advice: u64, stack: StackId) {
        const MADV_DONTNEED: u64 = 4;
        const MADV_REMOVE: u64 = 9;
        let Some((start, end)) = range(addr, len).filter(|_| matches!(advice, MADV_DONTNEED | MADV_REMOVE)) else {
            return;
        };
        let s = self.stats.entry(stack).or_default();
        s.returns += 1;
        s.released = s.released.saturating_add(end - start);
        // What is given back stays the stack's range, not its memory: pages touched there again come back with no
        // call (told apart in the report as regrown). Reserved space stays reserved.
        let mut kept = Vec::new();
        for (s, e, p) in self.take(start, end) {
            if self.in_window(&p) {
                self.stats.entry(p.stack).or_default().unmapped += e - s;
            }
            kept.push((s, Piece { end: e, returned: !p.reserved, ..p }));
        }
        self.pieces.extend(kept);
    }

    /// An access other than none given to reserved address space commits it: those bytes become the calling
    /// stack's, as if it had mapped them (glibc grows a thread heap so). Other changes of protection leave the
    /// model as it is (memory made inaccessible keeps its pages).
    fn mprotect(&mut self, addr: u64, len: u64, prot: u64, stack: StackId) {
        let Some((start, end)) = range(addr, len) else { return };
        if prot == 0 || !self.pieces.range(..end).rev().take_while(|(_, p)| p.end > start).any(|(_, p)| p.reserved) {
            return;
        }
        let mut committed = 0;
        for (s, e, p) in self.take(start, end) {
            let p = if p.reserved {
                committed += e - s;
                Piece { end: e, stack, since: self.now, reserved: false, returned: false, ..p }
            } else {
                Piece { end: e, ..p }
            };
            self.pieces.insert(s, p);
        }
        let st = self.stats.entry(stack).or_default();
        st.commits += 1;
        st.mapped += committed;
        *self.returned.entry((start, stack)).or_default() += 1;
    }

    /// Removes `[start, end)` from the model, splitting pieces at its edges, and returns what was there.
    fn take(&mut self, start: u64, end: u64) -> Vec<(u64, u64, Piece)> {
        let mut keys: Vec<u64> = self.pieces.range(start..end).map(|(&k, _)| k).collect();
        if let Some((&k, p)) = self.pieces.range(..start).next_back()
            && p.end > start
        {
            keys.insert(0, k);
        }
        let mut out = Vec::new();
        for k in keys {
            let Some(p) = self.pieces.remove(&k) else { continue };
            if k < start {
                self.pieces.insert(k, Piece { end: start, ..p });
            }
            if p.end > end {
                self.pieces.insert(end, p);
            }
            out.push((k.max(start), p.end.min(end), p));
        }
        out
    }

    /// Removes `[start, end)`, counting the bytes as unmapped for the stacks that had mapped them.
    fn unmap(&mut self, start: u64, end: u64) {
        for (s, e, p) in self.take(start, end) {
            if self.in_window(&p) {
                self.stats.entry(p.stack).or_default().unmapped += e - s;
            }
        }
    }

    /// Drops every byte the smaps sample does not show mapped as the same kind of memory (anonymous or
    /// file-backed), counting it as vanished for its stack; holds the reserved address space it shows.
    pub fn reconcile(&mut self, regions: &[Span]) {
        // The kernel lists regions sorted and disjoint; text from elsewhere may not be: keep only what is.
        let mut spans: Vec<(u64, u64, bool)> =
            regions.iter().filter(|r| r.start < r.end).map(|r| (r.start, r.end, r.anon)).collect();
        spans.sort_unstable();
        let mut last_end = 0;
        spans.retain(|&(s, e, _)| {
            let ok = s >= last_end;
            if ok {
                last_end = e;
            }
            ok
        });
        let pieces: Vec<(u64, Piece)> = self.pieces.iter().map(|(&k, &p)| (k, p)).collect();
        for (start, p) in pieces {
            // The parts of [start, p.end) covered by a region of the same kind survive.
            let mut keep: Vec<(u64, u64)> = Vec::new();
            let from = spans.partition_point(|&(_, e, _)| e <= start);
            for &(s, e, anon) in spans.get(from..).unwrap_or(&[]).iter().take_while(|&&(s, _, _)| s < p.end) {
                if anon == p.anon {
                    keep.push((s.max(start), e.min(p.end)));
                }
            }
            let kept: u64 = keep.iter().map(|(s, e)| e - s).sum();
            if kept == p.end - start {
                continue;
            }
            self.pieces.remove(&start);
            for (s, e) in keep {
                self.pieces.insert(s, Piece { end: e, ..p });
            }
            if self.in_window(&p) {
                self.stats.entry(p.stack).or_default().vanished += p.end - start - kept;
            }
        }
        // Reserved address space the model does not hold (reserved before the trace, or by a call it did not
        // see) is held as nobody's, so that a commit into it is seen.
        for r in regions.iter().filter(|r| r.reserved && r.start < r.end) {
            if self.pieces.range(..r.end).next_back().is_none_or(|(_, p)| p.end <= r.start) {
                let piece =
                    Piece { end: r.end, stack: NOBODY, anon: true, since: self.now, reserved: true, returned: false };
                self.pieces.insert(r.start, piece);
            }
        }
    }

    /// Per-stack accounting, the stacks holding the most still-mapped bytes first (then by bytes mapped).
    pub fn stacks(&self) -> Vec<(StackId, StackStats)> {
        let still = self.still_mapped();
        let mut out: Vec<(StackId, StackStats)> = self
            .stats
            .iter()
            .map(|(&id, s)| {
                let mut s = s.clone();
                s.still_mapped = still.get(&id).copied().unwrap_or(0);
                (id, s)
            })
            .collect();
        out.sort_by(|(ia, a), (ib, b)| {
            b.still_mapped.cmp(&a.still_mapped).then(b.mapped.cmp(&a.mapped)).then(ia.cmp(ib))
        });
        out
    }

    /// Bytes still mapped by each stack (of those mapped in the window).
    pub fn still_mapped(&self) -> BTreeMap<StackId, u64> {
        let mut still: BTreeMap<StackId, u64> = BTreeMap::new();
        for (&s, p) in self.pieces.iter().filter(|(_, p)| self.in_window(p)) {
            *still.entry(p.stack).or_default() += p.end - s;
        }
        still
    }

    /// Anonymous bytes each stack mapped in `[from, to)` (seconds since attach) and still holds: its growth
    /// when that is the window's middle half (see [`crate::analysis::growth`]).
    pub fn held_since(&self, from: f64, to: f64) -> BTreeMap<StackId, u64> {
        let mut out: BTreeMap<StackId, u64> = BTreeMap::new();
        let counted = |p: &Piece| p.anon && !p.reserved && !p.returned && p.since >= from && p.since < to;
        for (&s, p) in self.pieces.iter().filter(|(_, p)| counted(p)) {
            *out.entry(p.stack).or_default() += p.end - s;
        }
        out
    }

    /// The ranges madvise gave back, with the stack that had mapped them: pages resident there now came back
    /// with no call.
    pub fn returned_pieces(&self) -> impl Iterator<Item = (u64, u64, StackId)> + '_ {
        self.pieces.iter().filter(|(_, p)| p.returned && p.anon).map(|(&s, p)| (s, p.end, p.stack))
    }

    /// Every still-mapped anonymous range the model holds (of those mapped in the window), with the stack that
    /// mapped it.
    pub fn anon_pieces(&self) -> impl Iterator<Item = (u64, u64, StackId)> + '_ {
        self.pieces.iter().filter(|(_, p)| p.anon && self.in_window(p)).map(|(&s, p)| (s, p.end, p.stack))
    }

    /// Bytes of `[start, end)` the model attributes to each stack.
    pub fn still_mapped_in(&self, start: u64, end: u64) -> BTreeMap<StackId, u64> {
        let mut out = BTreeMap::new();
        let first = self.pieces.range(..start).next_back().map(|(&k, _)| k).unwrap_or(start);
        for (&s, p) in self.pieces.range(first..end).filter(|(_, p)| self.in_window(p)) {
            let lo = s.max(start);
            let hi = p.end.min(end);
            if hi > lo {
                *out.entry(p.stack).or_default() += hi - lo;
            }
        }
        out
    }

    /// Regions of `after` that are not plain file mappings and whose Rss+Swap grew since `before` (or that are
    /// new), largest growth first, each with the stacks whose returned addresses fall inside it.
    pub fn growing(&self, before: &[Span], after: &[Span]) -> Vec<Growing> {
        let prev = previous_rss_swap(before, after);
        let mut out: Vec<Growing> = after
            .iter()
            .zip(prev)
            .filter(|(r, _)| r.anon)
            .filter_map(|(r, old)| {
                let growth = r.rss_swap.checked_sub(old.unwrap_or(0)).filter(|&g| g > 0)?;
                let (start, end) = (r.start, r.end);
                let mut by: BTreeMap<StackId, RegionStack> = BTreeMap::new();
                for (&(_, stack), &calls) in self.returned.range((start, StackId(0))..(end, StackId(0))) {
                    by.entry(stack).or_insert(RegionStack { stack, calls: 0, still_mapped: 0 }).calls += calls;
                }
                for (id, bytes) in self.still_mapped_in(start, end) {
                    if let Some(e) = by.get_mut(&id) {
                        e.still_mapped = bytes;
                    }
                }
                let mut stacks: Vec<RegionStack> = by.into_values().collect();
                stacks.sort_by(|a, b| b.still_mapped.cmp(&a.still_mapped).then(b.calls.cmp(&a.calls)));
                Some(Growing {
                    start,
                    end,
                    growth_kb: growth,
                    lasting_kb: None,
                    rate: None,
                    rss_swap_kb: r.rss_swap,
                    new: old.is_none(),
                    stacks,
                })
            })
            .collect();
        out.sort_by(|a, b| b.growth_kb.cmp(&a.growth_kb).then(a.start.cmp(&b.start)));
        out
    }
}

/// A growing region and what the trace knows of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Growing {
    pub start: u64,
    pub end: u64,
    /// Rss+Swap now less what it had in the first sample (all of it when it is new).
    pub growth_kb: u64,
    /// Growth that lasted (see [`crate::analysis::growth`]); `None` until the report works it out from the
    /// samples, or when they are too few to tell.
    pub lasting_kb: Option<u64>,
    /// Its rate: the trend of its Rss+Swap floor (see [`crate::analysis::trend`]); `None` until the report works
    /// it out, or with fewer than four samples.
    pub rate: Option<crate::analysis::trend::Trend>,
    pub rss_swap_kb: u64,
    /// Absent from the earlier sample.
    pub new: bool,
    /// Stacks whose mmap/mremap returned an address inside the region, most still-mapped bytes first.
    pub stacks: Vec<RegionStack>,
}

impl Growing {
    /// It grew, but no traced call made it: it was mapped before the trace started (or by an untraced path).
    pub fn created_before_trace(&self) -> bool {
        !self.new && self.stacks.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStack {
    pub stack: StackId,
    /// Traced calls from this stack that returned an address in the region.
    pub calls: u64,
    /// Bytes of the region the model attributes to this stack.
    pub still_mapped: u64,
}

#[cfg(test)]
#[path = "correlate_tests.rs"]
mod tests;
