//! `syscatch run FILE`: probes on function entries and on syscall(), exact events, return values matched to
//! their calls across threads and recursion, and every shipped example script.

use crate::common::*;
use serde_json::Value;
use std::path::PathBuf;

fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string").trim_start_matches("0x"), 16).unwrap()
}

fn script(name: &str, text: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn example(name: &str) -> PathBuf {
    repo().join("scripts/probes").join(name)
}

/// Runs `cmds` on a probe_target under `syscatch run FILE`; returns (target answers, events, stderr).
fn run_probes(file: &std::path::Path, cmds: &[&str]) -> (Vec<String>, Vec<Value>, Vec<String>) {
    let (answers, values, err) = run_probes_with(file, cmds, &[]);
    let events = values.into_iter().filter(|v| v["type"] == "event").map(|v| v["data"].clone()).collect();
    (answers, events, err)
}

/// [`run_probes`] with `extra` arguments; returns every JSON line (events and the summary).
fn run_probes_with(file: &std::path::Path, cmds: &[&str], extra: &[&str]) -> (Vec<String>, Vec<Value>, Vec<String>) {
    require_ptrace();
    let mut t = Target::start(&testprog("probe_target"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&[&["run", file.to_str().unwrap(), "--pid", &pid, "--json"], extra].concat());
    sc.wait_attached();
    let mut answers = Vec::new();
    for c in cmds {
        t.send(c);
        let mut lines = t.out.until(|l| l == "ok");
        lines.pop();
        answers.extend(lines);
    }
    sc.signal(libc::SIGINT);
    let (status, out, err) = sc.finish();
    assert!(status.success(), "{err:#?}");
    assert_eq!(tracer_pid(t.pid), Some(0), "detached");
    t.send("bye");
    (answers, json_lines(&out), err)
}

#[test]
fn function_probe_with_rip_relative_entry_under_four_threads_matches_every_return() {
    let f = script("scaled.probe", "probe s at probe_target:scaled {\n    collect args, ret\n}\n");
    let (answers, events, _) = run_probes(&f, &["scaled 4 150"]);
    assert_eq!(answers, ["scaled 600", "factor 3"]);
    assert_eq!(events.len(), 600, "no call missed, none reported twice");
    for e in &events {
        assert_eq!(e["probe"], "s");
        assert_eq!(e["location"], "probe_target:scaled");
        assert_eq!(hex(&e["ret"]), 3 * hex(&e["args"][0]), "each return matched to its own call: {e}");
    }
    let mut args: Vec<u64> = events.iter().map(|e| hex(&e["args"][0])).collect();
    args.sort();
    args.dedup();
    assert_eq!(args.len(), 600);
}

#[test]
fn return_values_under_recursion_match_each_level() {
    let f = script("depth.probe", "probe d at probe_target:depth {\n    collect args, ret\n}\n");
    let (answers, events, err) = run_probes(&f, &["depth 12"]);
    assert_eq!(answers, ["depth 12 78"]);
    let mut got: Vec<(u64, u64)> = events.iter().map(|e| (hex(&e["args"][0]), hex(&e["ret"]))).collect();
    got.sort();
    let want: Vec<(u64, u64)> = (0..=12).map(|n| (n, n * (n + 1) / 2)).collect();
    assert_eq!(got, want);
    // depth() starts with `test %rdi,%rdi`, which the emulator does not run: the slow path was taken.
    assert!(err.iter().any(|l| l.contains("slow step-overs") && !l.contains(" 0 slow step-overs")), "{err:#?}");
}

#[test]
fn shipped_raw_mmap_hunt_captures_exact_addresses() {
    let (answers, events, _) = run_probes(&example("raw-mmap.probe"), &["rawmap 3"]);
    let truth = truth_mmaps(&answers);
    let got: Vec<(u64, u64)> =
        events.iter().filter(|e| e["syscall"] == "mmap").map(|e| (hex(&e["ret"]), hex(&e["args"][1]))).collect();
    assert_eq!(got, truth);
    assert!(events.iter().all(|e| e["probe"] == "raw_maps" && e["stack"].is_array()));
}

#[test]
fn shipped_libc_mmap_probes_return_values() {
    let (answers, events, _) = run_probes(&example("libc-mmap.probe"), &["libcmap 3"]);
    let truth: Vec<(u64, u64)> = answers
        .iter()
        .filter_map(|l| {
            let mut it = l.strip_prefix("libcmap ")?.split_whitespace();
            Some((u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(truth.len(), 3);
    let maps: Vec<(u64, u64)> =
        events.iter().filter(|e| e["probe"] == "mmap_calls").map(|e| (hex(&e["ret"]), hex(&e["args"][1]))).collect();
    assert_eq!(maps, truth);
    let unmaps: Vec<(u64, u64, u64)> = events
        .iter()
        .filter(|e| e["probe"] == "munmap_calls")
        .map(|e| (hex(&e["args"][0]), hex(&e["args"][1]), hex(&e["ret"])))
        .collect();
    assert_eq!(unmaps, truth.iter().map(|&(a, l)| (a, l, 0)).collect::<Vec<_>>());
}

#[test]
fn shipped_large_malloc_threshold_sees_only_large_allocations() {
    let (answers, events, _) = run_probes(&example("large-malloc.probe"), &["malloc 100", "malloc 2097152"]);
    let big = answers.iter().find(|l| l.ends_with(" 2097152")).unwrap();
    let ptr = u64::from_str_radix(big.split_whitespace().nth(1).unwrap().trim_start_matches("0x"), 16).unwrap();
    let mallocs: Vec<&Value> = events.iter().filter(|e| e["probe"] == "big_mallocs").collect();
    assert_eq!(mallocs.len(), 1, "{events:#?}");
    assert_eq!(hex(&mallocs[0]["args"][0]), 2097152);
    assert_eq!(hex(&mallocs[0]["ret"]), ptr);
}

#[test]
fn two_probes_on_one_address_share_one_breakpoint() {
    let f = script(
        "two.probe",
        "probe all at libc:munmap {\n    collect args\n}\nprobe big at libc:munmap if arg1 > 8192 {\n    collect args\n}\n",
    );
    let (_, events, err) = run_probes(&f, &["libcmap 3"]);
    assert!(err.iter().any(|l| l.contains("1 probe site(s)")), "{err:#?}");
    let all = events.iter().filter(|e| e["probe"] == "all").count();
    let big: Vec<u64> = events.iter().filter(|e| e["probe"] == "big").map(|e| hex(&e["args"][1])).collect();
    assert_eq!(all, 3);
    assert_eq!(big, [12288]);
}

/// A condition on the arguments, with `--fast` (the default) and without: the same events exactly, the calls that
/// fail it are no events. With `--fast` the loop's one stack is made known by its first event (a call that fails
/// the condition teaches nothing: it stops, and is dropped): the calls after it are written down without a stop
/// and their condition evaluated on the trampoline's record.
#[test]
fn a_condition_on_arguments_selects_the_same_calls_with_fast_and_breakpoints() {
    let f =
        script("large.probe", "probe large at syscall(mmap) if arg1 > 20 * 4096 {\n    collect args, ret, stack\n}\n");
    for mode in [&[][..], &["--no-fast"][..]] {
        let (answers, values, err) = run_probes_with(&f, &["rawmap 40", "rawmap 40", "rawmap 40"], mode);
        let ctx = format!("{mode:?}: {err:#?}");
        let truth: Vec<(u64, u64)> = truth_mmaps(&answers).into_iter().filter(|&(_, len)| len > 20 * 4096).collect();
        assert_eq!(truth.len(), 60, "{ctx}");
        let events: Vec<&Value> = values.iter().filter(|v| v["type"] == "event").map(|v| &v["data"]).collect();
        let got: Vec<(u64, u64)> = events.iter().map(|e| (hex(&e["ret"]), hex(&e["args"][1]))).collect();
        assert_eq!(got, truth, "{ctx}");
        for e in &events {
            assert_eq!(e["probe"], "large", "{ctx}");
            let names: Vec<&str> =
                e["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
            assert!(names.contains(&"main"), "{ctx}: {names:?}");
        }
        let s = summary_data(&values);
        assert_eq!(s["matching"], 60, "{ctx}");
        let n = |k: &str| s[k].as_u64().unwrap();
        let attached = err.iter().find(|l| l.contains("attached to")).expect("the attach line");
        assert_eq!(attached.contains("(--fast: calls that do not match never stop)"), mode.is_empty(), "{ctx}");
        if mode.is_empty() {
            // Each call either stopped at the trampoline or was written down with its known stack.
            assert_eq!(n("hits"), 120, "{ctx}");
            assert_eq!(n("fast_stops") + n("from_known"), 120, "{ctx}");
            assert!(n("fast_stops") >= 20, "the calls before the first event stop: {ctx}");
            assert!(n("from_known") >= 1, "the calls after it need no stop: {ctx}");
        } else {
            assert_eq!(n("from_ring") + n("fast_stops"), 0, "{ctx}");
            assert!(n("hits") >= 120, "{ctx}");
        }
    }
}

/// A probe that reads a register by name keeps its breakpoint (the trampoline's record has no such register):
/// the attach says nothing of --fast, every hit is a breakpoint's.
#[test]
fn a_condition_on_a_register_keeps_the_breakpoint() {
    let f = script("reg.probe", "probe r at syscall(mmap) if rdx > 20 * 4096 {\n    collect args, ret\n}\n");
    let (answers, values, err) = run_probes_with(&f, &["rawmap 30"], &[]);
    let truth: Vec<(u64, u64)> = truth_mmaps(&answers).into_iter().filter(|&(_, len)| len > 20 * 4096).collect();
    let got: Vec<(u64, u64)> = values
        .iter()
        .filter(|v| v["type"] == "event")
        .map(|v| (hex(&v["data"]["ret"]), hex(&v["data"]["args"][1])))
        .collect();
    assert_eq!(got, truth, "{err:#?}");
    let s = summary_data(&values);
    assert_eq!((s["from_ring"].as_u64(), s["fast_stops"].as_u64()), (Some(0), Some(0)), "{err:#?}");
    assert!(!err.iter().any(|l| l.contains("--fast")), "{err:#?}");
}
