//! Loaded modules: the ELF files a process has mapped, where they are (load bias), their build-ids and
//! symbols. Pure over bytes: the callers read the files and the target's memory.

use crate::model::bytes::Bytes;
use crate::model::maps::Mapping;
use object::{Object, ObjectSegment, ObjectSymbol};

/// The mappings of one file in a process's address space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleMap {
    /// The path as the target sees it (from its `/proc/PID/maps`).
    pub path: String,
    /// Lowest and highest address of all mappings of the file.
    pub start: u64,
    pub end: u64,
    /// The mapping with the lowest file offset: the one the load bias is computed from.
    pub first: Mapping,
}

/// Groups file-backed mappings by path, in address order. Consecutive mappings of one path form one module.
pub fn group_modules(maps: &[Mapping]) -> Vec<ModuleMap> {
    let mut out: Vec<ModuleMap> = Vec::new();
    for m in maps.iter().filter(|m| m.is_file()) {
        match out.last_mut() {
            // A second mapping at offset 0 is another instance of the file (mapped again to be read, as syscatch
            // maps the files it reads, or loaded twice): a loader maps a module's offset 0 once.
            Some(last) if last.path == m.path && m.start >= last.end && !(m.offset == 0 && last.first.offset == 0) => {
                last.end = last.end.max(m.end);
                if m.offset < last.first.offset {
                    last.first = m.clone();
                }
            }
            _ => out.push(ModuleMap { path: m.path.clone(), start: m.start, end: m.end, first: m.clone() }),
        }
    }
    out
}

/// File name of a path (`/usr/lib/x86_64-linux-gnu/libc.so.6` -> `libc.so.6`).
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A module whose file has been read and parsed once.
pub struct Module {
    pub map: ModuleMap,
    /// Run-time address = bias + address stated in the file.
    pub bias: u64,
    pub build_id: Option<Vec<u8>>,
    pub data: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error("{0}: not a readable ELF file ({1})")]
    BadElf(String, String),
    #[error("{0}: no loadable segment maps file offset {1:#x}")]
    NoSegment(String, u64),
}

impl Module {
    /// Parses `data` (the file's bytes) for the module mapped as `map`.
    pub fn parse(map: ModuleMap, data: impl Into<Bytes>) -> Result<Module, ModuleError> {
        let data = data.into();
        let bad = |e: object::Error| ModuleError::BadElf(map.path.clone(), e.to_string());
        let file = object::File::parse(&*data).map_err(bad)?;
        let build_id = file.build_id().ok().flatten().map(|b| b.to_vec());
        let page = 0xfff;
        let off = map.first.offset;
        let seg = file
            .segments()
            .find(|s| {
                let (o, sz) = s.file_range();
                // p_offset and p_filesz come from the file: a corrupt header must not overflow.
                o & !page <= off && off < o.saturating_add(sz).max((o & !page) + 1)
            })
            .ok_or_else(|| ModuleError::NoSegment(map.path.clone(), off))?;
        let (seg_off, _) = seg.file_range();
        // The mapping starts at file offset `off`, which the segment places at vaddr - (seg_off - off).
        let vaddr_at_start = seg.address().wrapping_sub(seg_off.wrapping_sub(off));
        let bias = map.first.start.wrapping_sub(vaddr_at_start);
        Ok(Module { map, bias, build_id, data })
    }

    pub fn object(&self) -> Option<object::File<'_>> {
        object::File::parse(&*self.data).ok()
    }

    /// Run-time address and size of a symbol defined here, from the dynamic symbol table first.
    pub fn find_symbol(&self, name: &str) -> Option<(u64, u64)> {
        let file = self.object()?;
        let found = file
            .dynamic_symbols()
            .chain(file.symbols())
            .find(|s| s.is_definition() && s.name() == Ok(name) && s.address() != 0)?;
        Some((self.bias.wrapping_add(found.address()), found.size()))
    }

    /// `len` bytes of the file at run-time address `addr` (the code as shipped, not as in memory now).
    pub fn file_bytes(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let file = object::File::parse(&*self.data).ok()?;
        let stated = addr.checked_sub(self.bias)?;
        let bytes = file.segments().find_map(|s| s.data_range(stated, len).ok().flatten())?;
        // Re-borrow from self.data: the slice points into it, except an empty one, which may point anywhere.
        let start = (bytes.as_ptr() as usize).checked_sub(self.data.as_ptr() as usize)?;
        self.data.get(start..start.checked_add(bytes.len())?)
    }

    /// Run-time addresses of the signal restorers in the module's code (glibc's `__restore_rt`, found by its
    /// bytes: libc's own tables do not name it), for [`crate::model::sigframe::interrupted_stacks`].
    pub fn restorers(&self) -> Vec<u64> {
        use object::read::elf::ProgramHeader;
        let Ok(elf) = object::read::elf::ElfFile64::<object::Endianness>::parse(&*self.data) else {
            return Vec::new();
        };
        let e = elf.endian();
        let mut out = Vec::new();
        for ph in elf.elf_program_headers() {
            if ph.p_type(e) != object::elf::PT_LOAD || !ph.p_flags(e).contains(object::elf::PF_X) {
                continue;
            }
            let Ok(code) = ph.data(e, &*self.data) else { continue };
            let at = self.bias.wrapping_add(ph.p_vaddr(e));
            out.extend(crate::model::sigframe::find_restorers(at, code));
        }
        out
    }

    /// The unused tail of the page that ends an executable segment: (run-time address, length). No section of
    /// the file lies there (past the segment's last byte, before the next page, where no other segment starts),
    /// so nothing reads or runs those bytes; the call gate (`crate::x86::gate`) is written there. The largest
    /// such tail when there are several executable segments.
    pub fn exec_slack(&self) -> Option<(u64, u64)> {
        use object::read::elf::ProgramHeader;
        let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(&*self.data).ok()?;
        let e = elf.endian();
        let loads: Vec<_> =
            elf.elf_program_headers().iter().filter(|ph| ph.p_type(e) == object::elf::PT_LOAD).collect();
        let span = |ph: &&object::elf::ProgramHeader64<object::Endianness>| {
            let start = ph.p_vaddr(e);
            Some((start, start.checked_add(ph.p_memsz(e).max(ph.p_filesz(e)))?))
        };
        loads
            .iter()
            .filter(|ph| ph.p_flags(e).contains(object::elf::PF_X))
            .filter_map(|ph| {
                let (_, end) = span(ph)?;
                let page_end = end.checked_add(0xfff)? & !0xfff;
                let taken = loads
                    .iter()
                    .filter_map(span)
                    .any(|(s, t)| s < page_end && t > end && (s, t) != span(ph).unwrap_or_default());
                (page_end > end && !taken).then(|| (self.bias.wrapping_add(end), page_end - end))
            })
            .max_by_key(|&(_, len)| len)
    }

    /// The bytes of the file's PT_NOTE segments and their run-time addresses, to compare with what is mapped:
    /// equal notes mean the build-id in memory is the file's.
    pub fn notes(&self) -> Vec<(u64, &[u8])> {
        let Ok(elf) = object::read::elf::ElfFile64::<object::Endianness>::parse(&*self.data) else {
            return Vec::new();
        };
        use object::read::elf::ProgramHeader;
        let endian = elf.endian();
        elf.elf_program_headers()
            .iter()
            .filter(|ph| ph.p_type(endian) == object::elf::PT_NOTE)
            .filter_map(|ph| {
                let data = ph.data(endian, &*self.data).ok()?;
                Some((self.bias.wrapping_add(ph.p_vaddr(endian)), data))
            })
            .collect()
    }
}

/// Bytes as lowercase hex, two digits each (build-ids, recorded stack windows, planted bytes).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The bytes of [`hex`]'s text (either case); `None` for an odd length or a non-hex digit.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks_exact(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// Whether a module's file name is glibc's (`libc.so.6`, `libc-2.31.so`).
pub fn is_libc(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::maps::parse_maps;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
        assert_eq!(unhex(&hex(&all)), Some(all));
        assert_eq!(unhex("ABff"), Some(vec![0xab, 0xff]));
        assert_eq!(unhex(""), Some(vec![]));
        for bad in ["abc", "zz", "0g", "+1", " 1", "é0"] {
            assert_eq!(unhex(bad), None, "{bad}");
        }
    }

    #[test]
    fn groups_by_path() {
        let maps = parse_maps(
            "1000-2000 r--p 00000000 08:01 5 /lib/a.so\n2000-3000 r-xp 00001000 08:01 5 /lib/a.so\n\
             3000-4000 rw-p 00000000 00:00 0 \n4000-5000 r--p 00000000 08:01 6 /lib/b.so\n",
        );
        let g = group_modules(&maps);
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].start, g[0].end), (0x1000, 0x3000));
        assert_eq!(g[1].path, "/lib/b.so");
        assert_eq!(file_name(&g[1].path), "b.so");
        // The same file mapped again right after, from offset 0 (read as data): another instance, not the module.
        let maps = parse_maps(
            "1000-2000 r--p 00000000 08:01 5 /lib/a.so\n2000-3000 r-xp 00001000 08:01 5 /lib/a.so\n\
             3000-9000 r--p 00000000 08:01 5 /lib/a.so\n",
        );
        let g = group_modules(&maps);
        assert_eq!(g.iter().map(|m| (m.start, m.end)).collect::<Vec<_>>(), [(0x1000, 0x3000), (0x3000, 0x9000)]);
    }

    #[test]
    fn bias_of_own_executable() {
        // The test binary itself: parse it as if mapped at 0x5555_0000_0000 and find `main`'s bias back.
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        let g = group_modules(&maps);
        let m = g.iter().find(|m| m.path == me.to_str().unwrap()).unwrap().clone();
        let module = Module::parse(m, exe).unwrap();
        let here = bias_of_own_executable as *const () as u64;
        assert!(module.map.start <= here && here < module.map.end);
        assert!(module.bias <= here);
        assert!(module.build_id.is_some());
        // The tail of its code page: within an r-x mapping of ours, up to the page's end; none when this build's
        // code happens to end on a page boundary.
        use object::read::elf::ProgramHeader;
        let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(&*module.data).unwrap();
        let e = elf.endian();
        let code_end = elf
            .elf_program_headers()
            .iter()
            .filter(|ph| ph.p_type(e) == object::elf::PT_LOAD && ph.p_flags(e).contains(object::elf::PF_X))
            .map(|ph| ph.p_vaddr(e) + ph.p_memsz(e))
            .max()
            .unwrap();
        match module.exec_slack() {
            Some((at, len)) => {
                assert!(len > 0 && len < 4096 && (at + len) % 4096 == 0, "{at:#x} {len}");
                assert!(maps.iter().any(|m| m.contains(at) && m.is_exec()), "{at:#x}");
            }
            None => assert_eq!(code_end % 4096, 0, "the code ends at {code_end:#x}: a tail is left"),
        }
    }
}
