//! A live process as a [`ModuleSource`]: its maps from `/proc/PID/maps`, each file read as the target sees it
//! ([`resolve::read_module`], build-id checked against what is mapped), debug files looked up under the
//! process's root, and the vDSO (which has no file) read from its memory: it never changes while the process
//! lives.
//!
//! [`ModuleCache`] is the one reader of module files for a command: the probe sites, the facts, the hooks, the
//! Python runtime and the stacks all get a mapped file's bytes from it, read from disk once.

use crate::analysis::modules::{ModuleSource, SourceError};
use crate::analysis::symbolize;
use crate::live::{Error, resolve};
use crate::model::bytes::Bytes;
use crate::model::maps::Mapping;
use crate::model::modules::{Module, ModuleMap};
use crate::os::mem::{self, ProcMem};
use crate::os::{Tid, procfs};
use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

pub struct LiveModules {
    pid: Tid,
}

impl LiveModules {
    pub fn new(pid: Tid) -> LiveModules {
        LiveModules { pid }
    }

    pub fn boxed(pid: Tid) -> Box<dyn ModuleSource> {
        Box::new(LiveModules::new(pid))
    }
}

impl ModuleSource for LiveModules {
    fn maps(&mut self) -> Option<String> {
        procfs::read_maps(self.pid).ok()
    }

    fn module(&mut self, g: &ModuleMap) -> Result<Module, SourceError> {
        if g.path == "[vdso]" {
            let len = usize::try_from(g.end - g.start).map_err(|_| Error::VdsoTooLarge)?;
            let image = mem::read_upto(self.pid, g.start, len);
            if image.len() != len {
                return Err(Error::VdsoUnreadable.into());
            }
            return Ok(Module::parse(g.clone(), image)?);
        }
        let mem = ProcMem::open(self.pid).ok();
        Ok(resolve::read_module(self.pid, g, mem.as_ref())?)
    }

    fn debug_file(&mut self, path: &str, data: &[u8]) -> Option<(String, Bytes)> {
        let root = format!("/proc/{}/root", self.pid);
        symbolize::find_debug_file(&root, path, data, |p| crate::os::filemap::read_file(p).ok())
    }
}

/// Module files read so far, by mapping: a file is read (and parsed) once however many parts of a command ask
/// for it. The key is the mapping as `/proc/PID/maps` shows it (process, path, address, file offset, device and
/// inode), so a library unmapped and another mapped at the same address is a new entry; a hit is checked
/// against the notes mapped in memory again, so a file rewritten in place is read anew. Shared by the main
/// thread and the analysis thread: the lock is held only to look up or insert, never while a file is read.
pub struct ModuleCache {
    inner: Mutex<Files>,
    /// Signalled when a read ends (with or without a file).
    done: Condvar,
    /// At most this many bytes are kept; the least recently used files go first.
    limit: usize,
}

#[derive(Default)]
struct Files {
    by_map: HashMap<FileKey, (Bytes, u64)>,
    bytes: usize,
    tick: u64,
    reads: u64,
    /// Files being read now, by some thread.
    reading: HashSet<FileKey>,
}

enum Claim<'a> {
    Cached(Bytes),
    Read(Reading<'a>),
}

/// The right to read one file; dropping it (the read done, failed or panicked) lets the waiting callers go on.
struct Reading<'a> {
    cache: &'a ModuleCache,
    key: FileKey,
}

impl Reading<'_> {
    fn keep(&self, data: Bytes) {
        let mut files = self.cache.files();
        self.cache.keep(&mut files, self.key.clone(), data);
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.cache.files().reading.remove(&self.key);
        self.cache.done.notify_all();
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct FileKey {
    pid: Tid,
    path: String,
    start: u64,
    offset: u64,
    dev: String,
    inode: u64,
}

impl FileKey {
    fn of(pid: Tid, map: &ModuleMap) -> FileKey {
        let Mapping { start, offset, dev, inode, .. } = &map.first;
        FileKey { pid, path: map.path.clone(), start: *start, offset: *offset, dev: dev.clone(), inode: *inode }
    }
}

/// What the shared cache keeps: the files of one process's modules, libpython and libc among the largest.
const SHARED_LIMIT: usize = 1 << 30;

impl ModuleCache {
    pub fn new(limit: usize) -> ModuleCache {
        ModuleCache { inner: Mutex::new(Files::default()), done: Condvar::new(), limit }
    }

    /// The cache of this command.
    pub fn shared() -> &'static ModuleCache {
        static SHARED: OnceLock<ModuleCache> = OnceLock::new();
        SHARED.get_or_init(|| ModuleCache::new(SHARED_LIMIT))
    }

    fn files(&self) -> MutexGuard<'_, Files> {
        // A panic elsewhere while holding the lock leaves the map consistent (each change is one insert/remove).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`resolve::read_module`]: the module mapped as `map`, its file read from disk only the first time. A
    /// caller that finds the same file being read by another thread waits for that read rather than repeating
    /// it (it would take as long); the read itself holds no lock.
    pub fn read(&self, pid: Tid, map: &ModuleMap, mem: Option<&ProcMem>) -> Result<Module, crate::live::Error> {
        let key = FileKey::of(pid, map);
        loop {
            match self.claim(&key) {
                Claim::Cached(data) => {
                    if let Ok(module) = Module::parse(map.clone(), data)
                        && mem.is_none_or(|mem| resolve::notes_match(&module, mem))
                    {
                        return Ok(module);
                    }
                    // Rewritten in place since it was read: read it again.
                    self.forget(&key);
                }
                Claim::Read(reading) => {
                    let module = resolve::read_module_file(pid, map, mem)?;
                    reading.keep(module.data.clone());
                    return Ok(module);
                }
            }
        }
    }

    /// The cached file for `key`, or the right to read it (others asking meanwhile wait).
    fn claim(&self, key: &FileKey) -> Claim<'_> {
        let mut files = self.files();
        loop {
            files.tick += 1;
            let tick = files.tick;
            if let Some((data, used)) = files.by_map.get_mut(key) {
                *used = tick;
                return Claim::Cached(data.clone());
            }
            if !files.reading.contains(key) {
                files.reading.insert(key.clone());
                files.reads += 1;
                return Claim::Read(Reading { cache: self, key: key.clone() });
            }
            files = self.done.wait(files).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// How many times a module file was read from disk (a miss), for tests and measurements.
    pub fn file_reads(&self) -> u64 {
        self.files().reads
    }

    fn forget(&self, key: &FileKey) {
        let mut files = self.files();
        if let Some((data, _)) = files.by_map.remove(key) {
            files.bytes -= data.len();
        }
    }

    fn keep(&self, files: &mut Files, key: FileKey, data: Bytes) {
        if data.len() > self.limit {
            return;
        }
        files.tick += 1;
        let (len, tick) = (data.len(), files.tick);
        if let Some((old, _)) = files.by_map.insert(key, (data, tick)) {
            files.bytes -= old.len();
        }
        files.bytes += len;
        while files.bytes > self.limit {
            let Some(oldest) = files.by_map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) else {
                break;
            };
            if let Some((data, _)) = files.by_map.remove(&oldest) {
                files.bytes -= data.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::modules::group_modules;

    /// This test process's libc, as its maps show it.
    fn own_libc() -> (Tid, ModuleMap) {
        let pid = Tid::try_from(std::process::id()).expect("pid fits");
        let maps = resolve::read_maps(pid).expect("own maps");
        (pid, resolve::find_libc(&maps).expect("tests link libc dynamically"))
    }

    #[test]
    fn a_module_is_read_once_per_mapping() {
        let (pid, libc) = own_libc();
        let mem = ProcMem::open(pid).ok();
        let cache = ModuleCache::new(SHARED_LIMIT);
        let first = cache.read(pid, &libc, mem.as_ref()).expect("libc reads");
        let again = cache.read(pid, &libc, mem.as_ref()).expect("libc reads again");
        let unchecked = cache.read(pid, &libc, None).expect("libc reads without memory");
        assert_eq!(cache.file_reads(), 1, "one read for the same mapping");
        assert!(first.data.as_ptr() == again.data.as_ptr() && first.data.as_ptr() == unchecked.data.as_ptr());
        assert_eq!(first.build_id, again.build_id);
        assert_eq!(first.bias, again.bias);
    }

    #[test]
    fn threads_asking_at_once_share_one_read() {
        let (pid, libc) = own_libc();
        let cache = ModuleCache::new(SHARED_LIMIT);
        let ids: Vec<_> = std::thread::scope(|s| {
            let readers: Vec<_> = (0..4).map(|_| s.spawn(|| cache.read(pid, &libc, None).map(|m| m.data))).collect();
            readers.into_iter().map(|r| r.join().expect("no panic").expect("libc reads")).collect()
        });
        assert_eq!(cache.file_reads(), 1);
        assert!(ids.iter().all(|d| d.as_ptr() == ids[0].as_ptr()));
    }

    #[test]
    fn another_file_at_the_same_address_is_read_anew() {
        let (pid, libc) = own_libc();
        let cache = ModuleCache::new(SHARED_LIMIT);
        cache.read(pid, &libc, None).expect("libc reads");
        // What the maps would show after libc was unmapped and another file (another inode, or the same path
        // replaced) mapped at its address: never served from the entry of the first.
        let mut other = libc.clone();
        other.first.inode = other.first.inode.wrapping_add(1);
        cache.read(pid, &other, None).expect("reads");
        assert_eq!(cache.file_reads(), 2);
        let mut moved = libc.clone();
        moved.first.dev = "ff:ff".into();
        cache.read(pid, &moved, None).expect("reads");
        assert_eq!(cache.file_reads(), 3);
        cache.read(pid, &libc, None).expect("reads");
        assert_eq!(cache.file_reads(), 3, "the first mapping is still cached");
    }

    #[test]
    fn the_least_recently_used_file_goes_past_the_limit() {
        let (pid, libc) = own_libc();
        let maps = resolve::read_maps(pid).expect("own maps");
        let other = group_modules(&maps).into_iter().find(|m| m.path != libc.path).expect("a second module");
        let len = |m: &ModuleMap| std::fs::metadata(&m.path).map(|md| md.len() as usize).expect("file size");
        // Room for the larger of the two, not both.
        let cache = ModuleCache::new(len(&libc).max(len(&other)));
        cache.read(pid, &libc, None).expect("reads");
        cache.read(pid, &other, None).expect("reads");
        cache.read(pid, &other, None).expect("reads");
        assert_eq!(cache.file_reads(), 2);
        cache.read(pid, &libc, None).expect("reads");
        assert_eq!(cache.file_reads(), 3, "libc was dropped to make room");
    }
}
