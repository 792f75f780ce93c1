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
    require_ptrace();
    let mut t = Target::start(&testprog("probe_target"), &[]);
    let pid = t.pid.to_string();
    let mut sc = Syscatch::start(&["run", file.to_str().unwrap(), "--pid", &pid, "--json"]);
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
    let events = json_lines(&out).into_iter().filter(|v| v["type"] == "event").map(|v| v["data"].clone()).collect();
    t.send("bye");
    (answers, events, err)
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
    assert!(err.iter().any(|l| l.contains("1 breakpoint(s)")), "{err:#?}");
    let all = events.iter().filter(|e| e["probe"] == "all").count();
    let big: Vec<u64> = events.iter().filter(|e| e["probe"] == "big").map(|e| hex(&e["args"][1])).collect();
    assert_eq!(all, 3);
    assert_eq!(big, [12288]);
}
