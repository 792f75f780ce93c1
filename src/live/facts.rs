//! Facts of a live process that the findings rules look at, read after detach (memory reads only, no stop):
//! memory by class, the allocator, the environment as it is now (libc's `__environ` in the
//! target's memory), kernel settings.

use crate::analysis::rules::{self, ProcessFacts};
use crate::os::{Tid, procfs};
use std::collections::BTreeMap;

/// Everything the rules look at besides the traced stacks and the hook verdicts (`hooks::read::read_hook_facts`,
/// a layer above); `class_before` was read before the trace.
pub fn read_facts_but_hooks(pid: Tid, class_before: Option<BTreeMap<String, i64>>) -> ProcessFacts {
    let mut f = ProcessFacts { class_before, ..read_facts_but_memory(pid) };
    set_class_facts(&mut f, crate::live::memory::read_class_facts(pid));
    f
}

/// The facts but the hook verdicts and the memory by class: the environment and the kernel settings.
pub fn read_facts_but_memory(pid: Tid) -> ProcessFacts {
    let mut f = ProcessFacts::default();
    (f.env, f.env_source) = read_environment(pid);
    f.kernel = read_kernel();
    f
}

/// Memory by class, the arenas and the allocator, as `live::memory` read them (nothing when it could not).
pub fn set_class_facts(f: &mut ProcessFacts, class: Option<crate::live::memory::ClassFacts>) {
    if let Some((kb, arenas, alloc, heap)) = class {
        f.class_kb = Some(kb);
        f.arenas = arenas;
        f.allocator = alloc;
        f.heap = heap;
    }
}

/// The environment as it is now: the strings libc's `__environ` points at, in the target's memory (a server
/// that calls setenv after start, or Python's `os.environ[...] = ...`, changes only this). `None` when libc or
/// its `__environ` cannot be read.
pub fn read_live_environ(pid: Tid) -> Option<BTreeMap<String, String>> {
    let mem = crate::os::mem::ProcMem::open(pid).ok()?;
    let maps = crate::live::resolve::read_maps(pid).ok()?;
    let libc = crate::live::resolve::find_libc(&maps)?;
    let module = crate::live::resolve::read_module(pid, &libc, Some(&mem)).ok()?;
    let (var, _) = module.find_symbol("__environ").or_else(|| module.find_symbol("environ"))?;
    let array = mem.read_u64(var).ok()?;
    let mut env = BTreeMap::new();
    // Bounded: a corrupt array must not keep us reading.
    for i in 0..8192u64 {
        let Some(at) = i.checked_mul(8).and_then(|o| array.checked_add(o)) else { break };
        let Ok(p) = mem.read_u64(at) else { break };
        if p == 0 {
            break;
        }
        let bytes = read_c_string(pid, p, 32 << 10);
        let kv = String::from_utf8_lossy(&bytes);
        if let Some((k, v)) = kv.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
    }
    Some(env)
}

/// What the allocator reads besides the environment, into `alloc.config`. jemalloc: the `malloc_conf` string a
/// program may compile in (`const char *malloc_conf = "...";`, looked up in every module, the program first;
/// also `je_malloc_conf`), and the name `/etc/malloc.conf` links to in the process's root. tcmalloc and mimalloc
/// read their environment only (their variables are in `env`).
pub fn read_allocator_config(pid: Tid, alloc: &mut crate::analysis::memclass::Allocator) {
    if alloc.name != "jemalloc" {
        return;
    }
    let Ok(maps) = crate::live::resolve::read_maps(pid) else { return };
    let mem = crate::os::mem::ProcMem::open(pid).ok();
    for g in crate::model::modules::group_modules(&maps) {
        let Ok(module) = crate::live::resolve::read_module(pid, &g, mem.as_ref()) else { continue };
        for sym in ["malloc_conf", "je_malloc_conf"] {
            let Some((addr, _)) = module.find_symbol(sym) else { continue };
            let ptr = crate::os::mem::read_upto(pid, addr, 8);
            let Some(ptr) = ptr.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes) else { continue };
            if ptr != 0 {
                let text = String::from_utf8_lossy(&read_c_string(pid, ptr, 4096)).into_owned();
                let name = crate::model::modules::file_name(&g.path);
                alloc.config.push((format!("{sym} ({name})"), text));
            }
        }
    }
    if let Ok(link) = std::fs::read_link(format!("/proc/{pid}/root/etc/malloc.conf")) {
        alloc.config.push(("/etc/malloc.conf".into(), link.to_string_lossy().into_owned()));
    }
}

/// A NUL-terminated string of at most `max` bytes.
fn read_c_string(pid: Tid, addr: u64, max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        // Up to the end of the page, so a string near an unmapped page is still read.
        let chunk = (4096 - (at % 4096)) as usize;
        let got = crate::os::mem::read_upto(pid, at, chunk);
        if got.is_empty() {
            break;
        }
        if let Some(end) = got.iter().position(|&b| b == 0) {
            out.extend_from_slice(&got[..end]);
            return out;
        }
        out.extend_from_slice(&got);
        at += got.len() as u64;
    }
    out
}

/// The environment for the rules: live if readable, else the start-up one from /proc/PID/environ; the entries
/// of `GLIBC_TUNABLES` also as their own keys (`glibc.malloc.arena_max`).
pub fn read_environment(pid: Tid) -> (BTreeMap<String, String>, String) {
    let (mut env, source) = match read_live_environ(pid) {
        Some(env) => (env, "live, from __environ".to_string()),
        None => {
            let raw = procfs::read_environ(pid).unwrap_or_default();
            let env = raw
                .split(|&b| b == 0)
                .filter_map(|kv| {
                    let kv = String::from_utf8_lossy(kv);
                    kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect();
            (env, format!("/proc/{pid}/environ, the start-up environment"))
        }
    };
    if let Some(t) = env.get("GLIBC_TUNABLES").cloned() {
        env.extend(rules::parse_tunables(&t));
    }
    // jemalloc's other option sources, in its own order of precedence after the compiled-in one.
    if let Some(c) = read_jemalloc_conf_symbol(pid) {
        env.insert("jemalloc.malloc_conf".into(), c);
    }
    if let Ok(c) = procfs::read_malloc_conf_link(pid) {
        env.insert("/etc/malloc.conf".into(), c);
    }
    (env, source)
}

/// The string a program or jemalloc build sets in its `malloc_conf` (or `je_malloc_conf`) global: searched in
/// the main program and in mapped jemalloc libraries only (reading every module would be slow).
fn read_jemalloc_conf_symbol(pid: Tid) -> Option<String> {
    let mem = crate::os::mem::ProcMem::open(pid).ok()?;
    let maps = crate::live::resolve::read_maps(pid).ok()?;
    let modules = crate::model::modules::group_modules(&maps);
    let wanted = modules
        .iter()
        .enumerate()
        .filter(|(i, m)| *i == 0 || crate::model::modules::file_name(&m.path).contains("jemalloc"));
    for (_, m) in wanted {
        let Ok(module) = crate::live::resolve::read_module(pid, m, Some(&mem)) else { continue };
        for sym in ["malloc_conf", "je_malloc_conf"] {
            if let Some((addr, _)) = module.find_symbol(sym)
                && let Ok(p) = mem.read_u64(addr)
                && p != 0
            {
                let s = read_c_string(pid, p, 4096);
                return Some(String::from_utf8_lossy(&s).into_owned());
            }
        }
    }
    None
}

/// Kernel settings the rules may name.
pub fn read_kernel() -> BTreeMap<String, String> {
    let mut k = BTreeMap::new();
    for key in ["vm.overcommit_memory", "vm.max_map_count"] {
        if let Ok(v) = procfs::read_sysctl(key) {
            k.insert(key.to_string(), v);
        }
    }
    if let Ok(t) = procfs::read_thp() {
        // The selected mode is the bracketed word.
        if let Some(mode) = t.split_whitespace().find(|w| w.starts_with('[')) {
            k.insert("thp".into(), mode.trim_matches(['[', ']']).to_string());
        }
    }
    k
}
