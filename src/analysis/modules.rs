//! The modules of one process, for unwinding and symbolizing its captured stacks. Loaded lazily from a
//! [`ModuleSource`] (reloaded when an address is not covered): the live process (`live::modules`), or a
//! recording read back on another day (`app::record`). Parsed CFI and symbol tables are cached by build-id.
//!
//! [`StackResolver`] puts the pieces together: a captured stack in, a symbolized [`Stack`] out.

use crate::analysis::symbolize::{SymModule, Symbolizer};
use crate::analysis::unwind::{self, End, MappedCfi, ModuleCfi, ModuleLookup, StackWindow, UnwindRegs, Unwound};
use crate::model::bytes::Bytes;
use crate::model::event::StackCapture;
use crate::model::modules::{self, Module, ModuleMap};
use crate::model::stack::Stack;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// One file's parsed data, shared by every mapping of it (keyed by build-id).
pub struct ModuleInfo {
    pub data: Bytes,
    pub debug: Option<(String, Bytes)>,
    pub cfi: Arc<ModuleCfi>,
}

/// One module as mapped in the process.
#[derive(Clone)]
pub struct Loaded {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub path: String,
    /// The file name, as frames show it.
    pub name: String,
    pub info: Arc<ModuleInfo>,
}

/// What a [`ModuleSource`] says when it cannot give a module: its own error (a live read, a recording's miss).
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// Why a module is not used: its frames are shown as addresses only.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Source(SourceError),
    #[error("not a readable ELF file ({0})")]
    NotElf(object::Error),
}

/// Where a process's modules come from: its memory map, each module's file (or the vDSO's image) and debug
/// file. Implementations may read a live process or a recording; everything here works on what they return.
pub trait ModuleSource: Send {
    /// The memory map now (the text of `/proc/PID/maps`); `None` when it cannot be read (the process is gone).
    fn maps(&mut self) -> Option<String>;
    /// A module's file as mapped, build-id checked, or the vDSO's image (`g.path == "[vdso]"`).
    fn module(&mut self, g: &ModuleMap) -> Result<Module, SourceError>;
    /// The separate debug file of a module (`path`, its file's `data`), if one is found.
    fn debug_file(&mut self, path: &str, data: &[u8]) -> Option<(String, Bytes)>;
}

/// The modules of a process, loaded on demand.
pub struct Modules {
    source: Box<dyn ModuleSource>,
    loaded: Vec<Loaded>,
    by_id: HashMap<Vec<u8>, Arc<ModuleInfo>>,
    /// Why a module could not be loaded, by path and start (shown once, not retried).
    pub failed: HashMap<(String, u64), LoadError>,
    /// Addresses that a fresh reload did not cover either: not worth another reload.
    misses: HashSet<u64>,
    pub reloads: u64,
}

impl Modules {
    pub fn new(source: Box<dyn ModuleSource>) -> Modules {
        Modules {
            source,
            loaded: Vec::new(),
            by_id: HashMap::new(),
            failed: HashMap::new(),
            misses: HashSet::new(),
            reloads: 0,
        }
    }

    /// Re-reads the maps: keeps modules still mapped at the same place, loads new ones, drops unmapped ones.
    pub fn reload(&mut self) {
        self.reloads += 1;
        let Some(text) = self.source.maps() else { return };
        let maps = crate::model::maps::parse_maps(&text);
        let mut groups = modules::group_modules(&maps);
        if let Some(v) = maps.iter().find(|m| m.path == "[vdso]") {
            groups.push(ModuleMap { path: v.path.clone(), start: v.start, end: v.end, first: v.clone() });
        }
        let mut next = Vec::new();
        for g in groups {
            // Only code matters here: a module without an executable mapping has no frames.
            if !maps.iter().any(|m| m.path == g.path && m.is_exec() && g.start <= m.start && m.end <= g.end) {
                continue;
            }
            if let Some(old) = self.loaded.iter().find(|l| l.start == g.start && l.path == g.path) {
                next.push(old.clone());
                continue;
            }
            let key = (g.path.clone(), g.start);
            if self.failed.contains_key(&key) {
                continue;
            }
            match self.load(&g) {
                Ok(l) => next.push(l),
                Err(e) => {
                    self.failed.insert(key, e);
                }
            }
        }
        next.sort_by_key(|l| l.start);
        self.loaded = next;
    }

    fn load(&mut self, g: &ModuleMap) -> Result<Loaded, LoadError> {
        let module = self.source.module(g).map_err(LoadError::Source)?;
        let info = match module.build_id.as_ref().and_then(|id| self.by_id.get(id)) {
            Some(info) => info.clone(),
            None => {
                let debug = if g.path.starts_with('/') { self.source.debug_file(&g.path, &module.data) } else { None };
                let cfi = ModuleCfi::parse(module.data.clone(), debug.as_ref().map(|(_, d)| d.clone()))
                    .map_err(LoadError::NotElf)?;
                let info = Arc::new(ModuleInfo { data: module.data.clone(), debug, cfi: Arc::new(cfi) });
                if let Some(id) = &module.build_id {
                    self.by_id.insert(id.clone(), info.clone());
                }
                info
            }
        };
        Ok(Loaded {
            start: g.start,
            end: g.end,
            bias: module.bias,
            name: modules::file_name(&g.path).to_string(),
            path: g.path.clone(),
            info,
        })
    }

    fn search(&self, addr: u64) -> Option<&Loaded> {
        let i = self.loaded.partition_point(|l| l.start <= addr).checked_sub(1)?;
        self.loaded.get(i).filter(|l| addr < l.end)
    }

    /// The module mapping `addr`, reloading the maps once if none does (a library loaded since).
    pub fn module_at(&mut self, addr: u64) -> Option<&Loaded> {
        if self.search(addr).is_none() && !self.misses.contains(&addr) {
            self.reload();
            if self.search(addr).is_none() {
                self.misses.insert(addr);
            }
        }
        self.search(addr)
    }

    pub fn loaded(&self) -> &[Loaded] {
        &self.loaded
    }
}

impl ModuleLookup for Modules {
    fn find(&mut self, addr: u64) -> Option<MappedCfi> {
        self.module_at(addr).map(|l| MappedCfi { bias: l.bias, cfi: l.info.cfi.clone() })
    }
}

/// Captured stacks to symbolized stacks, for one process: modules, parsed tables and names cached.
pub struct StackResolver {
    pub modules: Modules,
    pub symbolizer: Symbolizer,
    syms: SymTables,
    pub max_depth: usize,
}

impl StackResolver {
    /// Loads the process's module list now, so stacks can still be resolved if it exits soon after.
    pub fn new(source: Box<dyn ModuleSource>, max_depth: usize) -> StackResolver {
        let mut modules = Modules::new(source);
        modules.reload();
        StackResolver { modules, symbolizer: Symbolizer::default(), syms: HashMap::new(), max_depth }
    }

    /// Return addresses of a capture.
    pub fn unwind(&mut self, c: &StackCapture) -> Unwound {
        self.unwind_with_sps(c).0
    }

    /// Return addresses of a capture and each frame's stack pointer.
    pub fn unwind_with_sps(&mut self, c: &StackCapture) -> (Unwound, Vec<u64>) {
        let window =
            StackWindow::new(c.regs.sp(), &c.stack, c.asked).with_more(c.more.iter().map(|(a, w)| (*a, &w[..])));
        unwind::unwind_with_sps(UnwindRegs::from_regs(&c.regs), &window, &mut self.modules, self.max_depth)
    }

    /// Names, files and lines of unwound frames.
    pub fn symbolize(&mut self, u: &Unwound) -> Stack {
        let modules = &mut self.modules;
        symbolize_with(&mut self.symbolizer, &mut self.syms, u, |a| modules.module_at(a).cloned())
    }

    /// Unwinds and symbolizes.
    pub fn resolve_stack(&mut self, c: &StackCapture) -> (Stack, Unwound) {
        let u = self.unwind(c);
        (self.symbolize(&u), u)
    }
}

/// Symbol tables by the shared file data: one table per distinct file.
type SymTables = HashMap<usize, (Arc<ModuleInfo>, Rc<SymModule>)>;

/// Names, files and lines of unwound frames, finding modules with `module_at` (called only for an address not
/// symbolized before).
fn symbolize_with(
    symbolizer: &mut Symbolizer,
    syms: &mut SymTables,
    u: &Unwound,
    mut module_at: impl FnMut(u64) -> Option<Loaded>,
) -> Stack {
    let mut frames = Vec::new();
    for f in &u.frames {
        let got = symbolizer.frames(f, || {
            let l = module_at(f.lookup)?;
            let key = Arc::as_ptr(&l.info) as *const () as usize;
            let m = syms
                .entry(key)
                .or_insert_with(|| {
                    let debug = l.info.debug.as_ref().map(|(_, d)| d);
                    (l.info.clone(), Rc::new(SymModule::parse_shared(&l.info.data, debug)))
                })
                .1
                .clone();
            Some((l.name.clone(), l.bias, m))
        });
        frames.extend_from_slice(got);
    }
    Stack {
        frames,
        truncated: match &u.end {
            End::Outermost(_) => None,
            End::Truncated(why) => Some(why.clone()),
        },
    }
}

/// The modules of one process shared by two threads: one unwinds captures as they arrive (CFI only, so a
/// capture's stack window is dropped early), the other symbolizes (and may take long to load a module's DWARF
/// the first time) without holding the unwinder up.
#[derive(Clone)]
pub struct SharedModules(Arc<Mutex<Modules>>);

impl SharedModules {
    /// Loads the process's module list now, so stacks can still be resolved if it exits soon after.
    pub fn new(source: Box<dyn ModuleSource>) -> SharedModules {
        let mut modules = Modules::new(source);
        modules.reload();
        SharedModules(Arc::new(Mutex::new(modules)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Modules> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Return addresses of a capture, how many bytes of each of its stack copies the walk read (the main one,
    /// then [`StackCapture::more`] in order), and each frame's stack pointer.
    pub fn unwind(&self, c: &StackCapture, max_depth: usize) -> (Unwound, Vec<usize>, Vec<u64>) {
        let window =
            StackWindow::new(c.regs.sp(), &c.stack, c.asked).with_more(c.more.iter().map(|(a, w)| (*a, &w[..])));
        let (u, sps) = unwind::unwind_with_sps(UnwindRegs::from_regs(&c.regs), &window, &mut *self.lock(), max_depth);
        (u, window.seen_all(), sps)
    }

    /// What makes capture `c` (unwound to `u`) a known stack, if it can be one (see [`crate::analysis::known`]).
    pub fn propose(
        &self,
        c: &StackCapture,
        u: &Unwound,
        max_depth: usize,
        id: u32,
    ) -> Option<crate::model::known::Proposal> {
        crate::analysis::known::propose(c, u, &mut NoReload(&mut self.lock()), max_depth, id)
    }
}

/// The modules loaded so far, never reloaded: the unwinds a proposal runs over changed copies of a stack look up
/// made-up addresses, which must not make the maps be read again (a recording keeps each reading, and its replay
/// reads them back one by one).
struct NoReload<'a>(&'a mut Modules);

impl ModuleLookup for NoReload<'_> {
    fn find(&mut self, addr: u64) -> Option<MappedCfi> {
        self.0.search(addr).map(|l| MappedCfi { bias: l.bias, cfi: l.info.cfi.clone() })
    }
}

/// Symbolizes on [`SharedModules`]; symbol tables and names are cached, as in [`StackResolver`].
pub struct SharedSymbolizer {
    modules: SharedModules,
    symbolizer: Symbolizer,
    syms: SymTables,
    /// Modules mapped at the start whose symbol tables are not parsed yet, for [`Self::prefetch_one`].
    pending: Vec<Arc<ModuleInfo>>,
}

impl SharedSymbolizer {
    /// How many modules' symbol tables have been parsed, by the prefetch or by [`Self::symbolize`].
    pub fn parsed(&self) -> usize {
        self.syms.len()
    }
}

impl SharedSymbolizer {
    pub fn new(modules: SharedModules) -> SharedSymbolizer {
        let mut pending: Vec<Arc<ModuleInfo>> = modules.lock().loaded().iter().map(|l| l.info.clone()).collect();
        pending.dedup_by_key(|i| Arc::as_ptr(i));
        // Smallest first: many small modules are ready before one large debug file holds the thread.
        pending.sort_by_key(|i| std::cmp::Reverse(i.data.len() + i.debug.as_ref().map_or(0, |(_, d)| d.len())));
        SharedSymbolizer { modules, symbolizer: Symbolizer::default(), syms: HashMap::new(), pending }
    }

    /// Parses the symbol tables (and DWARF unit index; line tables stay lazy) of one more module mapped at the
    /// start, so the first event that meets it does not pay for that. Returns false when none is left.
    pub fn prefetch_one(&mut self) -> bool {
        let Some(info) = self.pending.pop() else { return false };
        let key = Arc::as_ptr(&info) as *const () as usize;
        self.syms.entry(key).or_insert_with(|| {
            let debug = info.debug.as_ref().map(|(_, d)| d);
            (info.clone(), Rc::new(SymModule::parse_shared(&info.data, debug)))
        });
        true
    }

    /// Names, files and lines of unwound frames; the modules are locked only to find one, never while parsing.
    pub fn symbolize(&mut self, u: &Unwound) -> Stack {
        let modules = &self.modules;
        symbolize_with(&mut self.symbolizer, &mut self.syms, u, |a| modules.lock().module_at(a).cloned())
    }
}
