//! Files read by mapping them read-only instead of copying them into memory: a module's bytes are used in
//! place (ELF headers, symbols, unwind tables, DWARF), and only the pages touched become resident. A file that
//! cannot be mapped (empty, or a file system without mmap) is read instead.
//!
//! The mapping is private and read-only. A file truncated while mapped would make a read past its new end fault
//! (SIGBUS); libraries are replaced by renaming a new file over the old one (the mapped inode lives on), never
//! truncated in place while processes run them, which is what every debugger mapping them (eu-stack, perf)
//! relies on too.

use crate::model::bytes::{Backing, Bytes};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// A read-only private mapping of a whole file.
struct Mapped {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only and never changed or unmapped while a `Mapped` lives; sharing its address
// between threads is as safe as sharing a `&[u8]`.
unsafe impl Send for Mapped {}
// SAFETY: as for Send: only shared reads of immutable memory.
unsafe impl Sync for Mapped {}

impl Backing for Mapped {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is a live PROT_READ mapping made in `read_file`, unmapped only in Drop.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn release(&self, range: std::ops::Range<usize>) {
        // Only the whole pages inside the range: its first and last pages may hold bytes still in use.
        let page = 4096;
        let start = range.start.div_ceil(page) * page;
        let end = (range.end.min(self.len) / page) * page;
        if start < end {
            // SAFETY: `start..end` lies inside this value's private read-only file mapping (page-aligned; `ptr`
            // is page-aligned as mmap returned it). Dropping its pages changes no byte a reader sees: they are
            // read again from the file on the next access. The result only tells whether the kernel took it.
            unsafe { libc::madvise(self.ptr.add(start) as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value owns; no slice of it outlives the value (Bytes keeps the
        // value alive while any reader holds a clone).
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

// SAFETY: a Bytes derefs through an Arc to a Backing whose slice never moves or changes (Box<[u8]>, Arc<[u8]>
// or a live mapping), so the address is stable when the Bytes moves, and clones deref to the same bytes.
unsafe impl stable_deref_trait::StableDeref for Bytes {}
// SAFETY: as above; a clone shares the same Arc and so the same slice.
unsafe impl stable_deref_trait::CloneStableDeref for Bytes {}

/// The whole file at `path`, mapped (or read, when it cannot be mapped).
pub fn read_file(path: impl AsRef<Path>) -> std::io::Result<Bytes> {
    let file = File::open(path.as_ref())?;
    let len = file.metadata()?.len();
    let Ok(len) = usize::try_from(len) else {
        return Err(std::io::Error::other("file too large to map"));
    };
    if len == 0 || !file.metadata()?.is_file() {
        return read_plain(file);
    }
    // SAFETY: a new private read-only mapping of an open file; the kernel picks the address. Its result is
    // checked before use.
    let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
    if ptr == libc::MAP_FAILED {
        return read_plain(file);
    }
    // A uprobe on this file (bpftrace, perf probe) is installed by the kernel into every mapping of it that could be
    // made executable, ours included: its int3 would be read as the file's byte, and syscatch would take a
    // uprobed `syscall()` for a clean one and plant its own int3 over the uprobe's (seen: no event at all while
    // bpftrace had a uprobe there). The uprobe's page is a private copy; dropping it gives the file's bytes back
    // (the kernel does not install the int3 again on the next fault, only on a new registration).
    // SAFETY: the whole of the mapping just made; dropping its pages changes no byte a reader sees but the
    // uprobes' int3s. The result only tells whether the kernel took it.
    unsafe { libc::madvise(ptr, len, libc::MADV_DONTNEED) };
    Ok(Bytes::new(Mapped { ptr: ptr as *const u8, len }))
}

fn read_plain(mut file: File) -> std::io::Result<Bytes> {
    use std::io::Read;
    let mut v = Vec::new();
    file.read_to_end(&mut v)?;
    Ok(v.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_a_file_and_reads_an_empty_one() {
        let exe = read_file("/proc/self/exe").unwrap();
        assert_eq!(&exe[..4], b"\x7fELF");
        assert_eq!(exe.len(), std::fs::metadata("/proc/self/exe").unwrap().len() as usize);
        let dir = std::env::temp_dir().join(format!("syscatch-filemap-{}", std::process::id()));
        std::fs::write(&dir, b"").unwrap();
        assert!(read_file(&dir).unwrap().is_empty());
        std::fs::remove_file(&dir).unwrap();
        assert!(read_file("/nonexistent/syscatch").is_err());
    }

    #[test]
    fn released_pages_read_back_the_same() {
        let exe = read_file("/proc/self/exe").unwrap();
        let copy = std::fs::read("/proc/self/exe").unwrap();
        assert!(exe.len() > 3 * 4096);
        exe.release(100..exe.len() - 100);
        exe.release(exe.len()..exe.len() + 10);
        assert!(*exe == copy[..]);
    }
}
