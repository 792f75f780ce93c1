//! The snapshot of a live process that hook forensics analyses, taken with memory reads only (`/proc/PID/mem`,
//! which root reads without attaching; the target never stops): its ELF modules read as it sees them (build-id
//! checked), and the dynamic linker's list of loaded objects, found through `r_debug` (DT_DEBUG in the main
//! program's dynamic section in memory, else ld.so's `_r_debug`).

use super::elf::{self, ElfInfo, LinkMapEntry, abi};
use super::{Error, Image, Memory, Process};
use crate::live::process::{self, Ids};
use crate::live::{self, resolve};
use crate::model::modules::{self, ModuleMap};
use crate::os::mem::ProcMem;
use crate::os::{Tid, procfs};
use std::collections::HashSet;

/// Most entries walked in the link map and in a dynamic section: a corrupt list ends, it never loops.
const MAX_OBJECTS: usize = 4096;
const MAX_DYNAMIC: usize = 1024;
const MAX_NAME: usize = 4096;

/// The target's memory through `/proc/PID/mem`.
pub struct ProcMemory(pub ProcMem);

impl Memory for ProcMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Option<()> {
        self.0.read_exact(addr, buf).ok()
    }
}

/// A NUL-terminated string in the target, read in small pieces (a name may end just before an unmapped page).
fn read_c_string(mem: &dyn Memory, addr: u64) -> Option<String> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < MAX_NAME {
        let mut b = [0u8; 64];
        // Do not cross a page boundary in one read.
        let room = (0x1000 - (at & 0xfff)) as usize;
        let n = room.min(b.len());
        mem.read(at, &mut b[..n])?;
        if let Some(z) = b[..n].iter().position(|&c| c == 0) {
            out.extend_from_slice(&b[..z]);
            return Some(String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(&b[..n]);
        at = at.checked_add(n as u64)?;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Walks `r_debug.r_map`.
pub fn read_link_map(mem: &dyn Memory, r_debug: u64) -> Vec<LinkMapEntry> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut at = mem.read_u64(r_debug.wrapping_add(abi::R_MAP)).unwrap_or(0);
    while at != 0 && out.len() < MAX_OBJECTS && seen.insert(at) {
        let mut head = [0u8; abi::LINK_MAP_HEAD];
        if mem.read(at, &mut head).is_none() {
            break;
        }
        let Some((addr, name_ptr, ld, next)) = elf::parse_link_map_head(&head) else {
            break;
        };
        let name = if name_ptr == 0 { String::new() } else { read_c_string(mem, name_ptr).unwrap_or_default() };
        out.push(LinkMapEntry { addr, name, ld });
        at = next;
    }
    out
}

/// Whether the module's first mapping holds an ELF header (data files are mapped too: locale archives, fonts).
fn is_elf_image(mem: &dyn Memory, map: &ModuleMap) -> bool {
    let mut magic = [0u8; 4];
    map.first.offset == 0 && mem.read(map.first.start, &mut magic).is_some() && &magic == b"\x7fELF"
}

/// `r_debug`'s address: DT_DEBUG of the main program's dynamic section as in memory, else ld.so's `_r_debug`.
fn find_r_debug(images: &[Image], main: usize, mem: &dyn Memory) -> Option<u64> {
    let m = &images[main];
    if let Some(dynamic) = m.info.dynamic {
        let mut bytes = vec![0u8; MAX_DYNAMIC * 16];
        let at = m.module.bias.wrapping_add(dynamic);
        // Read in 16-byte entries until DT_NULL: the section's size in memory is not known here.
        let mut n = 0;
        while n < MAX_DYNAMIC && mem.read(at.wrapping_add(n as u64 * 16), &mut bytes[n * 16..n * 16 + 16]).is_some() {
            n += 1;
            if bytes[(n - 1) * 16..(n - 1) * 16 + 8] == [0; 8] {
                break;
            }
        }
        let found = elf::parse_dynamic(&bytes[..n * 16]).into_iter().find(|&(t, v)| t == elf::DT_DEBUG && v != 0);
        if let Some((_, v)) = found {
            return Some(v);
        }
    }
    images
        .iter()
        .filter(|i| modules::file_name(i.path()).starts_with("ld-"))
        .find_map(|i| i.module.find_symbol("_r_debug").map(|(a, _)| a))
}

/// Takes the snapshot. Errors are one line naming the problem.
pub fn read_process(pid: Tid) -> Result<(Process, ProcMemory), Error> {
    let st = process::check_process(pid, Ids::Task).map_err(|e| match e {
        live::Error::NoProcess { pid } => Error::NoProcess { pid },
        live::Error::Zombie { pid, name } => Error::Zombie { pid, name },
        live::Error::KernelThread { pid, name } => Error::KernelThread { pid, name },
        e => Error::Live(e),
    })?;
    let name = || st.name.clone();
    let maps = resolve::read_maps(pid)?;
    let mem = ProcMem::open(pid).map_err(|error| Error::Memory { pid, error })?;
    let memory = ProcMemory(mem);
    let mut images = Vec::new();
    for map in modules::group_modules(&maps) {
        if !is_elf_image(&memory, &map) {
            continue;
        }
        let module = resolve::read_module(pid, &map, Some(&memory.0)).map_err(|error| Error::Module { pid, error })?;
        let info = ElfInfo::parse(&module.data).map_err(|error| Error::CorruptElf { path: map.path.clone(), error })?;
        images.push(Image { module, info, link_name: String::new() });
    }
    let auxv = procfs::read_auxv(pid).map_err(|error| Error::Auxv { pid, error })?;
    let phdr = elf::parse_auxv(&auxv)
        .into_iter()
        .find(|&(t, _)| t == elf::AT_PHDR)
        .map(|(_, v)| v)
        .ok_or_else(|| Error::NoProgramHeaders { pid, name: name() })?;
    let Some(main) = images.iter().position(|i| i.contains(phdr)) else {
        return Err(Error::ProgramUnmapped { pid, name: name(), phdr });
    };
    if !images[main].info.interp || images[main].info.dynamic.is_none() {
        return Err(Error::Static { pid, name: name() });
    }
    let r_debug = find_r_debug(&images, main, &memory).ok_or_else(|| Error::NoRDebug { pid, name: name() })?;
    let mut link_order = Vec::new();
    for entry in read_link_map(&memory, r_debug) {
        // l_ld is the object's dynamic section: an address inside exactly one mapped image.
        if let Some(i) = images.iter().position(|im| im.contains(entry.ld))
            && !link_order.contains(&i)
        {
            images[i].link_name = entry.name;
            link_order.push(i);
        }
    }
    if !link_order.contains(&main) {
        return Err(Error::ProgramNotListed { pid, name: name() });
    }
    Ok((Process { images, main, link_order, maps }, memory))
}

/// The images a `--module` argument names: the exact path, the file name, or a file-name prefix.
pub fn find_modules(p: &Process, wanted: &str) -> Vec<usize> {
    p.images
        .iter()
        .enumerate()
        .filter(|(_, im)| {
            let short = im.short();
            im.path() == wanted || short == wanted || short.starts_with(wanted)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The verdicts on the memory functions of process `pid` (GOT slots patched or interposed, entries patched), as
/// the findings rules see them; none when the process cannot be read.
pub fn read_hook_facts(pid: Tid) -> Vec<crate::analysis::rules::HookFact> {
    let Ok((process, mem)) = read_process(pid) else { return Vec::new() };
    let Some(cs) = crate::x86::breakpoints::disassembler() else { return Vec::new() };
    let functions: Vec<String> = super::MEMORY_FUNCTIONS.iter().map(|s| s.to_string()).collect();
    let report = super::analyze(&process, &functions, &[], &mem, &cs);
    super::render::hook_facts(&report, &functions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Byte-addressed memory; unmapped bytes fail the read.
    struct Bytes(BTreeMap<u64, u8>);

    impl Bytes {
        fn put(&mut self, addr: u64, data: &[u8]) {
            for (i, b) in data.iter().enumerate() {
                self.0.insert(addr + i as u64, *b);
            }
        }
        fn put_u64s(&mut self, addr: u64, words: &[u64]) {
            for (i, w) in words.iter().enumerate() {
                self.put(addr + 8 * i as u64, &w.to_le_bytes());
            }
        }
    }

    impl Memory for Bytes {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Option<()> {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = *self.0.get(&(addr + i as u64))?;
            }
            Some(())
        }
    }

    #[test]
    fn link_map_walk_ends_on_cycles_and_bad_pointers() {
        let mut m = Bytes(BTreeMap::new());
        // r_debug at 0x100: r_version, r_map.
        m.put_u64s(0x100, &[1, 0x1000]);
        // Two entries that point at each other, and names (one ending right at an unmapped byte).
        m.put_u64s(0x1000, &[0x5000, 0, 0x5100, 0x2000]);
        m.put_u64s(0x2000, &[0x7000, 0x3000, 0x7100, 0x1000]);
        // (Real memory is mapped by pages: the name's page is readable past its NUL.)
        m.put(0x3000, &[b"/lib/libc.so.6\0".as_slice(), &[0u8; 64]].concat());
        let l = read_link_map(&m, 0x100);
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].name.as_str(), l[0].ld), ("", 0x5100));
        assert_eq!((l[1].name.as_str(), l[1].addr), ("/lib/libc.so.6", 0x7000));
        // A next pointer into nothing ends the walk; an unterminated name is dropped, not fatal.
        m.put_u64s(0x2000, &[0x7000, 0x3ff0, 0x7100, 0xdead_0000]);
        m.put(0x3ff0, b"0123456789abcdef");
        let l = read_link_map(&m, 0x100);
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].name, "");
        assert!(read_link_map(&m, 0x9999).is_empty());
    }
}
