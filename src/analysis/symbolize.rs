//! From code addresses to names: function + offset from `.symtab`/`.dynsym` (demangled for Rust and C++),
//! file:line and inlined calls from DWARF via addr2line. Debug info is found in the module itself, in a separate
//! debug file by build-id (`/usr/lib/debug/.build-id/xx/rest.debug`, under the target's root first), or by
//! `.gnu_debuglink` (addr2line's own loader does not follow it). Tables are parsed once per module and every
//! distinct address is resolved once; this runs after capture, never while the target is stopped.

use crate::analysis::unwind::RawFrame;
use crate::model::bytes::Bytes;
use crate::model::stack::Frame;
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;

type Reader = gimli::EndianReader<gimli::RunTimeEndian, Bytes>;

/// A function symbol: stated start address, size (0: unknown, up to the next symbol), demangled name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sym {
    pub start: u64,
    pub size: u64,
    pub name: String,
    pub bind: Bind,
}

/// A symbol's binding, in the order a name is preferred among aliases of one address (as elfutils'
/// `dwfl_module_addrname` prefers them: libc's `raise` is global, `gsignal` a weak alias, `__GI_raise` local).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bind {
    Local,
    Weak,
    Global,
}

/// Function symbols of one or more ELF files of a module, sorted by address; the aliases of one address are
/// kept together, the preferred one first.
#[derive(Debug, Default)]
pub struct SymTable(Vec<Sym>);

impl SymTable {
    /// Symbols of `files` (the module, then its debug file): `.symtab` and `.dynsym`, functions only.
    pub fn parse(files: &[&[u8]]) -> SymTable {
        let mut v: Vec<Sym> = Vec::new();
        for data in files {
            let Ok(file) = object::File::parse(*data) else { continue };
            for s in file.symbols().chain(file.dynamic_symbols()) {
                if s.kind() != SymbolKind::Text || !s.is_definition() || s.address() == 0 {
                    continue;
                }
                let Ok(name) = s.name() else { continue };
                if name.is_empty() {
                    continue;
                }
                let bind = if s.is_weak() {
                    Bind::Weak
                } else if s.is_global() {
                    Bind::Global
                } else {
                    Bind::Local
                };
                v.push(Sym {
                    start: s.address(),
                    size: s.size(),
                    name: addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned(),
                    bind,
                });
            }
        }
        SymTable::from_syms(v)
    }

    /// A table of `v`, in any order.
    pub fn from_syms(mut v: Vec<Sym>) -> SymTable {
        // Aliases (raise/gsignal/__GI_raise) share an address: global before weak before local, then sized
        // before unsized; otherwise in the files' order (the module's own tables first). A name seen twice (in
        // .dynsym and a debug file's .symtab) is kept once, at its strongest binding.
        v.sort_by(|a, b| a.start.cmp(&b.start).then(b.bind.cmp(&a.bind)).then((b.size > 0).cmp(&(a.size > 0))));
        let mut seen = std::collections::HashSet::new();
        let mut group = u64::MAX;
        v.retain(|s| {
            if s.start != group {
                group = s.start;
                seen.clear();
            }
            seen.insert(s.name.clone())
        });
        SymTable(v)
    }

    /// The function containing stated address `svma`: the preferred of its aliases.
    pub fn find(&self, svma: u64) -> Option<&Sym> {
        self.aliases(svma).first()
    }

    /// Every name of the function containing stated address `svma`, the preferred first (see [`Self::parse`]).
    pub fn aliases(&self, svma: u64) -> &[Sym] {
        let end_of_group = self.0.partition_point(|s| s.start <= svma);
        let Some(last) = end_of_group.checked_sub(1).and_then(|i| self.0.get(i)) else {
            return &[];
        };
        let first = self.0[..end_of_group].partition_point(|s| s.start < last.start);
        let group = &self.0[first..end_of_group];
        let size = group.iter().map(|s| s.size).max().unwrap_or(0);
        let end = if size > 0 {
            last.start.checked_add(size)
        } else {
            Some(self.0.get(end_of_group).map(|n| n.start).unwrap_or(u64::MAX))
        };
        if end.is_some_and(|e| svma < e) { group } else { &[] }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// DWARF line and inline information of a module.
pub struct Dwarf(addr2line::Context<Reader>);

impl Dwarf {
    /// Loads DWARF from an ELF file (decompressing sections as needed); `None` if it has no `.debug_info`.
    pub fn load(data: &[u8]) -> Option<Dwarf> {
        Dwarf::load_shared(&Bytes::from(data))
    }

    /// [`Dwarf::load`] on shared file bytes: uncompressed sections are read in place, not copied (a large
    /// library's DWARF is tens of MB), so only compressed sections take memory of their own.
    pub fn load_shared(data: &Bytes) -> Option<Dwarf> {
        let file = object::File::parse(&**data).ok()?;
        file.section_by_name(".debug_info")?;
        let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
        let empty = Bytes::from(Vec::new());
        let base = data.as_ptr() as usize;
        // Where each section read in place lies in `data`, so its pages can be dropped once indexed.
        let in_place = std::cell::RefCell::new(HashMap::new());
        let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
            use gimli::SectionId as S;
            // Sections addr2line never reads: a compressed one would be inflated for nothing (libc's location
            // lists are MBs).
            if matches!(id, S::DebugLoc | S::DebugLocLists | S::DebugMacinfo | S::DebugMacro | S::DebugTypes) {
                return Ok(gimli::EndianReader::new(empty.clone(), endian));
            }
            let section = file.section_by_name(id.name());
            let bytes = match section.as_ref().map(|s| s.uncompressed_data()) {
                Some(Ok(Cow::Borrowed(b))) => {
                    // A borrowed section lies inside `data`; where it starts is known only by its address.
                    let start = (b.as_ptr() as usize).wrapping_sub(base);
                    match start.checked_add(b.len()) {
                        Some(end) if end <= data.len() => {
                            in_place.borrow_mut().insert(id, start..end);
                            return Ok(gimli::EndianReader::new(data.clone(), endian).range(start..end));
                        }
                        _ => Bytes::from(b),
                    }
                }
                Some(Ok(Cow::Owned(v))) => {
                    // Inflated: the compressed bytes are not read again; a mapped file need not keep them resident.
                    if let Some(Ok(r)) = section.as_ref().map(|s| s.compressed_file_range()) {
                        let start = usize::try_from(r.offset).unwrap_or(usize::MAX);
                        let len = usize::try_from(r.compressed_size).unwrap_or(usize::MAX);
                        data.release(start..start.saturating_add(len));
                    }
                    Bytes::from(v)
                }
                Some(Err(_)) | None => empty.clone(),
            };
            Ok(gimli::EndianReader::new(bytes, endian))
        };
        let mut dwarf = gimli::Dwarf::load(load).ok()?;
        // addr2line parses every unit's abbreviations up front; units sharing a table (as dwz-processed debug
        // files may) then share one parsed copy.
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        // Indexing reads the start of every unit and of its line program, and the kernel maps a file in by the
        // 64 KiB around each page read: most of a mapped library's DWARF would stay resident (10 MB of
        // libpython's) for the few units a stack needs. The pages behind the index are dropped as it goes, and
        // every section read in place once it is built; a lookup reads its unit's pages again.
        let in_place = in_place.into_inner();
        let mut info = DropBehind::new(in_place.get(&gimli::SectionId::DebugInfo));
        let mut lines = DropBehind::new(in_place.get(&gimli::SectionId::DebugLine));
        let mut progress = |info_end: u64, line: Option<u64>| {
            info.advance(data, info_end);
            lines.advance(data, line.unwrap_or(0));
        };
        let context = addr2line::Context::from_dwarf_with_progress(dwarf, &mut progress).ok();
        for range in in_place.values() {
            data.release(range.clone());
        }
        context.map(Dwarf)
    }

    /// (function, file, line) from innermost inlined call outwards, at stated address `svma`.
    pub fn frames(&self, svma: u64) -> Vec<(Option<String>, Option<String>, Option<u32>)> {
        let mut out = Vec::new();
        let Ok(mut it) = self.0.find_frames(svma).skip_all_loads() else {
            return out;
        };
        // Bounded: corrupt DWARF must not make this spin.
        while let Ok(Some(f)) = it.next() {
            let name = f.function.as_ref().and_then(|n| n.demangle().ok()).map(|n| n.into_owned());
            let (file, line) = match f.location {
                Some(l) => (l.file.map(str::to_string), l.line),
                None => (None, None),
            };
            out.push((name, file, line));
            if out.len() > 64 {
                break;
            }
        }
        out
    }
}

/// The pages of one section read in place, dropped behind a reader that goes through it in order.
struct DropBehind {
    /// Where the section lies in the file's bytes.
    section: std::ops::Range<usize>,
    /// How far into the section pages were dropped.
    done: usize,
}

impl DropBehind {
    fn new(section: Option<&std::ops::Range<usize>>) -> DropBehind {
        DropBehind { section: section.cloned().unwrap_or_default(), done: 0 }
    }

    /// Drops the pages before `offset` into the section, by steps of at least 256 KiB (one madvise per few
    /// units, not one per unit).
    fn advance(&mut self, data: &Bytes, offset: u64) {
        const STEP: usize = 256 << 10;
        let offset = usize::try_from(offset).unwrap_or(usize::MAX).min(self.section.len());
        if offset >= self.done.saturating_add(STEP) {
            data.release(self.section.start + self.done..self.section.start + offset);
            self.done = offset;
        }
    }
}

/// Paths where the separate debug file of a module may be, the target's view (`root`, e.g. `/proc/PID/root`)
/// before the host's.
pub fn debug_file_candidates(root: &str, path: &str, build_id: Option<&[u8]>, debuglink: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let roots: Vec<&str> = if root.is_empty() { vec![""] } else { vec![root, ""] };
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        let hex = crate::model::modules::hex(id);
        for r in &roots {
            out.push(format!("{r}/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]));
        }
    }
    if let Some(name) = debuglink.filter(|n| !n.is_empty() && !n.contains('/')) {
        let dir = path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        for r in &roots {
            out.push(format!("{r}{dir}/{name}"));
            out.push(format!("{r}{dir}/.debug/{name}"));
            out.push(format!("{r}/usr/lib/debug{dir}/{name}"));
        }
    }
    out
}

/// The CRC-32 that `.gnu_debuglink` records (the zlib/ISO 3309 one).
pub fn crc32(data: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
        }
        *slot = c;
    }
    let mut crc = !0u32;
    for &b in data {
        crc = table[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// Finds the separate debug file of the module whose file is `data` among the candidates `load` can read,
/// checking it belongs to it (same build-id, or the debuglink's CRC when the module has no build-id).
pub fn find_debug_file(
    root: &str,
    path: &str,
    data: &[u8],
    load: impl Fn(&str) -> Option<Bytes>,
) -> Option<(String, Bytes)> {
    let file = object::File::parse(data).ok()?;
    let build_id = file.build_id().ok().flatten();
    let link = file.gnu_debuglink().ok().flatten();
    let link_name = link.and_then(|(n, _)| std::str::from_utf8(n).ok());
    for cand in debug_file_candidates(root, path, build_id, link_name) {
        let Some(bytes) = load(&cand) else { continue };
        let ok = match (build_id, object::File::parse(&*bytes).ok()) {
            (Some(id), Some(f)) => f.build_id().ok().flatten() == Some(id),
            (None, Some(_)) => link.is_some_and(|(_, crc)| crc32(&bytes) == crc),
            _ => false,
        };
        if ok {
            return Some((cand, bytes));
        }
    }
    None
}

/// Everything known to name addresses in one module.
pub struct SymModule {
    pub syms: SymTable,
    pub dwarf: Option<Dwarf>,
}

impl SymModule {
    /// From the module's file and its debug file, if any (DWARF from the debug file first).
    pub fn parse(data: &[u8], debug: Option<&[u8]>) -> SymModule {
        SymModule::parse_shared(&Bytes::from(data), debug.map(Bytes::from).as_ref())
    }

    /// [`SymModule::parse`] on shared file bytes, which the DWARF reader uses in place.
    pub fn parse_shared(data: &Bytes, debug: Option<&Bytes>) -> SymModule {
        let mut files: Vec<&[u8]> = vec![data];
        files.extend(debug.map(|d| &**d));
        SymModule {
            syms: SymTable::parse(&files),
            dwarf: debug.and_then(Dwarf::load_shared).or_else(|| Dwarf::load_shared(data)),
        }
    }

    /// The frames (inlined calls first) of one address of this module, mapped with `bias`.
    pub fn resolve(&self, module: &str, bias: u64, f: &RawFrame) -> Vec<Frame> {
        let svma = f.lookup.wrapping_sub(bias);
        // A signal trampoline is entered by a return to its first byte: pc-1 falls before its symbol.
        let mut aliases = self.syms.aliases(svma);
        if aliases.is_empty() {
            let pc = f.pc.wrapping_sub(bias);
            aliases = self.syms.aliases(pc);
            if aliases.first().is_some_and(|s| s.start != pc) {
                aliases = &[];
            }
        }
        let mut dwarf = self.dwarf.as_ref().map(|d| d.frames(svma)).unwrap_or_default();
        let base = Frame { addr: f.pc, module: Some(module.to_string()), ..Frame::default() };
        let outer = dwarf.pop();
        let mut out: Vec<Frame> = dwarf
            .into_iter()
            .map(|(function, file, line)| Frame { function, file, line, inlined: true, ..base.clone() })
            .collect();
        let (dw_name, file, line) = outer.unwrap_or_default();
        // Of the aliases with the strongest binding, the one the debug info names, if it is one of them.
        let sym = aliases.first().map(|best| {
            aliases
                .iter()
                .take_while(|s| s.bind == best.bind)
                .find(|s| dw_name.as_deref() == Some(s.name.as_str()))
                .unwrap_or(best)
        });
        let last = match sym {
            Some(s) => Frame {
                function: Some(s.name.clone()),
                offset: f.pc.checked_sub(bias.wrapping_add(s.start)),
                file,
                line,
                ..base
            },
            // No symbol: the DWARF name if any, else module+offset (the offset into the file's addresses).
            None => Frame {
                offset: if dw_name.is_none() { Some(f.pc.wrapping_sub(bias)) } else { None },
                function: dw_name,
                file,
                line,
                ..base
            },
        };
        out.push(last);
        out
    }
}

/// Resolves addresses once each, per process.
#[derive(Default)]
pub struct Symbolizer {
    cache: HashMap<(u64, u64), Vec<Frame>>,
    pub resolved: u64,
}

impl Symbolizer {
    /// The frames of `f`, from the cache or resolved now with `module` = (name, bias, symbols).
    pub fn frames(&mut self, f: &RawFrame, module: impl FnOnce() -> Option<(String, u64, Rc<SymModule>)>) -> &[Frame] {
        self.cache.entry((f.pc, f.lookup)).or_insert_with(|| match module() {
            Some((name, bias, m)) => m.resolve(&name, bias, f),
            None => vec![Frame { addr: f.pc, ..Frame::default() }],
        })
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_zlib() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn candidates_by_build_id_and_debuglink() {
        let c =
            debug_file_candidates("/proc/9/root", "/usr/lib/libx.so", Some(&[0xab, 0xcd, 0xef]), Some("libx.debug"));
        assert_eq!(c[0], "/proc/9/root/usr/lib/debug/.build-id/ab/cdef.debug");
        assert_eq!(c[1], "/usr/lib/debug/.build-id/ab/cdef.debug");
        assert!(c.contains(&"/proc/9/root/usr/lib/.debug/libx.debug".to_string()));
        assert!(c.contains(&"/usr/lib/debug/usr/lib/libx.debug".to_string()));
        assert!(debug_file_candidates("", "/a", None, Some("../etc/passwd")).is_empty());
    }

    /// kB resident of our own mapping at `addr` (test only: the code under test never reads /proc).
    fn resident_kb(addr: usize) -> u64 {
        let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let r = crate::model::smaps::parse_smaps(&text);
        r.iter().find(|r| r.map.start <= addr as u64 && (addr as u64) < r.map.end).map(|r| r.rss).unwrap()
    }

    #[test]
    fn indexing_a_mapped_file_leaves_its_dwarf_out_of_memory() {
        // This test binary carries its own DWARF (debug build, thousands of units): mapped, as modules are.
        let exe = crate::os::filemap::read_file("/proc/self/exe").unwrap();
        let file = object::File::parse(&*exe).unwrap();
        let Some(info) = file.section_by_name(".debug_info").and_then(|s| s.file_range()) else {
            panic!("this test needs a test binary with .debug_info");
        };
        let info_kb = info.1 / 1024;
        assert!(info_kb > 4096, "{info_kb} kB of .debug_info: too small to tell");
        let dwarf = Dwarf::load_shared(&exe).unwrap();
        // Indexing read the start of every unit; the kernel's fault-around would have left most of the section
        // resident. What stays is the symbol-free rest (headers, .symtab read by nobody here) plus a few steps.
        let kb = resident_kb(exe.as_ptr() as usize);
        assert!(kb < info_kb / 8, "{kb} kB of the file resident after indexing {info_kb} kB of .debug_info");
        // And lookups still read the dropped pages: this very function, at its stated address.
        let syms = SymTable::parse(&[&exe]);
        let me =
            syms.0.iter().find(|s| s.name.ends_with("tests::indexing_a_mapped_file_leaves_its_dwarf_out_of_memory"));
        let (name, file, line) = dwarf.frames(me.unwrap().start + 1).pop().unwrap_or_default();
        assert!(name.is_some_and(|n| n.ends_with("indexing_a_mapped_file_leaves_its_dwarf_out_of_memory")));
        assert!(file.is_some_and(|f| f.ends_with("symbolize.rs")) && line.is_some());
    }

    #[test]
    fn a_global_name_wins_over_its_weak_and_local_aliases() {
        let sym = |start, size, name: &str, bind| Sym { start, size, name: name.into(), bind };
        // As libc's .dynsym and its debug file's .symtab list raise (0x3bfa0) and the mmap family (0x1019a0).
        let t = SymTable::from_syms(vec![
            sym(0x3bfa0, 49, "gsignal", Bind::Weak),
            sym(0x3bfa0, 49, "raise", Bind::Global),
            sym(0x3bfa0, 49, "__GI_raise", Bind::Local),
            sym(0x3bfa0, 49, "gsignal", Bind::Weak),
            sym(0x1019a0, 0, "mmap", Bind::Global),
            sym(0x1019a0, 84, "mmap64", Bind::Weak),
            sym(0x1019a0, 84, "__mmap", Bind::Global),
        ]);
        assert_eq!(t.find(0x3bfa0 + 48).map(|s| s.name.as_str()), Some("raise"));
        let names: Vec<&str> = t.aliases(0x3bfa0).iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["raise", "gsignal", "__GI_raise"]);
        assert_eq!(t.find(0x3bfa0 + 49), None);
        // Sized before unsized among globals; the range is the largest size of the group.
        assert_eq!(t.find(0x1019a0 + 83).map(|s| s.name.as_str()), Some("__mmap"));
        assert!(t.find(0x1019a0 + 84).is_none() && t.find(0x1019a0 - 1).is_none());

        // The debug info's name, when it is one of the strongest aliases; never a weaker one.
        let m = |syms| SymModule { syms, dwarf: None };
        let f = RawFrame { pc: 0x1000, lookup: 0x1000, how: crate::analysis::unwind::How::Regs };
        let two = m(SymTable::from_syms(vec![
            sym(0x1000, 8, "b_global", Bind::Global),
            sym(0x1000, 8, "a_weak", Bind::Weak),
        ]));
        assert_eq!(two.resolve("m", 0, &f)[0].function.as_deref(), Some("b_global"));
    }

    #[test]
    fn symbols_of_own_executable() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let t = SymTable::parse(&[&exe]);
        assert!(!t.is_empty());
        // Demangled, without the hash (closures inside the test have names of their own: skip them).
        let s = t.0.iter().find(|s| s.name.ends_with("tests::symbols_of_own_executable")).unwrap();
        assert_eq!(t.find(s.start + 1).map(|f| &f.name), Some(&s.name));
    }
}
