//! `--leaks`: which stack made the memory that grew, and how much of it is still mapped, exactly.

use crate::common::*;
use serde_json::Value;

const PAGE: u64 = 4096;

/// Function names of a leak line's stack, innermost first.
fn names(leak: &Value) -> Vec<String> {
    leak["stack"]
        .as_array()
        .map(|fs| fs.iter().filter_map(|f| f["function"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn has(leak: &Value, func: &str) -> bool {
    names(leak).iter().any(|n| n == func || n.starts_with(&format!("{func}.")))
}

#[test]
fn leak_report_attributes_still_mapped_bytes_to_the_stack_that_mapped_them() {
    require_ptrace();
    leak_report_round(Target::start(&testprog("leaker"), &[]), "--fast", "");
}

/// The same with breakpoints only: libc's mapping functions and `syscall()` each stop.
#[test]
fn leak_report_attributes_still_mapped_bytes_with_breakpoints_only() {
    require_ptrace();
    leak_report_round(Target::start(&testprog("leaker"), &[]), "--no-fast", "");
}

/// A statically linked program (glibc's libc inside it, no libc mapped): its own `syscall()` and memory functions
/// are found in its symbols, with and without `--fast`.
#[test]
fn leak_report_on_a_static_binary() {
    require_ptrace();
    let prog = testprog_with("leaker", &["-static"]);
    for mode in ["--fast", "--no-fast"] {
        leak_report_round(Target::start(&prog, &[]), mode, "-static");
    }
}

/// On glibc 2.41 and 2.43 (Debian trixie's and sid's roots, traced from the host): their `syscall()` and their
/// own mmap and munmap (patched by `--fast` where their shape allows), unwound through their CFI, named from their
/// debug files.
#[test]
fn leak_report_on_glibc_2_41_and_2_43_with_and_without_fast() {
    require_ptrace();
    for (root, glibc) in [(crate::roots::trixie(), "-2.41"), (crate::roots::sid(), "-2.43")] {
        for mode in ["--fast", "--no-fast"] {
            leak_report_round(crate::roots::start_in(&root, &testprog("leaker"), &[]), mode, glibc);
        }
    }
}

fn leak_report_round(mut t: Target, mode: &str, name: &str) {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let folded = dir.join(format!("leaker{mode}{name}.folded"));
    let svg = dir.join(format!("leaker{mode}{name}.svg"));
    let (folded_arg, svg_arg) = (folded.to_str().unwrap(), svg.to_str().unwrap());
    let args = ["--leaks", mode, "--json", "--smaps-every", "100ms", "--folded", folded_arg, "--flamegraph", svg_arg];
    let (leaked, values, err) = leaker_run(&mut t, &[&args[..], &["--weight", "still-mapped"]].concat());
    let trampoline = err.iter().any(|l| l.contains("left its trampoline page mapped"));
    assert_eq!(trampoline, mode == "--fast", "{err:#?}");
    let leaks: Vec<&Value> = values.iter().filter(|v| v["type"] == "leak").map(|v| &v["data"]).collect();
    assert!(!leaks.is_empty(), "{values:#?}");

    // The leaking call site holds exactly what it kept. (The calls come at one moment: whether that is growth
    // depends on when in the trace it is, see `growth_is_told_from_churn_in_any_window`.)
    let leak = *leaks.iter().find(|l| has(l, "leak_site")).expect("leak_site");
    assert_eq!(leak["still_mapped"], leaked);
    assert_eq!(leak["mapped"], leaked);
    assert_eq!(leak["mmaps"], 5);
    assert!(leak["growth"].as_u64().unwrap() <= leaked && leak["verdict"].is_string(), "{leak}");
    // The tidy one mapped as much and holds nothing: not a leak candidate.
    assert!(!leaks.iter().any(|l| has(l, "tidy_site") && l["mmaps"] == 5), "{leaks:#?}");
    // A partial munmap: 6 pages mapped, the middle 2 unmapped.
    let part = leaks.iter().find(|l| has(l, "partial_site") && l["mmaps"] == 1).expect("partial_site's mmap");
    assert_eq!((part["mapped"].as_u64(), part["still_mapped"].as_u64()), (Some(6 * PAGE), Some(4 * PAGE)));
    // mremap growth and move: the first 2 pages keep their creating stack, the 6 new ones are the mremap's.
    let grow_mmaps: Vec<&&Value> = leaks.iter().filter(|l| has(l, "grow_site") && l["mmaps"] == 1).collect();
    let held: Vec<(u64, u64)> =
        grow_mmaps.iter().map(|l| (l["mapped"].as_u64().unwrap(), l["still_mapped"].as_u64().unwrap())).collect();
    // (The neighbour page that forces the move may fail with EEXIST where the previous mapping already is.)
    assert!(held.contains(&(2 * PAGE, 2 * PAGE)), "{mode} {name}: {held:?} {leaks:#?} {err:#?}");
    let mremap = leaks.iter().find(|l| l["mremaps"] == 1).expect("the mremap");
    assert_eq!((mremap["mapped"].as_u64(), mremap["still_mapped"].as_u64()), (Some(6 * PAGE), Some(6 * PAGE)));

    // A growing region names the leaking stack.
    let leak_id = &leak["stack_id"];
    let regions: Vec<&Value> = values.iter().filter(|v| v["type"] == "region").map(|v| &v["data"]).collect();
    assert!(
        regions.iter().any(|r| r["stacks"].as_array().unwrap().iter().any(|s| &s["stack_id"] == leak_id)),
        "{regions:#?}"
    );

    // Folded stacks: outermost first, weighted by still-mapped bytes (--weight); the leak's line ends in
    // main..syscall.
    let folded = std::fs::read_to_string(&folded).unwrap();
    let line = folded.lines().find(|l| l.contains("leak_site")).expect("a folded line for the leak");
    let (frames, bytes) = line.rsplit_once(' ').unwrap();
    assert_eq!(bytes.parse::<u64>().unwrap(), leaked);
    let frames: Vec<&str> = frames.split(';').collect();
    assert_eq!(frames.last(), Some(&"syscall"));
    let main = frames.iter().position(|f| *f == "main").expect("main in the stack");
    let site = frames.iter().position(|f| f.starts_with("leak_site")).unwrap();
    assert!(main < site, "{frames:?}");
    assert!(!folded.contains("tidy_site"), "nothing still mapped there: {folded}");

    // The flame graph is well-formed XML naming the leaking function.
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.contains("leak_site"));
    let ok = std::process::Command::new("python3")
        .args(["-c", "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])"])
        .arg(&svg)
        .status()
        .unwrap();
    assert!(ok.success(), "the SVG parses as XML");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));
}

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// Among 30,000 mappings (one page each, alternating protections, as libunwind's tests make them), the leak report
/// is as true as on a small process, though the samples in between read only maps and weigh only what changed:
/// the leaking site holds exactly what it kept, every kept mapping lies in a growing region that names it, and
/// nothing of the untouched block is reported as growth. Its recording gives the same report.
#[test]
fn leaks_among_thirty_thousand_mappings_are_attributed_exactly() {
    require_ptrace();
    let rec = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("many_maps.rec");
    let mut t = Target::start(&testprog("many_maps"), &[]);
    let maps = t.out.next();
    let mut it = maps.strip_prefix("maps ").expect("maps PAGES START").split_whitespace();
    let pages: u64 = it.next().unwrap().parse().unwrap();
    let block = u64::from_str_radix(it.next().unwrap().trim_start_matches("0x"), 16).unwrap();
    let block_end = block + pages * PAGE;
    let mappings = std::fs::read_to_string(format!("/proc/{}/maps", t.pid)).unwrap().lines().count();
    assert!(pages == 30_000 && mappings >= 30_000, "{pages} pages, {mappings} mappings");
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&[
        "--pid",
        &pid,
        "--leaks",
        "--json",
        "--smaps-every",
        "100ms",
        "--record",
        rec.to_str().unwrap(),
    ]);
    sc.wait_attached();
    t.send("go");
    let lines = t.out.until(|l| l == "done");
    let kept = truth_mmaps(&lines);
    let leaked: u64 = lines.iter().find_map(|l| l.strip_prefix("leaked ")).unwrap().parse().unwrap();
    assert_eq!(kept.iter().map(|&(_, len)| len).sum::<u64>(), leaked);
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    let values = json_lines(&out);
    let leaks: Vec<&Value> = values.iter().filter(|v| v["type"] == "leak").map(|v| &v["data"]).collect();
    assert!(!leaks.is_empty(), "{out:#?}");

    let leak = *leaks.iter().find(|l| has(l, "leak_site")).expect("leak_site");
    assert_eq!((leak["mapped"].as_u64(), leak["still_mapped"].as_u64()), (Some(leaked), Some(leaked)));
    assert_eq!(leak["mmaps"], 6);
    assert!(!leaks.iter().any(|l| has(l, "tidy_site") && l["mmaps"] == 6), "tidy_site holds nothing: {leaks:#?}");

    let leak_id = &leak["stack_id"];
    let regions: Vec<&Value> = values.iter().filter(|v| v["type"] == "region").map(|v| &v["data"]).collect();
    for &(addr, len) in &kept {
        let region = regions.iter().find(|r| hex(&r["start"]) <= addr && addr + len <= hex(&r["end"]));
        let region = region.unwrap_or_else(|| panic!("no growing region holds {addr:#x}+{len}: {regions:#?}"));
        assert!(region["stacks"].as_array().unwrap().iter().any(|s| &s["stack_id"] == leak_id), "{region:#?}");
    }
    // The block was touched before the trace and not since: none of it grew.
    let untraced: Vec<&&Value> = regions
        .iter()
        .filter(|r| r["before_trace"] == true && hex(&r["start"]) < block_end && block < hex(&r["end"]))
        .collect();
    assert!(untraced.is_empty(), "{untraced:#?}");
    t.send("bye");
    assert_eq!(t.wait().code(), Some(0));

    let (code, report, err) = run_syscatch(&["report", rec.to_str().unwrap(), "--leaks", "--json"]);
    assert_eq!(code, 0, "{err}");
    let report = json_lines(&report.lines().map(str::to_string).collect::<Vec<_>>());
    assert_eq!(report, values, "report differs from the live run");
}
