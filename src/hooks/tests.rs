//! The analysis on a synthetic process: images, link map and memory built by hand, so each verdict is checked
//! against a known answer.

use super::elf::{Def, ElfInfo, Named, Slot, SlotKind};
use super::render::verdicts;
use super::*;
use crate::model::modules::{Module, ModuleMap};
use std::collections::HashMap;

struct FakeMem(HashMap<u64, u64>);

impl Memory for FakeMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Option<()> {
        if buf.len() != 8 {
            return None;
        }
        buf.copy_from_slice(&self.0.get(&addr)?.to_le_bytes());
        Some(())
    }
}

fn mapping(path: &str, start: u64, end: u64) -> Mapping {
    Mapping { start, end, perms: "r-xp".into(), offset: 0, dev: "08:01".into(), inode: 1, path: path.into() }
}

/// An image at `start` (bias = start) with code at stated 0x1000..0x8000 and the PLT at 0x1000..0x1100.
fn image(path: &str, start: u64, needed: &[&str], defs: &[(&str, u64, bool)], slots: Vec<Slot>) -> Image {
    let mut info = ElfInfo {
        soname: Some(modules::file_name(path).to_string()),
        needed: needed.iter().map(|s| s.to_string()).collect(),
        interp: false,
        dynamic: Some(0x9000),
        slots,
        plt: vec![(0x1000, 0x1100)],
        exec: vec![(0x1000, 0x8000)],
        ..Default::default()
    };
    for &(name, addr, ifunc) in defs {
        info.defs.entry(name.into()).or_default().push(Def { addr, size: 0x40, ifunc, version: None, hidden: false });
        info.names.push(Named { addr, size: 0x40, name: name.into() });
    }
    info.names.sort_by_key(|n| n.addr);
    let map =
        ModuleMap { path: path.into(), start, end: start + 0x10000, first: mapping(path, start, start + 0x10000) };
    Image { module: Module { map, bias: start, build_id: None, data: Vec::new().into() }, info, link_name: path.into() }
}

fn slot(symbol: &str, addr: u64, kind: SlotKind, initial: u64) -> Slot {
    Slot { addr, kind, symbol: symbol.into(), version: None, weak: false, initial }
}

const PROG: u64 = 0x10_0000;
const JEM: u64 = 0x20_0000;
const LIBC: u64 = 0x30_0000;
const PLUG: u64 = 0x40_0000;
const DEP: u64 = 0x50_0000;
const HOOK: u64 = 0x60_0000;

fn process() -> Process {
    use SlotKind::*;
    let prog = image(
        "/bin/prog",
        PROG,
        &["libc.so.6", "libhook.so"],
        &[],
        vec![
            slot("mmap", 0x9100, JumpSlot, 0x1010),
            slot("malloc", 0x9108, GlobDat, 0),
            slot("calloc", 0x9110, JumpSlot, 0x1020),
            slot("memcpy", 0x9118, JumpSlot, 0x1030),
            slot("only_local", 0x9120, GlobDat, 0),
        ],
    );
    let jem = image("/lib/libjem.so", JEM, &["libc.so.6"], &[("malloc", 0x2000, false)], vec![]);
    let libc = image(
        "/lib/libc.so.6",
        LIBC,
        &[],
        &[
            ("mmap", 0x2000, false),
            ("malloc", 0x3000, false),
            ("calloc", 0x3100, false),
            ("memcpy", 0x4000, true),
            ("__memmove_avx", 0x5000, false),
        ],
        vec![slot("malloc", 0x9100, GlobDat, 0)],
    );
    let hook = image("/lib/libhook.so", HOOK, &["libc.so.6"], &[("hook_mmap", 0x2000, false)], vec![]);
    let plug = image(
        "/opt/libplug.so",
        PLUG,
        &["libdep.so"],
        &[],
        vec![slot("only_local", 0x9100, GlobDat, 0), slot("malloc", 0x9108, GlobDat, 0)],
    );
    let dep = image("/opt/libdep.so", DEP, &[], &[("only_local", 0x2000, false)], vec![]);
    let images = vec![prog, jem, libc, hook, plug, dep];
    let maps = images.iter().map(|i| i.module.map.first.clone()).collect();
    Process {
        images,
        main: 0,
        // Program, preload, its dependencies at startup, then a dlopened plugin and its dependency.
        link_order: vec![0, 1, 2, 3, 4, 5],
        maps,
    }
}

fn memory() -> FakeMem {
    FakeMem(HashMap::from([
        (PROG + 0x9100, HOOK + 0x2000), // mmap: rewritten to the hook
        (PROG + 0x9108, JEM + 0x2000),  // malloc: jemalloc, as the lookup gives
        (PROG + 0x9110, PROG + 0x1020), // calloc: still the PLT (lazy)
        (PROG + 0x9118, LIBC + 0x5000), // memcpy: the implementation the IFUNC chose
        (PROG + 0x9120, 0),             // only_local: not in the program's scope
        (LIBC + 0x9100, JEM + 0x2000),  // libc's own malloc slot: jemalloc
        (PLUG + 0x9100, DEP + 0x2000),  // plugin: found in its own local scope
        (PLUG + 0x9108, LIBC + 0x3000), // plugin's malloc: libc's, bypassing jemalloc
    ]))
}

fn row<'a>(r: &'a Report, module: &str, function: &str) -> &'a GotRow {
    r.got
        .iter()
        .find(|g| g.module == module && g.function == function)
        .unwrap_or_else(|| panic!("no row {module} {function}: {:#?}", r.got))
}

fn functions() -> Vec<String> {
    ["mmap", "malloc", "calloc", "memcpy", "only_local"].map(String::from).to_vec()
}

#[test]
fn classifies_every_kind_of_slot() {
    let p = process();
    let cs = crate::x86::breakpoints::disassembler().unwrap();
    let r = analyze(&p, &functions(), &[], &memory(), &cs);

    let mmap = row(&r, "/bin/prog", "mmap");
    assert_eq!(mmap.status, Status::PatchedAtRunTime);
    assert_eq!(mmap.at.as_ref().unwrap().to_string(), "libhook.so:hook_mmap");
    assert_eq!(mmap.expected, Some(LIBC + 0x2000));

    let malloc = row(&r, "/bin/prog", "malloc");
    assert_eq!(malloc.status, Status::InterposedAtLoad);
    assert_eq!(malloc.interposer, Some(Interposer::Preload));
    assert_eq!(row(&r, "/lib/libc.so.6", "malloc").status, Status::InterposedAtLoad);

    let calloc = row(&r, "/bin/prog", "calloc");
    assert_eq!(calloc.status, Status::Unresolved);
    assert!(calloc.at.as_ref().unwrap().plt);

    let memcpy = row(&r, "/bin/prog", "memcpy");
    assert_eq!(memcpy.status, Status::Ok, "an IFUNC's slot may hold any code address of its definer");
    assert!(memcpy.ifunc);
    assert_eq!(memcpy.at.as_ref().unwrap().symbol.as_deref(), Some("__memmove_avx"));

    // RTLD_LOCAL: the plugin sees its own dependency; the program does not.
    assert_eq!(row(&r, "/opt/libplug.so", "only_local").status, Status::Ok);
    assert_eq!(row(&r, "/bin/prog", "only_local").status, Status::Undefined);
    // The plugin's malloc slot was pointed past jemalloc at libc: patched.
    let pm = row(&r, "/opt/libplug.so", "malloc");
    assert_eq!(pm.status, Status::PatchedAtRunTime);
    assert_eq!(pm.expected, Some(JEM + 0x2000));

    // One verdict line per function, worst first.
    let v = verdicts(&r, &functions());
    let text: Vec<&str> = v.iter().map(|v| v.text.as_str()).collect();
    // (libc's entries are "unreadable" here: the synthetic images have no file bytes.)
    assert_eq!(
        text[0],
        "mmap: calls from prog go to libhook.so:hook_mmap, patched at run time (the dynamic linker gave \
         libc.so.6:mmap); entry in libc.so.6 at 0x302000 unreadable"
    );
    assert_eq!(
        text[1],
        "malloc: calls from libplug.so go to libc.so.6:malloc, patched at run time (the dynamic linker gave \
         libjem.so:malloc); calls from prog, libc.so.6 go to libjem.so:malloc, interposed at load (LD_PRELOAD); entry in libc.so.6 at 0x303000 unreadable"
    );
    assert!(text[2].starts_with("calloc: calls from prog are unresolved"), "{}", text[2]);
    assert_eq!(v[2].status, Status::Unresolved);
}

#[test]
fn unreadable_slots_and_missing_memory_do_not_panic() {
    let p = process();
    let cs = crate::x86::breakpoints::disassembler().unwrap();
    let r = analyze(&p, &functions(), &[2], &FakeMem(HashMap::new()), &cs);
    assert!(r.got.iter().all(|g| g.status == Status::Unreadable));
    // libc's entries cannot be compared: the file bytes are not there.
    assert!(r.inline.iter().all(|i| i.status == EntryStatus::Unreadable));
}
