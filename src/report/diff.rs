//! `syscatch report --diff BASE NEW`: the growth of each stack in two recordings (a leaking run and a fixed one,
//! before and after a change), the stacks matched by their symbolized frames (module and function of each frame;
//! a Python frame by its file and qualified name), never by addresses, which differ from run to run. Largest
//! change of the growth rate first: what the fix removed, and what is new.

use crate::analysis::leaks::LeakReport;
use crate::model::stack::{Frame, FrameKind, Stack};
use crate::report::json::{frame_json, line};
use crate::report::text::frame_text;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{self, Write};

const MIB: f64 = (1u64 << 20) as f64;

/// What a frame is known by across runs.
fn frame_key(f: &Frame) -> String {
    match (f.kind, &f.function, &f.module) {
        (FrameKind::Native, Some(func), m) => format!("{}:{func}", m.as_deref().unwrap_or("?")),
        (FrameKind::Native, None, m) => format!("{}:?", m.as_deref().unwrap_or("?")),
        (_, func, _) => {
            let file = f.file.as_deref().map(crate::model::modules::file_name).unwrap_or("?");
            format!("{file}:{}", func.as_deref().unwrap_or("?"))
        }
    }
}

/// What a stack is known by across runs.
pub fn stack_key(s: &Stack) -> Vec<String> {
    s.frames.iter().map(frame_key).collect()
}

/// One stack in the two runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub key: Vec<String>,
    /// Growth (bytes) and its rate (bytes per minute) in each run; zero where the stack holds nothing.
    pub base: (u64, f64),
    pub new: (u64, f64),
    /// Bytes still mapped at the end of each run.
    pub held: (u64, u64),
    /// Which run's stack to show (the new one's when it has it).
    in_new: bool,
    id: crate::analysis::correlate::StackId,
}

impl Row {
    pub fn change(&self) -> f64 {
        self.new.1 - self.base.1
    }

    pub fn status(&self) -> &'static str {
        match (self.base.0 > 0, self.new.0 > 0) {
            (true, false) => "gone",
            (false, true) => "new",
            (true, true) => "both",
            (false, false) => "neither",
        }
    }
}

/// Every stack that grows or holds memory in either run, the largest change of growth rate first.
pub fn compare(base: &LeakReport, new: &LeakReport) -> Vec<Row> {
    let mut rows: BTreeMap<Vec<String>, Row> = BTreeMap::new();
    for (report, is_new) in [(base, false), (new, true)] {
        for c in &report.leaks {
            let key = report.stack(c.id).map(stack_key).unwrap_or_default();
            let rate = c.per_min(report.window);
            let row = rows.entry(key.clone()).or_insert(Row {
                key,
                base: (0, 0.0),
                new: (0, 0.0),
                held: (0, 0),
                in_new: is_new,
                id: c.id,
            });
            // Several stacks of one run may fold into one key (the same functions at other lines): summed.
            let (side, held) = if is_new { (&mut row.new, &mut row.held.1) } else { (&mut row.base, &mut row.held.0) };
            side.0 += c.growth;
            side.1 += rate;
            *held += c.stats.still_mapped;
            if is_new && !row.in_new {
                (row.in_new, row.id) = (true, c.id);
            }
        }
    }
    let mut out: Vec<Row> = rows.into_values().collect();
    out.sort_by(|a, b| b.change().abs().total_cmp(&a.change().abs()).then_with(|| a.key.cmp(&b.key)));
    out
}

fn stack_of<'a>(row: &Row, base: &'a LeakReport, new: &'a LeakReport) -> Option<&'a Stack> {
    if row.in_new { new.stack(row.id) } else { base.stack(row.id) }
}

pub fn write_text(
    rows: &[Row],
    base: &LeakReport,
    new: &LeakReport,
    base_path: &std::path::Path,
    new_path: &std::path::Path,
    w: &mut dyn Write,
) -> io::Result<()> {
    let total = |r: &LeakReport| r.traced_per_min() / MIB;
    writeln!(
        w,
        "Growth on traced stacks: {:.2} MiB/min in {} ({:.1}s), {:.2} MiB/min in {} ({:.1}s); by stack, largest \
         change first:",
        total(base),
        base_path.display(),
        base.window.len(),
        total(new),
        new_path.display(),
        new.window.len()
    )?;
    if rows.is_empty() {
        writeln!(w, "  no stack holds memory in either recording")?;
    }
    for row in rows {
        writeln!(
            w,
            "\n  {:+.2} MiB/min  {}: {:.2} MiB/min ({} KiB) before, {:.2} MiB/min ({} KiB) after; holds {} KiB, then {} KiB",
            row.change() / MIB,
            row.status(),
            row.base.1 / MIB,
            row.base.0 / 1024,
            row.new.1 / MIB,
            row.new.0 / 1024,
            row.held.0 / 1024,
            row.held.1 / 1024,
        )?;
        if let Some(stack) = stack_of(row, base, new) {
            for f in stack.frames.iter().filter(|f| !f.inlined).take(8) {
                writeln!(w, "      {}", frame_text(f))?;
            }
        }
    }
    Ok(())
}

/// One `diff` line per stack, then a `diff_summary`.
pub fn write_json(rows: &[Row], base: &LeakReport, new: &LeakReport, w: &mut dyn Write) -> io::Result<()> {
    for row in rows {
        let frames = stack_of(row, base, new).map(|s| s.frames.iter().map(frame_json).collect::<Vec<_>>());
        line(
            &mut &mut *w,
            "diff",
            json!({
                "status": row.status(),
                "base_growth": row.base.0, "base_growth_mib_per_min": row.base.1 / MIB,
                "new_growth": row.new.0, "new_growth_mib_per_min": row.new.1 / MIB,
                "change_mib_per_min": row.change() / MIB,
                "base_still_mapped": row.held.0, "new_still_mapped": row.held.1,
                "key": row.key, "stack": frames,
            }),
        )?;
    }
    let total = |r: &LeakReport| r.traced_per_min() / MIB;
    line(
        &mut &mut *w,
        "diff_summary",
        json!({
            "base_growth_mib_per_min": total(base), "new_growth_mib_per_min": total(new),
            "base_duration": base.window.len(), "new_duration": new.window.len(), "stacks": rows.len(),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::leaks::LeakTracker;
    use crate::model::event::Event;
    use crate::model::smaps::Span;

    fn run(leak_at: u64, tidy: bool) -> LeakTracker {
        let frame = |addr: u64, name: &str| Frame {
            addr,
            function: Some(name.into()),
            module: Some("app".into()),
            ..Frame::default()
        };
        let leak = Stack { frames: vec![frame(leak_at, "pool_grow"), frame(leak_at + 0x100, "main")], truncated: None };
        let other = Stack { frames: vec![frame(0x9000, "cache_fill"), frame(0x9100, "main")], truncated: None };
        let mut t = LeakTracker::default();
        let span = |start: u64| Span { start, end: start + 0x8000, anon: true, rss_swap: 4, reserved: false };
        let spans = vec![span(0x1000_0000), span(0x2000_0000)];
        t.sample(Some(0.0), spans.clone());
        for s in 0..8u64 {
            let ev = |ret: u64| Event {
                time: s as f64 + 0.5,
                tid: 1,
                probe: None,
                func: None,
                nr: 9,
                args: [0, 0x1000, 3, 0x22, u64::MAX, 0],
                regs: Vec::new(),
                ret: Some(ret),
                ret_missing: None,
                capture: None,
                also: Vec::new(),
            };
            if !tidy {
                t.event(&ev(0x1000_0000 + s * 0x1000), Some(&leak));
            }
            t.event(&ev(0x2000_0000 + s * 0x1000), Some(&other));
            t.sample(Some(s as f64 + 1.0), spans.clone());
        }
        t
    }

    #[test]
    fn the_fixed_stack_is_gone_and_matched_across_addresses() {
        // The runs load the program at different addresses: stacks match by their functions.
        let (b, n) = (run(0x5000, false), run(0x7000, true));
        let (b, n) = (b.report(), n.report());
        let rows = compare(&b, &n);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, ["app:pool_grow", "app:main"]);
        assert_eq!(rows[0].status(), "gone");
        // 4 pages mapped in the middle half (2 s to 6 s) of 8 s: 4 KiB a second.
        assert_eq!(rows[0].base.0, 4 * 4096);
        assert!((rows[0].change() + 4.0 * 4096.0 * 60.0 / 4.0).abs() < 1e-6, "{:?}", rows[0]);
        assert_eq!((rows[1].status(), rows[1].change()), ("both", 0.0));
        let mut text = Vec::new();
        write_text(&rows, &b, &n, "a.rec".as_ref(), "b.rec".as_ref(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("gone: 0.23 MiB/min (16 KiB) before, 0.00 MiB/min (0 KiB) after"), "{text}");
    }
}
