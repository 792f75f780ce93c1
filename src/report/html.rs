//! `--html FILE`: the leak report as one self-contained page (findings, a timeline, a flame graph, the tables of
//! stacks and regions). The page is a fixed template with vendored, licensed libraries inlined (`assets/`), and
//! the report as data: one JSON block that the page's script renders with `textContent` only. Whatever came from
//! the target (symbols, file names, Python qualnames, environment values) is data in that block, never markup;
//! `<`, `>` and `&` are escaped in it so that nothing can end the script element early.

use crate::analysis::correlate::StackId;
use crate::analysis::leaks::{Candidate, LeakReport};
use crate::model::stack::{Frame, FrameKind};
use crate::report::json::hex;
use crate::report::leaks::{caller, verdict_text};
use crate::report::text::frame_text;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Write};

/// The version of the page's data (the JSON block); see docs/guide.md.
pub const PAGE_SCHEMA: u32 = 1;

/// Most leak candidates and working sets on a page (the largest; all of them are in --json).
const PAGE_LEAKS: usize = 400;
const PAGE_WORKING_SETS: usize = 100;
/// Most stacks and regions drawn in the timeline (the others are summed in one line each).
const CHART_LINES: usize = 8;

const TEMPLATE: &str = include_str!("../../assets/report.html");
const STYLE: &str = include_str!("../../assets/report.css");
const APP: &str = include_str!("../../assets/report.js");
/// Vendored libraries, in load order: (name and version, licence, source). See assets/README.md.
const LIBS: [(&str, &str, &str); 3] = [
    ("d3 7.9.2", "ISC", include_str!("../../assets/d3/d3.min.js")),
    ("d3-flame-graph 5.0.0", "Apache-2.0", include_str!("../../assets/d3-flame-graph/d3-flamegraph.umd.min.js")),
    ("uPlot 1.6.32", "MIT", include_str!("../../assets/uplot/uPlot.iife.min.js")),
];
const LIB_STYLES: [&str; 1] = [include_str!("../../assets/uplot/uPlot.min.css")];

/// Frames interned for the page: each distinct frame once, stacks as lists of indices.
#[derive(Default)]
struct FrameTable {
    index: HashMap<u64, usize>,
    rows: Vec<Value>,
}

impl FrameTable {
    fn intern(&mut self, f: &Frame) -> usize {
        let key = crate::analysis::leaks::frame_key(f) ^ u64::from(f.inlined);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.rows.len();
        let kind = match f.kind {
            FrameKind::Native => "native",
            _ => "python",
        };
        // name: the flame graph's label; text: the frame as the text report writes it.
        self.rows.push(json!({"name": flame_name(f), "text": frame_text(f), "kind": kind}));
        self.index.insert(key, i);
        i
    }
}

/// A frame's label in the flame graph: the function (a Python frame with its file and line), else where it is.
fn flame_name(f: &Frame) -> String {
    match (&f.function, &f.module) {
        (Some(func), _) if f.kind != FrameKind::Native => {
            let file = f.file.as_deref().map(crate::model::modules::file_name).unwrap_or("?");
            format!("{func} ({file}:{})", f.line.unwrap_or(0))
        }
        (Some(func), _) => func.clone(),
        (None, Some(m)) => format!("{m}+{:#x}", f.offset.unwrap_or(0)),
        (None, None) => format!("{:#x}", f.addr),
    }
}

fn candidate(report: &LeakReport, c: &Candidate, kind: &str, frames: &mut FrameTable) -> Value {
    let s = &c.stats;
    let stack = report.stack(c.id);
    let ids: Vec<usize> = stack.map(|st| st.frames.iter().map(|f| frames.intern(f)).collect()).unwrap_or_default();
    json!({
        "id": c.id.0, "kind": kind, "verdict": c.verdict.name(),
        "verdict_text": verdict_text(c),
        "growth": c.growth, "still_mapped": s.still_mapped, "mapped": s.mapped, "unmapped": s.unmapped,
        "resident": report.weighed.then(|| report.resident_of(c.id)), "vanished": s.vanished,
        "mmaps": s.mmaps, "munmaps": s.munmaps, "mremaps": s.mremaps, "brks": s.brks, "commits": s.commits, "returns": s.returns, "failed": s.failed, "calls": s.calls(),
        "caller": caller(stack), "frames": ids, "truncated": stack.and_then(|st| st.truncated.clone()),
    })
}

/// A stack named in a chart's legend: its id and its first frame outside libc, without file and offset.
fn short_caller(report: &LeakReport, id: StackId) -> String {
    let frames = report.stack(id).map(|s| &s.frames[..]).unwrap_or_default();
    let name = frames.iter().find(|f| !f.in_libc() && !f.inlined).or(frames.first()).map(flame_name);
    format!("stack {}: {}", id.0, name.unwrap_or_else(|| "(no stack)".into()))
}

/// Sums series of equal length into one.
fn sum_series<'a>(series: impl Iterator<Item = &'a Vec<u64>>, len: usize) -> Vec<u64> {
    let mut out = vec![0u64; len];
    for s in series {
        for (o, v) in out.iter_mut().zip(s) {
            *o = o.saturating_add(*v);
        }
    }
    out
}

/// The timeline: Rss+Swap of the growing regions (KiB) and the bytes still mapped by the top stacks, at each
/// sample; beyond [`CHART_LINES`] of each, the rest summed in one line.
fn timeline(report: &LeakReport) -> Value {
    let n = report.series.times.len();
    let mut regions: Vec<Value> = report
        .growing
        .iter()
        .zip(&report.series.regions)
        .take(CHART_LINES)
        .map(|(g, v)| json!({"label": format!("{:#x}-{:#x}", g.start, g.end), "kb": v}))
        .collect();
    if report.growing.len() > CHART_LINES {
        let rest = sum_series(report.series.regions.iter().skip(CHART_LINES), n);
        let label = format!("{} other growing regions", report.growing.len() - CHART_LINES);
        regions.push(json!({"label": label, "kb": rest}));
    }
    let by_id: HashMap<StackId, &Vec<u64>> = report.series.stacks.iter().map(|(id, v)| (*id, v)).collect();
    let mut stacks: Vec<Value> = report
        .leaks
        .iter()
        .take(CHART_LINES)
        .filter_map(|c| by_id.get(&c.id).map(|v| (c, v)))
        .map(|(c, v)| json!({"id": c.id.0, "label": short_caller(report, c.id), "bytes": v}))
        .collect();
    if report.leaks.len() > CHART_LINES {
        let rest = sum_series(report.leaks.iter().skip(CHART_LINES).filter_map(|c| by_id.get(&c.id).copied()), n);
        let label = format!("{} other stacks", report.leaks.len() - CHART_LINES);
        stacks.push(json!({"id": null, "label": label, "bytes": rest}));
    }
    json!({"times": report.series.times, "regions": regions, "stacks": stacks})
}

/// Rss+Swap (KiB) by memory class at the start of the trace and at its end, where the findings read them (the
/// classes are measured twice, not at every sample): name, before (or null), after.
fn classes(report: &LeakReport) -> Vec<Value> {
    let Some(process) = report.diagnosis.as_ref().map(|d| &d.facts.process) else { return Vec::new() };
    let Some(now) = &process.class_kb else { return Vec::new() };
    now.iter()
        .map(|(class, kb)| {
            let before = process.class_before.as_ref().and_then(|b| b.get(class));
            json!({"class": class, "before_kb": before, "after_kb": kb})
        })
        .collect()
}

/// The page's data: everything the page shows, as plain values (the golden test compares this).
pub fn page_data(report: &LeakReport, title: &str) -> Value {
    let mut frames = FrameTable::default();
    let mut stacks: Vec<Value> =
        report.leaks.iter().take(PAGE_LEAKS).map(|c| candidate(report, c, "leak", &mut frames)).collect();
    let churned = report.churned();
    stacks.extend(churned.iter().take(PAGE_WORKING_SETS).map(|c| candidate(report, c, "working set", &mut frames)));
    let regions: Vec<Value> = report
        .growing
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let (traced, rest) = report.region_split(i);
            let on: Vec<_> = g
                .stacks
                .iter()
                .map(|s| json!({"id": s.stack.0, "calls": s.calls, "still_mapped": s.still_mapped, "caller": caller(report.stack(s.stack))}))
                .collect();
            json!({
                "start": hex(g.start), "end": hex(g.end), "growth_kb": g.growth_kb, "lasting_kb": g.lasting_kb,
                "lasting_mib_per_min": g.rate.map(|t| t.mib_per_min().0), "rss_swap_kb": g.rss_swap_kb, "new": g.new, "before_trace": g.created_before_trace(),
                "traced_resident_kb": report.weighed.then_some(traced),
                "remainder_kb": report.weighed.then_some(rest), "stacks": on,
            })
        })
        .collect();
    let (q1, q3) = report.window.middle();
    json!({
        "schema": PAGE_SCHEMA,
        "title": title,
        "window": {"from": report.window.from, "to": report.window.to, "middle": [q1, q3]},
        "weighed": report.weighed,
        "findings": report.diagnosis.as_ref().map(|d| crate::report::findings::page(d, report)),
        "stacks": stacks,
        "omitted": {
            "leaks": report.leaks.len().saturating_sub(PAGE_LEAKS),
            "working_sets": churned.len().saturating_sub(PAGE_WORKING_SETS),
        },
        "frames": frames.rows,
        "regions": regions,
        "timeline": timeline(report),
        "classes": classes(report),
    })
}

/// JSON that may sit inside a `<script>` element: `<`, `>` and `&` (only ever inside strings in JSON) as
/// `\u` escapes, so that no `</script>` or `<!--` can appear in it.
pub fn script_json(v: &Value) -> String {
    let text = serde_json::to_string(v).unwrap_or_else(|_| "null".into());
    let mut out = String::with_capacity(text.len() + 64);
    for ch in text.chars() {
        match ch {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The page around `data`: the template with the styles, the libraries, the data and the page's script inlined.
pub fn page(data: &Value) -> String {
    let libs: String = LIBS
        .iter()
        .map(|(name, licence, src)| {
            format!("<script>/* {name} ({licence}; see assets/README.md) */\n{src}\n</script>\n")
        })
        .collect();
    let style: String = LIB_STYLES.iter().copied().chain([STYLE]).collect::<Vec<_>>().join("\n");
    let title = data["title"].as_str().unwrap_or("syscatch").replace('&', "&amp;").replace('<', "&lt;");
    // One pass over the template, in its order: what is put in is never searched for placeholders again.
    let parts = [("{{TITLE}}", title), ("{{STYLE}}", style), ("{{DATA}}", script_json(data)), ("{{LIBS}}", libs)];
    let mut out = String::with_capacity(TEMPLATE.len() + parts.iter().map(|p| p.1.len()).sum::<usize>() + APP.len());
    let mut rest = TEMPLATE;
    for (key, value) in parts.iter().map(|(k, v)| (*k, v.as_str())).chain([("{{APP}}", APP)]) {
        let (head, tail) = rest.split_once(key).unwrap_or((rest, ""));
        out.push_str(head);
        out.push_str(value);
        rest = tail;
    }
    out.push_str(rest);
    out
}

impl LeakReport<'_> {
    /// The report as one self-contained HTML page.
    pub fn html(&self, w: &mut dyn Write, title: &str) -> io::Result<()> {
        w.write_all(page(&page_data(self, title)).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::leaks::LeakTracker;
    use crate::model::event::Event;
    use crate::model::smaps::Span;
    use crate::model::stack::Stack;

    const HOSTILE: &str = "<img src=x onerror=alert(1)>";

    fn hostile_report_page() -> (Value, String) {
        let native = Frame {
            addr: 0x1000,
            module: Some("lib\"evil'.so".into()),
            function: Some(HOSTILE.into()),
            file: Some("</script><script>alert(2)</script>".into()),
            line: Some(3),
            ..Frame::default()
        };
        let py = Frame {
            kind: FrameKind::Python,
            function: Some("Pool.<lambda> & \u{2028}".into()),
            file: Some("/srv/\"app\"/<x>.py".into()),
            line: Some(42),
            ..Frame::default()
        };
        let stack = Stack { frames: vec![native, py], truncated: Some("<b>cut</b>".into()) };
        let mut t = LeakTracker::default();
        let region = |kb| Span { start: 0x1000_0000, end: 0x1001_0000, anon: true, rss_swap: kb, reserved: false };
        let other = Span { start: 0x7000_0000, end: 0x7000_1000, anon: true, rss_swap: 4, reserved: false };
        t.sample(Some(0.0), vec![other]);
        let ev = Event {
            time: 0.5,
            tid: 1,
            probe: None,
            func: None,
            nr: 9,
            args: [0, 0x10000, 3, 0x22, u64::MAX, 0],
            regs: Vec::new(),
            ret: Some(0x1000_0000),
            ret_missing: None,
            capture: None,
            also: Vec::new(),
        };
        t.event(&ev, Some(&stack));
        t.sample(Some(1.0), vec![region(64), other]);
        let report = t.report();
        let data = page_data(&report, "pid 7 <x>");
        let mut out = Vec::new();
        report.html(&mut out, "pid 7 <x>").unwrap();
        (data, String::from_utf8(out).unwrap())
    }

    #[test]
    fn target_names_are_data_never_markup() {
        let (data, page) = hostile_report_page();
        // The names are in the data as they are...
        assert_eq!(data["stacks"][0]["caller"].as_str().unwrap().split('+').next(), Some(HOSTILE));
        assert!(data["frames"][1]["text"].as_str().unwrap().contains("/srv/\"app\"/<x>.py:42 [python]"));
        // ...and in the page only inside the data block, escaped: the block parses back to the same data.
        let open = r#"<script type="application/json" id="report-data">"#;
        let start = page.find(open).unwrap() + open.len();
        let len = page[start..].find("</script>").unwrap();
        let block = &page[start..start + len];
        assert!(!block.contains('<') && !block.contains('>') && !block.contains('&'), "{block}");
        assert_eq!(serde_json::from_str::<Value>(block).unwrap(), data);
        assert!(!page.contains(HOSTILE) && !page.contains("alert(2)</script>") && !page.contains("<x>"));
        assert!(page.contains("<title>syscatch: pid 7 &lt;x></title>"));
    }

    #[test]
    fn the_page_is_self_contained() {
        let (_, page) = hostile_report_page();
        for (name, _, src) in LIBS {
            assert!(!src.to_ascii_lowercase().contains("</script"), "{name}");
        }
        // No script, style, font or image from elsewhere.
        let lower = page.to_ascii_lowercase();
        for needle in ["<script src", "<link", "@import", "url(http", "src=\"http", "<iframe"] {
            assert!(!lower.contains(needle), "{needle}");
        }
        assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
        assert!(page.len() < 600 << 10, "{} bytes", page.len());
        for key in ["{{TITLE}}", "{{STYLE}}", "{{LIBS}}", "{{DATA}}", "{{APP}}"] {
            assert!(!page.contains(key), "{key} is left");
        }
    }
}
