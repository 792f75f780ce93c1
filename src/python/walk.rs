//! The frame walk over any [`Memory`]: find the thread's state, follow its frame chain, name each frame from its
//! code object (cached by address and a fingerprint of the code object's header, since addresses are reused),
//! and say which native eval-loop call runs it. Every value read is checked; a bad one fails the walk with a
//! reason, it never panics and never yields a frame that is not there.

use super::error::{ObjectError, WalkError};
use super::layout::{FRAME_OWNED_BY_CSTACK, FRAME_OWNED_BY_GENERATOR, FrameKind, Layout};
use super::lines::parse_line;
use super::{Memory, PyFrame};
use crate::model::addrmap::AddrMap;
use std::collections::HashSet;
use std::sync::Arc;

/// More frames than this is a corrupt chain (the default recursion limit is 1000).
pub const MAX_FRAMES: usize = 4096;
const MAX_THREADS: usize = 4096;
const MAX_INTERPRETERS: usize = 64;
const MAX_STRING: u64 = 4096;
const MAX_TABLE: u64 = 64 << 10;
/// Bytes of names and line tables kept in the code cache before it is emptied.
const MAX_CACHED: usize = 64 << 20;
/// Lines kept in the (code, instruction) cache before it is emptied.
const MAX_LINES: usize = 1 << 16;
/// How much of the thread's data stack chunk is copied at once (the frames near its top, i.e. the innermost).
const CHUNK_PREFETCH: u64 = 64 << 10;

/// Where one interpreter lives in the target.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub layout: Layout,
    /// Address of `_PyRuntime`.
    pub runtime: u64,
    /// Type objects, to check what a pointer points to (0: unknown, not checked).
    pub code_type: u64,
    pub unicode_type: u64,
    pub bytes_type: u64,
    pub frame_type: u64,
}

/// Follows a chain of addresses and tells a cycle (Brent's algorithm: constant memory, found within about
/// twice the cycle's reach), so a walk neither loops nor hashes every frame.
struct Cycle {
    saved: u64,
    power: usize,
    steps: usize,
}

impl Cycle {
    fn new() -> Cycle {
        Cycle { saved: 0, power: 1, steps: 0 }
    }

    /// False when `addr` closes a cycle.
    fn step(&mut self, addr: u64) -> bool {
        if self.steps > 0 && addr == self.saved {
            return false;
        }
        self.steps += 1;
        if self.steps == self.power {
            self.saved = addr;
            self.power *= 2;
            self.steps = 0;
        }
        true
    }
}

struct Code {
    /// Tells this load of the code object from an earlier one at the same address, in the line cache.
    serial: u64,
    fingerprint: [u64; 6],
    function: Arc<str>,
    file: Arc<str>,
    first: i32,
    table: Vec<u8>,
    firsttraceable: i64,
}

/// A frame found in the chain, before its code is named.
struct Raw {
    code: u64,
    instr: u64,
    owner: u8,
    call: u32,
    /// Index of `code` among the walk's distinct code objects.
    slot: u32,
}

/// Distinct code objects of a walk looked up linearly up to this many, then through a map.
const LINEAR_CODES: usize = 16;

/// Walks the frames of threads of one process, caching thread states and code objects between walks.
pub struct Walker {
    pub rt: Runtime,
    code: AddrMap<u64, Arc<Code>>,
    cached: usize,
    serial: u64,
    /// The line of each (code load, instruction offset) seen: most events come from a few call sites.
    lines: AddrMap<(u64, i64), Option<u32>>,
    tstates: AddrMap<i32, u64>,
    /// Reused between walks (a walk allocates only what it returns): the thread state and frame read, the frames
    /// found, the distinct code objects with their slots, header ranges, headers and read flags, and their codes.
    ts: Vec<u8>,
    frame: Vec<u8>,
    raw: Vec<Raw>,
    addrs: Vec<u64>,
    slots: AddrMap<u64, u32>,
    ranges: Vec<(u64, u64)>,
    headers: Vec<u8>,
    ok: Vec<bool>,
    codes: Vec<Option<Arc<Code>>>,
    /// Each frame's slot, line and call, before they become `PyFrame`s.
    named: Vec<(u32, Option<u32>, u32)>,
    /// 3.12+: the address of each eval call's shim frame (on the C stack), by call.
    shims: Vec<u64>,
    /// Each thread's last frames: given again (one reference count) when the walk finds the same ones.
    last: AddrMap<i32, Arc<[PyFrame]>>,
    /// 3.11/3.12: the last walk's `_PyCFrame` and every frame of its chain, shims too (for known stacks, see
    /// [`super::known`]); cleared at each walk.
    pub cframe: u64,
    pub chain: Vec<super::known::Link>,
    /// The thread state the last walk read (0: none).
    pub tstate: u64,
}

fn u64_at(b: &[u8], off: u64) -> u64 {
    usize::try_from(off)
        .ok()
        .and_then(|o| b.get(o..o.checked_add(8)?))
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0)
}

fn u32_at(b: &[u8], off: u64) -> u32 {
    usize::try_from(off)
        .ok()
        .and_then(|o| b.get(o..o.checked_add(4)?))
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0)
}

fn u8_at(b: &[u8], off: u64) -> u8 {
    usize::try_from(off).ok().and_then(|o| b.get(o).copied()).unwrap_or(0)
}

fn read_vec(mem: &mut dyn Memory, addr: u64, len: u64) -> Option<Vec<u8>> {
    let mut v = vec![0u8; usize::try_from(len).ok()?];
    mem.read(addr, &mut v).then_some(v)
}

/// Reads `len` bytes at `addr` into `buf` (resized, so zeroed only when it grows).
fn read_into(mem: &mut dyn Memory, addr: u64, len: u64, buf: &mut Vec<u8>) -> bool {
    let Ok(len) = usize::try_from(len) else { return false };
    buf.resize(len, 0);
    mem.read(addr, buf)
}

/// The index of `code` in `addrs` (distinct code addresses of a walk), added if new; `map` indexes `addrs` once
/// it has more than [`LINEAR_CODES`] entries.
fn slot_of(addrs: &mut Vec<u64>, map: &mut AddrMap<u64, u32>, code: u64) -> u32 {
    if addrs.len() <= LINEAR_CODES {
        if let Some(i) = addrs.iter().position(|&a| a == code) {
            return i as u32;
        }
        if addrs.len() == LINEAR_CODES {
            map.clear();
            map.extend(addrs.iter().enumerate().map(|(i, &a)| (a, i as u32)));
        }
    } else if let Some(&i) = map.get(&code) {
        return i;
    }
    let i = addrs.len() as u32;
    addrs.push(code);
    if addrs.len() > LINEAR_CODES {
        map.insert(code, i);
    }
    i
}

impl Walker {
    pub fn new(rt: Runtime) -> Walker {
        Walker {
            rt,
            code: AddrMap::default(),
            cached: 0,
            serial: 0,
            lines: AddrMap::default(),
            tstates: AddrMap::default(),
            ts: Vec::new(),
            frame: Vec::new(),
            raw: Vec::new(),
            addrs: Vec::new(),
            slots: AddrMap::default(),
            ranges: Vec::new(),
            headers: Vec::new(),
            ok: Vec::new(),
            codes: Vec::new(),
            named: Vec::new(),
            shims: Vec::new(),
            last: AddrMap::default(),
            cframe: 0,
            chain: Vec::new(),
            tstate: 0,
        }
    }

    /// The Python frames of thread `tid` (whose `fs_base`, i.e. `pthread_self()`, is given), innermost first.
    /// Empty when the thread has no Python thread state or no frames; `Err` names what failed a check.
    pub fn read_frames(&mut self, mem: &mut dyn Memory, tid: i32, fs_base: u64) -> Result<Arc<[PyFrame]>, WalkError> {
        let mut ts = std::mem::take(&mut self.ts);
        self.cframe = 0;
        self.tstate = 0;
        self.chain.clear();
        self.shims.clear();
        let found = self.find_tstate(mem, tid, fs_base, &mut ts);
        let mut raw = std::mem::take(&mut self.raw);
        let mut f = std::mem::take(&mut self.frame);
        raw.clear();
        let chained = match found {
            Ok(true) => match self.rt.layout.frames {
                FrameKind::Objects => self.chain_objects(mem, &ts, &mut raw, &mut f),
                FrameKind::Entry311 | FrameKind::Shim312 => self.chain_interpreter(mem, &ts, &mut raw, &mut f),
            },
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        let named = chained.and_then(|()| self.name(mem, &mut raw));
        (self.ts, self.raw, self.frame) = (ts, raw, f);
        named?;
        Ok(self.frames_of(tid))
    }

    /// The fields the last walks identified the code object at `addr` by (its cached fingerprint).
    pub fn fingerprint(&self, addr: u64) -> Option<[u64; 6]> {
        self.code.get(&addr).map(|c| c.fingerprint)
    }

    /// Forgets thread `tid`'s last frames (it exited).
    pub fn forget(&mut self, tid: i32) {
        self.last.remove(&tid);
    }

    /// The `PyFrame`s of `self.named`: thread `tid`'s last ones when they are the same frames (same code loads,
    /// lines and calls), else new ones, remembered for its next walk.
    fn frames_of(&mut self, tid: i32) -> Arc<[PyFrame]> {
        let code = |slot: u32| self.codes.get(slot as usize).and_then(|c| c.as_ref());
        let shim = |call: u32| self.shims.get(call as usize).copied().unwrap_or(0);
        if let Some(last) = self.last.get(&tid) {
            let same = last.len() == self.named.len()
                && last.iter().zip(&self.named).all(|(p, &(slot, line, call))| {
                    p.line == line
                        && p.call == call
                        && p.shim == shim(call)
                        && code(slot)
                            .is_some_and(|c| Arc::ptr_eq(&c.function, &p.function) && Arc::ptr_eq(&c.file, &p.file))
                });
            if same {
                return last.clone();
            }
        }
        let frames: Arc<[PyFrame]> = self
            .named
            .iter()
            .filter_map(|&(slot, line, call)| {
                let c = code(slot)?;
                Some(PyFrame {
                    function: c.function.clone(),
                    file: c.file.clone(),
                    line,
                    call,
                    shim: shim(call),
                    frame: None,
                })
            })
            .collect();
        if self.last.len() >= MAX_THREADS {
            self.last.clear();
        }
        self.last.insert(tid, frames.clone());
        frames
    }

    fn matches(&self, ts: &[u8], tid: i32, fs_base: u64) -> bool {
        let l = &self.rt.layout;
        match l.ts_native_thread_id {
            Some(off) => u64_at(ts, off) == tid as u64,
            None => fs_base != 0 && u64_at(ts, l.ts_thread_id) == fs_base,
        }
    }

    /// Reads thread `tid`'s state into `ts`; false when it has none.
    fn find_tstate(
        &mut self,
        mem: &mut dyn Memory,
        tid: i32,
        fs_base: u64,
        ts: &mut Vec<u8>,
    ) -> Result<bool, WalkError> {
        let l = &self.rt.layout;
        let (ts_size, ts_next) = (l.ts_size, l.ts_next);
        let (head_at, threads_head, interp_next) =
            (self.rt.runtime.wrapping_add(l.runtime_interpreters_head), l.interp_threads_head, l.interp_next);
        if let Some(&addr) = self.tstates.get(&tid) {
            if read_into(mem, addr, ts_size, ts) && self.matches(ts, tid, fs_base) {
                self.tstate = addr;
                return Ok(true);
            }
            self.tstates.remove(&tid);
        }
        let mut head = [0u8; 8];
        if !mem.read(head_at, &mut head) {
            return Err(WalkError::Runtime(head_at));
        }
        let mut interp = u64::from_le_bytes(head);
        let mut seen = HashSet::new();
        for _ in 0..MAX_INTERPRETERS {
            if interp == 0 || !seen.insert(interp) {
                break;
            }
            let mut p = [0u8; 8];
            if !mem.read(interp.wrapping_add(threads_head), &mut p) {
                return Err(WalkError::Interpreter(interp));
            }
            let mut at = u64::from_le_bytes(p);
            for _ in 0..MAX_THREADS {
                if at == 0 || !seen.insert(at) {
                    break;
                }
                if !read_into(mem, at, ts_size, ts) {
                    return Err(WalkError::ThreadState(at));
                }
                if self.matches(ts, tid, fs_base) {
                    // Threads come and go: a bounded cache, emptied when full.
                    if self.tstates.len() >= MAX_THREADS {
                        self.tstates.clear();
                    }
                    self.tstates.insert(tid, at);
                    self.tstate = at;
                    return Ok(true);
                }
                at = u64_at(ts, ts_next);
            }
            if !mem.read(interp.wrapping_add(interp_next), &mut p) {
                break;
            }
            interp = u64::from_le_bytes(p);
        }
        Ok(false)
    }

    /// 3.9/3.10: frame objects linked by `f_back`, each run by its own eval call.
    fn chain_objects(
        &mut self,
        mem: &mut dyn Memory,
        ts: &[u8],
        out: &mut Vec<Raw>,
        f: &mut Vec<u8>,
    ) -> Result<(), WalkError> {
        let l = &self.rt.layout;
        let mut frame = u64_at(ts, l.ts_frame.unwrap_or(0));
        let mut cycle = Cycle::new();
        while frame != 0 {
            if out.len() >= MAX_FRAMES || !cycle.step(frame) {
                return Err(WalkError::Chain(MAX_FRAMES));
            }
            if !read_into(mem, frame, l.frame_size, f) {
                return Err(WalkError::Frame(frame));
            }
            if self.rt.frame_type != 0 && u64_at(f, 8) != self.rt.frame_type {
                return Err(WalkError::NotAFrame(frame));
            }
            if self.chain.len() < super::known::MAX_LINKS {
                self.chain.push(super::known::Link {
                    addr: frame,
                    code: u64_at(f, l.frame_code),
                    instr: u32_at(f, l.frame_instr) as u64,
                    back: u64_at(f, l.frame_back),
                    owner: 0,
                    entry: 0,
                    ty: u64_at(f, 8),
                });
            }
            let lasti = u32_at(f, l.frame_instr) as i32 as i64;
            // Stored as the instruction pointer: the byte offset of the last instruction (3.10 counts units).
            let bytes = if l.version >= (3, 10) { lasti.saturating_mul(2) } else { lasti };
            let call = out.len() as u32;
            out.push(Raw { code: u64_at(f, l.frame_code), instr: bytes as u64, owner: 0, call, slot: 0 });
            frame = u64_at(f, l.frame_back);
        }
        Ok(())
    }

    /// 3.11+: interpreter frames, most in the thread's data stack (prefetched in one read), shims and entry
    /// frames on the C stack.
    fn chain_interpreter(
        &mut self,
        mem: &mut dyn Memory,
        ts: &[u8],
        out: &mut Vec<Raw>,
        f: &mut Vec<u8>,
    ) -> Result<(), WalkError> {
        let layout = self.rt.layout.clone();
        let l = &layout;
        let mut frame = match (l.ts_cframe, l.ts_frame) {
            (Some(cf), _) => {
                let cframe = u64_at(ts, cf);
                if cframe == 0 {
                    return Ok(());
                }
                self.cframe = cframe;
                let mut p = [0u8; 8];
                if !mem.read(cframe.wrapping_add(l.cframe_current_frame), &mut p) {
                    return Err(WalkError::CFrame(cframe));
                }
                u64::from_le_bytes(p)
            }
            (None, Some(f)) => u64_at(ts, f),
            (None, None) => 0,
        };
        if let Some((chunk_off, top_off)) = l.ts_datastack {
            let (chunk, top) = (u64_at(ts, chunk_off), u64_at(ts, top_off));
            if chunk != 0 && top > chunk {
                let from = chunk.max(top.saturating_sub(CHUNK_PREFETCH));
                mem.prefetch(from, top - from);
            }
        }
        let mut cycle = Cycle::new();
        let mut steps = 0usize;
        let mut call = 0u32;
        while frame != 0 {
            steps += 1;
            if steps > MAX_FRAMES || !cycle.step(frame) {
                return Err(WalkError::Chain(MAX_FRAMES));
            }
            if !read_into(mem, frame, l.frame_size, f) {
                return Err(WalkError::Frame(frame));
            }
            let owner = l.frame_owner.map(|o| u8_at(f, o)).unwrap_or(0);
            let back = u64_at(f, l.frame_back);
            let code = u64_at(f, l.frame_code) & !l.frame_code_tags;
            if self.chain.len() < super::known::MAX_LINKS {
                self.chain.push(super::known::Link {
                    addr: frame,
                    code: u64_at(f, l.frame_code),
                    instr: u64_at(f, l.frame_instr),
                    back,
                    owner,
                    entry: l.frame_is_entry.map(|o| u8_at(f, o)).unwrap_or(0),
                    ty: 0,
                });
            }
            if l.frames == FrameKind::Shim312 && owner >= FRAME_OWNED_BY_CSTACK {
                self.shims.push(frame);
                call += 1;
                frame = back;
                continue;
            }
            out.push(Raw { code, instr: u64_at(f, l.frame_instr), owner, call, slot: 0 });
            if l.frame_is_entry.is_some_and(|o| u8_at(f, o) != 0) {
                call += 1;
            }
            frame = back;
        }
        Ok(())
    }

    /// Names each frame from its code object into `self.named` (slots of `self.codes`): the headers of all of them
    /// in one read, the cached names when the header is the same as when they were read.
    fn name(&mut self, mem: &mut dyn Memory, raw: &mut [Raw]) -> Result<(), WalkError> {
        let size = self.rt.layout.code_size;
        let mut addrs = std::mem::take(&mut self.addrs);
        addrs.clear();
        let mut last: Option<(u64, u32)> = None;
        for r in raw.iter_mut() {
            r.slot = match last {
                // Recursion: the same code object frame after frame.
                Some((code, slot)) if code == r.code => slot,
                _ => slot_of(&mut addrs, &mut self.slots, r.code),
            };
            last = Some((r.code, r.slot));
        }
        let mut ranges = std::mem::take(&mut self.ranges);
        let mut headers = std::mem::take(&mut self.headers);
        let mut ok = std::mem::take(&mut self.ok);
        ranges.clear();
        ranges.extend(addrs.iter().map(|&a| (a, size)));
        let total = usize::try_from(size).ok().and_then(|s| s.checked_mul(addrs.len())).ok_or(WalkError::CodeSize)?;
        headers.resize(total, 0);
        if size == 0 {
            ok.clear();
            ok.resize(addrs.len(), true);
        } else {
            mem.read_ranges(&ranges, &mut headers[..total], &mut ok);
        }
        let loaded = self.codes_of(mem, &addrs, &headers, size as usize, &ok);
        (self.addrs, self.ranges, self.headers, self.ok) = (addrs, ranges, headers, ok);
        loaded?;
        let l = &self.rt.layout;
        let out = &mut self.named;
        out.clear();
        // The last frame's (slot, offset) and line: recursion repeats them.
        let mut memo: Option<(u32, i64, Option<u32>)> = None;
        for r in raw.iter() {
            let Some(Some(code)) = self.codes.get(r.slot as usize) else { continue };
            let offset = match l.code_adaptive {
                Some(adaptive) => {
                    let start = r.code.wrapping_add(adaptive);
                    // Not started yet (before its first traceable instruction): CPython hides it too.
                    let first = start.wrapping_add(code.firsttraceable.max(0) as u64 * 2);
                    if r.owner != FRAME_OWNED_BY_GENERATOR && r.instr < first {
                        continue;
                    }
                    r.instr.wrapping_sub(start) as i64
                }
                None => r.instr as i64,
            };
            let line = match memo {
                Some((slot, off, line)) if slot == r.slot && off == offset => line,
                _ => {
                    let line = match self.lines.get(&(code.serial, offset)) {
                        Some(&line) => line,
                        None => {
                            let line = parse_line(l.lines, &code.table, code.first, offset);
                            if self.lines.len() >= MAX_LINES {
                                self.lines.clear();
                            }
                            self.lines.insert((code.serial, offset), line);
                            line
                        }
                    };
                    memo = Some((r.slot, offset, line));
                    line
                }
            };
            out.push((r.slot, line, r.call));
        }
        Ok(())
    }

    /// Fills `self.codes` with the code objects at `addrs`, from their headers: cached when the header is the one
    /// they were read with; `None` for a 3.13+ frame that runs something else.
    fn codes_of(
        &mut self,
        mem: &mut dyn Memory,
        addrs: &[u64],
        headers: &[u8],
        size: usize,
        ok: &[bool],
    ) -> Result<(), WalkError> {
        let l = &self.rt.layout;
        let (version, qualname) = (l.version, l.code_qualname);
        let fields = [l.code_filename, l.code_name, l.code_linetable];
        let firstlineno = l.code_firstlineno;
        self.codes.clear();
        for (i, &addr) in addrs.iter().enumerate() {
            if !ok.get(i).copied().unwrap_or(false) {
                return Err(WalkError::Code(addr));
            }
            let hdr = headers.get(i * size..(i + 1) * size).unwrap_or(&[]);
            let ty = u64_at(hdr, 8);
            if self.rt.code_type != 0 && ty != self.rt.code_type {
                // 3.13+: a frame may run something other than a code object (a trampoline); it is not shown.
                if version >= (3, 13) {
                    self.codes.push(None);
                    continue;
                }
                return Err(WalkError::NotCode { addr, ty });
            }
            let fingerprint = [
                ty,
                u64_at(hdr, fields[0]),
                u64_at(hdr, fields[1]),
                qualname.map(|o| u64_at(hdr, o)).unwrap_or(0),
                u64_at(hdr, fields[2]),
                u32_at(hdr, firstlineno) as u64,
            ];
            let cached = self.code.get(&addr).filter(|c| c.fingerprint == fingerprint).cloned();
            let code = match cached {
                Some(c) => c,
                None => {
                    self.serial += 1;
                    let c = Arc::new(self.load_code(mem, addr, hdr, fingerprint)?);
                    let size = c.table.len() + c.function.len() + c.file.len() + 64;
                    if self.code.len() >= 1 << 16 || self.cached + size > MAX_CACHED {
                        self.code.clear();
                        self.cached = 0;
                    }
                    self.cached += size;
                    self.code.insert(addr, c.clone());
                    c
                }
            };
            self.codes.push(Some(code));
        }
        Ok(())
    }

    fn load_code(&self, mem: &mut dyn Memory, addr: u64, hdr: &[u8], fingerprint: [u64; 6]) -> Result<Code, WalkError> {
        let l = &self.rt.layout;
        let name = fingerprint[if l.code_qualname.is_some() { 3 } else { 2 }];
        let field = |field| move |problem| WalkError::CodeField { addr, field, problem };
        let function = self.read_str(mem, name).map_err(field("name"))?;
        let file = self.read_str(mem, fingerprint[1]).map_err(field("file"))?;
        let table = self.read_bytes(mem, fingerprint[4]).map_err(field("line table"))?;
        Ok(Code {
            serial: self.serial,
            fingerprint,
            function: function.into(),
            file: file.into(),
            first: u32_at(hdr, l.code_firstlineno) as i32,
            table,
            firsttraceable: l.code_firsttraceable.map(|o| u32_at(hdr, o) as i32 as i64).unwrap_or(0),
        })
    }

    /// A `str` object's text (compact strings only, as every identifier and file name is).
    pub fn read_str(&self, mem: &mut dyn Memory, addr: u64) -> Result<String, ObjectError> {
        let l = &self.rt.layout;
        let hdr = read_vec(mem, addr, l.unicode_compact_size).ok_or(ObjectError::Unreadable)?;
        if self.rt.unicode_type != 0 && u64_at(&hdr, 8) != self.rt.unicode_type {
            return Err(ObjectError::NotStr);
        }
        let state = u32_at(&hdr, l.unicode_state);
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1 == 1, (state >> 6) & 1 == 1);
        let len = u64_at(&hdr, l.unicode_length);
        if !compact || len > MAX_STRING || !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) {
            return Err(ObjectError::StrShape { state, len });
        }
        let data = if ascii { l.unicode_ascii_size } else { l.unicode_compact_size };
        let bytes = read_vec(mem, addr.wrapping_add(data), len * kind as u64).ok_or(ObjectError::UnreadableText)?;
        let text: String = match kind {
            1 => bytes.iter().map(|&b| b as char).collect(),
            2 => char::decode_utf16(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
                .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
                .collect(),
            _ => bytes
                .chunks_exact(4)
                .map(|c| {
                    char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or(char::REPLACEMENT_CHARACTER)
                })
                .collect(),
        };
        if ascii && !text.is_ascii() {
            return Err(ObjectError::NotAscii);
        }
        Ok(text)
    }

    /// A `bytes` object's contents.
    pub fn read_bytes(&self, mem: &mut dyn Memory, addr: u64) -> Result<Vec<u8>, ObjectError> {
        let l = &self.rt.layout;
        let hdr = read_vec(mem, addr, l.bytes_sval).ok_or(ObjectError::Unreadable)?;
        if self.rt.bytes_type != 0 && u64_at(&hdr, 8) != self.rt.bytes_type {
            return Err(ObjectError::NotBytes);
        }
        let len = u64_at(&hdr, l.bytes_size);
        if len > MAX_TABLE {
            return Err(ObjectError::Size(len));
        }
        read_vec(mem, addr.wrapping_add(l.bytes_sval), len).ok_or(ObjectError::UnreadableContents)
    }
}

#[cfg(test)]
#[path = "walk_tests.rs"]
mod tests;
