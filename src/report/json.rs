//! JSON Lines: each line `{"type": ..., "data": ...}`; addresses are hex strings. Schema version in `summary`.

use super::{Renderer, errno_name, errno_of, syscall_name};
use crate::model::event::{End, Event, Summary};
use crate::model::stack::{Frame, FrameKind, Stack};
use serde_json::{Value, json};
use std::io::Write;

pub const SCHEMA_VERSION: u32 = 3;

pub struct Json<W: Write> {
    pub out: W,
    /// The `stack` field of each interned stack, rendered once, by stack id.
    pub cache: Vec<Option<String>>,
}

impl<W: Write> Json<W> {
    pub fn new(out: W) -> Self {
        Json { out, cache: Vec::new() }
    }
}

pub fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// `v` as a JSON string of [`hex`]'s text, without formatting machinery (several per event).
fn write_hex_str(w: &mut impl Write, v: u64) -> std::io::Result<()> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 20];
    let mut i = buf.len() - 1;
    buf[i] = b'"';
    let mut rest = v;
    loop {
        i -= 1;
        buf[i] = DIGITS[(rest & 15) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    buf[i - 3..i].copy_from_slice(b"\"0x");
    w.write_all(&buf[i - 3..])
}

pub fn frame_json(f: &Frame) -> Value {
    if f.kind != FrameKind::Native {
        return json!({
            "kind": "python",
            "function": f.function,
            "file": f.file,
            "line": f.line,
            "placed": f.kind == FrameKind::Python,
        });
    }
    json!({
        "kind": "native",
        "addr": hex(f.addr),
        "module": f.module,
        "function": f.function,
        "offset": f.offset.map(hex),
        "file": f.file,
        "line": f.line,
        "inlined": f.inlined,
    })
}

pub fn event_json(ev: &Event, stack: Option<&Stack>) -> Value {
    event_json_with(ev, stack.map(stack_json), stack.and_then(|s| s.truncated.clone()))
}

/// The `stack` field: the frames.
pub fn stack_json(s: &Stack) -> Value {
    Value::Array(s.frames.iter().map(frame_json).collect())
}

/// An event with its stack's frames already built (see [`stack_json`]).
fn event_json_with(ev: &Event, stack: Option<Value>, truncated: Option<String>) -> Value {
    json!({
        "time": ev.time,
        "tid": ev.tid,
        "probe": ev.probe.as_deref(),
        "location": ev.func.as_deref(),
        "syscall": ev.func.is_none().then(|| syscall_name(ev.nr)),
        "nr": ev.func.is_none().then_some(ev.nr),
        "regs": ev.regs.iter().map(|(r, v)| (format!("{r:?}").to_lowercase(), Value::from(hex(*v)))).collect::<serde_json::Map<_, _>>(),
        "args": ev.args.iter().map(|&a| hex(a)).collect::<Vec<_>>(),
        "ret": ev.ret.map(hex),
        "errno": ev.ret.and_then(errno_of).map(errno_name),
        "ret_missing": ev.ret_missing,
        "stack": stack,
        "stack_truncated": truncated,
    })
}

/// One event line, as `line(w, "event", event_json(..))` writes it; `stack` is the rendered `stack` field.
fn write_event(w: &mut impl Write, ev: &Event, stack: Option<&str>, truncated: Option<&str>) -> std::io::Result<()> {
    let js = |w: &mut dyn Write, v: &dyn erased::Ser| v.write(w);
    w.write_all(b"{\"data\":{\"args\":[")?;
    for (i, &a) in ev.args.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        write_hex_str(w, a)?;
    }
    w.write_all(b"],\"errno\":")?;
    js(w, &ev.ret.and_then(errno_of).map(errno_name))?;
    w.write_all(b",\"location\":")?;
    js(w, &ev.func.as_deref())?;
    w.write_all(b",\"nr\":")?;
    js(w, &ev.func.is_none().then_some(ev.nr))?;
    w.write_all(b",\"probe\":")?;
    js(w, &ev.probe.as_deref())?;
    w.write_all(b",\"regs\":")?;
    let regs: serde_json::Map<String, Value> =
        ev.regs.iter().map(|(r, v)| (format!("{r:?}").to_lowercase(), Value::from(hex(*v)))).collect();
    js(w, &regs)?;
    w.write_all(b",\"ret\":")?;
    match ev.ret {
        Some(v) => write_hex_str(w, v)?,
        None => w.write_all(b"null")?,
    }
    w.write_all(b",\"ret_missing\":")?;
    js(w, &ev.ret_missing.as_deref())?;
    w.write_all(b",\"stack\":")?;
    w.write_all(stack.unwrap_or("null").as_bytes())?;
    w.write_all(b",\"stack_truncated\":")?;
    js(w, &truncated)?;
    w.write_all(b",\"syscall\":")?;
    js(w, &ev.func.is_none().then(|| syscall_name(ev.nr)))?;
    w.write_all(b",\"tid\":")?;
    js(w, &ev.tid)?;
    w.write_all(b",\"time\":")?;
    js(w, &ev.time)?;
    w.write_all(b"},\"type\":\"event\"}\n")
}

/// serde_json's writer behind a trait object, for [`write_event`]'s fields of different types.
mod erased {
    pub trait Ser {
        fn write(&self, w: &mut dyn std::io::Write) -> std::io::Result<()>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn write(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
            serde_json::to_writer(w, self).map_err(std::io::Error::from)
        }
    }
}

pub fn line(w: &mut impl Write, kind: &str, data: Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, &json!({"type": kind, "data": data}))?;
    writeln!(w)
}

/// The JSON Lines of `lines` (written by [`line`] for one process) again, with `"pid": pid` in each line's data:
/// a command that looks at several processes tags every line with the process it is of.
pub fn with_pid(lines: &[u8], pid: i32, w: &mut impl Write) -> std::io::Result<()> {
    for l in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let mut v: Value = serde_json::from_slice(l).map_err(std::io::Error::other)?;
        if let Some(data) = v.get_mut("data").and_then(Value::as_object_mut) {
            data.insert("pid".into(), json!(pid));
        }
        serde_json::to_writer(&mut *w, &v)?;
        writeln!(w)?;
    }
    Ok(())
}

impl<W: Write> Renderer for Json<W> {
    fn leaks(&mut self, report: &crate::analysis::leaks::LeakReport) -> std::io::Result<()> {
        report.write_json(&mut self.out)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn event(&mut self, ev: &Event, stack: Option<&Stack>) -> std::io::Result<()> {
        line(&mut self.out, "event", event_json(ev, stack))
    }

    /// The same bytes as [`Self::event`], written field by field (in serde_json's sorted key order) with each
    /// distinct stack rendered once: a burst repeats a few stacks thousands of times, and building a JSON value
    /// tree per event was most of the analysis thread's time.
    fn event_interned(&mut self, ev: &Event, stack: Option<(usize, &Stack)>) -> std::io::Result<()> {
        let frames = match stack {
            Some((id, s)) => {
                if self.cache.len() <= id {
                    self.cache.resize(id + 1, None);
                }
                Some(&**self.cache[id].get_or_insert_with(|| stack_json(s).to_string()))
            }
            None => None,
        };
        write_event(&mut self.out, ev, frames, stack.and_then(|(_, s)| s.truncated.as_deref()))
    }

    fn summary(&mut self, s: &Summary) -> std::io::Result<()> {
        let (end, status) = match &s.end {
            Some(End::Duration) | None => ("duration", None),
            Some(End::Signal(sig)) => ("signal", Some(*sig)),
            Some(End::Exited(c)) => ("target_exited", Some(*c)),
            Some(End::Killed(sig)) => ("target_killed", Some(*sig)),
            Some(End::Exec) => ("target_exec", None),
            Some(End::Fault) => ("fault", None),
        };
        line(
            &mut self.out,
            "summary",
            json!({
                "schema": SCHEMA_VERSION,
                "end": end,
                "end_value": status,
                "duration": s.duration.as_secs_f64(),
                "hits": s.hits,
                "matching": s.matching,
                "events_by_tid": s.events_by_tid.iter().map(|(t, n)| (t.to_string(), Value::from(*n))).collect::<serde_json::Map<_, _>>(),
                "threads_seen": s.threads_seen,
                "stopped_ms": s.stopped.as_secs_f64() * 1e3,
                "target_run_delay_ms": s.target_run_delay.as_ref().map(|d| d.wait_ns as f64 / 1e6),
                "target_run_delay_threads": s.target_run_delay.as_ref().map(|d| d.threads),
                "target_run_delay_uncounted": s.target_run_delay.as_ref().map(|_| s.run_delay_uncounted()),
                "tracer_run_delay_ms": s.tracer_run_delay_ns.map(|ns| ns as f64 / 1e6),
                "attach_ms": s.attach.as_secs_f64() * 1e3,
                "arm_ms": s.arm.as_secs_f64() * 1e3,
                "detach_ms": s.detach.as_secs_f64() * 1e3,
                "unwind_ns_per_frame": s.unwind_ns_per_frame,
                "symbolize_first_ns_per_frame": s.symbolize_first_ns_per_frame,
                "symbolize_cached_ns_per_frame": s.symbolize_cached_ns_per_frame,
                "analysis_events_per_s": s.analysis_events_per_s,
                "python_us_per_event": s.python_us_per_event,
                "emulated": s.emulated,
                "slow_path": s.slow_path,
                "from_record": s.from_record,
                "from_ring": s.from_ring,
                "from_known": s.from_known,
                "fast_stops": s.fast_stops,
                "ring_full_stops": s.ring_full_stops,
                "malloc_sampled": s.malloc_sampled,
                "pad_restored": s.pad_restored,
                "fault_samples": s.fault_samples,
                "fault_period_max": s.fault_period_max,
                "forks_cleaned": s.forks_cleaned,
                "signals_forwarded": s.signals_forwarded,
                "warnings": s.warnings,
                "notes": s.notes,
                "watched": s.watched,
                "nested_calls": s.nested,
            }),
        )?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_strings_are_what_format_gives() {
        for v in [0u64, 1, 9, 10, 0xf, 0x10, 0x7fff_1234_abcd, u64::MAX] {
            let mut out = Vec::new();
            super::write_hex_str(&mut out, v).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), format!("\"{v:#x}\""));
        }
    }

    #[test]
    fn lines_tagged_with_their_pid() {
        let mut one = Vec::new();
        super::line(&mut one, "hook", serde_json::json!({"function": "mmap"})).unwrap();
        super::line(&mut one, "verdict", serde_json::json!({"text": "x"})).unwrap();
        let mut out = Vec::new();
        super::with_pid(&one, 42, &mut out).unwrap();
        let got: Vec<serde_json::Value> =
            String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], serde_json::json!({"type": "hook", "data": {"function": "mmap", "pid": 42}}));
        assert_eq!(got[1]["data"]["pid"], 42);
        assert!(super::with_pid(b"{not json\n", 1, &mut Vec::new()).is_err());
    }
}
