//! Why a Python frame walk failed a check. The walk stops at the first bad value and says which; the caller
//! shows it once as a warning (`Python 3.X frames left out: ...`).

/// A check of the frame walk that failed, with the address it was at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    #[error("cannot read _PyRuntime at {0:#x}")]
    Runtime(u64),
    #[error("cannot read the interpreter state at {0:#x}")]
    Interpreter(u64),
    #[error("cannot read the thread state at {0:#x}")]
    ThreadState(u64),
    #[error("cannot read the C frame at {0:#x}")]
    CFrame(u64),
    /// The chain loops, or is longer than the walk follows.
    #[error("the frame chain has a cycle or more than {0} frames")]
    Chain(usize),
    #[error("cannot read the frame at {0:#x}")]
    Frame(u64),
    #[error("the object at {0:#x} in the frame chain is not a frame")]
    NotAFrame(u64),
    #[error("cannot read the code object at {0:#x}")]
    Code(u64),
    #[error("the code object at {addr:#x} is not a code object (type {ty:#x})")]
    NotCode { addr: u64, ty: u64 },
    /// The code objects' headers do not fit in memory (a corrupt layout).
    #[error("code size")]
    CodeSize,
    /// One of a code object's fields (`name`, `file`, `line table`) is not what it should be.
    #[error("code object at {addr:#x}: {field}: {problem}")]
    CodeField { addr: u64, field: &'static str, problem: ObjectError },
}

/// Why a `str` or `bytes` object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    #[error("unreadable")]
    Unreadable,
    #[error("not a str")]
    NotStr,
    #[error("unexpected string (state {state:#x}, length {len})")]
    StrShape { state: u32, len: u64 },
    #[error("unreadable text")]
    UnreadableText,
    #[error("an ASCII string with non-ASCII bytes")]
    NotAscii,
    #[error("not a bytes object")]
    NotBytes,
    #[error("implausible size {0}")]
    Size(u64),
    #[error("unreadable contents")]
    UnreadableContents,
}
