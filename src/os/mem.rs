//! Remote memory of a traced process: `/proc/PID/mem` kept open (writes reach read-only text, as POKEDATA does,
//! where process_vm_writev gets EFAULT), and process_vm_readv for one-shot bulk copies.

use super::Tid;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;

pub struct ProcMem {
    file: File,
    pid: Tid,
}

impl ProcMem {
    pub fn open(pid: Tid) -> io::Result<ProcMem> {
        let file = OpenOptions::new().read(true).write(true).open(format!("/proc/{pid}/mem"))?;
        Ok(ProcMem { file, pid })
    }

    /// An already open `/proc/PID/mem` (the guardian's, inherited from syscatch).
    pub fn from_file(file: File, pid: Tid) -> ProcMem {
        ProcMem { file, pid }
    }

    pub fn pid(&self) -> Tid {
        self.pid
    }

    /// Reads exactly `buf.len()` bytes at `addr`.
    pub fn read_exact(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, addr)
    }

    pub fn write_all(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, addr)
    }

    pub fn read_u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read_exact(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

impl AsRawFd for ProcMem {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Copies up to `len` bytes at `addr` of `pid` with one process_vm_readv; stops early at the first unmapped
/// page, so the result may be shorter (empty if `addr` itself is unmapped).
///
/// The buffer is not zeroed first: this runs while a thread of the target is held at every matching call, and
/// zeroing 64 KiB was the largest part of the tracer's time per `--fast` event (a profile: 29% in memset).
pub fn read_upto(pid: Tid, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    read_into(pid, addr, len, &mut buf);
    buf
}

/// Like [`read_upto`], into `buf` (emptied first; grown only if it has less than `len` bytes of room).
pub fn read_into(pid: Tid, addr: u64, len: usize, buf: &mut Vec<u8>) {
    buf.clear();
    buf.reserve(len);
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: len };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
    // SAFETY: `local` describes the first `len` bytes of `buf`'s capacity (reserved above), which lives until
    // after the call; the remote iovec is only an address in the other process and is never dereferenced here.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    let n = (n.max(0) as usize).min(len);
    // SAFETY: the kernel wrote the first `n` bytes (process_vm_readv returns how many it copied, at most `len`,
    // contiguously from the start of the one local iovec); nothing past them is exposed.
    unsafe { buf.set_len(n) };
}

/// Copies the remote `ranges` (address, length) into `buf`, one after the other, with one process_vm_readv per
/// 64 of them (the iovecs live on the stack: this runs at every Python event). Returns how many ranges, from the
/// first, were filled completely: the kernel stops at the first range it cannot read. Ranges that do not fit in
/// `buf` are not read.
pub fn read_ranges(pid: Tid, ranges: &[(u64, u64)], buf: &mut [u8]) -> usize {
    use std::mem::MaybeUninit;
    const BATCH: usize = 64;
    let mut done = 0;
    let mut rest = buf;
    for chunk in ranges.chunks(BATCH) {
        // Not initialised: only the first `n` entries are filled and passed (no 2 KiB of zeroes per call).
        let mut local = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
        let mut remote = [const { MaybeUninit::<libc::iovec>::uninit() }; BATCH];
        let mut n = 0;
        for &(addr, len) in chunk {
            let Some(len) = usize::try_from(len).ok().filter(|&l| l <= rest.len()) else { break };
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
            local[n].write(libc::iovec { iov_base: head.as_mut_ptr().cast(), iov_len: len });
            remote[n].write(libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len });
            rest = tail;
            n += 1;
        }
        if n == 0 {
            break;
        }
        // SAFETY: the first `n` entries of both arrays were written above (MaybeUninit<iovec> has iovec's layout)
        // and the kernel reads no more; the local iovecs describe disjoint parts of `buf`, borrowed mutably for
        // the whole call; the remote iovecs are addresses in the other process and are never dereferenced here.
        let got =
            unsafe { libc::process_vm_readv(pid, local.as_ptr().cast(), n as _, remote.as_ptr().cast(), n as _, 0) };
        let mut left = got.max(0) as usize;
        let mut full = 0;
        for &(_, len) in &chunk[..n] {
            let len = len as usize;
            if left < len {
                break;
            }
            left -= len;
            full += 1;
        }
        done += full;
        if full < chunk.len() {
            break;
        }
    }
    done
}

/// A shared mapping of the target's (MAP_SHARED | MAP_ANONYMOUS) mapped into syscatch as well, through
/// `/proc/PID/map_files` (which needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE): both see the same pages, so
/// syscatch reads them without a system call, and still after the target exited or replaced its program.
/// Addressed by the target's addresses.
pub struct SharedMap {
    ptr: *mut u8,
    len: usize,
    start: u64,
}

// SAFETY: the mapping lives until Drop and is only read and written through volatile copies of plain bytes; its
// address may move between threads like any pointer to shared memory.
unsafe impl Send for SharedMap {}

impl SharedMap {
    /// The target's mapping `start..start+len` of `pid`, mapped here.
    pub fn open(pid: Tid, start: u64, len: u64) -> io::Result<SharedMap> {
        let path = format!("/proc/{pid}/map_files/{start:x}-{:x}", start + len);
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let n = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a new shared read-write mapping of an open file; the kernel picks the address. Checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMap { ptr: ptr as *mut u8, len: n, start })
    }

    fn offset(&self, addr: u64, n: usize) -> Option<usize> {
        let off = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        (off.checked_add(n)? <= self.len).then_some(off)
    }

    /// Copies `buf.len()` bytes at the target's `addr`, in increasing address order, after every load before
    /// (an acquire fence: what the target stored before a value seen earlier is seen here).
    pub fn read_exact(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let off = self.offset(addr, buf.len()).ok_or(io::Error::from(io::ErrorKind::InvalidInput))?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: `off + i` is inside the live mapping (checked above); a volatile byte load of shared memory
            // that the target may be writing (any byte value is valid for u8).
            *b = unsafe { std::ptr::read_volatile(self.ptr.add(off + i)) };
        }
        Ok(())
    }

    /// Stores `data` at the target's `addr`, after every store before (a release fence).
    pub fn write_all(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        let off = self.offset(addr, data.len()).ok_or(io::Error::from(io::ErrorKind::InvalidInput))?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        for (i, &b) in data.iter().enumerate() {
            // SAFETY: as in read_exact, a volatile byte store inside the live read-write mapping.
            unsafe { std::ptr::write_volatile(self.ptr.add(off + i), b) };
        }
        Ok(())
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value owns; nothing refers to it past the value.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
