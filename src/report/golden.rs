//! Golden tests of every renderer: fixed events, stacks (native, inlined, Python, truncated), a summary with
//! warnings and a leak report with a finding, rendered as text and JSON Lines (and the HTML page's data) and
//! compared byte for byte with `tests/golden/`. An intended change of the output is accepted with
//! `SYSCATCH_BLESS=1 cargo test --lib golden`, which rewrites the files (review the diff before committing it).

use super::Renderer;
use super::json::Json;
use super::text::Text;
use crate::analysis::leaks::LeakTracker;
use crate::analysis::rules::{self, ProcessFacts};
use crate::model::event::{End, Event, Summary};
use crate::model::smaps::Span;
use crate::model::stack::{Frame, FrameKind, Stack};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn frame(addr: u64, module: &str, function: &str, line: Option<u32>) -> Frame {
    Frame {
        addr,
        module: Some(module.into()),
        function: Some(function.into()),
        offset: Some(0x1c),
        file: line.map(|_| format!("/src/{module}.c")),
        line,
        ..Frame::default()
    }
}

fn python(function: &str, line: u32) -> Frame {
    Frame {
        kind: FrameKind::Python,
        function: Some(function.into()),
        file: Some("/srv/app/pool.py".into()),
        line: Some(line),
        ..Frame::default()
    }
}

fn stacks() -> Vec<Stack> {
    let mut inlined = frame(0x5555_0000_1200, "worker", "grow_inline", Some(12));
    inlined.inlined = true;
    vec![
        Stack {
            frames: vec![
                frame(0x7f00_0002_5a0c, "libc.so.6", "syscall", None),
                frame(0x7f00_1000_0420, "libucx.so", "ucs_mpool_grow", Some(46)),
                frame(0x7f00_1000_0510, "libucx.so", "ucm_munmap", Some(78)),
                python("Pool.grow", 42),
                frame(0x7f00_3000_0100, "libpython3.12.so", "_PyEval_EvalFrameDefault", None),
                frame(0x5555_0000_1000, "worker", "main", Some(30)),
            ],
            truncated: None,
        },
        Stack {
            frames: vec![inlined, frame(0x5555_0000_1200, "worker", "tidy", Some(20))],
            truncated: Some("the stack copy (4096 bytes from 0x7ffd0000) ends before the stack does".into()),
        },
    ]
}

fn event(i: u64, nr: u64, ret: Option<u64>) -> Event {
    Event {
        time: 0.25 * i as f64,
        tid: 4242 + (i % 2) as i32,
        probe: None,
        func: None,
        nr,
        args: [0, 0x10000, 3, 0x22, u64::MAX, 0],
        regs: Vec::new(),
        ret,
        ret_missing: ret.is_none().then(|| "the call was interrupted by a signal and restarted".into()),
        capture: None,
        also: Vec::new(),
    }
}

fn events() -> Vec<(Event, Option<usize>)> {
    let mut probe = event(5, 11, Some(0));
    probe.probe = Some(Arc::from("unmaps"));
    probe.func = Some(Arc::from("libc.so.6:munmap"));
    probe.args = [0x7f00_6000_0000, 0x10000, 0, 0, 0, 0];
    vec![
        // One in each middle quarter of the 2.5 s trace: growth.
        (Event { time: 0.75, ..event(1, 9, Some(0x7f00_4000_0000)) }, Some(0)),
        (Event { time: 1.5, ..event(2, 9, Some(0x7f00_4001_0000)) }, Some(0)),
        (event(3, 9, Some((-12i64) as u64)), Some(1)),
        (event(4, 9, None), None),
        (probe, Some(1)),
    ]
}

fn summary() -> Summary {
    Summary {
        duration: Duration::from_millis(2500),
        hits: 40,
        matching: 5,
        events_by_tid: [(4242, 3), (4243, 2)].into(),
        stopped: Duration::from_micros(180),
        emulated: 35,
        threads_seen: 2,
        end: Some(End::Duration),
        attach: Duration::from_micros(900),
        arm: Duration::from_micros(120),
        detach: Duration::from_micros(300),
        warnings: vec!["2 events were reported without their stack: the analysis was behind".into()],
        ..Summary::default()
    }
}

fn region(start: u64, end: u64, rss_kb: u64) -> Span {
    Span { start, end, anon: true, rss_swap: rss_kb, reserved: false }
}

/// The leak report of the events with its diagnosis, given to `f`.
fn with_report(f: impl FnOnce(&crate::analysis::leaks::LeakReport)) {
    let st = stacks();
    let mut t = LeakTracker::default();
    t.sample(Some(0.0), vec![region(0x7f00_5000_0000, 0x7f00_5000_1000, 4)]);
    let mut events = events().into_iter().peekable();
    // The pool's region fills as its pages are written, sampled in each quarter.
    for (time, kb) in [(1.0, 64), (1.6, 96), (2.0, 128), (2.5, 128)] {
        while let Some((ev, id)) = events.next_if(|(e, _)| e.time < time) {
            t.event(&ev, id.map(|i| &st[i]));
        }
        let end = if kb > 64 { 0x7f00_4002_0000 } else { 0x7f00_4001_0000 };
        t.sample(Some(time), vec![region(0x7f00_4000_0000, end, kb), region(0x7f00_5000_0000, 0x7f00_5000_1000, 4)]);
    }
    t.weigh_residency(&mut |_, _, _| Some((32, 64 << 10)));
    let mut report = t.report();
    let rules = rules::parse_rules(rules::DEFAULT_RULES).unwrap();
    let facts = ProcessFacts {
        env: [("UCX_RCACHE_MAX_UNRELEASED".to_string(), "inf".to_string())].into(),
        env_source: "live, from __environ".into(),
        allocator: "glibc".into(),
        ..ProcessFacts::default()
    };
    report.diagnosis = Some(crate::analysis::findings::diagnose(&facts, &report, &rules, 2.5));
    f(&report);
}

/// Renders everything through `r`: the events, the leak report with its diagnosis, the summary.
fn render(r: &mut dyn Renderer) {
    let st = stacks();
    for (ev, id) in events() {
        r.event_interned(&ev, id.map(|i| (i, &st[i]))).unwrap();
    }
    with_report(|report| r.leaks(report).unwrap());
    r.summary(&summary()).unwrap();
    r.flush().unwrap();
}

/// Compares `got` with the golden file `name`, or rewrites it under `SYSCATCH_BLESS=1`.
fn golden(name: &str, got: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("SYSCATCH_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (create it with SYSCATCH_BLESS=1 cargo test --lib golden)", path.display())
    });
    if want != got {
        let first = want.lines().zip(got.lines()).position(|(a, b)| a != b).unwrap_or(want.lines().count());
        panic!(
            "{name} differs from {} at line {}:\n  want: {:?}\n  got:  {:?}\n(accept an intended change with \
             SYSCATCH_BLESS=1 cargo test --lib golden)",
            path.display(),
            first + 1,
            want.lines().nth(first),
            got.lines().nth(first)
        );
    }
}

#[test]
fn golden_text() {
    let mut out = Vec::new();
    let mut err = Vec::new();
    {
        let mut r = Text::new(&mut out, &mut err);
        render(&mut r);
    }
    golden("report.txt", &String::from_utf8(out).unwrap());
    golden("summary.txt", &String::from_utf8(err).unwrap());
}

#[test]
fn golden_json() {
    let mut r = Json::new(Vec::new());
    render(&mut r);
    golden("report.jsonl", &String::from_utf8(r.out).unwrap());
}

/// The HTML page's data (not its bytes: the template and the libraries around it may change freely).
#[test]
fn golden_page_data() {
    with_report(|report| {
        let data = crate::report::html::page_data(report, "pid 4242");
        golden("report.page.json", &format!("{}\n", serde_json::to_string_pretty(&data).unwrap()));
    });
}
