//! The interpreter of a live process: which mapped module defines `_PyRuntime` (libpython, or a statically linked
//! `python`), its version (3.13+'s `_Py_DebugOffsets`, else `Py_Version`, else the file name), and the per-event
//! read of a stopped thread's frames through process_vm_readv (batched, see [`crate::python::batch`]), with the captured
//! stack window served from its copy.

use super::resolve;
use crate::model::modules::{self, Module};
use crate::model::regs::Regs;
use crate::os::Tid;
use crate::os::mem::{self, ProcMem};
use crate::python::batch::Prefetcher;
use crate::python::layout::{self, DEBUG_OFFSETS_LEN, Layout};
use crate::python::walk::{Runtime, Walker};
use crate::python::{Memory, PyFrame};
use std::collections::HashSet;
use std::sync::Arc;

/// Why a process whose modules include a CPython runtime cannot have its frames read (said once; native frames
/// go on without them).
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error(transparent)]
    Maps(#[from] super::Error),
    #[error(transparent)]
    Layout(#[from] crate::python::layout::LayoutError),
    #[error("{name}: cannot tell its Python version")]
    UnknownVersion { name: String },
    #[error("Python {}.{}: _Py_DebugOffsets not found", .version.0, .version.1)]
    NoDebugOffsets { version: (u8, u8) },
    #[error("Python {}.{} is not supported (3.9 to 3.15 are)", .version.0, .version.1)]
    Unsupported { version: (u8, u8) },
    #[error("{path}: no PyCode_Type symbol to check code objects against")]
    NoCodeType { path: String },
}

/// Reads the target's memory, serving ranges from the local copy of the stack first.
struct LiveMem<'a> {
    pid: Tid,
    copy: (u64, &'a [u8]),
}

impl LiveMem<'_> {
    fn copied(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let (base, bytes) = self.copy;
        let off = usize::try_from(addr.checked_sub(base)?).ok()?;
        bytes.get(off..off.checked_add(len)?)
    }
}

impl Memory for LiveMem<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        if let Some(b) = self.copied(addr, buf.len()) {
            buf.copy_from_slice(b);
            return true;
        }
        mem::read_ranges(self.pid, &[(addr, buf.len() as u64)], buf) == 1
    }

    fn read_ranges(&mut self, ranges: &[(u64, u64)], buf: &mut [u8], ok: &mut Vec<bool>) {
        ok.clear();
        let mut off = 0usize;
        let mut i = 0;
        while i < ranges.len() {
            let done = mem::read_ranges(self.pid, &ranges[i..], buf.get_mut(off..).unwrap_or_default());
            for &(_, len) in &ranges[i..i + done] {
                ok.push(true);
                off += len as usize;
            }
            // The kernel stops at the first unreadable range: skip it and go on with the rest.
            let Some(&(_, len)) = ranges.get(i + done) else { break };
            ok.push(false);
            off = off.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
            i += done + 1;
        }
    }

    fn is_local(&self, addr: u64, len: usize) -> bool {
        self.copied(addr, len).is_some()
    }
}

/// The Python interpreter of one process, ready to read its threads' frames.
pub struct PythonReader {
    pid: Tid,
    walker: Walker,
    batch: Prefetcher,
    /// Why walks failed, each reason once.
    pub warnings: Vec<String>,
    pub failed: u64,
    /// Walks done and the time they took (the thread is stopped meanwhile).
    pub walks: u64,
    pub time: std::time::Duration,
    /// 3.9, 3.10 and 3.13+: where each thread's bound thread state is (the start of known stacks' frame checks),
    /// or why it cannot be known.
    bound: Result<super::pystate::BoundSlot, String>,
    /// The addresses of the module that holds the interpreter (libpython or the python executable).
    range: (u64, u64),
    last: Walked,
}

/// What the last walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walked {
    Frames,
    NoFrames,
    Failed,
}

impl PythonReader {
    /// The checks that a later call's Python frames are the ones the last walk found (see
    /// [`crate::python::known`]), for a thread whose thread pointer is `tp` and whose stack was copied from `rsp`
    /// for `stack_len` bytes.
    pub fn known_ops(&self, tp: u64, rsp: u64, stack_len: usize) -> Option<Vec<crate::model::known::Op>> {
        use crate::python::known::Start;
        let w = &self.walker;
        let start = if w.rt.layout.ts_cframe.is_some() {
            Start::CFrame(w.cframe)
        } else {
            let b = self.bound.as_ref().ok()?;
            let read = |a: u64| {
                let mut v = [0u8; 8];
                (mem::read_ranges(self.pid, &[(a, 8)], &mut v) == 1).then(|| u64::from_le_bytes(v))
            };
            let slot = b.slot(tp, &read)?;
            // The thread's bound thread state is the one the walk read (not so while it has none, or another).
            if w.tstate == 0 || read(tp.wrapping_add_signed(slot as i64)) != Some(w.tstate) {
                return None;
            }
            Start::Bound { tstate: w.tstate, slot, finalizing: b.finalizing }
        };
        crate::python::known::chain_ops(&w.rt.layout, (start, &w.chain), rsp, stack_len, |c| w.fingerprint(c))
    }

    /// What the last walk ([`Self::read_frames`]) found.
    pub fn last_walk(&self) -> Walked {
        self.last
    }

    /// The addresses of the interpreter's module (start, end).
    pub fn interp_range(&self) -> (u64, u64) {
        self.range
    }

    /// Why the frames of this interpreter's calls cannot be made known stacks, if they cannot.
    pub fn known_problem(&self) -> Option<String> {
        let l = &self.walker.rt.layout;
        match &self.bound {
            Err(e) if l.ts_cframe.is_none() => Some(format!("Python {}.{}: {e}", l.version.0, l.version.1)),
            _ => None,
        }
    }

    /// Forgets what was remembered about thread `tid`'s frames (it exited).
    pub fn forget_thread(&mut self, tid: Tid) {
        self.batch.forget(tid);
        self.walker.forget(tid);
    }

    /// Finds the interpreter of process `pid`: `Ok(None)` if no mapped module defines `_PyRuntime`; `Err` names
    /// why a Python process cannot be read (unsupported version, corrupt offsets).
    pub fn locate(pid: Tid) -> Result<Option<PythonReader>, LocateError> {
        Self::locate_new(pid, &mut HashSet::new())
    }

    /// [`Self::locate`] looking only at modules not in `seen` (path and load address), which it adds: a host
    /// that loads libpython with dlopen after the trace started is found by calling this again.
    pub fn locate_new(pid: Tid, seen: &mut HashSet<(String, u64)>) -> Result<Option<PythonReader>, LocateError> {
        let maps = resolve::read_maps(pid)?;
        let mut procmem = None;
        for g in modules::group_modules(&maps) {
            let name = modules::file_name(&g.path);
            // Only libpython or a python executable defines the runtime: no need to read every library.
            if !name.contains("python") || name.ends_with(".pyc") || !seen.insert((g.path.clone(), g.start)) {
                continue;
            }
            let procmem = procmem.get_or_insert_with(|| ProcMem::open(pid).ok());
            let Ok(module) = resolve::read_module(pid, &g, procmem.as_ref()) else { continue };
            let Some((runtime, _)) = module.find_symbol("_PyRuntime") else { continue };
            let layout = read_layout(pid, &module, runtime, name)?;
            let bound = match layout.runtime_finalizing {
                Some(fin) => {
                    let libc = modules::group_modules(&maps)
                        .into_iter()
                        .find(|m| modules::file_name(&m.path).starts_with("libc.so"))
                        .and_then(|m| resolve::read_module(pid, &m, procmem.as_ref()).ok());
                    let read = |a: u64| procmem.as_ref().and_then(|m| m.read_u64(a).ok());
                    let size = module.find_symbol("_PyRuntime").map_or(0, |(_, n)| n);
                    super::pystate::find(&module, libc.as_ref(), (runtime, size, fin), &read)
                }
                // 3.11 and 3.12: the chain starts on the C stack.
                None => Err("no bound thread state read".into()),
            };
            let sym = |n: &str| module.find_symbol(n).map(|(a, _)| a).unwrap_or(0);
            let rt = Runtime {
                layout,
                runtime,
                code_type: sym("PyCode_Type"),
                unicode_type: sym("PyUnicode_Type"),
                bytes_type: sym("PyBytes_Type"),
                frame_type: sym("PyFrame_Type"),
            };
            if rt.code_type == 0 {
                return Err(LocateError::NoCodeType { path: g.path.clone() });
            }
            return Ok(Some(PythonReader {
                pid,
                walker: Walker::new(rt),
                batch: Prefetcher::default(),
                warnings: Vec::new(),
                failed: 0,
                walks: 0,
                time: Default::default(),
                bound,
                range: (g.start, g.end),
                last: Walked::Failed,
            }));
        }
        Ok(None)
    }

    /// Reads of the target's memory per walk (one when the thread's frames are where its last walk found them).
    pub fn reads_per_walk(&self) -> Option<f64> {
        (self.walks > 0).then(|| self.batch.reads as f64 / self.walks as f64)
    }

    /// Mean time of a walk, in microseconds.
    pub fn us_per_walk(&self) -> Option<f64> {
        (self.walks > 0).then(|| self.time.as_secs_f64() * 1e6 / self.walks as f64)
    }

    pub fn version(&self) -> (u8, u8) {
        self.walker.rt.layout.version
    }

    /// Which CPython and where its layout came from, for the summary: `Python 3.14 frames read with the
    /// interpreter's own _Py_DebugOffsets`.
    pub fn describe(&self) -> String {
        let l = &self.walker.rt.layout;
        format!("Python {}.{} frames read with {}", l.version.0, l.version.1, l.source.describe())
    }

    /// The Python frames of stopped thread `tid`, innermost first; `stack` is the copy of its stack taken at
    /// `regs.sp()` (shim frames and C frames live there). A failed check gives no frames and one warning.
    pub fn read_frames(&mut self, tid: Tid, regs: &Regs, stack: &[u8]) -> Arc<[PyFrame]> {
        let t0 = std::time::Instant::now();
        let mut m = LiveMem { pid: self.pid, copy: (regs.sp(), stack) };
        let walker = &mut self.walker;
        let walked = self.batch.walk(tid, &mut m, |m| walker.read_frames(m, tid, regs.0.fs_base));
        self.walks += 1;
        self.time += t0.elapsed();
        self.last = match &walked {
            Ok(f) if f.is_empty() => Walked::NoFrames,
            Ok(_) => Walked::Frames,
            Err(_) => Walked::Failed,
        };
        match walked {
            Ok(f) => f,
            Err(e) => {
                self.failed += 1;
                let (maj, min) = self.version();
                let w = format!("Python {maj}.{min} frames left out: {e}");
                if !self.warnings.contains(&w) && self.warnings.len() < 8 {
                    self.warnings.push(w);
                }
                Arc::default()
            }
        }
    }
}

fn read_layout(pid: Tid, module: &Module, runtime: u64, name: &str) -> Result<Layout, LocateError> {
    let head = mem::read_upto(pid, runtime, DEBUG_OFFSETS_LEN);
    if head.starts_with(layout::DEBUG_COOKIE) {
        return Ok(layout::parse_debug_offsets(&head)?);
    }
    let version = match module.find_symbol("Py_Version") {
        Some((addr, _)) => {
            let b = mem::read_upto(pid, addr, 8);
            let v = b.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).unwrap_or(0);
            ((v >> 24) as u8, (v >> 16) as u8)
        }
        None => {
            layout::parse_version_from_name(name).ok_or_else(|| LocateError::UnknownVersion { name: name.into() })?
        }
    };
    if version >= (3, 13) {
        return Err(LocateError::NoDebugOffsets { version });
    }
    layout::layout_for(version.0, version.1).ok_or(LocateError::Unsupported { version })
}
