//! Python frames in native stacks: CPython 3.9-3.13 frame chains read from a stopped thread, named from their
//! code objects, and placed above the native `_PyEval_EvalFrameDefault` call that runs them. Pure: the target's
//! memory comes through the [`Memory`] trait; uses `model` only. Finding the interpreter in a live process and
//! reading its memory is `live::python`.
//!
//! [`layout`] knows each version's offsets, [`lines`] turns line tables into line numbers, [`walk`] follows a
//! thread's frames over any [`Memory`] (pure, fuzzed), [`batch`] makes a walk one read when the thread's frames
//! are where its last walk found them, and [`merge_python`] interleaves the frames with a symbolized native
//! stack.

pub mod batch;
pub mod error;
pub mod known;
pub mod layout;
pub mod lines;
pub mod walk;

use crate::model::stack::{Frame, FrameKind, Stack};

/// Memory of the target as the walk sees it.
pub trait Memory {
    /// Fills `buf` from `addr`; false when any byte of it cannot be read.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool;
    /// Several reads at once (live memory does them in one system call): range `i` (address, length) goes to the
    /// next `length` bytes of `buf`, and `ok` gets one flag per range (false for one that does not fit in `buf`).
    fn read_ranges(&mut self, ranges: &[(u64, u64)], buf: &mut [u8], ok: &mut Vec<bool>) {
        ok.clear();
        let mut rest = buf;
        for &(addr, len) in ranges {
            let Some(n) = usize::try_from(len).ok().filter(|&n| n <= rest.len()) else {
                ok.push(false);
                continue;
            };
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(n);
            ok.push(self.read(addr, head));
            rest = tail;
        }
    }
    /// A hint that `len` bytes at `addr` are about to be read piecewise.
    fn prefetch(&mut self, _addr: u64, _len: u64) {}
    /// True when `len` bytes at `addr` are served from a local copy taken at the stop (the stack window), so
    /// reading them costs no system call.
    fn is_local(&self, _addr: u64, _len: usize) -> bool {
        false
    }
}

pub use crate::model::stack::PyFrame;

/// The native function that runs Python frames (one call per frame up to 3.10, one per run of frames between
/// entry frames from 3.11).
pub const EVAL_FUNCTION: &str = "_PyEval_EvalFrameDefault";

/// Puts Python frames into a symbolized native stack: the frames of eval call k go just above (before, innermost
/// first) the k-th native `_PyEval_EvalFrameDefault` frame. Frames whose eval frame is not in the native stack (it
/// was truncated, or the counts disagree) are appended at the end, marked as not placed.
pub fn merge_python(stack: &mut Stack, py: &[PyFrame]) {
    if py.is_empty() {
        return;
    }
    let to_frame = |p: &PyFrame, placed: bool| Frame {
        kind: if placed { FrameKind::Python } else { FrameKind::PythonUnplaced },
        function: Some(p.function.to_string()),
        file: Some(p.file.to_string()),
        line: p.line,
        ..Frame::default()
    };
    let mut out = Vec::with_capacity(stack.frames.len() + py.len());
    let mut call = 0u32;
    let mut next = py.iter().peekable();
    for f in stack.frames.drain(..) {
        if f.kind == FrameKind::Native && f.function.as_deref() == Some(EVAL_FUNCTION) {
            while let Some(p) = next.next_if(|p| p.call == call) {
                out.push(to_frame(p, true));
            }
            call += 1;
        }
        out.push(f);
    }
    out.extend(next.map(|p| to_frame(p, false)));
    stack.frames = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(name: &str) -> Frame {
        Frame { function: Some(name.into()), ..Frame::default() }
    }
    fn py(name: &str, call: u32) -> PyFrame {
        PyFrame { function: name.into(), file: "f.py".into(), line: Some(1), call }
    }
    fn names(s: &Stack) -> Vec<String> {
        s.frames
            .iter()
            .map(|f| {
                let n = f.function.clone().unwrap_or_default();
                match f.kind {
                    FrameKind::Native => n,
                    FrameKind::Python => format!("py:{n}"),
                    FrameKind::PythonUnplaced => format!("py?:{n}"),
                }
            })
            .collect()
    }

    #[test]
    fn frames_go_above_their_eval_call() {
        let mut s = Stack {
            frames: vec![
                native("syscall"),
                native(EVAL_FUNCTION),
                native("callback"),
                native(EVAL_FUNCTION),
                native("main"),
            ],
            truncated: None,
        };
        merge_python(&mut s, &[py("inner", 0), py("mid", 0), py("outer", 1)]);
        assert_eq!(
            names(&s),
            ["syscall", "py:inner", "py:mid", EVAL_FUNCTION, "callback", "py:outer", EVAL_FUNCTION, "main"]
        );
    }

    #[test]
    fn frames_of_missing_eval_calls_are_appended_unplaced() {
        let mut s = Stack { frames: vec![native("syscall"), native(EVAL_FUNCTION)], truncated: Some("x".into()) };
        merge_python(&mut s, &[py("a", 0), py("b", 1), py("c", 1)]);
        assert_eq!(names(&s), ["syscall", "py:a", EVAL_FUNCTION, "py?:b", "py?:c"]);
    }
}
