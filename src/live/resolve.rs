//! From a live process to probe sites: which libc it mapped, whether the file read is the one mapped
//! (build-id), where `syscall()` is at run time, and how to step over its first instruction.

use crate::live::Error;
use crate::live::modules::ModuleCache;
use crate::model::maps::{self, Mapping};
use crate::model::modules::{self, Module, ModuleMap};
use crate::os::mem::ProcMem;
use crate::os::{Tid, procfs};
use crate::x86::breakpoints::{self, Insn};

/// The process's maps, parsed.
pub fn read_maps(pid: Tid) -> Result<Vec<Mapping>, Error> {
    let text = procfs::read_maps(pid).map_err(|error| Error::Maps { pid, error })?;
    Ok(maps::parse_maps(&text))
}

pub use crate::model::modules::is_libc;

/// Reads and parses a mapped module as the target sees it, and checks that the notes (build-id) mapped in
/// memory are the file's, so a library replaced on disk is never trusted. The file is read once per command
/// (see [`ModuleCache`]): every later call for the same mapping gets the same bytes, checked again.
pub fn read_module(pid: Tid, map: &ModuleMap, mem: Option<&ProcMem>) -> Result<Module, Error> {
    ModuleCache::shared().read(pid, map, mem)
}

/// [`read_module`] without the cache. Each place the file may be read ([`procfs::mapped_file_candidates`]) is
/// tried in turn; the first whose notes match what is mapped wins.
pub(super) fn read_module_file(pid: Tid, map: &ModuleMap, mem: Option<&ProcMem>) -> Result<Module, Error> {
    let mut mismatch = false;
    let mut last_err = None;
    for path in procfs::mapped_file_candidates(pid, map.first.start, map.first.end, &map.path) {
        let data = match crate::os::filemap::read_file(&path) {
            Ok(d) => d,
            Err(e) => {
                last_err = Some(e);
                continue;
            }
        };
        let Ok(module) = Module::parse(map.clone(), data) else {
            // Another file now at that path (not even this ELF's layout): try the next place.
            mismatch = true;
            continue;
        };
        if mem.is_none_or(|mem| notes_match(&module, mem)) {
            return Ok(module);
        }
        mismatch = true;
    }
    let path = map.path.clone();
    Err(match last_err {
        // A file was found but was not the mapped one: that, not an unreadable other place, is the news.
        _ if mismatch => Error::Replaced { pid, path },
        Some(error) => Error::Unreadable { pid, path, error },
        None => Error::NoPath { pid, path },
    })
}

/// Whether every PT_NOTE segment of the file (the build-id among them) equals what is mapped.
pub(super) fn notes_match(module: &Module, mem: &ProcMem) -> bool {
    module.notes().iter().all(|(addr, note)| {
        let mut got = vec![0u8; note.len()];
        // An unreadable note (not mapped) proves nothing either way; equal notes are required where readable.
        mem.read_exact(*addr, &mut got).is_err() || got == *note
    })
}

/// The libc mapped by the process.
pub fn find_libc(maps: &[Mapping]) -> Option<ModuleMap> {
    modules::group_modules(maps).into_iter().find(|m| is_libc(&m.path))
}

/// The module whose `syscall()` and memory functions a trace watches: the libc mapped (glibc's `libc.so.6`), else
/// the first module that defines `syscall`, the executable first: a static binary (glibc's or musl's, its libc
/// linked in) or a dynamic musl program (musl's libc is its dynamic loader, `ld-musl-x86_64.so.1`). `None` when
/// no module has one.
pub fn find_syscall_module(pid: Tid, maps: &[Mapping], mem: Option<&ProcMem>) -> Option<ModuleMap> {
    let all = modules::group_modules(maps);
    if let Some(libc) = all.iter().find(|m| is_libc(&m.path)) {
        return Some(libc.clone());
    }
    all.into_iter().find(|m| read_module(pid, m, mem).is_ok_and(|module| module.find_symbol("syscall").is_some()))
}

/// The address and the file's code bytes of a `syscall()`-style wrapper `symbol` in `module`; checks that a
/// `syscall` instruction follows its entry, which a matching hit is stepped through.
pub fn wrapper_code(module: &Module, symbol: &str) -> Result<(u64, Vec<u8>), Error> {
    let (path, sym) = (|| module.map.path.clone(), || symbol.to_string());
    let (addr, _) = module.find_symbol(symbol).ok_or_else(|| Error::NoSymbol { path: path(), symbol: sym() })?;
    let code = module
        .file_bytes(addr, breakpoints::WRAPPER_BYTES)
        .or_else(|| module.file_bytes(addr, 64))
        .or_else(|| module.file_bytes(addr, 16))
        .ok_or_else(|| Error::OutsideFile { path: path(), symbol: sym(), addr })?;
    let cs = breakpoints::disassembler().ok_or(Error::Disassembler)?;
    let decoded = breakpoints::decode(&cs, code, addr, breakpoints::WRAPPER_INSNS);
    match decoded.iter().position(|d| d.insn == Some(Insn::Syscall)) {
        Some(0) | None => Err(Error::NotAWrapper { path: path(), symbol: sym() }),
        Some(_) => Ok((addr, code.to_vec())),
    }
}
