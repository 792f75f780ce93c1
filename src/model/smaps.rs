//! Parses `/proc/PID/smaps` text into [`SmapsRegion`]s: each region is the maps line ([`Mapping`]) with the
//! kernel's per-region counters, in one pass. Pure: callers do the I/O. Malformed lines are skipped and
//! counters that do not parse stay zero, so any text yields a result and never a panic.

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
    let mut out: Vec<SmapsRegion> = Vec::new();
    for line in text.lines() {
        let first = line.split_ascii_whitespace().next().unwrap_or("");
        // A region line starts with `start-end`; a counter line with `Key:`. A path may contain anything,
        // including `: `, but it never comes first on the line.
        if let Some(key) = first.strip_suffix(':') {
            if let Some(r) = out.last_mut() {
                let value = line.get(first.len()..).unwrap_or("").trim();
                set_field(r, key, value);
            }
        } else if let Some(map) = parse_maps_line(line) {
            out.push(SmapsRegion { map, ..SmapsRegion::default() });
        }
    }
    out
}

/// For each region of `after`, the Rss+Swap (kB) its address range had in `before`, or `None` when it is new.
/// Regions move and merge as they grow (a heap at its end, adjacent anonymous mmaps downwards), so each region
/// of `before` counts toward the region of `after` it overlaps most. Both lists sorted by address, as the kernel
/// prints them.
pub fn previous_rss_swap(before: &[SmapsRegion], after: &[SmapsRegion]) -> Vec<Option<u64>> {
    let mut prev: Vec<Option<u64>> = vec![None; after.len()];
    for old in before {
        let from = after.partition_point(|r| r.map.end <= old.map.start);
        let best = after
            .get(from..)
            .unwrap_or(&[])
            .iter()
            .take_while(|r| r.map.start < old.map.end)
            .enumerate()
            .max_by_key(|(_, r)| r.map.end.min(old.map.end).saturating_sub(r.map.start.max(old.map.start)))
            .map(|(i, _)| from + i);
        if let Some(slot) = best.and_then(|i| prev.get_mut(i)) {
            *slot = Some(slot.unwrap_or(0).saturating_add(old.rss_swap()));
        }
    }
    prev
}

/// `123 kB` -> 123; a bare number is accepted too.
fn parse_kb(value: &str) -> Option<u64> {
    let num = value.strip_suffix("kB").unwrap_or(value).trim();
    num.parse().ok()
}

fn set_field(r: &mut SmapsRegion, key: &str, value: &str) {
    match key {
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
            r.other.insert(key.to_string(), kb);
            return;
        }
    };
    *slot = kb;
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(previous_rss_swap(&before, &after), [Some(8), Some(8), None]);
        assert_eq!(previous_rss_swap(&[], &after), [None, None, None]);
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
}
