//! `/proc/PID/pagemap`: one 64-bit entry per virtual page. Present, swapped and exclusively-mapped bits are
//! readable by anyone who may ptrace the process; only the page frame numbers need CAP_SYS_ADMIN (not used).

use super::Tid;
use std::io;
use std::os::unix::fs::FileExt;

const PAGE: u64 = 4096;

/// An open pagemap.
pub struct Pagemap {
    file: std::fs::File,
}

impl Pagemap {
    pub fn open(pid: Tid) -> io::Result<Pagemap> {
        Ok(Pagemap { file: std::fs::File::open(format!("/proc/{pid}/pagemap"))? })
    }

    /// The raw entries of the pages of `[start, end)` (page-aligned), at most `max_pages` of them.
    pub fn read_entries(&self, start: u64, end: u64, max_pages: u64) -> io::Result<Vec<u64>> {
        let pages = (end.saturating_sub(start) / PAGE).min(max_pages);
        let mut buf = vec![0u8; (pages * 8) as usize];
        let offset = (start / PAGE).checked_mul(8).ok_or_else(|| io::Error::other("address too large"))?;
        let mut done = 0;
        while done < buf.len() {
            let n = self.file.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        buf.truncate(done - done % 8);
        Ok(buf.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
    }
}
