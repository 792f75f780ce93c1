//! What hook forensics needs from one ELF file, parsed once from its bytes: the GOT slots it imports
//! functions through (JUMP_SLOT and GLOB_DAT relocations), the functions it exports (with versions and IFUNC
//! flags, as the dynamic linker's lookup sees them), names for addresses, its PLT and code ranges, and its
//! dynamic-section facts (soname, DT_NEEDED, DT_SYMBOLIC). Pure: addresses are as stated in the file.

use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader, Rela, SectionHeader, Sym};
use object::{Endianness, SymbolIndex};
use std::collections::HashMap;

/// How a GOT slot is filled by the dynamic linker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// `R_X86_64_JUMP_SLOT`: a PLT call goes through it; may be bound lazily.
    JumpSlot,
    /// `R_X86_64_GLOB_DAT`: an address-taking reference or a `-fno-plt` call; always bound at load.
    GlobDat,
}

impl SlotKind {
    pub fn name(self) -> &'static str {
        match self {
            SlotKind::JumpSlot => "JUMP_SLOT",
            SlotKind::GlobDat => "GLOB_DAT",
        }
    }
}

/// One GOT slot that imports a symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Stated address of the slot.
    pub addr: u64,
    pub kind: SlotKind,
    pub symbol: String,
    /// The version the reference asks for (`GLIBC_2.2.5`), from the file's version needs.
    pub version: Option<String>,
    pub weak: bool,
    /// The slot's content in the file: for a lazily bound JUMP_SLOT, the stated address of the PLT code that
    /// calls the resolver.
    pub initial: u64,
}

/// One exported definition of a symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Def {
    pub addr: u64,
    pub size: u64,
    /// `STT_GNU_IFUNC`: `addr` is the resolver, which picks the implementation at load time.
    pub ifunc: bool,
    pub version: Option<String>,
    /// A non-default version (`memcpy@GLIBC_2.2.5` next to `memcpy@@GLIBC_2.14`).
    pub hidden: bool,
}

/// A named address range, for naming where a pointer goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub addr: u64,
    pub size: u64,
    pub name: String,
}

#[derive(Debug, Clone, Default)]
pub struct ElfInfo {
    pub soname: Option<String>,
    pub needed: Vec<String>,
    /// Has PT_INTERP: a program started through the dynamic linker.
    pub interp: bool,
    /// Stated address of PT_DYNAMIC.
    pub dynamic: Option<u64>,
    /// DT_SYMBOLIC or DF_SYMBOLIC: the object looks in itself first.
    pub symbolic: bool,
    pub slots: Vec<Slot>,
    pub defs: HashMap<String, Vec<Def>>,
    /// Functions and objects from the dynamic and the full symbol table, sorted by address.
    pub names: Vec<Named>,
    /// `.plt`, `.plt.sec`, `.plt.got`: stated ranges.
    pub plt: Vec<(u64, u64)>,
    /// Executable PT_LOAD segments: stated ranges.
    pub exec: Vec<(u64, u64)>,
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn in_ranges(ranges: &[(u64, u64)], addr: u64) -> bool {
    ranges.iter().any(|&(a, b)| a <= addr && addr < b)
}

impl ElfInfo {
    /// Parses a 64-bit little-endian ELF file.
    pub fn parse(data: &[u8]) -> Result<ElfInfo, object::Error> {
        let file = ElfFile64::<Endianness>::parse(data)?;
        let endian = file.endian();
        let mut info = ElfInfo::default();
        for ph in file.elf_program_headers() {
            let vaddr = ph.p_vaddr(endian);
            match ph.p_type(endian) {
                elf::PT_INTERP => info.interp = true,
                elf::PT_DYNAMIC => info.dynamic = Some(vaddr),
                elf::PT_LOAD if ph.p_flags(endian).contains(elf::PF_X) => {
                    info.exec.push((vaddr, vaddr.saturating_add(ph.p_memsz(endian))));
                }
                _ => {}
            }
        }
        let sections = file.elf_section_table();
        for sh in sections.iter() {
            let name = sections.section_name(endian, sh).unwrap_or_default();
            if matches!(name, b".plt" | b".plt.sec" | b".plt.got") {
                let a = sh.sh_addr(endian);
                info.plt.push((a, a.saturating_add(sh.sh_size(endian))));
            }
        }
        let dynamic = sections.dynamic_table(endian, data)?;
        for d in dynamic.iter() {
            match d.tag {
                elf::DT_NEEDED => info.needed.extend(dynamic.string(d).ok().map(s)),
                elf::DT_SONAME => info.soname = dynamic.string(d).ok().map(s),
                elf::DT_SYMBOLIC => info.symbolic = true,
                elf::DT_FLAGS if d.val & elf::DF_SYMBOLIC.0 != 0 => info.symbolic = true,
                _ => {}
            }
        }

        let dynsym = sections.symbols(endian, data, elf::SHT_DYNSYM)?;
        let versions = sections.versions(endian, data).ok().flatten();
        let version_of = |i: SymbolIndex| -> (Option<String>, bool) {
            let Some(v) = &versions else { return (None, false) };
            let idx = v.version_index(endian, i);
            let name = v.version(idx.index()).ok().flatten().map(|v| s(v.name()));
            (name, idx.is_hidden())
        };
        for (i, sym) in dynsym.enumerate() {
            let Ok(name) = dynsym.symbol_name(endian, sym) else {
                continue;
            };
            if name.is_empty() || sym.is_undefined(endian) || sym.st_bind() == elf::STB_LOCAL {
                continue;
            }
            let vis = sym.st_visibility();
            if vis == elf::STV_HIDDEN || vis == elf::STV_INTERNAL {
                continue;
            }
            let ty = sym.st_type();
            if !matches!(ty, elf::STT_FUNC | elf::STT_GNU_IFUNC | elf::STT_OBJECT | elf::STT_NOTYPE) {
                continue;
            }
            let (version, hidden) = version_of(i);
            info.defs.entry(s(name)).or_default().push(Def {
                addr: sym.st_value(endian),
                size: sym.st_size(endian),
                ifunc: ty == elf::STT_GNU_IFUNC,
                version,
                hidden,
            });
        }

        let symtab = sections.symbols(endian, data, elf::SHT_SYMTAB)?;
        for table in [&dynsym, &symtab] {
            for sym in table.iter() {
                let ty = sym.st_type();
                if sym.is_undefined(endian) || !matches!(ty, elf::STT_FUNC | elf::STT_GNU_IFUNC | elf::STT_OBJECT) {
                    continue;
                }
                let Ok(name) = table.symbol_name(endian, sym) else {
                    continue;
                };
                if name.is_empty() {
                    continue;
                }
                info.names.push(Named { addr: sym.st_value(endian), size: sym.st_size(endian), name: s(name) });
            }
        }
        info.names.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
        info.names.dedup();

        // Relocation sections linked to the dynamic symbol table: .rela.dyn and .rela.plt.
        let dynsym_index = dynsym.section();
        for sh in sections.iter() {
            let Ok(Some((relas, link))) = sh.rela(endian, data) else {
                continue;
            };
            if link != dynsym_index {
                continue;
            }
            for r in relas {
                let kind = match r.r_type(endian, false) {
                    elf::R_X86_64_JUMP_SLOT => SlotKind::JumpSlot,
                    elf::R_X86_64_GLOB_DAT => SlotKind::GlobDat,
                    _ => continue,
                };
                let Some(si) = r.symbol(endian, false) else { continue };
                let Ok(sym) = dynsym.symbol(si) else { continue };
                let Ok(name) = dynsym.symbol_name(endian, sym) else {
                    continue;
                };
                let addr = r.r_offset(endian);
                let initial = file_u64(&file, endian, addr).unwrap_or(0);
                info.slots.push(Slot {
                    addr,
                    kind,
                    symbol: s(name),
                    version: version_of(si).0,
                    weak: sym.st_bind() == elf::STB_WEAK,
                    initial,
                });
            }
        }
        info.slots.sort_by_key(|sl| sl.addr);
        Ok(info)
    }

    /// The definition of `name` a reference asking for `version` binds to, as glibc's `check_match` does for
    /// the cases seen in practice: the same version name, or an unversioned definition; without a version
    /// asked, the default (non-hidden) one.
    pub fn lookup(&self, name: &str, version: Option<&str>) -> Option<&Def> {
        let defs = self.defs.get(name)?;
        match version {
            Some(v) => defs
                .iter()
                .find(|d| d.version.as_deref() == Some(v))
                .or_else(|| defs.iter().find(|d| d.version.is_none())),
            None => defs.iter().find(|d| !d.hidden).or_else(|| defs.first()),
        }
    }

    pub fn is_plt(&self, stated: u64) -> bool {
        in_ranges(&self.plt, stated)
    }

    pub fn is_exec(&self, stated: u64) -> bool {
        in_ranges(&self.exec, stated)
    }

    /// The symbol containing `stated`, and the offset into it. Among aliases, `prefer` wins, then a name without
    /// a leading underscore, then the shortest.
    pub fn name_of(&self, stated: u64, prefer: &str) -> Option<(&str, u64)> {
        let end = self.names.partition_point(|n| n.addr <= stated);
        let containing = |n: &&Named| n.addr == stated || (n.addr < stated && stated - n.addr < n.size);
        let candidates: Vec<&Named> = self.names[..end].iter().rev().take(64).filter(containing).collect();
        // The innermost symbol: the one starting closest below the address.
        let start = candidates.iter().map(|n| n.addr).max()?;
        let best = candidates
            .iter()
            .filter(|n| n.addr == start)
            .min_by_key(|n| (n.name != prefer, n.name.starts_with('_'), n.name.len(), n.name.clone()))?;
        Some((&best.name, stated - best.addr))
    }
}

/// The 8 bytes the file holds at stated address `addr` (in a loaded segment's file image).
fn file_u64(file: &ElfFile64<'_, Endianness>, endian: Endianness, addr: u64) -> Option<u64> {
    for ph in file.elf_program_headers() {
        if ph.p_type(endian) != elf::PT_LOAD {
            continue;
        }
        let data = ph.data(endian, file.data()).ok()?;
        let off = addr.checked_sub(ph.p_vaddr(endian))?;
        let off = usize::try_from(off).ok()?;
        if let Some(b) = data.get(off..off.checked_add(8)?) {
            return Some(u64::from_le_bytes(b.try_into().ok()?));
        }
    }
    None
}

/// `(type, value)` pairs of an auxiliary vector (`/proc/PID/auxv`), up to AT_NULL.
pub fn parse_auxv(bytes: &[u8]) -> Vec<(u64, u64)> {
    parse_pairs(bytes, 0)
}

/// `(tag, value)` pairs of a dynamic section as read from memory, up to DT_NULL.
pub fn parse_dynamic(bytes: &[u8]) -> Vec<(u64, u64)> {
    parse_pairs(bytes, elf::DT_NULL.0 as u64)
}

fn parse_pairs(bytes: &[u8], end: u64) -> Vec<(u64, u64)> {
    bytes
        .chunks_exact(16)
        .map(|c| {
            let (a, b) = c.split_at(8);
            let w = |x: &[u8]| u64::from_le_bytes(x.try_into().unwrap_or([0; 8]));
            (w(a), w(b))
        })
        .take_while(|&(t, _)| t != end)
        .collect()
}

pub const AT_PHDR: u64 = 3;
pub const DT_DEBUG: u64 = elf::DT_DEBUG.0 as u64;

/// The header of `struct r_debug` and of `struct link_map` (glibc, x86_64): only the public fields.
pub mod abi {
    /// `r_debug.r_map`.
    pub const R_MAP: u64 = 8;
    /// `link_map.l_addr`, `l_name`, `l_ld`, `l_next`.
    pub const L_ADDR: u64 = 0;
    pub const L_NAME: u64 = 8;
    pub const L_LD: u64 = 16;
    pub const L_NEXT: u64 = 24;
    pub const LINK_MAP_HEAD: usize = 32;
}

/// One entry of the dynamic linker's list of loaded objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkMapEntry {
    pub addr: u64,
    pub name: String,
    pub ld: u64,
}

/// Parses the first 32 bytes of a `struct link_map`: `(l_addr, l_name pointer, l_ld, l_next)`.
pub fn parse_link_map_head(b: &[u8]) -> Option<(u64, u64, u64, u64)> {
    let w = |o: u64| -> Option<u64> {
        let o = o as usize;
        Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
    };
    Some((w(abi::L_ADDR)?, w(abi::L_NAME)?, w(abi::L_LD)?, w(abi::L_NEXT)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_stop_at_terminator_and_truncate() {
        let mut b = Vec::new();
        for (t, v) in [(3u64, 0x40u64), (9, 0x1000), (0, 0), (5, 5)] {
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(parse_auxv(&b), vec![(3, 0x40), (9, 0x1000)]);
        assert_eq!(parse_auxv(&b[..20]), vec![(3, 0x40)]);
        assert_eq!(parse_link_map_head(&b[..31]), None);
        assert_eq!(parse_link_map_head(&b[..32]), Some((3, 0x40, 9, 0x1000)));
    }

    #[test]
    fn own_executable_imports_and_libc_exports() {
        // This test binary imports malloc through its GOT; libc defines it with a version.
        let me = std::fs::read("/proc/self/exe").unwrap();
        let info = ElfInfo::parse(&me).unwrap();
        assert!(info.interp);
        assert!(info.slots.iter().any(|s| s.symbol == "malloc"), "{:?}", info.slots);
        assert!(info.needed.iter().any(|n| n.starts_with("libc.so")));
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| crate::model::modules::is_libc(p))
            .unwrap();
        let libc = ElfInfo::parse(&std::fs::read(libc).unwrap()).unwrap();
        let d = libc.lookup("malloc", Some("GLIBC_2.2.5")).unwrap();
        assert!(!d.ifunc && d.addr != 0);
        // memcpy@@GLIBC_2.14 is an IFUNC; the old hidden memcpy@GLIBC_2.2.5 is not what an unversioned lookup gets.
        let m = libc.lookup("memcpy", None).unwrap();
        assert!(m.ifunc && !m.hidden, "{m:?}");
        assert_eq!(libc.name_of(d.addr, "malloc").map(|(n, o)| (n.to_string(), o)), Some(("malloc".into(), 0)));
        assert!(libc.lookup("no_such_function_here", None).is_none());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(ElfInfo::parse(b"\x7fELF\x02\x01\x01").is_err());
        assert!(ElfInfo::parse(&[]).is_err());
        let me = std::fs::read("/proc/self/exe").unwrap();
        for cut in [64, 100, 4096] {
            let _ = ElfInfo::parse(&me[..cut]);
        }
    }
}
