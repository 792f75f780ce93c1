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
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: len };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
    // SAFETY: `local` describes the `len` bytes of `buf`'s capacity, which lives until after the call; the remote
    // iovec is only an address in the other process and is never dereferenced here.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    let n = (n.max(0) as usize).min(len);
    // SAFETY: the kernel wrote the first `n` bytes (process_vm_readv returns how many it copied, at most `len`,
    // contiguously from the start of the one local iovec); nothing past them is exposed.
    unsafe { buf.set_len(n) };
    buf
}

/// Copies several remote ranges with one process_vm_readv per 1024 of them (IOV_MAX). Returns how many of
/// `reqs`, from the first, were filled completely: the kernel stops at the first range it cannot read.
pub fn read_vectored(pid: Tid, reqs: &mut [(u64, &mut [u8])]) -> usize {
    let mut done = 0;
    for chunk in reqs.chunks_mut(1024) {
        let local: Vec<libc::iovec> =
            chunk.iter_mut().map(|(_, b)| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
        let remote: Vec<libc::iovec> =
            chunk.iter().map(|(a, b)| libc::iovec { iov_base: *a as *mut libc::c_void, iov_len: b.len() }).collect();
        // SAFETY: each local iovec describes a distinct `&mut [u8]` borrowed for the whole call; the remote
        // iovecs are addresses in the other process and are never dereferenced here.
        let n = unsafe {
            libc::process_vm_readv(pid, local.as_ptr(), local.len() as _, remote.as_ptr(), remote.len() as _, 0)
        };
        let mut left = n.max(0) as usize;
        let mut full = 0;
        for (_, b) in chunk.iter() {
            if left < b.len() {
                break;
            }
            left -= b.len();
            full += 1;
        }
        done += full;
        if full < chunk.len() {
            break;
        }
    }
    done
}
