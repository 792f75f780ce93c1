//! Reading a thread's frames in one system call: what the last walk of a thread read (its thread state, the top
//! of its data stack or its frame objects, its code objects' headers) is read again in one multi-range read at
//! the start of its next walk, since a thread caught again at the same place keeps all of it where it was. The
//! walk then reads as before; what it asks for is served from that copy when the copy covers it, else read
//! as it would have been. Nothing is guessed: every byte used was read during this stop, only the addresses
//! were remembered.

use super::Memory;

/// Ranges remembered per thread, at most this many bytes (a thread's state, its data stack's top and code headers
/// take a few KiB; a thread whose frames are scattered heap objects, a few more).
const MAX_BYTES: u64 = 256 << 10;
const MAX_RANGES: usize = 1024;
const MAX_THREADS: usize = 4096;
const REMERGE_EVERY: u32 = 64;
/// Ranges on the same or neighbouring pages are read as one: the kernel's cost is per range and page (it finds
/// and pins the remote pages of each range), not per byte, and a page between two read ones is mapped too.
const PAGE: u64 = 4096;

/// What each thread's last walk read, and the buffer its next batch goes to.
#[derive(Default)]
pub struct Prefetcher {
    /// Per thread: the ranges to read, and how many walks they served without being merged again.
    hints: std::collections::HashMap<i32, (Vec<(u64, u64)>, u32)>,
    buf: Vec<u8>,
    ok: Vec<bool>,
    spans: Vec<(u64, usize, usize)>,
    log: Vec<(u64, u64)>,
    /// Reads that went to `inner` during walks (batches included), for the bench and tests.
    pub reads: u64,
}

impl Prefetcher {
    /// Runs `walk` over `inner` for thread `key`, first reading in one go what its previous walk read.
    pub fn walk<R>(&mut self, key: i32, inner: &mut dyn Memory, walk: impl FnOnce(&mut dyn Memory) -> R) -> R {
        self.spans.clear();
        self.log.clear();
        if let Some((ranges, _)) = self.hints.get(&key) {
            // At most MAX_BYTES (see `merge`). Not zeroed: only the bytes of ranges read are ever served.
            let total = ranges.iter().map(|r| r.1 as usize).sum::<usize>();
            if self.buf.len() < total {
                self.buf.resize(total, 0);
            }
            inner.read_ranges(ranges, &mut self.buf[..total], &mut self.ok);
            self.reads += 1;
            let mut off = 0usize;
            for (&(addr, len), &ok) in ranges.iter().zip(&self.ok) {
                if ok {
                    self.spans.push((addr, off, len as usize));
                }
                off += len as usize;
            }
        }
        let mut m = Batched {
            inner,
            buf: &self.buf,
            spans: &self.spans,
            next: 0,
            extra: Vec::new(),
            log: &mut self.log,
            reads: 0,
        };
        let out = walk(&mut m);
        self.reads += m.reads;
        // All served from the batch: the same ranges will do next time (merged again now and then, to drop
        // ranges no longer read, such as a code object's strings read once into the cache).
        let fresh = self.hints.get_mut(&key).filter(|_| m.reads == 0 && !self.spans.is_empty());
        if let Some((_, kept)) = fresh.filter(|h| h.1 < REMERGE_EVERY) {
            *kept += 1;
            return out;
        }
        let hint = merge(&mut self.log).map(|h| (h, 0));
        if self.hints.len() >= MAX_THREADS && !self.hints.contains_key(&key) {
            self.hints.clear();
        }
        match hint {
            Some(h) => self.hints.insert(key, h),
            None => self.hints.remove(&key),
        };
        out
    }

    /// Forgets thread `key` (it exited, or its tid may be reused).
    pub fn forget(&mut self, key: i32) {
        self.hints.remove(&key);
    }
}

/// Sorted, merged ranges of `log`; `None` when they are too many or too large to read every time.
fn merge(log: &mut [(u64, u64)]) -> Option<Vec<(u64, u64)>> {
    log.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut total = 0u64;
    for &(addr, len) in log.iter().filter(|r| r.1 > 0) {
        let end = addr.checked_add(len)?;
        match out.last_mut() {
            Some((a, l)) if addr / PAGE <= (*a + *l - 1) / PAGE + 1 => {
                let new_end = end.max(*a + *l);
                total += new_end - (*a + *l);
                *l = new_end - *a;
            }
            _ => {
                out.push((addr, len));
                total += len;
            }
        }
        if total > MAX_BYTES || out.len() > MAX_RANGES {
            return None;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The walk's view: the batch first, then what `prefetch` brought, then the target.
struct Batched<'a> {
    inner: &'a mut dyn Memory,
    buf: &'a [u8],
    /// (address, offset into `buf`, length), sorted by address, not overlapping.
    spans: &'a [(u64, usize, usize)],
    /// The span that served the last read: the walk reads mostly upwards through each span.
    next: usize,
    extra: Vec<(u64, Vec<u8>)>,
    log: &'a mut Vec<(u64, u64)>,
    reads: u64,
}

impl Batched<'_> {
    /// The bytes at `addr..addr + len` if the batch or a prefetched copy holds them all.
    fn find(&mut self, addr: u64, len: usize) -> Option<&[u8]> {
        let within = |&(a, _, l): &(u64, usize, usize)| {
            let start = usize::try_from(addr.checked_sub(a)?).ok()?;
            (start.checked_add(len)? <= l).then_some(start)
        };
        let hit = match self.spans.get(self.next).and_then(within) {
            Some(start) => Some((self.next, start)),
            None => {
                let i = self.spans.partition_point(|s| s.0 <= addr).checked_sub(1);
                i.and_then(|i| Some((i, within(&self.spans[i])?)))
            }
        };
        if let Some((i, start)) = hit {
            self.next = i;
            let off = self.spans[i].1 + start;
            return self.buf.get(off..off + len);
        }
        self.extra.iter().find_map(|(a, b)| {
            let start = usize::try_from(addr.checked_sub(*a)?).ok()?;
            b.get(start..start.checked_add(len)?)
        })
    }

    /// Serves `buf` from the copies, logging the range for the next walk; false if no copy has it.
    fn serve(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        self.log.push((addr, buf.len() as u64));
        match self.find(addr, buf.len()) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

impl Memory for Batched<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        // The batch first: it never holds the local copy's ranges (they are not logged), and most reads are in it.
        if let Some(src) = self.find(addr, buf.len()) {
            buf.copy_from_slice(src);
            self.log.push((addr, buf.len() as u64));
            return true;
        }
        if buf.is_empty() || self.inner.is_local(addr, buf.len()) {
            return self.inner.read(addr, buf);
        }
        self.log.push((addr, buf.len() as u64));
        self.reads += 1;
        self.inner.read(addr, buf)
    }

    fn read_ranges(&mut self, ranges: &[(u64, u64)], buf: &mut [u8], ok: &mut Vec<bool>) {
        ok.clear();
        // (index, offset into `buf`) of the ranges no copy has.
        let mut missing: Vec<(usize, usize)> = Vec::new();
        let mut off = 0usize;
        for (i, &(addr, len)) in ranges.iter().enumerate() {
            let Some(b) = usize::try_from(len).ok().and_then(|n| buf.get_mut(off..off.checked_add(n)?)) else {
                ok.push(false);
                off = buf.len();
                continue;
            };
            off += b.len();
            if b.is_empty() || self.inner.is_local(addr, b.len()) {
                ok.push(self.inner.read(addr, b));
            } else if self.serve(addr, b) {
                ok.push(true);
            } else {
                ok.push(false);
                missing.push((i, off - b.len()));
            }
        }
        if missing.is_empty() {
            return;
        }
        // Rare (a walk that went somewhere new): read them all in one go, then copy them into place.
        self.reads += 1;
        let want: Vec<(u64, u64)> = missing.iter().map(|&(i, _)| ranges[i]).collect();
        let mut tmp = vec![0u8; want.iter().map(|r| r.1 as usize).sum()];
        let mut got = Vec::new();
        self.inner.read_ranges(&want, &mut tmp, &mut got);
        let mut from = 0usize;
        for (k, (&(i, at), &(_, len))) in missing.iter().zip(&want).enumerate() {
            let len = len as usize;
            if got.get(k).copied().unwrap_or(false) {
                buf[at..at + len].copy_from_slice(&tmp[from..from + len]);
                ok[i] = true;
            }
            from += len;
        }
    }

    fn prefetch(&mut self, addr: u64, len: u64) {
        let Ok(n) = usize::try_from(len) else { return };
        if n == 0 || self.inner.is_local(addr, n) {
            return;
        }
        self.log.push((addr, len));
        if self.find(addr, n).is_some() {
            return;
        }
        let mut data = vec![0u8; n];
        self.reads += 1;
        if self.inner.read(addr, &mut data) {
            self.extra.push((addr, data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory from address 0x1000 on, counting the reads that reach it.
    struct Flat {
        bytes: Vec<u8>,
        reads: usize,
    }

    impl Memory for Flat {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            self.reads += 1;
            let Some(src) = usize::try_from(addr.wrapping_sub(0x1000))
                .ok()
                .and_then(|a| self.bytes.get(a..a.checked_add(buf.len())?))
            else {
                return false;
            };
            buf.copy_from_slice(src);
            true
        }
        fn read_ranges(&mut self, ranges: &[(u64, u64)], buf: &mut [u8], ok: &mut Vec<bool>) {
            let before = self.reads;
            let mut rest = buf;
            ok.clear();
            for &(a, len) in ranges {
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(len as usize);
                ok.push(self.read(a, head));
                rest = tail;
            }
            self.reads = before + 1;
        }
    }

    fn walk(p: &mut Prefetcher, mem: &mut Flat, at: &[u64]) -> Vec<u8> {
        p.walk(1, mem, |m| {
            let mut out = Vec::new();
            for &a in at {
                let mut b = [0u8; 2];
                assert!(m.read(a, &mut b), "{a:#x}");
                out.extend(b);
            }
            let mut buf = [0u8; 8];
            let mut ok = Vec::new();
            m.read_ranges(&[(0x1100, 4), (0x1800, 4)], &mut buf, &mut ok);
            assert_eq!(ok, [true, true]);
            out.extend(buf);
            out
        })
    }

    #[test]
    fn a_second_walk_reads_once_and_sees_fresh_bytes() {
        let mut mem = Flat { bytes: (0..3 * 4096u32).map(|i| i as u8).collect(), reads: 0 };
        let mut p = Prefetcher::default();
        let at = [0x1000, 0x1010, 0x1400, 0x1ff0];
        let first = walk(&mut p, &mut mem, &at);
        assert_eq!(mem.reads, 5, "four reads and one read_ranges");
        mem.reads = 0;
        assert_eq!(walk(&mut p, &mut mem, &at), first);
        assert_eq!(mem.reads, 1, "the batch alone");
        // The bytes changed: the batch is read again, never reused.
        mem.bytes[0x400] = 0xee;
        mem.reads = 0;
        let third = walk(&mut p, &mut mem, &at);
        assert_eq!((third[4], mem.reads), (0xee, 1));
        // A walk going elsewhere reads what the batch lacks, and the next batch follows it.
        mem.reads = 0;
        walk(&mut p, &mut mem, &[0x1000, 0x3800]);
        assert_eq!(mem.reads, 2);
        mem.reads = 0;
        walk(&mut p, &mut mem, &[0x1000, 0x3800]);
        assert_eq!(mem.reads, 1);
    }

    #[test]
    fn an_unreadable_range_fails_only_its_reads() {
        let mut mem = Flat { bytes: vec![7; 4096], reads: 0 };
        let mut p = Prefetcher::default();
        walk(&mut p, &mut mem, &[0x1000, 0x1ffe]);
        mem.bytes.truncate(0x800);
        let r = p.walk(1, &mut mem, |m| {
            let mut b = [0u8; 2];
            (m.read(0x1000, &mut b), m.read(0x1ffe, &mut b))
        });
        assert_eq!(r, (true, false));
    }

    #[test]
    fn merged_ranges_are_bounded() {
        assert_eq!(merge(&mut [(0x100, 8), (0x108, 8), (0x100, 4)]), Some(vec![(0x100, 16)]));
        assert_eq!(merge(&mut [(0x100, 8), (0x1ff8, 8)]), Some(vec![(0x100, 0x1f00)]));
        assert_eq!(merge(&mut [(0x100, 8), (0x2000, 8)]).map(|v| v.len()), Some(2));
        assert_eq!(merge(&mut [(0, MAX_BYTES + 1)]), None);
        assert_eq!(merge(&mut [(u64::MAX - 2, 8)]), None);
    }
}
