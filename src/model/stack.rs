//! The stack of one captured call, as reported: frames from innermost outwards, and why the walk stopped.
//! Filled by the unwinder (addresses) and the symbolizer (names, lines).

use std::sync::Arc;

/// What a frame is: a native one (machine code), or a Python function's frame read from the interpreter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FrameKind {
    #[default]
    Native,
    /// Placed just above the native eval-loop frame that runs it.
    Python,
    /// Its eval-loop frame is not in the native stack (truncated unwind): appended after the native frames.
    PythonUnplaced,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameKind,
    /// The frame's pc: the first frame's exact rip, then return addresses.
    pub addr: u64,
    pub module: Option<String>,
    pub function: Option<String>,
    /// Offset of `addr` into `function`.
    pub offset: Option<u64>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// An inlined call shown at the same address as the frame after it.
    pub inlined: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stack {
    pub frames: Vec<Frame>,
    /// Why the unwind ended, when not at the outermost frame (`_start`, a thread's `clone3`).
    pub truncated: Option<String>,
}

impl Stack {
    /// The allocator whose code made this call, when a frame is in it: jemalloc's, tcmalloc's or mimalloc's library
    /// (by its file name), or glibc's malloc (one of its functions in libc, named by libc's symbols or debug file).
    pub fn allocator(&self) -> Option<&'static str> {
        const GLIBC: &[&str] =
            &["malloc", "calloc", "realloc", "memalign", "valloc", "new_heap", "new_arena", "arena_get", "tcache_init"];
        self.frames.iter().find_map(|f| {
            let module = f.module.as_deref()?;
            let file = crate::model::modules::file_name(module);
            let named = ["jemalloc", "tcmalloc", "mimalloc"].into_iter().find(|n| file.contains(n));
            let glibc = crate::model::modules::is_libc(module)
                && (file.starts_with("libc.so.6") || file.starts_with("libc-2."))
                && f.function.as_deref().is_some_and(|n| GLIBC.iter().any(|g| n.contains(g)));
            named.or(glibc.then_some("glibc malloc"))
        })
    }
}

impl Frame {
    /// A frame of libc, which callers are named past: in libc's module, or one of libc's memory entries and its
    /// `syscall()` linked into a static binary.
    pub fn in_libc(&self) -> bool {
        const ENTRIES: &[&str] = &["syscall", "mmap", "mmap64", "__mmap", "munmap", "__munmap", "mremap", "__mremap"];
        self.module.as_deref().is_some_and(crate::model::modules::is_libc)
            || self.function.as_deref().is_some_and(|f| ENTRIES.contains(&f))
    }
}

/// One Python frame of a captured thread.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct PyFrame {
    /// `co_qualname` (3.11+) or `co_name`.
    pub function: Arc<str>,
    pub file: Arc<str>,
    pub line: Option<u32>,
    /// Which native eval-loop call runs it, counted from the innermost (0).
    pub call: u32,
    /// 3.12+: where that call's shim frame (a local of the eval loop) is on the C stack, as read; 0 when not
    /// known. The analysis turns it into [`Self::frame`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shim: u64,
    /// The unwound native frame (index) whose stack holds the shim: the eval loop running this frame, found
    /// without its name (Debian's 3.14 and 3.15 have no symbol for the part of the loop that calls out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<u32>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}
