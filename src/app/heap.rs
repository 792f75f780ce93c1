//! The `heap` section of `syscatch mem` and of the leak report: glibc malloc's arenas side by side (read by `crate::live::heap`), each with what the kernel holds for
//! it (its regions' Rss and dirty bytes), what the allocator holds (`system_mem`) and what the program holds (that
//! less the free chunks), read through /proc/PID/mem without stopping the process (see
//! `crate::analysis::mstate`, which also says how a torn read is told).

use crate::analysis::mstate::HeapReading;
use serde_json::{Value, json};

fn mib(bytes: u64) -> String {
    crate::app::mem::human(bytes / 1024)
}

/// The section's lines for the text report.
pub fn lines(h: &HeapReading) -> Vec<String> {
    if let (Some(name), Some(why)) = (&h.other, &h.problem) {
        return vec![format!("heap ({name}): not read: {why}")];
    }
    let version = h.glibc.map(|(a, b)| format!("glibc {a}.{b}")).unwrap_or_else(|| "glibc".into());
    let mut out = vec![format!(
        "heap ({version} malloc: per arena, what the kernel holds, what malloc holds, what the program holds):"
    )];
    for v in &h.arenas {
        let a = &v.arena;
        let what =
            if v.main { "main arena ([heap])".to_string() } else { format!("arena {:#x} ({} heaps)", a.addr, v.heaps) };
        let threads = match a.threads {
            0 => "no thread (its threads exited: free for the next one)".to_string(),
            1 => "1 thread".to_string(),
            n => format!("{n} threads"),
        };
        out.push(format!(
            "  {what}, {threads}: resident {}, dirty {}; malloc holds {}; in use {}, free {} (top {}, bins {}, \
             fastbins {}; {} free chunks)",
            crate::app::mem::human(v.rss_kb),
            crate::app::mem::human(v.dirty_kb),
            mib(a.system_mem),
            mib(a.in_use()),
            mib(a.free()),
            mib(a.top),
            mib(a.bins),
            mib(a.fastbins),
            a.chunks
        ));
        if let Some(t) = h.threads_line(v) {
            out.push(format!("      {t}"));
        }
    }
    if let Some(p) = &h.problem {
        out.push(format!("  ({p})"));
    }
    if !h.arenas.is_empty() {
        out.push("  (in use counts blocks in the threads' tcaches as held, as mallinfo2 does)".into());
    }
    out
}

/// The section as JSON.
pub fn json(h: &HeapReading) -> Value {
    let arenas: Vec<Value> = h
        .arenas
        .iter()
        .map(|v| {
            let a = &v.arena;
            json!({
                "addr": crate::report::json::hex(a.addr), "main": v.main, "heaps": v.heaps, "threads": a.threads,
                "rss_kb": v.rss_kb,
                "dirty_kb": v.dirty_kb, "system_mem": a.system_mem, "in_use": a.in_use(), "free": a.free(),
                "top": a.top, "bins": a.bins, "fastbins": a.fastbins, "free_chunks": a.chunks,
                "tids": v.tids, "tcache": v.tcache,
            })
        })
        .collect();
    json!({
        "glibc": h.glibc.map(|(a, b)| format!("{a}.{b}")),
        "arenas": arenas,
        "problem": h.problem,
        "threads_note": h.threads_note,
        "allocator": h.other.as_deref().unwrap_or("glibc"),
    })
}
