//! Tests of the address-space model: its rules call by call, reconciling with samples, and its changes.
use super::*;
use crate::model::smaps::parse_smaps;

const A: StackId = StackId(1);
const B: StackId = StackId(2);
const F: StackId = StackId(3);
const ANON: u64 = MAP_ANONYMOUS | 0x2;
const MIB: u64 = 1 << 20;

fn mmap(m: &mut AddressSpace, addr: u64, len: u64, s: StackId) {
    m.apply_call(SYS_MMAP, &[0, len, 3, ANON, u64::MAX, 0], Some(addr), s);
}
fn munmap(m: &mut AddressSpace, addr: u64, len: u64, s: StackId) {
    m.apply_call(SYS_MUNMAP, &[addr, len, 0, 0, 0, 0], Some(0), s);
}
fn mremap(m: &mut AddressSpace, old: u64, old_len: u64, new_len: u64, flags: u64, ret: u64, s: StackId) {
    m.apply_call(SYS_MREMAP, &[old, old_len, new_len, flags, 0, 0], Some(ret), s);
}
fn stats(m: &AddressSpace, s: StackId) -> StackStats {
    m.stacks().into_iter().find(|(id, _)| *id == s).map(|(_, x)| x).unwrap_or_default()
}
fn balanced(m: &AddressSpace) {
    for (id, s) in m.stacks() {
        assert_eq!(s.mapped, s.unmapped + s.vanished + s.still_mapped, "{id:?}: {s:?}");
    }
}

#[test]
fn leaking_site_ranks_first_with_exact_bytes() {
    let mut m = AddressSpace::new();
    // A leaks 10 mappings of 1 MiB + 1 byte (rounded to 1 MiB + 4 KiB); B maps and frees 20 of 2 MiB.
    for i in 0..10 {
        mmap(&mut m, 0x7f00_0000_0000 + i * 4 * MIB, MIB + 1, A);
    }
    for i in 0..20 {
        let addr = 0x7e00_0000_0000 + i * 4 * MIB;
        mmap(&mut m, addr, 2 * MIB, B);
        munmap(&mut m, addr, 2 * MIB, F);
    }
    let s = m.stacks();
    assert_eq!(s[0].0, A);
    assert_eq!(s[0].1.still_mapped, 10 * (MIB + PAGE));
    assert_eq!((s[0].1.mmaps, s[0].1.unmapped), (10, 0));
    let b = stats(&m, B);
    assert_eq!((b.mapped, b.unmapped, b.still_mapped, b.mmaps), (40 * MIB, 40 * MIB, 0, 20));
    let f = stats(&m, F);
    assert_eq!((f.munmaps, f.released, f.mapped), (20, 40 * MIB, 0));
    balanced(&m);
}

#[test]
fn partial_munmap_splits_and_keeps_the_creator() {
    let mut m = AddressSpace::new();
    let base = 0x7f00_0000_0000;
    mmap(&mut m, base, 10 * PAGE, A);
    munmap(&mut m, base + 2 * PAGE, 3 * PAGE, F); // a hole in the middle
    munmap(&mut m, base, PAGE, F); // the head
    munmap(&mut m, base + 9 * PAGE, 100, F); // the tail, length rounded up
    let a = stats(&m, A);
    assert_eq!((a.mapped, a.unmapped, a.still_mapped), (10 * PAGE, 5 * PAGE, 5 * PAGE));
    assert_eq!(m.still_mapped_in(base, base + 10 * PAGE), BTreeMap::from([(A, 5 * PAGE)]));
    assert_eq!(m.still_mapped_in(base + 5 * PAGE, base + 6 * PAGE), BTreeMap::from([(A, PAGE)]));
    assert_eq!(m.still_mapped_in(base + 2 * PAGE, base + 5 * PAGE), BTreeMap::new());
    // Unmapping what the model never held changes nothing but the caller's count.
    munmap(&mut m, 0x1000, PAGE, F);
    assert_eq!(stats(&m, A), a);
    balanced(&m);
}

#[test]
fn mremap_growth_goes_to_the_mremap_stack_and_a_move_carries_ranges() {
    let mut m = AddressSpace::new();
    let old = 0x7f00_0000_0000;
    mmap(&mut m, old, 4 * PAGE, A);
    // Grow in place from 4 to 6 pages: 4 stay A's, 2 are B's.
    mremap(&mut m, old, 4 * PAGE, 6 * PAGE, 0, old, B);
    assert_eq!(m.still_mapped_in(old, old + 6 * PAGE), BTreeMap::from([(A, 4 * PAGE), (B, 2 * PAGE)]));
    // Move and grow to 8 pages at a new address: everything travels, the 2 new pages are B's again.
    let new = 0x7f10_0000_0000;
    mremap(&mut m, old, 6 * PAGE, 8 * PAGE, 1, new, B);
    assert_eq!(m.still_mapped_in(old, old + 8 * PAGE), BTreeMap::new());
    assert_eq!(m.still_mapped_in(new, new + 8 * PAGE), BTreeMap::from([(A, 4 * PAGE), (B, 4 * PAGE)]));
    // Shrink to 3 pages: the tail (B's 4 and one of A's) is unmapped.
    mremap(&mut m, new, 8 * PAGE, 3 * PAGE, 0, new, F);
    let (a, b) = (stats(&m, A), stats(&m, B));
    assert_eq!((a.mapped, a.unmapped, a.still_mapped), (4 * PAGE, PAGE, 3 * PAGE));
    assert_eq!((b.mapped, b.unmapped, b.still_mapped, b.mremaps), (4 * PAGE, 4 * PAGE, 0, 2));
    assert_eq!(stats(&m, F).mremaps, 1);
    // A move onto a range the model held (MREMAP_FIXED) replaces it.
    let fixed = 0x7f20_0000_0000;
    mmap(&mut m, fixed, 3 * PAGE, F);
    mremap(&mut m, new, 3 * PAGE, 3 * PAGE, 3, fixed, B);
    assert_eq!(m.still_mapped_in(fixed, fixed + 3 * PAGE), BTreeMap::from([(A, 3 * PAGE)]));
    assert_eq!(stats(&m, F).unmapped, 3 * PAGE);
    balanced(&m);
}

#[test]
fn mremap_dontunmap_leaves_the_old_range() {
    let mut m = AddressSpace::new();
    mmap(&mut m, 0x10000, 2 * PAGE, A);
    mremap(&mut m, 0x10000, 2 * PAGE, 2 * PAGE, 1 | MREMAP_DONTUNMAP, 0x40000, B);
    assert_eq!(m.still_mapped_in(0x10000, 0x12000), BTreeMap::from([(A, 2 * PAGE)]));
    assert_eq!(m.still_mapped_in(0x40000, 0x42000), BTreeMap::from([(B, 2 * PAGE)]));
    balanced(&m);
}

#[test]
fn map_fixed_over_a_range_replaces_it() {
    let mut m = AddressSpace::new();
    mmap(&mut m, 0x100000, 8 * PAGE, A);
    m.apply_call(SYS_MMAP, &[0x102000, 2 * PAGE, 3, ANON | 0x10, u64::MAX, 0], Some(0x102000), B);
    assert_eq!(m.still_mapped_in(0x100000, 0x108000), BTreeMap::from([(A, 6 * PAGE), (B, 2 * PAGE)]));
    assert_eq!(stats(&m, A).unmapped, 2 * PAGE);
    balanced(&m);
}

#[test]
fn failed_and_foreign_calls() {
    let mut m = AddressSpace::new();
    m.apply_call(SYS_MMAP, &[0, PAGE, 3, ANON, 0, 0], Some(-12i64 as u64), A);
    m.apply_call(SYS_MMAP, &[0, PAGE, 3, ANON, 0, 0], None, A);
    m.apply_call(39, &[0; 6], Some(5), A);
    // A length that would wrap the address space is ignored, never a panic.
    m.apply_call(SYS_MMAP, &[0, u64::MAX, 3, ANON, 0, 0], Some(0x1000), A);
    m.apply_call(SYS_MUNMAP, &[u64::MAX - 10, u64::MAX, 0, 0, 0, 0], Some(0), A);
    m.apply_call(SYS_MREMAP, &[u64::MAX - PAGE, 2 * PAGE, u64::MAX, 1, 0, 0], Some(u64::MAX - PAGE * 8), A);
    let a = stats(&m, A);
    assert_eq!((a.failed, a.mmaps, a.still_mapped), (2, 1, 0));
    balanced(&m);
}

fn smaps(text: &str) -> Vec<Span> {
    parse_smaps(text).iter().map(Span::of).collect()
}

/// Shared anonymous memory (Python's `mmap.mmap(-1, n)`, multiprocessing's arrays) is a shmem file to the kernel:
/// smaps shows it as `/dev/zero (deleted)`, and a sample holds it as mapped (it was taken for gone).
#[test]
fn shared_anonymous_memory_survives_a_sample() {
    let mut m = AddressSpace::new();
    m.apply_call(SYS_MMAP, &[0, 4 * PAGE, 3, MAP_ANONYMOUS | 0x1, u64::MAX, 0], Some(0x100000), A);
    mmap(&mut m, 0x200000, 4 * PAGE, B);
    m.reconcile(&smaps(
        "100000-104000 rw-s 0 00:01 7 /dev/zero (deleted)
200000-204000 rw-p 0 00:00 0
",
    ));
    let (a, b) = (stats(&m, A), stats(&m, B));
    assert_eq!((a.still_mapped, a.vanished), (4 * PAGE, 0));
    assert_eq!((b.still_mapped, b.vanished), (4 * PAGE, 0));
    balanced(&m);
}

#[test]
fn reconcile_drops_what_smaps_no_longer_shows() {
    let mut m = AddressSpace::new();
    mmap(&mut m, 0x100000, 8 * PAGE, A);
    mmap(&mut m, 0x200000, 4 * PAGE, B);
    mmap(&mut m, 0x300000, 4 * PAGE, B);
    // An unseen munmap took 0x102000-0x104000; 0x200000.. went entirely; an unseen MAP_FIXED put a file over
    // 0x300000-0x301000.
    m.reconcile(&smaps(
        "100000-102000 rw-p 0 00:00 0\n104000-108000 rw-p 0 00:00 0\n\
         300000-301000 r--p 0 fe:01 9 /usr/lib/x.so\n301000-304000 rw-p 0 00:00 0\n",
    ));
    let (a, b) = (stats(&m, A), stats(&m, B));
    assert_eq!((a.still_mapped, a.vanished, a.unmapped), (6 * PAGE, 2 * PAGE, 0));
    assert_eq!((b.still_mapped, b.vanished), (3 * PAGE, 5 * PAGE));
    assert_eq!(m.still_mapped_in(0x100000, 0x108000), BTreeMap::from([(A, 6 * PAGE)]));
    balanced(&m);
    // Reconciling again with the same sample changes nothing.
    let before = m.stacks();
    m.reconcile(&smaps("100000-102000 rw-p 0 00:00 0\n104000-108000 rw-p 0 00:00 0\n301000-304000 rw-p 0 00:00 0\n"));
    assert_eq!(m.stacks(), before);
}

#[test]
fn growing_regions_matched_to_stacks() {
    let mut m = AddressSpace::new();
    // A made two mappings that the kernel merged into one region; B one elsewhere that did not grow.
    mmap(&mut m, 0x7f0000100000, 16 * PAGE, A);
    mmap(&mut m, 0x7f00000f0000, 16 * PAGE, A);
    mmap(&mut m, 0x7f0000500000, 4 * PAGE, B);
    let before = smaps(
        "7f0000000000-7f0000010000 rw-p 0 00:00 0\nRss: 8 kB\n\
         7f0000100000-7f0000110000 rw-p 0 00:00 0\nRss: 4 kB\n\
         7f0000500000-7f0000504000 rw-p 0 00:00 0\nRss: 16 kB\n",
    );
    let after = smaps(
        "7f0000000000-7f0000010000 rw-p 0 00:00 0\nRss: 40 kB\n\
         7f00000f0000-7f0000110000 rw-p 0 00:00 0\nRss: 100 kB\nSwap: 8 kB\n\
         7f0000500000-7f0000504000 rw-p 0 00:00 0\nRss: 16 kB\n\
         7f0000600000-7f0000700000 r--p 0 fe:01 9 /usr/lib/big.so\nRss: 900 kB\n",
    );
    let g = m.growing(&before, &after);
    assert_eq!(g.len(), 2, "{g:#?}");
    assert_eq!((g[0].start, g[0].growth_kb, g[0].rss_swap_kb, g[0].new), (0x7f00000f0000, 104, 108, false));
    assert_eq!(g[0].stacks, [RegionStack { stack: A, calls: 2, still_mapped: 32 * PAGE }]);
    assert!(!g[0].created_before_trace());
    assert_eq!((g[1].start, g[1].growth_kb), (0x7f0000000000, 32));
    assert!(g[1].created_before_trace(), "grew, but no traced call made it");
    // A region absent from the first sample is new, and not "made before the trace".
    let g = m.growing(&[], &after);
    assert!(g.iter().all(|x| x.new && !x.created_before_trace()));
}

/// Random calls over a small window, against a page-by-page reference of the same rules.
#[test]
fn matches_a_page_by_page_reference() {
    const PAGES: u64 = 64;
    let base = 0x4000_0000;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _round in 0..50 {
        let mut m = AddressSpace::new();
        let mut pages: Vec<Option<StackId>> = vec![None; PAGES as usize * 2];
        for _ in 0..40 {
            let stack = StackId(rnd(4) as u32);
            let at = rnd(PAGES);
            let len = 1 + rnd(PAGES - at);
            let addr = base + at * PAGE;
            match rnd(3) {
                0 => {
                    mmap(&mut m, addr, len * PAGE, stack);
                    (at..at + len).for_each(|p| pages[p as usize] = Some(stack));
                }
                1 => {
                    munmap(&mut m, addr, len * PAGE - rnd(PAGE), stack);
                    (at..at + len).for_each(|p| pages[p as usize] = None);
                }
                _ => {
                    let new_len = 1 + rnd(PAGES - 1);
                    let to = rnd(PAGES * 2 - new_len);
                    let keep = len.min(new_len);
                    let moved: Vec<_> = (at..at + keep).map(|p| pages[p as usize]).collect();
                    (at..at + len).for_each(|p| pages[p as usize] = None);
                    (to..to + new_len).for_each(|p| pages[p as usize] = None);
                    for (i, v) in moved.into_iter().enumerate() {
                        pages[(to + i as u64) as usize] = v;
                    }
                    (to + keep..to + new_len).for_each(|p| pages[p as usize] = Some(stack));
                    mremap(&mut m, addr, len * PAGE, new_len * PAGE, 3, base + to * PAGE, stack);
                }
            }
            for (i, want) in pages.iter().enumerate() {
                let a = base + i as u64 * PAGE;
                let got: Vec<StackId> = m.still_mapped_in(a, a + PAGE).into_keys().collect();
                assert_eq!(got, want.iter().copied().collect::<Vec<_>>(), "page {i}");
            }
            balanced(&m);
        }
    }
}

#[test]
fn applies_events() {
    let ev = Event {
        time: 0.0,
        tid: 1,
        probe: None,
        func: None,
        nr: SYS_MMAP,
        args: [0, 3 * PAGE, 3, ANON, u64::MAX, 0],
        regs: Vec::new(),
        ret: Some(0x5000_0000),
        ret_missing: None,
        capture: None,
        also: Vec::new(),
    };
    let mut m = AddressSpace::new();
    m.apply(&ev, A);
    assert_eq!(stats(&m, A).still_mapped, 3 * PAGE);
}

/// A model rebuilt from another's changes, taken now and then among random calls and samples, is that model
/// at each of those moments, whatever the numbering of its stacks; in a window, its figures are those of
/// the calls from then on.
#[test]
fn a_model_rebuilt_from_its_changes_is_the_same() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut live, mut copy, mut windowed) = (AddressSpace::new(), AddressSpace::new(), AddressSpace::new());
    let mut written = live.clone();
    // The copy numbers stack n as 10 + n.
    let mut ids = |n: u32| StackId(10 + n);
    let mmaps = |m: &AddressSpace| -> u64 { m.stacks().iter().map(|(_, s)| s.mmaps).sum() };
    let mut before_window = 0;
    for step in 0..4000u64 {
        let (addr, len, stack) = (0x10_0000 + next(64) * PAGE, (1 + next(8)) * PAGE, StackId(next(5) as u32));
        live.at(step as f64);
        match next(10) {
            0..=4 => live.apply_call(SYS_MMAP, &[0, len, 3, MAP_ANONYMOUS | 2, 0, 0], Some(addr), stack),
            5..=6 => live.apply_call(SYS_MUNMAP, &[addr, len, 0, 0, 0, 0], Some(0), stack),
            7 => live.apply_call(SYS_MADVISE, &[addr, len, 4, 0, 0, 0], Some(0), stack),
            8 => live.apply_call(SYS_MREMAP, &[addr, len, 2 * len, 1, 0, 0], Some(addr + 0x40_0000), stack),
            _ => {
                let end = 0x10_0000 + next(80) * PAGE;
                let text = format!("100000-{end:x} rw-p 0 00:00 0\nRss: 4 kB\n");
                live.reconcile(&smaps(&text));
            }
        }
        if step % 97 == 0 {
            let c = live.changes_since(&written);
            written = live.clone();
            copy.apply_changes(&c, &mut ids);
            windowed.apply_changes(&c, &mut ids);
            let renumbered: Vec<(StackId, StackStats)> =
                copy.stacks().into_iter().map(|(id, s)| (StackId(id.0 - 10), s)).collect();
            assert_eq!(renumbered, live.stacks(), "at step {step}");
            let pieces = |m: &AddressSpace| -> Vec<(u64, u64, u32, bool)> {
                m.pieces.iter().map(|(&s, p)| (s, p.end, p.stack.0 % 10, p.returned)).collect()
            };
            assert_eq!(pieces(&copy), pieces(&live), "at step {step}");
            let returned = |m: &AddressSpace| -> Vec<(u64, u32, u64)> {
                m.returned.iter().map(|(&(a, s), &n)| (a, s.0 % 10, n)).collect()
            };
            assert_eq!(returned(&copy), returned(&live), "at step {step}");
        }
        if step == 2000 {
            let c = live.changes_since(&written);
            written = live.clone();
            copy.apply_changes(&c, &mut ids);
            windowed.apply_changes(&c, &mut ids);
            // From here the windowed copy counts only what is mapped after.
            windowed.rebase(step as f64);
            before_window = mmaps(&live);
            assert!(before_window > 0 && windowed.stacks().iter().all(|(_, s)| s.mapped == 0));
        }
    }
    let c = live.changes_since(&written);
    windowed.apply_changes(&c, &mut ids);
    assert_eq!(mmaps(&windowed), mmaps(&live) - before_window);
}

/// The heap's end moving: the pages sbrk added are its stack's, those given back are unmapped, wherever the
/// break sits inside a page; `sbrk(0)` moves nothing; the brk syscall moves it from the last break known.
#[test]
fn the_heap_grows_and_shrinks_with_the_break() {
    let mut m = AddressSpace::new();
    let heap = 0x5555_0000_0000u64;
    m.apply_sbrk(0, Some(heap + 0x800), F);
    m.apply_sbrk(0x21000, Some(heap + 0x800), A);
    m.apply_sbrk(0x1000, Some(heap + 0x21800), A);
    assert_eq!(stats(&m, A).still_mapped, 0x22000, "pages up to the one holding the break");
    assert_eq!((stats(&m, A).brks, stats(&m, A).mapped), (2, 0x22000));
    m.apply_sbrk((-0x11000i64) as u64, Some(heap + 0x22800), B);
    assert_eq!(stats(&m, A).still_mapped, 0x11000);
    assert_eq!((stats(&m, B).released, stats(&m, A).unmapped), (0x11000, 0x11000));
    assert_eq!(stats(&m, F), StackStats::default(), "sbrk(0) asks, it does not move");
    m.apply_sbrk(0x1000, Some(u64::MAX), A);
    assert_eq!(stats(&m, A).failed, 1);
    m.apply_call(SYS_BRK, &[heap + 0x20000, 0, 0, 0, 0, 0], Some(heap + 0x20000), B);
    assert_eq!(stats(&m, B).mapped, 0x20000 - 0x12000);
    balanced(&m);
}

/// A thread heap: reserved with no access (nobody's memory), then committed a part at a time by mprotect,
/// each part the committing stack's; a reservation the model did not see is learnt from a sample's `---p`
/// region; other protection changes leave the model alone.
#[test]
fn commits_into_reserved_space_are_the_committing_stacks() {
    let mut m = AddressSpace::new();
    let heap = 0x7f00_0000_0000u64;
    m.apply_call(SYS_MMAP, &[0, 64 << 20, 0, MAP_ANONYMOUS | 2, 0, 0], Some(heap), F);
    assert_eq!((stats(&m, F).mmaps, stats(&m, F).mapped, stats(&m, F).still_mapped), (1, 0, 0));
    m.apply_call(SYS_MPROTECT, &[heap, 0x21000, 3, 0, 0, 0], Some(0), A);
    m.apply_call(SYS_MPROTECT, &[heap + 0x21000, 0x1000, 3, 0, 0, 0], Some(0), B);
    m.apply_call(SYS_MPROTECT, &[heap + 0x21000, 0x1000, 1, 0, 0, 0], Some(0), B);
    assert_eq!((stats(&m, A).commits, stats(&m, A).still_mapped), (1, 0x21000));
    assert_eq!((stats(&m, B).commits, stats(&m, B).still_mapped), (1, 0x1000), "read-only again: no commit");
    m.apply_call(SYS_MPROTECT, &[heap + 0x21000, 0x1000, 0, 0, 0, 0], Some(0), B);
    assert_eq!(stats(&m, B).still_mapped, 0x1000, "made inaccessible, its pages stay");
    // Unknown address space: nothing to commit.
    m.apply_call(SYS_MPROTECT, &[0x1000_0000, 0x1000, 3, 0, 0, 0], Some(0), B);
    assert_eq!(stats(&m, B).commits, 1);
    // A heap reserved before the trace, seen in a sample.
    let other = 0x7e00_0000_0000u64;
    let region = |start: u64, end: u64, perms: &str| format!("{start:x}-{end:x} {perms} 0 00:00 0\nRss: 0 kB\n");
    let text = [
        region(other, other + (64 << 20), "---p"),
        region(heap, heap + 0x22000, "rw-p"),
        region(heap + 0x22000, heap + (64 << 20), "---p"),
    ];
    let spans = smaps(&text.concat());
    assert_eq!(spans.iter().map(|s| s.reserved).collect::<Vec<_>>(), [true, false, true]);
    m.reconcile(&spans);
    assert_eq!(stats(&m, A).vanished, 0);
    m.apply_call(SYS_MPROTECT, &[other, 0x4000, 3, 0, 0, 0], Some(0), A);
    assert_eq!(stats(&m, A).still_mapped, 0x25000);
    // A munmap of the whole heap returns what was committed and forgets the reservation.
    m.apply_call(SYS_MUNMAP, &[heap, 64 << 20, 0, 0, 0, 0], Some(0), F);
    assert_eq!((stats(&m, A).unmapped, stats(&m, B).unmapped), (0x21000, 0x1000));
    balanced(&m);
}

/// Pages given back by madvise are no one's: the stacks that mapped them hold less, the mapping stays, and
/// advice that keeps the pages counted changes nothing.
#[test]
fn madvise_dontneed_gives_pages_back() {
    let mut m = AddressSpace::new();
    mmap(&mut m, 0x10000, 0x10000, A);
    m.apply_call(SYS_MADVISE, &[0x12000, 0x2000, 4, 0, 0, 0], Some(0), B);
    m.apply_call(SYS_MADVISE, &[0x14000, 0x2000, 8, 0, 0, 0], Some(0), B);
    m.apply_call(SYS_MADVISE, &[0x16000, 0x2000, 14, 0, 0, 0], Some(0), B);
    assert_eq!((stats(&m, A).still_mapped, stats(&m, A).unmapped), (0xe000, 0x2000));
    assert_eq!((stats(&m, B).returns, stats(&m, B).released), (1, 0x2000));
    // Reserved space stays reserved.
    m.apply_call(SYS_MMAP, &[0, 0x4000, 0, MAP_ANONYMOUS | 2, 0, 0], Some(0x40000), F);
    m.apply_call(SYS_MADVISE, &[0x40000, 0x4000, 4, 0, 0, 0], Some(0), B);
    m.apply_call(SYS_MPROTECT, &[0x40000, 0x1000, 3, 0, 0, 0], Some(0), B);
    assert_eq!(stats(&m, B).still_mapped, 0x1000);
    balanced(&m);
}
