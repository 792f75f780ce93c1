//! Where the trampoline's pages go in the target's address space (part of `trampoline`).

use super::PatchPlan;
use crate::model::maps::Mapping;

/// Where the trampoline page may go, nearest to the patched instruction first: in the gaps between `maps` (the
/// target's, sorted by address as the kernel lists them), each page within `rel32` reach of every jump into and
/// out of it. A page is never adjacent to a mapping (a guard region, a thread stack's guard page, a region that
/// might be extended in place keeps a free page beside it), never in the gap just below `[stack]` (the main stack
/// grows down into it), and never below 1 MiB (`vm.mmap_min_addr`) or above the 47-bit user space. One candidate
/// per gap: the caller maps it with `MAP_FIXED_NOREPLACE` and moves on to the next one if that fails.
pub fn page_candidates(maps: &[Mapping], plans: &[PatchPlan], pages: u64) -> Vec<u64> {
    const PAGE: u64 = 4096;
    const LOW: u64 = 0x10_0000;
    const HIGH: u64 = 0x7fff_ffff_f000;
    // Every branch between the patched code and the page: the patched jumps, and the jumps back.
    let Some(plan) = plans.first() else { return Vec::new() };
    let sites: Vec<u64> = plans.iter().flat_map(|p| [p.at, p.at + p.orig.len() as u64, p.syscall_at + 2]).collect();
    let (lo_site, hi_site) = (sites.iter().min().copied().unwrap_or(0), sites.iter().max().copied().unwrap_or(0));
    // Keep a margin inside the signed 32-bit range for the page's own length and the instructions' lengths.
    let reach = (i32::MAX as u64) - 2 * PAGE;
    let lowest = hi_site.saturating_sub(reach).max(LOW);
    let highest = lo_site.saturating_add(reach).min(HIGH);
    let mut sorted: Vec<&Mapping> = maps.iter().filter(|m| m.start < HIGH).collect();
    sorted.sort_by_key(|m| m.start);
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut prev_end = 0u64;
    for next in sorted.iter().map(|m| Some(*m)).chain(std::iter::once(None)) {
        let (gap_end, below_stack) = match next {
            Some(m) => (m.start, m.path == "[stack]"),
            None => (HIGH, false),
        };
        let gap_start = prev_end;
        if let Some(m) = next {
            prev_end = prev_end.max(m.end);
        }
        if below_stack || gap_end <= gap_start {
            continue;
        }
        // A free page on each side of ours.
        let first = gap_start.saturating_add(PAGE).max(lowest).next_multiple_of(PAGE);
        let last = gap_end.saturating_sub((pages + 1) * PAGE).min(highest) & !(PAGE - 1);
        if first > last {
            continue;
        }
        // The page of the gap nearest to the patched instruction (`first` is page-aligned, so rounding down stays in).
        let page = plan.at.clamp(first, last) & !(PAGE - 1);
        out.push((page.abs_diff(plan.at), page));
    }
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}
