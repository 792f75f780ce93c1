//! Known stacks (see `crate::x86::known`): the checks that prove a call's stack is one unwound before, as plain
//! data passed from the stop (its Python part) through the unwinding (its native part) back to the tracer.

use crate::model::Tid;

/// One check: the `width` bytes at `off` from base `base` must be `expect`; `dest` (2 to 6) keeps the value,
/// less its `untag` low bits, as a base for later checks. Bases: 0 the stack pointer, 1 the record below it,
/// 2..6 pointers read by checks, 7 the thread pointer. Width 0 reads nothing: `dest` becomes `expect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Op {
    pub base: u8,
    pub dest: u8,
    pub width: u8,
    pub untag: u8,
    pub off: i32,
    pub expect: u64,
}

/// What a stop at a match path that asks the known-stack matcher knows of its call, for the unwinding to turn
/// into a [`Proposal`]: the thread's fs base and the int3 (with rsp, the matcher's key), and the checks of its
/// Python frames (empty when the thread runs none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    pub tid: Tid,
    pub thread: u64,
    pub int3: u64,
    pub python: Vec<Op>,
    /// A thread of a CPython process whose walk found no frames: the interpreter's addresses (start, end), where
    /// its unwound stack must have no frame to be made known. Frames exist only under an eval loop of the
    /// interpreter on the thread's stack, so the same native stack without one has none (a native thread of a
    /// C extension, a progress thread of a communication library).
    pub interp: Option<(u64, u64)>,
}

/// A stack to make known: the matcher's key, the checks, how far above rsp they read, and the capture its later
/// calls are reported with (the stack copy cut to that depth).
#[derive(Clone)]
pub struct Proposal {
    /// Its number, given by the unwinding (which keeps its unwind under it).
    pub id: u32,
    pub tid: Tid,
    pub thread: u64,
    pub rsp: u64,
    pub int3: u64,
    pub depth: u32,
    pub ops: Vec<Op>,
    /// Whether its checks include Python frames (none without a CPython known when its stop was read).
    pub python: bool,
    pub capture: crate::model::event::StackCapture,
}
