//! Python frames in native stacks: CPython 3.9-3.15 frame chains read from a stopped thread, named from their
//! code objects, and placed above the native eval-loop call that runs them. Pure: the target's
//! memory comes through the [`Memory`] trait; uses `model` only. Finding the interpreter in a live process and
//! reading its memory is `live::python`.
//!
//! [`layout`] knows each version's offsets, [`lines`] turns line tables into line numbers, [`walk`] follows a
//! thread's frames over any [`Memory`] (pure, fuzzed), [`batch`] makes a walk one read when the thread's frames
//! are where its last walk found them, and [`merge_python`] interleaves the frames with a symbolized native
//! stack.

pub mod batch;
pub mod bound;
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

/// Finds the native frame of each Python frame's eval call (3.12+): the unwound frame whose stack, from its stack
/// pointer `sps[i]` up to its caller's, holds the call's shim frame. That frame is the eval loop whatever its
/// symbols say (a build may split the loop into parts that have none). Frames found get `frame` and lose `shim`
/// (an address, which would tell apart the same stack on two threads); the rest are left as they are.
pub fn place(py: &std::sync::Arc<[PyFrame]>, sps: &[u64]) -> std::sync::Arc<[PyFrame]> {
    if py.iter().all(|p| p.shim == 0) {
        return py.clone();
    }
    let frame_of = |shim: u64| sps.windows(2).position(|w| w[0] <= shim && shim < w[1]);
    py.iter()
        .map(|p| match frame_of(p.shim).and_then(|i| u32::try_from(i).ok()) {
            Some(i) => PyFrame { shim: 0, frame: Some(i), ..p.clone() },
            None => p.clone(),
        })
        .collect()
}

/// Puts Python frames into a symbolized native stack, innermost first: a frame placed by [`place`] goes just
/// above its unwound frame (below the functions inlined there, as if called from the loop), which is named
/// `_PyEval_EvalFrameDefault` if its symbols had no name for it (the shim is that function's local); others, those
/// of eval call k just above the k-th native `_PyEval_EvalFrameDefault` frame. Frames whose eval frame is not in the native
/// stack (it was truncated, or the counts disagree) are appended at the end, marked as not placed.
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
    // The unwound frame that the next frame not inlined is (inlined frames come first, innermost first).
    let mut raw = 0u32;
    let mut next = py.iter().peekable();
    for mut f in stack.frames.drain(..) {
        if f.kind == FrameKind::Native && !f.inlined {
            let mut placed = false;
            while let Some(p) = next.next_if(|p| p.frame == Some(raw)) {
                out.push(to_frame(p, true));
                placed = true;
            }
            if placed && f.function.is_none() {
                f.function = Some(EVAL_FUNCTION.into());
                f.offset = None;
            }
            raw += 1;
        }
        if f.kind == FrameKind::Native && f.function.as_deref() == Some(EVAL_FUNCTION) {
            while let Some(p) = next.next_if(|p| p.frame.is_none() && p.call == call) {
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
        PyFrame { function: name.into(), file: "f.py".into(), line: Some(1), call, shim: 0, frame: None }
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
    fn frames_go_above_the_frame_whose_stack_holds_their_shim() {
        // A build without a symbol for the loop: unwound frames 0 (read), 1 (loop, inlining a helper), 2, 3 (loop).
        let mut s = Stack {
            frames: vec![
                native("read"),
                Frame { inlined: true, ..native("helper") },
                native("python+0x4472e7"),
                native("callback"),
                native("python+0x4472e7"),
                native("main"),
            ],
            truncated: None,
        };
        let sps = [0x1000, 0x1100, 0x1800, 0x1900, 0x2000];
        let shim = |call, shim| PyFrame { shim, ..py("f", call) };
        let frames: std::sync::Arc<[PyFrame]> =
            vec![PyFrame { function: "inner".into(), ..shim(0, 0x1200) }, shim(0, 0x1200), shim(1, 0x1a00)].into();
        let placed = place(&frames, &sps);
        assert_eq!(
            placed.iter().map(|p| (p.frame, p.shim)).collect::<Vec<_>>(),
            [(Some(1), 0), (Some(1), 0), (Some(3), 0)]
        );
        merge_python(&mut s, &placed);
        assert_eq!(
            names(&s),
            ["read", "helper", "py:inner", "py:f", "python+0x4472e7", "callback", "py:f", "python+0x4472e7", "main"]
        );
        // Without a name, the frame holding the shim is the eval loop's.
        let mut s = Stack {
            frames: vec![native("read"), Frame { function: None, ..native("") }, native("main")],
            truncated: None,
        };
        merge_python(&mut s, &place(&vec![shim(0, 0x1200)].into(), &sps));
        assert_eq!(names(&s), ["read", "py:f", EVAL_FUNCTION, "main"]);
        // A shim beyond the unwound frames (the stack was cut) is left to the name, here unplaced.
        let cut = place(&vec![shim(0, 0x9000)].into(), &sps);
        assert_eq!((cut[0].frame, cut[0].shim), (None, 0x9000));
    }

    #[test]
    fn frames_of_missing_eval_calls_are_appended_unplaced() {
        let mut s = Stack { frames: vec![native("syscall"), native(EVAL_FUNCTION)], truncated: Some("x".into()) };
        merge_python(&mut s, &[py("a", 0), py("b", 1), py("c", 1)]);
        assert_eq!(names(&s), ["syscall", "py:a", EVAL_FUNCTION, "py?:b", "py?:c"]);
    }
}
