//! Where CPython keeps what a frame walk needs, per minor version: offsets into `_PyRuntime`, the interpreter
//! and thread states, frames and code objects. 3.9-3.12 are fixed tables (measured with `offsetof` against each
//! version's own internal headers, x86_64, default non-debug build); 3.13 publishes its offsets in
//! `_Py_DebugOffsets` at the start of `_PyRuntime`, parsed by [`parse_debug_offsets`].

/// How a code object maps instruction offsets to lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFormat {
    /// 3.9 `co_lnotab`, looked up by byte offset.
    Lnotab,
    /// 3.10 `co_linetable`: (bytes, line delta) pairs, looked up by byte offset.
    Linetable310,
    /// 3.11+ location table, looked up by code unit.
    Locations,
}

/// How a thread's frames are chained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// 3.9/3.10: `PyFrameObject`s linked by `f_back`; one `_PyEval_EvalFrameDefault` call per frame.
    Objects,
    /// 3.11: `_PyInterpreterFrame`s; `is_entry` marks the outermost frame of each eval call.
    Entry311,
    /// 3.12+: `_PyInterpreterFrame`s; a shim frame owned by the C stack ends each eval call.
    Shim312,
}

/// Offsets for one CPython minor version (bytes, unless named otherwise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub version: (u8, u8),
    /// Where the offsets came from.
    pub source: LayoutSource,
    pub frames: FrameKind,
    pub lines: LineFormat,
    pub runtime_interpreters_head: u64,
    /// 3.13+: `_PyRuntime._finalizing` (the thread state that finalizes the runtime, 0 before).
    pub runtime_finalizing: Option<u64>,
    pub interp_next: u64,
    pub interp_threads_head: u64,
    pub ts_next: u64,
    /// `pthread_self()` of the thread.
    pub ts_thread_id: u64,
    /// The kernel's tid (3.11+).
    pub ts_native_thread_id: Option<u64>,
    /// 3.11/3.12: the `_PyCFrame *cframe` whose `current_frame` is the innermost frame.
    pub ts_cframe: Option<u64>,
    pub cframe_current_frame: u64,
    /// The innermost frame directly (3.9/3.10 `frame`, 3.13 `current_frame`).
    pub ts_frame: Option<u64>,
    /// 3.11+: the data stack chunk holding most frames, and its top.
    pub ts_datastack: Option<(u64, u64)>,
    /// Bytes of the thread state to read (covers every offset above).
    pub ts_size: u64,
    /// Frame fields: the code (3.13: any executable), the caller, the instruction pointer (3.9/3.10: `f_lasti`,
    /// an int), the owner byte (3.11+), `is_entry` (3.11).
    pub frame_code: u64,
    /// Low bits of the frame's code pointer that are tags, not address (3.14+: a `_PyStackRef`).
    pub frame_code_tags: u64,
    pub frame_back: u64,
    pub frame_instr: u64,
    pub frame_owner: Option<u64>,
    pub frame_is_entry: Option<u64>,
    pub frame_size: u64,
    pub code_filename: u64,
    pub code_name: u64,
    pub code_qualname: Option<u64>,
    pub code_linetable: u64,
    pub code_firstlineno: u64,
    /// 3.11+: where the bytecode starts inside the code object, and `_co_firsttraceable` (an int).
    pub code_adaptive: Option<u64>,
    pub code_firsttraceable: Option<u64>,
    pub code_size: u64,
    pub unicode_state: u64,
    pub unicode_length: u64,
    /// Size of `PyASCIIObject` and of `PyCompactUnicodeObject`: where compact string data starts.
    pub unicode_ascii_size: u64,
    pub unicode_compact_size: u64,
    pub bytes_size: u64,
    pub bytes_sval: u64,
}

/// Where a [`Layout`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutSource {
    /// syscatch's own table for the version (3.9 to 3.12).
    Table,
    /// The interpreter's own `_Py_DebugOffsets` (3.13+).
    DebugOffsets,
}

impl LayoutSource {
    pub fn describe(self) -> &'static str {
        match self {
            LayoutSource::Table => "syscatch's table for this version",
            LayoutSource::DebugOffsets => "the interpreter's own _Py_DebugOffsets",
        }
    }
}

/// `owner` of a 3.12+ frame that is not a Python function's: the shim (3.12, 3.13: FRAME_OWNED_BY_CSTACK; 3.14,
/// 3.15: FRAME_OWNED_BY_INTERPRETER) that each `_PyEval_EvalFrameDefault` call pushes, and from this value on
/// (3.14's FRAME_OWNED_BY_CSTACK is 4; 3.15's thread state ends every chain with a base frame of its own).
pub const FRAME_OWNED_BY_CSTACK: u8 = 3;
/// `owner` of a generator's frame (never incomplete).
pub const FRAME_OWNED_BY_GENERATOR: u8 = 1;

/// The fixed table of a version without debug offsets; `None` for versions not supported this way.
pub fn layout_for(major: u8, minor: u8) -> Option<Layout> {
    let base = Layout {
        version: (major, minor),
        source: LayoutSource::Table,
        frames: FrameKind::Objects,
        lines: LineFormat::Lnotab,
        runtime_interpreters_head: 32,
        // 3.9 and 3.10 alike (offsetof against their headers).
        runtime_finalizing: Some(16),
        interp_next: 0,
        interp_threads_head: 8,
        ts_next: 8,
        ts_thread_id: 176,
        ts_native_thread_id: None,
        ts_cframe: None,
        cframe_current_frame: 0,
        ts_frame: Some(24),
        ts_datastack: None,
        ts_size: 184,
        frame_code: 32,
        frame_code_tags: 0,
        frame_back: 24,
        frame_instr: 104,
        frame_owner: None,
        frame_is_entry: None,
        frame_size: 112,
        code_filename: 104,
        code_name: 112,
        code_qualname: None,
        code_linetable: 120,
        code_firstlineno: 40,
        code_adaptive: None,
        code_firsttraceable: None,
        code_size: 128,
        unicode_state: 32,
        unicode_length: 16,
        unicode_ascii_size: 48,
        unicode_compact_size: 72,
        bytes_size: 16,
        bytes_sval: 32,
    };
    match (major, minor) {
        (3, 9) => Some(base),
        (3, 10) => Some(Layout { lines: LineFormat::Linetable310, frame_instr: 96, ..base }),
        (3, 11) => Some(Layout {
            frames: FrameKind::Entry311,
            lines: LineFormat::Locations,
            runtime_interpreters_head: 40,
            interp_threads_head: 16,
            ts_thread_id: 152,
            ts_native_thread_id: Some(160),
            ts_cframe: Some(56),
            cframe_current_frame: 8,
            ts_frame: None,
            ts_datastack: Some((296, 304)),
            ts_size: 320,
            frame_code: 32,
            frame_back: 48,
            frame_instr: 56,
            frame_owner: Some(69),
            frame_is_entry: Some(68),
            frame_size: 72,
            code_filename: 112,
            code_name: 120,
            code_qualname: Some(128),
            code_linetable: 136,
            code_firstlineno: 72,
            code_adaptive: Some(184),
            code_firsttraceable: Some(168),
            code_size: 184,
            ..base
        }),
        (3, 12) => Some(Layout {
            frames: FrameKind::Shim312,
            lines: LineFormat::Locations,
            runtime_interpreters_head: 40,
            interp_threads_head: 72,
            ts_thread_id: 136,
            ts_native_thread_id: Some(144),
            ts_cframe: Some(56),
            cframe_current_frame: 0,
            ts_frame: None,
            ts_datastack: Some((232, 240)),
            ts_size: 256,
            frame_code: 0,
            frame_back: 8,
            frame_instr: 56,
            frame_owner: Some(70),
            frame_is_entry: None,
            frame_size: 72,
            code_filename: 112,
            code_name: 120,
            code_qualname: Some(128),
            code_linetable: 136,
            code_firstlineno: 68,
            code_adaptive: Some(192),
            code_firsttraceable: Some(176),
            code_size: 192,
            unicode_ascii_size: 40,
            unicode_compact_size: 56,
            ..base
        }),
        _ => None,
    }
}

/// The cookie at the start of `_Py_DebugOffsets`.
pub const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// Where the fields a walk needs sit in one minor version's `_Py_DebugOffsets`, in 8-byte words from its start
/// (the cookie is word 0, the version word 1). Each version adds fields in the middle of the structure, so the
/// words move; the values in them are the version's own `offsetof()`s.
#[derive(Debug, Clone, Copy)]
struct Words {
    minor: u8,
    interpreters_head: usize,
    interp_next: usize,
    interp_threads_head: usize,
    ts_next: usize,
    ts_current_frame: usize,
    ts_thread_id: usize,
    ts_native_thread_id: usize,
    ts_datastack_chunk: usize,
    frame_previous: usize,
    frame_executable: usize,
    frame_instr_ptr: usize,
    frame_owner: usize,
    code_filename: usize,
    code_name: usize,
    code_qualname: usize,
    code_linetable: usize,
    code_firstlineno: usize,
    code_adaptive: usize,
    bytes_ob_size: usize,
    bytes_sval: usize,
    unicode_state: usize,
    unicode_length: usize,
    unicode_ascii_size: usize,
}

/// 3.13.0 (73 words); 3.14 adds the interpreter's code object and TLBC generations, the frame's stack pointer
/// and TLBC index, `co_tlbc`, the set object, generators, `llist_node` and the remote debugger's fields; 3.15
/// adds the thread state's base frame, last profiled frame, exception and GIL fields and the exception stack
/// item, and four type-object words. Read from CPython's `Include/internal/pycore_debug_offsets.h` of each
/// version and checked against the live interpreters of Debian's python3.14 (3.14.10) and python3.15 (3.15.2):
/// `native_thread_id` holds each thread's tid.
const WORDS: [Words; 3] = [
    Words {
        minor: 13,
        interpreters_head: 5,
        interp_next: 8,
        interp_threads_head: 9,
        ts_next: 21,
        ts_current_frame: 23,
        ts_thread_id: 24,
        ts_native_thread_id: 25,
        ts_datastack_chunk: 26,
        frame_previous: 29,
        frame_executable: 30,
        frame_instr_ptr: 31,
        frame_owner: 33,
        code_filename: 35,
        code_name: 36,
        code_qualname: 37,
        code_linetable: 38,
        code_firstlineno: 39,
        code_adaptive: 43,
        bytes_ob_size: 65,
        bytes_sval: 66,
        unicode_state: 68,
        unicode_length: 69,
        unicode_ascii_size: 70,
    },
    Words {
        minor: 14,
        interpreters_head: 5,
        interp_next: 8,
        interp_threads_head: 9,
        ts_next: 24,
        ts_current_frame: 26,
        ts_thread_id: 27,
        ts_native_thread_id: 28,
        ts_datastack_chunk: 29,
        frame_previous: 32,
        frame_executable: 33,
        frame_instr_ptr: 34,
        frame_owner: 36,
        code_filename: 40,
        code_name: 41,
        code_qualname: 42,
        code_linetable: 43,
        code_firstlineno: 44,
        code_adaptive: 48,
        bytes_ob_size: 75,
        bytes_sval: 76,
        unicode_state: 78,
        unicode_length: 79,
        unicode_ascii_size: 80,
    },
    Words {
        minor: 15,
        interpreters_head: 5,
        interp_next: 8,
        interp_threads_head: 9,
        ts_next: 24,
        ts_current_frame: 26,
        ts_thread_id: 30,
        ts_native_thread_id: 31,
        ts_datastack_chunk: 32,
        frame_previous: 40,
        frame_executable: 41,
        frame_instr_ptr: 42,
        frame_owner: 44,
        code_filename: 48,
        code_name: 49,
        code_qualname: 50,
        code_linetable: 51,
        code_firstlineno: 52,
        code_adaptive: 56,
        bytes_ob_size: 87,
        bytes_sval: 88,
        unicode_state: 90,
        unicode_length: 91,
        unicode_ascii_size: 92,
    },
];

/// Bytes of `_Py_DebugOffsets` that [`parse_debug_offsets`] may need (3.15's, through the unicode object).
pub const DEBUG_OFFSETS_LEN: usize = 93 * 8;

/// The minor versions whose `_Py_DebugOffsets` syscatch reads, as said in errors.
pub const DEBUG_OFFSETS_VERSIONS: &str = "3.13 to 3.15";

/// Why a runtime's offsets cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("_Py_DebugOffsets is missing or corrupt (no \"xdebugpy\" cookie)")]
    Cookie,
    #[error("_Py_DebugOffsets: too short")]
    Short,
    #[error(
        "Python {major}.{minor} (_Py_DebugOffsets version {version:#x}) has a layout this syscatch does not know ({known} only)",
        version = .0,
        major = .0 >> 24,
        minor = (.0 >> 16) & 0xff,
        known = DEBUG_OFFSETS_VERSIONS
    )]
    Version(u64),
    #[error("free-threaded CPython builds are not supported")]
    FreeThreaded,
    #[error("_Py_DebugOffsets: offset {0} is out of range")]
    Range(u64),
}

/// The layout from the `_Py_DebugOffsets` of 3.13, 3.14 or 3.15 (the first bytes of `_PyRuntime`, at least
/// [`DEBUG_OFFSETS_LEN`] unless the version needs fewer). Fields not published there: the shim's owner value
/// (`owner >= 3` in 3.12 to 3.15, see [`FRAME_OWNED_BY_CSTACK`]) and `_co_firsttraceable` (16 bytes before the
/// bytecode in 3.11 to 3.15's default builds).
pub fn parse_debug_offsets(data: &[u8]) -> Result<Layout, LayoutError> {
    if data.len() < 8 || &data[..8] != DEBUG_COOKIE {
        return Err(LayoutError::Cookie);
    }
    let f = |i: usize| -> Option<u64> { Some(u64::from_le_bytes(data.get(i * 8..i * 8 + 8)?.try_into().ok()?)) };
    let version = f(1).ok_or(LayoutError::Short)?;
    let w = WORDS.iter().find(|w| version >> 16 == 0x0300 | w.minor as u64).ok_or(LayoutError::Version(version))?;
    if data.len() < (w.unicode_ascii_size + 1) * 8 {
        return Err(LayoutError::Short);
    }
    if f(2) != Some(0) {
        return Err(LayoutError::FreeThreaded);
    }
    // Thread states, frames, code objects and strings are small structs; the runtime and interpreter states are
    // large but not megabytes. Anything beyond is corrupt (and would make syscatch read and allocate too much).
    let bounded = |i: usize, limit: u64| -> Result<u64, LayoutError> {
        let v = f(i).ok_or(LayoutError::Short)?;
        if v < limit { Ok(v) } else { Err(LayoutError::Range(v)) }
    };
    let big = |i: usize| bounded(i, 1 << 20);
    let off = |i: usize| bounded(i, 4096);
    let adaptive = off(w.code_adaptive)?;
    let (ts_next, ts_frame, ts_thread_id, ts_native) =
        (off(w.ts_next)?, off(w.ts_current_frame)?, off(w.ts_thread_id)?, off(w.ts_native_thread_id)?);
    let datastack = off(w.ts_datastack_chunk)?;
    let (frame_back, frame_code, frame_instr, frame_owner) =
        (off(w.frame_previous)?, off(w.frame_executable)?, off(w.frame_instr_ptr)?, off(w.frame_owner)?);
    let ascii = off(w.unicode_ascii_size)?;
    Ok(Layout {
        version: (3, w.minor),
        source: LayoutSource::DebugOffsets,
        frames: FrameKind::Shim312,
        lines: LineFormat::Locations,
        runtime_interpreters_head: big(w.interpreters_head)?,
        // `runtime_state.finalizing`, the word before `interpreters_head` in every version.
        runtime_finalizing: Some(big(w.interpreters_head - 1)?),
        interp_next: big(w.interp_next)?,
        interp_threads_head: big(w.interp_threads_head)?,
        ts_next,
        ts_thread_id,
        ts_native_thread_id: Some(ts_native),
        ts_cframe: None,
        cframe_current_frame: 0,
        ts_frame: Some(ts_frame),
        ts_datastack: Some((datastack, datastack + 8)),
        ts_size: [ts_next, ts_frame, ts_thread_id, ts_native, datastack + 8].into_iter().max().unwrap_or(0) + 8,
        frame_code,
        // 3.14 made `f_executable` a `_PyStackRef`: a pointer whose low bits are tags (Py_TAG_BITS is 3).
        frame_code_tags: if w.minor >= 14 { 3 } else { 0 },
        frame_back,
        frame_instr,
        frame_owner: Some(frame_owner),
        frame_is_entry: None,
        frame_size: [frame_back, frame_code, frame_instr, frame_owner].into_iter().max().unwrap_or(0) + 8,
        code_filename: off(w.code_filename)?,
        code_name: off(w.code_name)?,
        code_qualname: Some(off(w.code_qualname)?),
        code_linetable: off(w.code_linetable)?,
        code_firstlineno: off(w.code_firstlineno)?,
        code_adaptive: Some(adaptive),
        code_firsttraceable: adaptive.checked_sub(16),
        code_size: adaptive,
        unicode_state: off(w.unicode_state)?,
        unicode_length: off(w.unicode_length)?,
        unicode_ascii_size: ascii,
        // PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
        unicode_compact_size: ascii + 16,
        bytes_size: off(w.bytes_ob_size)?,
        bytes_sval: off(w.bytes_sval)?,
    })
}

/// `(3, 11)` from a module's file name: `libpython3.11.so.1.0`, `python3.11`, `libpython3.9d.so`.
pub fn parse_version_from_name(name: &str) -> Option<(u8, u8)> {
    let rest = name.strip_prefix("lib").unwrap_or(name).strip_prefix("python")?;
    let (maj, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((maj.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_names() {
        assert_eq!(parse_version_from_name("libpython3.11.so.1.0"), Some((3, 11)));
        assert_eq!(parse_version_from_name("python3.9"), Some((3, 9)));
        assert_eq!(parse_version_from_name("libpython3.13d.so"), Some((3, 13)));
        assert_eq!(parse_version_from_name("python"), None);
        assert_eq!(parse_version_from_name("libc.so.6"), None);
    }

    #[test]
    fn debug_offsets_of_313_match_its_headers() {
        // The first bytes of a live 3.13.0 `_PyRuntime` (after the fuzz seed's 32-byte header).
        let image = include_bytes!("../../fuzz/corpus/python/debug-offsets-3.13");
        let l = parse_debug_offsets(&image[32..]).unwrap();
        // offsetof() against 3.13.0's own headers.
        assert_eq!(l.runtime_interpreters_head, 632);
        assert_eq!(l.runtime_finalizing, Some(608));
        assert_eq!((l.interp_next, l.interp_threads_head), (7264, 7344));
        assert_eq!((l.ts_next, l.ts_frame, l.ts_native_thread_id), (8, Some(72), Some(160)));
        assert_eq!(l.ts_datastack, Some((232, 240)));
        assert_eq!((l.frame_code, l.frame_back, l.frame_instr, l.frame_owner), (0, 8, 56, Some(70)));
        assert_eq!((l.code_filename, l.code_name, l.code_qualname, l.code_linetable), (112, 120, Some(128), 136));
        assert_eq!((l.code_firstlineno, l.code_adaptive, l.code_firsttraceable), (68, Some(200), Some(184)));
        assert_eq!((l.unicode_ascii_size, l.unicode_compact_size, l.bytes_sval), (40, 56, 32));
    }

    #[test]
    fn debug_offsets_of_314_and_315_match_their_interpreters() {
        // The first bytes of `_PyRuntime` in Debian's python3.14 (3.14.10) and python3.15 (3.15.2).
        let image = include_bytes!("../../fuzz/corpus/python/debug-offsets-3.14");
        let l = parse_debug_offsets(&image[32..]).unwrap();
        assert_eq!((l.version, l.source, l.frame_code_tags), ((3, 14), LayoutSource::DebugOffsets, 3));
        assert_eq!((l.runtime_interpreters_head, l.interp_threads_head), (808, 7344));
        // The tid is at 160 in a live thread state; the data stack chunk at 232.
        assert_eq!(
            (l.ts_next, l.ts_frame, l.ts_native_thread_id, l.ts_datastack),
            (8, Some(72), Some(160), Some((232, 240)))
        );
        assert_eq!((l.frame_code, l.frame_back, l.frame_instr, l.frame_owner), (0, 8, 56, Some(74)));
        assert_eq!((l.code_filename, l.code_name, l.code_qualname, l.code_linetable), (112, 120, Some(128), 136));
        assert_eq!((l.code_firstlineno, l.code_adaptive, l.code_firsttraceable), (68, Some(208), Some(192)));
        assert_eq!((l.unicode_state, l.unicode_ascii_size, l.bytes_sval), (32, 40, 32));
        let image = include_bytes!("../../fuzz/corpus/python/debug-offsets-3.15");
        let l = parse_debug_offsets(&image[32..]).unwrap();
        assert_eq!(l.version, (3, 15));
        assert_eq!((l.runtime_interpreters_head, l.interp_threads_head), (936, 7336));
        assert_eq!((l.ts_thread_id, l.ts_native_thread_id, l.ts_datastack), (176, Some(184), Some((256, 264))));
        assert_eq!((l.frame_code, l.frame_back, l.frame_instr, l.frame_owner), (0, 8, 56, Some(74)));
        assert_eq!((l.code_filename, l.code_linetable, l.code_firstlineno, l.code_adaptive), (112, 136, 68, Some(208)));
        assert_eq!((l.unicode_state, l.unicode_length, l.unicode_ascii_size, l.bytes_sval), (32, 16, 40, 32));
    }

    #[test]
    fn debug_offsets_refused_unless_known() {
        assert_eq!(parse_debug_offsets(b"nothing"), Err(LayoutError::Cookie));
        let mut d = vec![0u8; DEBUG_OFFSETS_LEN];
        d[..8].copy_from_slice(DEBUG_COOKIE);
        d[8..16].copy_from_slice(&0x0310_00a1u64.to_le_bytes());
        let e = parse_debug_offsets(&d).unwrap_err();
        assert_eq!(e, LayoutError::Version(0x0310_00a1));
        assert_eq!(
            e.to_string(),
            "Python 3.16 (_Py_DebugOffsets version 0x31000a1) has a layout this syscatch does not know (3.13 to 3.15 only)"
        );
        d[8..16].copy_from_slice(&0x030d_00f0u64.to_le_bytes());
        assert!(parse_debug_offsets(&d).is_ok());
        // 3.13 needs 73 words, 3.15 93.
        assert!(parse_debug_offsets(&d[..73 * 8]).is_ok());
        d[8..16].copy_from_slice(&0x030f_02f0u64.to_le_bytes());
        assert_eq!(parse_debug_offsets(&d[..73 * 8]), Err(LayoutError::Short));
        d[16] = 1;
        assert_eq!(parse_debug_offsets(&d), Err(LayoutError::FreeThreaded));
    }
}
