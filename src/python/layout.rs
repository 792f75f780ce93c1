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
    pub frames: FrameKind,
    pub lines: LineFormat,
    pub runtime_interpreters_head: u64,
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

/// `owner` of a 3.12+ frame that lives on the C stack: the shim pushed by each `_PyEval_EvalFrameDefault` call.
pub const FRAME_OWNED_BY_CSTACK: u8 = 3;
/// `owner` of a generator's frame (never incomplete).
pub const FRAME_OWNED_BY_GENERATOR: u8 = 1;

/// The fixed table of a version without debug offsets; `None` for versions not supported this way.
pub fn layout_for(major: u8, minor: u8) -> Option<Layout> {
    let base = Layout {
        version: (major, minor),
        frames: FrameKind::Objects,
        lines: LineFormat::Lnotab,
        runtime_interpreters_head: 32,
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

/// Bytes of `_Py_DebugOffsets` that [`parse_debug_offsets`] needs (3.13: 73 u64 fields).
pub const DEBUG_OFFSETS_LEN: usize = 73 * 8;

/// Why a runtime's offsets cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("_Py_DebugOffsets is missing or corrupt (no \"xdebugpy\" cookie)")]
    Cookie,
    #[error("_Py_DebugOffsets: too short")]
    Short,
    #[error("_Py_DebugOffsets of version {0:#x} has a layout this syscatch does not know (3.13 only)")]
    Version(u64),
    #[error("free-threaded CPython builds are not supported")]
    FreeThreaded,
    #[error("_Py_DebugOffsets: offset {0} is out of range")]
    Range(u64),
}

/// The layout from 3.13's `_Py_DebugOffsets` (the first [`DEBUG_OFFSETS_LEN`] bytes of `_PyRuntime`). Fields
/// not published there (the shim owner value, `_co_firsttraceable`) are 3.13's.
pub fn parse_debug_offsets(data: &[u8]) -> Result<Layout, LayoutError> {
    if data.len() < 8 || &data[..8] != DEBUG_COOKIE {
        return Err(LayoutError::Cookie);
    }
    if data.len() < DEBUG_OFFSETS_LEN {
        return Err(LayoutError::Short);
    }
    let f = |i: usize| -> u64 {
        let b: [u8; 8] = data[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]);
        u64::from_le_bytes(b)
    };
    let version = f(1);
    if version >> 16 != 0x030d {
        return Err(LayoutError::Version(version));
    }
    if f(2) != 0 {
        return Err(LayoutError::FreeThreaded);
    }
    // Thread states, frames, code objects and strings are small structs; the runtime and interpreter states are
    // large but not megabytes. Anything beyond is corrupt (and would make syscatch read and allocate too much).
    let bounded = |i: usize, limit: u64| -> Result<u64, LayoutError> {
        let v = f(i);
        if v < limit { Ok(v) } else { Err(LayoutError::Range(v)) }
    };
    let off = |i: usize| bounded(i, if (5..=18).contains(&i) { 1 << 20 } else { 4096 });
    let adaptive = off(43)?;
    Ok(Layout {
        version: (3, 13),
        frames: FrameKind::Shim312,
        lines: LineFormat::Locations,
        runtime_interpreters_head: off(5)?,
        interp_next: off(8)?,
        interp_threads_head: off(9)?,
        ts_next: off(21)?,
        ts_thread_id: off(24)?,
        ts_native_thread_id: Some(off(25)?),
        ts_cframe: None,
        cframe_current_frame: 0,
        ts_frame: Some(off(23)?),
        ts_datastack: Some((off(26)?, off(26)? + 8)),
        ts_size: [off(21)?, off(23)?, off(24)?, off(25)?, off(26)? + 8].into_iter().max().unwrap_or(0) + 8,
        frame_code: off(30)?,
        frame_back: off(29)?,
        frame_instr: off(31)?,
        frame_owner: Some(off(33)?),
        frame_is_entry: None,
        frame_size: [off(29)?, off(30)?, off(31)?, off(33)?].into_iter().max().unwrap_or(0) + 8,
        code_filename: off(35)?,
        code_name: off(36)?,
        code_qualname: Some(off(37)?),
        code_linetable: off(38)?,
        code_firstlineno: off(39)?,
        code_adaptive: Some(adaptive),
        // `_co_firsttraceable` is 16 bytes before the bytecode in 3.11, 3.12 and 3.13 alike.
        code_firsttraceable: adaptive.checked_sub(16),
        code_size: adaptive,
        unicode_state: off(68)?,
        unicode_length: off(69)?,
        unicode_ascii_size: off(70)?,
        // PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
        unicode_compact_size: off(70)? + 16,
        bytes_size: off(65)?,
        bytes_sval: off(66)?,
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
        assert_eq!((l.interp_next, l.interp_threads_head), (7264, 7344));
        assert_eq!((l.ts_next, l.ts_frame, l.ts_native_thread_id), (8, Some(72), Some(160)));
        assert_eq!(l.ts_datastack, Some((232, 240)));
        assert_eq!((l.frame_code, l.frame_back, l.frame_instr, l.frame_owner), (0, 8, 56, Some(70)));
        assert_eq!((l.code_filename, l.code_name, l.code_qualname, l.code_linetable), (112, 120, Some(128), 136));
        assert_eq!((l.code_firstlineno, l.code_adaptive, l.code_firsttraceable), (68, Some(200), Some(184)));
        assert_eq!((l.unicode_ascii_size, l.unicode_compact_size, l.bytes_sval), (40, 56, 32));
    }

    #[test]
    fn debug_offsets_refused_unless_313() {
        assert_eq!(parse_debug_offsets(b"nothing"), Err(LayoutError::Cookie));
        let mut d = vec![0u8; DEBUG_OFFSETS_LEN];
        d[..8].copy_from_slice(DEBUG_COOKIE);
        d[8..16].copy_from_slice(&0x030e_00f0u64.to_le_bytes());
        assert_eq!(parse_debug_offsets(&d), Err(LayoutError::Version(0x030e_00f0)));
        d[8..16].copy_from_slice(&0x030d_00f0u64.to_le_bytes());
        assert!(parse_debug_offsets(&d).is_ok());
        d[16] = 1;
        assert_eq!(parse_debug_offsets(&d), Err(LayoutError::FreeThreaded));
    }
}
