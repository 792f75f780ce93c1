//! Parses `/proc/PID/smaps` text into [`SmapsRegion`]s: each region is the maps line ([`Mapping`]) with the
//! kernel's per-region counters, in one pass. Pure: callers do the I/O. Malformed lines are skipped and
//! counters that do not parse stay zero, so any text yields a result and never a panic. [`SmapsStream`] takes the
//! text a line at a time (a reader never holds a large file whole); [`Span`] is what the leak model keeps of a
//! region per sample.

use crate::model::maps::{Mapping, parse_maps_line};
use std::collections::BTreeMap;

/// One region of `/proc/PID/smaps`. Sizes are in kB, as the kernel prints them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SmapsRegion {
    pub map: Mapping,
    pub size: u64,
    pub kernel_page_size: u64,
    pub mmu_page_size: u64,
    pub rss: u64,
    pub pss: u64,
    pub pss_dirty: u64,
    pub shared_clean: u64,
    pub shared_dirty: u64,
    pub private_clean: u64,
    pub private_dirty: u64,
    pub referenced: u64,
    pub anonymous: u64,
    pub ksm: u64,
    pub lazy_free: u64,
    pub anon_huge_pages: u64,
    pub shmem_pmd_mapped: u64,
    pub file_pmd_mapped: u64,
    pub shared_hugetlb: u64,
    pub private_hugetlb: u64,
    pub swap: u64,
    pub swap_pss: u64,
    pub locked: u64,
    /// `THPeligible` (a flag, not a size); `None` on kernels that do not print it.
    pub thp_eligible: Option<bool>,
    /// Two-letter flags of the `VmFlags` line (`rd`, `wr`, `gd`, `ht`, ...).
    pub vm_flags: Vec<String>,
    /// kB counters this parser does not name (newer kernels add some), so nothing the kernel says is lost.
    pub other: BTreeMap<String, u64>,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            start: 0,
            end: 0,
            perms: String::from("---p"),
            offset: 0,
            dev: String::from("00:00"),
            inode: 0,
            path: String::new(),
        }
    }
}

impl SmapsRegion {
    /// Resident plus swapped-out memory, in kB: what the region really costs, whether or not it was swapped.
    pub fn rss_swap(&self) -> u64 {
        self.rss.saturating_add(self.swap)
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.vm_flags.iter().any(|f| f == flag)
    }
}

/// Parses a whole smaps text. Counter lines before the first region line are ignored.
pub fn parse_smaps(text: &str) -> Vec<SmapsRegion> {
    let mut stream = SmapsStream::default();
    let mut out: Vec<SmapsRegion> = text.lines().filter_map(|l| stream.line(l)).collect();
    out.extend(stream.finish());
    out
}

/// Parses smaps text one line at a time, so a caller reading a large file never holds all of it (a process with
/// 30,000 mappings has 21 MB of smaps): each region comes out when the line after its last counter arrives, the
/// last one from [`SmapsStream::finish`].
#[derive(Default)]
pub struct SmapsStream {
    current: Option<SmapsRegion>,
    lean: bool,
}

impl SmapsStream {
    /// A stream that leaves out the `VmFlags` and the counters without a field: for 30,000 regions they would
    /// cost over 10 MB, and a sample of the memory by class needs neither.
    pub fn lean() -> SmapsStream {
        SmapsStream { current: None, lean: true }
    }

    /// Takes one line (with or without its newline); returns the region it completes, if any.
    pub fn line(&mut self, line: &str) -> Option<SmapsRegion> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        // A region line starts with `start-end`; a counter line with `Key:`. A path may contain anything,
        // including `: `, but it never comes first on the line.
        let first = line.trim_ascii_start();
        let end = first.bytes().position(|c| c.is_ascii_whitespace()).unwrap_or(first.len());
        if let Some(key) = first.get(..end).and_then(|f| f.strip_suffix(':')) {
            if let Some(r) = self.current.as_mut() {
                let value = first.get(end..).unwrap_or("").trim_ascii();
                set_field(r, key, value, self.lean);
            }
            None
        } else if let Some(map) = parse_maps_line(line) {
            self.current.replace(SmapsRegion { map, ..SmapsRegion::default() })
        } else {
            None
        }
    }

    /// The last region.
    pub fn finish(self) -> Option<SmapsRegion> {
        self.current
    }
}

/// What the leak model keeps of a region in each sample: its range, whether it is anonymous-like memory, and its
/// Rss+Swap in kB. A few dozen bytes, so that keeping a process's 30,000 regions twice costs about 2 MB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Span {
    pub start: u64,
    pub end: u64,
    /// Anonymous memory as the leak model counts it ([`anonymous_like`]).
    pub anon: bool,
    pub rss_swap: u64,
    /// Anonymous address space no access is allowed to (`---p`): reserved, not memory (the unused part of a
    /// glibc thread heap, which `mprotect` commits as the arena grows).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reserved: bool,
}

/// Whether a mapping with these permissions and path is reserved address space ([`Span::reserved`]).
fn reserved(perms: &str, path: &str) -> bool {
    perms.starts_with("---") && anonymous_like(path)
}

impl Span {
    pub fn of(r: &SmapsRegion) -> Span {
        Span::of_mapping(&r.map, r.rss_swap())
    }

    pub fn of_mapping(m: &Mapping, rss_swap: u64) -> Span {
        Span {
            start: m.start,
            end: m.end,
            anon: anonymous_like(&m.path),
            rss_swap,
            reserved: reserved(&m.perms, &m.path),
        }
    }

    /// The same range and kind (its Rss+Swap aside).
    pub fn same_range(&self, other: &Span) -> bool {
        (self.start, self.end, self.anon) == (other.start, other.end, other.anon)
    }
}

/// The [`Span`] of one `/proc/PID/maps` line (Rss+Swap 0: maps does not say), without building its
/// [`Mapping`]; `None` where [`parse_maps_line`] would refuse the line.
pub fn parse_maps_span(line: &str) -> Option<Span> {
    let mut rest = line.trim_end_matches('\n');
    let mut field = || {
        let r = rest.trim_start_matches(' ');
        let end = r.find(' ').unwrap_or(r.len());
        let (f, tail) = r.split_at(end);
        rest = tail;
        f
    };
    let (s, e) = field().split_once('-')?;
    let perms = field();
    u64::from_str_radix(field(), 16).ok()?;
    field();
    field().parse::<u64>().ok()?;
    let (start, end) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
    if end < start || perms.len() != 4 {
        return None;
    }
    let path = rest.trim_start_matches(' ');
    Some(Span { start, end, anon: anonymous_like(path), rss_swap: 0, reserved: reserved(perms, path) })
}

/// Fills the Rss+Swap of the regions of a new sample `now` (read from maps, so without it) from the previous sample
/// `prev`, where a region is unchanged (same range and kind) and holds none of the `traced` ranges; returns the
/// indices of the anonymous-like regions whose Rss+Swap must be read afresh (new, changed, or holding traced
/// bytes). Others that changed (file mappings: their growth is not asked for) keep what their start had. All
/// three lists sorted by address, as the kernel prints them.
pub fn carry_over(prev: &[Span], now: &mut [Span], traced: &[(u64, u64)]) -> Vec<usize> {
    let mut fresh = Vec::new();
    for (i, s) in now.iter_mut().enumerate() {
        let t = traced.partition_point(|&(_, e)| e <= s.start);
        let holds_traced = traced.get(t).is_some_and(|&(ts, _)| ts < s.end);
        let p = prev.partition_point(|p| p.start < s.start);
        let before = prev.get(p).filter(|p| p.same_range(s));
        match before {
            Some(b) if !holds_traced => s.rss_swap = b.rss_swap,
            _ if s.anon => fresh.push(i),
            _ => s.rss_swap = prev.get(p).filter(|p| p.start == s.start).map_or(0, |p| p.rss_swap),
        }
    }
    fresh
}

/// Anonymous memory as smaps shows it: no path, a `[pseudo]` name, or shared anonymous memory (an unlinked
/// shmem file named /dev/zero).
pub fn anonymous_like(path: &str) -> bool {
    !path.starts_with('/') || path.starts_with("/dev/zero")
}

/// For each region of `after`, the Rss+Swap (kB) its address range had in `before`, or `None` when it is new (no
/// region of `before` overlaps it). Regions move, merge and split as they change (a heap grows at its end, adjacent
/// anonymous mmaps merge downwards, a munmap in the middle of one leaves two), so each region of `before` is shared
/// among the regions of `after` it overlaps, in proportion to the overlap (the one it overlaps most gets what the
/// rounding leaves): a part split off is not new, and no kB is counted twice. Both lists sorted by address, as the
/// kernel prints them.
pub fn previous_rss_swap(before: &[Span], after: &[Span]) -> Vec<Option<u64>> {
    let mut prev: Vec<Option<u64>> = vec![None; after.len()];
    for old in before {
        let from = after.partition_point(|r| r.end <= old.start);
        let overlaps: Vec<(usize, u64)> = after
            .get(from..)
            .unwrap_or(&[])
            .iter()
            .take_while(|r| r.start < old.end)
            .enumerate()
            .map(|(i, r)| (from + i, r.end.min(old.end).saturating_sub(r.start.max(old.start))))
            .filter(|&(_, bytes)| bytes > 0)
            .collect();
        let total: u64 = overlaps.iter().map(|o| o.1).sum();
        let Some(&(most, _)) = overlaps.iter().max_by_key(|o| o.1) else { continue };
        let share = |bytes: u64| (old.rss_swap as u128 * bytes as u128 / total.max(1) as u128) as u64;
        let given: u64 = overlaps.iter().filter(|o| o.0 != most).map(|o| share(o.1)).sum();
        for &(i, bytes) in &overlaps {
            let part = if i == most { old.rss_swap.saturating_sub(given) } else { share(bytes) };
            if let Some(slot) = prev.get_mut(i) {
                *slot = Some(slot.unwrap_or(0).saturating_add(part));
            }
        }
    }
    prev
}

/// `123 kB` -> 123; a bare number is accepted too.
fn parse_kb(value: &str) -> Option<u64> {
    let num = value.strip_suffix("kB").unwrap_or(value).trim_ascii_end();
    num.parse().ok()
}

fn set_field(r: &mut SmapsRegion, key: &str, value: &str, lean: bool) {
    match key {
        "VmFlags" | "ProtectionKey" if lean => return,
        "VmFlags" => {
            r.vm_flags = value.split_ascii_whitespace().map(str::to_string).collect();
            return;
        }
        "THPeligible" => {
            r.thp_eligible = value.parse::<u64>().ok().map(|v| v != 0);
            return;
        }
        "ProtectionKey" => return,
        _ => {}
    }
    let Some(kb) = parse_kb(value) else { return };
    let slot = match key {
        "Size" => &mut r.size,
        "KernelPageSize" => &mut r.kernel_page_size,
        "MMUPageSize" => &mut r.mmu_page_size,
        "Rss" => &mut r.rss,
        "Pss" => &mut r.pss,
        "Pss_Dirty" => &mut r.pss_dirty,
        "Shared_Clean" => &mut r.shared_clean,
        "Shared_Dirty" => &mut r.shared_dirty,
        "Private_Clean" => &mut r.private_clean,
        "Private_Dirty" => &mut r.private_dirty,
        "Referenced" => &mut r.referenced,
        "Anonymous" => &mut r.anonymous,
        "KSM" => &mut r.ksm,
        "LazyFree" => &mut r.lazy_free,
        "AnonHugePages" => &mut r.anon_huge_pages,
        "ShmemPmdMapped" => &mut r.shmem_pmd_mapped,
        "FilePmdMapped" => &mut r.file_pmd_mapped,
        "Shared_Hugetlb" => &mut r.shared_hugetlb,
        "Private_Hugetlb" => &mut r.private_hugetlb,
        "Swap" => &mut r.swap,
        "SwapPss" => &mut r.swap_pss,
        "Locked" => &mut r.locked,
        _ => {
            if !lean {
                r.other.insert(key.to_string(), kb);
            }
            return;
        }
    };
    *slot = kb;
}

/// The totals of `/proc/PID/smaps_rollup`, in kB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rollup {
    pub rss: u64,
    pub pss: u64,
    pub anonymous: u64,
    pub swap: u64,
}

impl Rollup {
    pub fn rss_swap(&self) -> u64 {
        self.rss + self.swap
    }
}

/// `None` when the text has no `Rss:` line (not a rollup).
pub fn parse_rollup(text: &str) -> Option<Rollup> {
    let mut r = Rollup::default();
    let mut seen = false;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else { continue };
        let Some(kb) = rest.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()) else { continue };
        match key {
            "Rss" => (r.rss, seen) = (kb, true),
            "Pss" => r.pss = kb,
            "Anonymous" => r.anonymous = kb,
            "Swap" => r.swap = kb,
            _ => {}
        }
    }
    seen.then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollup_sums_rss_and_swap() {
        let text = "55d0c0a3e000-7ffd5a5f5000 ---p 00000000 00:00 0                          [rollup]\n\
                    Rss:                1964 kB\nPss:                 322 kB\nPss_Anon:            120 kB\n\
                    Anonymous:           132 kB\nSwap:                  8 kB\nSwapPss:               8 kB\n";
        let r = parse_rollup(text).unwrap();
        assert_eq!((r.rss, r.pss, r.anonymous, r.swap, r.rss_swap()), (1964, 322, 132, 8, 1972));
        assert_eq!(parse_rollup("Size: 4 kB\n"), None);
    }

    /// Captured from a Linux 6.x process (a swapped-out heap, a THP-backed arena, odd file names), trimmed.
    const SAMPLE: &str = "\
5581d6a00000-5581d6a21000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                  12 kB
Pss:                  12 kB
Pss_Dirty:            12 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:        12 kB
Referenced:           12 kB
Anonymous:            12 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                120 kB
SwapPss:             120 kB
Locked:                0 kB
THPeligible:           0
VmFlags: rd wr mr mw me ac sd 
7f3c00000000-7f3c02a00000 rw-p 00000000 00:00 0 
Size:              43008 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:               40960 kB
Pss:               40960 kB
Private_Dirty:     40960 kB
Anonymous:         40960 kB
AnonHugePages:     38912 kB
Swap:                  0 kB
THPeligible:           1
ProtectionKey:         0
VmFlags: rd wr mr mw me ac sd hg 
7f3c02a00000-7f3c04000000 ---p 00000000 00:00 0 
Size:              22528 kB
Rss:                   0 kB
VmFlags: mr mw me ac sd 
7f3c0a000000-7f3c0a001000 r--s 00000000 fe:01 77                         /tmp/my data: v2 (deleted)
Size:                  4 kB
Rss:                   4 kB
Shared_Clean:          4 kB
NewCounter:            7 kB
VmFlags: rd mr me ms sd 
7ffd1c9e0000-7ffd1ca01000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Rss:                  20 kB
VmFlags: rd wr mr mw me gd ac 
";

    #[test]
    fn parses_regions_and_counters() {
        let r = parse_smaps(SAMPLE);
        assert_eq!(r.len(), 5);
        let heap = &r[0];
        assert_eq!(heap.map.path, "[heap]");
        assert_eq!((heap.size, heap.rss, heap.swap, heap.swap_pss), (132, 12, 120, 120));
        assert_eq!(heap.rss_swap(), 132);
        assert_eq!(heap.private_dirty, 12);
        assert_eq!(heap.thp_eligible, Some(false));
        assert!(heap.has_flag("ac") && !heap.has_flag("hg"));

        let thp = &r[1];
        assert_eq!(thp.map.path, "");
        assert_eq!(thp.map.start, 0x7f3c00000000);
        assert_eq!((thp.rss, thp.anon_huge_pages, thp.anonymous), (40960, 38912, 40960));
        assert_eq!(thp.thp_eligible, Some(true));
        assert!(thp.has_flag("hg"));
        assert_eq!(r[2].map.perms, "---p");

        let odd = &r[3];
        assert_eq!(odd.map.path, "/tmp/my data: v2 (deleted)");
        assert_eq!(odd.shared_clean, 4);
        assert_eq!(odd.other.get("NewCounter"), Some(&7));
        assert_eq!(r[4].map.path, "[stack]");
        assert!(r[4].has_flag("gd"));
    }

    #[test]
    fn growth_follows_regions_that_grow_and_merge() {
        let before = parse_smaps(
            "1000-3000 rw-p 0 00:00 0\nRss: 8 kB\n5000-6000 rw-p 0 00:00 0\nRss: 4 kB\n6000-7000 r--p 0 00:00 0\nRss: 4 kB\n",
        );
        // 1000-3000 grew downwards to 0-3000; both 5000-6000 and 6000-7000 now lie in 4000-7000; 9000-a000 is new.
        let after = parse_smaps(
            "0-3000 rw-p 0 00:00 0\nRss: 12 kB\n4000-7000 rw-p 0 00:00 0\nRss: 12 kB\n9000-a000 rw-p 0 00:00 0\n",
        );
        let (before, after): (Vec<Span>, Vec<Span>) =
            (before.iter().map(Span::of).collect(), after.iter().map(Span::of).collect());
        assert_eq!(previous_rss_swap(&before, &after), [Some(8), Some(8), None]);
        assert_eq!(previous_rss_swap(&[], &after), [None, None, None]);
        // 1000-4000 (12 kB) lost its middle page to a munmap: 1000-2000 and 3000-4000 are what is left of it, not
        // new, and share its 12 kB by size (the larger overlap first: 1000-2000 and 3000-5000 overlap it alike).
        let before: Vec<Span> = parse_smaps("1000-4000 rw-p 0 00:00 0\nRss: 12 kB\n").iter().map(Span::of).collect();
        let after: Vec<Span> = parse_smaps(
            "1000-2000 rw-p 0 00:00 0\nRss: 4 kB\n3000-5000 rw-p 0 00:00 0\nRss: 8 kB\n6000-7000 rw-p 0 00:00 0\n",
        )
        .iter()
        .map(Span::of)
        .collect();
        assert_eq!(previous_rss_swap(&before, &after), [Some(6), Some(6), None]);
        assert!(previous_rss_swap(&before, &[]).is_empty());
    }

    #[test]
    fn never_panics_on_garbage() {
        let cases = [
            "",
            "Rss: 5 kB\n",
            "Rss:\n",
            ":\n",
            "1000-2000 rw-p 0 00:00 0\nRss: 99999999999999999999999 kB\nSwap: -1 kB\nVmFlags:\n",
            "1000-2000 rw-p 0 00:00 0\nRss: 18446744073709551615 kB\nSwap: 18446744073709551615 kB\n",
            "\u{0}\u{ff}-:\n\n\n",
            "2000-1000 rw-p 0 00:00 0\nRss: 4 kB\n",
        ];
        for c in cases {
            let r = parse_smaps(c);
            for x in &r {
                let _ = x.rss_swap();
            }
        }
        let r = parse_smaps(cases[4]);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].rss, r[0].swap), (0, 0));
        assert!(r[0].vm_flags.is_empty());
        assert_eq!(parse_smaps(cases[5])[0].rss_swap(), u64::MAX);
        assert!(parse_smaps(cases[7]).is_empty());
    }

    #[test]
    fn a_stream_of_lines_gives_what_the_whole_text_gives() {
        let whole = parse_smaps(SAMPLE);
        let mut stream = SmapsStream::default();
        // Lines as a buffered reader hands them over, newline included.
        let mut got: Vec<SmapsRegion> = SAMPLE.split_inclusive('\n').filter_map(|l| stream.line(l)).collect();
        got.extend(stream.finish());
        assert_eq!(got, whole);
        // A lean stream: the same regions and counters, without the flags and the unnamed counters.
        let mut lean = SmapsStream::lean();
        let mut slim: Vec<SmapsRegion> = SAMPLE.lines().filter_map(|l| lean.line(l)).collect();
        slim.extend(lean.finish());
        let mut expect = whole.clone();
        for r in &mut expect {
            r.vm_flags.clear();
            r.other.clear();
        }
        assert_eq!(slim, expect);
        let spans: Vec<Span> = whole.iter().map(Span::of).collect();
        assert_eq!(
            spans[0],
            Span { start: 0x5581d6a00000, end: 0x5581d6a21000, anon: true, rss_swap: 132, reserved: false }
        );
        // A file is not anonymous; a pseudo-name is.
        assert_eq!(spans.iter().map(|s| s.anon).collect::<Vec<_>>(), [true, true, true, false, true]);
        assert!(anonymous_like("/dev/zero (deleted)") && !anonymous_like("/usr/lib/libc.so.6"));
        assert!(SmapsStream::default().finish().is_none());
    }

    #[test]
    fn a_sample_from_maps_reads_afresh_only_what_changed_or_is_traced() {
        let span = |start, end, anon, rss_swap| Span { start, end, anon, rss_swap, reserved: false };
        let prev = [span(0x1000, 0x2000, true, 4), span(0x2000, 0x4000, false, 8), span(0x5000, 0x6000, true, 4)];
        let mut now = [
            span(0x1000, 0x2000, true, 0),  // unchanged: carried
            span(0x2000, 0x4000, false, 0), // unchanged file: carried
            span(0x5000, 0x7000, true, 0),  // grew: read afresh
            span(0x8000, 0x9000, true, 0),  // new: read afresh
            span(0xa000, 0xc000, true, 0),  // new
        ];
        assert_eq!(carry_over(&prev, &mut now, &[]), [2, 3, 4]);
        assert_eq!(now.map(|s| s.rss_swap), [4, 8, 0, 0, 0]);
        // A traced range inside an unchanged region: read afresh (calls may have touched it).
        let mut again = [span(0x1000, 0x2000, true, 0), span(0x2000, 0x4000, false, 0)];
        assert_eq!(carry_over(&prev, &mut again, &[(0x1800, 0x1900)]), [0]);
        assert_eq!(carry_over(&prev, &mut again, &[(0x0, 0x1000), (0x2000, 0x3000)]), Vec::<usize>::new());
        assert_eq!(again[1].rss_swap, 8);
        assert!(carry_over(&[], &mut [], &[(1, 2)]).is_empty());
    }

    #[test]
    fn a_span_from_a_maps_line_is_the_span_of_its_mapping() {
        let lines = [
            "55d0c7a00000-55d0c7a01000 r--p 00000000 fe:01 1234                       /usr/bin/my prog (deleted)\n",
            "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n",
            "7f0000021000-7f0000022000 rw-s 00000000 00:01 7                          /dev/zero (deleted)",
            "7ffd1c9e0000-7ffd1ca01000 rw-p 00000000 00:00 0                          [stack]",
            "7ffd1c9e0000-7ffd1ca01000 rw-p 00000000 00:00 0",
        ];
        for l in lines {
            let m = parse_maps_line(l.trim_end_matches('\n')).unwrap();
            assert_eq!(parse_maps_span(l), Some(Span::of_mapping(&m, 0)), "{l}");
        }
        for bad in ["", "garbage line", "2000-1000 rw-p 0 00:00 0", "1000-2000 rw- 0 00:00 0", "1000-2000 rw-p x 0:0 0"]
        {
            assert_eq!(parse_maps_span(bad), None, "{bad}");
            assert_eq!(parse_maps_line(bad), None, "{bad}");
        }
    }
}
