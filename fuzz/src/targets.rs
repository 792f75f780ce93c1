//! One function per fuzz target: hostile bytes in, no panic out. Used by the fuzz binaries (fuzz_targets/) and
//! replayed over the committed corpus by the main crate's `cargo test` (tests/it/fuzz_replay.rs).
//!
//! Targets still to add as their modules land (one function here, one file in fuzz_targets/, one [[bin]] in
//! Cargo.toml, one corpus directory, one line in `TARGETS`):

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use syscatch::testing::model::maps::{self, Mapping};
use syscatch::testing::model::modules::{Module, ModuleMap};
use syscatch::testing::model::regs::{Reg, Regs};
use syscatch::testing::x86::breakpoints::{self, Memory};

/// A fuzz target's body.
pub type Body = fn(&[u8]);

/// Every target, by corpus directory name.
pub const TARGETS: &[(&str, Body)] = &[
    ("maps", maps),
    ("status", status),
    ("module", module),
    ("breakpoints", breakpoints),
    ("probe", probe),
    ("smaps", smaps),
    ("unwind", unwind),
    ("python", python),
];

/// Looks every address up in the one fuzzed module, mapped at bias 0.
struct OneModule(Arc<syscatch::testing::analysis::unwind::ModuleCfi>);

impl syscatch::testing::analysis::unwind::ModuleLookup for OneModule {
    fn find(&mut self, _addr: u64) -> Option<syscatch::testing::analysis::unwind::MappedCfi> {
        Some(syscatch::testing::analysis::unwind::MappedCfi { bias: 0, cfi: self.0.clone() })
    }
}

/// The unwinder and the symbolizer over a module whose bytes (ELF headers, .eh_frame, .debug_frame, symbol tables,
/// DWARF) come from the input after a 64-byte header (rip, rsp, rbp, a stack seed, and 32 bytes of stack).
pub fn unwind(data: &[u8]) {
    let elf: Arc<[u8]> = Arc::from(data.get(64..).unwrap_or(&[]));
    let Ok(cfi) = syscatch::testing::analysis::unwind::ModuleCfi::parse(elf.clone(), Some(elf.clone().into())) else {
        return;
    };
    let mut regs = syscatch::testing::analysis::unwind::UnwindRegs::default();
    regs.0[16] = Some(u64_at(data, 0));
    regs.0[7] = Some(u64_at(data, 8));
    regs.0[6] = Some(u64_at(data, 16));
    let stack: Vec<u8> = data.get(32..64).unwrap_or(&[]).iter().cycle().take(4096).copied().collect();
    let window = syscatch::testing::analysis::unwind::StackWindow::new(u64_at(data, 8), &stack, 4096);
    let mut lookup = OneModule(Arc::new(cfi));
    let u = syscatch::testing::analysis::unwind::unwind(regs, &window, &mut lookup, 64);
    let syms = syscatch::testing::analysis::symbolize::SymTable::parse(&[&elf]);
    let dwarf = syscatch::testing::analysis::symbolize::Dwarf::load(&elf);
    for f in &u.frames {
        let _ = syms.find(f.lookup);
        if let Some(d) = &dwarf {
            let _ = d.frames(f.lookup);
        }
    }
}

/// A probe script: parse, and for what parses, print and parse again (the printer must round-trip).
pub fn probe(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(script) = syscatch::testing::probe::parse_str(&text) {
        let again = syscatch::testing::probe::parse_str(&syscatch::testing::probe::print(&script));
        assert_eq!(again.ok(), Some(script), "print(parse(x)) parses back to the same script");
    }
}

/// `/proc/PID/smaps` text, the classification built on it, and the leak model reconciled with it.
pub fn smaps(data: &[u8]) {
    use syscatch::testing::model::smaps;
    let regions = smaps::parse_smaps(&String::from_utf8_lossy(data));
    let mut model = syscatch::testing::analysis::correlate::AddressSpace::new();
    for (i, r) in regions.iter().enumerate() {
        let _ = r.rss_swap();
        model.apply_call(
            9,
            &[0, r.map.len(), 3, 0x22, u64::MAX, 0],
            Some(r.map.start),
            syscatch::testing::analysis::correlate::StackId(i as u32),
        );
    }
    let spans: Vec<smaps::Span> = regions.iter().map(smaps::Span::of).collect();
    model.reconcile(&spans);
    let _ = model.stacks();
    let _ = model.growing(&spans, &spans);
    // The same text a line at a time, lean, and its lines as maps lines carried over from the whole sample.
    let mut stream = smaps::SmapsStream::lean();
    let text = String::from_utf8_lossy(data);
    let lean: Vec<smaps::SmapsRegion> = text.split_inclusive('\n').filter_map(|l| stream.line(l)).collect();
    assert!(lean.len() + usize::from(stream.finish().is_some()) == regions.len());
    let mut now: Vec<smaps::Span> = text.lines().filter_map(smaps::parse_maps_span).collect();
    let traced: Vec<(u64, u64)> = spans.iter().map(|s| (s.start, s.end)).collect();
    let _ = smaps::carry_over(&spans, &mut now, &traced);
}

/// `/proc/PID/maps` text, then the module grouping built on it.
pub fn maps(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let maps = maps::parse_maps(&text);
    for m in &maps {
        let _ = (m.len(), m.is_empty(), m.contains(m.start), m.is_exec(), m.is_file());
    }
    for g in syscatch::testing::model::modules::group_modules(&maps) {
        let _ = syscatch::testing::model::modules::file_name(&g.path);
        let _ = syscatch::testing::live::resolve::is_libc(&g.path);
    }
}

/// `/proc/PID/status` text.
pub fn status(data: &[u8]) {
    let _ = syscatch::testing::model::status::parse_status(&String::from_utf8_lossy(data));
}

fn u64_at(data: &[u8], i: usize) -> u64 {
    data.get(i..i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default())).unwrap_or(0)
}

/// An ELF file mapped at an address and file offset taken from the first 16 bytes of the input (the rest is the
/// file): load bias, symbols, file bytes at a symbol, notes, and the `syscall()` site plan built on them.
pub fn module(data: &[u8]) {
    let (start, offset) = (u64_at(data, 0) & !0xfff, u64_at(data, 8) & 0xffff_f000);
    let elf = data.get(16..).unwrap_or(&[]);
    module_mapped(elf, start, offset);
}

/// As [`module`], for a whole file mapped at `start` from file offset `offset`.
pub fn module_mapped(elf: &[u8], start: u64, offset: u64) {
    let first = Mapping {
        start,
        end: start.saturating_add(0x1000),
        perms: "r-xp".into(),
        offset,
        dev: "00:00".into(),
        inode: 1,
        path: "/fuzz/libc.so.6".into(),
    };
    let map = ModuleMap { path: first.path.clone(), start: first.start, end: first.end, first };
    let Ok(m) = Module::parse(map, Arc::from(elf)) else {
        return;
    };
    for name in ["syscall", "mmap", "", "\u{0}"] {
        if let Some((addr, size)) = m.find_symbol(name) {
            let _ = m.file_bytes(addr, size);
            let _ = m.file_bytes(addr, 64);
            let _ = m.file_bytes(addr, u64::MAX);
        }
    }
    let _ = m.file_bytes(0, 16);
    let _ = m.file_bytes(u64::MAX, 16);
    let _ = m.file_bytes(m.bias, u64::MAX);
    for (addr, note) in m.notes() {
        let _ = (addr, note.len());
    }
    let _ = syscatch::testing::live::resolve::wrapper_code(&m, "syscall");
}

struct FakeMem(RefCell<HashMap<u64, u64>>);

impl Memory for FakeMem {
    fn read_u64(&self, a: u64) -> Option<u64> {
        self.0.borrow().get(&a).copied().or(Some(a ^ 0x5555))
    }
    fn write_u64(&self, a: u64, v: u64) -> Option<()> {
        self.0.borrow_mut().insert(a, v);
        Some(())
    }
}

/// Machine code at an address from the first 8 bytes: decode, plan a wrapper, and emulate what was decoded on
/// registers from the next 8 bytes.
pub fn breakpoints(data: &[u8]) {
    let Some(cs) = breakpoints::disassembler() else {
        return;
    };
    let addr = u64_at(data, 0);
    let seed = u64_at(data, 8);
    let code = data.get(16..).unwrap_or(&[]);
    let decoded = breakpoints::decode(&cs, code, addr, 16);
    let _ = breakpoints::plan_wrapper(&cs, code, addr);
    let mut regs = Regs::zeroed();
    for (i, r) in [Reg::Rax, Reg::Rdi, Reg::Rsi, Reg::Rdx, Reg::Rcx, Reg::R8, Reg::R9, Reg::Rsp].into_iter().enumerate()
    {
        regs.set(r, seed.rotate_left(i as u32 * 8));
    }
    let mem = FakeMem(RefCell::new(HashMap::new()));
    for d in &decoded {
        let _ = breakpoints::emulate(d, &mut regs, &mem);
    }
}

/// The input as a target's memory: address = offset into the input.
struct Image<'a>(&'a [u8]);

impl syscatch::testing::python::Memory for Image<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let src = usize::try_from(addr).ok().and_then(|a| self.0.get(a..a.checked_add(buf.len())?));
        match src {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

/// The Python frame walk over the input as memory: byte 0 picks the version (5: 3.13, with `_Py_DebugOffsets`
/// at offset 32), bytes 1..9 are `_PyRuntime`'s address, 9..17 `PyCode_Type`'s, 17..25 the thread's `fs_base`
/// (its tid is 1). Each input is walked twice (the second time through the caches). The line tables and the
/// debug offsets parsers also get the whole input.
pub fn python(data: &[u8]) {
    use syscatch::testing::python::layout::{self, LineFormat};
    use syscatch::testing::python::{lines, walk};
    let _ = layout::parse_debug_offsets(data);
    for format in [LineFormat::Lnotab, LineFormat::Linetable310, LineFormat::Locations] {
        for offset in [-2, 0, 2, 10, 100, 1 << 20] {
            let _ = lines::parse_line(format, data, 1, offset);
        }
    }
    let pick = data.first().copied().unwrap_or(0) % 6;
    let layout = match pick {
        5 => layout::parse_debug_offsets(data.get(32..).unwrap_or(&[])).ok(),
        n => layout::layout_for(3, 8 + n),
    };
    let Some(layout) = layout else { return };
    let rt = walk::Runtime {
        layout,
        runtime: u64_at(data, 1),
        code_type: u64_at(data, 9),
        unicode_type: 0,
        bytes_type: 0,
        frame_type: 0,
    };
    let mut w = walk::Walker::new(rt);
    for _ in 0..2 {
        let _ = w.read_frames(&mut Image(data), 1, u64_at(data, 17));
    }
}
