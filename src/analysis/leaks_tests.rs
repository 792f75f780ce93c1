//! Tests of the leak tracker: calls counted once, residency, ranking growth above churn, windows.
use super::*;

fn frame(addr: u64, name: &str) -> Frame {
    Frame { addr, function: Some(name.into()), module: Some("prog".into()), ..Frame::default() }
}

fn ev(nr: u64, args: [u64; 6], ret: u64) -> Event {
    Event {
        time: 0.0,
        tid: 1,
        probe: None,
        func: None,
        nr,
        args,
        regs: Vec::new(),
        ret: Some(ret),
        ret_missing: None,
        capture: None,
        also: Vec::new(),
    }
}

fn region(start: u64, end: u64, rss_kb: u64) -> Span {
    Span { start, end, anon: true, rss_swap: rss_kb, reserved: false }
}

#[test]
fn a_call_seen_at_libc_mmap_and_at_the_syscall_inside_it_counts_once() {
    let s = Stack { frames: vec![frame(0x10, "pool_grow")], truncated: None };
    let mut t = LeakTracker::default();
    let args = [0, 0x2000, 3, 0x22, u64::MAX, 0];
    // A hook reached from libc's mmap makes the real call through syscall(): the raw event comes first (it
    // completes first) but started after the function's entry.
    let mut raw = ev(9, args, 0x1000_0000);
    raw.time = 1.5;
    let mut func = ev(0, args, 0x1000_0000);
    func.func = Some("libc.so.6:mmap".into());
    func.time = 1.0;
    t.event(&raw, Some(&s));
    t.event(&func, Some(&s));
    assert_eq!(t.nested, 1);
    // A later, separate call at libc's mmap that happens to get the same address back counts.
    let mut again = func.clone();
    again.time = 2.0;
    t.event(&raw, Some(&s));
    t.event(&again, Some(&s));
    assert_eq!(t.nested, 1);
    // libc's munmap returns 0 like the raw munmap before it: different ranges are different calls.
    let mut un = ev(11, [0x3000_0000, 0x1000, 0, 0, 0, 0], 0);
    un.time = 3.0;
    let mut fun = ev(0, [0x4000_0000, 0x1000, 0, 0, 0, 0], 0);
    fun.func = Some("libc.so.6:munmap".into());
    fun.time = 2.9;
    t.event(&un, Some(&s));
    t.event(&fun, Some(&s));
    assert_eq!(t.nested, 1);
    let stats = t.report().leaks[0].stats.clone();
    assert_eq!((stats.mmaps, stats.munmaps), (3, 2));
}

/// What the event stream of `--syscall` drops: a libc function's call whose `syscall()` inside it was just
/// seen on the same thread; the same call on another thread, or with another result, is another call.
#[test]
fn a_call_seen_at_a_function_and_at_its_syscall_is_one_call() {
    let mut seen = SeenTwice::default();
    let args = [0, 0x2000, 3, 0x22, u64::MAX, 0];
    let mut raw = ev(9, args, 0x1000_0000);
    raw.time = 1.5;
    let mut func = ev(0, args, 0x1000_0000);
    func.func = Some("libc.so.6:mmap".into());
    func.time = 1.0;
    assert!(!seen.is_repeat(&raw));
    assert!(seen.is_repeat(&func));
    // Only once: the function's next call is a call of its own.
    assert!(!seen.is_repeat(&func));
    let mut other_thread = raw.clone();
    other_thread.tid = 2;
    assert!(!seen.is_repeat(&other_thread) && !seen.is_repeat(&func));
    let mut other_ret = func.clone();
    other_ret.ret = Some(0x2000_0000);
    assert!(!seen.is_repeat(&raw) && !seen.is_repeat(&other_ret));
    // A probe on another function never counts as a repeat.
    let mut malloc = func.clone();
    malloc.func = Some("libc.so.6:malloc".into());
    assert!(!seen.is_repeat(&raw) && !seen.is_repeat(&malloc));
}

#[test]
fn residency_counts_own_pages_and_swap_not_the_zero_page() {
    let present_own = PM_PRESENT | PM_EXCLUSIVE | 0x1234;
    let zero_page = PM_PRESENT;
    let swapped = PM_SWAPPED | 0x55;
    assert_eq!(parse_resident(&[present_own, zero_page, swapped, 0]), 2 * 4096);
    let mut t = LeakTracker::default();
    let s = Stack { frames: vec![frame(0x10, "grow")], truncated: None };
    t.sample(None, vec![region(0x7000_0000, 0x7000_1000, 4)]);
    t.event(&ev(9, [0, 0x3000, 3, 0x22, u64::MAX, 0], 0x1000_0000), Some(&s));
    // syscatch's own pages (0x2000_0000: grew more, so listed first) are left out of the report.
    let own = region(0x2000_0000, 0x2001_0000, 64);
    t.sample(None, vec![region(0x1000_0000, 0x1000_3000, 12), own, region(0x7000_0000, 0x7000_1000, 4)]);
    assert_eq!(t.traced_ranges(), [(0x1000_0000, 0x1000_3000)]);
    t.weigh_residency(&mut |start, end, _| {
        assert_eq!((start, end), (0x1000_0000, 0x1000_3000));
        let entries = [present_own, zero_page, present_own];
        Some((entries.len() as u64, parse_resident(&entries)))
    });
    let mut r = t.report();
    assert_eq!(r.growing[0].start, 0x2000_0000);
    r.leave_out(&[(0x2000_0000, 0x2001_0000)]);
    assert_eq!(r.resident_of(r.leaks[0].id), 2 * 4096);
    assert_eq!((r.growing.len(), r.series.regions.len()), (1, 1));
    assert_eq!(r.region_split(0), (8, 4));
}

#[test]
fn ranks_growth_above_churn_and_folds_it() {
    let stack = |name: &str, addr: u64| Stack {
        frames: vec![frame(0x10, "syscall"), frame(addr, name), frame(0x30, "main")],
        truncated: None,
    };
    let (leak, churn, burst) = (stack("pool_grow", 0x20), stack("arena_new", 0x40), stack("burst", 0x50));
    let mut t = LeakTracker::default();
    t.sample(Some(0.0), vec![region(0x7000_0000, 0x7000_1000, 4)]);
    let at = |nr, args, ret, time: f64| Event { time, ..ev(nr, args, ret) };
    // Over 20 s: the pool maps 8 KiB a second and keeps it; the arenas map and free 64 KiB twice a second,
    // and hold one at the end; a burst of 1 MiB mapped at 18 s is still held at the end.
    let mut regions = vec![region(0x7000_0000, 0x7000_1000, 4)];
    for s in 0..20u64 {
        let time = s as f64 + 0.5;
        t.event(&at(9, [0, 0x2000, 3, 0x22, u64::MAX, 0], 0x1000_0000 + s * 0x2000, time), Some(&leak));
        for k in 0..2 {
            let a = 0x2000_0000 + (2 * s + k) * 0x10000;
            t.event(&at(9, [0, 0x10000, 3, 0x22, u64::MAX, 0], a, time), Some(&churn));
            if s < 19 || k == 0 {
                t.event(&at(11, [a, 0x10000, 0, 0, 0, 0], 0, time + 0.1), Some(&churn));
            }
        }
        if s == 18 {
            t.event(&at(9, [0, 0x10_0000, 3, 0x22, u64::MAX, 0], 0x3000_0000, time), Some(&burst));
            regions.push(region(0x3000_0000, 0x3010_0000, 1024));
        }
        let mut now = vec![region(0x1000_0000, 0x1000_0000 + (s + 1) * 0x2000, (s + 1) * 8)];
        now.extend(regions.iter().copied());
        if s == 19 {
            now.push(region(0x2000_0000 + 39 * 0x10000, 0x2000_0000 + 40 * 0x10000, 64));
        }
        now.sort_by_key(|r| r.start);
        t.sample(Some(s as f64 + 1.0), now);
    }
    let r = t.report();
    assert_eq!((r.window.from, r.window.to), (0.0, 20.0));
    let name = |c: &Candidate| r.stack(c.id).unwrap().frames[1].function.clone().unwrap();
    let got: Vec<(String, u64, Verdict)> = r.leaks.iter().map(|c| (name(c), c.growth, c.verdict)).collect();
    // The pool mapped 10 times 8 KiB in the middle half (5 s to 15 s); the arenas hold only what they mapped
    // last; the burst is held, not grown.
    assert_eq!(
        got,
        [
            ("pool_grow".into(), 10 * 0x2000, Verdict::Growth),
            ("burst".into(), 0, Verdict::Held),
            ("arena_new".into(), 0, Verdict::WorkingSet),
        ]
    );
    assert!((r.window.per_min(r.leaks[0].growth) - 10.0 * 8192.0 * 6.0).abs() < 1e-6);
    assert_eq!(r.folded(Weight::Growth), [format!("main;pool_grow;syscall {}", 10 * 0x2000)]);
    // Still mapped: the pool's 20 pages, the burst's MiB, the arenas' last 64 KiB.
    let mut held = r.folded(Weight::StillMapped);
    held.sort();
    assert_eq!(held, ["main;arena_new;syscall 65536", "main;burst;syscall 1048576", "main;pool_grow;syscall 163840"]);
    // The pool's region grew 8 kB a second: 80 kB lasting in the middle half; the burst's none.
    let lasting: Vec<(u64, Option<u64>)> = r.growing.iter().map(|g| (g.start, g.lasting_kb)).collect();
    assert_eq!(lasting[0], (0x1000_0000, Some(80)));
    assert!(lasting.contains(&(0x3000_0000, Some(0))), "{lasting:?}");
    // The series: one point per sample, the pool's bytes rising by 8 KiB each.
    assert_eq!(r.series.times.len(), 21);
    let pool = &r.series.stacks.iter().find(|(id, _)| *id == r.leaks[0].id).unwrap().1;
    assert_eq!(pool[..3], [0, 0x2000, 0x4000]);
    assert_eq!(r.series.regions[0][..3], [0, 8, 16]);
    let mut text = Vec::new();
    r.write_text(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    // (The interval: one 8 KiB step over the 19 s between the first floor and the last.)
    assert!(text.contains("#1 grows 0.47 MiB/min (99%: 0.44 to 0.49); holds 160 KiB"), "{text}");
    assert!(text.contains("working set, not growth"), "{text}");
    // The rates: the pool's 8 KiB a second exactly; the burst held at the end is no rate; all the anonymous
    // memory grows as the pool does, the arenas' churn and the burst aside.
    let rate = |c: &Candidate| c.rate.unwrap().per_sec;
    assert_eq!((rate(&r.leaks[0]), rate(&r.leaks[1])), (8192.0, 0.0));
    assert_eq!(r.rate.unwrap().per_sec, 8192.0, "{:?}", r.rate);
    let mut svg = Vec::new();
    r.flamegraph(&mut svg, Weight::StillMapped).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("pool_grow") && svg.trim_end().ends_with("</svg>"));
}

#[test]
fn a_window_reports_only_its_part() {
    let s = Stack { frames: vec![frame(0x20, "grow")], truncated: None };
    // A stack that maps 4 KiB a second, only from 10 s on; the window 10-20 s sees all its growth, the window
    // 0-10 s none; what was mapped before a window is not the window's.
    let run = |from: f64, to: Option<f64>| {
        let mut t = LeakTracker::window(from, to);
        t.sample(Some(0.0), vec![region(0x7000_0000, 0x7000_1000, 4)]);
        for k in 0..20u64 {
            if k >= 10 {
                let e = Event {
                    time: k as f64 + 0.5,
                    ..ev(9, [0, 0x1000, 3, 0x22, u64::MAX, 0], 0x1000_0000 + k * 0x1000)
                };
                t.event(&e, Some(&s));
            }
            let n = k.saturating_sub(9);
            let mut now = vec![region(0x7000_0000, 0x7000_1000, 4)];
            if n > 0 {
                now.insert(0, region(0x1000_a000, 0x1000_a000 + n * 0x1000, n * 4));
            }
            t.sample(Some(k as f64 + 1.0), now);
        }
        let r = t.report();
        let got = r.leaks.first().map(|c| (c.growth, c.stats.mmaps, c.stats.still_mapped));
        (r.window, got)
    };
    let (w, late) = run(10.0, Some(20.0));
    assert_eq!((w.from, w.to), (10.0, 20.0));
    // Mapped in the second quarter (12.5-15 s): 12.5, 13.5, 14.5; in the third: 15.5, 16.5.
    assert_eq!(late, Some((4 * 0x1000, 10, 10 * 0x1000)));
    let (_, early) = run(0.0, Some(10.0));
    assert_eq!(early, None);
    // From 15 s: the calls before are not counted, nor their memory.
    let (_, tail) = run(15.0, None);
    assert_eq!(tail.map(|t| (t.1, t.2)), Some((5, 5 * 0x1000)));
}
