//! Hook forensics: who intercepted the memory functions of a process. Two kinds of interception are found.
//! A GOT slot (a module's pointer to an imported function) that holds something other than what the dynamic
//! linker's lookup gives is a patch made at run time; a slot that holds what the lookup gives, where the
//! definer shadows a later one (LD_PRELOAD of jemalloc, a program defining its own malloc), is interposition
//! at load. And a function whose first bytes in memory differ from the file's was patched inline.
//!
//! `read` takes a snapshot of a live process (memory reads only, no ptrace stop); everything else here is pure
//! over that snapshot and a [`Memory`] trait, and is tested without a process.

pub mod elf;
pub mod error;
pub mod inline;
pub mod read;
pub mod render;

pub use error::Error;

use crate::model::maps::Mapping;
use crate::model::modules::{self, Module};
use capstone::Capstone;
use elf::{ElfInfo, SlotKind};
use inline::{ENTRY_BYTES, Patch};
use std::collections::{HashSet, VecDeque};

/// The functions checked by default: everything that maps, unmaps or allocates memory.
pub const MEMORY_FUNCTIONS: &[&str] = &[
    "mmap",
    "mmap64",
    "munmap",
    "mremap",
    "madvise",
    "brk",
    "sbrk",
    "malloc",
    "free",
    "calloc",
    "realloc",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "malloc_usable_size",
];

/// The target's memory, as the analysis needs it.
pub trait Memory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Option<()>;

    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Some(u64::from_le_bytes(b))
    }
}

/// One loaded ELF module: its file (as mapped, build-id checked) and what was parsed from it.
pub struct Image {
    pub module: Module,
    pub info: ElfInfo,
    /// The name the dynamic linker knows it by (`l_name`), empty for the main program.
    pub link_name: String,
}

impl Image {
    pub fn path(&self) -> &str {
        &self.module.map.path
    }

    pub fn short(&self) -> &str {
        modules::file_name(self.path())
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.module.map.start <= addr && addr < self.module.map.end
    }

    /// Whether a DT_NEEDED entry names this image.
    fn answers_to(&self, needed: &str) -> bool {
        let base = modules::file_name(needed);
        self.info.soname.as_deref() == Some(needed)
            || self.short() == base
            || modules::file_name(&self.link_name) == base
    }
}

/// A snapshot of a process: its ELF images, the dynamic linker's list, its other mappings.
pub struct Process {
    pub images: Vec<Image>,
    /// Index of the main program in `images`.
    pub main: usize,
    /// Images in the order of the dynamic linker's list (`r_debug.r_map`).
    pub link_order: Vec<usize>,
    pub maps: Vec<Mapping>,
}

/// Where an address points: module and symbol when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub addr: u64,
    /// Path of the module or mapping; `None` for anonymous memory, `Some("")` never.
    pub module: Option<String>,
    pub symbol: Option<String>,
    pub offset: u64,
    /// In the module's PLT.
    pub plt: bool,
    /// Nothing is mapped there.
    pub unmapped: bool,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.unmapped {
            return write!(f, "unmapped memory at {:#x}", self.addr);
        }
        let Some(module) = &self.module else {
            return write!(f, "anonymous memory at {:#x}", self.addr);
        };
        let m = modules::file_name(module);
        match (&self.symbol, self.plt) {
            (_, true) => write!(f, "{m}:PLT at {:#x}", self.addr),
            (Some(s), _) if self.offset == 0 => write!(f, "{m}:{s}"),
            (Some(s), _) => write!(f, "{m}:{s}+{:#x}", self.offset),
            (None, _) => write!(f, "{m} at {:#x}", self.addr),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Holds what the lookup gives, from the usual definer.
    Ok,
    /// The weak reference has no definer and the slot is 0.
    Undefined,
    /// Lazy binding: the slot still points at its PLT code; the first call will bind it.
    Unresolved,
    /// The slot could not be read.
    Unreadable,
    /// Holds what the lookup gives, and the definer shadows a later definition.
    InterposedAtLoad,
    /// Holds something other than what the lookup gives.
    PatchedAtRunTime,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Undefined => "undefined",
            Status::Unresolved => "unresolved",
            Status::Unreadable => "unreadable",
            Status::InterposedAtLoad => "interposed_at_load",
            Status::PatchedAtRunTime => "patched_at_run_time",
        }
    }
}

/// How an interposer got first in the lookup order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interposer {
    /// Loaded before the program's dependencies: LD_PRELOAD or /etc/ld.so.preload.
    Preload,
    /// The main program or a dependency earlier in the order defines it.
    LinkOrder,
}

#[derive(Debug, Clone)]
pub struct GotRow {
    pub function: String,
    /// Path of the module that owns the slot.
    pub module: String,
    pub kind: SlotKind,
    /// Run-time address of the slot.
    pub slot: u64,
    pub value: Option<u64>,
    pub at: Option<Place>,
    /// What the dynamic linker's lookup gives (for an IFUNC: its resolver).
    pub expected: Option<u64>,
    pub expected_at: Option<Place>,
    pub ifunc: bool,
    pub status: Status,
    pub interposer: Option<Interposer>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryStatus {
    Intact,
    Patched(Patch),
    /// The file or the memory could not be read there.
    Unreadable,
}

#[derive(Debug, Clone)]
pub struct InlineRow {
    pub function: String,
    pub module: String,
    pub addr: u64,
    pub file_bytes: Vec<u8>,
    pub memory_bytes: Vec<u8>,
    pub first_diff: Option<usize>,
    pub status: EntryStatus,
    pub target: Option<Place>,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub got: Vec<GotRow>,
    pub inline: Vec<InlineRow>,
    pub warnings: Vec<String>,
}

/// The dynamic linker's lookup scopes, derived from the link map and DT_NEEDED.
struct Scopes {
    /// Objects loaded at startup (the program, preloads, their dependencies), in link-map order: the global
    /// scope. Objects loaded later by dlopen are assumed RTLD_LOCAL (glibc's flag is in a private field).
    global: Vec<usize>,
    startup: HashSet<usize>,
    preload: HashSet<usize>,
}

/// The images reached from `roots` through DT_NEEDED, breadth first, matching names against images in
/// link-map order.
fn closure(p: &Process, roots: &[usize]) -> Vec<usize> {
    let mut seen: Vec<usize> = Vec::new();
    let mut queue: VecDeque<usize> = roots.iter().copied().collect();
    while let Some(i) = queue.pop_front() {
        if seen.contains(&i) {
            continue;
        }
        seen.push(i);
        for need in &p.images[i].info.needed {
            if let Some(&j) = p.link_order.iter().find(|&&j| p.images[j].answers_to(need)) {
                queue.push_back(j);
            }
        }
    }
    seen
}

fn scopes(p: &Process) -> Scopes {
    let from_main: HashSet<usize> = closure(p, &[p.main]).into_iter().collect();
    // glibc loads preloads right after the program, before its dependencies.
    let preload: Vec<usize> =
        p.link_order.iter().copied().skip_while(|&i| i == p.main).take_while(|i| !from_main.contains(i)).collect();
    let mut startup: HashSet<usize> = from_main;
    startup.extend(closure(p, &preload));
    let global = p.link_order.iter().copied().filter(|i| startup.contains(i)).collect();
    Scopes { global, startup, preload: preload.into_iter().collect() }
}

impl Scopes {
    /// The order in which a reference from image `from` is looked up.
    fn of(&self, p: &Process, from: usize) -> Vec<usize> {
        let mut out = Vec::new();
        if p.images[from].info.symbolic {
            out.push(from);
        }
        out.extend(&self.global);
        if !self.startup.contains(&from) {
            out.extend(closure(p, &[from]));
        }
        let mut seen = HashSet::new();
        out.retain(|i| seen.insert(*i));
        out
    }
}

/// Names an address: the image and symbol containing it, else the mapping.
pub fn place(p: &Process, addr: u64, prefer: &str) -> Place {
    let mut pl = Place { addr, module: None, symbol: None, offset: 0, plt: false, unmapped: false };
    if let Some(img) = p.images.iter().find(|i| i.contains(addr)) {
        pl.module = Some(img.path().to_string());
        if let Some(stated) = addr.checked_sub(img.module.bias) {
            pl.plt = img.info.is_plt(stated);
            if let Some((name, off)) = img.info.name_of(stated, prefer) {
                pl.symbol = Some(name.to_string());
                pl.offset = off;
            }
        }
        return pl;
    }
    match p.maps.iter().find(|m| m.contains(addr)) {
        Some(m) if !m.path.is_empty() => pl.module = Some(m.path.clone()),
        Some(_) => {}
        None => pl.unmapped = true,
    }
    pl
}

/// The definer a lookup of `name` (asking for `version`) finds in `scope`, with the definition's run-time
/// address, and whether a later object in the scope also defines it (so the definer interposes).
fn lookup(p: &Process, scope: &[usize], name: &str, version: Option<&str>) -> Option<(usize, u64, bool, bool)> {
    let mut found = scope.iter().filter_map(|&i| {
        let d = p.images[i].info.lookup(name, version)?;
        (d.addr != 0).then_some((i, d))
    });
    let (i, d) = found.next()?;
    let shadows = found.next().is_some();
    Some((i, p.images[i].module.bias.wrapping_add(d.addr), d.ifunc, shadows))
}

/// Classifies every GOT slot for `functions` in every image of the link map, and compares the entries of
/// those functions in libc and in `entry_modules` with the file.
pub fn analyze(p: &Process, functions: &[String], entry_modules: &[usize], mem: &dyn Memory, cs: &Capstone) -> Report {
    let mut report = Report::default();
    let sc = scopes(p);
    let wanted: HashSet<&str> = functions.iter().map(String::as_str).collect();
    for &from in &p.link_order {
        let img = &p.images[from];
        let scope = sc.of(p, from);
        for slot in img.info.slots.iter().filter(|s| wanted.contains(s.symbol.as_str())) {
            report.got.push(classify_slot(p, &sc, &scope, from, slot, mem));
        }
    }
    for (i, img) in p.images.iter().enumerate() {
        if !p.link_order.contains(&i) && img.module.map.first.is_exec() {
            report
                .warnings
                .push(format!("{} is mapped but not in the dynamic linker's list: its GOT is not checked", img.path()));
        }
    }
    let mut entry_images: Vec<usize> = p
        .images
        .iter()
        .enumerate()
        .filter(|(_, im)| crate::model::modules::is_libc(im.path()))
        .map(|(i, _)| i)
        .collect();
    for &i in entry_modules {
        if !entry_images.contains(&i) {
            entry_images.push(i);
        }
    }
    for &i in &entry_images {
        for f in functions {
            if let Some(row) = check_entry(p, i, f, mem, cs) {
                report.inline.push(row);
            }
        }
    }
    report
}

fn classify_slot(p: &Process, sc: &Scopes, scope: &[usize], from: usize, slot: &elf::Slot, mem: &dyn Memory) -> GotRow {
    let img = &p.images[from];
    let bias = img.module.bias;
    let at_slot = bias.wrapping_add(slot.addr);
    let value = mem.read_u64(at_slot);
    let found = lookup(p, scope, &slot.symbol, slot.version.as_deref());
    let expected = found.map(|f| f.1);
    let ifunc = found.is_some_and(|f| f.2);
    let status = match (value, found) {
        (None, _) => Status::Unreadable,
        (Some(v), _)
            if slot.kind == SlotKind::JumpSlot && slot.initial != 0 && v == bias.wrapping_add(slot.initial) =>
        {
            Status::Unresolved
        }
        (Some(v), Some((definer, want, is_ifunc, shadows))) => {
            // An IFUNC's slot holds the implementation its resolver chose, which only running the resolver
            // tells; any address in the definer's code is accepted.
            let matches = v == want
                || (is_ifunc
                    && p.images[definer].contains(v)
                    && v.checked_sub(p.images[definer].module.bias).is_some_and(|s| p.images[definer].info.is_exec(s)));
            match (matches, shadows) {
                (true, true) => Status::InterposedAtLoad,
                (true, false) => Status::Ok,
                (false, _) => Status::PatchedAtRunTime,
            }
        }
        (Some(0), None) => Status::Undefined,
        (Some(_), None) => Status::PatchedAtRunTime,
    };
    let interposer = match (status, found) {
        (Status::InterposedAtLoad, Some((definer, ..))) if sc.preload.contains(&definer) => Some(Interposer::Preload),
        (Status::InterposedAtLoad, Some(_)) => Some(Interposer::LinkOrder),
        _ => None,
    };
    GotRow {
        function: slot.symbol.clone(),
        module: img.path().to_string(),
        kind: slot.kind,
        slot: at_slot,
        value,
        at: value.filter(|&v| v != 0).map(|v| place(p, v, &slot.symbol)),
        expected,
        expected_at: expected.map(|e| place(p, e, &slot.symbol)),
        ifunc,
        status,
        interposer,
    }
}

fn check_entry(p: &Process, i: usize, function: &str, mem: &dyn Memory, cs: &Capstone) -> Option<InlineRow> {
    let img = &p.images[i];
    let def = img.info.lookup(function, None)?;
    if def.addr == 0 || !img.info.is_exec(def.addr) {
        return None;
    }
    let addr = img.module.bias.wrapping_add(def.addr);
    let mut row = InlineRow {
        function: function.to_string(),
        module: img.path().to_string(),
        addr,
        file_bytes: Vec::new(),
        memory_bytes: Vec::new(),
        first_diff: None,
        status: EntryStatus::Unreadable,
        target: None,
    };
    let Some(file) = img.module.file_bytes(addr, ENTRY_BYTES as u64) else {
        return Some(row);
    };
    row.file_bytes = file.to_vec();
    let mut got = vec![0u8; file.len()];
    if mem.read(addr, &mut got).is_none() {
        return Some(row);
    }
    row.first_diff = inline::first_difference(&got, file);
    row.status = match row.first_diff {
        None => EntryStatus::Intact,
        Some(d) => {
            // Decode past the 16 compared bytes when memory allows: a redirect may straddle them.
            let mut longer = vec![0u8; 32];
            let code = if mem.read(addr, &mut longer).is_some() { &longer } else { &got };
            let patch = inline::decode_patch(cs, code, addr, d, &|a| mem.read_u64(a));
            if let Patch::Jump { target, .. } = &patch {
                row.target = Some(place(p, *target, ""));
            }
            EntryStatus::Patched(patch)
        }
    };
    row.memory_bytes = got;
    Some(row)
}

#[cfg(test)]
mod tests;
